-- kmrun report RUN.sqlite [more.sqlite ...] [--json] [--html OUT.html] [--csv DIR] [--by G[,G...]]
--              [--fast-p P[,P...]] [--heatmap speedup|status]
-- What a sweep achieved: correctness, fast_p, speedups, pass@k over repeats, compile
-- success, repair rounds, cost per solved task, failure modes and roofline, per strategy
-- and model and per group (km.report, docs/report.md).
local report = require "km.report"
local A = require "km.args"

local SPEC = A.spec {
  name = "kmrun report",
  synopsis = "RUN.sqlite [more.sqlite ...] [options]",
  about = [[
Reads the final episode of each (task, strategy, model, repeat) in the files and prints a
table per grouping with an "all" row, the strategy x model table and pass@k over repeats
(docs/report.md defines every column).]],
  positional = { { "files", "RUN.sqlite", "kmrun stores (sweeps, runs, merged shards)", many = true, required = true } },
  options = {
    { "by", "G[,G...]", "groupings: level, category, strategy, model, task, or several joined by +\n" ..
        "(a row per combination); may be repeated (default: strategy+model,\n" ..
        "level+strategy+model, category+strategy+model: strategies and models never mixed)",
      type = "list" },
    { "fast-p", "P[,P...]", "the fast_p thresholds of the table columns (default 0.5,1,1.5,2)", type = "list" },
    { "json", nil, "print one JSON object with the same numbers instead of the tables" },
    { "html", "FILE", "also write a self-contained HTML page: the tables, the fast_p curve, correctness\n" ..
        "by level, speedups, rounds, cost, and the per-task map", type = "path" },
    { "csv", "DIR", "also write every table as a CSV file in DIR (created when absent)", type = "path" },
    { "heatmap", "MODE", "what colours the per-task map: speedup or status", choices = { "speedup", "status" },
      default = "speedup" },
    { "include-degenerate", nil, "count episodes of tasks that kmrun tasks lint flagged (left out by default)" },
  },
  footer = [[
exit status: 0 done, 1 no finished episodes in the files, 2 usage error, or a file that is
missing, not a kmrun store or damaged (one line on stderr names it)]],
}

local function fail(code, ...)
  io.stderr:write("kmrun report: ", ...)
  io.stderr:write("\n")
  return code
end

local a, acode = A.parse(SPEC, arg)
if not a then return acode end
local files, by, want_json, html_out = a.files, nil, a.json, a.html
if a.by then
  by = {}
  for _, g in ipairs(a.by) do
    local ok, why = report.dims(g)
    if not ok then return fail(2, "--by: ", why) end
    by[#by + 1] = g
  end
end
local fast_p
if a.fast_p then
  fast_p = {}
  for _, v in ipairs(a.fast_p) do
    local x = tonumber(v)
    if not x or x < 0 or x ~= x or x == math.huge then return fail(2, "--fast-p: '", v, "' is not a threshold (a number >= 0)") end
    fast_p[#fast_p + 1] = x
  end
end

-- A file that is missing, not a kmrun store, or damaged stops the report (one line, status 2);
-- rows whose stored JSON does not parse are left out with a note.
local episodes, info = report.load(files)
if not episodes then return fail(2, info) end
for _, note in ipairs(info.notes) do fail(0, note) end
if #episodes == 0 then
  return fail(1, "no finished episodes in ", table.concat(files, ", "),
    info.unfinished > 0 and string.format(" (%d still running or killed)", info.unfinished) or "",
    ": nothing to report")
end

local r = report.build(episodes, info, { by = by, fast_p = fast_p,
  include_degenerate = a.include_degenerate })
if html_out then
  local f, err = io.open(html_out, "w")
  if not f then return fail(2, "cannot write ", tostring(err)) end
  f:write(report.html(r, { heatmap = a.heatmap }))
  f:close()
end
if a.csv then
  local okd, derr = require("km.sys").mkdir(a.csv)
  if not okd then return fail(2, tostring(derr)) end
  for _, cf in ipairs(report.csv_files(r)) do
    local f, err = io.open(a.csv .. "/" .. cf[1], "w")
    if not f then return fail(2, "cannot write ", tostring(err)) end
    f:write(cf[2])
    f:close()
  end
end
if want_json then
  io.stdout:write(report.json(r), "\n")
else
  io.stdout:write(report.text(r))
  if html_out then io.stdout:write("\nwrote ", html_out, "\n") end
  if a.csv then io.stdout:write("wrote ", #report.csv_files(r), " CSV file(s) in ", a.csv, "\n") end
end
return 0
