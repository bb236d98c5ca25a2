-- The Python client (python/kmrun_client) against a real `kmrun serve --listen` on the CPU
-- (compile-only verdicts): tests/python/test_client.py (sync, asyncio, streaming, jobs,
-- retries on 429/503, endpoints spread by task with one down, tokens), the two adapters'
-- examples as a trainer runs them (verl's batch compute_score, a reset/step environment),
-- and `pip install` of the package from the checkout (where pip can build offline).
local t = require "km.tap"
local sys = require "km.sys"
local testing = require "km.testing"

local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()
if not os.execute("command -v python3 >/dev/null 2>&1") then t.skip_all("no python3") end

local port, pid = testing.serve_listen(KMRUN, DIR, { token = "trainer py-client-token-0123456789\n",
  args = { "--tasks", ROOT .. "/tasks" } })
if not port then t.skip_all("the server did not start: " .. tostring(testing.read(DIR .. "/server.log"))) end
local ENV = string.format("KMRUN_URL=http://127.0.0.1:%d KMRUN_TOKEN_FILE='%s' KMRUN_TREE='%s' PYTHONPATH='%s/python' ",
  port, DIR .. "/token", ROOT, ROOT)

t.test("tests/python/test_client.py: the client's calls against the server and stand-ins", function()
  local out, rc = testing.sh("cd '" .. DIR .. "' && " .. ENV .. "python3 '" .. ROOT .. "/tests/python/test_client.py' -v 2>&1")
  t.eq(rc, 0, out)
  t.ok(out:find("Ran 8 tests", 1, true), out)
end)

t.test("examples/verl_reward.py: verl's batch compute_score on a group of four replies", function()
  local out, rc = testing.sh("cd '" .. ROOT .. "' && " .. ENV .. "python3 python/examples/verl_reward.py .")
  t.eq(rc, 0, out)
  t.ok(out:find('"kmrun_status": "no_code"', 1, true) and out:find('"compile_only": 1.0', 1, true), out)
end)

t.test("examples/env_loop.py: reset, then step until the starter ends the episode", function()
  local out, rc = testing.sh("cd '" .. ROOT .. "' && " .. ENV .. "python3 python/examples/env_loop.py .")
  t.eq(rc, 0, out)
  t.ok(out:find("turn 1: no_code", 1, true) and out:find("turn 2: compiled", 1, true), out)
end)

local CAN_BUILD = os.execute("python3 -c 'import setuptools, wheel' >/dev/null 2>&1")
if not CAN_BUILD then
  t.skip("pip install ./python", "python3 lacks setuptools or wheel to build offline (pip's build isolation would download them)")
else
  t.test("pip install ./python (no torch, no CUDA, no dependency): the package imports from where pip put it", function()
    local src = DIR .. "/src"
    testing.sh("cp -R '" .. ROOT .. "/python' '" .. src .. "'")
    local out, rc = testing.sh("python3 -m pip install -q --no-build-isolation --no-deps --no-index --target '" .. DIR ..
      "/site' '" .. src .. "' 2>&1")
    t.eq(rc, 0, out)
    out, rc = testing.sh("cd / && PYTHONPATH='" .. DIR .. "/site' python3 -c 'import kmrun_client, kmrun_client.verl, kmrun_client.env, sys; " ..
      "print(kmrun_client.__file__); assert \"torch\" not in sys.modules'")
    t.eq(rc, 0, out)
    t.ok(out:find(DIR .. "/site", 1, true), out)
  end)
end

sys.kill(pid, "TERM")
sys.wait(pid, true)
sys.rmtree(DIR)
t.done()
