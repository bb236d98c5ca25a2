-- km.judge.inputs — a trial's buffers and how their inputs are drawn.
--
-- Owns: on a task state, st.plans (shape key -> input plan, or false: km.task.kernelbench draws
-- the inputs). A trial's buffers come from the judge's pool; the candidate's inputs are
-- drawn from a seed, its outputs poisoned, and the reference's inputs drawn again from the
-- same seed after the candidate ran (Judge:pristine).
local buffer = require "km.buffer"
local task_mod = require "km.task"
local launch = require "km.judge.launch"
local checks = require "km.judge.checks"

local pairs, ipairs, next, error, tostring = pairs, ipairs, next, error, tostring
local copy = launch.copy

local M = {}
local Judge = {}
M.methods = Judge

-- The law a task's init rule draws an input by (b:random's table, without the seed).
local function law_of(spec, sym)
  local init = spec.init
  local a, c = task_mod.eval_expr(init[2], sym), task_mod.eval_expr(init[3], sym)
  if init[1] == "uniform" then return { dist = "uniform", lo = a, hi = c } end
  if init[1] == "normal" then return { dist = "normal", mean = a, std = c } end
  return { dist = "int", lo = a, hi = c }
end

-- The input buffers of io, by name.
function M.inputs_of(t, io)
  local r = {}
  for _, spec in ipairs(t.inputs) do r[spec.name] = io[spec.name] end
  return r
end

-- The precision law of an input drawn by `law` (verify's precision trial, km.judge.verify):
-- zero-mean at the law's own scale — uniform(lo, hi) as uniform(-w, w), w = max(|lo|, |hi|),
-- normal(mean, std) as normal(0, sqrt(mean^2 + std^2)); integer laws as they are. A sum of
-- such values cancels, so its result depends on every operand's low mantissa bits: fp16 or
-- TF32 operands (2^-11 relative) show in the result, which with all-positive inputs they
-- do not (docs/security.md, "What an fp32 verdict promises").
function M.precision_law(law)
  local abs = math.abs
  if law.dist == "uniform" then
    local w = math.max(abs(law.lo), abs(law.hi))
    return { dist = "uniform", lo = -w, hi = w }
  end
  if law.dist == "normal" then return { dist = "normal", mean = 0, std = math.sqrt(law.mean ^ 2 + law.std ^ 2) } end
  return law
end

-- b:random's table for input number i of a call drawn from `seed` (precise: by the law's
-- precision law).
function M.seeded(law, seed, i, precise)
  local r = copy(precise and M.precision_law(law) or law)
  r.seed = seed * 7919 + i
  return r
end
local seeded = M.seeded

-- A trial's buffers: the candidate's inputs (values drawn from `seed`) and outputs
-- (poisoned), and buffers for the reference's inputs, which stay poisoned until
-- Judge:pristine draws them again from the same seed — after the candidate ran, so no
-- candidate kernel can find and alter the copy it will be checked against.
-- refreshed: the caller draws the inputs before every call (a timing's refresh): they are
-- not drawn here, where no call would read them. precise: by the precision laws (fill_inputs).
function Judge:trial_io(t, sym, seed, refreshed, precise)
  local cand, ref_in, dims = {}, {}, {}
  for _, spec in ipairs(t.inputs) do
    local d = task_mod.shape_of(spec, sym)
    dims[spec.name] = d
    cand[spec.name] = self.pool:get(spec.dtype, d)
    ref_in[spec.name] = self.pool:get(spec.dtype, d)
  end
  if not refreshed then self:fill_inputs(t, sym, cand, seed, false, precise) end
  for _, spec in ipairs(t.outputs) do
    local d = task_mod.shape_of(spec, sym)
    dims[spec.name] = d
    cand[spec.name] = self.pool:get(spec.dtype, d):poison()
  end
  return cand, ref_in, dims
end

-- The inputs of `seed` again, into ref_in: what the candidate's inputs were before it ran.
function Judge:pristine(t, sym, ref_in, seed)
  self:fill_inputs(t, sym, ref_in, seed)
  return ref_in
end

-- State across timed calls (docs/security.md). A problem file's parameters (its model's
-- nn.Parameters: weights and biases) hold the same values on every call of a task, so a
-- kernel could derive something from them once (a packed, folded or reduced copy, kept in a
-- __device__ array or its scratch) and never read them again. Timed calls therefore get
-- them perturbed: each floating element times a factor in [0.5, 1.5) drawn from the call's
-- parameter key (km_perturb: signs and zeros kept, tied parameters tied), and the check's
-- reference computes with the very buffers the candidate was handed, proven to be the
-- model's parameters so perturbed (Judge:param_reference, evidence's perturb_check).
-- Buffers (running statistics, masks) are handed as they are: constants of the model.
-- A task folder's inputs, weights included, are drawn fresh for every call already.
local FLOATING = { f32 = true, f64 = true, f16 = true, bf16 = true }
function M.perturbed(spec)
  return spec.role == "parameter" and spec.kind == "parameter" and FLOATING[spec.dtype] == true
