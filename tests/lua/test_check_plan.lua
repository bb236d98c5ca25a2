-- Which timed calls the judge checks, and how much of each (km.judge's check_picker,
-- check_first, escape, lines_shift): the draws are the judge's own (sys.random), so these
-- run without a GPU. The GPU side (the sampled reads themselves) is tests/gpu/test_check_lines.lua.
local t = require "km.tap"
local judge = require "km.judge"
local timing = require "km.timing"

local function close(a, b, tol, what) t.ok(math.abs(a - b) <= tol, ("%s: %.4f vs %.4f (+-%.4f)"):format(what, a, b, tol)) end

t.test("check_first: every one of min_samples by default, bad values refused", function()
  t.eq(judge.check_first(nil, 10), 10)
  t.eq(judge.check_first(nil, 20), 20)
  t.eq(judge.check_first(nil, 1), 1)
  t.eq(judge.check_first(7, 10), 7)
  t.eq(judge.check_first(10, 10), 10, "every call")
  for _, bad in ipairs { 0, 11, 1.5, "4" } do
    t.raises(function() judge.check_first(bad, 10) end, "check_first: an integer in 1..min_samples")
  end
end)

t.test("escape: C(n-k, m) / C(n, m)", function()
  close(judge.escape(10, 5, 4), 5 / 210, 1e-12, "5 of 10 cheated, 4 checked")
  close(judge.escape(10, 6, 4), 1 / 210, 1e-12, "6 of 10")
  t.eq(judge.escape(10, 7, 4), 0, "7 cheated leave 3 honest: 4 checks cannot all miss")
  t.eq(judge.escape(10, 0, 4), 1)
  close(judge.escape(10, 7, 3), 1 / 120, 1e-12, "7 of 10, 3 checked")
  t.eq(judge.escape(10, 8, 3), 0, "8 cheated leave 2 honest: 3 checks cannot all miss")
  -- the draw beats check_draw = "each" at the attack that moves the median: 5 cheated
  -- calls (that rule: the 10th checked always, so 5 of the other 9, each checked 1 in 2)
  t.ok(judge.escape(10, 5, 4) < 0.5 ^ 5, "2.4% < 3.1%")
end)

-- What a kernel gains from cheating on k of n calls of a timing the noise rule stopped at n:
-- worked out from the rule's own statistic (timing.rel_noise), against the numbers by hand
-- (at n = 10 the interquartile range must stay within 0.005 x 1.349 x sqrt(10) / 1.2533 =
-- 1.70% of the median: for k = 7, 0.75 (h - f) <= 0.0170 f).
t.test("cheat_gain: the stop rule bounds what k fast calls of 10 gain, up to k = 7", function()
  t.eq(judge.cheat_gain(10, 0), 0)
  t.eq(judge.cheat_gain(10, 4), 0, "4 fast calls of 10 leave the median among the honest")
  close(judge.cheat_gain(10, 5), 0.0085, 0.0002, "k = 5: the median halfway, the range = h - f")
  close(judge.cheat_gain(10, 6), 0.0170, 0.0003, "k = 6: the median fast, the range = h - f")
  close(judge.cheat_gain(10, 7), 0.0222, 0.0003, "k = 7: the upper quartile 3/4 honest")
  t.ok(judge.cheat_gain(10, 8) > 0.99, "k = 8: the range lies among the fast calls, any gain")
  -- a looser target lets more through; more samples narrow what a given share gains
  t.ok(judge.cheat_gain(10, 6, 0.01) > judge.cheat_gain(10, 6))
  -- the gini rule's statistic reads every pair of the middle 8: fast calls move it sooner
  close(judge.cheat_gain(10, 5, 0.0021, "gini"), 0.0029, 0.0001, "gini, k = 5")
  close(judge.cheat_gain(10, 7, 0.0021, "gini"), 0.0077, 0.0001, "gini, k = 7")
  close(judge.cheat_gain(10, 8, 0.0021, "gini"), 0.0131, 0.0001, "gini, k = 8: not any gain")
  t.ok(timing.rel_noise { 1, 1, 1 } == 0 and timing.rel_noise { 1, 2 } == math.huge)
  -- the median cheat_gain reads is the one a timing reports (sorted here, interpolated)
  t.eq(timing.median { 3, 1, 2 }, 2)
  t.eq(timing.median { 4, 1, 3, 2 }, 2.5)
  t.ok(timing.median {} ~= timing.median {}, "none: NaN")
  t.raises(function() timing.median { 1, {} } end, "timing.median: sample 2 is not a number")
  t.raises(function() timing.rel_noise { 1, "x", 3 } end, "not a number")
end)

