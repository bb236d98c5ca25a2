-- GPU: the judge against candidates that try to game it (issue "Verdicts and hosts that
-- cannot be gamed"). One test per class of attack; each asserts the exact status, that
-- nothing escaped, and at the end that the same workers still judge honest candidates
-- correctly with unchanged baselines.
local t = require "km.tap"
t.require_gpu()
local task = require "km.task"
local eval = require "km.serve.pool"
local timing = require "km.timing"
local testing = require "km.testing"

local ROOT = testing.paths()
local relu = assert(task.load(ROOT .. "/tasks/l1_relu"))
local rowsum = assert(task.load(ROOT .. "/tests/tasks/t_rowsum"))
local pool = assert(eval.pool { gpus = { tonumber(os.getenv("KM_TEST_GPU") or "0") }, timeout = 60 })

local RELU_LAUNCH = [[return function(k, io, s)
  k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
end]]
local function relu_src(body)
  return 'extern "C" __global__ void relu(const float *x, float *y, long long n) {\n' ..
    '  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n' .. body .. "\n}\n"
end
local HONEST = relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);")
local MARK = os.tmpname()
os.remove(MARK)

local function judge(name, src, launch, opts)
  opts = opts or {}
  if opts.seeds == nil then opts.seeds = 2 end
  local v = pool:eval(opts.task or relu, { name = name, source = src, launch = launch, params = {} }, opts)
  return v
end

local function exists(p) local f = io.open(p, "rb"); if f then f:close() return true end return false end

-- the honest twin, timed first: later honest runs must see the same reference time
local honest0 = judge("honest", HONEST, RELU_LAUNCH, { timing = true })
t.test("an honest candidate is correct and timed", function()
  t.eq(honest0.status, "correct", honest0.feedback)
  t.ok(honest0.timing.candidate.checked_calls >= 1, "timed calls were re-verified")
  t.ok(honest0.memory and honest0.memory.peak_bytes >= 2 * 4 * (1 << 28), "peak device memory reported")
end)

----------------------------------------------------------------------------------------
-- class 2: nothing a candidate wrote runs outside the sandbox

t.test("returned outputs with their own numel/dtype functions are refused, never called", function()
  local t0 = timing.wall()
  local v = judge("fake output", HONEST, [[return function(k, io, s)
    k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
    local spin = function() while true do end end
    return { y = { numel = spin, dtype = spin, shape = spin, save = spin, check_guards = spin } }
  end]], { timeout = 30 })
  t.eq(v.status, "wrong_shape", v.feedback)
  t.ok(v.feedback:find("not a buffer", 1, true), v.feedback)
  t.ok(timing.wall() - t0 < 20, "the judge never called the candidate's functions")
end)

t.test("no buffer method reaches the file system, the guards, host copies or free", function()
  local v = judge("methods", HONEST, ([[return function(k, io, s)
    local tried = {}
    for _, m in ipairs { "save", "free", "reset_guards", "to_table", "from_table", "from_string", "to_string",
      "fill", "random", "clone", "copy", "ptr", "poison", "zero", "checksum", "check_guards" } do
      if io.x[m] ~= nil or io.y[m] ~= nil then error("buffer method reachable: " .. m) end
    end
    pcall(function() io.y:save("%s") end)
    k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
  end]]):format(MARK))
  t.eq(v.status, "correct", v.feedback)
  t.ok(not exists(MARK), "no file written")
end)

----------------------------------------------------------------------------------------
-- class 3: the timed run is the verified run

-- verify makes 7 calls here (3 shapes x 2 seeds, and one at the timed shape); from the 8th
-- on every call is timed. Shrinking the shape it hands its kernel changes the grid, so the
-- call launches other work than the first: varying_work, before its check would find the
-- mismatch.
t.test("launch code that shrinks the shape table while timed is caught, baselines unharmed", function()
  local v = judge("shrink s", HONEST, [[local calls = 0
  return function(k, io, s)
    calls = calls + 1
    if calls > 8 then s.n = 1 end
    k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
  end]], { timing = true })
  t.eq(v.status, "varying_work", v.feedback)
  t.ok(v.feedback:find("timed call", 1, true), v.feedback)
end)

