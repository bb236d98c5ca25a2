-- GPU: a KernelBench problem file is a task as it is. Problems written here in KernelBench's
-- form; candidates judged against PyTorch eager in the worker (same context, same stream,
-- buffers shared without copies), timed by the same protocol, speedup over eager.
local t = require "km.tap"
t.require_gpu()
local kb = require "km.kernelbench"
local okk, why = kb.available()
if not okk then t.skip_all("PyTorch not available (KM_PYTHON): " .. tostring(why)) end
local task = require "km.task"
local eval = require "km.eval"

local DIR = os.tmpname()
os.remove(DIR)
assert(os.execute("mkdir -p " .. DIR))
local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end
local HEAD = "import torch\nimport torch.nn as nn\n\n"
local RELU = write(DIR .. "/19_ReLU.py", HEAD .. [[
class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

batch_size = 4096
dim = 4096

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
]])
local LINEAR = write(DIR .. "/linear_relu.py", HEAD .. [[
class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x, scale: float):
        return torch.relu(self.fc(x) * scale)

def get_inputs():
    return [torch.randn(512, 256), 0.5]

def get_init_inputs():
    return [256, 128]
]])

local RELU_SRC = [[extern "C" __global__ void relu(const float *x, float *y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
}]]
local RELU_LAUNCH = [[return function(k, io, s)
  local n = io.x:numel()
  k.relu{ grid = k.cdiv(n, 256), block = 256 }(io.x, io.out, n)
end]]
local LINEAR_SRC = [[extern "C" __global__ void linear_relu(const float *x, const float *w, const float *b, float *y,
    int m, int n, int k, float scale) {
  int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m || j >= n) return;
  float acc = 0.f;
  for (int q = 0; q < k; q++) acc += x[i * k + q] * w[j * k + q];
  y[i * n + j] = fmaxf((acc + b[j]) * scale, 0.f);
}]]
local LINEAR_LAUNCH = [[return function(k, io, s)
  local m, kk = io.x:shape()[1], io.x:shape()[2]
  local n = io.fc_weight:shape()[1]
  k.linear_relu{ grid = { k.cdiv(n, 128), m }, block = 128 }(io.x, io.fc_weight, io.fc_bias, io.out, m, n, kk, s.scale)
end]]

local pool = assert(eval.pool { gpus = { tonumber(os.getenv("KM_TEST_GPU") or "0") }, timeout = 120 })

t.test("a problem file loads as a task: inputs, parameters by state_dict name, scalars in s", function()
  local lt = assert(task.load(LINEAR))
  t.eq(lt.inputs[1].name, "x")
  t.eq(lt.inputs[2].name, "fc_weight"); t.eq(lt.inputs[2].shape[1], 128); t.eq(lt.inputs[2].shape[2], 256)
  t.eq(lt.inputs[3].name, "fc_bias")
  t.eq(lt.outputs[1].name, "out")
  t.eq(lt.shapes[1].scale, 0.5)
  t.eq(lt.tolerance.f32.atol, 1e-4)
end)

t.test("ReLU against PyTorch eager: correct, timed, speedup over eager", function()
  local rt = assert(task.load(RELU))
  local v = pool:eval(rt, { name = "relu", source = RELU_SRC, launch = RELU_LAUNCH }, { seeds = 2 })
  t.eq(v.status, "correct", v.feedback)
  t.eq(v.speedup_over, "pytorch_eager")
  t.ok(v.feedback:find("PyTorch eager", 1, true), v.feedback)
  -- a plain kernel against torch.relu (which allocates its output each call): 2.2x measured
  t.ok(v.speedup > 0.5 and v.speedup < 5, tostring(v.speedup))
  t.ok(v.timing.candidate.checked_calls >= 1)
  t.note(("relu: candidate %.4f ms, eager %.4f ms"):format(v.timing.candidate.median, v.timing.reference.median))
end)

t.test("a model with parameters and a scalar input: the candidate reads them from io and s", function()
  local lt = assert(task.load(LINEAR))
  local v = pool:eval(lt, { name = "linear", source = LINEAR_SRC, launch = LINEAR_LAUNCH }, { seeds = 2 })
  t.eq(v.status, "correct", v.feedback)
  local wrong = pool:eval(lt, { name = "no bias", source = LINEAR_SRC:gsub("acc %+ b%[j%]", "acc"), launch = LINEAR_LAUNCH },
    { seeds = 1, timing = false })
  t.eq(wrong.status, "mismatch", wrong.feedback)
end)

