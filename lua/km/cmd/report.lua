-- kmrun report RUN.sqlite [more.sqlite ...] [--json] [--html OUT.html] [--by level|category|strategy|model]
-- What a sweep achieved: correctness, fast_p, speedups, compile success, repair rounds, cost
-- per solved task, failure modes and roofline, per group and overall (km.report).
local report = require "km.report"

local USAGE = [=[
usage: kmrun report RUN.sqlite [more.sqlite ...] [--json] [--html OUT.html] [--by G[,G...]]
  Reads the final episode of each (task, strategy, model, seed) in the files and prints a
  table per grouping with an "all" row (docs/report.md defines every column).
  --by G        level, category, strategy or model; repeat or comma-separate for several
                (default: level and category)
  --json        print one JSON object with the same numbers instead of the tables
  --html FILE   also write a self-contained HTML page with the tables and four SVG charts
exit status: 0 done, 1 no finished episodes in the files, 2 usage error, or a file that is
missing, not a kmrun store or damaged (one line on stderr names it)
]=]

local function fail(code, ...)
  io.stderr:write("kmrun report: ", ...)
  io.stderr:write("\n")
  return code
end

local files, by, want_json, html_out = {}, nil, false, nil
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--json" then want_json = true
  elseif a == "--html" or a == "--by" then
    local v = arg[i + 1]
    if not v or v == "" then return fail(2, a, " needs a value\n", USAGE) end
    if a == "--html" then html_out = v
    else
      by = by or {}
      for g in v:gmatch("[^,%s]+") do
        if not report.GROUPINGS[g] then return fail(2, "cannot group by '", g, "' (level, category, strategy or model)") end
        by[#by + 1] = g
      end
    end
    i = i + 1
  elseif a == "-h" or a == "--help" then io.stdout:write(USAGE) return 0
  elseif a:sub(1, 1) == "-" and a ~= "-" then return fail(2, "unknown option ", a, "\n", USAGE)
  else files[#files + 1] = a end
  i = i + 1
end
if #files == 0 then io.stderr:write(USAGE) return 2 end

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

local r = report.build(episodes, info, { by = by })
if html_out then
  local f, err = io.open(html_out, "w")
  if not f then return fail(2, "cannot write ", tostring(err)) end
  f:write(report.html(r))
  f:close()
end
if want_json then
  io.stdout:write(report.json(r), "\n")
else
  io.stdout:write(report.text(r))
  if html_out then io.stdout:write("\nwrote ", html_out, "\n") end
end
return 0
