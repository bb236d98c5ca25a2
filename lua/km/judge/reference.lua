-- km.judge.reference — a task's state in this judge, and its reference runs.
--
-- Owns: the task state `st` (M.task_state below names every field), made once per task
-- and kept in self.tasks; and the judge's host copies of CUDA reference results
-- (self.ref_kept: bytes held, their cap, the task states holding them, least recently used
-- first).
local compare = require "km.compare"
local cuda = require "km.cuda"
local task_mod = require "km.task"
local timing = require "km.timing"
local launch = require "km.judge.launch"
local verdict = require "km.verdict"

local fmt = string.format
local pairs, ipairs, type, tostring, pcall = pairs, ipairs, type, tostring, pcall
local copy, call_launch, sync_status, fresh_state = launch.copy, launch.call_launch, launch.sync_status, launch.fresh_state
local wall = timing.wall

local M = {}
local Judge = {}
M.methods = Judge

-- A task's state in this judge, every field it can have (nil until its part sets it).
function M.task_state(t)
  return {
    task = t,            -- the loaded task (km.task)
    times = {},          -- shape key -> the reference's timing summary (km.judge.measure)
    base_times = {},     -- shape key -> the starter's timing summary, or false (none)
    ref = nil,           -- the reference's prepared launch (km.judge.launch), or { torch = model }
    param_ref = nil,     -- ref computing with its io's parameters (a timed call's check: Judge:param_reference)
    prob = nil,          -- a problem file's PyTorch model, the reference itself (km.task.kernelbench)
    truth = nil,         -- the model's state sealed: { ranges, names, digests } (km.judge.integrity)
    truth_dirty = nil,   -- trusted code ran on the model since its seal: seal again before candidate code
    plans = nil,         -- shape key -> input plan, or false (km.judge.inputs)
    checked = nil,       -- the reference's outputs were found not degenerate (Judge:set_up_task)
    setup = nil,         -- the task's set-up record: { key, dir, rec } (Judge:setup_record)
    ref_outs = nil,      -- verify trial key -> { output name -> bytes }: kept reference results
    ref_bytes = nil,     -- the bytes of ref_outs (counted in self.ref_kept)
    fast_ref = nil,      -- nil: not tried; false: none; else the PyTorch run timed checks use (km.judge.fast)
    fast_at = {},        -- shape index (2, 3, ...) -> the PyTorch run its fresh trials use, or false (km.judge.fast)
    fast_precise = nil,  -- true: fast_ref judges verify's precision trial too (km.judge.fast)
    wants_torch = nil,   -- the task's PyTorch model is in use here (baselines): a fast reference may load it
    torch_model = nil,   -- the task's reference.py loaded (a second model), or false (it does not load; km.judge.fast)
    torch_why = nil,     -- why torch_model is false
    baselines = nil,     -- shape key -> { eager, compile, errors } (km.judge.baselines)
  }
end

