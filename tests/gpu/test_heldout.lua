-- GPU: the held-out shape and kmrun tasks lint on the GPU. A problem file written here in
-- KernelBench's format gets a held-out shape the judge verifies: a candidate that takes its
-- sizes from the buffers is correct at both shape sets, one that hard-codes the problem's
-- sizes passes the timed shape and fails the held-out one, and an all-zeros candidate fails
-- the sound problem. `kmrun tasks lint` runs there through the judge: the sound problem
-- exits 0 with its reference timed, a degenerate one (an output divided down below the
-- tolerance) is flagged. Skips without a GPU, or without a CUDA torch (KM_PYTHON).
local t = require "km.tap"
local json = require "km.json"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true, cuda = true })

local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()
-- 8 M elements: the reference (eager ReLU, about 17 us of GPU time) is long enough that lint
-- does not call it too short to time
local RELU = testing.problem(DIR, "19_ReLU", { sizes = "batch_size = 4096\ndim = 2048" })
local DIVIDED = testing.problem(DIR, "98_Divided", { args = "scale", init = "self.scale = scale",
  returns = "x / torch.linalg.vector_norm(x, dim=1, keepdim=True) / self.scale", sizes = "batch_size = 64\ndim = 4096",
  init_inputs = "1e4" })

local SOURCE = [[
extern "C" __global__ void relu(const float *x, float *y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
extern "C" __global__ void zeros(float *y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 0.f;
}
]]
local GENERIC = { name = "generic", source = SOURCE, launch = [[
return function(k, io, s)
  local n = io.x:numel()
  k.relu{ grid = k.cdiv(n, 256), block = 256 }(io.x, io.out, n)
end]] }
local HARDCODED = { name = "hardcoded", source = SOURCE, launch = [[
return function(k, io, s)
  local n = 4096 * 2048 -- the problem's own sizes, written in
  k.relu{ grid = k.cdiv(n, 256), block = 256 }(io.x, io.out, n)
end]] }
local ZEROS = { name = "zeros", source = SOURCE, launch = [[
return function(k, io, s)
  local n = io.out:numel()
  k.zeros{ grid = k.cdiv(n, 256), block = 256 }(io.out, n)
end]] }

local judge = require("km.judge").new()
local tk = assert(require("km.task.kbtask").load(RELU))

t.test("the problem file has a held-out shape: three quarters of each size, made odd", function()
  t.eq(#tk.shapes, 2)
  t.eq(tk.shapes[2].batch_size, 3073); t.eq(tk.shapes[2].dim, 1537)
end)

t.test("a candidate that reads its sizes is correct at the timed and the held-out shape", function()
  local v = judge:eval(tk, GENERIC, { timing = false, seeds = 2 })
  t.eq(v.status, "correct", v.feedback)
  local at = {}
  for _, c in ipairs(v.checks) do at[c.shape] = (at[c.shape] or 0) + 1 end
  t.ok((at[2] or 0) >= 2, "the held-out shape was verified: " .. json.encode(at))
end)

t.test("a candidate that hard-codes the problem's sizes passes the timed shape and fails the held-out one", function()
  local v = judge:eval(tk, HARDCODED, { timing = false, seeds = 2 })
  t.ok(v.status ~= "correct", v.status)
  t.eq(v.failed_at and v.failed_at.shape, 2, "failed at the held-out shape: " .. tostring(v.feedback))
end)

t.test("the judge fails an all-zeros candidate on the sound problem", function()
  local v = judge:eval(tk, ZEROS, { timing = false, seeds = 1 })
  t.eq(v.status, "mismatch", v.feedback)
  t.eq(v.failed_at and v.failed_at.shape, 1)
end)

local function run(args)
  local o = DIR .. "/out"
  local ok, _, code = os.execute(string.format("KM_LINT_DIR=%s/lint %s %s >%s 2>&1", DIR, KMRUN, args, o))
  return testing.read(o) or "", ok and 0 or code
end

t.test("kmrun tasks lint on the GPU: the sound problem exits 0, timed; the divided one is flagged", function()
  local out, rc = run("tasks lint " .. RELU .. " --precision fp32,bf16 --json")
  t.eq(rc, 0, out)
  local r = json.decode(out:match("{.*}"))
  for _, res in ipairs(r.results) do
    t.eq(res.where, "cuda")
    t.eq(#res.flags, 0, json.encode(res.flags))
    t.ok(type(res.reference_ms) == "number" and res.reference_ms > 0, "the reference was timed")
  end
  out, rc = run("tasks lint " .. DIVIDED .. " --json")
  t.eq(rc, 1, out)
  local res = json.decode(out:match("{.*}")).results[1]
  local reasons = {}
  for _, f in ipairs(res.flags) do reasons[f.reason] = true end
  t.ok(reasons.trivial_zeros, "zeros pass: " .. json.encode(res.flags))
  -- and the judge agrees: zeros are judged correct on the degenerate problem
  local td = assert(require("km.task.kbtask").load(DIVIDED))
  local v = judge:eval(td, { name = "zeros", source = SOURCE, launch = ZEROS.launch }, { timing = false, seeds = 1 })
  t.ok(v.status == "correct" or tostring(v.feedback):find("degenerate", 1, true),
    "what lint says passes does pass (or the judge's own degenerate check refuses the task): " .. tostring(v.feedback))
end)

os.execute("rm -rf " .. DIR)
t.done()
