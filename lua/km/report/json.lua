-- km.report.json — the report as one JSON object (km.report.json).
local M = {}

local json = require "km.json"
local metrics = require "km.report.metrics"

local fmt = string.format
local ipairs, pairs = ipairs, pairs
local finite = metrics.finite

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


local function gpu_time_json(g)
  local st = {}
  for _, k in ipairs(metrics.STAGES) do st[k] = NULL end
  for k, x in pairs(g.stages or {}) do st[k] = N(x) end
  return { state = metrics.gpu_time_state(g), judged = g.judged, recorded = g.recorded, timed = g.timed,
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
    fast_p_thresholds = json.array { table.unpack(r.thresholds or metrics.FAST_P) },
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

return M
