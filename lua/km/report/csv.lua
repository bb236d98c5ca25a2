-- km.report.csv — every table of the report as CSV, for replotting (kmrun report --csv DIR;
-- km.report.csv_files).
local M = {}

local metrics = require "km.report.metrics"
local report_text = require "km.report.text"

local fmt, concat = string.format, table.concat
local ipairs, type, tostring = ipairs, type, tostring
local finite = metrics.finite
local fast_of, overs_of = report_text.fast_of, report_text.overs_of
local baseline_cells, gpu_cells = report_text.baseline_cells, report_text.gpu_cells

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
  for _, k in ipairs(metrics.STAGES) do more[#more + 1] = { "gpu_time_stage_seconds_" .. k, g.stages and g.stages[k] } end
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

return M
