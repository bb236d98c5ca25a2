-- GPU: a KernelBench problem file is a task as it is. Problems written here in KernelBench's
-- form; candidates judged against PyTorch eager in the worker (same context, same stream,
-- buffers shared without copies), timed by the same protocol, speedup over eager.
local t = require "km.tap"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true })
local task = require "km.task"
local eval = require "km.serve.pool"

local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local RELU = testing.problem(DIR, "19_ReLU", { sizes = "batch_size = 4096\ndim = 4096" })
local LINEAR = testing.problem(DIR, "linear_relu", { args = "in_features, out_features",
  init = "self.fc = nn.Linear(in_features, out_features)", forward = "x, scale: float",
  returns = "torch.relu(self.fc(x) * scale)", sizes = "", inputs = "torch.randn(512, 256), 0.5", init_inputs = "256, 128" })

local RELU_CAND = testing.relu_candidate()
local RELU_SRC, RELU_LAUNCH = RELU_CAND.source, RELU_CAND.launch
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
  -- wrong values once timed: compared against the model's own output, where torch put it
  -- (run("keep")), and the feedback's examples are both sides' values
  local w = pool:eval(rt, { name = "wrong when timed", source = '__device__ unsigned int calls;\n' .. RELU_SRC:gsub(
    "if %(i < n%)", "unsigned int c = calls; if (i == 0) atomicAdd(&calls, 1u); if (c > 8) { if (i < n) y[i] = -0.25f; return; } if (i < n)"),
    launch = RELU_LAUNCH }, { seeds = 1 })
  t.eq(w.status, "mismatch", w.feedback)
  t.ok(w.feedback:find("timed", 1, true), w.feedback)
  local examples, wants = 0, 0
  for want in w.feedback:gmatch("got %-0%.25, want ([^\n]+)") do
    examples = examples + 1
    local x = tonumber(want)
    if x and x >= 0 then wants = wants + 1 end
  end
  t.eq(examples, 5, w.feedback)
  t.eq(wants, 5, "each want is relu's, a number >= 0: " .. w.feedback)
  local m = pool:eval(rt, { name = "modifies x", source = RELU_SRC:gsub("y%[i%] = fmaxf%(x%[i%], 0.f%);",
    "{ y[i] = fmaxf(x[i], 0.f); ((float *)x)[i] = 0.f; }"), launch = RELU_LAUNCH }, { seeds = 1, timing = false })
  t.eq(m.status, "inputs_modified", m.feedback)
end)

