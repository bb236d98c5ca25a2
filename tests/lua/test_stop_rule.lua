-- The judge's stop rules (km.judge.checks), simulated on the CPU with the timing core's own
-- sampler (timing.stop_at): the default "gini" rule (a noise stop from 5 calls where the
-- median's relative standard error, from the trimmed Gini mean difference and inflated by
-- 1 + 1/sqrt(n), is <= 0.2%, or the interval rule's test) against the "interval" rule alone (KM_STOP_RULE=interval:
-- the IQR's error <= 0.5% x n / 10 from 5 calls, <= 0.5% from 10, and the median's
-- order-statistic interval within +-0.25%). Calls vary by cv (normal), and with 5% of them
-- late by 3 to 10 x cv; the noise model is calibrated on the GPU suite's test_timing_spread
-- (10 judged evaluations of one kernel on an H200 under the IQR rule without the interval:
-- l1_softmax, calls about 0.8% apart, stopped at 5 to 10 calls and its medians spread 1.95%).
-- Issue 44's bound: the medians of 10 timings of one kernel within 1% of each other (here the
-- 95th percentile of that spread over many sets of 10), at fewer calls than the interval rule
-- took. A rule that stops too early breaks the bound; one that stops too late breaks the
-- call counts (each cv has a ceiling a little above the rule's simulated count).
local t = require "km.tap"
local timing = require "km.timing"
local timed = require "km.judge.timed"
local checks = require "km.judge.checks"
local testing = require "km.testing"

local OPTS = timed.time_opts {}
local OLD = timed.time_opts(checks.STOP_RULES.interval)
local IQR_ONLY = timed.time_opts { noise = "iqr", min_samples = 10, early_samples = 5, target = 0.005, ci_target = 0, stop_alt = false }
local GINI_ONLY = timed.time_opts(checks.STOP_RULES.gini_only)

local function gauss()
  local u1, u2 = math.random(), math.random()
  return math.sqrt(-2 * math.log(1 - u1)) * math.cos(2 * math.pi * u2)
end

-- One timing under opts: 1 ms x (1 + cv x a normal draw), and now and then (p_out) a late
-- one -> its median, calls, and the rule's own error at the stop (rel_noise).
local function timing_of(opts, cv, p_out)
  local s, want = {}, 40
  while true do
    while #s < want do
      local x = 1 + cv * gauss()
      if math.random() < p_out then x = x + cv * (3 + 7 * math.random()) end
      s[#s + 1] = x
    end
    local n = timing.stop_at(s, opts)
    if n then
      local head = {}
      for i = 1, n do head[i] = s[i] end
      return timing.median(head), n, timing.rel_noise(head, opts.noise)
    end
    want = opts.max_samples or 300
  end
end

-- Over `rounds` sets of 10 timings of one kernel: the mean calls a timing took, the 95th
-- percentile of the 10 medians' spread (max / min - 1), and the share of timings whose 95%
-- interval (median x (1 -+ 1.96 x rel_noise), as a verdict's ci_low, ci_high) holds the true
-- median, 1 without late calls (p_out = 0).
local function spread(opts, cv, p_out, rounds)
  local spreads, calls, held = {}, 0, 0
  for r = 1, rounds do
    local lo, hi = math.huge, -math.huge
    for _ = 1, 10 do
      local m, n, noise = timing_of(opts, cv, p_out)
      calls = calls + n
      if math.abs(m - 1) <= 1.96 * noise * m then held = held + 1 end
      lo, hi = math.min(lo, m), math.max(hi, m)
    end
    spreads[r] = hi / lo - 1
  end
  table.sort(spreads)
  return calls / (rounds * 10), spreads[math.ceil(0.95 * rounds)], held / (rounds * 10)
end

t.test("the judge's protocol is the gini rule from 5 calls, and its key says so", function()
  t.eq(checks.STOP_RULE, "gini")
  t.eq(OPTS.noise, "gini")
  t.eq(OPTS.min_samples, 5)
  t.eq(OPTS.target, 0.002)
  t.eq(OPTS.ci_target, 0)
  local key = timing.protocol_key(OPTS)
  -- with the interval rule as its second test (either stops)
  t.ok(key:find(" stop=gini<=0.002,n=5..300|noise<=0.005,n>=10,early=5,ci<=0.0025,median>=0.1ms,min_ms=0,", 1, true), key)
  t.ok(timing.protocol_key(GINI_ONLY):find(" stop=gini<=0.0021,n=5..300,min_ms=0,", 1, true), timing.protocol_key(GINI_ONLY))
  -- the interval rule keeps the key its cached timings were stored under
  t.ok(timing.protocol_key(OLD):find(" stop=noise<=0.005,n=10..300,early=5,ci<=0.0025,min_ms=0,", 1, true),
    timing.protocol_key(OLD))
  -- the same rule in C: quiet samples stop at 5; one of five 2% away holds it, though the
  -- quartiles agree (the IQR's error 0: the IQR alone stops there)
  t.eq(timing.stop_at({ 1, 1, 1, 1, 1, 1 }, OPTS), 5)
  local few = { 1, 1, 1.02, 1, 1, 1, 1.001, 0.999, 1, 1, 1, 1, 1, 1, 1, 1 }
  t.eq(timing.stop_at(few, IQR_ONLY), 5)
  local n = timing.stop_at(few, OPTS)
  t.ok(n and n > 5, tostring(n))
  -- an error of 1.2533 x sigma / sqrt(n) x (1 + 1/sqrt(n)): five samples 1 +- 0.1%, 0, 0
  -- (sigma from the Gini mean difference 0.08% x sqrt(pi) / 2) stop; 1 +- 0.4% do not
  t.eq(timing.stop_at({ 0.999, 1, 1, 1, 1.001 }, OPTS), 5)
  t.eq(timing.stop_at({ 0.996, 1, 1, 1, 1.004 }, OPTS), nil)
  t.raises(function() timing.stop_at({ 1 }, { noise = "mad" }) end, "unknown noise 'mad'")
end)

t.test("KM_STOP_RULE=interval in a worker's environment gives the interval rule", function()
  local _, kmrun = testing.paths()
  local code = [[local c = require 'km.judge.checks'; local k = require('km.timing').protocol_key(require('km.judge.timed').time_opts {}); io.write(c.STOP_RULE, ' ', c.MIN_SAMPLES, ' ', k)]]
  local out = testing.sh("echo \"" .. code .. "\" | KM_STOP_RULE=interval " .. kmrun)
  t.ok(out:find("^interval 10 .* stop=noise<=0.005,n=10..300,early=5,ci<=0.0025,"), out)
  out = testing.sh("echo \"" .. code .. "\" | KM_STOP_RULE=gini_only " .. kmrun)
  t.ok(out:find("^gini_only 5 .* stop=gini<=0.0021,n=5..300,min_ms=0,"), out)
  out = testing.sh("echo \"" .. code .. "\" | KM_STOP_RULE=iqr " .. kmrun)
  t.ok(out:find("KM_STOP_RULE: \"gini\", \"gini_only\" or \"interval\" expected, got \"iqr\"", 1, true), out)
end)

-- The before and after table (docs/eval.md, checks.lua): calls a timing takes and the 95th
-- percentile of 10 medians' spread, per cv, without and with late calls. Ceilings: the gini
-- rule's simulated count and about 15% more. STOP_RULE_ROUNDS=N in the environment: N sets of
-- 10 at every cv (docs/eval.md's table: 2000), for a finer table.
local CASES = {
  { cv = 0.001, rounds = 400, ceil = { 5.5, 6.1 } },
  { cv = 0.002, rounds = 400, ceil = { 6.1, 7.5 } },
  { cv = 0.003, rounds = 400, ceil = { 7.9, 9.8 } },
  { cv = 0.005, rounds = 400, ceil = { 15.4, 18.6 } },
  { cv = 0.008, rounds = 400, ceil = { 34.4, 40.7 } },
  { cv = 0.012, rounds = 300, ceil = { 73, 85 } },
  { cv = 0.02, rounds = 200, ceil = { 189, 220 } },
}

t.test("the gini rule (either test stopping): 10 timings within 1% (p95) at cv 0.1% to 2%, at fewer calls than the interval rule", function()
  math.randomseed(44)
  t.diag("cv     | late | gini: calls  p95 spread  interval held | interval rule: calls  p95 spread")
  local rounds = math.tointeger(tonumber(os.getenv("STOP_RULE_ROUNDS") or ""))
  for _, c in ipairs(CASES) do
    for i, p_out in ipairs { 0, 0.05 } do
      local calls, p95, held = spread(OPTS, c.cv, p_out, rounds or c.rounds)
      local calls_old, p95_old = spread(OLD, c.cv, p_out, rounds or c.rounds)
      t.diag(("%.1f%%   | %s   | %6.1f  %.3f%%  %s | %6.1f  %.3f%%"):format(100 * c.cv, p_out > 0 and "5%" or "no",
        calls, 100 * p95, p_out == 0 and ("%.1f%%"):format(100 * held) or "  -  ", calls_old, 100 * p95_old))
      local what = ("cv %.1f%%%s"):format(100 * c.cv, p_out > 0 and ", 5% late" or "")
      t.ok(p95 <= 0.01, ("%s: spread p95 %.3f%%"):format(what, 100 * p95))
      t.ok(calls <= c.ceil[i], ("%s: %.2f calls a timing (ceiling %.1f)"):format(what, calls, c.ceil[i]))
      -- both take the least, 5, where every call agrees
      t.ok(calls < calls_old or calls < 5.05, ("%s: %.2f calls against the interval rule's %.2f"):format(what, calls, calls_old))
      if p_out == 0 then t.ok(held >= 0.95, ("%s: the 95%% interval held the median in %.1f%%"):format(what, 100 * held)) end
    end
  end
end)

-- A tight core with a minority of late calls (the headline's slower softmax and layernorm
-- variants: 70 to 280 calls under the gini statistic alone, which reads every pair of the
-- middle samples, and 10 to 40 under the interval rule): the judge's rule stops where either would.
t.test("a tight core with 30% of calls late: the rule takes the interval rule's calls, not gini's alone, within 1%", function()
  math.randomseed(7)
  local function bimodal_spread(opts, rounds)
    local spreads, calls = {}, 0
    for r = 1, rounds do
      local lo, hi = math.huge, -math.huge
      for _ = 1, 10 do
        local s = {}
        for i = 1, 300 do
          local x = 1 + 0.002 * (math.random() + math.random() + math.random() - 1.5) * 2
          if math.random() < 0.3 then x = x + 0.02 * (0.8 + 0.4 * math.random()) end
          s[i] = x
        end
        local n = timing.stop_at(s, opts) or 300
        local head = {}
        for i = 1, n do head[i] = s[i] end
        calls = calls + n
        local m = timing.median(head)
        lo, hi = math.min(lo, m), math.max(hi, m)
      end
      spreads[r] = hi / lo - 1
    end
    table.sort(spreads)
    return calls / (rounds * 10), spreads[math.ceil(0.95 * rounds)]
  end
  local calls, p95 = bimodal_spread(OPTS, 150)
  local calls_gini, p95_gini = bimodal_spread(GINI_ONLY, 150)
  local calls_old = bimodal_spread(OLD, 150)
  t.diag(("either: %.1f calls, p95 %.2f%%; gini alone: %.1f calls, p95 %.2f%%; interval: %.1f calls"):format(calls, 100 * p95,
    calls_gini, 100 * p95_gini, calls_old))
  t.ok(calls <= 1.2 * calls_old and calls < 0.7 * calls_gini, ("%.1f calls against %.1f (interval) and %.1f (gini alone)"):format(calls, calls_old, calls_gini))
  t.ok(p95 <= 0.01, ("spread p95 %.3f%%"):format(100 * p95))
end)

t.test("the IQR's error alone at 5 to 9 calls spreads as the GPU's did (why neither rule stops on it)", function()
  math.randomseed(5)
  local calls, p95 = spread(IQR_ONLY, 0.008, 0.05, 150)
  t.ok(calls < 8.5, ("cv 0.8%%: %.2f calls a timing (l1_softmax: 6.5)"):format(calls))
  t.ok(p95 > 0.014, ("cv 0.8%%: spread p95 %.3f%% (l1_softmax: 1.95%%)"):format(100 * p95))
end)

t.done()
