-- km.report — what a sweep achieved, from its trajectory stores.
--
--   local report = require "km.report"
--   local eps, info = assert(report.load { "runs/a.sqlite", "runs/b.sqlite" })
--   local r = report.build(eps, info, { by = { "level", "category" } })
--   io.write(report.text(r))          -- aligned table, a row per group and an "all" row
--   io.write(report.json(r), "\n")    -- the same numbers, null where undefined
--   io.write(report.html(r))          -- self-contained page: table + four inline SVG charts
--
-- The unit is the final episode of each (task, strategy, model, seed): when a key appears more
-- than once (re-runs, several files), the one that started last counts. Metrics follow
-- KernelBench where it defines them (fast_p); docs/report.md defines every number.
local M = {}

local json = require "km.json"
local cli = require "km.cli"
local statuses = require "km.statuses"

local fmt, concat, sort, insert = string.format, table.concat, table.sort, table.insert
local floor, ceil, log, exp, huge = math.floor, math.ceil, math.log, math.exp, math.huge
local max, min, abs = math.max, math.min, math.abs
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

----------------------------------------------------------------------------------------
-- loading

local function key_of(ep)
  return concat({ tostring(ep.task), tostring(ep.strategy), tostring(ep.model), tostring(ep.rep) }, "\0")
end

-- The judge's stages (km.judge: verdict.stage_seconds), in the order they run.
M.STAGES = { "task", "prepare", "baselines", "verify", "measure", "energy" }
local STAGE = {}
for _, k in ipairs(M.STAGES) do STAGE[k] = true end

