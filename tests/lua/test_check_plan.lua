-- Which timed calls the judge checks, and how much of each (km.judge's check_picker,
-- check_first, escape, lines_shift): the draws are the judge's own (sys.random), so these
-- run without a GPU. The GPU side (the sampled reads themselves) is tests/gpu/test_check_lines.lua.
local t = require "km.tap"
local judge = require "km.judge"

local function close(a, b, tol, what) t.ok(math.abs(a - b) <= tol, ("%s: %.4f vs %.4f (+-%.4f)"):format(what, a, b, tol)) end

t.test("check_first: 2/5 of min_samples by default, every one with check_every = 1, bad values refused", function()
  t.eq(judge.check_first(nil, 10), 4)
  t.eq(judge.check_first(nil, 20), 8)
  t.eq(judge.check_first(nil, 1), 1)
  t.eq(judge.check_first(nil, 10, 1), 10, "check_every = 1: every call")
  t.eq(judge.check_first(nil, 10, 2), 4)
  t.eq(judge.check_first(7, 10), 7)
  for _, bad in ipairs { 0, 11, 1.5, "4" } do
    t.raises(function() judge.check_first(bad, 10) end, "check_first: an integer in 1..min_samples")
  end
end)

t.test("escape: C(n-k, m) / C(n, m)", function()
  close(judge.escape(10, 5, 4), 5 / 210, 1e-12, "5 of 10 cheated, 4 checked")
  close(judge.escape(10, 6, 4), 1 / 210, 1e-12, "6 of 10")
  t.eq(judge.escape(10, 7, 4), 0, "7 cheated leave 3 honest: 4 checks cannot all miss")
  t.eq(judge.escape(10, 0, 4), 1)
  -- the new draw beats the old rule at the attack that moves the median: 5 cheated calls
  -- (the old rule: the 10th checked always, so 5 of the other 9, each checked 1 in 2)
  t.ok(judge.escape(10, 5, 4) < 0.5 ^ 5, "2.4% < 3.1%")
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

t.test("the picker's old rule (check_draw = \"each\"): the min_samples-th always, the others 1 in 2", function()
  local N, at = 2000, {}
  for _ = 1, N do
    local pick = judge.check_picker(10, 4, 2, true)
    for k = 1, 10 do if pick(k) then at[k] = (at[k] or 0) + 1 end end
  end
  t.eq(at[10], N)
  for k = 1, 9 do close((at[k] or 0) / N, 0.5, 0.05, "call " .. k) end
end)

-- The attack the numbers are about, played against the picker: a kernel fast (and wrong) on
-- a set of calls it chose, honest on the rest. Against the old rule its best set avoids the
-- 10th call; against the draw no call is safer than another.
t.test("a kernel cheating on 5 chosen calls escapes the draw as often as C(5,4)/C(10,4) says, less than the old rule", function()
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
  close(old, 1 / 32, 0.005, "the old rule")
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
  t.eq(first, 4)
  t.eq(every, 2)
  t.eq(shift, 4)
  each, first, every, shift = judge.check_opts { check_draw = "each", check_every = 1, check_lines = 1, min_samples = 20 }
  t.eq(each, true)
  t.eq(first, 20, "check_every = 1: every call of the first min_samples")
  t.eq(every, 1)
  t.eq(shift, 0)
  t.raises(function() judge.check_opts { check_draw = "some" } end, "check_draw")
  t.raises(function() judge.check_opts { check_every = 0 } end, "check_every")
  t.raises(function() judge.check_opts { check_first = 11 } end, "check_first")
  t.raises(function() judge.check_opts { check_lines = 10 } end, "check_lines")
  -- Judge:eval raises on them before it looks at the task
  local j = setmetatable({}, judge.Judge)
  t.raises(function() j:eval("no such task", {}, { check_lines = 3 }) end, "check_lines")
end)

t.done()
