-- GPU: verify's CUDA reference results kept in host memory (Judge:trial_reference). The first
-- candidate's fixed trials run the task's reference and keep its outputs; a later candidate's
-- fixed trials use them instead of running it again, and they still catch a wrong kernel and
-- an input written to; each shape's last trial has inputs no candidate saw before (a fresh
-- seed) and runs the reference every time, so a kernel that knows the fixed trials' inputs
-- and writes their outputs in is caught; the byte cap holds, and a reference quicker than
-- the copies is never kept.
local t = require "km.tap"
t.require_gpu()
local task = require "km.task"
local judge_mod = require "km.judge"
local testing = require "km.testing"

local ROOT = testing.paths()
local rowsum = assert(task.load(ROOT .. "/tests/tasks/t_rowsum"))

-- Candidates are the task's own starter (an honest row sum, one block per row), changed at
-- its last line, or with a branch put in before its sum.
local STARTER = assert(task.starter(rowsum))
local LAST, HEAD = "if (threadIdx.x == 0) y[r] = part[0];", "int r = blockIdx.x;"
local edit = testing.edit
local function cand(name, extra, body)
  return { name = name, launch = STARTER.launch, params = STARTER.params, source = edit(STARTER.source, LAST,
    "if (threadIdx.x == 0) { y[r] = part[0] + " .. extra .. "; " .. (body or "") .. " }") }
end
local GOOD = cand("good", "0.f")
local ROW0 = cand("row 0 off by 0.01", "(r == 0 ? 0.01f : 0.f)")
local WRITES = cand("writes its input", "0.f", "((float *)x)[0] = 0.f;")

-- a judge whose reference runs are counted
local function counted(opts)
  local j = assert(judge_mod.new(opts))
  j.ref_runs = 0
  local run = j.run_reference
  j.run_reference = function(self, ...) self.ref_runs = self.ref_runs + 1 return run(self, ...) end
  return j
end
local TRIALS = #rowsum.shapes * 3
local FIXED = #rowsum.shapes * 2 -- each shape's last trial is fresh

t.test("the first candidate runs the reference on every trial and keeps the fixed ones; the next runs it on the fresh ones only", function()
  local j = counted()
  local v = j:eval(rowsum, GOOD, { timing = false })
  t.eq(v.status, "correct", v.feedback)
  t.eq(j.ref_runs, TRIALS + 1, "every trial and the task's set-up run (Judge:set_up_task)")
  local st = j.tasks[rowsum.dir]
  local n = 0
  for _ in pairs(st.ref_outs) do n = n + 1 end
  t.eq(n, FIXED)
  t.ok(j.ref_kept.bytes > 0 and j.ref_kept.bytes == st.ref_bytes, j.ref_kept.bytes)
  for _, c in ipairs(v.checks) do t.eq(c.fresh, c.seed == 3 or nil, "check at shape " .. c.shape .. ", seed " .. c.seed) end
  j.ref_runs = 0
  v = j:eval(rowsum, GOOD, { timing = false })
  t.eq(v.status, "correct", v.feedback)
  t.eq(j.ref_runs, TRIALS - FIXED)
  -- kept results still judge: one row wrong fails the first trial, an input written to is found
  v = j:eval(rowsum, ROW0, { timing = false })
  t.eq(v.status, "mismatch", v.feedback)
  t.eq(v.failed_at and v.failed_at.shape, 1); t.eq(v.failed_at and v.failed_at.seed, 1)
  v = j:eval(rowsum, WRITES, { timing = false })
  t.eq(v.status, "inputs_modified", v.feedback)
  t.eq(j.ref_runs, TRIALS - FIXED) -- both failed at the first trial, which was kept
  -- another seed base: other inputs, so the reference runs again
  j.ref_runs = 0
  v = j:eval(rowsum, GOOD, { timing = false, seed_base = 5000 })
  t.eq(v.status, "correct", v.feedback)
  t.eq(j.ref_runs, TRIALS)
end)

