-- GPU: a timed call's check on a sample of a task's rows (task.check_rows, km.judge.rows).
--   * honest starters of tasks of every kind of row (an element, a softmax row, a batch's
--     matrix, rows with weights read whole, mixed dtypes, a short last line) are correct, and
--     every check after the first read a sample of rows; a task with too few rows, none;
--   * a kernel that skips 1 row in 64 once verify is over is caught, every time;
--   * a task whose declared rows are false (each output row needs every input row) gives an
--     error naming check_rows, not a verdict against an honest candidate.
local t = require "km.tap"
t.require_gpu()
local task = require "km.task"
local eval = require "km.serve.pool"
local testing = require "km.testing"

local ROOT = testing.paths()
local dir = testing.tmpdir()
local SEEDS = 2
local pool = assert(eval.pool { gpus = { tonumber(os.getenv("KM_TEST_GPU") or "0") }, timeout = 300 })

local function starter(tk) return assert(task.starter(tk)) end -- its default parameters included
local function judge(tk, cand, name)
  cand.name = name or cand.name or tk.name
  cand.params = cand.params or {}
  return pool:eval(tk, cand, { seeds = SEEDS, timing = true })
end
local function sampled_checks(v)
  local c = v.timing and v.timing.candidate
  return c and c.row_checks or 0, c and c.checked_calls or 0
end

