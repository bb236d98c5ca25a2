-- The attack a judge with a predictable generator invites, written out so tests can run it
-- (tests/lua/test_judge_random.lua on the CPU, tests/gpu/test_seed_recovery.lua on km_random's
-- own output). Not a test itself (no test_ prefix): loaded with dofile.
--
-- 1. A call's inputs give away its seed. km_random's uniform law (f32, lo -1, hi 1) writes
--    element 2j, 2j+1 from two 32-bit hashes whose top 24 bits are the values; the hashes
--    (lowbias32) and the key's mix (splitmix64) are bijections, so the first four elements
--    leave 2^16 guesses of the key that the next pair cuts to one, and the judge's seed is
--    (fill seed - input index) / 7919 (Judge's `seeded`).
-- 2. Seeds give away a state. A xorshift64* draw of n = 2^40 is bits 1..40 of state * M: the
--    state's low 41 bits, but for one. The step is linear over GF(2), so two draws two
--    steps apart (a call's seed, its check decision, the next call's seed) leave 23 unknown
--    bits and 41 equations: the state, and every later draw, whether this call is checked.
local M = {}

local M32 = 0xffffffff
local function inv64(a) -- a's inverse mod 2^64 (a odd): Newton's iteration doubles the bits
  local y = a
  for _ = 1, 6 do y = y * (2 - a * y) end
  return y
end

local MA, MB = 0x7feb352d, 0x846ca68b
local IA, IB = inv64(MA) & M32, inv64(MB) & M32
function M.mix32(x)
  x = x & M32
  x = x ~ (x >> 16); x = (x * MA) & M32
  x = x ~ (x >> 15); x = (x * MB) & M32
  return x ~ (x >> 16)
end
function M.unmix32(y)
  y = y ~ (y >> 16); y = (y * IB) & M32
  y = y ~ (y >> 15) ~ (y >> 30); y = (y * IA) & M32
  return y ~ (y >> 16)
end

local G, S1, S2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
local IS1, IS2 = inv64(S1), inv64(S2)
function M.splitmix64(x)
  x = x + G
  x = (x ~ (x >> 30)) * S1
  x = (x ~ (x >> 27)) * S2
  return x ~ (x >> 31)
end
function M.unsplitmix64(x)
  x = x ~ (x >> 31) ~ (x >> 62); x = x * IS2
  x = x ~ (x >> 27) ~ (x >> 54); x = x * IS1
  x = x ~ (x >> 30) ~ (x >> 60)
  return x - G
end

local SALT = 0x6A09E667F3BCC909
local PK = M.mix32(0x9E3779B9) -- pair_key's mix of j's high word (0 for the first 2^32 pairs)

-- The 24-bit draws of elements 2j and 2j+1 of a fill seeded `fill_seed` (km_random's
-- single-precision path).
function M.fill_draws(fill_seed, j)
  local key = M.splitmix64(fill_seed ~ SALT)
  local k0, k1 = key & M32, ((key >> 32) | 1) & M32
  local h0 = M.mix32((j + (k0 ~ PK)) & M32)
  return h0 >> 8, M.mix32(h0 ~ k1) >> 8
end

-- The draws of f32 values of the uniform law on [-1, 1): v = 2 a / 2^24 - 1, exactly.
function M.draws_of(values)
  local a = {}
  for i, v in ipairs(values) do a[i] = math.tointeger((v + 1) * (1 << 23)) end
  return a
end

-- Fill seeds whose first four draws are a[1..4] (usually one).
function M.fill_seeds(a)
  local found = {}
  for t = 0, 255 do
    local h0 = (a[1] << 8) | t
    local kh = M.unmix32(h0) -- pair 0: h0 = mix32(0 + kh)
    local h0b = M.mix32((1 + kh) & M32)
    if h0b >> 8 == a[3] then
      for u = 0, 255 do
        local k1 = M.unmix32((a[2] << 8) | u) ~ h0
        if k1 & 1 == 1 and M.mix32(h0b ~ k1) >> 8 == a[4] then
          for _, hi in ipairs { k1, k1 ~ 1 } do
            found[#found + 1] = M.unsplitmix64((hi << 32) | (kh ~ PK)) ~ SALT
          end
        end
      end
    end
  end
  return found
end

-- The judge's seed (1 .. 2^40) behind input number `index`'s first four draws, or nil.
local I7919 = inv64(7919)
function M.judge_seed(a, index)
  for _, f in ipairs(M.fill_seeds(a)) do
    local s = (f - index) * I7919
    if s >= 1 and s <= 1 << 40 then return s end
  end
end

-- The generator the judge had before: xorshift64* from a state, an integer in [1, n].
function M.xorshift(state)
  local x = state
  return function(n)
    x = x ~ (x >> 12); x = x ~ (x << 25); x = x ~ (x >> 27)
    local r = x * 0x2545F4914F6CDD1D
    return (n <= 1 << 31 and r >> 33 or r >> 1) % n + 1
  end
end

local function step(x)
  x = x ~ (x >> 12); x = x ~ (x << 25)
  return x ~ (x >> 27)
end

-- Unknowns u (bits of a mask) with XOR of vs[k] for u's bits = target, or nil.
local function solve(vs, target)
  local basis = {} -- pivot bit -> { vector, combination }
  local function reduce(v, c)
    for p = 63, 0, -1 do
      if (v >> p) & 1 == 1 and basis[p] then v, c = v ~ basis[p][1], c ~ basis[p][2] end
    end
    return v, c
  end
  for k, v0 in ipairs(vs) do
    local v, c = reduce(v0, 1 << (k - 1))
    for p = 63, 0, -1 do
      if (v >> p) & 1 == 1 then basis[p] = { v, c } break end
    end
  end
  local rest, c = reduce(target, 0)
  if rest == 0 then return c end
end

local MASK41 = (1 << 41) - 1
local MINV = inv64(0x2545F4914F6CDD1D)

-- Given two seeds of n = 2^40 drawn `gap` steps apart, a copy of the generator as it was
-- after the second: it makes the same draws the real one makes next. nil: no xorshift64*
-- state explains the two.
function M.predict(s1, s2, gap)
  local cols = {}
  for i = 0, 63 do
    local x = 1 << i
    for _ = 1, gap do x = step(x) end
    cols[i] = x
  end
  for b1 = 0, 1 do
    local low1 = ((((s1 - 1) << 1) | b1) * MINV) & MASK41
    for b2 = 0, 1 do
      local low2 = ((((s2 - 1) << 1) | b2) * MINV) & MASK41
      local known = 0
      for i = 0, 40 do if (low1 >> i) & 1 == 1 then known = known ~ cols[i] end end
      local vs = {}
      for j = 41, 63 do vs[#vs + 1] = cols[j] & MASK41 end
      local u = solve(vs, (known ~ low2) & MASK41)
      if u then
        local x = low1
        for k = 0, 22 do if (u >> k) & 1 == 1 then x = x | (1 << (41 + k)) end end
        for _ = 1, gap do x = step(x) end
        return M.xorshift(x)
      end
    end
  end
end

return M