-- Where one episode's GPU time went, from its verdict steps: judged (verdicts that came from
-- the judge: they carry eval_seconds or stage_seconds; a compile-only or no-candidate verdict
-- does not), recorded (of those, the ones with stage_seconds: stores from before the field
-- have none), stages (seconds per stage, summed over the recorded ones), kernel (the
-- candidates' own timed GPU seconds, verdict.kernel_seconds), timed (verdicts with it) and
-- samples (the timed samples behind those seconds).
local function eval_cost(steps)
  local c = { judged = 0, recorded = 0, stages = {}, kernel = 0, timed = 0, samples = 0 }
  for _, st in ipairs(steps or {}) do
    local v = st.kind == "verdict" and type(st.payload) == "table" and st.payload or nil
    if v and type(v.verdict) == "table" then v = v.verdict end
    local ss = v and type(v.stage_seconds) == "table" and v.stage_seconds or nil
    if v and (ss or finite(v.eval_seconds)) then
      c.judged = c.judged + 1
      if ss then
        c.recorded = c.recorded + 1
        for _, k in ipairs(M.STAGES) do
          if finite(ss[k]) then c.stages[k] = (c.stages[k] or 0) + ss[k] end
        end
        for k, x in pairs(ss) do -- a stage a later judge adds
          if not STAGE[k] and type(k) == "string" and finite(x) then c.stages[k] = (c.stages[k] or 0) + x end
        end
        if finite(v.kernel_seconds) then
          c.kernel, c.timed = c.kernel + v.kernel_seconds, c.timed + 1
          local cand = type(v.timing) == "table" and type(v.timing.candidate) == "table" and v.timing.candidate
          if cand and finite(cand.n) then c.samples = c.samples + cand.n end
        end
      end
    end
  end
  return c
end

-- Reads the episodes of every file; keeps the final episode per (task, strategy, model, seed).
-- Returns the list (ordered by task, strategy, model, seed) and
-- info = { files, runs, read, superseded, unfinished, notes }, or nil, message, CODE (NOT_FOUND,
-- NOT_A_STORE or the store's code) naming the file. Each file is checked first (km.cli:
-- damaged pages, not a kmrun store); rows whose stored JSON does not parse are left out,
-- and info.notes says so, one line per file. Each kept episode's verdict steps are read for
-- its GPU time (ep.cost, eval_cost above); an episode whose steps cannot be read has none.
function M.load(paths)
  if type(paths) == "string" then paths = { paths } end
  if type(paths) ~= "table" then error("report.load: expected a list of paths", 2) end
  local info = { files = {}, runs = 0, read = 0, superseded = 0, unfinished = 0, notes = {} }
  local latest, order, dbs = {}, 0, {}
  local function close_all() for _, db in ipairs(dbs) do db:close() end end
  for fi, path in ipairs(paths) do
    local db, err, code = cli.open_store(path)
    if not db then close_all() return nil, err, code end
    dbs[fi] = db
    info.files[#info.files + 1] = path
    local runs, rskipped, rcode = cli.read_list(db, path, "runs")
    if not runs then close_all() return nil, rskipped, rcode end
    local episodes, skipped, ecode = cli.read_list(db, path, "episodes")
    if not episodes then close_all() return nil, skipped, ecode end
    if #rskipped > 0 then info.notes[#info.notes + 1] = cli.skipped_note(path, rskipped, "run(s)") end
    if #skipped > 0 then info.notes[#info.notes + 1] = cli.skipped_note(path, skipped, "episode(s)") end
    info.runs = info.runs + #runs
    for _, ep in ipairs(episodes) do
      info.read = info.read + 1
      order = order + 1
      if statuses.prop(ep.status, "unfinished") then
        info.unfinished = info.unfinished + 1
      else
        ep.file, ep.order, ep.file_index = path, order, fi
        local k = key_of(ep)
        local prev = latest[k]
        if not prev then
          latest[k] = ep
        else
          info.superseded = info.superseded + 1
          local a, b = prev.started_at or 0, ep.started_at or 0
          if b > a or (b == a and ep.order > prev.order) then latest[k] = ep end
        end
      end
    end
  end
  local list = {}
  for _, ep in pairs(latest) do list[#list + 1] = ep end
  sort(list, function(a, b) return key_of(a) < key_of(b) end)
  -- the GPU time of the episodes that count (their steps; the others are never read). An
  -- episode whose steps do not parse keeps no cost: its group's GPU time is "partly recorded"
  -- and says how many (the episode itself still counts).
  for _, ep in ipairs(list) do
    local full = dbs[ep.file_index]:episode(ep.id)
    if full then ep.cost = eval_cost(full.steps) end
  end
  close_all()
  return list, info
end

----------------------------------------------------------------------------------------
-- metrics

-- One episode reduced to what the metrics read; the summary is what km.runner wrote, with
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
    -- the model's side (km.model): requests, cut-off replies, reasoning, errors
    requests = num(s.requests) or 0, model_calls = num(s.model_calls) or 0, truncated = num(s.truncated) or 0,
    reasoning_chars = num(s.reasoning_chars) or 0, reasoning_tokens = tok.reasoning and num(tok.reasoning) or 0,
    model_errors = type(s.model_errors) == "table" and s.model_errors or {},
    -- the task's lint (km.lint.brief) and the shape set the final verdict failed at
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

function M.metrics(rows, thresholds)
  thresholds = thresholds or M.thresholds()
  local m = { n = #rows, correct = 0, status = {}, failure_modes = {},
    tokens = { prompt = 0, completion = 0, reasoning = 0 }, dollars = { total = 0 }, gpu_seconds = { total = 0 },
    seconds_total = 0, requests = 0, truncated = 0, model_calls = 0, model_errors = {},
    reasoning = { chars = 0, episodes = 0 }, speedup_over = {}, compile_modes = {} }
  local baselines, rounds, roofs = {}, {}, {}
  local first_n, first_ok = 0, 0
  for _, r in ipairs(rows) do
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
      first_n = first_n + 1
      if r.compile_ok_first then first_ok = first_ok + 1 end
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
      if r.speedup_baseline and r.speedup_baseline > 0 then baselines[#baselines + 1] = r.speedup_baseline end
      if r.rounds then rounds[#rounds + 1] = r.rounds end
      if r.roofline then roofs[#roofs + 1] = r.roofline end
    end
  end
  m.correctness = ratio(m.correct, m.n)
  -- the generalization gap: of the episodes whose final candidate passed the first (timed)
  -- shape, the share that failed a later one (for a problem file, its held-out shape)
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
  m.generalization = g
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
  local rs = sorted_copy(roofs)
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

----------------------------------------------------------------------------------------
-- JSON

local NULL = json.null
local function N(x) if finite(x) then return x end return NULL end

local function fast_json(pts)
  local fp = {}
  for _, f in ipairs(pts) do fp[fmt("%g", f.p)] = N(f.value) end
  return fp
end

local function speedup_json(x)
  return { n = x.n, geomean = N(x.geomean), median = N(x.median), p10 = N(x.p10), p90 = N(x.p90), min = N(x.min),
    max = N(x.max) }
end

local function points_json(points)
  local pts = json.array {}
  for j, pt in ipairs(points) do pts[j] = json.array { pt.p, N(pt.value) } end
  return pts
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

local function gpu_time_json(g)
  local st = {}
  for _, k in ipairs(M.STAGES) do st[k] = NULL end
  for k, x in pairs(g.stages or {}) do st[k] = N(x) end
  return { state = M.gpu_time_state(g), judged = g.judged, recorded = g.recorded, timed = g.timed,
    episodes_unread = g.unread, stage_seconds = st, seconds = N(g.seconds), kernel_seconds = N(g.kernel),
    measure_over_kernel = N(g.measure_over_kernel), stages_over_kernel = N(g.stages_over_kernel),
    evals_per_gpu_hour = N(g.evals_per_gpu_hour) }
end

local function metrics_json(m, key)
  local against = {}
  for k, a in pairs(m.against) do
    against[k] = { fast_p = fast_json(a.fast_p), speedup = speedup_json(a.speedup), timed = a.timed, untimed = a.untimed }
  end
  local o = {
    n = m.n, correct = m.correct, correctness = N(m.correctness), status = json.object(m.status),
    fast_p = fast_json(m.fast_p), speedup = speedup_json(m.speedup), against = against,
    speedup_over = json.object(m.speedup_over), compile_modes = json.object(m.compile_modes),
    speedup_baseline = { n = m.speedup_baseline.n, geomean = N(m.speedup_baseline.geomean) },
    compile_first = { n = m.compile_first.n, ok = m.compile_first.ok, rate = N(m.compile_first.rate) },
    rounds = { n = m.rounds.n, mean = N(m.rounds.mean), median = N(m.rounds.median) },
    tokens = { prompt = m.tokens.prompt, completion = m.tokens.completion, total = m.tokens.total,
      per_solved = N(m.tokens.per_solved) },
    dollars = { total = N(m.dollars.total), per_solved = N(m.dollars.per_solved) },
    gpu_seconds = { total = N(m.gpu_seconds.total), per_solved = N(m.gpu_seconds.per_solved) },
    seconds_total = N(m.seconds_total),
    failure_modes = json.object(m.failure_modes),
    roofline = { n = m.roofline.n, mean = N(m.roofline.mean), median = N(m.roofline.median) },
    requests = m.requests, model_calls = m.model_calls, truncated = m.truncated,
    reasoning = { chars = m.reasoning.chars, per_episode = N(m.reasoning.per_episode), tokens = m.tokens.reasoning },
    model_errors = json.object(m.model_errors),
    generalization = { passed_first = m.generalization.passed_first, failed_later = m.generalization.failed_later,
      failed_heldout = m.generalization.failed_heldout, gap = N(m.generalization.gap) },
    gpu_time = gpu_time_json(m.gpu_time),
  }
  if key then o.group = key end
  return o
end

-- The report as one JSON object (sorted keys; undefined numbers are null).
function M.json(r, opts)
  local by = {}
  for _, b in ipairs(r.by) do
    local list = json.array {}
    for i, g in ipairs(b.groups) do
      list[i] = metrics_json(g.metrics, g.key)
      local keys = {}
      for j, d in ipairs(b.dims) do keys[d] = g.values[j] end
      list[i].keys = keys
    end
    by[b.name] = list
  end
  local series = json.array {}
  for i, x in ipairs(r.series) do
    series[i] = metrics_json(x.metrics, x.key)
    series[i].strategy, series[i].model, series[i].label = x.strategy, x.model, x.label
  end
  local pk = json.array {}
  for i, e in ipairs(r.pass_at_k) do
    local ks = json.array {}
    for j, x in ipairs(e.k) do ks[j] = { k = x.k, tasks = x.tasks, value = N(x.value), lo = N(x.lo), hi = N(x.hi) } end
    pk[i] = { strategy = e.strategy, model = e.model, tasks = e.tasks, repeats_min = e.repeats_min,
      repeats_max = e.repeats_max, k = ks }
  end
  local curve, by_level = json.array {}, json.array {}
  for i, c in ipairs(r.fast_p_curve) do
    curve[i] = { strategy = c.strategy, model = c.model, baseline = c.baseline or NULL, points = points_json(c.points) }
  end
  for i, c in ipairs(r.fast_p_curve_by_level) do
    by_level[i] = { level = c.level, strategy = c.strategy, model = c.model, baseline = c.baseline or NULL,
      points = points_json(c.points) }
  end
  local baselines = json.array {}
  for i, b in ipairs(r.baselines) do baselines[i] = b.key end
  local map = json.array {}
  for i, t in ipairs(r.heatmap.tasks) do
    for j, x in ipairs(r.series) do
      local c = r.heatmap.cells[i][j]
      if c then
        map[#map + 1] = { task = t, strategy = x.strategy, model = x.model, repeats = c.n, correct = c.correct,
          status = c.status, speedup = N(c.speedup) }
      end
    end
  end
  local info = r.info
  local o = {
    files = json.array { table.unpack(info.files or {}) },
    episodes = r.episodes,
    left_out = { superseded = info.superseded or 0, unfinished = info.unfinished or 0,
      degenerate = (r.degenerate and not r.degenerate.included) and r.degenerate.episodes or 0 },
    degenerate = r.degenerate and { episodes = r.degenerate.episodes, included = r.degenerate.included,
      tasks = json.array { table.unpack(r.degenerate.tasks) }, reasons = json.object(r.degenerate.reasons) } or NULL,
    generalization_by_level = (function()
      local list = json.array {}
      for _, g in ipairs(r.levels or {}) do
        local x = g.metrics.generalization
        list[#list + 1] = { level = g.key, passed_first = x.passed_first, failed_later = x.failed_later,
          failed_heldout = x.failed_heldout, gap = N(x.gap) }
      end
      return list
    end)(),
    runs = info.runs or 0,
    fast_p_thresholds = json.array { table.unpack(r.thresholds or M.FAST_P) },
    all = metrics_json(r.all, "all"),
    by = json.object(by),
    series = series,
    pass_at_k = pk,
    fast_p_curve = curve,
    fast_p_curve_by_level = by_level,
    baselines = baselines,
    mixed_speedups = r.mixed,
    task_map = map,
  }
  return json.encode(o, { pretty = opts and opts.pretty, nan = "null" })
end

----------------------------------------------------------------------------------------
-- terminal

local function pct(x) return x and fmt("%.1f%%", 100 * x) or "-" end
local function times(x) return x and fmt("%.2fx", x) or "-" end

local function human(x)
  if not x then return "-" end
  local a = abs(x)
  if a >= 1e9 then return fmt("%.1fG", x / 1e9) end
  if a >= 1e6 then return fmt("%.1fM", x / 1e6) end
  if a >= 1e4 then return fmt("%.0fk", x / 1e3) end
  if a >= 1e3 then return fmt("%.1fk", x / 1e3) end
  if x == floor(x) then return fmt("%d", floor(x)) end
  return fmt("%.1f", x)
end

local function dollars(x)
  if not x then return "-" end
  if x == 0 then return "$0" end
  if abs(x) < 0.01 then return fmt("$%.4f", x) end
  return fmt("$%.2f", x)
end

local function point_at(pts, p)
  for _, f in ipairs(pts) do if f.p == p then return f.value end end
end

local function fast_of(m, p) return point_at(m.fast_p, p) end

-- "eager" / "CUDA ref" for a speedup_over value (an unknown one as it is).
local function over_name(over, long)
  local b = BASELINE_OF_OVER[over]
  return b and (long and b.label or b.short) or tostring(over)
end

-- The speedup_over values of a metrics group, in M.BASELINES order, then unknown ones.
local function overs_of(m)
  local list, seen = {}, {}
  for _, b in ipairs(M.BASELINES) do
    if b.over and m.speedup_over[b.over] then list[#list + 1] = b.over; seen[b.over] = true end
  end
  local rest = {}
  for o in pairs(m.speedup_over) do if not seen[o] then rest[#rest + 1] = o end end
  sort(rest)
  for _, o in ipairs(rest) do list[#list + 1] = o end
  return list
end

-- The table's columns after the group's: header, cell(metrics); the fast_p columns (one
-- per threshold asked for) go after "correct" (see columns()).
M.COLUMNS = {
  { "n", function(m) return tostring(m.n) end },
  { "correct", function(m) return fmt("%d (%s)", m.correct, pct(m.correctness)) end },
  { "geomean", function(m) return times(m.speedup.geomean) end },
  { "median", function(m) return times(m.speedup.median) end },
  { "p10", function(m) return times(m.speedup.p10) end },
  { "p90", function(m) return times(m.speedup.p90) end },
  { "compile@1", function(m) return pct(m.compile_first.rate) end },
  { "rounds", function(m) return m.rounds.mean and fmt("%.2f", m.rounds.mean) or "-" end },
  { "reasoning", function(m) return m.reasoning.chars > 0 and human(m.reasoning.per_episode) or "-" end },
  { "tokens/ok", function(m) return human(m.tokens.per_solved) end },
  { "$/ok", function(m) return dollars(m.dollars.per_solved) end },
  { "gpu_s/ok", function(m) return m.gpu_seconds.per_solved and fmt("%.2f", m.gpu_seconds.per_solved) or "-" end },
  { "roofline", function(m)
      if not m.roofline.mean then return "-" end
      return fmt("%.0f%%/%.0f%%", 100 * m.roofline.mean, 100 * m.roofline.median)
    end },
  { "evals/GPU-h", function(m) local x = m.gpu_time.evals_per_gpu_hour return x and fmt("%.0f", x) or "-" end },
  { "measure/kernel", function(m) return times(m.gpu_time.measure_over_kernel) end },
}

-- What a group's headline speedups are against: "eager", "CUDA ref", "eager 4 + CUDA ref 1".
local function vs_cell(m)
  local list = overs_of(m)
  if #list <= 1 then return list[1] and over_name(list[1]) or "-" end
  for i, o in ipairs(list) do list[i] = fmt("%s %d", over_name(o), m.speedup_over[o]) end
  return concat(list, " + ")
end

-- The baseline the headline speedup and fast_p columns are over, for a header: "eager",
-- "CUDA ref"; "vs" when they pool several (the vs column names it per row); nil for none.
local function headline_over(r)
  if not r then return nil end
  if r.mixed then return "vs" end
  local list = overs_of(r.all)
  return list[1] and over_name(list[1]) or nil
end

-- "fast_1(eager)": a fast_p column header that names the baseline p multiplies.
local function fast_head(r, p)
  local over = headline_over(r)
  return over and fmt("fast_%g(%s)", p, over) or fmt("fast_%g", p)
end

-- The columns of a report's tables: M.COLUMNS with fast_<p> for each threshold asked for,
-- and "vs" when the headline speedups are over more than one baseline (r.mixed).
local function columns(r)
  local cols = { M.COLUMNS[1], M.COLUMNS[2] }
  if r and r.mixed then cols[#cols + 1] = { "vs", vs_cell } end
  for _, p in ipairs(r and r.asked_thresholds or M.FAST_P) do
    if p ~= 0 then
      cols[#cols + 1] = { fast_head(r, p), function(m) return pct(fast_of(m, p)) end }
    end
  end
  for i = 3, #M.COLUMNS do cols[#cols + 1] = M.COLUMNS[i] end
  return cols
end

-- Rows of cells for one grouping (b = { name, dims, groups }, or nil for the overall row
-- alone): a column per dimension, then the metrics; the last row is "all". Also returns
-- how many leading columns are labels (left-aligned).
local function table_cells(r, b)
  local dims = b and b.dims or { "group" }
  local cols = columns(r)
  local head = {}
  for i, d in ipairs(dims) do head[i] = d end
  for _, c in ipairs(cols) do head[#head + 1] = c[1] end
  local cells = { head }
  local function add(values, m)
    local row = {}
    for i = 1, #dims do row[i] = values[i] or "" end
    for _, c in ipairs(cols) do row[#row + 1] = c[2](m) end
    cells[#cells + 1] = row
  end
  for _, g in ipairs(b and b.groups or {}) do add(g.values or { g.key }, g.metrics) end
  add({ "all" }, r.all)
  return cells, #dims
end

local function align(cells, left)
  left = left or 1
  local w = {}
  for _, row in ipairs(cells) do
    for j, c in ipairs(row) do w[j] = max(w[j] or 0, #c) end
  end
  local out = {}
  for i, row in ipairs(cells) do
    local parts = {}
    for j, c in ipairs(row) do
      parts[j] = j <= left and (c .. (" "):rep(w[j] - #c)) or ((" "):rep(w[j] - #c) .. c)
    end
    out[#out + 1] = concat(parts, "  ")
    if i == 1 then
      local rule = {}
      for j = 1, #row do rule[j] = ("-"):rep(w[j]) end
      out[#out + 1] = concat(rule, "  ")
    end
  end
  return concat(out, "\n") .. "\n"
end

local function modes_line(fm)
  local ks = {}
  for k in pairs(fm) do ks[#ks + 1] = k end
  sort(ks, function(a, b) if fm[a] ~= fm[b] then return fm[a] > fm[b] end return a < b end)
  local parts = {}
  for i, k in ipairs(ks) do parts[i] = fmt("%s %d", k, fm[k]) end
  return #parts > 0 and concat(parts, ", ") or "-"
end

-- seconds as the GPU-time lines print them
local function secs(x)
  if not x then return "-" end
  return fmt(abs(x) < 9.995 and "%.2f" or "%.1f", x) -- 9.999... is "10.0", not "10.00"
end

-- One line for the header: where the judged evaluations' GPU time went, or why that is unknown.
local function gpu_time_line(g)
  local state = M.gpu_time_state(g)
  if state == "no GPU evaluations" then return "GPU time: no evaluation was judged on a GPU" end
  if state == "not recorded" then
    return fmt("GPU time: not recorded (%d judged evaluation(s) without stage_seconds and kernel_seconds: written " ..
      "before verdicts carried them)", g.judged)
  end
  local line = fmt("GPU time: %s s in the judge's stages over %d evaluation(s) (%s per GPU-hour)", secs(g.seconds),
    g.recorded, g.evals_per_gpu_hour and fmt("%.0f", g.evals_per_gpu_hour) or "-")
  if g.kernel then
    line = line .. fmt("; the candidates' own timed kernels %s s over %d: harness overhead measure/kernel %s, " ..
      "all stages/kernel %s", secs(g.kernel), g.timed, times(g.measure_over_kernel), times(g.stages_over_kernel))
  else
    line = line .. "; no candidate was timed"
  end
  if state == "partly recorded" then
    local parts = {}
    if g.recorded < g.judged then parts[#parts + 1] = fmt("recorded for %d of %d judged evaluation(s)", g.recorded, g.judged) end
    if g.unread > 0 then parts[#parts + 1] = fmt("%d episode(s) whose steps could not be read", g.unread) end
    line = line .. " (" .. concat(parts, "; ") .. ")"
  end
  return line
end

-- GPU time by stage: a row per series and one for all. raw: numbers (CSV), else text.
local function gpu_cells(r, raw)
  local head = { "strategy", "model", "judged", "recorded" }
  for _, k in ipairs(M.STAGES) do head[#head + 1] = raw and ("stage_seconds_" .. k) or k end
  for _, h in ipairs(raw and { "seconds", "kernel_seconds", "measure_over_kernel", "stages_over_kernel",
    "evals_per_gpu_hour", "state" } or { "stages", "kernel", "measure/kernel", "stages/kernel", "evals/GPU-h" }) do
    head[#head + 1] = h
  end
  local cells = { head }
  local function add(strategy, model, g)
    -- a value not recorded stays nil at its own index (an empty CSV cell), so later ones keep their column
    local state, st = M.gpu_time_state(g), g.stages or {}
    local vals = { g.judged, g.recorded }
    for i, k in ipairs(M.STAGES) do vals[2 + i] = st[k] end
    local n = 2 + #M.STAGES
    vals[n + 1], vals[n + 2], vals[n + 3], vals[n + 4], vals[n + 5] = g.seconds, g.kernel, g.measure_over_kernel,
      g.stages_over_kernel, g.evals_per_gpu_hour
    local row = { strategy, model }
    for i = 1, n + 5 do
      local x = vals[i]
      if raw then row[2 + i] = x
      elseif i <= 2 then row[2 + i] = tostring(x)
      elseif i <= n + 2 then row[2 + i] = secs(x)
      elseif i <= n + 4 then row[2 + i] = times(x)
      else row[2 + i] = x and fmt("%.0f", x) or "-" end
    end
    if raw then row[n + 8] = state
    elseif state == "not recorded" then row[4] = "0 (not recorded)" end
    cells[#cells + 1] = row
  end
  for _, x in ipairs(r.series) do add(x.strategy, x.model, x.metrics.gpu_time) end
  add("all", "", r.all.gpu_time)
  return cells
end

M.GPU_TIME_NOTE = "seconds summed over the judged evaluations' stages (km.judge's stage_seconds); kernel: the " ..
  "candidates' own timed GPU seconds (kernel_seconds); measure/kernel and stages/kernel: harness overhead; " ..
  "evals/GPU-h: evaluations per hour of summed stage seconds (one GPU kept busy)"

-- What the headline speedup and fast_p are against, and which baselines fast_p is also
-- given against; a warning when the headline pools several baselines.
local function baseline_lines(r)
  local m, parts = r.all, {}
  for i, o in ipairs(overs_of(m)) do
    parts[i] = fmt(i == 1 and "%s (%d timed correct episode(s))" or "%s (%d)", over_name(o, true), m.speedup_over[o])
  end
  local lines = {}
  if #parts == 0 then
    lines[1] = "speedups: no correct episode has a time; fast_p > 0 is 0 against every baseline"
  else
    lines[1] = "speedup, fast_p and geomean columns against " .. concat(parts, ", ")
  end
  if r.mixed then
    lines[#lines + 1] = "warning: those columns pool episodes timed against different baselines (column vs says which per " ..
      "row); \"fast_p against each baseline\" keeps them apart"
  end
  local names = {}
  for _, b in ipairs(r.baselines) do
    local a = m.against[b.key]
    local modes = {}
    if b.key == "compile" then
      local ks = {}
      for k in pairs(m.compile_modes) do ks[#ks + 1] = k end
      sort(ks)
      for i, k in ipairs(ks) do modes[i] = fmt("%s %d", k, m.compile_modes[k]) end
    end
    names[#names + 1] = fmt("%s (%d timed, %d correct without a time%s)", b.label, a.timed, a.untimed,
      #modes > 0 and ("; mode " .. concat(modes, ", ")) or "")
  end
  if #names > 0 then lines[#lines + 1] = "fast_p per baseline (its own table): " .. concat(names, "; ") end
  return lines
end

local function header_lines(r)
  local info = r.info
  local lines = { fmt("kmrun report: %d episode(s) from %d file(s), %d run(s)", r.episodes,
    #(info.files or {}), info.runs or 0) }
  local notes = {}
  if (info.superseded or 0) > 0 then notes[#notes + 1] = fmt("%d earlier attempt(s) of the same task/strategy/model/repeat", info.superseded) end
  if (info.unfinished or 0) > 0 then notes[#notes + 1] = fmt("%d unfinished (still running or killed)", info.unfinished) end
  local deg = r.degenerate
  if deg and deg.episodes > 0 then
    local reasons = {}
    for why, n in pairs(deg.reasons) do reasons[#reasons + 1] = fmt("%s %d", why, n) end
    sort(reasons)
    local text = fmt("%d episode(s) of %d task(s) that kmrun tasks lint flagged (%s: %s)", deg.episodes, #deg.tasks,
      concat(reasons, ", "), concat(deg.tasks, " "))
    if deg.included then lines[#lines + 1] = "included: " .. text
    else notes[#notes + 1] = text .. "; --include-degenerate counts them" end
  end
  if #notes > 0 then lines[#lines + 1] = "left out: " .. concat(notes, "; ") end
  local compiled = r.all.status.compiled or 0
  if compiled > 0 then
    lines[#lines + 1] = fmt("note: %d episode(s) were compile-only (no GPU); they count as not correct", compiled)
  end
  for _, l in ipairs(baseline_lines(r)) do lines[#lines + 1] = l end
  lines[#lines + 1] = gpu_time_line(r.all.gpu_time)
  return lines
end

-- The strategy x model table: a row per strategy, a column per model; each cell holds
-- correct %, fast_1 and the geomean speedup of that pair.
local function matrix_cells(r)
  local strategies, models, cell, seen_s, seen_m = {}, {}, {}, {}, {}
  for _, x in ipairs(r.series) do
    if not seen_s[x.strategy] then seen_s[x.strategy] = true; strategies[#strategies + 1] = x.strategy end
    if not seen_m[x.model] then seen_m[x.model] = true; models[#models + 1] = x.model end
    cell[x.strategy .. "\0" .. x.model] = x.metrics
  end
  sort(models, key_less)
  local cells = { { "strategy \\ model" } }
  for _, m in ipairs(models) do cells[1][#cells[1] + 1] = m end
  for _, st in ipairs(strategies) do
    local row = { st }
    for _, m in ipairs(models) do
      local x = cell[st .. "\0" .. m]
      row[#row + 1] = x and fmt("%s %s %s", pct(x.correctness), pct(fast_of(x, 1)), times(x.speedup.geomean)) or "-"
    end
    cells[#cells + 1] = row
  end
  return cells
end

-- fast_p against each baseline with data: a row per (level, strategy, model) and baseline,
-- then per (strategy, model) over all levels, then over everything ("all"). raw: numbers
-- and baseline keys (CSV), else text.
local function baseline_cells(r, raw)
  local head = raw and { "level", "strategy", "model", "baseline", "n", "correct", "timed", "untimed" }
    or { "level", "strategy", "model", "vs", "n", "correct", "timed", "no time" }
  local asked = {}
  for _, p in ipairs(r.asked_thresholds) do if p ~= 0 then asked[#asked + 1] = p end end
  for _, p in ipairs(asked) do head[#head + 1] = fmt("fast_%g", p) end
  head[#head + 1] = raw and "speedup_geomean" or "geomean"
  head[#head + 1] = raw and "speedup_median" or "median"
  local frac, count, sp = pct, tostring, times
  if raw then frac, count, sp = num, num, num end
  local cells = { head }
  local function add(level, strategy, model, m)
    for _, b in ipairs(r.baselines) do
      local a = m.against[b.key]
      local row = { level, strategy, model, raw and b.key or b.short, count(m.n), count(m.correct), count(a.timed),
        count(a.untimed) }
      for _, p in ipairs(asked) do row[#row + 1] = frac(point_at(a.fast_p, p)) end
      row[#row + 1], row[#row + 2] = sp(a.speedup.geomean), sp(a.speedup.median)
      cells[#cells + 1] = row
    end
  end
  for _, c in ipairs(r.level_series) do
    local x = r.series[c.series]
    add(c.level, x.strategy, x.model, c.metrics)
  end
  for _, x in ipairs(r.series) do add("all", x.strategy, x.model, x.metrics) end
  add("all", "", "", r.all)
  return cells
end

M.BASELINE_NOTE = "share of all episodes correct and faster than p x that baseline; timed: correct episodes " ..
  "with a time against it; no time: correct ones without (they count in fast_0 only)"

local function interval(e)
  if not e.value then return "-" end
  if e.lo == e.value and e.hi == e.value then return fmt("%.1f%%", 100 * e.value) end
  return fmt("%.1f%% [%.1f, %.1f]", 100 * e.value, 100 * e.lo, 100 * e.hi)
end

-- pass@k: a row per series; a column per k.
local function pass_cells(r)
  local kmax = 0
  for _, e in ipairs(r.pass_at_k) do for _, x in ipairs(e.k) do kmax = max(kmax, x.k) end end
  local head = { "strategy", "model", "tasks", "repeats" }
  local k = 1
  while k <= kmax do head[#head + 1] = fmt("pass@%d", k); k = k * 2 end
  local cells = { head }
  for _, e in ipairs(r.pass_at_k) do
    local row = { e.strategy, e.model, tostring(e.tasks),
      e.repeats_min == e.repeats_max and tostring(e.repeats_max) or fmt("%d-%d", e.repeats_min, e.repeats_max) }
    local by_k = {}
    for _, x in ipairs(e.k) do by_k[x.k] = x end
    k = 1
    while k <= kmax do
      local x = by_k[k]
      row[#row + 1] = x and interval(x) or "-"
      k = k * 2
    end
    cells[#cells + 1] = row
  end
  return cells
end

-- The report as aligned text tables: one per grouping, each with an "all" row; the
-- strategy x model table and pass@k over repeats after them.
function M.text(r)
  local out = { concat(header_lines(r), "\n"), "\n" }
  for _, b in ipairs(r.by) do
    out[#out + 1] = "\n"
    out[#out + 1] = align(table_cells(r, b))
  end
  if #r.by == 0 then
    out[#out + 1] = "\n"
    out[#out + 1] = align(table_cells(r, nil))
  end
  if #r.series > 0 then
    local over = headline_over(r)
    out[#out + 1] = fmt("\nstrategy x model (correct, fast_1, geomean speedup%s):\n",
      over == "vs" and "; over the baselines of the vs column above" or over and (" over " .. over) or "")
    out[#out + 1] = align(matrix_cells(r))
    out[#out + 1] = "\npass@k over repeats (mean over tasks of the unbiased estimate; 95% bootstrap interval over tasks):\n"
    out[#out + 1] = align(pass_cells(r), 2)
  end
  if #r.baselines > 0 then
    out[#out + 1] = "\nfast_p against each baseline (" .. M.BASELINE_NOTE .. "):\n"
    out[#out + 1] = align(baseline_cells(r), 4)
  end
  if M.gpu_time_state(r.all.gpu_time) ~= "no GPU evaluations" then
    out[#out + 1] = "\nGPU time by stage (" .. M.GPU_TIME_NOTE .. "):\n"
    out[#out + 1] = align(gpu_cells(r), 2)
  end
  local gen = {}
  for _, g in ipairs(r.levels or {}) do
    local x = g.metrics.generalization
    if x.passed_first > 0 then
      gen[#gen + 1] = fmt("  level %-4s %4d passed the timed shape, %d failed a later one (%s)%s\n", tostring(g.key),
        x.passed_first, x.failed_later, pct(x.gap), x.failed_heldout > 0 and fmt(", %d at the held-out shape", x.failed_heldout) or "")
    end
  end
  if #gen > 0 then
    out[#out + 1] = "\ngeneralization gap (final candidates that passed the timed shape and failed another):\n"
    for _, l in ipairs(gen) do out[#out + 1] = l end
  end
  out[#out + 1] = "\nfailure modes (every verdict met on the way, summed):\n"
  local cells = {}
  for _, x in ipairs(r.series) do cells[#cells + 1] = { x.key, modes_line(x.metrics.failure_modes) } end
  cells[#cells + 1] = { "all", modes_line(r.all.failure_modes) }
  local w = 0
  for _, c in ipairs(cells) do w = max(w, #c[1]) end
  for _, c in ipairs(cells) do out[#out + 1] = fmt("  %-" .. w .. "s  %s\n", c[1], c[2]) end
  local codes = {}
  for code in pairs(r.all.model_errors or {}) do codes[#codes + 1] = code end
  sort(codes)
  if #codes > 0 then
    out[#out + 1] = "\nmodel errors (calls that failed; the first message of each code):\n"
    for _, code in ipairs(codes) do
      local e = r.all.model_errors[code]
      out[#out + 1] = fmt("  %s x%d: %s\n", code, e.count, tostring(e.message or "-"))
    end
  end
  if (r.all.truncated or 0) > 0 then
    out[#out + 1] = fmt("replies cut off at max_tokens: %d of %d requests\n", r.all.truncated, r.all.requests)
  end
  out[#out + 1] = "\nfast_p(B): share of all episodes correct and faster than p x baseline B (vs: the one the vs column names;\n" ..
    "fast_0 = correct); geomean, median, p10, p90: the speedups over that same baseline;\n" ..
    "speedups are over correct episodes; compile@1: first candidate compiled; rounds: evaluations until correct;\n" ..
    "reasoning: characters of model reasoning per episode that asked a model;\n" ..
    "X/ok: totals over all episodes per correct one; roofline: mean/median fraction of the bound;\n" ..
    "evals/GPU-h: judged evaluations per hour of their summed stage seconds; measure/kernel: the measure stage's\n" ..
    "seconds over the candidates' own timed kernel seconds (harness overhead); - where not recorded.\n"
  return concat(out)
end

----------------------------------------------------------------------------------------
-- CSV (kmrun report --csv DIR): every table, one file each, for replotting

local function csv_field(v)
  if v == nil then return "" end
  if type(v) == "number" then
    if not finite(v) then return "" end
    if math.type(v) == "integer" then return tostring(v) end
    return fmt("%.17g", v)
  end
  v = tostring(v)
  if v:find('[,"\r\n]') then return '"' .. v:gsub('"', '""') .. '"' end
  return v
end

local function csv(rows)
  local out = {}
  for i, row in ipairs(rows) do
    local f = {}
    for j = 1, #rows[1] do f[j] = csv_field(row[j]) end
    out[i] = concat(f, ",")
  end
  return concat(out, "\n") .. "\n"
end

-- The baseline(s) a group's speedup and fast_p columns are over, as speedup_over keys
-- joined by "+" ("pytorch_eager", "cuda_reference"); nil when none was timed.
local function over_keys(m)
  local list = overs_of(m)
  return #list > 0 and concat(list, "+") or nil
end

-- The columns of a metrics row (fractions as fractions, not percentages). A value that is
-- missing (no correct episode, no starter, no cost) stays nil at its own index: the CSV
-- writes an empty cell there, and every later value keeps its column.
local function metric_fields(r, m)
  local head, vals = { "n", "correct", "correctness", "speedup_over" }, { m.n, m.correct, m.correctness, over_keys(m) }
  for _, p in ipairs(r.asked_thresholds) do
    if p ~= 0 then head[#head + 1] = fmt("fast_%g", p); vals[#head] = fast_of(m, p) end
  end
  local more = {
    { "speedup_n", m.speedup.n }, { "speedup_geomean", m.speedup.geomean }, { "speedup_median", m.speedup.median },
    { "speedup_p10", m.speedup.p10 }, { "speedup_p90", m.speedup.p90 }, { "speedup_min", m.speedup.min },
    { "speedup_max", m.speedup.max }, { "speedup_baseline_geomean", m.speedup_baseline.geomean },
    { "compile_first_rate", m.compile_first.rate }, { "rounds_mean", m.rounds.mean },
    { "rounds_median", m.rounds.median }, { "tokens_total", m.tokens.total }, { "tokens_per_solved", m.tokens.per_solved },
    { "dollars_total", m.dollars.total }, { "dollars_per_solved", m.dollars.per_solved },
    { "gpu_seconds_total", m.gpu_seconds.total }, { "gpu_seconds_per_solved", m.gpu_seconds.per_solved },
    { "roofline_mean", m.roofline.mean }, { "roofline_median", m.roofline.median },
    { "gpu_time_judged", m.gpu_time.judged }, { "gpu_time_recorded", m.gpu_time.recorded },
  }
  local g = m.gpu_time
  for _, k in ipairs(M.STAGES) do more[#more + 1] = { "gpu_time_stage_seconds_" .. k, g.stages and g.stages[k] } end
  for _, x in ipairs { { "gpu_time_seconds", g.seconds }, { "gpu_time_kernel_seconds", g.kernel },
    { "gpu_time_measure_over_kernel", g.measure_over_kernel }, { "gpu_time_stages_over_kernel", g.stages_over_kernel },
    { "gpu_time_evals_per_gpu_hour", g.evals_per_gpu_hour } } do
    more[#more + 1] = x
  end
  for _, x in ipairs(more) do head[#head + 1] = x[1]; vals[#head] = x[2] end
  return head, vals
end

-- Every table as CSV: { { "file.csv", text }, ... }.
function M.csv_files(r)
  local files = {}
  local function add(name, rows) files[#files + 1] = { name, csv(rows) } end
  for _, b in ipairs(r.by) do
    local head = {}
    for i, d in ipairs(b.dims) do head[i] = d end
    local mh = metric_fields(r, r.all)
    for _, h in ipairs(mh) do head[#head + 1] = h end
    local rows = { head }
    local function row(values, m)
      local out = {}
      for i = 1, #b.dims do out[i] = values[i] or "" end
      local _, vals = metric_fields(r, m)
      for i = 1, #mh do out[#b.dims + i] = vals[i] end
      rows[#rows + 1] = out
    end
    for _, g in ipairs(b.groups) do row(g.values, g.metrics) end
    row({ "all" }, r.all)
    add("by_" .. b.name:gsub("%+", "_") .. ".csv", rows)
  end
  do -- strategy x model, long form
    local mh = metric_fields(r, r.all)
    local rows = { { "strategy", "model", table.unpack(mh) } }
    for _, x in ipairs(r.series) do
      local _, vals = metric_fields(r, x.metrics)
      rows[#rows + 1] = { x.strategy, x.model, table.unpack(vals, 1, #mh) }
    end
    add("strategy_model.csv", rows)
  end
  do
    local rows = { { "strategy", "model", "k", "tasks", "pass_at_k", "ci_low", "ci_high" } }
    for _, e in ipairs(r.pass_at_k) do
      for _, x in ipairs(e.k) do rows[#rows + 1] = { e.strategy, e.model, x.k, x.tasks, x.value, x.lo, x.hi } end
    end
    add("pass_at_k.csv", rows)
  end
  do -- the fast_p curves per series and baseline, then per level too
    local rows = { { "strategy", "model", "baseline", "p", "fast_p" } }
    for _, c in ipairs(r.fast_p_curve) do
      for _, pt in ipairs(c.points) do rows[#rows + 1] = { c.strategy, c.model, c.baseline, pt.p, pt.value } end
    end
    add("fast_p_curve.csv", rows)
    rows = { { "level", "strategy", "model", "baseline", "p", "fast_p" } }
    for _, c in ipairs(r.fast_p_curve_by_level) do
      for _, pt in ipairs(c.points) do rows[#rows + 1] = { c.level, c.strategy, c.model, c.baseline, pt.p, pt.value } end
    end
    add("fast_p_curve_by_level.csv", rows)
    add("fast_p_by_baseline.csv", baseline_cells(r, true))
    add("gpu_time.csv", gpu_cells(r, true))
  end
  do
    local rows = { { "task", "strategy", "model", "repeats", "correct", "status", "speedup_median" } }
    for i, t in ipairs(r.heatmap.tasks) do
      for j, x in ipairs(r.series) do
        local c = r.heatmap.cells[i][j]
        if c then rows[#rows + 1] = { t, x.strategy, x.model, c.n, c.correct, c.status, c.speedup } end
      end
    end
    add("task_map.csv", rows)
  end
  do
    local rows = { { "task", "level", "category", "strategy", "model", "repeat", "episode_status", "status", "speedup",
      "speedup_over", "speedup_eager", "speedup_compile", "speedup_cuda_reference", "compile_mode",
      "speedup_baseline", "roofline", "rounds", "compile_ok_first", "prompt_tokens", "completion_tokens", "dollars",
      "gpu_seconds", "seconds" } }
    for _, e in ipairs(r.rows) do
      local cf = e.compile_ok_first
      rows[#rows + 1] = { e.task, e.level, e.category, e.strategy, e.model, e.rep, e.episode_status, e.status, e.speedup,
        e.speedup_over, e.speedup_eager, e.speedup_compile, e.speedup_cuda_reference, e.compile_mode,
        e.speedup_baseline, e.roofline, e.rounds, cf == nil and "" or tostring(cf), e.prompt_tokens, e.completion_tokens,
        e.dollars, e.gpu_seconds, e.seconds }
    end
    add("episodes.csv", rows)
  end
  return files
end

----------------------------------------------------------------------------------------
-- SVG charts

local W, H = 480, 300
local PL, PR, PT, PB = 60, 18, 52, 50          -- plot margins: left, right, top (title, legend), bottom
local PW, PH = W - PL - PR, H - PT - PB
local COLORS = { "#3366cc", "#dc6d1e", "#2a9d5c", "#b8336a", "#7b5ea7", "#8c8c2e", "#2b9eb3", "#666666" }

local function esc(s)
  return (tostring(s):gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }))
end

local function n2(x) return fmt("%.1f", x) end

local function nice_step(range, n)
  if range <= 0 then return 1 end
  local raw = range / n
  local mag = 10 ^ floor(log(raw, 10))
  local f = raw / mag
  return (f <= 1 and 1 or f <= 2 and 2 or f <= 5 and 5 or 10) * mag
end

-- ticks from 0 to at least hi, integer steps when `integer`
local function axis_ticks(hi, n, integer)
  local step = nice_step(hi, n)
  if integer then step = max(1, floor(step + 0.5)) end
  local top = ceil(hi / step - 1e-9) * step
  if top <= 0 then top = step end
  local t, v = {}, 0
  while v <= top + step * 1e-9 do t[#t + 1] = v; v = v + step end
  return t, top
end

local function tick_label(v)
  if v == floor(v) and abs(v) < 1e15 then return human(v) end
  return fmt("%g", v)
end

local function x_label_of_log2(k) return fmt("%gx", 2 ^ k) end

local function svg_frame(id, title, xlabel, ylabel)
  local s = {
    fmt('<svg xmlns="http://www.w3.org/2000/svg" id="%s" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">',
      id, W, H, W, H, esc(title)),
    fmt('<title>%s</title>', esc(title)),
    fmt('<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>', W, H),
    fmt('<text x="%d" y="22" text-anchor="middle" font-size="15" font-weight="bold">%s</text>', W // 2, esc(title)),
    fmt('<text x="%s" y="%d" text-anchor="middle" font-size="12">%s</text>', n2(PL + PW / 2), H - 10, esc(xlabel)),
    fmt('<text transform="translate(16 %s) rotate(-90)" text-anchor="middle" font-size="12">%s</text>', n2(PT + PH / 2), esc(ylabel)),
    fmt('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>', PL, PT + PH, PL + PW, PT + PH),
    fmt('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>', PL, PT, PL, PT + PH),
  }
  return s
end

local function svg_close(s) s[#s + 1] = "</svg>" return concat(s, "\n") end

local function no_data(s, why)
  s[#s + 1] = fmt('<text x="%s" y="%s" text-anchor="middle" font-size="16" fill="#888">no data</text>', n2(PL + PW / 2), n2(PT + PH / 2))
  if why then
    s[#s + 1] = fmt('<text x="%s" y="%s" text-anchor="middle" font-size="11" fill="#888">%s</text>', n2(PL + PW / 2), n2(PT + PH / 2 + 18), esc(why))
  end
  return svg_close(s)
end

-- horizontal grid + labels for a y axis from 0 to top
local function y_axis(s, ticks, top, label_of)
  for _, v in ipairs(ticks) do
    local y = PT + PH - PH * v / top
    s[#s + 1] = fmt('<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#e4e4e4"/>', PL + 1, n2(y), PL + PW, n2(y))
    s[#s + 1] = fmt('<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#333"/>', PL - 4, n2(y), PL, n2(y))
    s[#s + 1] = fmt('<text x="%d" y="%s" text-anchor="end" font-size="11">%s</text>', PL - 7, n2(y + 4), esc(label_of(v)))
  end
end

local function x_tick(s, x, label)
  s[#s + 1] = fmt('<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#333"/>', n2(x), PT + PH, n2(x), PT + PH + 4)
  s[#s + 1] = fmt('<text x="%s" y="%d" text-anchor="middle" font-size="11">%s</text>', n2(x), PT + PH + 17, esc(label))
end

-- log2 range that covers the values and at least [-1, 1], in steps of `bin`
local function log2_range(values, bin)
  local lo, hi = -1, 1
  for _, v in ipairs(values) do lo = min(lo, v); hi = max(hi, v) end
  lo, hi = max(lo, -10), min(hi, 10)
  lo, hi = floor(lo / bin) * bin, ceil(hi / bin) * bin
  if hi <= lo then hi = lo + bin end
  return lo, hi
end

-- Horizontal grid lines at the powers of two from lo to hi (log2 units) with their labels;
-- 1x (k = 0) dashed red.
local function log2_grid_y(s, lo, hi, to_y)
  local step = (hi - lo) > 8 and 2 or 1
  for k = ceil(lo), floor(hi), step do
    local y = to_y(k)
    s[#s + 1] = fmt('<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"%s/>', PL + 1, n2(y), PL + PW, n2(y),
      k == 0 and "#c0392b" or "#e4e4e4", k == 0 and ' stroke-dasharray="4 3"' or "")
    s[#s + 1] = fmt('<text x="%d" y="%s" text-anchor="end" font-size="11">%s</text>', PL - 7, n2(y + 4), x_label_of_log2(k))
  end
end

local function log2_ticks(s, lo, hi, to_x)
  local step = (hi - lo) > 12 and 2 or 1
  for k = ceil(lo), floor(hi), step do x_tick(s, to_x(k), x_label_of_log2(k)) end
end

-- Every chart keeps strategies and models apart: a colour per series (strategy and model),
-- the same in every chart, with its legend.
local function series_color(i) return COLORS[(i - 1) % #COLORS + 1] end

-- A legend of the series along the top of a chart (wraps after the plot's width).
local function legend(s, r, y0)
  local rows, x = 1, PL
  for _, x_ in ipairs(r.series) do
    local w = 18 + #x_.label * 6.2
    if x + w > PL + PW and x > PL then rows, x = rows + 1, PL end
    x = x + w
  end
  local y = y0 or (PT - 10 - 13 * min(rows - 1, 1))  -- two rows fit under the title
  x = PL
  for i, x_ in ipairs(r.series) do
    local label = x_.label
    local w = 18 + #label * 6.2
    if x + w > PL + PW and x > PL then x, y = PL, y + 13 end
    s[#s + 1] = fmt('<rect x="%s" y="%s" width="10" height="10" fill="%s"/><text x="%s" y="%s" font-size="11">%s</text>',
      n2(x), n2(y - 9), series_color(i), n2(x + 13), n2(y), esc(label))
    x = x + w
  end
end

-- How the fast_p chart draws each baseline's curves (a colour per series, a dash per baseline).
local DASHES = { eager = "", compile = ' stroke-dasharray="7 4"', cuda_reference = ' stroke-dasharray="2 3"' }

-- A key to the line styles in the upper right of the plot, where fast_p curves are low.
local function dash_legend(s, r)
  local y, x = PT + 12, PL + PW - 190
  if #r.baselines > 0 then
    s[#s + 1] = fmt('<rect x="%d" y="%d" width="186" height="%d" fill="#ffffff" fill-opacity="0.85"/>', x - 4, y - 8,
      14 * #r.baselines + 2)
  end
  for _, b in ipairs(r.baselines) do
    s[#s + 1] = fmt('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333" stroke-width="2"%s/><text x="%d" y="%d" font-size="11">against %s</text>',
      x, y, x + 28, y, DASHES[b.key] or "", x + 34, y + 4, esc(b.label))
    y = y + 14
  end
end

-- 1. fast_p against the threshold p, a line per series and baseline (KernelBench's fast_p curve)
function M.svg_fastp(r)
  local s = svg_frame("chart-fastp", "fast_p by threshold", "threshold p: correct and faster than p x the baseline (log scale)",
    "share of episodes")
  if r.episodes == 0 or #r.fast_p_curve == 0 then return no_data(s, "no episodes") end
  local ticks, TOP = { 0, 0.25, 0.5, 0.75, 1 }, 1.0
  y_axis(s, ticks, TOP, function(v) return fmt("%d%%", floor(v * 100 + 0.5)) end)
  local LO, HI, GAP = -4, 2, 26     -- log2 p from 1/16 to 4; p = 0 drawn at the axis, GAP to its right
  local function to_x(p)
    if p == 0 then return PL + 4 end
    return PL + GAP + (PW - GAP) * (log(p, 2) - LO) / (HI - LO)
  end
  local function to_y(v) return PT + PH - PH * v / TOP end
  x_tick(s, to_x(0), "0")
  for k = LO, HI do
    if k >= -3 then x_tick(s, to_x(2 ^ k), k < 0 and fmt("1/%d", floor(2 ^ -k + 0.5)) or fmt("%gx", 2 ^ k)) end
  end
  s[#s + 1] = fmt('<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#c0392b" stroke-dasharray="4 3"/>',
    n2(to_x(1)), PT, n2(to_x(1)), PT + PH)
  local by_key = {}
  for _, b in ipairs(M.BASELINES) do by_key[b.key] = b end
  for _, c in ipairs(r.fast_p_curve) do
    local pts = {}
    for j, pt in ipairs(c.points) do pts[j] = n2(to_x(pt.p)) .. "," .. n2(to_y(pt.value)) end
    local b = by_key[c.baseline]
    s[#s + 1] = fmt('<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"><title>%s, against %s: fast_0 %s, fast_1 %s</title></polyline>',
      series_color(c.series), b and DASHES[b.key] or "", concat(pts, " "), esc(c.label),
      esc(b and b.label or "no baseline (no correct episode has a time)"), pct(c.points[1].value), pct(point_at(c.points, 1)))
  end
  dash_legend(s, r)
  legend(s, r)
  return svg_close(s)
end

-- 2. correctness by level: a bar per series (light: correct; solid: fast_1)
function M.svg_levels(r)
  local s = svg_frame("chart-levels", "Correctness by level", "level (light: correct, solid: fast_1 against the header's baseline)",
    "share of episodes")
  if #(r.levels or {}) == 0 or r.episodes == 0 then return no_data(s, "no episodes") end
  local ticks, TOP = { 0, 0.25, 0.5, 0.75, 1 }, 1.12   -- headroom for the labels over full bars
  y_axis(s, ticks, TOP, function(v) return fmt("%d%%", floor(v * 100 + 0.5)) end)
  local levels, by_level = {}, {}
  for _, g in ipairs(r.levels) do levels[#levels + 1] = g.key; by_level[g.key] = {} end
  for i, x in ipairs(r.series) do
    local per = {}
    for _, row in ipairs(x.rows) do
      local k = group_value(row, "level")
      per[k] = per[k] or {}
      insert(per[k], row)
    end
    for k, rows in pairs(per) do by_level[k][i] = M.metrics(rows, r.thresholds) end
  end
  local slot = PW / #levels
  local nser = max(1, #r.series)
  local bw = min(40, slot * 0.8 / nser)
  for li, key in ipairs(levels) do
    local cx = PL + slot * (li - 0.5)
    local x0 = cx - bw * nser / 2
    for i = 1, nser do
      local m = by_level[key][i]
      if m then
        local x = x0 + (i - 1) * bw
        local hc, hf = PH * (m.correctness or 0) / TOP, PH * (fast_of(m, 1) or 0) / TOP
        s[#s + 1] = fmt('<rect x="%s" y="%s" width="%s" height="%s" fill="%s" fill-opacity="0.35"><title>level %s, %s: correct %s (%d/%d)</title></rect>',
          n2(x + 1), n2(PT + PH - hc), n2(max(1, bw - 2)), n2(hc), series_color(i), esc(key), esc(r.series[i].label),
          pct(m.correctness), m.correct, m.n)
        s[#s + 1] = fmt('<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>level %s, %s: fast_1 %s</title></rect>',
          n2(x + 1), n2(PT + PH - hf), n2(max(1, bw - 2)), n2(hf), series_color(i), esc(key), esc(r.series[i].label),
          pct(fast_of(m, 1)))
      end
    end
    x_tick(s, cx, key == "?" and "?" or ("L" .. key))
  end
  legend(s, r)
  return svg_close(s)
end

-- 3. speedup of correct kernels: a box per series (quartiles, median, min-max whiskers, points)
function M.svg_speedup(r)
  local s = svg_frame("chart-speedup", "Speedup of correct kernels", "speedup over the header's baseline, by series (log2 scale)", "")
  local all, per = {}, {}
  for i, x in ipairs(r.series) do
    per[i] = {}
    for _, row in ipairs(x.rows) do
      if row.correct and row.speedup and row.speedup > 0 then
        local v = log(row.speedup, 2)
        per[i][#per[i] + 1] = v
        all[#all + 1] = v
      end
    end
    sort(per[i])
  end
  if #all == 0 then return no_data(s, "no correct episode with a timed speedup") end
  local lo, hi = log2_range(all, 1)
  local function to_y(v) return PT + PH - PH * (v - lo) / (hi - lo) end
  log2_grid_y(s, lo, hi, to_y)
  local slot = PW / #r.series
  local bw = min(44, slot * 0.5)
  for i, vals in ipairs(per) do
    local cx = PL + slot * (i - 0.5)
    local c = series_color(i)
    if #vals > 0 then
      local q1, q2, q3 = quantile(vals, 0.25), quantile(vals, 0.5), quantile(vals, 0.75)
      s[#s + 1] = fmt('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>', n2(cx), n2(to_y(vals[1])), n2(cx), n2(to_y(vals[#vals])), c)
      s[#s + 1] = fmt('<rect x="%s" y="%s" width="%s" height="%s" fill="%s" fill-opacity="0.25" stroke="%s"><title>%s: n %d, median %s, quartiles %s to %s</title></rect>',
        n2(cx - bw / 2), n2(to_y(q3)), n2(bw), n2(max(1, to_y(q1) - to_y(q3))), c, c, esc(r.series[i].label), #vals,
        times(2 ^ q2), times(2 ^ q1), times(2 ^ q3))
      s[#s + 1] = fmt('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"/>', n2(cx - bw / 2), n2(to_y(q2)),
        n2(cx + bw / 2), n2(to_y(q2)), c)
      if #vals <= 200 then
        for j, v in ipairs(vals) do
          local dx = ((j * 37) % 11 - 5) * bw / 14
          s[#s + 1] = fmt('<circle cx="%s" cy="%s" r="2" fill="%s" fill-opacity="0.7"/>', n2(cx + dx), n2(to_y(v)), c)
        end
      end
    end
    local label = r.series[i].label
    if #label > 16 and #r.series > 2 then label = label:sub(1, 15) .. "…" end
    x_tick(s, cx, label)
  end
  s[#s + 1] = fmt('<text x="%d" y="%d" text-anchor="end" font-size="11">n = %d, geomean %s</text>', PL + PW, PT - 6, #all,
    times(r.all.speedup.geomean))
  return svg_close(s)
end

-- 4. evaluations until correct: bars per round count, side by side per series
function M.svg_rounds(r)
  local s = svg_frame("chart-rounds", "Rounds to a correct kernel", "evaluations until correct (1 = first attempt)", "episodes")
  local CAP = 20
  local counts, total, top_round, cmax = {}, 0, 1, 0
  for i, x in ipairs(r.series) do
    counts[i] = {}
    for _, row in ipairs(x.rows) do
      if row.correct and row.rounds then
        local k = min(max(1, floor(row.rounds)), CAP)
        counts[i][k] = (counts[i][k] or 0) + 1
        total = total + 1
        top_round = max(top_round, k)
        cmax = max(cmax, counts[i][k])
      end
    end
  end
  if total == 0 then return no_data(s, "no correct episode") end
  top_round = max(top_round, 5)
  local ticks, top = axis_ticks(cmax, 5, true)
  y_axis(s, ticks, top, tick_label)
  local slot = PW / top_round
  local nser = max(1, #r.series)
  local bw = max(1, (slot - 4) / nser)
  for k = 1, top_round do
    local cx = PL + slot * (k - 0.5)
    for i = 1, nser do
      local c = counts[i] and counts[i][k]
      if c and c > 0 then
        local h = PH * c / top
        s[#s + 1] = fmt('<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s, %d round(s): %d</title></rect>',
          n2(cx - slot / 2 + 2 + (i - 1) * bw), n2(PT + PH - h), n2(max(1, bw - 1)), n2(h), series_color(i),
          esc(r.series[i].label), k, c)
      end
    end
    if top_round <= 12 or k % 2 == 1 or k == top_round then
      x_tick(s, cx, (k == CAP and top_round == CAP) and (CAP .. "+") or tostring(k))
    end
  end
  legend(s, r)
  return svg_close(s)
end

-- 5. cost (dollars when any were spent, else tokens) against speedup, a colour per series
function M.svg_cost(r)
  local pts, use_dollars = {}, false
  for _, row in ipairs(r.rows) do if row.dollars > 0 then use_dollars = true end end
  for _, row in ipairs(r.rows) do
    local c = use_dollars and row.dollars or (row.prompt_tokens + row.completion_tokens)
    if row.correct and row.speedup and row.speedup > 0 and c > 0 then
      pts[#pts + 1] = { x = c, y = log(row.speedup, 2), series = row.series, task = row.task }
    end
  end
  local s = svg_frame("chart-cost", "Cost against speedup (correct kernels)",
    use_dollars and "dollars per episode" or "tokens per episode (prompt + completion)", "speedup (log2 scale)")
  if #pts == 0 then return no_data(s, "no correct episode with a recorded cost (offline runs use no tokens)") end
  local xmax = 0
  local ys = {}
  for i, p in ipairs(pts) do xmax = max(xmax, p.x); ys[i] = p.y end
  local xt, xtop = axis_ticks(xmax * 1.04, 5, not use_dollars)
  local lo, hi = log2_range(ys, 1)
  local ylo, yhi = huge, -huge
  for _, y in ipairs(ys) do ylo = min(ylo, y); yhi = max(yhi, y) end
  if yhi > hi - 0.15 then hi = hi + 1 end          -- keep points off the frame
  if ylo < lo + 0.15 then lo = lo - 1 end
  local function to_x(v) return PL + PW * v / xtop end
  local function to_y(v) return PT + PH - PH * (v - lo) / (hi - lo) end
  log2_grid_y(s, lo, hi, to_y)
  for _, v in ipairs(xt) do
    x_tick(s, to_x(v), use_dollars and (v == 0 and "$0" or fmt("$%g", v)) or tick_label(v))
  end
  for _, p in ipairs(pts) do
    s[#s + 1] = fmt('<circle cx="%s" cy="%s" r="4" fill="%s" fill-opacity="0.75"><title>%s (%s): %s, %s</title></circle>',
      n2(to_x(p.x)), n2(to_y(p.y)), series_color(p.series or 1), esc(p.task or "?"), esc(r.series[p.series or 1].label),
      use_dollars and dollars(p.x) or (human(p.x) .. " tokens"), times(2 ^ p.y))
  end
  legend(s, r)
  return svg_close(s)
end

-- The colour of a final status in the per-task map: its row's (km.statuses), else grey.
local function status_colour(status) return statuses.prop(status, "colour") or "#bdbdbd" end

-- The colour of a speedup on a diverging scale: red below the reference, white at 1x,
-- blue above, saturating at 1/4x and 4x.
local function speedup_color(x)
  local t = max(-1, min(1, log(x, 2) / 2))
  local r_, g, b
  if t >= 0 then r_, g, b = 255 - t * (255 - 33), 255 - t * (255 - 102), 255 - t * (255 - 172)
  else t = -t; r_, g, b = 255 - t * (255 - 202), 255 - t * (255 - 0), 255 - t * (255 - 32) end
  return fmt("#%02x%02x%02x", floor(r_ + 0.5), floor(g + 0.5), floor(b + 0.5))
end

-- The per-task map's title and rotated column labels: sizes in px, and the width of a
-- label's character taken generously (0.62 em: wider than a sans-serif's average) so the
-- space kept for a label is never less than it takes.
local HEAT_TITLE_Y, HEAT_TITLE_SIZE, HEAT_LABEL_SIZE, HEAT_LABEL_MAX = 20, 15, 11, 200
local HEAT_CHAR, HEAT_ASCENT = 0.62 * HEAT_LABEL_SIZE, 0.8 * HEAT_LABEL_SIZE
local SIN30, COS30 = 0.5, math.sqrt(3) / 2

-- 6. the per-task map: a row per task, a column per series; colour = the median speedup of
-- the correct repeats (mode "speedup") or the final status (mode "status")
function M.svg_heatmap(r, mode)
  mode = mode or "speedup"
  local tasks, nser = r.heatmap.tasks, #r.series
  local LABEL, CW, CH = 190, 0, 15
  local width = 980
  CW = nser > 0 and min(110, (width - LABEL - 20) / nser) or 0
  -- The column labels are rotated 30 degrees up from their anchor (cx - 4, TOPM - 6), so a
  -- label w wide reaches w sin 30 + its ascent cos 30 above it: the top margin is the title's
  -- bottom plus the tallest label, so the two never overlap. Labels are cut to fit the width
  -- to their right and at most LABEL_MAX wide (the margin stays bounded).
  local title_bottom = HEAT_TITLE_Y + 0.3 * HEAT_TITLE_SIZE
  local labels, rise = {}, 0
  for j, x in ipairs(r.series) do
    local ax = LABEL + (j - 0.5) * CW - 4
    local room = min(HEAT_LABEL_MAX, CW * 1.9, (width - 4 - ax) / COS30)
    local label, fit = x.label, max(2, floor(room / HEAT_CHAR))
    local valid = utf8.len(label) ~= nil
    if (valid and utf8.len(label) or #label) > fit then
      label = label:sub(1, (valid and utf8.offset(label, fit) or fit) - 1) .. "…"
    end
    labels[j] = { ax, label }
    rise = max(rise, (utf8.len(label) or #label) * HEAT_CHAR * SIN30 + HEAT_ASCENT * COS30)
  end
  local TOPM = ceil(title_bottom + 4 + rise + 6)
  local height = TOPM + max(1, #tasks) * CH + 40
  local title = mode == "status" and "Final status by task" or "Speedup by task (median of the correct repeats)"
  local s = {
    fmt('<svg xmlns="http://www.w3.org/2000/svg" id="chart-heatmap" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">',
      width, height, width, height, esc(title)),
    fmt("<title>%s</title>", esc(title)),
    fmt('<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>', width, height),
    fmt('<text x="%d" y="%d" text-anchor="middle" font-size="%d" font-weight="bold">%s</text>', width // 2, HEAT_TITLE_Y,
      HEAT_TITLE_SIZE, esc(title)),
  }
  if #tasks == 0 then
    s[#s + 1] = fmt('<text x="%d" y="%d" text-anchor="middle" font-size="16" fill="#888">no data</text>', width // 2, height // 2)
    return svg_close(s)
  end
  for _, l in ipairs(labels) do
    s[#s + 1] = fmt('<text x="%s" y="%d" text-anchor="start" font-size="%d" transform="rotate(-30 %s %d)">%s</text>',
      n2(l[1]), TOPM - 6, HEAT_LABEL_SIZE, n2(l[1]), TOPM - 6, esc(l[2]))
  end
  for i, t in ipairs(tasks) do
    local y = TOPM + (i - 1) * CH
    s[#s + 1] = fmt('<text x="%d" y="%s" text-anchor="end" font-size="11">%s</text>', LABEL - 6, n2(y + CH - 4), esc(t))
    for j = 1, nser do
      local c = r.heatmap.cells[i][j]
      local x = LABEL + (j - 1) * CW
      if c then
        local fill, text
        if mode == "status" then
          fill, text = status_colour(c.status), ""
        elseif c.correct > 0 and c.speedup then
          fill, text = speedup_color(c.speedup), fmt("%.2fx", c.speedup)
        elseif c.correct > 0 then
          fill, text = "#c7e9c0", "ok"
        else
          fill, text = "#e0e0e0", c.status
        end
        s[#s + 1] = fmt('<rect x="%s" y="%s" width="%s" height="%d" fill="%s" stroke="#ffffff"><title>%s, %s: %d/%d correct, %s%s</title></rect>',
          n2(x), n2(y), n2(CW), CH, fill, esc(t), esc(r.series[j].label), c.correct, c.n, esc(c.status),
          c.speedup and (", median " .. times(c.speedup)) or "")
        if text ~= "" and CW >= 40 then
          s[#s + 1] = fmt('<text x="%s" y="%s" text-anchor="middle" font-size="9" fill="#222">%s</text>', n2(x + CW / 2),
            n2(y + CH - 4), esc(#text * 5 > CW and text:sub(1, floor(CW / 5)) or text))
        end
      end
    end
  end
  local ly = TOPM + #tasks * CH + 22
  if mode == "status" then
    local x = LABEL
    local seen = {}
    for i = 1, #tasks do
      for j = 1, nser do
        local c = r.heatmap.cells[i][j]
        if c and not seen[c.status] then
          seen[c.status] = true
          s[#s + 1] = fmt('<rect x="%s" y="%d" width="10" height="10" fill="%s"/><text x="%s" y="%d" font-size="11">%s</text>',
            n2(x), ly - 9, status_colour(c.status), n2(x + 13), ly, esc(c.status))
          x = x + 24 + #c.status * 6
        end
      end
    end
  else
    for k, v in ipairs { 0.25, 0.5, 1, 2, 4 } do
      local x = LABEL + (k - 1) * 60
      s[#s + 1] = fmt('<rect x="%d" y="%d" width="14" height="10" fill="%s" stroke="#999"/><text x="%d" y="%d" font-size="11">%s</text>',
        x, ly - 9, speedup_color(v), x + 18, ly, fmt("%gx", v))
    end
    s[#s + 1] = fmt('<text x="%d" y="%d" font-size="11">grey: not correct (final status shown)</text>', LABEL + 310, ly)
  end
  return svg_close(s)
end

----------------------------------------------------------------------------------------
-- HTML

local CSS = [[
body { font-family: sans-serif; margin: 24px; color: #222; background: #fafafa; }
h1 { font-size: 20px; margin: 0 0 4px 0; }
h2 { font-size: 16px; margin: 24px 0 8px 0; }
p.meta { color: #555; margin: 2px 0; font-size: 13px; }
table { border-collapse: collapse; font-size: 12px; background: #fff; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
th { background: #f0f0f0; }
tr.all td { font-weight: bold; background: #f7f7f7; }
.charts { display: grid; grid-template-columns: repeat(2, 480px); gap: 16px; margin-top: 12px; }
.charts svg, .wide svg { border: 1px solid #ddd; background: #fff; }
.wide { margin-top: 16px; }
td.label { text-align: left; }
.note { font-size: 12px; color: #555; max-width: 980px; }
]]

-- Writes every SVG's rendered size into <body data-svg-sizes="WxH,...">, so a headless
-- browser's --dump-dom shows that the charts laid out (tests/report_shot.sh reads it).
local SIZE_SCRIPT = [[
<script>
(function () {
  var out = [];
  var svgs = document.querySelectorAll("svg");
  for (var i = 0; i < svgs.length; i++) {
    var b = svgs[i].getBoundingClientRect();
    out.push(Math.round(b.width) + "x" + Math.round(b.height));
  }
  document.body.setAttribute("data-svg-sizes", out.join(","));
})();
</script>]]

-- cells -> an HTML table; `left` leading columns are labels; `all`: the last row is the total.
local function html_cells(cells, left, all)
  local out = { "<table>" }
  for i, row in ipairs(cells) do
    local tag = i == 1 and "th" or "td"
    local parts = {}
    for j, c in ipairs(row) do
      parts[j] = fmt("<%s%s>%s</%s>", tag, (j <= (left or 1) and j > 1) and ' class="label"' or "", esc(c), tag)
    end
    out[#out + 1] = fmt('<tr%s>%s</tr>', (all and i == #cells) and ' class="all"' or "", concat(parts))
  end
  out[#out + 1] = "</table>"
  return concat(out, "\n")
end

local function html_table(r, b)
  local cells, left = table_cells(r, b)
  return html_cells(cells, left, true)
end

-- The report as one self-contained HTML page: no external script, style, font or image.
function M.html(r, opts)
  opts = opts or {}
  local title = opts.title or "kmrun report"
  local o = {
    "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
    fmt("<title>%s</title>", esc(title)), "<style>", CSS, "</style>", "</head>", "<body>",
    fmt("<h1>%s</h1>", esc(title)),
  }
  for _, l in ipairs(header_lines(r)) do o[#o + 1] = fmt('<p class="meta">%s</p>', esc(l)) end
  o[#o + 1] = fmt('<p class="meta">files: %s</p>', esc(concat(r.info.files or {}, ", ")))
  o[#o + 1] = '<div class="charts">'
  o[#o + 1] = M.svg_fastp(r)
  o[#o + 1] = M.svg_levels(r)
  o[#o + 1] = M.svg_speedup(r)
  o[#o + 1] = M.svg_rounds(r)
  o[#o + 1] = M.svg_cost(r)
  o[#o + 1] = "</div>"
  o[#o + 1] = '<div class="wide">'
  o[#o + 1] = M.svg_heatmap(r, opts.heatmap)
  o[#o + 1] = "</div>"
  if #r.series > 0 then
    o[#o + 1] = "<h2>Strategy x model (correct, fast_1, geomean speedup)</h2>"
    o[#o + 1] = html_cells(matrix_cells(r), 1, false)
    o[#o + 1] = "<h2>pass@k over repeats</h2>"
    o[#o + 1] = html_cells(pass_cells(r), 2, false)
    o[#o + 1] = '<p class="note">pass@k: the mean over tasks of the unbiased estimate 1 - C(n-c, k)/C(n, k) ' ..
      '(n repeats of a task, c correct); in brackets the 95% percentile bootstrap interval over tasks.</p>'
  end
  if #r.baselines > 0 then
    o[#o + 1] = "<h2>fast_p against each baseline</h2>"
    o[#o + 1] = html_cells(baseline_cells(r), 4, false)
    o[#o + 1] = fmt('<p class="note">%s.</p>', esc(M.BASELINE_NOTE))
  end
  if M.gpu_time_state(r.all.gpu_time) ~= "no GPU evaluations" then
    o[#o + 1] = "<h2>GPU time by stage</h2>"
    o[#o + 1] = html_cells(gpu_cells(r), 2, true)
    o[#o + 1] = fmt('<p class="note">%s.</p>', esc(M.GPU_TIME_NOTE))
  end
  for _, b in ipairs(r.by) do
    o[#o + 1] = fmt("<h2>By %s</h2>", esc(b.name))
    o[#o + 1] = html_table(r, b)
  end
  if #r.by == 0 then o[#o + 1] = "<h2>All episodes</h2>"; o[#o + 1] = html_table(r, nil) end
  o[#o + 1] = "<h2>Failure modes</h2>"
  o[#o + 1] = "<table><tr><th>strategy / model</th><th>verdicts met on the way (summed)</th></tr>"
  for _, x in ipairs(r.series) do
    o[#o + 1] = fmt("<tr><td>%s</td><td style=\"text-align:left\">%s</td></tr>", esc(x.key), esc(modes_line(x.metrics.failure_modes)))
  end
  o[#o + 1] = fmt("<tr class=\"all\"><td>all</td><td style=\"text-align:left\">%s</td></tr></table>", esc(modes_line(r.all.failure_modes)))
  local codes = {}
  for code in pairs(r.all.model_errors or {}) do codes[#codes + 1] = code end
  sort(codes)
  if #codes > 0 then
    o[#o + 1] = "<h2>Model errors</h2><table><tr><th>code</th><th>calls</th><th>first message</th></tr>"
    for _, code in ipairs(codes) do
      local e = r.all.model_errors[code]
      o[#o + 1] = fmt("<tr><td>%s</td><td>%d</td><td style=\"text-align:left\">%s</td></tr>", esc(code), e.count, esc(tostring(e.message or "-")))
    end
    o[#o + 1] = "</table>"
  end
  -- every episode, so a reader can find one task's result
  local rows = {}
  for i, row in ipairs(r.rows) do rows[i] = row end
  table.sort(rows, function(a, b)
    if tostring(a.task) ~= tostring(b.task) then return tostring(a.task) < tostring(b.task) end
    if tostring(a.strategy) ~= tostring(b.strategy) then return tostring(a.strategy) < tostring(b.strategy) end
    if tostring(a.model) ~= tostring(b.model) then return tostring(a.model) < tostring(b.model) end
    return (a.rep or 0) < (b.rep or 0)
  end)
  o[#o + 1] = "<h2>Episodes</h2>"
  o[#o + 1] = "<table class=\"episodes\"><tr><th>task</th><th>level</th><th>category</th><th>strategy</th><th>model</th>" ..
    "<th>repeat</th><th>status</th><th>speedup</th><th>vs</th><th>eager</th><th>compile</th><th>CUDA ref</th>" ..
    "<th>roofline</th><th>rounds</th><th>tokens</th><th>gpu_s</th></tr>"
  for _, row in ipairs(rows) do
    o[#o + 1] = fmt("<tr><td style=\"text-align:left\">%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>" ..
      "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
      esc(tostring(row.task)), esc(tostring(row.level or "-")), esc(tostring(row.category or "-")),
      esc(tostring(row.strategy or "-")), esc(tostring(row.model or "-")), esc(tostring(row.rep or "-")),
      esc(tostring(row.status or row.episode_status or "-")), times(row.speedup),
      esc(row.speedup_over and over_name(row.speedup_over) or "-"), times(row.speedup_eager), times(row.speedup_compile),
      times(row.speedup_cuda_reference),
      row.roofline and fmt("%.0f%%", 100 * row.roofline) or "-", row.rounds and fmt("%d", row.rounds) or "-",
      human(row.prompt_tokens + row.completion_tokens), fmt("%.2f", row.gpu_seconds))
  end
  o[#o + 1] = "</table>"
  o[#o + 1] = '<p class="note">speedup is over PyTorch eager where the task has a PyTorch reference (KernelBench), ' ..
    'else over its CUDA reference (the header says which, and how many of each), timed the way the candidate is; ' ..
    'eager, compile, CUDA ref: the candidate over each baseline the judge timed; ' ..
    'speedup_baseline (JSON, CSV) is over the task\'s starter kernel. ' ..
    'fast_p: share of all episodes that are correct and faster than p times the baseline ' ..
    '(KernelBench; fast_0 = correctness). Speedup statistics are over correct episodes (p10/p90 by linear interpolation). ' ..
    'compile@1: the first candidate compiled. rounds: evaluations until the first correct one. tokens/ok, $/ok, gpu_s/ok: ' ..
    'totals over all episodes divided by the number of correct ones. roofline: mean/median fraction of the roofline bound.</p>'
  o[#o + 1] = SIZE_SCRIPT
  o[#o + 1] = "</body>"
  o[#o + 1] = "</html>"
  return concat(o, "\n") .. "\n"
end

return M
