-- GPU: km.serve.pool in worker processes — adversarial candidates each get their exact status,
-- and after all of them the pool still serves correct verdicts.
local t = require "km.tap"
t.require_gpu()
local task = require "km.task"
local eval = require "km.serve.pool"
local testing = require "km.testing"

local ROOT, KMRUN = testing.paths()
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

-- { name, expected status, task, kernel.cu, launch.lua [, eval opts] }
local CASES = {
  { "does nothing", "mismatch", relu, relu_src(""), RELU_LAUNCH },
  { "writes half the output", "mismatch", relu, relu_src("if (i < n / 2) y[i] = fmaxf(x[i], 0.f);"), RELU_LAUNCH },
  { "hands back an input as its output", "mismatch", relu, relu_src(""), [[return function(k, io, s)
      io.y = io.x
      k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n) end]] },
  { "modifies an input", "inputs_modified", relu,
    relu_src("if (i < n) { y[i] = fmaxf(x[i], 0.f); ((float *)x)[i] = 0.f; }"), RELU_LAUNCH },
  { "writes past the end of its output", "out_of_bounds", relu,
    relu_src("if (i <= n) y[i] = i < n ? fmaxf(x[i], 0.f) : 0.f;"), RELU_LAUNCH },
  { "reads uninitialised scratch", "nan_inf", relu,
    'extern "C" __global__ void relu(const float *x, float *y, float *acc, long long n) {\n' ..
    '  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n' ..
    '  if (i < n) { acc[i] += fmaxf(x[i], 0.f); y[i] = acc[i]; } }',
    [[return function(k, io, s)
      local acc = k.scratch("f32", s.n)
      k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, acc, s.n) end]] },
  { "a race: a reduction missing __syncthreads", "mismatch", rowsum, [[
extern "C" __global__ void rowsum(const float *x, float *y, int rows, int cols) {
  __shared__ float part[256];
  int r = blockIdx.x;
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols; c += 256) acc += x[(size_t)r * cols + c];
  part[threadIdx.x] = acc;
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
  }
  if (threadIdx.x == 0) y[r] = part[0];
}]], [[return function(k, io, s) k.rowsum{ grid = s.rows, block = 256 }(io.x, io.y, s.rows, s.cols) end]] },
  { "an infinite loop", "timeout", relu, relu_src("volatile const float *vx = x; while (vx[0] < 2.0f) {} "), RELU_LAUNCH, { timeout = 15 } },
  { "an illegal address", "crashed", relu, relu_src("if (i < n) y[i + (1ll << 40)] = 1.f;"), RELU_LAUNCH },
  { "a misaligned access", "crashed", relu,
    relu_src("if (i < n) *(float4 *)((char *)y + 4 * i + 1) = make_float4(0.f, 0.f, 0.f, 0.f);"), RELU_LAUNCH },
  { "too much shared memory to launch", "launch_error", relu, relu_src("extern __shared__ float s[]; if (i < n) y[i] = fmaxf(x[i], 0.f) + s[0] * 0.f;"),
    [[return function(k, io, s) k.relu{ grid = k.cdiv(s.n, 256), block = 256, shared = 400000 }(io.x, io.y, s.n) end]] },
  { "more threads than its launch bounds", "launch_error", relu,
    'extern "C" __global__ void __launch_bounds__(128) relu(const float *x, float *y, long long n) {\n' ..
    '  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; if (i < n) y[i] = fmaxf(x[i], 0.f); }',
    [[return function(k, io, s) k.relu{ grid = k.cdiv(s.n, 1024), block = 1024 }(io.x, io.y, s.n) end]] },
  { "correct only for the timed shape", "mismatch", relu,
    relu_src("long long m = n & ~1023ll; if (i < m) y[i] = fmaxf(x[i], 0.f);"), RELU_LAUNCH },
  { "correct for the first seed only (keeps state in device memory)", "mismatch", relu,
    '__device__ unsigned int calls;\n' .. relu_src([[
  unsigned int c = calls;
  if (i < n) y[i] = c == 0 ? fmaxf(x[i], 0.f) : x[i];
  __syncthreads();
  if (i == 0) atomicAdd(&calls, 1u);]]), RELU_LAUNCH },
  -- caught by the re-verified timed calls (poisoned outputs, fresh inputs) before any roofline
  { "a kernel that skips the work once it is being timed", "mismatch", relu,
    '__device__ unsigned int calls;\n' ..
    'extern "C" __global__ void relu(const float *x, float *y, long long n) {\n' ..
    '  if (calls > 12) return;\n' ..
    '  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)\n' ..
    '    y[i] = fmaxf(x[i], 0.f);\n' ..
    '  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(&calls, 1u); }',
    [[return function(k, io, s) k.relu{ grid = math.min(k.cdiv(s.n, 256), 1056), block = 256 }(io.x, io.y, s.n) end]], { timing = true } },
  { "launch code that stops launching once it is being timed", "varying_work", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    [[local calls = 0
    return function(k, io, s)
      calls = calls + 1
      if calls > 13 then return end
      k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)
    end]], { timing = true } },
  { "produces NaN", "nan_inf", relu, relu_src("if (i < n) y[i] = x[i] > 0.f ? x[i] : __int_as_float(0x7fc00000);"), RELU_LAUNCH },
  { "launches on another stream to dodge the timer", "launch_error", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    [[return function(k, io, s) k.relu{ grid = k.cdiv(s.n, 256), block = 256, stream = 1 }(io.x, io.y, s.n) end]] },
  { "launch.lua calls io.open", "launch_error", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    [[return function(k, io_, s) io.open("/etc/passwd") end]] },
  { "launch.lua calls os.execute", "launch_error", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    [[return function(k, io, s) os.execute("touch /tmp/kmrun-escaped") end]] },
  { "launch.lua writes a file through a buffer method", "launch_error", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    [[return function(k, io, s) io.x:save("/tmp/kmrun-escaped.npy") end]] },
  { "launch.lua loops forever", "launch_error", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    [[return function(k, io, s) while true do end end]] },
  { "launch.lua has a syntax error", "compile_error", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    [[return function(k, io, s) k.relu{ grid = 1 block = 1 }(io.x) end]] },
  { "kernel.cu does not compile", "compile_error", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f)"), RELU_LAUNCH },
  { "launch.lua names a kernel that does not exist", "launch_error", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    [[return function(k, io, s) k.relu_fast{ grid = 1, block = 1 }(io.x, io.y, s.n) end]] },
  { "returns an output of the wrong shape", "wrong_shape", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    [[return function(k, io, s)
      local y = k.scratch("f32", s.n + 1)
      k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, y, s.n)
      return { y = y }
    end]] },
  { "returns its own (wrong) output buffer, which is what gets judged", "mismatch", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f) + 1.f;"),
    [[return function(k, io, s)
      local y = k.scratch("f32", s.n)
      k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, y, s.n)
      return { y = y }
    end]] },
  { "wrong argument count", "launch_error", relu, relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"),
    [[return function(k, io, s) k.relu{ grid = 1, block = 1 }(io.x, io.y) end]] },
}

