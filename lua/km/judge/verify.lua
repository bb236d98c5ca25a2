-- km.judge.verify — the verify stage: every shape x seeds, the candidate before the
-- reference, so no reference result exists while candidate code runs.
--
-- Owns: one trial's record while it runs (its shape, seed, buffers and where a failure
-- is told).
local task_mod = require "km.task"
local compare = require "km.compare"
local verdict = require "km.verdict"
local feedback = require "km.feedback"
local launch = require "km.judge.launch"
local evidence = require "km.judge.evidence"
local checks = require "km.judge.checks"

local fmt, concat = string.format, table.concat
local ipairs, setmetatable, tostring = ipairs, setmetatable, tostring
local call_launch, sync_status, rng = launch.call_launch, launch.sync_status, checks.random

local M = {}
local Judge = {}
M.methods = Judge

-- The trials in order: { shape index, seed } for every shape x seed. The timed shape's last
-- trial comes last: the candidate's call just before its timing is at the timed shape, so
-- that call is the timing's warm-up (its module loaded, its scratch of the timed shape
-- allocated; km.judge.timed) and no warm-up call of its own is needed. trim (the candidate
-- is timed, opts.verify_trim ~= false): the timed shape gets one trial only. Every timed
-- call after it is checked on inputs of the private generator, with every input proven in
-- full, the first check reading every output line and the later ones one line in
-- check_lines; the reference's own outputs there were found not degenerate, and eager tried
-- against it, by the task's set-up (Judge:set_up_task), before any candidate code ran. So more
-- trials at that shape add nothing but their cost (a trial there is a candidate call, a
-- reference run and a full compare of the largest buffers). That one trial is the precision
-- trial where there is one (below), else an ordinary one on the fresh seed. Untimed, every
-- seed is run there, the timed shape first where there is one seed (a kernel wrong
-- everywhere is told about the shape the model was asked for).
-- precise: one trial at the timed shape is the precision trial (M.PRECISION_L2): its second
-- seed where there are three or more, else one more seed (nseeds + 1) after the first.
-- -> { { shape index, seed, precise } ... }
function M.trial_order(nshapes, nseeds, precise, trim)
  local order = {}
  for si = 1, nshapes do
    for seed = 1, nseeds do
      if not (si == 1 and (trim or (seed == nseeds and nseeds > 1))) then
        order[#order + 1] = { si, seed, precise and si == 1 and seed == 2 and nseeds >= 3 }
      end
      if precise and not trim and si == 1 and seed == 1 and nseeds < 3 then order[#order + 1] = { 1, nseeds + 1, true } end
    end
  end
  if precise and trim then order[#order + 1] = { 1, nseeds >= 3 and 2 or nseeds + 1, true }
  elseif nseeds > 1 or trim then order[#order + 1] = { 1, nseeds } end
  return order
end
local trial_order = M.trial_order

-- What an fp32 verdict promises (docs/security.md): the candidate computes with fp32
-- arithmetic, not with fp16, TF32 or bf16 operands. A task whose outputs are all f32 gets a
-- precision trial at the timed shape: inputs drawn by their laws' precision laws
-- (km.judge.inputs: zero-mean, so sums cancel and every operand's low bits show), judged
-- elementwise as any trial or, where that fails, by the norm-wise relative error
-- ||got - want|| / ||want|| <= PRECISION_L2 (no NaN, infinity or unwritten element).
-- Simulated (bench/precision_law.c; a GEMM judged against a sequential fp32 one): fp16 or
-- TF32 operands give 2.6e-4 whatever K, bf16 2.1e-3; fp32 in another summation order 1.6e-6
-- at K = 4096 and 6.2e-6 at K = 65536, where the elementwise tolerance (1e-4) fails up to 1%
-- of its elements at cancellations. An output whose reference is not finite under the
-- precision law (a log of a negative value) is not judged on that trial.
M.PRECISION_L2 = 5e-5

-- A task verify runs a precision trial for: every output f32 (opts.precision_trial = false: none).
local function wants_precision(t, opts)
  if opts.precision_trial == false then return false end
  for _, spec in ipairs(t.outputs or {}) do if spec.dtype ~= "f32" then return false end end
  return true
end

-- Whether a plan draws any input by a law whose precision law differs (uniform, normal).
local function has_float_law(plan)
  for _, l in pairs(plan and plan.laws or {}) do
    if l.law.dist == "uniform" or l.law.dist == "normal" then return true end
  end
  return false
end

-- The task's input and output dtypes, in order: part of a kept reference result's key.
local function io_dtypes(t)
  local d = {}
  for _, list in ipairs { t.inputs, t.outputs } do for _, spec in ipairs(list) do d[#d + 1] = spec.dtype end end
  return concat(d, ",")
end

-- A trial's record: where it is (shape si, seed), what a failure says (where, failed_at),
-- its seed, and its buffers.
local function new_trial(self, t, si, seed, nseeds, opts, precise)
  local sym = t.shapes[si]
  -- a problem file's held-out shape (km.task.kbtask) is never named with its sizes: feedback
  -- goes to the model, and a kernel that knows them could hard-code them too
  local hidden = t.heldout and t.heldout.shape == si
  -- Each shape's last trial draws its inputs from a seed of the judge's private generator,
  -- new in every evaluation (opts.fresh_trial = false: none, to reproduce a verdict
  -- exactly). The other trials' seeds are fixed: reproducible, and their CUDA reference
  -- results kept (Judge:trial_reference). A kernel that printed the fixed trials' inputs
  -- once and came back with their outputs written in (the timed calls' checks cover the
  -- timed shape only) still meets, at every shape, inputs it never saw.
  local fresh = seed == nseeds and opts.fresh_trial ~= false
  local tr = { si = si, seed = seed, sym = sym, hidden = hidden, fresh = fresh, precise = precise or nil,
    where = hidden and fmt("the held-out shape, seed %d", seed) or fmt("shape %d %s, seed %d%s", si, task_mod.fmt_shape(sym), seed,
      precise and " (the precision trial: zero-mean inputs)" or ""),
    failed_at = { shape = si, seed = seed, sym = not hidden and sym or nil, heldout = hidden or nil },
    trial_seed = fresh and rng(1 << 40) or (opts.seed_base or 1000) + si * 101 + seed }
  tr.failed_at.fresh = fresh or nil -- a failure there is not reproduced by judging again
  tr.cand, tr.ref_in, tr.dims = self:trial_io(t, sym, tr.trial_seed, false, precise)
  -- inputs not drawn by a law (a problem's own get_inputs()) have no precision law: an
  -- ordinary trial then
  if precise and not has_float_law(self:input_plan(self.tasks[t.dir], sym, tr.cand)) then
    tr.precise = nil
    tr.where = fmt("shape %d %s, seed %d", si, task_mod.fmt_shape(sym), seed)
  end
  tr.failed_at.precise = tr.precise
  return tr
end

-- The trial's end: its buffers back to the pool -> status, text, extra (with failed_at)
local function trial_done(self, t, tr, status, text, extra)
  self.pool:put_all(tr.cand, true); self.pool:put_all(tr.ref_in, true)
  if tr.ref_io then for _, spec in ipairs(t.outputs) do self.pool:put(tr.ref_io[spec.name]) end end
  extra = extra or {}
  extra.failed_at = extra.failed_at or tr.failed_at
  return status, text, extra
end

-- The candidate's call on the trial's buffers -> its outputs | nil, status, text, extra
local function candidate_call(self, t, run, tr, budget)
  run.state.poison = true
  local ok, status, text = call_launch(self, run, tr.cand, tr.sym, budget)
  local outs = ok and status
  if ok then ok, status, text = sync_status() end
  if ok then return outs end
  if status == "crashed" then
    self.pool:drop(false)
    return nil, status, feedback.launch(status, text, tr.where), { failed_at = tr.failed_at, context_lost = true }
  end
  if status == "wrong_shape" then return nil, trial_done(self, t, tr, status, text .. " (at " .. tr.where .. ")") end
  return nil, trial_done(self, t, tr, status, feedback.launch(status, text, tr.where))
end

-- Another shape set's eager run as Judge:fast_at finds it; a failure there (the model's load)
-- leaves the task's own reference for that shape.
local function fast_at(self, st, si)
  local ok, run = pcall(self.fast_at, self, st, si)
  if ok then return run end
  st.fast_at[si] = false
  return false
end

-- The reference on the proven inputs (ref_src) -> nil (tr.ref_io set), whether it was
-- PyTorch eager | status, text, extra (the trial ended)
local function reference_run(self, st, tr, ref_src)
  local t = st.task
  -- torch's cached blocks keep this trial's reference results until verify ends (Judge:eval
  -- empties them then, whatever the outcome): the candidate's next trials have other
  -- seeds, whose results these are not, and no trial's seed comes again in this evaluation.
  -- A CUDA reference's results come from host memory after the first candidate
  local key = not tr.fresh and concat({ tr.si, tr.trial_seed, task_mod.fmt_shape(tr.sym), io_dtypes(t),
    tr.precise and "precise" or "" }, "|") or nil
  -- the fastest reference known right here; its results left in torch's cached blocks are
  -- for a seed of the private generator, which no later call gets (as the timed checks')
  -- (the timed shape's, or another shape's once eager was found right and faster there:
  -- Judge:try_fast_at, on that shape's first fresh trial)
  local fast = tr.fresh and (tr.si == 1 and st.fast_ref or tr.si > 1 and fast_at(self, st, tr.si)) or nil
  -- the precision trial: eager where it passed that trial itself at the task's set-up, as
  -- the timed checks choose (not where the CUDA reference was timed faster there)
  if tr.precise and tr.si == 1 and st.fast_precise then fast = self:check_reference(st, tr.sym) end
  local ref_io, status, text
  if fast then
    ref_io, status, text = self:run_reference(st, ref_src, tr.dims, tr.sym, fast, true)
  else
    local _, took
    ref_io, status, text, _, took = self:trial_reference(st, ref_src, tr.dims, tr.sym, key)
    if ref_io and tr.fresh and tr.si > 1 and st.fast_at[tr.si] == nil then
      -- a failure in trying eager (its load, its run) leaves the task's own reference
      if not pcall(self.try_fast_at, self, st, tr.si, ref_src, ref_io, tr.dims, tr.sym, took) then st.fast_at[tr.si] = false end
    end
  end
  tr.ref_io = ref_io
  if ref_io then return nil, fast ~= nil end
  if status == "inputs_modified" then return trial_done(self, t, tr, status, text) end
  local why = "the task's reference failed at " .. tr.where .. ": " .. tostring(text)
  if status == "crashed" then self.pool:drop(false) return verdict.ERROR, why, { context_lost = true } end
  return trial_done(self, t, tr, verdict.ERROR, why)
end

-- The precision trial's compare of one output: elementwise, and where that fails the
-- norm-wise bound (M.PRECISION_L2); a reference that is not finite there judges nothing.
-- -> compare.allclose's table, with rel_l2 and precision ("elementwise", "norm",
-- "not_applicable") where it passed.
local function precision_result(_, got, want, o)
  local r = compare.allclose(got, want, o)
  if r.ok then r.precision = "elementwise" return r end
  local self_check = compare.allclose(want, want, { atol = 0, rtol = 0 })
  if self_check.nan > 0 or self_check.inf > 0 then
    r.ok, r.precision = true, "not_applicable"
    return r
  end
  if r.nan > 0 or r.inf > 0 or (r.unwritten or 0) > 0 or o.rtol <= 0 then return r end
  r.rel_l2 = compare.rel_l2(got:to_string(), want:to_string(), "f32")
  if r.rel_l2 <= M.PRECISION_L2 then r.ok, r.precision = true, "norm" end
  return r
end

-- The evaluation's first trial looks at the candidate's outputs alone before the reference
-- runs: an element still holding the poison verify filled the outputs with (never written)
-- fails the compare whatever the reference computes there (compare's poison count), so such a
-- kernel is failed without the reference's run, at a problem file's largest shapes most of
-- its failed trial. Its feedback is the compare's (how many elements were never written, the
-- first ones' coordinates) without the reference's values. A correct kernel pays one read of
-- its outputs an evaluation; later trials compare against the reference alone.
-- -> nil | status, text, the output's name
local function unwritten_first(t, outs, tr, v)
  for _, spec in ipairs(t.outputs) do
    local b = outs[spec.name]
    local r = compare.allclose(b, b, { atol = 0, rtol = 0, poison = true })
    if (r.unwritten or 0) > 0 then
      -- the lowest failing element and the examples: the poison is a NaN of floating outputs
      -- (a sentinel that equals itself of integer ones, which gives no example)
      local ex, seen = {}, {}
      for _, e in ipairs { r.first or false, table.unpack(r.examples or {}) } do
        if e and e.got ~= e.got and not seen[e.index] then
          seen[e.index] = true
          ex[#ex + 1] = { index = e.index, got = e.got, want = "not computed (no reference run: elements were never written)" }
        end
      end
      table.sort(ex, function(a, c) return a.index < c.index end)
      v.checks[#v.checks + 1] = { shape = tr.si, seed = tr.seed, fresh = tr.fresh or nil, output = spec.name, ok = false,
        mismatches = r.unwritten, n = r.n, unwritten = r.unwritten, first = ex[1], reference = "none" }
      local status, text = feedback.mismatch(spec.name, { n = r.n, unwritten = r.unwritten, examples = ex },
        t.tolerance[spec.dtype], tr.hidden and {} or tr.dims[spec.name] or {}, tr.where, tr.later)
      return status, text, spec.name
    end
  end
end

M.unwritten_first = unwritten_first

-- One trial -> nil | status, text, extra
local function run_trial(self, st, run, v, opts, tr)
  local t = st.task
  local outs, status, text, extra = candidate_call(self, t, run, tr, opts.budget or 1e6)
  if not outs then return status, text, extra end
  local moved, moved_text = self:truth_check(st, tr.where)
  if moved then return trial_done(self, t, tr, moved, moved_text) end
  local ref_src, failure, failure_text = self:proven_inputs(st, tr.sym, tr.cand, tr.ref_in, run.state.scratch, tr.where,
    tr.trial_seed, tr.precise)
  if not ref_src then return trial_done(self, t, tr, failure, failure_text) end
  if tr.first and os.getenv("KM_UNWRITTEN_FIRST") ~= "0" then
    local unwritten, unwritten_text, output = unwritten_first(t, setmetatable(outs, { __index = tr.cand }), tr, v)
    if unwritten then
      tr.failed_at.output = output
      return trial_done(self, t, tr, unwritten, unwritten_text)
    end
  end
  local ref_status, ref_text, ref_extra = reference_run(self, st, tr, ref_src)
  if ref_status then return ref_status, ref_text, ref_extra end
  local fast = ref_text
  local n0 = #v.checks
  local mismatch, mismatch_text, output = evidence.compare_outputs(t, setmetatable(outs, { __index = tr.cand }), tr.ref_io,
    tr.hidden and {} or tr.dims, { where = tr.where, later = tr.later,
      checks = v.checks, shape = tr.si, seed = tr.seed, fresh = tr.fresh, precise = tr.precise,
      result_of = tr.precise and precision_result or nil })
  if fast then for i = n0 + 1, #v.checks do v.checks[i].reference = "pytorch_eager" end end
  if mismatch == "mismatch" and not evidence.unwritten_since(v.checks, n0)
    and self:exact_agrees(st, setmetatable(outs, { __index = tr.cand }), ref_src, tr.dims) then
    for i = n0 + 1, #v.checks do v.checks[i].ok, v.checks[i].reference = true, "pytorch_float64" end
    mismatch = nil
  end
  if mismatch then
    tr.failed_at.output = output
    return trial_done(self, t, tr, mismatch, mismatch_text)
  end
  trial_done(self, t, tr)
end

-- Whether verify's plan is trimmed (the candidate is timed). KM_VERIFY_TRIM=0 in a worker's
-- environment: the untrimmed plan (side-by-side runs).
local function trimmed(opts)
  return opts.timing ~= false and opts.verify_trim ~= false and os.getenv("KM_VERIFY_TRIM") ~= "0"
end

-- How many calls of the candidate verify makes for task t under opts (its trials, the
-- precision trial among them): launch code that counts its calls (the GPU tests' attacks)
-- knows from this which call is the timing's first.
function M.trial_count(t, opts)
  opts = opts or {}
  return #trial_order(#t.shapes, opts.seeds or 3, wants_precision(t, opts), trimmed(opts))
end

-- Every trial in order -> nil (all correct) | status, text, extra (the first failure)
function Judge:verify(st, run, v, opts)
  local t = st.task
  local nseeds = opts.seeds or 3
  local seen, others = {}, 0 -- shapes with a trial passed, and how many
  for i, trial in ipairs(trial_order(#t.shapes, nseeds, wants_precision(t, opts), trimmed(opts))) do
    local tr = new_trial(self, t, trial[1], trial[2], nseeds, opts, trial[3])
    tr.first = i == 1
    -- what passed before, for the hint of a mismatch: other shapes, else seeds at this one
    tr.later = others - (seen[tr.si] and 1 or 0) > 0 and "shape" or seen[tr.si] and "seed" or nil
    local status, text, extra = run_trial(self, st, run, v, opts, tr)
    if status then return status, text, extra end
    if not seen[tr.si] then seen[tr.si], others = true, others + 1 end
  end
end

return M
