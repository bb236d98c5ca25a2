-- km.judge — evaluate one candidate against a task, in this process, on this GPU.
--
-- This is what a GPU worker (km.worker) runs; strategies go through km.eval, which keeps
-- the judge in a child process so a faulting kernel takes down only the worker.
--
--   local judge = require("km.judge").new()
--   local verdict = judge:eval(task_or_dir, { source, launch, params, name }, opts)
--
-- opts: seeds (3), timing (true), baseline (true), budget (instructions per launch call,
-- 1e6), scratch_bytes (8 GiB), mode ("cold"), max_ms (timing cap per side, 2000).
local nvrtc = require "km.nvrtc"
local cuda = require "km.cuda"
local buffer = require "km.buffer"
local compare = require "km.compare"
local timing = require "km.timing"
local task_mod = require "km.task"
local sandbox = require "km.sandbox"

local fmt, concat, insert = string.format, table.concat, table.insert
local pairs, ipairs, type, tostring, pcall, error = pairs, ipairs, type, tostring, pcall, error

local M = {}
local Judge = {}

local wall = timing.wall
Judge.__index = Judge

M.STATUSES = { "compile_error", "load_error", "launch_error", "timeout", "crashed", "wrong_shape",
  "mismatch", "nan_inf", "inputs_modified", "out_of_bounds", "too_fast", "correct" }

-- CUDA errors after which the context is unusable: the worker must be replaced.
local STICKY = {
  CUDA_ERROR_ILLEGAL_ADDRESS = true, CUDA_ERROR_MISALIGNED_ADDRESS = true,
  CUDA_ERROR_LAUNCH_FAILED = true, CUDA_ERROR_ILLEGAL_INSTRUCTION = true,
  CUDA_ERROR_HARDWARE_STACK_ERROR = true, CUDA_ERROR_INVALID_PC = true,
  CUDA_ERROR_INVALID_ADDRESS_SPACE = true, CUDA_ERROR_ASSERT = true,
  CUDA_ERROR_LAUNCH_TIMEOUT = true, CUDA_ERROR_ECC_UNCORRECTABLE = true,
  CUDA_ERROR_UNKNOWN = true, CUDA_ERROR_CONTEXT_IS_DESTROYED = true,
}

local function sticky_code(msg)
  local code = tostring(msg):match("(CUDA_ERROR_[A-Z_]+)")
  return code and STICKY[code] and code or nil
end

function M.new(opts)
  opts = opts or {}
  local ok, why = cuda.available()
  if not ok then return nil, why, "NO_GPU" end
  local self = setmetatable({}, Judge)
  self.device = cuda.device()
  self.device.nvrtc = nvrtc.version()
  self.tasks = {}      -- dir -> { task, ref = compiled, times = {}, checked = bool }
  self.opts = opts
  return self
end

-- Peaks and the launch floor are measured lazily, once per worker.
function Judge:peaks()
  if not self._peaks then self._peaks = assert(timing.peaks()) end
  return self._peaks
end

----------------------------------------------------------------------------------------
-- compile and feedback helpers

