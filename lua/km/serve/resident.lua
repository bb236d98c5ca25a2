-- km.serve.resident — a resident GPU worker for `kmrun eval`. `kmrun serve` keeps a km.serve.pool pool on
-- one GPU: its worker imports torch once, sets each task up once (spec, reference, kept
-- reference results, baselines read) and judges the candidates that `kmrun eval` processes
-- send it over a Unix socket, one at a time. A fresh `kmrun eval` then pays for the
-- candidate, not for importing torch (seconds on every call).
--
--   local serve = require "km.serve.resident"
--   serve.run { new_pool = require("km.serve.pool").pool, gpu = 0, idle = 1800 } -- until stopped or idle
--   local v, why = serve.eval(0, task, cand, opts, { on_progress = f, tick = g }) -- nil, nil: none there
--
-- Nothing of the judge changes: the worker, its checks and its verdicts are the pool's, as
-- in a sweep, where one worker judges every candidate of its tasks. A server is used only
-- where it would judge as a fresh worker of this process would: the same kmrun (program and
-- Lua library, by content), the same caches, the same environment for workers
-- (M.identity); else `kmrun eval` starts its own worker and says why. Both ends of the
-- socket must be this user's processes (km.proc checks the peer's uid both ways).
--
-- Frames (JSON over km.proc channels): in { op = "hello" } | { op = "stop" } |
-- { op = "eval", identity, task, fingerprint, candidate, opts }; out { ok, ... } for hello and stop,
-- { ok = false, why } for an eval this server cannot judge, else any number of
-- { progress = ev } then { verdict }. The verdict carries `server = { pid, evaluations,
-- task_restarts }`. An eval's `fingerprint` (M.task_fingerprint) tells a task changed on disk.
local proc = require "km.proc"
local json = require "km.json"
local sys = require "km.sys"
local hash = require "km.hash"
local wall = require("km.timing").wall
local read_file = require("km.task").read_file

local fmt = string.format
local concat, sort, ipairs, pairs, type, tostring = table.concat, table.sort, ipairs, pairs, type, tostring

local M = {}
M.PROTOCOL = 1
M.IDLE = 1800 -- seconds without a request before a server stops (--idle)

-- The socket of GPU `gpu`'s server: KM_SERVE_SOCKET, else serve-gpuN.sock in
-- $XDG_RUNTIME_DIR/kmrun or /tmp/kmrun-UID (made 0700 when missing).
function M.socket_path(gpu)
  local p = os.getenv("KM_SERVE_SOCKET")
  if p and p ~= "" then return p end
  local rt = os.getenv("XDG_RUNTIME_DIR")
  local dir = (rt and rt ~= "") and (rt .. "/kmrun") or ("/tmp/kmrun-" .. sys.uid())
  return fmt("%s/serve-gpu%d.sock", dir, gpu or 0)
end

local function read(path) return read_file(path) or "" end

