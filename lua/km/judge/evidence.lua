-- km.judge.evidence — what proves a candidate call honest: guard zones, inputs unchanged,
-- outputs within tolerance.
--
-- Owns: the judge's ledger (self.proof_ledger, km.buffer's: a batch of checks' results on
-- the device, read back with one wait), made on first use and kept by the judge.
local buffer = require "km.buffer"
local compare = require "km.compare"
local feedback = require "km.feedback"
local launch = require "km.judge.launch"
local inputs = require "km.judge.inputs"

local fmt = string.format
local pairs, ipairs = pairs, ipairs
local seeded, inputs_of, wait_status = inputs.seeded, inputs.inputs_of, launch.wait_status

local M = {}
local Judge = {}
M.methods = Judge

-- The evidence after a candidate call: guard zones, inputs unchanged (against ref_in, the
-- same inputs drawn again; or, given a plan, against the laws they were drawn by,
-- b:random_check, and the parameters' source). Every input is proven in full, every element
-- of it, in verify and in timed calls alike: the reference then computes on the candidate's
-- own input buffers (a plan's inputs), and one element the proof did not read could make the
-- reference's answer trivial (a spike that takes over a batch's statistics, a max, a
-- softmax). Its reads are enqueued into the ledger (no wait) -> what M.read reads back once
-- the ledger was read. precise: the inputs were drawn by the precision laws (verify).
-- pkey: a timed call's parameter key (inputs.param_key): a plan's perturbed parameters are
-- proven to be the source's so perturbed, every element (L:perturb_check).
-- rows: name -> lines (km.judge.rows: a check whose reference reads only those rows of the
-- inputs named): those inputs proven on those rows, every element of them.
function M.enqueue(ledger, t, cand, ref_in, scratch, plan, seed, precise, pkey, rows)
  local list, label = {}, {}
  local function add(b, what) list[#list + 1] = b; label[#list] = what end
  for name, b in pairs(cand) do add(b, fmt("buffer '%s'", name)) end
  for i, b in pairs(scratch) do add(b, fmt("scratch buffer %d", i)) end
  local e = { list = list, label = label, guards = ledger:guards(list), inputs = {} }
  for _, spec in ipairs(t.inputs) do
    local b, slot, count = cand[spec.name], nil, false
    if not plan then
      local r = ref_in[spec.name]
      slot = ledger:digest { { b:ptr(), b:nbytes() }, { r:ptr(), r:nbytes() } }
    elseif plan.laws[spec.name] then
      local l = plan.laws[spec.name]
      slot, count = ledger:random_check(b, seeded(l.law, seed, l.index, precise), rows and rows[spec.name]), true
    elseif pkey and plan.params[spec.name].perturb then
      slot, count = ledger:perturb_check(b, plan.params[spec.name].ptr, pkey), true
    else
      local r = plan.params[spec.name]
      slot = ledger:digest { { b:ptr(), b:nbytes() }, { r.ptr, r.nbytes } }
    end
    e.inputs[#e.inputs + 1] = { name = spec.name, slot = slot, count = count }
  end
  return e
end

-- The ledger slots M.enqueue takes at most.
function M.slots(t, cand, scratch)
  local n = 2 * #t.inputs + 1
  for _ in pairs(cand) do n = n + 1 end
  for _ in pairs(scratch) do n = n + 1 end
  return n
end

-- The evidence read back (the ledger was read) -> nil or status, text
function M.read(ledger, t, e, where)
  for i = 1, #e.list do
    if ledger:u64(e.guards + i - 1) ~= 0 then
      local _, why = e.list[i]:check_guards()
      return "out_of_bounds", feedback.out_of_bounds(fmt("%s: %s", e.label[i], why or "guard zone changed"), where)
    end
  end
  for _, x in ipairs(e.inputs) do
    local moved
    if x.count then moved = ledger:u64(x.slot) > 0 else moved = ledger:u64(x.slot) ~= ledger:u64(x.slot + 1) end
    if moved then return "inputs_modified", feedback.inputs_modified(x.name, where, t.outputs[1].name) end
  end
end

-- The judge's ledger, begun for n slots.
function Judge:ledger(n)
  self.proof_ledger = self.proof_ledger or buffer.ledger()
  return self.proof_ledger:begin(n)
end

-- After a candidate call on `seed`'s inputs: the guards and its inputs proven (drawn by a
-- law — a task's init rules, a problem file's plan — they are checked against it in one
-- read; otherwise drawn again into ref_in and compared), all read back with one wait.
-- -> the buffers the reference runs on (the candidate's own inputs where checked in place,
-- else ref_in), the plan | nil, status, text
function Judge:proven_inputs(st, sym, cand, ref_in, scratch, where, seed, precise)
  local t = st.task
  local plan = self:input_plan(st, sym, cand)
  if not plan then self:pristine(t, sym, ref_in, seed) end
  local ledger = self:ledger(M.slots(t, cand, scratch))
  local e = M.enqueue(ledger, t, cand, ref_in, scratch, plan, seed, precise)
  local ok, wait_failure, wait_text = wait_status(ledger:read())
  if not ok then return nil, wait_failure, feedback.launch(wait_failure, wait_text, where) end
  local failure, failure_text = M.read(ledger, t, e, where)
  if failure then return nil, failure, failure_text end
  return plan and inputs_of(t, cand) or ref_in, plan
end

-- Whether a check record since index n0 of checks (compare_outputs' c.checks) found elements
-- never written: no reference, float64 or other, passes those (the poison compare), so the
-- float64 second opinion (Judge:exact_agrees) is not asked.
function M.unwritten_since(checks, n0)
  for i = (n0 or 0) + 1, #checks do if (checks[i].unwritten or 0) > 0 then return true end end
  return false
end

-- Compares the outputs; -> nil, or status, text, failed output name.
-- c: { where, later (feedback's "shape" | "seed" | "timed"), checks (a list the check rows
-- are appended to, or nil), shape, seed, fresh, precise (the rows' fields), result_of (optional:
-- result_of(name, got, want, opts) -> the compare's table; default compare.allclose's, a
-- batch's reads a ledger) }.
function M.compare_outputs(t, outs, ref_io, dims, c)
  for _, spec in ipairs(t.outputs) do
    local tol = t.tolerance[spec.dtype]
    local opts = { atol = tol.atol, rtol = tol.rtol, poison = true }
    local r = c.result_of and c.result_of(spec.name, outs[spec.name], ref_io[spec.name], opts)
      or compare.allclose(outs[spec.name], ref_io[spec.name], opts)
    local check = { shape = c.shape, seed = c.seed, fresh = c.fresh or nil, output = spec.name, ok = r.ok,
      mismatches = r.mismatches, n = r.n, max_abs = r.max_abs, max_rel = r.max_rel, unwritten = r.unwritten, nan = r.nan,
      inf = r.inf, precision = c.precise and r.precision or nil, rel_l2 = c.precise and r.rel_l2 or nil }
    if c.checks then c.checks[#c.checks + 1] = check end
    if not r.ok then
      check.first = r.first
      local status, text = feedback.mismatch(spec.name, r, tol, dims[spec.name] or {}, c.where, c.later)
      if c.precise and status == "mismatch" then text = text .. feedback.precision(r.rel_l2) end
      return status, text, spec.name
    end
  end
end

return M
