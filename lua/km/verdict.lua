-- km.verdict — the fixed set of verdict statuses and the one place verdicts are built.
--
--   local verdict = require "km.verdict"
--   local v = verdict.new { task = "l1_relu", candidate = "c1" }
--   verdict.finish(v, "mismatch", "feedback for the model", { failed_at = ... })
--   verdict.is_fatal("CUDA_ERROR_ILLEGAL_ADDRESS")      -- true: the context is gone
--   verdict.lost(job, "timeout", 60)                    -- the verdict for a worker lost
--   verdict.after_context_check(v, alive, msg, code)    -- the worker's "is the GPU still ours" rule
--
-- Everything that asks "which statuses exist" or "does this CUDA error end the context"
-- asks this module: the judge, the worker, the pool, guidance and reports.
local M = {}

local fmt = string.format
local ipairs, pairs, type, tostring = ipairs, pairs, type, tostring

-- Every status is a row of km.statuses (name, stage, colour, failure, fatal, meaning, ...);
-- this module owns it and hands it on as verdict.statuses.
local statuses = require "km.statuses"
M.statuses = statuses

-- What the judge can say about a candidate, in the order a candidate meets them.
M.STATUSES = statuses.names(function(row) return row.judge and row.stage ~= "run" end)
-- Not about the candidate: the task or kmrun failed (a reference that does not build, an
-- internal error). Never counted against a candidate, never counted as solved.
M.ERROR = "error"

-- A status the judge may give (its row says judge; rows added at run time count).
function M.known(status) return statuses.prop(status, "judge") == true end

-- CUDA errors after which the context is unusable: the worker must be replaced.
local FATAL = {
  CUDA_ERROR_ILLEGAL_ADDRESS = true, CUDA_ERROR_MISALIGNED_ADDRESS = true,
  CUDA_ERROR_LAUNCH_FAILED = true, CUDA_ERROR_ILLEGAL_INSTRUCTION = true,
  CUDA_ERROR_HARDWARE_STACK_ERROR = true, CUDA_ERROR_INVALID_PC = true,
  CUDA_ERROR_INVALID_ADDRESS_SPACE = true, CUDA_ERROR_ASSERT = true,
  CUDA_ERROR_LAUNCH_TIMEOUT = true, CUDA_ERROR_ECC_UNCORRECTABLE = true,
  CUDA_ERROR_UNKNOWN = true, CUDA_ERROR_CONTEXT_IS_DESTROYED = true,
}

-- code: a CUDA error name as the C core returns it (never parsed from message text).
function M.is_fatal(code) return code ~= nil and FATAL[code] == true end

-- The status a failed launch or synchronisation gets, from its error code.
function M.launch_status(code) return M.is_fatal(code) and "crashed" or "launch_error" end

-- Whether an error says the device ran out of memory (torch's or the driver's words).
function M.out_of_memory(text)
  local l = tostring(text):lower()
  return l:find("out of memory", 1, true) ~= nil or l:find("out_of_memory", 1, true) ~= nil
end

-- What a candidate may weigh: a CUDA source and a launch script over these are judged
-- compile_error before anything is sent or compiled (a 300 MB source once made the pool
-- raise: its frame was over km.proc's limit).
M.MAX_SOURCE = 4 << 20
M.MAX_LAUNCH = 1 << 20

-- nil, or the feedback for a candidate whose source or launch script is too large.
function M.oversized(source, launch)
  if type(source) == "string" and #source > M.MAX_SOURCE then
    return fmt("The kernel source is %d bytes, over the limit of %d bytes: send a smaller source.", #source, M.MAX_SOURCE)
  end
  if type(launch) == "string" and #launch > M.MAX_LAUNCH then
    return fmt("launch.lua is %d bytes, over the limit of %d bytes: send a smaller launch script.", #launch, M.MAX_LAUNCH)
  end
end

function M.new(fields)
  local v = { checks = {} }
  for k, x in pairs(fields or {}) do v[k] = x end
  return v
end

-- Sets the status (one of the fixed set, else raises: a programming error) and feedback.
function M.finish(v, status, feedback, extra)
  if not M.known(status) then error("km.verdict: unknown status '" .. tostring(status) .. "'", 2) end
  v.status = status
  v.feedback = feedback
  for k, x in pairs(extra or {}) do v[k] = x end
  return v
end

local function lost_verdict(job, how, timeout_s, st)
  if how == "timeout" then
    return M.finish(M.new { task = job.task_name, candidate = job.cand and job.cand.name }, "timeout",
      fmt("The candidate did not finish within %g s (an endless loop, a deadlock at a barrier, or far too slow). The worker was stopped.", timeout_s))
  end
  st = st or {}
  if st.code == 124 then -- km.python's watchdog: a PyTorch call that never returned (docs/pytorch.md)
    return M.finish(M.new { task = job.task_name, candidate = job.cand and job.cand.name }, "timeout",
      "The evaluation did not finish: a PyTorch call did not return within its deadline (waiting on the GPU " ..
      "behind the candidate's kernels, or the PyTorch reference itself hung), and the worker stopped itself.")
  end
  local why = st.signal and ("signal " .. st.signal) or ("exit code " .. tostring(st.code))
  return M.finish(M.new { task = job.task_name, candidate = job.cand and job.cand.name }, "crashed",
    "The GPU worker died while judging this candidate (" .. why .. ").")
end

-- The verdict for a job whose worker was lost: how = "timeout" (stopped by the pool after
-- timeout_s) or "dead" (exit status or signal in `st`). It says so in `worker_lost` (how),
-- which a service reads to judge a candidate once more on a fresh worker (km.serve.backend).
function M.lost(job, how, timeout_s, st)
  local v = lost_verdict(job, how, timeout_s, st)
  v.worker_lost = how
  return v
end

-- After every candidate the worker asks the context whether it still answers: a fault can
-- surface late (in a later copy or fill) and poisons every later call. A verdict that
-- claimed success (or an internal error) on a dead context becomes `crashed`.
function M.after_context_check(v, alive, msg, code)
  if alive then return v end
  v.context_lost = true
  v.context_error = code
  if v.status == M.ERROR or v.status == "correct" or v.status == "too_fast" then
    v.status = "crashed"
    v.feedback = "The GPU context failed after the candidate ran: " .. tostring(msg)
  end
  return v
end

return M
