-- km.task.kbtask — a KernelBench problem file (class Model, get_inputs, get_init_inputs) as a
-- kmrun task, unchanged: `kmrun eval level1/19_ReLU.py CANDIDATE` judges against PyTorch
-- eager on the same GPU.
--
--   local t, err = require("km.task.kbtask").load("19_ReLU.py", { precision = "fp32" })
--
-- The task's buffers come from the problem's spec (km.task.kernelbench, on torch's "meta"
-- device: no memory, no compute, no CUDA in the driver): its tensor inputs, the model's
-- parameters and buffers (`fc.weight` -> io.fc_weight), and its outputs (`out`, or
-- `out0, out1, ...`); number inputs are in the shape table (`s.<name>`). Shape sets: the
-- problem's own sizes (timed), and where its sizes are module-level integers read by
-- get_inputs()/get_init_inputs(), a held-out second one derived by kb_bridge.py's rule
-- (docs/tasks.md, "The held-out shape"): the judge verifies it, prompts never show it
-- (t.heldout). Dimensions that differ between the two are shape symbols (a size's own name,
-- `batch_size`, where it is that size in both). Tolerance: KernelBench's per precision.
-- In a GPU worker the judge loads the problem for real (km.judge); its inputs come from
-- the problem's own get_inputs() under each trial's seed, made on the GPU.
local M = {}

local fmt = string.format
local ipairs, type = ipairs, type

local shape = require "km.task.shape"
local progress = require "km.progress"
local utf8_error = require("km.text").utf8_error
local SIZES, numel = shape.DTYPE_BYTES, shape.numel

-- true when path names a problem file (a .py file), whatever its folder
-- ("file.py#fp16" names the problem at a precision: the form a task travels to a worker in)
function M.is_problem(path)
  return type(path) == "string" and (path:match("%.py$") or path:match("%.py#%w+$")) ~= nil
end

-- The name a problem at a precision travels under (task.dir).
function M.key(path, precision)
  return (precision and precision ~= "fp32") and (path .. "#" .. precision) or path
end

