-- km.task.lint.rules — what km.task.lint flags, and which flags stand: an output's NaN/Inf,
-- determinism and trivial candidates (check_output), the sample estimate (sample_estimate),
-- the closed form (closed_form, on M.erf and M.closed_form_p) and decide.
--
-- State: none of its own. The checks run a backend's session (B, s) and flag through
-- flag(reason, si, output, detail); check_output reads and marks one lint's state ls
-- (km.task.lint.run's new_lint names its fields). Adds M.erf and M.closed_form_p to
-- km.task.lint's table; returns check_output, sample_estimate, closed_form and decide to
-- km.task.lint.run.
local M = require "km.task.lint.reasons"
local task_mod = require "km.task"
local sizes = require "km.task.lint.sizes"
local out_of_memory, numel_of = sizes.out_of_memory, sizes.numel_of

local fmt = string.format
local ipairs, pairs, tostring = ipairs, pairs, tostring

----------------------------------------------------------------------------------------
-- the checks

local function is_int_dtype(dt) return dt:match("^[iu]") ~= nil end

-- The mean of a sample of values (NaN and Inf left out), or nil.
local function mean_of(xs)
  local s, n = 0, 0
  for _, x in ipairs(xs) do
    if x == x and x ~= math.huge and x ~= -math.huge then s, n = s + x, n + 1 end
  end
  return n > 0 and s / n or nil
end

local function g(x) return fmt("%.3g", x) end

-- A backend run that failed (B.run's err, code), told as `what`: unchecked where the machine
-- could not (SKIP, out of memory), else a note. -> false (the check was not made)
local function not_run(res, err, code, what)
  local list = (code == "SKIP" or out_of_memory(err)) and res.unchecked or res.notes
  list[#list + 1] = fmt("%s: %s", what, tostring(err))
  return false
end

----------------------------------------------------------------------------------------
-- one output at one shape: NaN/Inf, determinism, the trivial candidates

-- The trivial candidates for output o at shape sh (zeros, a constant, an input, the other
-- seed's output); zeros and z: the zeros buffer and |y| <= atol compared, from check_output.
local function judge_trivial(ls, sh, o, zeros, z)
  local B, t, flag, si = ls.B, ls.t, ls.flag, sh.si
  local tol = t.tolerance[o.dtype]
  local y = sh.a.outs[o.name]
  local n = numel_of(o, sh.sym)
  local zr = B.compare(zeros, y, tol)
  if zr.ok then flag("trivial_zeros", si, o.name, fmt("max |y| %s, atol %g", g(z.max_abs or 0), tol.atol))
  elseif (n - (z.mismatches or 0)) / n >= M.BELOW_SHARE then
    flag("below_tolerance", si, o.name, fmt("%.1f%% of elements within atol %g of 0", 100 * (n - z.mismatches) / n, tol.atol))
  end
  -- the constant: the output's mean, or on a small output (its own mean is itself, or
  -- nearly) the other seed's, a value known without these inputs
  local m, whose
  if n >= M.MIN_ELEMENTS then m = mean_of(B.sample(y, 1 << 16))
  elseif sh.b then m, whose = mean_of(B.sample(sh.b.outs[o.name], 1 << 16)), fmt(", seed %d's mean", M.SEEDS[2]) end
  if m and not zr.ok then
    if is_int_dtype(o.dtype) then m = math.floor(m + 0.5) end
    local c = B.const(y, m)
    if B.compare(c, y, tol).ok then flag("trivial_constant", si, o.name, fmt("the constant %s%s", g(m), whose or "")) end
    B.free(c)
  end
  for _, spec in ipairs(t.inputs) do
    if spec.dtype == o.dtype and numel_of(spec, sh.sym) == n and spec.role ~= "parameter" then
      if B.compare(sh.a.ins[spec.name], y, tol).ok then flag("trivial_input", si, o.name, "input " .. spec.name) end
    end
  end
  if sh.b and B.compare(sh.b.outs[o.name], y, tol).ok then
    flag("input_independent", si, o.name, fmt("seeds %d and %d agree", M.SEEDS[1], M.SEEDS[2]))
  end
end

-- Checks output o at shape sh: NaN/Inf, then determinism and, where it is judged, the
-- trivial candidates.
local function check_output(ls, sh, o)
  local B, flag, si = ls.B, ls.flag, sh.si
  local tol = ls.t.tolerance[o.dtype]
  local y = sh.a.outs[o.name]
  local n = numel_of(o, sh.sym)
  local zeros = B.zeros(y)
  local z = B.compare(y, zeros, { atol = tol.atol, rtol = 0 }) -- |y| <= atol, element by element
  local bad_values = (z.nan or 0) + (z.inf or 0)
  if bad_values > 0 then
    flag("nan_inf", si, o.name, fmt("%d NaN, %d Inf of %d", z.nan or 0, z.inf or 0, n))
  else
    if sh.a2 then
      local d = B.compare(sh.a2.outs[o.name], y, tol)
      if not d.ok then flag("nondeterministic", si, o.name, fmt("%d of %d elements differ, max |diff| %s", d.mismatches or 0, n, g(d.max_abs or 0))) end
    end
    if n >= M.MIN_ELEMENTS or (ls.small[o.name] and n > 0) or (si == 1 and n > 0) then
      ls.judged[si] = true
      judge_trivial(ls, sh, o, zeros, z)
    end
  end
  B.free(zeros)
end

----------------------------------------------------------------------------------------
-- sample_estimate: can an output be estimated from a small sample of the inputs' rows? The
-- rows are the leading dimension of the task's first input (not a parameter); every input
-- (not a parameter) whose leading dimension has that length is sampled. The reference runs
-- on those inputs with every row past the first keep = rows // SAMPLE_RATIO replaced by a copy
-- of row (i mod keep): an output that is a mean over rows comes out as the prefix's mean, a
-- sum as the prefix's sum rescaled by rows / keep (the raw and the rescaled estimate, each
-- where it applies), anything else as what the prefix alone decides. An output with a
-- dimension of the rows' length (a row per input row: elementwise ops, matmuls, per-row
-- reductions) is not estimated: it cannot be made from fewer rows. An output is flagged where
-- the estimate passes the task's tolerance against the full answer at both seeds.

-- The rows to sample at shape sym -> { rows, keep, names = { input name -> true } } | nil (no
-- input has rows, or fewer than SAMPLE_RATIO of them)
local function sample_rows(t, sym)
  local rows
  for _, spec in ipairs(t.inputs) do
    local d = spec.role ~= "parameter" and task_mod.shape_of(spec, sym)
    if d and #d > 0 then rows = d[1] break end
  end
  if not rows or rows < M.SAMPLE_RATIO then return nil end
  local names = {}
  for _, spec in ipairs(t.inputs) do
    local d = spec.role ~= "parameter" and task_mod.shape_of(spec, sym)
    if d and #d > 0 and d[1] == rows then names[spec.name] = true end
  end
  return { rows = rows, keep = rows // M.SAMPLE_RATIO, names = names }
end

-- The outputs at sym without a dimension of `rows`' length (and not empty).
local function estimable(t, sym, rows)
  local list = {}
  for _, o in ipairs(t.outputs) do
    local per_row = false
    for _, d in ipairs(task_mod.shape_of(o, sym)) do if d == rows then per_row = true end end
    if not per_row and numel_of(o, sym) > 0 then list[#list + 1] = o end
  end
  return list
end

-- Estimates the outputs at shape si from the sample; full = { seed 1's run, seed 2's run }.
-- Flags through flag(reason, si, output, detail); a run that failed is said in res (unchecked
-- when out of memory: the result is then not kept, M.transient; a note otherwise).
-- -> true when the estimate was made
local function sample_estimate(B, s, t, sym, si, full, flag, res, label)
  local rows = sample_rows(t, sym)
  if not rows then return false end
  local outs = estimable(t, sym, rows.rows)
  if #outs == 0 then return false end
  local worst = {} -- output name -> the largest |estimate - full| at a seed where it passed
  for i, seed in ipairs(M.SEEDS) do
    local e, err, code = B.run(s, sym, seed, rows)
    if not e then return not_run(res, err, code, label .. ": the sample estimate did not run") end
    for _, o in ipairs(outs) do
      local c = B.compare(e.outs[o.name], full[i].outs[o.name], t.tolerance[o.dtype])
      if c.ok and (i == 1 or worst[o.name]) then
        worst[o.name] = math.max(worst[o.name] or 0, c.max_abs or 0)
      else
        worst[o.name] = nil
      end
    end
    B.release(s, e)
  end
  for _, o in ipairs(outs) do
    if worst[o.name] then
      local tol = t.tolerance[o.dtype]
      flag("sample_estimate", si, o.name, fmt("the reference on the first %d of %d rows (1/%d), repeated, passes at seeds %d and %d: max |diff| %s (atol %g, rtol %g)",
        rows.keep, rows.rows, M.SAMPLE_RATIO, M.SEEDS[1], M.SEEDS[2], g(worst[o.name]), tol.atol, tol.rtol))
    end
  end
  return true
end

----------------------------------------------------------------------------------------
-- rows_check: does the task's declared check_rows hold (km.judge.rows: a timed call's check
-- runs the reference on a sample of the rows alone)? The reference runs on seed 1's inputs
-- with every row of the inputs that begin with the rows' symbol past the first keep = rows //
-- ROWS_RATIO (at least 1) replaced by a copy of row (i mod keep). Where the declaration holds,
-- output row i is then seed 1's row (i mod keep): each output is compared, within the
-- task's tolerance, with seed 1's output tiled the same way (B.tile, in place: `a` is not
-- used after). Flagged rows_false where one differs (a column mean, a batch statistic, a
-- softmax over the rows' axis). A parameter with the rows' symbol is not tiled by the
-- backends: such a task is said unchecked. -> true when the check was made
local function rows_check(B, s, t, sym, si, a, flag, res, label)
  local r = t.check_rows
  local rows = r and sym[r]
  if not rows or rows < 2 then return false end
  local names = {}
  for _, spec in ipairs(t.inputs) do
    if spec.shape[1] == r then
      if spec.role == "parameter" then
        res.unchecked[#res.unchecked + 1] = fmt("%s: check_rows ('%s'): the parameter %s has the rows", label, r, spec.name)
        return false
      end
      names[spec.name] = true
    end
  end
  local keep = math.max(1, rows // M.ROWS_RATIO)
  local e, err, code = B.run(s, sym, M.SEEDS[1], { rows = rows, keep = keep, names = names })
  if not e then return not_run(res, err, code, label .. ": check_rows was not tried") end
  for _, o in ipairs(t.outputs) do
    local n = numel_of(o, sym)
    if n > 0 then
      local want = B.tile(a.outs[o.name], n // rows * keep * task_mod.DTYPE_BYTES[o.dtype])
      local c = B.compare(e.outs[o.name], want, t.tolerance[o.dtype])
      if not c.ok then
        flag("rows_false", si, o.name, fmt("check_rows '%s': the reference on the first %d of %d rows, repeated, gives other rows than its rows repeated: %s of %d elements differ (max |diff| %s)",
          r, keep, rows, tostring(c.mismatches or "?"), n, g(c.max_abs or 0)))
      end
    end
  end
  B.release(s, e)
  return true
end

----------------------------------------------------------------------------------------
-- closed_form: does an output under MIN_ELEMENTS at the timed shape (a loss, a statistic)
-- have a constant that passes part of the time? The reference runs there on the K seeds of
-- CLOSED_FORM_SEEDS. For each element, with m and s the mean and standard deviation (K - 1
-- in the denominator) of its K values: a constant c made without reading the inputs — the
-- mean of K - 1 seeds' values, the best such guess — misses the reference's value x on a
-- fresh draw by x - c ~ N(0, s^2 (1 + 1/(K - 1))) in a normal model, and passes where
-- |x - c| <= atol + rtol * |x|, about tau = atol + rtol * |m|: with sigma = s * sqrt(1 + 1/(K - 1)),
-- P(pass) = erf(tau / (sigma * sqrt 2)) (1 where s = 0). The elements are taken as independent:
-- the output passes with the product of its elements' P. Flagged where that is over
-- CLOSED_FORM_P. The seeds are fixed, so one machine decides a task the same way every run;
-- the detail also counts the K leave-one-out trials that pass (seed k's value against the
-- other seeds' mean).
-- The normal model says nothing of an output whose values repeat exactly (a saturated maximum,
-- an index, a clamp: P = 0 at atol = rtol = 0), so the rule also counts, for each seed's output
-- taken as the constant, the seeds it passes at (itself included): flagged where the most is
-- CLOSED_FORM_SHARED or more. With 8 seeds (simulated): an output with 100 equally likely
-- values (a constant passes 1%) is flagged 0.5% of the time; one whose most likely value is
-- drawn 10% of the time 4%, 30% of the time 45%, half of the time 85% (where the two seeds of
-- SEEDS agree, input_independent flags too).

-- erf(x) (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7)
local function erf(x)
  local sign = x < 0 and -1 or 1
  x = math.abs(x)
  local u = 1 / (1 + 0.3275911 * x)
  local y = 1 - ((((1.061405429 * u - 1.453152027) * u + 1.421413741) * u - 0.284496736) * u + 0.254829592) * u * math.exp(-x * x)
  return sign * y
end
M.erf = erf

-- How many of the seeds' outputs seed k's output passes at (itself included): each element
-- of theirs within atol + rtol * |x| of its own.
local function shared_by(values, k, tol)
  local n = 0
  for i = 1, #values do
    local pass = true
    for j = 1, #values[i] do
      local x = values[i][j]
      if not (math.abs(values[k][j] - x) <= tol.atol + tol.rtol * math.abs(x)) then pass = false break end
    end
    if pass then n = n + 1 end
  end
  return n
end

-- The closed-form rule on values[k][j] (seed k, element j) at tolerance tol. -> { p (the
-- product), loo (leave-one-out trials that pass), shared (the most seeds one seed's output
-- passes at), m, s, tau (of the element with the lowest P) } | nil where a value is NaN or Inf
function M.closed_form_p(values, tol)
  local K = #values
  local n = #values[1]
  local out = { p = 1, loo = 0 }
  local lowest = math.huge
  local means = {}
  for j = 1, n do
    local sum = 0
    for k = 1, K do
      local x = values[k][j]
      if x ~= x or x == math.huge or x == -math.huge then return nil end
      sum = sum + x
    end
    local m = sum / K
    local ss = 0
    for k = 1, K do ss = ss + (values[k][j] - m) ^ 2 end
    local sd = math.sqrt(ss / (K - 1))
    local sigma = sd * math.sqrt(1 + 1 / (K - 1))
    local tau = tol.atol + tol.rtol * math.abs(m)
    local pj = sigma > 0 and erf(tau / (sigma * math.sqrt(2))) or 1
    out.p = out.p * pj
    if pj < lowest then lowest, out.m, out.s, out.tau = pj, m, sd, tau end
    means[j] = sum
  end
  for k = 1, K do
    local pass = true
    for j = 1, n do
      local x = values[k][j]
      local c = (means[j] - x) / (K - 1)
      if not (math.abs(x - c) <= tol.atol + tol.rtol * math.abs(x)) then pass = false end
    end
    if pass then out.loo = out.loo + 1 end
  end
  out.shared = 0
  for k = 1, K do out.shared = math.max(out.shared, shared_by(values, k, tol)) end
  return out
end

-- The closed-form check at the timed shape sym; full = { seed 1's run, seed 2's run }
-- (SEEDS'), reused. Flags through flag; a note says each output's probability where it is
-- not flagged; a run that failed is said in res (as sample_estimate's). -> true when made
local function closed_form(B, s, t, sym, full, flag, res)
  local outs = {}
  for _, o in ipairs(t.outputs) do
    local n = numel_of(o, sym)
    if n > 0 and n < M.MIN_ELEMENTS then outs[#outs + 1] = o end
  end
  if #outs == 0 then return false end
  local seeds = M.CLOSED_FORM_SEEDS
  local values = {} -- output name -> { seed index -> { element values } }
  for _, o in ipairs(outs) do values[o.name] = {} end
  for k, seed in ipairs(seeds) do
    local r, err, code
    if seed == M.SEEDS[1] then r = full[1] elseif seed == M.SEEDS[2] then r = full[2]
    else r, err, code = B.run(s, sym, seed) end
    if not r then return not_run(res, err, code, fmt("shape 1: the closed-form check did not run (seed %d)", seed)) end
    for _, o in ipairs(outs) do values[o.name][k] = B.sample(r.outs[o.name], M.MIN_ELEMENTS) end
    if r ~= full[1] and r ~= full[2] then B.release(s, r) end
  end
  for _, o in ipairs(outs) do
    local tol = t.tolerance[o.dtype]
    local c = M.closed_form_p(values[o.name], tol)
    if c then
      local text = fmt("over %d seeds (%d-%d) the mean is %s, the spread (sd) %s, the tolerance there %s: a constant passes a trial with probability %.3g (normal model; over %g flags), %d of %d leave-one-out trials pass, %d of %d seeds give one output (%d or more flags)",
        #seeds, seeds[1], seeds[#seeds], g(c.m), g(c.s), g(c.tau), c.p, M.CLOSED_FORM_P, c.loo, #seeds,
        c.shared, #seeds, M.CLOSED_FORM_SHARED)
      if c.p > M.CLOSED_FORM_P or c.shared >= M.CLOSED_FORM_SHARED then flag("closed_form", 1, o.name, text)
      else res.notes[#res.notes + 1] = fmt("closed form not flagged (%s): %s", o.name, text) end
    end
  end
  return true
end

-- Which flags stand (M.AT_TIMED's and M.EVERY_SHAPE's comments); the others become notes.
-- tried: reason -> { shape -> true } where it was tried; judged: the shapes the trivial
-- candidates were judged at. -> the flags kept
local function decide(flags, tried, judged, notes)
  local at_timed, at = {}, {}
  for _, f in ipairs(flags) do
    if f.shape == 1 then at_timed[f.reason .. "\0" .. tostring(f.output)] = true end
    at[f.reason] = at[f.reason] or {}
    at[f.reason][f.shape or 0] = true
  end
  local kept = {}
  for _, f in ipairs(flags) do
    local r, keep, why = f.reason, true, nil
    if M.AT_TIMED[r] and tried[r] and tried[r][1] then
      keep, why = at_timed[r .. "\0" .. tostring(f.output)], "not at the timed shape"
    elseif M.EVERY_SHAPE[r] then
      for si in pairs(judged) do if not at[r][si] then keep, why = false, "other shapes catch it" end end
    end
    if keep then kept[#kept + 1] = f
    else
      notes[#notes + 1] = fmt("%s at shape %d only (%s%s): %s", M.REASON[r].short, f.shape,
        f.output and (f.output .. ", ") or "", f.detail or "", why)
    end
  end
  return kept
end

return { check_output = check_output, sample_estimate = sample_estimate, closed_form = closed_form,
  rows_check = rows_check, decide = decide }
