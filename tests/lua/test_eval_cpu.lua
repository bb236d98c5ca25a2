-- km.serve.pool, `kmrun eval` and `kmrun reverify` without a GPU: a clear reason, never a crash;
-- eval compiles the candidate (compile_error: exit 1; compiles: 'compiled', exit 3, as
-- strategies do), reverify exits 3.
local t = require "km.tap"
local cuda = require "km.cuda"
if cuda.available() then t.skip_all("a GPU is present: tests/gpu/test_eval.lua covers this") end
local eval = require "km.serve.pool"
local testing = require "km.testing"

local ROOT, KMRUN = testing.paths()

t.test("a pool without a GPU is nil, the reason, NO_GPU", function()
  local pool, why, code = eval.pool { startup_timeout = 30, worker_stderr = "null" }
  t.eq(pool, nil)
  t.eq(code, "NO_GPU")
  t.ok(why:find("libcuda", 1, true), why)
end)

local function sh(cmd)
  local p = io.popen(cmd .. "; echo rc=$?")
  local out = p:read("a")
  p:close()
  return out
end

t.test("kmrun eval without a GPU: compiles, says why, 'compiled' and exit 3", function()
  local out = sh(KMRUN .. " eval " .. ROOT .. "/tasks/l1_relu starter 2>&1")
  t.ok(out:find("no GPU: ", 1, true), out)
  t.ok(out:find("\ncompiled  l1_relu"), out)
  t.ok(out:find("kernel.cu compiles and launch.lua loads (not run: no GPU).", 1, true), out)
  t.ok(out:find("rc=3", 1, true), out)
  local js = sh(KMRUN .. " eval " .. ROOT .. "/tasks/l1_relu starter --json 2>/dev/null")
  t.eq(require("km.json").decode(js:match("^(.*)rc=")).status, "compiled")
end)

t.test("kmrun eval without a GPU: a candidate that does not compile is compile_error, exit 1", function()
  local d = testing.candidate_dir(testing.tmpdir(), {
    source = 'extern "C" __global__ void relu(const float *x, float *y, int n) {\n  y[0] = x[0] +;\n}\n',
    launch = "return function(k, io, s) k.relu{ grid = 1, block = 1 }(io.x, io.y, s.n) end\n" })
  local out = sh(KMRUN .. " eval " .. ROOT .. "/tasks/l1_relu " .. d .. " 2>&1")
  t.ok(out:find("\ncompile_error  l1_relu"), out)
  t.ok(out:find("kernel.cu line 2:", 1, true), "the offending line, numbered: " .. out)
  t.ok(out:find("rc=1", 1, true), out)
  -- launch code that does not load is a compile error too
  testing.candidate_dir(d, { source = 'extern "C" __global__ void relu(const float *x, float *y, int n) { y[0] = x[0]; }\n',
    launch = "return function(k, io, s) k.relu{ \n" })
  out = sh(KMRUN .. " eval " .. ROOT .. "/tasks/l1_relu " .. d .. " 2>&1")
  t.ok(out:find("\ncompile_error") and out:find("launch.lua does not load", 1, true), out)
  t.ok(out:find("rc=1", 1, true), out)
  os.execute("rm -rf " .. d)
end)

t.test("kmrun reverify without a GPU: one line and exit 3", function()
  local st = os.tmpname()
  os.remove(st)
  st = st .. ".sqlite"
  sh(KMRUN .. " implement " .. ROOT .. "/tests/tasks --provider offline --seeds 1 --quiet --store " .. st .. " >/dev/null 2>&1")
  local out = sh(KMRUN .. " reverify " .. st .. " --tasks " .. ROOT .. "/tests/tasks 2>&1")
  t.ok(out:find("kmrun reverify: no GPU: ", 1, true), out)
  t.ok(out:find("rc=3", 1, true), out)
  os.remove(st)
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
