-- km.serve.worker — a GPU worker: owns one CUDA context, judges candidates on request.
-- Started by km.serve.pool as `kmrun <libdir>/km/serve/worker.lua` with KM_DEVICE set; speaks JSON
-- frames over its stdin/stdout (km.proc). A verdict whose context was lost (a kernel
-- faulted) is sent, then the worker exits so the driver starts a fresh one.
--
-- Frames: { op = "eval", id, task, candidate, opts } in; out, for that id, any number of
-- { id, hold = what | false } (one-time set-up begins/ends: the pool times it by its own
-- limit) and { id, progress = ev } (km.progress stage events: what the set-up is doing,
-- for a person waiting), then { id, verdict }.
local proc = require "km.proc"
local json = require "km.json"
local judge_mod = require "km.judge"
local verdict_mod = require "km.verdict"
local capture = require "km.capture"
local progress = require "km.progress"
local wall = require("km.timing").wall

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

-- Under compute-sanitizer (km.serve.sanitize sets KM_SANITIZE to the tool): buffers get no guard
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

-- The judge's holds as stages told to the driver: "torch" while it loads a PyTorch
-- reference on the GPU, "eager" / "compile" while it measures a baseline not kept on disk.
local HOLD_STAGE = { torch = "reference", eager = "eager", compile = "torch.compile" }

-- judge.on_hold for one job: each hold sent on (send(which)); the stage it names begins, and
-- the one before ends. -> on_hold, close (ends a stage left open)
local function holds(send)
  local done
  local function close()
    if done then done() done = nil end
  end
  return function(which)
    send(which)
    close()
    local stage = which and HOLD_STAGE[which]
    if stage then done = progress.start(stage) end
  end, close
end

-- A problem file's first job here: torch's import and the problem's spec (read from the
-- spec cache, or built and kept there), before the judge, so that each is told as a stage
-- of its own and both are held (set-up, not the candidate's time). kmrun eval leaves a spec
-- that is not cached yet to this worker, which imports torch anyway: one import per
-- kmrun eval. -> the task table (the judge then loads nothing), key as it is (a task
-- folder, or one set up already), or nil, why
local function set_up(judge, key, hold)
  if type(key) ~= "string" or judge:has_task(key) or not require("km.task.kbtask").is_problem(key) then return key end
  hold("task")
  local ok, t, err = pcall(function()
    require("km.task.kernelbench").available() -- torch first: a stage of its own (km.progress)
    return require("km.task").load(key)
  end)
  hold(false)
  if not ok then return nil, tostring(t) end
  return t, err
end

-- The worker's end (told to quit, its parent gone, or its context lost): stdio flushed and
-- the process gone at once (km.proc.quick_exit). A normal exit runs torch's and the CUDA
-- context's teardown first, which the driver does at process exit anyway, while `kmrun eval`
-- waits for it (~0.4 s of a fresh evaluation, bench/RESULTS.md, "quick-exit"). Under a tool (a
-- pool's `wrap`: KM_WORKER_EXIT=normal; compute-sanitizer: KM_SANITIZE) the process exits as
-- usual: such a tool reports at that exit.
local function finish(code)
  if os.getenv("KM_WORKER_EXIT") ~= "normal" and not os.getenv("KM_SANITIZE") then proc.quick_exit(code) end
  return code
end

local ch = proc.stdio_channel()
-- NVML (the clocks every timing records) initialised on a thread of its own from the start:
-- its nvmlInit otherwise falls in the first evaluation's first timing. Then torch's import
-- (seconds), on a thread of its own too, when the pool says a task will need it
-- (KM_TORCH_AHEAD=1): the CUDA context comes up meanwhile, and the judge asks for torch only
-- where it must wait (a problem file's model, a baseline to measure)
pcall(function() require("km.nvml").load_ahead() end)
if os.getenv("KM_TORCH_AHEAD") == "1" then pcall(require("km.task.kernelbench").import_ahead) end
require("km.sandbox").harden_strings() -- launch code runs here
local judge, why = judge_mod.new()
if not judge then
  ch:send(json.encode { ok = false, why = why })
  return 3
end
local cuda = require "km.cuda"
ch:send(json.encode { ok = true, device = judge.device, device_count = cuda.device_count() })
-- task states kept while the device has room; the least recently used go first (km.serve.room)
local room = require("km.serve.room").new {
  free = function() local ok, f, total = pcall(cuda.mem_info) if ok then return f, total end end,
  forget = function(key) judge:forget(key) end }

while true do
  local msg = ch:recv()
  if not msg then break end
  local r0 = wall() -- the request read: worker_seconds counts from here
  local req, err = json.decode(msg)
  if not req then
    ch:send(json.encode { error = "bad request: " .. tostring(err) })
  elseif req.op == "eval" then
    -- one-time set-up for this task (torch's import, the spec, PyTorch baselines measured):
    -- the pool times it apart from the candidate, and hears what it is doing
    local function hold(which) ch:send(json.encode { id = req.id, hold = which or false }) end
    progress.sink(function(ev) ch:send(json.encode { id = req.id, progress = ev }) end)
    local close_stage
    judge.on_hold, close_stage = holds(hold)
    local w0 = wall()
    local key = req.task -- a task's folder or problem file: the judge's key for its state
    if type(key) == "string" then pcall(room.make, room, key) end
    local t, terr = set_up(judge, req.task, hold)
    local setup_s = t ~= req.task and wall() - w0 or 0
    local cap = capture.start() -- device printf goes to stdout: caught here, not on the terminal
    local ok, verdict
    if t then ok, verdict = pcall(judge.eval, judge, t, req.candidate, req.opts)
    else ok, verdict = true, verdict_mod.finish(verdict_mod.new { task = req.task }, verdict_mod.ERROR, terr) end
    close_stage()
    if not ok then verdict = { status = "error", feedback = "internal error in the worker: " .. tostring(verdict) } end
    if setup_s > 0 then -- the set-up above is this evaluation's too (its task stage)
      if type(verdict.stage_seconds) == "table" then verdict.stage_seconds.task = (verdict.stage_seconds.task or 0) + setup_s end
      verdict.eval_seconds = (verdict.eval_seconds or 0) + setup_s
    end
    -- whatever happened, a context that no longer answers means a fresh worker: a fault
    -- can surface late (in a later copy or fill) and poisons every later call
    verdict_mod.after_context_check(verdict, cuda.synchronize())
    if cap then note_printed(verdict, cap:stop(PRINTF_TEXT)) end -- after the sync: printf is flushed
    progress.sink(nil)
    if type(key) == "string" and judge:has_task(key) then room:used(key) end
    -- the worker's own seconds on the job, its request decoded to its verdict sent: beyond
    -- eval_seconds, a problem file's set-up, the context check and the printf capture
    verdict.worker_seconds = wall() - r0
    ch:send(json.encode({ id = req.id, verdict = verdict }, { nan = "null" }))
    if verdict.context_lost then return finish(4) end
  elseif req.op == "ping" then
    ch:send(json.encode { id = req.id, pong = true })
  elseif req.op == "quit" then
    break
  else
    ch:send(json.encode { id = req.id, error = "unknown op " .. tostring(req.op) })
  end
end
return finish(0)
