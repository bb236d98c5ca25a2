-- km.serve.pool's dispatch on the CPU, with stand-in GPU workers (run through the pool's
-- `wrap`, speaking the real frames) that take SETUP seconds the first time they see a task
-- (the reference built, the model loaded, baselines read) and a candidate's GPU_S after:
-- a task's candidates go to the workers that already hold it (few set-ups where queue order
-- would set every task up on every worker), a task that dominates the queue is spread over
-- every worker, a pool of one worker keeps queue order, and a slow compile ahead (a real
-- NVRTC compile in a compile process) holds up no other job.
local t = require "km.tap"
local eval = require "km.serve.pool"
local testing = require "km.testing"
local wall = require("km.timing").wall

local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local STANDIN = testing.standin_worker(DIR .. "/standin.lua", [[
  local S = package.loaded.standin_state or { held = {} }
  package.loaded.standin_state = S
  local p = req.candidate.params or {}
  local first = not S.held[req.task]
  S.held[req.task] = true
  if first then require("km.sys").sleep(tonumber(p.SETUP) or 0.2) end
  require("km.sys").sleep(tonumber(p.GPU_S) or 0.02)
  ch:send(json.encode { id = req.id, verdict = { status = "correct", candidate = req.candidate.name,
    gpu = os.getenv("KM_DEVICE"), setup = first, task = req.task } })
]])

local function pool_of(n, o)
  o = o or {}
  local gpus = {}
  for i = 1, n do gpus[i] = i - 1 end
  o.gpus, o.timeout, o.wrap, o.worker_stderr = gpus, 30, { KMRUN, STANDIN }, "null"
  if o.warm == nil then o.warm = false end
  return assert(eval.pool(o))
end

local function task(name) return { name = name, dir = "/nonexistent/" .. name } end

-- -> verdicts, set-ups (first sight of a task on a worker), tasks -> { gpu -> count }
local function judge_all(pool, jobs)
  local vs = pool:eval_many(jobs)
  local setups, where = 0, {}
  for _, v in ipairs(vs) do
    if v.setup then setups = setups + 1 end
    where[v.task] = where[v.task] or {}
    where[v.task][v.gpu] = (where[v.task][v.gpu] or 0) + 1
  end
  return vs, setups, where
end

local function interleaved(ntasks, per, params)
  local jobs = {}
  for k = 1, per do
    for i = 1, ntasks do
      jobs[#jobs + 1] = { task("t" .. i), { name = "c" .. i .. "_" .. k, params = params } }
    end
  end
  return jobs
end

-- NVRTC takes many seconds over this (every call inlined: F<20> is ~10^4 of them); the pool
-- closes its compile process long before it ends. The salt keeps it out of any cache.
local SLOW_SOURCE = string.format([[
template<int N> struct F { static __device__ __forceinline__ float f(float x) { return F<N-1>::f(x*1.0001f+0.5f) + F<N-2>::f(x*0.9999f); } };
template<> struct F<1> { static __device__ __forceinline__ float f(float x) { return x; } };
template<> struct F<0> { static __device__ __forceinline__ float f(float x) { return 1.0f; } };
extern "C" __global__ void slow(float* y) { y[threadIdx.x] = F<20>::f(y[threadIdx.x]) + %d; }
]], os.time())

local function count(set) local n = 0 for _ in pairs(set) do n = n + 1 end return n end

t.test("a task's candidates go to the workers that hold it: few set-ups where queue order sets every task up everywhere", function()
  local params = { SETUP = 0.3, GPU_S = 0.03 }
  local fifo = pool_of(4, { affinity = false })
  -- every worker started first (one job each of another task, long enough that none frees
  -- before the four are sent): queue order's count is then of four running workers, not of
  -- how many had started while the CPU was busy
  local warm = {}
  for i = 1, 4 do warm[i] = { task("warm"), { name = "w" .. i, params = { SETUP = 0, GPU_S = 0.5 } } } end
  fifo:eval_many(warm)
  local _, fifo_setups = judge_all(fifo, interleaved(3, 8, params))
  fifo:close()
  local pool = pool_of(4)
  local t0 = wall()
  local vs, setups, where = judge_all(pool, interleaved(3, 8, params))
  local secs = wall() - t0
  pool:close()
  t.note(string.format("3 tasks x 8 candidates on 4 stand-in workers: %d set-ups by affinity (%.2f s), %d in queue order",
    setups, secs, fifo_setups))
  t.eq(#vs, 24)
  for _, v in ipairs(vs) do t.eq(v.status, "correct") end
  t.ok(setups <= 7, "set-ups by affinity: " .. setups)
  t.ok(setups < fifo_setups, string.format("affinity %d set-ups, queue order %d", setups, fifo_setups))
  for tk, gpus in pairs(where) do t.ok(count(gpus) <= 3, tk .. " judged on " .. count(gpus) .. " workers") end
end)

t.test("a task that dominates the queue is spread over every worker", function()
  local pool = pool_of(4)
  local _, _, where = judge_all(pool, interleaved(1, 16, { SETUP = 0.1, GPU_S = 0.1 }))
  pool:close()
  local gpus = where["/nonexistent/t1"]
  t.eq(count(gpus), 4, "workers used")
end)

t.test("a pool of one worker takes jobs in queue order", function()
  local pool = pool_of(1)
  local order = {}
  local jobs = interleaved(2, 3, { SETUP = 0.05, GPU_S = 0.01 })
  pool:eval_many(jobs, function(i) order[#order + 1] = i end)
  pool:close()
  t.eq(table.concat(order, " "), "1 2 3 4 5 6")
end)

t.test("a slow compile ahead holds up no other job", function()
  local pool = pool_of(2, { warm = 8, compilers = 1, env = { KM_CACHE_DIR = DIR .. "/cache" } })
  local T = task("t")
  local t0 = wall()
  local long = { SETUP = 0.2, GPU_S = 0.6 }
  local jobs = { pool:submit(T, { name = "L0", params = long }), pool:submit(T, { name = "L1", params = long }) }
  pool:poll(0) -- both workers busy: the jobs after these wait, and are compiled ahead
  local S = pool:submit(T, { name = "S", source = SLOW_SOURCE, params = { GPU_S = 0.01 } })
  local Q1 = pool:submit(T, { name = "Q1", params = { GPU_S = 0.01 } })
  local Q2 = pool:submit(T, { name = "Q2", params = { GPU_S = 0.01 } })
  jobs[3], jobs[4], jobs[5] = S, Q1, Q2
  local at = {}
  repeat
    for _, job in ipairs(pool:poll(200)) do at[job.cand.name] = wall() - t0 end
  until at.L0 and at.L1 and at.S and at.Q1 and at.Q2 or wall() - t0 > 20
  pool:close()
  t.note(string.format("done at: L0 %.2f  L1 %.2f  Q1 %.2f  Q2 %.2f  S %.2f s", at.L0 or -1, at.L1 or -1, at.Q1 or -1,
    at.Q2 or -1, at.S or -1))
  t.ok(S.compiling ~= nil or at.S, "S was compiled ahead")
  t.ok(at.Q1 and at.Q1 < 1.6, "Q1 waited for S's compile: " .. tostring(at.Q1))
  t.ok(at.Q2 and at.Q2 < 1.6, "Q2 waited for S's compile: " .. tostring(at.Q2))
  t.ok(at.S and at.S > at.Q1 and at.S > at.Q2, "S went after the jobs around it")
end)

t.done()
