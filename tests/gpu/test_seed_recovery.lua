-- GPU: the first link of the attack in tests/lua/test_judge_random.lua holds on the device.
-- A call's inputs, as km_random writes them (the judge's fill of every timed call), give
-- away the judge's seed for that call: so the judge's draws must not be predictable from
-- their seeds (they are not: sys.random, tests/lua/test_judge_random.lua).
local t = require "km.tap"
t.require_gpu()
local buffer = require "km.buffer"
local sys = require "km.sys"
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local attack = dofile(here .. "/../lua/seed_attack.lua")

t.test("a call's seed read back from the first four values of its input", function()
  for _ = 1, 4 do
    local seed, index = sys.random(1 << 40), sys.random(3)
    -- what Judge:fill_inputs draws for input `index` of a call seeded `seed` (its `seeded`)
    local b = buffer.new("f32", 4096):random { dist = "uniform", lo = -1, hi = 1, seed = seed * 7919 + index }
    local v = b:to_table()
    local a = attack.draws_of { v[1], v[2], v[3], v[4] }
    local w1, w2 = attack.fill_draws(seed * 7919 + index, 0)
    t.eq(a[1], w1, "the device's first value is the hash the attack models")
    t.eq(a[2], w2)
    t.eq(attack.judge_seed(a, index), seed, "the seed recovered from the device's fill")
    b:free()
  end
end)

t.done()
