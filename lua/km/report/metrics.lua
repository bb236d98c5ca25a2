-- km.report.metrics — the numbers of a report (km.report is the façade; docs/report.md).
--
-- Episodes (km.report.load) become rows; rows become metrics per group (fast_p against each
-- baseline, speedup statistics, GPU time, model use), pass@k over repeats, fast_p curves and
-- the per-task map; M.build puts them together as the report every writer renders
-- (km.report.text, km.report.json, km.report.csv, km.report.svg, km.report.html).
local M = {}

local concat, sort, insert = table.concat, table.sort, table.insert
local floor, log, exp, huge = math.floor, math.log, math.exp, math.huge
local max, min = math.max, math.min
local ipairs, pairs, type, tostring, tonumber = ipairs, pairs, type, tostring, tonumber

M.FAST_P = { 0, 0.5, 1, 1.5, 2 }
-- Groupings: one of these, or several joined by "+" (strategy+model: a row per pair).
M.GROUPINGS = { level = true, category = true, strategy = true, model = true, task = true }
-- Strategies and models are never mixed by default: every table is split by both.
M.DEFAULT_BY = { "strategy+model", "level+strategy+model", "category+strategy+model" }
-- The baselines a candidate is timed against (km.judge): key, the row's field, the
-- verdict's speedup_over value when `speedup` itself is over it, and names for tables and
-- sentences. fast_p is computed against each; a baseline no correct episode has a time
-- against is left out of the tables and charts.
M.BASELINES = {
  { key = "eager", field = "speedup_eager", over = "pytorch_eager", short = "eager", label = "PyTorch eager" },
  { key = "compile", field = "speedup_compile", short = "compile", label = "torch.compile" },
  { key = "cuda_reference", field = "speedup_cuda_reference", over = "cuda_reference", short = "CUDA ref",
    label = "the CUDA reference" },
}
local BASELINE_OF_OVER = {}
for _, b in ipairs(M.BASELINES) do if b.over then BASELINE_OF_OVER[b.over] = b end end

----------------------------------------------------------------------------------------
-- numbers

local function finite(x)
  return type(x) == "number" and x == x and x ~= huge and x ~= -huge
end

local function num(x) return finite(x) and x or nil end

-- Linear interpolation between closest ranks (numpy's default, R type 7).
local function quantile(sorted, q)
  local n = #sorted
  if n == 0 then return nil end
  local h = (n - 1) * q + 1
  local lo = floor(h)
  local hi = min(lo + 1, n)
  return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo])
end

local function mean(xs)
  if #xs == 0 then return nil end
  local s = 0
  for _, x in ipairs(xs) do s = s + x end
  return s / #xs
end

