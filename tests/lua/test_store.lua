-- km.store: episodes round-trip, JSONL export, a killed writer loses nothing committed.
local t = require "km.tap"
local testing = require "km.testing"
local store = require "km.store"
local json = require "km.json"

local _, KMRUN = testing.paths()
local dir = testing.tmpdir()
local n_db = 0
local function fresh()
  n_db = n_db + 1
  return string.format("%s/s%d.db", dir, n_db)
end

local function read_lines(path)
  local lines = {}
  for line in io.lines(path) do lines[#lines + 1] = line end
  return lines
end

-- Deep equality where integer/float subtypes and json.null count.
local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) == "number" then return math.type(a) == math.type(b) and a == b end
  if type(a) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local PAYLOADS = {
  { kind = "prompt", payload = { messages = { { role = "user", content = "write relu\n\"quoted\"" } } } },
  { kind = "model_call", payload = { model = "m", tokens = { prompt = 812, completion = 1 << 40 }, reasoning_chars = 0 },
    opts = { duration_ms = 950.25 } },
  { kind = "candidate", payload = { source = "extern \"C\" __global__ void k() {}", params = { BLOCK = 256 } } },
  { kind = "verdict", payload = { status = "mismatch", first = { { index = 3, got = 1.5, want = 2.0 } },
    max_abs = 0.5, shapes = json.array() } },
  { kind = "note", payload = "just a string" },
  { kind = "timing", payload = { median_ms = 0.0123, n = 31, quartiles = { 0.012, 0.0125 } },
    opts = { started_at = 1700000000.5, duration_ms = 12 } },
}

local function fill(db)
  local run = assert(db:begin_run { name = "sweep-1", config = { models = { "a", "b" }, rounds = 5 } })
  local ep = assert(db:begin_episode(run, { task = "l1_relu", strategy = "repair", model = "m", rep = 7 }))
  for i, p in ipairs(PAYLOADS) do
    t.eq(db:append(ep, p.kind, p.payload, p.opts), i, "seq of step " .. i)
  end
  assert(db:finish_episode(ep, "correct", { final = { source = "k", speedup = 1.5 }, summary = { rounds = 2 } }))
  return run, ep
end

