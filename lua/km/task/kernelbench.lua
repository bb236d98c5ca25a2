-- km.task.kernelbench — KernelBench problem files (class Model, get_inputs, get_init_inputs) as
-- kmrun sees them, run by PyTorch inside this process (km.python + km/task/kb_bridge.py).
--
--   local kb = require "km.task.kernelbench"
--   local ok, why = kb.available()                 -- Python and torch importable?
--   local prob, err, code = kb.load("19_ReLU.py", { precision = "fp32", device = "cuda" })
--   local s = prob:spec(seed)                       -- inputs, params, outputs: name, dtype, shape
--   prob:make_inputs(seed, io, { stream = s })      -- get_inputs() under the seed, into io.<in>
--   prob:write_params(io)                           -- the model's state_dict, into io.<param>
--   local plan = prob:refresh_plan(io)              -- the same without Python: laws and pointers
--   prob:forward(io, { stream = s })                -- the model; outputs into io.<out>
--   prob:forward(io, { params = true })             -- the same on io's nn.Parameters, not its own
--   prob:forward_exact(io)                          -- the model in float64 on io's inputs and state
--   local run = prob:bind(io, { stream = s }); run() -- the same, checked once (for timing)
--   prob:unbind()                                   -- what bind and its runs hold, dropped
--   prob:snapshot(); prob:truth(); prob:restore()   -- the reference's own state (km.judge)
--   prob:release()                                  -- also on __gc / __close
--
-- `io` maps names to buffers: km.Buffer on the GPU, kb.host_buffer on the CPU, or anything
-- with :ptr() :dtype() :shape(). Tensors are exchanged as DLPack views of those pointers:
-- nothing is copied between kmrun and torch. A stream is a km.Stream, an integer CUstream
-- or nil (km.cuda's current stream). Naming rules: docs/tasks.md; design: docs/pytorch.md.
--
-- Expected failures return nil, message, CODE: NO_PYTHON, NO_TORCH, NO_CUDA, ENOENT,
-- SYNTAX_ERROR, IMPORT_ERROR, NOT_A_PROBLEM, BAD_INPUTS, FORWARD_ERROR, BAD_OUTPUTS,
-- UNSUPPORTED_DTYPE, MISSING_BUFFER, WRONG_BUFFER, TIMEOUT (a call past its deadline: below),
-- INTERRUPTED, PROBLEM_ERROR; PYTHON_ERROR is a bug in the bridge (its traceback is the
-- message). Messages about a problem start with its path.
local python = require "km.python"
local json = require "km.json"
local progress = require "km.progress"
local timing = require "km.timing"

local type, pairs, ipairs, setmetatable, tostring, pcall = type, pairs, ipairs, setmetatable, tostring, pcall
local fmt = string.format

local M = {}

local version_seen -- torch's version read without importing it (M.version)
local BRIDGE = "km_kb_bridge"             -- the module name kb_bridge.py is imported under
local PRECISIONS = { fp32 = true, fp16 = true, bf16 = true }
M.COMPILE_MODE = "max-autotune-no-cudagraphs" -- torch.compile's mode for baselines by default

local state -- nil: not tried; { ok = true, info = ... } or { why, code }

-- km/task/kb_bridge.py beside this file, found through package.path as Lua modules are.
local function bridge_path()
  local pypath = package.path:gsub("%.lua", ".py")
  return package.searchpath("km.task.kb_bridge", pypath)
end

-- Every call into the bridge has a deadline (km.python's limit): a problem's calls its
-- kb.load timeout, others KM_PY_TIMEOUT (seconds) or DEFAULT_TIMEOUT. At least FLOOR[fn]:
-- importing torch can take a minute on a cold file system, and torch.compile's autotuning
-- has km.serve.pool's BASELINE_TIMEOUT. A call past it returns nil, "path: get_inputs() did not
-- return within 60 s", "TIMEOUT" (Ctrl-C during one: "INTERRUPTED").
M.DEFAULT_TIMEOUT = 60
local FLOOR = { torch_info = 120, warm_meta = 120, compile = 1800, precompile = 1800 }
local limits = {} -- problem id -> { timeout, label, path }, from kb.load until release

-- Seconds a call into PyTorch may take when its caller gave none.
function M.timeout()
  local s = tonumber(os.getenv("KM_PY_TIMEOUT") or "")
  return (s and s > 0) and s or M.DEFAULT_TIMEOUT
end

-- One bridge function under lim: Lua values in (as a JSON array), a Lua value out. The
-- bridge's {error, code} answer becomes nil, error, code.
local function call_within(lim, fn, ...)
  local args = json.array({ ... })
  if FLOOR[fn] and FLOOR[fn] > lim.timeout then lim = { timeout = FLOOR[fn], label = lim.label, path = lim.path } end
  local out, err, code = python.call(BRIDGE, fn, json.encode(args, { sort_keys = false }), lim)
  if not out then
    if lim.path and (code == "TIMEOUT" or code == "INTERRUPTED") then err = lim.path .. ": " .. err end
    return nil, err, code
  end
  local v, jerr = json.decode(out)
  if v == nil then return nil, "kb_bridge." .. fn .. ": " .. tostring(jerr), "PYTHON_ERROR" end
  if type(v) == "table" and v.error then return nil, v.error, v.code or "PROBLEM_ERROR" end
  return v
end

-- The same, under the limit of the problem whose id comes first, else the default's.
local function call(fn, ...)
  local id = ...
  local lim = limits[id] or { timeout = M.timeout(), label = "kb_bridge." .. fn }
  if fn == "release" then limits[id] = nil end
  return call_within(lim, fn, ...)
end

-- The bridge module in the embedded Python (which imports no torch of itself).
-- -> true | nil, why, code
local function load_bridge()
  local ok, why, code = python.available()
  if not ok then return nil, why, code end
  local path = bridge_path()
  if not path then return nil, "km/task/kb_bridge.py not found beside km/task/kernelbench.lua (package.path)", "ENOENT" end
  return python.import(path, BRIDGE)
end

-- true, info ({ version, cuda_version (nil: a CPU-only torch), python, executable })
-- | nil, why, code. The first call imports torch (seconds): told as km.progress's "torch".
function M.available()
  if not state then
    local done = progress.start("torch")
    local ok, why, code = load_bridge()
    if ok then ok, why, code = call("torch_info") end
    if not ok and code == "NO_TORCH" then
      -- the bridge named the Python it ran in; say how to name another
      local env = os.getenv("KM_PYTHON")
      why = why .. (env and ("; point KM_PYTHON (now " .. env .. ") at a python that has torch (docs/pytorch.md)")
        or "; set KM_PYTHON to a python that has torch (docs/pytorch.md)")
    end
    state = ok and { ok = true, info = ok } or { why = why, code = code }
    done(state.ok == true)
  end
  if state.ok then return true, state.info end
  return nil, state.why, state.code
end

-- Starts torch's import on a thread of its own (python.background), so that a GPU worker
-- goes on with CUDA work while it runs; whatever then needs torch (M.available, a model's
-- load) waits for that import to end (Python's import lock) instead of starting another.
-- torch's version (M.version: what keys the baselines kept on disk) is read first, on this
-- thread: asked while the import runs, it would wait for the interpreter's lock, which the
-- import holds while it loads torch's libraries (a warm worker's first evaluation waited
-- about 0.3 s for it in its baselines stage). -> true | nil, why
function M.import_ahead()
  if state then return true end -- imported already, or known not to be importable
  local ok, why, code = load_bridge()
  if not ok then return nil, why, code end
  pcall(M.version) -- (where it fails, the import ahead says why: M.available)
  return python.background(("import sys\nsys.modules[%q]._torch()\n"):format(BRIDGE), "kmrun: torch imported ahead")
end

-- Whether torch can be had without waiting: imported (or known not importable), or no
-- import was started ahead (M.available then imports as it always has); false only while an
-- import started by M.import_ahead still runs.
function M.ready()
  return state ~= nil or python.background_state() ~= "running"
end

-- torch's version as torch.__version__ gives it, without importing torch (its version.py
-- read by the bridge): what keys the baselines kept on disk can be known while an import
-- started ahead still runs. -> version | nil, why, code
function M.version()
  if state and state.ok then return state.info.version end
  if version_seen then return version_seen end
  local ok, why, code = load_bridge()
  if ok then ok, why, code = call("torch_version") end
  if not ok then return nil, why, code end
  version_seen = ok
  return ok
end

-- Hands torch's cached GPU blocks back to the driver, where torch is loaded at all (kmrun
-- needs the room: km.judge asks when an allocation of its own finds none). -> true
function M.empty_cache()
  if not (state and state.ok) then return true end
  return call("empty_cache") or true
