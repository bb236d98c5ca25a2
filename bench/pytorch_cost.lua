-- bench/pytorch_cost.lua — what a PyTorch reference costs per candidate in a running pool:
-- the same ReLU candidates judged against (a) tasks/l1_relu/reference.py as a KernelBench
-- problem file (PyTorch eager reference) and (b) its CUDA twin (tasks/l1_relu with the same
-- single shape, n = 2^28, CUDA reference, no PyTorch), one warm worker each, side by side.
-- The issue's target: (a) at most 1.5x (b).
--
--   build/kmrun bench/pytorch_cost.lua [--n N] [--seeds S]
--
-- The first evaluation on each side (worker start, torch import, the baselines, read from
-- the disk cache or measured) is reported apart; the N after it are the per-candidate cost.
local eval = require "km.eval"
local task = require "km.task"
local testing = require "km.testing"
local timing = require "km.timing"
local A = require "km.args"

local SPEC = A.spec {
  name = "bench/pytorch_cost.lua",
  about = "Per-candidate cost with a PyTorch reference against the same task's CUDA reference.",
  options = {
    { "n", "N", "candidates per side", type = "positive", default = 8 },
    { "seeds", "S", "seeds per shape", type = "positive", default = 3 },
    { "gpus", "I", "the GPU", type = "ints", default = { 0 } },
  },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end

local dir = testing.tmpdir()
os.execute("cp -r tasks/l1_relu " .. dir .. "/cuda_twin")
local tl = assert(testing.read(dir .. "/cuda_twin/task.lua"))
tl = tl:gsub("shapes = %b{},", "shapes = { { n = 1 << 28 } },")
testing.write(dir .. "/cuda_twin/task.lua", tl)
os.execute("cp tasks/l1_relu/reference.py " .. dir .. "/l1_relu.py")

local SRC = [[// candidate %d
extern "C" __global__ void relu(const float *x, float *y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = fmaxf(x[i], 0.0f);
}]]
local LAUNCH = [[return function(k, io, s)
  local n = io.x:numel()
  k.relu{ grid = math.min(k.cdiv(n, %d), k.device.sm_count * 32), block = %d }(io.x, io.%s, n)
end]]
local BLOCKS = { 128, 256, 512, 1024 }

local function side(path, out, extra)
  local t = assert(task.load(path))
  local pool = assert(eval.pool { gpus = { a.gpus[1] }, timeout = 600 })
  local opts = { seeds = a.seeds, energy = false }
  for k, v in pairs(extra or {}) do opts[k] = v end
  local function cand(i)
    local b = BLOCKS[(i - 1) % #BLOCKS + 1]
    return { name = "relu" .. i, source = SRC:format(i), launch = LAUNCH:format(b, b, out) }
  end
  local w0 = timing.wall()
  local v0 = pool:eval(t, cand(0), opts)
  local first = timing.wall() - w0
  assert(v0.status == "correct", v0.feedback)
  local w1 = timing.wall()
  for i = 1, a.n do
    local v = pool:eval(t, cand(i), opts)
    assert(v.status == "correct", v.feedback)
  end
  local per = (timing.wall() - w1) / a.n
  pool:close()
  return first, per, v0
end

local fp, pp, vp = side(dir .. "/l1_relu.py", "out")
local fc, pc, vc = side(dir .. "/cuda_twin", "y", { eager = false, compile_mode = "off" }) -- no PyTorch at all
print(("device %s, %s; %d candidates per side, %d seeds, n = 2^28"):format(vp.device and vp.device.name or "?",
  os.date("!%Y-%m-%d"), a.n, a.seeds))
print(("PyTorch reference (problem file): first %.2f s, then %.3f s per candidate (speedup over %s)"):format(fp, pp, vp.speedup_over))
print(("CUDA reference (twin task):       first %.2f s, then %.3f s per candidate (speedup over %s)"):format(fc, pc, vc.speedup_over))
print(("per-candidate ratio PyTorch / CUDA: %.2fx (target: at most 1.5x)"):format(pp / pc))
os.execute("rm -rf " .. dir)
