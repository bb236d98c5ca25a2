-- km.run.leases — many runs on one store: who runs which episode (docs/store.md, "Leases").
--
-- Two sweeps, a sweep beside `kmrun STRATEGY`, shards on a shared folder or the service's
-- workers may write one store at once. A run starts an episode only once it has claimed the
-- episode's key in the store (km.store's claim, one transaction), names the episode in the
-- lease once begun, and renews its leases while it runs; finishing the episode ends the lease
-- in the same statement. So two runs share the work and neither runs an episode twice, and a
-- resuming run marks an episode abandoned only when no live run holds it.
--
--   local L = leases.new(db, run_id)
--   if L:claim(item) then local ep = L:start(item, function() return episode.start(item, env) end) end
--   L:tick()                                -- in the run's loop: renews every TTL / 4
--   L.held, L.holders                       -- what was left to other runs, and who they were
local wall = require("km.timing").wall
local sys = require "km.sys"
local store = require "km.store"

local fmt, concat = string.format, table.concat
local pairs, tostring, tonumber = pairs, tostring, tonumber

local M = {}

-- The statuses whose episodes run again: one another run ended so is not its work done.
local REDO = concat(require("km.statuses").names("rerun"), ",")

-- Seconds a lease holds unless renewed (KM_LEASE_TTL; the holder renews every quarter).
M.TTL = tonumber(os.getenv("KM_LEASE_TTL")) or 120

local Leases = {}
Leases.__index = Leases

-- A run's leases on db: held counts the planned episodes left to other runs, holders[who] by whom.
function M.new(db, run_id)
  return setmetatable({ db = db, run_id = run_id, held = 0, holders = {}, renewed = wall() }, Leases)
end

-- Claims item.key (item.seen: the newest episode id of the key when the run planned).
-- -> true, or false after counting it as held by another run.
function Leases:claim(item)
  local got, holder = self.db:claim(item.key, self.run_id, { seen = item.seen, ttl = M.TTL, redo = REDO })
  if got == "taken" then return true end
  if not got then error(fmt("claiming %s: %s", item.key, tostring(holder)), 0) end
  self.held = self.held + 1
  local who = fmt("%s pid %s", holder.host or "?", tostring(holder.pid))
  self.holders[who] = (self.holders[who] or 0) + 1
  return false
end

-- Starts the episode of a claimed item (begin() -> the episode, whose .record is its id) and
-- names it in the lease; a begin() that raises gives the claim back first.
function Leases:start(item, begin)
  local ok, ep = pcall(begin)
  if not ok then
    self.db:drop_lease(item.key, self.run_id)
    error(ep, 0)
  end
  local bound, err = self.db:bind_lease(item.key, self.run_id, ep.record)
  if not bound then io.stderr:write("kmrun: ", tostring(err), "\n") end
  return ep
end

-- Renews the run's leases when a quarter of their life has passed since the last renewal.
function Leases:tick()
  if wall() - self.renewed <= M.TTL / 4 then return end
  self.renewed = wall()
  local ok, err = self.db:renew_leases(self.run_id, M.TTL)
  if not ok then io.stderr:write("kmrun: renewing leases: ", tostring(err), "\n") end
end

-- The line after a run's summary when other runs on the store held some of its planned
-- episodes: how many, and who. nil when none. res: { held, holders }.
function M.held_line(res)
  if (res.held or 0) == 0 then return nil end
  local who = {}
  for k, n in pairs(res.holders or {}) do who[#who + 1] = fmt("%s: %d", k, n) end
  table.sort(who)
  return fmt("%d planned episode(s) left to another run on this store, which holds or finished them (%s)",
    res.held, concat(who, "; "))
end

-- Opens the store a run writes (named: given by --store, else the default name): a named
-- store goes in a folder that exists (a typo in its path is an error, not a tree of new
-- folders); the default one's runs/ is made when missing. -> db, or nil, message, exit status
function M.open_store(out, named)
  local dir = out:match("^(.*)/[^/]+$")
  if dir == "" then dir = "/" end
  if dir and named then
    if not sys.readdir(dir) then
      return nil, "--store " .. out .. ": no such folder '" .. dir .. "' (create it first)", 2
    end
  elseif dir then
    local okd, derr = sys.mkdir(dir)
    if not okd then return nil, tostring(derr), 2 end
  end
  -- The store is opened for writing before it is read: creating one is a single transaction
  -- there, so another run creating the same file at this moment is waited for, never seen
  -- half-made. An existing store is resumed (its episodes read): it must be a good one. Its
  -- header is looked at first, with a descriptor closed before SQLite opens the file: closing
  -- another descriptor of an open database drops the process's POSIX locks on it, after which
  -- another process may fold and delete the WAL under this one's writes.
  local cli = require "km.cli"
  local existed = not cli.is_new_store(out)
  local why = existed and cli.probe(out)
  if why then return nil, out .. ": " .. why, 2 end
  local db, derr, dcode = store.open(out)
  if not db then
    return nil, existed and (out .. ": " .. cli.reword(out, derr, dcode))
      or ("cannot open the store " .. out .. ": " .. tostring(derr)), 2
  end
  if existed then
    local ok, err, code = db:check()
    if ok then ok, err, code = db:episodes {} end
    if not ok then
      db:close()
      return nil, out .. ": " .. cli.reword(out, err, code), 2
    end
  end
  return db
end

-- A store name no other run takes: runs/<YYYYmmdd-HHMMSS>-<pid>.sqlite, created empty and
-- exclusively (a process of the same pid on another host, writing the same shared folder in
-- the same second, takes -2, -3, ...). The folder is made when missing.
function M.default_store()
  sys.mkdir("runs")
  local base = "runs/" .. os.date("%Y%m%d-%H%M%S") .. "-" .. sys.pid()
  local path
  for i = 1, 1000 do
    path = base .. (i > 1 and ("-" .. i) or "") .. ".sqlite"
    local ok, _, code = sys.create(path, "")
    if ok or code ~= "EXISTS" then break end -- another error: the store's open says it
  end
  return path
end

return M
