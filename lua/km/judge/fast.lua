-- km.judge.fast — the fastest reference known to be right: PyTorch eager in place of a
-- task's naive CUDA reference, for the timed calls' checks and verify's fresh trials, where
-- eager was found to agree with the CUDA reference there (and is not the slower).
--
-- Owns, on a task state: st.torch_model and st.torch_why (the task's reference.py loaded at
-- its timed shape), st.fast_ref (the timed shape's eager run, or false) and st.fast_at
-- (shape index -> another shape set's eager run, or false).
local compare = require "km.compare"
local task_mod = require "km.task"
local launch = require "km.judge.launch"

local ipairs, pairs, tostring, pcall = ipairs, pairs, tostring, pcall
local fresh_state = launch.fresh_state
local wall = require("km.timing").wall

local M = {}
local Judge = {}
M.methods = Judge

-- The task's reference.py loaded (sizes: the module-level integers set after it ran; nil:
-- its own, the timed shape's), its names the task's and fixed by a first spec (and the
-- inputs' shapes forward checks buffers against) -> problem | nil, why
local function load_model(self, t, sizes)
  local names = { inputs = {}, outputs = {} }
  for i, spec in ipairs(t.inputs) do names.inputs[i] = spec.name end
  for i, spec in ipairs(t.outputs) do names.outputs[i] = spec.name end
  local kb = require "km.task.kernelbench"
  local ok, prob, err = pcall(kb.load, t.reference.pytorch_file, { device = self.torch_device or "cuda", names = names, sizes = sizes })
  if not ok then return nil, tostring(prob) end
  if prob then
    local okspec, serr = prob:spec()
    if not okspec then prob:release() prob, err = nil, serr end
  end
  return prob, err and tostring(err)
end

-- Eager's run of `model` on ref_in (the inputs the CUDA reference ran on), where the model
-- keeps nothing on the GPU between calls (our tasks' reference.py take their weights as
-- inputs: a model with state would be a truth to seal, as st.prob's is), run `times` times,
-- every run's outputs within the task's tolerance of the CUDA reference's (ref_io).
-- -> the run and the last run's wall seconds (to the GPU's finish) | nil
local function eager_agrees(self, st, model, ref_in, ref_io, dims, sym, times)
  local held = model and model:truth()
  if not held or #held > 0 then return nil end
  local run = { torch = model, task_dir = st.task.dir, state = fresh_state() }
  local took
  for _ = 1, times do
    local t0 = wall()
    local fast_io = self:run_reference(st, ref_in, dims, sym, run)
    if not fast_io then return nil end
    took = wall() - t0
    local agree = true
    for _, spec in ipairs(st.task.outputs) do
      local tol = st.task.tolerance[spec.dtype]
      if agree and not compare.allclose(fast_io[spec.name], ref_io[spec.name], { atol = tol.atol, rtol = tol.rtol }).ok then agree = false end
      self.pool:put(fast_io[spec.name])
    end
    if not agree then return nil end
  end
  return run, took
end

-- Whether eager may stand in for the task's reference here: a task with a CUDA reference
-- (not a problem file, whose model is the reference), its PyTorch model in use (the
-- baselines), and torch imported (while an import started ahead still runs,
-- km.task.kernelbench.import_ahead, the task's own reference serves and a later evaluation
-- asks again).
function Judge:fast_may(st)
  return not st.prob and st.wants_torch and require("km.task.kernelbench").ready() or false
end

-- Checks of timed calls use the fastest reference known to be right: a task whose
-- reference is a naive CUDA kernel and which also has a PyTorch model (reference.py, loaded
-- for the baselines, at the timed shape's sizes) re-verifies timed calls against PyTorch
-- eager (cuBLAS, cuDNN) once eager agreed with the CUDA reference, within the task's
-- tolerance, on the task's set-up run in this worker (Judge:set_up_task: the timed shape,
-- ordinary inputs; st.fast_ref, false when it did not or cannot), unless the CUDA reference
-- was timed faster (Judge:check_reference). Verify's fixed trials use the task's own
-- reference (kept results make a slow one cheap), but for the precision trial where eager
-- passed it (Judge:try_fast_precise, below); a fresh trial at the timed shape (a task without
-- a precision trial) is the timed checks' case — inputs from the private generator, which
-- no kept result covers — and uses st.fast_ref too.
function Judge:try_fast_reference(st, ref_in, ref_io, dims, sym)
  if st.fast_ref ~= nil or not self:fast_may(st) then return end
  st.fast_ref = false -- (so where the try raises, it is not tried again)
  st.fast_ref = eager_agrees(self, st, self:torch_model(st), ref_in, ref_io, dims, sym, 1) or false
end

-- The timed shape's eager as the task's set-up record says it was found (agreed: true) in
-- an earlier worker (Judge:setup_record): the model loaded, nothing run.
function Judge:fast_kept(st, agreed)
  st.fast_ref = false
  if agreed then st.fast_ref = eager_agrees(self, st, self:torch_model(st), nil, nil, nil, nil, 0) or false end
end

-- Verify's precision trial (km.judge.verify: the timed shape, inputs drawn by their laws'
-- precision laws, the promise of an fp32 verdict) is judged by eager too, where eager passed
-- that trial itself against the task's CUDA reference with ten times less error than the
-- trial allows (every element within the task's tolerance, or the norm-wise relative error
-- within M.PRECISE_L2 = 5e-6 against the trial's 5e-5, and no NaN or infinity): a candidate's error against eager is then within 5.5e-5 of the CUDA
-- reference's, and fp16 or TF32 operands (2.6e-4) fail against either. Tried at the task's
-- set-up (Judge:set_up_task) on a seed of its own, once eager agreed at the timed shape; the
-- precision trial's CUDA reference (a naive GEMM's 64 MiB of outputs copied in from host
-- memory, or run again, in every evaluation) is then run or copied in no more.
M.PRECISE_L2 = 5e-6
function Judge:fast_precise_wanted(st)
  for _, spec in ipairs(st.task.outputs) do if spec.dtype ~= "f32" then return false end end
  return st.fast_ref and true or false
end
function Judge:try_fast_precise(st, ref_in, ref_io, dims, sym)
  st.fast_precise = false
  local fast_io = st.fast_ref and self:run_reference(st, ref_in, dims, sym, st.fast_ref)
  if not fast_io then return end
  local ok = true
  for _, spec in ipairs(st.task.outputs) do
    local got, want = fast_io[spec.name], ref_io[spec.name]
    local tol = st.task.tolerance[spec.dtype]
    local r = ok and compare.allclose(got, want, { atol = tol.atol, rtol = tol.rtol })
    if r and not r.ok then
      ok = r.nan == 0 and r.inf == 0 and compare.rel_l2(got:to_string(), want:to_string(), "f32") <= M.PRECISE_L2
    end
    self.pool:put(got)
  end
  st.fast_precise = ok
end

-- The timed checks' reference at shape sym: eager (st.fast_ref) where it agreed with the
-- task's CUDA reference, unless the CUDA reference was timed faster at that shape (both by
-- the judge's protocol: st.times and the eager baseline; l1_maxpool2d's CUDA reference takes
-- half eager's time). -> st.fast_ref | nil (the task's own reference)
function Judge:check_reference(st, sym)
  if not st.fast_ref then return nil end
  local tk = task_mod.fmt_shape(sym)
  local ref_t, bl = st.times[tk], st.baselines and st.baselines[tk]
  local eager = bl and bl.eager
  if ref_t and eager and ref_t.median and eager.median and ref_t.median < eager.median then return nil end
  return st.fast_ref
end

-- Fresh verify trials at the other shape sets (inputs from the private generator, which no
-- kept result covers) use PyTorch eager where it agrees with the task's CUDA reference there
-- and runs faster: a naive reference's worst shapes (one thread for a row of 100,003) take
-- milliseconds in every evaluation, eager microseconds. Tried once per shape set and worker,
-- on that shape's first fresh trial (the candidate's call finished, its inputs proven, the
-- CUDA reference run on them): the task's reference.py loaded at that shape set (its shape
-- symbols set after the file ran: kb.load's sizes), run twice on the same inputs, each time
-- within the task's tolerance of the CUDA reference's outputs, and its second run (the first
-- sets up) faster than the CUDA reference's run there (cuda_s: wall seconds to the GPU's
-- finish). Only where the timed checks could use eager too (a task whose reference.py keeps
-- nothing on the GPU, torch imported, the baselines' model in use), and where the CUDA
-- reference took at least M.FAST_AT_MIN_S there: loading the model at another shape set
-- costs milliseconds, which a faster reference must win back in a few evaluations.
-- -> nil (st.fast_at[si] set)
-- What was found is kept in the task's set-up record (eager_at), so a later worker loads the
-- model where eager was the one and runs nothing (Judge:fast_at).
M.FAST_AT_MIN_S = 0.001
local function sizes_at(t, si)
  local sizes = {}
  for k, v in pairs(t.shapes[si]) do if math.type(v) == "integer" then sizes[k] = v end end
  return sizes
end
local function keep_at(self, st, si)
  local rec = st.setup and st.setup.rec
  if not rec then return end
  rec.eager_at = type(rec.eager_at) == "table" and rec.eager_at or {}
  rec.eager_at[tostring(si)] = st.fast_at[si] and true or false
  self:setup_keep(st)
end
function Judge:try_fast_at(st, si, ref_src, ref_io, dims, sym, cuda_s)
  if st.fast_at[si] ~= nil or not self:fast_may(st) then return end
  st.fast_at[si] = false
  if cuda_s >= M.FAST_AT_MIN_S then
    local model = load_model(self, st.task, sizes_at(st.task, si))
    local run, eager_s = eager_agrees(self, st, model, ref_src, ref_io, dims, sym, 2)
    if run and eager_s < cuda_s then st.fast_at[si] = run
    elseif model then model:release() end
  end
  keep_at(self, st, si)
end

-- The fresh trials' reference at shape set si > 1: st.fast_at[si] where decided in this
-- worker, else as the task's set-up record says (the model loaded, nothing run), else nil
-- (the task's own; Judge:try_fast_at decides on this trial). -> the eager run | false | nil
function Judge:fast_at(st, si)
  local f = st.fast_at[si]
  if f ~= nil then return f end
  local rec = st.setup and st.setup.rec
  local at = type(rec) == "table" and type(rec.eager_at) == "table" and rec.eager_at or nil
  local kept = at and at[tostring(si)]
  if type(kept) ~= "boolean" or not self:fast_may(st) then return nil end
  st.fast_at[si] = kept and eager_agrees(self, st, load_model(self, st.task, sizes_at(st.task, si)), nil, nil, nil, nil, 0) or false
  return st.fast_at[si]
end

-- The task's PyTorch model: st.prob, or its reference.py loaded now. -> problem | nil, why
function Judge:torch_model(st)
  if st.prob then return st.prob end
  if st.torch_model == nil then
    local prob, err = load_model(self, st.task)
    st.torch_model, st.torch_why = prob or false, err
  end
  return st.torch_model or nil, st.torch_why
end

return M
