-- km.judge.timed — timing a launch, with every timed call on fresh inputs and poisoned
-- outputs, and re-verified by the check rule (km.judge.checks).
--
-- Owns: the timing protocol's options (time_opts; summary, the record a timing leaves) and,
-- while Judge:time_run runs, one timing's record (new_timing below names its fields). Its
-- parts: set-up (new_timing, the graph mode's first call), the hooks around each call
-- (refresh, pick), the check batch (check_enqueue, check_read, check_now) and the failure
-- mapping (timing_failure).
--
--   option      default            meaning
--   mode        "cold"             timing mode (km.timing's MODES)
--   max_ms      2000               timing cap per side
--   noise       checks.NOISE       the stop rule's statistic ("gini"; the interval rule: "iqr")
--   min_samples checks.MIN_SAMPLES the stop rule's least sample count (5; the interval rule: 10)
--   early_samples checks.EARLY_SAMPLES an early stop from here (5; = min_samples: none)
--   target      checks.TARGET      the bound on the median's relative error (0.2%; 0.5%)
--   ci_target   checks.CI_TARGET   the order-statistic interval's bound (0: none; 0.25%)
--   stop_alt    checks.ALT         a second noise test either of which stops (false: none)
--   warmup      M.WARMUP (1)       warm-up calls before the samples
--   warmup_ms   M.WARMUP_MS (0)    their least wall time
--   timing_gc   km.timing's        km.timing's gc ("defer"; "stop"): not part of the protocol
-- mode, noise, min_samples, early_samples, target, ci_target and the warm-up options make the
-- protocol key, so cached timings are kept apart (checks.STOP_RULE picks the rule).
--
-- Every timed call of a candidate launches the same work (km.judge.same_work: its launch
-- list, compared with the first call's at that shape; `varying_work` otherwise), and a
-- candidate's timing records the GPU's clock state (km.nvml.clocks, where NVML answers).
local compare = require "km.compare"
local timing = require "km.timing"
local task_mod = require "km.task"
local verdict = require "km.verdict"
local feedback = require "km.feedback"
local launch = require "km.judge.launch"
local inputs = require "km.judge.inputs"
local evidence = require "km.judge.evidence"
local integrity = require "km.judge.integrity"
local checks = require "km.judge.checks"
local rows = require "km.judge.rows"
local same_work = require "km.judge.same_work"

local fmt = string.format
local ipairs, pairs, type, tostring, tonumber, pcall, error, setmetatable =
  ipairs, pairs, type, tostring, tonumber, pcall, error, setmetatable
local copy, call_launch, wait_status, sync_status = launch.copy, launch.call_launch, launch.wait_status, launch.sync_status
local inputs_of, rng = inputs.inputs_of, checks.random

local M = {}
local Judge = {}
M.methods = Judge

-- One warm-up call before the samples: the kernel has just run in verify (its module
-- loaded, the clocks up) and cold mode flushes L2 before every sample anyway. That call is
-- the candidate's last verify call where verify ended at the timed shape (km.judge.verify;
-- km.timing's `warmed`). A baseline is timed the same way (compiled ahead, its first calls
-- made before: km.judge.baselines). Measured side by side: bench/RESULTS.md.
M.WARMUP = 1
-- And no least warm-up time (km.timing's own default is 1 ms, which made a kernel of
-- microseconds warm up with many calls, each with its refresh, for no number).
M.WARMUP_MS = 0

-- The options every timing of an evaluation is taken with: their protocol key is part of
-- every cached timing's key, so a number is divided only by one timed the same way.
function M.time_opts(opts)
  local min_samples = opts.min_samples or checks.MIN_SAMPLES
  local alt = opts.stop_alt
  if alt == nil then alt = checks.ALT end
  return { mode = opts.mode or "cold", max_ms = opts.max_ms or 2000, min_samples = min_samples, alt = alt or nil,
    early_samples = math.min(opts.early_samples or checks.EARLY_SAMPLES, min_samples),
    target = opts.target or checks.TARGET, ci_target = opts.ci_target or checks.CI_TARGET,
    noise = opts.noise or checks.NOISE, warmup = opts.warmup or M.WARMUP, warmup_ms = opts.warmup_ms or M.WARMUP_MS,
    gc = opts.timing_gc }
end
local time_opts = M.time_opts

local SUMMARY_FIELDS = { "median", "mean", "p25", "p75", "min", "n", "n_extra", "warmup_calls", "stop", "rel_noise",
  "stop_target", "ci_low", "ci_high", "calls", "launches", "gpu_clocks", "mode",
  "sm_clock_mhz", "clock_moved", "sm_clock_start_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz", "energy_j",
  "energy_unavailable", "checked_calls", "row_checks", "last_checked_after", "check_lines", "cached" }
-- The protocol key of a timing: a fresh result holds km.timing's protocol table, a summary
-- or a record read from disk the key alone.
function M.protocol_of(r) return r and (type(r.protocol) == "table" and r.protocol.key or r.protocol) end

-- A timing summary: the fields above and the protocol's key; and where a gate opened by its
-- timeout (km.timing: the work waited for the GPU while it was enqueued, and the rest of the
-- run went ungated, so host gaps may be inside some samples), gate_timeouts and gated, so
-- such a number says so wherever it is kept.
function M.summary(r)
  if not r then return nil end
  local s = {}
  for _, k in ipairs(SUMMARY_FIELDS) do s[k] = r[k] end
  s.protocol = M.protocol_of(r)
  if (tonumber(r.gate_timeouts) or 0) > 0 then s.gate_timeouts, s.gated = r.gate_timeouts, r.gated end
  return s
end

----------------------------------------------------------------------------------------
-- set-up

-- A timing's record: what is timed, its buffers, and the state of its calls and checks.
local function new_timing(self, st, run, sym, opts, check)
  local t = st.task
  local draw_each, first, every, shift = checks.check_opts(opts)
  local tm = {
    st = st, run = run, t = t, sym = sym, opts = opts, budget = opts.budget or 1e6,
    check = check,            -- timed calls are re-verified (a candidate; not a baseline)
    draw_each = draw_each, first = first, every = every, shift = shift, -- the check rule (checks.check_opts)
    seed = (opts.seed_base or 1000) + 7777, -- the first inputs' seed (a PyTorch run's bind)
    failure = nil,            -- { status, text }: why the timing failed, once it did
    checking = false,         -- the call being made is to be checked
    calls = 0,                -- calls made (warm-up and timed)
    sampled = 0,              -- timed calls made
    checked = 0,              -- checks made
    last_checked = 0,         -- the call whose check passed last
    cur_seed = nil,           -- the seed of the inputs the candidate's buffers hold
    drawn = nil,              -- the next call's seed, drawn ahead behind a check
    last_outs = {},           -- the outputs the last call returned
    bound = nil,              -- a PyTorch reference bound for the checks: { run, io, model }
    ref_outs = nil,           -- its outputs' buffers
    fast = nil,               -- the checks' reference (Judge:check_reference; nil: the task's own)
    launch_ref = nil,         -- the launch list every call must repeat (km.judge.same_work)
    gpu_clocks = nil,         -- the clock state read during the first check (km.nvml.clocks)
    rows = nil,               -- the checks' rows (km.judge.rows' plan), or nil: every row
    row_checks = 0,           -- checks made on a sample of those rows
  }
  tm.cur_seed = tm.seed
  -- refresh() draws every call's inputs; a PyTorch model bound below may run once on them
  -- (Problem:bind, to learn its outputs): those are drawn first
  tm.cand, tm.ref_in, tm.dims = self:trial_io(t, sym, tm.seed, not run.torch)
  if check and not st.prob and opts.check_rows ~= false then tm.rows = rows.plan(t, sym, tm.dims, shift) end
  return tm