-- A rule's guarantee, over every way to cheat: k1 of the first 10 calls (escaping the
-- draw of check_first with M.escape) and k2 of the calls past 10 (each escaping a check
-- with probability 1 - 1/check_every), the timing stopping by the noise rule at n (the last
-- call past 10 checked where the draw left it: it is honest). The largest gain a cheat
-- escapes with at all, and with a chance over 1 in 1000.
local function worst(first, every, window)
  window = window or 10
  local w, w3 = 0, 0
  for n = window, 40 do
    for k1 = 0, window do
      for k2 = 0, math.max(0, n - window - 1) do
        local p = judge.escape(window, k1, first) * (1 - 1 / every) ^ k2
        if n == window and k2 > 0 then p = 0 end
        if p > 0 then
          local g = judge.cheat_gain(n, k1 + k2)
          if g > w then w = g end
          if p > 1e-3 and g > w3 then w3 = g end
        end
      end
    end
  end
  return w, w3
end

-- A kernel that tells checked calls from the gaps between its calls (a check waits for the
-- device and runs the reference) and cheats on every call of the first min_samples left once
-- it has counted all `first` checks: it escapes whenever the draw put them early, and gains
-- what cheating on the calls after the last check gives. Played against the picker.
local function informed(first, n, window)
  window = window or 10
  local worst_gain, escaped = 0, 0
  for _ = 1, n do
    local pick, seen, caught, cheated = judge.check_picker(window, first, 1, false), 0, false, 0
    for k = 1, window do
      local cheat = seen == first -- all checks counted: the rest look safe
      if pick(k) then
        seen = seen + 1
        if cheat then caught = true end
      elseif cheat then
        cheated = cheated + 1
      end
    end
    if not caught and cheated > 0 then
      escaped = escaped + 1
      local g = judge.cheat_gain(window, cheated)
      if g > worst_gain then worst_gain = g end
    end
  end
  return worst_gain, escaped / n
end

t.test("the default rule checks every timed call: no cheat escapes, informed or not", function()
  local _, first, every = judge.check_opts {}
  t.eq(first, judge.MIN_SAMPLES)
  t.eq(every, 1)
  t.eq(worst(first, every, first), 0, "no cheated call goes unchecked")
  local g, p = informed(first, 2000, first)
  t.eq(g, 0)
  t.eq(p, 0, "a kernel counting the checks never sees all of them behind it before the last call of the window")
end)

t.test("3 of 10: a blind cheat escapes with at most 2.2%; one that counts the checks escapes often, with the same bound", function()
  local w = worst(3, 1)
  t.ok(w > 0.02 and w < 0.0225, ("the worst gain that can escape: %.4f (k = 7 of 10, 1 time in 120)"):format(w))
  local g, p = informed(3, 4000)
  t.ok(g > 0.02 and g < 0.0225, ("the informed cheat's worst gain: %.4f (7 calls after checks at 1, 2, 3)"):format(g))
  -- it cheats after the third check, which comes before the 10th call unless the 10th is one:
  -- 1 - C(9, 2) / C(10, 3) = 0.7 of timings
  close(p, 0.7, 0.03, "the informed cheat escapes")
  local w_old, w3_old = worst(4, 2)
  t.ok(w_old > 0.99, "4 of 10 then 1 in 2: a kernel that stops the timing later escapes with any gain (rarely)")
  t.ok(w3_old > 0.02, "and with a chance over 1 in 1000, with as much as the new rule's worst")
end)

-- The picker over many timings: exactly `first` of the first min_samples checked, each call
-- as likely as any other; later calls 1 in `every`.
t.test("the picker: exactly 4 of the first 10, every call equally likely, later calls 1 in 2", function()
  local N = 4000
  local at, later = {}, 0
  for _ = 1, N do
    local pick, count = judge.check_picker(10, 4, 2, false), 0
    for k = 1, 10 do
      if pick(k) then count = count + 1; at[k] = (at[k] or 0) + 1 end
    end
    t.eq(count, 4, "four checks among the first ten")
    if count ~= 4 then break end
    for k = 11, 14 do if pick(k) then later = later + 1 end end
  end
  -- 0.4 each: sd sqrt(0.4 * 0.6 / 4000) = 0.0077
  for k = 1, 10 do close((at[k] or 0) / N, 0.4, 0.04, "call " .. k .. " checked") end
  close(later / (4 * N), 0.5, 0.03, "calls past min_samples")
end)

