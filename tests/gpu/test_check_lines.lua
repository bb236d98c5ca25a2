-- GPU: a timed call's check reads a sample of the lines (km.judge's check_lines): the
-- compare and the input check (km_compare and km_random_check with { key, shift }) read
-- one 128-byte line in each block of 2^shift lines, at the offset the key draws, and every
-- line of a buffer under 512 KiB. The host mirrors the draw (tests/lua/seed_attack.lua's
-- splitmix64), so each test knows which lines were read.
local t = require "km.tap"
local cuda = t.require_gpu()
local nvrtc = require "km.nvrtc"
local buffer = require "km.buffer"
local compare = require "km.compare"
local sys = require "km.sys"
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local attack = dofile(here .. "/../lua/seed_attack.lua")

-- set(p, from, count, v): elements [from, from + count) of an f32/f64/f16/i32 buffer to v
local mod = assert(cuda.load(assert(nvrtc.compile([[
#include <cuda_fp16.h>
extern "C" __global__ void set32(float *p, long long from, long long count, float v) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < count) p[from + i] = v;
}
extern "C" __global__ void set64(double *p, long long from, long long count, double v) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < count) p[from + i] = v;
}
extern "C" __global__ void set16(__half *p, long long from, long long count, float v) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < count) p[from + i] = __float2half(v);
}
extern "C" __global__ void seti(int *p, long long from, long long count, int v) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < count) p[from + i] = v;
}]]))))
local SET = { f32 = mod:get("set32"), f64 = mod:get("set64"), f16 = mod:get("set16"), i32 = mod:get("seti") }
local SIZE = { f32 = 4, f64 = 8, f16 = 2, i32 = 4 }
local function set(b, from, count, v)
  assert(SET[b:dtype()]:launch({ grid = (count + 255) // 256, block = 256 }, b, from, count, v))
end

-- The line of block `blk` a key reads (km_util.cu's unit_at), shift 4
local SHIFT = 4
local function read_line(key, blk, nlines)
  local line = (blk << SHIFT) + (attack.splitmix64(key ~ blk) & ((1 << SHIFT) - 1))
  if line >= nlines then line = blk << SHIFT end
  return line
end

-- one compare through a ledger, as the judge enqueues it
local function sampled_compare(a, b, key, shift)
  local L = buffer.ledger():begin(compare.SLOTS)
  local o = { atol = 0, rtol = 0, poison = true, lines = key and { key = key, shift = shift or SHIFT } or nil }
  local slot = compare.enqueue(a, b, o, L)
  assert(L:read())
  return compare.result(a, b, o, L, slot)
end
local function sampled_check(b, law, key)
  local L = buffer.ledger():begin(1)
  local slot = L:random_check(b, law, key and { key = key, shift = SHIFT } or nil)
  assert(L:read())
  return L:u64(slot)
end

local LAW = { f32 = { dist = "normal", mean = 0, std = 1 }, f64 = { dist = "normal", mean = 0, std = 1 },
  f16 = { dist = "uniform", lo = -1, hi = 1 }, i32 = { dist = "int", lo = -1000, hi = 1000 } }
local function drawn(dt, n, seed)
  local law = { seed = seed }
  for k, v in pairs(LAW[dt]) do law[k] = v end
  return buffer.new(dt, n):random(law), law
end

t.test("a sampled compare reads one line in 16 of a large buffer (counted exactly), every line of a small one", function()
  for _, dt in ipairs { "f32", "f64", "f16" } do
    local n = (64 << 20) // SIZE[dt] -- 64 MiB: 2^19 lines, 2^15 blocks
    local a, b = drawn(dt, n, 11), drawn(dt, n, 11)
    local r = sampled_compare(a, b, sys.random(1 << 62))
    t.ok(r.ok, dt .. ": the same values")
    t.eq(r.compared, (1 << 15) * (128 // SIZE[dt]), dt .. ": one line of each block")
    t.eq(r.n, n)
    local full = sampled_compare(a, b, nil)
    t.eq(full.compared, n, dt .. ": no lines asked: every element")
    local s1, s2 = drawn(dt, (256 << 10) // SIZE[dt], 3), drawn(dt, (256 << 10) // SIZE[dt], 3)
    t.eq(sampled_compare(s1, s2, sys.random(1 << 62)).compared, (256 << 10) // SIZE[dt], dt .. ": 256 KiB read whole")
  end
end)

t.test("a wrong element is found exactly when its line is the one its block reads (compare)", function()
  for _, dt in ipairs { "f32", "f64", "f16" } do
    local per = 128 // SIZE[dt]
    local n = (16 << 20) // SIZE[dt] -- 2^17 lines
    local nlines = n // per
    local want = drawn(dt, n, 5)
    local found, missed = 0, 0
    for trial = 1, 12 do
      local key = sys.random(1 << 62)
      local blk = sys.random(nlines >> SHIFT) - 1
      local hit = read_line(key, blk, nlines)
      -- one element in the line read (found), one in another line of the same block (not)
      local other = (blk << SHIFT) + ((hit - (blk << SHIFT) + 1 + sys.random(15) - 1) % 16)
      local got = drawn(dt, n, 5)
      set(got, other * per + sys.random(per) - 1, 1, 3.5)
      local r = sampled_compare(got, want, key)
      t.ok(r.ok, ("%s trial %d: a wrong element in line %d, not the line read (%d): unseen"):format(dt, trial, other, hit))
      if r.ok then missed = missed + 1 end
      local at = hit * per + sys.random(per) - 1
      set(got, at, 1, 3.5)
      r = sampled_compare(got, want, key)
      t.eq(r.mismatches, 1, dt .. ": the one in the line read is found")
      t.eq(r.first and r.first.index, at, dt .. ": at its index")
      if not r.ok then found = found + 1 end
      t.eq(sampled_compare(got, want, nil).mismatches, 2, dt .. ": a full compare finds both")
    end
    t.eq(found + missed, 24)
  end
end)

t.test("a wrong run of 31 lines is found whatever the key (compare and input check)", function()
  local n = (32 << 20) // 4
  local want = drawn("f32", n, 8)
  local got = drawn("f32", n, 8)
  local x, law = drawn("f32", n, 9)
  for _ = 1, 20 do
    local from = sys.random(n - 31 * 32) - 1
    set(got, from, 31 * 32, 7)
    set(x, from, 31 * 32, 7)
    local key = sys.random(1 << 62)
    t.ok(not sampled_compare(got, want, key).ok, "compare: the run is read")
    t.ok(sampled_check(x, law, key) > 0, "input check: the run is read")
    got = drawn("f32", n, 8)
    x = drawn("f32", n, 9)
  end
end)

t.test("the sampled input check counts a changed element exactly when its line is read (vector and scalar paths)", function()
  for _, dt in ipairs { "f32", "f16", "i32", "f64" } do
    local per = 128 // SIZE[dt]
    local n = (16 << 20) // SIZE[dt]
    local nlines = n // per
    for _ = 1, 8 do
      local key = sys.random(1 << 62)
      local b, law = drawn(dt, n, 77)
      t.eq(sampled_check(b, law, key), 0, dt .. ": as drawn")
      local blk = sys.random(nlines >> SHIFT) - 1
      local hit = read_line(key, blk, nlines)
      local other = (blk << SHIFT) + ((hit - (blk << SHIFT) + 1 + sys.random(15) - 1) % 16)
      set(b, other * per + sys.random(per) - 1, 1, dt == "i32" and 5000 or 3.5)
      t.eq(sampled_check(b, law, key), 0, dt .. ": a line not read")
      t.eq(sampled_check(b, law, nil), 1, dt .. ": the full check counts it")
      set(b, hit * per + sys.random(per) - 1, 1, dt == "i32" and 5000 or 3.5)
      t.eq(sampled_check(b, law, key), 1, dt .. ": the line read")
    end
  end
end)

t.test("lines options are checked", function()
  local a, b = drawn("f32", 1024, 1), drawn("f32", 1024, 1)
  local L = buffer.ledger():begin(compare.SLOTS + 1)
  t.raises(function() compare.enqueue(a, b, { lines = { key = "k", shift = 4 } }, L) end, "lines:")
  t.raises(function() compare.enqueue(a, b, { lines = { key = 1, shift = 21 } }, L) end, "lines:")
  t.raises(function() compare.enqueue(a, b, { lines = 4 }, L) end, "lines:")
  local _, law = drawn("f32", 1024, 1)
  t.raises(function() L:random_check(a, law, { key = 1 }) end, "lines:")
end)

t.done()
