-- km.worker — a GPU worker: owns one CUDA context, judges candidates on request.
-- Started by km.eval as `kmrun <libdir>/km/worker.lua` with KM_DEVICE set; speaks JSON
-- frames over its stdin/stdout (km.proc). A verdict whose context was lost (a kernel
-- faulted) is sent, then the worker exits so the driver starts a fresh one.
local proc = require "km.proc"
local json = require "km.json"
local judge_mod = require "km.judge"

local ch = proc.stdio_channel()
require("km.sandbox").harden_strings() -- launch code runs here
local judge, why = judge_mod.new()
if not judge then
  ch:send(json.encode { ok = false, why = why })
  return 3
end
local cuda = require "km.cuda"
ch:send(json.encode { ok = true, device = judge.device, device_count = cuda.device_count() })

while true do
  local msg = ch:recv()
  if not msg then break end
  local req, err = json.decode(msg)
  if not req then
    ch:send(json.encode { error = "bad request: " .. tostring(err) })
  elseif req.op == "eval" then
    local ok, verdict = pcall(judge.eval, judge, req.task, req.candidate, req.opts)
    if not ok then verdict = { status = "error", feedback = "internal error in the worker: " .. tostring(verdict) } end
    -- whatever happened, a context that no longer answers means a fresh worker: a fault
    -- can surface late (in a later copy or fill) and poisons every later call
    local alive, msg, code = cuda.synchronize()
    if not alive then
      verdict.context_lost = true
      if verdict.status == "error" or verdict.status == "correct" then
        verdict.status = "crashed"
        verdict.feedback = "The GPU context failed after the candidate ran: " .. tostring(msg)
      end
      verdict.context_error = code
    end
    ch:send(json.encode({ id = req.id, verdict = verdict }, { nan = "null" }))
    if verdict.context_lost then return 4 end
  elseif req.op == "ping" then
    ch:send(json.encode { id = req.id, pong = true })
  elseif req.op == "quit" then
    break
  else
    ch:send(json.encode { id = req.id, error = "unknown op " .. tostring(req.op) })
  end
end
return 0
