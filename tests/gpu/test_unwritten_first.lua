-- GPU: an evaluation's first verify trial looks at the candidate's outputs alone before the
-- reference runs (km.judge.verify, unwritten_first): a kernel that leaves output elements
-- unwritten is a mismatch that says how many and where, with no reference run; a kernel that
-- writes wrong values still meets the reference (its feedback holds the reference's values),
-- and a correct one is correct. The reference's runs are counted through the task's loaded
-- model (a problem file in KernelBench's form).
local t = require "km.tap"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true })
local task = require "km.task"

local DIR = testing.tmpdir()
local PROB = testing.problem(DIR, "relu_unwritten", { sizes = "batch_size = 64\ndim = 4096" })

local RELU = testing.relu_candidate()
local function variant(name, body)
  return { name = name, source = RELU.source:gsub("if %(i < n%) y%[i%] = fmaxf%(x%[i%], 0%.f%);", body), launch = RELU.launch }
end
-- the first 100 elements left as they were (the poison verify filled them with)
local PARTIAL = variant("relu, the first 100 unwritten", "if (i >= 100 && i < n) y[i] = fmaxf(x[i], 0.f);")
local NOTHING = variant("writes nothing", "(void)i; (void)x; (void)y;")
local WRONG = variant("relu + 1", "if (i < n) y[i] = fmaxf(x[i], 0.f) + 1.f;")

local judge = assert(require("km.judge").new())
local lt = assert(task.load(PROB))

-- the reference's runs while f runs (Problem:forward, through the task state's model)
local function forwards(f)
  local st = assert(judge.tasks[lt.dir], "the task is loaded")
  local calls, orig = 0, st.prob.forward
  st.prob.forward = function(...) calls = calls + 1 return orig(...) end
  local ok, v = pcall(f)
  st.prob.forward = nil
  assert(ok, v)
  return v, calls
end

t.test("a correct kernel is correct (the task set up; the outputs read once before the reference)", function()
  local v = judge:eval(lt, RELU, { seeds = 3, timing = false })
  t.eq(v.status, "correct", v.feedback)
  v = forwards(function() return judge:eval(lt, RELU, { seeds = 3, timing = false }) end)
  t.eq(v.status, "correct", v.feedback)
end)

t.test("outputs partly unwritten: a mismatch naming how many and where, no reference run", function()
  local v, calls = forwards(function() return judge:eval(lt, PARTIAL, { seeds = 3, timing = false }) end)
  t.eq(v.status, "mismatch", v.feedback)
  t.eq(calls, 0, "reference runs")
  local fb = tostring(v.feedback)
  t.ok(fb:find("100 of %d+ elements of 'out' were never written"), fb)
  t.ok(fb:find("flat 0%)"), "the first unwritten element's place: " .. fb)
  t.ok(fb:find("not computed", 1, true), fb)
  local c = v.checks[#v.checks]
  t.eq(c.unwritten, 100)
  t.eq(c.reference, "none")
  t.eq(c.ok, false)
end)

t.test("outputs never written at all: every element counted, no reference run", function()
  local v, calls = forwards(function() return judge:eval(lt, NOTHING, { seeds = 1, timing = false }) end)
  t.eq(v.status, "mismatch", v.feedback)
  t.eq(calls, 0, "reference runs")
  local c = v.checks[#v.checks]
  t.eq(c.n, 64 * 4096, "the timed shape's output (one seed, untimed: that shape first)")
  t.eq(c.unwritten, c.n, "all of the trial's elements")
end)

t.test("wrong values still meet the reference: its values in the feedback", function()
  local v, calls = forwards(function() return judge:eval(lt, WRONG, { seeds = 3, timing = false }) end)
  t.eq(v.status, "mismatch", v.feedback)
  t.ok(calls >= 1, "reference runs: " .. calls)
  local fb = tostring(v.feedback)
  t.ok(fb:find("differs from the reference", 1, true) and not fb:find("not computed", 1, true), fb)
end)

t.done()
