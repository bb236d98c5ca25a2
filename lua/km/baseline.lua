-- km.baseline — PyTorch baselines (eager, torch.compile) kept on disk, so that a sweep
-- measures each once per GPU: a record per (task content, shape, precision, device UUID,
-- torch version, mode, timing protocol).
--
--   local baseline = require "km.baseline"
--   local key = baseline.key { source = text, task = text, shape = "n=1024", precision = "fp32",
--     device = uuid, torch = "2.11.0", mode = "eager" }
--   local rec = baseline.get(key)          -- the record, or nil
--   baseline.put(key, { median = 0.19, ... })
--
-- The folder: KM_BASELINE_DIR, else $XDG_CACHE_HOME/kmrun/baselines, else
-- ~/.cache/kmrun/baselines (baseline.dir()). A record is a small JSON file named by its key,
-- written to a temporary name and renamed, so readers never see half of one; one that does
-- not parse, or whose key does not match its name, is treated as missing (and measured again).
-- Nothing here needs a GPU; the judge (km.judge) measures and calls put.
local json = require "km.json"

local M = {}

local fmt = string.format
local type, pairs, tostring = type, pairs, tostring

-- Bump when what a record means changes (the timing protocol, the fields): older records
-- are then not found.
M.PROTOCOL = 1

function M.dir()
  local d = os.getenv("KM_BASELINE_DIR")
  if d and d ~= "" then return d end
  d = os.getenv("XDG_CACHE_HOME")
  if d and d ~= "" then return d .. "/kmrun/baselines" end
  d = os.getenv("HOME")
  if d and d ~= "" then return d .. "/.cache/kmrun/baselines" end
  return nil
end

local KEY_FIELDS = { "source", "task", "shape", "precision", "device", "torch", "mode" }

-- The key of a baseline: the SHA-256 (through the PyTorch bridge: baselines exist only where
-- it does) of the fields in a fixed order. Every field is a string; a missing one is an error.
function M.key(parts)
  local kb = require "km.kernelbench"
  local list = { "kmrun-baseline", tostring(M.PROTOCOL) }
  for _, k in ipairs(KEY_FIELDS) do
    local v = parts[k]
    if type(v) ~= "string" then error(fmt("baseline.key: field '%s' must be a string, got %s", k, type(v)), 2) end
    list[#list + 1] = k .. "=" .. #v .. ":" .. v -- length-prefixed: no two part lists give one text
  end
  local h, err = kb.digest(table.concat(list, "\n"))
  if not h then error("baseline.key: " .. tostring(err), 2) end
  return h
end

local function path_of(key, dir)
  if type(key) ~= "string" or not key:match("^%x+$") or #key ~= 64 then error("baseline: a 64-hex-digit key expected", 3) end
  dir = dir or M.dir()
  if not dir then return nil end
  return fmt("%s/%s.json", dir, key)
end

-- The record under key, or nil (none, unreadable, or not this key's).
function M.get(key, dir)
  local path = path_of(key, dir)
  if not path then return nil end
  local f = io.open(path, "rb")
  if not f then return nil end
  local text = f:read(1 << 20)
  f:close()
  local ok, rec = pcall(json.decode, text or "")
  if not ok or type(rec) ~= "table" or rec.key ~= key or type(rec.median) ~= "number" then return nil end
  return rec
end

-- Keeps rec (a table of JSON values, with a number median) under key. -> true | nil, why
function M.put(key, rec, dir)
  local path = path_of(key, dir)
  if not path then return nil, "no folder for baselines (set KM_BASELINE_DIR or HOME)" end
  if type(rec) ~= "table" or type(rec.median) ~= "number" then error("baseline.put: a record with a number median expected", 2) end
  local out = {}
  for k, v in pairs(rec) do out[k] = v end
  out.key, out.protocol = key, M.PROTOCOL
  local d = path:match("^(.*)/[^/]+$")
  local okd = os.execute("mkdir -p '" .. d:gsub("'", "'\\''") .. "' 2>/dev/null")
  if not okd then return nil, "cannot create " .. d end
  local tmp = fmt("%s.%d.%d.tmp", path, math.random(1 << 30), os.time())
  local f, err = io.open(tmp, "wb")
  if not f then return nil, err end
  f:write(json.encode(out, { nan = "null" }), "\n")
  f:close()
  local okr, rerr = os.rename(tmp, path)
  if not okr then os.remove(tmp) return nil, rerr end
  return true
end

-- The command-line options that choose baselines (kmrun eval, kmrun STRATEGY, kmrun sweep),
-- in km.args' form, and what they mean for the judge's opts.
M.COMPILE_MODES = { "max-autotune-no-cudagraphs", "default", "reduce-overhead", "max-autotune", "off" }
M.OPTIONS = {
  { "baselines", "LIST", "PyTorch baselines where a task has a PyTorch model: eager,compile\n" ..
      "(default), eager, or none (a KernelBench problem's eager time is its reference: always)",
    type = "choices", choices = { "eager", "compile", "none" } },
  { "compile-mode", "MODE", "torch.compile's mode for the compile baseline: max-autotune-no-cudagraphs\n" ..
      "(default; falls back to default where it fails), default, reduce-overhead, max-autotune, off",
    type = "choice", choices = M.COMPILE_MODES },
}

-- Parsed options (km.args: a.baselines, a.compile_mode) into the judge's opts.
function M.judge_opts(a, opts)
  opts = opts or {}
  local want = {}
  for _, b in ipairs(a.baselines or { "eager", "compile" }) do want[b] = true end
  if want.none then want = {} end
  opts.eager = want.eager and true or false
  if want.compile then opts.compile_mode = a.compile_mode else opts.compile_mode = "off" end
  return opts
end

return M
