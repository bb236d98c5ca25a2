-- GPU: buffers, random fill statistics, files, checksums, guard zones, device compare.
local t = require "km.tap"
local cuda = t.require_gpu()
local nvrtc = require "km.nvrtc"
local buffer = require "km.buffer"
local compare = require "km.compare"

local function kernel(src, name)
  return assert(assert(cuda.load(assert(nvrtc.compile(src)))):get(name))
end

local function stats(b)
  local v = b:to_table()
  local s, s2 = 0, 0
  for i = 1, #v do s = s + v[i]; s2 = s2 + v[i] * v[i] end
  local mean = s / #v
  return mean, math.sqrt(s2 / #v - mean * mean), v
end

t.test("every dtype allocates, fills and reads back", function()
  for _, dt in ipairs { "f32", "f64", "f16", "bf16", "i8", "i32", "i64", "u8" } do
    local b = buffer.new(dt, { 3, 5 })
    t.eq(b:numel(), 15)
    t.eq(#b, 15)
    t.eq(b:dtype(), dt)
    t.eq(b:shape()[2], 5)
    b:fill(3)
    local v = b:to_table()
    t.eq(v[15], math.type(v[15]) == "integer" and 3 or 3.0, dt)
    b:from_table({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 })
    t.eq(b:to_table()[14] + 0.0, 14.0, dt)
    t.ok(tostring(b):find(dt .. "[3x5]", 1, true), tostring(b))
  end
  local big = buffer.new("i64", 2):from_table({ (1 << 62) + 1, -3 })
  t.eq(big:to_table()[1], (1 << 62) + 1)
end)

t.test("f32, f16 and bf16 fills (single-precision path): statistics, seed, any length", function()
  local n = (1 << 20) + 1 -- odd: the last pair's second value is not written
  for _, dt in ipairs { "f32", "f16", "bf16" } do
    local g = buffer.new(dt, n):random { dist = "normal", mean = 3, std = 2, seed = 7 }
    local mean, sd = stats(g)
    t.near(mean, 3, 0.02, dt .. " normal mean")
    t.near(sd, 2, 0.02, dt .. " normal sd")
    local u = buffer.new(dt, n):random { dist = "uniform", lo = 2, hi = 6, seed = 9 }
    mean, sd = stats(u)
    t.near(mean, 4, 0.02, dt .. " uniform mean")
    t.near(sd, 4 / math.sqrt(12), 0.02, dt .. " uniform sd")
  end
  -- element i depends on (seed, i) only: a shorter buffer holds the same leading values
  local long = buffer.new("f32", 1001):random { dist = "normal", mean = 0, std = 1, seed = 5 }:to_table()
  local short = buffer.new("f32", 1000):random { dist = "normal", mean = 0, std = 1, seed = 5 }:to_table()
  local same = true
  for i = 1, 1000 do if long[i] ~= short[i] then same = false end end
  t.ok(same, "the same values at the same indexes")
  t.ok(long[1001] == long[1001] and math.abs(long[1001]) < 10, "the odd last element is written")
end)

t.test("the vector fill and its tail agree: any length's leading values, every dtype and law", function()
  for _, dt in ipairs { "f32", "f16", "bf16" } do
    for _, law in ipairs { { dist = "normal", mean = 1, std = 3, seed = 21 }, { dist = "uniform", lo = -2, hi = 5, seed = 22 } } do
      local long = buffer.new(dt, 4099):random(law):to_table()
      for _, n in ipairs { 4098, 4097, 4096, 4095, 3 } do
        local short = buffer.new(dt, n):random(law):to_table()
        local same = true
        for i = 1, n do if short[i] ~= long[i] then same = false end end
        t.ok(same, ("%s %s: %d elements are the first %d of 4099"):format(dt, law.dist, n, n))
      end
    end
  end
end)

t.test("random_check: zero for the buffer b:random wrote, and counts each element changed", function()
  local laws = { { "f32", { dist = "normal", mean = 0, std = 1 } }, { "f16", { dist = "uniform", lo = -1, hi = 1 } },
    { "bf16", { dist = "normal", mean = 2, std = 0.5 } }, { "f64", { dist = "normal", mean = 0, std = 1 } },
    { "i32", { dist = "int", lo = -5, hi = 5 } }, { "i64", { dist = "int", lo = 0, hi = 100 } },
    { "f32", { dist = "int", lo = 0, hi = 9 } }, { "u8", { dist = "uniform", lo = 0, hi = 200 } } }
  for _, c in ipairs(laws) do
    local dt, law = c[1], c[2]
    local n = (1 << 16) + 3
    law.seed = 1234567
    local b = buffer.new(dt, n):random(law)
    t.eq(b:random_check(law), 0, dt .. " " .. law.dist .. ": as drawn")
    local v = b:to_table()
    v[1], v[n] = 7, 7 -- two changed elements (7 is never what both held)
    b:from_table(v)
    local want = 0
    local orig = buffer.new(dt, n):random(law):to_table()
    for _, i in ipairs { 1, n } do if orig[i] ~= 7 then want = want + 1 end end
    t.eq(b:random_check(law), want, dt .. " " .. law.dist .. ": changed elements counted")
    local other = {}
    for k, x in pairs(law) do other[k] = x end
    other.seed = law.seed + 1
    t.ok(b:random_check(other) > n // 4, dt .. ": another seed's values are not these")
  end
end)

t.test("random_check on buffers of several groups a thread: zero as drawn, and 17 changed elements counted", function()
  for _, c in ipairs { { "f32", { dist = "normal", mean = 0, std = 1 } }, { "f16", { dist = "uniform", lo = -1, hi = 1 } },
    { "bf16", { dist = "normal", mean = 1, std = 0.5 } } } do
    local dt, law = c[1], c[2]
    law.seed = 987654321
    for _, n in ipairs { (1 << 21) + 3, (1 << 22) + (1 << 12) + 1 } do
      local b = buffer.new(dt, n):random(law)
      t.eq(b:random_check(law), 0, dt .. " n=" .. n .. ": as drawn")
      -- 17 elements changed (to 7, which none of these laws' draws reach): 16 spread over the
      -- buffer, so over several grid-stride rounds of the threads that read them (2 to 4
      -- groups a thread on the H200), and the last, in the tail
      local v = b:to_table()
      local at = { n }
      for k = 0, 15 do at[#at + 1] = 1 + k * (n // 16) end
      for _, i in ipairs(at) do v[i] = 7 end
      b:from_table(v)
      t.eq(b:random_check(law), #at, dt .. " n=" .. n .. ": changed elements counted")
    end
  end
end)

t.test("sparse poison: one 128-byte line in every 4 KiB, at places the seed draws; small buffers whole", function()
  local n = (256 << 10) + 5 -- f32: 1 MiB + 20 bytes, 257 blocks (the last one short)
  local b = buffer.new("f32", n):fill(1)
  b:poison { sparse = 99 }
  local v = b:to_table()
  local per_block, where = {}, {}
  for i = 1, n do
    if v[i] ~= v[i] then
      local blk = (i - 1) * 4 // 4096
      per_block[blk] = (per_block[blk] or 0) + 1
      where[#where + 1] = i
    end
  end
  local blocks, exact = 0, true
  for blk = 0, 255 do
    blocks = blocks + (per_block[blk] and 1 or 0)
    if per_block[blk] ~= 32 then exact = false end
  end
  t.ok(exact and blocks == 256, "32 poisoned f32 (one line) in each whole 4 KiB block")
  t.ok((per_block[256] or 0) >= 1, "the short last block is poisoned too")
  local c = buffer.new("f32", n):fill(1)
  c:poison { sparse = 100 }
  local w, moved = c:to_table(), 0
  for _, i in ipairs(where) do if w[i] == w[i] then moved = moved + 1 end end
  t.ok(moved > #where // 2, "another seed poisons other sectors: " .. moved .. " of " .. #where)
  local small = buffer.new("f16", 1000):fill(2)
  small:poison { sparse = 5 }
  local nan = 0
  for _, x in ipairs(small:to_table()) do if x ~= x then nan = nan + 1 end end
  t.eq(nan, 1000, "under 64 KiB: every element")
  t.ok(not pcall(function() b:poison { sparse = "x" } end), "a seed must be an integer")
end)

t.test("buffer.copy_in copies a raw device range of exactly the buffer's size", function()
  local a = buffer.new("f32", 1 << 20):random { seed = 4 }
  local b = buffer.new("f32", 1 << 20):zero()
  buffer.copy_in(b, a:ptr(), a:nbytes())
  t.eq(b:checksum(), a:checksum())
  t.ok(not pcall(buffer.copy_in, b, a:ptr(), a:nbytes() - 4), "a size that is not the buffer's is refused")
  t.ok(not pcall(buffer.copy_in, b, 0, a:nbytes()), "a null pointer is refused")
end)

t.test("uniform and normal fills have the right statistics and follow the seed", function()
  local n = 1 << 20
  local u = buffer.new("f32", n):random { dist = "uniform", lo = -1, hi = 1, seed = 7 }
  local mean, sd, v = stats(u)
  t.near(mean, 0, 0.005, "uniform mean")
  t.near(sd, 1 / math.sqrt(3), 0.005, "uniform sd")
  local lo, hi = math.huge, -math.huge
  for i = 1, #v do lo = math.min(lo, v[i]); hi = math.max(hi, v[i]) end
  t.ok(lo >= -1 and hi < 1 and lo < -0.999 and hi > 0.999, lo .. " " .. hi)
  local g = buffer.new("f64", n):random { dist = "normal", mean = 3, std = 2, seed = 7 }
  mean, sd = stats(g)
  t.near(mean, 3, 0.01, "normal mean")
  t.near(sd, 2, 0.01, "normal sd")
  local again = buffer.new("f32", n):random { dist = "uniform", lo = -1, hi = 1, seed = 7 }
  t.eq(again:checksum(), u:checksum(), "same seed, same data")
  again:random { seed = 8 }
  t.ok(again:checksum() ~= u:checksum(), "another seed, other data")
  local ints = buffer.new("i32", 100000):random { dist = "int", lo = -3, hi = 3, seed = 1 }
  local seen = {}
  for _, x in ipairs(ints:to_table()) do seen[x] = (seen[x] or 0) + 1 end
  for k = -3, 3 do t.ok((seen[k] or 0) > 13000, "value " .. k .. " seen " .. tostring(seen[k])) end
  t.eq(seen[4], nil)
  t.eq(seen[-4], nil)
end)

t.test("checksums see one changed element; copy and clone keep them", function()
  local a = buffer.new("f32", 1000003):random { seed = 3 }
  local c = a:clone()
  t.eq(c:checksum(), a:checksum())
  local tbl = c:to_table(1)
  local bytes = c:to_string()
  c:from_string(bytes:sub(1, 4 * 500000) .. string.pack("<f", 42) .. bytes:sub(4 * 500001 + 1))
  t.ok(c:checksum() ~= a:checksum())
  c:copy(a)
  t.eq(c:checksum(), a:checksum())
  t.eq(tbl[1], a:to_table(1)[1])
end)

t.test(".npy and raw files round-trip", function()
  local dir = os.tmpname(); os.remove(dir); os.execute("mkdir -p " .. dir)
  local a = buffer.new("f32", { 4, 6 }):random { seed = 11 }
  assert(a:save(dir .. "/a.npy"))
  local b = assert(buffer.load(dir .. "/a.npy"))
  t.eq(b:dtype(), "f32")
  t.eq(b:shape()[1], 4)
  t.eq(b:shape()[2], 6)
  t.eq(b:checksum(), a:checksum())
  local f = assert(io.open(dir .. "/a.npy", "rb")); local head = f:read(128); f:close()
  t.ok(head:find("'descr': '<f4'", 1, true) and head:find("'shape': (4, 6), }", 1, true), head)
  assert(a:save(dir .. "/a.bin"))
  local r = assert(buffer.load(dir .. "/a.bin", "f32", { 24 }))
  t.eq(r:checksum(), a:checksum())
  local bad, msg = buffer.load(dir .. "/a.bin", "f32", { 25 })
  t.eq(bad, nil)
  t.ok(msg:find("data bytes", 1, true), msg)
  os.execute("rm -rf " .. dir)
end)

t.test("guard zones catch writes past either end", function()
  local w = kernel([[extern "C" __global__ void w(float *p, long long i) { p[i] = 1.0f; }]], "w")
  local b = buffer.new("f32", 1000)
  assert(w:launch({ grid = 1, block = 1 }, b, 999))
  t.eq(b:check_guards(), true)
  assert(w:launch({ grid = 1, block = 1 }, b, 1000))
  local ok, why = b:check_guards()
  t.eq(ok, false)
  t.ok(why:find("back guard", 1, true) and why:find("element 1000", 1, true), why)
  local c = buffer.new("f32", 1000)
  assert(w:launch({ grid = 1, block = 1 }, c, -1))
  ok, why = c:check_guards()
  t.eq(ok, false)
  t.ok(why:find("front guard", 1, true), why)
  -- many buffers at once (the judge's check): the first whose guards changed, or nil
  local fine = buffer.new("f32", 5000)
  t.eq(buffer.guards_intact { fine, buffer.new("f16", 3) }, nil)
  t.eq(buffer.guards_intact { fine, b, c }, 2)
  t.eq(buffer.guards_intact { fine, c }, 2)
  local d = buffer.new("u8", 4096)
  assert(kernel([[extern "C" __global__ void w8(unsigned char *p, long long i) { p[i] = 7; }]], "w8")
    :launch({ grid = 1, block = 1 }, d, 4096 + 200))
  t.eq(buffer.guards_intact { fine, d }, 2, "a write 200 bytes past the end")
  t.eq(buffer.guards_intact {}, nil)
  -- 40 buffers of mixed sizes: one launch per 16 checks (km_guards); a write into the front
  -- guard of the 17th and the back of the 38th (the second and third launches) are found,
  -- each in its own slot; buffer.reset_guards refills them all, enqueued on the stream
  local many = {}
  for i = 1, 40 do many[i] = buffer.new(i % 3 == 0 and "f16" or "f32", 100 * i + 3) end
  t.eq(buffer.guards_intact(many), nil)
  assert(w:launch({ grid = 1, block = 1 }, many[17], -3))
  assert(kernel([[extern "C" __global__ void w16(unsigned short *p, long long i) { p[i] = 7; }]], "w16")
    :launch({ grid = 1, block = 1 }, many[39], 100 * 39 + 3 + 5))
  t.eq(buffer.guards_intact(many), 17)
  local L = buffer.ledger()
  L:begin(40)
  local g = L:guards(many)
  assert(L:read())
  for i = 1, 40 do t.eq(L:u64(g + i - 1) > 0, i == 17 or i == 39, "buffer " .. i) end
  buffer.reset_guards(many)
  t.eq(buffer.guards_intact(many), nil, "every guard refilled")
  t.eq(many[17]:check_guards(), true)
  t.eq(many[39]:check_guards(), true)
  buffer.reset_guards {}
  t.raises(function() buffer.reset_guards { many[1], 5 } end, "km.Buffer")
  many[5]:free()
  t.raises(function() buffer.reset_guards(many) end, "freed")
end)

t.test("poison makes unwritten outputs fail a compare", function()
  local want = buffer.new("f32", 100):fill(1)
  local got = buffer.new("f32", 100):poison()
  local r = compare.allclose(got, want, { atol = 1e30, rtol = 1e30 })
  t.eq(r.ok, false)
  t.eq(r.mismatches, 100)
  t.eq(r.nan, 100)
  -- with poison = true the compare counts elements nobody wrote
  got:from_table((function() local v = {} for i = 1, 100 do v[i] = i <= 40 and 1 or 0 / 0 end return v end)())
  got:to_string() -- from_table wrote 60 canonical NaNs (not the poison payload)
  local half = buffer.new("f32", 100):poison()
  local w = kernel([[extern "C" __global__ void set(float *p, int n) { if (threadIdx.x < n) p[threadIdx.x] = 1.0f; }]], "set")
  assert(w:launch({ grid = 1, block = 128 }, half, 30))
  local rp = compare.allclose(half, want, { atol = 0, rtol = 0, poison = true })
  t.eq(rp.unwritten, 70)
  t.eq(rp.nan, 0)
  local rq = compare.allclose(got, want, { atol = 0, rtol = 0, poison = true })
  t.eq(rq.unwritten, 0)
  t.eq(rq.nan, 60)
  local gi = buffer.new("i32", 10):poison()
  t.eq(compare.allclose(gi, buffer.new("i32", 10):zero(), { atol = 0, rtol = 0 }).ok, false)
end)

t.test("device compare: torch semantics, first mismatch, 1e8 elements in milliseconds", function()
  local n = 100000000
  local a = buffer.new("f32", n):random { seed = 1 }
  local b = a:clone()
  local timing = require "km.timing"
  local r = compare.allclose(a, b, { atol = 0, rtol = 0 })
  t.eq(r.ok, true)
  t.eq(r.n, n)
  local tm = timing.time(function() compare.allclose(a, b, { atol = 0, rtol = 0 }) end, { mode = "warm", min_samples = 5, max_samples = 5 })
  t.note(string.format("allclose over 1e8 f32: %.2f ms (median, including result readback)", tm.median))
  t.ok(tm.median < 50, tm.median)
  local w = kernel([[extern "C" __global__ void set(float *p, long long i, float v) { p[i] = v; }]], "set")
  assert(w:launch({ grid = 1, block = 1 }, b, 77777777, 5.0))
  assert(w:launch({ grid = 1, block = 1 }, b, 12345, 0 / 0))
  r = compare.allclose(b, a, { atol = 1e-3, rtol = 1e-3 })
  t.eq(r.ok, false)
  t.eq(r.mismatches, 2)
  t.eq(r.nan, 1)
  t.eq(r.first.index, 12345)
  t.ok(r.first.got ~= r.first.got, "got is NaN")
  t.eq(r.examples[2].index, 77777777)
  t.eq(r.examples[2].got, 5.0)
  t.ok(r.max_abs > 4, r.max_abs)
  -- the same rule as the host path, dtype by dtype
  for _, dt in ipairs { "f16", "bf16", "f64", "i32" } do
    local x = buffer.new(dt, 5):from_table({ 1, 2, 3, 4, 5 })
    local y = buffer.new(dt, 5):from_table({ 1, 2, 4, 4, 5 })
    local d = compare.allclose(x, y, { atol = 0.1, rtol = 0 })
    local h = compare.allclose(x:to_table(), y:to_table(), { atol = 0.1, rtol = 0, dtype = dt })
    t.eq(d.mismatches, 1, dt)
    t.eq(h.mismatches, 1, dt)
    t.eq(d.first.index, 2, dt)
  end
  local i1 = buffer.new("f32", 2):from_table({ 1 / 0, 0 / 0 })
  local i2 = buffer.new("f32", 2):from_table({ 1 / 0, 0 / 0 })
  t.eq(compare.allclose(i1, i2, { atol = 0, rtol = 0 }).mismatches, 1, "NaN never passes")
  t.eq(compare.allclose(i1, i2, { atol = 0, rtol = 0, equal_nan = true }).ok, true)
  t.raises(function() compare.allclose(buffer.new("f32", 2), buffer.new("f32", 3)) end, "sizes differ")
  t.raises(function() compare.allclose(buffer.new("f32", 2), buffer.new("f64", 2)) end, "dtypes differ")
end)

t.test("views: facts and launch arguments only, dead after revoke_views", function()
  local b = buffer.new("f32", { 4, 8 }):zero()
  local v = buffer.view(b)
  t.eq(v:dtype(), "f32"); t.eq(v:numel(), 32); t.eq(#v, 32); t.eq(v:nbytes(), 128); t.eq(v:shape()[2], 8)
  for _, m in ipairs { "ptr", "save", "free", "reset_guards", "to_table", "from_table", "fill", "clone", "copy", "poison" } do
    t.eq(v[m], nil, m)
  end
  t.eq(getmetatable(v), false, "the metatable is hidden")
  t.ok(rawequal(buffer.unwrap(v), b), "unwrap gives the buffer behind a live view")
  t.eq(buffer.unwrap({ numel = function() return 32 end }), nil)
  t.eq(buffer.unwrap(b), nil, "a buffer is not a view")
  local fill = kernel('extern "C" __global__ void fill(float *y, int n) { int i = threadIdx.x; if (i < n) y[i] = 7.f; }', "fill")
  assert(fill { grid = 1, block = 32 }(v, 32))
  t.eq(b:to_table(1)[1], 7.0)
  buffer.revoke_views()
  t.eq(buffer.unwrap(v), nil, "a revoked view unwraps to nothing")
  t.raises(function() v:numel() end, "earlier launch call")
  t.raises(function() fill { grid = 1, block = 32 }(v, 32) end, "earlier launch call")
  t.ok(tostring(v):find("expired", 1, true))
end)

t.test("the ledger: a batch of checks enqueued with no wait and read back once, each as its plain form says", function()
  local w = kernel([[extern "C" __global__ void w(float *p, long long i) { p[i] = 1.0f; }]], "w")
  local L = buffer.ledger()
  local fine, bad = buffer.new("f32", 1000), buffer.new("f32", 1000)
  assert(w:launch({ grid = 1, block = 1 }, bad, 1000)) -- one byte past the end
  local law = { dist = "normal", mean = 0, std = 1, seed = 5 }
  local x, y = buffer.new("f32", 4099):random(law), buffer.new("f32", 4099):random(law)
  assert(w:launch({ grid = 1, block = 1 }, y, 17))
  local got, want = buffer.new("f32", 100):fill(1), buffer.new("f32", 100):fill(1)
  local off = buffer.new("f32", 100):fill(1)
  assert(w:launch({ grid = 1, block = 1 }, want, 3)) -- want[3] = 1 still: a match
  off:from_table((function() local v = {} for i = 1, 100 do v[i] = i == 42 and 2 or 1 end return v end)())
  local ranges = { { x:ptr(), x:nbytes() }, { y:ptr(), y:nbytes() }, { fine:ptr(), fine:nbytes() } }
  L:begin(3 + 2 + 3 + 2 * compare.SLOTS)
  local g = L:guards { fine, bad, fine }
  local r1, r2 = L:random_check(x, law), L:random_check(y, law)
  local d = L:digest(ranges)
  local c1 = compare.enqueue(got, want, { atol = 0, rtol = 0 }, L)
  local c2 = compare.enqueue(off, want, { atol = 0, rtol = 0, poison = true }, L)
  t.eq(g, 1)
  t.eq(r1, 4)
  t.raises(function() L:guards { fine } end, "slot") -- the batch is full
  t.eq(assert(L:read()), true)
  t.eq(L:u64(g), 0)
  t.ok(L:u64(g + 1) > 0, "the overwritten guard counted")
  t.eq(L:u64(g + 2), 0)
  t.eq(L:u64(r1), x:random_check(law))
  t.eq(L:u64(r1), 0)
  t.eq(L:u64(r2), 1)
  t.eq(L:u64(r2), y:random_check(law))
  local plain = buffer.digest(ranges)
  for i = 1, 3 do t.eq(L:u64(d + i - 1), plain[i], "digest " .. i) end
  local a, b = compare.result(got, want, { atol = 0, rtol = 0 }, L, c1), compare.allclose(got, want, { atol = 0, rtol = 0 })
  t.eq(a.ok, true)
  t.eq(a.mismatches, b.mismatches)
  local m = compare.result(off, want, { atol = 0, rtol = 0, poison = true }, L, c2)
  t.eq(m.ok, false)
  t.eq(m.mismatches, 1)
  t.eq(m.first.index, 41)
  t.eq(m.first.got, 2.0)
  t.eq(m.unwritten, 0)
  t.raises(function() L:u64(0) end, "no such slot")
  -- a new batch starts at slot 1 and zeroes what it uses; slots past it are not readable
  L:begin(4)
  t.eq(L:guards { fine }, 1)
  assert(L:read())
  t.eq(L:u64(1), 0)
  t.raises(function() L:u64(2) end, "no such slot")
  t.raises(function() compare.enqueue(got, { 1 }, {}, L) end, "km.Buffer")
  t.raises(function() compare.enqueue(got, "y", {}, L) end, "km.Buffer")
  -- a range of device memory compares in place (a PyTorch reference's output, kept by torch)
  L:begin(2 * compare.SLOTS)
  local range = { ptr = got:ptr(), nbytes = got:nbytes() }
  local same, one = compare.enqueue(got, range, {}, L), compare.enqueue(off, range, {}, L)
  t.raises(function() compare.enqueue(got, { ptr = got:ptr(), nbytes = got:nbytes() - 4 }, {}, L) end, "sizes differ")
  assert(L:read())
  t.eq(compare.result(got, range, {}, L, same).ok, true, "a buffer against its own memory")
  local r = compare.result(off, range, {}, L, one)
  t.eq(r.mismatches, 1, "off against got's memory: element 42 differs")
  t.eq(r.first.index, 41)
  t.eq(r.first.got, 2.0)
  t.eq(r.first.want, 1.0, "the example's want read from the range")
  -- a batch larger than the array grows it (between batches)
  L:begin(5000)
  local many = {}
  for i = 1, 4000 do many[i] = fine end
  local gi = L:guards(many)
  assert(L:read())
  t.eq(L:u64(gi + 3999), 0)
end)

-- L:read(between): the slots as a plain read gives them; between's work is enqueued behind the
-- copy back and runs after it (km.judge draws the next call's inputs there); an error in
-- between is raised after the wait.
t.test("the ledger's read with work between the copy back and the wait", function()
  local L = buffer.ledger()
  local law = { dist = "uniform", lo = -1, hi = 1, seed = 9 }
  local x = buffer.new("f32", 1 << 20):random(law)
  L:begin(1)
  local r = L:random_check(x, law)
  local ran = 0
  t.eq(L:read(function() ran = ran + 1; x:fill(3) end), true)
  t.eq(ran, 1, "between called once")
  t.eq(L:u64(r), 0, "checked before between's fill: x as drawn")
  t.ok(cuda.synchronize())
  t.eq(x:to_table(4)[4], 3.0, "between's fill ran, after the copy")
  L:begin(1)
  r = L:random_check(x, law)
  t.raises(function() L:read(function() error("between failed") end) end, "between failed")
  t.eq(L:u64(r), 1 << 20, "the batch was still read: every element differs from its law")
  t.raises(function() L:read(42) end, "function expected")
end)

t.done()
