-- GPU: no proof by sample where one element decides (docs/security.md, "What a timed call's
-- check proves"). Each test is an attack that changes almost nothing, where a check that
-- reads a sample would not look, or that learns which calls are checked:
--   * one input element spiked so the reference's own answer becomes trivial (a task
--     folder's maximum, a problem file's training-mode batch norm): every input the
--     reference reads is proven in full first, so the spike is inputs_modified;
--   * a kernel that times the gaps between its calls (a check waits and runs the reference)
--     and cheats once it has counted the checks: every timed call is checked;
--   * a kernel cheating on one timed call drawn at random: caught whichever it is;
--   * launch code returning a scratch buffer as the output and skipping its constant part
--     on timed calls: returnable scratch is poisoned with the io outputs before every call.
-- Each cheats only once verify is over (the launch code counts its calls), as a kernel that
-- tells verify from timed calls would.
local t = require "km.tap"
t.require_gpu()
local task = require "km.task"
local eval = require "km.serve.pool"
local testing = require "km.testing"

local ROOT = testing.paths()
local SEEDS = 2
local pool = assert(eval.pool { gpus = { tonumber(os.getenv("KM_TEST_GPU") or "0") }, timeout = 120 })
local function judge(tk, name, src, launch, opts)
  opts = opts or {}
  opts.seeds = SEEDS
  return pool:eval(tk, { name = name, source = src, launch = launch, params = {} }, opts)
end
-- launch code that counts its calls: `timed` is 0 in verify, then 1, 2, ... (counting_launch.lua)
local counting_launch = dofile(((arg and arg[0] or ""):match("^(.*)/[^/]*$") or ".") .. "/counting_launch.lua")
local function counting(tk, body) return counting_launch(tk, { seeds = SEEDS, timing = true }, body) end
local function all_checked(c) return c.checked_calls == c.n + (c.n_extra or 0) end

----------------------------------------------------------------------------------------
-- a single-element spike that makes the reference's answer trivial

