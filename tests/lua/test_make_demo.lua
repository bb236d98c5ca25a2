-- `make demo` builds only what it runs (issue 19, Smaller): the program, not the library,
-- the benches or the examples of `make all` (most of a first demo's build time), while
-- `make all` still builds them. Read from `make -n` into an empty build folder, so every
-- command the target would run is listed and none is run.
local t = require "km.tap"
local testing = require "km.testing"

local ROOT = testing.paths()
if not os.execute("command -v make >/dev/null 2>&1") then t.skip_all("no make") end
local dir = testing.tmpdir()

local function plan(target)
  local out, rc = testing.sh(string.format("make -n -C %s %s BUILD=%s/build", ROOT, target, dir))
  return out, rc
end

local NOT_FOR_DEMO = { "libkmrun.so", "libkmrun.a", "lib/lua/km.so", "examples/embed", "bench/launch_capi", "raw_bench", "carry/" }

t.test("make demo builds the program and runs the demo, nothing else", function()
  local out, rc = plan("demo")
  t.eq(rc, 0, out)
  t.ok(out:find("-o " .. dir .. "/build/kmrun ", 1, true), "links the program: " .. out:sub(-600))
  t.ok(out:find(dir .. "/build/kmrun strategies/repair_then_tune.lua tasks/", 1, true), out:sub(-600))
  for _, what in ipairs(NOT_FOR_DEMO) do t.ok(not out:find(what, 1, true), "demo does not build " .. what) end
end)

t.test("make all still builds the library, benches and examples", function()
  local out, rc = plan("all")
  t.eq(rc, 0, out)
  for _, what in ipairs { "libkmrun.so", "libkmrun.a", "lib/lua/km.so", "examples/embed", "bench/launch_capi", "raw_bench" } do
    t.ok(out:find(what, 1, true), "all builds " .. what)
  end
end)

os.execute("rm -rf " .. dir)
t.done()
