-- km.statuses is the one table of statuses: every status a lua/km file (or a strategy)
-- compares against or emits is a row; a row added at run time is enough for the judge, the
-- repair loop, guidance, the report and the dataset tools to classify it; docs/eval.md
-- says what the rows say.
--
--   build/kmrun tests/lua/test_statuses.lua --update-doc   rewrites docs/eval.md's table
local t = require "km.tap"
local sys = require "km.sys"
local statuses = require "km.statuses"
local testing = require "km.testing"

local fmt, concat = string.format, table.concat

local DOC = "docs/eval.md"

local function read(path) return assert(testing.read(path)) end

----------------------------------------------------------------------------------------
-- (a) the sources: quoted status names where a status is compared, assigned or emitted

-- Patterns whose capture is a status name, on a line with its comment cut off. `only`
-- limits a pattern to files whose path ends so.
local USES = {
  { pat = "[%w_%.%]]*status[%w_%]]*%s*[=~]=%s*[\"']([%w_]+)[\"']" },   -- x.status == "s"
  { pat = "[%w_%.]*status[%w_, ]-%s=%s*[\"']([%w_]+)[\"']" },          -- status, why = "s"
  { pat = "%f[%w_][cr]?st%s*[=~]=%s*[\"']([%w_]+)[\"']" },              -- st == "s", rs == "s"
  { pat = "res%[2%]%s*[=~]=%s*[\"']([%w_]+)[\"']" },                    -- the sweep's finished status
  { pat = "%f[%w_]finish%([^,]+,%s*\"([%w_]+)\"" },                     -- verdict.finish(v, "s", ...)
  { pat = "finish_episode%([^,]+,%s*\"([%w_]+)\"" },
  { pat = "finish_run%([^,]+,%s*\"([%w_]+)\"" },
  { pat = "progress%([^,]+,%s*\"([%w_]+)\"" },
  { pat = "status%s*[<>=]+%s*'([%w_]+)'" },                             -- SQL: status <> 's'
  { pat = "return%s+false,%s*\"([%w_]+)\"", only = "judge.lua" },       -- a stage's failure
  { pat = "return%s+\"([%w_]+)\",", only = "judge.lua" },
  { pat = "fault = {%s*\"([%w_]+)\"", only = "judge.lua" },
}

