-- km.judge.measure — the measure stage: the reference's, the candidate's and the starter's
-- timings, the speedups, occupancy, memory, energy and the roofline.
--
-- Owns: on a task state, st.times and st.base_times (shape key -> the reference's and the
-- starter's timing summary); on the judge, its peaks and launch floor (self._peaks,
-- self._floor: measured once per worker).
local timing = require "km.timing"
local task_mod = require "km.task"
local verdict = require "km.verdict"
local feedback = require "km.feedback"
local launch = require "km.judge.launch"
local timed = require "km.judge.timed"
local integrity = require "km.judge.integrity"

local concat = table.concat
local pairs, ipairs, tostring, pcall, next = pairs, ipairs, tostring, pcall, next
local copy, call_launch = launch.copy, launch.call_launch
local summary, protocol_of = timed.summary, timed.protocol_of
local wall = timing.wall

local M = {}
local Judge = {}
M.methods = Judge

-- Peaks and the launch floor are measured lazily, once per worker.
function Judge:peaks()
  if not self._peaks then self._peaks = assert(timing.peaks()) end
  return self._peaks
end

-- Energy per call (NVML): a separate warm pass of back-to-back calls on one input set, long
-- enough for NVML's coarse energy counter, so the number holds the kernel's energy and not
-- the judge's input refreshes and re-verification between timed calls. Not a speed claim.
function Judge:energy(st, run, sym, opts)
  local okn, nvml = pcall(require, "km.nvml")
  if not okn or not nvml.available() then return nil, "NVML is not available" end
  local t = st.task
  local cand, ref_in = self:trial_io(t, sym, (opts.seed_base or 1000) + 9999)
  local res, err, code = timing.time(function()
    local ok, status, text = call_launch(self, run, cand, sym, opts.budget or 1e6)
    if not ok then return nil, tostring(text), status end
  end, { mode = "warm", energy = true, max_ms = opts.energy_ms or 600 })
  self.pool:put_all(cand, true); self.pool:put_all(ref_in, true)
  if code == integrity.GATE_TAMPERED then self:gate_fault("during the energy pass") end
  if not res then return nil, err end
  return res.energy_j, res.energy_unavailable
end

