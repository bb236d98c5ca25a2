-- GPU: timing quality under the judge's stop rule (km.judge.checks: by default the gini rule,
-- a stop from 5 calls where the median's error, from the trimmed Gini mean difference and
-- inflated for the count, is <= 0.21%; KM_STOP_RULE=interval: the rule it replaced). The
-- same correct kernel judged 10 times on one GPU,
-- each a full evaluation (verify, every timed call checked): the spread of its speedups
-- (max / min - 1; the baseline it is divided by is timed once and kept, so the spread is the
-- candidate's medians') is at most 1% for kernels of 10 us or more and 3% for 2 us or more.
-- Prints each task's medians, calls and spread (bench/RESULTS.md quotes them); each verdict's
-- 95% interval holds its median and its calls are 5 or more.
local t = require "km.tap"
t.require_gpu()
local judge_mod = require "km.judge"
local task = require "km.task"
local testing = require "km.testing"

local ROOT = testing.paths()
local TASKS = { ROOT .. "/tasks/l1_relu", ROOT .. "/tests/tasks/t_rowsum", ROOT .. "/tests/tasks/t_pad_relu",
  ROOT .. "/tasks/l2_row_l2norm", ROOT .. "/tasks/l1_softmax" }
local RUNS = 10
local OPTS = { seeds = 1, energy = false, compile_mode = "off" }
local j = assert(judge_mod.new())

for _, dir in ipairs(TASKS) do
  local tk = assert(task.load(dir))
  t.test(tk.name .. ": the same kernel judged " .. RUNS .. " times", function()
    -- a task without a starter (t_pad_relu): its CUDA reference judged as the candidate
    local cand = task.starter(tk) or { name = "the reference", source = testing.read(dir .. "/reference.cu"),
      launch = testing.read(dir .. "/reference.lua") }
    local speedups, medians, calls = {}, {}, {}
    for i = 1, RUNS do
      local v = j:eval(tk, cand, OPTS)
      t.eq(v.status, "correct", v.feedback)
      if v.status ~= "correct" then return end
      local c = v.timing.candidate
      speedups[i], medians[i], calls[i] = v.speedup or (1 / c.median), c.median, c.n
      t.ok(c.ci_low <= c.median and c.median <= c.ci_high and c.n >= 5, ("run %d: n %d, interval %s..%s"):format(i, c.n,
        tostring(c.ci_low), tostring(c.ci_high)))
    end
    local lo, hi = math.huge, -math.huge
    for _, s in ipairs(speedups) do lo, hi = math.min(lo, s), math.max(hi, s) end
    local spread = hi / lo - 1
    table.sort(medians)
    local med_us = medians[(RUNS + 1) // 2] * 1e3
    t.diag(("%s: median %.2f us, calls %s, speedups %.4f..%.4f, spread %.2f%%"):format(tk.name, med_us,
      table.concat(calls, ","), lo, hi, 100 * spread))
    if med_us >= 10 then t.ok(spread <= 0.01, ("%.2f%% at %.1f us"):format(100 * spread, med_us))
    elseif med_us >= 2 then t.ok(spread <= 0.03, ("%.2f%% at %.1f us"):format(100 * spread, med_us))
    else t.note(("%.1f us: under 2 us, no bound"):format(med_us)) end
  end)
end

t.done()