t.test("a kernel keeping a call counter and skipping every other call is caught", function()
  local v = judge("every other call", '__device__ unsigned int calls;\n' ..
    'extern "C" __global__ void relu(const float *x, float *y, long long n) {\n' ..
    '  unsigned int c = calls;\n' ..
    '  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n' ..
    '  if (c > 7 && (c & 1)) { if (i == 0) atomicAdd(&calls, 1u); return; }\n' ..
    '  if (i < n) y[i] = fmaxf(x[i], 0.f);\n' ..
    '  __syncthreads(); if (i == 0) atomicAdd(&calls, 1u); }', RELU_LAUNCH,
    { timing = true })
  t.eq(v.status, "mismatch", v.feedback)
end)

t.test("a kernel that skips work when the same buffers come back is caught", function()
  local v = judge("same pointer", '__device__ const float *last_x;\n' ..
    'extern "C" __global__ void relu(const float *x, float *y, long long n) {\n' ..
    '  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n' ..
    '  if (last_x == x) return;\n' ..
    '  if (i < n) y[i] = fmaxf(x[i], 0.f);\n' ..
    '  if (i == 0) last_x = x; }', RELU_LAUNCH, { timing = true })
  t.ok(v.status == "mismatch", v.status .. ": " .. v.feedback)
end)

t.test("a kernel that caches results keyed on its inputs gains nothing: every timed call has fresh inputs", function()
  -- remembers x[0..3] and, when they come back, copies a cached result (in scratch)
  local src = '__device__ float seen[4]; __device__ int valid;\n' ..
    'extern "C" __global__ void relu(const float *x, float *y, float *cache, long long n) {\n' ..
    '  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n' ..
    '  bool same = valid && seen[0] == x[0] && seen[1] == x[1] && seen[2] == x[2] && seen[3] == x[3];\n' ..
    '  if (same) { if (i < n) y[i] = cache[i]; return; }\n' ..
    '  if (i < n) { float v = fmaxf(x[i], 0.f); y[i] = v; cache[i] = v; }\n' ..
    '  if (i == 0) { seen[0] = x[0]; seen[1] = x[1]; seen[2] = x[2]; seen[3] = x[3]; valid = 1; } }'
  local v = judge("input-keyed cache", src, [[return function(k, io, s)
    local cache = k.scratch("f32", s.n)
    k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, cache, s.n)
  end]], { timing = true })
  -- with fresh inputs on every call it never finds a hit: correct, and no faster than honest
  -- work (it writes a cache as well)
  t.ok(v.status == "correct" or v.status == "mismatch", v.status)
  if v.status == "correct" then
    t.ok(v.timing.candidate.median >= 0.95 * honest0.timing.candidate.median,
      ("%.4f ms vs honest %.4f ms"):format(v.timing.candidate.median, honest0.timing.candidate.median))
  end
end)

-- Timed calls' outputs are poisoned sparsely (a 128-byte line in every 4 KiB) and hold the
-- previous call's outputs elsewhere: a kernel that tells a timed call from a verified one by
-- what its output buffer holds, and skips work there, must still be caught.
-- (a one-thread probe kernel reads the output before the work kernel writes it: stream order)
local function timed_probe(body)
  return '__device__ int timed_call;\n' ..
    'extern "C" __global__ void probe(const float *y, long long n) {\n' ..
    '  timed_call = y[0] == y[0] && y[n - 1] == y[n - 1]; } // neither is the NaN poison\n' .. relu_src(body)
end
local PROBE_LAUNCH = [[return function(k, io, s)
  k.probe{ grid = 1, block = 1 }(io.y, s.n)
  k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
end]]