end

-- The parameter key of a timed call's seed: the seed mixed with a secret of this process
-- (drawn once from the judge's private generator), so the factors are not a function of the
-- seed, which a kernel can read back from its inputs.
local PARAM_SECRET = checks.random(1 << 62)
function M.param_key(seed) return (seed * -7046029254386353131) ~ PARAM_SECRET end

-- A problem file's refresh plan (km.task.kernelbench) as the judge's plan, or false.
local function problem_plan(t, p)
  if not p or p.why then return false end
  local plan = { laws = {}, params = {} }
  for i, spec in ipairs(t.inputs) do
    local law = p.inputs and p.inputs[spec.name]
    if law then
      plan.laws[spec.name] = { law = law.dist == "normal" and { dist = "normal", mean = law.a, std = law.b }
        or { dist = law.dist, lo = law.a, hi = law.b }, index = i }
    elseif p.params and p.params[spec.name] then
      local r = p.params[spec.name]
      plan.params[spec.name] = { ptr = r.ptr, nbytes = r.nbytes, perturb = M.perturbed(spec) }
    else
      return false
    end
  end
  return plan
end

-- How a call's inputs are drawn by the judge's own fill, without Python: { laws = { name ->
-- law, index }, params = { name -> { ptr, nbytes } } } or false. A task's init rules are
-- laws; a problem file's get_inputs() is when it only draws with torch.rand/randn/randint
-- (its refresh plan, km.task.kernelbench: the same laws, drawn by the judge from the same seed on
-- every call, verified and timed), its parameters then copied from the model's own tensors
-- (buffer.copy_in). Inputs drawn by a law are checked against it in place (b:random_check).
-- Kept per task and shape (a plan's pointers are the model's, which stay where they are).
function Judge:input_plan(st, sym, io)
  local key = task_mod.fmt_shape(sym)
  st.plans = st.plans or {}
  local plan = st.plans[key]
  if plan ~= nil then return plan end
  local t = st.task
  if st.prob then
    plan = problem_plan(t, st.prob:refresh_plan(io))
  else
    plan = { laws = {}, params = {} }
    for i, spec in ipairs(t.inputs) do plan.laws[spec.name] = { law = law_of(spec, sym), index = i } end
  end
  st.plans[key] = plan
  return plan
end

-- The inputs of `seed` into io: drawn by the input plan's laws where there is one (a task's
-- init rules; a problem file's replayed get_inputs(), so no Python runs between calls), or
-- by the problem's own get_inputs() under the seed (on the GPU), plus the model's
-- parameters. A problem whose inputs cannot be made raises (the verdict: error).
-- timed: a timed call's refresh (and its check's): the parameters perturbed by the seed's
-- parameter key (M.perturbed, above). Then torch's cached blocks stay
-- (otherwise eager's next output allocation is a cudaMalloc inside the timed window; only
-- inputs are in them), and the parameters are copied from the truth without proving it
-- unchanged first: that digest waits for the stream, so samples could not queue ahead.
-- Nothing is lost: a candidate that changed the truth is found by the next check's
-- truth_check (before its reference run), by the last timed call's, or at the end of the
-- evaluation, and parameters it changed for its own next call are not what it is checked
-- against.
-- precise: the laws' precision laws (verify's precision trial; a plan's laws only).
function Judge:fill_inputs(t, sym, io, seed, timed, precise)
  local st = self.tasks[t.dir]
  local plan = self:input_plan(st or { task = t }, sym, io)
  if plan then
    for name, l in pairs(plan.laws) do io[name]:random(seeded(l.law, seed, l.index, precise)) end
    -- parameters: as below, from a truth proven unchanged, except in a timed refresh
    if next(plan.params) and not timed then self:truth_check(st, "an input refresh") end
    local key = timed and M.param_key(seed) or nil
    for name, r in pairs(plan.params) do buffer.copy_in(io[name], r.ptr, r.nbytes, r.perturb and key or nil) end
    return
  end
  local ins, params = {}, {}
  for _, spec in ipairs(t.inputs) do
    if spec.role == "parameter" then params[spec.name] = io[spec.name] else ins[spec.name] = io[spec.name] end
  end
  -- out of memory, once more after the judge's idle buffers and torch's cache went back
  local ok, err = launch.with_room(self, function() return st.prob:make_inputs(seed, ins, { keep_cache = timed }) end)
  if ok and next(params) then
    -- parameters are handed out only from a truth proven unchanged since its seal (a change
    -- is restored first, and recorded against the candidate); a timed refresh: above
    if not timed then self:truth_check(st, "an input refresh") end
    ok, err = st.prob:write_params(params)
    if ok and timed then
      local key = M.param_key(seed)
      for _, spec in ipairs(t.inputs) do
        local b = params[spec.name]
        if b and M.perturbed(spec) then buffer.copy_in(b, b:ptr(), b:nbytes(), key) end
      end
    end
  end
  if not ok then error("the task's PyTorch inputs could not be made: " .. tostring(err), 0) end
end

return M
