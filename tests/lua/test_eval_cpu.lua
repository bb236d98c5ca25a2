-- km.eval and `kmrun eval` without a GPU: a clear reason and exit status 2, never a crash.
local t = require "km.tap"
local cuda = require "km.cuda"
if cuda.available() then t.skip_all("a GPU is present: tests/gpu/test_eval.lua covers this") end
local eval = require "km.eval"

local KMRUN = arg[-1]:match("kmrun$") and arg[-1] or "build/kmrun"
local ROOT = (arg[0]:match("^(.*)/tests/lua/") or ".")

t.test("a pool without a GPU is nil, the reason, NO_GPU", function()
  local pool, why, code = eval.pool { startup_timeout = 30, worker_stderr = "null" }
  t.eq(pool, nil)
  t.eq(code, "NO_GPU")
  t.ok(why:find("libcuda", 1, true), why)
end)

t.test("kmrun eval says why and exits 2", function()
  local p = io.popen(KMRUN .. " eval " .. ROOT .. "/tasks/l1_relu starter 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  t.ok(out:find("no GPU to evaluate on", 1, true), out)
  t.ok(out:find("rc=2", 1, true), out)
end)

t.test("kmrun eval rejects bad arguments with usage and exit 2", function()
  local p = io.popen(KMRUN .. " eval /nonexistent starter 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  -- one line naming what is missing (km.args), no traceback
  t.ok(out:find("kmrun eval: ", 1, true) and out:find("/nonexistent", 1, true), out)
  t.ok(not out:find("traceback", 1, true), out)
  t.ok(out:find("rc=2", 1, true), out)
end)

t.done()