t.test("the picker with check_draw = \"each\": the min_samples-th always, the others 1 in 2", function()
  local N, at = 2000, {}
  for _ = 1, N do
    local pick = judge.check_picker(10, 4, 2, true)
    for k = 1, 10 do if pick(k) then at[k] = (at[k] or 0) + 1 end end
  end
  t.eq(at[10], N)
  for k = 1, 9 do close((at[k] or 0) / N, 0.5, 0.05, "call " .. k) end
end)

-- The attack the numbers are about, played against the picker: a kernel fast (and wrong) on
-- a set of calls it chose, honest on the rest. Against check_draw = "each" its best set avoids the
-- 10th call; against the draw no call is safer than another.
t.test("a kernel cheating on 5 chosen calls escapes the draw as often as C(5,4)/C(10,4) says, less than check_draw = \"each\"", function()
  local N = 20000
  local function escapes(each, cheat)
    local n = 0
    for _ = 1, N do
      local pick, caught = judge.check_picker(10, 4, 2, each), false
      for k = 1, 10 do
        local checked = pick(k)
        if checked and cheat[k] then caught = true end
      end
      if not caught then n = n + 1 end
    end
    return n / N
  end
  local new = escapes(false, { [2] = true, [4] = true, [6] = true, [8] = true, [9] = true })
  local old = escapes(true, { [1] = true, [3] = true, [5] = true, [7] = true, [9] = true })
  -- sd: sqrt(p (1 - p) / N) = 0.0011 and 0.0012
  close(new, 5 / 210, 0.005, "the draw")
  close(old, 1 / 32, 0.005, "check_draw = each")
  -- and the last five calls (a kernel that starts cheating late) fare no better
  close(escapes(false, { [6] = true, [7] = true, [8] = true, [9] = true, [10] = true }), 5 / 210, 0.005, "calls 6-10")
end)

t.test("check_lines: a power of two from 1 to 2^20, its log2", function()
  t.eq(judge.lines_shift(nil), 4, "the default, 16")
  t.eq(judge.CHECK_LINES, 16)
  t.eq(judge.lines_shift(1), 0)
  t.eq(judge.lines_shift(64), 6)
  t.eq(judge.lines_shift(1 << 20), 20)
  for _, bad in ipairs { 0, 3, 12, 1.5, 1 << 21, -4, "16" } do
    t.raises(function() judge.lines_shift(bad) end, "check_lines: a power of two")
  end
end)

t.test("check_opts: the defaults, and each bad option raised before anything runs", function()
  local each, first, every, shift = judge.check_opts {}
  t.eq(each, false)
  t.eq(first, judge.MIN_SAMPLES)
  t.eq(every, 1)
  t.eq(shift, 4)
  each, first, every, shift = judge.check_opts { check_draw = "each", check_lines = 1, min_samples = 20 }
  t.eq(each, true)
  t.eq(first, 20)
  t.eq(every, 2, "each: later calls 1 in 2")
  t.eq(shift, 0)
  _, first, every = judge.check_opts { check_first = 10, check_every = 4, min_samples = 10 }
  t.eq(first, 10)
  t.eq(every, 4)
  t.raises(function() judge.check_opts { check_draw = "some" } end, "check_draw")
  t.raises(function() judge.check_opts { check_every = 0 } end, "check_every")
  t.raises(function() judge.check_opts { check_first = 11, min_samples = 10 } end, "check_first")
  t.raises(function() judge.check_opts { check_first = judge.MIN_SAMPLES + 1 } end, "check_first")
  t.raises(function() judge.check_opts { check_lines = 10 } end, "check_lines")
  -- Judge:eval raises on them before it looks at the task
  local j = setmetatable({}, judge.Judge)
  t.raises(function() j:eval("no such task", {}, { check_lines = 3 }) end, "check_lines")
end)

t.done()
