-- km.task.baseline — PyTorch baselines (eager, torch.compile) kept on disk, so that a sweep
-- measures each once per GPU: a record per (task content, shape, precision, device UUID,
-- torch version, mode, timing protocol).
--
--   local baseline = require "km.task.baseline"
--   local key = baseline.key { source = text, task = text, shape = "n=1024", precision = "fp32",
--     device = uuid, torch = "2.11.0", mode = "eager" }
--   local rec = baseline.get(key)          -- the record, or nil
--   baseline.put(key, { median = 0.19, ... })
--
-- The folder: KM_BASELINE_DIR, else $XDG_CACHE_HOME/kmrun/baselines, else
-- ~/.cache/kmrun/baselines (baseline.dir()); records are km.jsoncache's (a JSON file named
-- by its key; one that does not parse, or is not its key's, is measured again). Nothing here
-- needs a GPU or Python; the judge (km.judge) measures and calls put.
local jc = require "km.jsoncache"

local M = {}

local type = type

-- Bump when what a record means changes (the timing protocol, the fields): older records
-- are then not found.
M.PROTOCOL = 2 -- 2: keyed by the timing protocol (km.timing's protocol_key)

function M.dir() return jc.dir("baselines", "KM_BASELINE_DIR") end

local KEY_FIELDS = { "source", "task", "shape", "precision", "device", "torch", "mode", "timing" }

-- The key of a baseline: the SHA-256 of the fields in a fixed order, each a string.
function M.key(parts) return jc.key("baseline", M.PROTOCOL, parts, KEY_FIELDS) end

-- The record under key, or nil (none, unreadable, not this key's, no number median);
-- nil, why for a baseline kept as unavailable (M.put_unavailable).
function M.get(key, dir)
  local rec = jc.get(dir or M.dir(), key)
  if rec and type(rec.median) == "number" then return rec end
  if rec and type(rec.unavailable) == "string" then return nil, rec.unavailable end
  return nil
end

-- Keeps that a baseline cannot be had (torch.compile failing in every mode: minutes of
-- trying that every new worker would otherwise repeat). Delete the record to try again.
function M.put_unavailable(key, why, dir)
  return jc.put(dir or M.dir(), key, { protocol = M.PROTOCOL, unavailable = tostring(why),
    at = os.date("!%Y-%m-%dT%H:%M:%SZ") })
end

-- Keeps rec (a table of JSON values, with a number median) under key. -> true | nil, why
function M.put(key, rec, dir)
  if type(rec) ~= "table" or type(rec.median) ~= "number" then error("baseline.put: a record with a number median expected", 2) end
  local out = { protocol = M.PROTOCOL }
  for k, v in pairs(rec) do out[k] = v end
  return jc.put(dir or M.dir(), key, out)
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

-- The torch.compile mode a judge uses for opts.compile_mode (km.judge, km.task.precompile): it,
-- else KM_COMPILE_MODE, else km.task.kernelbench's default; "off": no compile baseline.
function M.compile_mode(mode)
  return mode or os.getenv("KM_COMPILE_MODE") or require("km.task.kernelbench").COMPILE_MODE
end

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

-- Whether a worker judging these tasks will import torch: a task whose reference is a
-- PyTorch model (a problem file), or one with a reference.py while PyTorch baselines are
-- wanted (a.baselines, the option above). Such workers start the import ahead (the pool's
-- torch_ahead: km.task.kernelbench.import_ahead).
function M.needs_torch(tasks, a)
  local none = false
  for _, b in ipairs(a and a.baselines or {}) do if b == "none" then none = true end end
  for _, t in ipairs(tasks or {}) do
    local r = type(t) == "table" and t.reference or {}
    if r.pytorch or (r.pytorch_file and not none) then return true end
  end
  return false
end

return M
