-- km.python: CPython loaded at run time. Without a Python (or with a wrong one) every call
-- is nil and the reason, never a crash; with one, exec/eval/import/call cross the boundary
-- with tracebacks as messages. The Python is KM_PYTHON's, else python3 on PATH.
local t = require "km.tap"
local testing = require "km.testing"

local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()

local function write(path, text)
  testing.write(path, text)
  return path
end

-- runs `code` in a fresh kmrun with `env` in front; returns what it printed and its status
local function run(env, code)
  local script = write(DIR .. "/run.lua", code)
  local p = io.popen(env .. " " .. KMRUN .. " " .. script .. " 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  return out
end

local PRINT_ALL = [[
local py = require "km.python"
print(py.available())
print(py.exec("x = 1"))
print(py.eval("1"))
print(py.call("json", "dumps", "[1]"))
]]

t.test("no such python: nil, the reason and NO_PYTHON from every call", function()
  local out = run("KM_PYTHON=/nonexistent/python3", PRINT_ALL)
  t.ok(out:find("^nil\tno Python: cannot run /nonexistent/python3 %(No such file or directory%)\tNO_PYTHON\n"), out)
  local _, n = out:gsub("NO_PYTHON", "")
  t.eq(n, 4, out)
  t.ok(out:find("rc=0", 1, true), out)
end)

t.test("an executable that is not a Python says what it answered", function()
  local fake = write(DIR .. "/notpython", "#!/bin/sh\necho 'I am not Python'\nexit 3\n")
  os.execute("chmod +x " .. fake)
  local out = run("KM_PYTHON=" .. fake, PRINT_ALL)
  t.ok(out:find(fake .. " is not a Python: it did not run `-c` as Python does (exit status 3, it printed: I am not Python", 1, true), out)
  t.ok(out:find("KM_PYTHON must name a python executable", 1, true), out)
  t.ok(out:find("rc=0", 1, true), out)
  -- one that prints nothing at all says so, not an empty detail
  out = run("KM_PYTHON=/bin/true", PRINT_ALL)
  t.ok(out:find("/bin/true is not a Python: it did not run `-c` as Python does (exit status 0, it printed nothing)", 1, true), out)
end)

t.test("a Python without a shared libpython: the places looked in and what to install", function()
  -- answers the probe as a statically linked Python 3.99 would
  local fake = write(DIR .. "/static_python", [[#!/bin/sh
printf 'KMPY1\0003.99\000/nonexistent/lib\000x86_64-linux-gnu\000libpython3.99.a\000\000/nonexistent/lib/config\000/nonexistent\000/nonexistent\000/nonexistent/lib/python3.99\000/nonexistent/bin/python3.99\000/nonexistent\000/nonexistent/lib/python3.99'
]])
  os.execute("chmod +x " .. fake)
  local out = run("KM_PYTHON=" .. fake, PRINT_ALL)
  t.ok(out:find("/nonexistent/bin/python3.99 (Python 3.99) has no shared libpython3.99", 1, true), out)
  t.ok(out:find("/nonexistent/lib;", 1, true), out)
  t.ok(out:find("apt install libpython3.99", 1, true), out)
  t.ok(out:find("rc=0", 1, true), out)
end)

t.test("a library that is not libpython, and a missing one", function()
  local out = run("KM_PYTHON=" .. KMRUN:gsub("/kmrun$", "/lib/libcjson.so.1"), PRINT_ALL)
  t.ok(out:find("libcjson.so.1 lacks Py_InitializeEx", 1, true), out)
  out = run("KM_PYTHON=/nonexistent/libpython3.11.so.1.0", PRINT_ALL)
  t.ok(out:find("no Python: cannot load KM_PYTHON=/nonexistent/libpython3.11.so.1.0", 1, true), out)
  out = run("KM_PYTHON=libpython0.0.so.1.0", PRINT_ALL) -- a soname: the dynamic linker's search
  t.ok(out:find("no Python: cannot load KM_PYTHON=libpython0.0.so.1.0 (libpython0.0.so.1.0: cannot open", 1, true), out)
  t.ok(out:find("rc=0", 1, true), out)
end)

local py = require "km.python"
local okp, why = py.available()
if not okp then t.skip_all("no usable Python here: " .. tostring(why)) end

t.test("info names the version, the library and the executable", function()
  local i = assert(py.info())
  t.ok(i.version:match("^3%.%d+%.%d+"), i.version)
  t.ok(i.library:find("libpython3", 1, true), i.library)
  if i.executable then
    t.eq(py.eval("__import__('sys').executable"), i.executable)
  end
end)

t.test("eval gives Lua values for None, bools, ints, floats and strings", function()
  t.eq(select("#", py.eval("None")), 1)
  t.eq(py.eval("None"), nil)
  t.eq(py.eval("1 < 2"), true)
  t.eq(py.eval("1 > 2"), false)
  t.eq(math.type(py.eval("6 * 7")), "integer")
  t.eq(py.eval("6 * 7"), 42)
  t.eq(py.eval("-2**63"), math.mininteger)
  t.eq(math.type(py.eval("2**64")), "float")
  t.eq(py.eval("0.1 + 0.2"), 0.1 + 0.2)
  t.eq(py.eval("float('inf')"), math.huge)
  local nan = py.eval("float('nan')")
  t.ok(nan ~= nan)
  t.eq(py.eval("'h\\u00e9llo'"), "h\u{e9}llo")
  t.eq(py.eval("b'\\x00\\xff'"), "\0\255")
  local v, msg, code = py.eval("[1, 2]")
  t.eq(v, nil)
  t.ok(msg:find("a Python list has no Lua value", 1, true), msg)
  t.eq(code, "PYTHON_TYPE")
end)

t.test("exec shares __main__ with eval; errors come back as tracebacks", function()
  t.eq(py.exec("import math\nk = math.factorial(5)"), true)
  t.eq(py.eval("k"), 120)
  local ok, msg, code = py.exec("def f():\n    raise ValueError('boom')\nf()", "mine.py")
  t.eq(ok, nil)
  t.eq(code, "PYTHON_ERROR")
  t.ok(msg:find('^Traceback %(most recent call last%):\n  File "mine.py", line 3'), msg)
  t.ok(msg:find("ValueError: boom$"), msg)
  ok, msg = py.exec("def g(:\n  pass", "bad.py")
  t.eq(ok, nil)
  t.ok(msg:find('File "bad.py", line 1', 1, true) and msg:find("SyntaxError", 1, true), msg)
  ok, msg = py.exec("raise SystemExit(3)")
  t.eq(ok, nil, "SystemExit is an error, not an exit")
  t.ok(msg:find("SystemExit: 3", 1, true), msg)
  t.eq(py.eval("1 + 1"), 2, "the interpreter is fine afterwards")
end)

t.test("import by path, once per name; call with JSON arguments", function()
  local mod = write(DIR .. "/km_test_mod.py", [[
loads = 0
loads += 1
def add(a, b=10):
    return {"sum": a + b, "args": [a, b]}
def boom():
    raise KeyError("missing")
]])
  local flag = py.eval("__import__('sys').dont_write_bytecode")
  t.eq(py.import(mod), true)
  t.eq(py.import(mod), true)
  t.eq(py.eval("__import__('sys').modules['km_test_mod'].loads"), 1, "imported once")
  t.ok(not os.execute("test -d " .. DIR .. "/__pycache__"), "no bytecode written beside it")
  t.eq(py.eval("__import__('sys').dont_write_bytecode"), flag, "and the flag is back")
  t.eq(py.call("km_test_mod", "add", "[1, 2]"), '{"sum":3,"args":[1,2]}')
  t.eq(py.call("km_test_mod", "add", '{"a": 5}'), '{"sum":15,"args":[5,10]}')
  local r, msg, code = py.call("km_test_mod", "boom", "[]")
  t.eq(r, nil)
  t.eq(code, "PYTHON_ERROR")
  t.ok(msg:find("in boom", 1, true) and msg:find("KeyError: 'missing'", 1, true), msg)
  r, msg = py.call("km_test_mod", "nope", "[]")
  t.ok(not r and msg:find("AttributeError", 1, true), msg)
  r, msg = py.call("no_such_module_here", "f")
  t.ok(not r and msg:find("No module named 'no_such_module_here'", 1, true), msg)
  r, msg = py.call("json", "loads", '["[1, NaN]"]')
  t.ok(not r and msg:find("Out of range float values are not JSON compliant", 1, true), msg)
  r, msg, code = py.import(DIR .. "/missing.py")
  t.eq(r, nil)
  t.eq(code, "ENOENT")
  local bad = write(DIR .. "/km_bad_mod.py", "x = 1 / 0\n")
  r, msg = py.import(bad, "km_bad_mod")
  t.ok(not r and msg:find("ZeroDivisionError", 1, true), msg)
  t.eq(py.eval("'km_bad_mod' in __import__('sys').modules"), false, "a failed import leaves nothing")
end)

t.test("the environment: no PYTHONHOME leaks, sys.path is the executable's", function()
  t.eq(os.getenv("PYTHONHOME"), nil)
  t.eq(py.eval("__import__('os').environ.get('PYTHONHOME')"), nil)
  t.eq(py.eval("'' in __import__('sys').path"), false, "the current directory is not on sys.path")
  t.eq(py.eval("__import__('sys').argv[0]"), "kmrun")
end)

t.test("stream handles: an integer, nil as the current (default) stream", function()
  t.eq(py.stream_handle(1234), 1234)
  t.eq(py.stream_handle(), 0)
  t.raises(function() py.stream_handle("x") end, "km.Stream")
end)

t.test("many calls in a row hold no GIL and leak no references", function()
  local n0 = py.eval("len(__import__('gc').get_objects())")
  for i = 1, 2000 do assert(py.eval(tostring(i)) == i) end
  for _ = 1, 200 do assert(py.call("json", "loads", '["[1, 2]"]') == "[1,2]") end
  local n1 = py.eval("len(__import__('gc').get_objects())")
  t.ok(n1 - n0 < 200, n0 .. " -> " .. n1)
  -- a Python thread runs while Lua holds no GIL
  t.eq(py.exec("import threading\nr = []\nth = threading.Thread(target=lambda: r.append(1))\nth.start()\nth.join()"), true)
  t.eq(py.eval("r[0]"), 1)
end)

-- python.background: code on a thread of its own while this one goes on; one at a time; a
-- raised exception is a traceback; an import it runs is waited for by a second importer.
t.test("background: runs beside the caller, one at a time, failures as tracebacks", function()
  local wall = require("km.timing").wall
  local mod = write(DIR .. "/slow_mod.py", "import time\ntime.sleep(0.6)\nVALUE = 42\n")
  t.eq(py.exec(("import sys\nsys.path.insert(0, %q)"):format(DIR)), true)
  local t0 = wall()
  t.eq(py.background("import slow_mod", "test: slow import"), true)
  t.ok(wall() - t0 < 0.3, "background returns at once")
  t.eq(py.background_state(), "running")
  local ok, why, code = py.background("x = 1")
  t.eq(ok, nil); t.eq(code, "BUSY"); t.ok(why:find("still running", 1, true), why)
  -- calls from here run while it runs (the interpreter switches threads)
  t.eq(py.eval("6 * 7"), 42)
  t.ok(wall() - t0 < 0.5, "an eval did not wait for the background import")
  -- importing the same module here waits for the background import to finish, then has it
  t.eq(py.eval("__import__('slow_mod').VALUE"), 42)
  t.ok(wall() - t0 >= 0.55, "the second importer waited for the first")
  repeat until py.background_state() ~= "running"
  t.eq(py.background_state(), "done")
  t.eq(py.background("raise ValueError('boom in the background')", "test: failing"), true)
  repeat until py.background_state() ~= "running"
  local st, tb = py.background_state()
  t.eq(st, "failed")
  t.ok(tb:find("ValueError: boom in the background", 1, true) and tb:find("test: failing", 1, true), tb)
  os.remove(mod)
end)

os.execute("rm -rf " .. DIR)
t.done()
