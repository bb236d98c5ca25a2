-- km.judge.evaluation — one evaluation of a candidate: Judge:eval and its record.
--
-- Owns: the evaluation record (M.new below names its fields), made by Judge:eval, held as
-- self.evaluation while it runs and dropped when its verdict is returned. Four stages:
-- task (load, reference state, the reference's set-up run: Judge:set_up_task), prepare
-- (compile, load, sandbox the launch code), verify (km.judge.verify), measure
-- (km.judge.measure), with the PyTorch baselines and the set-up run before any of the
-- candidate's code runs.
--
--   option        default             meaning
--   seeds         3                   seeds per shape set in verify (the last one fresh)
--   timing        true                measure the candidate (false: verify only)
--   baseline      true                time the starter beside it
--   budget        1e6                 Lua instructions per launch call
--   lua_memory    the sandbox's       bytes of Lua memory per launch call
--   scratch_bytes 8 GiB               k.scratch's budget per launch
--   energy        false               a separate pass for joules per call (NVML)
--   check_first   min_samples         timed calls re-verified among the first min_samples
--                                     (fewer: a uniform draw; km.judge.checks)
--   check_every   1                   later timed calls re-verified 1 in check_every
--   check_lines   checks.CHECK_LINES  a check reads one output line in check_lines (16)
--   check_draw    "subset"            "each": every call 1 in check_every (side-by-side runs)
--   check_rows    true                a task's declared rows: checks read a sample of them
--                                     (km.judge.rows; false: the ordinary check, every row)
-- and the timing options (km.judge.timed) and the baselines' (km.judge.baselines).
local timing = require "km.timing"
local verdict = require "km.verdict"
local feedback = require "km.feedback"
local launch = require "km.judge.launch"
local checks = require "km.judge.checks"
local buffer = require "km.buffer"

local fmt = string.format
local type, pcall, require = type, pcall, require
local copy, wall = launch.copy, timing.wall

local M = {}
local Judge = {}
M.methods = Judge

-- An evaluation's record.
function M.new()
  local now = wall()
  return {
    cpu0 = os.clock(),  -- the process's CPU time at the start
    wall0 = now,        -- the wall clock at the start
    stages = {},        -- stage name -> seconds (task, prepare, baselines, verify, measure, energy)
    mark = now,         -- the wall clock when the current stage began
    fault = nil,        -- { status, text }: the first fault found outside a verdict's path (km.judge.integrity)
    gate_mark = nil,    -- timing.gate_check()'s count when the candidate's code first could run
    run = nil,          -- the candidate's prepared launch (its scratch is freed at the end)
  }
end

-- Ends the current stage: its seconds recorded under `name` (added where it ran before).
local function stage(ev, name)
  local now = wall()
  ev.stages[name] = (ev.stages[name] or 0) + now - ev.mark
  ev.mark = now
end

-- The evaluation's device memory at its peak, since the last evaluation ended: the judge's
-- own buffers (km.buffer's, its pool's idle ones and the candidate's scratch included) and
-- torch's allocator (a PyTorch reference's tensors, where torch is loaded); both peaks start
-- again from what is held now. -> { judge_peak_bytes, torch_peak_bytes }
local function device_peaks()
  local _, _, peak = buffer.live()
  buffer.reset_peak()
  local kb = package.loaded["km.task.kernelbench"]
  local ok, torch_peak = pcall(function() return kb and kb.peak_memory(true) or 0 end)
  return { judge_peak_bytes = peak, torch_peak_bytes = ok and torch_peak or nil }
end

-- The end of every evaluation: the truth checked (a change made by the last call, or by the
-- energy pass, is the candidate's too), every scratch buffer it obtained freed, and the
-- verdict finished. -> the verdict
local function finish(self, ev, st, v, status, text, extra)
  if not (extra and extra.context_lost) and status ~= "crashed" then
    pcall(self.gate_fault, self, "at the end of the evaluation")
    pcall(self.truth_check, self, st)
    if ev.fault and status ~= "timeout" then status, text = ev.fault[1], ev.fault[2] end
  end
  if ev.run then pcall(launch.free_scratch, ev.run) end
  if self.evaluation == ev then self.evaluation = nil end
  verdict.finish(v, status, text, extra)
  v.eval_cpu_s = os.clock() - ev.cpu0
  v.eval_seconds = wall() - ev.wall0
  v.device_memory = device_peaks()
  v.stage_seconds = ev.stages
  v.exact_reference = ev.exact -- compares decided by a float64 run where eager's missed (Judge:exact_agrees)
  return v
end

-- The candidate prepared, the baselines taken and verify run -> nil | status, text, extra
local function prepare_and_verify(self, ev, st, v, cand, opts)
  local t = st.task
  local run, status, msg, info = launch.prepare(self, cand.source or "", cand.launch or "", cand.params or {}, "kernel")
  ev.run = run
  stage(ev, "prepare")
  if not run then return status, msg, { compile_log = info and info.log } end
  run.task_outputs, run.st = t.outputs, st
  v.compile_log, v.compile_ms, v.cached_compile, v.kernels = run.prog.log, run.prog.ms, run.prog.cached, run.attrs
  -- the PyTorch baselines (once per task and shape; usually from the disk) before any of
  -- the candidate's code runs: nothing it leaves behind can slow them. A write to the
  -- timing gate's page left from before (a crashed candidate's, whose end was not checked)
  -- is put back before the baselines are timed: they would fail on it
  timing.gate_check()
  if opts.timing ~= false then self:baselines(st, copy(t.shapes[1]), opts) stage(ev, "baselines") end
  -- the task's reference checked at the timed shape (once; counted as the task stage)
  local set_status, set_text, set_extra = self:set_up_task(st, opts)
  stage(ev, "task")
  if set_status then return set_status, set_text, set_extra end
  -- the candidate's code runs from here: a write to the gate's page found later is its
  ev.gate_mark = timing.gate_check()
  local s, text, extra = self:verify(st, run, v, opts)
  -- the verified trials' seeds are the same for every candidate of the task: their reference
  -- results, which torch's cached blocks held through verify, go back to the driver now
  if st.prob and not (extra and extra.context_lost) then pcall(require("km.task.kernelbench").empty_cache) end
  stage(ev, "verify")
  return s, text, extra
end

-- Judges one candidate. Never raises for a candidate's faults; returns the verdict.
function Judge:eval(t, cand, opts)
  opts = opts or {}
  checks.check_opts(opts) -- a bad option is the caller's error: raised before anything runs
  local ev = M.new()
  local st, terr = self:task_state(t)
  if not st then
    return verdict.finish(verdict.new { task = type(t) == "table" and t.name or t }, verdict.ERROR, terr)
  end
  stage(ev, "task")
  t = st.task
  local dev = self.device
  local v = verdict.new { task = t.name, candidate = cand.name, params = cand.params,
    device = { name = dev.name, arch = dev.arch, uuid = dev.uuid, driver = dev.driver_version, nvrtc = dev.nvrtc } }
  self.evaluation = ev
  local s, text, extra = prepare_and_verify(self, ev, st, v, cand, opts)
  if s then return finish(self, ev, st, v, s, text, extra) end
  if opts.timing == false then
    return finish(self, ev, st, v, "correct", fmt("Correct on %d shapes x %d seeds (not timed).", #t.shapes, opts.seeds or 3))
  end
  s, text, extra = self:measure(st, ev.run, v, opts)
  stage(ev, "measure")
  if v.energy_seconds then ev.stages.measure, ev.stages.energy = ev.stages.measure - v.energy_seconds, v.energy_seconds end
  if s then return finish(self, ev, st, v, s, text, extra) end
  return finish(self, ev, st, v, "correct", feedback.correct(#t.shapes, opts.seeds or 3, v))
end

return M
