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

local fmt, concat, sort, insert = string.format, table.concat, table.sort, table.insert
local floor, ceil, log, exp, huge = math.floor, math.ceil, math.log, math.exp, math.huge
local max, min, abs = math.max, math.min, math.abs
local ipairs, pairs, type, tostring, tonumber = ipairs, pairs, type, tostring, tonumber

M.FAST_P = { 0, 0.5, 1, 1.5, 2 }
M.GROUPINGS = { level = true, category = true, strategy = true, model = true }
M.DEFAULT_BY = { "level", "category" }

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

-- Reads the episodes of every file; keeps the final episode per (task, strategy, model, seed).
-- Returns the list (ordered by task, strategy, model, seed) and
-- info = { files, runs, read, superseded, unfinished, notes }, or nil, message, CODE (NOT_FOUND,
-- NOT_A_STORE or the store's code) naming the file. Each file is checked first (km.cli:
-- damaged pages, not a kmrun store); rows whose stored JSON does not parse are left out,
-- and info.notes says so, one line per file.
function M.load(paths)
  if type(paths) == "string" then paths = { paths } end
  if type(paths) ~= "table" then error("report.load: expected a list of paths", 2) end
  local info = { files = {}, runs = 0, read = 0, superseded = 0, unfinished = 0, notes = {} }
  local latest, order = {}, 0
  for _, path in ipairs(paths) do
    local db, err, code = cli.open_store(path)
    if not db then return nil, err, code end
    info.files[#info.files + 1] = path
    local runs, rskipped, rcode = cli.read_list(db, path, "runs")
    if not runs then db:close() return nil, rskipped, rcode end
    local episodes, skipped, ecode = cli.read_list(db, path, "episodes")
    if not episodes then db:close() return nil, skipped, ecode end
    if #rskipped > 0 then info.notes[#info.notes + 1] = cli.skipped_note(path, rskipped, "run(s)") end
    if #skipped > 0 then info.notes[#info.notes + 1] = cli.skipped_note(path, skipped, "episode(s)") end
    info.runs = info.runs + #runs
    for _, ep in ipairs(episodes) do
      info.read = info.read + 1
      order = order + 1
      if ep.status == "running" then
        info.unfinished = info.unfinished + 1
      else
        ep.file, ep.order = path, order
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
    db:close()
  end
  local list = {}
  for _, ep in pairs(latest) do list[#list + 1] = ep end
  sort(list, function(a, b) return key_of(a) < key_of(b) end)
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
  return {
    task = ep.task, strategy = ep.strategy, model = ep.model, rep = ep.rep,
    episode_status = ep.status, status = status, correct = status == "correct",
    speedup = num(s.speedup or v.speedup), speedup_baseline = num(s.speedup_baseline or v.speedup_baseline),
    roofline = num(roof),
    level = s.level, category = s.category,
    compile_ok_first = s.compile_ok_first,              -- nil when nothing was evaluated
    rounds = num(s.rounds_to_correct),
    prompt_tokens = num(tok.prompt) or 0, completion_tokens = num(tok.completion) or 0,
    dollars = num(s.dollars) or 0, gpu_seconds = num(s.gpu_seconds) or 0, seconds = num(s.seconds) or 0,
    failure_modes = type(s.failure_modes) == "table" and s.failure_modes or {},
  }
end

-- The numbers for one group of rows.
function M.metrics(rows)
  local m = { n = #rows, correct = 0, status = {}, failure_modes = {},
    tokens = { prompt = 0, completion = 0 }, dollars = { total = 0 }, gpu_seconds = { total = 0 },
    seconds_total = 0 }
  local speedups, baselines, rounds, roofs = {}, {}, {}, {}
  local first_n, first_ok = 0, 0
  local fast = {}
  for i = 1, #M.FAST_P do fast[i] = 0 end
  for _, r in ipairs(rows) do
    local st = r.episode_status or "?"
    m.status[st] = (m.status[st] or 0) + 1
    for k, c in pairs(r.failure_modes) do
      if type(c) == "number" then m.failure_modes[k] = (m.failure_modes[k] or 0) + c end
    end
    m.tokens.prompt = m.tokens.prompt + r.prompt_tokens
    m.tokens.completion = m.tokens.completion + r.completion_tokens
    m.dollars.total = m.dollars.total + r.dollars
    m.gpu_seconds.total = m.gpu_seconds.total + r.gpu_seconds
    m.seconds_total = m.seconds_total + r.seconds
    if type(r.compile_ok_first) == "boolean" then
      first_n = first_n + 1
      if r.compile_ok_first then first_ok = first_ok + 1 end
    end
    if r.correct then
      m.correct = m.correct + 1
      for i, p in ipairs(M.FAST_P) do
        -- fast_0 is correctness itself (KernelBench), even when no time was recorded
        if p == 0 or (r.speedup and r.speedup > p) then fast[i] = fast[i] + 1 end
      end
      if r.speedup and r.speedup > 0 then speedups[#speedups + 1] = r.speedup end
      if r.speedup_baseline and r.speedup_baseline > 0 then baselines[#baselines + 1] = r.speedup_baseline end
      if r.rounds then rounds[#rounds + 1] = r.rounds end
      if r.roofline then roofs[#roofs + 1] = r.roofline end
    end
  end
  m.correctness = ratio(m.correct, m.n)
  m.fast_p = {}
  for i, p in ipairs(M.FAST_P) do m.fast_p[i] = { p = p, value = ratio(fast[i], m.n) } end
  local ss = sorted_copy(speedups)
  m.speedup = { n = #ss, geomean = geomean(ss), median = quantile(ss, 0.5),
    p10 = quantile(ss, 0.1), p90 = quantile(ss, 0.9), min = ss[1], max = ss[#ss] }
  m.speedup_baseline = { n = #baselines, geomean = geomean(baselines) }
  m.compile_first = { n = first_n, ok = first_ok, rate = ratio(first_ok, first_n) }
  m.rounds = { n = #rounds, mean = mean(rounds), median = quantile(sorted_copy(rounds), 0.5) }
  m.tokens.total = m.tokens.prompt + m.tokens.completion
  m.tokens.per_solved = ratio(m.tokens.total, m.correct)
  m.dollars.per_solved = ratio(m.dollars.total, m.correct)
  m.gpu_seconds.per_solved = ratio(m.gpu_seconds.total, m.correct)
  local rs = sorted_copy(roofs)
  m.roofline = { n = #rs, mean = mean(rs), median = quantile(rs, 0.5) }
  return m
end

local function group_value(row, by)
  local v = row[by]
  if v == nil then return "?" end
  return tostring(v)
end

-- Group keys in a readable order: numbers by value, then words, "?" last.
local function key_less(a, b)
  if a == "?" or b == "?" then return b == "?" and a ~= "?" end
  local na, nb = tonumber(a), tonumber(b)
  if na and nb then return na < nb end
  if na or nb then return na ~= nil end
  return a < b
end

local function grouped(rows, by)
  local buckets, keys = {}, {}
  for _, r in ipairs(rows) do
    local k = group_value(r, by)
    if not buckets[k] then buckets[k] = {}; keys[#keys + 1] = k end
    insert(buckets[k], r)
  end
  sort(keys, key_less)
  local groups = {}
  for i, k in ipairs(keys) do groups[i] = { key = k, metrics = M.metrics(buckets[k]) } end
  return groups
end

-- Builds the report: { files, info, episodes, all = metrics, by = { {name, groups}, ... },
-- levels = groups by level (the charts use it), rows }.
-- opts.by: a list of groupings (level, category, strategy, model); default level and category.
function M.build(episodes, info, opts)
  opts = opts or {}
  local by = opts.by or M.DEFAULT_BY
  for _, b in ipairs(by) do
    if not M.GROUPINGS[b] then error("report.build: cannot group by " .. tostring(b), 2) end
  end
  local rows = {}
  for i, ep in ipairs(episodes) do rows[i] = row_of(ep) end
  local r = { info = info or {}, episodes = #rows, rows = rows, all = M.metrics(rows), by = {} }
  for i, b in ipairs(by) do r.by[i] = { name = b, groups = grouped(rows, b) } end
  r.levels = grouped(rows, "level")
  return r
end

----------------------------------------------------------------------------------------
-- JSON

local NULL = json.null
local function N(x) if finite(x) then return x end return NULL end

local function metrics_json(m, key)
  local fp = {}
  for _, f in ipairs(m.fast_p) do fp[fmt("%g", f.p)] = N(f.value) end
  local o = {
    n = m.n, correct = m.correct, correctness = N(m.correctness), status = json.object(m.status),
    fast_p = fp,
    speedup = { n = m.speedup.n, geomean = N(m.speedup.geomean), median = N(m.speedup.median),
      p10 = N(m.speedup.p10), p90 = N(m.speedup.p90), min = N(m.speedup.min), max = N(m.speedup.max) },
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
  }
  if key then o.group = key end
  return o
end

-- The report as one JSON object (sorted keys; undefined numbers are null).
function M.json(r, opts)
  local by = {}
  for _, b in ipairs(r.by) do
    local list = json.array {}
    for i, g in ipairs(b.groups) do list[i] = metrics_json(g.metrics, g.key) end
    by[b.name] = list
  end
  local info = r.info
  local o = {
    files = json.array { table.unpack(info.files or {}) },
    episodes = r.episodes,
    left_out = { superseded = info.superseded or 0, unfinished = info.unfinished or 0 },
    runs = info.runs or 0,
    fast_p_thresholds = json.array { table.unpack(M.FAST_P) },
    all = metrics_json(r.all, "all"),
    by = json.object(by),
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

local function fast_of(m, p)
  for _, f in ipairs(m.fast_p) do if f.p == p then return f.value end end
end

-- The table's columns after the group name: header, cell(metrics).
M.COLUMNS = {
  { "n", function(m) return tostring(m.n) end },
  { "correct", function(m) return fmt("%d (%s)", m.correct, pct(m.correctness)) end },
  { "fast_0.5", function(m) return pct(fast_of(m, 0.5)) end },
  { "fast_1", function(m) return pct(fast_of(m, 1)) end },
  { "fast_1.5", function(m) return pct(fast_of(m, 1.5)) end },
  { "fast_2", function(m) return pct(fast_of(m, 2)) end },
  { "geomean", function(m) return times(m.speedup.geomean) end },
  { "median", function(m) return times(m.speedup.median) end },
  { "p10", function(m) return times(m.speedup.p10) end },
  { "p90", function(m) return times(m.speedup.p90) end },
  { "compile@1", function(m) return pct(m.compile_first.rate) end },
  { "rounds", function(m) return m.rounds.mean and fmt("%.2f", m.rounds.mean) or "-" end },
  { "tokens/ok", function(m) return human(m.tokens.per_solved) end },
  { "$/ok", function(m) return dollars(m.dollars.per_solved) end },
  { "gpu_s/ok", function(m) return m.gpu_seconds.per_solved and fmt("%.2f", m.gpu_seconds.per_solved) or "-" end },
  { "roofline", function(m)
      if not m.roofline.mean then return "-" end
      return fmt("%.0f%%/%.0f%%", 100 * m.roofline.mean, 100 * m.roofline.median)
    end },
}

-- rows of cells for one grouping (or the overall table when name is nil)
local function table_cells(name, groups, all)
  local head = { name or "group" }
  for _, c in ipairs(M.COLUMNS) do head[#head + 1] = c[1] end
  local cells = { head }
  local function add(key, m)
    local row = { key }
    for _, c in ipairs(M.COLUMNS) do row[#row + 1] = c[2](m) end
    cells[#cells + 1] = row
  end
  for _, g in ipairs(groups) do add(g.key, g.metrics) end
  add("all", all)
  return cells
end

local function align(cells)
  local w = {}
  for _, row in ipairs(cells) do
    for j, c in ipairs(row) do w[j] = max(w[j] or 0, #c) end
  end
  local out = {}
  for i, row in ipairs(cells) do
    local parts = {}
    for j, c in ipairs(row) do
      parts[j] = j == 1 and (c .. (" "):rep(w[j] - #c)) or ((" "):rep(w[j] - #c) .. c)
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

local function header_lines(r)
  local info = r.info
  local lines = { fmt("kmrun report: %d episode(s) from %d file(s), %d run(s)", r.episodes,
    #(info.files or {}), info.runs or 0) }
  local notes = {}
  if (info.superseded or 0) > 0 then notes[#notes + 1] = fmt("%d earlier attempt(s) of the same task/strategy/model/repeat", info.superseded) end
  if (info.unfinished or 0) > 0 then notes[#notes + 1] = fmt("%d unfinished (still running or killed)", info.unfinished) end
  if #notes > 0 then lines[#lines + 1] = "left out: " .. concat(notes, "; ") end
  local compiled = r.all.status.compiled or 0
  if compiled > 0 then
    lines[#lines + 1] = fmt("note: %d episode(s) were compile-only (no GPU); they count as not correct", compiled)
  end
  return lines
end

-- The report as aligned text tables: one per grouping, each with an "all" row.
function M.text(r)
  local out = { concat(header_lines(r), "\n"), "\n" }
  for _, b in ipairs(r.by) do
    out[#out + 1] = "\n"
    out[#out + 1] = align(table_cells(b.name, b.groups, r.all))
  end
  if #r.by == 0 then
    out[#out + 1] = "\n"
    out[#out + 1] = align(table_cells(nil, {}, r.all))
  end
  out[#out + 1] = "\nfailure modes (every verdict met on the way, summed):\n"
  local cells = {}
  for _, b in ipairs(r.by) do
    for _, g in ipairs(b.groups) do cells[#cells + 1] = { b.name .. " " .. g.key, modes_line(g.metrics.failure_modes) } end
  end
  cells[#cells + 1] = { "all", modes_line(r.all.failure_modes) }
  local w = 0
  for _, c in ipairs(cells) do w = max(w, #c[1]) end
  for _, c in ipairs(cells) do out[#out + 1] = fmt("  %-" .. w .. "s  %s\n", c[1], c[2]) end
  out[#out + 1] = "\nfast_p: share of all episodes correct and faster than p x the reference (fast_0 = correct);\n" ..
    "speedups over correct episodes; compile@1: first candidate compiled; rounds: evaluations until correct;\n" ..
    "X/ok: totals over all episodes per correct one; roofline: mean/median fraction of the bound.\n"
  return concat(out)
end

----------------------------------------------------------------------------------------
-- SVG charts

local W, H = 480, 300
local PL, PR, PT, PB = 60, 18, 40, 50          -- plot margins: left, right, top, bottom
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

local function log2_ticks(s, lo, hi, to_x)
  local step = (hi - lo) > 12 and 2 or 1
  for k = ceil(lo), floor(hi), step do x_tick(s, to_x(k), x_label_of_log2(k)) end
end

-- 1. histogram of log2 speedup over correct episodes
function M.svg_speedup(r)
  local vals = {}
  for _, row in ipairs(r.rows) do
    if row.correct and row.speedup and row.speedup > 0 then vals[#vals + 1] = log(row.speedup, 2) end
  end
  local s = svg_frame("chart-speedup", "Speedup of correct kernels", #vals == 0 and "speedup over the reference (log2 scale)"
    or fmt("speedup over the reference (log2 scale); n = %d, geomean %s", #vals, times(r.all.speedup.geomean)), "episodes")
  if #vals == 0 then return no_data(s, "no correct episode with a timed speedup") end
  local BIN = 0.5
  local lo, hi = log2_range(vals, BIN)
  local nb = floor((hi - lo) / BIN + 0.5)
  local counts = {}
  for i = 1, nb do counts[i] = 0 end
  for _, v in ipairs(vals) do
    local i = floor((v - lo) / BIN) + 1
    i = max(1, min(nb, i))
    counts[i] = counts[i] + 1
  end
  local cmax = 0
  for _, c in ipairs(counts) do cmax = max(cmax, c) end
  local ticks, top = axis_ticks(cmax, 5, true)
  y_axis(s, ticks, top, tick_label)
  local function to_x(v) return PL + PW * (v - lo) / (hi - lo) end
  local bw = PW / nb
  for i, c in ipairs(counts) do
    if c > 0 then
      local h = PH * c / top
      s[#s + 1] = fmt('<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s to %s: %d</title></rect>',
        n2(PL + (i - 1) * bw + 1), n2(PT + PH - h), n2(max(1, bw - 2)), n2(h), COLORS[1],
        x_label_of_log2(lo + (i - 1) * BIN), x_label_of_log2(lo + i * BIN), c)
    end
  end
  s[#s + 1] = fmt('<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#c0392b" stroke-width="1.5" stroke-dasharray="5 3"/>',
    n2(to_x(0)), PT - 6, n2(to_x(0)), PT + PH)
  s[#s + 1] = fmt('<text x="%s" y="%d" text-anchor="middle" font-size="11" fill="#c0392b">reference</text>', n2(to_x(0)), PT - 9)
  log2_ticks(s, lo, hi, to_x)
  return svg_close(s)
end

-- 2. correctness (and fast_1) by level
function M.svg_levels(r)
  local s = svg_frame("chart-levels", "Correctness by level", "level", "share of episodes")
  local groups = r.levels or {}
  if #groups == 0 or r.episodes == 0 then return no_data(s, "no episodes") end
  local ticks, TOP = { 0, 0.25, 0.5, 0.75, 1 }, 1.12   -- headroom for the labels over full bars
  y_axis(s, ticks, TOP, function(v) return fmt("%d%%", floor(v * 100 + 0.5)) end)
  local slot = PW / #groups
  local bw = min(48, slot * 0.36)
  for i, g in ipairs(groups) do
    local m = g.metrics
    local cx = PL + slot * (i - 0.5)
    local bars = { { m.correctness or 0, COLORS[1], "correct" }, { fast_of(m, 1) or 0, COLORS[2], "fast_1" } }
    for j, b in ipairs(bars) do
      local h = PH * b[1] / TOP
      local x = cx + (j == 1 and -bw - 1 or 1)
      s[#s + 1] = fmt('<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>level %s %s: %s</title></rect>',
        n2(x), n2(PT + PH - h), n2(bw), n2(h), b[2], esc(g.key), b[3], pct(b[1]))
    end
    s[#s + 1] = fmt('<text x="%s" y="%s" text-anchor="middle" font-size="11">%d/%d</text>',
      n2(cx - bw / 2 - 1), n2(PT + PH - PH * (m.correctness or 0) / TOP - 4), m.correct, m.n)
    x_tick(s, cx, g.key == "?" and "?" or ("L" .. g.key))
  end
  -- legend
  local lx = PL + PW - 196
  s[#s + 1] = fmt('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" font-size="11">correct</text>',
    lx, PT - 14, COLORS[1], lx + 14, PT - 5)
  s[#s + 1] = fmt('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" font-size="11">fast_1 (faster than ref.)</text>',
    lx + 66, PT - 14, COLORS[2], lx + 80, PT - 5)
  return svg_close(s)
end

-- 3. evaluations until correct
function M.svg_rounds(r)
  local s = svg_frame("chart-rounds", "Rounds to a correct kernel", "evaluations until correct (1 = first attempt)", "episodes")
  local vals = {}
  for _, row in ipairs(r.rows) do
    if row.correct and row.rounds then vals[#vals + 1] = max(1, floor(row.rounds)) end
  end
  if #vals == 0 then return no_data(s, "no correct episode") end
  local CAP = 20
  local top_round = 1
  for _, v in ipairs(vals) do top_round = max(top_round, min(v, CAP)) end
  top_round = max(top_round, 5)
  local counts = {}
  for i = 1, top_round do counts[i] = 0 end
  for _, v in ipairs(vals) do local i = min(v, CAP); counts[i] = counts[i] + 1 end
  local cmax = 0
  for _, c in ipairs(counts) do cmax = max(cmax, c) end
  local ticks, top = axis_ticks(cmax, 5, true)
  y_axis(s, ticks, top, tick_label)
  local bw = PW / top_round
  for i, c in ipairs(counts) do
    local cx = PL + bw * (i - 0.5)
    if c > 0 then
      local h = PH * c / top
      s[#s + 1] = fmt('<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%d round(s): %d</title></rect>',
        n2(cx - bw / 2 + 2), n2(PT + PH - h), n2(max(1, bw - 4)), n2(h), COLORS[3], i, c)
    end
    if top_round <= 12 or i % 2 == 1 or i == top_round then
      x_tick(s, cx, (i == CAP and top_round == CAP) and (CAP .. "+") or tostring(i))
    end
  end
  local mr = r.all.rounds.mean
  s[#s + 1] = fmt('<text x="%d" y="%d" text-anchor="end" font-size="11">n = %d, mean %s</text>', PL + PW, PT - 4, #vals,
    mr and fmt("%.2f", mr) or "-")
  return svg_close(s)
end

-- 4. cost (dollars when any were spent, else tokens) against speedup, coloured by level
function M.svg_cost(r)
  local pts, use_dollars = {}, false
  for _, row in ipairs(r.rows) do if row.dollars > 0 then use_dollars = true end end
  for _, row in ipairs(r.rows) do
    local c = use_dollars and row.dollars or (row.prompt_tokens + row.completion_tokens)
    if row.correct and row.speedup and row.speedup > 0 and c > 0 then
      pts[#pts + 1] = { x = c, y = log(row.speedup, 2), level = group_value(row, "level"), task = row.task }
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
  local step = (hi - lo) > 8 and 2 or 1
  for k = ceil(lo), floor(hi), step do
    local y = to_y(k)
    s[#s + 1] = fmt('<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"%s/>', PL + 1, n2(y), PL + PW, n2(y),
      k == 0 and "#c0392b" or "#e4e4e4", k == 0 and ' stroke-dasharray="4 3"' or "")
    s[#s + 1] = fmt('<text x="%d" y="%s" text-anchor="end" font-size="11">%s</text>', PL - 7, n2(y + 4), x_label_of_log2(k))
  end
  for _, v in ipairs(xt) do
    x_tick(s, to_x(v), use_dollars and (v == 0 and "$0" or fmt("$%g", v)) or tick_label(v))
  end
  local level_color, levels = {}, {}
  for _, g in ipairs(r.levels or {}) do
    levels[#levels + 1] = g.key
    level_color[g.key] = COLORS[(#levels - 1) % #COLORS + 1]
  end
  for _, p in ipairs(pts) do
    s[#s + 1] = fmt('<circle cx="%s" cy="%s" r="4" fill="%s" fill-opacity="0.75"><title>%s: %s, %s</title></circle>',
      n2(to_x(p.x)), n2(to_y(p.y)), level_color[p.level] or COLORS[#COLORS], esc(p.task or "?"),
      use_dollars and dollars(p.x) or (human(p.x) .. " tokens"), times(2 ^ p.y))
  end
  local lx = PL + 8
  for i, k in ipairs(levels) do
    local x = lx + (i - 1) * 48
    s[#s + 1] = fmt('<circle cx="%d" cy="%d" r="4" fill="%s"/><text x="%d" y="%d" font-size="11">%s</text>',
      x, PT - 9, level_color[k], x + 7, PT - 5, k == "?" and "?" or ("L" .. esc(k)))
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
.charts svg { border: 1px solid #ddd; background: #fff; }
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

local function html_table(name, groups, all)
  local cells = table_cells(name, groups, all)
  local out = { "<table>" }
  for i, row in ipairs(cells) do
    local tag = i == 1 and "th" or "td"
    local parts = {}
    for j, c in ipairs(row) do parts[j] = fmt("<%s>%s</%s>", tag, esc(c), tag) end
    out[#out + 1] = fmt('<tr%s>%s</tr>', (i == #cells) and ' class="all"' or "", concat(parts))
  end
  out[#out + 1] = "</table>"
  return concat(out, "\n")
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
  o[#o + 1] = M.svg_speedup(r)
  o[#o + 1] = M.svg_levels(r)
  o[#o + 1] = M.svg_rounds(r)
  o[#o + 1] = M.svg_cost(r)
  o[#o + 1] = "</div>"
  for _, b in ipairs(r.by) do
    o[#o + 1] = fmt("<h2>By %s</h2>", esc(b.name))
    o[#o + 1] = html_table(b.name, b.groups, r.all)
  end
  if #r.by == 0 then o[#o + 1] = "<h2>All episodes</h2>"; o[#o + 1] = html_table(nil, {}, r.all) end
  o[#o + 1] = "<h2>Failure modes</h2>"
  o[#o + 1] = "<table><tr><th>group</th><th>verdicts met on the way (summed)</th></tr>"
  for _, b in ipairs(r.by) do
    for _, g in ipairs(b.groups) do
      o[#o + 1] = fmt("<tr><td>%s %s</td><td style=\"text-align:left\">%s</td></tr>", esc(b.name), esc(g.key), esc(modes_line(g.metrics.failure_modes)))
    end
  end
  o[#o + 1] = fmt("<tr class=\"all\"><td>all</td><td style=\"text-align:left\">%s</td></tr></table>", esc(modes_line(r.all.failure_modes)))
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
    "<th>repeat</th><th>status</th><th>speedup</th><th>roofline</th><th>rounds</th><th>tokens</th><th>gpu_s</th></tr>"
  for _, row in ipairs(rows) do
    o[#o + 1] = fmt("<tr><td style=\"text-align:left\">%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>" ..
      "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
      esc(tostring(row.task)), esc(tostring(row.level or "-")), esc(tostring(row.category or "-")),
      esc(tostring(row.strategy or "-")), esc(tostring(row.model or "-")), esc(tostring(row.rep or "-")),
      esc(tostring(row.status or row.episode_status or "-")), times(row.speedup),
      row.roofline and fmt("%.0f%%", 100 * row.roofline) or "-", row.rounds and fmt("%d", row.rounds) or "-",
      human(row.prompt_tokens + row.completion_tokens), fmt("%.2f", row.gpu_seconds))
  end
  o[#o + 1] = "</table>"
  o[#o + 1] = '<p class="note">fast_p: share of all episodes that are correct and faster than p times the reference ' ..
    '(KernelBench; fast_0 = correctness). Speedup statistics are over correct episodes (p10/p90 by linear interpolation). ' ..
    'compile@1: the first candidate compiled. rounds: evaluations until the first correct one. tokens/ok, $/ok, gpu_s/ok: ' ..
    'totals over all episodes divided by the number of correct ones. roofline: mean/median fraction of the roofline bound.</p>'
  o[#o + 1] = SIZE_SCRIPT
  o[#o + 1] = "</body>"
  o[#o + 1] = "</html>"
  return concat(o, "\n") .. "\n"
end

return M