t.test("a kernel that skips all work when its output is not fully poisoned (timed calls) is caught", function()
  local v = judge("lazy unless poisoned", timed_probe("if (timed_call) return;\n  if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    PROBE_LAUNCH, { timing = true })
  t.eq(v.status, "mismatch", v.feedback)
  t.ok(v.feedback:find("timed", 1, true), "caught at a timed call: " .. v.feedback)
end)

-- The check of a timed call reads a sample of the output's lines (one in 16, at offsets drawn
-- after the call): work skipped shows as wrong lines (the previous call's outputs, or poison),
-- and a kernel that skips one line in 4096 once timed (0.02% of the work) leaves 2048 blocks
-- of 16 lines with a wrong one, each read with probability 1/16: it escapes a check with
-- probability (15/16)^2048.
t.test("a kernel that skips one output line in 4096 once timed is caught by the sampled check", function()
  local v = judge("skips a line in 4096", timed_probe("if (timed_call && (i / 32) % 4096 == 7) return;\n" ..
    "  if (i < n) y[i] = fmaxf(x[i], 0.f);"), PROBE_LAUNCH, { timing = true })
  t.eq(v.status, "mismatch", v.feedback)
  t.ok(v.feedback:find("timed", 1, true), "caught at a timed call: " .. v.feedback)
  t.ok(v.feedback:find("a sample of the", 1, true), "the counts are of the sample: " .. v.feedback)
end)

-- A task whose output ends in a run that does not depend on the inputs (y = relu(x), then
-- `pad` ones): the stale values of the previous call are right there, so only the poison can
-- catch a kernel that stops writing that run once it is being timed.
local PAD_DIR = testing.tmpdir() .. "/t_relu_pad"
assert(require("km.sys").mkdir(PAD_DIR))
testing.write(PAD_DIR .. "/task.lua", [[return {
  name = "t_relu_pad", level = 1, category = "activation",
  description = "y[i] = max(x[i], 0) for i < n, then y[n + j] = 1 for j < pad.",
  reference = { source = "reference.cu", launch = "reference.lua" },
  inputs = { { name = "x", dtype = "f32", shape = { "n" }, init = { "uniform", -1, 1 } } },
  outputs = { { name = "y", dtype = "f32", shape = { "n + pad" } } },
  shapes = { { n = 1 << 20, pad = 1 << 16 }, { n = 1000, pad = 300 } },
  tolerance = { f32 = { atol = 0, rtol = 0 } },
  bytes = "4*n + 4*(n + pad)", flops = "n",
}]])
testing.write(PAD_DIR .. "/reference.cu", [[extern "C" __global__ void pad_ref(const float *x, float *y, long long n, long long pad) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.0f);
  else if (i < n + pad) y[i] = 1.0f;
}]])
testing.write(PAD_DIR .. "/reference.lua", [[return function(k, io, s)
  k.pad_ref{ grid = k.cdiv(s.n + s.pad, 256), block = 256 }(io.x, io.y, s.n, s.pad)
end]])
local PAD_LAUNCH = [[return function(k, io, s)
  k.probe{ grid = 1, block = 1 }(io.y, s.n)
  k.pad{ grid = k.cdiv(s.n + s.pad, 256), block = 256 }(io.x, io.y, s.n, s.pad)
end]]
local pad_task = assert(task.load(PAD_DIR))
-- probe: whether the run's first element already holds a one (no poison there: a timed call)
local function pad_src(tail)
  return '__device__ int have_ones;\n' ..
    'extern "C" __global__ void probe(const float *y, long long n) { have_ones = y[n] == 1.0f; }\n' ..
    'extern "C" __global__ void pad(const float *x, float *y, long long n, long long pad) {\n' ..
    '  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n' ..
    '  if (i < n) y[i] = fmaxf(x[i], 0.0f);\n' .. tail .. "\n}\n"
end

t.test("sparse poison: the honest padded task is correct and timed", function()
  local v = judge("pad honest", pad_src("  else if (i < n + pad) y[i] = 1.0f;"), PAD_LAUNCH, { task = pad_task, timing = true })
  t.eq(v.status, "correct", v.feedback)
end)

t.test("a kernel that stops writing an input-independent run once timed meets the poison", function()
  -- writes the ones only while the run's first element is not a one (every verified call)
  local v = judge("pad lazy", pad_src("  else if (i < n + pad && !have_ones) y[i] = 1.0f;"), PAD_LAUNCH,
    { task = pad_task, timing = true })
  t.eq(v.status, "mismatch", v.feedback)
  t.ok(v.feedback:find("timed", 1, true), "caught at a timed call: " .. v.feedback)
end)

