-- km.report.svg — the report's charts as inline SVG (km.report.svg_*): fast_p curves,
-- correctness by level, speedups, rounds, cost, and the per-task map.
local M = {}

local statuses = require "km.statuses"
local metrics = require "km.report.metrics"
local report_text = require "km.report.text"

local fmt, concat, sort, insert = string.format, table.concat, table.sort, table.insert
local floor, ceil, log, huge = math.floor, math.ceil, math.log, math.huge
local max, min, abs = math.max, math.min, math.abs
local ipairs, pairs, tostring = ipairs, pairs, tostring
local quantile, group_value = metrics.quantile, metrics.group_value
local pct, times, human, dollars = report_text.pct, report_text.times, report_text.human, report_text.dollars
local point_at, fast_of = report_text.point_at, report_text.fast_of

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
  for _, b in ipairs(metrics.BASELINES) do by_key[b.key] = b end
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
    for k, rows in pairs(per) do by_level[k][i] = metrics.metrics(rows, r.thresholds) end
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

-- The per-task map's column labels: the rotated label of each series, cut to fit, with its
-- anchor -> { { x, label }, ... }, the height the tallest one rises above its anchor.
-- A label is rotated 30 degrees up from its anchor (cx - 4, TOPM - 6), so a label w wide
-- reaches w sin 30 + its ascent cos 30 above it. Labels are cut to fit the width to their
-- right and at most LABEL_MAX wide (the margin stays bounded).
local function heat_labels(r, LABEL, CW, width)
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
  return labels, rise
end

-- One cell of the per-task map (task t, series j, its top left corner at x, y) into s.
local function heat_cell(s, r, mode, c, t, j, x, y, CW, CH)
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

-- The per-task map's legend at baseline ly: the statuses met (mode "status"), else the
-- speedup scale.
local function heat_legend(s, r, mode, ly, LABEL)
  local tasks, nser = r.heatmap.tasks, #r.series
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
end

-- 6. the per-task map: a row per task, a column per series; colour = the median speedup of
-- the correct repeats (mode "speedup") or the final status (mode "status")
function M.svg_heatmap(r, mode)
  mode = mode or "speedup"
  local tasks, nser = r.heatmap.tasks, #r.series
  local LABEL, CW, CH = 190, 0, 15
  local width = 980
  CW = nser > 0 and min(110, (width - LABEL - 20) / nser) or 0
  -- the top margin is the title's bottom plus the tallest column label (heat_labels), so
  -- the two never overlap
  local title_bottom = HEAT_TITLE_Y + 0.3 * HEAT_TITLE_SIZE
  local labels, rise = heat_labels(r, LABEL, CW, width)
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
      if c then heat_cell(s, r, mode, c, t, j, LABEL + (j - 1) * CW, y, CW, CH) end
    end
  end
  heat_legend(s, r, mode, TOPM + #tasks * CH + 22, LABEL)
  return svg_close(s)
end

M.esc = esc -- for km.report.html

return M
