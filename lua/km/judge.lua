-- km.judge — evaluate one candidate against a task, in this process, on this GPU.
--
-- This is what a GPU worker (km.run.worker) runs; strategies go through km.run.eval, which keeps
-- the judge in a child process so a faulting kernel takes down only the worker.
--
--   local judge = require("km.judge").new()
--   local verdict = judge:eval(task_or_dir, { source, launch, params, name }, opts)
--
-- The judge is laid out in lua/km/judge/, one file per concern (docs/architecture.md says
-- which file a change goes to); each adds its methods to the one method table, M.Judge:
--   evaluation  Judge:eval, the per-evaluation record, the options table
--   reference   the task state, reference runs, kept reference results, the fast reference
--   launch      prepare, the `k` table, views, what launch code returns, call_launch
--   pool        the buffer pool
--   inputs      a trial's buffers, input laws and plans, fill_inputs
--   integrity   the truth's seal and digests, the timing gate's page
--   evidence    the ledger, guards and inputs proven, the output compares
--   verify      the verify stage
--   checks      the check rule of timed calls (pure)
--   timed       Judge:time_run and the timing protocol
--   measure     the measure stage: speedups, occupancy, energy, the roofline
--   baselines   PyTorch baselines and cached timings
-- This file makes a judge and exports what callers and tests use; a tunable read or
-- written here (judge.CHECK_FIRST, judge.HOST_COPY_BPS, ...) is its owning file's.
local cuda = require "km.cuda"
local nvrtc = require "km.nvrtc"
local verdict = require "km.verdict"

local PARTS = {
  evaluation = require "km.judge.evaluation",
  reference = require "km.judge.reference",
  launch = require "km.judge.launch",
  pool = require "km.judge.pool",
  inputs = require "km.judge.inputs",
  integrity = require "km.judge.integrity",
  evidence = require "km.judge.evidence",
  verify = require "km.judge.verify",
  checks = require "km.judge.checks",
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
  random = "checks", CHECK_FIRST = "checks", CHECK_EVERY = "checks", CHECK_LINES = "checks", TARGET = "checks", CI_TARGET = "checks",
  check_first = "checks", check_picker = "checks", escape = "checks", cheat_gain = "checks", lines_shift = "checks",
  check_opts = "checks",
  alloc = "pool",
  compile_opts = "launch", returnable = "launch",
  REFERENCE_CACHE_BYTES = "reference", HOST_COPY_BPS = "reference",
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
