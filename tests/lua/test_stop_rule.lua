-- The judge's stop rule (km.judge.checks: an early stop at 5 to 9 calls where the median's
-- relative error is <= target x n / 10, else the plain rule at 10 or more), simulated on the
-- CPU with the timing core's own sampler (timing.stop_at): a quiet kernel takes 5 timed calls
-- where the plain rule took 10, and the medians of 10 timings of one kernel spread no more
-- than the issue's bound (1% for kernels of 10 us or more, whose samples here are within a
-- few tenths of a percent) and little more than the plain rule's.
local t = require "km.tap"
local timing = require "km.timing"
local timed = require "km.judge.timed"
local checks = require "km.judge.checks"

local OPTS = timed.time_opts {}
local PLAIN = timed.time_opts { early_samples = checks.MIN_SAMPLES }

-- A timing's samples: 1 ms x (1 + cv x a normal draw), and now and then (p_out) a late one.
local function gauss()
  local u1, u2 = math.random(), math.random()
  return math.sqrt(-2 * math.log(1 - u1)) * math.cos(2 * math.pi * u2)
end
local function timing_of(opts, cv, p_out)
  local s = {}
  while true do
    for _ = 1, 20 do
      local x = 1 + cv * gauss()
      if math.random() < p_out then x = x + cv * (3 + 7 * math.random()) end
      s[#s + 1] = x
    end
    local n = timing.stop_at(s, opts)
    if n then
      local head = {}
      for i = 1, n do head[i] = s[i] end
      return timing.median(head), n
    end
  end
end

-- Over `rounds` of 10 timings of one kernel: the mean calls a timing took and the 95th
-- percentile of the 10 medians' spread (max / min - 1).
local function spread(opts, cv, p_out, rounds)
  local spreads, calls = {}, 0
  for r = 1, rounds do
    local lo, hi = math.huge, -math.huge
    for _ = 1, 10 do
      local m, n = timing_of(opts, cv, p_out)
      calls = calls + n
      lo, hi = math.min(lo, m), math.max(hi, m)
    end
    spreads[r] = hi / lo - 1
  end
  table.sort(spreads)
  return calls / (rounds * 10), spreads[math.ceil(0.95 * rounds)]
end

t.test("the judge's protocol has the early stop, and its key says so", function()
  t.eq(OPTS.min_samples, 10)
  t.eq(OPTS.early_samples, 5)
  t.ok(timing.protocol_key(OPTS):find(",early=5,", 1, true), timing.protocol_key(OPTS))
  t.ok(not timing.protocol_key(PLAIN):find("early", 1, true), timing.protocol_key(PLAIN))
  -- the same rule in C: quiet samples stop at 5, a noisy fifth sample does not
  t.eq(timing.stop_at({ 1, 1, 1, 1, 1, 1 }, OPTS), 5)
  t.eq(timing.stop_at({ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 }, PLAIN), 10)
  local n = timing.stop_at({ 1, 1.01, 0.99, 1.02, 0.98, 1, 1, 1, 1, 1, 1, 1 }, OPTS)
  t.ok(n and n > 5, tostring(n))
end)

t.test("a quiet kernel stops at 5 calls; the spread of 10 timings stays within 1%", function()
  math.randomseed(7)
  for _, cv in ipairs { 0.001, 0.003 } do
    local calls, p95 = spread(OPTS, cv, 0.05, 150)
    local calls_plain, p95_plain = spread(PLAIN, cv, 0.05, 150)
    t.ok(calls <= 5.6, ("cv %.3f: %.2f calls a timing"):format(cv, calls))
    t.ok(calls_plain >= 10, ("cv %.3f: the plain rule %.2f"):format(cv, calls_plain))
    t.ok(p95 <= 0.01, ("cv %.3f: spread p95 %.3f%%"):format(cv, 100 * p95))
    -- half the calls: the median's error grows by about sqrt(2) (a late sample weighs more in 5)
    t.ok(p95 <= 1.8 * p95_plain, ("cv %.3f: spread p95 %.3f%% against %.3f%%"):format(cv, 100 * p95, 100 * p95_plain))
  end
end)

t.test("a noisy kernel takes more calls and spreads about as the plain rule's", function()
  math.randomseed(11)
  local calls, p95 = spread(OPTS, 0.01, 0.05, 150)
  local calls_plain, p95_plain = spread(PLAIN, 0.01, 0.05, 150)
  t.ok(calls > 6.5 and calls < calls_plain, ("%.2f calls against %.2f"):format(calls, calls_plain))
  t.ok(p95 <= 1.35 * p95_plain, ("spread p95 %.3f%% against %.3f%%"):format(100 * p95, 100 * p95_plain))
end)

t.done()
