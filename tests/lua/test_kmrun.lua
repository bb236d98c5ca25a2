-- The kmrun program itself: arguments, -e, -v, errors, module paths.
local t = require "km.tap"

local KMRUN = arg[-1]:match("kmrun$") and arg[-1] or "build/kmrun"

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("a")
  p:close()
  local body, rc = out:match("^(.*)rc=(%d+)\n$")
  return body, tonumber(rc)
end

local function tmpfile(content)
  local name = os.tmpname()
  local f = assert(io.open(name, "w"))
  f:write(content)
  f:close()
  return name
end

t.test("a script sees arg as the lua interpreter gives it", function()
  local s = tmpfile("print(#arg, arg[0] ~= nil, arg[1], arg[2], ...)")
  local out, rc = sh(KMRUN .. " " .. s .. " one two")
  os.remove(s)
  t.eq(rc, 0)
  t.eq(out, "2\ttrue\tone\ttwo\tone\ttwo\n")
end)

t.test("-e runs a chunk", function()
  local out, rc = sh(KMRUN .. " -e 'print(6*7)'")
  t.eq(rc, 0)
  t.eq(out, "42\n")
end)

t.test("an error prints a traceback and exits non-zero", function()
  local out, rc = sh(KMRUN .. " -e 'local function f() error(\"boom\") end f()'")
  t.eq(rc, 1)
  t.ok(out:find("boom", 1, true), out)
  t.ok(out:find("stack traceback", 1, true), out)
end)

t.test("a script's integer return is the exit status", function()
  local s = tmpfile("return 3")
  local _, rc = sh(KMRUN .. " " .. s)
  os.remove(s)
  t.eq(rc, 3)
end)

t.test("-v names kmrun and Lua", function()
  local out, rc = sh(KMRUN .. " -v")
  t.eq(rc, 0)
  t.ok(out:find("^kmrun %d+%.%d+%.%d+, Lua 5%.4"), out)
end)

t.test("a missing script is a usage error", function()
  local out, rc = sh(KMRUN .. " /nonexistent/x.lua")
  t.eq(rc, 2)
  t.ok(out:find("no such script", 1, true), out)
end)

t.test("the Lua library is found from the executable, not the current folder", function()
  local out, rc = sh("cd / && " .. io.popen("readlink -f " .. KMRUN):read("l") ..
    " -e 'print(require(\"km.tap\") ~= nil, package.path:find(\"./?.lua\", 1, true))'")
  t.eq(rc, 0)
  t.eq(out, "true\tnil\n")
end)

t.test("KM_PATH adds module folders before the library", function()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir .. "/mymod")
  local f = assert(io.open(dir .. "/mymod/init.lua", "w"))
  f:write("return { answer = 42 }")
  f:close()
  local out, rc = sh("KM_PATH=" .. dir .. " " .. KMRUN .. " -e 'print(require(\"mymod\").answer)'")
  os.execute("rm -rf " .. dir)
  t.eq(rc, 0)
  t.eq(out, "42\n")
end)

t.test("with no arguments on a terminal, an interactive prompt", function()
  if not os.execute("command -v script >/dev/null 2>&1") then
    return t.diag("skipped: util-linux's script (for a pseudo-terminal) is not installed")
  end
  local out = sh("printf 'print(6*7)\\n1+2\\nerror(\"oops\")\\n' | timeout 10 script -qec " .. KMRUN .. " /dev/null")
  t.ok(out:find("Ctrl-D to leave", 1, true), out)
  t.ok(out:find("> 42", 1, true), out)
  t.ok(out:find("> 3", 1, true), out)   -- an expression prints its value
  t.ok(out:find("oops", 1, true), out)  -- an error is reported and the prompt goes on
end)

t.test("built-in modules are preloaded, not globals", function()
  t.eq(rawget(_G, "km"), nil)
  t.ok(package.preload["km.core"], "km.core in package.preload")
end)

t.done()
