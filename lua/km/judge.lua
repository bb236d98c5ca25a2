-- km.judge — evaluate one candidate against a task, in this process, on this GPU: the judge's
-- one door. Nothing outside lua/km/judge/ requires a part of it (tests/lua/test_layers.lua).
--
-- This is what a GPU worker (km.serve.worker) runs; strategies go through km.serve.pool, which keeps
-- the judge in a child process so a faulting kernel takes down only the worker.
--
--   local judge = require("km.judge").new()
--   local verdict = judge:eval(task_or_dir, { source, launch, params, name }, opts)
--
-- What callers use (M.API; tests/lua/test_layers.lua fails on a call of any other method of
-- a judge from outside lua/km/judge/): M.new, M.compile_opts, and a judge's
--   eval(t, cand, opts)             the verdict on a candidate
--   open(t)                         the task set up here (reference built, or model loaded)
--   has_task(key)                   whether the task is set up here
--   reference(t, sym, seed, edit)   the reference's inputs and outputs at a shape set
--   release(r)                      the buffers of a reference(...) handed back
--   time_reference(t, sym, opts)    the reference's median time and the launch floor
--   try_reference(t, seed)          does the reference run here (then forgets the task)
--   forget(key)                     the task's state dropped, its model released
-- Tests of the judge's logic reach the method table, M.Judge, and the tunables (below).
--
-- The judge is laid out in lua/km/judge/, one file per concern (docs/architecture.md says
-- which file a change goes to); each adds its methods to the one method table, M.Judge:
--   evaluation  Judge:eval, the per-evaluation record, the options table
--   reference   the task state, reference runs, kept reference results, the set-up run
--   fast        PyTorch eager in place of a naive CUDA reference, where found right and faster
--   launch      prepare, the `k` table, views, what launch code returns, call_launch
--   pool        the buffer pool
--   inputs      a trial's buffers, input laws and plans, fill_inputs
--   integrity   the truth's seal and digests, the timing gate's page
--   evidence    the ledger, guards and inputs proven, the output compares
--   verify      the verify stage
--   checks      the check rule of timed calls (pure)
--   rows        a timed call's check on a sample of a task's rows (task.check_rows)
--   timed       Judge:time_run and the timing protocol
--   measure     the measure stage: speedups, occupancy, energy, the roofline
--   baselines   PyTorch baselines and cached timings
-- This file makes a judge and exports what callers and tests use; a tunable read or
-- written here (judge.CHECK_FIRST, judge.HOST_COPY_BPS, ...) is its owning file's.
local cuda = require "km.cuda"
local nvrtc = require "km.nvrtc"
local verdict = require "km.verdict"

local ipairs, pairs, pcall, tostring = ipairs, pairs, pcall, tostring

local PARTS = {
  evaluation = require "km.judge.evaluation",
  reference = require "km.judge.reference",
  fast = require "km.judge.fast",
  launch = require "km.judge.launch",
  pool = require "km.judge.pool",
  inputs = require "km.judge.inputs",
  integrity = require "km.judge.integrity",
  evidence = require "km.judge.evidence",
  verify = require "km.judge.verify",
  checks = require "km.judge.checks",
  rows = require "km.judge.rows",
  timed = require "km.judge.timed",
  measure = require "km.judge.measure",
  baselines = require "km.judge.baselines",
}

local M = {}
local Judge = {}
Judge.__index = Judge

M.STATUSES = verdict.STATUSES
-- The method table: a judge is setmetatable(fields, M.Judge) (M.new). Tests of the judge's
-- logic on machines without a GPU put stand-ins for its GPU parts on one.
M.Judge = Judge
for part, mod in pairs(PARTS) do
  for name, fn in pairs(mod.methods or {}) do
    assert(Judge[name] == nil, "km.judge." .. part .. ": Judge:" .. name .. " is defined twice")
    Judge[name] = fn
  end
end

-- The names km.judge exports from its parts (name -> the part that owns it).
local EXPORTS = {
  random = "checks", CHECK_FIRST = "checks", CHECK_EVERY = "checks", CHECK_LINES = "checks", TARGET = "checks", CI_TARGET = "checks", STOP_RULE = "checks", STOP_RULES = "checks",
  NOISE = "checks", MIN_SAMPLES = "checks", EARLY_SAMPLES = "checks",
  check_first = "checks", check_picker = "checks", escape = "checks", cheat_gain = "checks", lines_shift = "checks",
  check_opts = "checks", ROWS_MIN = "rows",
  alloc = "pool",
  compile_opts = "launch", returnable = "launch",
  REFERENCE_CACHE_BYTES = "reference", HOST_COPY_BPS = "reference", FAST_AT_MIN_S = "fast",
  WARMUP = "timed", WARMUP_MS = "timed", time_opts = "timed",
  speedups = "measure",
}
setmetatable(M, {
  __index = function(_, name) local part = EXPORTS[name] return part and PARTS[part][name] end,
  __newindex = function(t, name, value)
    local part = EXPORTS[name]
    if part then PARTS[part][name] = value else rawset(t, name, value) end
  end,
})

