-- kmrun serve (km.serve.resident) on the CPU: km.proc's Unix sockets; a server whose pool is the real
-- km.serve.pool pool over a stand-in GPU worker (testing.standin_worker: it counts its requests
-- and echoes them as verdicts), and the real `kmrun eval` and `kmrun serve` commands against
-- it: a verdict relayed with its progress, one worker for every evaluation, a server that
-- runs another environment or code not used (said on stderr, judged here instead), one that
-- dies before its verdict, a stale socket, a second server refused, --status, --stop, idle.
-- The GPU side (a real worker and judge behind the socket) is tests/gpu/test_serve.lua.
local t = require "km.tap"
local proc = require "km.proc"
local serve = require "km.serve.resident"
local sys = require "km.sys"
local json = require "km.json"
local testing = require "km.testing"

local fmt = string.format
local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local SOCK = DIR .. "/s/serve.sock"
local NO_GPU = not require("km.cuda").available()

local function has(text, s) return text:find(s, 1, true) ~= nil end

t.test("proc.listen / connect / accept: frames both ways, timeouts, EOF, no listener", function()
  local path = DIR .. "/basic.sock"
  local l = assert(proc.listen(path))
  local _, _, code = proc.listen(path)
  t.eq(code, "EXISTS", "a second listener on the same path")
  local c = assert(proc.connect(path))
  local s = assert(l:accept(1000))
  assert(c:send("a\0b"))
  t.eq(s:recv(1000), "a\0b")
  assert(s:send(string.rep("x", 100000)))
  t.eq(#c:recv(1000), 100000)
  local m, _, rc = s:recv(50)
  t.eq(m, nil) t.eq(rc, "TIMEOUT")
  c:close()
  m, _, rc = s:recv(1000)
  t.eq(rc, "EOF", "the client closed")
  local a, _, ac = l:accept(20)
  t.eq(a, nil) t.eq(ac, "TIMEOUT")
  l:close()
  _, _, code = proc.connect(path)
  t.eq(code, "REFUSED", "a socket file nobody listens on")
  os.remove(path)
  _, _, code = proc.connect(path)
  t.eq(code, "NOT_FOUND")
  t.ok(sys.uid() >= 0 and sys.pid() > 1)
end)

-- Another user's process, where this one may start one (root, setpriv): the peer's uid is
-- checked at both ends even where the socket file's mode would let it connect.
local SETPRIV = sys.uid() == 0 and os.execute("command -v setpriv >/dev/null 2>&1")
  and os.execute("setpriv --reuid=65534 --regid=65534 --clear-groups " .. KMRUN .. " -e '' >/dev/null 2>&1")
if not SETPRIV then
  t.skip("another user's process: refused both ways", "needs root, setpriv, and a kmrun uid 65534 can run")
else
  t.test("another user's process: refused by a listener, and refused as a listener", function()
    local d = DIR .. "/shared"
    assert(sys.mkdir(d, 511)) -- 0777: the mode would let anyone in
    os.execute("chmod 777 '" .. d .. "'")
    local path = d .. "/s.sock"
    local l = assert(proc.listen(path))
    os.execute("chmod 666 '" .. path .. "'")
    local as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups " .. KMRUN .. " -e "
    local pid = assert(sys.spawn({ "sh", "-c", as_nobody .. fmt("%q", fmt(
      "local c = require('km.proc').connect(%q); if c then c:send('hi'); c:recv(2000) end", path)) }))
    local c, why, code = l:accept(5000)
    t.eq(c, nil, "a connection from uid 65534 is not handed out")
    t.eq(code, "EPERM", tostring(why))
    sys.wait(pid, true)
    l:close()
    os.remove(path)
    -- and a listener of uid 65534: this process does not talk to it
    local out = d .. "/nobody.out"
    local lp = assert(sys.spawn({ "sh", "-c", as_nobody .. fmt("%q", fmt(
      "local l = require('km.proc').listen(%q); os.execute('chmod 666 %s'); local f = io.open(%q, 'w'); f:write('up'); f:close(); l:accept(5000)",
      path, path, out)) }))
    for _ = 1, 100 do if testing.read(out) then break end sys.sleep(0.05) end
    local c2, why2, code2 = proc.connect(path)
    t.eq(c2, nil) t.eq(code2, "EPERM", tostring(why2))
    t.ok(has(why2 or "", "another user's"), tostring(why2))
    sys.kill(lp, "KILL") sys.wait(lp, true)
  end)
end

t.test("identity: the same in two processes of one environment; a changed KM_* variable differs", function()
  local code = "local i = require('km.serve.resident').identity(); print(require('km.json').encode(i))"
  local out1, err1, rc1 = testing.run(fmt("%s -e %q", KMRUN, code))
  local out2 = testing.run(fmt("%s -e %q", KMRUN, code))
  local out3 = testing.run(fmt("KM_SOMETHING=1 %s -e %q", KMRUN, code))
  t.eq(rc1, 0, err1)
  local i1, i2, i3 = json.decode(out1), json.decode(out2), json.decode(out3)
  t.eq(serve.differs(i1, i2), nil)
  t.ok(has(serve.differs(i1, i3) or "", "another environment"), tostring(serve.differs(i1, i3)))
  local i4 = json.decode(out1)
  i4.code = "0"
  t.ok(has(serve.differs(i1, i4) or "", "other code"))
  t.ok(has(serve.differs(i1, nil), "no identity"))
end)

t.test("the hint after a slow torch import in a worker of kmrun eval's own", function()
  t.ok(has(serve.hint(3.4) or "", "importing torch took 3.4 s"), tostring(serve.hint(3.4)))
  t.ok(has(serve.hint(3.4), "`kmrun serve &`"))
  t.eq(serve.hint(1.0), nil, "a quick import says nothing")
  t.eq(serve.hint(nil), nil, "no import")
  t.eq(serve.hint(3.4, "the kmrun serve on x runs other code"), nil, "a server there was not used: that is said instead")
end)

-- The server: the real km.serve.resident.run and km.serve.pool pool, its worker a stand-in
local STANDIN = testing.standin_worker(DIR .. "/standin.lua", [[
  N = (N or 0) + 1
  ch:send(json.encode { id = req.id, progress = { stage = "reference", state = "start" } })
  if req.candidate.name == "slow" then os.execute("sleep 3") end
  ch:send(json.encode { id = req.id, progress = { stage = "reference", state = "done", seconds = 0.1 } })
  ch:send(json.encode { id = req.id, verdict = { status = "correct", feedback = "stand-in verdict", task = req.task,
    candidate = req.candidate.name, seeds = req.opts.seeds, worker_requests = N } })
]])
local SERVER = DIR .. "/server.lua"
testing.write(SERVER, fmt([[
local ok, why, code = require("km.serve.resident").run { new_pool = require("km.serve.pool").pool, socket = arg[1], idle = tonumber(arg[2]), wrap = { %q, %q },
  worker_stderr = "null" }
if not ok then io.stderr:write(why, "\n") return code == "EXISTS" and 2 or 1 end
]], KMRUN, STANDIN))

local LOG = DIR .. "/server.log"
local function start_server(idle)
  local pid = assert(sys.spawn({ "sh", "-c", fmt("exec %s %s %s %s 2>>%s", KMRUN, SERVER, SOCK, idle or 60, LOG) }))
  for _ = 1, 200 do
    if serve.hello(SOCK) then return pid end
    if sys.wait(pid) ~= false then break end
    sys.sleep(0.05)
  end
  error("the server did not start: " .. (testing.read(LOG) or ""))
end

local TASK = ROOT .. "/tests/tasks/t_rowsum"
local function kmrun_eval(args, env)
  return testing.run(fmt("KM_SERVE_SOCKET=%s %s %s eval %s starter %s", SOCK, env or "", KMRUN, TASK, args or ""))
end

local pid = start_server()

t.test("kmrun eval: the server's verdict, its progress relayed; one worker for every evaluation", function()
  local out, err, rc = kmrun_eval("--json --seeds 2")
  t.eq(rc, 0, err)
  local v = json.decode(out)
  t.eq(v.status, "correct") t.eq(v.feedback, "stand-in verdict")
  t.eq(v.task, sys.realpath(TASK), "the task by its absolute path")
  t.eq(v.seeds, 2, "the command's options reach the worker")
  t.eq(v.server.pid, pid, "the verdict says which server judged it")
  out, err, rc = kmrun_eval("--json")
  v = json.decode(out)
  t.eq(v.worker_requests, 2, "the second evaluation went to the same worker")
  t.eq(v.server.evaluations, 2)
  -- progress events through the socket, in order
  local seen = {}
  local v2 = serve.eval(0, TASK, { name = "direct" }, {}, { socket = SOCK, on_progress = function(ev) seen[#seen + 1] = ev end })
  t.eq(v2.candidate, "direct")
  t.eq(#seen, 2) t.eq(seen[1].state, "start") t.eq(seen[2].seconds, 0.1)
  out, err, rc = kmrun_eval("")
  t.eq(rc, 0, err)
  t.ok(has(out, "correct  t_rowsum  "), out)
  t.ok(has(err, "judged by the kmrun serve on " .. SOCK), err)
end)

t.test("a task changed on disk since its worker set it up: a fresh worker judges it", function()
  local copy = testing.task_copy(TASK, DIR, "t_copy")
  local problem = testing.problem(DIR, "p_relu")
  local function served(task)
    local v, why = serve.eval(0, task, { name = "c" }, {}, { socket = SOCK })
    assert(v, why)
    return v
  end
  local v1 = served(copy)
  local v2 = served(copy)
  t.eq(v2.worker_requests, v1.worker_requests + 1, "unchanged: the same worker")
  local restarts = v2.server.task_restarts
  testing.write(copy .. "/task.lua", testing.read(copy .. "/task.lua") .. "\n-- edited\n")
  local v3 = served(copy)
  t.eq(v3.worker_requests, 1, "edited: a fresh worker")
  t.eq(v3.server.task_restarts, restarts + 1)
  local p1 = served(problem)
  testing.write(problem, testing.problem_text { sizes = "batch_size = 8\ndim = 8" })
  local p2 = served(problem)
  t.eq(p2.worker_requests, 1, "a problem file edited: a fresh worker")
  t.ok(p1.worker_requests > 1)
  local p3 = served(problem .. "#fp16")
  t.eq(p3.worker_requests, 2, "another precision of the same file is another task, not a change")
  t.ok(serve.task_fingerprint(copy) ~= serve.task_fingerprint(TASK))
end)

t.test("a server of another environment or code is not used: said on stderr, judged here", function()
  local out, err, rc = kmrun_eval("", "KM_SOMETHING=1")
  t.ok(has(err, "runs another environment"), err)
  t.ok(has(err, "judging in a worker of its own"), err)
  t.ok(not has(out, "stand-in verdict"), out)
  if NO_GPU then t.eq(rc, 3, "no GPU here: compiled only") end
  local id = serve.identity()
  id.code = "other"
  local v, why = serve.eval(0, TASK, { name = "x" }, {}, { socket = SOCK, identity = id })
  t.eq(v, nil) t.ok(has(why, "runs other code"), why)
  out, err = kmrun_eval("--no-server")
  t.ok(not has(err, "kmrun serve"), "--no-server: " .. err)
end)

t.test("kmrun serve --status; a second server on the socket is refused", function()
  local out, _, rc = testing.run(fmt("%s serve --status --socket %s", KMRUN, SOCK))
  t.eq(rc, 0)
  t.ok(has(out, "pid " .. pid) and has(out, "stand-in") and has(out, "kmrun eval here uses it"), out)
  out, _, rc = testing.run(fmt("KM_SOMETHING=1 %s serve --status --socket %s", KMRUN, SOCK))
  t.ok(has(out, "would not use it: it runs another environment"), out)
  local _, err, rc2 = testing.run(fmt("%s %s %s 5", KMRUN, SERVER, SOCK))
  t.eq(rc2, 2) t.ok(has(err, "already answers"), err)
  t.ok(serve.hello(SOCK), "the first server still answers")
end)

t.test("while a candidate is judged: hello answers at once, evaluations wait their turn; a stop turns the waiting away", function()
  local CLIENT = DIR .. "/client.lua"
  testing.write(CLIENT, fmt([[
local v, why = require("km.serve.resident").eval(0, %q, { name = arg[1] }, {}, { socket = %q })
local f = assert(io.open(arg[2], "w"))
f:write(require("km.json").encode { verdict = v, why = why })
f:close()
]], TASK, SOCK))
  local function client(name)
    return assert(sys.spawn({ KMRUN, CLIENT, name, DIR .. "/" .. name .. ".json" }))
  end
  local slow = client("slow")
  sys.sleep(0.5)
  local queued = client("queued")
  sys.sleep(0.3)
  local w0 = require("km.timing").wall()
  local h = assert(serve.hello(SOCK))
  t.ok(require("km.timing").wall() - w0 < 1, "answered while the worker is on a 3 s candidate")
  t.eq(h.busy, true) t.eq(h.queued, 1)
  local out = testing.run(fmt("%s serve --stop --socket %s", KMRUN, SOCK))
  t.ok(has(out, "stopping"), out)
  sys.wait(slow, true) sys.wait(queued, true)
  local r1 = json.decode(testing.read(DIR .. "/slow.json"))
  local r2 = json.decode(testing.read(DIR .. "/queued.json"))
  t.eq(r1.verdict.candidate, "slow", "the candidate under way got its verdict")
  t.eq(r2.verdict, nil) t.ok(has(r2.why or "", "is stopping"), tostring(r2.why))
  t.ok(sys.wait(pid, true), "the server stopped")
  pid = start_server()
end)

t.test("a server that dies before its verdict: the client says so; --stop; a stale socket", function()
  -- the server is killed while its worker is on a slow candidate
  os.execute(fmt("(sleep 1; kill -9 %d) &", pid))
  local v, why = serve.eval(0, TASK, { name = "slow" }, {}, { socket = SOCK })
  t.eq(v, nil) t.ok(has(why or "", "stopped before its verdict"), tostring(why))
  sys.wait(pid, true)
  -- its socket file is left: nobody answers there, a client judges here without a word
  t.eq(select(3, proc.connect(SOCK)), "REFUSED", "the dead server's socket file is there")
  local v2, why2 = serve.eval(0, TASK, { name = "x" }, {}, { socket = SOCK })
  t.eq(v2, nil) t.eq(why2, nil)
  local out, err = kmrun_eval("")
  t.ok(not has(err, "kmrun serve"), err)
  -- a new server takes the stale path over
  pid = start_server()
  out, _, rc = testing.run(fmt("%s serve --stop --socket %s", KMRUN, SOCK))
  t.eq(rc, 0) t.ok(has(out, "stopping"), out)
  t.ok(sys.wait(pid, true), "the server exited")
  t.eq(select(3, proc.connect(SOCK)), "NOT_FOUND", "and removed its socket")
  out, _, rc = testing.run(fmt("%s serve --status --socket %s", KMRUN, SOCK))
  t.eq(rc, 1) t.ok(has(out, "no kmrun serve"), out)
end)

t.test("an idle server stops by itself", function()
  local p = start_server(1)
  local w0 = require("km.timing").wall()
  t.ok(sys.wait(p, true))
  t.ok(require("km.timing").wall() - w0 < 5)
  t.ok(has(testing.read(LOG) or "", "idle for 1 s: stopping"), testing.read(LOG))
end)

if NO_GPU then
  t.test("kmrun serve without a GPU: exit 3, why", function()
    local _, err, rc = testing.run(fmt("%s serve --socket %s/nogpu.sock --idle 1", KMRUN, DIR))
    t.eq(rc, 3) t.ok(has(err, "kmrun serve:"), err)
  end)
end

t.test("serve.start: a server apart from this process (a session of its own), waited for until it answers", function()
  local sock = DIR .. "/started/serve.sock"
  local pid, why = serve.start(0, { socket = sock, argv = { KMRUN, SERVER, sock, "60" } })
  t.ok(pid, why)
  t.ok(serve.hello(sock), "it answers")
  local f = assert(io.open("/proc/" .. pid .. "/stat", "rb"))
  local stat = f:read("a")
  f:close()
  local session = tonumber(stat:match("^%d+ %b() %a %d+ %d+ (%d+)"))
  t.eq(session, pid, "it leads a session of its own (a Ctrl-C at this terminal does not reach it)")
  t.ok(serve.stop(sock))
  sys.wait(pid, true)
  -- one that ends before it answers: why, from its log
  local bad = DIR .. "/bad/serve.sock"
  local p2, why2 = serve.start(0, { socket = bad, argv = { KMRUN, "-e", "io.stderr:write('no GPU here\\n') os.exit(3)" } })
  t.eq(p2, nil)
  t.ok(has(tostring(why2), "no GPU here"), why2)
  t.ok(has(tostring(why2), bad .. ".log"), why2)
end)

t.test("kmrun eval --serve where no server can start (no GPU here): says why and goes on as without it", function()
  if not NO_GPU then t.note("a GPU here: tests/gpu/test_serve.lua covers --serve") return end
  local sock = DIR .. "/noserve/serve.sock"
  local out, err, rc = testing.run(fmt("KM_SERVE_SOCKET=%s %s eval %s starter --serve", sock, KMRUN, TASK))
  t.eq(rc, 3, out .. err)
  t.ok(has(err, "--serve: the kmrun serve it started ended"), err)
  t.ok(has(err, "no GPU"), err)
  local _, err2, rc2 = testing.run(fmt("%s eval %s starter --serve --no-server", KMRUN, TASK))
  t.eq(rc2, 2, err2)
  t.ok(has(err2, "--serve: not with --no-server"), err2)
end)

os.execute("rm -rf " .. DIR)
t.done()
