-- km.serve.catalog — the tasks a service judges, by id (GET /v1/tasks; a request's `task`).
--
--   local catalog = require "km.serve.catalog"
--   local cat = catalog.new { "tasks/", "kb/level1" }   -- folders of tasks, task folders, problem files
--   local e, why = cat:get("l1_relu", "fp16")  -- { id, key, kind, task (loaded, or nil), flag, fingerprint }
--   cat:list()                                 -- GET /v1/tasks's entries, in id order
--
-- Only tasks under the roots a server was started with are judged: a request names a task by
-- id, never by path. A task folder is loaded at start (its shapes, tolerance and prompt are
-- listed); a KernelBench problem file is loaded when its spec is cached (loading one builds
-- it with PyTorch, which a CPU host may lack) and judged in any case. `kmrun tasks lint`'s
-- kept result for a task is read once: a flagged task's verdicts carry the flag and reason.
local task = require "km.task"
local kbtask = require "km.task.kbtask"
local lint = require "km.task.lint"
local sys = require "km.sys"

local ipairs, pairs, type, tostring, pcall = ipairs, pairs, type, tostring, pcall
local sort, concat = table.sort, table.concat

local M = {}
local Catalog = {}
Catalog.__index = Catalog

M.PRECISIONS = { "fp32", "fp16", "bf16" }

-- The entries a root holds: a problem file, a task folder, or a folder of either.
local function paths_of(root)
  root = root:gsub("/+$", "")
  if kbtask.is_problem(root) then return { root } end
  if require("km.limits").realpath(root .. "/task.lua") then return { root } end
  return task.entries(root)
end

local function lint_flag(t)
  local ok, res = pcall(lint.cached, t)
  if not ok or not lint.flagged(res) then return nil, ok and res ~= nil end
  local reasons = {}
  for _, f in ipairs(res.flags) do reasons[#reasons + 1] = tostring(f.reason) .. (f.detail and (": " .. tostring(f.detail)) or "") end
  return { flagged = true, reasons = lint.reasons and lint.reasons(res) or nil, reason = concat(reasons, "; ") }, true
end

-- catalog.new(roots) -> catalog, errors (a list: entries that did not load; never fatal)
function M.new(roots)
  local self = setmetatable({ by_id = {}, ids = {} }, Catalog)
  local errors = {}
  for _, root in ipairs(roots) do
    for _, p in ipairs(paths_of(root)) do
      local abs = sys.realpath(p) or p
      local e = { key = abs }
      if kbtask.is_problem(abs) then
        e.id, e.kind = kbtask.name(abs), "problem"
        if kbtask.cached(abs) then e.task = task.load(abs) end
      else
        local t, why = task.load(abs)
        if t then e.id, e.kind, e.task = t.name, "folder", t else errors[#errors + 1] = why end
      end
      if e.id and not self.by_id[e.id] then
        if e.task then e.flag, e.linted = lint_flag(e.task) end
        e.fingerprint = require("km.serve.resident").task_fingerprint(abs)
        self.by_id[e.id] = e
        self.ids[#self.ids + 1] = e.id
      elseif e.id then
        errors[#errors + 1] = "task id " .. e.id .. " is taken: " .. abs .. " is left out"
      end
    end
  end
  sort(self.ids, task.natural_less)
  return self, errors
end

-- The entry of task id at precision (problem files: fp32, fp16, bf16) -> { id, key (the
-- judge's task key), kind, task, flag, fingerprint } | nil, why
function Catalog:get(id, precision)
  local e = type(id) == "string" and self.by_id[id]
  if not e then return nil, "unknown task '" .. tostring(id) .. "'" end
  if precision == nil or precision == "fp32" then return e end
  if e.kind ~= "problem" then return nil, "task " .. id .. ": a precision applies to a problem file only" end
  local okp = false
  for _, p in ipairs(M.PRECISIONS) do okp = okp or p == precision end
  if not okp then return nil, "precision: fp32, fp16 or bf16" end
  local v = { id = e.id, kind = e.kind, key = kbtask.key(e.key, precision), flag = e.flag, fingerprint = e.fingerprint }
  if kbtask.cached(v.key) then v.task = task.load(v.key) end
  return v
end

function Catalog:count() return #self.ids end

local function shapes_of(t)
  local out = {}
  for i, s in ipairs(t.shapes or {}) do
    local row = {}
    for k, x in pairs(s) do if type(x) == "number" or type(x) == "string" then row[k] = x end end
    out[i] = row
  end
  return out
end

local function io_of(list)
  local out = {}
  for i, spec in ipairs(list or {}) do out[i] = { name = spec.name, dtype = spec.dtype, shape = spec.shape } end
  return out
end

-- One task's listing: what a trainer needs to prompt a model and read its verdicts.
-- baselines: this server's timings seen so far (id -> { eager_ms, compile_ms, reference_ms }).
function Catalog:describe(e, baselines)
  local d = { id = e.id, kind = e.kind, precisions = e.kind == "problem" and M.PRECISIONS or { "fp32" },
    lint = e.flag or (e.linted and { flagged = false }) or "not linted", baselines = baselines and baselines[e.id] or nil }
  local t = e.task
  if not t then
    d.loaded = false
    d.note = "a problem file whose spec is not cached here: its details come once it is judged on a GPU or loaded with PyTorch"
    return d
  end
  d.name, d.level, d.category = t.name, t.level, t.category
  d.shapes, d.inputs, d.outputs, d.tolerance = shapes_of(t), io_of(t.inputs), io_of(t.outputs), t.tolerance
  local ok, msgs = pcall(require("km.run.prompt").implement, t)
  if ok then d.prompt = msgs end
  return d
end

function Catalog:list(baselines)
  local out = {}
  for i, id in ipairs(self.ids) do out[i] = self:describe(self.by_id[id], baselines) end
  return out
end

return M
