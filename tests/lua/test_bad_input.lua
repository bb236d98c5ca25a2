-- Odd and corrupt input to the commands that read stores (report, export, reverify, merge,
-- sweep): a real store is built, copies are damaged in each way a file can be (garbage
-- header, garbage pages later in the file, truncated, another program's database, empty,
-- a folder, missing, rows whose JSON does not parse), and every command must answer with
-- one line on stderr naming the file and exit status 2 — never a traceback. Also: options
-- that take a Lua pattern, and an unexpected error inside a command (one line, status 1).
local t = require "km.tap"
local store = require "km.store"
local cli = require "km.cli"

local testing = require "km.testing"

local _, KMRUN = testing.paths()
local slurp, write = testing.read, testing.write
local dir = testing.tmpdir()
local sh = testing.run -- stdout, stderr, exit status

local function lines(s)
  local l = {}
  for x in s:gmatch("[^\n]+") do l[#l + 1] = x end
  return l
end

-- The contract: status 2, exactly one line on stderr, naming the file, no traceback.
local function one_line(label, err, rc, name, want_rc)
  t.eq(rc, want_rc or 2, label .. ": exit status; stderr: " .. err)
  t.eq(#lines(err), 1, label .. ": one line on stderr: " .. err)
  t.ok(err:find(name, 1, true), label .. ": names " .. name .. ": " .. err)
  t.ok(not err:lower():find("traceback", 1, true) and not err:lower():find("stack", 1, true),
    label .. ": no traceback: " .. err)
end

----------------------------------------------------------------------------------------
-- a real store, as km.run.runner writes one: model turns, a final candidate and verdict, a summary

local GOOD = dir .. "/good.sqlite"
local N_EPISODES = 40
do
  local db = assert(store.open(GOOD))
  local run = assert(db:begin_run { name = "sweep", config = { rounds = 3 } })
  for i = 1, N_EPISODES do
    local ep = assert(db:begin_episode(run, { task = "l1_t" .. i, strategy = "repair", model = "m", rep = 1 }))
    for k = 1, 3 do
      assert(db:append(ep, "model_call", {
        messages = { { role = "system", content = "You write CUDA." },
                     { role = "user", content = ("implement task %d, round %d. "):format(i, k):rep(60) } },
        reply = { content = ("```cuda\n// kernel %d\n```\n"):format(i):rep(40) }, reasoning_chars = 100 * k }))
    end
    assert(db:finish_episode(ep, "correct", {
      final = { candidate = { name = "c" .. i, source = "extern \"C\" __global__ void k() {}", launch = "return function() end" },
        verdict = { status = "correct", speedup = 1 + i / 10 } },
      summary = { status = "correct", speedup = 1 + i / 10, level = 1, category = "elementwise", rounds_to_correct = 1,
        tokens = { prompt = 100, completion = 50 } } }))
  end
  assert(db:finish_run(run))
  db:close()
end
local GOOD_BYTES = assert(slurp(GOOD))
local PAGE = GOOD_BYTES:byte(17) * 256 + GOOD_BYTES:byte(18) -- the header's page size
local PAGES = #GOOD_BYTES // PAGE

-- Deterministic garbage (a seeded generator: the same bytes every run).
local function garbage(n, seed)
  local x, b = seed, {}
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    b[i] = string.char(x >> 16 & 0xFF)
  end
  return table.concat(b)
end

-- A copy of the good store with bytes written at an offset (io.open "r+b").
local function damaged(name, offset, bytes)
  local path = dir .. "/" .. name
  write(path, GOOD_BYTES)
  local f = assert(io.open(path, "r+b"))
  assert(f:seek("set", offset))
  f:write(bytes)
  f:close()
  return path
end

local function root_page(tbl)
  local db = assert(store.open(GOOD, { readonly = true }))
  local r = tonumber(db:exec("SELECT rootpage FROM sqlite_master WHERE name = '" .. tbl .. "'"))
  db:close()
  return r
end

-- Each way a store file can be bad, and the words the one line must hold.
local BAD = {}
local function bad(name, path, words) BAD[#BAD + 1] = { name = name, path = path, words = words } end

bad("garbage header", damaged("header.sqlite", 0, "this is not an SQLite file at all"), "not an SQLite database")
bad("garbage pages later in the file",
  damaged("late.sqlite", (PAGES * 3 // 5) * PAGE, garbage(4 * PAGE, 7)), "corrupt")
bad("the episodes table's root page overwritten",
  damaged("episodes_page.sqlite", (root_page("episodes") - 1) * PAGE, garbage(PAGE, 11)), "corrupt")
do
  local p = dir .. "/truncated.sqlite"
  write(p, GOOD_BYTES:sub(1, (PAGES // 2) * PAGE + 1000))
  bad("truncated midway", p, "corrupt")
  local q = dir .. "/truncated50.sqlite"
  write(q, GOOD_BYTES:sub(1, 50))
  bad("truncated inside the header", q, "truncated")
end
do
  -- another program's database: valid SQLite, none of kmrun's tables, user_version 0
  local p = dir .. "/foreign.sqlite"
  local db = assert(store.open(p))
  assert(db:exec("DROP TABLE steps; DROP TABLE episodes; DROP TABLE runs; DROP TABLE meta; " ..
    "CREATE TABLE inventory(item TEXT, qty INTEGER); INSERT INTO inventory VALUES ('bolts', 40); PRAGMA user_version = 0"))
  db:close()
  bad("another program's database", p, "not a kmrun store")
  -- the same with kmrun's user_version left behind: the tables are what is missing
  local q = dir .. "/foreign_v1.sqlite"
  db = assert(store.open(q))
  assert(db:exec("DROP TABLE steps; DROP TABLE episodes; DROP TABLE runs; CREATE TABLE inventory(item TEXT)"))
  db:close()
  bad("kmrun's user_version without kmrun's tables", q, "not a kmrun store")
end
do
  local p = dir .. "/empty.sqlite"
  write(p, "")
  bad("an empty file", p, "empty")
  local f = dir .. "/folder.sqlite"
  assert(os.execute("mkdir -p " .. f))
  bad("a folder", f, "folder")
  bad("a missing file", dir .. "/missing.sqlite", "no such file")
end

----------------------------------------------------------------------------------------

t.test("the good store reads, and checks clean", function()
  local db = assert(cli.open_store(GOOD))
  t.eq(db:check(), true)
  local eps, skipped = db:episodes { skip_corrupt = true }
  t.eq(#eps, N_EPISODES)
  t.eq(#skipped, 0)
  db:close()
  local _, err, rc = sh(KMRUN .. " report " .. GOOD)
  t.eq(rc, 0, err)
  t.eq(err, "")
  local out
  out, err, rc = sh(KMRUN .. " export " .. GOOD .. " --format sft")
  t.eq(rc, 0, err)
  t.eq(#lines(out), N_EPISODES)
end)

t.test("each damaged copy really is damaged the way it says", function()
  t.ok(PAGES > 20, "the store spans " .. PAGES .. " pages")
  -- opening works but reading fails midway: the read path itself reports it (no quick_check)
  for _, name in ipairs { "late.sqlite", "episodes_page.sqlite" } do
    local path = dir .. "/" .. name
    local db = store.open(path, { readonly = true })
    if db then
      local steps_ok = true
      local eps, why = cli.read_list(db, path, "episodes")
      if eps then
        for _, e in ipairs(eps) do
          if not db:episode(e.id) then steps_ok = false break end
        end
      end
      local ok = db:check()
      db:close()
      t.ok(not eps or not steps_ok, name .. ": reading fails midway (the read path checks every step)")
      t.ok(not ok, name .. ": db:check() finds it")
      if not eps then t.ok(why:find(path, 1, true) and why:find("corrupt", 1, true), why) end
    end
    local v, err = cli.open_store(path)
    t.eq(v, nil)
    t.ok(err:find(path, 1, true) and err:find("corrupt", 1, true), err)
  end
end)

for _, cmd in ipairs { "report", "export", "reverify" } do
  t.test("kmrun " .. cmd .. ": every damaged store is one line and status 2", function()
    for _, b in ipairs(BAD) do
      local out, err, rc = sh(KMRUN .. " " .. cmd .. " " .. b.path)
      one_line(cmd .. " / " .. b.name, err, rc, b.path)
      t.ok(err:find(b.words, 1, true), cmd .. " / " .. b.name .. ": says '" .. b.words .. "': " .. err)
      t.eq(out, "", cmd .. " / " .. b.name .. ": nothing on stdout")
    end
  end)
end

t.test("kmrun report: a damaged file among good ones stops the report, naming it", function()
  local b = BAD[2]
  local out, err, rc = sh(KMRUN .. " report " .. GOOD .. " " .. b.path)
  one_line("report good+bad", err, rc, b.path)
  t.eq(out, "")
end)

t.test("kmrun export --out: a damaged store writes nothing", function()
  local out_file = dir .. "/export.jsonl"
  local _, err, rc = sh(KMRUN .. " export " .. BAD[2].path .. " --format jsonl --out " .. out_file)
  one_line("export --out", err, rc, BAD[2].path)
  t.eq(slurp(out_file), nil, "no output file")
end)

t.test("kmrun merge: a damaged input is one line, status 2, and OUT is not created", function()
  for _, b in ipairs(BAD) do
    local out_path = dir .. "/merged.sqlite"
    os.remove(out_path)
    local _, err, rc = sh(KMRUN .. " merge " .. out_path .. " " .. GOOD .. " " .. b.path)
    one_line("merge / " .. b.name, err, rc, b.path)
    t.eq(slurp(out_path), nil, "merge / " .. b.name .. ": OUT untouched")
  end
end)

t.test("kmrun merge: a damaged OUT is one line, status 2, and left as it was", function()
  for _, b in ipairs(BAD) do
    if not b.name:find("missing", 1, true) and not b.name:find("empty", 1, true) then
      local before = slurp(b.path)
      local _, err, rc = sh(KMRUN .. " merge " .. b.path .. " " .. GOOD)
      one_line("merge into " .. b.name, err, rc, b.path)
      t.eq(slurp(b.path), before, "merge into " .. b.name .. ": unchanged")
    end
  end
  -- an empty OUT is a new store
  local e = dir .. "/empty_out.sqlite"
  write(e, "")
  local out, err, rc = sh(KMRUN .. " merge " .. e .. " " .. GOOD)
  t.eq(rc, 0, err)
  t.ok(out:find(N_EPISODES .. " episode(s) added in all", 1, true), out)
end)

t.test("kmrun sweep: resuming into a damaged --store is one line and status 2", function()
  for _, b in ipairs(BAD) do
    if not b.name:find("missing", 1, true) and not b.name:find("empty", 1, true) then
      local _, err, rc = sh(KMRUN .. " sweep --strategies strategies/repair.lua --tasks tasks --filter '^l1_relu$' --store "
        .. b.path)
      one_line("sweep --store " .. b.name, err, rc, b.path)
    end
  end
end)

----------------------------------------------------------------------------------------
-- rows whose JSON does not parse (a hand-edited store): left out, and said so

local EDITED = dir .. "/edited.sqlite"
do
  write(EDITED, GOOD_BYTES)
  local db = assert(store.open(EDITED))
  assert(db:exec("UPDATE episodes SET final = '{\"candidate\": ' WHERE id = 3"))
  assert(db:exec("UPDATE steps SET payload = '[1, 2' WHERE id = (SELECT min(id) FROM steps WHERE episode_id = 5)"))
  db:close()
end

t.test("the store's readers: skip_corrupt leaves such rows out and lists them", function()
  local db = assert(store.open(EDITED, { readonly = true }))
  local v, msg, code = db:episodes {}
  t.eq(v, nil)
  t.eq(code, "CORRUPT")
  t.ok(msg:find("episode 3", 1, true), msg)
  local eps, skipped = db:episodes { skip_corrupt = true }
  t.eq(#eps, N_EPISODES - 1)
  t.eq(#skipped, 1)
  t.eq(skipped[1].id, 3)
  t.ok(skipped[1].message:find("stored final is not valid JSON", 1, true), skipped[1].message)
  v, msg, code = db:episode(5)
  t.eq(code, "CORRUPT")
  -- the cursor was let go: the next listing starts over
  t.eq(#db:episodes { skip_corrupt = true }, N_EPISODES - 1)
  t.eq(#db:runs { skip_corrupt = true }, 1)
  db:close()
end)

t.test("report, export, merge leave out rows whose JSON does not parse, and say so", function()
  local out, err, rc = sh(KMRUN .. " report " .. EDITED .. " --json")
  t.eq(rc, 0, err)
  t.eq(#lines(err), 1, err)
  t.ok(err:find(EDITED, 1, true) and err:find("left out 1 episode(s) whose stored JSON does not parse", 1, true), err)
  t.ok(not err:lower():find("traceback", 1, true), err)
  t.ok(out:find("^{"), out)

  out, err, rc = sh(KMRUN .. " export " .. EDITED .. " --format sft")
  t.eq(rc, 0, err)
  t.eq(#lines(out), N_EPISODES - 2)
  t.ok(err:find(EDITED .. ": left out 2 episode(s) whose stored JSON does not parse", 1, true), err)
  t.ok(not err:lower():find("traceback", 1, true), err)

  out, err, rc = sh(KMRUN .. " export " .. EDITED .. " --format jsonl --sample 100 --stratify category")
  t.eq(rc, 0, err)
  t.eq(#lines(out), N_EPISODES - 2)

  local m = dir .. "/merged_edited.sqlite"
  os.remove(m)
  out, err, rc = sh(KMRUN .. " merge " .. m .. " " .. EDITED)
  t.eq(rc, 0, err)
  local db = assert(store.open(m, { readonly = true }))
  local has_json_valid = db:exec("SELECT json_valid('{}')") == "1"
  if has_json_valid then
    t.ok(err:find("left out 2 episode(s)", 1, true), err)
    t.eq(#db:episodes {}, N_EPISODES - 2, "the merged store reads cleanly")
  end
  db:close()
end)

----------------------------------------------------------------------------------------
-- options that take a Lua pattern

local BAD_PATTERNS = { "[", "l1_[", "%", "l1%", "(", "l1_(relu", "a)", "%1", "(a)%2", "%b(", "%fx", "[a%" }

t.test("km.cli.check_pattern agrees with string.find", function()
  for _, p in ipairs(BAD_PATTERNS) do
    local ok, why = cli.check_pattern(p)
    t.eq(ok, nil, "'" .. p .. "' is refused")
    t.ok(type(why) == "string" and #why > 0, why)
  end
  for _, p in ipairs { "^l1_", "relu$", "l%d_[%w_]+", "(a)%1", "%b()", "%f[%w]x", "[]]", "[^%]]", "a-b*c?d+", "()", "" } do
    t.eq(cli.check_pattern(p), true, "'" .. p .. "' is accepted")
  end
  -- every pattern it accepts can be matched against anything without raising
  local subjects = { "", "l1_relu", "(a)(b)", "]]%%", "l1_(relu" }
  local alphabet = { "a", "(", ")", "%", "[", "]", "^", "-", "*", "1", "2", "b", "f", "." }
  local state = 1
  for _ = 1, 20000 do
    local parts = {}
    state = (state * 1103515245 + 12345) % 2147483648
    for k = 1, 1 + state % 6 do
      state = (state * 1103515245 + 12345) % 2147483648
      parts[k] = alphabet[1 + (state >> 8) % #alphabet]
    end
    local p = table.concat(parts)
    if cli.check_pattern(p) then
      for _, s in ipairs(subjects) do
        local ok, e = pcall(string.find, s, p)
        if not ok then t.ok(false, "accepted '" .. p .. "' but string.find raised: " .. tostring(e)) return end
      end
    end
  end
end)

t.test("--filter with a bad pattern: one line and status 2 (sweep and a strategy run)", function()
  for _, p in ipairs(BAD_PATTERNS) do
    local q = "'" .. p:gsub("'", "'\\''") .. "'"
    local _, err, rc = sh(KMRUN .. " sweep --strategies strategies/repair.lua --tasks tasks --store " .. dir ..
      "/sweep_filter.sqlite --filter " .. q)
    one_line("sweep --filter " .. p, err, rc, "--filter")
    t.ok(err:find("not a valid Lua pattern", 1, true), err)
    _, err, rc = sh(KMRUN .. " strategies/repair.lua tasks --store " .. dir .. "/run_filter.sqlite --filter " .. q)
    one_line("strategy --filter " .. p, err, rc, "--filter")
  end
  t.eq(slurp(dir .. "/sweep_filter.sqlite"), nil, "no store was created")
end)

----------------------------------------------------------------------------------------
-- an error nobody expected, inside a command

t.test("an unexpected error in a command is one line and status 1; KM_DEBUG=1 shows the traceback", function()
  local mods = dir .. "/mods/km"
  assert(os.execute("mkdir -p " .. mods))
  write(mods .. "/report.lua", "local function f() error('boom\\nsecond line') end f()")
  local env = "KM_PATH=" .. dir .. "/mods "
  local out, err, rc = sh(env .. KMRUN .. " report " .. GOOD)
  t.eq(rc, 1, err)
  t.eq(#lines(err), 1, err)
  t.ok(err:find("^kmrun report: internal error: .*boom second line"), err)
  t.ok(err:find("KM_DEBUG=1", 1, true), err)
  t.ok(not err:find("stack traceback", 1, true), err)
  t.eq(out, "")
  out, err, rc = sh(env .. "KM_DEBUG=1 " .. KMRUN .. " report " .. GOOD)
  t.eq(rc, 1, err)
  t.ok(err:find("stack traceback", 1, true), err)
  -- scripts and -e keep their tracebacks
  _, err, rc = sh(KMRUN .. " -e 'error(\"x\")'")
  t.eq(rc, 1)
  t.ok(err:find("stack traceback", 1, true), err)
end)

t.test("reverify and tasks: options missing their values are one line and status 2", function()
  for _, c in ipairs { "reverify " .. GOOD .. " --gpus", "reverify " .. GOOD .. " --tasks", "reverify " .. GOOD .. " --seeds x",
      "reverify " .. GOOD .. " --gpus a,b", "tasks check --arch" } do
    local _, err, rc = sh(KMRUN .. " " .. c)
    one_line(c, err, rc, c:match("%-%-%a+"))
  end
end)

os.execute("rm -rf " .. dir)
t.done()