-- The PyTorch model of a problem file, loaded and readied for restore under the pool's hold.
-- -> the reference run | nil, why
local function load_problem(self, st, t)
  -- PyTorch eager is the reference and the baseline (KernelBench's): loaded in this
  -- worker, on its context and stream, exchanging buffers without copies (km.task.kernelbench)
  -- the first load imports torch (seconds): one-time set-up, not the candidate's time
  if self.on_hold then self.on_hold("torch") end
  local kb = require "km.task.kernelbench"
  local prob, err = launch.with_room(self, function()
    return kb.load(t.reference.pytorch, { precision = t.reference.precision, device = "cuda", spec = t.reference.spec })
  end)
  if not prob then
    if self.on_hold then self.on_hold(nil) end
    return nil, "the task's PyTorch reference does not load: " .. tostring(err)
  end
  st.prob = prob
  -- restore readied before any candidate code runs (it builds the held-out model: set-up,
  -- still under the hold); a restore builds the model again from its code and seed
  local snap, serr = launch.with_room(self, function() return prob:snapshot() end)
  if self.on_hold then self.on_hold(nil) end
  if not snap then return nil, "the task's PyTorch reference cannot be snapshotted: " .. tostring(serr) end
  st.truth_dirty = true
  return { torch = prob, task_dir = t.dir, state = fresh_state(), attrs = {} }
end

function Judge:task_state(t)
  if type(t) == "string" then
    local st = self.tasks[t]
    if st then return st end
    local loaded, err = task_mod.load(t)
    if not loaded then return nil, err end
    t = loaded
  end
  local st = self.tasks[t.dir]
  if st then return st end
  st = M.task_state(t)
  local ref, err
  if t.reference.pytorch then
    ref, err = load_problem(self, st, t)
    if not ref then return nil, err end
  else
    local status, msg
    ref, status, msg = launch.prepare(self, t.reference.source_text, t.reference.launch_text, {}, "reference")
    if not ref then return nil, "the task's reference does not build (" .. status .. "): " .. msg end
  end
  ref.task_outputs = t.outputs
  st.ref = ref
  self.tasks[t.dir] = st
  return st
end

-- The reference of a timed call's check: a problem file's model computing with the
-- parameters in the buffers it is given (the call's perturbed ones, km.judge.inputs), not its
-- own; a CUDA reference as it is (nil: st.ref). Made once per task state.
function Judge:param_reference(st)
  if not st.prob then return nil end
  if not st.param_ref then
    local r = st.ref
    st.param_ref = { torch = r.torch, task_dir = r.task_dir, state = r.state, attrs = r.attrs,
      task_outputs = r.task_outputs, params = true }
  end
  return st.param_ref
end

-- Runs the reference on ref_in's buffers plus fresh poisoned outputs (which the caller
-- returns to the pool). keep_cache: call_launch's. -> ref_io (ref_in's names and the
-- outputs) or nil, status, message
-- no_wait: enqueued only (a batch of checks, which waits once for all of it).
function Judge:run_reference(st, ref_in, dims, sym, which, keep_cache, no_wait)
  local t = st.task
  local io = copy(ref_in)
  for _, spec in ipairs(t.outputs) do io[spec.name] = self.pool:get(spec.dtype, dims[spec.name]):poison() end
  local ok, status, msg = call_launch(self, which or st.ref, io, sym, 1e8, keep_cache)
  if ok and not no_wait then ok, status, msg = sync_status() end -- the reference's returned outputs are not used
  if not ok then
    if status ~= "crashed" then for _, spec in ipairs(t.outputs) do self.pool:put(io[spec.name]) end end
    return nil, status, msg
  end
  return io
end

