-- Packaging conventions (issue 43, item 6): `make test` installs nothing (a missing Debian
-- package is named, with the command that installs it, and the target stops before building),
-- `make demo` installs the missing build packages first (make deps) and stops where it cannot, and `make install DESTDIR=STAGE PREFIX=P` writes every file under
-- STAGE/P and nothing outside STAGE, with kmrun.pc naming P.
--
-- The package check is run against a PATH whose apt-get and sudo only record that they were
-- called: the targets must not call them.
local t = require "km.tap"
local testing = require "km.testing"
local sys = require "km.sys"

local ROOT, KMRUN, BUILD = testing.paths()
if not os.execute("command -v make >/dev/null 2>&1") then t.skip_all("no make") end
local dir = testing.tmpdir()

-- make, run apart from any make that runs this test (no jobserver, no inherited flags)
local function make(args, env)
  return testing.run(string.format("env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL %s make --no-print-directory -C %s %s",
    env or "", ROOT, args))
end

-- apt-get and sudo that write a line to a log and fail
local fake = dir .. "/fakebin"
assert(sys.mkdir(fake))
local called = dir .. "/called.log"
for _, name in ipairs { "apt-get", "sudo" } do
  testing.write(fake .. "/" .. name, string.format("#!/bin/sh\necho \"%s $*\" >> %s\nexit 1\n", name, called))
  os.execute("chmod +x " .. fake .. "/" .. name)
end
local FAKE_PATH = "PATH=" .. fake .. ":$PATH"

t.test("make test with a package missing: names it and `make deps`, installs nothing, builds nothing", function()
  os.remove(called)
  local out, err, rc = make(string.format("test DEB_PKGS='gcc kmrun-no-such-package' BUILD=%s/build-test", dir), FAKE_PATH)
  t.ok(rc ~= 0, "stops: rc " .. tostring(rc))
  t.ok(err:find("missing Debian packages: kmrun-no-such-package", 1, true), err)
  t.ok(err:find("make deps", 1, true) and err:find("apt-get install kmrun-no-such-package", 1, true), err)
  t.ok(not err:find("gcc", 1, true), "an installed package is not named: " .. err)
  t.eq(testing.read(called), nil, "apt-get and sudo were not called")
  t.ok(not io.open(dir .. "/build-test"), "nothing was built: " .. out:sub(-300))
end)