-- Faults that start in the timed calls (verify's 8 calls pass): a timed call's check reads
-- the guards, the inputs, the reference and the compare back with one wait, and a fault of
-- the call itself shows at that wait.
local LATE_LAUNCH = [[local calls = 0
return function(k, io, s)
  calls = calls + 1
  k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n, calls > 9 and 1 or 0)
end]]
local function late_src(fault)
  return 'extern "C" __global__ void relu(const float *x, float *y, long long n, int late) {\n' ..
    '  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n' ..
    '  if (i < n) y[i] = fmaxf(x[i], 0.f);\n  if (late && i == 0) ' .. fault .. "\n}\n"
end
-- A timed call's check proves every element of the inputs the reference reads: with the
-- task's rows off (check_rows = false: every row read) one element written is found, whatever
-- the output sample (check_lines) reads. With them on (l1_relu declares them) the check proves
-- the drawn rows, one line in 16 (km.judge.rows): a write over 4 KiB (32 lines) is found.
for _, case in ipairs {
  { "writes past its output", "y[n + 8] = 1.f;", "out_of_bounds" },
  { "writes one element of its input", "((float *)x)[n / 2] = 5.f;", "inputs_modified", { check_rows = false } },
  { "writes 4 KiB of its input", "for (int j = 0; j < 1024; j++) ((float *)x)[n / 2 + j] = 5.f;", "inputs_modified" },
  { "faults", "y[n + (1ll << 40)] = 1.f;", "crashed" },
} do
  t.test("a kernel that " .. case[1] .. " only once timed: " .. case[3] .. " at a timed call", function()
    local opts = { timing = true }
    for k, x in pairs(case[4] or {}) do opts[k] = x end
    local v = judge("late " .. case[3], late_src(case[2]), LATE_LAUNCH, opts)
    t.eq(v.status, case[3], v.feedback)
    -- where: a timed call's check (a fault may show first at the warm-up's wait, or after)
    if case[3] ~= "crashed" then t.ok(v.feedback:find("timed", 1, true), "caught at a timed call: " .. v.feedback) end
    t.eq(v.failed_at, nil, "not blamed on a verified trial")
  end)
end
-- Wrong values from the tenth call on: the feedback's examples are the values the timed call
-- wrote (read after its check's wait, while the next call's inputs are drawn behind it: the
-- outputs are poisoned only by that call's own refresh, later).
t.test("a kernel that writes wrong values only once timed: a mismatch whose examples are what it wrote", function()
  local v = judge("late wrong", late_src("{}\n  if (late && i < n) y[i] = -0.25f;"), LATE_LAUNCH, { timing = true })
  t.eq(v.status, "mismatch", v.feedback)
  t.ok(v.feedback:find("timed", 1, true), "caught at a timed call: " .. v.feedback)
  local _, got = v.feedback:gsub("got %-0%.25,", "")
  t.eq(got, 5, "five examples, each the value the call wrote: " .. v.feedback)
end)
t.test("after the late faults, an honest candidate is correct", function()
  t.eq(judge("honest after late faults", HONEST, RELU_LAUNCH, { timing = true }).status, "correct")
end)

----------------------------------------------------------------------------------------
-- class 4: launch code cannot tamper with the evidence

t.test("resetting guards after an out-of-bounds write is impossible", function()
  local v = judge("reset guards", relu_src("if (i <= n) y[i] = i < n ? fmaxf(x[i], 0.f) : 0.f;"), [[return function(k, io, s)
    k.relu{ grid = k.cdiv(s.n + 1, 256), block = 256 }(io.x, io.y, s.n)
    pcall(function() io.y:reset_guards() end)
  end]])
  t.eq(v.status, "out_of_bounds", v.feedback)
end)

t.test("patching outputs on the host is impossible (a whole-tiles kernel fails the odd shapes)", function()
  local v = judge("host patch", relu_src("long long m = n & ~255ll; if (i < m) y[i] = fmaxf(x[i], 0.f);"), [[return function(k, io, s)
    k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
    pcall(function()
      local xs = io.x:to_table()
      for i = 1, #xs do xs[i] = math.max(xs[i], 0) end
      io.y:from_table(xs)
    end)
  end]])
  t.eq(v.status, "mismatch", v.feedback)
end)

t.test("a buffer kept from an earlier call is refused, as an argument and as an output", function()
  local v = judge("kept handle as output", HONEST, [[local kept
  return function(k, io, s)
    if kept then return { y = kept } end
    kept = io.y
    k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
  end]])
  t.eq(v.status, "wrong_shape", v.feedback)
  v = judge("kept handle as argument", HONEST, [[local kept
  return function(k, io, s)
    kept = kept or io.y
    k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, kept, s.n)
  end]])
  t.eq(v.status, "launch_error", v.feedback)
  t.ok(v.feedback:find("earlier launch call", 1, true), v.feedback)
end)