-- Verify's fixed trials draw the same inputs for every candidate of a task (their seeds are
-- the evaluation's seed_base, the shape and the trial: the same for each), so a CUDA
-- reference's outputs for such a trial (key: not nil) are the same for each candidate too.
-- Where the reference takes longer than copying its outputs back and forth would (a naive
-- GEMM or convolution, not an elementwise kernel: at least 2 x bytes / HOST_COPY_BPS
-- seconds), they are kept after its first run in host memory (Lua strings: no kernel can
-- address them, and nothing of them is on the device while candidate code runs); a later
-- candidate's trial copies them into fresh buffers after it ran and its inputs were proven,
-- where the reference would have run. Only a task's own CUDA reference (a PyTorch model can
-- keep state), at most REFERENCE_CACHE_BYTES in all (opts.reference_cache_bytes; 0: none),
-- the least recently used task's dropped first. Timed calls' checks never use these: their
-- inputs come from the private generator.
M.REFERENCE_CACHE_BYTES = 1 << 30
M.HOST_COPY_BPS = 5e9
local function touch(order, st)
  for i, o in ipairs(order) do if o == st then table.remove(order, i) break end end
  order[#order + 1] = st
end

-- A kept result copied into fresh buffers -> io (inputs and outputs)
local function kept_io(self, st, ref_src, dims, hit)
  local io = copy(ref_src)
  for _, spec in ipairs(st.task.outputs) do
    io[spec.name] = self.pool:get(spec.dtype, dims[spec.name])
    io[spec.name]:from_string(hit[spec.name])
  end
  touch(self.ref_kept.order, st)
  return io
end

-- io's outputs kept in host memory under key, whole tasks' results dropped for room.
local function keep_result(kept, st, io, key, bytes)
  local outs = {}
  for _, spec in ipairs(st.task.outputs) do outs[spec.name] = io[spec.name]:to_string() end
  -- room: whole tasks' results go, least recently used first
  while kept.bytes + bytes > kept.cap and #kept.order > 0 do
    local old = table.remove(kept.order, 1)
    kept.bytes = kept.bytes - (old.ref_bytes or 0)
    old.ref_outs, old.ref_bytes = nil, nil
  end
  st.ref_outs = st.ref_outs or {}
  st.ref_outs[key] = outs
  st.ref_bytes = (st.ref_bytes or 0) + bytes
  kept.bytes = kept.bytes + bytes
  touch(kept.order, st)
end

-- -> io (inputs and outputs), kept (true: copied from host memory), the run's wall seconds
-- (to the GPU's finish; where it ran) | nil, status, msg
function Judge:trial_reference(st, ref_src, dims, sym, key)
  local kept = self.ref_kept
  local hit = key and not st.prob and st.ref_outs and st.ref_outs[key]
  if hit then return kept_io(self, st, ref_src, dims, hit), nil, nil, true end
  local w0 = wall()
  local io, status, msg = self:run_reference(st, ref_src, dims, sym, nil, st.prob ~= nil)
  local took = wall() - w0
  if not io then return nil, status, msg end
  if not key or st.prob or kept.cap <= 0 then return io, nil, nil, false, took end
  local bytes = 0
  for _, spec in ipairs(st.task.outputs) do bytes = bytes + io[spec.name]:nbytes() end
  if bytes > kept.cap or took * M.HOST_COPY_BPS < 2 * bytes then return io, nil, nil, false, took end
  keep_result(kept, st, io, key, bytes)
  return io, nil, nil, false, took
end

-- When eager's own error exceeds the tolerance (docs/eval.md). A problem file's reference
-- is PyTorch eager at the problem's precision, and where its outputs are large sums
-- (KernelBench level 2 problem 14: a GEMM, a division, a sum over 8192 products) eager's own
-- rounding error can exceed the tolerance on some elements, so a kernel that computes more
-- exactly than eager would be failed. A candidate that missed eager's outputs (a mismatch;
-- NaN, infinity and unwritten elements are never rescued) is judged again against the model
-- run in float64 on the very inputs and parameters the candidate had (ref_src: proven, in
-- verify and in timed calls alike), every output with the task's tolerance and poison check:
-- within it, the compare passes, and the evaluation counts it (ev.exact: the verdict's
-- exact_reference). Otherwise eager's verdict stands, as it does where the model does not
-- run in float64. Costs nothing where the candidate agrees with eager. -> true | false
function Judge:exact_agrees(st, outs, ref_src, dims)
  if not st.prob then return false end
  local t = st.task
  local io = copy(ref_src)
  for _, spec in ipairs(t.outputs) do io[spec.name] = self.pool:get(spec.dtype, dims[spec.name]):poison() end
  local ok = st.prob:forward_exact(io)
  if ok then ok = sync_status() end
  for _, spec in ipairs(t.outputs) do
    local tol = t.tolerance[spec.dtype]
    if ok then ok = compare.allclose(outs[spec.name], io[spec.name], { atol = tol.atol, rtol = tol.rtol, poison = true }).ok end
    self.pool:put(io[spec.name])
  end
  if ok and self.evaluation then self.evaluation.exact = (self.evaluation.exact or 0) + 1 end
  return ok == true
end

-- A timed call's second opinion (Judge:exact_agrees): the call's inputs drawn again from its
-- seed into ref_in (the candidate's may hold the next call's draw), parameters perturbed by
-- the same key.
function Judge:exact_agrees_timed(st, outs, sym, ref_in, dims, seed)
  if not st.prob then return false end
  self:fill_inputs(st.task, sym, ref_in, seed, true)
  return self:exact_agrees(st, outs, ref_in, dims)
end

-- Rejects a reference whose output cannot tell right from wrong. The buffer compared against
-- comes from `pool` (km.judge.pool: out of memory, idle buffers and torch's cached blocks are
-- handed back and the allocation tried again).
function M.degenerate(ref_out, spec, pool)
  local n = ref_out:numel()
  if n == 0 then return nil end
  local zero = pool:get(spec.dtype, ref_out:shape()):zero()
  local why
  if compare.allclose(ref_out, zero, { atol = 1e-6, rtol = 0 }).ok then why = "every element is within 1e-6 of zero" end
  if not why and n > 1 then
    local first = ref_out:to_table(1)[1]
    zero:fill(first)
    if compare.allclose(ref_out, zero, { atol = 0, rtol = 0 }).ok then why = "every element equals " .. tostring(first) end
  end
  pool:put(zero, true)
  return why
end

-- The task's reference once at its timed shape, on the inputs of `seed` (precise: drawn by
-- their laws' precision laws, as verify's precision trial draws them) (no candidate
-- involved); raises where a problem's inputs cannot be made.
-- -> ref_in, ref_io, dims (the caller hands them back: put_once) | nil, status, msg
local function reference_once(self, st, seed, precise)
  local t = st.task
  local sym = t.shapes[1]
  local ref_in, dims = {}, {}
  for _, list in ipairs { t.inputs, t.outputs } do
    for _, spec in ipairs(list) do dims[spec.name] = task_mod.shape_of(spec, sym) end
  end
  for _, spec in ipairs(t.inputs) do ref_in[spec.name] = self.pool:get(spec.dtype, dims[spec.name]) end
  if precise then self:fill_inputs(t, sym, ref_in, seed, false, true) else self:pristine(t, sym, ref_in, seed) end
  local ref_io, status, msg = self:run_reference(st, ref_in, dims, sym, nil, st.prob ~= nil)
  if not ref_io then
    if status ~= "crashed" then self.pool:put_all(ref_in, true) end
    return nil, status, msg
  end
  return ref_in, ref_io, dims
