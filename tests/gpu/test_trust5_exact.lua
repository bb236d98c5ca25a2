-- GPU: an honest exact kernel passes (issue 45, item 6). A problem file in KernelBench's form
-- computes y = sum(x + 16, dim 1) - 16 * dim: eager rounds every x + 16 to fp32 (ulp 2e-6)
-- and sums 1024 values near 16 in fp32 (a total near 16384, ulp 2e-3), so on rows whose exact
-- y is small eager's own error exceeds atol + rtol * |y| (1e-4 + 1e-4 * |y|). A kernel that
-- sums x in float64 — more exact than eager — misses eager on those rows; the judge then asks
-- the model run in float64 on the same inputs (kb_bridge forward_exact) and the kernel is
-- correct, in verify and on every timed call, the verdict counting the compares so decided
-- (exact_reference). A kernel that is wrong (row 0 off by 1) is still a mismatch: the float64
-- run is a second opinion on eager's rounding, not a wider tolerance; it is not asked where an
-- output element was never written.
local t = require "km.tap"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true })
local task = require "km.task"
local counting_launch = dofile(((arg and arg[0] or ""):match("^(.*)/[^/]*$") or ".") .. "/counting_launch.lua")

local DIR = testing.tmpdir()
local PROB = testing.problem(DIR, "offset_sum", { init = false, forward = "x",
  returns = "(x + 16.0).sum(dim=1, keepdim=True) - 16.0 * x.shape[1]",
  sizes = "batch_size = 1024\ndim = 1024", inputs = "torch.randn(batch_size, dim)" })

local SOURCE = [[
extern "C" __global__ void rows(const float *x, float *y, int b, int k, float off) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= b) return;
  double s = 0.0;
  for (int q = 0; q < k; q++) s += (double)x[(size_t)r * k + q];
  y[r] = (float)s + (r == 0 ? off : 0.f);
}
]]
local function launch(off)
  return ([[return function(k, io, s)
  local b, kk = io.x:shape()[1], io.x:shape()[2]
  k.rows{ grid = k.cdiv(b, 128), block = 128 }(io.x, io.out, b, kk, %s)
end]]):format(off)
end
local EXACT = { name = "float64 sums", source = SOURCE, launch = launch("0.0") }
local WRONG = { name = "float64 sums, row 0 off by 1", source = SOURCE, launch = launch("1.0") }

local judge = assert(require("km.judge").new())
local lt = assert(task.load(PROB))

t.test("the exact kernel is correct, verified and timed; float64 decided where eager's own error was over", function()
  local v = judge:eval(lt, EXACT, { seeds = 3, timing = true })
  t.eq(v.status, "correct", v.feedback)
  t.ok((v.exact_reference or 0) >= 1, "compares decided by the float64 run: " .. tostring(v.exact_reference))
  local rows = 0
  for _, c in ipairs(v.checks or {}) do if c.reference == "pytorch_float64" then rows = rows + 1 end end
  t.ok(rows >= 1, "check rows against pytorch_float64: " .. rows)
  t.note(("float64 decided %d compares (%d of verify's %d check rows)"):format(v.exact_reference or 0, rows, #(v.checks or {})))
end)

t.test("a wrong kernel is still a mismatch (the float64 run does not widen the tolerance)", function()
  local v = judge:eval(lt, WRONG, { seeds = 3, timing = false })
  t.eq(v.status, "mismatch", v.feedback)
end)

-- A kernel that leaves row 0 unwritten: a mismatch, and the float64 run is not asked (no
-- reference passes an element never written); the wrong kernel above asks it (counted here
-- through the task's loaded model).
local UNWRITTEN = { name = "float64 sums, row 0 unwritten", source = SOURCE:gsub("if %(r >= b%) return;", "if (r >= b || r == 0) return;"),
  launch = launch("0.0") }
t.test("an output element never written is a mismatch without the float64 run", function()
  local st = judge.tasks[lt.dir]
  t.ok(st and st.prob, "the task is loaded")
  local calls, orig = 0, st.prob.forward_exact
  st.prob.forward_exact = function(...) calls = calls + 1 return orig(...) end
  local v = judge:eval(lt, UNWRITTEN, { seeds = 3, timing = false })
  t.eq(v.status, "mismatch", v.feedback)
  t.ok(tostring(v.feedback):find("never written", 1, true), v.feedback)
  t.eq(calls, 0, "float64 runs for an unwritten output")
  v = judge:eval(lt, WRONG, { seeds = 3, timing = false })
  t.eq(v.status, "mismatch", v.feedback)
  t.ok(calls >= 1, "float64 runs for a wrong value: " .. calls)
  st.prob.forward_exact = nil
end)

-- The same on a timed call: every call verify makes writes row 0, the timed calls leave it
-- unwritten; the timed check's mismatch asks no float64 run either. Only float64 runs made
-- while the candidate is timed are counted: in verify this kernel is the exact one above,
-- whose compares against eager the float64 run may decide (test 1).
t.test("an output element never written on a timed call is a mismatch without the float64 run", function()
  local opts = { seeds = 3, timing = true }
  local late = { name = "float64 sums, row 0 unwritten once timed", source = SOURCE:gsub("if %(r >= b%) return;", "if (r >= b || (r == 0 && off < 0.f)) return;"),
    launch = counting_launch(lt, opts, [[
  local b, kk = io.x:shape()[1], io.x:shape()[2]
  k.rows{ grid = k.cdiv(b, 128), block = 128 }(io.x, io.out, b, kk, timed > 0 and -1.0 or 0.0)]]) }
  local st = judge.tasks[lt.dir]
  local calls, timings, timing_now, orig = 0, 0, false, st.prob.forward_exact
  st.prob.forward_exact = function(...) if timing_now then calls = calls + 1 end return orig(...) end
  judge.time_run = function(self, st_, run, sym, o, check) -- check: the candidate's timing
    timing_now, timings = check == true, timings + (check == true and 1 or 0)
    local r = table.pack(getmetatable(self).__index.time_run(self, st_, run, sym, o, check))
    timing_now = false
    return table.unpack(r, 1, r.n)
  end
  local v = judge:eval(lt, late, opts)
  st.prob.forward_exact, judge.time_run = nil, nil
  t.eq(v.status, "mismatch", v.feedback)
  t.ok(tostring(v.feedback):find("never written", 1, true) and tostring(v.feedback):find("timed", 1, true), v.feedback)
  t.ok(timings >= 1, "the candidate was timed: " .. timings)
  t.eq(calls, 0, "float64 runs while timing, for an output unwritten on a timed call")
end)

t.done()
