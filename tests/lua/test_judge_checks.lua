-- km.judge.checks loaded alone: the check rule of timed calls is pure (no GPU, no judge
-- state, no report module at load), so its decisions and bounds are tested here without
-- km.cuda, km.judge or a device.
local before = {}
for name in pairs(package.loaded) do before[name] = true end
local checks = require "km.judge.checks"
local loaded = {}
for name in pairs(package.loaded) do if not before[name] then loaded[#loaded + 1] = name end end
table.sort(loaded)

local t = require "km.tap"

t.test("loading it loads no GPU module, no judge part and no report module", function()
  for _, name in ipairs(loaded) do
    t.ok(name == "km.judge.checks" or name == "km.sys", "km.judge.checks loaded " .. name)
  end
end)

t.test("check_first and check_opts: every timed call by default; bad options raise", function()
  t.eq(checks.check_first(nil, 10), 10)
  t.eq(checks.check_first(3, 10), 3)
  t.raises(function() checks.check_first(11, 10) end, "check_first: an integer in 1..min_samples")
  local each, first, every, shift = checks.check_opts {}
  t.eq(each, false)
  t.eq(first, checks.MIN_SAMPLES)
  t.eq(every, 1)
  t.eq(shift, 4)
  each, first, every = checks.check_opts { check_draw = "each", min_samples = 20 }
  t.eq(each, true)
  t.eq(first, 20)
  t.eq(every, 2)
  t.raises(function() checks.check_opts { check_draw = "some" } end, "check_draw")
  t.raises(function() checks.check_opts { check_every = 0 } end, "check_every")
  t.raises(function() checks.check_opts { check_lines = 3 } end, "check_lines")
end)

t.test("the picker checks exactly `first` of the first min_samples calls, then 1 in every", function()
  for _ = 1, 50 do
    local pick, n = checks.check_picker(10, 4, 1), 0
    for k = 1, 10 do if pick(k) then n = n + 1 end end
    t.eq(n, 4)
    t.ok(pick(11) and pick(12), "every later call with every = 1")
  end
end)

t.test("the bounds: escape and cheat_gain", function()
  t.ok(math.abs(checks.escape(10, 5, 4) - 5 / 210) < 1e-12)
  t.eq(checks.escape(10, 7, 4), 0)
  t.eq(checks.cheat_gain(10, 0), 0)
  local g5, g6 = checks.cheat_gain(10, 5), checks.cheat_gain(10, 6)
  t.ok(g5 > 0 and g5 < 0.01, "fast on 5 of 10: " .. g5)
  t.ok(g6 > g5, "more fast calls, more gain")
  t.ok(checks.cheat_gain(10, 8) > 1 - 1e-9, "the interquartile range among the fast calls: any gain")
end)

t.done()
