-- No host address reaches launch code, a task file's author or a model (docs/security.md):
-- launch code calls every function it is offered (the `k` helpers, io's views, the
-- sandbox's libraries) with tables, functions and userdata in every argument position and
-- keeps every error text it catches; those texts, what it raises (error({}) and its kin),
-- the message the judge returns and the feedback a model reads are scanned for anything
-- that looks like an address. Task and params errors are scanned the same way. CPU only:
-- the kernels' own launches are tests/gpu/test_trust5_addresses.lua's.
local t = require "km.tap"
local sandbox = require "km.sandbox"
local launch = require "km.judge.launch"
local feedback = require "km.feedback"
local task_mod = require "km.task"
local testing = require "km.testing"

-- "0x" and 6 hex digits or more, or a decimal of 12 digits or more (a pointer as an integer)
local function address_in(s)
  s = tostring(s)
  return s:match("0[xX]%x%x%x%x%x%x+") or s:match("%d%d%d%d%d%d%d%d%d%d%d%d+")
end

local function clean(s, what)
  local a = address_in(s)
  t.ok(not a, what .. ": no address (found " .. tostring(a) .. " in: " .. tostring(s):sub(1, 300) .. ")")
end

-- A launch prepared as the judge prepares one, on the CPU: the sandboxed function, a fresh
-- scratch state and the real `k` table over a module that has no kernels (its get answers
-- nil, why, as km.cuda's does for a missing name).
local function cpu_run(src)
  local fn, err = sandbox.load(src, "launch.lua")
  assert(fn, err)
  local state = { scratch = {}, scratch_i = 0, scratch_bytes = 0, scratch_peak = 0, poison = true, launches = {},
    scratch_limit = 1 << 20 }
  local mod = { get = function(_, name) return nil, "no kernel named '" .. sandbox.text(name) .. "'" end }
  local judge = { opts = {}, device = { sm_count = 132, arch = "sm_90", l2_size = 1 << 25, warp_size = 32 } }
  return judge, { fn = fn, state = state, label = "kernel", attrs = {}, task_outputs = {},
    k = launch.make_k(judge, mod, { BLOCK = 256 }, state) }
end

-- Launch code that calls every function it can reach with each hostile value in each of
-- three argument positions (the others 1), and raises everything it caught, one per line.
local PROBE = [[
return function(k, io, s)
  local hostile = { {}, function() end, k, io, s.u }
  local caught = {}
  local function try(name, f, ...)
    local ok, e = pcall(f, ...)
    if not ok then caught[#caught + 1] = name .. ": " .. tostring(e) end
  end
  local fns = {}
  for name, f in pairs(_G) do if type(f) == "function" then fns[name] = f end end
  for _, lib in ipairs { "string", "table", "math", "utf8" } do
    for name, f in pairs(_G[lib]) do if type(f) == "function" then fns[lib .. "." .. name] = f end end
  end
  fns["k.scratch"], fns["k.set_shared"], fns["k.cdiv"] = k.scratch, k.set_shared, k.cdiv
  fns["k[x]"] = function(x) return k[x] end
  fns["k.nokernel"] = function(x) return k.nokernel(x) end
  fns["io[x]"] = function(x) return io[x] end
  fns["io.nobuffer"] = function(x) return io.nobuffer end
  fns["string.format %d"] = function(x) return string.format("%d", x) end
  fns["string.format %q"] = function(x) return string.format("%q", x) end
  fns["string.format %s"] = function(x) return string.format("%s %s", x, x) end
  fns["concat"] = function(x) return "a" .. x end
  fns["arith"] = function(x) return x + 1 end
  fns["compare"] = function(x) return x < 1 end
  fns["call"] = function(x) return x() end
  for name, f in pairs(fns) do
    if name ~= "error" then
      for _, h in ipairs(hostile) do
        try(name .. "#1", f, h, 1, 1)
        try(name .. "#2", f, 1, h, 1)
        try(name .. "#3", f, 1, 1, h)
      end
    end
  end
  for _, h in ipairs(hostile) do caught[#caught + 1] = "tostring: " .. tostring(h) end
  error(table.concat(caught, "\n"))
end
]]

t.test("every function launch code is offered, with hostile arguments: no error text names an address", function()
  local judge, run = cpu_run(PROBE)
  local ok, status, text = launch.call_launch(judge, run, {}, { n = 4, u = io.stdout }, 1e8)
  t.eq(ok, false)
  t.eq(status, "launch_error")
  local lines = 0
  for line in tostring(text):gmatch("[^\n]+") do
    lines = lines + 1
    clean(line, "caught")
  end
  t.ok(lines > 500, lines .. " error texts caught (every function, 3 positions, 5 values)")
  t.ok(text:find("k.scratch#1: k.scratch(table)", 1, true), "k.scratch names a table dtype by its type")
  t.ok(text:find("k.set_shared#1: k.set_shared: no kernel named 'function'", 1, true), "k.set_shared")
  t.ok(text:find("io.table: the task has no buffer named 'table'", 1, true), "io's views")
  t.ok(text:find("tostring: file", 1, true), "a userdata's own text, its address taken out")
  clean(feedback.launch(status, text, "shape 1 {n=4}, seed 1"), "the feedback")
end)

t.test("error objects launch code raises come back as their type's name", function()
  for _, body in ipairs { "error({})", "error(function() end)", "error(k)", "error(io)", "error(s.u)",
    "error(setmetatable)", "error(nil)", "error(pcall)", "local t = {} ; error(t, 2)", "assert(false, {})",
    "error('at ' .. tostring(k))", "error(string.format('%s', io))" } do
    local judge, run = cpu_run("return function(k, io, s) " .. body .. " end")
    local ok, status, text = launch.call_launch(judge, run, {}, { u = io.stdout }, 1e6)
    t.eq(ok, false, body)
    t.eq(status, "launch_error", body)
    clean(text, body)
    clean(feedback.launch(status, text, "shape 1, seed 1"), body .. " (feedback)")
  end
  local judge, run = cpu_run("return function(k, io, s) error({}) end")
  local _, _, text = launch.call_launch(judge, run, {}, {}, 1e6)
  t.eq(text, "(error object is a table value)")
end)

t.test("a message with an address in it leaves the sandbox without it", function()
  local fn = sandbox.load("return function(k) error('at 0x55d0c0ffee12 and 140737488355328, ok 0x1f 12345') end")
  local ok, msg = sandbox.call(fn, { budget = 1e6 })
  t.eq(ok, false)
  t.ok(msg:find("at 0x... and ..., ok 0x1f 12345", 1, true), msg)
  t.eq(sandbox.no_addresses("table: 0x5581a0b2c3d0"), "table: 0x...")
  t.eq(sandbox.text({}), "table")
end)

-- A task folder's task.lua and a candidate's params.lua are hostile input too (their errors
-- reach whoever runs kmrun, and a params error reaches the model).
t.test("task and params errors name a table by its type", function()
  local root = testing.tmpdir()
  local d = root .. "/badtask"
  os.execute("mkdir -p " .. d)
  local function task_file(body)
    local f = assert(io.open(d .. "/task.lua", "w"))
    f:write(body)
    f:close()
  end
  local base = [[return { name = "badtask", level = 1, category = "x", description = "d", math = "y = x",
    reference = { source = "r.cu", launch = "r.lua" },
    inputs = { { name = "x", dtype = %s, shape = { "n" }, init = { "uniform", -1, 1 } } },
    outputs = { { name = "y", dtype = "f32", shape = { %s } } },
    shapes = { { n = %s } }, tolerance = { f32 = { atol = 0, rtol = 0 } } }]]
  for _, args in ipairs { { "{}", '"n"', "4" }, { '"f32"', "{}", "4" }, { '"f32"', '"n"', "{}" },
    { '"f32"', '"n"', "print" }, { "error({})", '"n"', "4" }, { '"f32"', '"n"', "setmetatable" } } do
    task_file(string.format(base, args[1], args[2], args[3]))
    local loaded, err = task_mod.load(d)
    t.eq(loaded, nil, table.concat(args, ", "))
    clean(err, "task.lua with " .. table.concat(args, ", "))
  end
  local okp, why = task_mod.params_ok({ starter = { params = { BLOCK = { 128, 256 } } } }, { BLOCK = {} })
  t.eq(okp, false)
  t.eq(why, "BLOCK=table is not in BLOCK's value set")
  os.execute("rm -rf " .. root)
end)

t.done()
