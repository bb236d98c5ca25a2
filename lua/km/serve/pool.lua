-- km.serve.pool — judge candidates in isolated GPU worker processes.
--
--   local eval = require "km.serve.pool"
--   local pool = assert(eval.pool { gpus = { 0 }, timeout = 60 })
--   local verdict = pool:eval(task, candidate, { seeds = 3 })
--   local verdicts = pool:eval_many { { task, cand1 }, { task, cand2 }, ... }
--   pool:close()
--
-- The driver (this process) never touches CUDA. Each worker owns one GPU's context
-- (KM_DEVICE); a kernel that faults or hangs takes down only its worker: the driver records
-- `crashed` or `timeout`, starts a fresh worker on the next request, and goes on.
--
-- Jobs that wait for a busy worker are compiled in the driver first (M.warm: NVRTC on every
-- CPU at once, no CUDA), with the judge's own options into the workers' cache folder, so
-- the worker's compile is a cache hit and the GPU waits for no compiler. So is a worker's
-- first job of a PyTorch-referenced task, while the worker imports torch and loads the model.
--
-- Besides its verdict, a worker sends frames about the job it is on: `{ id, hold = what |
-- false }` (one-time set-up, timed by its own limit, not the candidate's) and `{ id,
-- progress = ev }` (a km.progress stage event), which the pool hands to opts.on_progress.
local proc = require "km.proc"
local json = require "km.json"
local nvrtc = require "km.nvrtc"
local judge = require "km.judge" -- compile_opts only; loading it touches no CUDA
local timing = require "km.timing" -- wall() only
local verdict = require "km.verdict"
local compile = require "km.serve.compile"

local fmt = string.format
local pcall, ipairs, pairs, type = pcall, ipairs, pairs, type
local WARM_BATCH = 32 -- jobs compiled per poll, at most
local M = {}
local Pool = {}
Pool.__index = Pool

-- Compiling on the CPUs (km.serve.compile), exported here: the agent loop reaches judging
-- through this module alone.
M.warm, M.compilers, M.compiled, M.compile_check = compile.warm, compile.compilers, compile.compiled, compile.compile_check

-- wrap: an argv prefix the worker runs under (compute-sanitizer and its options), or nil.
local function worker_argv(wrap)
  local argv = {}
  for _, a in ipairs(wrap or {}) do argv[#argv + 1] = a end
  argv[#argv + 1] = package.km_exe
  argv[#argv + 1] = package.km_libdir .. "/km/serve/worker.lua"
  return argv
end

-- The environment a process of this pool on GPU gpu gets, over km.proc's clean one (only
-- PATH, HOME, LANG, CUDA_*, KM_*, ... inherited, no key): a worker's, and the precompiler's,
-- so that both see the same caches (torch's included).
function Pool:_env(gpu)
  -- the workers' cache is the driver's (a set_cache_dir here included), unless opts.env says
  -- and its PyTorch baselines' folder too (XDG_CACHE_HOME does not reach a worker)
  local env = { KM_DEVICE = tostring(gpu), KM_CACHE_DIR = self.cache_dir, KM_BASELINE_DIR = require("km.task.baseline").dir(),
    KM_SPEC_DIR = require("km.task.kbtask").spec_dir(), -- the specs a worker builds are the driver's to read
    KM_SETUP_DIR = require("km.jsoncache").dir("setup", "KM_SETUP_DIR") } -- tasks' set-up records (km.judge.reference)
  -- a PyTorch call's own deadline (km.python's watchdog) comes after the pool's: a candidate
  -- that hangs the GPU is the pool's timeout, as without PyTorch
  env.KM_PY_TIMEOUT = os.getenv("KM_PY_TIMEOUT") or tostring(2 * (self.opts.timeout or 120) + 60)
  for k, v in pairs(self.opts.env or {}) do env[k] = v end
  return env
end

-- Starts the worker of a slot: _spawn starts its process, _greet waits for its greeting (its
-- CUDA context up) and fills the slot; _start does both. Each returns true or nil, why.
function Pool:_spawn(slot)
  local env = self:_env(slot.gpu)
  if self.opts.torch_ahead then env.KM_TORCH_AHEAD = "1" end -- km.serve.worker: torch imported from the start
  -- a tool the worker runs under (compute-sanitizer, a profiler) reports at the process's
  -- normal exit: km.serve.worker skips its quick exit
  if self.opts.wrap then env.KM_WORKER_EXIT = "normal" end
  if self.precompiler then env.KM_PRECOMPILE_DIR = self.precompiler.dir end -- km.task.precompile's claims
  slot.w0 = timing.wall()
  local p, err = proc.spawn(worker_argv(self.opts.wrap), { env = env, clean_env = true,
    stderr = self.opts.worker_stderr or "inherit" })
  if not p then return nil, err end
  slot.spawned = p
  return true
end

function Pool:_greet(slot)
  local p, w0 = slot.spawned, slot.w0
  slot.spawned, slot.w0 = nil, nil
  local hello, why = p:recv((self.opts.startup_timeout or 120) * 1000)
  if not hello then
    p:kill(); p:wait(5000)
    return nil, "GPU worker " .. slot.gpu .. " did not start: " .. tostring(why)
  end
  local h = json.decode(hello)
  if not h or not h.ok then
    p:kill(); p:wait(5000)
    return nil, h and h.why or "GPU worker sent a bad greeting"
  end
  slot.proc, slot.device, slot.device_count = p, h.device, h.device_count
  slot.ready = {} -- the tasks this worker has set up (it has given a verdict on them)
  slot.start_s = timing.wall() - w0 -- reported with this worker's first verdict
  self.starts = self.starts + 1
  return true
end

function Pool:_start(slot)
  local ok, why = self:_spawn(slot)
  if not ok then return nil, why end
  return self:_greet(slot)
end

-- pool{ gpus = {0, 1} | nil (every visible GPU), timeout = seconds per candidate,
--       env = { NAME = value } for the workers, worker_stderr = "inherit" | "null",
--       warm = jobs compiled ahead per poll (32) | false,
--       wrap = { argv prefix } each worker runs under, e.g. compute-sanitizer (M.sanitize),
--       torch_ahead = true: each worker starts importing torch as it starts, on a thread of
--       its own (a task's PyTorch model or baselines will need it; km.task.kernelbench.import_ahead),
--       precompile = entries (km.task.precompile.entries): torch.compile baselines a process of
--       their own compiles ahead into inductor's caches while the workers judge,
--       queue_ahead = true: a busy worker is sent its next job too (KM_QUEUE_AHEAD=1; below),
--       affinity = false: jobs go in queue order (by default a task's jobs go to the workers
--       that hold it: "dispatch" below), balance, affinity_wait, affinity_age: its tunables,
--       on_progress = function(ev, job, gpu): a worker's km.progress stage events as they
--       come (its set-up: torch's import, the spec, the reference, baselines) and the pool's
--       own (stage "nvrtc": a candidate compiled ahead) }
--       greet_later = true: the workers' processes are started, and their greetings (each
--       CUDA context, a few tenths of a second) waited for in Pool:ready(), which the caller
--       calls before any other method: what it does meanwhile overlaps the workers' start }
-- -> pool, or nil, why, "NO_GPU" (with greet_later: a start that failed later, in ready())
function M.pool(opts)
  opts = opts or {}
  local self = setmetatable({ opts = opts, slots = {}, starts = 0, next_id = 0,
    warm_stats = { jobs = 0, failed = 0, ms = 0 }, counters = M.new_stats() }, Pool)
  -- One cache folder for the driver's warm-up and every worker: opts.env's KM_CACHE_DIR,
  -- else this process's (set_cache_dir or the environment), which _start passes on.
  local env_dir = opts.env and opts.env.KM_CACHE_DIR
  if env_dir == nil then self.cache_dir = nvrtc.cache_dir()
  elseif env_dir ~= "" then self.cache_dir = env_dir end -- "": the workers' own default
  local gpus = opts.gpus
  local first = { gpu = gpus and gpus[1] or 0 }
  if opts.precompile and #opts.precompile > 0 then
    self.precompiler = require("km.task.precompile").start(opts.precompile, { env = self:_env(first.gpu) })
  end
  -- every worker's process at once where the GPUs are named (each context comes up beside
  -- the others'), else the first's, whose greeting says how many GPUs there are
  self.ungreeted = {}
  for i = 1, gpus and #gpus or 1 do
    local slot = i == 1 and first or { gpu = gpus[i] }
    local ok, why = self:_spawn(slot)
    if not ok then self:close() return nil, why, "NO_GPU" end
    self.ungreeted[i] = slot
  end
  if opts.greet_later then return self end
  return self:ready()
end

-- The workers' greetings waited for (the first's, then, where the GPUs were not named, the
-- other visible GPUs' workers started at once, and theirs) -> the pool, or nil, why,
-- "NO_GPU" (the pool closed). Called once by M.pool, or by its caller with greet_later;
-- again, it returns the pool (or the same failure).
function Pool:ready()
  if self.failed then return nil, self.failed, "NO_GPU" end
  local list = self.ungreeted
  if not list then return self end
  local function fail(why) self.failed = why self:close() return nil, why, "NO_GPU" end
  local first = list[1]
  local ok, why = self:_greet(first)
  if not ok then return fail(why) end
  list[1] = false
  self.slots[1] = first
  if not self.opts.gpus then
    for i = 1, (first.device_count or 1) - 1 do
      local slot = { gpu = i }
      list[#list + 1] = slot
      ok, why = self:_spawn(slot)
      if not ok then return fail(why) end
    end
  end
  for i = 2, #list do
    ok, why = self:_greet(list[i])
    if not ok then return fail(why) end
    self.slots[i], list[i] = list[i], false
  end
  self.ungreeted = nil
  self.device = first.device
  return self
end

local function task_ref(task)
  return type(task) == "table" and task.dir or task
end

-- Seconds a worker may spend measuring one task's PyTorch baselines (eager and
-- torch.compile, whose max-autotune mode benchmarks many kernels); opts.baseline_timeout.
M.BASELINE_TIMEOUT = 1800

local function lost(slot, what, job, timeout_s)
  local p = slot.proc
  slot.proc = nil
  if what == "timeout" then p:kill() end
  return verdict.lost(job, what, timeout_s, p:wait(10000))
end

-- torch: the task's reference is a PyTorch model (a problem file): a worker's first job of it
-- spends seconds on set-up before it compiles.
local function job_of(task, cand, opts)
  local torch
  if type(task) == "table" then torch = type(task.reference) == "table" and task.reference.pytorch ~= nil
  else torch = require("km.task.kbtask").is_problem(task) end
  -- a task's CUDA reference, compiled by the worker when it first sets the task up: warmed
  -- beside the candidates (Pool:_warm)
  local ref = type(task) == "table" and type(task.reference) == "table" and not task.reference.pytorch
    and task.reference.source_text or nil
  return { task = task_ref(task), task_name = type(task) == "table" and task.name or task, cand = cand, opts = opts,
    torch = torch, ref_source = type(ref) == "string" and ref ~= "" and ref or nil }
end

function Pool:_progress(ev, job, slot)
  local f = self.opts.on_progress
  if f then f(ev, job, slot and slot.gpu) end
end

-- The job's request written to the slot's worker (started first where it is not running).
-- -> true | nil, why
function Pool:_write(slot, job)
  if not slot.proc then
    local ok, why = self:_start(slot)
    if not ok then return nil, why end
  end
  self.next_id = self.next_id + 1
  job.id = self.next_id
  local ok, err = slot.proc:send(json.encode { op = "eval", id = job.id, task = job.task, candidate = job.cand, opts = job.opts or {} })
  if not ok then return nil, err end
  local st = self.counters
  st.sent = st.sent + 1
  if not slot.ready[job.task] then st.setups = st.setups + 1 end
  return true
end

-- The job becomes the slot's current one: its time (timeout, busy) starts now.
local function begin(slot, job)
  slot.job = job
  slot.sent_at, slot.hold_s, slot.sent_wall = os.time(), nil, timing.wall()
end

function Pool:_send(slot, job)
  local ok, why = self:_write(slot, job)
  if not ok then return nil, why end
  begin(slot, job)
  return true
end

-- Reads the slot's answer (waiting up to `ms`); returns a verdict, or nil if not yet.
function Pool:_collect(slot, ms)
  local job = slot.job
  local timeout_s = (job.opts and job.opts.timeout) or self.opts.timeout or 120
  local msg, res
  repeat -- frames about the job (holds, progress) until its verdict, or none waiting
    local m, _, code = slot.proc:recv(ms)
    msg = m
    if not msg then
      if code == "TIMEOUT" then
        if os.time() - slot.sent_at < (slot.hold_s or timeout_s) then return nil end
        timeout_s = slot.hold_s or timeout_s
        slot.job = nil
        return lost(slot, "timeout", job, timeout_s)
      end
      slot.job = nil
      return lost(slot, "dead", job, timeout_s)
    end
    res = json.decode(msg)
    ms = 0
  until not self:_about_job(slot, job, res)
  slot.job = nil
  slot.ready[job.task] = true
  self.counters.busy_s = self.counters.busy_s + (timing.wall() - slot.sent_wall)
  local v = res and res.verdict or { status = "error", feedback = "bad answer from the worker: " .. tostring(msg):sub(1, 200) }
  if type(v) == "table" and type(v.eval_seconds) == "number" then self.counters.gpu_s = self.counters.gpu_s + v.eval_seconds end
  if slot.start_s then -- the worker's start (driver, context, greeting) went before this verdict
    if type(v) == "table" then v.worker_start_seconds = slot.start_s end
    slot.start_s = nil
  end
  if v.context_lost then
    slot.proc:wait(10000)
    slot.proc = nil
  end
  return v
end

-- A frame about the slot's job that is not its verdict: true once handled.
function Pool:_about_job(slot, job, res)
  if type(res) ~= "table" or res.verdict ~= nil or res.id ~= job.id then return false end
  if res.hold ~= nil then
    -- the worker does one-time set-up (torch's import, the spec, PyTorch baselines measured
    -- once per task and GPU, then cached): that is timed by its own limit, and the
    -- candidate's time starts again after it
    slot.sent_at = os.time()
    slot.hold_s = res.hold and (self.opts.baseline_timeout or M.BASELINE_TIMEOUT) or nil
    return true
  end
  if type(res.progress) == "table" then
    self:_progress(res.progress, job, slot)
    return true
  end
  return false
end

-- Sends the queued jobs not warmed yet to the compile processes (without waiting), with
-- the CUDA reference of each task they are for (once per task), and collects what they
-- finished. Called once every idle worker has its job, so these jobs all wait for a busy
-- one: a job that goes straight to an idle worker gains nothing from it.
function Pool:_warm()
  local batch = self.opts.warm
  if batch == nil then batch = WARM_BATCH end
  if not batch or not self.cache_dir or not self.device then return 0 end
  self:_compilers()
  local sent = 0
  self.refs_warmed = self.refs_warmed or {}
  for _, job in ipairs(self.queue) do
    if sent >= batch then break end
    if job.ref_source and not self.refs_warmed[job.task] then -- once per task and pool
      self.refs_warmed[job.task] = true
      self.compilers.submit(job.ref_source, judge.compile_opts(self.device.arch, {}, "reference"))
    end
    if not job.warmed then
      job.warmed = true
      local c = job.cand
      if type(c) == "table" and type(c.source) == "string" and c.source ~= "" and not verdict.oversized(c.source, c.launch) then
        job.compiling = timing.wall() -- when its compile ahead began (nil once it ended)
        self.compilers.submit(c.source, judge.compile_opts(self.device.arch, c.params or {}), function(r)
          job.compiling = nil
          local st = self.warm_stats
          if r.ok then st.jobs = st.jobs + 1 else st.failed = st.failed + 1 end
        end)
        sent = sent + 1
      end
    end
  end
  self.compilers.drain(0) -- what ended: counted in warm_stats by each job's on_done
  return 0
end

function Pool:_compilers()
  if not self.compilers then
    local ncpu = require("km.sys").cpu_count()
    self.compilers = compile.compilers(self.opts.compilers or math.max(1, math.min(8, ncpu - #self.slots)), self.cache_dir)
  end
  return self.compilers
end

-- A worker's first job of a task whose reference is a PyTorch model waits seconds for its
-- set-up (torch's import, the spec, the model on the GPU) before the judge compiles: the
-- candidate is compiled meanwhile by a compile process, into the cache the worker reads (on
-- a worker that has the task set up, the judge compiles at once: nothing to gain). Told as
-- the stage "nvrtc" when NVRTC really runs (not for a cached compile).
function Pool:_ahead(slot, job)
  if self.opts.warm == false or not self.cache_dir or not self.device then return end
  local c = job.cand
  if not job.torch or slot.ready[job.task] or type(c) ~= "table" or type(c.source) ~= "string" or c.source == "" then return end
  local o = judge.compile_opts(self.device.arch, c.params or {})
  if compile.compiled(c.source, o, self.cache_dir) ~= false then return end
  job.warmed = true
  local t0 = timing.wall()
  self.ahead = (self.ahead or 0) + 1
  self:_progress({ stage = "nvrtc", state = "start" }, job, slot)
  self:_compilers().submit(c.source, o, function(r)
    self.ahead = self.ahead - 1
    self:_progress({ stage = "nvrtc", state = "done", seconds = timing.wall() - t0, failed = not r.ok or nil }, job, slot)
  end)
end

-- Asynchronous use: submit jobs, poll for verdicts. Jobs wait in a queue while every
-- worker is busy; each worker judges one job at a time (GPU work is serialized per device).
function Pool:submit(task, cand, opts)
  self.queue = self.queue or {}
  local job = job_of(task, cand, opts)
  job.queued_at = timing.wall()
  self.queue[#self.queue + 1] = job
  return job
end

----------------------------------------------------------------------------------------
-- dispatch: which queued job an idle worker takes
--
-- A worker that has set a task up (its reference built or its model loaded, its kept
-- reference results and baselines read) judges that task's next candidate with none of that
-- cost, so an idle worker takes, in order: (1) a job of a task it holds; (2) a job of a task
-- no worker holds (its set-up is due somewhere); (3) a job of a task that others hold but that
-- dominates the queue (more than BALANCE waiting jobs per worker holding it: it is spread);
-- (4) after AFFINITY_WAIT_S idle, any job (the workers holding it are slow to come free). A
-- job that has waited AGE_S goes first to whichever worker is idle, and a pool of one worker
-- takes jobs in order: affinity saves nothing there. A job whose compile ahead is under way
-- waits for it (the worker would compile it again from the start) at most AWAIT_COMPILE_S
-- since that compile began, while other jobs go around it: a slow compile holds up no GPU.
M.BALANCE = 2 -- waiting jobs per holding worker past which a task is spread (opts.balance)
M.AFFINITY_WAIT_S = 0.5 -- (opts.affinity_wait)
M.AGE_S = 10 -- (opts.affinity_age)
M.PICK_WINDOW = 256 -- queued jobs looked at per pick
local AWAIT_COMPILE_S = 2
local IDLE_POLL_MS = 20 -- how often a pool with an idle worker and waiting jobs looks again

local function holds(s, task) return (s.ready and s.ready[task]) or (s.job ~= nil and s.job.task == task) end

local function held_by_compile(job, now)
  return job.compiling ~= nil and now - job.compiling < AWAIT_COMPILE_S
end

-- Per task of the first `window` queued jobs: how many wait, and how many workers hold it.
function Pool:_task_counts(window)
  local waiting, holders = {}, {}
  for i = 1, window do
    local tk = self.queue[i].task
    waiting[tk] = (waiting[tk] or 0) + 1
  end
  for tk in pairs(waiting) do
    local n = 0
    for _, o in ipairs(self.slots) do if holds(o, tk) then n = n + 1 end end
    holders[tk] = n
  end
  return waiting, holders
end

-- The queue index of the job idle slot s takes next, or nil and why it waits a moment:
-- "compile" (a compile ahead), "dispatch" (the workers that hold the waiting jobs' tasks).
function Pool:_pick(s)
  local q, now = self.queue, timing.wall()
  local window = math.min(#q, self.opts.pick_window or M.PICK_WINDOW)
  local single = #self.slots == 1 or self.opts.affinity == false
  local age = self.opts.affinity_age or M.AGE_S
  local waiting, holders
  if not single then waiting, holders = self:_task_counts(window) end
  local balance = self.opts.balance or M.BALANCE
  local new, spill, any, held
  for i = 1, window do
    local job = q[i]
    if held_by_compile(job, now) then held = true
    else
      if single or now - job.queued_at >= age then return i end
      local tk = job.task
      if s.ready and s.ready[tk] then return i end
      if not new and holders[tk] == 0 then new = i end
      if not spill and waiting[tk] > holders[tk] * balance then spill = i end
      any = any or i
    end
  end
  if new or spill then return new or spill end
  local idle_s = s.idle_since and now - s.idle_since or 0
  if any and idle_s >= (self.opts.affinity_wait or M.AFFINITY_WAIT_S) then return any end
  return nil, (held and not any) and "compile" or "dispatch"
end

-- Sends queued jobs to the slot while it is idle (a job too large for a frame is judged
-- here; one whose worker cannot start finishes with status "error"): into `done`.
local function dispatch(self, s, done)
  while not s.job and #self.queue > 0 do
    local i, why = self:_pick(s)
    s.idle_why = why
    if not i then
      s.idle_since = s.idle_since or timing.wall()
      return
    end
    s.idle_since = nil
    local job = table.remove(self.queue, i)
    local big = verdict.oversized(job.cand.source, job.cand.launch)
    local ok, why = true, nil
    if big then -- judged here: a frame that large is over km.proc's limit, and no worker needs it
      job.verdict = verdict.finish(verdict.new { task = job.task_name, candidate = job.cand.name }, "compile_error", big)
      done[#done + 1] = job
    else
      ok, why = self:_send(s, job)
      if ok then self:_ahead(s, job) end
    end
    if not ok then
      job.verdict = { status = "error", task = job.task_name, candidate = job.cand.name, feedback = tostring(why) }
      done[#done + 1] = job
    end
  end
  if not s.job then s.idle_since = nil end
end

----------------------------------------------------------------------------------------
-- queueing ahead (opts.queue_ahead; KM_QUEUE_AHEAD=1): a worker judging a job is sent its
-- next one too, which waits in the pipe, so that the worker reads it the moment it has sent
-- its verdict, instead of waiting for this process to read that verdict and answer. Only a
-- job this worker would take anyway (a pool of one worker: the next in order; else one of a
-- task it holds), never one whose compile ahead is under way. The queued job's time starts
-- when its predecessor's verdict is read (Pool:_promote); where that worker is lost (crash,
-- timeout, context lost) or restarted, the queued job goes back to the front of the queue
-- and a fresh worker judges it. A queued job cannot be cancelled (a worker has it).
function Pool:_queue_ahead()
  local q = self.opts.queue_ahead
  if q == nil then return os.getenv("KM_QUEUE_AHEAD") == "1" end
  return q == true
end

function Pool:_queue_next(s)
  if not (s.job and s.proc) or s.queued or #(self.queue or {}) == 0 or not self:_queue_ahead() then return end
  local single, now = #self.slots == 1 or self.opts.affinity == false, timing.wall()
  for i = 1, math.min(#self.queue, self.opts.pick_window or M.PICK_WINDOW) do
    local job = self.queue[i]
    if not held_by_compile(job, now) and not verdict.oversized(job.cand.source, job.cand.launch)
      and (single or holds(s, job.task)) then
      table.remove(self.queue, i)
      if self:_write(s, job) then s.queued = job else table.insert(self.queue, i, job) end
      return
    end
  end
end

-- After the slot's job ended: its queued job becomes the current one where the worker lives,
-- else goes back to the front of the queue.
function Pool:_promote(slot)
  local q = slot.queued
  if not q then return end
  slot.queued = nil
  if slot.proc then begin(slot, q) else table.insert(self.queue, 1, q) end
end

-- Whether a worker is idle while jobs wait (for a compile ahead, or for the workers that hold
-- their tasks): then the pool looks again within IDLE_POLL_MS.
function Pool:_idle_waiting()
  if #self.queue == 0 then return false end
  for _, s in ipairs(self.slots) do if not s.job and s.idle_since then return true end end
  return false
end

-- Sends queued jobs to idle workers, compiles ahead the ones still waiting (Pool:_warm),
-- waits up to `ms` for answers (less the warm-up's time); returns the finished jobs (each
-- with .verdict). A job whose worker cannot start finishes with status "error". A worker
-- whose verdict came in gets the next queued job at once, before the verdicts are handed
-- back (opts.dispatch_ahead ~= false; KM_DISPATCH_AHEAD=0 turns it off for side-by-side runs):
-- the caller's handling of them (the store's writes, a strategy's next step) runs while that
-- worker judges, where the worker would wait for it.
function Pool:poll(ms)
  local done = {}
  self.queue = self.queue or {}
  self:_account(true)
  if self.compilers then self.compilers.drain(0) end -- compiles that ended free their jobs
  for _, s in ipairs(self.slots) do dispatch(self, s, done) self:_queue_next(s) end
  local warm_ms = #self.queue > 0 and self:_warm() or 0
  local ready = {}
  for _, s in ipairs(self.slots) do if s.job then ready[#ready + 1] = s.proc end end
  local idle = self:_idle_waiting()
  -- a compile ahead of a worker's set-up, or one a waiting job needs, is waited for too
  local ahead = ((self.ahead or 0) > 0 or idle) and self.compilers
  if ahead then for _, p in ipairs(ahead.busy()) do ready[#ready + 1] = p end end
  local wait_ms = math.max(0, (ms or 0) - warm_ms)
  if idle then wait_ms = math.min(wait_ms, IDLE_POLL_MS) end
  if #done == 0 then
    if #ready > 0 then proc.select(ready, wait_ms)
    elseif idle and wait_ms > 0 then require("km.sys").sleep(wait_ms / 1e3) end
  end
  if ahead then ahead.drain(0) end
  -- the wait is counted by what each worker was doing during it (a verdict read next would
  -- leave its worker without a job: counted after, the wait would be idle)
  self:_account(false)
  for _, s in ipairs(self.slots) do
    if s.job then
      local job = s.job
      local v = self:_collect(s, 0)
      if v then
        self:_promote(s) -- its queued job, if any, is the current one now (or back in the queue)
        job.verdict = v
        done[#done + 1] = job
        if self.opts.dispatch_ahead ~= false and os.getenv("KM_DISPATCH_AHEAD") ~= "0" then dispatch(self, s, done) end
        self:_queue_next(s)
      end
    end
  end
  self:_account(false)
  return done
end

----------------------------------------------------------------------------------------
-- where the workers' time goes (bench/scaling.sh reads it: KM_POOL_STATS)

-- A pool's counters: jobs sent, set-ups (a job of a task its worker had not judged), worker
-- seconds busy (sent to verdict read), the workers' own seconds on them (the verdicts'
-- eval_seconds: the rest of busy is transport and verdicts waiting to be read) and idle by why: "driver" (nothing queued: the caller had
-- no job to give), "compile" (queued jobs wait for their compile ahead), "dispatch" (they wait
-- for the workers that hold their tasks); the caller's seconds outside poll, wall and CPU.
function M.new_stats()
  return { t0 = timing.wall(), cpu0 = os.clock(), sent = 0, setups = 0, busy_s = 0, gpu_s = 0,
    idle = { driver = 0, compile = 0, dispatch = 0 }, outside_s = 0, outside_cpu_s = 0 }
end

-- Adds the time since the last call to each idle worker's cause; entering: the time since
-- poll last returned was the caller's.
function Pool:_account(entering)
  local st, now, cpu = self.counters, timing.wall(), os.clock()
  local dt = now - (st.last or now)
  if entering and st.last then
    st.outside_s, st.outside_cpu_s = st.outside_s + dt, st.outside_cpu_s + (cpu - st.last_cpu)
  end
  st.last, st.last_cpu = now, cpu
  for _, s in ipairs(self.slots) do
    if not s.job then
      local why = #(self.queue or {}) == 0 and "driver" or s.idle_why or "dispatch"
      st.idle[why] = st.idle[why] + dt
    end
  end
end

-- The counters start again from now (a bench's measured part, after the workers' start).
function Pool:reset_stats() self.counters = M.new_stats() end

-- -> { workers, wall_s, sent, setups, busy_s, gpu_s, idle_driver_s, idle_compile_s, idle_dispatch_s,
-- outside_s, outside_cpu_s, driver_cpu_s, warmed, warm_failed }
function Pool:stats()
  local st = self.counters
  return { workers = #self.slots, wall_s = timing.wall() - st.t0, sent = st.sent, setups = st.setups, busy_s = st.busy_s, gpu_s = st.gpu_s,
    idle_driver_s = st.idle.driver, idle_compile_s = st.idle.compile, idle_dispatch_s = st.idle.dispatch,
    outside_s = st.outside_s, outside_cpu_s = st.outside_cpu_s, driver_cpu_s = os.clock() - st.cpu0,
    warmed = self.warm_stats.jobs, warm_failed = self.warm_stats.failed }
end

-- Takes a job that waits for a worker out of the queue (a service's deadline passed, or its
-- client left): true when it was waiting, false when a worker has it or it is done.
function Pool:cancel(job)
  for i, j in ipairs(self.queue or {}) do
    if j == job then table.remove(self.queue, i) return true end
  end
  return false
end

-- Jobs submitted or running.
function Pool:pending()
  local n = #(self.queue or {})
  for _, s in ipairs(self.slots) do n = n + (s.job and 1 or 0) + (s.queued and 1 or 0) end
  return n
end

-- Judges one candidate; returns the verdict (infrastructure failures are status "error").
function Pool:eval(task, cand, opts)
  local job = self:submit(task, cand, opts)
  while not job.verdict do self:poll(1000) end
  return job.verdict
end

-- Judges a list of { task, candidate [, opts] } on every worker at once; verdicts in order.
-- on_verdict(i, verdict), if given, is called as each one arrives.
function Pool:eval_many(jobs, on_verdict)
  local results, list = {}, {}
  for i, j in ipairs(jobs) do
    list[i] = self:submit(j[1], j[2], j[3])
    list[i].index = i
  end
  local left = #list
  while left > 0 do
    for _, job in ipairs(self:poll(1000)) do
      results[job.index] = job.verdict
      left = left - 1
      if on_verdict then on_verdict(job.index, job.verdict) end
    end
  end
  return results
end

-- Ends every worker; the pool stays usable: the next job starts a fresh one (what a worker
-- set up, a task's loaded state among it, is gone: km.serve.resident after a task changed on disk).
-- Every worker is told to quit before any is waited for: their exits (each context's
-- teardown) run at once.
function Pool:restart()
  for _, s in ipairs(self.slots) do
    if s.queued then table.insert(self.queue, 1, s.queued) s.queued = nil end -- judged by the fresh worker
    if s.proc then s.proc:send(json.encode { op = "quit" }) end
  end
  for _, s in ipairs(self.slots) do
    if s.proc then
      if not s.proc:wait(5000) then s.proc:kill(); s.proc:wait(5000) end
      s.proc = nil
    end
  end
end

function Pool:close()
  for _, slot in ipairs(self.ungreeted or {}) do -- started, never greeted: not slots yet
    if slot and slot.spawned then slot.spawned:kill(); slot.spawned:wait(5000); slot.spawned = nil end
  end
  self.ungreeted = nil
  local path = os.getenv("KM_POOL_STATS") -- a bench's: the counters above, as JSON
  if path and path ~= "" and not self.closed then
    local f = io.open(path, "w")
    if f then f:write(json.encode(self:stats()), "\n") f:close() end
  end
  self.closed = true
  if self.compilers then self.compilers.close(); self.compilers = nil end
  if self.precompiler then require("km.task.precompile").stop(self.precompiler); self.precompiler = nil end
  self:restart()
end

-- km.serve.pool(task, candidate, opts): through a pool made on first use.
local default
function M.eval(task, cand, opts)
  if not default then
    local why, code
    default, why, code = M.pool(opts)
    if not default then return nil, why, code end
  end
  return default:eval(task, cand, opts)
end

-- A `kmrun serve` on o.gpu judges it when one runs and would judge as a worker of this
-- process would (km.serve.resident); o.serve "start" starts one where none runs, "never"
-- asks none. -> verdict | nil, and why none was used (nil: none runs), and the pid started.
local function served(task, cand, opts, o)
  if o.serve == "never" then return nil end
  local res = require "km.serve.resident"
  -- the server is sent the task's path: it loads the task itself, and tells a task changed
  -- on disk by that path's fingerprint
  local where = type(task) == "table" and task.dir or task
  local function ask() return res.eval(o.gpu, where, cand, opts, { on_progress = o.on_progress, tick = o.tick }) end
  local v, why = ask()
  if v or why or o.serve ~= "start" then return v, why end
  local pid, perr = res.start(o.gpu)
  if not pid then return nil, "--serve: " .. tostring(perr) end
  o.say(fmt("started a kmrun serve on %s (pid %d; `kmrun serve --stop` stops it, 30 min without work does too)",
    res.socket_path(o.gpu), pid), "started")
  return ask()
end

-- One candidate judged as `kmrun eval` judges it, by the first of: a `kmrun serve` on the
-- GPU (above), a worker of this process's own on o.gpu, the compile-only check (no GPU: a
-- verdict `compiled`, `compile_error` or `launch_error`, nothing run). o: gpu, serve ("ask",
-- "start", "never"), timeout, torch_ahead, on_progress(ev), tick() (while waiting),
-- say(line, kind) (what it did, for a person: kind "started" for a server left running,
-- "always" for what a verdict of no GPU must come with),
-- load_task() -> task | nil, why (a task not loaded yet, needed by the compile-only check).
-- -> verdict, how ({ by = "server" | "worker" | "compile_only", served_why, hint (a line about
-- kmrun serve, for a person), task (loaded for the compile-only check) }) | nil, why
function M.judge_one(task, cand, opts, o)
  local say = o.say or function() end
  o.say = say
  local v, swhy = served(task, cand, opts, o)
  if swhy then say(swhy .. ": judging in a worker of its own") end
  if v then
    if type(v.server) == "table" then
      say(fmt("judged by the kmrun serve on %s (pid %s, its evaluation %s)", require("km.serve.resident").socket_path(o.gpu),
        tostring(v.server.pid), tostring(v.server.evaluations)))
    end
    return v, { by = "server" }
  end
  local torch_s -- seconds our worker spent importing torch: a hint about kmrun serve
  local function on_progress(ev, ...)
    if ev.stage == "torch" and ev.state == "done" then torch_s = ev.seconds end
    if o.on_progress then o.on_progress(ev, ...) end
  end
  local pool, why = M.pool { gpus = { o.gpu }, timeout = o.timeout, on_progress = on_progress, torch_ahead = o.torch_ahead }
  if pool then
    local job = pool:submit(task, cand, opts)
    while not job.verdict do -- polled often enough to tell a worker's slow stage within a second
      pool:poll(200)
      if o.tick then o.tick() end
    end
    pool:close()
    return job.verdict, { by = "worker", served_why = swhy,
      hint = o.serve ~= "never" and require("km.serve.resident").hint(torch_s, swhy) or nil }
  end
  say("no GPU: " .. tostring(why), "always")
  local t = type(task) == "table" and task or nil
  if not t then
    local err
    t, err = o.load_task()
    if not t then return nil, err end
  end
  say("checking that the candidate compiles (NVRTC, sm_90) without running it", "always")
  if compile.compiled(cand.source or "", judge.compile_opts("sm_90", cand.params or {})) == false then
    v = require("km.progress").run("nvrtc", compile.compile_check, cand, "sm_90")
  else
    v = compile.compile_check(cand, "sm_90")
  end
  return v, { by = "compile_only", task = t }
end

-- km.serve.pool.sanitize(task, candidate, { gpu, timeout, tools, sanitizer }): the candidate under
-- compute-sanitizer memcheck, then racecheck, each in its own worker (km.serve.sanitize).
-- -> verdict (status out_of_bounds | race | the usual one; .sanitizer), or nil, why, code
function M.sanitize(task, cand, opts)
  return require("km.serve.sanitize").run(M, task, cand, opts)
end

setmetatable(M, { __call = function(_, ...) return M.eval(...) end })
return M