----------------------------------------------------------------------------------------
-- the kernels: lines of any length (km_lines' bytes) in the compare, the input check and
-- km_lines_copy, the host mirroring the draw (tests/lua/seed_attack.lua's splitmix64)

local buffer = require "km.buffer"
local compare = require "km.compare"
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local attack = dofile(here .. "/../lua/seed_attack.lua")

-- the lines of `lbytes` a key draws from a buffer of `bytes`, shift s (km_util.cu's unit_at)
local function drawn_lines(key, s, lbytes, bytes)
  local nlines = (bytes + lbytes - 1) // lbytes
  local out = {}
  for blk = 0, ((nlines + (1 << s) - 1) >> s) - 1 do
    local line = (blk << s) + (attack.splitmix64(key ~ blk) & ((1 << s) - 1))
    if line >= nlines then line = blk << s end
    out[#out + 1] = line
  end
  return out
end

t.test("lines of 12 bytes (rows of 3 floats): gathered in order, scattered back, and only they compared and proven", function()
  local n, lb, key, s = 3 * 10007, 12, 0x1234567, 4 -- 10007 rows of 3 floats
  local law = { dist = "uniform", lo = -1, hi = 1, seed = 99 }
  local full = buffer.new("f32", n):random(law)
  local lines = { key = key, shift = s, bytes = lb }
  local drawn = drawn_lines(key, s, lb, n * 4)
  t.eq(buffer.lines_drawn(n * 4, lines), #drawn * lb, "no short line: 3 floats a row")
  local compact = buffer.new("f32", #drawn * 3)
  buffer.lines_copy(full, compact, lines, "gather")
  local fs, cs = full:to_string(), compact:to_string()
  local same = true
  for i, line in ipairs(drawn) do
    if cs:sub((i - 1) * lb + 1, i * lb) ~= fs:sub(line * lb + 1, (line + 1) * lb) then same = false end
  end
  t.ok(same, "the compact copy holds the drawn lines in order")
  local back = buffer.new("f32", n):zero()
  buffer.lines_copy(back, compact, lines, "scatter")
  -- the scattered lines compare equal under the same draw; the whole buffer does not
  local L = buffer.ledger():begin(2 * compare.SLOTS + 2)
  local o1 = { atol = 0, rtol = 0, lines = lines }
  local s1 = compare.enqueue(back, full, o1, L)
  local o2 = { atol = 0, rtol = 0 }
  local s2 = compare.enqueue(back, full, o2, L)
  -- the input check reads the drawn rows: intact there; one element changed in a drawn row
  -- is counted, one in a row not drawn is not
  local c1 = L:random_check(full, law, lines)
  assert(L:read())
  local r1, r2 = compare.result(back, full, o1, L, s1), compare.result(back, full, o2, L, s2)
  t.ok(r1.ok, "the drawn lines agree")
  t.eq(r1.compared, #drawn * 3)
  t.ok(not r2.ok, "the rest was not scattered")
  t.eq(L:u64(c1), 0)
  local drawn_set = {}
  for _, line in ipairs(drawn) do drawn_set[line] = true end
  local undrawn = 0
  while drawn_set[undrawn] do undrawn = undrawn + 1 end
  local patched = full:to_string()
  local function poke(str, elem) return str:sub(1, elem * 4) .. "\0\0\0\0" .. str:sub(elem * 4 + 5) end
  full:from_string(poke(patched, undrawn * 3 + 1))
  local L2 = buffer.ledger():begin(2)
  local c2 = L2:random_check(full, law, lines)
  assert(L2:read())
  t.eq(L2:u64(c2), 0, "a row not drawn is not read")
  full:from_string(poke(patched, drawn[5] * 3 + 2))
  local L3 = buffer.ledger():begin(2)
  local c3 = L3:random_check(full, law, lines)
  assert(L3:read())
  t.eq(L3:u64(c3), 1, "a drawn row is read, every element")
end)

----------------------------------------------------------------------------------------
-- the judge

t.test("honest starters: correct, every check after the first on a sample of rows", function()
  for _, name in ipairs { "l1_relu", "l1_softmax", "l1_cross_entropy", "l1_layernorm", "l2_gemm_bias_relu",
    "l2_bmm_relu", "l2_masked_softmax", "l1_matvec" } do
    local tk = assert(task.load(ROOT .. "/tasks/" .. name))
    local v = judge(tk, starter(tk))
    t.eq(v.status, "correct", name .. ": " .. tostring(v.feedback))
    local rows, checked = sampled_checks(v)
    t.ok(checked >= 2 and rows == checked - 1, ("%s: %d of %d checks on rows"):format(name, rows, checked))
  end
  -- 32 images of 51 MB: too few lines of rows to sample (km.judge.rows.ROWS_MIN), every check reads all
  local tk = assert(task.load(ROOT .. "/tasks/l1_maxpool2d"))
  local v = judge(tk, starter(tk))
  t.eq(v.status, "correct", v.feedback)
  t.eq(sampled_checks(v), 0, "l1_maxpool2d: no check on a sample of rows")
end)

t.test("a short last line of rows: 1000003 elements, 32 to a line", function()
  local d = testing.task_copy(ROOT .. "/tasks/l1_relu", dir, "relu_short", function(s)
    return (s:gsub("shapes = {[^\n]*},\n", "shapes = { { n = 1000003 }, { n = 4097 } },\n", 1))
  end)
  local tk = assert(task.load(d))
  t.eq(tk.shapes[1].n, 1000003)
  for _ = 1, 3 do
    local v = judge(tk, starter(tk))
    t.eq(v.status, "correct", v.feedback)
    local rows, checked = sampled_checks(v)
    t.ok(rows >= 1 and rows == checked - 1, rows .. " of " .. checked)
  end
end)

local SOFTMAX = assert(task.load(ROOT .. "/tasks/l1_softmax"))
local SM_SRC = [[
extern "C" __global__ void sm(const float *x, float *y, int rows, int cols, int skip) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows || (skip && r % 64 == 5)) return;
  const float *xr = x + (size_t)r * cols;
  float *yr = y + (size_t)r * cols;
  float m = -__int_as_float(0x7f800000);
  for (int c = 0; c < cols; c++) m = fmaxf(m, xr[c]);
  float s = 0;
  for (int c = 0; c < cols; c++) s += expf(xr[c] - m);
  for (int c = 0; c < cols; c++) yr[c] = expf(xr[c] - m) / s;
}]]
-- launch code that counts its calls: `timed` is 0 in verify, then 1, 2, ... (counting_launch.lua)
local counting_launch = dofile(((arg and arg[0] or ""):match("^(.*)/[^/]*$") or ".") .. "/counting_launch.lua")
local function counting(tk, body) return counting_launch(tk, { seeds = SEEDS, timing = true }, body) end

t.test("a kernel that skips 1 row in 64 on timed calls is caught", function()
  local honest = judge(SOFTMAX, { source = SM_SRC, launch = counting(SOFTMAX,
    "  k.sm{ grid = k.cdiv(s.rows, 128), block = 128 }(io.x, io.y, s.rows, s.cols, 0)") }, "sm")
  t.eq(honest.status, "correct", honest.feedback)
  t.ok(sampled_checks(honest) >= 1, "sampled")
  for i = 1, 3 do
    local v = judge(SOFTMAX, { source = SM_SRC, launch = counting(SOFTMAX,
      "  k.sm{ grid = k.cdiv(s.rows, 128), block = 128 }(io.x, io.y, s.rows, s.cols, timed > 1 and 1 or 0)") }, "sm skip")
    t.ok(v.status == "mismatch" or v.status == "unwritten", ("run %d: %s: %s"):format(i, v.status, v.feedback))
    t.ok(tostring(v.feedback):find("timed", 1, true), "at a timed call: " .. tostring(v.feedback))
  end
end)

-- the honest candidate: the task's own reference, as a candidate
local COLMEAN_LAUNCH = [[
return function(k, io, s)
  k.colmean_ref{ grid = k.cdiv(s.cols, 128), block = 128 }(io.x, io.y, s.rows, s.cols)
end]]

t.test("false rows: an error naming check_rows, not a verdict against the honest candidate", function()
  local tk = assert(task.load(ROOT .. "/tests/tasks/t_rows_colmean"))
  local v = judge(tk, { source = tk.reference.source_text, launch = COLMEAN_LAUNCH }, "colmean")
  t.eq(v.status, "error", v.feedback)
  t.ok(tostring(v.feedback):find("check_rows ('rows') does not hold", 1, true), v.feedback)
  -- with the rows' checks off, the same candidate is correct
  local off = pool:eval(tk, { name = "colmean", source = tk.reference.source_text, launch = COLMEAN_LAUNCH, params = {} },
    { seeds = SEEDS, timing = true, check_rows = false })
  t.eq(off.status, "correct", off.feedback)
  t.eq(sampled_checks(off), 0)
end)

pool:close()
t.done()
