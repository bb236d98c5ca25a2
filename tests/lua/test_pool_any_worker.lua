-- Verdicts do not depend on which worker judged them (issue 47): km.serve.pool with 4 stand-in
-- workers that each give the verdict a host without a GPU gives (km.serve.compile.compile_check:
-- real NVRTC, launch.lua loaded in the sandbox, its kernels looked up), judging the same
-- candidates twice with jobs placed differently (queue order, then by task affinity): every
-- candidate gets the same status and feedback whichever worker judged it, and most went to
-- another worker the second time. On GPUs: tests/gpu/test_multi_gpu_verdicts.lua.
local t = require "km.tap"
local eval = require "km.serve.pool"
local testing = require "km.testing"

local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local STANDIN = testing.standin_worker(DIR .. "/standin.lua", [[
  local v = require("km.serve.compile").compile_check(req.candidate, "sm_90")
  v.gpu = os.getenv("KM_DEVICE")
  ch:send(json.encode { id = req.id, verdict = v })
]])

local LAUNCH = [[return function(k, io, s) k.scale{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n) end]]
local function kernel(name, body)
  return string.format('extern "C" __global__ void %s(const float *x, float *y, long long n) {\n' ..
    '  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n  %s\n}\n', name, body)
end

-- 24 candidates over 3 tasks: compiling ones (with BLOCK params), compile errors, launch code
-- calling a kernel the source does not define, launch code that does not load
local function candidates()
  local jobs = {}
  for i = 1, 24 do
    local kind = i % 4
    local c = { name = "c" .. i, launch = LAUNCH, params = { BLOCK = 64 * (i % 3 + 1) } }
    if kind == 0 then c.source = kernel("scale", "if (i < n) y[i] = x[i] * BLOCK * 0.5f;")
    elseif kind == 1 then c.source = kernel("scale", "if (i < n) y[i] = x[i] * undefined_name;")
    elseif kind == 2 then c.source = kernel("other", "if (i < n) y[i] = x[i];")
    else c.source, c.launch = kernel("scale", "if (i < n) y[i] = x[i];"), "return function(k, io, s" end
    c.source = c.source .. "// " .. i .. "\n"
    local tk = "t" .. (i % 3)
    jobs[i] = { { name = tk, dir = "/nonexistent/" .. tk }, c }
  end
  return jobs
end

local function judge(affinity)
  local pool = assert(eval.pool { gpus = { 0, 1, 2, 3 }, wrap = { KMRUN, STANDIN }, warm = false, worker_stderr = "null",
    timeout = 60, affinity = affinity })
  local vs = pool:eval_many(candidates())
  pool:close()
  return vs
end

t.test("the same candidates on different workers get the same verdicts", function()
  local a, b = judge(false), judge(true)
  local moved, gpus, statuses = 0, {}, {}
  for i = 1, 24 do
    t.eq(b[i].status, a[i].status, "c" .. i .. "'s status")
    t.eq(b[i].feedback, a[i].feedback, "c" .. i .. "'s feedback")
    if a[i].gpu ~= b[i].gpu then moved = moved + 1 end
    gpus[a[i].gpu], gpus[b[i].gpu] = true, true
    statuses[a[i].status] = (statuses[a[i].status] or 0) + 1
  end
  local n = 0
  for _ in pairs(gpus) do n = n + 1 end
  t.eq(n, 4, "every worker judged some")
  t.ok(moved >= 6, moved .. " of 24 candidates judged on another worker the second time")
  t.eq(statuses.compiled, 6)
  t.eq(statuses.compile_error, 12, "a compile error and launch code that does not load")
  t.eq(statuses.launch_error, 6)
end)

os.execute("rm -rf '" .. DIR .. "'")
t.done()
