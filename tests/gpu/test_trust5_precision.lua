-- GPU: an fp32 verdict promises fp32 (issue 45, item 1). A KernelBench-style problem file
-- multiplies torch.rand matrices (all inputs in [0, 1), K = 4096): there a GEMM whose
-- operands were rounded to fp16 (as tensor-core MMA takes them; __float2half here) passes
-- every element of the tolerance (bench/precision_law.c: worst error / tolerance 0.2). Verify's
-- precision trial draws zero-mean inputs, where it does not: the candidate is `mismatch` on
-- that trial, with feedback that says so. Its honest fp32 twin — the loop over K reversed,
-- another summation order than cuBLAS's — is correct, as is a TF32-free split-K kernel.
local t = require "km.tap"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true })
local task = require "km.task"

local DIR = testing.tmpdir()
local PROB = testing.problem(DIR, "rand_matmul", { init = false, forward = "A, B", returns = "torch.matmul(A, B)",
  sizes = "M = 256\nK = 4096\nN = 256", inputs = "torch.rand(M, K), torch.rand(K, N)" })

local function src(body)
  return [[
#include <cuda_fp16.h>
extern "C" __global__ void mm(const float *A, const float *B, float *C, int m, int k, int n) {
  int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m || j >= n) return;
  float acc = 0.f;
]] .. body .. [[
  C[(size_t)i * n + j] = acc;
}
]]
end
local HALF = src [[
  for (int q = 0; q < k; q++)
    acc = fmaf(__half2float(__float2half(A[(size_t)i * k + q])), __half2float(__float2half(B[(size_t)q * n + j])), acc);
]]
local REVERSED = src [[
  for (int q = k - 1; q >= 0; q--) acc = fmaf(A[(size_t)i * k + q], B[(size_t)q * n + j], acc);
]]
local SPLIT = src [[
  float part[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int q = 0; q < k; q++) part[q & 7] = fmaf(A[(size_t)i * k + q], B[(size_t)q * n + j], part[q & 7]);
  for (int r = 0; r < 8; r++) acc += part[r];
]]
local LAUNCH = [[return function(k, io, s)
  local m, kk, n = io.A:shape()[1], io.A:shape()[2], io.B:shape()[2]
  k.mm{ grid = { k.cdiv(n, 128), m }, block = 128 }(io.A, io.B, io.out, m, kk, n)
end]]

local judge = assert(require("km.judge").new())
local lt = assert(task.load(PROB))

local function run(name, source, opts)
  opts = opts or {}
  opts.seeds = opts.seeds or 3
  opts.timing = opts.timing or false
  return judge:eval(lt, { name = name, source = source, launch = LAUNCH }, opts)
end

t.test("fp16 operands pass every ordinary trial (the premise): with the precision trial off, correct", function()
  local v = run("half, no precision trial", HALF, { precision_trial = false })
  t.eq(v.status, "correct", v.feedback)
end)

t.test("fp16 operands on an fp32 problem: mismatch on the precision trial, and the feedback says why", function()
  local v = run("half", HALF)
  t.eq(v.status, "mismatch", v.feedback)
  t.eq(v.failed_at and v.failed_at.precise, true, "failed on the precision trial")
  t.ok(v.feedback:find("zero-mean inputs", 1, true), v.feedback)
  t.ok(v.feedback:find("fp32 operands", 1, true), v.feedback)
end)

t.test("the honest fp32 twins (reversed, 8 partial sums) are correct, timed too", function()
  for _, c in ipairs { { "reversed", REVERSED }, { "split", SPLIT } } do
    local v = run(c[1], c[2], { timing = true })
    t.eq(v.status, "correct", c[1] .. ": " .. tostring(v.feedback))
    local found
    for _, row in ipairs(v.checks) do if row.precision then found = row end end
    t.ok(found, c[1] .. ": a check row of the precision trial")
    if found then t.note(("%s: precision trial %s, rel_l2 %s, max_rel %.3g"):format(c[1], found.precision,
      tostring(found.rel_l2), found.max_rel or 0)) end
  end
end)

-- The precision trial is told apart from the ordinary law by its inputs (negative values
-- where torch.rand draws none): a timed candidate's one trial at the timed shape is that
-- trial (km.judge.verify), so a kernel can be exact there and wrong on ordinary inputs. Here
-- it writes one element wrong (at an index drawn from the call's inputs) on every call whose first 16
-- inputs are all non-negative, at the timed shape. The output is 16 MiB, so a sampled check (one line in 16)
-- misses that line 15 times in 16: the timing's first check reads every line and finds it.
local SCALE = testing.problem(DIR, "rand_scale", { init = false, forward = "x", returns = "x * 2",
  sizes = "N = 1 << 22", inputs = "torch.rand(N)" })
local ORDINARY_WRONG = { name = "wrong on the ordinary law only", source = [[
extern "C" __global__ void scale(const float *x, float *y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = 2.f * x[i];
  // the timed shape only (a held-out shape is judged in full): the element drawn from this
  // call's inputs is written wrong, by the thread that owns it, where the inputs look ordinary
  if (n == (1ll << 22) && i == (long long)((__float_as_uint(x[16]) * 2654435761ull) % (unsigned long long)n)) {
    bool ordinary = true;
    for (int q = 0; q < 16; q++) ordinary = ordinary && x[q] >= 0.f;
    if (ordinary) v = -1.f;
  }
  y[i] = v;
}]], launch = [[return function(k, io, s)
  local n = io.x:numel()
  k.scale{ grid = k.cdiv(n, 256), block = 256 }(io.x, io.out, n)
end]] }

t.test("a kernel exact on the precision trial and wrong on one ordinary element is caught by the timing's first check", function()
  local st = assert(task.load(SCALE))
  for r = 1, 3 do
    local v = judge:eval(st, ORDINARY_WRONG, { seeds = 3, timing = true, energy = false })
    t.eq(v.status, "mismatch", r .. ": " .. tostring(v.feedback))
    t.ok(tostring(v.feedback):find("timed", 1, true), "caught at a timed call: " .. tostring(v.feedback))
  end
end)

t.done()
