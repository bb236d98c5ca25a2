-- GPU + torch: the fastest reference known to be right (Judge:try_fast_reference,
-- Judge:try_fast_at). A task with a naive CUDA reference and a PyTorch model (reference.py)
-- has its timed calls' checks and a fresh trial at the timed shape (an untimed evaluation's)
-- judged by PyTorch eager once eager agreed with the CUDA reference there, on the task's
-- set-up run (the timed checks: unless the CUDA reference was timed faster); the fresh trials
-- of another shape once eager agreed there on that shape's first fresh trial and ran faster;
-- the precision trial once eager passed it at the set-up (Judge:try_fast_precise); never
-- where it did not; the other fixed trials always by the task's own reference; a later
-- worker takes all of this from the task's set-up record; and a kernel wrong on inputs it
-- never saw is caught by eager as by the CUDA reference.
local t = require "km.tap"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true, cuda = true })
local task = require "km.task"
local judge_mod = require "km.judge"

local ROOT = testing.paths()
local OPTS = { energy = false, compile_mode = "off" }

-- tests/tasks/t_rowsum (a row sum, first shape 4096 x 4096; then 3 x 1000, 1 x 1, 7 x 257)
-- with a reference.py whose forward is x.sum(dim=1) followed by `tail`, and `head` (CUDA)
-- at the start of the CUDA reference's kernel
local function rowsum_with(tail, head)
  local dir = testing.tmpdir() .. "/t_rowsum"
  assert(os.execute(("cp -r '%s' '%s'"):format(ROOT .. "/tests/tasks/t_rowsum", dir)))
  if head then
    local f = assert(io.open(dir .. "/reference.cu"))
    local cu, k = f:read("a"):gsub("int r = blockIdx.x", head .. "\n  int r = blockIdx.x", 1)
    f:close()
    assert(k == 1, "t_rowsum's reference kernel")
    testing.write(dir .. "/reference.cu", cu)
  end
  local f = assert(io.open(dir .. "/task.lua"))
  local src, n = f:read("a"):gsub('launch = "reference.lua" }', 'launch = "reference.lua", pytorch = "reference.py" }')
  f:close()
  assert(n == 1, "t_rowsum's reference line")
  testing.write(dir .. "/task.lua", src)
  testing.write(dir .. "/reference.py", ([[
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.sum(dim=1)%s


rows, cols = 4096, 4096


def get_inputs():
    return [torch.rand(rows, cols) * 2 - 1]


def get_init_inputs():
    return []
]]):format(tail))
  return assert(task.load(dir))
end

