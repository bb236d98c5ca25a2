-- km.task.lint.reasons — what km.task.lint says and the numbers it decides by: its version,
-- its tunables, the reasons it flags (REASONS, REASON), which of them stand where (AT_TIMED,
-- EVERY_SHAPE), what a machine can lack (MACHINE), and two readers of a result's flags
-- (M.flagged, M.reasons).
--
-- State: M, the table km.task.lint returns. It is made here; the other parts of
-- lua/km/task/lint/ add their public functions to it and read its tunables from it each time
-- they use one (never a local copy), so a tunable set on km.task.lint is what they all read.
local M = {}

local ipairs, type = ipairs, type

M.VERSION = 8          -- bump when what a result holds or how it is decided changes
                       -- (4: sample_estimate; outputs small at every shape judged)
                       -- (5: what the machine lacks is never a flag nor kept)
                       -- (6: trivial candidates decided at the timed shape; closed_form)
                       -- (7: closed_form also where seeds repeat one output)
                       -- (8: rows_false, a task's declared check_rows tried)
M.MIN_ELEMENTS = 64    -- trivial candidates are judged on outputs at least this large (or
                       -- under it at every shape set, or at the timed shape)
M.BELOW_SHARE = 0.9    -- below_tolerance: at least this share of the output is within atol of 0
M.TOO_SHORT_MS = 0.01  -- too_short: the reference's median under this (and under 4 empty kernels)
M.CPU_MAX_BYTES = 256 << 20 -- a shape whose buffers pass this is not run on the CPU
M.SEEDS = { 101, 202 } -- the reference runs on the first twice, on the second once
M.SAMPLE_RATIO = 64    -- sample_estimate: the reference on the first 1/SAMPLE_RATIO of the rows
M.ROWS_RATIO = 4       -- rows_false: the reference on the first 1/ROWS_RATIO of the declared rows, repeated
-- closed_form: an output under MIN_ELEMENTS at the timed shape runs on these K seeds (the
-- first two are SEEDS', whose runs are reused: K - 2 more reference runs, at that shape only)
M.CLOSED_FORM_SEEDS = { 101, 202, 303, 404, 505, 606, 707, 808 }
M.CLOSED_FORM_P = 0.01 -- closed_form: flagged where a constant passes a trial with a
                       -- probability above this (the normal model: rules.lua)
M.CLOSED_FORM_SHARED = 3 -- closed_form: flagged too where this many of the K seeds give one
                         -- output (each within the tolerance of it): a value that repeats

-- The reasons, one row each: key, what a table prints, what it means.
M.REASONS = {
  { key = "trivial_zeros", short = "zeros pass", text = "an all-zeros output passes the tolerance" },
  { key = "trivial_constant", short = "constant passes", text = "a constant output (the reference's mean; on an output under 64 elements, the other seed's) passes" },
  { key = "trivial_input", short = "input passes", text = "an input passed through unchanged passes" },
  { key = "input_independent", short = "input-independent",
    text = "the output does not depend on the inputs (the reference on other inputs passes)" },
  { key = "sample_estimate", short = "sample estimates",
    text = "the reference on a small sample of the input rows (the first 1/64, repeated) passes: the output can be estimated without reading most of the inputs" },
  { key = "closed_form", short = "closed form",
    text = "a constant passes part of the time: the output's spread across seeds is within a few tolerances (a constant at the seeds' mean passes a trial with a probability over 1%), or 3 of 8 seeds give the same output" },
  { key = "below_tolerance", short = "below tolerance",
    text = "most of the output is within atol of zero (below the tolerance's resolution)" },
  { key = "nan_inf", short = "NaN/Inf", text = "the reference's output holds NaN or Inf" },
  { key = "nondeterministic", short = "non-deterministic", text = "two runs of the reference on the same inputs disagree beyond the tolerance" },
  { key = "too_short", short = "too short", text = "the reference runs too briefly to time meaningfully (speedups there are noise)" },
  { key = "reference_error", short = "reference fails", text = "the reference does not run" },
  { key = "rows_false", short = "rows not independent",
    text = "the task declares check_rows, but an output row needs other rows than its own (the reference on the first 1/4 of the rows, repeated, does not give their rows repeated): the judge's checks on a sample of rows would fail honest kernels" },
}
M.REASON = {}
for _, r in ipairs(M.REASONS) do M.REASON[r.key] = r end
-- Launch code sees the shape table, so a candidate can compute exactly at the small shape
-- sets and write a trivial answer at the timed shape (shape set 1), where its speed is
-- measured: these reasons flag a task where they hold at the timed shape (every shape they
-- hold at is then listed); where they were tried at the timed shape and do not hold there,
-- what holds at other shapes is a note. decide() (rules.lua) applies it.
M.AT_TIMED = { trivial_zeros = true, trivial_constant = true, trivial_input = true,
  input_independent = true, below_tolerance = true, sample_estimate = true, closed_form = true }
-- Where the timed shape was not run here (over CPU_MAX_BYTES), these flag only where they
-- hold at every shape they were judged on (a candidate must pass every shape set; at some
-- shapes only, a sum over an axis of length 1 is its input, they are notes); sample_estimate
-- flags at any shape it holds at (an estimate only gets better with more rows); closed_form
-- is made at the timed shape only, so it is said to be unchecked.
M.EVERY_SHAPE = { trivial_zeros = true, trivial_constant = true, trivial_input = true,
  input_independent = true, below_tolerance = true }

-- What a machine can lack, by the code a backend's open returns with it: a fact about the
-- machine, not the task, so a task it stops is "not checked", never flagged, never kept.
M.MACHINE = { NO_PYTORCH = "needs PyTorch", NO_GPU = "needs a GPU" }

-- true when a result flags anything
function M.flagged(res) return type(res) == "table" and type(res.flags) == "table" and #res.flags > 0 end

-- The distinct reasons of a result, in REASONS' order.
function M.reasons(res)
  local seen, out = {}, {}
  for _, f in ipairs(res and res.flags or {}) do seen[f.reason] = true end
  for _, r in ipairs(M.REASONS) do if seen[r.key] then out[#out + 1] = r.key end end
  return out
end

return M