t.test("a launch that expects a parameter the model does not have: a launch_error naming what it has", function()
  local lt = assert(task.load(LINEAR))
  local v = pool:eval(lt, { name = "reads io.fc_scale", source = LINEAR_SRC,
    launch = LINEAR_LAUNCH:gsub("io%.fc_bias", "io.fc_scale") }, { seeds = 1, timing = false })
  t.eq(v.status, "launch_error", v.feedback)
  t.ok(v.feedback:find("io.fc_scale: the task has no buffer named 'fc_scale' (its buffers: fc_bias, fc_weight, out, x)", 1, true),
    v.feedback)
end)

t.test("the judge's defences hold with a PyTorch reference", function()
  local rt = assert(task.load(RELU))
  local v = pool:eval(rt, { name = "skips when timed", source = '__device__ unsigned int calls;\n' .. RELU_SRC:gsub(
    "if %(i < n%)", "unsigned int c = calls; if (i == 0) atomicAdd(&calls, 1u); if (c > 8) return; if (i < n)"),
    launch = RELU_LAUNCH }, { seeds = 1 })
  t.eq(v.status, "mismatch", v.feedback)
  local m = pool:eval(rt, { name = "modifies x", source = RELU_SRC:gsub("y%[i%] = fmaxf%(x%[i%], 0.f%);",
    "{ y[i] = fmaxf(x[i], 0.f); ((float *)x)[i] = 0.f; }"), launch = RELU_LAUNCH }, { seeds = 1, timing = false })
  t.eq(m.status, "inputs_modified", m.feedback)
end)

t.test("a PyTorch reference that hangs on the GPU is stopped at the task timeout, like a candidate", function()
  local hang = write(DIR .. "/hangs_on_gpu.py", HEAD .. [[
import time

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        if x.is_cuda:  # the spec (meta device) returns; the judge's run on the GPU never does
            time.sleep(10 ** 6)
        return torch.relu(x)

def get_inputs():
    return [torch.randn(1024, 1024)]

def get_init_inputs():
    return []
]])
  local ht = assert(task.load(hang))
  local short = assert(eval.pool { gpus = { tonumber(os.getenv("KM_TEST_GPU") or "0") }, timeout = 6 })
  local w = require("km.timing").wall()
  local v = short:eval(ht, { name = "relu", source = RELU_SRC, launch = RELU_LAUNCH }, { seeds = 1, timing = false })
  local took = require("km.timing").wall() - w
  t.eq(v.status, "timeout", v.feedback)
  t.ok(took < 40, ("stopped after %.1f s"):format(took))
  -- the pool goes on with a fresh worker
  local rt = assert(task.load(RELU))
  local ok = short:eval(rt, { name = "relu", source = RELU_SRC, launch = RELU_LAUNCH }, { seeds = 1, timing = false })
  t.eq(ok.status, "correct", ok.feedback)
  short:close()
end)

t.test("kmrun tasks check runs each problem's reference on the GPU and names the one that fails", function()
  local KMRUN = arg[-1]:match("kmrun$") and arg[-1] or "build/kmrun"
  local d = DIR .. "/check"
  os.execute("mkdir -p " .. d)
  os.execute(("cp %s %s %s/"):format(RELU, LINEAR, d))
  write(d .. "/fails_on_gpu.py", HEAD .. [[
class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        if x.is_cuda:
            raise RuntimeError("this model refuses the GPU")
        return x

def get_inputs():
    return [torch.randn(64, 64)]

def get_init_inputs():
    return []
]])
  local p = io.popen(KMRUN .. " tasks check " .. d .. " 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  t.ok(out:find("rc=1", 1, true), out)
  t.ok(out:find("ok   19_ReLU", 1, true) and out:find("ok   linear_relu", 1, true), out)
  t.ok(out:find("FAIL fails_on_gpu", 1, true) and out:find("this model refuses the GPU", 1, true), out)
  t.ok(out:find("3 task(s), 1 failed", 1, true), out)
  t.ok(not out:find("references not run", 1, true), out)
end)

t.test("kmrun eval PROBLEM.py CANDIDATE: exit 0 and the eager time", function()
  local KMRUN = arg[-1]:match("kmrun$") and arg[-1] or "build/kmrun"
  local cdir = DIR .. "/cand"
  os.execute("mkdir -p " .. cdir)
  write(cdir .. "/kernel.cu", RELU_SRC)
  write(cdir .. "/launch.lua", RELU_LAUNCH)
  local p = io.popen(KMRUN .. " eval " .. RELU .. " " .. cdir .. " --json --no-energy 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  t.ok(out:find("rc=0", 1, true), out:sub(-400))
  local v = require("km.json").decode(out:match("^(.*)rc=%d+%s*$"))
  t.eq(v and v.status, "correct")
  t.ok(v and v.timing.reference.median > 0)
end)

pool:close()
os.execute("rm -rf " .. DIR)
t.done()
