-- km.judge.launch — preparing a launch and calling it.
--
-- Owns: a prepared launch (`run`: prog, mod, fn, attrs, label, k, task_outputs, st, and its
-- scratch state below), the `k` table launch code sees, the views it gets of buffers, and
-- what it hands back. The scratch state of a launch:
--   scratch        slot -> buffer: k.scratch's buffers, kept across the launch's calls
--   scratch_i      the slot the next k.scratch takes (reset before every call)
--   scratch_bytes  bytes held in scratch now
--   scratch_peak   the most bytes held at once
--   scratch_limit  k.scratch's budget (opts.scratch_bytes, 8 GiB)
--   poison         poison every k.scratch buffer it hands out (verify), not only new ones
--   launches       kernel name -> { block, shared } of its first launch (occupancy)
--   launch_list    the current call's launches in order (km.judge.same_work's entries)
--   error_code     the code of the last failed launch (the judge classifies by code)
--   last_sym       the shape the last call ran at (its scratch has these sizes)
-- The candidate is hostile (DESIGN.md): launch code sees buffers only as views that die
-- after each call, gets fresh copies of the shape table, never sees a reference result;
-- what it returns is checked in C, and nothing it wrote is called outside the sandbox.
local nvrtc = require "km.nvrtc"
local cuda = require "km.cuda"
local buffer = require "km.buffer"
local task_mod = require "km.task"
local sandbox = require "km.sandbox"
local verdict = require "km.verdict"
local feedback = require "km.feedback"
local pool = require "km.judge.pool"
local same_work = require "km.judge.same_work"

local fmt, concat = string.format, table.concat
local pairs, ipairs, type, tostring, pcall, error, rawget = pairs, ipairs, type, tostring, pcall, error, rawget
local alloc = pool.alloc
-- what an error names of a value launch code passed: never an address (sandbox.text)
local text = sandbox.text

local M = {}

function M.copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end
local copy = M.copy

-- The scratch state of a launch that has not run yet (a PyTorch run's: nothing allocated).
function M.fresh_state() return { scratch = {}, launches = {}, scratch_bytes = 0, scratch_peak = 0 } end

-- k.scratch(dtype, shape [, { zero = true }]) for a launch with scratch state `state`.
-- Scratch buffers are the launch's own (kept across its calls so timing excludes
-- allocation), poisoned on verification runs unless asked for zeroed, and handed out as
-- views like everything else.
local function scratch_fn(state)
  return function(dtype, shape, o)
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
      if not okb then error("k.scratch(" .. text(dtype) .. "): " .. sandbox.no_addresses(text(nb)), 2) end
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
    -- whatever the call (km.judge.timed poisons the ones it keeps before every timed call)
    if type(o) == "table" and rawget(o, "zero") then b:zero()
    elseif state.poison or new then b:poison() end
    return buffer.view(b)
  end
end

-- A launch configuration as the judge reads it: grid, block and shared copied out of the
-- candidate's table with rawget (a metatable of its own is never consulted), so what is
-- launched is what the call's launch list records.
local function plain_cfg(cfg)
  local function dim(d)
    if type(d) ~= "table" then return d end
    return { rawget(d, 1), rawget(d, 2), rawget(d, 3) }
  end
  return { grid = dim(rawget(cfg, "grid")), block = dim(rawget(cfg, "block")), shared = rawget(cfg, "shared") }
end

-- k.<kernel>: a function of a launch configuration that returns the launcher.
local function kernel_fn(name, fn, state)
  return function(cfg)
    if type(cfg) ~= "table" then error("k." .. text(name) .. "{ grid = ..., block = ... }: expected a table, got " .. type(cfg), 2) end
    if rawget(cfg, "stream") ~= nil then
      error("k." .. text(name) .. ": launch code may not choose a stream; all work runs on the stream the evaluator times", 2)
    end
    cfg = plain_cfg(cfg)
    return function(...)
      local okl, msg, code = fn:launch(cfg, ...)
      if not okl then
        state.error_code = code -- the judge classifies by code, never by message text
        error(msg, 2)
      end
      local list = state.launch_list
      if list then list[#list + 1] = same_work.entry(name, cfg.grid, cfg.block, cfg.shared) end
      -- the first launch of each kernel: its configuration, for occupancy in the verdict
      if not state.launches[name] then
        local b = rawget(cfg, "block")
        local threads = type(b) == "table" and (rawget(b, 1) or 1) * (rawget(b, 2) or 1) * (rawget(b, 3) or 1) or b
        state.launches[name] = { block = threads, shared = rawget(cfg, "shared") or 0 }
      end
    end
  end
end

-- The `k` table a launch function sees (self: the judge, whose device it describes; mod: the
-- candidate's module, whose get(name) gives a kernel or nil, why). Exported for tests that
-- call its helpers with what hostile launch code passes (tests/lua/test_no_addresses.lua).
function M.make_k(self, mod, params, state)
  local dev = self.device
  local k = {
    params = params,
    device = { sm_count = dev.sm_count, arch = dev.arch, l2_size = dev.l2_size, warp_size = dev.warp_size,
      max_threads_per_block = dev.max_threads_per_block, max_shared_per_block = dev.max_shared_per_block,
      max_shared_per_block_optin = dev.max_shared_per_block_optin, max_threads_per_sm = dev.max_threads_per_sm,
      regs_per_sm = dev.regs_per_sm, max_shared_per_sm = dev.max_shared_per_sm },
  }
  k.cdiv = function(a, b) return (a + b - 1) // b end
  k.scratch = scratch_fn(state)
  local fns = {}
  k.set_shared = function(name, bytes)
    local fn = fns[name] or mod:get(name)
    if not fn then error("k.set_shared: no kernel named '" .. text(name) .. "'", 2) end
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
    return kernel_fn(name, fn, state)
  end })