M.SPEC_VERSION = 2      -- bump when what a spec holds changes: older records are read again
M.MAX_SOURCE = 16 << 20 -- bytes of a problem file read (kb_bridge.py's limit)

-- The dimensions that differ between a spec and its held-out spec as shape symbols:
-- { shape = { tensor name -> { dim or symbol, ... } } (only tensors with a symbol),
--   values = { symbol -> { own, held-out } } }. A dimension that is one of the problem's
-- sizes in both (held.sizes: name -> { own, held-out }) takes that size's name; another gets
-- `<tensor>_<i>` (0-based). A name taken by a number input gets `_` appended.
function M.shape_symbols(spec, held)
  local out = { shape = {}, values = {} }
  if not held then return out end
  local taken = {}
  for _, d in ipairs(spec.inputs or {}) do if d.scalar ~= nil then taken[d.name] = true end end
  local size_names = {}
  for name in pairs(held.sizes or {}) do size_names[#size_names + 1] = name end
  table.sort(size_names)
  local function symbol(want, a, b)
    local name = want
    while taken[name] or (out.values[name] and (out.values[name][1] ~= a or out.values[name][2] ~= b)) do
      name = name .. "_"
    end
    out.values[name] = { a, b }
    return name
  end
  for _, group in ipairs { "inputs", "params", "outputs" } do
    for k, d in ipairs(spec[group] or {}) do
      local h = held.spec[group] and held.spec[group][k]
      if d.scalar == nil and h and type(h.shape) == "table" and #h.shape == #d.shape then
        local shape, any = {}, false
        for i, a in ipairs(d.shape) do
          local b = h.shape[i]
          if a == b then shape[i] = a
          else
            any = true
            local want
            for _, n in ipairs(size_names) do
              local v = held.sizes[n]
              if v[1] == a and v[2] == b then want = n break end
            end
            shape[i] = symbol(want or (d.name .. "_" .. (i - 1)), a, b)
          end
        end
        if any then out.shape[d.name] = shape end
      end
    end
  end
  return out
end

-- The spec cache's folder: KM_SPEC_DIR, else $XDG_CACHE_HOME/kmrun/specs, else
-- ~/.cache/kmrun/specs (nil: none). km.serve.pool passes it to its workers as KM_SPEC_DIR.
function M.spec_dir() return require("km.jsoncache").dir("specs", "KM_SPEC_DIR") end

-- The problem file and precision a key names (M.key's inverse): "a.py#fp16" -> "a.py",
-- "fp16"; "a.py" -> "a.py", nil.
function M.split_key(key)
  local file, tag = key:match("^(.*%.py)#(%w+)$")
  if file then return file, tag end
  return key, nil
end

-- A problem's task name: its file name without .py ("level1/19_ReLU.py#fp16" -> 19_ReLU).
function M.name(path)
  path = M.split_key(path)
  return path:match("([^/]+)%.py$") or path
end

-- The spec cache's folder and the key of a problem file's spec (nil without its text).
local function spec_key(path, precision, text)
  local jc = require "km.jsoncache"
  local dir = M.spec_dir()
  return dir, text and jc.key("spec", M.SPEC_VERSION, { path = path, source = text, precision = precision,
    python = (os.getenv("KM_PYTHON") or "python3") .. "\0" .. (os.getenv("PYTHONPATH") or "") },
    { "path", "source", "precision", "python" })
end

-- true when the spec of path (a problem file, "file.py#fp16" too) is kept on disk: loading
-- it needs no PyTorch.
function M.cached(path)
  local file, tag = path:match("^(.*%.py)#(%w+)$")
  if file then path = file end
  local f = io.open(path, "rb")
  if not f then return false end
  local text = f:read(M.MAX_SOURCE + 1)
  f:close()
  local dir, key = spec_key(path, tag or "fp32", text)
  return key ~= nil and require("km.jsoncache").get(dir, key) ~= nil
end

-- The spec of path at precision -> spec, source text | nil, why.
-- Kept on disk by the file's content (km.jsoncache): a later run, `kmrun eval` in a fresh
-- process included, reads it without importing torch.
local function load_spec(kb, path, precision, opts)
  -- the spec on torch's meta device (no memory, no compute); a model whose constructor
  -- reads tensor values (.item()) cannot be built there, and is described on the CPU
  local function describe(device)
    local prob, err = kb.load(path, { precision = precision, device = device, timeout = opts.timeout })
    if not prob then return nil, err end
    local spec, serr = prob:spec()
    prob:release()
    return spec, serr
  end
  local f = io.open(path, "rb")
  local text = f and f:read(M.MAX_SOURCE + 1)
  if f then f:close() end
  local bad = text and utf8_error(text)
  if bad then return nil, path .. " is not valid UTF-8: " .. bad end
  local jc = require "km.jsoncache"
  local dir, key = spec_key(path, precision, text)
  local rec = key and jc.get(dir, key)
  local spec = rec and type(rec.spec) == "table" and rec.spec
  if not spec then
    -- torch's import first, told apart (km.task.kernelbench); a failure is describe's to report
    local done = kb.available() and progress.start("spec") or function() end
    local serr
    spec, serr = describe("meta")
    if not spec and tostring(serr):find("meta tensor", 1, true) then spec, serr = describe("cpu") end
    done(spec ~= nil)
    if not spec then return nil, serr end
    if key then jc.put(dir, key, { spec = spec }) end
  end
  return spec, text
end

-- Fills t.inputs (inputs, then parameters), t.outputs and t.scalars from spec, the shapes of
-- scalars into t.shapes -> bytes of the tensors | nil, "path: why".
local function add_tensors(t, spec, held, dims, path)
  local bytes = 0
  local function add(list, d, role, k)
    if d.scalar ~= nil then
      t.shapes[1][d.name] = d.scalar
      if held then t.shapes[2][d.name] = held.spec.inputs[k].scalar end
      t.scalars[#t.scalars + 1] = d.name
      return
    end
    if not SIZES[d.dtype] then
      return fmt("%s: %s '%s' has dtype %s, which kmrun buffers do not hold", path, role, d.name, tostring(d.torch_dtype or d.dtype))
    end
    local shape = dims.shape[d.name] or (#d.shape > 0 and d.shape or { 1 })
    list[#list + 1] = { name = d.name, dtype = d.dtype, shape = shape, role = role, key = d.key, kind = d.kind }
    bytes = bytes + numel(#d.shape > 0 and d.shape or { 1 }) * SIZES[d.dtype]
  end
  for k, d in ipairs(spec.inputs or {}) do local e = add(t.inputs, d, "input", k); if e then return nil, e end end
  for _, d in ipairs(spec.params or {}) do local e = add(t.inputs, d, "parameter"); if e then return nil, e end end
  for _, d in ipairs(spec.outputs or {}) do local e = add(t.outputs, d, "output"); if e then return nil, e end end
  return bytes
end

-- -> task table | nil, "path: why". opts: precision; timeout (seconds each call into
-- PyTorch may take, km.task.kernelbench's default otherwise); tolerance.
function M.load(path, opts)
  opts = opts or {}
  local kb = require "km.task.kernelbench"
  local tag
  path, tag = M.split_key(path)
  local precision = opts.precision or tag or "fp32"
  local spec, text = load_spec(kb, path, precision, opts)
  if not spec then return nil, text end
  local t = {
    name = M.name(path), dir = M.key(path, precision), path = path,
    level = tonumber(path:match("level(%d)")) or 1, category = "kernelbench",
    description_text = nil, math = nil,
    reference = { pytorch = path, precision = precision },
    inputs = {}, outputs = {}, params = {}, shapes = { {} }, tolerance = {},
    flops = 0, pytorch = true,
  }
  t.reference.source_text = text
  -- a GPU worker's load takes the names and shapes from it (km.task.kernelbench's spec option)
  t.reference.spec = spec
  local held = type(spec.heldout) == "table" and type(spec.heldout.spec) == "table" and spec.heldout or nil
  local dims = M.shape_symbols(spec, held)
  t.scalars = {}
  if held then
    t.shapes[2] = {}
    t.heldout = { shape = 2, rule = held.rule, sizes = held.sizes }
  else
    t.heldout_why = type(spec.heldout) == "table" and spec.heldout.why or nil
  end
  for sym, v in pairs(dims.values) do
    t.shapes[1][sym] = v[1]
    t.shapes[2][sym] = v[2]
  end
  local bytes, err = add_tensors(t, spec, held, dims, path)
  if not bytes then return nil, err end
  if #t.outputs == 0 then return nil, path .. ": the model returns no tensor" end
  local tol = opts.tolerance or spec.tolerance or { atol = 1e-4, rtol = 1e-4 }
  for _, o in ipairs(t.outputs) do t.tolerance[o.dtype] = { atol = tol.atol, rtol = tol.rtol } end
  t.bytes = bytes
  t.description = "The PyTorch program " .. t.name .. ".py (KernelBench form)"
  return t
end

return M
