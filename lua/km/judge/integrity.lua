-- km.judge.integrity — the truth out of reach, and the timing gate's page.
--
-- Owns: on a task state, the truth's seal (st.truth: ranges, names, digests) and whether
-- trusted code ran since it (st.truth_dirty); on the judge, self.truth_clean (the task state
-- whose truth was proven unchanged since candidate code last ran; km.judge.launch clears it
-- when candidate code runs). A fault found is recorded in the evaluation in progress
-- (self.evaluation.fault, km.judge.evaluation) for its verdict.
--
-- A PyTorch reference's own state (parameters, buffers, tensors it keeps) lives in this
-- process's context, where a kernel can write. It is proven unchanged instead: sealed with
-- keyed digests (buffer.digest: the key is this process's secret, so a kernel cannot forge
-- one) whenever trusted code has run and candidate code is next, and checked before every
-- use (the reference run, the parameters handed out as pristine inputs) and at the end of
-- every evaluation. A change fails the candidate (inputs_modified) and the model is built
-- again from the code and seed it was loaded from (Problem:restore), as it was loaded.
local buffer = require "km.buffer"
local timing = require "km.timing"

local fmt = string.format
local ipairs, assert = ipairs, assert

local M = {}
local Judge = {}
M.methods = Judge

-- The truth's storages as they are now: device ranges { ptr, nbytes } and their names.
local function truth_ranges(st)
  local ranges, names = {}, {}
  for i, r in ipairs(assert(st.prob:truth())) do ranges[i], names[i] = { r[2], r[3] }, r[1] end
  return ranges, names
end

-- A fault kept for the verdict of the evaluation in progress (its first one); none is kept
-- outside an evaluation. -> status, text
local function keep_fault(self, status, text)
  local ev = self.evaluation
  if ev then ev.fault = ev.fault or { status, text } end
  return status, text
end

-- Seals the truth if trusted code ran since the last seal (a forward moves running stats).
function Judge:seal_truth(st)
  if not (st and st.prob and st.truth_dirty) then return end
  local ranges, names = truth_ranges(st)
  st.truth = { ranges = ranges, names = names, digests = #ranges > 0 and buffer.digest(ranges) or {} }
  st.truth_dirty = false
end

-- The name of the first storage whose digest now (now(i), the i-th range's) is not its
-- seal's, or nil.
local function moved_name(tr, now)
  for i, d in ipairs(tr.digests) do if now(i) ~= d then return tr.names[i] end end
end

-- nil, or the name of the first storage of the truth that moved since its seal.
function Judge:truth_moved(st)
  local tr = st and st.prob and not st.truth_dirty and st.truth
  if not tr or #tr.ranges == 0 then return nil end
  local now = buffer.digest(tr.ranges)
  return moved_name(tr, function(i) return now[i] end)
end

-- The model as it was loaded (built again), sealed again (after a candidate altered the truth).
function Judge:restore_truth(st)
  assert(st.prob:restore())
  st.truth_dirty = true
  self:seal_truth(st)
end

local function reference_state_text(name, where)
  return fmt("Your kernel changed the PyTorch reference's own state on the GPU (%s, found changed at %s). "
    .. "A kernel may write only its outputs and its scratch buffers; the reference's parameters and buffers "
    .. "are read-only. Compute with the parameters passed to you in io.", name, where or "the end of the evaluation")
end

-- nil, or "inputs_modified", feedback: the check before the truth is used. The state is
-- restored at once, so nothing computed from it afterwards sees the change, and the fault
-- is kept for the verdict: a check that runs where no verdict can be returned (an input
-- refresh inside timing) still fails the candidate.
-- A clean check holds until candidate code runs again (km.judge.launch clears
-- self.truth_clean): the digest waited for the stream, so no candidate work is left to
-- change the truth, and a second digest before the next candidate call (a timed call's
-- check, then its reference run) would read the same bytes.
function Judge:truth_check(st, where)
  if st and self.truth_clean == st then return nil end
  local name = self:truth_moved(st)
  if not name then
    if st and st.prob and st.truth and not st.truth_dirty then self.truth_clean = st end
    return nil
  end
  return self:truth_fault(st, name, where)
end

-- A storage of the truth found moved: the state restored, the fault kept -> "inputs_modified", feedback
function Judge:truth_fault(st, name, where)
  self:restore_truth(st)
  return keep_fault(self, "inputs_modified", reference_state_text(name:gsub("^%a+:", ""), where))
end

-- The truth_check of a batch of checks: its digests enqueued into the ledger (nil when
-- there is nothing sealed to check), then read back with the batch (truth_read: nil, or
-- "inputs_modified", feedback, the state restored and the fault kept, as truth_check).
function Judge:truth_enqueue(st, ledger)
  local tr = st and st.prob and not st.truth_dirty and st.truth
  if not tr or #tr.ranges == 0 or self.truth_clean == st then return nil end
  return ledger:digest(tr.ranges)
end

-- A seal enqueued into a batch after trusted code ran on the truth (seal_truth's digests,
-- read back before any candidate code runs) -> what seal_read needs, or nil.
function Judge:seal_enqueue(st, ledger)
  if not (st and st.prob and st.truth_dirty) then return nil end
  local ranges, names = truth_ranges(st)
  return { ranges = ranges, names = names, slot = #ranges > 0 and ledger:digest(ranges) or nil }
end

function Judge:seal_read(st, ledger, seal)
  local digests = {}
  for i = 1, #seal.ranges do digests[i] = ledger:u64(seal.slot + i - 1) end
  st.truth = { ranges = seal.ranges, names = seal.names, digests = digests }
  st.truth_dirty = false
end

function Judge:truth_read(st, ledger, slot, where)
  if not slot then return nil end
  local name = moved_name(st.truth, function(i) return ledger:u64(slot + i - 1) end)
  if name then return self:truth_fault(st, name, where) end
end

-- The timing gate's page (km.timing; docs/timing.md, "The gate") is host memory mapped into
-- the device, so a kernel that learned its address can write it: open every later gate at
-- once (a baseline timed after it holds the host's launch gaps, and a speedup over it grows)
-- or hide a timeout. km.timing checks it against what the host wrote at every timing's start,
-- gates and end, puts it back and voids the timing (GATE_TAMPERED); timing.gate_check() does
-- the same between timings and counts every write found in this process. A write found after
-- the evaluation's candidate first ran (its gate_mark: the count then) is the candidate's:
-- inputs_modified, kept as the evaluation's fault like a change to the reference's state.
M.GATE_TAMPERED = "GATE_TAMPERED"

local function gate_text(where)
  return fmt("Your kernel wrote kmrun's timing gate (host memory mapped into the GPU; found changed %s). "
    .. "A kernel may write only its outputs and its scratch buffers.", where)
end

-- nil, or "inputs_modified", feedback when writes to the gate's page were found since the
-- candidate first ran (checking the page now, and putting it back).
function Judge:gate_fault(where)
  local ev = self.evaluation
  if not (ev and ev.gate_mark) then return nil end
  local n = timing.gate_check()
  if n == ev.gate_mark then return nil end
  ev.gate_mark = n
  return keep_fault(self, "inputs_modified", gate_text(where))
end

return M
