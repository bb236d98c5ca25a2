-- km.capture: this process's stdout (fd 1) caught, counted exactly and cut, whoever wrote
-- it (Lua, C stdio, a child process); fd 1 is back where it was afterwards.
local t = require "km.tap"
local capture = require "km.capture"

local function pid()
  local f = assert(io.open("/proc/self/stat"))
  local s = f:read("l")
  f:close()
  return s:match("^(%d+)")
end
local PID = pid()

-- what fd 1 of this process is (device:inode), read by a child whose own stdout is a pipe
local function fd1()
  local p = io.popen("stat -L -c '%d:%i' /proc/" .. PID .. "/fd/1 2>&1")
  local s = p:read("a")
  p:close()
  return s
end

t.test("Lua writes and a child's output are caught and counted; fd 1 is restored", function()
  local before = fd1()
  local cap = assert(capture.start())
  t.ok(capture.active())
  t.ok(fd1() ~= before, "fd 1 is redirected while capturing")
  io.write("first line\n", "second line\n")
  io.stdout:flush()
  print("third line")
  os.execute("echo from a child")
  io.write("no newline at the end")
  local text, lines, bytes = cap:stop()
  t.eq(text, "first line\nsecond line\nthird line\nfrom a child\nno newline at the end")
  t.eq(lines, 5)
  t.eq(bytes, #text)
  t.ok(not capture.active())
  t.eq(fd1(), before, "fd 1 is the same file as before")
  t.raises(function() cap:stop() end, "stopped km.Capture")
end)

t.test("a flood larger than the pipe: exact counts, text cut at the limit", function()
  local cap = assert(capture.start())
  -- 200000 lines from a child (well past a pipe's 64 KiB) and 1000 from Lua, unflushed
  os.execute("seq 1 200000")
  for i = 1, 1000 do io.write("lua ", i, "\n") end
  local text, lines, bytes = cap:stop(100)
  local want = 0
  for i = 1, 200000 do want = want + #tostring(i) + 1 end
  for i = 1, 1000 do want = want + #("lua " .. i .. "\n") end
  t.eq(lines, 201000)
  t.eq(bytes, want)
  t.eq(#text, 100)
  t.eq(text:sub(1, 8), "1\n2\n3\n4\n")
end)

t.test("keep bounds what is kept; the default limit is 4 KiB", function()
  local cap = assert(capture.start { keep = 10 })
  io.write(string.rep("x", 100))
  local text, lines, bytes = cap:stop(4096)
  t.eq(text, string.rep("x", 10))
  t.eq(lines, 1)
  t.eq(bytes, 100)
  cap = assert(capture.start())
  io.write(string.rep("y\n", 5000))
  text, lines, bytes = cap:stop()
  t.eq(#text, 4096)
  t.eq(lines, 5000)
  t.eq(bytes, 10000)
  cap = assert(capture.start())
  text, lines, bytes = cap:stop()
  t.eq(text, "")
  t.eq(lines, 0)
  t.eq(bytes, 0)
end)

t.test("one capture at a time; <close> and garbage collection restore fd 1", function()
  local before = fd1()
  do
    local cap <close> = assert(capture.start())
    t.raises(function() capture.start() end, "already running")
    io.write("dropped\n")
  end
  t.ok(not capture.active())
  t.eq(fd1(), before)
  capture.start() -- dropped on the floor: the collector stops it
  collectgarbage("collect")
  collectgarbage("collect")
  t.ok(not capture.active())
  t.eq(fd1(), before)
  t.raises(function() capture.start { keep = -1 } end, "keep")
end)

t.test("a child that keeps the pipe open does not hold stop up", function()
  local cap = assert(capture.start())
  os.execute("(sleep 1; echo late) 2>/dev/null &")
  io.write("now\n")
  local w0 = os.time()
  local text, lines = cap:stop()
  t.ok(os.time() - w0 <= 1, "stop returned at once")
  t.eq(text, "now\n")
  t.eq(lines, 1)
end)

t.done()
