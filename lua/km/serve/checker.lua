-- km.serve.checker — a compile-only worker for a service on a host without a GPU: the
-- verdict `kmrun eval` gives there (km.serve.compile.compile_check: NVRTC for sm_90, launch.lua
-- loaded in the sandbox, the kernels it calls looked up in the source), in a process of its
-- own so that NVRTC runs on every CPU and nothing a candidate does reaches the server.
-- Started by km.serve.backend as `kmrun <libdir>/km/serve/checker.lua`; JSON frames over
-- its stdin/stdout (km.proc): { id, candidate, arch } in, { id, verdict } out.
local proc = require "km.proc"
local json = require "km.json"
local compile_check = require("km.serve.compile").compile_check

require("km.sandbox").harden_strings() -- launch code is loaded here
local ch = proc.stdio_channel()
while true do
  local msg = ch:recv()
  if not msg then break end
  local req = json.decode(msg)
  if type(req) == "table" and type(req.candidate) == "table" then
    local ok, v = pcall(compile_check, req.candidate, req.arch or "sm_90")
    if not ok then v = { status = "error", feedback = "internal error in the compile-only worker: " .. tostring(v) } end
    ch:send(json.encode({ id = req.id, verdict = v }, { nan = "null" }))
  end
end
return 0