-- The methods callers outside lua/km/judge/ use (the header says what each does).
M.API = { "eval", "open", "has_task", "reference", "release", "time_reference", "try_reference", "forget" }

function Judge:has_task(key) return self.tasks[key] ~= nil end

-- -> true | nil, why (the task does not load, or its reference does not build)
function Judge:open(t)
  local st, err = self:task_state(t)
  if not st then return nil, err end
  return true
end

-- The task's reference run once at shape set `sym` on the inputs drawn from `seed`; edit(ins),
-- if given, changes the inputs first (they stay the reference's). -> { ins = name -> buffer,
-- outs = output name -> buffer } (hand it back with release) | nil, why
function Judge:reference(t, sym, seed, edit)
  local st, serr = self:task_state(t)
  if not st then return nil, serr end
  local cand, ref_in, dims = self:trial_io(t, sym, seed)
  self.pool:put_all(cand)
  self:pristine(t, sym, ref_in, seed)
  if edit then
    local ok, err = pcall(edit, ref_in)
    if not ok then self.pool:put_all(ref_in) return nil, tostring(err) end
  end
  local ref_io, status, msg = self:run_reference(st, ref_in, dims, sym)
  if not ref_io then self.pool:put_all(ref_in) return nil, tostring(status) .. ": " .. tostring(msg) end
  local outs = {}
  for _, o in ipairs(t.outputs) do outs[o.name] = ref_io[o.name] end
  return { ins = ref_in, outs = outs }
end

function Judge:release(r)
  self.pool:put_all(r.ins)
  for _, b in pairs(r.outs) do self.pool:put(b) end
end

-- The reference timed at shape set `sym` (opts: the timing's, default a cold timing of at most
-- 500 ms), no check. -> median ms, the launch floor's median ms | nil, why
function Judge:time_reference(t, sym, opts)
  local st, serr = self:task_state(t)
  if not st then return nil, serr end
  local res, status, msg = self:time_run(st, st.ref, sym, opts or { mode = "cold", max_ms = 500 }, false)
  if not res then return nil, tostring(status) .. ": " .. tostring(msg) end
  self._floor = self._floor or require("km.timing").floor()
  return res.median, self._floor and self._floor.median
end

-- The task's state dropped (its PyTorch model released, idle buffers freed). -> nil, or why
-- nothing more can run here (the context was lost)
function Judge:forget(key)
  local st = self.tasks[key]
  if st and st.prob then st.prob:release { empty_cache = true } end
  self.tasks[key] = nil
  self.pool:drop(true)
  local alive, msg = cuda.synchronize()
  if not alive then return "the GPU context was lost (" .. tostring(msg) .. ")" end
end
for _, name in ipairs(M.API) do assert(Judge[name], "km.judge: no method " .. name) end

-- A judge on this process's GPU -> judge | nil, why, "NO_GPU". Its fields:
--   device        the GPU (cuda.device(), with nvrtc: NVRTC's version)
--   opts          the judge's options (scratch_bytes, lua_memory, reference_cache_bytes)
--   tasks         task dir -> task state (km.judge.reference names its fields)
--   pool          idle device buffers (km.judge.pool)
--   ref_kept      verify's CUDA reference results kept in host memory (km.judge.reference)
--   truth_clean   the task state whose truth was proven unchanged since candidate code ran
--   evaluation    the evaluation in progress (km.judge.evaluation), or nil
--   proof_ledger  the checks' ledger (km.judge.evidence), made on first use
--   _peaks, _floor  the GPU's peaks and launch floor, measured on first use
--   on_hold       set by a worker: told when one-time set-up starts and ends
function M.new(opts)
  opts = opts or {}
  local ok, why = cuda.available()
  if not ok then return nil, why, "NO_GPU" end
  local self = setmetatable({}, Judge)
  self.device = cuda.device()
  self.device.nvrtc = nvrtc.version()
  self.tasks = {}
  self.opts = opts
  self.pool = PARTS.pool.new()
  self.ref_kept = { bytes = 0, cap = opts.reference_cache_bytes or M.REFERENCE_CACHE_BYTES, order = {} }
  return self
end

return M
