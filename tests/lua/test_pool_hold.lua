-- km.serve.pool's pool and its workers' protocol on the CPU, with a stand-in worker (run through
-- the pool's `wrap`, as compute-sanitizer is) that speaks the real frames: one-time set-up
-- announced by `hold` messages is not charged to the candidate's timeout; set-up that is not
-- announced is; a worker that stops itself with status 124 (km.python's watchdog: a PyTorch
-- call that never returned) is a timeout verdict; a worker's first verdict carries its
-- start time; and a wrapped worker is told to exit normally (KM_WORKER_EXIT). The real worker's side (km.serve.worker, km.judge) is tests/gpu/test_baseline.lua.
local t = require "km.tap"
local eval = require "km.serve.pool"
local testing = require "km.testing"

local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local STANDIN = testing.standin_worker(DIR .. "/standin.lua", [[
  local c = req.candidate.name
  -- the pool's clock counts whole seconds: a timeout of 2 s stops a job after 1 to 2 s, so
  -- 2.1 s is past it however the seconds fall
  if c == "held" then -- 2.1 s of announced set-up, then a quick verdict
    ch:send(json.encode { id = req.id, hold = "compile" })
    os.execute("sleep 2.1")
    ch:send(json.encode { id = req.id, hold = false })
    ch:send(json.encode { id = req.id, verdict = { status = "correct", candidate = c } })
  elseif c == "slow" then -- 2.1 s with nothing announced
    os.execute("sleep 2.1")
    ch:send(json.encode { id = req.id, verdict = { status = "correct", candidate = c } })
  elseif c == "watchdog" then
    os.exit(124)
  elseif c == "exit mode" then
    ch:send(json.encode { id = req.id, verdict = { status = "correct", candidate = os.getenv("KM_WORKER_EXIT") } })
  else
    ch:send(json.encode { id = req.id, verdict = { status = "correct", candidate = c } })
  end
]])

local pool = assert(eval.pool { gpus = { 0 }, timeout = 2, wrap = { KMRUN, STANDIN }, warm = false, worker_stderr = "null" })
local TASK = { name = "t", dir = "/nonexistent/t" }

t.test("a worker's first verdict carries its start", function()
  local v = pool:eval(TASK, { name = "quick" }, { timeout = 2 })
  t.eq(v.status, "correct")
  t.ok(type(v.worker_start_seconds) == "number" and v.worker_start_seconds > 0, tostring(v.worker_start_seconds))
  local v2 = pool:eval(TASK, { name = "quick" }, { timeout = 2 })
  t.eq(v2.worker_start_seconds, nil, "only the first")
end)

t.test("announced set-up is not the candidate's time; unannounced is", function()
  local v = pool:eval(TASK, { name = "held" }, { timeout = 2 })
  t.eq(v.status, "correct", v.feedback)
  local slow = pool:eval(TASK, { name = "slow" }, { timeout = 2 })
  t.eq(slow.status, "timeout", slow.feedback)
  t.ok(slow.feedback:find("within 2 s", 1, true), slow.feedback)
  -- the pool starts a fresh worker and goes on
  t.eq(pool:eval(TASK, { name = "quick" }, { timeout = 2 }).status, "correct")
end)

t.test("a worker stopped by the PyTorch watchdog (exit 124) is a timeout", function()
  local v = pool:eval(TASK, { name = "watchdog" }, { timeout = 2 })
  t.eq(v.status, "timeout", v.feedback)
  t.ok(v.feedback:find("PyTorch call did not return", 1, true), v.feedback)
  t.eq(pool:eval(TASK, { name = "quick" }, { timeout = 2 }).status, "correct")
end)

t.test("a worker run under a tool (wrap) is told to exit normally, where the tool reports", function()
  t.eq(pool:eval(TASK, { name = "exit mode" }, { timeout = 2 }).candidate, "normal")
end)

pool:close()
os.execute("rm -rf " .. DIR)
t.done()