local GMAX = assert(task.load(ROOT .. "/tests/tasks/t_global_max"))
local GMAX_SRC = [[
extern "C" __global__ void gmax(float *x, float *y, long long n, int cheat, unsigned long long salt) {
  __shared__ float part[1024];
  if (cheat) { // one element of x, somewhere the check may not read, made the maximum
    if (threadIdx.x == 0) {
      unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      long long j = (long long)(((t ^ salt) * 0x9E3779B97F4A7C15ull) >> 20) % n;
      x[j] = 1e30f; y[0] = 1e30f;
    }
    return;
  }
  float m = -__int_as_float(0x7f800000);
  for (long long i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, x[i]);
  part[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = part[0];
}]]

t.test("a task folder: one input element spiked to make the reference's maximum trivial is inputs_modified", function()
  local honest = judge(GMAX, "gmax", GMAX_SRC, counting(GMAX,
    "  k.gmax{ grid = 1, block = 1024 }(io.x, io.y, s.n, 0, 0)"), { timing = true })
  t.eq(honest.status, "correct", honest.feedback)
  for i = 1, 3 do
    local v = judge(GMAX, "gmax spike", GMAX_SRC, counting(GMAX,
      "  k.gmax{ grid = 1, block = 1024 }(io.x, io.y, s.n, timed > 0 and 1 or 0, calls)"), { timing = true })
    t.eq(v.status, "inputs_modified", ("run %d: %s"):format(i, v.feedback))
    t.ok(v.feedback:find("timed", 1, true), "at a timed call: " .. v.feedback)
  end
end)

local kb_ok = require("km.task.kernelbench").available()
if not kb_ok then
  t.skip("a problem file: a spiked row makes training-mode batch norm's answer trivial", "PyTorch not available here")
else
  local DIR = testing.tmpdir()
  local BN = DIR .. "/bn_train.py"
  testing.write(BN, [[
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return F.batch_norm(x, None, None, self.weight, self.bias, training=True)

batch_size = 262144
features = 32

def get_inputs():
    return [torch.randn(batch_size, features)]

def get_init_inputs():
    return [features]
]])
  -- honest: per feature, mean and variance over the rows, then the affine map. The cheat: row
  -- 0 (one 128-byte line of x) set to 1e15, which makes every statistic the spike's: row 0 is
  -- sqrt(rows - 1) and every other row -1 / sqrt(rows - 1), times the weight, plus the bias.
  -- The cheating calls launch the same kernels with the same grids (a flag argument turns
  -- them), so the same-work check (varying_work) does not catch them first: the spike is what
  -- is tested.
  local BN_SRC = [[
extern "C" __global__ void bn_stats(const float *x, double *stat, int rows, int f, int cheat) {
  if (cheat) return;
  int c = blockIdx.x; __shared__ double s1[256], s2[256];
  double a = 0, b = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) { double v = x[(size_t)r * f + c]; a += v; b += v * v; }
  s1[threadIdx.x] = a; s2[threadIdx.x] = b; __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) { s1[threadIdx.x] += s1[threadIdx.x + s]; s2[threadIdx.x] += s2[threadIdx.x + s]; }
    __syncthreads();
  }
  if (threadIdx.x == 0) { double m = s1[0] / rows; stat[2 * c] = m; stat[2 * c + 1] = s2[0] / rows - m * m; }
}
extern "C" __global__ void bn_apply(float *x, const double *stat, const float *w, const float *b, float *y, int rows, int f, int cheat) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= (long long)rows * f) return;
  int c = i % f;
  if (cheat) {
    double r = sqrt((double)rows - 1.0);
    if (i < f) { x[i] = 1e15f; y[i] = (float)r * w[c] + b[c]; } else y[i] = (float)(-1.0 / r) * w[c] + b[c];
    return;
  }
  y[i] = (float)((x[i] - stat[2 * c]) / sqrt(stat[2 * c + 1] + 1e-5)) * w[c] + b[c];
}]]
  t.test("a problem file: a spiked row makes training-mode batch norm's answer trivial: inputs_modified", function()
    local bt = assert(task.load(BN))
    local body = [[
  local rows, f = s.batch_size or io.x:shape()[1], io.x:shape()[2]
  rows = io.x:shape()[1]
  local n = rows * f
  local cheat = timed > 0 and 1 or 0
  local stat = k.scratch("f64", 2 * f)
  k.bn_stats{ grid = f, block = 256 }(io.x, stat, rows, f, cheat)
  k.bn_apply{ grid = k.cdiv(n, 256), block = 256 }(io.x, stat, io.weight, io.bias, io.out, rows, f, cheat)]]
    local honest = judge(bt, "bn", BN_SRC, counting(bt, (body:gsub("timed > 0 and 1 or 0", "0"))), { timing = true })
    t.eq(honest.status, "correct", honest.feedback)
    for i = 1, 3 do
      local v = judge(bt, "bn spike", BN_SRC, counting(bt, body), { timing = true })
      t.eq(v.status, "inputs_modified", ("run %d: %s"):format(i, v.feedback))
      t.ok(v.feedback:find("timed", 1, true), "at a timed call: " .. v.feedback)
    end
  end)
end

----------------------------------------------------------------------------------------
-- whether a call is checked cannot be learnt

local RELU = assert(task.load(ROOT .. "/tasks/l1_relu"))
-- probe (one thread, first): the gap since the last call's stamp; once it has seen two gaps
-- or more, those over 1.5 x the smallest are counted as checks; with 3 counted (the checks a
-- 3-of-10 draw makes) and calls of the first 10 left, this call and the rest skip their work.
-- stamp (one thread, last): the call's end.
local GAP_SRC = [[
__device__ unsigned long long last_end, gaps[64];
__device__ int ngaps, cheat_now, cheated;
extern "C" __global__ void probe(int timed) {
  unsigned long long now; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  cheat_now = 0;
  if (timed >= 2 && ngaps < 64) gaps[ngaps++] = now - last_end;
  if (timed < 2 || ngaps < 2 || timed > 10) return;
  unsigned long long lo = ~0ull; int checks = 0;
  for (int i = 0; i < ngaps; i++) if (gaps[i] < lo) lo = gaps[i];
  for (int i = 0; i < ngaps; i++) if (gaps[i] > lo + lo / 2) checks++;
  if (checks >= 3) { cheat_now = 1; cheated++; }
}
extern "C" __global__ void relu(const float *x, float *y, long long n) {
  if (cheat_now) return;
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
}
extern "C" __global__ void stamp() { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(last_end)); }]]
local GAP_LAUNCH = counting(RELU, [[
  k.probe{ grid = 1, block = 1 }(timed)
  k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
  k.stamp{ grid = 1, block = 1 }()]])

