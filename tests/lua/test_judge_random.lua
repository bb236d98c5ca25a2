-- The judge's private draws (each timed call's seed, which timed calls are checked, each
-- shape's fresh verify seed) cannot be predicted by a candidate. A kernel sees its inputs,
-- and km_random's inputs give their seed away (seed_attack.lua, step 1); a generator whose
-- draws give its state away then tells the kernel whether the call it is in will be checked
-- (step 2). Each attack runs against the generator the judge had (xorshift64*: it works) and
-- against the judge's own draws (it must not).
local t = require "km.tap"
local sys = require "km.sys"
local judge_mod = require "km.judge"
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local attack = dofile(here .. "/seed_attack.lua")

local N40 = 1 << 40

t.test("sys.random: integers in [1, n], every value, bad n refused", function()
  local seen, n = {}, 7
  for _ = 1, 700 do
    local v = sys.random(n)
    t.ok(math.type(v) == "integer" and v >= 1 and v <= n, "in [1, 7]: " .. tostring(v))
    seen[v] = (seen[v] or 0) + 1
  end
  for v = 1, n do t.ok((seen[v] or 0) > 50, "value " .. v .. " drawn " .. tostring(seen[v]) .. " times of 700") end
  t.eq(sys.random(1), 1)
  local big = sys.random(1 << 62)
  t.ok(big >= 1 and big <= 1 << 62, "2^62")
  t.raises(function() sys.random(0) end, "between 1 and 2^62")
  t.raises(function() sys.random((1 << 62) + 1) end, "between 1 and 2^62")
  t.raises(function() sys.random(1.5) end, "number has no integer representation")
end)

t.test("the inversions are inverses", function()
  for _ = 1, 200 do
    local x = sys.random(1 << 62) * 3 -- any 64 bits, the sign bit too
    t.eq(attack.unsplitmix64(attack.splitmix64(x)), x)
    local y = x & 0xffffffff
    t.eq(attack.unmix32(attack.mix32(y)), y)
  end
end)

-- A call's seed from the draws of its first input's first four elements (km_random's
-- single-precision uniform law, worked on the CPU here; tests/gpu/test_seed_recovery.lua
-- takes them from the GPU's own fill)
t.test("a call's inputs give its seed away", function()
  for _ = 1, 5 do
    local seed, index = sys.random(N40), sys.random(4)
    local fill = seed * 7919 + index
    local a = {}
    a[1], a[2] = attack.fill_draws(fill, 0)
    a[3], a[4] = attack.fill_draws(fill, 1)
    t.eq(attack.judge_seed(a, index), seed, "the seed behind input " .. index)
  end
end)

-- The judge's order of draws inside a timing: a call's seed, then whether it is checked
-- (Judge:time_run's before hook); the next call's seed is two steps after the last.
local function run_attack(draw, calls)
  local s1 = draw(N40) -- call k-1's seed (its inputs give it away)
  draw(2)              -- whether call k-1 was checked
  local s2 = draw(N40) -- call k's seed
  local copy = attack.predict(s1, s2, 2)
  local hits, seed_hits = 0, 0
  for _ = 1, calls do
    local checked = draw(2) -- whether this call is checked: the kernel wants to know
    if copy and copy(2) == checked then hits = hits + 1 end
    local nxt = draw(N40)
    if copy and copy(N40) == nxt then seed_hits = seed_hits + 1 end
  end
  return copy, hits, seed_hits
end

t.test("control: two seeds of a xorshift64* predict its every later draw", function()
  for _ = 1, 3 do
    local copy, hits, seed_hits = run_attack(attack.xorshift(sys.random(1 << 62) | 1), 64)
    t.ok(copy ~= nil, "a state found")
    t.eq(hits, 64, "which calls are checked, all predicted")
    t.eq(seed_hits, 64, "every later seed predicted")
  end
end)

t.test("the judge's draws: two seeds predict nothing", function()
  local calls = 64
  local copy, hits, seed_hits = run_attack(judge_mod.random, calls)
  -- no xorshift64* state need explain two independent draws (a solution exists by chance
  -- with probability about 2^-16); if one does, its predictions are chance
  t.eq(seed_hits, 0, "no later seed predicted")
  if copy then
    t.ok(hits < 52, "check decisions predicted at chance, not better: " .. hits .. " of " .. calls)
  else
    t.eq(hits, 0)
  end
  -- and its check decisions are a fair coin (64 calls: 2^-30 odds outside 12..52)
  local ones = 0
  for _ = 1, calls do if judge_mod.random(2) == 1 then ones = ones + 1 end end
  t.ok(ones > 12 and ones < 52, "checked " .. ones .. " of " .. calls)
end)

t.test("the judge keeps no generator state to read", function()
  -- draws come from the kernel, 8 bytes each: the judge's module holds no state upvalue
  local i, names = 1, {}
  while true do
    local name = debug.getupvalue(judge_mod.random, i)
    if not name then break end
    names[#names + 1] = name
    i = i + 1
  end
  t.eq(table.concat(names, ","), "sys", "the judge's draw closes over km.sys alone")
end)

t.done()