end

-- Frees every scratch buffer a launch obtained (the end of its evaluation): its memory is
-- back before the next candidate or baseline runs, whenever Lua's collector would have run.
function M.free_scratch(run)
  for i, b in pairs(run.state.scratch) do
    if not b:freed() then b:free() end
    run.state.scratch[i] = nil
  end
  run.state.scratch_bytes = 0
  run.state.last_sym = nil
end

-- The NVRTC options a source is judged with. km.serve.pool compiles queued candidates in the
-- driver with these same options to warm the shared cache, so this is the one place
-- that says them: the two cannot drift apart (a drift would only cost cache misses).
function M.compile_opts(arch, params, label)
  return { arch = arch, defines = params, name = (label or "kernel") .. ".cu" }
end

-- A compiled launch: kernels module + launch function + its scratch state; or nil,
-- status, feedback, { log =, code = }.
function M.prepare(self, source, launch_src, params, label)
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
  run.k = M.make_k(self, mod, p, state)
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
  error(fmt("io.%s: the task has no buffer named '%s' (its buffers: %s)", text(name), text(name),
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

-- Trusted PyTorch work (a model's load, snapshot or forward) -> f()'s results. Out of
-- memory, f runs once more after the judge's idle buffers and torch's cached blocks went
-- back to the driver: at the largest problems the pool's idle buffers of earlier shapes can
-- hold what the model's weights or intermediates need (km.judge.pool does the same for the
-- judge's own allocations).
function M.with_room(self, f)
  local a, b = f()
  if a or not verdict.out_of_memory(b) then return a, b end
  self.pool:drop(true)
  require("km.task.kernelbench").empty_cache()
  return f()
end

-- A PyTorch reference (trusted) run on the real buffers: the model, its truth checked first.
local function call_torch(self, run, io, keep_cache)
  local st = self.tasks[run.task_dir]
  local moved, moved_text = self:truth_check(st)
  if moved then return false, moved, moved_text end
  local fopts = { empty_cache = not keep_cache, params = run.params, rows = run.rows }
  local ok, err = M.with_room(self, function() return run.torch:forward(io, fopts) end)
  if st then st.truth_dirty = true end -- its buffers (running statistics) may have moved
  if not ok then return false, "launch_error", err end
  return true, {}
end

-- Runs a prepared launch once on `io` (real buffers) with its own copy of `sym`.
-- Returns true, outs ({ name = buffer } the launch returned) or false, status, message.
-- Launch code sees fresh views (revoked when it returns) and a fresh shape table.
-- keep_cache: leave the reference's outputs in torch's cached blocks (a timed call's check,
-- on inputs from an unpredictable seed: no later call has them; a timing hands the blocks
-- back at its end). Otherwise they go back to the driver, out of reach of the next kernel.
function M.call_launch(self, run, io, sym, budget, keep_cache)
  if run.torch then return call_torch(self, run, io, keep_cache) end
  if run.st then self:seal_truth(run.st) end -- trusted code done: what candidate code meets
  self.truth_clean = nil -- candidate code runs: the next truth_check digests again
  run.state.scratch_i = 0
  run.state.error_code = nil
  run.state.launch_list = {} -- this call's launches (km.judge.same_work)
  run.state.last_sym = sym -- the shape its scratch now has (a timing's warm-up)
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
function M.wait_status(ok, msg, code)
  if ok then return true end
  return false, verdict.launch_status(code), msg
end
function M.sync_status() return M.wait_status(cuda.synchronize()) end

return M
