-- km.judge.rows on the CPU: a task's check_rows declaration validated, and the plan and draw
-- of a sampled check (how many rows, which lines, the shape the reference runs at) for the
-- shapes of the suite's tasks. The GPU side (the rows' proofs, copies, reference and
-- compare, a cheat on some rows caught) is tests/gpu/test_check_rows.lua.
local t = require "km.tap"
local testing = require "km.testing"
local task = require "km.task"
local buffer = require "km.buffer"
local rows = require "km.judge.rows"

local ROOT = testing.paths()
local dir = testing.tmpdir()

local function refused(from, name, edit, want)
  local d = testing.task_copy(ROOT .. "/tasks/" .. from, dir, name, edit)
  local tk, err, code = task.load(d)
  t.eq(tk, nil, name)
  t.eq(code, "TASK_INVALID", name)
  t.ok(err and err:find(want, 1, true), name .. ": " .. tostring(err))
end

t.test("check_rows: a symbol of every shape set, the first dimension of every output and of an input, and nowhere else", function()
  refused("l1_relu", "rows_unbound", function(s) return (s:gsub('check_rows = "n"', 'check_rows = "q"')) end,
    "check_rows: 'q' is not bound by shapes[1]")
  refused("l1_relu", "rows_number", function(s) return (s:gsub('check_rows = "n"', 'check_rows = 3')) end,
    "check_rows: must be a shape symbol")
  refused("l1_matvec", "rows_inner", function(s) return (s:gsub('check_rows = "m"', 'check_rows = "n"')) end,
    "inputs[1].shape: uses check_rows' 'n' other than as its first dimension")
  refused("l1_relu", "rows_expr", function(s) return (s:gsub('shape = { "n" }, init', 'shape = { "n + 0" }, init')) end,
    "inputs[1].shape: uses check_rows' 'n' other than as its first dimension")
  refused("l1_relu", "rows_output", function(s)
    return (s:gsub('outputs = { { name = "y", dtype = "f32", shape = { "n" } } }', 'outputs = { { name = "y", dtype = "f32", shape = { 4 } } }'))
  end, "outputs[1].shape: must begin with check_rows' 'n'")
  refused("l1_relu", "rows_no_input", function(s) return (s:gsub('shape = { "n" }, init', 'shape = { 4096 }, init')) end,
    "check_rows: no input begins with 'n'")
  local ok = assert(task.load(ROOT .. "/tasks/l1_layernorm"))
  t.eq(ok.check_rows, "rows")
end)

-- the plan of a loaded task at a shape, as km.judge.timed makes it (shift: check_lines' log2)
local function plan_of(name, sym, shift)
  local tk = assert(task.load(ROOT .. "/tasks/" .. name))
  sym = sym or tk.shapes[1]
  local dims = {}
  for _, f in ipairs { "inputs", "outputs" } do
    for _, spec in ipairs(tk[f]) do dims[spec.name] = task.shape_of(spec, sym) end
  end
  return rows.plan(tk, sym, dims, shift or 4), tk, sym
end

t.test("the plan: a line of rows holds 128 bytes of the widest row, one line in 16 read, at least ROWS_MIN lines", function()
  local p = plan_of("l1_softmax") -- 65536 rows of 4 KiB
  t.eq(p.per_line, 1)
  t.eq(p.shift, 4)
  t.eq(p.split.x, 4096)
  t.eq(p.split.y, 4096)
  p = plan_of("l1_relu") -- 2^28 elements of 4 bytes: 32 to a line
  t.eq(p.per_line, 32)
  t.eq(p.split.x, 128)
  p = plan_of("l1_cross_entropy") -- logits 32 KiB a row, targets 4 bytes, loss 4 bytes
  t.eq(p.per_line, 1)
  t.eq(p.split.logits, 8192 * 4)
  t.eq(p.split.target, 4)
  t.eq(p.split.loss, 4)
  t.eq(p.shift, 4)
  p = plan_of("l2_gemm_bias_relu") -- 2048 rows: one in 4 keeps 512 lines
  t.eq(p.shift, 2)
  t.eq(p.split.w, nil, "w has no rows: read whole")
  t.eq(p.split.bias, nil)
  t.eq(plan_of("l1_sum_dim"), nil, "32 rows: every row")
  t.eq(plan_of("l1_softmax", nil, 0), nil, "check_lines = 1: every row")
  t.eq(plan_of("l1_matmul_square"), nil, "no check_rows")
end)

t.test("a draw: the same rows of every buffer, the shape the reference runs at, a short last line", function()
  local p, tk, sym = plan_of("l1_softmax")
  local d = rows.draw(p, tk, sym, 12345)
  t.eq(d.rows, 65536 // 16)
  t.eq(d.sym.rows, 4096)
  t.eq(d.sym.cols, 1024)
  t.eq(d.dims.x[1], 4096)
  t.eq(d.dims.y[2], 1024)
  t.eq(d.lines.x.key, 12345)
  t.eq(d.lines.x.bytes, 4096)
  -- 1000003 elements: 31251 lines of 32, the last of 3; 1954 blocks of 16
  p, tk, sym = plan_of("l1_relu", { n = 1000003 })
  local short, whole = 0, 0
  for key = 1, 400 do
    d = rows.draw(p, tk, sym, key * 7919)
    t.ok(d.rows == 1953 * 32 + 3 or d.rows == 1954 * 32, d.rows)
    if d.rows == 1953 * 32 + 3 then short = short + 1 else whole = whole + 1 end
    t.eq(buffer.lines_drawn(1000003 * 4, d.lines.y), d.rows * 4)
  end
  -- the last block holds lines 31248..31250, its draw one of 16 offsets, past the end
  -- its first line: the short line is drawn 1 time in 16
  t.ok(short > 5 and short < 60 and whole > 300, short .. " short, " .. whole .. " whole")
end)

t.done()