-- "kernel.cu(12): error: ..." -> the log plus the offending source lines, numbered.
local function compile_feedback(log, source, name)
  local lines, shown, out = {}, {}, { "The kernel does not compile. NVRTC says:", log }
  for l in (source .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  for n in log:gmatch("%((%d+)%): error") do
    n = tonumber(n)
    for m = math.max(1, n - 1), n do -- the line before often holds the real culprit
      if not shown[m] and lines[m] then
        shown[m] = true
        out[#out + 1] = fmt("%s line %d: %s", name, m, lines[m])
      end
    end
  end
  return concat(out, "\n")
end

local function coords(index, dims)
  local c = {}
  for i = #dims, 1, -1 do
    c[i] = index % dims[i]
    index = index // dims[i]
  end
  return "[" .. concat(c, ", ") .. "]"
end

local function fmt_shape(sym) return task_mod.fmt_shape(sym) end

----------------------------------------------------------------------------------------
-- launch environment

-- Builds the `k` table a launch function sees. scratch: a pool reused across runs of the
-- same launch (so timing excludes allocation), poisoned on verification runs.
local function make_k(self, mod, params, state)
  local dev = self.device
  local k = {
    params = params,
    device = { sm_count = dev.sm_count, arch = dev.arch, l2_size = dev.l2_size, warp_size = dev.warp_size,
      max_threads_per_block = dev.max_threads_per_block, max_shared_per_block = dev.max_shared_per_block,
      max_shared_per_block_optin = dev.max_shared_per_block_optin, max_threads_per_sm = dev.max_threads_per_sm,
      regs_per_sm = dev.regs_per_sm, max_shared_per_sm = dev.max_shared_per_sm },
  }
  k.cdiv = function(a, b) return (a + b - 1) // b end
  k.scratch = function(dtype, shape)
    state.scratch_i = state.scratch_i + 1
    local i = state.scratch_i
    local b = state.scratch[i]
    local n = type(shape) == "number" and shape or task_mod.numel(shape)
    if not b or b:dtype() ~= dtype or b:numel() ~= n then
      if b then state.scratch_bytes = state.scratch_bytes - b:nbytes(); b:free() end
      local okb, nb = pcall(buffer.new, dtype, shape)
      if not okb then error("k.scratch(" .. tostring(dtype) .. "): " .. tostring(nb), 2) end
      state.scratch_bytes = state.scratch_bytes + nb:nbytes()
      if state.scratch_bytes > state.scratch_limit then
        nb:free()
        error(fmt("k.scratch: over the scratch budget of %d bytes", state.scratch_limit), 2)
      end
      state.scratch[i] = nb
      b = nb
    end
    if state.poison then b:poison() end
    return b
  end
  local fns = {}
  k.set_shared = function(name, bytes)
    local fn = fns[name] or mod:get(name)
    if not fn then error("k.set_shared: no kernel named '" .. tostring(name) .. "'", 2) end
    fns[name] = fn
    local okf, err = fn:set_max_dynamic_shared(bytes)
    if not okf then error(err, 2) end
  end
  return setmetatable(k, { __index = function(_, name)
    local fn = fns[name]
    if not fn then
      local f, err = mod:get(name)
      if not f then error(err, 2) end
      fn = f
      fns[name] = f
    end
    return function(cfg)
      if type(cfg) ~= "table" then error("k." .. name .. "{ grid = ..., block = ... }: expected a table", 2) end
      if cfg.stream ~= nil then
        error("k." .. name .. ": launch code may not choose a stream; all work runs on the stream the evaluator times", 2)
      end
      return function(...)
        local okl, msg = fn:launch(cfg, ...)
        if not okl then error(msg, 2) end
        -- the first launch of each kernel: its configuration, for occupancy in the verdict
        if not state.launches[name] then
          local b = cfg.block
          local threads = type(b) == "table" and (b[1] or 1) * (b[2] or 1) * (b[3] or 1) or b
          state.launches[name] = { block = threads, shared = cfg.shared or 0, grid = cfg.grid }
        end
      end
    end
  end })
end

-- The NVRTC options a source is judged with. km.eval compiles queued candidates in the
-- driver with these same options to warm the shared cache, so this is the one place
-- that says them: the two cannot drift apart (a drift would only cost cache misses).
function M.compile_opts(arch, params, label)
  return { arch = arch, defines = params, name = (label or "kernel") .. ".cu" }
end

-- A compiled launch: kernels module + launch function + its scratch state.
local function prepare(self, source, launch_src, params, label)
  local prog, log, code = nvrtc.compile(source, M.compile_opts(self.device.arch, params, label))
  if not prog then
    return nil, "compile_error", compile_feedback(log or "", source, label .. ".cu"), { log = log, code = code }
  end
  local mod, err = cuda.load(prog)
  if not mod then return nil, "load_error", "The compiled kernel could not be loaded: " .. tostring(err), { log = prog.log } end
  local fn, lerr = sandbox.load(launch_src, label .. " launch.lua")
  if not fn then
    return nil, "compile_error", "launch.lua does not load: " .. tostring(lerr), { log = prog.log }
  end
  local state = { scratch = {}, scratch_i = 0, scratch_bytes = 0, scratch_limit = self.opts.scratch_bytes or (8 << 30), poison = true,
    launches = {} }
  -- k.params: the defaults the source declares (#ifndef X / #define X v), then the values
  -- the candidate was compiled with
  local p = task_mod.default_params(source)
  for kk, v in pairs(params or {}) do p[kk] = v end
  local run = { prog = prog, mod = mod, fn = fn, state = state, label = label }
  run.k = make_k(self, mod, p, state)
  local attrs = {}
  for name in pairs(prog.kernels or {}) do
    local f = mod:get(name)
    if f then
      local a = f:attributes()
      attrs[name] = { registers = a.registers, shared_static = a.shared_static, local_bytes = a.local_bytes, max_threads = a.max_threads }
    end
  end
  run.attrs = attrs
  return run
end

-- The buffer methods launch code may call: a buffer's facts and GPU-side operations, but
-- nothing that touches files (save); built once from the real method table.
local sandbox_methods
local function sandbox_buffer_methods(methods)
  if not sandbox_methods then
    sandbox_methods = {}
    for k, v in pairs(methods) do if k ~= "save" then sandbox_methods[k] = v end end
  end
  return sandbox_methods
end

-- Runs a prepared launch once. Returns true, or false, status, message.
local function call_launch(self, run, io, sym, budget)
  run.state.scratch_i = 0
  -- the launch gets its own copy of the io table: reassigning io.y cannot touch ours
  local io_copy = {}
  for k, v in pairs(io) do io_copy[k] = v end
  -- while launch code runs, buffers lose the methods that reach the file system
  local bmt = debug.getregistry()["km.Buffer"]
  local methods = bmt.__index
  bmt.__index = sandbox_buffer_methods(methods)
  local ok, err = sandbox.call(run.fn, { budget = budget or 1e6 }, run.k, io_copy, sym)
  bmt.__index = methods
  if not ok then
    local sc = sticky_code(err)
    if sc then return false, "crashed", err end
    return false, "launch_error", err
  end
  return true, nil, nil, err -- err: what the launch function returned, if anything
end

-- A launch may return { output = buffer } to hand back outputs it allocated itself (with
-- k.scratch). Returns the buffers to judge, or nil and the wrong_shape message.
local function returned_outputs(t, ret, cand_io, dims)
  if type(ret) ~= "table" then return cand_io end
  local outs = setmetatable({}, { __index = cand_io })
  for _, spec in ipairs(t.outputs) do
    local b = ret[spec.name]
    if b ~= nil then
      local okb, numel = pcall(function() return b:numel() end)
      if not okb then return nil, fmt("launch.lua returned %s for the output '%s', not a buffer", type(b), spec.name) end
      local want = task_mod.numel(dims[spec.name])
      if b:dtype() ~= spec.dtype or numel ~= want then
        return nil, fmt("launch.lua returned the output '%s' as %s[%s] (%d elements); the task's '%s' is %s[%s] (%d elements).",
          spec.name, b:dtype(), concat(b:shape(), ", "), numel, spec.name, spec.dtype, concat(dims[spec.name], ", "), want)
      end
      outs[spec.name] = b
    end
  end
  return outs
end

local function sync_status()
  local ok, msg, code = cuda.synchronize()
  if ok then return true end
  return false, STICKY[code] and "crashed" or "launch_error", msg
end


----------------------------------------------------------------------------------------
-- tasks

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
  st = { task = t, times = {}, base_times = {} }
  local ref, status, msg = prepare(self, t.reference.source_text, t.reference.launch_text, {}, "reference")
  if not ref then return nil, "the task's reference does not build (" .. status .. "): " .. msg end
  st.ref = ref
  self.tasks[t.dir] = st
  return st
end

-- Device buffers are reused across trials and candidates (allocation and free of a GiB
-- cost milliseconds each); a returned buffer gets fresh guard zones. The pool is dropped
-- whole when it holds more than POOL_LIMIT bytes.
local POOL_LIMIT = 24 << 30
local pool, pool_bytes = {}, 0

local function pool_key(dtype, dims) return dtype .. ":" .. concat(dims, "x") end

local function get_buffer(dtype, dims)
  local list = pool[pool_key(dtype, dims)]
  local b = list and list[#list]
  if b then
    list[#list] = nil
    pool_bytes = pool_bytes - b:nbytes()
    return b
  end
  return buffer.new(dtype, dims)
end

local function put_buffer(b)
  if b:freed() then return end
  if pool_bytes + b:nbytes() > POOL_LIMIT then
    for _, list in pairs(pool) do for _, x in ipairs(list) do x:free() end end
    pool, pool_bytes = {}, 0
  end
  b:reset_guards()
  local key = pool_key(b:dtype(), b:shape())
  pool[key] = pool[key] or {}
  insert(pool[key], b)
  pool_bytes = pool_bytes + b:nbytes()
end

-- Returns a trial's buffers to the pool, each once (launch code may have aliased entries
-- of its io table; it gets a copy, but scratch can also appear twice).
local function free_all(list)
  local seen = {}
  for _, b in pairs(list) do
    if type(b) == "userdata" and not seen[b] then
      seen[b] = true
      put_buffer(b)
    end
  end
end

-- After a fault the context is gone: nothing can be recycled, and the pool goes too.
local function drop_all()
  pool, pool_bytes = {}, 0
end

local function init_buffer(spec, dims, sym, seed)
  local b = get_buffer(spec.dtype, dims)
  local init = spec.init
  local kind = init[1]
  local a, c = task_mod.eval_expr(init[2], sym), task_mod.eval_expr(init[3], sym)
  if kind == "uniform" then b:random { dist = "uniform", lo = a, hi = c, seed = seed }
  elseif kind == "normal" then b:random { dist = "normal", mean = a, std = c, seed = seed }
  else b:random { dist = "int", lo = a, hi = c, seed = seed } end
  return b
end

-- Fresh inputs for one trial: a copy for the reference and one for the candidate.
local function make_io(t, sym, seed)
  local ref_io, cand_io, dims = {}, {}, {}
  for i, spec in ipairs(t.inputs) do
    local d = task_mod.shape_of(spec, sym)
    dims[spec.name] = d
    local b = init_buffer(spec, d, sym, seed * 7919 + i)
    ref_io[spec.name] = b
    cand_io[spec.name] = get_buffer(spec.dtype, d):copy(b)
  end
  for _, spec in ipairs(t.outputs) do
    local d = task_mod.shape_of(spec, sym)
    dims[spec.name] = d
    ref_io[spec.name] = get_buffer(spec.dtype, d):poison()
    cand_io[spec.name] = get_buffer(spec.dtype, d):poison()
  end
  return ref_io, cand_io, dims
end

local function copy_sym(sym)
  local s = {}
  for k, v in pairs(sym) do s[k] = v end
  return s
end

-- Rejects a reference whose output cannot tell right from wrong.
local function degenerate(ref_out, spec)
  local n = ref_out:numel()
  if n == 0 then return nil end
  local zero = buffer.new(spec.dtype, n):zero()
  local near_zero = compare.allclose(ref_out, zero, { atol = 1e-6, rtol = 0 }).ok
  local why
  if near_zero then why = "every element is within 1e-6 of zero" end
  if not why and n > 1 then
    local first = ref_out:to_table(1)[1]
    zero:fill(first)
    if compare.allclose(ref_out, zero, { atol = 0, rtol = 0 }).ok then why = "every element equals " .. tostring(first) end
  end
  zero:free()
  return why
end

----------------------------------------------------------------------------------------
-- the evaluation

local function verdict_base(self, t, cand)
  return {
    task = t.name, candidate = cand.name, params = cand.params,
    device = { name = self.device.name, arch = self.device.arch, uuid = self.device.uuid,
      driver = self.device.driver_version, nvrtc = self.device.nvrtc },
    checks = {},
  }
end

local FEEDBACK = {
  launch_error = "The launch failed: %s\nCheck the grid and block sizes against the device limits (at most 1024 threads per block), the shared memory you ask for (raise a kernel's limit with k.set_shared(name, bytes) above 48 KiB), and that the arguments match the kernel's parameters in number and type.",
  crashed = "The kernel crashed the GPU context: %s\nLook for out-of-range indices (check every index against its bound, including the last partial block), misaligned vector loads (float4 needs a 16-byte-aligned address), and uninitialised pointers.",
}

-- Judges one candidate. Never raises for a candidate's faults; returns the verdict.
function Judge:eval(t, cand, opts)
  opts = opts or {}
  local t0, w0 = os.clock(), wall()
  local st, terr = self:task_state(t)
  if not st then return { status = "error", feedback = terr, task = type(t) == "table" and t.name or t } end
  t = st.task
  local v = verdict_base(self, t, cand)
  local function finish(status, feedback, extra)
    v.status = status
    v.feedback = feedback
    for kk, x in pairs(extra or {}) do v[kk] = x end
    v.eval_cpu_s = os.clock() - t0
    v.eval_seconds = wall() - w0
    return v
  end

  -- 1. compile and load
  local params = cand.params or {}
  local run, status, msg, info = prepare(self, cand.source or "", cand.launch or "", params, "kernel")
  if not run then return finish(status, msg, { compile_log = info and info.log }) end
  v.compile_log = run.prog.log
  v.compile_ms = run.prog.ms
  v.cached_compile = run.prog.cached
  v.kernels = run.attrs

  -- 2. verification: every shape x seeds, fresh inputs each time
  local nseeds = opts.seeds or 3
  local budget = opts.budget or 1e6
  for si, sym0 in ipairs(t.shapes) do
    for seed = 1, nseeds do
      local sym = copy_sym(sym0)
      local trial_seed = (opts.seed_base or 1000) + si * 101 + seed
      local ref_io, cand_io, dims = make_io(t, sym, trial_seed)
      local function cleanup() free_all(ref_io); free_all(cand_io) end
      local where = fmt("shape %d %s, seed %d", si, fmt_shape(sym0), seed)
      -- reference (trusted) on its own copy of the inputs
      local okr, rs, rmsg = call_launch(self, st.ref, ref_io, copy_sym(sym0), 1e8)
      if okr then okr, rs, rmsg = sync_status() end
      if not okr then
        if rs == "crashed" then drop_all() else cleanup() end
        return finish("error", "the task's reference failed at " .. where .. ": " .. tostring(rmsg), { context_lost = rs == "crashed" })
      end
      if not st.checked then
        for _, spec in ipairs(t.outputs) do
          local why = degenerate(ref_io[spec.name], spec)
          if why then
            cleanup()
            return finish("error", fmt("task rejected: the reference output '%s' is degenerate at %s (%s)", spec.name, where, why))
          end
        end
        st.checked = true
      end
      local sums = {}
      for _, spec in ipairs(t.inputs) do sums[spec.name] = cand_io[spec.name]:checksum() end
      -- candidate
      run.state.poison = true
      local okc, cs, cmsg, ret = call_launch(self, run, cand_io, copy_sym(sym0), budget)
      if okc then okc, cs, cmsg = sync_status() end
      if not okc then
        if cs == "crashed" then drop_all() else cleanup() end
        local fb = fmt(FEEDBACK[cs] or "%s", tostring(cmsg)) .. "\n(at " .. where .. ")"
        return finish(cs, fb, { failed_at = { shape = si, seed = seed, sym = sym0 }, context_lost = cs == "crashed" })
      end
      -- guard zones of everything the candidate could write
      local function guards(list, what)
        for name, b in pairs(list) do
          local okg, why = b:check_guards()
          if not okg then return fmt("%s '%s': %s", what, name, why) end
        end
      end
      local oob = guards(cand_io, "buffer") or guards(run.state.scratch, "scratch buffer")
      if oob then
        cleanup()
        return finish("out_of_bounds", "The kernel wrote outside a buffer: " .. oob .. " (at " .. where ..
          "). Guard every store with its bound; the last block is usually partial.", { failed_at = { shape = si, seed = seed, sym = sym0 } })
      end
      for _, spec in ipairs(t.inputs) do
        if cand_io[spec.name]:checksum() ~= sums[spec.name] then
          cleanup()
          return finish("inputs_modified", fmt("The kernel modified the input '%s' (at %s). Inputs are read-only: write results only to the outputs (%s), or to k.scratch buffers.",
            spec.name, where, t.outputs[1].name), { failed_at = { shape = si, seed = seed, sym = sym0 } })
        end
      end
      local outs, shape_msg = returned_outputs(t, ret, cand_io, dims)
      if not outs then
        cleanup()
        return finish("wrong_shape", shape_msg .. " (at " .. where .. ")", { failed_at = { shape = si, seed = seed, sym = sym0 } })
      end
      for _, spec in ipairs(t.outputs) do
        local tol = t.tolerance[spec.dtype]
        local r = compare.allclose(outs[spec.name], ref_io[spec.name], { atol = tol.atol, rtol = tol.rtol, poison = true })
        local check = { shape = si, seed = seed, output = spec.name, ok = r.ok, mismatches = r.mismatches, n = r.n,
          max_abs = r.max_abs, max_rel = r.max_rel, unwritten = r.unwritten, nan = r.nan, inf = r.inf }
        insert(v.checks, check)
        if not r.ok then
          local d = dims[spec.name]
          local status2, head
          if (r.unwritten or 0) > 0 then
            status2 = "mismatch"
            head = fmt("%d of %d elements of '%s' were never written.", r.unwritten, r.n, spec.name)
          elseif r.nan + r.inf > 0 and r.mismatches <= r.nan + r.inf then
            -- every wrong element is NaN/Inf; with finite wrong values too, it is a mismatch
            status2 = "nan_inf"
            head = fmt("'%s' has %d NaN and %d Inf values where the reference is finite.", spec.name, r.nan, r.inf)
          else
            status2 = "mismatch"
            head = fmt("'%s' differs from the reference in %d of %d elements (max abs error %.3g, max rel error %.3g; tolerance atol %g, rtol %g).",
              spec.name, r.mismatches, r.n, r.max_abs, r.max_rel, tol.atol, tol.rtol)
          end
          local lines = { head .. " At " .. where .. ":" }
          local ex = r.examples or {}
          for i = 1, math.min(#ex, 5) do
            local e = ex[i]
            lines[#lines + 1] = fmt("  %s%s (flat %d): got %s, want %s", spec.name, coords(e.index, d), e.index, tostring(e.got), tostring(e.want))
          end
          if si > 1 or seed > 1 then
            lines[#lines + 1] = si > 1 and "Earlier shapes passed: check boundary handling for this size (partial blocks, sizes not a multiple of the tile)."
              or "Earlier seeds passed on this shape: suspect a race (a missing __syncthreads), state kept between launches, or reads of memory nothing wrote."
          end
          check.first = r.first
          cleanup()
          return finish(status2, concat(lines, "\n"), { failed_at = { shape = si, seed = seed, sym = sym0, output = spec.name } })
        end
      end
      cleanup()
    end
  end

  -- 3. timing: candidate and reference the same way on the timed shape
  if opts.timing == false then return finish("correct", "Correct on every shape and seed (not timed).") end
  local sym = copy_sym(t.shapes[1])
  local tmode = { mode = opts.mode or "cold", max_ms = opts.max_ms or 2000 }
  local function time_run(r)
    local _, io = make_io(t, sym, 1)
    r.state.poison = false
    local okc, cs, cmsg = call_launch(self, r, io, copy_sym(sym), budget) -- allocates scratch once
    if okc then okc, cs, cmsg = sync_status() end
    local res, err
    if okc then
      res, err = timing.time(function()
        local okl, s2, m2 = call_launch(self, r, io, sym, budget)
        if not okl then return nil, m2, s2 end
      end, tmode)
    else
      err = cmsg
    end
    free_all(io)
    return res, err, cs
  end
  local tk = fmt_shape(sym)
  local ref_t = st.times[tk]
  if not ref_t then
    local e
    ref_t, e = time_run(st.ref)
    if not ref_t then return finish("error", "timing the reference failed: " .. tostring(e)) end
    st.times[tk] = ref_t
  end
  local cand_t, terr2, tstatus = time_run(run)
  if not cand_t then
    return finish(STICKY[tostring(terr2):match("CUDA_ERROR_[A-Z_]+") or ""] and "crashed" or (tstatus or "launch_error"),
      "The kernel failed while being timed: " .. tostring(terr2), { context_lost = sticky_code(terr2) ~= nil })
  end
  local base_t = st.base_times[tk]
  if not base_t and opts.baseline ~= false and t.starter then
    local scand = task_mod.starter(t)
    local srun = prepare(self, scand.source, scand.launch, scand.params, "starter")
    if srun then base_t = time_run(srun) end
    st.base_times[tk] = base_t or false
  end
  local function summary(r)
    return r and { median = r.median, p25 = r.p25, p75 = r.p75, min = r.min, n = r.n, rel_noise = r.rel_noise,
      mode = r.mode, sm_clock_mhz = r.sm_clock_mhz } or nil
  end
  -- how each kernel was launched, and the occupancy that gives (blocks per SM, share of the
  -- SM's threads); scratch memory the launch used
  for name, l in pairs(run.state.launches) do
    local a = v.kernels[name]
    local f = a and run.mod:get(name)
    if f and type(l.block) == "number" then
      local blocks, frac = f:occupancy(l.block, l.shared)
      a.block, a.shared_dynamic, a.blocks_per_sm, a.occupancy = l.block, l.shared, blocks, frac
    end
  end
  v.scratch_bytes = run.state.scratch_bytes
  -- the empty-kernel floor, measured once per worker: times near it are launch overhead
  self._floor = self._floor or timing.floor()
  v.timing = { candidate = summary(cand_t), reference = summary(ref_t), baseline = summary(base_t or nil), shape = sym,
    floor_ms = self._floor and self._floor.median }
  v.speedup = ref_t.median / cand_t.median
  if base_t then v.speedup_baseline = base_t.median / cand_t.median end
  local pk = self:peaks()
  local bytes, flops = task_mod.eval_expr(t.bytes, sym), task_mod.eval_expr(t.flops, sym)
  local mem_ms = bytes / (pk.bandwidth_gbs * 1e9) * 1e3
  local cmp_ms = flops / (pk.fp32_tflops * 1e12) * 1e3
  -- tensor cores can beat the FP32 rate many times over: only the memory bound and a
  -- generous compute bound (16x FP32) may flag a kernel as impossibly fast
  local bound_ms = math.max(mem_ms, cmp_ms / 16)
  v.roofline = { bound_ms = math.max(mem_ms, cmp_ms), memory_ms = mem_ms, compute_ms = cmp_ms,
    fraction = math.max(mem_ms, cmp_ms) / cand_t.median, bandwidth_gbs = pk.bandwidth_gbs, fp32_tflops = pk.fp32_tflops }
  if cand_t.median < 0.7 * bound_ms then
    return finish("too_fast", fmt("The kernel ran in %.4f ms, faster than this GPU can move the task's %d bytes (%.4f ms at %.0f GB/s). It cannot be doing the work: results may be cached, or work may run outside the timed stream.",
      cand_t.median, bytes, mem_ms, pk.bandwidth_gbs))
  end
  return finish("correct", fmt("Correct on %d shapes x %d seeds. %.4f ms vs reference %.4f ms (speedup %.2fx%s); %.0f%% of the roofline bound.",
    #t.shapes, nseeds, cand_t.median, ref_t.median, v.speedup,
    v.speedup_baseline and fmt(", %.2fx vs the starter", v.speedup_baseline) or "", 100 * v.roofline.fraction))
end

return M