t.test("free() on a given buffer is impossible; the next honest candidate is correct", function()
  local v = judge("free", HONEST, [[return function(k, io, s)
    pcall(function() io.x:free() end)
    pcall(function() io.y:free() end)
    k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
  end]])
  t.eq(v.status, "correct", v.feedback)
  local h = judge("honest after free", HONEST, RELU_LAUNCH, { timing = false })
  t.eq(h.status, "correct", h.feedback)
end)

t.test("no reference result is reachable: the candidate runs before the reference", function()
  -- a kernel that copies whatever sits right after its output buffer (where a pooled
  -- reference output would be) gets poison, not the answer
  local v = judge("steal", 'extern "C" __global__ void rowsum(const float *x, float *y, int rows, int cols) {\n' ..
    '  int r = blockIdx.x * blockDim.x + threadIdx.x; if (r >= rows) return;\n' ..
    '  const float *p = y + rows + 1024; /* past the guard: the next allocation */\n' ..
    '  y[r] = p[r]; }', [[return function(k, io, s) k.rowsum{ grid = k.cdiv(s.rows, 128), block = 128 }(io.x, io.y, s.rows, s.cols) end]],
    { task = rowsum, timeout = 30 })
  t.ok(v.status ~= "correct", v.status)
end)

----------------------------------------------------------------------------------------
-- class 5: unbounded work inside the sandbox

for _, c in ipairs {
  { "an xpcall whose message handler loops", [[xpcall(function() error("x") end, function() while true do end end)]] },
  { "table.move over 2^40 elements", [[table.move({}, 1, 1 << 40, 2)]] },
  { "a pathological pattern", [[string.find(string.rep("a", 1 << 20), string.rep("a*", 30) .. "b")]] },
  { "a memory bomb", [[local t = {} for i = 1, 1 << 40 do t[i] = string.rep("x", 1 << 20) .. i end]] },
  { "one huge string", [[local s = string.rep("x", 1 << 36)]] },
} do
  t.test("launch code with " .. c[1] .. " -> launch_error, quickly", function()
    local t0 = timing.wall()
    local v = judge(c[1], HONEST, "return function(k, io, s) " .. c[2] .. " end", { timeout = 60 })
    t.eq(v.status, "launch_error", v.feedback)
    t.ok(timing.wall() - t0 < 30, ("took %.1f s"):format(timing.wall() - t0))
  end)
end

----------------------------------------------------------------------------------------
-- after everything: the same pool judges honest work, with the same baselines

t.test("after every attack the workers judge honest candidates correctly, baselines unchanged", function()
  local v = judge("honest again", HONEST, RELU_LAUNCH, { timing = true })
  t.eq(v.status, "correct", v.feedback)
  local r0, r1 = honest0.timing.reference.median, v.timing.reference.median
  t.ok(math.abs(r1 / r0 - 1) < 0.1, ("reference %.4f ms then %.4f ms"):format(r0, r1))
  if honest0.timing.baseline and v.timing.baseline then
    local b0, b1 = honest0.timing.baseline.median, v.timing.baseline.median
    t.ok(math.abs(b1 / b0 - 1) < 0.1, ("starter %.4f ms then %.4f ms"):format(b0, b1))
  end
  t.ok(math.abs(v.speedup / honest0.speedup - 1) < 0.15, ("speedup %.3f then %.3f"):format(honest0.speedup, v.speedup))
  local r = pool:eval(rowsum, task.starter(rowsum), { timing = false })
  t.eq(r.status, "correct", r.feedback)
  t.ok(not exists(MARK), "no file written by any attack")
end)

pool:close()
t.done()
