-- kmrun merge OUT.sqlite A.sqlite B.sqlite ... — combine stores (e.g. sweep shards).
-- Runs, episodes and steps are copied with fresh row ids; an episode already in OUT (the
-- same uuid, or the same finished (strategy, task, model, repeat)) is not copied again,
-- so merging twice, or merging overlapping shards, adds no duplicates. A compile-only
-- episode ("compiled": no GPU then) does not keep out a judged one of the same key.
local store = require "km.store"
local cli = require "km.cli"
local A = require "km.args"

local SPEC = A.spec {
  name = "kmrun merge",
  synopsis = "OUT.sqlite IN.sqlite [IN.sqlite ...]",
  about = [[
Copies the runs, episodes and steps of every IN store into OUT (created when absent).
An episode OUT already holds (the same uuid, or a finished one of the same strategy,
task, model and repeat) is not copied again, so merging twice adds nothing.]],
  positional = {
    { "out", "OUT.sqlite", "the store to merge into", required = true },
    { "inputs", "IN.sqlite", "stores to merge from (each must be a kmrun store)", many = true, required = true },
  },
  footer = "exit status: 0 merged, 2 usage error or a store that is missing, not a kmrun store or damaged",
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local function fail(...) return cli.fail("merge", 2, ...) end
local out = a.out
local inputs = a.inputs

-- Every input is checked before OUT is touched: a missing file, one that is not a kmrun
-- store, or a damaged one is one line and status 2, and nothing is merged. So is an OUT
-- that exists and is not a good store (an absent or empty OUT is created).
local rep_col = {} -- each input's repeat column: rep, or seed in a version 1 store
for _, src in ipairs(inputs) do
  local probe, perr = cli.open_store(src)
  if not probe then return fail(perr) end
  rep_col[src] = probe:exec("PRAGMA user_version") == "1" and "seed" or "rep"
  probe:close()
end
if not cli.is_new_store(out) then
  local probe, perr = cli.open_store(out)
  if not probe then return fail(perr) end
  probe:close()
end
local db, err, code = store.open(out)
if not db then return fail(out, ": ", cli.reword(out, err, code)) end

local function q(s) return "'" .. s:gsub("'", "''") .. "'" end
local function count(sql) return tonumber(db:exec(sql)) or 0 end

-- Episodes whose stored JSON does not parse (a hand-edited or damaged input) are left out,
-- with a note, where SQLite has json_valid (3.38+, or built with JSON1).
local has_json = db:exec("SELECT json_valid('{}')") == "1"
local function bad_json(e)
  if not has_json then return "0" end
  return string.format([[(NOT json_valid(coalesce(%s.final, 'null')) OR NOT json_valid(coalesce(%s.summary, 'null'))
    OR EXISTS (SELECT 1 FROM src.steps bs WHERE bs.episode_id = %s.id AND NOT json_valid(bs.payload)))]], e, e, e)
end

local total_eps = 0
for _, src in ipairs(inputs) do
  local before = count("SELECT count(*) FROM episodes")
  local unparsable = 0
  -- what the input holds, and of it what OUT has already (the same episode, by its uuid)
  -- and what does not parse, counted before anything is added
  local n_src, present, bad_new = 0, 0, 0
  local ok, e = pcall(function()
    assert(db:exec("ATTACH DATABASE " .. q(src) .. " AS src"))
    assert(db:exec("BEGIN IMMEDIATE"))
    n_src = count("SELECT count(*) FROM src.episodes")
    present = count("SELECT count(*) FROM src.episodes WHERE uuid IN (SELECT uuid FROM main.episodes)")
    bad_new = count("SELECT count(*) FROM src.episodes e WHERE e.uuid NOT IN (SELECT uuid FROM main.episodes) AND " .. bad_json("e"))
    assert(db:exec([[INSERT INTO runs(uuid, name, started_at, finished_at, status, config, host, kmrun_version)
      SELECT uuid, name, started_at, finished_at, status, config, host, kmrun_version FROM src.runs
      WHERE uuid NOT IN (SELECT uuid FROM main.runs)]]))
    -- a finished episode is left out when OUT has one of the same key that counts as much:
    -- a judged one keeps out anything; a compile-only one keeps out only compile-only ones
    assert(db:exec([[INSERT INTO episodes(run_id, uuid, task, strategy, model, rep, started_at, finished_at, status, final, summary)
      SELECT r.id, e.uuid, e.task, e.strategy, e.model, e.]] .. rep_col[src] .. [[, e.started_at, e.finished_at, e.status, e.final, e.summary
      FROM src.episodes e JOIN src.runs sr ON sr.id = e.run_id JOIN main.runs r ON r.uuid = sr.uuid
      WHERE e.uuid NOT IN (SELECT uuid FROM main.episodes) AND NOT ]] .. bad_json("e") .. [[
        AND NOT (e.status NOT IN ('running', 'abandoned') AND EXISTS (
          SELECT 1 FROM main.episodes m WHERE m.task IS e.task AND m.strategy IS e.strategy AND m.model IS e.model
            AND m.rep IS e.]] .. rep_col[src] .. [[ AND m.status NOT IN ('running', 'abandoned')
            AND (m.status <> 'compiled' OR e.status = 'compiled')))]]))
    assert(db:exec([[INSERT INTO steps(episode_id, seq, kind, payload, started_at, duration_ms)
      SELECT me.id, s.seq, s.kind, s.payload, s.started_at, s.duration_ms
      FROM src.steps s JOIN src.episodes se ON se.id = s.episode_id JOIN main.episodes me ON me.uuid = se.uuid
      WHERE NOT EXISTS (SELECT 1 FROM main.steps ms WHERE ms.episode_id = me.id AND ms.seq = s.seq)
        AND NOT ]] .. bad_json("se")))
    assert(db:exec("COMMIT"))
    unparsable = count("SELECT count(*) FROM src.episodes e WHERE " .. bad_json("e"))
  end)
  if not ok then
    pcall(db.exec, db, "ROLLBACK")
    pcall(db.exec, db, "DETACH DATABASE src")
    db:close()
    return fail(src, ": ", cli.reword(src, e))
  end
  db:exec("DETACH DATABASE src")
  if unparsable > 0 then
    cli.fail("merge", 0, src, ": left out ", unparsable, " episode(s) whose stored JSON does not parse")
  end
  local added = count("SELECT count(*) FROM episodes") - before
  total_eps = total_eps + added
  -- the rest were kept out by a finished episode of the same key in OUT (the rule above)
  local superseded = n_src - added - present - bad_new
  local skipped = {}
  if present > 0 then skipped[#skipped + 1] = string.format("%d already in %s (the same episodes)", present, out) end
  if superseded > 0 then
    skipped[#skipped + 1] = string.format("%d whose task, strategy, model and repeat %s already has finished", superseded, out)
  end
  print(string.format("merged %s: %d episode(s) added%s", src, added,
    #skipped > 0 and ("; skipped " .. table.concat(skipped, ", ")) or ""))
end
print(string.format("%s: %d episode(s) added in all, %d in the store", out, total_eps, count("SELECT count(*) FROM episodes")))
db:close()
return 0
