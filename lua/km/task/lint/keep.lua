-- km.task.lint.keep — km.task.lint's results kept and shown: the cache (km.jsoncache), what a
-- run keeps of a task's result (M.brief, M.annotate_summary, M.gate), and the table and JSON
-- of `kmrun tasks lint` (M.format, M.json).
--
-- State: the torch version, asked of Python once per process (torch_version_memo); the kept
-- results are files under km.jsoncache's "lint" folder (KM_LINT_DIR). Adds its functions to
-- km.task.lint's table.
local M = require "km.task.lint.reasons"
local task_mod = require "km.task"
local json = require "km.json"
local out_of_memory = require("km.task.lint.sizes").out_of_memory

local fmt, concat = string.format, table.concat
local ipairs, pairs, type, pcall = ipairs, pairs, type, pcall

----------------------------------------------------------------------------------------
-- the cache: results kept like task specs (km.jsoncache), keyed by the task's content, its
-- precision, where it ran (cuda | cpu) and the torch version

local torch_version_memo
function M.torch_version()
  if torch_version_memo == nil then
    local python = require "km.python"
    local v
    if python.available() then
      v = python.eval("(lambda m: m.version('torch'))(__import__('importlib.metadata', fromlist=['version']))")
    end
    torch_version_memo = type(v) == "string" and v or "none"
  end
  return torch_version_memo
end

