-- km.task.lint — can a task tell a right kernel from a wrong one? (DESIGN.md, "Tasks can be wrong
-- too"; docs/tasks.md, "Linting tasks")
--
--   local lint = require "km.task.lint"
--   local res = lint.run(t, { backend = lint.backend() })   -- one task at its precision
--   res.flags        -- { { reason, shape, output, detail }, ... }; empty: nothing found
--   res.unchecked    -- { "what could not be checked here, and why", ... }
--   lint.cached(t)   -- the last result kept for this task (content, precision, torch), or nil
--   tasks = lint.gate(tasks, { allow = false, skip = true, who = "kmrun sweep" })
--
-- For every shape set, the reference runs twice on one seed and once on another; its outputs
-- and trivial candidates (zeros, a constant at the output's mean, an input passed through,
-- the reference on other inputs) go through the judge's comparison (km.compare, atol + rtol
-- of the task's tolerance, NaN never passes). Trivial candidates are judged on outputs of at
-- least MIN_ELEMENTS elements, on outputs smaller than that at every shape set (a loss, a
-- statistic) and on every output at the timed shape (shape set 1); on an output under
-- MIN_ELEMENTS the constant is the other seed's mean (a 1-element output equals its own).
-- An output without a row per input row is also estimated from a sample of the inputs' rows
-- (sample_estimate, below), at every size. An output under MIN_ELEMENTS at the timed shape
-- is run there on CLOSED_FORM_SEEDS and flagged closed_form where a constant would pass a
-- trial with a probability above CLOSED_FORM_P (below). The trivial candidates, the sample
-- estimate and the closed form flag where they hold at the timed shape, whose speed a verdict
-- reports (AT_TIMED). With a GPU the
-- judge's own path runs the reference (km.judge: inputs made on the GPU) and times it on the
-- timed shape; without one a PyTorch reference runs on the CPU (km.task.kernelbench, host
-- memory), and what could not be checked is said: CUDA-only references, timing, sizes over
-- CPU_MAX_BYTES.
local compare = require "km.compare"
local task_mod = require "km.task"
local json = require "km.json"

local M = {}

local fmt, concat = string.format, table.concat
local ipairs, pairs, type, tostring, pcall = ipairs, pairs, type, tostring, pcall

M.VERSION = 7          -- bump when what a result holds or how it is decided changes
                       -- (4: sample_estimate; outputs small at every shape judged)
                       -- (5: what the machine lacks is never a flag nor kept)
                       -- (6: trivial candidates decided at the timed shape; closed_form)
                       -- (7: closed_form also where seeds repeat one output)
M.MIN_ELEMENTS = 64    -- trivial candidates are judged on outputs at least this large (or
                       -- under it at every shape set, or at the timed shape)
M.BELOW_SHARE = 0.9    -- below_tolerance: at least this share of the output is within atol of 0
M.TOO_SHORT_MS = 0.01  -- too_short: the reference's median under this (and under 4 empty kernels)
M.CPU_MAX_BYTES = 256 << 20 -- a shape whose buffers pass this is not run on the CPU
M.SEEDS = { 101, 202 } -- the reference runs on the first twice, on the second once
M.SAMPLE_RATIO = 64    -- sample_estimate: the reference on the first 1/SAMPLE_RATIO of the rows
-- closed_form: an output under MIN_ELEMENTS at the timed shape runs on these K seeds (the
-- first two are SEEDS', whose runs are reused: K - 2 more reference runs, at that shape only)
M.CLOSED_FORM_SEEDS = { 101, 202, 303, 404, 505, 606, 707, 808 }
M.CLOSED_FORM_P = 0.01 -- closed_form: flagged where a constant passes a trial with a
                       -- probability above this (the normal model below)
M.CLOSED_FORM_SHARED = 3 -- closed_form: flagged too where this many of the K seeds give one
                         -- output (each within the tolerance of it): a value that repeats

-- The reasons, one row each: key, what a table prints, what it means.
M.REASONS = {
  { key = "trivial_zeros", short = "zeros pass", text = "an all-zeros output passes the tolerance" },
  { key = "trivial_constant", short = "constant passes", text = "a constant output (the reference's mean; on an output under 64 elements, the other seed's) passes" },
  { key = "trivial_input", short = "input passes", text = "an input passed through unchanged passes" },
  { key = "input_independent", short = "input-independent",
    text = "the output does not depend on the inputs (the reference on other inputs passes)" },
  { key = "sample_estimate", short = "sample estimates",
    text = "the reference on a small sample of the input rows (the first 1/64, repeated) passes: the output can be estimated without reading most of the inputs" },
  { key = "closed_form", short = "closed form",
    text = "a constant passes part of the time: the output's spread across seeds is within a few tolerances (a constant at the seeds' mean passes a trial with a probability over 1%), or 3 of 8 seeds give the same output" },
  { key = "below_tolerance", short = "below tolerance",
    text = "most of the output is within atol of zero (below the tolerance's resolution)" },
  { key = "nan_inf", short = "NaN/Inf", text = "the reference's output holds NaN or Inf" },
  { key = "nondeterministic", short = "non-deterministic", text = "two runs of the reference on the same inputs disagree beyond the tolerance" },
  { key = "too_short", short = "too short", text = "the reference runs too briefly to time meaningfully (speedups there are noise)" },
  { key = "reference_error", short = "reference fails", text = "the reference does not run" },
}
M.REASON = {}
for _, r in ipairs(M.REASONS) do M.REASON[r.key] = r end
-- Launch code sees the shape table, so a candidate can compute exactly at the small shape
-- sets and write a trivial answer at the timed shape (shape set 1), where its speed is
-- measured: these reasons flag a task where they hold at the timed shape (every shape they
-- hold at is then listed); where they were tried at the timed shape and do not hold there,
-- what holds at other shapes is a note. decide() applies it.
M.AT_TIMED = { trivial_zeros = true, trivial_constant = true, trivial_input = true,
  input_independent = true, below_tolerance = true, sample_estimate = true, closed_form = true }
-- Where the timed shape was not run here (over CPU_MAX_BYTES), these flag only where they
-- hold at every shape they were judged on (a candidate must pass every shape set; at some
-- shapes only, a sum over an axis of length 1 is its input, they are notes); sample_estimate
-- flags at any shape it holds at (an estimate only gets better with more rows); closed_form
-- is made at the timed shape only, so it is said to be unchecked.
M.EVERY_SHAPE = { trivial_zeros = true, trivial_constant = true, trivial_input = true,
  input_independent = true, below_tolerance = true }

-- What a machine can lack, by the code a backend's open returns with it: a fact about the
-- machine, not the task, so a task it stops is "not checked", never flagged, never kept.
M.MACHINE = { NO_PYTORCH = "needs PyTorch", NO_GPU = "needs a GPU" }

----------------------------------------------------------------------------------------
-- backends: where the reference runs. Each opens a task (-> session | nil, why, CODE; CODE a
-- key of M.MACHINE when this machine cannot run the reference at all), runs the
-- reference on a shape and seed (-> { outs, ins } | nil, why, "SKIP" when it was not tried),
-- and makes, compares and frees the values checked.

-- An error that says the device ran out of memory (torch's or the driver's words).
local function out_of_memory(text)
  local l = tostring(text):lower()
  return l:find("out of memory", 1, true) ~= nil or l:find("out_of_memory", 1, true) ~= nil
end

local function numel_of(spec, sym) return task_mod.numel(task_mod.shape_of(spec, sym)) end
local function bytes_of(t, sym)
  local n = 0
  for _, list in ipairs { t.inputs, t.outputs } do
    for _, spec in ipairs(list) do n = n + numel_of(spec, sym) * task_mod.DTYPE_BYTES[spec.dtype] end
  end
  return n
end

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
    local st, err = judge:task_state(t)
    if not st then return nil, err end
    return { t = t, st = st }
  end
  -- rows (sample_estimate's): the reference's inputs tiled from a prefix of their rows
  function B.run(s, sym, seed, rows)
    local ok, res, why = pcall(function()
      local cand, ref_in, dims = judge:trial_io(s.t, sym, seed)
      judge.pool:put_all(cand)
      judge:pristine(s.t, sym, ref_in, seed)
      if rows then
        local okt, terr = pcall(tile_rows, ref_in, rows, tile)
        if not okt then judge.pool:put_all(ref_in) error(terr, 0) end
      end
      local ref_io, rs, rmsg = judge:run_reference(s.st, ref_in, dims, sym)
      if not ref_io then judge.pool:put_all(ref_in) return nil, tostring(rs) .. ": " .. tostring(rmsg) end
      local outs = {}
      for _, o in ipairs(s.t.outputs) do outs[o.name] = ref_io[o.name] end
      return { ins = ref_in, outs = outs }
    end)
    if not ok then return nil, tostring(res) end
    return res, why
  end
  function B.release(_, r)
    judge.pool:put_all(r.ins)
    for _, b in pairs(r.outs) do judge.pool:put(b) end
  end
  function B.compare(a, b, tol) return compare.allclose(a, b, { atol = tol.atol, rtol = tol.rtol }) end
  function B.zeros(like) return buffer.new(like:dtype(), like:shape()):zero() end
  function B.const(like, v) return buffer.new(like:dtype(), like:shape()):fill(v) end
  function B.sample(b, n) return b:to_table(n) end
  function B.free(b) b:free() end
  function B.time(s, sym)
    local res, st, msg = judge:time_run(s.st, s.st.ref, sym, { mode = "cold", max_ms = 500 }, false)
    if not res then return nil, tostring(st) .. ": " .. tostring(msg) end
    judge._floor = judge._floor or require("km.timing").floor()
    return res.median, judge._floor and judge._floor.median
  end
  function B.close(s)
    if s.st.prob then s.st.prob:release { empty_cache = true } end
    judge.tasks[s.t.dir] = nil
    judge.pool:drop(true)
    local alive, msg = require("km.cuda").synchronize()
    if not alive then return "the GPU context was lost (" .. tostring(msg) .. ")" end
  end
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

----------------------------------------------------------------------------------------
-- the checks

local function is_int_dtype(dt) return dt:match("^[iu]") ~= nil end

-- The mean of a sample of values (NaN and Inf left out), or nil.
local function mean_of(xs)
  local s, n = 0, 0
  for _, x in ipairs(xs) do
    if x == x and x ~= math.huge and x ~= -math.huge then s, n = s + x, n + 1 end
  end
  return n > 0 and s / n or nil
end

local function g(x) return fmt("%.3g", x) end

----------------------------------------------------------------------------------------
-- sample_estimate: can an output be estimated from a small sample of the inputs' rows? The
-- rows are the leading dimension of the task's first input (not a parameter); every input
-- (not a parameter) whose leading dimension has that length is sampled. The reference runs
-- on those inputs with every row past the first keep = rows // SAMPLE_RATIO replaced by a copy
-- of row (i mod keep): an output that is a mean over rows comes out as the prefix's mean, a
-- sum as the prefix's sum rescaled by rows / keep (the raw and the rescaled estimate, each
-- where it applies), anything else as what the prefix alone decides. An output with a
-- dimension of the rows' length (a row per input row: elementwise ops, matmuls, per-row
-- reductions) is not estimated: it cannot be made from fewer rows. An output is flagged where
-- the estimate passes the task's tolerance against the full answer at both seeds.

-- The rows to sample at shape sym -> { rows, keep, names = { input name -> true } } | nil (no
-- input has rows, or fewer than SAMPLE_RATIO of them)
local function sample_rows(t, sym)
  local rows
  for _, spec in ipairs(t.inputs) do
    local d = spec.role ~= "parameter" and task_mod.shape_of(spec, sym)
    if d and #d > 0 then rows = d[1] break end
  end
  if not rows or rows < M.SAMPLE_RATIO then return nil end
  local names = {}
  for _, spec in ipairs(t.inputs) do
    local d = spec.role ~= "parameter" and task_mod.shape_of(spec, sym)
    if d and #d > 0 and d[1] == rows then names[spec.name] = true end
  end
  return { rows = rows, keep = rows // M.SAMPLE_RATIO, names = names }
end

-- The outputs at sym without a dimension of `rows`' length (and not empty).
local function estimable(t, sym, rows)
  local list = {}
  for _, o in ipairs(t.outputs) do
    local per_row = false
    for _, d in ipairs(task_mod.shape_of(o, sym)) do if d == rows then per_row = true end end
    if not per_row and numel_of(o, sym) > 0 then list[#list + 1] = o end
  end
  return list
end

-- Estimates the outputs at shape si from the sample; full = { seed 1's run, seed 2's run }.
-- Flags through flag(reason, si, output, detail); a run that failed is said in res (unchecked
-- when out of memory: the result is then not kept, M.transient; a note otherwise).
-- -> true when the estimate was made
local function sample_estimate(B, s, t, sym, si, full, flag, res, label)
  local rows = sample_rows(t, sym)
  if not rows then return false end
  local outs = estimable(t, sym, rows.rows)
  if #outs == 0 then return false end
  local worst = {} -- output name -> the largest |estimate - full| at a seed where it passed
  for i, seed in ipairs(M.SEEDS) do
    local e, err, code = B.run(s, sym, seed, rows)
    if not e then
      local list = (code == "SKIP" or out_of_memory(err)) and res.unchecked or res.notes
      list[#list + 1] = fmt("%s: the sample estimate did not run: %s", label, tostring(err))
      return false
    end
    for _, o in ipairs(outs) do
      local c = B.compare(e.outs[o.name], full[i].outs[o.name], t.tolerance[o.dtype])
      if c.ok and (i == 1 or worst[o.name]) then
        worst[o.name] = math.max(worst[o.name] or 0, c.max_abs or 0)
      else
        worst[o.name] = nil
      end
    end
    B.release(s, e)
  end
  for _, o in ipairs(outs) do
    if worst[o.name] then
      local tol = t.tolerance[o.dtype]
      flag("sample_estimate", si, o.name, fmt("the reference on the first %d of %d rows (1/%d), repeated, passes at seeds %d and %d: max |diff| %s (atol %g, rtol %g)",
        rows.keep, rows.rows, M.SAMPLE_RATIO, M.SEEDS[1], M.SEEDS[2], g(worst[o.name]), tol.atol, tol.rtol))
    end
  end
  return true
end

----------------------------------------------------------------------------------------
-- closed_form: does an output under MIN_ELEMENTS at the timed shape (a loss, a statistic)
-- have a constant that passes part of the time? The reference runs there on the K seeds of
-- CLOSED_FORM_SEEDS. For each element, with m and s the mean and standard deviation (K - 1
-- in the denominator) of its K values: a constant c made without reading the inputs — the
-- mean of K - 1 seeds' values, the best such guess — misses the reference's value x on a
-- fresh draw by x - c ~ N(0, s^2 (1 + 1/(K - 1))) in a normal model, and passes where
-- |x - c| <= atol + rtol * |x|, about tau = atol + rtol * |m|: with sigma = s * sqrt(1 + 1/(K - 1)),
-- P(pass) = erf(tau / (sigma * sqrt 2)) (1 where s = 0). The elements are taken as independent:
-- the output passes with the product of its elements' P. Flagged where that is over
-- CLOSED_FORM_P. The seeds are fixed, so one machine decides a task the same way every run;
-- the detail also counts the K leave-one-out trials that pass (seed k's value against the
-- other seeds' mean).
-- The normal model says nothing of an output whose values repeat exactly (a saturated maximum,
-- an index, a clamp: P = 0 at atol = rtol = 0), so the rule also counts, for each seed's output
-- taken as the constant, the seeds it passes at (itself included): flagged where the most is
-- CLOSED_FORM_SHARED or more. With 8 seeds (simulated): an output with 100 equally likely
-- values (a constant passes 1%) is flagged 0.5% of the time; one whose most likely value is
-- drawn 10% of the time 4%, 30% of the time 45%, half of the time 85% (where the two seeds of
-- SEEDS agree, input_independent flags too).

-- erf(x) (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7)
local function erf(x)
  local sign = x < 0 and -1 or 1
  x = math.abs(x)
  local u = 1 / (1 + 0.3275911 * x)
  local y = 1 - ((((1.061405429 * u - 1.453152027) * u + 1.421413741) * u - 0.284496736) * u + 0.254829592) * u * math.exp(-x * x)
  return sign * y
end
M.erf = erf

-- How many of the seeds' outputs seed k's output passes at (itself included): each element
-- of theirs within atol + rtol * |x| of its own.
local function shared_by(values, k, tol)
  local n = 0
  for i = 1, #values do
    local pass = true
    for j = 1, #values[i] do
      local x = values[i][j]
      if not (math.abs(values[k][j] - x) <= tol.atol + tol.rtol * math.abs(x)) then pass = false break end
    end
    if pass then n = n + 1 end
  end
  return n
end

-- The closed-form rule on values[k][j] (seed k, element j) at tolerance tol. -> { p (the
-- product), loo (leave-one-out trials that pass), shared (the most seeds one seed's output
-- passes at), m, s, tau (of the element with the lowest P) } | nil where a value is NaN or Inf
function M.closed_form_p(values, tol)
  local K = #values
  local n = #values[1]
  local out = { p = 1, loo = 0 }
  local lowest = math.huge
  local means = {}
  for j = 1, n do
    local sum = 0
    for k = 1, K do
      local x = values[k][j]
      if x ~= x or x == math.huge or x == -math.huge then return nil end
      sum = sum + x
    end
    local m = sum / K
    local ss = 0
    for k = 1, K do ss = ss + (values[k][j] - m) ^ 2 end
    local sd = math.sqrt(ss / (K - 1))
    local sigma = sd * math.sqrt(1 + 1 / (K - 1))
    local tau = tol.atol + tol.rtol * math.abs(m)
    local pj = sigma > 0 and erf(tau / (sigma * math.sqrt(2))) or 1
    out.p = out.p * pj
    if pj < lowest then lowest, out.m, out.s, out.tau = pj, m, sd, tau end
    means[j] = sum
  end
  for k = 1, K do
    local pass = true
    for j = 1, n do
      local x = values[k][j]
      local c = (means[j] - x) / (K - 1)
      if not (math.abs(x - c) <= tol.atol + tol.rtol * math.abs(x)) then pass = false end
    end
    if pass then out.loo = out.loo + 1 end
  end
  out.shared = 0
  for k = 1, K do out.shared = math.max(out.shared, shared_by(values, k, tol)) end
  return out
end

-- The closed-form check at the timed shape sym; full = { seed 1's run, seed 2's run }
-- (SEEDS'), reused. Flags through flag; a note says each output's probability where it is
-- not flagged; a run that failed is said in res (as sample_estimate's). -> true when made
local function closed_form(B, s, t, sym, full, flag, res)
  local outs = {}
  for _, o in ipairs(t.outputs) do
    local n = numel_of(o, sym)
    if n > 0 and n < M.MIN_ELEMENTS then outs[#outs + 1] = o end
  end
  if #outs == 0 then return false end
  local seeds = M.CLOSED_FORM_SEEDS
  local values = {} -- output name -> { seed index -> { element values } }
  for _, o in ipairs(outs) do values[o.name] = {} end
  for k, seed in ipairs(seeds) do
    local r, err, code
    if seed == M.SEEDS[1] then r = full[1] elseif seed == M.SEEDS[2] then r = full[2]
    else r, err, code = B.run(s, sym, seed) end
    if not r then
      local list = (code == "SKIP" or out_of_memory(err)) and res.unchecked or res.notes
      list[#list + 1] = fmt("shape 1: the closed-form check did not run (seed %d): %s", seed, tostring(err))
      return false
    end
    for _, o in ipairs(outs) do values[o.name][k] = B.sample(r.outs[o.name], M.MIN_ELEMENTS) end
    if r ~= full[1] and r ~= full[2] then B.release(s, r) end
  end
  for _, o in ipairs(outs) do
    local tol = t.tolerance[o.dtype]
    local c = M.closed_form_p(values[o.name], tol)
    if c then
      local text = fmt("over %d seeds (%d-%d) the mean is %s, the spread (sd) %s, the tolerance there %s: a constant passes a trial with probability %.3g (normal model; over %g flags), %d of %d leave-one-out trials pass, %d of %d seeds give one output (%d or more flags)",
        #seeds, seeds[1], seeds[#seeds], g(c.m), g(c.s), g(c.tau), c.p, M.CLOSED_FORM_P, c.loo, #seeds,
        c.shared, #seeds, M.CLOSED_FORM_SHARED)
      if c.p > M.CLOSED_FORM_P or c.shared >= M.CLOSED_FORM_SHARED then flag("closed_form", 1, o.name, text)
      else res.notes[#res.notes + 1] = fmt("closed form not flagged (%s): %s", o.name, text) end
    end
  end
  return true
end

-- Which flags stand (M.AT_TIMED's and M.EVERY_SHAPE's comments); the others become notes.
-- tried: reason -> { shape -> true } where it was tried; judged: the shapes the trivial
-- candidates were judged at. -> the flags kept
local function decide(flags, tried, judged, notes)
  local at_timed, at = {}, {}
  for _, f in ipairs(flags) do
    if f.shape == 1 then at_timed[f.reason .. "\0" .. tostring(f.output)] = true end
    at[f.reason] = at[f.reason] or {}
    at[f.reason][f.shape or 0] = true
  end
  local kept = {}
  for _, f in ipairs(flags) do
    local r, keep, why = f.reason, true, nil
    if M.AT_TIMED[r] and tried[r] and tried[r][1] then
      keep, why = at_timed[r .. "\0" .. tostring(f.output)], "not at the timed shape"
    elseif M.EVERY_SHAPE[r] then
      for si in pairs(judged) do if not at[r][si] then keep, why = false, "other shapes catch it" end end
    end
    if keep then kept[#kept + 1] = f
    else
      notes[#notes + 1] = fmt("%s at shape %d only (%s%s): %s", M.REASON[r].short, f.shape,
        f.output and (f.output .. ", ") or "", f.detail or "", why)
    end
  end
  return kept
end

-- flag(reason, si, output, detail): adds a flag to res.flags (marked held-out at that shape).
local function flagger(res)
  return function(reason, si, output, detail)
    res.flags[#res.flags + 1] = { reason = reason, shape = si, heldout = (si ~= nil and res.heldout == si) or nil,
      output = output, detail = detail }
  end
end

-- The outputs under MIN_ELEMENTS at every shape set of t (a loss, a statistic): output name -> true.
local function small_outputs(t)
  local small = {}
  for _, o in ipairs(t.outputs) do
    small[o.name] = true
    for _, sym in ipairs(t.shapes) do if numel_of(o, sym) >= M.MIN_ELEMENTS then small[o.name] = nil end end
  end
  return small
end

-- One lint's state, passed to the stages of M.run as ls (as lstrlib.c passes MatchState).
local function new_lint(t, B)
  local res = { task = t.name, path = t.path or t.dir, precision = t.reference.precision or "fp32",
    level = t.level, where = B.where, device = B.device, flags = {}, unchecked = {}, shapes = #t.shapes,
    heldout = t.heldout and t.heldout.shape or nil, version = M.VERSION, notes = {} }
  return {
    t = t,                -- the task
    B = B,                -- the backend
    s = nil,              -- the backend's session for t, once open
    res = res,            -- the result M.run returns
    flag = flagger(res),  -- flag(reason, si, output, detail) into res.flags
    judged = {},          -- shapes the trivial candidates were judged on
    estimated = {},       -- shapes the sample estimate was made at
    closed = {},          -- shapes the closed form was checked at (the timed shape, or none)
    ran = {},             -- shapes the reference ran at
    small = small_outputs(t), -- outputs under MIN_ELEMENTS at every shape set: judged at every size
  }
end

-- Says why the reference did not open (why, code: B.open's) in ls.res.
local function open_failed(ls, why, code)
  local res = ls.res
  -- what the machine lacks (PyTorch, a GPU) and out of memory (the device was busy) say
  -- nothing about the task; anything else is the reference failing to load or run as
  -- written (at this precision: an LSTM whose forward makes an fp32 h0 cannot run at fp16)
  if M.MACHINE[code] then
    res.machine = { code = code, why = tostring(why) }
    res.unchecked[#res.unchecked + 1] = "the reference: " .. M.MACHINE[code]
  elseif out_of_memory(why) then
    res.unchecked[#res.unchecked + 1] = "the reference: " .. tostring(why)
  else
    ls.flag("reference_error", nil, nil, tostring(why))
  end
end

-- The trivial candidates for output o at shape sh (zeros, a constant, an input, the other
-- seed's output); zeros and z: the zeros buffer and |y| <= atol compared, from check_output.
local function judge_trivial(ls, sh, o, zeros, z)
  local B, t, flag, si = ls.B, ls.t, ls.flag, sh.si
  local tol = t.tolerance[o.dtype]
  local y = sh.a.outs[o.name]
  local n = numel_of(o, sh.sym)
  local zr = B.compare(zeros, y, tol)
  if zr.ok then flag("trivial_zeros", si, o.name, fmt("max |y| %s, atol %g", g(z.max_abs or 0), tol.atol))
  elseif (n - (z.mismatches or 0)) / n >= M.BELOW_SHARE then
    flag("below_tolerance", si, o.name, fmt("%.1f%% of elements within atol %g of 0", 100 * (n - z.mismatches) / n, tol.atol))
  end
  -- the constant: the output's mean, or on a small output (its own mean is itself, or
  -- nearly) the other seed's, a value known without these inputs
  local m, whose
  if n >= M.MIN_ELEMENTS then m = mean_of(B.sample(y, 1 << 16))
  elseif sh.b then m, whose = mean_of(B.sample(sh.b.outs[o.name], 1 << 16)), fmt(", seed %d's mean", M.SEEDS[2]) end
  if m and not zr.ok then
    if is_int_dtype(o.dtype) then m = math.floor(m + 0.5) end
    local c = B.const(y, m)
    if B.compare(c, y, tol).ok then flag("trivial_constant", si, o.name, fmt("the constant %s%s", g(m), whose or "")) end
    B.free(c)
  end
  for _, spec in ipairs(t.inputs) do
    if spec.dtype == o.dtype and numel_of(spec, sh.sym) == n and spec.role ~= "parameter" then
      if B.compare(sh.a.ins[spec.name], y, tol).ok then flag("trivial_input", si, o.name, "input " .. spec.name) end
    end
  end
  if sh.b and B.compare(sh.b.outs[o.name], y, tol).ok then
    flag("input_independent", si, o.name, fmt("seeds %d and %d agree", M.SEEDS[1], M.SEEDS[2]))
  end
end

-- Checks output o at shape sh: NaN/Inf, then determinism and, where it is judged, the
-- trivial candidates.
local function check_output(ls, sh, o)
  local B, flag, si = ls.B, ls.flag, sh.si
  local tol = ls.t.tolerance[o.dtype]
  local y = sh.a.outs[o.name]
  local n = numel_of(o, sh.sym)
  local zeros = B.zeros(y)
  local z = B.compare(y, zeros, { atol = tol.atol, rtol = 0 }) -- |y| <= atol, element by element
  local bad_values = (z.nan or 0) + (z.inf or 0)
  if bad_values > 0 then
    flag("nan_inf", si, o.name, fmt("%d NaN, %d Inf of %d", z.nan or 0, z.inf or 0, n))
  else
    if sh.a2 then
      local d = B.compare(sh.a2.outs[o.name], y, tol)
      if not d.ok then flag("nondeterministic", si, o.name, fmt("%d of %d elements differ, max |diff| %s", d.mismatches or 0, n, g(d.max_abs or 0))) end
    end
    if n >= M.MIN_ELEMENTS or (ls.small[o.name] and n > 0) or (si == 1 and n > 0) then
      ls.judged[si] = true
      judge_trivial(ls, sh, o, zeros, z)
    end
  end
  B.free(zeros)
end

-- Lints shape set si: the reference on seed 1 twice and seed 2 once, each output checked,
-- then the sample estimate and (at the timed shape) the closed form.
local function lint_shape(ls, si, sym)
  local B, s, t, res = ls.B, ls.s, ls.t, ls.res
  local label = (res.heldout == si) and fmt("shape %d (held-out)", si) or fmt("shape %d", si)
  local a, aerr, acode = B.run(s, sym, M.SEEDS[1])
  if not a then
    -- out of memory: unchecked, as where the reference would not open (open_failed)
    if acode == "SKIP" or out_of_memory(aerr) then
      res.unchecked[#res.unchecked + 1] = label .. ": " .. tostring(aerr)
    else ls.flag("reference_error", si, nil, aerr) end
    return
  end
  ls.ran[si] = true
  local a2 = B.run(s, sym, M.SEEDS[1])
  local b = B.run(s, sym, M.SEEDS[2])
  local sh = { si = si, sym = sym, a = a, a2 = a2, b = b } -- the shape set and its three runs
  for _, o in ipairs(t.outputs) do check_output(ls, sh, o) end
  if a2 then B.release(s, a2) end
  if b and sample_estimate(B, s, t, sym, si, { a, b }, ls.flag, res, label) then ls.estimated[si] = true end
  if b and si == 1 and closed_form(B, s, t, sym, { a, b }, ls.flag, res) then ls.closed[si] = true end
  if b then B.release(s, b) end
  B.release(s, a)
end

-- Times the reference at the timed shape, as the judge does; flags too_short.
local function time_reference(ls)
  local res = ls.res
  local ms, floor = ls.B.time(ls.s, ls.t.shapes[1])
  if not ms then res.unchecked[#res.unchecked + 1] = "timing: " .. tostring(floor)
  else
    res.reference_ms, res.floor_ms = ms, floor
    local limit = math.max(M.TOO_SHORT_MS, 4 * (floor or 0))
    if ms < limit then ls.flag("too_short", 1, nil, fmt("median %.4f ms < %.4f ms", ms, limit)) end
  end
end

-- Closes the session and decides which flags stand: the timed shape decides (M.AT_TIMED);
-- where it did not run here, M.EVERY_SHAPE's rule, with notes saying so.
local function conclude(ls)
  local res, t, judged = ls.res, ls.t, ls.judged
  local lost = ls.B.close(ls.s)
  if lost then res.unchecked[#res.unchecked + 1] = lost; res.context_lost = true end
  if not ls.ran[1] and next(judged) then
    local list = {}
    for si in pairs(judged) do list[#list + 1] = si end
    table.sort(list)
    res.notes[#res.notes + 1] = fmt("the timed shape did not run here: trivial candidates flag only where they hold at every shape judged (%s), the sample estimate at any shape", concat(list, ", "))
  end
  if not ls.ran[1] then
    for _, o in ipairs(t.outputs) do
      local n = numel_of(o, t.shapes[1])
      if n > 0 and n < M.MIN_ELEMENTS then
        res.unchecked[#res.unchecked + 1] = fmt("closed form (%s): it is decided at the timed shape, which did not run here", o.name)
      end
    end
  end
  local tried = { sample_estimate = ls.estimated, closed_form = ls.closed }
  for r in pairs(M.EVERY_SHAPE) do tried[r] = judged end
  res.flags = decide(res.flags, tried, judged, res.notes)
end

-- Lints one task (at the precision it was loaded at) with backend B. -> result:
-- { task, path, precision, level, where, device, flags, unchecked, shapes, reference_ms }
function M.run(t, opts)
  opts = opts or {}
  local B = opts.backend or M.backend()
  local ls = new_lint(t, B)
  local s, why, code = B.open(t)
  if not s then
    open_failed(ls, why, code)
    return ls.res
  end
  ls.s = s
  for si, sym in ipairs(t.shapes) do lint_shape(ls, si, sym) end
  time_reference(ls)
  conclude(ls)
  return ls.res
end

-- true when a result flags anything
function M.flagged(res) return type(res) == "table" and type(res.flags) == "table" and #res.flags > 0 end

-- The distinct reasons of a result, in REASONS' order.
function M.reasons(res)
  local seen, out = {}, {}
  for _, f in ipairs(res and res.flags or {}) do seen[f.reason] = true end
  for _, r in ipairs(M.REASONS) do if seen[r.key] then out[#out + 1] = r.key end end
  return out
end

----------------------------------------------------------------------------------------
-- the cache: results kept like task specs (km.jsoncache), keyed by the task's content, its
-- precision, where it ran (cuda | cpu) and the torch version

local torch_version_memo
function M.torch_version()
  if torch_version_memo == nil then
    local python = require "km.python"
    local v
    if python.available() then
      v = python.eval("(lambda m: m.version('torch'))(__import__('importlib.metadata', fromlist=['version']))")
    end
    torch_version_memo = type(v) == "string" and v or "none"
  end
  return torch_version_memo
end

-- What decides a task's lint result: its files' texts, shapes and tolerance.
local function content(t)
  local r = t.reference
  local parts = { r.source_text or "", r.launch_text or "", r.pytorch_text or "" }
  if t.dir and not r.pytorch then parts[#parts + 1] = task_mod.read_file(t.dir .. "/task.lua") or "" end
  for i, sym in ipairs(t.shapes) do parts[#parts + 1] = i .. task_mod.fmt_shape(sym) end
  local tols = {}
  for dt, tol in pairs(t.tolerance) do tols[#tols + 1] = fmt("%s:%.17g:%.17g", dt, tol.atol, tol.rtol) end
  table.sort(tols)
  parts[#parts + 1] = concat(tols, ",")
  return concat(parts, "\0")
end

local function cache_key(t, where)
  local jc = require "km.jsoncache"
  return jc.key("lint", M.VERSION, { content = content(t), precision = t.reference.precision or "fp32",
    where = where, torch = M.torch_version() }, { "content", "precision", "where", "torch" })
end

local function cache_dir() return require("km.jsoncache").dir("lint", "KM_LINT_DIR") end

-- A result that says more about the machine than the task: the reference could not run
-- here at all (res.machine: no PyTorch, no GPU), or a check was left undone for want of GPU
-- memory (the device was busy: other processes, a large neighbour). Such a result is not
-- kept, so the next lint, on a machine that has what was missing, tries again.
function M.transient(res)
  if res and res.machine then return true end
  for _, u in ipairs(res and res.unchecked or {}) do if out_of_memory(u) then return true end end
  return false
end

-- Keeps a result under what it depended on (the task's content, precision, where it ran,
-- the torch version); a transient one is refused. -> true | nil, why
function M.put(t, res)
  if M.transient(res) then return nil, "not kept: it says what this machine lacks, not what the task is" end
  return require("km.jsoncache").put(cache_dir(), cache_key(t, res.where), { result = M.encodable(res) })
end

-- The kept result for t: the GPU's where there is one, else the CPU's; nil when never linted.
function M.cached(t)
  local dir = cache_dir()
  if not dir then return nil end
  local f = io.open(dir .. "/.", "rb")
  if not f then return nil end -- nothing was ever linted here: no Python started to ask
  f:close()
  local jc = require "km.jsoncache"
  for _, where in ipairs { "cuda", "cpu" } do
    local rec = jc.get(dir, cache_key(t, where))
    if rec and type(rec.result) == "table" then return rec.result end
  end
end

-- A result as JSON values (arrays stay arrays when empty).
function M.encodable(res)
  local out = {}
  for k, v in pairs(res) do out[k] = v end
  out.flags = json.array(res.flags or {})
  out.unchecked = json.array(res.unchecked or {})
  out.notes = json.array(res.notes or {})
  return out
end

-- What an episode's summary keeps of a task's lint (docs/store.md): nil when never linted.
function M.brief(res)
  if type(res) ~= "table" then return nil end
  return { flagged = M.flagged(res), reasons = json.array(M.reasons(res)), where = res.where,
    unchecked = #(res.unchecked or {}) }
end

-- Called by km.run.runner.summary: the task's lint and held-out shape into an episode summary.
function M.annotate_summary(s, t)
  if t.lint then s.lint = t.lint end
  if t.heldout then s.heldout_shape = t.heldout.shape end
end

-- Before a run: each task's kept lint result as t.lint (M.brief); a warning for each flagged
-- task; with opts.skip, flagged tasks left out unless opts.allow (--allow-degenerate).
-- -> the tasks to run
function M.gate(tasks, opts)
  opts = opts or {}
  local who = opts.who or "kmrun"
  local kept, skipped = {}, 0
  for _, t in ipairs(tasks) do
    local ok, res = pcall(M.cached, t)
    t.lint = ok and M.brief(res) or nil
    if t.lint and t.lint.flagged then
      local reasons = concat(M.reasons(res), ", ")
      local dropped = opts.skip and not opts.allow
      io.stderr:write(fmt("%s: %s (%s): kmrun tasks lint flagged it (%s)%s\n", who, t.name,
        t.reference.precision or "fp32", reasons,
        dropped and "; skipped (--allow-degenerate runs it)" or "; its verdicts prove little"))
      if dropped then skipped = skipped + 1 else kept[#kept + 1] = t end
    else
      kept[#kept + 1] = t
    end
  end
  return kept, skipped
end

----------------------------------------------------------------------------------------
-- output

-- A table: one line per task (ok / FLAGGED / unchecked: the machine could not run its
-- reference), a line per flag under it; what the machine lacks is said once, at the end.
function M.format(results)
  local out, w, sw = {}, 8, 7
  for _, r in ipairs(results) do
    w = math.max(w, #r.task + #r.precision + 1)
    if r.machine then sw = 9 end
  end
  local nflag, lacks, lacked = 0, {}, {}
  for _, r in ipairs(results) do
    local name = r.task .. "@" .. r.precision
    local state = M.flagged(r) and "FLAGGED" or r.machine and "unchecked" or "ok"
    if M.flagged(r) then nflag = nflag + 1 end
    if r.machine then
      local code = r.machine.code
      if not lacked[code] then lacked[code] = 0; lacks[#lacks + 1] = r.machine end
      lacked[code] = lacked[code] + 1
    end
    local extra = r.reference_ms and fmt("  reference %.4f ms", r.reference_ms) or ""
    out[#out + 1] = fmt("%-" .. sw .. "s  %-" .. w .. "s  %s%s%s", state, name, r.where,
      r.heldout and fmt(", %d shapes (held-out %d)", r.shapes, r.heldout) or fmt(", %d shape%s", r.shapes, r.shapes == 1 and "" or "s"), extra)
    local pad = (" "):rep(sw + 2)
    for _, f in ipairs(r.flags) do
      out[#out + 1] = fmt("%s%-17s %s%s%s  %s", pad, M.REASON[f.reason].short,
        f.shape and ("shape " .. f.shape) or "every shape", f.heldout and " (held-out)" or "",
        f.output and ("  " .. f.output) or "", f.detail or "")
    end
    for _, u in ipairs(r.notes or {}) do out[#out + 1] = pad .. "note: " .. u end
    for _, u in ipairs(r.unchecked) do out[#out + 1] = pad .. "not checked: " .. u end
  end
  local nmachine = 0
  for _, n in pairs(lacked) do nmachine = nmachine + n end
  out[#out + 1] = fmt("%d task-precision(s) linted, %d flagged%s", #results, nflag,
    nmachine > 0 and fmt(", %d not checked here (nothing kept for them)", nmachine) or "")
  for _, m in ipairs(lacks) do
    out[#out + 1] = fmt("not checked (%d): %s", lacked[m.code], m.why)
  end
  return concat(out, "\n") .. "\n"
end

function M.json(results, extra)
  local list = {}
  for i, r in ipairs(results) do list[i] = M.encodable(r) end
  local o = { results = json.array(list), reasons = {} }
  for _, r in ipairs(M.REASONS) do o.reasons[r.key] = r.text end
  for k, v in pairs(extra or {}) do o[k] = v end
  return json.encode(o, { nan = "null" })
end

return M
