-- GPU (2 or more): verdicts do not depend on which GPU judged them beyond the timing itself
-- (issue 47): the same candidates (correct, wrong, crashing, not compiling) judged by a pool on
-- each GPU alone, then by one pool over every GPU with jobs in queue order (each candidate where
-- it lands), get the same status everywhere. Skips with fewer than 2 GPUs; KM_TEST_GPUS=0,1,...
-- picks them. The CPU side: tests/lua/test_pool_any_worker.lua.
local t = require "km.tap"
local cuda = t.require_gpu()
local task = require "km.task"
local eval = require "km.serve.pool"
local testing = require "km.testing"

local gpus = {}
for g in (os.getenv("KM_TEST_GPUS") or ""):gmatch("%d+") do gpus[#gpus + 1] = tonumber(g) end
if #gpus == 0 then for i = 0, cuda.device_count() - 1 do gpus[#gpus + 1] = i end end
if #gpus < 2 then t.skip_all(#gpus .. " GPU(s): this test needs 2 or more") end

local ROOT = testing.paths()
local relu = assert(task.load(ROOT .. "/tasks/l1_relu"))
local rowsum = assert(task.load(ROOT .. "/tests/tasks/t_rowsum"))
local LAUNCH = [[return function(k, io, s) k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n) end]]
local function relu_src(body)
  return 'extern "C" __global__ void relu(const float *x, float *y, long long n) {\n' ..
    '  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n' .. body .. "\n}\n"
end

local JOBS = {
  { relu, { name = "correct", source = relu_src("if (i < n) y[i] = fmaxf(x[i], 0.f);"), launch = LAUNCH } },
  { relu, { name = "half", source = relu_src("if (i < n / 2) y[i] = fmaxf(x[i], 0.f);"), launch = LAUNCH } },
  { relu, { name = "oob", source = relu_src("if (i <= n) y[i] = i < n ? fmaxf(x[i], 0.f) : 0.f;"), launch = LAUNCH } },
  { relu, { name = "illegal", source = relu_src("if (i < n) y[i + (1ll << 40)] = 1.f;"), launch = LAUNCH } },
  { relu, { name = "no compile", source = relu_src("if (i < n) y[i] = nope;"), launch = LAUNCH } },
  { rowsum, assert(task.starter(rowsum)) },
  { relu, assert(task.starter(relu)) },
}
local OPTS = { seeds = 2, energy = false }

local function statuses(vs)
  local out = {}
  for i, v in ipairs(vs) do out[i] = JOBS[i][2].name .. "=" .. tostring(v.status) end
  return table.concat(out, " ")
end

local function judge(on, affinity)
  local pool = assert(eval.pool { gpus = on, timeout = 60, affinity = affinity })
  local jobs = {}
  for i, j in ipairs(JOBS) do jobs[i] = { j[1], j[2], OPTS } end
  local vs = pool:eval_many(jobs)
  pool:close()
  return vs
end

local first = statuses(judge({ gpus[1] }))
t.note("GPU " .. gpus[1] .. ": " .. first)
t.test("each GPU alone gives the statuses of the first", function()
  for k = 2, #gpus do t.eq(statuses(judge({ gpus[k] })), first, "GPU " .. gpus[k]) end
end)

t.test("one pool over every GPU, jobs in queue order, gives them too", function()
  t.eq(statuses(judge(gpus, false)), first)
  t.eq(statuses(judge(gpus, true)), first, "by task affinity")
end)

t.done()
