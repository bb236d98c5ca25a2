-- km.jsoncache — small JSON records on disk, one file per content key: what kmrun measures or
-- reads once and keeps (PyTorch baselines, KernelBench problem specs).
--
--   local jc = require "km.jsoncache"
--   local dir = jc.dir("baselines", "KM_BASELINE_DIR")   -- the folder for a kind of record
--   local key = jc.key("kind", { field = "text", ... }, { "field", ... })
--   local rec = jc.get(dir, key)                         -- the record, or nil
--   jc.put(dir, key, { ... })                            -- true | nil, why
--
-- A folder: its environment variable, else $XDG_CACHE_HOME/kmrun/<kind>, else
-- ~/.cache/kmrun/<kind>. A record is written to a temporary name and renamed, so readers never
-- see half of one; one that does not parse, or whose key is not its name, reads as missing.
local json = require "km.json"
local hash = require "km.hash"
local sys = require "km.sys"

local M = {}

local fmt = string.format
local type, pairs, tostring = type, pairs, tostring

function M.dir(kind, env)
  local d = env and os.getenv(env)
  if d and d ~= "" then return d end
  d = os.getenv("XDG_CACHE_HOME")
  if d and d ~= "" then return d .. "/kmrun/" .. kind end
  d = os.getenv("HOME")
  if d and d ~= "" then return d .. "/.cache/kmrun/" .. kind end
  return nil
end

-- The SHA-256 of a kind, a version and the named fields in order, each length-prefixed (no
-- two field lists give one text). Every field is a string; a missing one is an error.
function M.key(kind, version, parts, fields)
  local list = { "kmrun-" .. kind, tostring(version) }
  for _, k in ipairs(fields) do
    local v = parts[k]
    if type(v) ~= "string" then error(fmt("%s key: field '%s' must be a string, got %s", kind, k, type(v)), 3) end
    list[#list + 1] = k .. "=" .. #v .. ":" .. v
  end
  return hash.sha256(table.concat(list, "\n"))
end

local function path_of(dir, key)
  if type(key) ~= "string" or #key ~= 64 or not key:match("^%x+$") then error("a 64-hex-digit key expected", 3) end
  if not dir then return nil end
  return fmt("%s/%s.json", dir, key)
end

-- The record under key, or nil (none, unreadable, not this key's).
function M.get(dir, key)
  local path = path_of(dir, key)
  if not path then return nil end
  local f = io.open(path, "rb")
  if not f then return nil end
  local text = f:read(16 << 20)
  f:close()
  local ok, rec = pcall(json.decode, text or "")
  if not ok or type(rec) ~= "table" or rec.key ~= key then return nil end
  return rec
end

-- Keeps rec (a table of JSON values) under key. -> true | nil, why
function M.put(dir, key, rec)
  local path = path_of(dir, key)
  if not path then return nil, "no cache folder (set HOME)" end
  local out = {}
  for k, v in pairs(rec) do out[k] = v end
  out.key = key
  local okd, derr = sys.mkdir(dir)
  if not okd then return nil, derr end
  local tmp = fmt("%s.%d.%d.tmp", path, math.random(1 << 30), os.time())
  local f, err = io.open(tmp, "wb")
  if not f then return nil, err end
  f:write(json.encode(out, { nan = "null" }), "\n")
  f:close()
  local okr, rerr = os.rename(tmp, path)
  if not okr then os.remove(tmp) return nil, rerr end
  return true
end

return M
