-- A test leaves nothing in the system's temp folder (issue 43, item 8): kmrun's os.tmpname
-- honours TMPDIR; tests/exec gives each test file a TMPDIR of its own (and PyTorch's
-- inductor and Triton caches under its cache folder) and removes it after; km.testing.tmpdir
-- makes its folders there and removes them when the file ends, also when run by hand.
-- A test file of its own is run here through tests/exec and alone, in a TMPDIR made for it.
local t = require "km.tap"
local testing = require "km.testing"
local sys = require "km.sys"

local ROOT, KMRUN = testing.paths()
local dir = testing.tmpdir()

-- The file: a folder from testing.tmpdir (a file in it), a name from os.tmpname, and the
-- variables tests/exec sets, written to the report file named by its first argument.
local fixture = dir .. "/fixture.lua"
testing.write(fixture, [[
local t, testing = require "km.tap", require "km.testing"
local d = testing.tmpdir()
testing.write(d .. "/x", "x")
local f = assert(io.open(arg[1], "w"))
for _, line in ipairs { "tmpdir=" .. d, "tmpname=" .. os.tmpname(), "TMPDIR=" .. tostring(os.getenv("TMPDIR")),
    "CACHE=" .. tostring(os.getenv("KM_TEST_CACHE")), "INDUCTOR=" .. tostring(os.getenv("TORCHINDUCTOR_CACHE_DIR")),
    "TRITON=" .. tostring(os.getenv("TRITON_CACHE_DIR")) } do
  f:write(line, "\n")
end
f:close()
t.test("made", function() t.ok(io.open(d .. "/x")) end)
t.done()
]])

local function report(path)
  local r = {}
  for k, v in (testing.read(path) or ""):gmatch("([%w_]+)=([^\n]*)") do r[k] = v end
  return r
end

local function empty(d)
  local names = sys.readdir(d) or {}
  return #names == 0, table.concat(names, " ")
end

t.test("os.tmpname names a file in TMPDIR", function()
  local tmp = dir .. "/tmpdir"
  assert(sys.mkdir(tmp))
  local out, err, rc = testing.run(string.format("TMPDIR=%s %s -e 'print(os.tmpname())'", tmp, KMRUN))
  t.eq(rc, 0, err)
  t.eq(out:match("^(.*)/lua_[%w]+\n$"), tmp, out)
  os.remove((out:gsub("\n$", "")))
end)

t.test("a test file run by tests/exec leaves nothing in TMPDIR; its temp files and torch caches were in its own folder", function()
  local tmp, rep = dir .. "/exec-tmp", dir .. "/exec-report"
  assert(sys.mkdir(tmp))
  local out, err, rc = testing.run(string.format("cd %s && TMPDIR=%s KMRUN=%s tests/exec %s %s", ROOT, tmp, KMRUN, fixture, rep))
  t.eq(rc, 0, out .. err)
  local r = report(rep)
  t.ok(r.CACHE and r.CACHE:sub(1, #tmp + 1) == tmp .. "/", "the test's folder is in TMPDIR: " .. tostring(r.CACHE))
  t.eq(r.TMPDIR, r.CACHE .. "/tmp")
  t.eq(r.tmpdir and r.tmpdir:sub(1, #r.TMPDIR + 1), r.TMPDIR .. "/", "testing.tmpdir")
  t.eq(r.tmpname and r.tmpname:sub(1, #r.TMPDIR + 1), r.TMPDIR .. "/", "os.tmpname")
  t.eq(r.INDUCTOR, r.CACHE .. "/cache/torchinductor")
  t.eq(r.TRITON, r.CACHE .. "/cache/triton")
  t.ok(not io.open(r.tmpdir or "/"), "the folder is gone")
  local ok, left = empty(tmp)
  t.ok(ok, "left in TMPDIR: " .. left)
end)

t.test("run by hand, a test file removes the folders testing.tmpdir made", function()
  local tmp, rep = dir .. "/hand-tmp", dir .. "/hand-report"
  assert(sys.mkdir(tmp))
  local out, err, rc = testing.run(string.format("env -u KM_TEST_CACHE TMPDIR=%s %s %s %s", tmp, KMRUN, fixture, rep))
  t.eq(rc, 0, out .. err)
  local r = report(rep)
  t.eq(r.tmpdir and r.tmpdir:sub(1, #tmp + 1), tmp .. "/", "testing.tmpdir in TMPDIR")
  t.ok(not io.open(r.tmpdir or "/"), "testing.tmpdir's folder is gone")
  os.remove(r.tmpname or "")
  local ok, left = empty(tmp)
  t.ok(ok, "left in TMPDIR: " .. left)
end)

t.done()