local function geomean(xs)
  if #xs == 0 then return nil end
  local s = 0
  for _, x in ipairs(xs) do s = s + log(x) end
  return exp(s / #xs)
end

local function sorted_copy(xs)
  local c = {}
  for i, x in ipairs(xs) do c[i] = x end
  sort(c)
  return c
end

local function ratio(a, b)
  if not b or b == 0 then return nil end
  return a / b
end

M.quantile, M.geomean, M.mean = quantile, geomean, mean

-- The judge's stages (km.judge: verdict.stage_seconds), in the order they run.
M.STAGES = { "task", "prepare", "baselines", "verify", "measure", "energy" }

----------------------------------------------------------------------------------------
-- metrics

-- One episode reduced to what the metrics read; the summary is what km.run.runner wrote, with
-- final.verdict standing in for fields an older or hand-made summary lacks.
local function row_of(ep)
  local s = type(ep.summary) == "table" and ep.summary or {}
  local v = type(ep.final) == "table" and type(ep.final.verdict) == "table" and ep.final.verdict or {}
  local status = s.status or v.status
  local tok = type(s.tokens) == "table" and s.tokens or {}
  local roof = s.roofline
  if roof == nil and type(v.roofline) == "table" then roof = v.roofline.fraction end
  local function field(k) if s[k] ~= nil then return s[k] end return v[k] end
  local speedup = num(field("speedup"))
  -- stores from before speedup_over timed every speedup against the task's CUDA reference
  local over = field("speedup_over")
  if over == nil and speedup then over = "cuda_reference" end
  return {
    task = ep.task, strategy = ep.strategy, model = ep.model, rep = ep.rep,
    episode_status = ep.status, status = status, correct = status == "correct",
    speedup = speedup, speedup_baseline = num(field("speedup_baseline")),
    speedup_over = over, compile_mode = field("compile_mode"),
    speedup_eager = num(field("speedup_eager")) or (over == "pytorch_eager" and speedup or nil),
    speedup_compile = num(field("speedup_compile")),
    speedup_cuda_reference = num(field("speedup_cuda_reference")) or (over == "cuda_reference" and speedup or nil),
    roofline = num(roof),
    level = s.level, category = s.category,
    compile_ok_first = s.compile_ok_first,              -- nil when nothing was evaluated
    rounds = num(s.rounds_to_correct),
    prompt_tokens = num(tok.prompt) or 0, completion_tokens = num(tok.completion) or 0,
    dollars = num(s.dollars) or 0, gpu_seconds = num(s.gpu_seconds) or 0, seconds = num(s.seconds) or 0,
    failure_modes = type(s.failure_modes) == "table" and s.failure_modes or {},
    -- the model's side (km.run.model): requests, cut-off replies, reasoning, errors
    requests = num(s.requests) or 0, model_calls = num(s.model_calls) or 0, truncated = num(s.truncated) or 0,
    reasoning_chars = num(s.reasoning_chars) or 0, reasoning_tokens = tok.reasoning and num(tok.reasoning) or 0,
    model_errors = type(s.model_errors) == "table" and s.model_errors or {},
    -- the task's lint (km.task.lint.brief) and the shape set the final verdict failed at
    lint_flagged = type(s.lint) == "table" and s.lint.flagged == true,
    lint_reasons = type(s.lint) == "table" and type(s.lint.reasons) == "table" and s.lint.reasons or {},
    failed_shape = type(v.failed_at) == "table" and math.tointeger(v.failed_at.shape) or nil,
    heldout_shape = math.tointeger(s.heldout_shape),
    cost = ep.cost, -- the GPU time of its verdicts (eval_cost); nil where its steps were not read
  }
end

-- The fast_p thresholds a report uses: the ones asked for, with 0 (correctness) and 1
-- always there, sorted, each once.
function M.thresholds(list)
  local seen, out = {}, {}
  for _, p in ipairs { 0, 1, table.unpack(list or M.FAST_P) } do
    if not seen[p] then seen[p] = true; out[#out + 1] = p end
  end
  sort(out)
  return out
end

-- fast_p at each threshold in `ps`: the share of all `rows` that are correct and whose
-- speedup row[field] is > p (KernelBench); p = 0 is correctness, timed or not.
local function fast_points(rows, field, ps)
  local pts = {}
  for i, p in ipairs(ps) do
    local n = 0
    for _, r in ipairs(rows) do
      local x = r[field]
      if r.correct and (p == 0 or (x and x > p)) then n = n + 1 end
    end
    pts[i] = { p = p, value = ratio(n, #rows) }
  end
  return pts
end

-- The positive values of row[field] over the correct rows, sorted.
local function correct_values(rows, field)
  local xs = {}
  for _, r in ipairs(rows) do
    local x = r[field]
    if r.correct and x and x > 0 then xs[#xs + 1] = x end
  end
  sort(xs)
  return xs
end

local function speedup_stats(ss)
  return { n = #ss, geomean = geomean(ss), median = quantile(ss, 0.5),
    p10 = quantile(ss, 0.1), p90 = quantile(ss, 0.9), min = ss[1], max = ss[#ss] }
end

-- fast_p and speedups against each of M.BASELINES: { [key] = { fast_p, speedup, timed,
-- untimed } }; untimed = correct episodes with no time against that baseline.
local function against_baselines(rows, correct, thresholds)
  local out = {}
  for _, b in ipairs(M.BASELINES) do
    local ss = correct_values(rows, b.field)
    out[b.key] = { fast_p = fast_points(rows, b.field, thresholds), speedup = speedup_stats(ss),
      timed = #ss, untimed = correct - #ss }
  end
  return out
end

-- The numbers for one group of rows; fast_p at `thresholds` (default M.FAST_P).
-- Where the judged evaluations' GPU time went, summed over rows: judged, recorded (verdicts
-- with stage_seconds), stages = { task = s, ... } and seconds (their total), kernel (the
-- candidates' own timed seconds) and samples over timed verdicts; then the harness overhead (measure
-- stage / kernel, all stages / kernel) and evaluations per GPU-hour (recorded evaluations
-- per hour of summed stage seconds: one GPU kept busy). Every sum and ratio is nil when no
-- verdict recorded it (a store from before stage_seconds): not recorded is not zero.
function M.gpu_time(rows)
  local g = { judged = 0, recorded = 0, timed = 0, unread = 0, samples = 0 }
  local stages, kernel, total = {}, 0, 0
  for _, r in ipairs(rows) do
    local c = r.cost
    if not c then g.unread = g.unread + 1
    else
      g.judged, g.recorded, g.timed = g.judged + c.judged, g.recorded + c.recorded, g.timed + c.timed
      g.samples = g.samples + (c.samples or 0)
      -- in a fixed order (pairs' order varies between runs, and so would the last bits of the sums)
      local keys = {}
      for k in pairs(c.stages) do keys[#keys + 1] = k end
      sort(keys)
      for _, k in ipairs(keys) do stages[k] = (stages[k] or 0) + c.stages[k]; total = total + c.stages[k] end
      kernel = kernel + c.kernel
    end
  end
  if g.recorded > 0 then
    g.stages, g.seconds = stages, total
    for _, k in ipairs(M.STAGES) do stages[k] = stages[k] or 0 end
    g.evals_per_gpu_hour = total > 0 and g.recorded / total * 3600 or nil
  end
  if g.timed > 0 then
    g.kernel = kernel
    g.measure_over_kernel = ratio(stages.measure or 0, kernel)
    g.stages_over_kernel = ratio(total, kernel)
  end
  return g
end

-- What a group's GPU time is: recorded, partly recorded (some judged verdicts lack
-- stage_seconds, or some episodes' steps did not parse), not recorded (a store from before the
-- field), or no GPU evaluations (nothing went through the judge: a compile-only run).
function M.gpu_time_state(g)
  if g.judged == 0 and g.unread == 0 then return "no GPU evaluations" end
  if g.recorded == 0 then return "not recorded" end
  if g.recorded < g.judged or g.unread > 0 then return "partly recorded" end
  return "recorded"
end

-- Adds one row to the running totals of m; acc collects what the summary takes the
-- median or mean of (baselines, rounds, roofs) and the first-compile counts.
local function add_row(m, acc, r)
  local st = r.episode_status or "?"
  m.status[st] = (m.status[st] or 0) + 1
  for k, c in pairs(r.failure_modes) do
    if type(c) == "number" then m.failure_modes[k] = (m.failure_modes[k] or 0) + c end
  end
  m.tokens.prompt = m.tokens.prompt + r.prompt_tokens
  m.tokens.completion = m.tokens.completion + r.completion_tokens
  m.tokens.reasoning = m.tokens.reasoning + (r.reasoning_tokens or 0)
  m.requests = m.requests + (r.requests or 0)
  m.truncated = m.truncated + (r.truncated or 0)
  m.model_calls = m.model_calls + (r.model_calls or 0)
  if (r.model_calls or 0) > 0 then
    m.reasoning.chars = m.reasoning.chars + (r.reasoning_chars or 0)
    m.reasoning.episodes = m.reasoning.episodes + 1
  end
  for _, e in ipairs(r.model_errors or {}) do
    if type(e) == "table" and e.code then
      local x = m.model_errors[e.code] or { count = 0, message = e.message }
      x.count = x.count + (num(e.count) or 1)
      m.model_errors[e.code] = x
    end
  end
  m.dollars.total = m.dollars.total + r.dollars
  m.gpu_seconds.total = m.gpu_seconds.total + r.gpu_seconds
  m.seconds_total = m.seconds_total + r.seconds
  if type(r.compile_ok_first) == "boolean" then
    acc.first_n = acc.first_n + 1
    if r.compile_ok_first then acc.first_ok = acc.first_ok + 1 end
  end
  if r.correct then
    m.correct = m.correct + 1
    -- what the headline speedup of each timed episode is against
    if r.speedup and r.speedup > 0 and r.speedup_over then
      m.speedup_over[r.speedup_over] = (m.speedup_over[r.speedup_over] or 0) + 1
    end
    if r.speedup_compile and r.compile_mode then
      m.compile_modes[r.compile_mode] = (m.compile_modes[r.compile_mode] or 0) + 1
    end
    if r.speedup_baseline and r.speedup_baseline > 0 then acc.baselines[#acc.baselines + 1] = r.speedup_baseline end
    if r.rounds then acc.rounds[#acc.rounds + 1] = r.rounds end
    if r.roofline then acc.roofs[#acc.roofs + 1] = r.roofline end
  end
end

-- The generalization gap: of the episodes whose final candidate passed the first (timed)
-- shape, the share that failed a later one (for a problem file, its held-out shape).
local function generalization(rows)
  local g = { passed_first = 0, failed_later = 0, failed_heldout = 0 }
  for _, r in ipairs(rows) do
    local later = r.failed_shape and r.failed_shape > 1
    if r.correct or later then g.passed_first = g.passed_first + 1 end
    if later then
      g.failed_later = g.failed_later + 1
      if r.heldout_shape and r.failed_shape == r.heldout_shape then g.failed_heldout = g.failed_heldout + 1 end
    end
  end
  g.gap = ratio(g.failed_later, g.passed_first)
  return g
end

function M.metrics(rows, thresholds)
  thresholds = thresholds or M.thresholds()
  local m = { n = #rows, correct = 0, status = {}, failure_modes = {},
    tokens = { prompt = 0, completion = 0, reasoning = 0 }, dollars = { total = 0 }, gpu_seconds = { total = 0 },
    seconds_total = 0, requests = 0, truncated = 0, model_calls = 0, model_errors = {},
    reasoning = { chars = 0, episodes = 0 }, speedup_over = {}, compile_modes = {} }
  local acc = { baselines = {}, rounds = {}, roofs = {}, first_n = 0, first_ok = 0 }
  for _, r in ipairs(rows) do add_row(m, acc, r) end
  local baselines, rounds = acc.baselines, acc.rounds
  local first_n, first_ok = acc.first_n, acc.first_ok
  m.correctness = ratio(m.correct, m.n)
  m.generalization = generalization(rows)
  -- the headline: each episode's own `speedup` (eager where its task has a PyTorch
  -- reference); m.speedup_over counts what it is against, m.against keeps baselines apart
  m.fast_p = fast_points(rows, "speedup", thresholds)
  m.speedup = speedup_stats(correct_values(rows, "speedup"))
  m.against = against_baselines(rows, m.correct, thresholds)
  m.speedup_baseline = { n = #baselines, geomean = geomean(baselines) }
  m.compile_first = { n = first_n, ok = first_ok, rate = ratio(first_ok, first_n) }
  m.rounds = { n = #rounds, mean = mean(rounds), median = quantile(sorted_copy(rounds), 0.5) }
  m.tokens.total = m.tokens.prompt + m.tokens.completion
  m.tokens.per_solved = ratio(m.tokens.total, m.correct)
  m.dollars.per_solved = ratio(m.dollars.total, m.correct)
  m.gpu_seconds.per_solved = ratio(m.gpu_seconds.total, m.correct)
  local rs = sorted_copy(acc.roofs)
  m.roofline = { n = #rs, mean = mean(rs), median = quantile(rs, 0.5) }
  -- reasoning length (ConCuR: it tracks difficulty): characters per episode that asked a model
  m.reasoning.per_episode = ratio(m.reasoning.chars, m.reasoning.episodes)
  m.gpu_time = M.gpu_time(rows)
  return m
end

local function dim_value(row, dim)
  local v = row[dim]
  if v == nil then return "?" end
  return tostring(v)
end

-- "strategy+model" -> { "strategy", "model" }, or nil, message.
function M.dims(by)
  local dims = {}
  for d in tostring(by):gmatch("[^+]+") do
    if not M.GROUPINGS[d] then return nil, "cannot group by '" .. d .. "' (level, category, strategy, model, task, or several joined by +)" end
    dims[#dims + 1] = d
  end
  if #dims == 0 then return nil, "cannot group by '" .. tostring(by) .. "'" end
  return dims
end

-- The values of a row for the dimensions of a grouping, and the group's key ("repair / m1").
local function group_values(row, dims)
  local vals = {}
  for i, d in ipairs(dims) do vals[i] = dim_value(row, d) end
  return vals, concat(vals, " / ")
end

local function group_value(row, by) return dim_value(row, by) end

-- Group keys in a readable order: numbers by value, then words, "?" last.
local function key_less(a, b)
  if a == "?" or b == "?" then return b == "?" and a ~= "?" end
  local na, nb = tonumber(a), tonumber(b)
  if na and nb then return na < nb end
  if na or nb then return na ~= nil end
  return a < b
end

-- Groups in order: by the first dimension's value, then the next (key_less on each).
local function grouped(rows, by, thresholds)
  local dims = assert(M.dims(by))
  local buckets, keys, vals_of = {}, {}, {}
  for _, r in ipairs(rows) do
    local vals, k = group_values(r, dims)
    if not buckets[k] then buckets[k] = {}; keys[#keys + 1] = k; vals_of[k] = vals end
    insert(buckets[k], r)
  end
  sort(keys, function(a, b)
    local va, vb = vals_of[a], vals_of[b]
    for i = 1, #dims do
      if va[i] ~= vb[i] then return key_less(va[i], vb[i]) end
    end
    return false
  end)
  local groups = {}
  for i, k in ipairs(keys) do groups[i] = { key = k, values = vals_of[k], metrics = M.metrics(buckets[k], thresholds) } end
  return groups, dims
end

----------------------------------------------------------------------------------------
-- pass@k over repeats, the fast_p curve, the per-task map

-- The unbiased pass@k of one task with n attempts of which c passed (Chen et al. 2021,
-- "Evaluating Large Language Models Trained on Code"): 1 - C(n-c, k) / C(n, k), as a
-- product so that large n does not overflow.
function M.pass_at(n, c, k)
  if k > n then return nil end
  if n - c < k then return 1 end
  local p = 1
  for i = n - c + 1, n do p = p * (1 - k / i) end
  return 1 - p
end

-- A small seeded generator (an LCG): the confidence intervals are the same on every run.
local function lcg(seed)
  local state = seed
  return function(n)
    state = (state * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    return (state >> 17) % n + 1
  end
end

M.BOOTSTRAP = 2000

-- pass@k per series: the mean over tasks of each task's pass@k (tasks with at least k
-- repeats), with a 95% percentile bootstrap interval over tasks (M.BOOTSTRAP resamples,
-- seeded). k = 1, 2, 4, ... up to the most repeats any task has.
function M.pass_at_k(series)
  local out = {}
  for _, x in ipairs(series) do
    local per, order = {}, {}
    for _, r in ipairs(x.rows) do
      local t = tostring(r.task)
      if not per[t] then per[t] = { n = 0, c = 0 }; order[#order + 1] = t end
      per[t].n = per[t].n + 1
      if r.correct then per[t].c = per[t].c + 1 end
    end
    local nmax, nmin = 0, huge
    for _, t in ipairs(order) do nmax = max(nmax, per[t].n); nmin = min(nmin, per[t].n) end
    local entry = { key = x.key, label = x.label, strategy = x.strategy, model = x.model, tasks = #order,
      repeats_min = #order > 0 and nmin or 0, repeats_max = nmax, k = {} }
    local k = 1
    while k <= nmax do
      local vals = {}
      for _, t in ipairs(order) do
        local v = M.pass_at(per[t].n, per[t].c, k)
        if v then vals[#vals + 1] = v end
      end
      local est = mean(vals)
      local lo, hi = est, est
      if #vals > 1 then
        local draw, means = lcg(20240601 + k), {}
        for b = 1, M.BOOTSTRAP do
          local sum = 0
          for _ = 1, #vals do sum = sum + vals[draw(#vals)] end
          means[b] = sum / #vals
        end
        sort(means)
        lo, hi = quantile(means, 0.025), quantile(means, 0.975)
      end
      entry.k[#entry.k + 1] = { k = k, tasks = #vals, value = est, lo = lo, hi = hi }
      k = k * 2
    end
    out[#out + 1] = entry
  end
  return out
end

-- The thresholds the fast_p curve is drawn at: 0, then 1/16x to 4x in quarter steps of log2.
M.CURVE_P = { 0 }
for e = -16, 8 do M.CURVE_P[#M.CURVE_P + 1] = 2 ^ (e / 4) end

-- The baselines of M.BASELINES that at least one correct row has a time against.
function M.baselines_with_data(rows)
  local out = {}
  for _, b in ipairs(M.BASELINES) do
    for _, r in ipairs(rows) do
      if r.correct and r[b.field] then out[#out + 1] = b break end
    end
  end
  return out
end

-- fast_p(p) at M.CURVE_P per series and baseline (`baselines`, from baselines_with_data):
-- the share of the series' episodes that are correct and faster than p times that baseline
-- (p = 0: correct). With no baseline (no correct episode has a time) a curve per series
-- with baseline = nil: correctness, then 0.
function M.fast_p_curve(series, baselines)
  local out = {}
  for i, x in ipairs(series) do
    for _, b in ipairs(#baselines > 0 and baselines or { false }) do
      out[#out + 1] = { key = x.key, label = x.label, strategy = x.strategy, model = x.model, series = i,
        baseline = b and b.key or nil, points = fast_points(x.rows, b and b.field or "speedup", M.CURVE_P) }
    end
  end
  return out
end

-- The rows of each (level, series) pair, in level order then series order:
-- { level, series = index, rows, metrics }.
local function level_series(r)
  local cells, levels = {}, {}
  for _, x in ipairs(r.series) do
    for _, row in ipairs(x.rows) do
      local lv = dim_value(row, "level")
      if not cells[lv] then cells[lv] = {}; levels[#levels + 1] = lv end
      cells[lv][x.index] = cells[lv][x.index] or { level = lv, series = x.index, rows = {} }
      insert(cells[lv][x.index].rows, row)
    end
  end
  sort(levels, key_less)
  local out = {}
  for _, lv in ipairs(levels) do
    for i = 1, #r.series do
      local c = cells[lv][i]
      if c then c.metrics = M.metrics(c.rows, r.thresholds); out[#out + 1] = c end
    end
  end
  return out
end

-- The fast_p curves of every (level, series) pair, against each baseline with data.
local function fast_p_curve_by_level(r)
  local out = {}
  for _, c in ipairs(r.level_series) do
    local x = r.series[c.series]
    for _, curve in ipairs(M.fast_p_curve({ { key = x.key, label = x.label, strategy = x.strategy, model = x.model,
        rows = c.rows } }, r.baselines)) do
      curve.level, curve.series = c.level, c.series
      out[#out + 1] = curve
    end
  end
  return out
end

-- The per-task map: a cell per (task, series) with the repeats it holds, how many were
-- correct, the median speedup of the correct ones and the most frequent final status.
function M.heatmap(rows, series)
  local tasks, seen, cells = {}, {}, {}
  for _, r in ipairs(rows) do
    local t = tostring(r.task)
    if not seen[t] then seen[t] = true; tasks[#tasks + 1] = t end
    local key = t .. "\0" .. tostring(r.series)
    local c = cells[key]
    if not c then
      c = { task = t, series = r.series, n = 0, correct = 0, speedups = {}, statuses = {} }
      cells[key] = c
    end
    c.n = c.n + 1
    if r.correct then
      c.correct = c.correct + 1
      if r.speedup then c.speedups[#c.speedups + 1] = r.speedup end
    end
    local st = tostring(r.status or r.episode_status or "?")
    c.statuses[st] = (c.statuses[st] or 0) + 1
  end
  sort(tasks)
  for _, c in pairs(cells) do
    c.speedup = quantile(sorted_copy(c.speedups), 0.5)
    local best, bn = "?", -1
    for st, n in pairs(c.statuses) do
      if n > bn or (n == bn and st < best) then best, bn = st, n end
    end
    c.status = c.correct > 0 and "correct" or best
    c.speedups, c.statuses = nil, nil
  end
  local grid = {}
  for i, t in ipairs(tasks) do
    grid[i] = {}
    for j = 1, #series do grid[i][j] = cells[t .. "\0" .. tostring(j)] end
  end
  return { tasks = tasks, cells = grid }
end

-- The series every chart and the pass@k and matrix tables keep apart: one per (strategy,
-- model) present, labelled by what varies (the strategy alone when there is one model).
local function series_of(rows)
  local strategies, models, seen, list = {}, {}, {}, {}
  for _, r in ipairs(rows) do
    local s, m = dim_value(r, "strategy"), dim_value(r, "model")
    strategies[s], models[m] = true, true
    local k = s .. " / " .. m
    if not seen[k] then seen[k] = { key = k, strategy = s, model = m, rows = {} }; list[#list + 1] = seen[k] end
    insert(seen[k].rows, r)
  end
  local function count(t) local n = 0 for _ in pairs(t) do n = n + 1 end return n end
  local ns, nm = count(strategies), count(models)
  sort(list, function(a, b)
    if a.strategy ~= b.strategy then return key_less(a.strategy, b.strategy) end
    return key_less(a.model, b.model)
  end)
  for i, x in ipairs(list) do
    x.label = (nm <= 1) and x.strategy or (ns <= 1 and x.model) or x.key
    x.index = i
    for _, r in ipairs(x.rows) do r.series = i end
  end
  return list, ns, nm
end

-- Builds the report: { info, episodes, rows, all = metrics, by = { {name, dims, groups}, ... },
-- levels (groups by level), series (one per strategy and model: { key, label, strategy,
-- model, rows, metrics }), thresholds, strategies, models, baselines (those with data),
-- fast_p_curve and fast_p_curve_by_level (per series and baseline), level_series, mixed
-- (the headline speedups are over more than one baseline) }.
-- opts.by: a list of groupings (level, category, strategy, model, task, or several joined
-- by "+"; default M.DEFAULT_BY); opts.fast_p: the thresholds of the fast_p columns.
function M.build(episodes, info, opts)
  opts = opts or {}
  local by = opts.by or M.DEFAULT_BY
  for _, b in ipairs(by) do
    local ok, why = M.dims(b)
    if not ok then error("report.build: " .. why, 2) end
  end
  local th = M.thresholds(opts.fast_p)
  -- tasks kmrun tasks lint flagged are left out unless asked (opts.include_degenerate):
  -- their verdicts (an all-zeros kernel may pass) say nothing about the kernels
  local rows, deg = {}, { episodes = 0, tasks = {}, reasons = {}, included = opts.include_degenerate == true }
  local seen_task = {}
  for _, ep in ipairs(episodes) do
    local row = row_of(ep)
    if row.lint_flagged then
      deg.episodes = deg.episodes + 1
      if not seen_task[row.task] then
        seen_task[row.task] = true
        deg.tasks[#deg.tasks + 1] = tostring(row.task)
        for _, why in ipairs(row.lint_reasons) do deg.reasons[why] = (deg.reasons[why] or 0) + 1 end
      end
    end
    if not row.lint_flagged or deg.included then rows[#rows + 1] = row end
  end
  sort(deg.tasks)
  local r = { info = info or {}, episodes = #rows, degenerate = deg, rows = rows, all = M.metrics(rows, th), by = {}, thresholds = th,
    asked_thresholds = opts.fast_p or M.FAST_P }
  for i, b in ipairs(by) do
    local groups, dims = grouped(rows, b, th)
    r.by[i] = { name = b, dims = dims, groups = groups }
  end
  r.levels = grouped(rows, "level", th)
  local nstrat, nmodel
  r.series, nstrat, nmodel = series_of(rows)
  r.strategies, r.models = nstrat, nmodel
  for _, x in ipairs(r.series) do x.metrics = M.metrics(x.rows, th) end
  r.pass_at_k = M.pass_at_k(r.series)
  r.baselines = M.baselines_with_data(rows)
  r.fast_p_curve = M.fast_p_curve(r.series, r.baselines)
  r.level_series = level_series(r)
  r.fast_p_curve_by_level = fast_p_curve_by_level(r)
  -- the headline speedup pools episodes timed against different baselines: say so
  local overs = 0
  for _ in pairs(r.all.speedup_over) do overs = overs + 1 end
  r.mixed = overs > 1
  r.heatmap = M.heatmap(rows, r.series)
  return r
end

-- for the other report modules
M.finite, M.num, M.sorted_copy, M.ratio = finite, num, sorted_copy, ratio
M.BASELINE_OF_OVER, M.key_less, M.group_value = BASELINE_OF_OVER, key_less, group_value

return M