end

-- The timing's buffers back to the pool (outputs of its calls are for seeds of the judge's
-- private generator: no poison), and the PyTorch reference it bound for its checks unbound:
-- the last check's outputs, which torch keeps for the compare, would otherwise stay on the
-- device after the timing (an output's size for every problem the worker holds).
local function release(self, tm)
  if tm.bound then
    pcall(tm.bound.model.unbind, tm.bound.model)
    tm.bound = nil
  end
  self.pool:put_all(tm.cand, true); self.pool:put_all(tm.ref_in, true)
  if tm.ref_outs then self.pool:put_all(tm.ref_outs, true) end
end

----------------------------------------------------------------------------------------
-- the hooks: every call's inputs and outputs

-- Seeds come from the judge's private generator: the inputs of later calls cannot be
-- predicted (and precomputed) by an untimed first call. -> the seed drawn
local function draw(self, tm)
  local s = rng(1 << 40)
  self:fill_inputs(tm.t, tm.sym, tm.cand, s, true)
  return s
end

-- Before every call: fresh inputs (drawn ahead by a check, or now) and poisoned outputs.
-- Outputs are poisoned sparsely (a 128-byte line in every 4 KiB, drawn from the seed): the
-- rest holds the previous call's outputs, wrong for these inputs, so a check still finds any
-- output left unwritten unless it does not depend on the inputs, and such a run of 4 KiB or
-- more meets poison. Whatever can be judged is poisoned alike: the io outputs and every
-- scratch buffer the launch could hand back as an output (launch.returnable), so a returned
-- scratch buffer does not keep the previous call's values.
local function refresh(self, tm)
  tm.cur_seed, tm.drawn = tm.drawn or draw(self, tm), nil
  for _, spec in ipairs(tm.t.outputs) do tm.cand[spec.name]:poison { sparse = tm.cur_seed } end
  for _, b in ipairs(launch.returnable(tm.run.state.scratch, tm.t.outputs, tm.dims)) do b:poison { sparse = tm.cur_seed } end
end

----------------------------------------------------------------------------------------
-- the check batch

-- A PyTorch reference on inputs drawn by a plan, bound once to the candidate's input
-- buffers and outputs of its own for the whole timing (Problem:bind): each check is then
-- the model alone. Its outputs are compared where torch put them ({ ptr, nbytes }) where it
-- could keep them; those it cannot keep are copied into ref_outs.
-- -> io, nil, nil, true (io is this timing's: not for the pool) | nil, status, message
local function bound_reference(self, tm, which)
  local t = tm.t
  if not tm.bound then
    local io = inputs_of(t, tm.cand)
    tm.ref_outs = {}
    for _, spec in ipairs(t.outputs) do
      tm.ref_outs[spec.name] = self.pool:get(spec.dtype, tm.dims[spec.name])
      io[spec.name] = tm.ref_outs[spec.name]
    end
    local bound, bind_error = which.torch:bind(io, { variant = "eager", params = true })
    if not bound then return nil, "launch_error", bind_error end
    tm.bound = { run = bound, io = io, model = which.torch }
  end
  local ok, kept = tm.bound.run("keep")
  tm.st.truth_dirty = true -- a forward may move the model's buffers (running statistics)
  if not ok then return nil, "launch_error", kept end
  local io = setmetatable({}, { __index = tm.bound.io })
  for _, spec in ipairs(t.outputs) do
    local at = (kept or {})[spec.name]
    if at then io[spec.name] = { ptr = at, nbytes = tm.ref_outs[spec.name]:nbytes() } end
  end
  return io, nil, nil, true
end

-- The reference on a checked call's inputs (enqueued, no wait) -> io (inputs and its
-- outputs), kept | nil, status, message
local function check_reference_run(self, tm, ref_src, plan)
  local which = tm.fast or tm.st.ref
  if plan and which.torch then return bound_reference(self, tm, which) end
  return self:run_reference(tm.st, ref_src, tm.dims, tm.sym, tm.fast or self:param_reference(tm.st), true, true)
end

-- A timed call's check is one batch: the truth's digests, the guards and inputs, the
-- reference on the inputs (checked in place, or drawn again), and the compares are all
-- enqueued behind the call, their results into the judge's ledger, and read back with one
-- wait, before any candidate code runs again; then judged in that order. The truth's
-- digests are enqueued before anything reads it (the parameters handed to the reference,
-- the reference itself): a change is found, restored and failed here, whatever ran on it.
-- Fills `batch` as it goes (a raise leaves what was enqueued).
local function check_enqueue(self, tm, batch, judged)
  local st, t = tm.st, tm.t
  local scratch = tm.run.state.scratch
  local ledger = self:ledger(evidence.slots(t, tm.cand, scratch) + #t.outputs * compare.SLOTS
    + 2 * (st.truth and #st.truth.ranges or 0) + 64)
  batch.ledger = ledger
  batch.truth_slot = self:truth_enqueue(st, ledger)
  local plan = self:input_plan(st, tm.sym, tm.cand)
  if not plan then self:fill_inputs(t, tm.sym, tm.ref_in, tm.cur_seed, true) end -- after the truth's digests
  -- the sample of lines is drawn now, after the call was enqueued; the timing's first check
  -- reads every line (verify's one trial at the timed shape may be the precision trial,
  -- whose inputs are not the ordinary law's: km.judge.verify)
  local sampled = tm.shift > 0 and tm.checked > 1
  local lines = sampled and { key = rng(1 << 62), shift = tm.shift } or nil
  -- a task's rows (km.judge.rows): those drawn proven, the reference on them alone
  batch.rows = sampled and plan and tm.rows and rows.draw(tm.rows, t, tm.sym, lines.key) or nil
  batch.evidence = evidence.enqueue(ledger, t, tm.cand, tm.ref_in, scratch, plan, tm.cur_seed, nil,
    inputs.param_key(tm.cur_seed), batch.rows and batch.rows.lines)
  if batch.rows then
    tm.row_checks = tm.row_checks + 1
    batch.compact = {}
    batch.ref_io, batch.ref_status, batch.ref_text = self:rows_reference(tm, batch.rows, batch.compact)
  else
    batch.ref_io, batch.ref_status, batch.ref_text, batch.kept =
      check_reference_run(self, tm, plan and inputs_of(t, tm.cand) or tm.ref_in, plan)
  end
  batch.seal = self:seal_enqueue(st, ledger) -- the truth after the reference ran: sealed with the batch
  if not batch.ref_io then return end
  batch.slots = {}
  for _, spec in ipairs(t.outputs) do
    local tol = t.tolerance[spec.dtype]
    batch.slots[spec.name] = compare.enqueue(judged[spec.name], batch.ref_io[spec.name],
      { atol = tol.atol, rtol = tol.rtol, poison = true, lines = batch.rows and batch.rows.lines[spec.name] or lines }, ledger)
  end
end

-- The reference's outputs back to the pool, unless they are this timing's own (kept); no
-- poison: they are for inputs of an unpredictable seed.
local function put_back(self, tm, batch)
  if batch.ref_io and not batch.kept then
    for _, spec in ipairs(tm.t.outputs) do self.pool:put(batch.ref_io[spec.name], true) end
  end
  for _, b in ipairs(batch.compact or {}) do self.pool:put(b, true) end
  batch.compact = nil
end

-- Whether the next call's inputs may be drawn behind the batch: not where the launch code
-- handed back an output in an input's buffer (its examples are read after the wait).
local function may_draw_ahead(tm, judged)
  for _, spec in ipairs(tm.t.outputs) do
    local o = judged[spec.name]
    for _, ispec in ipairs(tm.t.inputs) do
      local x = tm.cand[ispec.name]
      if o:ptr() < x:ptr() + x:nbytes() and x:ptr() < o:ptr() + o:nbytes() then return false end
    end
  end
  return true
end

-- The batch read back, in order -> nil | { status, text } (why the check failed)
local function check_read(self, tm, batch, judged, enqueued, enqueue_error, where)
  local st, t, ledger = tm.st, tm.t, batch.ledger
  local moved, moved_text = self:truth_read(st, ledger, batch.truth_slot, where)
  if moved then put_back(self, tm, batch) return { moved, moved_text } end
  if batch.seal then self:seal_read(st, ledger, batch.seal) end
  if not enqueued then
    put_back(self, tm, batch)
    return { verdict.ERROR, "re-verifying a timed call failed: " .. tostring(enqueue_error) }
  end
  local failure, failure_text = evidence.read(ledger, t, batch.evidence, where)
  if failure then put_back(self, tm, batch) return { failure, failure_text } end
  if not batch.ref_io and batch.ref_status == "inputs_modified" then return { batch.ref_status, batch.ref_text } end
  if not batch.ref_io then
    return { verdict.ERROR, "the task's reference failed while re-verifying a timed call: " .. tostring(batch.ref_text) }
  end
  local seen = {}
  local mismatch, mismatch_text = evidence.compare_outputs(t, judged, batch.ref_io, tm.dims, { where = where, later = "timed",
    checks = seen, result_of = function(name, a, b, o) return compare.result(a, b, o, ledger, batch.slots[name]) end })
  put_back(self, tm, batch)
  if mismatch == "mismatch" and not evidence.unwritten_since(seen)
    and self:exact_agrees_timed(st, judged, tm.sym, tm.ref_in, tm.dims, tm.cur_seed) then return end
  if mismatch and batch.rows and self:rows_confirm(tm, judged) then
    return { verdict.ERROR, fmt("the task's check_rows ('%s') does not hold: its reference on a sample of rows "
      .. "disagrees with its reference on every row, which the candidate's outputs match (%s)", t.check_rows, mismatch_text) }
  end
  if mismatch then return { mismatch, mismatch_text } end
end

-- The GPU's clock state (km.nvml.clocks: SM and memory clocks, the reasons they are held
-- down) -> a table | { unavailable = why }. Read while the first check's batch runs on the
-- GPU, where the host would only wait.
local nvml_ok, nvml = pcall(require, "km.nvml")
local function clock_state(self)
  if not nvml_ok or not nvml.available() then return { unavailable = "no NVML" } end
  local c, why = nvml.clocks(self.device and self.device.uuid or 0)
  return c or { unavailable = tostring(why) }
end

-- Checks the last call -> true | false (tm.failure says why). A check inside the timing
-- (ahead = true) draws the next call's inputs into the candidate's buffers behind the
-- batch, before the wait: the GPU draws them while the host judges the batch. Nothing read
-- after the wait is in those buffers (the ledger's slots; on a failure, the outputs'
-- examples and the guards); the outputs are poisoned by the call's own refresh.
local function check_now(self, tm, where, ahead)
  tm.checked = tm.checked + 1
  local judged = setmetatable(copy(tm.last_outs), { __index = tm.cand })
  local batch = {}
  local enqueued, enqueue_error = pcall(check_enqueue, self, tm, batch, judged)
  if not batch.ledger then -- no batch begun: the device says why, or the judge does
    local alive, crash_status, crash_text = sync_status()
    tm.failure = alive and { verdict.ERROR, "re-verifying a timed call failed: " .. tostring(enqueue_error) }
      or { crash_status, feedback.launch(crash_status, crash_text, where) }
    return false
  end
  if ahead then ahead = may_draw_ahead(tm, judged) end
  -- the one wait: the candidate's call, then the check (a fault in the call shows here)
  local ok, wait_failure, wait_text = wait_status(batch.ledger:read(function()
    if ahead then tm.drawn = draw(self, tm) end
    if not tm.gpu_clocks then tm.gpu_clocks = clock_state(self) end
  end))
  if not ok then
    tm.failure = { wait_failure, feedback.launch(wait_failure, wait_text, where) }
    if wait_failure ~= "crashed" then put_back(self, tm, batch) end
    return false
  end
  local failure = check_read(self, tm, batch, judged, enqueued, enqueue_error, where)
  if failure then tm.failure = failure return false end
  tm.last_checked = tm.calls
  return true
end

----------------------------------------------------------------------------------------
-- the timing

-- Graph mode captures before it warms up, and an allocation cannot be captured: a first
-- call there, outside the timing. -> nil | nil, status, text (the timing failed)
local function graph_first_call(self, tm)
  refresh(self, tm)
  local ok, status, text = call_launch(self, tm.run, tm.cand, tm.sym, tm.budget)
  if ok then ok, status, text = sync_status() end
  if ok then return nil end
  if status == "crashed" then self.pool:drop(false) else release(self, tm) end
  return nil, status, "The kernel failed while being timed: " .. tostring(text)
end

-- km.timing's before and after hooks. Which calls are checked: checks.check_picker's rule
-- (the kernel cannot tell which, nor which call is the last: the stop is decided after the
-- sample is read), and where the timing did not stop at min_samples its last call too
-- (after the timing where it was not checked in place).
local function hooks(self, tm, topts)
  local likely_last, early = topts.min_samples, topts.early_samples or topts.min_samples
  -- no draw ahead where the timing may well stop: at min_samples, and from early_samples on
  -- until min_samples (a quiet kernel stops at early_samples)
  local function draw_ahead(k) return k ~= likely_last and not (k >= early and k < likely_last) end
  local pick = checks.check_picker(topts.min_samples, tm.first, tm.every, tm.draw_each)
  local function before(phase)
    refresh(self, tm)
    tm.calls = tm.calls + 1
    if phase == "sample" then tm.sampled = tm.sampled + 1 end
    tm.checking = tm.check and phase == "sample" and pick(tm.sampled)
  end
  local function after()
    if tm.checking and not check_now(self, tm, fmt("timed call %d", tm.calls), draw_ahead(tm.sampled)) then
      return nil, "a timed call failed its check", "CHECK"
    end
  end
  return before, after
end

-- A call's launch list against the first one's (a candidate's timing) -> nil | the text
-- of the verdict varying_work
local function same_work_failure(tm, call)
  local list = tm.run.state.launch_list or {}
  if not tm.launch_ref then tm.launch_ref = list return nil end
  local why = same_work.diff(tm.launch_ref, list)
  if not why then return nil end
  return fmt("Your launch code did not launch the same work on every call at one shape: at %s %s. "
    .. "Every call of a candidate at a shape must launch the same kernels, in the same order, with the same grid, "
    .. "block and shared memory (the timing compares them call by call).", call, why)
end

-- The timed function: the candidate's launch, or a PyTorch run's model bound to the
-- buffers once. -> the function | nil, status, text (binding failed)
local function timed_fn(self, tm)
  local run = tm.run
  if not run.torch then
    return function()
      local ok, status, text = call_launch(self, run, tm.cand, tm.sym, tm.budget)
      if not ok then
        tm.failure = { status, "The kernel failed while being timed: " .. tostring(text) }
        return nil, tostring(text), status
      end
      tm.last_outs = status
      local varied = tm.check and same_work_failure(tm, fmt("timed call %d", tm.calls))
      if varied then
        tm.failure = { "varying_work", varied }
        return nil, varied, "VARYING_WORK"
      end
    end
  end
  local bound, bind_error = run.torch:bind(tm.cand, { variant = run.variant })
  if not bound then release(self, tm) return nil, verdict.ERROR, "binding the PyTorch reference failed: " .. tostring(bind_error) end
  return function()
    local ok, err = bound(false)
    if not ok then
      tm.failure = { verdict.ERROR, "the PyTorch reference failed while timed: " .. tostring(err) }
      return nil, tostring(err)
    end
  end
end

-- A timing that returned no result -> nil, status, text. A fault in a call shows at the
-- next wait (the warm-up's, a sample's): its code says so.
local function timing_failure(self, tm, err, code)
  local failure = tm.failure
  local status = failure and failure[1] or code ~= integrity.GATE_TAMPERED and verdict.launch_status(code) or nil
  if status == "crashed" then self.pool:drop(false) else release(self, tm) end
  if failure then return nil, failure[1], failure[2] end
  if code == integrity.GATE_TAMPERED then -- before any candidate code (a baseline): no one's here to blame
    local gate_status, gate_text = self:gate_fault("during a timing")
    return nil, gate_status or verdict.ERROR, gate_text or tostring(err)
  end
  return nil, status, "The kernel failed while being timed: " .. tostring(err)
end

-- Times `run` on the timed shape. Every call — warm-up and timed — gets fresh input values
-- (same buffers, a new unpredictable seed) and poisoned outputs, both outside the timed
-- window; with check = true, timed calls are re-verified by the check rule (every one by
-- default) against the reference run on that call's inputs, with guard zones, inputs and
-- outputs checked. A launch that caches results, keeps a call counter, or skips work when
-- its buffers come back is caught on whichever call it cheats.
-- -> timing result | nil, status, text
function Judge:time_run(st, run, sym, opts, check)
  local tm = new_timing(self, st, run, sym, opts, check)
  run.state.poison = false
  tm.fast = self:check_reference(st, sym)
  local topts = time_opts(opts)
  -- the protocol's warm-up call is the launch's last call where that was at this shape
  local last = run.state and run.state.last_sym
  if last and opts.warmed ~= false and topts.mode ~= "graph" and task_mod.fmt_shape(last) == task_mod.fmt_shape(sym) then
    topts.warmed = 1
  end
  -- the launch list to repeat: the last call's where it was at this shape (verify's last
  -- trial), else the timing's first call's
  if last and task_mod.fmt_shape(last) == task_mod.fmt_shape(sym) then tm.launch_ref = run.state.launch_list end
  -- every timed call checked: each sample is waited for by its check, so none is queued ahead
  topts.serial = check and not tm.draw_each and tm.first >= topts.min_samples and tm.every == 1
  if topts.mode == "graph" then
    local _, status, text = graph_first_call(self, tm)
    if status then return nil, status, text end
  end
  topts.before, topts.after = hooks(self, tm, topts)
  local timed, status, text = timed_fn(self, tm)
  if not timed then return nil, status, text end
  local okt, res, err, code = pcall(timing.time, timed, topts)
  if not okt then
    -- raised, not returned: an error met in a hook's own work, such as the driver's sticky
    -- error at the next input refresh after a kernel faulted. The context says whether it
    -- was the device (the candidate's crash); any other error is raised again as it was.
    local alive, crash_status, crash_text = sync_status()
    if alive then error(res, 0) end
    tm.failure = tm.failure or { crash_status, "The kernel failed while being timed: " .. tostring(crash_text) }
    res = nil -- the failure says what happened: err and code are not read
  end
  -- a timed PyTorch run (a baseline): torch's cache may still hold its last outputs, back to
  -- the driver before a candidate runs
  if run.torch then require("km.task.kernelbench").empty_cache() end
  -- the last timed call is re-verified where the timing did not stop at min_samples and its
  -- own check has not (then the candidate's inputs hold a draw for a call that was not made)
  if res and check and tm.last_checked ~= tm.calls and (tm.draw_each or tm.sampled ~= topts.min_samples) then
    res.last_checked_after = true
    if not check_now(self, tm, fmt("the last timed call (%d)", tm.calls)) then res = nil end
  end
  -- torch's cached blocks may still hold the checks' reference results: they stay there,
  -- for this timing's seeds, which no later call gets
  if not res then return timing_failure(self, tm, err, code) end
  res.checked_calls = check and tm.checked or nil
  res.check_lines = check and tm.shift > 0 and (1 << tm.shift) or nil
  res.row_checks = check and tm.rows and tm.row_checks or nil
  res.calls = tm.calls -- every call the timing made: warm-up and timed, counted or not
  if check then
    res.launches = tm.launch_ref and same_work.text(tm.launch_ref) or nil
    res.gpu_clocks = tm.gpu_clocks or clock_state(self)
  end
  release(self, tm)
  return res
end

return M