end

-- The most bytes torch's allocator held in tensors since the last reset (reset = true: start
-- again from now), where torch is loaded; else 0.
function M.peak_memory(reset)
  if not (state and state.ok) then return 0 end
  return tonumber(call("peak_memory", reset == true)) or 0
end

-- Problem files that failed to load because PyTorch is not available all fail alike: one
-- line for them instead of one each. errors: a list of "PATH: why" strings (task.list's);
-- returns the others, and the line (nil when none failed so). Asks km.task.kernelbench whether
-- PyTorch is there only when a problem file is among the errors.
function M.fold_errors(errors)
  local any = false
  for _, e in ipairs(errors) do if tostring(e):find("%.py: ") then any = true break end end
  if not any then return errors end
  local ok, why = M.available()
  if ok then return errors end
  local kept, files = {}, {}
  local tail = ": " .. why
  for _, e in ipairs(errors) do
    local path = #e > #tail and e:sub(-#tail) == tail and e:sub(1, #e - #tail)
    if path then files[#files + 1] = path:match("[^/]+$") else kept[#kept + 1] = e end
  end
  if #files == 0 then return errors end
  local names = table.concat(files, ", ", 1, math.min(#files, 3)) .. (#files > 3 and fmt(" and %d more", #files - 3) or "")
  return kept, fmt("%s (%s): %s", #files == 1 and "1 KernelBench problem file" or (#files .. " KernelBench problem files"),
    names, why)
end

-- km.cuda's device as torch names it; nil, why when there is none.
local function kmrun_device()
  local okc, cuda = pcall(require, "km.cuda")
  if not okc then return nil, tostring(cuda) end
  local ok, why = cuda.available()
  if not ok then return nil, why end
  local d = cuda.device()
  return "cuda:" .. tostring(d and d.index or 0)
end

-- device as torch names it: "cuda" is km.cuda's device (kmrun_device); any other as it is.
local function torch_device(device)
  if device ~= "cuda" then return device end
  return kmrun_device()
end

-- The buffers a call needs, as the bridge reads them: name -> { ptr, dtype, shape }.
local function describe(io, level)
  if type(io) ~= "table" then error("buffers: a table of name -> buffer expected", level + 1) end
  local out = {}
  for name, b in pairs(io) do
    if type(name) == "string" then
      local okb = (type(b) == "table" or type(b) == "userdata") and b.ptr and b.dtype and b.shape
      if not okb then error(fmt("buffers.%s: a buffer (with :ptr(), :dtype(), :shape()) expected, got %s", name, type(b)), level + 1) end
      out[name] = { ptr = b:ptr(), dtype = b:dtype(), shape = json.array(b:shape()) }
    end
  end
  return json.object(out)
end

local function stream_of(opts)
  return python.stream_handle(opts and opts.stream)
end

-- ---- problems ----

local Problem = {}
Problem.__index = Problem

local function check(self)
  if not self.id then error("attempt to use a released km.task.kernelbench problem", 3) end
  return self.id
end

-- The problem's description for a seed: { name, path, seed, precision, device, init_args,
-- tolerance = { atol, rtol }, inputs, params, outputs }; each input/param/output is
-- { name, dtype (kmrun's), torch_dtype, shape } (params add key, kind); an input that is a
-- number is { name, scalar = value }. Names are fixed by the first call.
function Problem:spec(seed)
  local id = check(self)
  seed = seed or self.seed
  local s, err, code = call("spec", id, seed)
  if not s then return nil, err, code end
  return s
end

-- get_inputs() under torch.manual_seed(seed), made on the problem's device and cast to its
-- precision, each tensor written into io[name]. Returns { scalars = { name = value } }.
function Problem:make_inputs(seed, io, opts)
  local id = check(self)
  if math.type(seed) ~= "integer" then error("make_inputs: an integer seed expected", 2) end
  return call("make_inputs", id, seed, describe(io, 2), stream_of(opts), not (opts and opts.keep_cache))
end

-- The model on io's inputs; its outputs written into io's output buffers. Work is queued on
-- the stream (GPU): synchronize before reading the outputs from another stream.
-- opts.empty_cache: afterwards, torch's cached blocks (the outputs' values are still in
-- them) go back to the driver, out of reach of kernels that run next. opts.params: the model
-- computes with io's floating nn.Parameters (buffers named as spec's params of kind
-- "parameter"), not its own (km.judge's timed checks, whose parameters are perturbed).
-- opts.rows: inputs whose buffers differ from the spec in their first dimension only are
-- taken at their own shape (km.judge.rows: the reference on a sample of a task's rows).
function Problem:forward(io, opts)
  local id = check(self)
  return call("forward", id, describe(io, 2), stream_of(opts), opts and opts.empty_cache or false,
    opts and opts.params or false, opts and opts.rows or false)
end

-- The model in float64 on io's inputs and on the state in io's parameter buffers (each
-- floating tensor cast up), its outputs cast to their buffers' dtypes into io's output
-- buffers: the answer eager approximates (km.judge's second opinion where a candidate
-- missed eager's outputs). -> true | nil, error, code (a model that does not run in float64)
function Problem:forward_exact(io, opts)
  local id = check(self)
  return call("forward_exact", id, describe(io, 2), stream_of(opts))
end

-- A function that runs the model on io with no per-call checks or wrapping: io is checked
-- and wrapped once here (the model runs once to check the outputs). run(false) leaves the
-- outputs where torch put them (timing eager: the model's own work and nothing else);
-- run() copies them into io's output buffers; run("keep") -> true, { output name = device
-- address }: outputs of their buffer's shape and dtype, contiguous and not in an input's
-- memory, are kept by torch until the next run or bind and given by address (compared in
-- place: km.compare.enqueue's range), the others copied. Valid until the next bind or release.
-- opts.variant = "compile": the model as Problem:compile made it (default "eager").
-- opts.params: as forward's (eager only).
function Problem:bind(io, opts)
  local id = check(self)
  local ok, err, code = call("bind", id, describe(io, 2), stream_of(opts), opts and opts.variant or "eager",
    opts and opts.params or false)
  if not ok then return nil, err, code end
  local args = { [true] = json.encode(json.array { id, true }), [false] = json.encode(json.array { id, false }),
    keep = json.encode(json.array { id, "keep" }) }
  return function(copy)
    if not self.id then error("attempt to use a released km.task.kernelbench problem", 2) end
    local mode = copy == "keep" and "keep" or copy ~= false -- (not inline: Lua 5.4.4 miscompiles t[x ~= false])
    local out, e, c = python.call(BRIDGE, "run_bound", args[mode])
    if out == "true" then return true end
    if not out then return nil, e, c end
    local v = json.decode(out)
    if mode == "keep" and type(v) == "table" and type(v.kept) == "table" then return true, v.kept end
    return nil, type(v) == "table" and v.error or out, type(v) == "table" and v.code or "PROBLEM_ERROR"
  end
end

-- What bind and its run hold (the views of the bound buffers, the last run("keep")'s
-- outputs) dropped: their memory goes back to torch's cache. A later bind binds again.
function Problem:unbind()
  local id = check(self)
  return call("unbind", id)
end

-- torch.compile of the model, compiled now on io's inputs (inductor compiles on the first
-- call; two calls are made). opts.mode (default "max-autotune-no-cudagraphs"); where it
-- fails, opts.fallback (default "default"; false: none) is tried. -> { mode (used), asked,
-- seconds, failed = { "mode: why", ... } } | nil, message, COMPILE_FAILED. Then
-- bind(io, { variant = "compile" }) runs the compiled model.
function Problem:compile(io, opts)
  local id = check(self)
  opts = opts or {}
  local fallback = opts.fallback
  if fallback == nil then fallback = "default" end
  return call("compile_model", id, describe(io, 2), opts.mode or M.COMPILE_MODE, stream_of(opts), fallback or json.null)
end

-- torch.compile(model, opts.mode) compiled into inductor's caches without running anything
-- on the GPU (kb_bridge.precompile; km.task.precompile): the problem must be loaded on "meta".
-- opts.mode: "default" (default) or "reduce-overhead" (the max-autotune modes benchmark on
-- the GPU as they compile); opts.device: where the compiled graph would run, "cuda" (km.cuda's
-- device, default) or "cpu". -> { seconds, fx_hits, fx_misses } | nil, message, CODE
-- (GPU_WORK: inductor would have run work on the GPU; COMPILE_FAILED)
function Problem:precompile(opts)
  local id = check(self)
  opts = opts or {}
  local device, why = torch_device(opts.device or "cuda")
  if not device then return nil, tostring(why), "NO_CUDA" end
  return call("precompile", id, opts.mode or "default", device)
end

-- The first compile of a process (torch's one-time set-up for compiling, which copies to the
-- GPU), on a one-line function: km.task.precompile's, as its process starts. opts.device as
-- Problem:precompile's. -> { seconds } | nil, message, CODE
function M.precompile_warm_up(opts)
  local device, why = torch_device(opts and opts.device or "cuda")
  if not device then return nil, tostring(why), "NO_CUDA" end
  return call("precompile_warm_up", device)
end

-- The model's parameters and buffers (state_dict, non-persistent buffers too) into io.
function Problem:write_params(io, opts)
  local id = check(self)
  return call("write_params", id, describe(io, 2), stream_of(opts))
end

-- What make_inputs and write_params do, as a plan the judge replays without Python:
-- get_inputs() is run once, traced (in forked RNG state: torch's generators are left as they
-- were). -> { inputs = { name = { dist = "uniform" | "normal" | "int", a, b } }, params =
-- { name = { ptr, nbytes } }, scalars = { name = value } }: fill each input with uniform
-- [a, b), normal (mean a, std b) or integers in [a, b]; copy each param's ptr..ptr+nbytes
-- (the live state tensor's device memory, valid until release) into io[name]; scalars as
-- make_inputs returns them. Or { why = "..." } where get_inputs() is more than fresh draws
-- of torch.rand/randn/randint (docs/pytorch.md): call make_inputs and write_params each
-- time. io is checked as those two check it (MISSING_BUFFER, WRONG_BUFFER).
function Problem:refresh_plan(io)
  local id = check(self)
  return call("refresh_plan", id, describe(io, 2))
end

-- The storages the reference keeps on the GPU between calls (its parameters, buffers,
-- tensor attributes, module-level tensors): { { name, ptr, nbytes }, ... }. km.judge seals
-- them with keyed digests before candidate code runs and checks them before each use.
function Problem:truth()
  return call("truth", check(self))
end

-- Readies restore() before any candidate code runs (a problem file's held-out variant is
-- built now); nothing is copied. restore() builds the model (and its held-out variant) again
-- from the code and seed it was loaded from: the reference as loaded, in new storages.
-- -> { storages, bytes } (the truth's) | nil, message, code
function Problem:snapshot()
  return call("snapshot", check(self))
end

function Problem:restore()
  return call("restore", check(self))
end

-- Waits for the problem's device (torch.cuda.synchronize); nothing to do on the CPU.
function Problem:synchronize()
  return call("synchronize", check(self))
end

-- Drops the model and its module; idempotent. opts.empty_cache returns torch's cached
-- device memory to the driver.
function Problem:release(opts)
  local id = self.id
  if not id then return true end
  self.id = nil
  return call("release", id, opts and opts.empty_cache or false)
end

-- a finalizer inside a timing waits for its end (km.timing's gc = "defer"): releasing a model
-- is a Python call, and the host buffer's cudaFreeHost below waits for the device
local function release_quietly(self) if self.id then pcall(Problem.release, self) end end
Problem.__gc = function(self) if self.id then timing.finalize(self, release_quietly) end end
Problem.__close = release_quietly
Problem.__tostring = function(self)
  return fmt("km.task.kernelbench problem %s (%s, %s)%s", self.name or "?", self.precision, self.device,
    self.id and "" or " released")
end

-- kb.load(path, opts) -> problem | nil, message, CODE
-- opts: precision = "fp32" | "fp16" | "bf16" (default fp32); device = "cpu", "cuda" (km.cuda's
-- device), "cuda:N", an index, or "meta" (spec only: shapes with no memory and no compute) — by default km.cuda's device in a GPU worker (KM_DEVICE is
-- set), else the CPU: nothing here initializes CUDA unless asked (the driver process never
-- does); seed (default 42, KernelBench's: seeds the weights); tf32 (default false);
-- names = { inputs = {...}, outputs = {...} }: a task's own names for forward's inputs and
-- outputs, by position (a task's reference.py), instead of the naming rule's; sizes = { name =
-- integer, ... }: module-level integers set after the file ran (a task's reference.py at
-- another shape set: its shape symbols); timeout: seconds each call on the problem may take,
-- loading it included (default kb.timeout()); spec: the problem's spec made before (Problem:spec's
-- table, km.task.kbtask's on the meta device), whose names and shapes the problem takes instead
-- of running get_inputs() and forward for them, and whose held-out sizes build its held-out
-- variant (problem.adopted: true where it fit; where not, they are found by running the model).
function M.load(path, opts)
  if type(path) ~= "string" then error("kb.load: a path expected", 2) end
  opts = opts or {}
  local timeout = opts.timeout or M.timeout()
  if type(timeout) ~= "number" or timeout <= 0 then error("kb.load: timeout must be seconds (> 0), got " .. tostring(timeout), 2) end
  local precision = opts.precision or "fp32"
  if not PRECISIONS[precision] then error("kb.load: precision must be fp32, fp16 or bf16, got " .. tostring(precision), 2) end
  local okp, why, code = M.available()
  if not okp then return nil, path .. ": " .. why, code end
  local device = opts.device
  if math.type(device) == "integer" then device = "cuda:" .. device end
  if device == nil and os.getenv("KM_DEVICE") then device = "cuda" end -- a GPU worker
  local dwhy
  device, dwhy = torch_device(device or "cpu")
  if not device then return nil, path .. ": device cuda asked but " .. tostring(dwhy), "NO_CUDA" end
  local seed = opts.seed or 42
  local names = json.null
  if opts.names then
    names = json.object { inputs = json.array(opts.names.inputs or {}), outputs = json.array(opts.names.outputs or {}) }
  end
  -- the meta device's first op imports sympy (a second or more): under the import's deadline,
  -- not this problem's; a failure there is the load's to report
  if device == "meta" then
    local okw, werr, wcode = call("warm_meta")
    if not okw and (wcode == "TIMEOUT" or wcode == "INTERRUPTED") then return nil, path .. ": " .. tostring(werr), wcode end
  end
  local sizes = json.null
  if opts.sizes ~= nil then
    if type(opts.sizes) ~= "table" then error("kb.load: sizes must be a table of integers, got " .. type(opts.sizes), 2) end
    sizes = {}
    for k, v in pairs(opts.sizes) do
      if type(k) ~= "string" or math.type(v) ~= "integer" then
        error(("kb.load: sizes must map names to integers, got %s = %s"):format(tostring(k), tostring(v)), 2)
      end
      sizes[k] = v
    end
    sizes = json.object(sizes)
  end
  local lim = { timeout = timeout, label = path, path = path }
  if opts.spec ~= nil and type(opts.spec) ~= "table" then error("kb.load: spec must be a table, got " .. type(opts.spec), 2) end
  local r, err, ecode = call_within(lim, "load", path, precision, device, seed, opts.tf32 or false, names, sizes,
    opts.spec or json.null)
  if not r then return nil, err, ecode end
  limits[r.id] = lim
  return setmetatable({ id = r.id, name = r.name, path = r.path, precision = precision,
    device = r.device, seed = seed, init_args = r.init_args, tolerance = r.tolerance, adopted = r.adopted }, Problem)
end

-- ---- host memory (CPU runs and tests): a buffer torch owns, shaped like km.Buffer ----

local Host = {}
Host.__index = Host

local function hcheck(self)
  if not self.id then error("attempt to use a freed km.task.kernelbench host buffer", 3) end
  return self.id
end

function Host:ptr() hcheck(self) return self.addr end
function Host:dtype() return self._dtype end
function Host:shape() local s = {} for i, d in ipairs(self._shape) do s[i] = d end return s end
function Host:numel() local n = 1 for _, d in ipairs(self._shape) do n = n * d end return n end
function Host:nbytes() return self._nbytes end
-- Values as Lua numbers, in order (at most max).
function Host:to_table(max) return call("host_read", hcheck(self), max or json.null) end
function Host:from_table(t) local ok, err = call("host_write", hcheck(self), json.array(t)) assert(ok, err) return self end
function Host:free()
  if self.id then call("host_free", self.id) end
  self.id = nil
end
Host.__gc = function(self) if self.id then timing.finalize(self, Host.free) end end
Host.__close = Host.free

-- kb.host_buffer(dtype, shape) -> zeroed host memory | nil, why, code
function M.host_buffer(dtype, shape)
  if type(shape) == "number" then shape = { shape } end
  local okp, why, code = M.available()
  if not okp then return nil, why, code end
  local r, err, ecode = call("host_alloc", dtype, json.array(shape))
  if not r then return nil, err, ecode end
  local copy = {}
  for i, d in ipairs(shape) do copy[i] = d end
  return setmetatable({ id = r.id, addr = r.ptr, _dtype = dtype, _shape = copy, _nbytes = r.nbytes }, Host)
end

-- Buffers for every input, param and output of a spec, made by new(dtype, shape) —
-- buffer.new on the GPU, kb.host_buffer on the CPU. Number inputs get none; a 0-d tensor
-- (a loss) gets shape { 1 }.
function M.buffers_for(spec, new)
  local io = {}
  for _, group in ipairs { spec.inputs, spec.params, spec.outputs } do
    for _, d in ipairs(group) do
      if d.dtype then io[d.name] = assert(new(d.dtype, #d.shape > 0 and d.shape or { 1 })) end
    end
  end
  return io
end

return M