-- The attacker who printed the fixed trials' inputs and came back: at the smallest shape
-- (7 x 257) the kernel writes the outputs of the three trials it saw (told apart by their
-- first element) and zeros for anything else; every other shape it sums honestly. The tests
-- here play its first visit: the judge's own fill draws those trials' inputs.
t.test("a kernel with the fixed trials' outputs written in fails the fresh trial at that shape", function()
  local j = assert(judge_mod.new())
  local si = #rowsum.shapes
  local sym = rowsum.shapes[si]
  t.eq(sym.rows, 7); t.eq(sym.cols, 257)
  local cases = {}
  for seed = 1, 3 do
    local io, ref_in = j:trial_io(rowsum, sym, 1000 + si * 101 + seed) -- the fixed trials' seeds, as verify draws them
    local x = io.x:to_table()
    local sums = {}
    for r = 0, sym.rows - 1 do
      local acc = 0
      for c = 1, sym.cols do acc = acc + x[r * sym.cols + c] end
      sums[#sums + 1] = ("%.9g"):format(acc)
    end
    cases[#cases + 1] = ("    if (__float_as_uint(x[0]) == %uu) { const float v[] = {%s}; y[r] = v[r]; return; }")
      :format(string.unpack("<I4", string.pack("<f", x[1])), table.concat(sums, ", "))
    j.pool:put_all(io, true); j.pool:put_all(ref_in, true)
  end
  local source = edit(STARTER.source, HEAD, HEAD .. "\n  if (rows == 7 && cols == 257) {\n    if (threadIdx.x != 0) return;\n" ..
    table.concat(cases, "\n") .. "\n    y[r] = 0.f; // inputs it never saw\n    return;\n  }")
  local KNOWS = { name = "knows the fixed trials", source = source, launch = STARTER.launch, params = STARTER.params }
  -- with only the fixed trials (fresh_trial = false, the judge before this rule) it passes
  local v = j:eval(rowsum, KNOWS, { timing = false, fresh_trial = false })
  t.eq(v.status, "correct", "the attack works on fixed trials: " .. tostring(v.feedback))
  v = j:eval(rowsum, KNOWS, { timing = false })
  t.eq(v.status, "mismatch", v.feedback)
  t.eq(v.failed_at and v.failed_at.shape, si); t.eq(v.failed_at and v.failed_at.seed, 3)
  t.eq(v.failed_at and v.failed_at.fresh, true)
end)

t.test("timed checks run the reference on their own inputs: a timed evaluation after the cache is filled", function()
  local j = counted()
  t.eq(j:eval(rowsum, GOOD, { timing = false }).status, "correct")
  j.ref_runs = 0
  local v = j:eval(rowsum, GOOD, {})
  t.eq(v.status, "correct", v.feedback)
  local checked = v.timing and v.timing.candidate and v.timing.candidate.checked_calls or 0
  t.ok(checked >= 1, checked)
  t.ok(j.ref_runs >= checked, ("%d reference runs for %d checked calls"):format(j.ref_runs, checked))
end)

t.test("every timing mode judges: cold and warm (the first call is the first warm-up call), graph (a first call before the capture)", function()
  local j = assert(judge_mod.new())
  for _, mode in ipairs { "cold", "warm", "graph" } do
    local v = j:eval(rowsum, GOOD, { mode = mode, energy = false })
    t.eq(v.status, "correct", mode .. ": " .. tostring(v.feedback))
    local c = v.timing and v.timing.candidate or {}
    t.ok((c.n or 0) >= 5 and (c.checked_calls or 0) >= 1, ("%s: n=%s checked=%s"):format(mode, tostring(c.n), tostring(c.checked_calls)))
    t.ok(type(c.protocol) == "string" and c.protocol:find("mode=" .. mode .. " ", 1, true), tostring(c.protocol))
  end
end)

t.test("the byte cap holds; a reference quicker than copying its outputs is not kept", function()
  local j = counted { reference_cache_bytes = 100 }
  t.eq(j:eval(rowsum, GOOD, { timing = false }).status, "correct")
  t.ok(j.ref_kept.bytes <= 100 and j.ref_kept.bytes > 0, j.ref_kept.bytes) -- the small shapes' results only
  local saved = judge_mod.HOST_COPY_BPS
  judge_mod.HOST_COPY_BPS = 1 -- copies at a byte a second: every reference is quicker
  local k = counted()
  t.eq(k:eval(rowsum, GOOD, { timing = false }).status, "correct")
  judge_mod.HOST_COPY_BPS = saved
  t.eq(k.ref_kept.bytes, 0)
  k.ref_runs = 0
  t.eq(k:eval(rowsum, GOOD, { timing = false }).status, "correct")
  t.eq(k.ref_runs, TRIALS)
end)

t.done()
