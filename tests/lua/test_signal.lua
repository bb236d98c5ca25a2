-- km.signal (runtime/bind/km_signal.c): the first SIGINT sets the flag a run polls; the same
-- signal again within km.signal.REPEAT_MS is the same Ctrl-C (`timeout -s INT` signals the
-- process and its process group, so one request arrives twice within microseconds); only a
-- later one ends the process at once. Real processes and real signals.
local t = require "km.tap"
local testing = require "km.testing"
local sig = require "km.signal"

local _, KMRUN = testing.paths()
local dir = testing.tmpdir()

-- A script that catches, says it is ready, waits for the flag, then takes `after` seconds to
-- stop gracefully and prints what it caught.
local function script(after)
  local path = dir .. "/wait_" .. tostring(after):gsub("%.", "_") .. ".lua"
  testing.write(path, string.format([[
local sig, sys = require "km.signal", require "km.sys"
sig.catch()
local f = assert(io.open(arg[1], "w")) f:write("ready") f:close()
for _ = 1, 1000 do if sig.caught() then break end sys.sleep(0.01) end
sys.sleep(%g)
print("graceful", sig.caught())
sig.release()
]], after))
  return path
end

-- Starts the script in the background, waits until it is ready, runs `signals` (a shell
-- command line with $pid), and answers the script's output and exit status.
local function run(path, signals)
  local ready = dir .. "/ready"
  os.remove(ready)
  return testing.run(string.format([[
%s %s %s & pid=$!
i=0; while [ ! -s %s ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
%s
wait $pid; echo "rc=$?"]], KMRUN, path, ready, ready, signals))
end

t.test("REPEAT_MS is half a second", function()
  t.eq(sig.REPEAT_MS, 500)
end)

-- The second signal comes 50 ms after the first, once the first has been handled (sent back
-- to back, the kernel would merge the two while the first is pending).
t.test("two SIGINTs 50 ms apart are one Ctrl-C: the run stops gracefully", function()
  local out, err = run(script(0.3), "kill -INT $pid; sleep 0.05; kill -INT $pid")
  t.ok(out:find("graceful\tSIGINT", 1, true), out .. err)
  t.ok(out:find("rc=0", 1, true), out .. err)
end)

t.test("a SIGINT and a SIGTERM 50 ms apart are one request too", function()
  local out, err = run(script(0.3), "kill -INT $pid; sleep 0.05; kill -TERM $pid")
  t.ok(out:find("graceful\tSIGINT", 1, true), out .. err)
  t.ok(out:find("rc=0", 1, true), out .. err)
end)

t.test("a second SIGINT after REPEAT_MS ends the process at once (status 130)", function()
  local out, err = run(script(5), "kill -INT $pid; sleep 0.7; kill -INT $pid")
  t.ok(not out:find("graceful", 1, true), out)
  t.ok(out:find("rc=130", 1, true), out .. err)
end)

t.test("timeout -s INT (the process and its group signalled) stops a run gracefully", function()
  if not os.execute("command -v timeout >/dev/null 2>&1") then return t.skip("no timeout(1)") end
  local path = script(0.3)
  local out, err, rc = testing.run(string.format("timeout -s INT 1 %s %s %s/ready_t", KMRUN, path, dir))
  t.ok(out:find("graceful\tSIGINT", 1, true), out .. err)
  t.eq(rc, 124, "timeout's status when it sent the signal (the program exited 0): " .. out .. err)
end)

os.execute("rm -rf " .. dir)
t.done()
