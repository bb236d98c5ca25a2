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
  t.eq(last.seed, 3, "the last trial's seed")
  t.eq(v.timing.candidate.warmup_calls, 0)
  t.ok(v.timing.candidate.n >= 10, v.timing.candidate.n)
  t.ok(v.speedup and v.speedup > 0, "a speedup over the reference's timing: " .. tostring(v.speedup))
end)

t.test("one seed, or warmed = false: the timing makes its own warm-up call, under the same protocol", function()
  local a = j:eval(rowsum, STARTER, with { seeds = 1 })
  t.eq(a.status, "correct", a.feedback)
  t.eq(a.timing.candidate.warmup_calls, 1, "one seed: verify ended at another shape")
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

-- The call at the stop rule's least count is checked in place (Judge:time_run): a timing
-- that stops there (most of the headline's do; a noise target of 50% makes every one here)
-- needs no check after it. With check_likely_last = false that call is checked with
-- probability 1/2, and where it was not, after the timing.
t.test("the call at min_samples is checked in place: no check after a timing that stops there", function()
  local STOP10 = { target = 0.5 }
  for _ = 1, 6 do
    local v = j:eval(rowsum, STARTER, with(STOP10))
    t.eq(v.status, "correct", v.feedback)
    local c = v.timing.candidate
    t.eq(c.n, 10, "the rule stops at min_samples")
    t.eq(c.last_checked_after, nil, "the 10th call was checked in place")
    t.ok((c.checked_calls or 0) >= 1, "checked calls: " .. tostring(c.checked_calls))
  end
  local after = 0
  for _ = 1, 8 do
    local v = j:eval(rowsum, STARTER, with { target = 0.5, check_likely_last = false })
    t.eq(v.status, "correct", v.feedback)
    t.eq(v.timing.candidate.n, 10)
    if v.timing.candidate.last_checked_after then after = after + 1 end
  end
  -- 1/2 a timing: none in 8 has odds 2^-8
  t.ok(after >= 1, "without it, some last calls were checked after the timing: " .. after .. " of 8")
end)

t.done()
