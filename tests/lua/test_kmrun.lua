-- The kmrun program itself: arguments, -e, -v, errors, module paths.
local t = require "km.tap"
local testing = require "km.testing"

local _, KMRUN = testing.paths()
local sh = testing.sh

local function tmpfile(content)
  local name = os.tmpname()
  testing.write(name, content)
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

t.test("-v without a driver says there is none, once", function()
  if require("km.cuda").available() then return t.note("this machine has a CUDA driver") end
  local out = sh(KMRUN .. " -v")
  t.ok(out:find("\nCUDA driver: none here (cannot load libcuda.so.1", 1, true), out)
  t.ok(not out:find("CUDA driver: no CUDA driver", 1, true), out)
end)

t.test("a missing script is a usage error", function()
  local out, rc = sh(KMRUN .. " /nonexistent/x.lua")
  t.eq(rc, 2)
  t.ok(out:find("no such script", 1, true), out)
end)

t.test("the Lua library is found from the executable, not the current folder", function()
  local out, rc = sh("cd / && " .. KMRUN ..
    " -e 'print(require(\"km.tap\") ~= nil, package.path:find(\"./?.lua\", 1, true))'")
  t.eq(rc, 0)
  t.eq(out, "true\tnil\n")
end)

t.test("KM_PATH adds module folders before the library", function()
  local dir = testing.tmpdir()
  require("km.sys").mkdir(dir .. "/mymod")
  testing.write(dir .. "/mymod/init.lua", "return { answer = 42 }")
  local out, rc = sh("KM_PATH=" .. dir .. " " .. KMRUN .. " -e 'print(require(\"mymod\").answer)'")
  os.execute("rm -rf " .. dir)
  t.eq(rc, 0)
  t.eq(out, "42\n")
end)

local function have_script()
  return os.execute("command -v script >/dev/null 2>&1")
end

