-- km.serve.backend — where a service's candidates are judged, and who is at fault.
--
--   local backend = require "km.serve.backend"
--   local b = backend.new { gpus = { 0, 1 }, timeout = 120 }  -- a km.serve.pool pool; without a
--                                                              -- GPU, compile-only workers
--   local j = b:submit(entry, cand)         -- entry: km.serve.catalog's
--   for _, j in ipairs(b:poll(50)) do ... j.verdict, j.cause, j.cause_detail end
--   b:cancel(j); b:pending(); b:busy(); b:close()
--
-- With a GPU the jobs go to the km.serve.pool pool that `kmrun eval` and a sweep use (the same
-- worker, checks and verdicts); `kind` is "gpu". Without one (or compile_only) they go to
-- compile-only workers (km.serve.checker: the verdict `kmrun eval` gives without a GPU);
-- `kind` is "compile_only" and `why` says why.
--
-- Who is at fault (M.classify): a verdict of status `error` (the judge or the task failed: a
-- reference that does not build, out of memory in the judge, a worker that cannot start: a
-- lost GPU), and a worker lost while the task was being set up (the reference, its
-- baselines), are the infrastructure's. A worker lost while it judged the candidate is tried
-- once more on a fresh worker; lost again, `crashed` is the candidate's (`retried`).
local proc = require "km.proc"
local json = require "km.json"
local wall = require("km.timing").wall

local ipairs, pairs, type, tostring, math = ipairs, pairs, type, tostring, math
local M = {}
local Backend = {}
Backend.__index = Backend

M.TRIES = 2 -- judgings of a candidate whose evaluation killed its worker before `crashed`

-- A finished judging of bjob -> "retry" | cause ("candidate" | "infra"), detail
function M.classify(v, bjob)
  if type(v) ~= "table" then return "infra", "no verdict" end
  if v.status == "error" then return "infra", "the judge failed: " .. tostring(v.feedback) end
  if v.worker_lost then
    if bjob.in_setup then
      return "infra", "the worker was lost while it set up the task (" .. tostring(bjob.in_setup) .. "), before the candidate ran"
    end
    if v.worker_lost == "dead" then
      if bjob.tries < M.TRIES then return "retry" end
      v.retried = bjob.tries - 1
    end
  end
  return "candidate"
end

---------------------------------------------------------------------------------------
-- compile-only workers

local Checkers = {}
Checkers.__index = Checkers

local function checkers(n, arch)
  return setmetatable({ n = n, arch = arch, procs = {}, jobs = {}, queue = {}, next_id = 0 }, Checkers)
end

function Checkers:_send(i, job)
  local p = self.procs[i]
  if not p then
    local np, why = proc.spawn({ package.km_exe, package.km_libdir .. "/km/serve/checker.lua" },
      { clean_env = true, stderr = "null" })
    if not np then return nil, why end
    self.procs[i], p = np, np
  end
  self.next_id = self.next_id + 1
  job.id = self.next_id
  local cand = job.cand
  if not p:send(json.encode { id = job.id, arch = self.arch,
    candidate = { source = cand.source, launch = cand.launch, params = cand.params } }) then
    p:close()
    self.procs[i] = nil
    return nil, "compile-only worker gone"
  end
  self.jobs[i] = job
  return true
end

