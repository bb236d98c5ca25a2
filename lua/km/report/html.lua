-- km.report.html — the report as one self-contained HTML page (km.report.html): the text
-- tables (km.report.text) as HTML tables and the charts (km.report.svg) inline.
local M = {}

local metrics = require "km.report.metrics"
local text = require "km.report.text"
local svg = require "km.report.svg"

local fmt, concat = string.format, table.concat
local ipairs, tostring = ipairs, tostring
local esc = svg.esc
local times, human, over_name, modes_line = text.times, text.human, text.over_name, text.modes_line
local header_lines, table_cells, matrix_cells = text.header_lines, text.table_cells, text.matrix_cells
local baseline_cells, gpu_cells, pass_cells = text.baseline_cells, text.gpu_cells, text.pass_cells

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

-- The header lines and the charts.
local function add_charts(o, r, opts)
  for _, l in ipairs(header_lines(r)) do o[#o + 1] = fmt('<p class="meta">%s</p>', esc(l)) end
  o[#o + 1] = fmt('<p class="meta">files: %s</p>', esc(concat(r.info.files or {}, ", ")))
  o[#o + 1] = '<div class="charts">'
  o[#o + 1] = svg.svg_fastp(r)
  o[#o + 1] = svg.svg_levels(r)
  o[#o + 1] = svg.svg_speedup(r)
  o[#o + 1] = svg.svg_rounds(r)
  o[#o + 1] = svg.svg_cost(r)
  o[#o + 1] = "</div>"
  o[#o + 1] = '<div class="wide">'
  o[#o + 1] = svg.svg_heatmap(r, opts.heatmap)
  o[#o + 1] = "</div>"
end

-- The matrix, pass@k, baseline, GPU-time and grouped tables.
local function add_tables(o, r)
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
    o[#o + 1] = fmt('<p class="note">%s.</p>', esc(text.BASELINE_NOTE))
  end
  if metrics.gpu_time_state(r.all.gpu_time) ~= "no GPU evaluations" then
    o[#o + 1] = "<h2>GPU time by stage</h2>"
    o[#o + 1] = html_cells(gpu_cells(r), 2, true)
    o[#o + 1] = fmt('<p class="note">%s.</p>', esc(text.GPU_TIME_NOTE))
  end
  for _, b in ipairs(r.by) do
    o[#o + 1] = fmt("<h2>By %s</h2>", esc(b.name))
    o[#o + 1] = html_table(r, b)
  end
  if #r.by == 0 then o[#o + 1] = "<h2>All episodes</h2>"; o[#o + 1] = html_table(r, nil) end
end

-- The failure modes of each series and the model errors.
local function add_failures(o, r)
  o[#o + 1] = "<h2>Failure modes</h2>"
  o[#o + 1] = "<table><tr><th>strategy / model</th><th>verdicts met on the way (summed)</th></tr>"
  for _, x in ipairs(r.series) do
    o[#o + 1] = fmt("<tr><td>%s</td><td style=\"text-align:left\">%s</td></tr>", esc(x.key), esc(modes_line(x.metrics.failure_modes)))
  end
  o[#o + 1] = fmt("<tr class=\"all\"><td>all</td><td style=\"text-align:left\">%s</td></tr></table>", esc(modes_line(r.all.failure_modes)))
  local errors = text.model_errors(r)
  if #errors > 0 then
    o[#o + 1] = "<h2>Model errors</h2><table><tr><th>code</th><th>calls</th><th>first message</th></tr>"
    for _, e in ipairs(errors) do
      o[#o + 1] = fmt("<tr><td>%s</td><td>%d</td><td style=\"text-align:left\">%s</td></tr>", esc(e.code), e.count, esc(tostring(e.message or "-")))
    end
    o[#o + 1] = "</table>"
  end
end

-- Every episode, so a reader can find one task's result, and what the columns mean.
local function add_episodes(o, r)
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
  add_charts(o, r, opts)
  add_tables(o, r)
  add_failures(o, r)
  add_episodes(o, r)
  o[#o + 1] = SIZE_SCRIPT
  o[#o + 1] = "</body>"
  o[#o + 1] = "</html>"
  return concat(o, "\n") .. "\n"
end

return M
