-- What a run says about what it was given (issue 43, items 7 and 8), through the commands a
-- user types, on CPU tasks (candidates compile; without a GPU nothing runs):
--   * an invalid task among valid ones is skipped with one stderr line, counted in the
--     summary ("1 task dropped (invalid): NAME") and makes the exit status 1, from
--     `kmrun STRATEGY` and `kmrun sweep` alike; one a --filter leaves out is not counted;
--   * a --filter that matches no task says so, naming the tasks there are, status 2;
--   * a strategy with a syntax error exits 2 whichever command ran it;
--   * a file given where a candidate folder is expected says so.
local t = require "km.tap"
local testing = require "km.testing"
local sys = require "km.sys"

local fmt = string.format
local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local NO_GPU = not require("km.cuda").available()

local TASKS = DIR .. "/tasks"
testing.task_copy(ROOT .. "/tasks/l1_relu", TASKS, "l1_relu")
assert(sys.mkdir(TASKS .. "/l1_broken"))
testing.write(TASKS .. "/l1_broken/task.lua", 'return { name = "l1_broken", level = 7 }\n')

local function kmrun(args, env)
  return testing.run(fmt("cd '%s' && %s %s %s", DIR, env or "", KMRUN, args))
end

local function count(s, pat)
  local _, n = s:gsub(pat, "")
  return n
end

t.test("an invalid task among valid ones: one stderr line, counted in the summary, exit status 1", function()
  for i, cmd in ipairs {
    fmt("implement %s --provider offline --store %s/a.sqlite", TASKS, DIR),
    fmt("sweep --strategies implement %s --provider offline --store %s/b.sqlite", TASKS, DIR),
    fmt("implement --tasks %s --provider offline --store %s/c.sqlite", TASKS, DIR),
  } do
    local out, err, rc = kmrun(cmd)
    t.eq(rc, 1, cmd .. ": " .. out .. err)
    t.eq(count(err, "skipping invalid task"), 1, err)
    t.ok(err:find("l1_broken/task.lua: level: must be 1, 2 or 3", 1, true), err)
    local summary = out:match(i == 2 and "\n(sweep: 1 run[^\n]*)" or "\n(summary:[^\n]*)")
    t.ok(summary and summary:find("1 task dropped (invalid): l1_broken", 1, true), tostring(summary) .. "\n" .. out)
    t.ok(summary and summary:find(i == 2 and "sweep: 1 run" or "summary: 0/1 correct", 1, true), tostring(summary))
  end
  -- with a filter that leaves the broken task out, it is neither said nor counted
  local out, err, rc = kmrun(fmt("implement %s --filter relu --provider offline --store %s/d.sqlite", TASKS, DIR))
  t.eq(rc, NO_GPU and 3 or 0, out .. err)
  t.ok(not err:find("l1_broken", 1, true) and not out:find("dropped", 1, true), out .. err)
  -- every task named is invalid: nothing to run, a usage error as before
  out, err, rc = kmrun(fmt("implement %s/l1_broken --provider offline --store %s/e.sqlite", TASKS, DIR))
  t.eq(rc, 2, out .. err)
  t.ok(err:find("no valid tasks", 1, true), err)
end)

t.test("a --filter that matches no task says so, naming the tasks there are, and exits 2", function()
  for _, cmd in ipairs {
    fmt("implement %s --filter '^zz' --provider offline --store %s/f.sqlite", TASKS, DIR),
    fmt("sweep --strategies implement %s --filter '^zz' --provider offline --store %s/g.sqlite", TASKS, DIR),
  } do
    local out, err, rc = kmrun(cmd)
    t.eq(rc, 2, out .. err)
    t.ok(err:find("--filter '^zz' matches none of the 1 task(s) found (l1_relu)", 1, true), err)
    t.ok(not err:find("no valid tasks", 1, true), err)
    t.ok(not sys.realpath(DIR .. "/f.sqlite"), "no store made")
  end
end)

t.test("a strategy with a syntax error exits 2 whichever command runs it", function()
  assert(sys.mkdir(DIR .. "/mine"))
  testing.write(DIR .. "/mine/broken.lua", "return function(ctx)\n  local x = = 1\nend\n")
  local env = "KM_STRATEGIES=" .. DIR .. "/mine"
  for _, cmd in ipairs {
    fmt("%s/mine/broken.lua %s --provider offline --store %s/h.sqlite", DIR, TASKS, DIR),
    fmt("broken %s --provider offline --store %s/i.sqlite", TASKS, DIR),
    fmt("sweep --strategies %s/mine/broken.lua %s --provider offline --store %s/j.sqlite", DIR, TASKS, DIR),
    fmt("sweep --strategies broken %s --provider offline --store %s/k.sqlite", TASKS, DIR),
  } do
    local out, err, rc = kmrun(cmd, env)
    t.eq(rc, 2, cmd .. ": " .. out .. err)
    t.ok(err:find("broken.lua:2: unexpected symbol near '='", 1, true), err)
  end
  -- a script that raises is still 1, as with lua
  testing.write(DIR .. "/mine/raises.lua", "error('boom')\n")
  local _, err, rc = kmrun(DIR .. "/mine/raises.lua")
  t.eq(rc, 1, err)
end)

t.test("a file where a candidate folder is expected says so and names the folder", function()
  local cand = TASKS .. "/l1_relu/starter/kernel.cu"
  local out, err, rc = kmrun(fmt("eval %s/l1_relu %s", TASKS, cand))
  t.eq(rc, 2, out .. err)
  t.ok(err:find(cand .. ": a file, not a candidate folder: name the folder that holds kernel.cu and launch.lua (" ..
    TASKS .. "/l1_relu/starter?)", 1, true), err)
  t.ok(not err:find("Not a directory", 1, true), err)
  -- where a task folder is expected, as before
  out, err, rc = kmrun(fmt("implement %s/l1_relu/task.lua --provider offline", TASKS))
  t.eq(rc, 2, out .. err)
  t.ok(err:find("task.lua: not a folder", 1, true), err)
end)

sys.rmtree(DIR)
t.done()
