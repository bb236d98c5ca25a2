-- km.worker — a GPU worker: owns one CUDA context, judges candidates on request.
-- Started by km.eval as `kmrun <libdir>/km/worker.lua` with KM_DEVICE set; speaks JSON
-- frames over its stdin/stdout (km.proc). A verdict whose context was lost (a kernel
-- faulted) is sent, then the worker exits so the driver starts a fresh one.
local proc = require "km.proc"
local json = require "km.json"
local judge_mod = require "km.judge"
local verdict_mod = require "km.verdict"
local capture = require "km.capture"

local fmt = string.format
local PRINTF_TEXT = 4096 -- bytes of a candidate's printed output kept in its verdict

-- Text a candidate printed leaves the worker only through this: km.scrub replaces every
-- secret the process knows (the environment's key-like values included) by "[redacted]".
-- (pcall: a build without km.scrub passes the text as it is.)
local has_scrub, scrub = pcall(require, "km.scrub")
local function scrub_printed(text)
  if has_scrub and type(scrub) == "table" and scrub.text then return (scrub.text(text)) end
  return text
end

-- Printed bytes as text a verdict can carry: valid UTF-8 kept, else control bytes and
-- bytes past ASCII become '?' (a cut can split a character; %c can print anything).
local function printable(text)
  if utf8.len(text) then return (text:gsub("[\0-\8\11-\31\127]", "?")) end
  return (text:gsub("[^\n\t\32-\126]", "?"))
end

-- Adds what the candidate printed (device printf, print) to the verdict: exact counts, the
-- first PRINTF_TEXT bytes, and a sentence for the model when anything was printed.
local function note_printed(verdict, text, lines, bytes)
  verdict.printf = { lines = lines, bytes = bytes, text = scrub_printed(printable(text)), truncated = bytes > #text }
  if lines > 0 then
    verdict.feedback = (verdict.feedback or "") .. fmt("\nThe kernel printed %d line%s (%d bytes; the first %s in the verdict's printf.text). Remove printf from kernels you submit: it slows them and floods the log.",
      lines, lines == 1 and "" or "s", bytes, bytes > #text and fmt("%d bytes are", #text) or "are")
  end
end

-- Under compute-sanitizer (km.sanitize sets KM_SANITIZE to the tool): buffers get no guard
-- zones, since memcheck knows only allocation bounds and a guard zone would hide a read past
-- the end inside the allocation; kernels carry line info, so findings name kernel.cu lines.
if os.getenv("KM_SANITIZE") then
  local buffer, nvrtc = require "km.buffer", require "km.nvrtc"
  local new, compile = buffer.new, nvrtc.compile
  buffer.new = function(dtype, shape, o) return new(dtype, shape, o or { guard = 0 }) end
  nvrtc.compile = function(src, o)
    local o2 = {}
    for k, x in pairs(o or {}) do o2[k] = x end
    local options = {}
    for i, x in ipairs(o2.options or {}) do options[i] = x end
    options[#options + 1] = "-lineinfo"
    o2.options = options
    return compile(src, o2)
  end
end

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
    -- one-time set-up for this task (torch's import, PyTorch baselines measured): the pool
    -- times it apart from the candidate
    judge.on_hold = function(which) ch:send(json.encode { id = req.id, hold = which or false }) end
    local cap = capture.start() -- device printf goes to stdout: caught here, not on the terminal
    local ok, verdict = pcall(judge.eval, judge, req.task, req.candidate, req.opts)
    if not ok then verdict = { status = "error", feedback = "internal error in the worker: " .. tostring(verdict) } end
    -- whatever happened, a context that no longer answers means a fresh worker: a fault
    -- can surface late (in a later copy or fill) and poisons every later call
    verdict_mod.after_context_check(verdict, cuda.synchronize())
    if cap then note_printed(verdict, cap:stop(PRINTF_TEXT)) end -- after the sync: printf is flushed
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
