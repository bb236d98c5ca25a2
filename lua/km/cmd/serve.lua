-- kmrun serve [--gpus I] [--idle S] [--timeout S] [--socket PATH] | --status | --stop
-- A resident GPU worker for `kmrun eval` (km.serve.resident): torch imported once, tasks set up once.
-- kmrun serve --listen HOST:PORT | unix:PATH --tasks DIR [...]: the judge as an HTTP/JSON
-- service for trainers (km.serve.server, docs/service.md).
local serve = require "km.serve.resident"
local A = require "km.args"

local SPEC = A.spec {
  name = "kmrun serve",
  synopsis = "[options]",
  about = [[
Keeps a GPU worker running for `kmrun eval`: it imports torch once and sets each task
up once (spec, reference, kept results, baselines), so a fresh `kmrun eval` pays for
its candidate only. The judge is the same as without it: the same worker a sweep uses,
the same checks and verdicts. `kmrun eval` uses a server on its GPU when the server
runs the same kmrun (program and Lua library, by content), the same caches and the
same environment for workers; otherwise it starts a worker of its own and says why.
Candidates are judged one at a time; others wait their turn. Only this user's
processes can connect. Runs in the foreground: start it with `kmrun serve &`.

With --listen it is the judge as a service (docs/service.md): batches of candidates in
over HTTP/JSON (POST /v1/evaluate, /v1/jobs), verdicts back in order or as they finish,
on every GPU named by --gpus (default: all); each verdict says its cause (candidate or
infra) and carries a reward and its parts. Without a GPU it judges compile-only and says
so in every verdict. TCP needs --token-file; unix:PATH makes a socket of mode 0600.]],
  options = {
    { "gpus", "I", "the GPU to serve (the first of a list)", type = "ints", aliases = { "gpu" }, default = { 0 } },
    { "idle", "S", "stop after S seconds without a request; 0: never", type = "nonneg", default = serve.IDLE },
    { "timeout", "S", "seconds before a hung candidate is stopped", type = "seconds", default = 120 },
    { "socket", "PATH", "the socket (default: KM_SERVE_SOCKET, else\n" ..
        "$XDG_RUNTIME_DIR/kmrun/serve-gpuN.sock or /tmp/kmrun-UID/serve-gpuN.sock)" },
    { "status", nil, "say whether a server answers, what it serves and whether this\n" ..
        "shell's kmrun eval would use it; exit 0 if one answers, else 1" },
    { "stop", nil, "ask the server to stop (after the job it is on)" },
    { "listen", "ADDR", "serve HTTP on HOST:PORT (port 0: any free one) or unix:PATH" },
    { "tasks", "DIR", "--listen: the tasks it judges (folders of tasks, task folders,\n" ..
        "KernelBench problem files or folders of them; repeatable)", type = "list" },
    { "token-file", "FILE", "--listen: the clients' tokens, one a line (\"SECRET\" or \"NAME SECRET\");\n" ..
        "the file must be mode 0600; required on TCP" },
    { "compile-only", nil, "--listen: judge compile-only even where a GPU is" },
    { "quota", "N", "--listen: evaluations one client may have outstanding (429 over it)", type = "positive",
      default = 4096 },
    { "max-request-mb", "MB", "--listen: the largest request body (413 over it)", type = "positive", default = 8 },
    { "port-file", "FILE", "--listen: write the port it listens on to FILE once it does" },
    { "request-timeout", "S", "--listen: seconds a client has to send one whole request (a client\n" ..
        "sending a byte a second is cut off)", type = "seconds", default = 30 },
    -- --listen: the PyTorch baselines every verdict is divided by (kmrun eval's options)
    table.unpack(require("km.task.baseline").OPTIONS),
  },
  footer = "exit status: 0 stopped (or --status/--stop found a server), 1 none found, 2 usage or\n" ..
    "start error (another server answers on the socket), 3 no GPU",
}

local a, code = A.parse(SPEC, arg)
if not a then return code end
if a.listen then
  local server = require "km.serve.server"
  local ok, why, rcode = server.run { listen = a.listen, tasks = a.tasks, token_file = a.token_file,
    gpus = a._given.gpus and a.gpus or nil, compile_only = a.compile_only, timeout = a.timeout, quota = a.quota,
    max_body = a.max_request_mb << 20, request_timeout = a.request_timeout, baseline_args = a,
    ready = function(info)
      if a.port_file then
        local f = assert(io.open(a.port_file .. ".tmp", "w"))
        f:write(tostring(info.port), "\n")
        f:close()
        os.rename(a.port_file .. ".tmp", a.port_file)
      end
    end }
  if ok then return 0 end
  io.stderr:write("kmrun serve: ", tostring(why), "\n")
  return 2
end
for _, o in ipairs { "tasks", "token_file", "compile_only", "port_file", "request_timeout", "baselines", "compile_mode" } do
  if a._given[o] then return A.fail(SPEC, "--" .. o:gsub("_", "-") .. ": only with --listen") end
end
local gpu = a.gpus[1]
local path = a.socket or serve.socket_path(gpu)
if a.socket then -- a folder of one's own choosing is not made
  local dir = a.socket:match("^(.*)/[^/]*$") or "."
  if dir ~= "" and not require("km.sys").readdir(dir) then
    return A.fail(SPEC, "--socket: no folder '" .. dir .. "' for " .. a.socket)
  end
end

if a.status or a.stop then
  local h, why, hcode = serve.hello(path)
  if not h then
    print(string.format("no kmrun serve on %s%s", path,
      (hcode == "NOT_FOUND" or hcode == "REFUSED") and "" or " (" .. tostring(why) .. ")"))
    return 1
  end
  if a.stop then
    local r = serve.stop(path)
    print(string.format("kmrun serve (pid %s) on %s: stopping after %s evaluation(s)", tostring(h.pid), path,
      tostring(r and r.evaluations or h.evaluations)))
    return 0
  end
  local diff = serve.differs(serve.identity(), h.identity)
  print(string.format("kmrun serve (pid %s) on %s: GPU %s (%s), %d evaluation(s) since %s; %s, %d waiting",
    tostring(h.pid), path, tostring(h.gpu), tostring(h.device), tonumber(h.evaluations) or 0, tostring(h.since),
    h.busy and "judging one now" or "idle", tonumber(h.queued) or 0))
  print(diff and ("kmrun eval here would not use it: it runs " .. diff) or "kmrun eval here uses it")
  return 0
end

local ok, why, rcode = serve.run { new_pool = require("km.serve.pool").pool, gpu = gpu, socket = path, idle = a.idle, timeout = a.timeout }
if ok then return 0 end
io.stderr:write("kmrun serve: ", tostring(why), "\n")
return rcode == "NO_GPU" and 3 or 2
