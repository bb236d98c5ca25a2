-- kmrun merge OUT.sqlite A.sqlite B.sqlite ... — combine stores (e.g. sweep shards).
-- Runs, episodes and steps are copied with fresh row ids; an episode already in OUT (the
-- same uuid, or the same finished (strategy, task, model, repeat)) is not copied again,
-- so merging twice, or merging overlapping shards, adds no duplicates.
local store = require "km.store"

local USAGE = "usage: kmrun merge OUT.sqlite IN.sqlite [IN.sqlite ...]\n"
if #arg < 2 then io.stderr:write(USAGE) return 2 end
local out = arg[1]
local db, err = store.open(out)
if not db then io.stderr:write("kmrun merge: ", tostring(err), "\n") return 2 end

local function q(s) return "'" .. s:gsub("'", "''") .. "'" end
local function count(sql) return tonumber(db:exec(sql)) or 0 end

local total_eps = 0
for i = 2, #arg do
  local src = arg[i]
  local f = io.open(src, "rb")
  if not f then io.stderr:write("kmrun merge: cannot read ", src, "\n") db:close() return 2 end
  f:close()
  -- check the input is a kmrun store before touching OUT
  local probe, perr = store.open(src, { readonly = true })
  if not probe then io.stderr:write("kmrun merge: ", src, ": ", tostring(perr), "\n") db:close() return 2 end
  probe:close()
  local before = count("SELECT count(*) FROM episodes")
  local ok, e = pcall(function()
    assert(db:exec("ATTACH DATABASE " .. q(src) .. " AS src"))
    assert(db:exec("BEGIN IMMEDIATE"))
    assert(db:exec([[INSERT INTO runs(uuid, name, started_at, finished_at, status, config, host, kmrun_version)
      SELECT uuid, name, started_at, finished_at, status, config, host, kmrun_version FROM src.runs
      WHERE uuid NOT IN (SELECT uuid FROM main.runs)]]))
    assert(db:exec([[INSERT INTO episodes(run_id, uuid, task, strategy, model, seed, started_at, finished_at, status, final, summary)
      SELECT r.id, e.uuid, e.task, e.strategy, e.model, e.seed, e.started_at, e.finished_at, e.status, e.final, e.summary
      FROM src.episodes e JOIN src.runs sr ON sr.id = e.run_id JOIN main.runs r ON r.uuid = sr.uuid
      WHERE e.uuid NOT IN (SELECT uuid FROM main.episodes)
        AND NOT (e.status NOT IN ('running', 'abandoned') AND EXISTS (
          SELECT 1 FROM main.episodes m WHERE m.task IS e.task AND m.strategy IS e.strategy AND m.model IS e.model
            AND m.seed IS e.seed AND m.status NOT IN ('running', 'abandoned')))]]))
    assert(db:exec([[INSERT INTO steps(episode_id, seq, kind, payload, started_at, duration_ms)
      SELECT me.id, s.seq, s.kind, s.payload, s.started_at, s.duration_ms
      FROM src.steps s JOIN src.episodes se ON se.id = s.episode_id JOIN main.episodes me ON me.uuid = se.uuid
      WHERE NOT EXISTS (SELECT 1 FROM main.steps ms WHERE ms.episode_id = me.id AND ms.seq = s.seq)]]))
    assert(db:exec("COMMIT"))
  end)
  if not ok then
    pcall(db.exec, db, "ROLLBACK")
    pcall(db.exec, db, "DETACH DATABASE src")
    io.stderr:write("kmrun merge: ", src, ": ", tostring(e), "\n")
    db:close()
    return 2
  end
  db:exec("DETACH DATABASE src")
  local added = count("SELECT count(*) FROM episodes") - before
  total_eps = total_eps + added
  print(string.format("merged %s: %d episode(s) added", src, added))
end
print(string.format("%s: %d episode(s) added in all, %d in the store", out, total_eps, count("SELECT count(*) FROM episodes")))
db:close()
return 0
