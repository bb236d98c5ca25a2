-- km.serve.compiler — a compile process: NVRTC requests in, cache entries out. km.serve.pool starts a
-- few of these so candidates waiting for a busy GPU are compiled ahead, in parallel, into
-- the disk cache the GPU workers read (NVRTC does not scale across threads of one process:
-- bench/RESULTS.md). Started as `kmrun <libdir>/km/serve/compiler.lua`, frames over stdio.
local proc = require "km.proc"
local json = require "km.json"
local nvrtc = require "km.nvrtc"

local ch = proc.stdio_channel()
while true do
  local msg = ch:recv()
  if not msg then break end
  local req = json.decode(msg) or {}
  local ok, prog, log = pcall(nvrtc.compile, req.source or "", req.opts)
  ch:send(json.encode { id = req.id, ok = ok and prog ~= nil, cached = ok and prog and prog.cached or false,
    ms = ok and prog and prog.ms or nil, error = not ok and tostring(prog) or (prog == nil and log or nil) })
end
return 0