-- Every file under `dir` whose name keep(name) accepts (all without keep), in sorted
-- order, as "path\0bytes" entries appended to `out`.
local function contents(dir, out, keep)
  for _, name in ipairs(sys.readdir(dir) or {}) do
    local p = dir .. "/" .. name
    if sys.readdir(p) then contents(p, out, keep)
    elseif not keep or keep(name) then out[#out + 1] = p .. "\0" .. read(p) end
  end
  return out
end

local function library_file(name) return name:match("%.lua$") or name:match("%.py$") end

-- A task's content as the worker would load it: a problem file's text (the key's path, its
-- precision after '#'), or every file of a task folder, by path and bytes. A worker keeps a
-- task's state (the model, the reference, its kept results) by name for its life, so a server
-- whose task changed on disk starts a fresh worker (M.run).
function M.task_fingerprint(task)
  if type(task) ~= "string" then return nil end
  local kbtask = require "km.task.kbtask"
  if kbtask.is_problem(task) then return hash.sha256(task, "\0", read((kbtask.split_key(task)))) end
  return hash.sha256(task, "\0", concat(contents(task, {}), "\0"))
end

-- The environment a worker inherits that can change a verdict (km.proc's clean_env list,
-- less what only names this server's socket).
local function worker_env()
  local kept = {}
  for entry in read("/proc/self/environ"):gmatch("[^%z]+") do
    local name = entry:match("^([^=]+)=")
    if name and name ~= "KM_SERVE_SOCKET" and (name:match("^KM_") or name:match("^CUDA_") or name:match("^NVIDIA_")
        or name == "PATH" or name == "LD_LIBRARY_PATH" or name == "HOME" or name == "TMPDIR") then
      kept[#kept + 1] = entry
    end
  end
  sort(kept)
  return concat(kept, "\0")
end

-- What must match between a server and a client for the server's verdict to be the one a
-- fresh worker of the client's would give: -> { field = text }.
function M.identity()
  local parts = contents(package.km_libdir .. "/km", {}, library_file) -- what a worker would run
  return {
    protocol = tostring(M.PROTOCOL),
    program = (sys.realpath(package.km_exe) or package.km_exe),
    code = hash.sha256(read(package.km_exe), "\0", concat(parts, "\0")),
    nvrtc_cache = tostring(require("km.nvrtc").cache_dir()),
    baselines = tostring(require("km.task.baseline").dir()),
    specs = tostring(require("km.task.kbtask").spec_dir()),
    environment = hash.sha256(worker_env()),
  }
end

local FIELD_WORDS = { protocol = "its protocol", program = "another kmrun program", code = "other code (kmrun or its Lua library changed since it started)",
  nvrtc_cache = "another NVRTC cache", baselines = "another baselines folder", specs = "another spec cache",
  environment = "another environment (KM_*, CUDA_*, PATH, ...)" }

-- Why a server of identity `theirs` cannot judge for `ours`, or nil.
function M.differs(ours, theirs)
  if type(theirs) ~= "table" then return "it sent no identity" end
  local keys = {}
  for k in pairs(ours) do keys[#keys + 1] = k end
  sort(keys)
  local why = {}
  for _, k in ipairs(keys) do
    if theirs[k] ~= ours[k] then why[#why + 1] = FIELD_WORDS[k] or k end
  end
  return #why > 0 and concat(why, "; ") or nil
end

local function send(ch, t) return ch:send(json.encode(t, { nan = "null" })) end

local function ask(path, req, ms)
  local ch, why, code = proc.connect(path)
  if not ch then return nil, why, code end
  send(ch, req)
  local msg, rwhy, rcode = ch:recv(ms or 5000)
  ch:close()
  if not msg then return nil, "the server did not answer: " .. tostring(rwhy), rcode end
  return json.decode(msg) or {}
end

-- { ok, pid, gpu, device, evaluations, since, identity } of the server at `path`, or nil, why, CODE
-- (NOT_FOUND / REFUSED: none there).
function M.hello(path) return ask(path, { op = "hello" }) end

-- Asks the server at `path` to stop once its job (if any) is done.
function M.stop(path) return ask(path, { op = "stop" }, 600000) end

-- A candidate judged by GPU `gpu`'s server. -> verdict | nil, why. why is nil where there
-- is no server (not an error: judge here); otherwise it says why this one was not used or
-- failed before its verdict. o.on_progress(ev) gets its progress events, o.tick() runs
-- about every 200 ms while waiting; o.identity is this process's (M.identity()).
function M.eval(gpu, task, cand, opts, o)
  o = o or {}
  local path = o.socket or M.socket_path(gpu)
  local ch, why, code = proc.connect(path)
  if not ch then
    if code == "NOT_FOUND" or code == "REFUSED" then return nil end
    return nil, why
  end
  local ok, serr = send(ch, { op = "eval", identity = o.identity or M.identity(), task = task,
    fingerprint = M.task_fingerprint(task), candidate = cand, opts = opts })
  local who = "the kmrun serve on " .. path
  if not ok then ch:close() return nil, who .. " took no request: " .. tostring(serr) end
  while true do
    local msg, _, rcode = ch:recv(200)
    if msg then
      local r = json.decode(msg)
      if type(r) ~= "table" then ch:close() return nil, who .. " sent a bad frame" end
      if r.verdict then ch:close() return r.verdict end
      if r.ok == false then ch:close() return nil, who .. " " .. tostring(r.why) end
      if type(r.progress) == "table" and o.on_progress then o.on_progress(r.progress) end
    elseif rcode == "TIMEOUT" then
      if o.tick then o.tick() end
    else
      ch:close()
      return nil, who .. " stopped before its verdict"
    end
  end
end

-- The socket's folder, made this user's alone (0700) where it is missing. -> true | nil, why
local function socket_dir(path)
  local dir = path:match("^(.*)/[^/]+$")
  if not dir or sys.readdir(dir) then return true end
  return sys.mkdir(dir, 448)
end

-- Starts a kmrun serve on GPU gpu, apart from this process (a session of its own: a Ctrl-C
-- here does not reach it; it stops itself after its idle time), and waits until it answers
-- (kmrun eval --serve). o: socket (default M.socket_path(gpu)), idle (seconds), wait_s (how
-- long to wait for it, default 120), argv (the command to start instead of `kmrun serve ...`).
-- Its log goes to the socket's path .. ".log". -> pid | nil, why
function M.start(gpu, o)
  o = o or {}
  local path = o.socket or M.socket_path(gpu)
  local okd, derr = socket_dir(path)
  if not okd then return nil, derr end
  local argv = o.argv or { package.km_exe, "serve", "--gpu", tostring(gpu), "--socket", path,
    "--idle", tostring(o.idle or M.IDLE) }
  local log = path .. ".log"
  local pid, err = sys.spawn(argv, { stdout = "null", stderr_file = log, session = true })
  if not pid then return nil, tostring(err) end
  local t0 = wall()
  while wall() - t0 < (o.wait_s or 120) do
    if M.hello(path) then return pid end
    if sys.wait(pid) ~= false then -- it ended: its log says why
      local text = read(log)
      local last = text:match("([^\n]+)\n*$") or "no output"
      return nil, "the kmrun serve it started ended: " .. last .. " (" .. log .. ")"
    end
    sys.sleep(0.05)
  end
  sys.kill(pid, "TERM")
  return nil, fmt("the kmrun serve it started did not answer within %d s (%s)", o.wait_s or 120, log)
end

M.HINT_SECONDS = 2 -- torch's import took this long or more in a worker of kmrun eval's own: say kmrun serve exists

-- What `kmrun eval` says after judging in a worker of its own whose torch import took
-- `torch_s` seconds (a stage event's), or nil: where no server could have been used
-- (`served_why`, why one was not: its words are said already) or the import was quick.
function M.hint(torch_s, served_why)
  if served_why or type(torch_s) ~= "number" or torch_s < M.HINT_SECONDS then return nil end
  return fmt("kmrun eval: importing torch took %.1f s of this evaluation; `kmrun serve &` keeps a GPU worker with "
    .. "torch imported, and later kmrun evals use it; `kmrun eval --serve` starts one where none runs (docs/eval.md, "
    .. "\"A resident worker\")", torch_s)
end

-- The server's state sv: gpu, path, idle, say, identity, pool, listener, dev (the pool's
-- device), since, served, last (wall time of the last request), stop; current (the channel
-- of the job under way: its progress goes there); queue ({ c, req }: evaluations waiting
-- their turn, first come first judged); seen (task -> its fingerprint when the worker set it
-- up) and restarts (fresh workers for changes).

-- A new connection's request: what needs no GPU is answered at once, even while a
-- candidate is being judged (hello, stop); an evaluation joins the queue.
local function take(sv, c)
  local msg = c:recv(5000)
  local req = msg and json.decode(msg)
  if type(req) == "table" and req.op == "eval" then sv.queue[#sv.queue + 1] = { c = c, req = req } return end
  if type(req) ~= "table" then
    send(c, { ok = false, why = "sent no request" })
  elseif req.op == "hello" then
    send(c, { ok = true, pid = sys.pid(), gpu = sv.gpu, device = sv.dev.name, evaluations = sv.served, since = sv.since,
      busy = sv.current ~= nil, queued = #sv.queue, identity = sv.identity })
  elseif req.op == "stop" then
    send(c, { ok = true, evaluations = sv.served })
    sv.stop = true
  else
    send(c, { ok = false, why = "does not know op " .. tostring(req.op) })
  end
  c:close()
end

-- Judges one queued evaluation and sends its verdict on c.
local function judge(sv, c, req)
  local diff = M.differs(sv.identity, req.identity)
  if diff then return send(c, { ok = false, why = "runs " .. diff }) end
  -- a task changed on disk since its worker set it up: a fresh worker (torch imported again)
  local was = sv.seen[req.task]
  if was ~= nil and was ~= req.fingerprint then
    sv.say(fmt("kmrun serve: %s changed on disk: starting a fresh worker", tostring(req.task)))
    sv.pool:restart()
    sv.seen = {}
    sv.restarts = sv.restarts + 1
  end
  sv.seen[req.task] = req.fingerprint
  sv.current = c
  local w0 = wall()
  local job = sv.pool:submit(req.task, req.candidate, req.opts or {})
  while not job.verdict do -- a signal or a stop now waits for this verdict
    sv.pool:poll(200)
    local nc = sv.listener:accept(0)
    if nc then take(sv, nc) end
  end
  sv.current = nil
  sv.served = sv.served + 1
  local v = job.verdict
  if type(v) == "table" then v.server = { pid = sys.pid(), evaluations = sv.served, task_restarts = sv.restarts } end
  sv.say(fmt("kmrun serve: %s %s: %s (%.2f s)", tostring(req.task), tostring(type(req.candidate) == "table" and req.candidate.name or ""),
    tostring(type(v) == "table" and v.status), wall() - w0))
  return send(c, { verdict = v })
end

-- Answers connections and judges the queue until a stop request, a signal or idleness.
local function serve_loop(sv, sig)
  while not sv.stop and not sig.caught() do
    if #sv.queue > 0 then
      local item = table.remove(sv.queue, 1)
      judge(sv, item.c, item.req)
      item.c:close()
      sv.last = wall()
    else
      local c = sv.listener:accept(500)
      if c then
        take(sv, c)
        sv.last = wall()
      elseif sv.idle > 0 and wall() - sv.last > sv.idle then
        sv.say(fmt("kmrun serve: idle for %d s: stopping", sv.idle))
        break
      end
    end
  end
end

-- Turns away the evaluations still waiting (their clients judge in workers of their own) and
-- releases the socket, the pool and the signals.
local function shut_down(sv, sig)
  for _, item in ipairs(sv.queue) do
    send(item.c, { ok = false, why = "is stopping" })
    item.c:close()
  end
  sv.listener:close()
  os.remove(sv.path)
  sv.pool:close()
  sig.release()
  sv.say(fmt("kmrun serve: stopped after %d evaluation%s", sv.served, sv.served == 1 and "" or "s"))
end

-- The server: a km.serve.pool pool on GPU o.gpu, its worker importing torch as it starts. o:
-- new_pool (km.serve.pool.pool: passed in, since the pool asks servers of this module),
-- gpu, socket (path), idle (seconds, 0: never), timeout (a candidate's seconds), say(line)
-- for its log (default stderr), wrap and worker_stderr (km.serve.pool.pool's). Returns true when
-- stopped (a signal, a stop request, idle), or nil, why, CODE (EXISTS: a server answers
-- there; NO_GPU).
function M.run(o)
  local gpu = o.gpu or 0
  local path = o.socket or M.socket_path(gpu)
  local idle = o.idle or M.IDLE
  local say = o.say or function(line) io.stderr:write(line, "\n") end
  local ch = proc.connect(path)
  if ch then ch:close() return nil, "a kmrun serve already answers on " .. path, "EXISTS" end
  local okd, derr = socket_dir(path)
  if not okd then return nil, derr, "IO" end
  os.remove(path) -- a socket nobody answers on: a server that died
  local sv = { gpu = gpu, path = path, idle = idle, say = say, identity = M.identity(),
    queue = {}, seen = {}, restarts = 0 }
  local pool, perr, pcode = o.new_pool { gpus = { gpu }, timeout = o.timeout or 120, torch_ahead = true,
    wrap = o.wrap, worker_stderr = o.worker_stderr,
    on_progress = function(ev) if sv.current then send(sv.current, { progress = ev }) end end }
  if not pool then return nil, perr, pcode or "NO_GPU" end
  local listener, lwhy, lcode = proc.listen(path)
  if not listener then pool:close() return nil, lwhy, lcode end
  sv.pool, sv.listener = pool, listener
  local sig = require "km.signal"
  sig.catch()
  sv.served, sv.since, sv.last, sv.stop = 0, os.date("!%Y-%m-%dT%H:%M:%SZ"), wall(), false
  sv.dev = pool.device or {}
  say(fmt("kmrun serve: GPU %d (%s), listening on %s; stops after %s idle, on `kmrun serve --stop` or a signal",
    gpu, tostring(sv.dev.name or "?"), path, idle > 0 and fmt("%d s", idle) or "never"))
  serve_loop(sv, sig)
  shut_down(sv, sig)
  return true
end

return M
