-- GPU: no host address reaches launch code or a model through a real kernel's launch
-- (issue 45, item 2). Launch code calls its kernel, k.set_shared and k.scratch (real
-- allocations) with tables, functions and userdata in every argument and configuration
-- field, catches every error and raises them all; the verdict's feedback (what a model
-- reads) and every caught text are scanned for an address. Its honest twin is correct.
-- tests/lua/test_no_addresses.lua covers the same on the CPU without kernels.
local t = require "km.tap"
t.require_gpu()
local testing = require "km.testing"

local ROOT = testing.paths()
local TASK = ROOT .. "/tasks/l1_relu"

local SRC = [[
extern "C" __global__ void relu(const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
]]
local HONEST = [[return function(k, io, s)
  k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
end]]
local PROBE = [[return function(k, io, s)
  local hostile = { {}, function() end, k, io, io.x }
  local caught = {}
  local function try(name, f, ...)
    local ok, e = pcall(f, ...)
    if not ok then caught[#caught + 1] = name .. ": " .. tostring(e) end
  end
  local good = { grid = 1, block = 32 }
  for hi, h in ipairs(hostile) do
    try("relu x" .. hi, function() k.relu(good)(h, io.y, 1) end)
    try("relu y" .. hi, function() k.relu(good)(io.x, h, 1) end)
    try("relu n" .. hi, function() k.relu(good)(io.x, io.y, h) end)
    try("relu extra" .. hi, function() k.relu(good)(io.x, io.y, 1, h) end)
    try("relu cfg" .. hi, function() k.relu(h)(io.x, io.y, 1) end)
    for _, field in ipairs { "grid", "block", "shared", "stream" } do
      try("relu " .. field .. hi, function()
        local cfg = { grid = 1, block = 32 }
        cfg[field] = h
        k.relu(cfg)(io.x, io.y, 1)
      end)
      try("relu " .. field .. "[1]" .. hi, function()
        local cfg = { grid = 1, block = 32 }
        cfg[field] = { h, 1, 1 }
        k.relu(cfg)(io.x, io.y, 1)
      end)
    end
    try("k[h]" .. hi, function() return k[h] end)
    try("set_shared name" .. hi, function() k.set_shared(h, 1024) end)
    try("set_shared bytes" .. hi, function() k.set_shared("relu", h) end)
    try("scratch dtype" .. hi, function() k.scratch(h, 16) end)
    try("scratch shape" .. hi, function() k.scratch("f32", h) end)
    try("scratch shape[1]" .. hi, function() k.scratch("f32", { h }) end)
    try("scratch opts" .. hi, function() k.scratch("f32", 16, h) end)
    try("io[h]" .. hi, function() return io[h] end)
    try("view method" .. hi, function() return io.x.shape(h) end)
    try("view numel" .. hi, function() return io.x.numel(h) end)
  end
  try("huge scratch", function() k.scratch("f32", 1 << 40) end)
  try("set_shared too much", function() k.set_shared("relu", 1 << 30) end)
  try("grid 0", function() k.relu{ grid = 0, block = 32 }(io.x, io.y, 1) end)
  try("block 4096", function() k.relu{ grid = 1, block = 4096 }(io.x, io.y, 1) end)
  for _, h in ipairs(hostile) do caught[#caught + 1] = "tostring: " .. tostring(h) end
  error(table.concat(caught, "\n"))
end]]

local function address_in(s)
  s = tostring(s)
  return s:match("0[xX]%x%x%x%x%x%x+") or s:match("%d%d%d%d%d%d%d%d%d%d%d%d+")
end

local judge = assert(require("km.judge").new())

t.test("every argument of a real kernel's launch, k.set_shared and k.scratch: no text names an address", function()
  local v = judge:eval(TASK, { name = "probe", source = SRC, launch = PROBE }, { seeds = 1, timing = false })
  t.eq(v.status, "launch_error", v.feedback)
  local n = 0
  for line in tostring(v.feedback):gmatch("[^\n]+") do
    n = n + 1
    local a = address_in(line)
    t.ok(not a, "no address: " .. line)
  end
  t.ok(n > 100, n .. " lines of feedback")
  t.ok(v.feedback:find("relu cfg1", 1, true), "the kernel's own configuration errors are there")
end)

t.test("the honest twin is correct", function()
  local v = judge:eval(TASK, { name = "honest", source = SRC, launch = HONEST }, { seeds = 1, timing = false })
  t.eq(v.status, "correct", v.feedback)
end)

t.done()
