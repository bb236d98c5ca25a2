-- kmrun serve [--gpus I] [--idle S] [--timeout S] [--socket PATH] | --status | --stop
-- A resident GPU worker for `kmrun eval` (km.run.serve): torch imported once, tasks set up once.
local serve = require "km.run.serve"
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
processes can connect. Runs in the foreground: start it with `kmrun serve &`.]],
  options = {
    { "gpus", "I", "the GPU to serve (the first of a list)", type = "ints", aliases = { "gpu" }, default = { 0 } },
    { "idle", "S", "stop after S seconds without a request; 0: never", type = "nonneg", default = serve.IDLE },
    { "timeout", "S", "seconds before a hung candidate is stopped", type = "seconds", default = 120 },
    { "socket", "PATH", "the socket (default: KM_SERVE_SOCKET, else\n" ..
        "$XDG_RUNTIME_DIR/kmrun/serve-gpuN.sock or /tmp/kmrun-UID/serve-gpuN.sock)" },
    { "status", nil, "say whether a server answers, what it serves and whether this\n" ..
        "shell's kmrun eval would use it; exit 0 if one answers, else 1" },
    { "stop", nil, "ask the server to stop (after the job it is on)" },
  },
  footer = "exit status: 0 stopped (or --status/--stop found a server), 1 none found, 2 usage or\n" ..
    "start error (another server answers on the socket), 3 no GPU",
}

local a, code = A.parse(SPEC, arg)
if not a then return code end
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

local ok, why, rcode = serve.run { gpu = gpu, socket = path, idle = a.idle, timeout = a.timeout }
if ok then return 0 end
io.stderr:write("kmrun serve: ", tostring(why), "\n")
return rcode == "NO_GPU" and 3 or 2