-- -> list of { name, where }
local function uses_in(path)
  local out, ln = {}, 0
  for line in io.lines(path) do
    ln = ln + 1
    local code = line:gsub("%-%-.*$", "")
    for _, u in ipairs(USES) do
      if not u.only or path:sub(-#u.only) == u.only then
        for name in code:gmatch(u.pat) do out[#out + 1] = { name = name, where = path .. ":" .. ln } end
      end
    end
    -- the rerun option's choices (km.run.runner): episode statuses, and "all"
    local choices = code:match("choices = {([^}]*\"compiled\"[^}]*)}")
    if choices then
      for name in choices:gmatch("\"([%w_]+)\"") do
        if name ~= "all" then out[#out + 1] = { name = name, where = path .. ":" .. ln } end
      end
    end
  end
  return out
end

local function sources()
  local files = {}
  for _, dir in ipairs { "lua/km", "lua/km/cmd", "lua/km/judge", "lua/km/run", "lua/km/task", "lua/km/task/lint",
    "lua/km/report", "lua/km/data", "strategies" } do
    for _, f in ipairs(assert(sys.readdir(dir))) do
      if f:match("%.lua$") and f ~= "statuses.lua" then files[#files + 1] = dir .. "/" .. f end
    end
  end
  table.sort(files)
  return files
end

t.test("the scan finds what it is meant to find", function()
  local tmp = os.tmpname()
  local f = assert(io.open(tmp, "w"))
  f:write('if v.status == "alpha" then end -- status == "not_me"\n',
    'local status, why = "beta", 1\n', 'verdict.finish(v, "gamma", "x")\n',
    'db:finish_episode(ep, "delta", {})\n', "WHERE m.status <> 'eps'\n",
    'choices = { "compiled", "zeta", "all" }\n', 'if st == "eta" or res[2] ~= "theta" then end\n')
  f:close()
  local got = {}
  for _, u in ipairs(uses_in(tmp)) do got[#got + 1] = u.name end
  os.remove(tmp)
  t.eq(concat(got, " "), "alpha beta gamma delta eps compiled zeta eta theta")
end)

t.test("every status a lua/km file or a strategy compares against or emits is a row", function()
  local n, missing = 0, {}
  for _, path in ipairs(sources()) do
    for _, u in ipairs(uses_in(path)) do
      n = n + 1
      if not statuses.get(u.name) then missing[#missing + 1] = u.name .. " (" .. u.where .. ")" end
    end
  end
  t.ok(n > 40, "the scan found only " .. n .. " uses")
  t.eq(concat(missing, ", "), "", "statuses without a row in km.statuses")
end)

t.test("the lists others keep are the table's", function()
  local verdict = require "km.verdict"
  t.ok(verdict.statuses == statuses, "km.verdict hands on km.statuses")
  t.eq(concat(verdict.STATUSES, " "), "compile_error load_error launch_error timeout crashed wrong_shape " ..
    "mismatch nan_inf inputs_modified out_of_bounds race too_fast varying_work correct")
  t.eq(concat(require("km.run.model").NO_CANDIDATE, " "), "no_code truncated model_error")
  local G = require "km.run.guidance"
  t.eq(concat(G.STATUSES, " "), concat(verdict.STATUSES, " ") .. " too_slow no_code")
  for _, row in ipairs(statuses.ROWS) do
    t.ok(row.ends_as == nil or (statuses.get(row.ends_as) or {}).episode, row.name .. ": ends_as is an episode status")
  end
end)

t.test("a malformed row is refused", function()
  t.raises(function() statuses.add { name = "x_y", stage = "nowhere", failure = true, meaning = "." } end, "unknown stage")
  t.raises(function() statuses.add { name = "x_y", stage = "verify", meaning = "." } end, "failure")
  t.raises(function() statuses.add { name = "x_y", stage = "verify", failure = true, meaning = ".", colur = "#fff" } end,
    "unknown property 'colur'")
  t.raises(function() statuses.add { name = "mismatch", stage = "verify", failure = true, meaning = "." } end, "exists")
  t.eq(statuses.get("x_y"), nil)
end)

----------------------------------------------------------------------------------------
-- (c) the docs say what the rows say

local function yes(b) return b and "yes" or "" end

local function doc_table()
  local lines = { "| status | stage | failure | ends | colour | flags | meaning |", "|---|---|---|---|---|---|---|" }
  for _, row in ipairs(statuses.ROWS) do
    local flags = {}
    for _, k in ipairs { "judge", "numeric", "guide", "episode", "unfinished", "rerun" } do
      if row[k] then flags[#flags + 1] = "`" .. k .. "`" end
    end
    if row.ends_as then flags[#flags + 1] = "`ends_as " .. row.ends_as .. "`" end
    if row.exit then flags[#flags + 1] = "`exit " .. row.exit .. "`" end
    lines[#lines + 1] = fmt("| `%s` | %s | %s | %s | %s | %s | %s |", row.name, row.stage, yes(row.failure),
      row.fatal and "fatal" or row.stops and "stops" or "", row.colour and ("`" .. row.colour .. "`") or "",
      concat(flags, " "), row.meaning)
  end
  return concat(lines, "\n")
end

local BLOCK = "(<!%-%- generated: statuses %(tests/lua/test_statuses%.lua %-%-update%-doc%) %-%->\n)(.-)(<!%-%- end: statuses %-%->)"

if arg and arg[1] == "--update-doc" then
  local doc = read(DOC)
  local new, n = doc:gsub(BLOCK, function(a, _, c) return a .. doc_table() .. "\n" .. c end)
  assert(n == 1, DOC .. ": no generated statuses block")
  local f = assert(io.open(DOC, "wb"))
  f:write(new)
  f:close()
  print("updated " .. DOC)
  os.exit(0)
end

t.test(DOC .. " holds the table of statuses as it is", function()
  local doc = read(DOC)
  local _, got = doc:match(BLOCK)
  t.ok(got, DOC .. ": no generated statuses block")
  local want = doc_table() .. "\n"
  if got ~= want then t.diag("the table is now:\n" .. want .. "(build/kmrun tests/lua/test_statuses.lua --update-doc)") end
  t.eq(got, want, "the doc's statuses table")
end)

t.test(DOC .. "'s list of the judge's statuses is the table's", function()
  local doc = read(DOC):gsub("%s+", " ")
  local list, extra = doc:match("Statuses: `([%w_ ]+)`, plus `([%w_]+)` when the task or kmrun failed")
  t.ok(list, DOC .. ": no 'Statuses: `...`, plus `error`' sentence")
  t.eq(list, concat(require("km.verdict").STATUSES, " "))
  t.eq(extra, require("km.verdict").ERROR)
  t.eq(statuses.prop(extra, "stage"), "run")
end)

----------------------------------------------------------------------------------------
-- (b) adding a row is enough

t.test("a row added at run time: the judge, the loop, guidance, report and dataset classify it", function()
  statuses.add { name = "spilled", stage = "compile", colour = "#123456", failure = true, judge = true, guide = true,
    meaning = "a test's status: the kernel spills registers" }
  statuses.add { name = "drifted", stage = "verify", colour = "#654321", failure = true, judge = true, numeric = true,
    meaning = "a test's status: values drift across runs" }
  statuses.add { name = "good_enough", stage = "measure", failure = false, stops = true, judge = true,
    ends_as = "correct", exit = 0, meaning = "a test's status: correct enough to stop" }

  -- the judge's verdict builder accepts it; the episode's store status and eval's exit follow
  local verdict = require "km.verdict"
  local v = verdict.finish(verdict.new {}, "spilled", "spills")
  t.eq(v.status, "spilled")
  t.eq(require("km.run.model").episode_status(v), "failed")
  t.eq(require("km.run.model").episode_status { status = "good_enough" }, "correct")
  t.eq(statuses.prop("good_enough", "exit"), 0)

  -- the dataset's failure buckets come from the rows' stage, numeric and failure
  local dataset = require "km.data.dataset"
  local function bucket(modes, final)
    return dataset.failure_bucket { summary = { failure_modes = modes }, status = final, correct = final == "correct" }
  end
  t.eq(bucket({ spilled = 1, correct = 1 }, "correct"), "repaired-compile")
  t.eq(bucket({ spilled = 1, drifted = 2 }, "drifted"), "failed-numeric")
  t.eq(bucket({ good_enough = 1 }, "good_enough"), "clean")

  -- the report's per-task map fills a cell with the row's colour, and its legend names it
  local report = require "km.report"
  local function ep(task, status)
    return { id = 1, task = task, strategy = "s", model = "m", rep = 1, status = "failed", started_at = 1,
      summary = { status = status, failure_modes = { [status] = 1 } }, final = { verdict = { status = status } } }
  end
  local r = report.build({ ep("l1_a", "spilled"), ep("l1_b", "drifted") }, {})
  local svg = report.svg_heatmap(r, "status")
  t.ok(svg:find('fill="#123456"', 1, true), "spilled's colour in the map")
  t.ok(svg:find('fill="#654321"', 1, true), "drifted's colour in the map")
  t.ok(svg:find(">spilled<", 1, true), "the legend names spilled")

  -- the repair loop stops on a row that stops, with its candidate
  local steps = require "km.run.steps"
  local evals = 0
  local ctx = { offline = false, task = {}, guidance = { for_verdict = function() return {} end },
    propose = function() return { name = "c" }, "reply", nil end,
    eval = function() evals = evals + 1 return { status = "good_enough" } end }
  local cand, fv, rounds = steps.repair(ctx, {}, 5)
  t.eq(cand and cand.name, "c")
  t.eq(fv.status, "good_enough")
  t.eq(rounds, 1)

  -- a guide may name a row marked guide, not one without
  local G = require "km.run.guidance"
  local function guide(list)
    return G.parse("---\nid: a\ntitle: A\ncategories: elementwise\nstatuses: " .. list .. "\ntags: x\n---\nA hint.\n", "a.md")
  end
  local g, err = guide("spilled!")
  t.ok(g, err)
  t.eq(g and g.statuses.spilled, G.PRIMARY)
  local g2, err2 = guide("drifted")
  t.eq(g2, nil)
  t.ok(tostring(err2):find("unknown status 'drifted'", 1, true), err2)
end)

t.done()