t.test("an episode with several steps round-trips", function()
  local db = assert(store.open(fresh()))
  local before = os.time()
  local run, ep = fill(db)
  local e = assert(db:episode(ep))
  t.eq(e.id, ep)
  t.eq(e.run_id, run)
  t.eq(e.task, "l1_relu")
  t.eq(e.strategy, "repair")
  t.eq(e.model, "m")
  t.eq(e.rep, 7)
  t.eq(math.type(e.rep), "integer")
  t.eq(e.status, "correct")
  t.eq(#e.uuid, 36)
  t.ok(e.started_at >= before - 1 and e.finished_at >= e.started_at, "timestamps")
  t.ok(same(e.final, { source = "k", speedup = 1.5 }))
  t.ok(same(e.summary, { rounds = 2 }))
  t.eq(#e.steps, #PAYLOADS)
  for i, s in ipairs(e.steps) do
    t.eq(s.seq, i)
    t.eq(s.kind, PAYLOADS[i].kind)
    t.ok(same(s.payload, PAYLOADS[i].payload), "payload of step " .. i .. ": " .. json.encode(s.payload))
  end
  t.eq(e.steps[2].duration_ms, 950.25)
  t.eq(e.steps[1].duration_ms, nil)
  t.eq(e.steps[6].started_at, 1700000000.5)
  t.eq(e.steps[2].payload.tokens.completion, 1 << 40)
  t.eq(json.encode(e.steps[4].payload.shapes), "[]", "empty arrays stay arrays")
  db:close()
end)

t.test("runs, episode listings and filters", function()
  local db = assert(store.open(fresh()))
  local run = fill(db)
  local e2 = db:begin_episode(run, { task = "l1_gelu" })
  local runs = db:runs()
  t.eq(#runs, 1)
  t.eq(runs[1].id, run)
  t.eq(runs[1].name, "sweep-1")
  t.eq(runs[1].status, "running")
  t.eq(runs[1].kmrun_version, require("km.core").version())
  t.eq(type(runs[1].host), "string")
  t.eq(runs[1].config.rounds, 5)
  t.ok(db:finish_run(run, "done"))
  t.eq(db:runs()[1].status, "done")
  t.ok(db:runs()[1].finished_at)

  t.eq(#db:episodes(), 2)
  t.eq(#db:episodes { run_id = run }, 2)
  t.eq(#db:episodes { run_id = run + 1 }, 0)
  local c = db:episodes { status = "correct" }
  t.eq(#c, 1)
  t.eq(c[1].task, "l1_relu")
  t.eq(c[1].steps, nil, "listings carry no steps")
  local r = db:episodes { task = "l1_gelu", status = "running" }
  t.eq(#r, 1)
  t.eq(r[1].id, e2)
  t.eq(r[1].rep, nil)
  t.eq(r[1].final, nil)
  db:close()
end)

t.test("export_jsonl writes one valid JSON object per episode", function()
  local db = assert(store.open(fresh()))
  local run, ep = fill(db)
  local ep2 = db:begin_episode(run, { task = "other" })
  db:append(ep2, "note", { x = 1 })
  local out = dir .. "/all.jsonl"
  t.eq(db:export_jsonl(out), 2)
  local lines = read_lines(out)
  t.eq(#lines, 2)
  local first = assert(json.decode(lines[1]))
  t.eq(first.id, ep)
  t.eq(first.uuid, db:episode(ep).uuid)
  t.eq(#first.steps, #PAYLOADS)
  for i, s in ipairs(first.steps) do
    t.eq(s.seq, i)
    t.ok(same(s.payload, PAYLOADS[i].payload), "exported payload " .. i)
  end
  t.eq(first.steps[1].duration_ms, json.null)
  t.eq(first.final.speedup, 1.5)
  t.eq(json.encode(first), lines[1], "a line is what json.encode writes for it")
  t.eq(db:export_episode(ep), lines[1])
  local second = assert(json.decode(lines[2]))
  t.eq(second.final, json.null)
  t.eq(second.rep, json.null)
  t.eq(second.status, "running")

  t.eq(db:export_jsonl(out, { status = "correct" }), 1)
  t.eq(#read_lines(out), 1)
  t.eq(db:export_jsonl(out, { task = "other", run_id = run }), 1)
  t.eq(json.decode(read_lines(out)[1]).id, ep2)
  t.eq(db:export_jsonl(out, { episode_id = ep2 }), 1)
  t.eq(db:export_jsonl(out, { episode_id = ep2, status = "correct" }), 0)
  t.eq(db:export_jsonl(out, { episode_id = 999 }), 0)

  local f = assert(io.open(out, "w"))
  f:write("# header\n")
  t.eq(db:export_jsonl(f, { run_id = run }), 2)
  f:close()
  lines = read_lines(out)
  t.eq(#lines, 3)
  t.eq(lines[1], "# header")
  t.ok(json.decode(lines[3]))

  local v, msg, code = db:export_jsonl(dir .. "/no/such/dir/x.jsonl")
  t.eq(v, nil)
  t.eq(code, "IO_ERROR")
  t.ok(msg:find("no/such/dir", 1, true), msg)
  t.raises(function() db:export_jsonl(42) end, "path or a file handle")
  local closed = assert(io.open(out, "w"))
  closed:close()
  t.raises(function() db:export_jsonl(closed) end, "closed file")
  db:close()
end)

t.test("NaN in a payload is stored as null; a function raises", function()
  local db = assert(store.open(fresh()))
  local run = db:begin_run {}
  local ep = db:begin_episode(run)
  t.eq(db:append(ep, "verdict", { max_abs = 0 / 0, inf = 1 / 0 }), 1)
  local s = db:episode(ep).steps[1]
  t.eq(s.payload.max_abs, json.null)
  t.raises(function() db:append(ep, "note", { f = print }) end, "cannot encode a function at $.f")
  t.raises(function() db:append(ep, "note") end, "value expected")
  t.raises(function() db:append("x", "note", {}) end, "number expected")
  t.eq(db:append(ep, "note", {}), 2, "a raised append took no seq")
  db:close()
end)

t.test("expected failures return nil, message, CODE", function()
  local v, msg, code = store.open(dir .. "/missing/dir/x.db")
  t.eq(v, nil)
  t.eq(code, "SQLITE_CANTOPEN")
  t.ok(msg:find("does not exist", 1, true), msg)

  v, msg, code = store.open(dir .. "/nothere.db", { readonly = true })
  t.eq(v, nil)
  t.eq(code, "SQLITE_CANTOPEN")

  local junk = dir .. "/junk.db"
  local f = assert(io.open(junk, "w"))
  f:write(string.rep("not sqlite ", 500))
  f:close()
  v, msg, code = store.open(junk)
  t.eq(v, nil)
  t.eq(code, "SQLITE_NOTADB")

  local db = assert(store.open(fresh()))
  v, msg, code = db:begin_episode(12345, { task = "x" })
  t.eq(v, nil)
  t.eq(code, "SQLITE_CONSTRAINT")
  t.ok(msg:find("no run 12345", 1, true), msg)
  v, msg, code = db:append(777, "note", {})
  t.eq(code, "SQLITE_CONSTRAINT")
  v, msg, code = db:episode(777)
  t.eq(v, nil)
  t.eq(code, "NOT_FOUND")
  v, msg, code = db:finish_episode(777, "failed")
  t.eq(code, "NOT_FOUND")
  v, msg, code = db:finish_run(777)
  t.eq(code, "NOT_FOUND")
  v, msg, code = db:exec("SELEKT")
  t.eq(code, "SQLITE_ERROR")
  t.eq(db:exec("PRAGMA integrity_check"), "ok")
  t.eq(db:exec("CREATE TABLE scratch(x)"), true)
  -- JSON damaged by hand is reported, not raised
  local ep = db:begin_episode(db:begin_run {})
  db:append(ep, "note", { ok = true })
  db:exec("UPDATE steps SET payload = '{bad' WHERE episode_id = " .. ep)
  v, msg, code = db:episode(ep)
  t.eq(v, nil)
  t.eq(code, "CORRUPT")
  t.ok(msg:find("step 1: stored payload is not valid JSON", 1, true), msg)
  db:close()
end)

t.test("read-only stores read and refuse writes", function()
  local path = fresh()
  local db = assert(store.open(path))
  local _, ep = fill(db)
  db:close()
  local ro = assert(store.open(path, { readonly = true }))
  t.eq(#ro:episode(ep).steps, #PAYLOADS)
  local v, _, code = ro:append(ep, "note", {})
  t.eq(v, nil)
  t.eq(code, "SQLITE_READONLY")
  ro:close()
  t.raises(function() store.open(path, { synchronous = "sometimes" }) end, "synchronous")
  local full = assert(store.open(path, { synchronous = "full" }))
  full:close()
end)

t.test("a closed store raises; close is idempotent; <close> and __gc release", function()
  local db = assert(store.open(fresh()))
  db:close()
  db:close()
  t.eq(tostring(db), "km.Store (closed)")
  t.raises(function() db:begin_run {} end, "attempt to use a closed km.Store")
  t.raises(function() db:episode(1) end, "attempt to use a closed km.Store")
  t.raises(function() db.runs({}) end, "km.Store expected")
  local path = fresh()
  do
    local d <close> = assert(store.open(path))
    d:begin_run { name = "scoped" }
  end
  local again = assert(store.open(path))
  t.eq(again:runs()[1].name, "scoped")
  again = nil
  collectgarbage()
end)

t.test("a writer killed with SIGKILL loses no acknowledged step", function()
  local path = fresh()
  local acks = dir .. "/acks.txt"
  -- The child appends steps forever, printing each seq once append has returned (committed).
  local child = string.format([[
    local db = assert(require("km.store").open(%q))
    local run = db:begin_run { name = "doomed" }
    local ep = db:begin_episode(run, { task = "t" })
    io.stdout:setvbuf("no")
    print("episode " .. ep)
    for i = 1, math.huge do
      local seq = assert(db:append(ep, "note", { i = i, text = string.rep("x", i %% 500) }))
      print("ack " .. seq)
    end]], path)
  local script = dir .. "/child.lua"
  local f = assert(io.open(script, "w"))
  f:write(child)
  f:close()
  -- Kill it at an arbitrary moment once it has acknowledged 200 steps (or after ~10 s).
  -- create the file first: the loop below must never grep a file the child has not opened yet
  local sh = string.format([[
    : > %s
    %s %s > %s 2>&1 &
    pid=$!
    i=0
    while [ "$(grep -c '^ack' %s 2>/dev/null)" -lt 200 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
    kill -9 $pid
    wait $pid 2>/dev/null
    exit 0]], acks, KMRUN, script, acks, acks)
  t.ok(os.execute(sh))
  local ep, acked = nil, {}
  for line in io.lines(acks) do
    ep = ep or tonumber(line:match("^episode (%d+)"))
    local seq = line:match("^ack (%d+)$")
    if seq then acked[#acked + 1] = tonumber(seq) end
  end
  t.ok(ep, "the child started")
  t.ok(#acked >= 200, "the child acknowledged " .. #acked .. " steps")

  local wal = io.open(path .. "-wal")
  t.ok(wal, "the killed writer left its WAL behind")
  if wal then wal:close() end
  local db = assert(store.open(path))
  t.eq(db:exec("PRAGMA integrity_check"), "ok")
  local e = assert(db:episode(ep))
  t.note(string.format("killed after %d acknowledged steps; %d stored", #acked, #e.steps))
  t.eq(e.status, "running", "never finished")
  t.ok(#e.steps >= #acked, string.format("%d stored >= %d acknowledged", #e.steps, #acked))
  for i, s in ipairs(e.steps) do
    t.eq(s.seq, i, "no gaps")
    t.eq(s.payload.i, i, "each step whole")
    t.eq(#s.payload.text, i % 500)
  end
  -- and the store takes new writes after the crash
  t.eq(db:append(ep, "note", { after = true }), #e.steps + 1)
  db:close()
end)

t.test("two handles on one file: each append gets its own seq", function()
  local path = fresh()
  local a = assert(store.open(path))
  local b = assert(store.open(path))
  local ep = a:begin_episode(a:begin_run {})
  local seqs = {}
  for i = 1, 10 do seqs[#seqs + 1] = (i % 2 == 0 and a or b):append(ep, "note", { i = i }) end
  t.eq(table.concat(seqs, ","), "1,2,3,4,5,6,7,8,9,10")
  t.eq(#b:episode(ep).steps, 10)
  a:close()
  b:close()
end)

-- A store written by schema version 1, whose repeat column was called seed: made here from
-- a version 2 one by hand.
local function v1_store()
  local path = fresh()
  local db = assert(store.open(path))
  local run = db:begin_run { name = "old" }
  for r = 1, 2 do
    local ep = db:begin_episode(run, { task = "l1_relu", strategy = "repair", model = "m1", rep = r })
    db:append(ep, "note", { r = r })
    db:finish_episode(ep, "correct", { summary = { status = "correct", speedup = 1.5, level = 1, category = "activation" } })
  end
  db:finish_run(run, "finished")
  assert(db:exec("ALTER TABLE episodes RENAME COLUMN rep TO seed; UPDATE meta SET value = '1' WHERE key = " ..
    "'schema_version'; PRAGMA user_version = 1"))
  db:close()
  return path
end

local sh = testing.sh

t.test("a version 1 store: read as it is by readers, migrated (seed -> rep) by a writer", function()
  t.eq(store.schema_version, 2)
  t.raises(function() store.open(":memory:"):begin_episode(1, { seed = 1 }) end, "'rep'", "seed is refused by name")
  local path = v1_store()
  local ro = assert(store.open(path, { readonly = true }))
  t.eq(ro:exec("PRAGMA user_version"), "1")
  local eps = ro:episodes {}
  t.eq(#eps, 2)
  t.eq(eps[2].rep, 2, "the repeat read from the old column")
  t.eq(eps[2].seed, nil)
  t.eq(ro:episode(eps[1].id).rep, 1)
  ro:close()
  -- the commands that only read leave it as it is
  local out, rc = sh(KMRUN .. " report " .. path .. " --json")
  t.eq(rc, 0, out)
  t.eq(json.decode(out).episodes, 2, "two repeats, two episodes")
  out, rc = sh(KMRUN .. " export " .. path .. " --format jsonl")
  t.eq(rc, 0, out)
  t.ok(out:find('"rep":2', 1, true), out)
  local merged = fresh()
  out, rc = sh(KMRUN .. " merge " .. merged .. " " .. path)
  t.eq(rc, 0, out)
  local m = assert(store.open(merged, { readonly = true }))
  t.eq(m:episodes {}[2].rep, 2, "merged from a version 1 input")
  m:close()
  ro = assert(store.open(path, { readonly = true }))
  t.eq(ro:exec("PRAGMA user_version"), "1", "readers changed nothing")
  ro:close()
  -- a writer migrates it, keeping every value
  local db = assert(store.open(path))
  t.eq(db:exec("PRAGMA user_version"), "2")
  t.eq(db:exec("SELECT value FROM meta WHERE key = 'schema_version'"), "2")
  t.ok(tonumber(db:exec("SELECT value FROM meta WHERE key = 'migrated_from_1_at'")), "when it was migrated")
  t.eq(db:exec("SELECT group_concat(rep) FROM episodes"), "1,2")
  local run = db:begin_run {}
  local ep = db:begin_episode(run, { task = "l1_relu", strategy = "repair", rep = 3 })
  t.eq(db:episode(ep).rep, 3)
  t.eq(db:exec("PRAGMA integrity_check"), "ok")
  db:close()
  -- a store of a version kmrun does not know is refused, not changed
  local odd = fresh()
  db = assert(store.open(odd))
  db:exec("PRAGMA user_version = 7")
  db:close()
  local no, err, code = store.open(odd)
  t.eq(no, nil)
  t.eq(code, "SCHEMA_VERSION", err)
end)

os.execute("rm -rf " .. dir)
t.done()