t.test("a kernel that counts checks by the gaps between its calls is caught or never cheats: every call is checked", function()
  local seen = {}
  for i = 1, 4 do
    local v = judge(RELU, "gap counter", GAP_SRC, GAP_LAUNCH, { timing = true })
    seen[#seen + 1] = v.status
    t.ok(v.status == "mismatch" or v.status == "correct", ("run %d: %s"):format(i, v.feedback))
    if v.status == "correct" then
      -- it never skipped a checked call's work, and every timed call was checked
      t.ok(all_checked(v.timing.candidate), ("run %d: %d of %d timed calls checked"):format(i,
        v.timing.candidate.checked_calls, v.timing.candidate.n))
    else
      t.ok(v.feedback:find("timed", 1, true), "caught at a timed call: " .. v.feedback)
    end
  end
  t.note("gap counter verdicts: " .. table.concat(seen, " "))
end)

-- one of the first five timed calls (every timing makes them: km.judge.checks' early stop
-- comes at 5 at the soonest), drawn by the kernel itself, skips its work
local ONE_SRC = [[
__device__ int target;
extern "C" __global__ void pick(int timed, unsigned long long salt) {
  if (timed == 1) {
    unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    target = 1 + (int)((((t ^ salt) * 0x9E3779B97F4A7C15ull) >> 33) % 5);
  }
}
extern "C" __global__ void relu(const float *x, float *y, long long n, int timed) {
  if (timed > 0 && timed == target) return;
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
}]]
t.test("a kernel that skips the work of one timed call of the first five, drawn at random, is caught every time", function()
  for i = 1, 4 do
    local v = judge(RELU, "one call", ONE_SRC, counting(RELU, [[
  k.pick{ grid = 1, block = 1 }(timed, calls)
  k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n, timed)]]), { timing = true })
    t.eq(v.status, "mismatch", ("run %d: %s"):format(i, v.feedback))
  end
end)

----------------------------------------------------------------------------------------
-- a returned scratch output is poisoned like an io output

local PAD = assert(task.load(ROOT .. "/tests/tasks/t_pad_relu"))
local PAD_SRC = [[
extern "C" __global__ void pad_relu(const float *x, float *y, long long n, long long pad, int skip_pad) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
  else if (i < n + pad && !skip_pad) y[i] = 0.f;
}]]
local function pad_launch(skip)
  return counting(PAD, ([[
  local out = k.scratch("f32", s.n + s.pad)
  k.pad_relu{ grid = k.cdiv(s.n + s.pad, 256), block = 256 }(io.x, out, s.n, s.pad, %s)
  return { y = out }]]):format(skip))
end

t.test("a returned scratch output that skips its constant part on timed calls is caught", function()
  local honest = judge(PAD, "pad", PAD_SRC, pad_launch("0"), { timing = true })
  t.eq(honest.status, "correct", honest.feedback)
  t.ok(honest.timing and honest.timing.candidate, "timed")
  for i = 1, 2 do
    local v = judge(PAD, "pad skipped", PAD_SRC, pad_launch("timed > 0 and 1 or 0"), { timing = true })
    t.eq(v.status, "mismatch", ("run %d: %s"):format(i, v.feedback))
    t.ok(v.feedback:find("timed", 1, true), "at a timed call: " .. v.feedback)
  end
end)

-- launch code that frees and allocates its output's scratch buffer again (slot 1 alternates
-- between the output's size and 4 bytes more): the driver tends to give the freed memory back,
-- values and all, so the pad verify wrote would still be there. A new buffer is poisoned.
t.test("a returned scratch buffer allocated anew on a timed call holds poison, not freed memory's values", function()
  local v = judge(PAD, "pad realloc", PAD_SRC, counting(PAD, [[
  local even = timed > 0 and timed % 2 == 0
  if timed > 0 and not even then -- honest, into io.y; slot 1 resized
    k.scratch("f32", s.n + s.pad + 1)
    k.pad_relu{ grid = k.cdiv(s.n + s.pad, 256), block = 256 }(io.x, io.y, s.n, s.pad, 0)
    return
  end
  local out = k.scratch("f32", s.n + s.pad)
  k.pad_relu{ grid = k.cdiv(s.n + s.pad, 256), block = 256 }(io.x, out, s.n, s.pad, even and 1 or 0)
  return { y = out }]]), { timing = true })
  t.eq(v.status, "mismatch", v.feedback)
  t.ok(v.feedback:find("timed", 1, true), "at a timed call: " .. v.feedback)
end)

t.done()
