-- km.timing's protocol without a GPU: the key names every option that decides a timing,
-- equal options give equal keys, defaults match the stop rule's, and misuse raises before
-- any CUDA call (timing.time's own options are read by the same function).
local t = require "km.tap"
local timing = require "km.timing"

local DEFAULT = "km.timing/3 mode=cold rep=1 warmup=3,1ms stop=noise<=0.002,n=20..300,min_ms=0,max_ms=2000 "
  .. "flush=2xL2 energy=0 gate=1"

t.test("the default key, and the same key for the same options spelled out", function()
  t.eq(timing.protocol_key(), DEFAULT)
  t.eq(timing.protocol_key {}, DEFAULT)
  t.eq(timing.protocol_key { mode = "cold", rep = 1, warmup = 3, warmup_ms = 1, min_samples = 20, max_samples = 300,
    target = 0.002, min_ms = 0, max_ms = 2000 }, DEFAULT)
  -- what does not decide a timing is not in it: hooks, keeping the samples
  t.eq(timing.protocol_key { samples = true, before = function() end, after = function() end }, DEFAULT)
end)

t.test("every option that decides a timing changes the key", function()
  local seen = { [DEFAULT] = "default" }
  for _, o in ipairs {
    { mode = "warm" }, { mode = "graph" }, { rep = 4 }, { warmup = 10 }, { warmup_ms = 25 },
    { min_samples = 10 }, { max_samples = 100 }, { target = 0.005 }, { min_ms = 50 }, { max_ms = 600 },
    { flush_bytes = 1 << 27 }, { energy = true }, { gate = false },
  } do
    local k = timing.protocol_key(o)
    local name = next(o)
    t.ok(not seen[k], name .. ": " .. k .. " (same as " .. tostring(seen[k]) .. ")")
    seen[k] = name
  end
  -- warm and graph modes do not flush: the flush size is not theirs
  t.eq(timing.protocol_key { mode = "warm", flush_bytes = 1 << 27 }, timing.protocol_key { mode = "warm" })
end)

t.test("the protocol table carries the fields, the version and the key", function()
  local p = timing.protocol { mode = "warm", min_ms = 50, energy = true }
  t.eq(p.version, 3)
  t.eq(p.gate, true)
  t.eq(p.key, timing.protocol_key { mode = "warm", min_ms = 50, energy = true })
  t.eq(p.mode, "warm")
  t.eq(p.min_samples, 20)
  t.eq(p.max_samples, 300)
  t.eq(p.target, 0.002)
  t.eq(p.min_ms, 50)
  t.eq(p.max_ms, 2000)
  t.eq(p.energy, true)
  t.eq(p.flush_bytes, nil)
  t.eq(timing.protocol().flush_bytes, 0) -- 0: twice the device's L2
end)

t.test("misuse raises, in timing.time before any CUDA call too", function()
  t.raises(function() timing.protocol_key { mode = "hot" } end, "unknown mode 'hot'")
  t.raises(function() timing.protocol_key { min_samples = 30, max_samples = 20 } end, "min_samples <= max_samples")
  t.raises(function() timing.protocol_key { min_samples = 0 } end, "min_samples")
  t.raises(function() timing.protocol_key { max_ms = 0 } end, "max_ms > 0")
  t.raises(function() timing.protocol_key { target = -1 } end, "target >= 0")
  t.raises(function() timing.protocol_key { rep = 0 } end, "rep >= 1")
  t.raises(function() timing.protocol_key "cold" end, "table expected")
  t.raises(function() timing.time(function() end, { mode = "hot" }) end, "unknown mode 'hot'")
  t.raises(function() timing.time(function() end, { gc = "never" }) end, "option 'gc' must be \"defer\" or \"stop\"")
end)

-- Inside a timing (gc = "defer", the default) the collector runs but finalizers that may wait
-- for the device keep their objects until the run ends: every km class's (a km.Proc here:
-- its release kills and reaps the child), and those written in Lua through timing.finalize.
-- timing.gc_deferred runs a function under the same rule, no GPU needed.
local proc = require "km.proc"
local function proc_state(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return nil end
  local st = f:read("a")
  f:close()
  return st:match("%) (%a)")
end

t.test("finalizers deferred: a km object and timing.finalize's kept until the end, then released", function()
  local pid, finalized, released, inside = nil, 0, 0, nil
  local n = timing.gc_deferred(function()
    local p = assert(proc.spawn { "sleep", "30" })
    pid = p:pid()
    p = nil -- luacheck: ignore (dropped for the collector)
    for _ = 1, 3 do
      setmetatable({}, { __gc = function(o)
        finalized = finalized + 1
        timing.finalize(o, function() released = released + 1 end)
      end })
    end
    collectgarbage()
    collectgarbage()
    inside = { state = proc_state(pid), finalized = finalized, released = released }
  end)
  t.ok(inside.state and inside.state ~= "Z", "the child lives on inside: " .. tostring(inside.state))
  t.eq(inside.finalized, 3, "the Lua finalizers ran inside (the collector is not stopped)")
  t.eq(inside.released, 0, "but released nothing")
  t.eq(released, 3, "released at the end")
  t.eq(n, 4, "the proc and the three")
  t.eq(proc_state(pid), nil, "the child killed and reaped at the end")
  -- outside, both release at once
  local q = assert(proc.spawn { "sleep", "30" })
  local qpid = q:pid()
  q = nil -- luacheck: ignore
  collectgarbage()
  t.eq(proc_state(qpid), nil, "outside a timing the finalizer releases at once")
  local now = 0
  timing.finalize({}, function() now = now + 1 end)
  t.eq(now, 1, "timing.finalize outside a timing: at once")
end)

t.test("finalizers deferred: an error in fn still releases what was kept, and is raised", function()
  local released = 0
  t.raises(function()
    timing.gc_deferred(function()
      setmetatable({}, { __gc = function(o) timing.finalize(o, function() released = released + 1 end) end })
      collectgarbage()
      error("boom")
    end)
  end, "boom")
  t.eq(released, 1)
  t.raises(function() timing.finalize({}, 3) end, "function expected")
end)

-- The C API's km_time runs the same loop (km_timer_core.c) under the protocol its options
-- give: km_time_protocol_key, called as an embedding host calls it (LuaJIT's FFI, km.ffi),
-- names the same protocol km.timing does for equal options, with no GPU.
local testing = require "km.testing"
local BUILD, ROOT = testing.build_and_root()
local lib_built = select(2, testing.sh("test -f " .. BUILD .. "/lib/libkmrun.so")) == 0
local jit = testing.interpreter("luajit", BUILD)
if jit and lib_built then
  t.test("km_time_protocol_key (C API) gives km.timing's key for the same options", function()
    local host = [[
package.path = "ROOT/lua/?.lua;" .. package.path
local ffi = require "ffi"
local C = require("km.ffi").load("BUILD/lib/libkmrun.so")
local function key(mode, warmup, min_n, max_n, target, max_ms, cap)
  local o = ffi.new("km_time_opts")
  o.mode, o.warmup, o.min_samples, o.max_samples, o.target, o.max_ms = mode, warmup, min_n, max_n, target, max_ms
  local buf = ffi.new("char[256]")
  local st = C.km_time_protocol_key(o, buf, cap or 256)
  return st == 0 and ffi.string(buf) or ffi.string(C.km_status_name(st)) .. ": " .. ffi.string(C.km_errmsg())
end
local buf = ffi.new("char[256]")
assert(C.km_time_protocol_key(nil, buf, 256) == 0)
print(ffi.string(buf))
print(key(0, 0, 0, 0, 0, 0))
print(key(1, 7, 10, 50, 0.005, 600))
print(key(2, 0, 30, 10, 0, 0))
print(key(3, 0, 0, 0, 0, 0))
print(key(0, 0, 0, 0, 0, 0, 16))
local o = ffi.new("km_time_opts")
o.no_gate = 1
assert(C.km_time_protocol_key(o, buf, 256) == 0)
print(ffi.string(buf))
]]
    local dir = testing.tmpdir()
    testing.write(dir .. "/host.lua", (host:gsub("ROOT", ROOT):gsub("BUILD", BUILD)))
    local out, rc = testing.sh("cd / && " .. jit .. " " .. dir .. "/host.lua")
    testing.sh("rm -rf " .. dir)
    t.eq(rc, 0, out)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    t.eq(lines[1], DEFAULT, "NULL options")
    t.eq(lines[2], DEFAULT, "zeroed options")
    t.eq(lines[3], timing.protocol_key { mode = "warm", warmup = 7, min_samples = 10, max_samples = 50, target = 0.005,
      max_ms = 600 })
    -- km_time raises max_samples to min_samples where km.timing would refuse the pair
    t.eq(lines[4], timing.protocol_key { mode = "graph", min_samples = 30, max_samples = 30 })
    t.eq(lines[5], "KMRUN_EINVAL: km_time_protocol_key: unknown mode 3")
    t.ok(lines[6]:match("^KMRUN_EINVAL: km_time_protocol_key: the key needs %d+ bytes, buf has 16$"), lines[6])
    t.eq(lines[7], timing.protocol_key { gate = false }, "no_gate = 1")
  end)
else
  t.skip("km_time_protocol_key (C API) gives km.timing's key", not jit and "no luajit on this host" or "no build/lib/libkmrun.so")
end

-- The judge's own protocol: the gini rule (km.judge.checks) from 5 samples, the median to
-- 0.2% (or the interval rule's test), one warm-up call; a caller's target is kept, and changes the key (a cached baseline is
-- keyed by it); the interval rule keeps the key it had.
t.test("the judge's timings: n >= 5, the Gini error <= 0.2% or the interval test, its own key", function()
  local judge = require "km.judge"
  local k = timing.protocol_key(judge.time_opts {})
  t.ok(k:find("stop=gini<=0.002,n=5..300|noise<=0.005,n>=10,early=5,ci<=0.0025,median>=0.1ms,min_ms=", 1, true), k)
  -- one warm-up call and no least warm-up time (the kernel has just run in verify)
  t.ok(k:find(" warmup=1,0ms ", 1, true), k)
  t.ok(timing.protocol_key(judge.time_opts { warmup = 3, warmup_ms = 1 }):find(" warmup=3,1ms ", 1, true))
  t.eq(judge.time_opts({}).target, judge.TARGET)
  local k2 = timing.protocol_key(judge.time_opts { target = 0.0021 })
  t.ok(k2:find("stop=gini<=0.0021,n=5..300|", 1, true), k2)
  t.ok(k ~= k2)
  local k3 = timing.protocol_key(judge.time_opts(judge.STOP_RULES.interval))
  t.ok(k3:find("stop=noise<=0.005,n=10..300,early=5,ci<=0.0025,min_ms=", 1, true), k3)
  t.eq(timing.protocol { noise = "gini" }.noise, "gini")
  t.eq(timing.protocol().noise, "iqr")
end)

t.done()
