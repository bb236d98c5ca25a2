-- km.serve.pool's start and end on the CPU, with stand-in workers (run through the pool's
-- `wrap`) that take 0.6 s before their greeting, as a worker's CUDA context does: with
-- greet_later the pool comes back before the greeting and Pool:ready() waits for it; a pool
-- closed before it kills the process; a worker that never greets is a failure ready()
-- repeats; several GPUs' workers start at once and end at once. And kmrun's set-up
-- (km.run.setup.run) starts the worker before the lint's gate and waits for its greeting
-- after it, so the two overlap.
local t = require "km.tap"
local eval = require "km.serve.pool"
local testing = require "km.testing"
local timing = require "km.timing"

local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()
-- a stand-in worker that answers every request `correct`, after `before` (Lua source)
local function standin(path, before)
  return testing.standin_worker(path,
    'ch:send(json.encode { id = req.id, verdict = { status = "correct", candidate = req.candidate.name } })', before)
end
local SLOW = standin(DIR .. "/slow.lua", 'os.execute("sleep 0.6")')
-- a worker whose exit takes 0.5 s (a context's teardown): the stand-in's loop ends on quit
local SLOW_EXIT = DIR .. "/slow_exit.lua"
testing.write(SLOW_EXIT, 'dofile(' .. string.format("%q", DIR .. "/quick.lua") .. ')\nos.execute("sleep 0.5")\n')
standin(DIR .. "/quick.lua", "")
local MUTE = DIR .. "/mute.lua"
testing.write(MUTE, 'io.stderr:write("no device here\\n") os.exit(3)\n')
local TASK = { name = "t", dir = "/nonexistent/t" }
local function opts(script, extra)
  local o = { gpus = { 0 }, timeout = 5, wrap = { KMRUN, script }, warm = false, worker_stderr = "null", greet_later = true }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

t.test("greet_later: the pool comes back before the greeting; ready() waits for it", function()
  local t0 = timing.wall()
  local pool = assert(eval.pool(opts(SLOW)))
  local back = timing.wall() - t0
  t.ok(back < 0.4, "back before the worker's 0.6 s: " .. back)
  t.eq(pool.device, nil, "no device before the greeting")
  t.ok(pool:ready() == pool, "ready() returns the pool")
  t.ok(timing.wall() - t0 >= 0.6, "ready() waited for the greeting")
  t.eq(pool.device.name, "stand-in")
  t.ok(pool:ready() == pool, "again: the same pool")
  local v = pool:eval(TASK, { name = "quick" }, { timeout = 5 })
  t.eq(v.status, "correct", v.feedback)
  t.ok((v.worker_start_seconds or 0) >= 0.6, "the worker's start, from its spawn: " .. tostring(v.worker_start_seconds))
  pool:close()
end)

t.test("a pool closed before its greeting kills the worker's process", function()
  local pool = assert(eval.pool(opts(SLOW)))
  local p = pool.ungreeted[1].spawned
  pool:close()
  local st = p:wait(2000)
  t.ok(st, "the process is gone")
  t.eq(pool.ungreeted, nil)
end)

t.test("several GPUs' workers start at once, named or found by the first's greeting", function()
  for _, o in ipairs { { gpus = { 0, 1, 2 } }, { gpus = false, env = { KM_TEST_DEVICE_COUNT = "3" } } } do
    local t0 = timing.wall()
    local po = opts(SLOW, { env = o.env })
    po.gpus = o.gpus or nil -- nil: every GPU the first worker's greeting counts
    local pool = assert(eval.pool(po))
    t.ok(pool:ready() == pool, "ready")
    local took = timing.wall() - t0
    t.eq(#pool.slots, 3, "three workers")
    t.eq(pool.slots[3].gpu, 2)
    -- each takes 0.6 s: one after the other 1.8 s; the first, then the other two at once, 1.2 s
    t.ok(took < (o.gpus and 1.3 or 1.75), ("%s: %.2f s for three workers of 0.6 s"):format(o.gpus and "named" or "found", took))
    pool:close()
  end
end)

t.test("several workers told to quit end at once", function()
  local pool = assert(eval.pool(opts(SLOW_EXIT, { gpus = { 0, 1, 2 }, greet_later = false })))
  t.eq(#pool.slots, 3)
  local t0 = timing.wall()
  pool:close()
  local took = timing.wall() - t0
  -- each exit takes 0.5 s: one after the other 1.5 s
  t.ok(took >= 0.5 and took < 1.35, ("three exits of 0.5 s took %.2f s"):format(took))
  for i = 1, 3 do t.eq(pool.slots[i].proc, nil, "worker " .. i .. " gone") end
end)

t.test("a worker that never greets: ready() says why, and says it again", function()
  local pool = assert(eval.pool(opts(MUTE)))
  local ok, why, code = pool:ready()
  t.eq(ok, nil)
  t.eq(code, "NO_GPU")
  t.ok(tostring(why):find("did not start", 1, true) or tostring(why):find("greeting", 1, true), tostring(why))
  local ok2, why2 = pool:ready()
  t.eq(ok2, nil)
  t.eq(why2, why)
end)

t.test("kmrun's set-up starts the worker, runs the lint's gate, then waits for the greeting", function()
  local setup, lint = require "km.run.setup", require "km.task.lint"
  local runner = require "km.run.runner"
  local events = {}
  local real_pool, real_gate = eval.pool, lint.gate
  eval.pool = function(o)
    events[#events + 1] = "spawn"
    t.eq(o.greet_later, os.getenv("KM_GREET_LATER") ~= "0", "the set-up asks for greet_later")
    local pool = real_pool(opts(SLOW, { torch_ahead = o.torch_ahead, precompile = o.precompile }))
    local ready = pool.ready
    pool.ready = function(self) events[#events + 1] = "ready" return ready(self) end
    return pool
  end
  lint.gate = function(...) events[#events + 1] = "gate" return real_gate(...) end
  local args = assert(runner.parse_args({ testing.paths() .. "/tasks/l1_relu", "--store", DIR .. "/s.sqlite", "--quiet" }))
  local tasks = assert(setup.tasks(args, { name = "test", prefix = "test" }))
  local env, why = setup.run(args, DIR .. "/s.sqlite", tasks, "test")
  eval.pool, lint.gate = real_pool, real_gate
  t.ok(env, tostring(why))
  t.eq(table.concat(events, " "), "spawn gate ready")
  t.eq(#env.tasks, 1, "the gate's tasks")
  t.eq(env.pool.device.name, "stand-in")
  env.pool:close()
  env.db:close()
end)

t.done()