-- the main job sets up what it needs first (README's two commands): the missing build
-- package only, through apt-get; where that fails it stops before building
t.test("make demo with a package missing: installs that one (make deps), and stops when it cannot", function()
  os.remove(called)
  local out, err, rc = make(string.format("demo DEB_BUILD='gcc kmrun-no-such-package' DEB_TEST='luajit' BUILD=%s/build-demo", dir), FAKE_PATH)
  t.ok(rc ~= 0, "stops: rc " .. tostring(rc))
  local log = testing.read(called) or ""
  t.ok(log:find("apt-get", 1, true), "apt-get was run: " .. log .. err)
  local line = out:match("deps: installing ([^\n]*)") or ""
  t.eq(line, "kmrun-no-such-package", "only the missing build package: " .. out .. err)
  t.ok(not io.open(dir .. "/build-demo"), "nothing was built: " .. out:sub(-300))
end)

t.test("make test and make demo with every package there go on (the check passes on this host)", function()
  local out, err, rc = make("-n test")
  t.eq(rc, 0, err)
  t.ok(out:find("prove", 1, true), "make -n test goes on to the tests")
end)

t.test("make test starts the longest files first: the torch-backed ones (issue 43)", function()
  local out, err, rc = make("-n test")
  t.eq(rc, 0, err)
  local line = out:match("\n[^\n]*prove %-j%d+ [^\n]*test_[^\n]*") or ""
  local files = {}
  for f in line:gmatch("tests/[%w_/]+%.lua") do files[#files + 1] = f:match("[^/]+$") end
  local at = {}
  for i, f in ipairs(files) do at[f] = at[f] or i end
  t.eq(files[1], "test_precompile.lua", "the longest first")
  for _, f in ipairs { "test_lint_estimate.lua", "test_py_deadline.lua", "test_baseline.lua", "test_eval_progress.lua" } do
    t.ok(at[f] and at[f] <= 8, f .. " starts among the first 8: " .. tostring(at[f]))
  end
  local seen = {}
  for _, f in ipairs(files) do t.ok(not seen[f], f .. " listed once") seen[f] = true end
  t.ok(#files >= 60, #files .. " Lua test files")
end)

t.test("the sanitizer build: UBSan halts the test that hits undefined behaviour; CI runs the C tests under it", function()
  local out, err, rc = make(string.format("-n SANITIZE=address,undefined BUILD=%s/san test-c", dir))
  t.eq(rc, 0, err)
  t.ok(out:find("-fsanitize=address,undefined", 1, true), "the C tests are built with the sanitizers")
  t.ok(out:find("UBSAN_OPTIONS=halt_on_error=1", 1, true) and out:find("prove -f --exec tests/exec " .. dir .. "/san/tests/test_", 1, true),
    out:sub(-400))
  out = make(string.format("-n SANITIZE=address,undefined BUILD=%s/san test", dir))
  t.ok(out:find("UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 KMRUN=" .. dir .. "/san/kmrun prove", 1, true), "make test too")
  local ci = testing.read(ROOT .. "/.ci/run") or ""
  t.ok(ci:find("\nmake --no-print-directory SANITIZE=address,undefined BUILD=build-asan test-c\n", 1, true), ".ci/run runs them")
  t.ok(ci:find("\nmake --no-print-directory deps\n", 1, true), ".ci/run installs the packages itself (make deps)")
end)

t.test("make install DESTDIR=STAGE PREFIX=P: files under STAGE/P, none outside, kmrun.pc says P", function()
  local stage = dir .. "/stage"
  local prefix = "/opt/kmrun-destdir-test-" .. sys.pid()
  t.ok(not io.open(prefix), prefix .. " is not there before")
  local out, err, rc = make(string.format("install BUILD=%s DESTDIR=%s PREFIX=%s", BUILD, stage, prefix))
  t.eq(rc, 0, out .. err)
  local outside = io.open(prefix)
  if outside then outside:close() os.execute("rm -rf " .. prefix) end
  t.ok(not outside, "nothing written to " .. prefix)
  -- every file staged lies under STAGE/PREFIX
  local listed = testing.sh("cd " .. stage .. " && find . -type f")
  local n, stray = 0, {}
  for f in listed:gmatch("[^\n]+") do
    n = n + 1
    if f:sub(1, #prefix + 2) ~= "." .. prefix .. "/" then stray[#stray + 1] = f end
  end
  t.ok(n > 20, n .. " files staged")
  t.eq(#stray, 0, "outside STAGE/PREFIX: " .. table.concat(stray, " "))
  local root = stage .. prefix
  for _, f in ipairs { "bin/kmrun", "include/kmrun.h", "lib/libkmrun.so", "lib/libkmrun.a", "lib/kmrun/libcjson.so.1",
                       "lib/lua/5.4/km.so", "lib/pkgconfig/kmrun.pc", "share/kmrun/lua/km/task.lua",
                       "share/kmrun/strategies/repair.lua" } do
    t.ok(io.open(root .. "/" .. f), "staged " .. f)
  end
  local pc = testing.read(root .. "/lib/pkgconfig/kmrun.pc") or ""
  t.ok(pc:find("prefix=" .. prefix .. "\n", 1, true), "kmrun.pc names the prefix: " .. pc:sub(1, 80))
  t.ok(not pc:find(stage, 1, true), "kmrun.pc does not name the stage")
  -- the staged program runs where it lies (it finds its Lua library beside it)
  local o, e, c = testing.run(root .. "/bin/kmrun -e 'print(require(\"km.json\").encode({ 1 }))'")
  t.eq(c, 0, e)
  t.eq(o, "[1]\n")
end)

t.test("with DESTDIR, a relative PREFIX is refused", function()
  local _, err, rc = testing.run(string.format("cd %s && DESTDIR=%s/stage2 sh %s/tools/install.sh %s usr", dir, dir, ROOT, BUILD))
  t.eq(rc, 2)
  t.ok(err:find("PREFIX must be absolute", 1, true), err)
end)

os.execute("rm -rf " .. dir)
t.done()