-- A verdict's speedups from the timing summaries: `speedup` over PyTorch eager wherever the
-- task has a PyTorch model (KernelBench's definition), else over the task's CUDA reference,
-- and `speedup_over` says which; over torch.compile and over the CUDA reference stand beside
-- it, and speedup_baseline is over the starter. t = { cuda_reference = summary?, baselines =
-- Judge:baselines()?, starter = summary? }.
function M.speedups(v, cand_t, t)
  local c = cand_t.median
  local bl = t.baselines
  local eager, compiled = bl and bl.eager, bl and bl.compile
  -- a number is divided only by one timed by the same protocol
  local want = protocol_of(cand_t)
  local function same(x)
    local p = protocol_of(x)
    if x and want and p and p ~= want then
      v.protocol_mismatch = v.protocol_mismatch or {}
      v.protocol_mismatch[#v.protocol_mismatch + 1] = p
      return nil
    end
    return x
  end
  eager, compiled = same(eager), same(compiled)
  t = { cuda_reference = same(t.cuda_reference), baselines = bl, starter = same(t.starter) }
  if t.cuda_reference then v.speedup_cuda_reference = t.cuda_reference.median / c end
  if eager then v.speedup_eager = eager.median / c end
  if compiled then v.speedup_compile, v.compile_mode = compiled.median / c, compiled.mode end
  v.speedup = v.speedup_eager or v.speedup_cuda_reference
  v.speedup_over = eager and "pytorch_eager" or (t.cuda_reference and "cuda_reference" or nil)
  if bl then
    v.baselines = { eager = eager, compile = compiled, errors = next(bl.errors) and bl.errors or nil }
    v.timing = v.timing or {}
    v.timing.eager, v.timing.compile = summary(eager), summary(compiled)
  end
  if t.starter then v.speedup_baseline = t.starter.median / c end
  return v
end

-- The reference's timing at the timed shape (tk its key) -> summary | nil, status, text
local function reference_time(self, st, sym, tk, bl, opts)
  local t = st.task
  local ref_t = st.times[tk]
  if ref_t then return ref_t end
  if st.prob then -- a PyTorch reference: its time is the eager baseline
    ref_t = bl and bl.eager
    if not ref_t then return nil, verdict.ERROR, "timing the reference failed: " .. tostring(bl and bl.errors.eager) end
  else
    local status, text
    ref_t, status, text = self:cached_timing(st, sym, opts, "cuda_reference",
      t.reference.source_text .. "\0" .. t.reference.launch_text, function() return self:time_run(st, st.ref, sym, opts, false) end)
    if not ref_t then return nil, verdict.ERROR, "timing the reference failed (" .. tostring(status) .. "): " .. tostring(text) end
  end
  st.times[tk] = ref_t
  return ref_t
end

-- The starter's timing at the timed shape (kept per task: false when it has none)
local function starter_time(self, st, sym, tk, opts)
  local t = st.task
  local base_t = st.base_times[tk]
  if base_t ~= nil or opts.baseline == false or not t.starter then return base_t end
  local scand = task_mod.starter(t)
  local ptext = {}
  for k, x in pairs(scand.params or {}) do ptext[#ptext + 1] = tostring(k) .. "=" .. tostring(x) end
  table.sort(ptext)
  base_t = self:cached_timing(st, sym, opts, "starter", scand.source .. "\0" .. scand.launch .. "\0" .. concat(ptext, ","),
    function()
      local srun = launch.prepare(self, scand.source, scand.launch, scand.params, "starter")
      if not srun then return nil end
      srun.task_outputs, srun.st = t.outputs, st
      local r = self:time_run(st, srun, sym, opts, false)
      launch.free_scratch(srun)
      return r
    end)
  st.base_times[tk] = base_t or false
  return base_t
end

-- How each kernel was launched and the occupancy that gives; the device memory the
-- candidate used on the timed shape (its buffers plus its scratch).
local function occupancy_and_memory(v, run, t, sym)
  for name, l in pairs(run.state.launches) do
    local a = v.kernels[name]
    local f = a and run.mod:get(name)
    if f and math.type(l.block) == "integer" then
      local okb, blocks, frac = pcall(f.occupancy, f, l.block, l.shared)
      if okb then a.block, a.shared_dynamic, a.blocks_per_sm, a.occupancy = l.block, l.shared, blocks, frac end
    end
  end
  local io_bytes = 0
  for _, list in ipairs { t.inputs, t.outputs } do
    for _, spec in ipairs(list) do
      io_bytes = io_bytes + task_mod.numel(task_mod.shape_of(spec, sym)) * task_mod.DTYPE_BYTES[spec.dtype]
    end
  end
  v.scratch_bytes = run.state.scratch_bytes
  v.memory = { io_bytes = io_bytes, scratch_bytes = run.state.scratch_peak, peak_bytes = io_bytes + run.state.scratch_peak }
end

-- Energy costs a pass of a few hundred ms (NVML's counter steps every ~100 ms): asked for by
-- `kmrun eval` (default) and `--energy` in runs and sweeps.
local function energy_of(self, v, st, run, sym, opts)
  if opts.energy then
    local e0 = wall()
    local j, why = self:energy(st, run, sym, opts)
    v.energy_seconds = wall() - e0
    v.timing.candidate.energy_j, v.timing.candidate.energy_unavailable = j, not j and why or nil
  else
    v.timing.candidate.energy_j = nil
    v.timing.candidate.energy_unavailable = "not measured (opts.energy; --energy)"
  end
end

-- The roofline from the judge's own shape table, never one launch code could touch ->
-- nil | "too_fast", feedback
local function roofline(self, v, t, sym, cand_t)
  local pk = self:peaks()
  local bytes, flops = task_mod.eval_expr(t.bytes, sym), task_mod.eval_expr(t.flops, sym)
  local mem_ms = bytes / (pk.bandwidth_gbs * 1e9) * 1e3
  local cmp_ms = flops / (pk.fp32_tflops * 1e12) * 1e3
  -- tensor cores can beat the FP32 rate many times over: only the memory bound and a
  -- generous compute bound (16x FP32) may flag a kernel as impossibly fast
  local bound_ms = math.max(mem_ms, cmp_ms / 16)
  v.roofline = { bound_ms = math.max(mem_ms, cmp_ms), memory_ms = mem_ms, compute_ms = cmp_ms,
    fraction = math.max(mem_ms, cmp_ms) / cand_t.median, bandwidth_gbs = pk.bandwidth_gbs, fp32_tflops = pk.fp32_tflops }
  if cand_t.median < 0.7 * bound_ms then return "too_fast", feedback.too_fast(cand_t.median, bytes, mem_ms, pk.bandwidth_gbs) end
end

-- -> nil (timed) | status, text, extra
function Judge:measure(st, run, v, opts)
  local t = st.task
  local sym = copy(t.shapes[1])
  local tk = task_mod.fmt_shape(sym)
  local bl = self:baselines(st, sym, opts)
  local ref_t, ref_status, ref_text = reference_time(self, st, sym, tk, bl, opts)
  if not ref_t then return ref_status, ref_text end
  local cand_t, status, text = self:time_run(st, run, sym, opts, true)
  if not cand_t then return status, text, { context_lost = status == "crashed" or nil } end
  v.kernel_seconds = (cand_t.mean or cand_t.median) * cand_t.n / 1e3 -- the candidate's own timed GPU time
  local base_t = starter_time(self, st, sym, tk, opts)
  occupancy_and_memory(v, run, t, sym)
  self._floor = self._floor or timing.floor()
  v.timing = { candidate = summary(cand_t), reference = summary(ref_t), baseline = summary(base_t or nil), shape = sym,
    floor_ms = self._floor and self._floor.median }
  energy_of(self, v, st, run, sym, opts)
  M.speedups(v, cand_t, { cuda_reference = not st.prob and ref_t or nil, baselines = bl, starter = base_t })
  return roofline(self, v, t, sym, cand_t)
end

return M
