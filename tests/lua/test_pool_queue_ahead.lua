-- km.serve.pool's queueing ahead (opts.queue_ahead, KM_QUEUE_AHEAD=1) on the CPU, with a
-- stand-in worker that speaks the real frames (run through the pool's `wrap`): a busy
-- worker is sent its next job too, so it reads that job the moment it has sent a verdict,
-- however long this process takes to come back; a queued job's timeout starts when it
-- starts; a worker lost with a job queued behind its current one (it exits, or times out)
-- leaves that job to a fresh worker, which judges it; a queued job is pending and cannot be
-- cancelled; without the option nothing is queued ahead. The pool's counters, one job at a
-- time: the wait for a verdict is busy, not idle.
local t = require "km.tap"
local eval = require "km.serve.pool"
local testing = require "km.testing"
local sys = require "km.sys"

local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()
-- each verdict says how long the worker waited for this request after its last verdict
-- (waited_s; nil on a worker's first)
local STANDIN = testing.standin_worker(DIR .. "/standin.lua", [[
  local wall = require("km.timing").wall
  local waited = LAST_SENT and wall() - LAST_SENT or nil
  local c = req.candidate
  if c.name == "exit" then os.exit(3) end
  if c.sleep then os.execute("sleep " .. c.sleep) end
  ch:send(json.encode { id = req.id, verdict = { status = "correct", candidate = c.name, waited_s = waited } })
  LAST_SENT = wall()
]])
local TASK = { name = "t", dir = "/nonexistent/t" }

local function new_pool(opts)
  local o = { gpus = { 0 }, timeout = 2, wrap = { KMRUN, STANDIN }, warm = false, worker_stderr = "null" }
  for k, v in pairs(opts or {}) do o[k] = v end
  return assert(eval.pool(o))
end

-- Submits the candidates at once and polls as a slow caller would: `pause` seconds of its
-- own after every poll that handed back verdicts. -> verdicts by candidate name
local function run(pool, cands, pause, timeout)
  local jobs = {}
  for i, c in ipairs(cands) do jobs[i] = pool:submit(TASK, c, { timeout = timeout or 2 }) end
  local got, left, t0 = {}, #jobs, os.time()
  while left > 0 do
    if os.time() - t0 > 30 then error(("%d job(s) never came back"):format(left)) end
    local done = pool:poll(100)
    for _, j in ipairs(done) do got[j.cand.name] = j.verdict left = left - 1 end
    if #done > 0 and pause then sys.sleep(pause) end
  end
  return got
end

-- Jobs of 0.3 s and a caller that takes 0.5 s after each verdict it is handed: queued ahead,
-- the worker goes from job to job (the next was written while it worked on the last); without,
-- it waits about 0.2 s for the caller before each.
t.test("a busy worker reads its next job the moment it has sent a verdict", function()
  local function cands()
    local c = {}
    for i, n in ipairs { "a", "b", "c", "d" } do c[i] = { name = n, sleep = 0.3 } end
    return c
  end
  local pool = new_pool { queue_ahead = true }
  local got = run(pool, cands(), 0.5)
  for _, n in ipairs { "b", "c", "d" } do
    t.eq(got[n].status, "correct", n)
    t.ok(got[n].waited_s and got[n].waited_s < 0.05, n .. " waited " .. tostring(got[n].waited_s))
  end
  pool:close()
  -- the control: without it the worker waits for the caller after most verdicts
  local off = new_pool { queue_ahead = false }
  got = run(off, cands(), 0.5)
  local slow = 0
  for _, n in ipairs { "b", "c", "d" } do if (got[n].waited_s or 0) > 0.1 then slow = slow + 1 end end
  t.ok(slow >= 2, "without queueing ahead the worker waited: " .. slow)
  off:close()
end)

t.test("a queued job's timeout starts when it starts", function()
  local pool = new_pool { queue_ahead = true }
  -- each takes 1.6 s of a 3 s timeout (the pool's clock counts whole seconds: it stops a job
  -- after 2 to 3 s): counted from when it was sent, the second (3.2 s) would be over
  local got = run(pool, { { name = "first", sleep = 1.6 }, { name = "second", sleep = 1.6 } }, nil, 3)
  t.eq(got.first.status, "correct")
  t.eq(got.second.status, "correct", got.second.feedback)
  pool:close()
end)

t.test("a worker lost with a job queued behind: a fresh worker judges that job", function()
  local pool = new_pool { queue_ahead = true }
  local got = run(pool, { { name = "exit" }, { name = "after exit" } })
  t.ok(got.exit.status ~= "correct", "the lost job: " .. tostring(got.exit.status))
  t.eq(got["after exit"].status, "correct", got["after exit"].feedback)
  t.eq(got["after exit"].waited_s, nil, "judged by a fresh worker (its first request)")
  got = run(pool, { { name = "hangs", sleep = 3.1 }, { name = "after timeout" } })
  t.eq(got.hangs.status, "timeout", got.hangs.feedback)
  t.eq(got["after timeout"].status, "correct", got["after timeout"].feedback)
  t.eq(got["after timeout"].waited_s, nil, "judged by a fresh worker")
  pool:close()
end)

t.test("a queued job is pending and cannot be cancelled", function()
  local pool = new_pool { queue_ahead = true }
  local a = pool:submit(TASK, { name = "a", sleep = 0.3 }, { timeout = 2 })
  local b = pool:submit(TASK, { name = "b" }, { timeout = 2 })
  pool:poll(0)
  t.eq(pool:pending(), 2)
  t.eq(#pool.queue, 0, "both with the worker")
  t.eq(pool:cancel(b), false, "a worker has it")
  while not (a.verdict and b.verdict) do pool:poll(100) end
  t.eq(b.verdict.status, "correct")
  pool:close()
end)

t.test("KM_QUEUE_AHEAD=1 turns it on where the option is not given; nothing is queued by default", function()
  local pool = new_pool()
  t.eq(pool:_queue_ahead(), os.getenv("KM_QUEUE_AHEAD") == "1")
  pool.opts.queue_ahead = false
  pool:submit(TASK, { name = "a", sleep = 0.2 }, { timeout = 2 })
  pool:submit(TASK, { name = "b" }, { timeout = 2 })
  pool:poll(0)
  t.eq(pool.slots[1].queued, nil)
  t.eq(#pool.queue, 1)
  while pool:pending() > 0 do pool:poll(100) end
  pool:close()
end)

-- One job at a time, as `kmrun eval` or a serial bench submits (the next once a verdict is
-- in): the worker's 0.3 s on each job is busy, not idle with nothing queued.
t.test("one job at a time: the pool's counters count the wait for a verdict as busy", function()
  local pool = new_pool()
  pool:eval(TASK, { name = "warm-up" }, { timeout = 2 })
  pool:reset_stats()
  for i = 1, 4 do pool:eval(TASK, { name = "s" .. i, sleep = 0.3 }, { timeout = 2 }) end
  local st = pool:stats()
  pool:close()
  t.ok(st.busy_s >= 1.1, "busy " .. st.busy_s)
  t.ok(st.idle_driver_s < 0.2, ("idle with nothing queued %.3f s of %.3f s (busy %.3f s)"):format(st.idle_driver_s, st.wall_s, st.busy_s))
  t.ok(st.busy_s + st.idle_driver_s <= st.wall_s + 0.05, ("busy %.3f + idle %.3f within the wall %.3f"):format(st.busy_s, st.idle_driver_s, st.wall_s))
end)

os.execute("rm -rf " .. DIR)
t.done()