local RIGHT, WRONG = rowsum_with(""), rowsum_with(" + 1")
-- eager right but slow on the GPU (a 40M-cycle spin, ~20 ms, before the sum; not on the meta
-- device the spec is built on): slower than the naive CUDA reference
local SLOW = rowsum_with(" + (torch.cuda._sleep(40000000) or 0) if x.is_cuda else x.sum(dim=1)")
-- the CUDA reference slow at the second shape set (3 x 1000: an 8M-cycle spin, ~4 ms, first),
-- eager right there; and eager wrong at that shape set only
local SPIN = "if (rows == 3) { long long t0 = clock64(); while (clock64() - t0 < 8000000LL) { } }"
local SLOW_AT2 = rowsum_with("", SPIN)
local WRONG_AT2 = rowsum_with(" + (1 if x.shape[0] == 3 else 0)", SPIN)
local STARTER = assert(task.starter(RIGHT))
local LAST = "if (threadIdx.x == 0) y[r] = part[0];"
local function cand(name, extra)
  local i = assert(STARTER.source:find(LAST, 1, true), "the starter's last line")
  return { name = name, launch = STARTER.launch, params = STARTER.params,
    source = STARTER.source:sub(1, i - 1) .. "if (threadIdx.x == 0) y[r] = part[0] + " .. extra .. ";" .. STARTER.source:sub(i + #LAST) }
end
local GOOD, ROW0 = cand("good", "0.f"), cand("row 0 off by 0.01 at the timed shape", "(r == 0 && gridDim.x == 4096 ? 0.01f : 0.f)")

-- a judge that counts its reference runs by which reference ran
local function counted()
  local j = assert(judge_mod.new())
  j.runs = { cuda = 0, torch = 0 }
  local run = j.run_reference
  j.run_reference = function(self, st, ref_in, dims, sym, which, ...)
    local k = which and which.torch and "torch" or "cuda"
    self.runs[k] = self.runs[k] + 1
    return run(self, st, ref_in, dims, sym, which, ...)
  end
  return j
end

-- A judge's first evaluation of task (a good candidate, correct) -> the judge, the verdict,
-- the task's state there
local function first_eval(task)
  local j = counted()
  local v = j:eval(task, GOOD, OPTS)
  t.eq(v.status, "correct", v.feedback)
  return j, v, j.tasks[task.dir]
end

-- Verify's rows judged by eager: fresh trials, at the timed shape or at a shape where eager
-- was found right and faster (st.fast_at), and the precision trial where eager passed it at
-- the set-up (st.fast_precise) -> how many fresh at the timed shape, at others, precision
local function fast_rows(v, st)
  local n, others, precise = 0, 0, 0
  for _, c in ipairs(v.checks) do
    if c.reference then
      t.eq(c.reference, "pytorch_eager")
      if c.precision then
        t.ok(c.shape == 1 and st and st.fast_precise, "the precision trial: eager passed it at the set-up")
        precise = precise + 1
      else
        t.ok(c.fresh and (c.shape == 1 or (st and st.fast_at[c.shape])),
          ("shape %s seed %s fresh %s"):format(c.shape, c.seed, tostring(c.fresh)))
        if c.shape == 1 then n = n + 1 else others = others + 1 end
      end
    end
  end
  return n, others, precise
end

t.test("eager agreed at the timed shape (the task's set-up run): it judges the timed checks and the precision trial", function()
  local j, v, st = first_eval(RIGHT)
  t.ok(st.fast_ref, "eager agreed on the set-up run")
  t.eq(j:check_reference(st, RIGHT.shapes[1]), st.fast_ref, "the timed checks' reference")
  -- a timed evaluation's one trial at the timed shape is the precision trial (f32 outputs), on
  -- a fixed seed: eager judges it, having passed it at the task's set-up
  t.eq(st.fast_precise, true, "eager passed the precision trial against the CUDA reference")
  t.eq(st.setup.rec.eager_precise, true, "and the set-up record says so")
  t.eq(select(3, fast_rows(v, st)), 1, "the precision trial judged by eager")
  j.runs = { cuda = 0, torch = 0 }
  v = j:eval(RIGHT, GOOD, OPTS)
  t.eq(v.status, "correct", v.feedback)
  local at1, others, precise = fast_rows(v, st)
  t.eq(at1, 0)
  t.eq(precise, 1)
  local eager_at = 0
  for si = 2, #RIGHT.shapes do if st.fast_at[si] then eager_at = eager_at + 1 end end
  t.eq(others, eager_at, "each shape with eager found faster: its fresh trial judged by eager")
  -- the CUDA reference ran for the fresh trials of the other shapes where eager is not the
  -- faster and the fixed trials whose results were not kept
  t.ok(j.runs.cuda >= #RIGHT.shapes - 1 - eager_at and j.runs.cuda <= 2 * #RIGHT.shapes + #RIGHT.shapes - 1, j.runs.cuda)
  t.eq(j.runs.torch, eager_at + 1, "no set-up run once the task is set up; eager at the shapes found faster and the precision trial; the timed checks run eager bound (Problem:bind)")
  t.note(("second evaluation: CUDA reference %d runs, PyTorch eager %d (checked timed calls: %s)"):format(j.runs.cuda,
    j.runs.torch, tostring(v.timing.candidate.checked_calls)))
end)

t.test("eager agreed but the CUDA reference was timed faster: the timed checks run the CUDA reference", function()
  local j, v, st = first_eval(SLOW)
  t.ok(st.fast_ref, "eager agreed on the set-up run")
  t.eq(j:check_reference(st, SLOW.shapes[1]), nil, "the CUDA reference, timed faster at the timed shape")
  j.runs = { cuda = 0, torch = 0 }
  v = j:eval(SLOW, GOOD, OPTS)
  t.eq(v.status, "correct", v.feedback)
  local checked = v.timing.candidate.checked_calls
  t.ok(checked >= 1)
  -- the fresh trials of the other shapes, the fixed trials not kept, and every timed check
  t.ok(j.runs.cuda >= checked + #SLOW.shapes - 1, ("CUDA reference %d runs for %d checked calls"):format(j.runs.cuda, checked))
  t.eq(j.runs.torch, 0, "eager: none (the timed shape's one trial is the precision trial, on the CUDA reference, timed faster)")
  -- where eager is the faster (RIGHT: torch's sum against the naive kernel), the checks stay with it
  local r = counted()
  t.eq(r:eval(RIGHT, GOOD, OPTS).status, "correct")
  t.eq(r:check_reference(r.tasks[RIGHT.dir], RIGHT.shapes[1]), r.tasks[RIGHT.dir].fast_ref)
end)

t.test("eager disagreed with the CUDA reference: every trial is judged by the task's reference", function()
  local j, v, st = first_eval(WRONG)
  t.eq(st.fast_ref, false)
  t.eq(st.fast_precise, false)
  for si = 2, #WRONG.shapes do t.eq(st.fast_at[si], false, "shape " .. si) end
  t.eq(select(2, fast_rows(v, st)), 0)
  v = j:eval(WRONG, GOOD, OPTS)
  t.eq(v.status, "correct", v.feedback)
  local at1, others, precise = fast_rows(v, st)
  t.eq(at1 + others + precise, 0)
end)

t.test("another shape whose CUDA reference is slow: eager judges its fresh trials where it agreed there, never where not", function()
  local j, v, st = first_eval(SLOW_AT2)
  t.ok(st.fast_at[2], "eager right and faster at 3 x 1000")
  local at1, others = fast_rows(v, st)
  t.eq(at1 + others, 0, "the first evaluation's trials: the CUDA reference (eager tried beside it)")
  j.runs = { cuda = 0, torch = 0 }
  v = j:eval(SLOW_AT2, GOOD, OPTS)
  t.eq(v.status, "correct", v.feedback)
  local n2 = 0
  for _, c in ipairs(v.checks) do
    if c.shape == 2 and c.fresh then n2 = n2 + 1 t.eq(c.reference, "pytorch_eager", "shape 2's fresh trial") end
  end
  t.eq(n2, 1)
  -- a kernel wrong at that shape only, on inputs it never saw: eager catches it there
  local ROW0_AT2 = cand("row 0 off by 0.01 at 3 x 1000", "(r == 0 && gridDim.x == 3 ? 0.01f : 0.f)")
  local bad = j:eval(SLOW_AT2, ROW0_AT2, { energy = false, compile_mode = "off", seeds = 1, timing = false })
  t.eq(bad.status, "mismatch", bad.feedback)
  t.eq(bad.failed_at and bad.failed_at.shape, 2)
  t.eq(bad.checks[#bad.checks].reference, "pytorch_eager")
  -- eager wrong at that shape: found on the first fresh trial there, never used
  local w = counted()
  t.eq(w:eval(WRONG_AT2, GOOD, OPTS).status, "correct")
  local wst = w.tasks[WRONG_AT2.dir]
  t.eq(wst.fast_at[2], false, "eager disagreed at 3 x 1000")
  v = w:eval(WRONG_AT2, GOOD, OPTS)
  t.eq(v.status, "correct", v.feedback)
  for _, c in ipairs(v.checks) do if c.shape == 2 then t.eq(c.reference, nil, "shape 2: the CUDA reference") end end
end)

t.test("a kernel wrong on the fresh trial is caught by eager there", function()
  local j = counted()
  t.eq(j:eval(RIGHT, GOOD, OPTS).status, "correct")
  -- one trial per shape, and that one fresh: shape 1's is eager's
  local v = j:eval(RIGHT, ROW0, { energy = false, compile_mode = "off", seeds = 1, timing = false })
  t.eq(v.status, "mismatch", v.feedback)
  t.eq(v.failed_at and v.failed_at.shape, 1)
  t.eq(v.failed_at and v.failed_at.fresh, true)
  t.eq(v.checks[#v.checks].reference, "pytorch_eager")
end)

t.test("a later worker finds the set-up record: nothing of the set-up runs again, eager where it was found", function()
  local j = counted()
  t.eq(j:eval(SLOW_AT2, GOOD, OPTS).status, "correct")
  j:eval(SLOW_AT2, GOOD, OPTS) -- every shape's fresh trial decided (the first evaluation's)
  local st = j.tasks[SLOW_AT2.dir]
  t.ok(st.setup and st.setup.rec.checked == true, "the record says the reference is not degenerate")
  t.eq(st.setup.rec.eager, st.fast_ref and true or false)
  t.eq(st.setup.rec.eager_at and st.setup.rec.eager_at["2"], true)
  -- a new worker's judge (same caches): its set-up runs no reference at all
  local k = counted()
  local during = 0
  local set_up = k.set_up_task
  k.set_up_task = function(self, ...)
    local before = self.runs.cuda + self.runs.torch
    local r = table.pack(set_up(self, ...))
    during = during + self.runs.cuda + self.runs.torch - before
    return table.unpack(r, 1, r.n)
  end
  local v = k:eval(SLOW_AT2, GOOD, OPTS)
  t.eq(v.status, "correct", v.feedback)
  t.eq(during, 0, "no reference run in the set-up")
  local kst = k.tasks[SLOW_AT2.dir]
  t.eq(kst.checked, true)
  t.eq(kst.fast_ref and true or false, st.fast_ref and true or false, "the timed checks' reference as found before")
  t.ok(kst.fast_at[2], "eager at 3 x 1000 from the record")
  local n2 = 0
  for _, c in ipairs(v.checks) do
    if c.shape == 2 and c.fresh then n2 = n2 + 1 t.eq(c.reference, "pytorch_eager", "the new worker's first fresh trial there") end
  end
  t.eq(n2, 1)
end)

t.done()
