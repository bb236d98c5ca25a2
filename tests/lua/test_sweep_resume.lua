-- A sweep killed with SIGKILL part-way loses no finished episode and leaves none
-- half-written; the same command again finishes the rest, each episode exactly once.
local t = require "km.tap"
local testing = require "km.testing"
local store = require "km.store"

local ROOT, KMRUN = testing.paths()
local dir = testing.tmpdir()
local out, log = dir .. "/sweep.sqlite", dir .. "/log"
-- a cold compile cache of its own makes each episode take long enough to be killed mid-run
local cmd = string.format("KM_CACHE_DIR=" .. dir .. "/cache %s sweep --strategies %s/strategies/implement.lua,%s/strategies/repair.lua --tasks %s/tasks " ..
  "--provider offline --seeds 1 --store %s --worker-stderr null", KMRUN, ROOT, ROOT, ROOT, out)

-- the episodes the sweep plans: 2 strategies x the tasks in tasks/, counted from the tree
local N_TASKS = 0
for name in io.popen("ls " .. ROOT .. "/tasks"):lines() do
  local f = io.open(ROOT .. "/tasks/" .. name .. "/task.lua")
  if f then f:close() N_TASKS = N_TASKS + 1 end
end
local PLANNED = 2 * N_TASKS

local function count(db, where)
  return tonumber(db:exec("SELECT count(*) FROM episodes" .. (where and (" WHERE " .. where) or ""))) or 0
end

t.test("killed with SIGKILL after some episodes", function()
  -- wait for at least 10 finished episodes, then kill -9 the driver mid-run
  local sh = string.format([[
    : > %s
    %s > %s 2>&1 &
    pid=$!
    i=0
    while [ "$(grep -c -E '(correct|compiled|failed)' %s)" -lt 10 ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
    kill -9 $pid
    wait $pid 2>/dev/null
    exit 0]], log, cmd, log, log)
  t.ok(os.execute(sh))
  local db = assert(store.open(out, { readonly = true }))
  t.eq(db:exec("PRAGMA integrity_check"), "ok")
  local finished = count(db, "status NOT IN ('running')")
  t.ok(finished >= 10, finished .. " finished before the kill")
  t.ok(finished < PLANNED, "killed part-way: " .. finished)
  -- every finished episode is whole: a final verdict and a summary
  for _, e in ipairs(db:episodes {}) do
    if e.status ~= "running" then
      t.ok(type(e.summary) == "table" and e.summary.sweep_key, "summary of " .. e.task)
      t.ok(type(e.final) == "table" and e.final.verdict, "final of " .. e.task)
    end
  end
  db:close()
end)

t.test("the same command again runs only what is missing", function()
  local db = assert(store.open(out, { readonly = true }))
  local before = count(db, "status NOT IN ('running', 'abandoned')")
  local running = count(db, "status = 'running'")
  db:close()
  local p = io.popen(cmd .. " 2>&1")
  local text = p:read("a")
  p:close()
  t.ok(text:find(before .. " already finished", 1, true), text:sub(1, 400))
  if running > 0 then t.ok(text:find(running .. " abandoned", 1, true), text:sub(1, 400)) end
  db = assert(store.open(out, { readonly = true }))
  t.eq(count(db, "status NOT IN ('running', 'abandoned')"), PLANNED, "2 strategies x " .. N_TASKS .. " tasks")
  t.eq(count(db, "status = 'running'"), 0)
  t.eq(tonumber(db:exec([[SELECT count(*) FROM (SELECT strategy, task, rep FROM episodes
    WHERE status NOT IN ('running', 'abandoned') GROUP BY strategy, task, rep HAVING count(*) > 1)]])), 0, "no duplicates")
  db:close()
  -- and once more: nothing left to do
  p = io.popen(cmd .. " 2>&1")
  text = p:read("a")
  p:close()
  t.ok(text:find(PLANNED .. " already finished, 0 to run", 1, true), text:sub(1, 400))
end)

t.test("on a terminal, a progress bar; elsewhere, a line per episode", function()
  if not os.execute("command -v script >/dev/null 2>&1") then
    return t.note("skipped: util-linux's script (for a pseudo-terminal) is not installed")
  end
  local c2 = string.format("%s sweep --strategies %s/strategies/implement.lua --tasks %s/tests/tasks --provider offline " ..
    "--seeds 1 --store %s/bar.sqlite --worker-stderr null", KMRUN, ROOT, ROOT, dir)
  local p = io.popen("TERM=xterm timeout 60 script -qec '" .. c2 .. "' /dev/null 2>&1")
  local tty = p:read("a")
  p:close()
  t.ok(tty:find("\r[", 1, true) and tty:find("episodes,", 1, true) and tty:find("ETA", 1, true), tty:sub(-300))
  p = io.popen(c2:gsub("bar%.sqlite", "plain.sqlite") .. " 2>&1")
  local plain = p:read("a")
  p:close()
  t.ok(not plain:find("\r[", 1, true), "no bar without a terminal")
  t.ok(plain:find("t_rowsum", 1, true), plain)
end)

os.execute("rm -rf " .. dir)
t.done()