local started = pool.starts
for _, c in ipairs(CASES) do
  t.test(c[1] .. " -> " .. c[2], function()
    local opts = c[6] or {}
    opts.seeds = opts.seeds or 3
    if opts.timing == nil then opts.timing = false end
    local v = pool:eval(c[3], { name = c[1], source = c[4], launch = c[5], params = {} }, opts)
    if v.status ~= c[2] then t.diag(v.feedback or "") end
    t.eq(v.status, c[2])
    t.ok(type(v.feedback) == "string" and #v.feedback > 20, "feedback a model can act on")
  end)
end

t.test("feedback names the shape, the seed and coordinates", function()
  local v = pool:eval(relu, { name = "tail", source = relu_src("long long m = n & ~1023ll; if (i < m) y[i] = fmaxf(x[i], 0.f);"), launch = RELU_LAUNCH }, { timing = false })
  t.eq(v.status, "mismatch")
  t.ok(v.feedback:find("shape 2 {n=1}", 1, true), v.feedback)
  t.ok(v.feedback:find("y[0]", 1, true), v.feedback)
  t.ok(v.feedback:find("boundary", 1, true), v.feedback)
  local c = pool:eval(relu, { name = "bad", source = relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f)"), launch = RELU_LAUNCH })
  t.ok(c.feedback:find("kernel.cu line 3:", 1, true) and c.feedback:find("kernel.cu line 4:", 1, true), c.feedback)
end)

t.test("after every adversary the pool still serves correct verdicts, timed", function()
  t.diag("workers started so far: " .. (pool.starts - started))
  local v = pool:eval(relu, task.starter(relu), { seeds = 3 })
  t.diag(v.feedback)
  t.eq(v.status, "correct")
  t.ok(v.speedup > 0.5 and v.speedup < 3, v.speedup)
  local c = v.timing.candidate
  t.ok(c.n >= 5 and c.calls >= c.n, ("n %s, calls %s"):format(tostring(c.n), tostring(c.calls)))
  t.ok(c.ci_low < c.median and c.median < c.ci_high, ("95%% interval %s..%s"):format(tostring(c.ci_low), tostring(c.ci_high)))
  t.ok(type(c.launches) == "string" and c.launches:find("relu grid=", 1, true), tostring(c.launches))
  t.ok(type(c.gpu_clocks) == "table" and (c.gpu_clocks.sm_mhz or c.gpu_clocks.unavailable), "the clock state is recorded")
  t.ok(v.roofline.fraction > 0.3 and v.roofline.fraction <= 1.3, v.roofline.fraction)
  -- how the kernel ran: registers, its launch and the occupancy that gives
  local kr = v.kernels.relu
  t.ok(kr.registers > 0 and kr.block == 256, tostring(kr.block))
  t.ok(kr.blocks_per_sm >= 1 and kr.occupancy > 0 and kr.occupancy <= 1, tostring(kr.occupancy))
  t.ok(v.timing.floor_ms > 0 and v.timing.floor_ms < 0.05, tostring(v.timing.floor_ms))
  local r = pool:eval(rowsum, task.starter(rowsum))
  t.eq(r.status, "correct", r.feedback)
end)

t.test("eval_many spreads work and keeps order", function()
  local jobs = {}
  for i = 1, 4 do jobs[i] = { relu, task.starter(relu), { timing = false, seeds = 1 } } end
  jobs[3] = { relu, { name = "nothing", source = relu_src(""), launch = RELU_LAUNCH }, { timing = false, seeds = 1 } }
  local seen = 0
  local vs = pool:eval_many(jobs, function() seen = seen + 1 end)
  t.eq(seen, 4)
  t.eq(vs[1].status, "correct")
  t.eq(vs[3].status, "mismatch")
  t.eq(vs[4].status, "correct")
end)

t.test("kmrun eval: exit 0 for a correct candidate, 1 otherwise, and --json", function()
  local p = io.popen(KMRUN .. " eval " .. ROOT .. "/tasks/l1_relu starter --json 2>/dev/null; echo rc=$?")
  local out = p:read("a")
  p:close()
  t.ok(out:find("rc=0", 1, true), out:sub(-200))
  local v = require("km.json").decode(out:match("^(.*)rc=%d+%s*$"))
  t.eq(v.status, "correct")
  t.ok(v.timing.candidate.median > 0)
  local dir = testing.candidate_dir(testing.tmpdir(), { source = relu_src(""), launch = RELU_LAUNCH })
  p = io.popen(KMRUN .. " eval " .. ROOT .. "/tasks/l1_relu " .. dir .. " --no-timing 2>/dev/null; echo rc=$?")
  out = p:read("a")
  p:close()
  os.execute("rm -rf " .. dir)
  t.ok(out:find("^mismatch", 1) and out:find("rc=1", 1, true), out)
end)

pool:close()
t.done()
