-- bench/service_pool.lua CANDS.json [OUT.json] — the service benchmark's in-process side
-- (bench/service_bench.sh): the same candidates judged by a km.serve.pool pool's eval_many in
-- this process, with the judge options `kmrun serve --listen` uses (km.serve.backend), so
-- the service's overhead is its batch's seconds over these. Tasks are set up first (one
-- starter each, not counted), as the service's run warms them. Prints and writes
-- { seconds, n, gpus, statuses }.
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local A = require "km.args"
local json = require "km.json"
local wall = require("km.timing").wall
local B = dofile((arg[0]:match("^(.*/)") or "") .. "lib.lua")

local SPEC = A.spec {
  name = "bench/service_pool.lua", synopsis = "CANDS.json [OUT.json] [options]",
  about = "The service benchmark's candidates judged in-process by the pool's eval_many (the overhead's baseline).",
  positional = {
    { "cands", "CANDS.json", "bench/service_cands.lua's list", required = true },
    { "out", "OUT.json", "also write the result here" },
  },
  options = {
    { "tasks", "DIR", "where the candidates' tasks are (default tasks/)", default = "tasks" },
    { "gpus", "I", "the GPUs (default: all)", type = "ints" },
  },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local okc, why = require("km.cuda").available()
if not okc then io.stderr:write("bench/service_pool.lua: no GPU: ", tostring(why), "\n") return 3 end

local text = assert(io.open(a.cands)):read("a")
local cands = assert(json.decode(text), "bad candidates file")
local backend = require "km.serve.backend"
local opts = backend.judge_opts()
local pool = assert(require("km.serve.pool").pool { gpus = a.gpus, timeout = opts.timeout, worker_stderr = "null" })
local task = require "km.task"
local loaded, warm = {}, {}
for _, c in ipairs(cands) do
  if not loaded[c.task] then
    loaded[c.task] = assert(task.load(a.tasks .. "/" .. c.task))
    warm[#warm + 1] = { loaded[c.task], assert(task.starter(loaded[c.task])), opts }
  end
end
pool:eval_many(warm) -- set-up (references, baselines): not counted
local jobs = {}
for i, c in ipairs(cands) do
  jobs[i] = { loaded[c.task], { name = c.task .. "/" .. i, source = c.candidate.kernel_cu, launch = c.candidate.launch_lua,
    params = c.candidate.params or {} }, opts }
end
local t0 = wall()
local verdicts = pool:eval_many(jobs)
local secs = wall() - t0
local statuses = {}
for _, v in ipairs(verdicts) do statuses[v.status] = (statuses[v.status] or 0) + 1 end
local res = { seconds = secs, n = #jobs, gpus = #pool.slots, statuses = statuses,
  evaluations_per_gpu_hour = #jobs / (secs * #pool.slots / 3600), device = pool.device and pool.device.name }
pool:close()
local line = json.encode(res)
print(line)
B.write_out(a.out, line)
return 0
