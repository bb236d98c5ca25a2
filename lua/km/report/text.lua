-- km.report.text — the report as text: number formats, the tables' cells, the header lines
-- and the aligned terminal layout (km.report.text). km.report.html and km.report.csv render
-- the same cells (the helpers at the end).
local M = {}

local metrics = require "km.report.metrics"

local fmt, concat, sort = string.format, table.concat, table.sort
local floor, max, abs = math.floor, math.max, math.abs
local ipairs, pairs, tostring = ipairs, pairs, tostring
local num, key_less, BASELINE_OF_OVER = metrics.num, metrics.key_less, metrics.BASELINE_OF_OVER

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

-- The speedup_over values of a metrics group, in metrics.BASELINES order, then unknown ones.
local function overs_of(m)
  local list, seen = {}, {}
  for _, b in ipairs(metrics.BASELINES) do
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
  for _, p in ipairs(r and r.asked_thresholds or metrics.FAST_P) do
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

-- The width every line of the text report fits in: $COLUMNS where it is set (40 or more),
-- else 120.
local function width()
  local c = tonumber(os.getenv("COLUMNS") or "")
  return c and c >= 40 and math.floor(c) or 120
end

-- The columns of one panel: the label columns, then from column `from` as many as fit
-- `limit` (at least one). -> list of column indices, the next column's index
local function panel_columns(w, left, from, limit)
  local cols, width = {}, 0
  for j = 1, left do
    cols[#cols + 1] = j
    width = width + w[j] + 2
  end
  local j = from
  while w[j] and (j == from or width + w[j] <= limit) do
    cols[#cols + 1] = j
    width = width + w[j] + 2
    j = j + 1
  end
  return cols, j
end

-- Cells as aligned columns (the first `left` ones left-aligned: the labels) under a ruled
-- header. A table wider than the width is cut into panels one after another, each repeating
-- the label columns, so no line is wider.
local function align(cells, left)
  left = left or 1
  local w = {}
  for _, row in ipairs(cells) do
    for j, c in ipairs(row) do w[j] = max(w[j] or 0, #c) end
  end
  local out, from, limit = {}, left + 1, width()
  repeat
    local cols, next_from = panel_columns(w, left, from, limit)
    if from > left + 1 then out[#out + 1] = "" end
    for i, row in ipairs(cells) do
      local parts = {}
      for _, j in ipairs(cols) do
        local c = row[j] or ""
        parts[#parts + 1] = j <= left and (c .. (" "):rep(w[j] - #c)) or ((" "):rep(w[j] - #c) .. c)
      end
      out[#out + 1] = (concat(parts, "  "):gsub("%s+$", ""))
      if i == 1 then
        local rule = {}
        for _, j in ipairs(cols) do rule[#rule + 1] = ("-"):rep(w[j]) end
        out[#out + 1] = concat(rule, "  ")
      end
    end
    from = next_from
  until not w[from]
  return concat(out, "\n") .. "\n"
end

-- text with each line longer than the width broken at spaces; a continuation is indented two
-- spaces past the line's own indent. A word longer than the width (a path) stays whole.
local function fit(text)
  local out, limit = {}, width()
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    local indent = line:match("^ *")
    local cont = indent .. "  "
    while #line > limit do
      local cut
      for i = limit + 1, #indent + 2, -1 do
        if line:sub(i, i) == " " then cut = i break end
      end
      if not cut then break end
      out[#out + 1] = line:sub(1, cut - 1):gsub("%s+$", "")
      line = cont .. line:sub(cut + 1):gsub("^%s+", "")
    end
    out[#out + 1] = line
  end
  out[#out] = nil -- the piece after the final newline
  return concat(out, "\n")
end
M.fit = fit

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
  local state = metrics.gpu_time_state(g)
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
  for _, k in ipairs(metrics.STAGES) do head[#head + 1] = raw and ("stage_seconds_" .. k) or k end
  for _, h in ipairs(raw and { "seconds", "kernel_seconds", "measure_over_kernel", "stages_over_kernel",
    "evals_per_gpu_hour", "state" } or { "stages", "kernel", "measure/kernel", "stages/kernel", "evals/GPU-h" }) do
    head[#head + 1] = h
  end
  local cells = { head }
  local function add(strategy, model, g)
    -- a value not recorded stays nil at its own index (an empty CSV cell), so later ones keep their column
    local state, st = metrics.gpu_time_state(g), g.stages or {}
    local vals = { g.judged, g.recorded }
    for i, k in ipairs(metrics.STAGES) do vals[2 + i] = st[k] end
    local n = 2 + #metrics.STAGES
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

-- The calls that failed, a row per code in code order: { code, count, message (the first) }.
local function model_errors(r)
  local rows = {}
  for code, e in pairs(r.all.model_errors or {}) do rows[#rows + 1] = { code = code, count = e.count, message = e.message } end
  sort(rows, function(a, b) return a.code < b.code end)
  return rows
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
  if metrics.gpu_time_state(r.all.gpu_time) ~= "no GPU evaluations" then
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
  local errors = model_errors(r)
  if #errors > 0 then
    out[#out + 1] = "\nmodel errors (calls that failed; the first message of each code):\n"
    for _, e in ipairs(errors) do out[#out + 1] = fmt("  %s x%d: %s\n", e.code, e.count, tostring(e.message or "-")) end
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
  return fit(concat(out))
end

-- for the other report modules
M.pct, M.times, M.human, M.dollars, M.point_at, M.fast_of = pct, times, human, dollars, point_at, fast_of
M.over_name, M.overs_of, M.modes_line, M.header_lines, M.model_errors = over_name, overs_of, modes_line, header_lines,
  model_errors
M.table_cells, M.matrix_cells, M.baseline_cells, M.gpu_cells, M.pass_cells =
  table_cells, matrix_cells, baseline_cells, gpu_cells, pass_cells

return M
