-- Many hands on one store: runs claim each episode's key in the store before they start it
-- (leases, docs/store.md), so two sweeps, a sweep beside `kmrun STRATEGY`, or shards beside a
-- sweep on one store never run an episode twice, and no live episode is marked abandoned.
-- Two runs creating one store at once both work; default store names never collide.
local t = require "km.tap"
local testing = require "km.testing"
local store = require "km.store"
local sys = require "km.sys"

local ROOT, KMRUN = testing.paths()
local dir = testing.tmpdir()
local fmt = string.format

-- A strategy whose episodes take about 20 ms and judge nothing: what is tested is who runs them.
local QUICK = dir .. "/quick.lua"
testing.write(QUICK, 'local sys = require "km.sys"\nreturn function(ctx) sys.sleep(0.02) return nil end\n')
-- tests/tasks has one task with a starter (the offline provider runs only those)
local TASKS = ROOT .. "/tests/tasks"

local function sweep_cmd(path, extra)
  return fmt("%s sweep --strategies %s --tasks %s --provider offline --store %s --quiet %s", KMRUN, QUICK, TASKS,
    path, extra or "")
end

-- Runs shell commands at once, each started `gap` seconds after the one before; waits for all.
-- -> { { out = text, rc = status } ... }
local function together(cmds, gap)
  local parts = {}
  for i, c in ipairs(cmds) do
    parts[#parts + 1] = fmt("( %s > %s/p%d.log 2>&1; echo $? > %s/p%d.rc ) &", c, dir, i, dir, i)
    if gap and i < #cmds then parts[#parts + 1] = fmt("sleep %s;", gap) end
  end
  testing.sh(table.concat(parts, " ") .. " wait")
  local res = {}
  for i = 1, #cmds do
    res[i] = { out = testing.read(fmt("%s/p%d.log", dir, i)) or "",
      rc = tonumber(testing.read(fmt("%s/p%d.rc", dir, i))) }
  end
  return res
end

local function query(path, sql)
  local db = assert(store.open(path, { readonly = true }))
  local v = db:exec(sql)
  db:close()
  return v
end

-- Keys (strategy, task, model, rep) run more than once, and episodes per status.
local function duplicates(path)
  return tonumber(query(path, [[SELECT count(*) FROM (SELECT 1 FROM episodes GROUP BY strategy, task, model, rep
    HAVING count(*) > 1)]]))
end
local function count(path, where)
  return tonumber(query(path, "SELECT count(*) FROM episodes" .. (where and (" WHERE " .. where) or "")))
end

t.test("claim: one holder at a time; finished work is not done again", function()
  local path = dir .. "/unit.sqlite"
  local db = assert(store.open(path))
  local a, b = db:begin_run { name = "a" }, db:begin_run { name = "b" }
  t.eq(db:claim("s|t|m|1", a), "taken")
  local got, holder = db:claim("s|t|m|1", b)
  t.eq(got, "held")
  t.eq(holder.run_id, a)
  t.eq(holder.pid, sys.pid())
  t.eq(holder.alive, true)
  local ep = db:begin_episode(a, { strategy = "s", task = "t", model = "m", rep = 1 })
  assert(db:bind_lease("s|t|m|1", a, ep))
  t.eq(db:lease("s|t|m|1").episode_id, ep)
  -- finishing the episode ends its lease in the same statement
  assert(db:finish_episode(ep, "correct"))
  local l = db:lease("s|t|m|1")
  t.eq(l.state, "done")
  t.eq(l.status, "correct")
  -- b planned before a's episode existed (seen 0): the work is done, not taken again
  got, holder = db:claim("s|t|m|1", b, { seen = 0 })
  t.eq(got, "done")
  t.eq(holder.episode_id, ep)
  -- a run that planned after it (and chose to run it again: --rerun) takes it
  t.eq(db:claim("s|t|m|1", b, { seen = ep }), "taken")
  -- a claim whose episode never began is given back
  assert(db:drop_lease("s|t|m|1", b))
  t.eq(db:lease("s|t|m|1"), false)
  t.eq(db:lease("nothing"), false)
  db:close()
end)

t.test("a claim whose episode fails to begin is given back", function()
  local db = assert(store.open(dir .. "/begin.sqlite"))
  local run = db:begin_run { name = "a" }
  local L = require("km.run.leases").new(db, run)
  local item = { key = "s|t|m|1", seen = 0 }
  t.eq(L:claim(item), true)
  t.raises(function() L:start(item, function() error("no episode", 0) end) end, "no episode")
  t.eq(db:lease(item.key), false, "the claim was dropped")
  t.eq(L:claim(item), true, "and can be taken again")
  db:close()
end)

t.test("a lease whose holder is gone is taken over, and its episode abandoned", function()
  local path = dir .. "/gone.sqlite"
  local db = assert(store.open(path))
  local a, b = db:begin_run { name = "a" }, db:begin_run { name = "b" }
  local ep = db:begin_episode(a, { strategy = "s", task = "t", model = "m", rep = 1 })
  -- a process of this host that has exited held it (its lease not yet expired)
  local pid = assert(sys.spawn { "true" })
  sys.wait(pid, true)
  assert(db:exec(fmt([[INSERT INTO leases(key, run_id, episode_id, host, pid, state, taken_at, expires_at)
    VALUES ('s|t|m|1', %d, %d, (SELECT host FROM runs WHERE id = %d), %d, 'live', 0, 1e12)]], a, ep, a, pid)))
  t.eq(db:lease("s|t|m|1").alive, false, "holder gone")
  t.eq(db:claim("s|t|m|1", b, { seen = ep }), "taken")
  t.eq(db:episode(ep).status, "abandoned")
  t.eq(db:lease("s|t|m|1").run_id, b)
  -- on another host only the expiry tells: alive until then, taken after
  assert(db:exec([[INSERT INTO leases(key, run_id, host, pid, state, taken_at, expires_at)
    VALUES ('s|t|m|2', 1, 'elsewhere', 1, 'live', 0, 1e12), ('s|t|m|3', 1, 'elsewhere', 1, 'live', 0, 1)]]))
  t.eq(db:claim("s|t|m|2", b), "held")
  t.eq(db:claim("s|t|m|3", b), "taken")
  -- renewing extends this process's live leases of the run, no one else's
  local before = db:lease("s|t|m|3").expires_at
  sys.sleep(0.01)
  t.eq(db:renew_leases(b, 600), 2)
  t.ok(db:lease("s|t|m|3").expires_at > before + 300)
  t.eq(db:lease("s|t|m|2").expires_at, 1e12)
  db:close()
end)

t.test("two sweeps on one store, started 0.3 s apart, run each episode once", function()
  local path = dir .. "/two.sqlite"
  local res = together({ sweep_cmd(path, "--repeat 120"), sweep_cmd(path, "--repeat 120") }, 0.3)
  for i, r in ipairs(res) do t.ok(r.rc == 0 or r.rc == 1, "sweep " .. i .. " exit " .. tostring(r.rc) .. ": " .. r.out) end
  t.eq(count(path), 120, "one episode per key")
  t.eq(duplicates(path), 0)
  t.eq(count(path, "status IN ('abandoned', 'running')"), 0, "no live episode marked abandoned")
  -- both ran some: the second shared the work rather than waiting for the first
  t.eq(tonumber(query(path, "SELECT count(DISTINCT run_id) FROM episodes")), 2)
  t.ok(res[2].out:find("left to another run on this store", 1, true), res[2].out)
end)

t.test("a sweep beside kmrun STRATEGY, and shards beside a sweep, on one store", function()
  local path = dir .. "/mixed.sqlite"
  -- `kmrun STRATEGY` plans rep 1 of each task: the sweep's first key
  local res = together({ sweep_cmd(path, "--repeat 60"),
    fmt("%s %s %s --provider offline --store %s --quiet", KMRUN, QUICK, TASKS, path) }, 0.3)
  for i, r in ipairs(res) do t.ok(r.rc == 0 or r.rc == 1, "run " .. i .. " exit " .. tostring(r.rc) .. ": " .. r.out) end
  t.eq(count(path), 60)
  t.eq(duplicates(path), 0)
  path = dir .. "/shards.sqlite"
  res = together({ sweep_cmd(path, "--repeat 90"), sweep_cmd(path, "--repeat 90 --shard 1/2"),
    sweep_cmd(path, "--repeat 90 --shard 2/2") }, 0.2)
  for i, r in ipairs(res) do t.ok(r.rc == 0 or r.rc == 1, "run " .. i .. " exit " .. tostring(r.rc) .. ": " .. r.out) end
  t.eq(count(path), 90)
  t.eq(duplicates(path), 0)
  t.eq(count(path, "status IN ('abandoned', 'running')"), 0)
end)

t.test("a run killed with SIGKILL: its episodes are taken over by the next run", function()
  local path = dir .. "/killed.sqlite"
  testing.sh(fmt("%s >/dev/null 2>&1 & p=$!; sleep 0.6; kill -9 $p; wait $p", sweep_cmd(path, "--repeat 200")))
  local running = count(path, "status = 'running'")
  local out, rc = testing.sh(sweep_cmd(path, "--repeat 200"))
  t.ok(rc == 0 or rc == 1, out)
  t.eq(count(path, "status NOT IN ('abandoned', 'running')"), 200)
  t.eq(count(path, "status = 'abandoned'"), running, "the killed run's live episodes, and no other")
end)

t.test("two runs creating one store at once both work", function()
  for trial = 1, 3 do
    local path = fmt("%s/new%d.sqlite", dir, trial)
    local res = together({ sweep_cmd(path, "--repeat 5"), sweep_cmd(path, "--repeat 5"), sweep_cmd(path, "--repeat 5") })
    for i, r in ipairs(res) do
      t.ok(r.rc == 0 or r.rc == 1, fmt("trial %d run %d exit %s: %s", trial, i, tostring(r.rc), r.out))
    end
    t.eq(count(path), 5)
  end
end)

t.test("default store names never collide", function()
  local work = dir .. "/cwd"
  assert(sys.mkdir(work))
  local cmd = fmt("cd %s && %s %s %s --provider offline --quiet", work, KMRUN, QUICK, TASKS)
  local res = together({ cmd, cmd, cmd })
  for i, r in ipairs(res) do t.ok(r.rc == 0 or r.rc == 1, "run " .. i .. ": " .. r.out) end
  local names = sys.readdir(work .. "/runs")
  local stores = {}
  for _, n in ipairs(names) do if n:match("%.sqlite$") then stores[#stores + 1] = n end end
  t.eq(#stores, 3, table.concat(names, " "))
  for _, n in ipairs(stores) do t.ok(n:match("^%d+%-%d+%-%d+%.sqlite$") or n:match("^%d+%-%d+%-%d+%-%d+%.sqlite$"), n) end
end)

t.test("a foreign SQLite database is not turned into a store", function()
  -- tables and user_version 0: what any other program's SQLite file looks like
  local path = dir .. "/foreign.sqlite"
  local db = assert(store.open(path))
  assert(db:exec("DROP TABLE leases; PRAGMA user_version = 0"))
  db:close()
  local s, err, code = store.open(path)
  t.eq(s, nil)
  t.eq(code, "SCHEMA_VERSION", tostring(err))
  t.ok(tostring(err):find("holds tables", 1, true), tostring(err))
end)

os.execute("rm -rf " .. dir)
t.done()
