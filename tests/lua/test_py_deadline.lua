-- Deadlines on calls into the embedded Python (km_python.c's watchdog): a problem file
-- whose get_inputs, Model.__init__ or forward loops or sleeps is a clear error naming the
-- problem and the stage within its deadline, from km.task.kbtask.load and from `kmrun tasks
-- check` (the next problem is still checked); one that swallows the stop or blocks its
-- signal ends the process with status 124 and one line; Ctrl-C during a hang still ends
-- kmrun with status 130 at once. Every test here would hang without the watchdog: each
-- child kmrun is bounded by the test itself. Skips without torch (KM_PYTHON).
local t = require "km.tap"
local kb = require "km.task.kernelbench"
local python = require "km.python"
local testing = require "km.testing"

local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local now = os.time

local okk, why = kb.available()
if not okk then t.skip_all("PyTorch not available (set KM_PYTHON to a python with torch): " .. tostring(why)) end

-- The in-process tests would hang without the watchdog: a guard kills this process first.
local SELF = assert(io.open("/proc/self/stat")):read("l"):match("^%d+")
local GUARD = io.popen("(sleep 240; kill -KILL " .. SELF .. ") >/dev/null 2>&1 & echo $!"):read("l")

-- A ReLU problem (of a 4x8 input) whose __init__, forward or get_inputs runs the given lines first.
local function problem(dir, name, init, forward, inputs)
  return testing.problem(dir, name, { imports = "import time", init = init, body = forward, sizes = "",
    inputs_body = inputs, inputs = "torch.randn(4, 8)" })
end

local HANG = DIR .. "/hang"
local LOOP_INPUTS = problem(HANG, "a_loop_inputs", nil, nil, "while True: pass")
local SLEEP_FORWARD = problem(HANG, "b_sleep_forward", nil, "time.sleep(10**6)")
local LOOP_INIT = problem(HANG, "c_loop_init", "while True: pass")
local GOOD = problem(HANG, "d_good")

-- Runs a shell command with a bound of its own: stdout+stderr, status, seconds taken.
local function sh(cmd, bound)
  local t0 = now()
  local p = io.popen("timeout -s KILL " .. (bound or 120) .. " sh -c '" .. cmd .. "' 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  return out, tonumber(out:match("rc=(%d+)\n$")), now() - t0
end

t.test("km.python: a call past its limit returns TIMEOUT with a traceback; a swallowed stop is tripped again", function()
  local t0 = now()
  local ok, err, code = python.exec("import time\ntime.sleep(10**6)", "<sleeper>", { timeout = 1 })
  t.eq(ok, nil)
  t.eq(code, "TIMEOUT")
  t.ok(err:find("^<sleeper> did not return within 1 s\n"), err)
  t.ok(err:find('File "<sleeper>", line 2', 1, true), err)
  ok, err, code = python.exec("import time\ntry: time.sleep(10**6)\nexcept BaseException: pass\ntime.sleep(10**6)", "<once>", { timeout = 1 })
  t.eq(code, "TIMEOUT", err)
  t.ok(now() - t0 <= 5, "both stopped within their deadlines: " .. (now() - t0) .. " s")
  t.eq(python.eval("6 * 7", { timeout = 1 }), 42, "the interpreter goes on")
  t.raises(function() python.eval("1", { timeout = -1 }) end, "seconds", "a timeout that is not > 0 raises")
end)

t.test("km.task.kbtask.load and km.task.kernelbench: each hanging stage a TIMEOUT naming the problem and the stage", function()
  local kbtask = require "km.task.kbtask"
  for _, c in ipairs {
    { LOOP_INPUTS, "get_inputs()" }, { SLEEP_FORWARD, "Model.forward()" }, { LOOP_INIT, "Model.__init__()" },
  } do
    local t0 = now()
    local task, err = kbtask.load(c[1], { timeout = 2 })
    t.eq(task, nil, c[1])
    t.eq(err, c[1] .. ": " .. c[2] .. " did not return within 2 s")
    t.ok(now() - t0 <= 6, c[2] .. " stopped at its deadline: " .. (now() - t0) .. " s")
  end
  local prob = assert(kb.load(SLEEP_FORWARD, { timeout = 2 }))
  local s, err, code = prob:spec()
  t.eq(s, nil)
  t.eq(code, "TIMEOUT", err)
  prob:release()
  local task, terr = kbtask.load(GOOD, { timeout = 2 })
  t.ok(task and task.outputs[1].name == "out", "a good problem loads after the stops: " .. tostring(terr))
end)

t.test("kmrun tasks check: each hanging problem FAILs at KM_PY_TIMEOUT, the next one is still checked", function()
  local out, rc, secs = sh("KM_PY_TIMEOUT=2 " .. KMRUN .. " tasks check " .. HANG)
  t.eq(rc, 1, out)
  t.ok(out:find("FAIL " .. LOOP_INPUTS .. ": get_inputs() did not return within 2 s\n", 1, true), out)
  t.ok(out:find("FAIL " .. SLEEP_FORWARD .. ": Model.forward() did not return within 2 s\n", 1, true), out)
  t.ok(out:find("FAIL " .. LOOP_INIT .. ": Model.__init__() did not return within 2 s\n", 1, true), out)
  t.ok(out:find("ok   d_good%s+[%d.]+ s\n4 task%(s%), 3 failed, [%d.]+ s\n"), out)
  t.ok(secs < 90, "well within its bound: " .. secs .. " s")
end)

t.test("a problem that blocks the stop's signal: one line naming it, exit status 124", function()
  local dir = DIR .. "/stuck"
  local path = problem(dir, "blocks", nil, nil,
    "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())\ntime.sleep(10**6)")
  local out, rc = sh("KM_PY_TIMEOUT=2 " .. KMRUN .. " tasks check " .. dir)
  t.eq(rc, 124, out)
  t.ok(out:find("kmrun: " .. path .. ": Python did not return within 2 s, nor 2 s after being stopped", 1, true), out)
end)

t.test("Ctrl-C during a hanging problem: kmrun ends with status 130 at once, not at the deadline", function()
  local dir, mark = DIR .. "/ctrlc", DIR .. "/ctrlc.started"
  problem(dir, "sleeps", nil, nil, "open('" .. mark .. "', 'w').close()\ntime.sleep(10**6)")
  local out, rc = sh("KM_PY_TIMEOUT=100 " .. KMRUN .. " tasks check " .. dir .. " & pid=$!; " ..
    "for i in $(seq 600); do [ -e " .. mark .. " ] && break; sleep 0.1; done; sleep 0.3; kill -INT $pid; " ..
    "for i in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; " ..
    "kill -KILL $pid 2>/dev/null && echo still running 10 s after SIGINT; wait $pid; exit $?")
  t.eq(rc, 130, out)
  t.ok(out:find("kmrun: interrupted", 1, true), out)
  t.ok(not out:find("still running", 1, true), out)
end)

os.execute("kill " .. GUARD .. " 2>/dev/null; rm -rf " .. DIR)
t.done()
