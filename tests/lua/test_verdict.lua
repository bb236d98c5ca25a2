-- km.verdict and km.feedback: one status set, one "worker lost" rule, codes not text.
local t = require "km.tap"
local verdict = require "km.verdict"
local feedback = require "km.feedback"

t.test("the fixed status set, and nothing else can be finished", function()
  for _, s in ipairs { "compile_error", "launch_error", "race", "too_fast", "correct" } do t.ok(verdict.known(s), s) end
  t.ok(verdict.known("error"))
  t.ok(not verdict.known("fine"))
  t.raises(function() verdict.finish(verdict.new(), "fine", "x") end, "unknown status")
  local v = verdict.finish(verdict.new { task = "a" }, "mismatch", "text", { failed_at = { shape = 2 } })
  t.eq(v.status, "mismatch"); t.eq(v.task, "a"); t.eq(v.failed_at.shape, 2); t.eq(#v.checks, 0)
end)

t.test("fatal CUDA errors are decided by code, never by message text", function()
  t.eq(verdict.launch_status("CUDA_ERROR_ILLEGAL_ADDRESS"), "crashed")
  t.eq(verdict.launch_status("CUDA_ERROR_INVALID_VALUE"), "launch_error")
  t.eq(verdict.launch_status(nil), "launch_error")
  -- a message that merely mentions a fatal error is not one
  t.eq(verdict.launch_status("error: CUDA_ERROR_ILLEGAL_ADDRESS (said the launch code)"), "launch_error")
end)

t.test("a worker lost: timeout and death", function()
  local job = { task_name = "l1_relu", cand = { name = "c" } }
  local v = verdict.lost(job, "timeout", 15)
  t.eq(v.status, "timeout"); t.ok(v.feedback:find("15 s", 1, true)); t.eq(v.candidate, "c")
  v = verdict.lost(job, "dead", 15, { signal = 9 })
  t.eq(v.status, "crashed"); t.ok(v.feedback:find("signal 9", 1, true))
  v = verdict.lost(job, "dead", 15, nil)
  t.eq(v.status, "crashed")
  -- exit 124: km.python's watchdog stopped a PyTorch call that never returned
  v = verdict.lost(job, "dead", 15, { code = 124 })
  t.eq(v.status, "timeout"); t.ok(v.feedback:find("PyTorch call did not return", 1, true), v.feedback)
end)

t.test("a dead context turns a claimed success into crashed, keeps a candidate's own failure", function()
  local v = verdict.after_context_check({ status = "correct" }, false, "CUDA_ERROR_LAUNCH_FAILED: x", "CUDA_ERROR_LAUNCH_FAILED")
  t.eq(v.status, "crashed"); t.eq(v.context_lost, true); t.eq(v.context_error, "CUDA_ERROR_LAUNCH_FAILED")
  v = verdict.after_context_check({ status = "out_of_bounds", feedback = "f" }, false, "m", "CUDA_ERROR_UNKNOWN")
  t.eq(v.status, "out_of_bounds"); t.eq(v.context_lost, true)
  v = verdict.after_context_check({ status = "correct" }, true)
  t.eq(v.status, "correct"); t.eq(v.context_lost, nil)
end)

t.test("feedback: compile lines, mismatch kinds and the timed-call hint", function()
  local text = feedback.compile("kernel.cu(2): error: expected a ;", "a\nb\nc", "kernel.cu")
  t.ok(text:find("kernel.cu line 1: a", 1, true) and text:find("kernel.cu line 2: b", 1, true), text)
  local r = { ok = false, n = 10, mismatches = 2, nan = 0, inf = 0, unwritten = 0, max_abs = 1, max_rel = 1,
    examples = { { index = 5, got = 1, want = 2 } } }
  local s, m = feedback.mismatch("y", r, { atol = 0, rtol = 0 }, { 2, 5 }, "shape 1", "timed")
  t.eq(s, "mismatch")
  t.ok(m:find("y[1, 0]", 1, true), m)
  t.ok(m:find("timed run", 1, true), m)
  r.nan, r.mismatches = 2, 2
  t.eq((feedback.mismatch("y", r, { atol = 0, rtol = 0 }, { 10 }, "x")), "nan_inf")
  r.unwritten = 3
  s, m = feedback.mismatch("y", r, { atol = 0, rtol = 0 }, { 10 }, "x")
  t.eq(s, "mismatch"); t.ok(m:find("never written", 1, true))
end)

t.test("speedups: over eager wherever there is a PyTorch model, the others beside it", function()
  local speedups = require("km.judge").speedups
  local cand = { median = 2 }
  -- our task: CUDA reference, eager and compile measured
  local v = speedups({}, cand, { cuda_reference = { median = 8 }, starter = { median = 3 },
    baselines = { eager = { median = 1 }, compile = { median = 0.5, mode = "default" }, errors = {} } })
  t.eq(v.speedup_over, "pytorch_eager")
  t.eq(v.speedup, 0.5); t.eq(v.speedup_eager, 0.5); t.eq(v.speedup_compile, 0.25)
  t.eq(v.speedup_cuda_reference, 4); t.eq(v.speedup_baseline, 1.5); t.eq(v.compile_mode, "default")
  t.eq(v.baselines.errors, nil); t.eq(v.timing.eager.median, 1)
  -- no torch: the CUDA reference is the baseline, and why eager is missing is kept
  v = speedups({}, cand, { cuda_reference = { median = 8 }, baselines = { errors = { eager = "PyTorch is not available" } } })
  t.eq(v.speedup_over, "cuda_reference"); t.eq(v.speedup, 4); t.eq(v.speedup_eager, nil)
  t.eq(v.baselines.errors.eager, "PyTorch is not available")
  -- no PyTorch asked for: no baselines field at all
  v = speedups({}, cand, { cuda_reference = { median = 1 } })
  t.eq(v.speedup, 0.5); t.eq(v.baselines, nil)
  -- a KernelBench problem: eager is the reference, no CUDA reference
  v = speedups({}, cand, { baselines = { eager = { median = 6 }, errors = { compile = "every mode failed" } } })
  t.eq(v.speedup_over, "pytorch_eager"); t.eq(v.speedup, 3); t.eq(v.speedup_cuda_reference, nil)
  t.eq(v.speedup_compile, nil); t.eq(v.baselines.errors.compile, "every mode failed")
  -- a timing whose gate opened by its timeout says so in its summary; one that did not, not
  v = speedups({}, cand, { baselines = { eager = { median = 6, gate_timeouts = 1, gated = 2 },
    compile = { median = 5, gate_timeouts = 0, gated = 12 }, errors = {} } })
  t.eq(v.timing.eager.gate_timeouts, 1); t.eq(v.timing.eager.gated, 2)
  t.eq(v.timing.compile.gate_timeouts, nil); t.eq(v.timing.compile.gated, nil)
end)

t.done()