function Checkers:submit(_, cand)
  local job = { cand = cand }
  self.queue[#self.queue + 1] = job
  return job
end

function Checkers:cancel(job)
  for i, j in ipairs(self.queue) do
    if j == job then table.remove(self.queue, i) return true end
  end
  return false
end

function Checkers:pending()
  local k = #self.queue
  for i = 1, self.n do if self.jobs[i] then k = k + 1 end end
  return k
end

-- One worker's answer (or its death) for its job.
function Checkers:_collect(i, done)
  local p, job = self.procs[i], self.jobs[i]
  local msg = p:recv(0)
  local r = msg and json.decode(msg)
  if msg and not r then return end
  self.jobs[i] = nil
  if r and r.id == job.id then
    job.verdict = r.verdict
  else
    p:close()
    self.procs[i] = nil
    job.verdict = { status = "crashed", worker_lost = "dead",
      feedback = "The compile-only worker died while checking this candidate (NVRTC or the launch code's load)." }
  end
  done[#done + 1] = job
end

function Checkers:poll(ms)
  local done = {}
  for i = 1, self.n do
    while not self.jobs[i] and #self.queue > 0 do
      local job = table.remove(self.queue, 1)
      local ok, why = self:_send(i, job)
      if not ok then
        job.verdict = { status = "error", feedback = "no compile-only worker: " .. tostring(why) }
        done[#done + 1] = job
      end
    end
  end
  local busy = {}
  for i = 1, self.n do if self.jobs[i] then busy[#busy + 1] = self.procs[i] end end
  if #busy == 0 or #done > 0 then return done end
  local ready = proc.select(busy, ms or 0)
  if ready then
    for i = 1, self.n do
      if self.procs[i] == ready and self.jobs[i] then self:_collect(i, done) end
    end
  end
  return done
end

function Checkers:close()
  for i = 1, self.n do if self.procs[i] then self.procs[i]:close() end self.procs[i] = nil end
end

---------------------------------------------------------------------------------------
-- the backend

-- backend.new(o): o.gpus (nil: every GPU), o.timeout (a candidate's seconds), o.opts (the
-- judge's options; default: `kmrun eval`'s), o.compile_only (no GPU wanted), o.checkers (how
-- many compile-only workers; default the CPUs), o.torch_ahead, o.wrap, o.worker_stderr
-- (km.serve.pool.pool's). -> backend (never fails: without a GPU it is compile-only)
function M.new(o)
  o = o or {}
  local self = setmetatable({ opts = o.opts or M.judge_opts(), tracked = {}, busy_s = {}, sampled = wall(),
    started = wall() }, Backend)
  local pool, why
  if not o.compile_only then
    pool, why = require("km.serve.pool").pool { gpus = o.gpus, timeout = o.timeout or 120, torch_ahead = o.torch_ahead,
      wrap = o.wrap, worker_stderr = o.worker_stderr or "null",
      on_progress = function(ev, job) self:_progress(ev, job) end }
  end
  if pool then
    self.kind, self.impl, self.device = "gpu", pool, pool.device
  else
    self.kind, self.why = "compile_only", o.compile_only and "compile-only was asked for" or tostring(why)
    local n = o.checkers or math.max(1, require("km.sys").cpu_count())
    self.impl = checkers(n, "sm_90")
    self.device = { name = "none (compile-only: NVRTC for sm_90)", arch = "sm_90" }
  end
  return self
end

-- The judge's options `kmrun eval` uses by default (seeds 3, energy, eager and torch.compile
-- baselines where a PyTorch model exists, a 120 s timeout).
function M.judge_opts()
  local opts = require("km.task.baseline").judge_opts({}, { seeds = 3, energy = true })
  opts.timeout = 120
  return opts
end

-- A worker's stage events: a set-up stage (the task's spec, torch, the reference, baselines)
-- under way when a worker is lost makes the loss the infrastructure's.
function Backend:_progress(ev, job)
  local bjob = job and self.tracked[job]
  if not bjob or type(ev) ~= "table" or ev.stage == "nvrtc" then return end
  bjob.in_setup = ev.state == "start" and ev.stage or nil
end

function Backend:_send(bjob)
  bjob.tries = bjob.tries + 1
  bjob.in_setup = nil
  local job = self.impl:submit(bjob.entry.task or bjob.entry.key, bjob.cand, self.opts)
  bjob.job = job
  self.tracked[job] = bjob
end

function Backend:submit(entry, cand)
  local bjob = { entry = entry, cand = cand, tries = 0, submitted = wall() }
  self:_send(bjob)
  return bjob
end

function Backend:cancel(bjob)
  if bjob.job and self.impl:cancel(bjob.job) then
    self.tracked[bjob.job] = nil
    bjob.job = nil
    return true
  end
  return false
end

function Backend:pending() return self.impl:pending() end

-- Seconds each GPU (or compile-only worker) has spent on a job since the start.
function Backend:_sample()
  local now = wall()
  local dt = now - self.sampled
  self.sampled = now
  if self.kind == "gpu" then
    for _, s in ipairs(self.impl.slots or {}) do
      if s.job then self.busy_s[s.gpu] = (self.busy_s[s.gpu] or 0) + dt end
    end
  else
    for i = 1, self.impl.n do
      if self.impl.jobs[i] then self.busy_s[i - 1] = (self.busy_s[i - 1] or 0) + dt end
    end
  end
end

-- Each unit's busy share since the start: { [gpu] = 0..1 }.
function Backend:busy()
  local out, total = {}, math.max(1e-9, wall() - self.started)
  if self.kind == "gpu" then
    for _, s in ipairs(self.impl.slots or {}) do out[s.gpu] = (self.busy_s[s.gpu] or 0) / total end
  else
    for i = 1, self.impl.n do out[i - 1] = (self.busy_s[i - 1] or 0) / total end
  end
  return out
end

-- The jobs finished within ms, each with verdict, cause and cause_detail (retried jobs go
-- back to a worker and come later).
function Backend:poll(ms)
  local out = {}
  local done = self.impl:poll(ms)
  self:_sample()
  for _, job in ipairs(done) do
    local bjob = self.tracked[job]
    self.tracked[job] = nil
    if bjob then
      local cause, detail = M.classify(job.verdict, bjob)
      if cause == "retry" then
        bjob.first_loss = job.verdict and job.verdict.feedback
        self:_send(bjob)
      else
        bjob.verdict, bjob.cause, bjob.cause_detail = job.verdict, cause, detail
        bjob.job = nil
        out[#out + 1] = bjob
      end
    end
  end
  return out
end

function Backend:close()
  self.impl:close()
end

return M