-- What decides a task's lint result: its files' texts, shapes and tolerance.
local function content(t)
  local r = t.reference
  local parts = { r.source_text or "", r.launch_text or "", r.pytorch_text or "" }
  if t.dir and not r.pytorch then parts[#parts + 1] = task_mod.read_file(t.dir .. "/task.lua") or "" end
  for i, sym in ipairs(t.shapes) do parts[#parts + 1] = i .. task_mod.fmt_shape(sym) end
  local tols = {}
  for dt, tol in pairs(t.tolerance) do tols[#tols + 1] = fmt("%s:%.17g:%.17g", dt, tol.atol, tol.rtol) end
  table.sort(tols)
  parts[#parts + 1] = concat(tols, ",")
  return concat(parts, "\0")
end

local function cache_key(t, where)
  local jc = require "km.jsoncache"
  return jc.key("lint", M.VERSION, { content = content(t), precision = t.reference.precision or "fp32",
    where = where, torch = M.torch_version() }, { "content", "precision", "where", "torch" })
end

local function cache_dir() return require("km.jsoncache").dir("lint", "KM_LINT_DIR") end

-- A result that says more about the machine than the task: the reference could not run
-- here at all (res.machine: no PyTorch, no GPU), or a check was left undone for want of GPU
-- memory (the device was busy: other processes, a large neighbour). Such a result is not
-- kept, so the next lint, on a machine that has what was missing, tries again.
function M.transient(res)
  if res and res.machine then return true end
  for _, u in ipairs(res and res.unchecked or {}) do if out_of_memory(u) then return true end end
  return false
end

-- Keeps a result under what it depended on (the task's content, precision, where it ran,
-- the torch version); a transient one is refused. -> true | nil, why
function M.put(t, res)
  if M.transient(res) then return nil, "not kept: it says what this machine lacks, not what the task is" end
  return require("km.jsoncache").put(cache_dir(), cache_key(t, res.where), { result = M.encodable(res) })
end

-- The kept result for t: the GPU's where there is one, else the CPU's; nil when never linted.
function M.cached(t)
  local dir = cache_dir()
  if not dir then return nil end
  local f = io.open(dir .. "/.", "rb")
  if not f then return nil end -- nothing was ever linted here: no Python started to ask
  f:close()
  local jc = require "km.jsoncache"
  for _, where in ipairs { "cuda", "cpu" } do
    local rec = jc.get(dir, cache_key(t, where))
    if rec and type(rec.result) == "table" then return rec.result end
  end
end

-- A result as JSON values (arrays stay arrays when empty).
function M.encodable(res)
  local out = {}
  for k, v in pairs(res) do out[k] = v end
  out.flags = json.array(res.flags or {})
  out.unchecked = json.array(res.unchecked or {})
  out.notes = json.array(res.notes or {})
  return out
end

-- What an episode's summary keeps of a task's lint (docs/store.md): nil when never linted.
function M.brief(res)
  if type(res) ~= "table" then return nil end
  return { flagged = M.flagged(res), reasons = json.array(M.reasons(res)), where = res.where,
    unchecked = #(res.unchecked or {}) }
end

-- Called by km.run.runner.summary: the task's lint and held-out shape into an episode summary.
function M.annotate_summary(s, t)
  if t.lint then s.lint = t.lint end
  if t.heldout then s.heldout_shape = t.heldout.shape end
end

-- Before a run: each task's kept lint result as t.lint (M.brief); a warning for each flagged
-- task; with opts.skip, flagged tasks left out unless opts.allow (--allow-degenerate).
-- -> the tasks to run
function M.gate(tasks, opts)
  opts = opts or {}
  local who = opts.who or "kmrun"
  local kept, skipped = {}, 0
  for _, t in ipairs(tasks) do
    local ok, res = pcall(M.cached, t)
    t.lint = ok and M.brief(res) or nil
    if t.lint and t.lint.flagged then
      local reasons = concat(M.reasons(res), ", ")
      local dropped = opts.skip and not opts.allow
      io.stderr:write(fmt("%s: %s (%s): kmrun tasks lint flagged it (%s)%s\n", who, t.name,
        t.reference.precision or "fp32", reasons,
        dropped and "; skipped (--allow-degenerate runs it)" or "; its verdicts prove little"))
      if dropped then skipped = skipped + 1 else kept[#kept + 1] = t end
    else
      kept[#kept + 1] = t
    end
  end
  return kept, skipped
end

----------------------------------------------------------------------------------------
-- output

-- A table: one line per task (ok / FLAGGED / unchecked: the machine could not run its
-- reference), a line per flag under it; what the machine lacks is said once, at the end.
function M.format(results)
  local out, w, sw = {}, 8, 7
  for _, r in ipairs(results) do
    w = math.max(w, #r.task + #r.precision + 1)
    if r.machine then sw = 9 end
  end
  local nflag, lacks, lacked = 0, {}, {}
  for _, r in ipairs(results) do
    local name = r.task .. "@" .. r.precision
    local state = M.flagged(r) and "FLAGGED" or r.machine and "unchecked" or "ok"
    if M.flagged(r) then nflag = nflag + 1 end
    if r.machine then
      local code = r.machine.code
      if not lacked[code] then lacked[code] = 0; lacks[#lacks + 1] = r.machine end
      lacked[code] = lacked[code] + 1
    end
    local extra = r.reference_ms and fmt("  reference %.4f ms", r.reference_ms) or ""
    out[#out + 1] = fmt("%-" .. sw .. "s  %-" .. w .. "s  %s%s%s", state, name, r.where,
      r.heldout and fmt(", %d shapes (held-out %d)", r.shapes, r.heldout) or fmt(", %d shape%s", r.shapes, r.shapes == 1 and "" or "s"), extra)
    local pad = (" "):rep(sw + 2)
    for _, f in ipairs(r.flags) do
      out[#out + 1] = fmt("%s%-17s %s%s%s  %s", pad, M.REASON[f.reason].short,
        f.shape and ("shape " .. f.shape) or "every shape", f.heldout and " (held-out)" or "",
        f.output and ("  " .. f.output) or "", f.detail or "")
    end
    for _, u in ipairs(r.notes or {}) do out[#out + 1] = pad .. "note: " .. u end
    for _, u in ipairs(r.unchecked) do out[#out + 1] = pad .. "not checked: " .. u end
  end
  local nmachine = 0
  for _, n in pairs(lacked) do nmachine = nmachine + n end
  out[#out + 1] = fmt("%d task-precision(s) linted, %d flagged%s", #results, nflag,
    nmachine > 0 and fmt(", %d not checked here (nothing kept for them)", nmachine) or "")
  for _, m in ipairs(lacks) do
    out[#out + 1] = fmt("not checked (%d): %s", lacked[m.code], m.why)
  end
  return concat(out, "\n") .. "\n"
end

function M.json(results, extra)
  local list = {}
  for i, r in ipairs(results) do list[i] = M.encodable(r) end
  local o = { results = json.array(list), reasons = {} }
  for _, r in ipairs(M.REASONS) do o.reasons[r.key] = r.text end
  for k, v in pairs(extra or {}) do o[k] = v end
  return json.encode(o, { nan = "null" })
end

return M
