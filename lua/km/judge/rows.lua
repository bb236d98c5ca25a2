-- km.judge.rows — a timed call's check on a sample of a task's rows (task.check_rows).
--
-- A task that declares check_rows = "rows" says the reference computes row i of every
-- output from row i of the inputs that begin with that symbol (and the whole of the others:
-- weights, biases), so a check may read a sample of the rows instead of all of them: the
-- inputs' sampled rows proven (each element against the law it was drawn by), copied out
-- into compact buffers, the reference run on those alone at a shape with as many rows, its
-- outputs copied back into their rows of full-size buffers, and those rows of the
-- candidate's outputs compared. The rows are drawn after the call was enqueued, as the
-- compare's lines are (km.judge.checks' check_lines): one line of rows in each block of 2^s
-- lines (a line: one row, or enough consecutive rows for 128 bytes of the widest row),
-- at least ROWS_MIN lines a check, else every row (the ordinary check). Inputs without
-- the symbol are proven in full, as the reference reads all of them.
--
-- What it promises: every input the reference reads is proven; each checked call's sampled
-- rows are compared in full. A kernel wrong on a fraction w of the lines escapes one check
-- with probability about (1 - w)^L (L the lines read, at least ROWS_MIN = 512): wrong on 1%
-- of them on the three calls that move a median of five, about 2e-7. A mismatch is
-- confirmed against the reference on every row (Judge:rows_confirm): a task whose reference
-- is not row by row, as declared, gives an error, not a verdict against the candidate.
--
-- Owns, on a timing (km.judge.timed's record): tm.rows (the plan, and the shapes at a count
-- of rows on it) and tm.rows_run (the PyTorch reference taking the rows' shape). The plan and
-- the draw are arithmetic on the task's shapes (tests/lua/test_check_rows.lua, no GPU); the
-- copies and the compact buffers go through km.buffer and the judge's pool.
local buffer = require "km.buffer"
local evidence = require "km.judge.evidence"
local task_mod = require "km.task"
local DTYPE_BYTES = require("km.task.shape").DTYPE_BYTES

local ipairs, pairs = ipairs, pairs

local M = {}
local Judge = {}
M.methods = Judge

M.ROWS_MIN = 512   -- the least lines of rows a sampled check reads
M.LINE_BYTES = 128 -- a line holds enough rows for this many bytes of the widest row

-- The row plan of task t at shape sym (dims: name -> dims), for a check that reads one line
-- in 2^shift: { symbol, rows, per_line, shift, split = { name -> line bytes }, dims } | nil
-- (no check_rows, or too few rows to sample: the ordinary check reads them all)
function M.plan(t, sym, dims, shift)
  local r = t.check_rows
  if not r or t.pytorch or shift <= 0 then return nil end
  local rows = sym[r]
  if not rows or rows < 1 then return nil end
  local row_bytes, widest = {}, 0
  for _, field in ipairs { "inputs", "outputs" } do
    for _, spec in ipairs(t[field]) do
      if spec.shape[1] == r then
        local b = task_mod.numel(dims[spec.name]) // rows * DTYPE_BYTES[spec.dtype]
        if b == 0 then return nil end
        row_bytes[spec.name] = b
        widest = math.max(widest, b)
      end
    end
  end
  local per_line = (M.LINE_BYTES + widest - 1) // widest
  local nlines = (rows + per_line - 1) // per_line
  while shift > 0 and (nlines + (1 << shift) - 1) >> shift < M.ROWS_MIN do shift = shift - 1 end
  if shift == 0 then return nil end
  local split = {}
  for name, b in pairs(row_bytes) do split[name] = b * per_line end
  return { symbol = r, rows = rows, per_line = per_line, shift = shift, split = split, row_bytes = row_bytes, dims = dims }
end

-- A draw of the plan's rows from key -> { lines = name -> km.buffer's lines table, rows = the
-- rows drawn, sym = the shape with that many rows, dims = name -> dims there }
-- (The shape and dims at a count of rows are kept on the plan: a draw has one of two counts,
-- with or without the short last line.)
function M.draw(p, t, sym, key)
  local d = { lines = {} }
  local name
  for n, lb in pairs(p.split) do d.lines[n] = { key = key, shift = p.shift, bytes = lb }; name = name or n end
  d.rows = buffer.lines_drawn(p.rows * p.row_bytes[name], d.lines[name]) // p.row_bytes[name]
  p.at = p.at or {}
  local at = p.at[d.rows]
  if not at then
    at = { sym = {}, dims = {} }
    for k, v in pairs(sym) do at.sym[k] = v end
    at.sym[p.symbol] = d.rows
    for _, field in ipairs { "inputs", "outputs" } do
      for _, spec in ipairs(t[field]) do at.dims[spec.name] = task_mod.shape_of(spec, at.sym) end
    end
    p.at[d.rows] = at
  end
  d.sym, d.dims = at.sym, at.dims
  return d
end

-- The reference a row check runs: the timing's (a PyTorch model taking the rows' shape:
-- Problem:forward's rows) or the task's CUDA reference, which takes any shape.
local function rows_run(self, tm)
  local which = tm.fast or tm.st.ref
  if not which.torch then return which end
  tm.rows_run = tm.rows_run or setmetatable({ rows = true }, { __index = which })
  return tm.rows_run
end

-- A sampled check's reference, enqueued behind the call (no wait): the drawn rows of the
-- inputs that have them copied out of the candidate's buffers (proven by the batch's
-- evidence, enqueued before), the others as they are, the reference on those, its outputs
-- copied back into the same rows of full-size buffers. compact: a list the compact buffers
-- are appended to (the caller hands them back to the pool after the wait).
-- -> ref_io (full-size outputs) | nil, status, message
function Judge:rows_reference(tm, d, compact)
  local t = tm.t
  local io = {}
  for _, spec in ipairs(t.inputs) do
    local l = d.lines[spec.name]
    if l then
      local c = self.pool:get(spec.dtype, d.dims[spec.name])
      compact[#compact + 1] = c
      buffer.lines_copy(tm.cand[spec.name], c, l, "gather")
      io[spec.name] = c
    else
      io[spec.name] = tm.cand[spec.name]
    end
  end
  local out, status, text = self:run_reference(tm.st, io, d.dims, d.sym, rows_run(self, tm), true, true)
  if not out then return nil, status, text end
  local ref_io = {}
  for _, spec in ipairs(t.outputs) do
    compact[#compact + 1] = out[spec.name]
    local full = self.pool:get(spec.dtype, tm.dims[spec.name])
    buffer.lines_copy(full, out[spec.name], d.lines[spec.name], "scatter")
    ref_io[spec.name] = full
  end
  return ref_io
end

-- After a sampled check found a mismatch: the call's inputs drawn again from its seed into
-- ref_in, the reference on every row, every element of the outputs compared (waits). ->
-- true where the candidate's outputs agree with it: the task's rows are not what it declares
-- (its reference on a sample of rows differs from its reference on all of them).
function Judge:rows_confirm(tm, judged)
  local t = tm.t
  self:fill_inputs(t, tm.sym, tm.ref_in, tm.cur_seed, true)
  local io = self:run_reference(tm.st, tm.ref_in, tm.dims, tm.sym, tm.fast or tm.st.ref)
  if not io then return false end
  local mismatch = evidence.compare_outputs(t, judged, io, tm.dims, { where = "", later = "timed" })
  for _, spec in ipairs(t.outputs) do self.pool:put(io[spec.name]) end
  return mismatch == nil
end

return M
