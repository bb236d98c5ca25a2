-- km.task.lint.run — one lint of one task: its state (ls, made by new_lint), the stages of
-- M.run (open, lint_shape at each shape set, time_reference, conclude) and M.run itself.
--
-- State: ls, one lint's record, made per call of M.run by new_lint (each field a one-line
-- comment there) and dropped after; ls.res is the result M.run returns. Adds M.run to
-- km.task.lint's table.
local M = require "km.task.lint.reasons"
require "km.task.lint.backends" -- M.backend: M.run's backend unless the caller names one
local sizes = require "km.task.lint.sizes"
local rules = require "km.task.lint.rules"
local out_of_memory, numel_of = sizes.out_of_memory, sizes.numel_of
local check_output, sample_estimate = rules.check_output, rules.sample_estimate
local closed_form, rows_check, decide = rules.closed_form, rules.rows_check, rules.decide

local fmt, concat = string.format, table.concat
local ipairs, pairs, tostring = ipairs, pairs, tostring

-- flag(reason, si, output, detail): adds a flag to res.flags (marked held-out at that shape).
local function flagger(res)
  return function(reason, si, output, detail)
    res.flags[#res.flags + 1] = { reason = reason, shape = si, heldout = (si ~= nil and res.heldout == si) or nil,
      output = output, detail = detail }
  end
end

-- The outputs under MIN_ELEMENTS at every shape set of t (a loss, a statistic): output name -> true.
local function small_outputs(t)
  local small = {}
  for _, o in ipairs(t.outputs) do
    small[o.name] = true
    for _, sym in ipairs(t.shapes) do if numel_of(o, sym) >= M.MIN_ELEMENTS then small[o.name] = nil end end
  end
  return small
end

-- One lint's state, passed to the stages of M.run as ls (as lstrlib.c passes MatchState).
local function new_lint(t, B)
  local res = { task = t.name, path = t.path or t.dir, precision = t.reference.precision or "fp32",
    level = t.level, where = B.where, device = B.device, flags = {}, unchecked = {}, shapes = #t.shapes,
    heldout = t.heldout and t.heldout.shape or nil, version = M.VERSION, notes = {} }
  return {
    t = t,                -- the task
    B = B,                -- the backend
    s = nil,              -- the backend's session for t, once open
    res = res,            -- the result M.run returns
    flag = flagger(res),  -- flag(reason, si, output, detail) into res.flags
    judged = {},          -- shapes the trivial candidates were judged on
    estimated = {},       -- shapes the sample estimate was made at
    closed = {},          -- shapes the closed form was checked at (the timed shape, or none)
    ran = {},             -- shapes the reference ran at
    small = small_outputs(t), -- outputs under MIN_ELEMENTS at every shape set: judged at every size
  }
end

-- Says why the reference did not open (why, code: B.open's) in ls.res.
local function open_failed(ls, why, code)
  local res = ls.res
  -- what the machine lacks (PyTorch, a GPU) and out of memory (the device was busy) say
  -- nothing about the task; anything else is the reference failing to load or run as
  -- written (at this precision: an LSTM whose forward makes an fp32 h0 cannot run at fp16)
  if M.MACHINE[code] then
    res.machine = { code = code, why = tostring(why) }
    res.unchecked[#res.unchecked + 1] = "the reference: " .. M.MACHINE[code]
  elseif out_of_memory(why) then
    res.unchecked[#res.unchecked + 1] = "the reference: " .. tostring(why)
  else
    ls.flag("reference_error", nil, nil, tostring(why))
  end
end

-- Lints shape set si: the reference on seed 1 twice and seed 2 once, each output checked,
-- then the sample estimate, (at the timed shape) the closed form, and a declared check_rows.
local function lint_shape(ls, si, sym)
  local B, s, t, res = ls.B, ls.s, ls.t, ls.res
  local label = (res.heldout == si) and fmt("shape %d (held-out)", si) or fmt("shape %d", si)
  local a, aerr, acode = B.run(s, sym, M.SEEDS[1])
  if not a then
    -- out of memory: unchecked, as where the reference would not open (open_failed)
    if acode == "SKIP" or out_of_memory(aerr) then
      res.unchecked[#res.unchecked + 1] = label .. ": " .. tostring(aerr)
    else ls.flag("reference_error", si, nil, aerr) end
    return
  end
  ls.ran[si] = true
  local a2 = B.run(s, sym, M.SEEDS[1])
  local b = B.run(s, sym, M.SEEDS[2])
  local sh = { si = si, sym = sym, a = a, a2 = a2, b = b } -- the shape set and its three runs
  for _, o in ipairs(t.outputs) do check_output(ls, sh, o) end
  if a2 then B.release(s, a2) end
  if b and sample_estimate(B, s, t, sym, si, { a, b }, ls.flag, res, label) then ls.estimated[si] = true end
  if b and si == 1 and closed_form(B, s, t, sym, { a, b }, ls.flag, res) then ls.closed[si] = true end
  if b then B.release(s, b) end
  rows_check(B, s, t, sym, si, a, ls.flag, res, label) -- last: it tiles a's outputs in place
  B.release(s, a)
end

-- Times the reference at the timed shape, as the judge does; flags too_short.
local function time_reference(ls)
  local res = ls.res
  local ms, floor = ls.B.time(ls.s, ls.t.shapes[1])
  if not ms then res.unchecked[#res.unchecked + 1] = "timing: " .. tostring(floor)
  else
    res.reference_ms, res.floor_ms = ms, floor
    local limit = math.max(M.TOO_SHORT_MS, 4 * (floor or 0))
    if ms < limit then ls.flag("too_short", 1, nil, fmt("median %.4f ms < %.4f ms", ms, limit)) end
  end
end

-- Closes the session and decides which flags stand: the timed shape decides (M.AT_TIMED);
-- where it did not run here, M.EVERY_SHAPE's rule, with notes saying so.
local function conclude(ls)
  local res, t, judged = ls.res, ls.t, ls.judged
  local lost = ls.B.close(ls.s)
  if lost then res.unchecked[#res.unchecked + 1] = lost; res.context_lost = true end
  if not ls.ran[1] and next(judged) then
    local list = {}
    for si in pairs(judged) do list[#list + 1] = si end
    table.sort(list)
    res.notes[#res.notes + 1] = fmt("the timed shape did not run here: trivial candidates flag only where they hold at every shape judged (%s), the sample estimate at any shape", concat(list, ", "))
  end
  if not ls.ran[1] then
    for _, o in ipairs(t.outputs) do
      local n = numel_of(o, t.shapes[1])
      if n > 0 and n < M.MIN_ELEMENTS then
        res.unchecked[#res.unchecked + 1] = fmt("closed form (%s): it is decided at the timed shape, which did not run here", o.name)
      end
    end
  end
  local tried = { sample_estimate = ls.estimated, closed_form = ls.closed }
  for r in pairs(M.EVERY_SHAPE) do tried[r] = judged end
  res.flags = decide(res.flags, tried, judged, res.notes)
end

-- Lints one task (at the precision it was loaded at) with backend B. -> result:
-- { task, path, precision, level, where, device, flags, unchecked, shapes, reference_ms }
function M.run(t, opts)
  opts = opts or {}
  local B = opts.backend or M.backend()
  local ls = new_lint(t, B)
  local s, why, code = B.open(t)
  if not s then
    open_failed(ls, why, code)
    return ls.res
  end
  ls.s = s
  for si, sym in ipairs(t.shapes) do lint_shape(ls, si, sym) end
  time_reference(ls)
  conclude(ls)
  return ls.res
end

return M
