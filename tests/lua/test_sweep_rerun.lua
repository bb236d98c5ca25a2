-- Resuming a sweep: episodes only compiled (no GPU then) are not finished — the same sweep
-- run again where there is a GPU judges them; --rerun names other statuses to redo; the
-- progress lines name strategy, model and repeat in aligned columns under a header.
local t = require "km.tap"
local testing = require "km.testing"
local store = require "km.store"
local task = require "km.task"

local ROOT = testing.paths()
local dir = testing.tmpdir()

local TASKS = { assert(task.load(ROOT .. "/tests/tasks/t_rowsum")) }
local STRATEGIES = { testing.strategy("implement"), testing.strategy("repair") }

-- One sweep (2 strategies x 1 task x 2 repeats) into `path` with an offline model; pool nil:
-- compile only; rerun: the statuses to run again (kmrun sweep --rerun). Returns the result
-- and what it printed.
local function run(path, pool, rerun)
  return testing.sweep { strategies = STRATEGIES, tasks = TASKS, repeats = 2, store = path, pool = pool, rerun = rerun,
    name = "sweep", capture = "stdout" }
end

local function statuses(path)
  local db = assert(store.open(path, { readonly = true }))
  local list = {}
  for _, e in ipairs(db:episodes {}) do list[#list + 1] = e.status end
  db:close()
  return table.concat(list, ",")
end

local function judge(_, cand)
  return { status = "correct", feedback = "correct (fake)", speedup = 1.5,
    timing = { candidate = { median = 1 }, reference = { median = 1.5 } } }
end

t.test("compile-only episodes are judged by the same sweep once a GPU is here", function()
  local path = dir .. "/a.sqlite"
  local res = run(path)
  t.eq(res.ran, 4)
  t.eq(statuses(path), "compiled,compiled,compiled,compiled")
  -- again without a GPU: nothing to do (compiling again would tell nothing new)
  res = run(path)
  t.eq(res.ran, 0)
  t.eq(res.skipped, 4)
  -- with a GPU: every compile-only episode is judged
  local pool = testing.fake_pool(judge)
  local text
  res, text = run(path, pool)
  t.eq(res.ran, 4, text)
  t.eq(res.correct, 4)
  t.ok(text:find("(again: 4 compiled, compile-only before, judged now from their stored code)", 1, true), text)
  t.eq(statuses(path), "compiled,compiled,compiled,compiled,correct,correct,correct,correct")
  -- and then they are finished
  res = run(path, testing.fake_pool(judge))
  t.eq(res.ran, 0)
end)

t.test("--rerun names the statuses to run again", function()
  local path = dir .. "/b.sqlite"
  run(path)
  local res, text = run(path, nil, { "compiled" })
  t.eq(res.ran, 4, text)
  t.ok(text:find("again: 4 compiled", 1, true), text)
  -- with a GPU, --rerun failed leaves compiled ones alone
  res = run(path, testing.fake_pool(judge), { "failed" })
  t.eq(res.ran, 0)
end)

t.test("progress lines: a header, then strategy, model and repeat in aligned columns", function()
  local _, text = run(dir .. "/c.sqlite")
  local lines = {}
  for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
  local head
  for i, l in ipairs(lines) do if l:match("^task%s+strategy%s+model%s+rep%s+status") then head = i break end end
  t.ok(head, text)
  local rows = {}
  for i = head + 1, #lines do
    if lines[i]:match("^t_rowsum") then rows[#rows + 1] = lines[i] end
  end
  t.eq(#rows, 4, text)
  local col = lines[head]:find("status", 1, true)
  for _, r in ipairs(rows) do
    t.ok(r:match("^t_rowsum%s+%a+%s+offline%s+[12]%s+compiled"), r)
    t.eq(r:find("compiled", 1, true), col, "aligned under the header: " .. r)
  end
  t.ok(text:find("implement", 1, true) and text:find("repair", 1, true), text)
end)

os.execute("rm -rf " .. dir)
t.done()
