-- bench/scaling.lua — issue 47's scaling numbers: how throughput grows with the GPUs of one host.
--
--   kmrun bench/scaling.lua sim [OUT.md] [--workers 1,2,4,8] [--jobs N] [--tasks T] [--gpu-ms MS] [--store]
--     The driver's own limits, on a CPU: km.serve.pool with N stand-in GPU workers (real
--     processes speaking the workers' frames) that sleep MS per candidate and answer a verdict
--     of a real one's size; every job queued at once (pool:eval_many), each verdict appended to
--     a real store (--store: the candidate and the verdict, as an episode logs them). Per N:
--     evaluations per second, per GPU-hour, the efficiency against N x one worker's
--     MS-per-candidate ideal, the driver's CPU, its ceiling (evaluations per second of driver
--     CPU) and the limiting stage.
--   kmrun bench/scaling.lua table DIR [OUT.md]
--     The scaling table of a bench/scaling.sh run on a GPU host, from what it left in DIR.
--
-- The limiting stage is read from the pool's counters (km.serve.pool's Pool:stats, written at
-- close where KM_POOL_STATS names a file): "none" where the GPUs were busy 90% of the time
-- (the workers' own seconds on the verdicts over N x wall); else "driver CPU" where the driver
-- spent over 80% of a core; "store" where it waited outside the pool, off the CPU, over 30% of
-- the run (SQLite's writes: offline runs make no model calls); else the largest share of the
-- workers' time lost: "compile" (jobs waited for their compile ahead), "dispatch" (jobs waited
-- for the workers that hold their tasks, and the round trip of a verdict read and the next
-- job sent; "driver CPU" where the driver was over half a core), "supply" (nothing queued:
-- the workload keeps fewer jobs in flight than there are workers).
local A = require "km.args"
local json = require "km.json"
local EXIT = require("km.run.runner").EXIT

local fmt = string.format

local SPEC = A.spec {
  name = "bench/scaling.lua", synopsis = "sim [OUT.md] [options] | table DIR [OUT.md]",
  about = "Throughput against the number of GPUs: a CPU simulation of dispatch (sim), or the table of a bench/scaling.sh run (table).",
  positional = {
    { "mode", "MODE", "sim or table", required = true },
    { "path", "PATH", "sim: also write the table to this file; table: the folder bench/scaling.sh wrote" },
    { "out", "OUT.md", "table: also write the table to this file" },
  },
  options = {
    { "workers", "LIST", "sim: the numbers of stand-in workers (default 1,2,4,8)", type = "ints" },
    { "jobs", "N", "sim: candidates judged per number of workers (default 2000)", type = "positive" },
    { "tasks", "T", "sim: tasks the candidates are spread over (default 16)", type = "positive" },
    { "gpu-ms", "MS", "sim: a stand-in's milliseconds per candidate (default 5)", type = "number" },
    { "verdict-bytes", "B", "sim: a verdict's size in its frame (default 6000, a real verdict's)", type = "positive" },
    { "store", nil, "sim: append each candidate and verdict to a SQLite store, as an episode logs them" },
  },
}

local M = {}

-- The stage that limits a run, from a pool's stats. -> text
function M.limit(st)
  local cap = math.max(1e-9, st.workers * st.wall_s)
  local gpu = ((st.gpu_s or 0) > 0 and st.gpu_s or st.busy_s) / cap
  if gpu >= 0.9 then return fmt("none: GPUs %.0f%% busy", 100 * gpu) end
  local cpu = st.driver_cpu_s / math.max(1e-9, st.wall_s)
  if cpu >= 0.8 then return fmt("driver CPU (%.0f%% of a core; GPUs %.0f%% busy)", 100 * cpu, 100 * gpu) end
  local waited = (st.outside_s - st.outside_cpu_s) / math.max(1e-9, st.wall_s)
  if waited >= 0.3 then
    return fmt("store (the driver waited %.0f%% of the run outside the pool, off the CPU; GPUs %.0f%% busy)", 100 * waited, 100 * gpu)
  end
  -- a verdict done and not read yet, and the next job not sent: the round trip through the driver
  local late = math.max(0, st.busy_s - (st.gpu_s or 0)) / cap
  local shares = { compile = st.idle_compile_s / cap, dispatch = st.idle_dispatch_s / cap + late, supply = st.idle_driver_s / cap }
  local top = "supply"
  for k, v in pairs(shares) do if v > shares[top] then top = k end end
  local idle = fmt("%.0f%% of worker time; GPUs %.0f%% busy", 100 * shares[top], 100 * gpu)
  if top == "dispatch" and cpu >= 0.5 then return fmt("driver CPU (dispatch: %s; %.0f%% of a core)", idle, 100 * cpu) end
  return fmt("%s (%s)", top, idle)
end

----------------------------------------------------------------------------------------
-- sim

local STANDIN_BODY = [[
  local p = req.candidate.params or {}
  local t0 = os.clock()
  require("km.sys").sleep((tonumber(p.GPU_MS) or 5) / 1e3)
  ch:send(json.encode { id = req.id, verdict = { status = "correct", candidate = req.candidate.name, task = req.task,
    eval_seconds = (tonumber(p.GPU_MS) or 5) / 1e3, worker_cpu_s = os.clock() - t0, pad = string.rep("x", tonumber(p.PAD) or 0) } })
]]

local function sim_row(n, a, kmrun, standin, dir)
  local pool_mod = require "km.serve.pool"
  local gpus = {}
  for i = 1, n do gpus[i] = i - 1 end
  local pool = assert(pool_mod.pool { gpus = gpus, wrap = { kmrun, standin }, warm = false, worker_stderr = "null", timeout = 60 })
  local ntasks, gpu_ms = a.tasks or 16, a.gpu_ms or 5
  local src = string.rep("// a candidate's kernel.cu, as long as a real one\n", 40)
  local jobs = {}
  for i = 1, a.jobs or 2000 do
    local k = (i - 1) % ntasks + 1
    jobs[i] = { { name = "t" .. k, dir = "/sim/t" .. k }, { name = "c" .. i, source = src, launch = "-- launch.lua\n",
      params = { GPU_MS = gpu_ms, PAD = a.verdict_bytes or 6000 } } }
  end
  local db, eps
  if a.store then
    db = assert(require("km.store").open(fmt("%s/sim-%d.sqlite", dir, n)))
    local run = db:begin_run { name = "scaling sim", config = { workers = n } }
    eps = {}
    for k = 1, ntasks do eps["t" .. k] = db:begin_episode(run, { task = "t" .. k, strategy = "sim", rep = 1 }) end
  end
  local wall = require("km.timing").wall
  pool:reset_stats() -- the workers' start is not the driver's
  local t0 = wall()
  pool:eval_many(jobs, function(i, v)
    if db then
      local j = jobs[i]
      db:append(eps[j[1].name], "candidate", { name = j[2].name, source = j[2].source, launch = j[2].launch, params = j[2].params })
      db:append(eps[j[1].name], "verdict", v)
    end
  end)
  local secs = wall() - t0
  local st = pool:stats()
  pool:close()
  if db then db:close() end
  local per_s = #jobs / secs
  return { n = n, evals = #jobs, secs = secs, per_s = per_s, per_gpu_hour = per_s * 3600 / n,
    efficiency = per_s / (n * 1000 / gpu_ms), driver_cpu = st.driver_cpu_s / st.wall_s,
    ceiling = #jobs / math.max(1e-9, st.driver_cpu_s), limit = M.limit(st) }
end

local function sim(a, say)
  local testing = require "km.testing"
  local _, kmrun = testing.paths()
  local dir = testing.tmpdir()
  local standin = testing.standin_worker(dir .. "/standin.lua", STANDIN_BODY)
  local ns = a.workers or { 1, 2, 4, 8 }
  say("# scaling sim: km.serve.pool dispatch with stand-in workers")
  say("")
  say(fmt("%d candidates over %d tasks per row, %.1f ms a candidate on a worker, verdicts of %d bytes%s; host: %d CPUs, %s",
    a.jobs or 2000, a.tasks or 16, a.gpu_ms or 5, a.verdict_bytes or 6000, a.store and ", each appended to a SQLite store" or "",
    require("km.sys").cpu_count(), os.date("!%Y-%m-%d %H:%M UTC")))
  say("")
  say("| workers | evaluations/s | per worker-hour | efficiency | driver CPU | driver ceiling (evals per CPU-second) | limiting stage |")
  say("| --- | --- | --- | --- | --- | --- | --- |")
  for _, n in ipairs(ns) do
    local r = sim_row(n, a, kmrun, standin, dir)
    say(fmt("| %d | %.0f | %.0f | %.0f%% | %.0f%% | %.0f | %s |", r.n, r.per_s, r.per_gpu_hour, 100 * r.efficiency,
      100 * r.driver_cpu, r.ceiling, r.limit))
  end
  os.execute("rm -rf '" .. dir .. "'")
  return EXIT.OK
end

----------------------------------------------------------------------------------------
-- table (a bench/scaling.sh run)

-- conv of what path holds (read as `how`), nil where there is no such file
local function read_as(path, how, conv)
  local f = io.open(path, "rb")
  if not f then return nil end
  local v = conv(f:read(how))
  f:close()
  return v
end

local function read_json(path) return read_as(path, "a", json.decode) end
local function read_number(path) return read_as(path, "l", tonumber) end

-- The headline's evaluations in a store (the judged ones that recorded their stages, as
-- bench/headline.lua counts them) and their statuses by candidate.
local function headline_evals(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  f:close()
  local report = require "km.report"
  local eps = assert(report.load(path))
  return report.gpu_time(eps).recorded
end

-- -> rows { workload, n, evals, secs, per_gpu_hour, limit, statuses }
local function workload_rows(dir)
  local rows = {}
  for _, n in ipairs { 1, 2, 4, 8, 16 } do
    local secs = read_number(fmt("%s/headline-%d.wall", dir, n))
    local evals = secs and headline_evals(fmt("%s/headline-%d.sqlite", dir, n))
    if evals then
      local st = read_json(fmt("%s/headline-%d.stats.json", dir, n))
      rows[#rows + 1] = { workload = "headline (warm)", n = n, evals = evals, secs = secs,
        per_gpu_hour = evals / secs * 3600 / n, limit = st and M.limit(st) or "-" }
    end
    local b = read_json(fmt("%s/service-%d/batch.json", dir, n))
    if b and b.batches then
      local secs2, evals2, statuses = 0, 0, {}
      for i, x in ipairs(b.batches) do
        secs2, evals2 = secs2 + x.seconds, evals2 + x.new
        statuses[i] = x.statuses
      end
      local st = read_json(fmt("%s/service-%d/pool-stats.json", dir, n))
      rows[#rows + 1] = { workload = "service batch", n = n, evals = evals2, secs = secs2,
        per_gpu_hour = b.evaluations_per_gpu_hour or evals2 / secs2 * 3600 / n, limit = st and M.limit(st) or "-",
        statuses = statuses, p50 = b.batch_latency_p50 }
    end
  end
  return rows
end

-- Candidates whose status differs from one GPU's (the same candidates, batch by batch).
local function status_diffs(one, other)
  if not (one and other) then return nil end
  local diff, total = 0, 0
  for i, list in ipairs(one) do
    for k, s in ipairs(list or {}) do
      total = total + 1
      if other[i] and other[i][k] ~= s then diff = diff + 1 end
    end
  end
  return diff, total
end

local function scaling_table(dir, say)
  local rows = workload_rows(dir)
  if #rows == 0 then io.stderr:write("bench/scaling.lua: nothing from bench/scaling.sh in ", dir, "\n") return EXIT.USAGE end
  local host = read_json(dir .. "/host.json") or {}
  say("# scaling: one host's GPUs")
  say("")
  say(fmt("GPUs: %s; run %s", tostring(host.gpus or "?"), tostring(host.date or "?")))
  say("")
  say("| workload | GPUs | evaluations | seconds | evaluations per GPU-hour | efficiency | statuses unlike 1 GPU's | limiting stage |")
  say("| --- | --- | --- | --- | --- | --- | --- | --- |")
  local base = {}
  for _, r in ipairs(rows) do if r.n == 1 then base[r.workload] = r end end
  for _, r in ipairs(rows) do
    local b = base[r.workload]
    local d, total = status_diffs(b and b.statuses, r.statuses)
    say(fmt("| %s | %d | %d | %.1f | %.0f | %s | %s | %s |", r.workload, r.n, r.evals, r.secs, r.per_gpu_hour,
      b and fmt("%.0f%%", 100 * r.per_gpu_hour / b.per_gpu_hour) or "-", d and fmt("%d of %d", d, total) or "-", r.limit))
  end
  return EXIT.OK
end

----------------------------------------------------------------------------------------

if ... == "bench.scaling" then return M end -- required as a module (tests): no run
local a, code = A.parse(SPEC, arg)
if not a then return code end
local lines = {}
local function say(s) print(s) lines[#lines + 1] = s end
local rc, out
if a.mode == "sim" then
  rc, out = sim(a, say), a.path
elseif a.mode == "table" then
  if not a.path then return A.fail(SPEC, "table: DIR, the folder bench/scaling.sh wrote") end
  rc, out = scaling_table(a.path, say), a.out
else
  return A.fail(SPEC, "MODE: sim or table, not " .. tostring(a.mode))
end
if out and rc == EXIT.OK then
  local f = assert(io.open(out, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end
return rc
