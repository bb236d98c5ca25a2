-- km.judge — evaluate one candidate against a task, in this process, on this GPU.
--
-- This is what a GPU worker (km.worker) runs; strategies go through km.eval, which keeps
-- the judge in a child process so a faulting kernel takes down only the worker.
--
--   local judge = require("km.judge").new()
--   local verdict = judge:eval(task_or_dir, { source, launch, params, name }, opts)
--
-- opts (all optional):
--   option        default            meaning
--   seeds         3                  seeds per shape set in verify (the last one fresh)
--   timing        true               measure the candidate (false: verify only)
--   baseline      true               time PyTorch eager / torch.compile beside it
--   budget        1e6                Lua instructions per launch call
--   lua_memory    the sandbox's      bytes of Lua memory per launch call
--   scratch_bytes 8 GiB              k.scratch's budget per launch
--   mode          "cold"             timing mode (km.timing's MODES)
--   max_ms        2000               timing cap per side
--   min_samples   10                 the stop rule's least sample count
--   warmup        M.WARMUP (1)       warm-up calls before a timing's samples
--   warmup_ms     M.WARMUP_MS (0)    their least wall time
--   check_first   min_samples        timed calls re-verified among the first min_samples
--                                    (fewer: a uniform draw; M.check_first)
--   check_every   1                  later timed calls re-verified 1 in check_every
--   check_lines   M.CHECK_LINES (16) a check reads one output line in check_lines
--   check_draw    "subset"           "each": every call 1 in check_every (side-by-side runs)
--   energy        false              a separate pass for joules per call (NVML)
-- The mode, min_samples and warm-up options are part of the protocol key, so cached timings
-- are kept apart.
--
-- Four stages (Judge:eval): task (load, reference state), prepare (compile, load, sandbox
-- the launch code), verify (every shape x seeds, candidate before reference), measure
-- (timing, with every timed call on fresh inputs and poisoned outputs, and re-verified).
-- The candidate is hostile (DESIGN.md): launch code sees buffers only as views that die
-- after each call, gets fresh copies of the shape table, never sees a reference result;
-- what it returns is checked in C, and nothing it wrote is called outside the sandbox.
local nvrtc = require "km.nvrtc"
local cuda = require "km.cuda"
local buffer = require "km.buffer"
local compare = require "km.compare"
local timing = require "km.timing"
local task_mod = require "km.task"
local sandbox = require "km.sandbox"
local verdict = require "km.verdict"
local feedback = require "km.feedback"
local sys = require "km.sys"

local fmt, concat = string.format, table.concat
local pairs, ipairs, type, tostring, pcall, error, rawget, next = pairs, ipairs, type, tostring, pcall, error, rawget, next

local M = {}
local Judge = {}
Judge.__index = Judge
local wall = timing.wall

M.STATUSES = verdict.STATUSES
-- The method table: a judge is setmetatable(fields, M.Judge) (M.new). Tests of the judge's
-- logic on machines without a GPU put stand-ins for its GPU parts on one.
M.Judge = Judge

----------------------------------------------------------------------------------------
-- the judge's private random numbers (each timed call's seed, which timed calls are
-- re-verified, each shape's fresh verify seed): an integer in [1, n], 8 bytes of the
-- kernel's CSPRNG a draw (sys.random). A candidate sees every seed it is given: its inputs
-- are a function of the seed it can invert (km_random's hashes are bijections). A
-- generator whose state its outputs reveal (a xorshift64*'s 40-bit draws gave its state from
-- two of them) let a kernel read a call's seed from its inputs, solve for the state and
-- know whether the call would be checked: tests/lua/test_judge_random.lua. Draws from the
-- kernel share no state, and none is kept here for a kernel to read. (Launch code shares
-- this process's math.random, so the judge never used that.)
local function rng(n) return sys.random(n) end
M.random = rng -- for the tests: the judge's draws

----------------------------------------------------------------------------------------
-- the buffer pool: owned by the judge, buffers come back with fresh guards, and poisoned
-- where they may hold a reference result a later call could use (Pool:put), so no such
-- result outlives the trial that made it

local POOL_LIMIT = 24 << 30
local Pool = {}
Pool.__index = Pool

local function pool_key(dtype, dims) return dtype .. ":" .. concat(dims, "x") end

-- A new device buffer. Out of memory, torch's cached blocks (a PyTorch reference's, kept
-- between calls: handing them back waits for the whole device) go back to the driver and
-- the allocation is tried once more; `drop` (optional) frees the judge's idle buffers too.
local function alloc(dtype, dims, drop)
  local ok, b = pcall(buffer.new, dtype, dims)
  if ok then return b end
  local kb = package.loaded["km.kernelbench"]
  if not (tostring(b):find("OUT_OF_MEMORY", 1, true) and (kb or drop)) then error(b, 0) end
  if drop then drop() end
  if kb then kb.empty_cache() end
  return buffer.new(dtype, dims)
end
M.alloc = alloc -- (tests/gpu/test_judge_memory.lua)

function Pool.new() return setmetatable({ lists = {}, bytes = 0 }, Pool) end

function Pool:get(dtype, dims)
  local list = self.lists[pool_key(dtype, dims)]
  local b = list and list[#list]
  if b then
    list[#list] = nil
    self.bytes = self.bytes - b:nbytes()
    return b
  end
  return alloc(dtype, dims, function() self:drop(true) end)
end

-- A buffer into its list (the pool over its limit drops its idle buffers first).
local function keep(self, b)
  if self.bytes + b:nbytes() > POOL_LIMIT then self:drop(true) end
  local key = pool_key(b:dtype(), b:shape())
  local list = self.lists[key] or {}
  self.lists[key] = list
  list[#list + 1] = b
  self.bytes = self.bytes + b:nbytes()
end

-- Returns every buffer of a table (each once) to the pool. Buffers go back poisoned where
-- they may hold a reference result a later candidate could find (its outputs for a verified
-- call's seed, which the next candidate's call of that seed would have). plain: they hold
-- nothing of the kind — a candidate's own inputs and outputs, the reference's inputs, or
-- reference outputs for a seed from the judge's private generator that no later call gets —
-- and go back as they are (a poison writes every byte). Guard zones are refilled on the
-- stream, many buffers to a launch (buffer.reset_guards): before anything later on the
-- stream uses them, and with no wait for the host (two memsets a buffer were 1.3% of the
-- candidates' timings, bench/RESULTS.md run BO).
function Pool:put_all(t, plain)
  local seen, list = {}, {}
  for _, b in pairs(t) do
    if type(b) == "userdata" and not seen[b] and not b:freed() then
      seen[b] = true
      if not plain then b:poison() end
      list[#list + 1] = b
    end
  end
  buffer.reset_guards(list)
  for _, b in ipairs(list) do keep(self, b) end
end

function Pool:put(b, plain) self:put_all({ b }, plain) end

-- free = true: release the memory (over the limit); false: forget it (the context is gone)
function Pool:drop(free)
  if free then for _, list in pairs(self.lists) do for _, b in ipairs(list) do b:free() end end end
  self.lists, self.bytes = {}, 0
end

----------------------------------------------------------------------------------------
-- construction

function M.new(opts)
  opts = opts or {}
  local ok, why = cuda.available()
  if not ok then return nil, why, "NO_GPU" end
  local self = setmetatable({}, Judge)
  self.device = cuda.device()
  self.device.nvrtc = nvrtc.version()
  self.tasks = {}      -- dir -> { task, ref = prepared, times = {}, base_times = {}, checked = bool }
  self.opts = opts
  self.pool = Pool.new()
  -- verify's CUDA reference results, in host memory (Judge:trial_reference): bytes held,
  -- and the task states holding them, least recently used first
  self.ref_kept = { bytes = 0, cap = opts.reference_cache_bytes or M.REFERENCE_CACHE_BYTES, order = {} }
  return self
end

-- Peaks and the launch floor are measured lazily, once per worker.
function Judge:peaks()
  if not self._peaks then self._peaks = assert(timing.peaks()) end
  return self._peaks
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

-- The scratch state of a launch that has not run yet.
local function fresh_state() return { scratch = {}, launches = {}, scratch_bytes = 0, scratch_peak = 0 } end

----------------------------------------------------------------------------------------
-- stage 1: prepare — compile, load, and the launch environment

-- The `k` table a launch function sees. Scratch buffers are the launch's own (kept across
-- its calls so timing excludes allocation), poisoned on verification runs unless asked
-- for zeroed, and handed out as views like everything else.
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
  -- k.scratch(dtype, shape [, { zero = true }]) -> a buffer for this call
  k.scratch = function(dtype, shape, o)
    state.scratch_i = state.scratch_i + 1
    local i = state.scratch_i
    local b = state.scratch[i]
    local okn, n = pcall(function() return type(shape) == "number" and shape or task_mod.numel(shape) end)
    if not okn or math.type(n) ~= "integer" then error("k.scratch: shape must be an integer or a list of integers", 2) end
    local new = not b or b:dtype() ~= dtype or b:numel() ~= n
    if new then
      -- the slot is emptied before anything below can fail: a launch that catches the
      -- failure (pcall) must not leave a freed buffer for the judge to trip on later
      if b then state.scratch_bytes = state.scratch_bytes - b:nbytes(); b:free(); state.scratch[i] = nil end
      local okb, nb = pcall(alloc, dtype, shape)
      if not okb then error("k.scratch(" .. tostring(dtype) .. "): " .. tostring(nb), 2) end
      state.scratch_bytes = state.scratch_bytes + nb:nbytes()
      if state.scratch_bytes > state.scratch_limit then
        state.scratch_bytes = state.scratch_bytes - nb:nbytes()
        nb:free()
        error(fmt("k.scratch: over the scratch budget of %d bytes", state.scratch_limit), 2)
      end
      state.scratch[i] = nb
      b = nb
      if state.scratch_bytes > state.scratch_peak then state.scratch_peak = state.scratch_bytes end
    end
    -- a new buffer may be memory the launch freed a moment ago, values and all: poisoned
    -- whatever the call (Judge:time_run poisons the ones it keeps before every timed call)
    if type(o) == "table" and rawget(o, "zero") then b:zero()
    elseif state.poison or new then b:poison() end
    return buffer.view(b)
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
      if type(cfg) ~= "table" then error("k." .. tostring(name) .. "{ grid = ..., block = ... }: expected a table", 2) end
      if rawget(cfg, "stream") ~= nil then
        error("k." .. name .. ": launch code may not choose a stream; all work runs on the stream the evaluator times", 2)
      end
      return function(...)
        local okl, msg, code = fn:launch(cfg, ...)
        if not okl then
          state.error_code = code -- the judge classifies by code, never by message text
          error(msg, 2)
        end
        -- the first launch of each kernel: its configuration, for occupancy in the verdict
        if not state.launches[name] then
          local b = rawget(cfg, "block")
          local threads = type(b) == "table" and (rawget(b, 1) or 1) * (rawget(b, 2) or 1) * (rawget(b, 3) or 1) or b
          state.launches[name] = { block = threads, shared = rawget(cfg, "shared") or 0 }
        end
      end
    end
  end })
end

-- Frees every scratch buffer a launch obtained (the end of its evaluation): its memory is
-- back before the next candidate or baseline runs, whenever Lua's collector would have run.
local function free_scratch(run)
  for i, b in pairs(run.state.scratch) do
    if not b:freed() then b:free() end
    run.state.scratch[i] = nil
  end
  run.state.scratch_bytes = 0
  run.state.last_sym = nil
end

-- The NVRTC options a source is judged with. km.eval compiles queued candidates in the
-- driver with these same options to warm the shared cache, so this is the one place
-- that says them: the two cannot drift apart (a drift would only cost cache misses).
function M.compile_opts(arch, params, label)
  return { arch = arch, defines = params, name = (label or "kernel") .. ".cu" }
end

-- A compiled launch: kernels module + launch function + its scratch state; or nil,
-- status, feedback, { log =, code = }.
local function prepare(self, source, launch_src, params, label)
  local big = verdict.oversized(source, launch_src)
  if big then return nil, "compile_error", big, { log = big } end
  local prog, log, code = nvrtc.compile(source, M.compile_opts(self.device.arch, params, label))
  if not prog then
    return nil, "compile_error", feedback.compile(log or "", source, label .. ".cu"), { log = log, code = code }
  end
  local mod, err = cuda.load(prog)
  if not mod then return nil, "load_error", "The compiled kernel could not be loaded: " .. tostring(err), { log = prog.log } end
  local fn, lerr = sandbox.load(launch_src, label .. " launch.lua")
  if not fn then return nil, "compile_error", "launch.lua does not load: " .. tostring(lerr), { log = prog.log } end
  local state = { scratch = {}, scratch_i = 0, scratch_bytes = 0, scratch_peak = 0, poison = true, launches = {},
    scratch_limit = self.opts.scratch_bytes or (8 << 30) }
  -- k.params: the defaults the source declares (#ifndef X / #define X v), then the values
  -- the candidate was compiled with
  local p = task_mod.default_params(source)
  for kk, v in pairs(params or {}) do p[kk] = v end
  local run = { prog = prog, mod = mod, fn = fn, state = state, label = label, attrs = {} }
  run.k = make_k(self, mod, p, state)
  for name in pairs(prog.kernels or {}) do
    local f = mod:get(name)
    if f then
      local a = f:attributes()
      run.attrs[name] = { registers = a.registers, shared_static = a.shared_static, local_bytes = a.local_bytes, max_threads = a.max_threads }
    end
  end
  return run
end

-- The scratch buffers launch code could return as an output (returned() takes a buffer of
-- the output's dtype and element count).
function M.returnable(scratch, outputs, dims)
  local list = {}
  for _, b in pairs(scratch) do
    if not b:freed() then
      for _, spec in ipairs(outputs) do
        if b:dtype() == spec.dtype and b:numel() == task_mod.numel(dims[spec.name]) then list[#list + 1] = b break end
      end
    end
  end
  return list
end

-- Views of a trial's buffers, for one launch call.
-- Reading a buffer the task does not have is an error that names what it has: a launch
-- that expects a parameter the model lacks (io.fc_bias of a bias-free Linear) gets a
-- launch_error saying so, not "attempt to index a nil value" from further down.
local function no_such_buffer(v, name)
  local names = {}
  for n in pairs(v) do names[#names + 1] = n end
  table.sort(names)
  error(fmt("io.%s: the task has no buffer named '%s' (its buffers: %s)", tostring(name), tostring(name),
    concat(names, ", ")), 2)
end
local VIEWS_MT = { __index = no_such_buffer, __metatable = false }

local function views(io)
  local v = {}
  for name, b in pairs(io) do v[name] = buffer.view(b) end
  return setmetatable(v, VIEWS_MT)
end

-- What launch code handed back as outputs ({ name = view }), resolved in C to the buffers
-- behind live views, before they are revoked. Only rawget and buffer.unwrap touch `ret`:
-- nothing the candidate wrote is called. -> { name = buffer } or nil, message.
local function returned(outputs, ret, io)
  if type(ret) ~= "table" then return {} end
  local outs = {}
  for _, spec in ipairs(outputs) do
    local x = rawget(ret, spec.name)
    if x ~= nil then
      local b = buffer.unwrap(x)
      if not b then
        return nil, fmt("launch.lua returned %s for the output '%s', not a buffer it was given in this call", type(x), spec.name)
      end
      local want = io[spec.name]
      if b:dtype() ~= spec.dtype or b:numel() ~= want:numel() then
        return nil, fmt("launch.lua returned the output '%s' as %s[%s] (%d elements); the task's '%s' is %s[%s] (%d elements).",
          spec.name, b:dtype(), concat(b:shape(), ", "), b:numel(), spec.name, spec.dtype, concat(want:shape(), ", "), want:numel())
      end
      outs[spec.name] = b
    end
  end
  return outs
end

-- Runs a prepared launch once on `io` (real buffers) with its own copy of `sym`.
-- Returns true, outs ({ name = buffer } the launch returned) or false, status, message.
-- Launch code sees fresh views (revoked when it returns) and a fresh shape table.
-- keep_cache: leave the reference's outputs in torch's cached blocks (a timed call's check,
-- on inputs from an unpredictable seed: no later call has them; time_run hands the blocks
-- back at its end). Otherwise they go back to the driver, out of reach of the next kernel.
local function call_launch(self, run, io, sym, budget, keep_cache)
  if run.torch then -- a PyTorch reference (trusted): the model on the real buffers
    local st = self.tasks[run.task_dir]
    local moved, mtext = self:truth_check(st)
    if moved then return false, moved, mtext end
    local ok, err = run.torch:forward(io, { empty_cache = not keep_cache })
    if st then st.truth_dirty = true end -- its buffers (running statistics) may have moved
    if not ok then return false, "launch_error", err end
    return true, {}
  end
  if run.st then self:seal_truth(run.st) end -- trusted code done: what candidate code meets
  self.truth_clean = nil -- candidate code runs: the next truth_check digests again
  run.state.scratch_i = 0
  run.state.error_code = nil
  run.state.last_sym = sym -- the shape its scratch now has (Judge:time_run's warm-up)
  local ok, err = sandbox.call(run.fn, { budget = budget or 1e6, memory = self.opts.lua_memory },
    run.k, views(io), copy(sym))
  local outs, why
  if ok then outs, why = returned(run.task_outputs, err, io) end
  buffer.revoke_views()
  if not ok then return false, verdict.launch_status(run.state.error_code), err end
  if not outs then return false, "wrong_shape", why end
  return true, outs
end

-- A wait's outcome (cuda.synchronize's, a ledger's read) -> true | false, status, message
local function wait_status(ok, msg, code)
  if ok then return true end
  return false, verdict.launch_status(code), msg
end
local function sync_status() return wait_status(cuda.synchronize()) end

----------------------------------------------------------------------------------------
-- tasks and trial buffers

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
  local ref
  if t.reference.pytorch then
    -- PyTorch eager is the reference and the baseline (KernelBench's): loaded in this
    -- worker, on its context and stream, exchanging buffers without copies (km.kernelbench)
    -- the first load imports torch (seconds): one-time set-up, not the candidate's time
    if self.on_hold then self.on_hold("torch") end
    local prob, err = require("km.kernelbench").load(t.reference.pytorch, { precision = t.reference.precision, device = "cuda" })
    if not prob then
      if self.on_hold then self.on_hold(nil) end
      return nil, "the task's PyTorch reference does not load: " .. tostring(err)
    end
    st.prob = prob
    -- the reference's own state, copied to the host before any candidate code runs (this
    -- builds the held-out model too: set-up, still under the hold)
    local snap, serr = prob:snapshot()
    if self.on_hold then self.on_hold(nil) end
    if not snap then return nil, "the task's PyTorch reference cannot be snapshotted: " .. tostring(serr) end
    st.truth_dirty = true
    ref = { torch = prob, task_dir = t.dir, state = fresh_state(), attrs = {} }
  else
    local status, msg
    ref, status, msg = prepare(self, t.reference.source_text, t.reference.launch_text, {}, "reference")
    if not ref then return nil, "the task's reference does not build (" .. status .. "): " .. msg end
  end
  ref.task_outputs = t.outputs
  st.ref = ref
  self.tasks[t.dir] = st
  return st
end

----------------------------------------------------------------------------------------
-- the truth out of reach: a PyTorch reference's own state (parameters, buffers, tensors it
-- keeps) lives in this process's context, where a kernel can write. It is proven unchanged
-- instead: sealed with keyed digests (buffer.digest: the key is this process's secret, so
-- a kernel cannot forge one) whenever trusted code has run and candidate code is next, and
-- checked before every use (the reference run, the parameters handed out as pristine
-- inputs) and at the end of every evaluation. A change fails the candidate
-- (inputs_modified) and the state is written back from the host snapshot taken at load.

-- The truth's storages as they are now: device ranges { ptr, nbytes } and their names.
local function truth_ranges(st)
  local ranges, names = {}, {}
  for i, r in ipairs(assert(st.prob:truth())) do ranges[i], names[i] = { r[2], r[3] }, r[1] end
  return ranges, names
end

-- Seals the truth if trusted code ran since the last seal (a forward moves running stats).
function Judge:seal_truth(st)
  if not (st and st.prob and st.truth_dirty) then return end
  local ranges, names = truth_ranges(st)
  st.truth = { ranges = ranges, names = names, digests = #ranges > 0 and buffer.digest(ranges) or {} }
  st.truth_dirty = false
end

-- The name of the first storage whose digest now (now(i), the i-th range's) is not its
-- seal's, or nil.
local function moved_name(tr, now)
  for i, d in ipairs(tr.digests) do if now(i) ~= d then return tr.names[i] end end
end

-- nil, or the name of the first storage of the truth that moved since its seal.
function Judge:truth_moved(st)
  local tr = st and st.prob and not st.truth_dirty and st.truth
  if not tr or #tr.ranges == 0 then return nil end
  local now = buffer.digest(tr.ranges)
  return moved_name(tr, function(i) return now[i] end)
end

-- Writes the snapshot back and seals it again (after a candidate altered the truth).
function Judge:restore_truth(st)
  assert(st.prob:restore())
  st.truth_dirty = true
  self:seal_truth(st)
end

local function reference_state_text(name, where)
  return fmt("Your kernel changed the PyTorch reference's own state on the GPU (%s, found changed at %s). "
    .. "A kernel may write only its outputs and its scratch buffers; the reference's parameters and buffers "
    .. "are read-only. Compute with the parameters passed to you in io.", name, where or "the end of the evaluation")
end

-- nil, or "inputs_modified", feedback: the check before the truth is used. The state is
-- restored at once, so nothing computed from it afterwards sees the change, and the fault
-- is kept (self.fault) for the verdict: a check that runs where no verdict can be returned
-- (an input refresh inside timing) still fails the candidate.
-- A clean check holds until candidate code runs again (call_launch clears self.truth_clean):
-- the digest waited for the stream, so no candidate work is left to change the truth, and a
-- second digest before the next candidate call (a timed call's check, then its reference
-- run) would read the same bytes.
function Judge:truth_check(st, where)
  if st and self.truth_clean == st then return nil end
  local name = self:truth_moved(st)
  if not name then
    if st and st.prob and st.truth and not st.truth_dirty then self.truth_clean = st end
    return nil
  end
  return self:truth_fault(st, name, where)
end

-- A storage of the truth found moved: the state restored, the fault kept -> "inputs_modified", feedback
function Judge:truth_fault(st, name, where)
  self:restore_truth(st)
  local text = reference_state_text(name:gsub("^%a+:", ""), where)
  self.fault = self.fault or { "inputs_modified", text }
  return "inputs_modified", text
end

-- The truth_check of a batch of checks: its digests enqueued into the ledger L (nil when
-- there is nothing sealed to check), then read back with the batch (truth_read: nil, or
-- "inputs_modified", feedback, the state restored and the fault kept, as truth_check).
function Judge:truth_enqueue(st, L)
  local tr = st and st.prob and not st.truth_dirty and st.truth
  if not tr or #tr.ranges == 0 or self.truth_clean == st then return nil end
  return L:digest(tr.ranges)
end

-- A seal enqueued into a batch after trusted code ran on the truth (seal_truth's digests,
-- read back before any candidate code runs) -> what seal_read needs, or nil.
function Judge:seal_enqueue(st, L)
  if not (st and st.prob and st.truth_dirty) then return nil end
  local ranges, names = truth_ranges(st)
  return { ranges = ranges, names = names, slot = #ranges > 0 and L:digest(ranges) or nil }
end

function Judge:seal_read(st, L, seal)
  local digests = {}
  for i = 1, #seal.ranges do digests[i] = L:u64(seal.slot + i - 1) end
  st.truth = { ranges = seal.ranges, names = seal.names, digests = digests }
  st.truth_dirty = false
end

function Judge:truth_read(st, L, slot, where)
  if not slot then return nil end
  local name = moved_name(st.truth, function(i) return L:u64(slot + i - 1) end)
  if name then return self:truth_fault(st, name, where) end
end

-- The law a task's init rule draws an input by (b:random's table, without the seed).
local function law_of(spec, sym)
  local init = spec.init
  local a, c = task_mod.eval_expr(init[2], sym), task_mod.eval_expr(init[3], sym)
  if init[1] == "uniform" then return { dist = "uniform", lo = a, hi = c } end
  if init[1] == "normal" then return { dist = "normal", mean = a, std = c } end
  return { dist = "int", lo = a, hi = c }
end

-- The input buffers of io, by name.
local function inputs_of(t, io)
  local r = {}
  for _, spec in ipairs(t.inputs) do r[spec.name] = io[spec.name] end
  return r
end

-- b:random's table for input number i of a call drawn from `seed`.
local function seeded(law, seed, i)
  local r = copy(law)
  r.seed = seed * 7919 + i
  return r
end

-- A trial's buffers: the candidate's inputs (values drawn from `seed`) and outputs
-- (poisoned), and buffers for the reference's inputs, which stay poisoned until
-- Judge:pristine draws them again from the same seed — after the candidate ran, so no
-- candidate kernel can find and alter the copy it will be checked against.
-- refreshed: the caller draws the inputs before every call (a timing's refresh): they are
-- not drawn here (a whole draw a timing that no call read: a tenth of a 10-sample timing's
-- fresh-input work, about 1% of the candidates' timings by run BO's figures).
function Judge:trial_io(t, sym, seed, refreshed)
  local cand, ref_in, dims = {}, {}, {}
  for _, spec in ipairs(t.inputs) do
    local d = task_mod.shape_of(spec, sym)
    dims[spec.name] = d
    cand[spec.name] = self.pool:get(spec.dtype, d)
    ref_in[spec.name] = self.pool:get(spec.dtype, d)
  end
  if not refreshed then self:fill_inputs(t, sym, cand, seed) end
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

-- How a call's inputs are drawn by the judge's own fill, without Python: { laws = { name ->
-- law, index }, params = { name -> { ptr, nbytes } } } or false. A task's init rules are
-- laws; a problem file's get_inputs() is when it only draws with torch.rand/randn/randint
-- (its refresh plan, km.kernelbench: the same laws, drawn by the judge from the same seed on
-- every call, verified and timed), its parameters then copied from the model's own tensors
-- (buffer.copy_in). Inputs drawn by a law are checked against it in place (b:random_check).
-- Kept per task and shape (a plan's pointers are the model's, which stay where they are).
function Judge:input_plan(st, sym, io)
  local key = task_mod.fmt_shape(sym)
  st.plans = st.plans or {}
  local plan = st.plans[key]
  if plan ~= nil then return plan end
  local t = st.task
  plan = { laws = {}, params = {} }
  if st.prob then
    local p = st.prob:refresh_plan(io)
    if not p or p.why then
      plan = false
    else
      for i, spec in ipairs(t.inputs) do
        local law = p.inputs and p.inputs[spec.name]
        if law then
          plan.laws[spec.name] = { law = law.dist == "normal" and { dist = "normal", mean = law.a, std = law.b }
            or { dist = law.dist, lo = law.a, hi = law.b }, index = i }
        elseif p.params and p.params[spec.name] then
          plan.params[spec.name] = p.params[spec.name]
        else
          plan = false
          break
        end
      end
    end
  else
    for i, spec in ipairs(t.inputs) do plan.laws[spec.name] = { law = law_of(spec, sym), index = i } end
  end
  st.plans[key] = plan
  return plan
end

-- The inputs of `seed` into io: drawn by the input plan's laws where there is one (a task's
-- init rules; a problem file's replayed get_inputs(), so no Python runs between calls), or
-- by the problem's own get_inputs() under the seed (on the GPU), plus the model's
-- parameters. A problem whose inputs cannot be made raises (the verdict: error).
-- timed: a timed call's refresh (and its check's). Then torch's cached blocks stay
-- (otherwise eager's next output allocation is a cudaMalloc inside the timed window; only
-- inputs are in them), and the parameters are copied from the truth without proving it
-- unchanged first: that digest waits for the stream, so samples could not queue ahead.
-- Nothing is lost: a candidate that changed the truth is found by the next check's
-- truth_check (before its reference run), by the last timed call's, or at the end of the
-- evaluation, and parameters it changed for its own next call are not what it is checked
-- against.
function Judge:fill_inputs(t, sym, io, seed, timed)
  local st = self.tasks[t.dir]
  local plan = self:input_plan(st or { task = t }, sym, io)
  if plan then
    for name, l in pairs(plan.laws) do io[name]:random(seeded(l.law, seed, l.index)) end
    -- parameters: as below, from a truth proven unchanged, except in a timed refresh
    if next(plan.params) and not timed then self:truth_check(st, "an input refresh") end
    for name, r in pairs(plan.params) do buffer.copy_in(io[name], r.ptr, r.nbytes) end
    return
  end
  local ins, params = {}, {}
  for _, spec in ipairs(t.inputs) do
    if spec.role == "parameter" then params[spec.name] = io[spec.name] else ins[spec.name] = io[spec.name] end
  end
  local ok, err = st.prob:make_inputs(seed, ins, { keep_cache = timed })
  if ok and next(params) then
    -- parameters are handed out only from a truth proven unchanged since its seal (a change
    -- is restored first, and recorded against the candidate); a timed refresh: above
    if not timed then self:truth_check(st, "an input refresh") end
    ok, err = st.prob:write_params(params)
  end
  if not ok then error("the task's PyTorch inputs could not be made: " .. tostring(err), 0) end
end

-- Runs the reference on ref_in's buffers plus fresh poisoned outputs (which the caller
-- returns to the pool). keep_cache: call_launch's. -> ref_io (ref_in's names and the
-- outputs) or nil, status, message
-- no_wait: enqueued only (a batch of checks, which waits once for all of it).
function Judge:run_reference(st, ref_in, dims, sym, which, keep_cache, no_wait)
  local t = st.task
  local io = copy(ref_in)
  for _, spec in ipairs(t.outputs) do io[spec.name] = self.pool:get(spec.dtype, dims[spec.name]):poison() end
  local ok, s, msg = call_launch(self, which or st.ref, io, sym, 1e8, keep_cache)
  if ok and not no_wait then ok, s, msg = sync_status() end -- the reference's returned outputs are not used
  if not ok then
    if s ~= "crashed" then for _, spec in ipairs(t.outputs) do self.pool:put(io[spec.name]) end end
    return nil, s, msg
  end
  return io
end

-- Verify's fixed trials draw the same inputs for every candidate of a task (their seeds are
-- the evaluation's seed_base, the shape and the trial: the same for each), so a CUDA
-- reference's outputs for such a trial (key: not nil) are the same for each candidate too.
-- Where the reference takes longer than copying its outputs back and forth would (a naive
-- GEMM or convolution, not an elementwise kernel: at least 2 x bytes / HOST_COPY_BPS
-- seconds), they are kept after its first run in host memory (Lua strings: no kernel can address them, and nothing of them is
-- on the device while candidate code runs); a later candidate's trial copies them into fresh
-- buffers after it ran and its inputs were proven, where the reference would have run. Only a
-- task's own CUDA reference (a PyTorch model can keep state), at most REFERENCE_CACHE_BYTES in
-- all (opts.reference_cache_bytes; 0: none), the least recently used task's dropped first.
-- Timed calls' checks never use these: their inputs come from the private generator.
-- -> io (inputs and outputs), kept (true: copied from host memory) | nil, status, msg
M.REFERENCE_CACHE_BYTES = 1 << 30
M.HOST_COPY_BPS = 5e9
local function touch(order, st)
  for i, o in ipairs(order) do if o == st then table.remove(order, i) break end end
  order[#order + 1] = st
end
function Judge:trial_reference(st, ref_src, dims, sym, key)
  local t = st.task
  local kept = self.ref_kept
  local hit = key and not st.prob and st.ref_outs and st.ref_outs[key]
  if hit then
    local io = copy(ref_src)
    for _, spec in ipairs(t.outputs) do
      io[spec.name] = self.pool:get(spec.dtype, dims[spec.name])
      io[spec.name]:from_string(hit[spec.name])
    end
    touch(kept.order, st)
    return io, nil, nil, true
  end
  local w0 = wall()
  local io, s, m = self:run_reference(st, ref_src, dims, sym, nil, st.prob ~= nil)
  local took = wall() - w0
  if not io or not key or st.prob or kept.cap <= 0 then return io, s, m end
  local bytes = 0
  for _, spec in ipairs(t.outputs) do bytes = bytes + io[spec.name]:nbytes() end
  if bytes > kept.cap or took * M.HOST_COPY_BPS < 2 * bytes then return io end
  local outs = {}
  for _, spec in ipairs(t.outputs) do outs[spec.name] = io[spec.name]:to_string() end
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
  return io
end

-- Checks of timed calls use the fastest reference known to be right: a task whose
-- reference is a naive CUDA kernel and which also has a PyTorch model (reference.py, loaded
-- for the baselines, at the timed shape's sizes) re-verifies timed calls against PyTorch
-- eager (cuBLAS, cuDNN) once eager agreed with the CUDA reference, within the task's
-- tolerance, on the timed shape's first trial of this worker (st.fast_ref; false when it did
-- not or cannot), unless the CUDA reference was timed faster (Judge:check_reference). Verify's fixed trials always use the task's own reference (kept results
-- make a slow one cheap); its fresh trial at the timed shape is the timed checks' case —
-- inputs from the private generator, which no kept result covers — and uses st.fast_ref too.
function Judge:try_fast_reference(st, ref_in, ref_io, dims, sym)
  if st.fast_ref ~= nil or st.prob or not st.wants_torch then return end
  -- torch still importing (started ahead, km.kernelbench.import_ahead): this candidate's
  -- checks use the task's own reference, and the next candidate's verify asks again
  if not require("km.kernelbench").ready() then return end
  st.fast_ref = false
  if not self:torch_model(st) then return end
  -- only a model that keeps nothing on the GPU between calls (our tasks' reference.py take
  -- their weights as inputs): a model with state would be a truth to seal (st.prob's is)
  local held = st.torch_model:truth()
  if not held or #held > 0 then return end
  local run = { torch = st.torch_model, task_dir = st.task.dir, state = fresh_state() }
  local fast_io = self:run_reference(st, ref_in, dims, sym, run)
  if not fast_io then return end
  local agree = true
  for _, spec in ipairs(st.task.outputs) do
    local tol = st.task.tolerance[spec.dtype]
    if agree and not compare.allclose(fast_io[spec.name], ref_io[spec.name], { atol = tol.atol, rtol = tol.rtol }).ok then agree = false end
    self.pool:put(fast_io[spec.name])
  end
  if agree then st.fast_ref = run end
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

-- Rejects a reference whose output cannot tell right from wrong.
local function degenerate(ref_out, spec)
  local n = ref_out:numel()
  if n == 0 then return nil end
  local zero = buffer.new(spec.dtype, n):zero()
  local why
  if compare.allclose(ref_out, zero, { atol = 1e-6, rtol = 0 }).ok then why = "every element is within 1e-6 of zero" end
  if not why and n > 1 then
    local first = ref_out:to_table(1)[1]
    zero:fill(first)
    if compare.allclose(ref_out, zero, { atol = 0, rtol = 0 }).ok then why = "every element equals " .. tostring(first) end
  end
  zero:free()
  return why
end

-- The evidence after a candidate call: guard zones, inputs unchanged (against ref_in, the
-- same inputs drawn again; or, given a plan, against the laws they were drawn by,
-- b:random_check, and the parameters' source). Every input is proven in full, every element
-- of it, in verify and in timed calls alike: the reference then computes on the candidate's
-- own input buffers (a plan's inputs), and one element the proof did not read could make the
-- reference's answer trivial (a spike that takes over a batch's statistics, a max, a
-- softmax). Its reads are enqueued into the ledger L (km.buffer's: no wait) -> what
-- evidence_read reads back once L was read.
local function evidence_enqueue(L, t, cand, ref_in, scratch, plan, seed)
  local list, label = {}, {}
  local function add(b, what) list[#list + 1] = b; label[#list] = what end
  for name, b in pairs(cand) do add(b, fmt("buffer '%s'", name)) end
  for i, b in pairs(scratch) do add(b, fmt("scratch buffer %d", i)) end
  local e = { list = list, label = label, guards = L:guards(list), inputs = {} }
  for _, spec in ipairs(t.inputs) do
    local b, slot, count = cand[spec.name], nil, false
    if not plan then
      local r = ref_in[spec.name]
      slot = L:digest { { b:ptr(), b:nbytes() }, { r:ptr(), r:nbytes() } }
    elseif plan.laws[spec.name] then
      local l = plan.laws[spec.name]
      slot, count = L:random_check(b, seeded(l.law, seed, l.index)), true
    else
      local r = plan.params[spec.name]
      slot = L:digest { { b:ptr(), b:nbytes() }, { r.ptr, r.nbytes } }
    end
    e.inputs[#e.inputs + 1] = { name = spec.name, slot = slot, count = count }
  end
  return e
end

-- The ledger slots evidence_enqueue takes at most.
local function evidence_slots(t, cand, scratch)
  local n = 2 * #t.inputs + 1
  for _ in pairs(cand) do n = n + 1 end
  for _ in pairs(scratch) do n = n + 1 end
  return n
end

-- The evidence read back (L was read) -> nil or status, text
local function evidence_read(L, t, e, where)
  for i = 1, #e.list do
    if L:u64(e.guards + i - 1) ~= 0 then
      local _, why = e.list[i]:check_guards()
      return "out_of_bounds", feedback.out_of_bounds(fmt("%s: %s", e.label[i], why or "guard zone changed"), where)
    end
  end
  for _, x in ipairs(e.inputs) do
    local moved
    if x.count then moved = L:u64(x.slot) > 0 else moved = L:u64(x.slot) ~= L:u64(x.slot + 1) end
    if moved then return "inputs_modified", feedback.inputs_modified(x.name, where, t.outputs[1].name) end
  end
end

-- The judge's ledger (km.buffer): a batch of checks' results on the device, read back with
-- one wait. Begun for n slots.
function Judge:ledger(n)
  self.ledger_ = self.ledger_ or buffer.ledger()
  return self.ledger_:begin(n)
end

-- After a candidate call on `seed`'s inputs: the guards and its inputs proven (drawn by a
-- law — a task's init rules, a problem file's plan — they are checked against it in one
-- read; otherwise drawn again into ref_in and compared), all read back with one wait.
-- -> the buffers the reference runs on (the candidate's own inputs where checked in place,
-- else ref_in), the plan | nil, status, text
function Judge:proven_inputs(st, sym, cand, ref_in, scratch, where, seed)
  local t = st.task
  local plan = self:input_plan(st, sym, cand)
  if not plan then self:pristine(t, sym, ref_in, seed) end
  local L = self:ledger(evidence_slots(t, cand, scratch))
  local e = evidence_enqueue(L, t, cand, ref_in, scratch, plan, seed)
  local ok, rs, rmsg = wait_status(L:read())
  if not ok then return nil, rs, feedback.launch(rs, rmsg, where) end
  local es, etext = evidence_read(L, t, e, where)
  if es then return nil, es, etext end
  return plan and inputs_of(t, cand) or ref_in, plan
end

-- The task's input and output dtypes, in order: part of a kept reference result's key.
local function io_dtypes(t)
  local d = {}
  for _, list in ipairs { t.inputs, t.outputs } do for _, spec in ipairs(list) do d[#d + 1] = spec.dtype end end
  return concat(d, ",")
end

-- Compares the outputs; -> nil, or status, text, failed output name, the check rows.
-- result_of(name, got, want, opts): the compare's table (default compare.allclose's; a
-- batch's reads a ledger's).
local function compare_outputs(t, outs, ref_io, dims, where, later, checks, si, seed, fresh, result_of)
  for _, spec in ipairs(t.outputs) do
    local tol = t.tolerance[spec.dtype]
    local opts = { atol = tol.atol, rtol = tol.rtol, poison = true }
    local r = result_of and result_of(spec.name, outs[spec.name], ref_io[spec.name], opts)
      or compare.allclose(outs[spec.name], ref_io[spec.name], opts)
    local check = { shape = si, seed = seed, fresh = fresh or nil, output = spec.name, ok = r.ok, mismatches = r.mismatches, n = r.n,
      max_abs = r.max_abs, max_rel = r.max_rel, unwritten = r.unwritten, nan = r.nan, inf = r.inf }
    if checks then checks[#checks + 1] = check end
    if not r.ok then
      check.first = r.first
      local status, text = feedback.mismatch(spec.name, r, tol, dims[spec.name] or {}, where, later)
      return status, text, spec.name
    end
  end
end

----------------------------------------------------------------------------------------
-- stage 2: verify — every shape x seeds; the candidate runs before the reference, so no
-- reference result exists while candidate code runs

function Judge:verify(st, run, v, opts)
  local t = st.task
  local nseeds = opts.seeds or 3
  local budget = opts.budget or 1e6
  -- The timed shape's last trial comes last: the candidate's call just before its timing is
  -- at the timed shape, so that call is the timing's warm-up (its module loaded, its scratch
  -- of the timed shape allocated; Judge:time_run) and no warm-up call of its own is needed.
  -- With one seed the timed shape stays first (a kernel wrong everywhere is told about the
  -- shape the model was asked for) and the timing makes its own warm-up call.
  local order = {}
  for si = 1, #t.shapes do
    for seed = 1, nseeds do
      if not (si == 1 and seed == nseeds and nseeds > 1) then order[#order + 1] = { si, seed } end
    end
  end
  if nseeds > 1 then order[#order + 1] = { 1, nseeds } end
  for _, trial in ipairs(order) do
    local si, seed = trial[1], trial[2]
    local sym = t.shapes[si]
    -- a problem file's held-out shape (km.kbtask) is never named with its sizes: feedback
    -- goes to the model, and a kernel that knows them could hard-code them too
    local hidden = t.heldout and t.heldout.shape == si
    local where = hidden and fmt("the held-out shape, seed %d", seed)
      or fmt("shape %d %s, seed %d", si, task_mod.fmt_shape(sym), seed)
    local failed_at = { shape = si, seed = seed, sym = not hidden and sym or nil, heldout = hidden or nil }
    -- Each shape's last trial draws its inputs from a seed of the judge's private
    -- generator, new in every evaluation (opts.fresh_trial = false: none, to reproduce a
    -- verdict exactly). The other trials' seeds are fixed: reproducible, and their CUDA
    -- reference results kept (Judge:trial_reference). A kernel that printed the fixed
    -- trials' inputs once and came back with their outputs written in (the timed calls'
    -- checks cover the timed shape only) still meets, at every shape, inputs it never saw.
    local fresh = seed == nseeds and opts.fresh_trial ~= false
    local trial_seed = fresh and rng(1 << 40) or (opts.seed_base or 1000) + si * 101 + seed
    failed_at.fresh = fresh or nil -- a failure there is not reproduced by judging again
    local cand, ref_in, dims = self:trial_io(t, sym, trial_seed)
    local ref_io
    local function done(status, text, extra)
      self.pool:put_all(cand, true); self.pool:put_all(ref_in, true)
      if ref_io then for _, spec in ipairs(t.outputs) do self.pool:put(ref_io[spec.name]) end end
      extra = extra or {}
      extra.failed_at = extra.failed_at or failed_at
      return status, text, extra
    end
    run.state.poison = true
    local okc, cs, cmsg = call_launch(self, run, cand, sym, budget)
    local outs = okc and cs
    if okc then okc, cs, cmsg = sync_status() end
    if not okc then
      if cs == "crashed" then self.pool:drop(false) return cs, feedback.launch(cs, cmsg, where), { failed_at = failed_at, context_lost = true } end
      if cs == "wrong_shape" then return done(cs, cmsg .. " (at " .. where .. ")") end
      return done(cs, feedback.launch(cs, cmsg, where))
    end
    local ts, ttext = self:truth_check(st, where)
    if ts then return done(ts, ttext) end
    local ref_src, es, etext = self:proven_inputs(st, sym, cand, ref_in, run.state.scratch, where, trial_seed)
    if not ref_src then return done(es, etext) end
    local rs, rmsg
    -- torch's cached blocks keep this trial's reference results until verify ends (Judge:eval
    -- empties them then, whatever the outcome): the candidate's next trials have other
    -- seeds, whose results these are not, and no trial's seed comes again in this evaluation.
    -- A CUDA reference's results come from host memory after the first candidate
    local key = not fresh and concat({ si, trial_seed, task_mod.fmt_shape(sym), io_dtypes(t) }, "|") or nil
    -- the fastest reference known right here; its results left in torch's cached blocks are
    -- for a seed of the private generator, which no later call gets (as the timed checks')
    local fast = fresh and si == 1 and st.fast_ref or nil
    if fast then
      ref_io, rs, rmsg = self:run_reference(st, ref_src, dims, sym, fast, true)
    else
      ref_io, rs, rmsg = self:trial_reference(st, ref_src, dims, sym, key)
    end
    if not ref_io and rs == "inputs_modified" then return done(rs, rmsg) end
    if not ref_io then
      if rs == "crashed" then self.pool:drop(false) return verdict.ERROR, "the task's reference failed at " .. where .. ": " .. tostring(rmsg), { context_lost = true } end
      return done(verdict.ERROR, "the task's reference failed at " .. where .. ": " .. tostring(rmsg))
    end
    if not st.checked then
      for _, spec in ipairs(t.outputs) do
        local why = degenerate(ref_io[spec.name], spec)
        if why then return done(verdict.ERROR, fmt("task rejected: the reference output '%s' is degenerate at %s (%s)", spec.name, where, why)) end
      end
      st.checked = true
    end
    if si == 1 and seed == 1 and opts.timing ~= false then self:try_fast_reference(st, ref_src, ref_io, dims, sym) end
    local judged = setmetatable(outs, { __index = cand })
    local later = si > 1 and "shape" or seed > 1 and "seed" or nil
    local n0 = #v.checks
    local ms, mtext, mname = compare_outputs(t, judged, ref_io, hidden and {} or dims, where, later, v.checks, si, seed, fresh)
    if fast then for i = n0 + 1, #v.checks do v.checks[i].reference = "pytorch_eager" end end
    if ms then
      failed_at.output = mname
      return done(ms, mtext)
    end
    done()
  end
end

-- A task's reference run once on its first shape set (inputs from `seed`), its buffers
-- handed back and, for a PyTorch model, the model released: does the reference run here?
-- (kmrun tasks check, bench/kernelbench_refs.lua). -> nil | why it does not, and true when
-- the context was lost with it (nothing more can run in this process).
function Judge:try_reference(t, seed)
  local ok, why = pcall(function()
    local st, serr = self:task_state(t)
    if not st then return serr end
    local sym = t.shapes[1]
    local cand, ref_in, dims = self:trial_io(t, sym, seed or 1)
    self:pristine(t, sym, ref_in, seed or 1)
    local ref_io, rs, rmsg = self:run_reference(st, ref_in, dims, sym)
    self.pool:put_all(cand, true); self.pool:put_all(ref_in, true)
    if ref_io then for _, o in ipairs(t.outputs) do self.pool:put(ref_io[o.name]) end end
    return not ref_io and (tostring(rs) .. ": " .. tostring(rmsg)) or nil
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

----------------------------------------------------------------------------------------
-- stage 3: measure — what is timed is verified

local SUMMARY_FIELDS = { "median", "mean", "p25", "p75", "min", "n", "n_extra", "warmup_calls", "stop", "rel_noise", "mode",
  "sm_clock_mhz", "clock_moved", "sm_clock_start_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz", "energy_j",
  "energy_unavailable", "checked_calls", "last_checked_after", "check_lines", "cached" }
-- The protocol key of a timing: a fresh result holds km.timing's protocol table, a summary
-- or a record read from disk the key alone.
local function protocol_of(r) return r and (type(r.protocol) == "table" and r.protocol.key or r.protocol) end

-- A timing summary: the fields above and the protocol's key; and where a gate opened by its
-- timeout (km.timing: the work waited for the GPU while it was enqueued, and the rest of the
-- run went ungated, so host gaps may be inside some samples), gate_timeouts and gated, so
-- such a number says so wherever it is kept.
local function summary(r)
  if not r then return nil end
  local s = {}
  for _, k in ipairs(SUMMARY_FIELDS) do s[k] = r[k] end
  s.protocol = protocol_of(r)
  if (tonumber(r.gate_timeouts) or 0) > 0 then s.gate_timeouts, s.gated = r.gate_timeouts, r.gated end
  return s
end

-- The timing gate's page (km.timing; docs/timing.md, "The gate") is host memory mapped into
-- the device, so a kernel that learned its address can write it: open every later gate at
-- once (a baseline timed after it holds the host's launch gaps, and a speedup over it grows)
-- or hide a timeout. km.timing checks it against what the host wrote at every timing's start,
-- gates and end, puts it back and voids the timing (GATE_TAMPERED); timing.gate_check() does
-- the same between timings and counts every write found in this process. A write found after
-- the evaluation's candidate first ran (self.gate_mark: the count then) is the candidate's:
-- inputs_modified, kept in self.fault like a change to the reference's state.
local GATE_TAMPERED = "GATE_TAMPERED"

local function gate_text(where)
  return fmt("Your kernel wrote kmrun's timing gate (host memory mapped into the GPU; found changed %s). "
    .. "A kernel may write only its outputs and its scratch buffers.", where)
end

-- nil, or "inputs_modified", feedback when writes to the gate's page were found since the
-- candidate first ran (checking the page now, and putting it back).
function Judge:gate_fault(where)
  if not self.gate_mark then return nil end
  local n = timing.gate_check()
  if n == self.gate_mark then return nil end
  self.gate_mark = n
  local text = gate_text(where)
  self.fault = self.fault or { "inputs_modified", text }
  return "inputs_modified", text
end

-- The options every timing of an evaluation is taken with (time_run's): their protocol key
-- is part of every cached timing's key, so a number is divided only by one timed the same way.
-- At least 10 samples (nvbench's minimum; km.timing's own default is 20), then the noise
-- rule: the timings the judge took in `make demo` met the 0.2% target long before 20
-- (docs/eval.md, "Adaptive sampling"), and every timed call costs a refresh and a flush.
-- The median is then known to 0.5% (one relative standard error; opts.target): nvbench's
-- default max-noise. At km.timing's 0.2%, nine noisy candidates of `make demo` (launch-bound
-- starters, 1-2% jitter per call) took 23-82 samples each and 48% of the measure stage
-- (docs/eval.md, "Adaptive sampling"); a speedup of two medians so known is within about 0.7%.
M.TARGET = 0.005
-- One warm-up call (and at least km.timing's 1 ms of them) before the samples: the kernel
-- has just run in verify (its module loaded, the clocks up) and cold mode flushes L2 before
-- every sample anyway. Side by side in one run (bench/RESULTS.md round 9, run AQ: eight
-- tasks' starters, evaluations alternating 3 and 1 warm-up calls), the medians moved by a
-- geomean of 1.0005 (each task within 0.3%) and the measure stage fell from 2.12x to 1.89x
-- the counted kernel time: the two warm-up calls more were the GPU's work and nothing else.
-- A baseline is timed the same way (compiled ahead, its first calls made before: Judge:baselines).
-- Since round 11 that call is the candidate's last verify call where verify ended at the timed
-- shape (Judge:verify, Judge:time_run: km.timing's `warmed`); the protocol is the same.
M.WARMUP = 1
-- And no least warm-up time (km.timing's warmup_ms; its own default is 1 ms): the 1 ms made a
-- kernel of microseconds warm up with many calls, each with its refresh, for no number. Side
-- by side in one run (bench/RESULTS.md round 10, run AW: measure_profile --warmup 1,1/0, the
-- eight tasks' evaluations alternating), the medians moved by a geomean of 0.9998 (each task
-- within 0.4%) and the measure stage fell from 1.93x to 1.85x the counted kernel time.
M.WARMUP_MS = 0
-- timing_gc: km.timing's gc ("defer", its default: the collector runs inside a timing and
-- finalizers wait for its end; "stop": no collection inside, the old way); not part of the
-- protocol: it decides nothing a timing measures.
local function time_opts(opts)
  return { mode = opts.mode or "cold", max_ms = opts.max_ms or 2000, min_samples = opts.min_samples or 10,
    target = opts.target or M.TARGET, warmup = opts.warmup or M.WARMUP, warmup_ms = opts.warmup_ms or M.WARMUP_MS,
    gc = opts.timing_gc }
end
M.time_opts = time_opts

-- How a timing's calls are checked (Judge:time_run). By default every timed call is: a
-- check waits for the device and runs the reference, so a kernel that reads %globaltimer
-- sees the longer gap after a checked call (and the ledger's and the reference's writes in
-- memory). Were only some calls checked, it could count them and know when the rest are
-- not; with all of them checked there is nothing to learn, and no cheat on a timed call
-- escapes except in the output lines a check does not read (check_lines, below).
-- check_first = m < min_samples checks a uniform draw of m of the first min_samples calls
-- and every later call 1 in check_every: a kernel that cannot tell which calls are checked
-- and cheats on k of n escapes with probability C(n-k, m) / C(n, m) (M.escape), and its
-- gain on the median is bounded by the stop rule (M.cheat_gain: fast on k = 5, 6, 7 of 10
-- calls, at most 0.84%, 1.7%, 2.2%); one that counts the checks by their gaps escapes
-- whenever the draw's m checks came early, with the same bound on its gain. Such a rule is
-- for side-by-side runs, not for verdicts a dataset keeps (docs/security.md).
M.CHECK_FIRST = 1
M.CHECK_EVERY = 1
function M.check_first(m, min_samples)
  if m == nil then return math.max(1, math.ceil(min_samples * M.CHECK_FIRST - 1e-9)) end
  if math.type(m) ~= "integer" or m < 1 or m > min_samples then
    error(fmt("check_first: an integer in 1..min_samples (%d) expected, got %s", min_samples, tostring(m)), 0)
  end
  return m
end

-- A timing's check decisions, sample by sample: picker(k) for k = 1, 2, ... in order -> whether
-- the k-th sample's call is checked: `first` of the first min_samples (each draw takes the
-- next call with probability checks left / calls left: every m-subset equally likely), then
-- 1 in `every`. each = true: every call 1 in `every`, the min_samples-th always.
function M.check_picker(min_samples, first, every, each)
  local left_calls, left_checks = min_samples, first
  return function(k)
    if each then return k == min_samples or rng(every) == 1 end
    if k > min_samples then return rng(every) == 1 end
    local yes = rng(left_calls) <= left_checks
    left_calls = left_calls - 1
    if yes then left_checks = left_checks - 1 end
    return yes
  end
end

-- The probability that a kernel cheating on k of n calls escapes m checks drawn without
-- replacement among them: C(n-k, m) / C(n, m).
function M.escape(n, k, m)
  local p = 1
  for i = 0, m - 1 do p = p * math.max(0, n - k - i) / (n - i) end
  return p
end

-- The largest relative gain on its median a kernel can have from being fast on k of the n
-- samples of a timing that stopped by the noise rule at n (target: the median's relative
-- standard error, M.TARGET): its fast calls all at one time f (lower quartiles only raise the
-- spread), the others at the honest time, f as low as the rule still allows (a bisection on
-- timing.rel_noise, the rule's own statistic). 1 where the rule allows any f (the
-- interquartile range lies among the fast calls: k >= 8 of 10).
function M.cheat_gain(n, k, target)
  target = target or M.TARGET
  local function samples(f)
    local s = {}
    for i = 1, n do s[i] = i <= k and f or 1 end
    return s
  end
  local quantile = require("km.report_metrics").quantile
  local function median(f)
    local s = samples(f)
    table.sort(s)
    return quantile(s, 0.5)
  end
  if k <= 0 then return 0 end
  local tiny = 1e-12
  if timing.rel_noise(samples(tiny)) <= target then return 1 - median(tiny) end
  local lo, hi = tiny, 1 -- rel_noise(lo) > target >= rel_noise(hi)
  for _ = 1, 60 do
    local mid = (lo + hi) / 2
    if timing.rel_noise(samples(mid)) <= target then hi = mid else lo = mid end
  end
  return 1 - median(hi)
end

-- Each check of a timed call reads one 128-byte line in `check_lines` (a power of two;
-- 1: every line) of the inputs it proves and of the outputs it compares, in each block of
-- that many lines, at an offset drawn after the call ran; a buffer keeps at least 4096
-- lines read (KM_LINES_MIN: all of one under 512 KiB). A wrong run of 2 x check_lines - 1
-- lines holds a whole block and is read whatever the draw; a fraction w of wrong lines
-- scattered over L lines escapes a check with probability about exp(-w * L / check_lines).
-- Work a kernel skips shows as wrong lines (stale outputs of the previous call, or poison),
-- so what escapes is work of a few lines: a few lines' worth of time. Verify's trials read
-- everything; check_lines = 1 makes the timed calls' checks do so too.
M.CHECK_LINES = 16
function M.lines_shift(n) -- check_lines -> its log2; raises
  n = n or M.CHECK_LINES
  local shift = math.type(n) == "integer" and n >= 1 and math.log(n, 2) or nil
  if not shift or shift ~= math.floor(shift) or shift > 20 then
    error("check_lines: a power of two from 1 to 2^20 expected, got " .. tostring(n), 0)
  end
  return math.floor(shift)
end

-- The timed-call check options (check_draw, check_first, check_every, check_lines) ->
-- draw_each, first, every, shift; raises on a bad one (Judge:eval, before anything runs).
function M.check_opts(opts)
  if opts.check_draw ~= nil and opts.check_draw ~= "each" and opts.check_draw ~= "subset" then
    error("check_draw: \"subset\" or \"each\" expected, got " .. tostring(opts.check_draw), 0)
  end
  local each = opts.check_draw == "each"
  local every = opts.check_every or (each and 2 or M.CHECK_EVERY)
  if math.type(every) ~= "integer" or every < 1 then
    error("check_every: a positive integer expected, got " .. tostring(every), 0)
  end
  return each, M.check_first(opts.check_first, time_opts(opts).min_samples), every, M.lines_shift(opts.check_lines)
end

-- Times `run` on the timed shape. Every call — warm-up and timed — gets fresh input values
-- (same buffers, a new unpredictable seed) and poisoned outputs, both outside the timed
-- window; with check = true, a random selection of timed calls and the last one are
-- re-verified afterwards against the reference run on that call's inputs drawn again from
-- its seed, with guard zones, inputs and outputs checked. A launch that caches results, keeps a call counter, or
-- skips work when its buffers come back is caught on whichever call it cheats.
-- -> timing result, nil | nil, status, text
function Judge:time_run(st, run, sym, opts, check)
  local t = st.task
  local budget = opts.budget or 1e6
  -- Which timed calls are checked (M.check_picker): `first` of the first min_samples, drawn
  -- without replacement, then 1 in `every`; each check reads one line in 2^shift of the
  -- inputs and outputs (check_lines; all of a buffer under 512 KiB)
  local draw_each, first, every, shift = M.check_opts(opts)
  local seed = (opts.seed_base or 1000) + 7777
  -- refresh() draws every call's inputs; a PyTorch model bound below may run once on them
  -- (Problem:bind, to learn its outputs): those are drawn first
  local cand, ref_in, dims = self:trial_io(t, sym, seed, not run.torch)
  local bound, ref_outs -- a PyTorch reference bound for the checks (reference() below)
  -- outputs of this timing's calls are for seeds of the judge's private generator
  local function release()
    self.pool:put_all(cand, true); self.pool:put_all(ref_in, true)
    if ref_outs then self.pool:put_all(ref_outs, true) end
  end
  run.state.poison = false
  local failure -- { status, text } of a failed timed check
  local checking, calls, checked, cur_seed = false, 0, 0, seed
  -- the next call's inputs, drawn while a check's results come back (check_now): its seed
  local drawn
  local last_checked = 0 -- the call whose check passed last
  -- seeds from the judge's private generator: the inputs of later calls cannot be
  -- predicted (and precomputed) by an untimed first call. Outputs are poisoned sparsely (a
  -- 128-byte line in every 4 KiB, drawn from the seed): the rest holds the previous call's
  -- outputs, wrong for these inputs, so a check still finds any output left unwritten
  -- unless it does not depend on the inputs, and such a run of 4 KiB or more meets poison.
  -- A full poison wrote as many bytes as the kernel's outputs on every call.
  local function draw()
    local s = rng(1 << 40)
    self:fill_inputs(t, sym, cand, s, true)
    return s
  end
  -- Whatever can be judged is poisoned alike: the io outputs and every scratch buffer the
  -- launch could hand back as an output (one of an output's dtype and size; M.returnable),
  -- so a returned scratch buffer does not keep the previous call's values.
  local function refresh()
    cur_seed, drawn = drawn or draw(), nil
    for _, spec in ipairs(t.outputs) do cand[spec.name]:poison { sparse = cur_seed } end
    for _, b in ipairs(M.returnable(run.state.scratch, t.outputs, dims)) do b:poison { sparse = cur_seed } end
  end
  -- The reference on a checked call's inputs -> io (inputs and its outputs), kept (io is
  -- this timing's: not for the pool) | nil, status, message. A PyTorch reference (a problem
  -- file's, or a task's fast one) on inputs drawn by a plan is bound once to the candidate's
  -- input buffers and outputs of its own, for the whole timing (Problem:bind): each check is
  -- then the model alone, not the buffers described and wrapped again; its outputs are
  -- ranges of torch's memory ({ ptr, nbytes }, compared in place) where it could keep them.
  local fast = self:check_reference(st, sym)
  local function reference(ref_src, plan)
    local which = fast or st.ref
    if not (plan and which.torch) then return self:run_reference(st, ref_src, dims, sym, fast, true, true) end
    if not bound then
      local io = inputs_of(t, cand)
      ref_outs = {}
      for _, spec in ipairs(t.outputs) do
        ref_outs[spec.name] = self.pool:get(spec.dtype, dims[spec.name])
        io[spec.name] = ref_outs[spec.name]
      end
      local berr
      bound, berr = which.torch:bind(io, { variant = "eager" })
      if not bound then return nil, "launch_error", berr end
      bound = { run = bound, io = io }
    end
    -- the model's outputs compared where torch put them (a copy into ref_outs read and wrote
    -- them again: 3% of the candidates' timings, bench/RESULTS.md run AT); those it cannot
    -- keep are copied into ref_outs
    local ok, kept = bound.run("keep")
    st.truth_dirty = true -- a forward may move the model's buffers (running statistics)
    if not ok then return nil, "launch_error", kept end
    local io = setmetatable({}, { __index = bound.io })
    for _, spec in ipairs(t.outputs) do
      local at = (kept or {})[spec.name]
      if at then io[spec.name] = { ptr = at, nbytes = ref_outs[spec.name]:nbytes() } end
    end
    return io, nil, nil, true
  end
  local last_outs = {}
  -- A timed call's check is one batch: the truth's digests, the guards and inputs, the
  -- reference on the inputs (checked in place, or drawn again), and the compares are all
  -- enqueued behind the call, their results into the judge's ledger, and read back with one
  -- wait, before any candidate code runs again; then judged in that order. (One wait, not
  -- one per read: the GPU runs the whole check while the host prepares it.) The truth's
  -- digests are enqueued before anything reads it (the parameters handed to the reference,
  -- the reference itself): a change is found, restored and failed here, whatever ran on it.
  -- A check inside the timing (ahead = true) draws the next call's inputs into the
  -- candidate's buffers behind the batch, before the wait: the GPU draws them while the host
  -- judges the batch (it idled 0.23 ms a check, bench/RESULTS.md run AS). Nothing read after
  -- the wait is in those buffers (the ledger's slots; on a failure, the outputs' examples and
  -- the guards); the outputs are poisoned by the call's own refresh, after this returns.
  local function check_now(where, ahead)
    checked = checked + 1
    local L, tslot, e, ref_io, rs, rmsg, kept, slots, seal, lines
    local judged = setmetatable(copy(last_outs), { __index = cand })
    local okq, qerr = pcall(function()
      L = self:ledger(evidence_slots(t, cand, run.state.scratch) + #t.outputs * compare.SLOTS
        + 2 * (st.truth and #st.truth.ranges or 0) + 64)
      tslot = self:truth_enqueue(st, L)
      local plan = self:input_plan(st, sym, cand)
      if not plan then self:fill_inputs(t, sym, ref_in, cur_seed, true) end -- after the truth's digests
      -- the sample of lines is drawn now, after the call was enqueued
      lines = shift > 0 and { key = rng(1 << 62), shift = shift } or nil
      e = evidence_enqueue(L, t, cand, ref_in, run.state.scratch, plan, cur_seed)
      ref_io, rs, rmsg, kept = reference(plan and inputs_of(t, cand) or ref_in, plan)
      seal = self:seal_enqueue(st, L) -- the truth after the reference ran: sealed with the batch
      if not ref_io then return end
      slots = {}
      for _, spec in ipairs(t.outputs) do
        local tol = t.tolerance[spec.dtype]
        slots[spec.name] = compare.enqueue(judged[spec.name], ref_io[spec.name],
          { atol = tol.atol, rtol = tol.rtol, poison = true, lines = lines }, L)
      end
    end)
    local function put_back()
      if ref_io and not kept then for _, spec in ipairs(t.outputs) do self.pool:put(ref_io[spec.name], true) end end
    end
    if not L then -- no batch begun: the device says why, or the judge does
      local oks, ss, sm = sync_status()
      failure = oks and { verdict.ERROR, "re-verifying a timed call failed: " .. tostring(qerr) } or { ss, feedback.launch(ss, sm, where) }
      return false
    end
    -- the one wait: the candidate's call, then the check (a fault in the call shows here)
    -- (outputs the launch code handed back in an input's buffer: no draw ahead, their
    -- examples are read after the wait)
    if ahead then
      for _, spec in ipairs(t.outputs) do
        local o = judged[spec.name]
        for _, ispec in ipairs(t.inputs) do
          local x = cand[ispec.name]
          if o:ptr() < x:ptr() + x:nbytes() and x:ptr() < o:ptr() + o:nbytes() then ahead = false end
        end
      end
    end
    local okr, cs, cmsg = wait_status(L:read(ahead and function() drawn = draw() end or nil))
    if not okr then
      failure = { cs, feedback.launch(cs, cmsg, where) }
      if cs ~= "crashed" then put_back() end
      return false
    end
    local ts, ttext = self:truth_read(st, L, tslot, where)
    if ts then failure = { ts, ttext } put_back() return false end
    if seal then self:seal_read(st, L, seal) end
    if not okq then failure = { verdict.ERROR, "re-verifying a timed call failed: " .. tostring(qerr) } put_back() return false end
    local es, etext = evidence_read(L, t, e, where)
    if es then failure = { es, etext } put_back() return false end
    if not ref_io and rs == "inputs_modified" then failure = { rs, rmsg } return false end
    if not ref_io then
      failure = { verdict.ERROR, "the task's reference failed while re-verifying a timed call: " .. tostring(rmsg) }
      return false
    end
    local ms, mtext = compare_outputs(t, judged, ref_io, dims, where, "timed", nil, nil, nil, nil,
      function(name, a, b, o) return compare.result(a, b, o, L, slots[name]) end)
    -- no poison on the way back: outputs for inputs of an unpredictable seed
    put_back()
    if ms then failure = { ms, mtext } return false end
    last_checked = calls
    return true
  end
  -- The first warm-up call is the first call: scratch is allocated there, outside the timed
  -- windows, and a failure shows at the warm-up's wait. (A separate first call before the
  -- timing, waited for on its own, was a fourth untimed call of every timing: 7% of the
  -- candidates' GPU time in measure_profile's timings, bench/RESULTS.md round 8.) Graph mode
  -- captures before it warms up, and an allocation cannot be captured: a first call there.
  local topts = time_opts(opts)
  -- The protocol's warm-up call is the launch's last call where that was at this shape (a
  -- candidate's: verify's last trial, Judge:verify): its module is loaded, its scratch has
  -- this shape's sizes, the clocks are up, and cold mode flushes L2 before every sample. A
  -- call of its own was 10% of the candidates' GPU time in measure_profile (bench/RESULTS.md
  -- run AX); side by side, the medians did not move (round 11).
  local last = run.state and run.state.last_sym
  if last and opts.warmed ~= false and topts.mode ~= "graph" and task_mod.fmt_shape(last) == task_mod.fmt_shape(sym) then
    topts.warmed = 1
  end
  if topts.mode == "graph" then
    refresh()
    local ok0, s0, m0 = call_launch(self, run, cand, sym, budget)
    if ok0 then ok0, s0, m0 = sync_status() end
    if not ok0 then
      if s0 == "crashed" then self.pool:drop(false) else release() end
      return nil, s0, "The kernel failed while being timed: " .. tostring(m0)
    end
  end
  -- Which calls are checked: `first` of the first min_samples calls, a uniform draw without
  -- replacement made call by call (the kernel cannot tell which, nor which call is the last:
  -- the stop is decided after the sample is read), then each later call with probability
  -- 1/every (every one by default); where the timing did not stop at min_samples, its last
  -- call too (after the timing where it was not checked in place). M.check_first,
  -- M.escape and M.cheat_gain say what that guarantees.
  -- check_draw = "each": every call 1/every, the call at min_samples and the last always
  -- (the scheme before round 13, for side-by-side runs).
  local sampled, likely_last = 0, topts.min_samples
  local pick = M.check_picker(topts.min_samples, first, every, draw_each)
  local hooks = {
    before = function(phase)
      refresh()
      calls = calls + 1
      if phase == "sample" then sampled = sampled + 1 end
      checking = check and phase == "sample" and pick(sampled)
    end,
    after = function(phase)
      if checking and not check_now(fmt("timed call %d", calls), sampled ~= likely_last) then
        return nil, "a timed call failed its check", "CHECK"
      end
    end,
  }
  local timed = function()
    local okl, s2, m2 = call_launch(self, run, cand, sym, budget)
    if not okl then failure = { s2, "The kernel failed while being timed: " .. tostring(m2) } return nil, tostring(m2), s2 end
    last_outs = s2
  end
  if run.torch then -- PyTorch (eager, or compiled): the model's own work, bound to these buffers once
    local bound, berr = run.torch:bind(cand, { variant = run.variant })
    if not bound then release() return nil, verdict.ERROR, "binding the PyTorch reference failed: " .. tostring(berr) end
    timed = function()
      local okb, e = bound(false)
      if not okb then failure = { verdict.ERROR, "the PyTorch reference failed while timed: " .. tostring(e) } return nil, tostring(e) end
    end
  end
  topts.before, topts.after = hooks.before, hooks.after
  local okt, res, err, code = pcall(timing.time, timed, topts)
  if not okt then
    -- raised, not returned: an error met in a hook's own work, such as the driver's sticky
    -- error at the next input refresh after a kernel faulted. The context says whether it
    -- was the device (the candidate's crash, as a worker's context check would say); any
    -- other error is raised again as it was.
    local oks, ss, sm = sync_status()
    if oks then error(res, 0) end
    failure = failure or { ss, "The kernel failed while being timed: " .. tostring(sm) }
    res = nil -- the failure says what happened: err and code are not read
  end
  -- a timed PyTorch run (a baseline): torch's cache may still hold its last outputs, back to
  -- the driver before a candidate runs
  if run.torch then require("km.kernelbench").empty_cache() end
  -- the last timed call is re-verified where the timing did not stop at min_samples and its
  -- own check has not (then the candidate's inputs hold a draw for a call that was not made)
  if res and check and last_checked ~= calls and (draw_each or sampled ~= topts.min_samples) then
    res.last_checked_after = true
    if not check_now(fmt("the last timed call (%d)", calls)) then res = nil end
  end
  -- torch's cached blocks may still hold the checks' reference results: they stay there. They
  -- are for this timing's seeds, drawn from the judge's private generator, which no later
  -- call gets (so are the pool's buffers that held them, Pool:put); handing the blocks back
  -- (cudaFree) waited for the whole device, and the next check allocated them again
  if not res then
    -- a fault in a call shows at the next wait (the warm-up's, a sample's): its code says so
    local status = failure and failure[1] or code ~= GATE_TAMPERED and verdict.launch_status(code) or nil
    if status == "crashed" then self.pool:drop(false) else release() end
    if failure then return nil, failure[1], failure[2] end
    if code == GATE_TAMPERED then -- before any candidate code (a baseline): no one's here to blame
      local gs, gtext = self:gate_fault("during a timing")
      return nil, gs or verdict.ERROR, gtext or tostring(err)
    end
    return nil, status, "The kernel failed while being timed: " .. tostring(err)
  end
  res.checked_calls = check and checked or nil
  res.check_lines = check and shift > 0 and (1 << shift) or nil
  release()
  return res
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
    local okl, s2, m2 = call_launch(self, run, cand, sym, opts.budget or 1e6)
    if not okl then return nil, tostring(m2), s2 end
  end, { mode = "warm", energy = true, max_ms = opts.energy_ms or 600 })
  self.pool:put_all(cand, true); self.pool:put_all(ref_in, true)
  if code == GATE_TAMPERED then self:gate_fault("during the energy pass") end
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

----------------------------------------------------------------------------------------
-- PyTorch baselines: eager and torch.compile on the timed shape, each read from the disk
-- cache (km.baseline: once per task content, shape, precision, GPU, torch version and mode)
-- or measured here, with the candidate's protocol (fresh inputs, poisoned outputs, cold L2),
-- and kept there. A KernelBench problem's eager model is its reference (st.prob); a task
-- with a CUDA reference and a reference.py loads that as a second model, with the task's
-- own input and output names. opts.compile_mode: torch.compile's mode (default KM_COMPILE_MODE,
-- else km.kernelbench's; "off": none); opts.eager == false: no eager baseline for a task whose reference is CUDA.


-- The fields of a cached timing's key (km.baseline.key) for `sym`: what was timed (`source`:
-- the texts that decide it), the task's own task.lua (a problem file has none), the shape,
-- precision, GPU, the software that ran it (`torch`: torch's or NVRTC's version), `mode`
-- (which timing; the caller may set it later) and the timing protocol.
local function timing_key(self, st, sym, opts, source, torch, mode)
  local t = st.task
  return { source = source, task = t.dir and not t.reference.pytorch and task_mod.read_file(t.dir .. "/task.lua") or "",
    shape = task_mod.fmt_shape(sym), precision = t.reference.precision or "fp32",
    device = tostring(self.device.uuid or self.device.name), torch = torch, mode = mode,
    timing = timing.protocol_key(time_opts(opts)) }
end

-- The task's PyTorch model: st.prob, or its reference.py loaded now. -> problem | nil, why
function Judge:torch_model(st)
  if st.prob then return st.prob end
  local t = st.task
  if st.torch_model ~= nil then return st.torch_model or nil, st.torch_why end
  local kb = require "km.kernelbench"
  local names = { inputs = {}, outputs = {} }
  for i, spec in ipairs(t.inputs) do names.inputs[i] = spec.name end
  for i, spec in ipairs(t.outputs) do names.outputs[i] = spec.name end
  local prob, err = kb.load(t.reference.pytorch_file, { device = self.torch_device or "cuda", names = names })
  if prob then
    -- names (and the inputs' shapes forward checks buffers against) are fixed by a first spec
    local okspec, serr = prob:spec()
    if not okspec then prob:release() prob, err = nil, serr end
  end
  st.torch_model, st.torch_why = prob or false, err and tostring(err)
  return prob, st.torch_why
end

local function baseline_record(res, extra)
  local r = summary(res)
  for k, x in pairs(extra or {}) do r[k] = x end
  return r
end

-- -> { eager = record?, compile = record?, errors = { eager = why?, compile = why? } } | nil
-- (no PyTorch reference). A record is the timing summary plus cached (true when read from
-- disk) and, for compile, mode (used), asked, failed (modes that did not compile, why) and
-- compile_seconds.
function Judge:baselines(st, sym, opts)
  local t = st.task
  local source = t.reference.pytorch and t.reference.source_text or t.reference.pytorch_text
  local mode = require("km.baseline").compile_mode(opts.compile_mode)
  local want_eager = st.prob or opts.eager ~= false -- a problem's eager model is its reference
  if not source or not (want_eager or mode ~= "off") then return nil end
  local tk = task_mod.fmt_shape(sym)
  st.baselines = st.baselines or {}
  if st.baselines[tk] then return st.baselines[tk] end
  local out = { errors = {} }
  st.baselines[tk] = out
  st.wants_torch = true -- the task's PyTorch model is in use here (Judge:try_fast_reference)
  self:truth_check(st, "the baselines") -- measured on the model as loaded, whatever ran before
  st.truth_dirty = true                 -- and what they run may move its buffers
  local kb = require "km.kernelbench"
  -- the records are looked up before the model is loaded: torch's version is read without
  -- importing torch, so baselines kept on disk do not wait for an import started ahead
  local version, verr = kb.version()
  if not version then out.errors.eager = "PyTorch is not available: " .. tostring(verr) return out end
  local prob, perr -- the model, loaded when a baseline must be measured, or why it is not
  local function model()
    if prob == nil and not perr then
      local okt, i = kb.available()
      if not okt then perr = "PyTorch is not available: " .. tostring(i)
      else
        local p, why = self:torch_model(st)
        if p then prob = p else perr = "the task's reference.py does not load: " .. tostring(why) end
      end
    end
    return prob
  end
  local baseline = require "km.baseline"
  local parts = timing_key(self, st, sym, opts, source, tostring(version))
  local list, held = {}, false
  if want_eager then list[#list + 1] = "eager" end
  if mode ~= "off" then list[#list + 1] = "compile" end
  for _, which in ipairs(list) do
    parts.mode = which == "eager" and "eager" or "compile:" .. mode
    local okk, key = pcall(baseline.key, parts)
    local rec, gone
    if okk then rec, gone = baseline.get(key) end
    if rec then
      rec.cached = true
    elseif gone then
      out.errors[which] = gone .. " (kept from an earlier run: " .. tostring(baseline.dir()) .. "/" .. key .. ".json)"
    elseif not model() then
      out.errors[which] = perr
    else
      if self.on_hold then self.on_hold(which) held = true end -- one-time set-up: a pool gives it its own time
      local run = { torch = prob, variant = which, state = fresh_state() }
      local extra, err = nil, nil
      if which == "compile" then
        -- where a precompiler compiles this run's tasks ahead (km.precompile), its result first
        local precompile = require "km.precompile"
        local pre = precompile.before_compile(precompile.entry(t, mode))
        local precompiled -- true: compiled ahead; false: the precompiler had it and failed
        if pre and pre.by == "precompiler" then precompiled = (pre.result and pre.result.ok) == true end
        local io, ref_in = self:trial_io(t, sym, (opts.seed_base or 1000) + 4242)
        local c, cerr, ccode = prob:compile(io, { mode = mode })
        self.pool:put_all(io); self.pool:put_all(ref_in)
        if c then
          extra = { mode = c.mode, asked = c.asked, failed = c.failed, compile_seconds = c.seconds,
            compile_cache_hits = c.fx_hits, compile_cache_misses = c.fx_misses, checked_against_eager = c.checked,
            precompiled = precompiled,
            precompile_wait_seconds = pre and pre.waited or nil }
        else
          err = cerr
          -- every mode failed: kept, so no new worker spends minutes on it again (not an
          -- interrupted or timed-out attempt)
          if okk and ccode == "COMPILE_FAILED" then baseline.put_unavailable(key, cerr) end
        end
      end
      if not err then
        local res, s, e = self:time_run(st, run, sym, opts, false)
        if res then rec = baseline_record(res, extra) else err = tostring(s) .. ": " .. tostring(e) end
      end
      if rec then
        rec.measured_at, rec.device_name, rec.torch = os.date("!%Y-%m-%dT%H:%M:%SZ"), self.device.name, version
        if okk then baseline.put(key, rec) end
        rec.cached = false
      else
        out.errors[which] = err
      end
    end
    out[which] = rec
  end
  if held then self.on_hold(nil) end
  return out
end

-- A timing that does not change between runs (the CUDA reference's, the starter's), read
-- from the baselines' disk cache (km.baseline) or measured by `measure` and kept there,
-- keyed by what was timed (`source`: the texts that decide it), the task, shape, precision,
-- GPU, NVRTC and the timing protocol. -> summary record | nil, status, message
function Judge:cached_timing(st, sym, opts, what, source, measure)
  local baseline = require "km.baseline"
  local parts = timing_key(self, st, sym, opts, source, "nvrtc " .. tostring(self.device.nvrtc), what)
  local okk, key = pcall(baseline.key, parts)
  local rec = okk and baseline.get(key) or nil
  if rec then rec.cached = true return rec end
  local res, s, e = measure()
  if not res then return nil, s, e end
  rec = baseline_record(res)
  rec.measured_at = os.date("!%Y-%m-%dT%H:%M:%SZ")
  if okk then baseline.put(key, rec) end
  rec.cached = false
  return rec
end

function Judge:measure(st, run, v, opts)
  local t = st.task
  local sym = copy(t.shapes[1])
  local tk = task_mod.fmt_shape(sym)
  local bl = self:baselines(st, sym, opts)
  local ref_t = st.times[tk]
  if not ref_t and st.prob then -- a PyTorch reference: its time is the eager baseline
    ref_t = bl and bl.eager
    if not ref_t then return verdict.ERROR, "timing the reference failed: " .. tostring(bl and bl.errors.eager) end
    st.times[tk] = ref_t
  elseif not ref_t then
    local s, e
    ref_t, s, e = self:cached_timing(st, sym, opts, "cuda_reference", t.reference.source_text .. "\0" .. t.reference.launch_text,
      function() return self:time_run(st, st.ref, sym, opts, false) end)
    if not ref_t then return verdict.ERROR, "timing the reference failed (" .. tostring(s) .. "): " .. tostring(e) end
    st.times[tk] = ref_t
  end
  local cand_t, cs, cmsg = self:time_run(st, run, sym, opts, true)
  if not cand_t then return cs, cmsg, { context_lost = cs == "crashed" or nil } end
  v.kernel_seconds = (cand_t.mean or cand_t.median) * cand_t.n / 1e3 -- the candidate's own timed GPU time
  local base_t = st.base_times[tk]
  if base_t == nil and opts.baseline ~= false and t.starter then
    local scand = task_mod.starter(t)
    local ptext = {}
    for k, x in pairs(scand.params or {}) do ptext[#ptext + 1] = tostring(k) .. "=" .. tostring(x) end
    table.sort(ptext)
    base_t = self:cached_timing(st, sym, opts, "starter", scand.source .. "\0" .. scand.launch .. "\0" .. concat(ptext, ","),
      function()
        local srun = prepare(self, scand.source, scand.launch, scand.params, "starter")
        if not srun then return nil end
        srun.task_outputs, srun.st = t.outputs, st
        local r = self:time_run(st, srun, sym, opts, false)
        free_scratch(srun)
        return r
      end)
    st.base_times[tk] = base_t or false
  end
  -- how each kernel was launched and the occupancy that gives
  for name, l in pairs(run.state.launches) do
    local a = v.kernels[name]
    local f = a and run.mod:get(name)
    if f and math.type(l.block) == "integer" then
      local okb, blocks, frac = pcall(f.occupancy, f, l.block, l.shared)
      if okb then a.block, a.shared_dynamic, a.blocks_per_sm, a.occupancy = l.block, l.shared, blocks, frac end
    end
  end
  -- device memory the candidate used on the timed shape: its buffers plus its scratch
  local io_bytes = 0
  for _, list in ipairs { t.inputs, t.outputs } do
    for _, spec in ipairs(list) do
      io_bytes = io_bytes + task_mod.numel(task_mod.shape_of(spec, sym)) * task_mod.DTYPE_BYTES[spec.dtype]
    end
  end
  v.scratch_bytes = run.state.scratch_bytes
  v.memory = { io_bytes = io_bytes, scratch_bytes = run.state.scratch_peak, peak_bytes = io_bytes + run.state.scratch_peak }
  self._floor = self._floor or timing.floor()
  v.timing = { candidate = summary(cand_t), reference = summary(ref_t), baseline = summary(base_t or nil), shape = sym,
    floor_ms = self._floor and self._floor.median }
  -- energy costs a pass of a few hundred ms (NVML's counter steps every ~100 ms): asked for
  -- by `kmrun eval` (default) and `--energy` in runs and sweeps
  if opts.energy then
    local e0 = wall()
    local j, why = self:energy(st, run, sym, opts)
    v.energy_seconds = wall() - e0
    v.timing.candidate.energy_j, v.timing.candidate.energy_unavailable = j, not j and why or nil
  else
    v.timing.candidate.energy_j = nil
    v.timing.candidate.energy_unavailable = "not measured (opts.energy; --energy)"
  end
  M.speedups(v, cand_t, { cuda_reference = not st.prob and ref_t or nil, baselines = bl, starter = base_t })
  -- the roofline from the judge's own shape table, never one launch code could touch
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

----------------------------------------------------------------------------------------
-- the evaluation

-- Judges one candidate. Never raises for a candidate's faults; returns the verdict.
function Judge:eval(t, cand, opts)
  opts = opts or {}
  M.check_opts(opts) -- a bad option is the caller's error: raised before anything runs
  local t0, w0 = os.clock(), wall()
  -- where an evaluation's time goes: task (loading it; a PyTorch model's first load includes
  -- torch's import), prepare (compile and load), baselines, verify, measure — seconds each
  local stages, mark = {}, w0
  local function stage(name)
    local now = wall()
    stages[name] = now - mark
    mark = now
  end
  local st, terr = self:task_state(t)
  if not st then
    return verdict.finish(verdict.new { task = type(t) == "table" and t.name or t }, verdict.ERROR, terr)
  end
  stage("task")
  t = st.task
  local dev = self.device
  local v = verdict.new { task = t.name, candidate = cand.name, params = cand.params,
    device = { name = dev.name, arch = dev.arch, uuid = dev.uuid, driver = dev.driver_version, nvrtc = dev.nvrtc } }
  self.fault, self.gate_mark = nil, nil
  local run -- the candidate's launch, once prepared: its scratch is freed when the evaluation ends
  local function finish(status, text, extra)
    -- the end of every evaluation: the truth checked (a change made by the last call, or by
    -- the energy pass, is the candidate's too) and every scratch buffer it obtained freed
    if not (extra and extra.context_lost) and status ~= "crashed" then
      pcall(self.gate_fault, self, "at the end of the evaluation")
      pcall(self.truth_check, self, st)
      if self.fault and status ~= "timeout" then status, text = self.fault[1], self.fault[2] end
    end
    if run then pcall(free_scratch, run) end
    self.fault, self.gate_mark = nil, nil
    verdict.finish(v, status, text, extra)
    v.eval_cpu_s = os.clock() - t0
    v.eval_seconds = wall() - w0
    v.stage_seconds = stages
    return v
  end
  local status, msg, info
  run, status, msg, info = prepare(self, cand.source or "", cand.launch or "", cand.params or {}, "kernel")
  stage("prepare")
  if not run then return finish(status, msg, { compile_log = info and info.log }) end
  run.task_outputs, run.st = t.outputs, st
  v.compile_log, v.compile_ms, v.cached_compile, v.kernels = run.prog.log, run.prog.ms, run.prog.cached, run.attrs
  -- the PyTorch baselines (once per task and shape; usually from the disk) before any of
  -- the candidate's code runs: nothing it leaves behind can slow them
  -- a write to the timing gate's page left from before (a crashed candidate's, whose end was
  -- not checked) is put back before the baselines are timed: they would fail on it
  timing.gate_check()
  if opts.timing ~= false then self:baselines(st, copy(t.shapes[1]), opts) stage("baselines") end
  -- the candidate's code runs from here: a write to the gate's page found later is its
  self.gate_mark = timing.gate_check()
  local s, text, extra = self:verify(st, run, v, opts)
  -- the verified trials' seeds are the same for every candidate of the task: their reference
  -- results, which torch's cached blocks held through verify, go back to the driver now
  if st.prob and not (extra and extra.context_lost) then pcall(require("km.kernelbench").empty_cache) end
  stage("verify")
  if s then return finish(s, text, extra) end
  if opts.timing == false then
    return finish("correct", fmt("Correct on %d shapes x %d seeds (not timed).", #t.shapes, opts.seeds or 3))
  end
  s, text, extra = self:measure(st, run, v, opts)
  stage("measure")
  if v.energy_seconds then stages.measure, stages.energy = stages.measure - v.energy_seconds, v.energy_seconds end
  if s then return finish(s, text, extra) end
  return finish("correct", feedback.correct(#t.shapes, opts.seeds or 3, v))
end

return M