t.test("a PyTorch reference that hangs on the GPU is stopped at the task timeout, like a candidate", function()
  local hang = testing.problem(DIR, "hangs_on_gpu", { imports = "import time", sizes = "", inputs = "torch.randn(1024, 1024)",
    -- the spec (meta device) returns; the judge's run on the GPU never does
    body = "if x.is_cuda:\n    time.sleep(10 ** 6)" })
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
  local d = DIR .. "/check"
  testing.problem(d, "fails_on_gpu", { body = 'if x.is_cuda:\n    raise RuntimeError("this model refuses the GPU")',
    returns = "x", sizes = "", inputs = "torch.randn(64, 64)" })
  os.execute(("cp %s %s %s/"):format(RELU, LINEAR, d))
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
  local cdir = testing.candidate_dir(DIR .. "/cand", RELU_CAND)
  local p = io.popen(KMRUN .. " eval " .. RELU .. " " .. cdir .. " --json --no-energy 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  t.ok(out:find("rc=0", 1, true), out:sub(-400))
  local v = require("km.json").decode(out:match("^(.*)rc=%d+%s*$"))
  t.eq(v and v.status, "correct")
  t.ok(v and v.timing.reference.median > 0)
end)

-- Every call's inputs replay get_inputs() (torch.randn here) with the judge's own fill and
-- copy the parameters from the model's tensors: no Python between calls, the inputs
-- checkable against their law in one read, the parameters byte for byte the model's.
t.test("a problem file's timed refresh runs no Python: its plan's laws and the model's parameters", function()
  local judge = require "km.judge"
  local python = require "km.python"
  local buffer = require "km.buffer"
  local J = assert(judge.new())
  local lt = assert(task.load(LINEAR))
  local st = assert(J:task_state(lt))
  local sym = lt.shapes[1]
  local io = J:trial_io(lt, sym, 5) -- the first fill learns the plan (get_inputs() run once)
  local plan = J:input_plan(st, sym, io)
  t.ok(plan, "a plan for torch.randn inputs and an nn.Linear's parameters")
  t.eq(plan.laws.x.law.dist, "normal"); t.eq(plan.laws.x.law.mean, 0); t.eq(plan.laws.x.law.std, 1)
  t.ok(plan.params.fc_weight and plan.params.fc_bias, "parameters copied from the model")
  local real, calls = python.call, 0
  python.call = function(...) calls = calls + 1 return real(...) end
  local ok, err = pcall(function() for seed = 1, 20 do J:fill_inputs(lt, sym, io, 1000 + seed, seed > 10) end end)
  python.call = real
  t.ok(ok, tostring(err))
  t.eq(calls, 0, "10 verified trials' and 10 timed calls' fills called into Python")
  local l = plan.laws.x
  local law = { dist = "normal", mean = 0, std = 1, seed = 1020 * 7919 + l.index }
  t.eq(io.x:random_check(law), 0, "the inputs are the law's for the last seed")
  -- a timed call's parameters are the model's perturbed (docs/security.md, state carried
  -- across timed calls); a verified trial's are the model's own, byte for byte
  local w = plan.params.fc_weight
  local d = buffer.digest { { io.fc_weight:ptr(), io.fc_weight:nbytes() }, { w.ptr, w.nbytes } }
  t.ok(d[1] ~= d[2], "a timed call's weight buffer is the model's weight perturbed")
  J:fill_inputs(lt, sym, io, 1021, false)
  d = buffer.digest { { io.fc_weight:ptr(), io.fc_weight:nbytes() }, { w.ptr, w.nbytes } }
  t.eq(d[1], d[2], "a verified trial's weight buffer holds the model's weight")
  J:fill_inputs(lt, sym, io, 1020, true)
  -- values of torch.randn's law
  local xs = io.x:to_table(4096)
  local s1, s2 = 0, 0
  for _, v in ipairs(xs) do s1 = s1 + v; s2 = s2 + v * v end
  t.ok(math.abs(s1 / #xs) < 0.1 and math.abs(s2 / #xs - 1) < 0.1, "normal(0, 1) values")
end)

-- The verified trials' reference results stay in torch's cached blocks through verify (the
-- next trial has another seed) and go back to the driver when verify ends, whatever its
-- outcome: every candidate of the task gets the same trial seeds, so the next one must not
-- find them. The ReLU's output is 64 MiB; what torch keeps afterwards must be less.
t.test("after verify, correct or not, torch keeps no block that held a trial's reference result", function()
  local judge = require "km.judge"
  local python = require "km.python"
  local J = assert(judge.new())
  local rt = assert(task.load(RELU))
  local out_bytes = 4096 * 4096 * 4
  local function reserved() return python.eval("__import__('torch').cuda.memory_reserved()") end
  local v = J:eval(rt, { name = "relu", source = RELU_SRC, launch = RELU_LAUNCH }, { timing = false, seeds = 3 })
  t.eq(v.status, "correct", v.feedback)
  t.ok(reserved() < out_bytes, ("correct: %d bytes reserved by torch, the output is %d"):format(reserved(), out_bytes))
  -- wrong: verify stops at the first trial, once its reference result is computed
  local WRONG = RELU_SRC:gsub("fmaxf%(", "1.f + fmaxf(")
  local w = J:eval(rt, { name = "wrong", source = WRONG, launch = RELU_LAUNCH }, { timing = false, seeds = 3 })
  t.eq(w.status, "mismatch", w.feedback)
  t.ok(reserved() < out_bytes, ("mismatch: %d bytes reserved by torch, the output is %d"):format(reserved(), out_bytes))
end)

pool:close()
os.execute("rm -rf " .. DIR)
t.done()
