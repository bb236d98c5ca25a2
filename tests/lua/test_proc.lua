-- km.proc: framed pipes to child processes, timeouts, kills, select.
local t = require "km.tap"
local testing = require "km.testing"
local proc = require "km.proc"

local _, KMRUN = testing.paths()
local child = os.tmpname()
testing.write(child, [[
local proc = require "km.proc"
local ch = proc.stdio_channel()
print("stray output goes to stderr, not into the frames")
while true do
  local m = ch:recv()
  if not m then break end
  if m == "hang" then while true do end end
  if m == "exit" then os.exit(7) end
  ch:send("echo:" .. m .. ":" .. (os.getenv("KM_TEST_VAR") or ""))
end
]])

local function spawn(env)
  return assert(proc.spawn({ KMRUN, child }, { env = env, stderr = "null" }))
end

t.test("frames carry any bytes both ways; env reaches the child", function()
  local p = spawn { KM_TEST_VAR = "v1" }
  local payload = "a\0b\nc" .. string.rep("x", 100000)
  assert(p:send(payload))
  t.eq(p:recv(5000), "echo:" .. payload .. ":v1")
  p:close()
  p:close()
end)

t.test("recv times out on a silent child; kill and wait report the signal", function()
  local p = spawn()
  p:send("hang")
  local m, why, code = p:recv(200)
  t.eq(m, nil)
  t.eq(why, "timeout")
  t.eq(code, "TIMEOUT")
  t.eq(p:alive(), true)
  p:kill()
  local st = assert(p:wait(5000))
  t.eq(st.exited, false)
  t.eq(st.signal, 9)
  t.eq(p:alive(), false)
end)

t.test("a child that exits shows as EOF and its code", function()
  local p = spawn()
  p:send("exit")
  local m, why, code = p:recv(5000)
  t.eq(m, nil)
  t.eq(code, "EOF")
  t.eq(p:wait(5000).code, 7)
  local ok, _, c2 = p:send("more")
  t.eq(ok, nil)
  t.eq(c2, "EPIPE")
end)

t.test("select returns the child that has something to say", function()
  local a, b = spawn(), spawn()
  b:send("x")
  local r, i = proc.select({ a, b }, 5000)
  t.eq(r, b)
  t.eq(i, 2)
  t.eq(b:recv(100), "echo:x:")
  t.eq(proc.select({ a, b }, 50), nil)
  a:close(); b:close()
end)

t.test("a program that does not exist is nil, message, ESPAWN", function()
  local p, msg, code = proc.spawn({ "/nonexistent/prog" })
  t.eq(p, nil)
  t.eq(code, "ESPAWN")
  t.ok(msg:find("/nonexistent/prog", 1, true), msg)
end)

t.test("quick_exit: its code, a frame sent and buffered file output arrive; no finalizer runs", function()
  local script, out, gc = os.tmpname(), os.tmpname(), os.tmpname()
  os.remove(gc)
  testing.write(script, string.format([[
local proc = require "km.proc"
local ch = proc.stdio_channel()
local f = assert(io.open(%q, "w"))
f:write("buffered, never closed")
setmetatable({}, { __gc = function() local g = io.open(%q, "w") g:write("ran") g:close() end })
ch:send("last frame")
proc.quick_exit(5)
error("quick_exit returned")
]], out, gc))
  local p = assert(proc.spawn({ KMRUN, script }, { stderr = "null" }))
  t.eq(p:recv(5000), "last frame")
  local st = assert(p:wait(5000))
  t.eq(st.code, 5)
  t.eq(testing.read(out), "buffered, never closed")
  t.eq(io.open(gc), nil, "a Lua finalizer ran at quick_exit")
  os.remove(script); os.remove(out)
end)

os.remove(child)
t.done()
