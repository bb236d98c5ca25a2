-- GPU: a candidate's timing takes verify's last call as its warm-up call (Judge:verify puts
-- the timed shape's last trial last; Judge:time_run passes `warmed` to km.timing). The
-- timing then makes no warm-up call of its own, its protocol key is the one a timing with its
-- own warm-up call has (speedups against cached timings still divide), and a launch whose
-- scratch follows the shape finds it already of the timed shape's size. With one seed, or
-- opts.warmed = false, the timing warms up itself.
local t = require "km.tap"
t.require_gpu()
local judge_mod = require "km.judge"
local testing = require "km.testing"

local rowsum, STARTER = testing.test_task("t_rowsum")
local OPTS = { energy = false, compile_mode = "off" }
local function with(o)
  local r = {}
  for k, v in pairs(OPTS) do r[k] = v end
  for k, v in pairs(o or {}) do r[k] = v end
  return r
end

-- scratch whose size follows the shape (a launch that sizes a buffer by rows x cols)
local SCRATCH = { name = "scratch by shape", source = STARTER.source, params = STARTER.params, launch = [[
return function(k, io, s)
  local tmp = k.scratch("f32", s.rows * s.cols)
  k.rowsum{ grid = s.rows, block = k.params.BLOCK }(io.x, io.y, s.rows, s.cols)
end]] }

local j = assert(judge_mod.new())

t.test("verify's last trial is the timed shape's, and the timing makes no warm-up call of its own", function()
  local v = j:eval(rowsum, STARTER, OPTS)
  t.eq(v.status, "correct", v.feedback)
  local last = v.checks[#v.checks]
  t.eq(last.shape, 1, "the last trial's shape")
  -- the timed shape's one trial (verify trimmed): the precision trial (f32 outputs), on seed 2
  t.eq(last.seed, 2, "the last trial's seed")
  t.ok(last.precision ~= nil, "the precision trial")
  t.eq(v.timing.candidate.warmup_calls, 0)
  t.ok(v.timing.candidate.n >= 10, v.timing.candidate.n)
  t.ok(v.speedup and v.speedup > 0, "a speedup over the reference's timing: " .. tostring(v.speedup))
end)

t.test("one seed untrimmed, or warmed = false: the timing makes its own warm-up call, under the same protocol", function()
  -- one seed, verify trimmed: its last trial is still the timed shape's (no warm-up call);
  -- untrimmed, it ends at another shape, and the timing warms up itself
  local o = j:eval(rowsum, STARTER, with { seeds = 1 })
  t.eq(o.status, "correct", o.feedback)
  t.eq(o.timing.candidate.warmup_calls, 0, "one seed, trimmed: verify ended at the timed shape")
  local a = j:eval(rowsum, STARTER, with { seeds = 1, verify_trim = false })
  t.eq(a.status, "correct", a.feedback)
  t.eq(a.timing.candidate.warmup_calls, 1, "one seed, untrimmed: verify ended at another shape")
  local b = j:eval(rowsum, STARTER, with { warmed = false })
  t.eq(b.status, "correct", b.feedback)
  t.eq(b.timing.candidate.warmup_calls, 1)
  local c = j:eval(rowsum, STARTER, OPTS)
  t.eq(c.timing.candidate.warmup_calls, 0)
  t.eq(b.timing.candidate.protocol, c.timing.candidate.protocol, "one protocol")
  t.ok(type(c.timing.candidate.protocol) == "string" and c.timing.candidate.protocol:find("warmup=1,", 1, true), c.timing.candidate.protocol)
  t.ok(b.speedup and c.speedup, "both divide by the same cached reference timing")
end)

t.test("scratch sized by the shape: the timing's first call finds it at the timed shape's size", function()
  local v = j:eval(rowsum, SCRATCH, OPTS)
  t.eq(v.status, "correct", v.feedback)
  t.eq(v.timing.candidate.warmup_calls, 0)
  t.eq(v.timing.candidate.gate_timeouts or 0, 0, "no allocation waited inside a gate")
  t.eq(v.scratch_bytes, 4 * rowsum.shapes[1].rows * rowsum.shapes[1].cols)
end)

-- Which timed calls are checked (Judge:time_run, km.judge's check_picker): by default every
-- one, in place, and none after the timing; check_first = m checks exactly m of the first
-- min_samples (here 10, the interval rule's window; a timing that stops there: a noise
-- target of 50% makes every one here, with early_samples = min_samples so that it does not
-- stop earlier) and,
-- in one that runs on, every later call (check_every = 1). check_draw = "each": the 10th
-- always, the others 1 in 2.
t.test("every timed call is checked in place by default; check_first = 3 checks exactly 3 of 10", function()
  for _ = 1, 2 do
    local v = j:eval(rowsum, STARTER, with { min_samples = 10, early_samples = 10, ci_target = 0, target = 0.5 })
    t.eq(v.status, "correct", v.feedback)
    local c = v.timing.candidate
    t.eq(c.n, 10, "the rule stops at min_samples")
    t.eq(c.checked_calls, 10, "every call")
    t.eq(c.last_checked_after, nil, "no check after the timing")
    t.eq(c.check_lines, 16, "one output line in 16 of a large buffer")
  end
  for _ = 1, 3 do
    local v = j:eval(rowsum, STARTER, with { min_samples = 10, early_samples = 10, ci_target = 0, target = 0.5, check_first = 3 })
    t.eq(v.status, "correct", v.feedback)
    t.eq(v.timing.candidate.checked_calls, 3, "3 of the 10")
    t.eq(v.timing.candidate.last_checked_after, nil, "no check after the timing")
  end
  local v = j:eval(rowsum, STARTER, with { min_samples = 10, early_samples = 10, ci_target = 0, target = 0.5, check_lines = 1 })
  t.eq(v.timing.candidate.check_lines, nil, "check_lines = 1: every line")
  -- a timing that does not stop at 10 (a noise target no timing meets, stopped by max_ms):
  -- 3 of the first 10 and every call after them, each in place
  for _ = 1, 2 do
    local e = j:eval(rowsum, STARTER, with { min_samples = 10, target = 1e-9, max_ms = 40, check_first = 3 })
    t.eq(e.status, "correct", e.feedback)
    local c = e.timing.candidate
    t.ok(c.n > 10, "ran past min_samples: " .. tostring(c.n))
    t.eq(c.checked_calls, 3 + c.n + (c.n_extra or 0) - 10, "every call past the 10th checked")
    t.eq(c.last_checked_after, nil, "the last call checked in place")
  end
  local counts = {}
  for _ = 1, 6 do
    local e = j:eval(rowsum, STARTER, with { min_samples = 10, early_samples = 10, ci_target = 0, target = 0.5, check_draw = "each" })
    t.eq(e.status, "correct", e.feedback)
    t.eq(e.timing.candidate.last_checked_after, nil, "each: the 10th checked in place")
    counts[#counts + 1] = e.timing.candidate.checked_calls
    t.ok(e.timing.candidate.checked_calls >= 1, "the 10th at least")
  end
  t.ok(#counts == 6, table.concat(counts, " "))
  t.raises(function() j:eval(rowsum, STARTER, with { check_draw = "some" }) end, "check_draw")
end)

t.done()
