-- GPU: every timed call launches the same work (km.judge.same_work; docs/security.md, "The
-- same work on every timed call"). The attack: launch code that counts its calls and, on the
-- 3rd timed call, launches its grid-stride kernel with a quarter of the grid (the output is
-- still right: only the work differs), or launches one kernel more; both are varying_work.
-- The honest twin launches the same grid every call and is correct, its launch list, the
-- median's interval, the calls its timing took and the GPU's clock state in the verdict.
local t = require "km.tap"
t.require_gpu()
local judge_mod = require "km.judge"
local task = require "km.task"
local testing = require "km.testing"

local ROOT = testing.paths()
local RELU = assert(task.load(ROOT .. "/tasks/l1_relu"))
local SRC = [[
extern "C" __global__ void relu(const float *x, float *y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = fmaxf(x[i], 0.f);
}
extern "C" __global__ void nothing() {}]]
local OPTS = { seeds = 1, energy = false }
-- verify: one call per shape (seeds = 1, the timed shape last) and the precision trial at the
-- timed shape (just before its last trial); then the timed calls. `timed` is 0 in verify, then
-- 1, 2, ... (verify's last call is the timing's warm-up: the timing makes none of its own).
local VERIFY_CALLS = require("km.judge.verify").trial_count(RELU, OPTS)
local function launch(body)
  return ([[local calls = 0
return function(k, io, s)
  calls = calls + 1
  local timed = calls > %d and calls - %d or 0
  local grid = math.min(k.cdiv(s.n, 256), 4 * k.device.sm_count)
%s
end]]):format(VERIFY_CALLS, VERIFY_CALLS, body)
end
local j = assert(judge_mod.new())

t.test("the honest twin: the same grid on every call is correct, and the verdict says what was launched", function()
  local v = j:eval(RELU, { name = "honest", source = SRC, launch = launch([[
  k.relu{ grid = grid, block = 256 }(io.x, io.y, s.n)]]) }, OPTS)
  t.eq(v.status, "correct", v.feedback)
  local c = v.timing.candidate
  t.ok(c.launches:find("^relu grid=%(%d+,1,1%) block=%(256,1,1%) shared=0$"), c.launches)
  t.ok(c.n >= 5 and c.calls >= c.n, ("n %d, calls %d"):format(c.n, c.calls))
  t.ok(c.ci_low < c.median and c.median < c.ci_high, ("%s .. %s"):format(c.ci_low, c.ci_high))
  t.ok(c.stop_target and c.stop_target <= 0.005, tostring(c.stop_target))
  t.ok(type(c.gpu_clocks) == "table", "clock state recorded")
  if c.gpu_clocks.sm_mhz then
    t.ok(c.gpu_clocks.sm_mhz > 0 and c.gpu_clocks.mem_mhz > 0, ("SM %s MHz, memory %s MHz"):format(c.gpu_clocks.sm_mhz, c.gpu_clocks.mem_mhz))
    t.diag(("clocks: SM %d MHz, memory %d MHz, reasons: %s"):format(c.gpu_clocks.sm_mhz, c.gpu_clocks.mem_mhz,
      table.concat(c.gpu_clocks.reasons or {}, ",")))
  else
    t.diag("no clock state: " .. tostring(c.gpu_clocks.unavailable))
  end
end)

t.test("a quarter of the grid on the 3rd timed call (the output still right) is varying_work", function()
  local v = j:eval(RELU, { name = "smaller grid once", source = SRC, launch = launch([[
  if timed == 3 then grid = math.max(1, grid // 4) end
  k.relu{ grid = grid, block = 256 }(io.x, io.y, s.n)]]) }, OPTS)
  t.eq(v.status, "varying_work", v.feedback)
  t.ok(v.feedback:find("timed call 3", 1, true) and v.feedback:find("launch 1 was relu grid=", 1, true), v.feedback)
end)

t.test("one kernel more on the 3rd timed call is varying_work", function()
  local v = j:eval(RELU, { name = "extra kernel once", source = SRC, launch = launch([[
  k.relu{ grid = grid, block = 256 }(io.x, io.y, s.n)
  if timed == 3 then k.nothing{ grid = 1, block = 32 }() end]]) }, OPTS)
  t.eq(v.status, "varying_work", v.feedback)
  t.ok(v.feedback:find("extra: nothing grid=(1,1,1) block=(32,1,1)", 1, true), v.feedback)
end)

t.test("launch code that differs in verify's last call from the timed ones is varying_work at the first", function()
  local v = j:eval(RELU, { name = "other block in verify", source = SRC, launch = launch([[
  k.relu{ grid = grid, block = timed > 0 and 128 or 256 }(io.x, io.y, s.n)]]) }, OPTS)
  t.eq(v.status, "varying_work", v.feedback)
  t.ok(v.feedback:find("timed call 1", 1, true), v.feedback)
end)

t.done()
