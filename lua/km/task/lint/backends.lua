-- km.task.lint.backends — where km.task.lint's reference runs: with a GPU, the judge in this
-- process (gpu_backend, with its tile kernel); without one, a PyTorch reference on the CPU in
-- host memory (cpu_backend); M.backend picks one for this machine.
--
-- State: nothing between calls. A backend (B) holds its judge, or Python and km.kernelbench,
-- and its tile function (the GPU's compiles its kernel at first use); a session (s) holds one
-- task's loaded reference until B.close. Adds M.backend to km.task.lint's table.
local M = require "km.task.lint.reasons"
local bytes_of = require("km.task.lint.sizes").bytes_of
local compare = require "km.compare"
local task_mod = require "km.task"
local json = require "km.json"

local fmt, concat = string.format, table.concat
local ipairs, pairs, tostring, pcall = ipairs, pairs, tostring, pcall

----------------------------------------------------------------------------------------
-- backends: where the reference runs. Each opens a task (-> session | nil, why, CODE; CODE a
-- key of M.MACHINE when this machine cannot run the reference at all), runs the
-- reference on a shape and seed (-> { outs, ins } | nil, why, "SKIP" when it was not tried),
-- and makes, compares and frees the values checked.

-- sample_estimate's inputs: each input named in rows.names keeps its first rows.keep of
-- rows.rows rows, and the rest of it becomes copies of them. tile(buf, keep_bytes) does it
-- to one buffer in place.
local function tile_rows(bufs, rows, tile)
  for name in pairs(rows.names) do
    local b = bufs[name]
    tile(b, b:nbytes() // rows.rows * rows.keep)
  end
end

-- The GPU's tile: one kernel, compiled at first use, that writes byte (or 4-byte word) i past
-- the prefix as the prefix's i mod keep, on kmrun's stream (before the reference's run).
local TILE_SOURCE = [[
extern "C" __global__ void km_lint_tile1(unsigned char *p, unsigned long long keep, unsigned long long n) {
  for (unsigned long long i = keep + (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) p[i] = p[i % keep];
}
extern "C" __global__ void km_lint_tile4(unsigned int *p, unsigned long long keep, unsigned long long n) {
  for (unsigned long long i = keep + (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) p[i] = p[i % keep];
}
]]
local function gpu_tiler()
  local fns
  return function(b, keep)
    local n = b:nbytes()
    if keep <= 0 or keep >= n then return end
    if not fns then
      local cuda = require "km.cuda"
      local prog, log = require("km.nvrtc").compile(TILE_SOURCE, { arch = cuda.device().arch, name = "lint_tile.cu" })
      if not prog then error("the sample's tile kernel does not compile: " .. tostring(log), 0) end
      local mod = assert(cuda.load(prog))
      fns = { [1] = assert(mod:get("km_lint_tile1")), [4] = assert(mod:get("km_lint_tile4")) }
    end
    local w = (keep % 4 == 0 and n % 4 == 0) and 4 or 1
    local blocks = math.min(((n - keep) // w + 255) // 256, 4096)
    local ok, err = fns[w]:launch({ grid = blocks, block = 256 }, b, keep // w, n // w)
    if not ok then error("the sample's tile kernel: " .. tostring(err), 0) end
  end
end

-- With a GPU: the judge in this process (as `kmrun tasks check`).
local function gpu_backend(judge, device)
  local buffer = require "km.buffer"
  local B = { where = "cuda", device = device }
  local tile = gpu_tiler()
  function B.open(t)
    local ok, err = judge:open(t)
    if not ok then return nil, err end
    return { t = t }
  end
  -- rows (sample_estimate's): the reference's inputs tiled from a prefix of their rows
  function B.run(s, sym, seed, rows)
    local ok, res, why = pcall(judge.reference, judge, s.t, sym, seed, rows and function(ins) tile_rows(ins, rows, tile) end)
    if not ok then return nil, tostring(res) end
    return res, why
  end
  function B.release(_, r) judge:release(r) end
  function B.tile(b, keep) tile(b, keep) return b end -- in place: every byte past keep, byte i mod keep
  function B.compare(a, b, tol) return compare.allclose(a, b, { atol = tol.atol, rtol = tol.rtol }) end
  function B.zeros(like) return buffer.new(like:dtype(), like:shape()):zero() end
  function B.const(like, v) return buffer.new(like:dtype(), like:shape()):fill(v) end
  function B.sample(b, n) return b:to_table(n) end
  function B.free(b) b:free() end
  function B.time(s, sym) return judge:time_reference(s.t, sym) end
  function B.close(s) return judge:forget(s.t.dir) end
  return B
end

-- Without a GPU: a PyTorch reference on the CPU, in host memory; values are byte strings
-- (km.compare compares them in C by dtype).

-- The bytes of host buffer h, as a Lua string.
local function host_bytes(python, h)
  return assert(python.eval(fmt("__import__('ctypes').string_at(%d, %d)", h:ptr(), h:nbytes())))
end

-- The CPU's tile: doubling copies of what is already tiled (ctypes.memmove). -> tile(h, keep)
local function host_tiler(python)
  return function(h, keep)
    local ptr, n = h:ptr(), h:nbytes()
    if keep <= 0 then return end
    local done = keep
    while done < n do
      local c = math.min(done, n - done)
      assert(python.eval(fmt("__import__('ctypes').memmove(%d, %d, %d)", ptr + done, ptr, c)))
      done = done + c
    end
  end
end

-- A session for a task's reference.py: at shape set sym, the file with that set's symbols
-- assigned after it, loaded once per shape set.
local function reference_file_session(kb, t)
  local r = t.reference
  local s = { t = t, probs = {}, by_shape = {} }
  local names = { inputs = {}, outputs = {} }
  for i, spec in ipairs(t.inputs) do names.inputs[i] = spec.name end
  for i, spec in ipairs(t.outputs) do names.outputs[i] = spec.name end
  function s.prob_of(sym)
    local key = task_mod.fmt_shape(sym)
    if s.by_shape[key] then return s.by_shape[key] end
    local keys = {}
    for k in pairs(sym) do keys[#keys + 1] = k end
    table.sort(keys)
    local lines = { r.pytorch_text, "\n# a shape set of " .. t.name .. " (km.task.lint)" }
    for _, k in ipairs(keys) do lines[#lines + 1] = fmt("%s = %s", k, tostring(sym[k])) end
    local path = os.tmpname() .. ".py"
    local f = assert(io.open(path, "wb"))
    f:write(concat(lines, "\n"), "\n")
    f:close()
    local prob, err = kb.load(path, { device = "cpu", names = names })
    os.remove(path)
    if not prob then return nil, err end
    s.by_shape[key] = prob
    s.probs[#s.probs + 1] = prob
    return prob
  end
  return s
end

-- Opens t on the CPU: its PyTorch reference, or its reference.py per shape set.
-- -> session | nil, why, CODE
local function cpu_open(kb, t)
  local ok, why = kb.available()
  if not ok then return nil, "PyTorch is not available here: " .. tostring(why), "NO_PYTORCH" end
  local r = t.reference
  if r.pytorch then
    local prob, err = kb.load(r.pytorch, { device = "cpu", precision = r.precision })
    if not prob then return nil, err end
    return { t = t, prob_of = function() return prob end, probs = { prob } }
  end
  if not r.pytorch_file then return nil, "a CUDA-only reference runs only on a GPU", "NO_GPU" end
  return reference_file_session(kb, t)
end

-- Runs the reference of session s at sym and seed on the CPU; rows (sample_estimate's): the
-- inputs tiled from a prefix of their rows, and r.ins is not kept. -> r | nil, why, CODE
local function cpu_run(kb, python, tile, s, sym, seed, rows)
  local t = s.t
  local nb = bytes_of(t, sym)
  if nb > M.CPU_MAX_BYTES then
    return nil, fmt("%.0f MiB of buffers, over the CPU's limit of %d MiB", nb / 2^20, M.CPU_MAX_BYTES >> 20), "SKIP"
  end
  local prob, perr = s.prob_of(sym)
  if not prob then return nil, perr end
  local hosts, ins, params, outs_h = {}, {}, {}, {}
  local function free_all() for _, h in pairs(hosts) do h:free() end end
  for _, spec in ipairs(t.inputs) do
    local h, err = kb.host_buffer(spec.dtype, task_mod.shape_of(spec, sym))
    if not h then free_all() return nil, err end
    hosts[spec.name] = h
    if spec.role == "parameter" then params[spec.name] = h else ins[spec.name] = h end
  end
  for _, spec in ipairs(t.outputs) do
    local h, err = kb.host_buffer(spec.dtype, task_mod.shape_of(spec, sym))
    if not h then free_all() return nil, err end
    hosts[spec.name], outs_h[spec.name] = h, h
  end
  local ok, err = prob:make_inputs(seed, ins)
  if ok and rows then ok, err = pcall(tile_rows, ins, rows, tile) end
  if ok and next(params) then ok, err = prob:write_params(params) end
  if ok then ok, err = prob:forward(hosts) end
  if not ok then free_all() return nil, tostring(err) end
  local r = { ins = {}, outs = {}, samples = {} }
  for _, spec in ipairs(t.inputs) do
    if not rows then r.ins[spec.name] = { dtype = spec.dtype, bytes = host_bytes(python, hosts[spec.name]) } end
  end
  for _, spec in ipairs(t.outputs) do
    r.outs[spec.name] = { dtype = spec.dtype, bytes = host_bytes(python, outs_h[spec.name]),
      sample = outs_h[spec.name]:to_table(1 << 16) }
  end
  free_all()
  return r
end

-- The CPU backend: opens and runs through cpu_open and cpu_run; values are byte strings.
local function cpu_backend()
  local kb = require "km.task.kernelbench"
  local python = require "km.python"
  local B = { where = "cpu" }
  local tile = host_tiler(python)
  function B.open(t) return cpu_open(kb, t) end
  function B.run(s, sym, seed, rows) return cpu_run(kb, python, tile, s, sym, seed, rows) end
  function B.release() end
  function B.tile(v, keep) -- a new value: every byte past keep, byte i mod keep
    local n = #v.bytes
    if keep <= 0 or keep >= n then return v end
    return { dtype = v.dtype, bytes = v.bytes:sub(1, keep):rep(n // keep + 1):sub(1, n) }
  end
  function B.compare(a, b, tol)
    if #a.bytes ~= #b.bytes or a.dtype ~= b.dtype then return { ok = false } end
    return compare.allclose(a.bytes, b.bytes, { atol = tol.atol, rtol = tol.rtol, dtype = a.dtype })
  end
  function B.zeros(like) return { dtype = like.dtype, bytes = ("\0"):rep(#like.bytes) } end
  function B.const(like, v)
    local n = #like.bytes // task_mod.DTYPE_BYTES[like.dtype]
    local h = assert(kb.host_buffer(like.dtype, { n }))
    assert(python.call("km_kb_bridge", "host_fill", json.encode(json.array { h.id, v })))
    local out = { dtype = like.dtype, bytes = host_bytes(python, h) }
    h:free()
    return out
  end
  function B.sample(v) return v.sample or {} end
  function B.free() end
  function B.time() return nil, "timing needs a GPU" end
  function B.close(s) for _, p in ipairs(s.probs) do p:release() end end
  return B
end

-- The backend for this machine: the judge on the GPU where there is one (unless opts.cpu),
-- else the CPU. -> backend, nil | backend, "why there is no GPU"
function M.backend(opts)
  opts = opts or {}
  if not opts.cpu then
    local okj, judge, why = pcall(function() return require("km.judge").new() end)
    if okj and judge then
      local d = require("km.cuda").device()
      return gpu_backend(judge, d and d.name or "GPU")
    end
    return cpu_backend(), okj and tostring(why or "no GPU") or tostring(judge)
  end
  return cpu_backend(), "--cpu"
end

return M
