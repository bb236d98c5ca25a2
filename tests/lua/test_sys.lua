-- km.sys: folders, terminals, CPUs and detached children without a shell.
local t = require "km.tap"
local testing = require "km.testing"
local sys = require "km.sys"

local _, KMRUN = testing.paths()
local root = os.tmpname()
os.remove(root)
local write = testing.write

t.test("mkdir makes every missing parent; an existing folder is fine; a file in the way is NOT_DIR", function()
  t.eq(sys.mkdir(root .. "/a/b/c"), true)
  t.eq(sys.mkdir(root .. "/a/b/c"), true, "again")
  t.eq(sys.mkdir(root .. "/a/b/"), true, "a trailing slash")
  write(root .. "/a/file", "x")
  local ok, msg, code = sys.mkdir(root .. "/a/file")
  t.eq(ok, nil)
  t.eq(code, "NOT_DIR")
  t.ok(msg:find("a/file", 1, true), msg)
  ok, msg, code = sys.mkdir(root .. "/a/file/below")
  t.eq(ok, nil)
  t.eq(code, "NOT_DIR", msg)
  t.raises(function() sys.mkdir("") end, "not a path")
end)

t.test("readdir lists names sorted by bytes, without . and .., names with spaces and quotes intact", function()
  local d = root .. "/list"
  assert(sys.mkdir(d))
  for _, n in ipairs { "b", "a b", "it's", "A", ".hidden", "c" } do write(d .. "/" .. n, "") end
  assert(sys.mkdir(d .. "/sub"))
  t.eq(table.concat(sys.readdir(d), "|"), ".hidden|A|a b|b|c|it's|sub")
  t.eq(#sys.readdir(root .. "/a/b/c"), 0, "an empty folder")
  local names, msg, code = sys.readdir(root .. "/none")
  t.eq(names, nil)
  t.eq(code, "NOT_FOUND", msg)
  names, msg, code = sys.readdir(d .. "/b")
  t.eq(code, "NOT_DIR", msg)
end)

t.test("rmtree removes a tree, removes symlinks without following them, and is fine when nothing is there", function()
  local keep = root .. "/keep"
  assert(sys.mkdir(keep))
  write(keep .. "/precious", "x")
  local d = root .. "/gone"
  assert(sys.mkdir(d .. "/x/y"))
  write(d .. "/x/y/f", "1")
  write(d .. "/g", "2")
  assert(os.execute("ln -s " .. keep .. " " .. d .. "/link")) -- the test may use the shell
  t.eq(sys.rmtree(d), true)
  t.eq(sys.readdir(d), nil, "the tree is gone")
  t.eq(sys.readdir(keep)[1], "precious", "the symlink's target is untouched")
  t.eq(sys.rmtree(d), true, "nothing there")
  t.raises(function() sys.rmtree("/") end, "refusing")
end)

t.test("realpath resolves links and dots; a missing path is NOT_FOUND", function()
  t.eq(sys.realpath(root .. "/a/b/../b/c"), sys.realpath(root) .. "/a/b/c")
  local p, msg, code = sys.realpath(root .. "/missing")
  t.eq(p, nil)
  t.eq(code, "NOT_FOUND", msg)
end)

t.test("isatty: a file or a pipe is not a terminal; file handles and descriptors both work", function()
  local f = assert(io.open(root .. "/a/file"))
  t.eq(sys.isatty(f), false)
  f:close()
  t.raises(function() sys.isatty(f) end, "closed file")
  local p = io.popen(KMRUN .. " -e 'io.write(tostring(require(\"km.sys\").isatty(io.stdout)), tostring(require(\"km.sys\").isatty(1)))'")
  t.eq(p:read("a"), "falsefalse", "stdout into a pipe")
  p:close()
  t.eq(sys.isatty(-1), false)
end)

t.test("cpu_count agrees with nproc", function()
  local p = io.popen("nproc")
  local n = tonumber(p:read("l"))
  p:close()
  t.eq(sys.cpu_count(), n)
end)

t.test("spawn runs argv without a shell, adds env, and wait reaps it with its exit status", function()
  local out, script = root .. "/spawned", root .. "/child.lua"
  write(script, "local f = io.open(arg[1], 'w') f:write(os.getenv('KM_SYS_T') or '-') f:close() print('noise') os.exit(3)")
  local pid = assert(sys.spawn({ KMRUN, script, out .. " ;touch km_sys_injected" },
    { env = { KM_SYS_T = "v 1" }, stdout = "null" }))
  t.ok(math.type(pid) == "integer" and pid > 0)
  local done, how, n = sys.wait(pid, true)
  t.eq(done, true)
  t.eq(how, "exit")
  t.eq(n, 3)
  t.eq(io.open(out .. " ;touch km_sys_injected"):read("a"), "v 1", "the argument reached the child whole")
  t.eq(io.open("km_sys_injected"), nil, "no shell ran the argument")
  local ok, msg, code = sys.wait(pid)
  t.eq(ok, nil)
  t.eq(code, "NOT_CHILD", msg)
end)

t.test("wait without blocking says false while the child runs; kill ends it and wait reports the signal", function()
  local pid = assert(sys.spawn({ "sleep", "30" }))
  t.eq(sys.wait(pid), false)
  t.eq(sys.kill(pid, 0), true, "probe")
  t.eq(sys.kill(pid, "TERM"), true)
  local done, how, n = sys.wait(pid, true)
  t.eq(done, true)
  t.eq(how, "signal")
  t.eq(n, 15)
  local ok, _, code = sys.kill(pid, 0)
  t.eq(ok, nil)
  t.eq(code, "NO_PROCESS")
  t.raises(function() sys.kill(-1, "KILL") end, "not a process id")
  t.raises(function() sys.kill(0) end, "not a process id")
  t.raises(function() sys.kill(pid, 9) end, "signal name")
end)

t.test("spawn of a program that is not there is NOT_FOUND", function()
  local pid, msg, code = sys.spawn({ "km-sys-no-such-program" })
  t.eq(pid, nil)
  t.eq(code, "NOT_FOUND", msg)
  t.raises(function() sys.spawn({}) end, "argv")
  t.raises(function() sys.spawn({ "true" }, { stdout = "file" }) end, "stdout")
end)

t.test("sleep waits about as long as asked", function()
  local wall = require("km.timing").wall
  local t0 = wall()
  sys.sleep(0.05)
  local dt = wall() - t0
  t.ok(dt >= 0.045 and dt < 1, tostring(dt))
  t.raises(function() sys.sleep(-1) end, "out of range")
end)

t.test("cleanup", function() t.eq(sys.rmtree(root), true) end)

t.done()
