-- The two timing bindings over one core, on a machine without a GPU: against the stand-in
-- libcuda (tests/c/fake_libcuda.c, FAKE_CUDA_MODE=ok: a context, nothing runs), km.timing and
-- the C API's km_time (through LuaJIT's FFI, as an embedding host calls it) turn each kind of
-- stop of the timing loop into their own answer: a device failure with what was being done,
-- the work's or a hook's failure as it was given, an error raised by fn or a hook raised again.
-- The loop itself is tests/c/test_timer.c's; timing that runs is the GPU tests'.
local t = require "km.tap"
local testing = require "km.testing"

local BUILD, ROOT = testing.build_and_root()
local FAKE = BUILD .. "/tests/fake_libcuda.so"
if select(2, testing.sh("test -f " .. FAKE)) ~= 0 then t.skip_all("no " .. FAKE .. " (make test builds it)") end
local ENV = "KM_LIBCUDA=" .. FAKE .. " FAKE_CUDA_MODE=ok "

-- Runs a script with the fake driver (kmrun, or another interpreter); -> its output lines.
local function run(interp, script)
  local dir = testing.tmpdir()
  testing.write(dir .. "/s.lua", script)
  local out, rc = testing.sh("cd / && " .. ENV .. interp .. " " .. dir .. "/s.lua")
  testing.sh("rm -rf " .. dir)
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  return lines, rc, out
end

t.test("km.timing: device failures say what was being done; fn's and hooks' failures and errors come back as given", function()
  local lines, rc, out = run(BUILD .. "/kmrun", [[
local timing = require "km.timing"
local function show(...) local v = table.pack(...) print(tostring(v[1]) .. "|" .. tostring(v[2]) .. "|" .. tostring(v[3])) end
local nop = function() end
show(timing.time(nop, { mode = "warm" }))
show(timing.time(nop, { mode = "graph" }))
show(timing.time(nop))
local phases = {}
show(timing.time(nop, { mode = "warm", before = function(ph) phases[#phases + 1] = ph return nil, "hook says no", "HOOK" end }))
print(table.concat(phases, ","))
show(timing.time(function() return nil, "fn failed", "FN" end, { mode = "warm" }))
show(pcall(timing.time, function() error("boom", 0) end, { mode = "warm" }))
show(pcall(timing.time, nop, { mode = "warm", after = function() error({ why = "a table" }) end }))
show(pcall(timing.time, nop, { before = 5 }))
show(timing.sm_clock() ~= timing.sm_clock())
show(timing.peaks())
collectgarbage()
show(timing.time(nop, { mode = "warm" }))
]])
  t.eq(rc, 0, out)
  t.eq(lines[1], "nil|CUDA_ERROR_UNKNOWN: warmup: fake|CUDA_ERROR_UNKNOWN")
  t.eq(lines[2], "nil|CUDA_ERROR_UNKNOWN: creating a capture stream: fake|CUDA_ERROR_UNKNOWN")
  t.eq(lines[3], "nil|CUDA_ERROR_UNKNOWN: loading kmrun's L2 flush kernel: fake|CUDA_ERROR_UNKNOWN")
  t.eq(lines[4], "nil|hook says no|HOOK")
  t.eq(lines[5], "warmup")
  t.eq(lines[6], "nil|fn failed|FN")
  t.eq(lines[7], "false|boom|nil")
  t.ok(lines[8] and lines[8]:match("^false|table: "), lines[8]) -- the error object itself
  t.ok(lines[9] and lines[9]:find("option 'before' must be a function", 1, true), lines[9])
  t.eq(lines[10], "true|nil|nil") -- NaN: no probe kernel to run
  t.eq(lines[11], "nil|CUDA_ERROR_UNKNOWN: peaks: loading kmrun's kernels: fake|CUDA_ERROR_UNKNOWN")
  t.eq(lines[12], lines[1], "the same after errors unwound through the loop")
end)

t.test("km.timing: the gate's page is checked without a GPU (nothing to find before a gate); its test hook says why there is none", function()
  local lines, rc, out = run(BUILD .. "/kmrun", [[
local timing = require "km.timing"
print(timing.gate_check(), timing.gate_check())
local a, msg, code = timing.gate_page_address()
print(tostring(a) .. "|" .. tostring(msg) .. "|" .. tostring(code))
local nop = function() end
print(select(3, timing.time(nop, { mode = "warm" })))
print(timing.gate_check())
]])
  t.eq(rc, 0, out)
  t.eq(lines[1], "0\t0")
  t.eq(lines[2], "nil|CUDA_ERROR_UNKNOWN: making the gate's page: fake|CUDA_ERROR_UNKNOWN")
  t.eq(lines[3], "CUDA_ERROR_UNKNOWN") -- a device failure, not GATE_TAMPERED
  t.eq(lines[4], "0")
end)

local jit = testing.interpreter("luajit", BUILD)
if not jit or select(2, testing.sh("test -f " .. BUILD .. "/lib/libkmrun.so")) ~= 0 then
  t.skip("km_time (C API)", "no luajit on this host, or no libkmrun.so")
else
  t.test("km_time (C API): the same failures as km_status and km_errmsg; the work's own status comes back", function()
    local lines, rc, out = run(jit, ([[
package.path = "ROOT/lua/?.lua;" .. package.path
local ffi = require "ffi"
local kf = require "km.ffi"
local C = kf.load("BUILD/lib/libkmrun.so")
local rt = assert(kf.open())
local calls = 0
local ok_fn = ffi.cast("km_work_fn", function() calls = calls + 1 return 0 end)
local bad_fn = ffi.cast("km_work_fn", function() calls = calls + 1 return C.KMRUN_ENOTFOUND end)
local function time(fn, mode)
  calls = 0
  local o = ffi.new("km_time_opts")
  o.mode = mode
  local st = C.km_time(rt.h, fn, nil, o, ffi.new("km_time_result"))
  print(ffi.string(C.km_status_name(st)) .. "|" .. (st == C.KMRUN_ENOTFOUND and "" or ffi.string(C.km_errmsg())) .. "|" .. calls)
end
time(ok_fn, C.KM_TIME_WARM)
time(bad_fn, C.KM_TIME_WARM)
time(ok_fn, C.KM_TIME_GRAPH)
time(bad_fn, C.KM_TIME_GRAPH)
time(ok_fn, C.KM_TIME_COLD)
time(ok_fn, 5)
time(nil, C.KM_TIME_WARM)
]]):gsub("ROOT", ROOT):gsub("BUILD", BUILD))
    t.eq(rc, 0, out)
    -- warm: three warm-up calls, then the stream's synchronize fails
    t.eq(lines[1], "KMRUN_ECUDA|CUDA_ERROR_UNKNOWN: warmup: fake|3")
    t.eq(lines[2], "KMRUN_ENOTFOUND||1")
    t.eq(lines[3], "KMRUN_ECUDA|CUDA_ERROR_UNKNOWN: creating a capture stream: fake|0")
    t.eq(lines[4], lines[3])
    t.eq(lines[5], "KMRUN_ECUDA|CUDA_ERROR_UNKNOWN: loading kmrun's L2 flush kernel: fake|0")
    t.eq(lines[6], "KMRUN_EINVAL|km_time: unknown mode 5|0")
    t.eq(lines[7], "KMRUN_EINVAL|km_time: fn and out are required|0")
  end)
end

t.done()