-- What the prompt prints for `input` typed on a pseudo-terminal (util-linux's script).
local function on_terminal(input, cmdline, env)
  local f = tmpfile(input)
  local out = sh((env or "") .. " timeout 10 script -qec '" .. (cmdline or KMRUN) .. "' /dev/null < " .. f)
  os.remove(f)
  return (out:gsub("\27%[%?2004[hl]", ""):gsub("\r", ""))
end

t.test("with no arguments on a terminal, an interactive prompt", function()
  if not have_script() then return t.note("skipped: util-linux's script (for a pseudo-terminal) is not installed") end
  for _, env in ipairs { "KM_READLINE=0", "" } do
    local out = on_terminal('print(6*7)\n1+2\nerror("oops")\n=10\n', nil, env)
    t.ok(out:find("Ctrl-D to leave", 1, true), out)
    -- (without readline the terminal echoed the input before the prompt: "> 42")
    t.ok(out:find("[>\n] ?42\n"), env .. ": " .. out)
    t.ok(out:find("[>\n] ?3\n"), env .. ": " .. out)  -- an expression prints its value
    t.ok(out:find("oops", 1, true), out)              -- an error is reported and the prompt goes on
    t.ok(out:find("[>\n] ?10\n"), env .. ": " .. out) -- "=x" as in Lua 5.2
  end
end)

t.test("the prompt reads a statement over several lines, as lua does", function()
  if not have_script() then return t.note("skipped: util-linux's script is not installed") end
  local out = on_terminal('for i = 1, 2 do\nprint("line" .. i)\nend\nlocal function f()\nreturn 5\nend print(f())\n', nil,
    "KM_READLINE=0")
  t.ok(out:find(">> ", 1, true), "a continuation prompt: " .. out)
  t.ok(out:find("line1\nline2\n", 1, true), out)
  t.ok(out:find("[>\n] ?5\n"), out)
  t.ok(not out:find("<eof>", 1, true), out)
  out = on_terminal('_PROMPT = "km> "\nprint(1)\n', nil, "KM_READLINE=0")
  t.ok(out:find("km> ", 1, true), "_PROMPT is honoured: " .. out)
end)

t.test("line editing and history through readline or libedit, when one is installed", function()
  if not have_script() then return t.note("skipped: util-linux's script is not installed") end
  local have = sh("ldconfig -p | grep -E 'libreadline.so.8|libedit.so.2'")
  if not have:find("lib", 1, true) then return t.note("skipped: neither libreadline nor libedit is installed") end
  -- up-arrow recalls the previous line: "1+20" runs twice
  local out = on_terminal("1+20\n\27[A\n")
  local _, n = out:gsub("[>\n] ?21\n", "")
  t.eq(n, 2, "the recalled line ran again: " .. out)
  -- without the library, the escape sequence is just text (an error)
  out = on_terminal("1+20\n\27[A\n", nil, "KM_READLINE=0")
  _, n = out:gsub("[>\n] ?21\n", "")
  t.eq(n, 1, out)
end)

t.test("-i enters the prompt after the script; -e, -l and -- as lua reads them", function()
  local out, rc = sh(KMRUN .. " -e 'x = 1' -e 'print(x + 1)'")
  t.eq(rc, 0)
  t.eq(out, "2\n", "several -e run in order")
  out, rc = sh(KMRUN .. " -l json=km.json -e 'print(json.encode({ 1 }))'")
  t.eq(rc, 0, out)
  t.eq(out, "[1]\n")
  out, rc = sh(KMRUN .. " -lkm.tap -e 'print(type(_G[\"km.tap\"]))'")
  t.eq(out, "table\n", "-lNAME: the global named as the module")
  local s = tmpfile("print(...)")
  out, rc = sh(KMRUN .. " -- " .. s .. " -e x")
  t.eq(rc, 0, out)
  t.eq(out, "-e\tx\n", "after the script, arguments are the script's")
  out, rc = sh("echo 'print(\"from stdin\", ...)' | " .. KMRUN .. " - a b")
  t.eq(out, "from stdin\ta\tb\n")
  os.remove(s)
  out, rc = sh(KMRUN .. " -e")
  t.eq(rc, 2)
  t.ok(out:find("-e needs a value", 1, true), out)
  if have_script() then
    local o = on_terminal("print(y * 2)\n", KMRUN .. " -e \"y = 21\" -i", "KM_READLINE=0")
    t.ok(o:find("[>\n] ?42\n"), o)
  end
end)

t.test("LUA_PATH, LUA_CPATH and LUA_INIT are honoured; -E ignores them", function()
  local dir = testing.tmpdir()
  testing.write(dir .. "/mylib.lua", "return { v = 7 }")
  local env = "LUA_PATH='" .. dir .. "/?.lua;;' LUA_CPATH='" .. dir .. "/?.so' "
  local out, rc = sh(env .. KMRUN .. " -e 'print(require(\"mylib\").v, package.cpath:find(\"" .. dir .. "\", 1, true) ~= nil)'")
  t.eq(rc, 0, out)
  t.eq(out, "7\ttrue\n")
  out = sh(env .. KMRUN .. " -E -e 'print(pcall(require, \"mylib\"))'")
  t.ok(out:find("^false"), "-E: LUA_PATH ignored: " .. out)
  out = sh("LUA_INIT='init_ran = 42' " .. KMRUN .. " -e 'print(init_ran)'")
  t.eq(out, "42\n")
  out = sh("LUA_INIT_5_4='v54 = 1' LUA_INIT='v54 = 2' " .. KMRUN .. " -e 'print(v54)'")
  t.eq(out, "1\n", "LUA_INIT_5_4 first")
  testing.write(dir .. "/init.lua", "from_file = 'yes'")
  out = sh("LUA_INIT=@" .. dir .. "/init.lua " .. KMRUN .. " -e 'print(from_file)'")
  t.eq(out, "yes\n")
  out = sh("LUA_INIT='print(\"init\")' " .. KMRUN .. " -E -e 'print(1)'")
  t.eq(out, "1\n", "-E: no LUA_INIT")
  out, rc = sh("LUA_INIT='error(\"bad init\")' " .. KMRUN .. " -e 'print(1)'")
  t.eq(rc, 1)
  t.ok(out:find("bad init", 1, true), out)
  -- commands do not run LUA_INIT (it would land in their output)
  out, rc = sh("LUA_INIT='print(\"init\")' " .. KMRUN .. " help")
  t.eq(rc, 0)
  t.ok(not out:find("^init"), out)
  os.execute("rm -rf " .. dir)
end)

t.test("built-in modules are preloaded, not globals", function()
  t.eq(rawget(_G, "km"), nil)
  t.ok(package.preload["km.core"], "km.core in package.preload")
end)

t.test("Ctrl-C in a script: one line, exit status 130, no traceback", function()
  local err = os.tmpname()
  local p = io.popen("(" .. KMRUN .. " -e 'while true do end' 2>" .. err .. " & pid=$!; sleep 0.5; kill -INT $pid; wait $pid; echo rc=$?) 2>&1")
  local out = p:read("a")
  p:close()
  local f = io.open(err); local e = f:read("a"); f:close(); os.remove(err)
  t.ok(out:find("rc=130", 1, true), out)
  t.eq(e, "kmrun: interrupted\n")
end)

t.done()
