-- A Python warning raised while a KernelBench problem file loads names the problem file
-- (issue 43, item 8): torch's own warnings name only torch's source, and among a hundred
-- problem files that is no help. The bridge's helper is tested through python3 (no torch
-- needed); where PyTorch is there, `kmrun tasks check` on a problem file that warns.
local t = require "km.tap"
local testing = require "km.testing"
local sys = require "km.sys"

local fmt = string.format
local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()

t.test("the bridge names the problem file in each warning raised while it loads, once each, for every file", function()
  testing.write(DIR .. "/lib.py", [[
import warnings
def f():
    warnings.warn("a module built oddly", UserWarning)
    warnings.warn("an old call", DeprecationWarning)
]])
  testing.write(DIR .. "/run.py", [[
import warnings, kb_bridge, lib
for p in ("/kb/level1/1_A.py", "/kb/level1/2_B.py"):
    with kb_bridge._named_warnings(p):
        lib.f(); lib.f()
        warnings.warn("said in the problem file itself")
]])
  local out, err, rc = testing.run(fmt("cd %s && PYTHONPATH=%s/lua/km/task:%s python3 run.py", DIR, ROOT, DIR))
  t.eq(rc, 0, out .. err)
  for _, p in ipairs { "/kb/level1/1_A.py", "/kb/level1/2_B.py" } do
    t.ok(err:find(fmt("kmrun: %s: UserWarning: a module built oddly (raised at %s/lib.py:3)\n", p, DIR), 1, true), err)
    t.ok(err:find(fmt("kmrun: %s: UserWarning: said in the problem file itself", p), 1, true), err)
  end
  local _, n = err:gsub("a module built oddly", "")
  t.eq(n, 2, "once per file: " .. err)
  t.ok(not err:find("DeprecationWarning", 1, true), "Python's default filters hold: " .. err)
end)

local TORCH_TEST = "PyTorch: kmrun tasks check on a problem file that warns names it"
local have_torch, why = require("km.task.kernelbench").available()
if not have_torch then
  t.skip(TORCH_TEST, "PyTorch not available (set KM_PYTHON to a python with torch): " .. tostring(why))
else t.test(TORCH_TEST, function()
  local path = testing.problem(DIR .. "/kb", "7_Warns", { imports = "import warnings",
    init_body = 'warnings.warn("this problem warns while it loads")' })
  local out, err = testing.run(fmt("KM_SPEC_DIR=%s/specs %s tasks check %s", DIR, KMRUN, path))
  t.ok(err:find(fmt("kmrun: %s: UserWarning: this problem warns while it loads", sys.realpath(path)), 1, true), out .. err)
end) end

sys.rmtree(DIR)
t.done()