end
local function put_once(self, st, ref_in, ref_io)
  self.pool:put_all(ref_in, true)
  for _, o in ipairs(st.task.outputs) do self.pool:put(ref_io[o.name]) end
end

-- What a task's set-up found is kept on disk (km.jsoncache's "setup" records: KM_SETUP_DIR,
-- else $XDG_CACHE_HOME/kmrun/setup), per task content (task.lua, the reference's and
-- reference.py's texts), GPU, NVRTC and torch versions and seed, as the baselines' timings
-- are: `checked` (the reference's outputs are not degenerate), `eager` (eager agreed at the
-- timed shape: km.judge.fast) and `eager_at` (shape index -> eager found right and faster
-- there: Judge:try_fast_at). A worker that finds them runs none of that again: its set-up
-- loads the PyTorch model where eager is to be used and runs nothing. st.setup = { key, rec }.
M.SETUP_VERSION = 1
local SETUP_FIELDS = { "task", "source", "device", "nvrtc", "torch", "seed" }
function Judge:setup_record(st, seed)
  if st.setup then return st.setup.rec end
  local t, jc = st.task, require "km.jsoncache"
  local ref = t.reference
  local torch = (st.prob or st.wants_torch) and require("km.task.kernelbench").version() or ""
  local okk, key = pcall(jc.key, "setup", M.SETUP_VERSION, {
    task = t.dir and not ref.pytorch and task_mod.read_file(t.dir .. "/task.lua") or "",
    source = table.concat({ ref.source_text or "", ref.launch_text or "", ref.pytorch_text or "" }, "\0"),
    device = tostring(self.device and (self.device.uuid or self.device.name)), nvrtc = tostring(self.device and self.device.nvrtc),
    torch = tostring(torch or ""), seed = tostring(seed) }, SETUP_FIELDS)
  local dir = jc.dir("setup", "KM_SETUP_DIR")
  local rec = okk and dir and jc.get(dir, key) or nil
  st.setup = { key = okk and dir and key or nil, dir = dir, rec = type(rec) == "table" and rec or {} }
  return st.setup.rec
end
-- The record written again after a part of it changed (nothing where there is no folder).
function Judge:setup_keep(st)
  local s = st.setup
  if s and s.key then require("km.jsoncache").put(s.dir, s.key, s.rec) end
end

-- Eager tried on the precision trial's inputs (Judge:try_fast_precise): the CUDA reference
-- once more at the timed shape, on inputs of `seed` drawn by the precision laws; found
-- (st.fast_precise) and kept in the set-up record (eager_precise). Where the reference fails
-- there, eager is not tried: verify's precision trial meets that failure as it would have.
local function set_up_precise(self, st, seed)
  st.fast_precise = false
  if self:fast_precise_wanted(st) then
    local okr, ref_in, ref_io, dims = pcall(reference_once, self, st, seed, true)
    if okr and ref_in then
      self:try_fast_precise(st, ref_in, ref_io, dims, st.task.shapes[1])
      put_once(self, st, ref_in, ref_io)
    end
  end
  st.setup.rec.eager_precise = st.fast_precise
end

-- A task's set-up in an evaluation, before any of the candidate's code runs: the reference
-- at the timed shape on ordinary inputs of a fixed seed, its outputs found not degenerate
-- (once a task: st.checked) and, in a timed evaluation, PyTorch eager tried against them as
-- the timed checks' reference (Judge:try_fast_reference; asked again while torch is still
-- importing). Verify then runs no trial at the timed shape for either (km.judge.verify).
-- What the task's set-up record says (above) is not run again.
-- -> nil | status, text, extra (the task rejected, or its reference failed)
function Judge:set_up_task(st, opts)
  -- (while torch still imports, try_fast_reference would only return: no run for it)
  local fast = opts.timing ~= false and st.fast_ref == nil and self:fast_may(st)
  if st.checked and not fast then return end
  local seed = (opts.seed_base or 1000) + 99
  local rec = self:setup_record(st, seed)
  if rec.checked == true then st.checked = true end
  if fast and type(rec.eager) == "boolean" then
    self:fast_kept(st, rec.eager)
    st.fast_precise = st.fast_ref and rec.eager_precise == true or false
    fast = false
  end
  if st.checked and not fast then return end
  local t = st.task
  local okr, ref_in, ref_io, dims = pcall(reference_once, self, st, seed)
  if not okr or not ref_in then
    local why = okr and (tostring(ref_io) .. ": " .. tostring(dims)) or tostring(ref_in)
    if okr and ref_io == "crashed" then self.pool:drop(false) return verdict.ERROR, "the task's reference crashed: " .. why, { context_lost = true } end
    return verdict.ERROR, "the task's reference failed at its timed shape: " .. why
  end
  if not st.checked then
    for _, spec in ipairs(t.outputs) do
      local why = M.degenerate(ref_io[spec.name], spec, self.pool)
      if why then
        put_once(self, st, ref_in, ref_io)
        return verdict.ERROR, fmt("task rejected: the reference output '%s' is degenerate at the timed shape %s (%s)", spec.name,
          t.heldout and t.heldout.shape == 1 and "(held out)" or task_mod.fmt_shape(t.shapes[1]), why)
      end
    end
    st.checked, rec.checked = true, true
  end
  if fast then
    self:try_fast_reference(st, ref_in, ref_io, dims, t.shapes[1])
    if st.fast_ref ~= nil then rec.eager = st.fast_ref and true or false end
  end
  put_once(self, st, ref_in, ref_io)
  if fast then set_up_precise(self, st, seed + 1) end
  self:setup_keep(st)
end

-- A task's reference run once on its first shape set (inputs from `seed`), its buffers
-- handed back and, for a PyTorch model, the model released: does the reference run here?
-- (kmrun tasks check, bench/kernelbench_refs.lua). -> nil | why it does not, and true when
-- the context was lost with it (nothing more can run in this process).
function Judge:try_reference(t, seed)
  local ok, why = pcall(function()
    local st, serr = self:task_state(t)
    if not st then return serr end
    local ref_in, ref_io, msg = reference_once(self, st, seed or 1)
    if not ref_in then return tostring(ref_io) .. ": " .. tostring(msg) end
    put_once(self, st, ref_in, ref_io)
  end)
  if not ok then why = tostring(why) end
  local st = self.tasks[t.dir]
  if st and st.prob then st.prob:release { empty_cache = true } end
  self.tasks[t.dir] = nil
  self.pool:drop(true)
  local alive, cmsg = cuda.synchronize()
  if not alive then return (why and why .. " " or "") .. "(context lost: " .. tostring(cmsg) .. ")", true end
  return why
end

return M
