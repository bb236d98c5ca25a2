-- GPU: can a candidate kernel read the judge's digest key (issue 45, item 3)? A kernel that
-- learnt it could alter the reference's weights and keep their digest (splitmix64 is
-- invertible). The key is never a kernel argument (whose parameter block the driver writes
-- into memory a later kernel can find near its own): km_checksum reads it from an 8-byte
-- device slot the host copies it into right before a batch of digests, and the batch's last
-- launch zeroes once all its blocks have read it, in stream order (runtime/core/km_devops.c). The probe plays the attacker right after a
-- digest ran: it reads memory around its own parameter block (the generic address of a
-- __grid_constant__ parameter) and the 2 MiB region around a buffer it was given (where the
-- key's device slot may lie), and the host tries every 8-byte word it got back as the key (a
-- digest of a known buffer recomputed on the host, as km_checksum computes it). The honest
-- twin: a kernel that reads only its own argument. The param-space read may fault (then the
-- key is out of reach that way): it is this file's last test, and a fault is not a finding.
local t = require "km.tap"
local cuda = t.require_gpu()
local nvrtc = require "km.nvrtc"
local buffer = require "km.buffer" -- 64-bit words as i64 (km.buffer has no u64): Lua integers, bit for bit

local PROBE = [[
struct Params { unsigned long long a[4]; };
extern "C" __global__ void near_param(const __grid_constant__ Params p, unsigned long long *out, long long first, int n) {
  const unsigned long long *base = (const unsigned long long *)&p;
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = base[first + i];
}
extern "C" __global__ void near_buffer(const unsigned long long *region, unsigned long long *out, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    out[i] = region[i];
}
extern "C" __global__ void own_param(const __grid_constant__ Params p, unsigned long long *out) {
  if (threadIdx.x < 4) out[threadIdx.x] = p.a[threadIdx.x];
}
]]

-- km_checksum on the host (Lua integers wrap at 64 bits, as the kernel's do)
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local splitmix64 = dofile(here .. "/../lua/seed_attack.lua").splitmix64 -- km_random's and km_checksum's mix
local function host_digest(words, key) -- whole words only (no tail bytes)
  local acc = 0
  for i, w in ipairs(words) do acc = acc + splitmix64(w ~ splitmix64((i - 1) ~ key)) end
  return acc + splitmix64(0 ~ splitmix64((~#words) ~ key)) + #words * 8
end

local mod = assert(cuda.load(assert(nvrtc.compile(PROBE))))
local known = buffer.new("i64", 2):from_table { 0x0123456789ABCDEF, 0x0F1E2D3C4B5A6978 }
local known_words = known:to_table()

-- every word of `dump` tried as the key: the first that gives the known buffer's digest, or nil
local function key_in(dump, digest)
  for _, w in ipairs(dump) do if host_digest(known_words, w) == digest then return w end end
end

local function digest_now() return buffer.digest { { known:ptr(), known:nbytes() } }[1] end

t.test("the honest twin reads its own parameters back", function()
  local out = buffer.new("i64", 4):zero()
  assert(mod:get("own_param"):launch({ grid = 1, block = 32 }, string.pack("<I8I8I8I8", 1, 2, 3, 4), out))
  t.ok(cuda.synchronize())
  local v = out:to_table()
  t.eq(v[1], 1); t.eq(v[4], 4)
end)

t.test("the key reaches every launch of a batch and every batch: one range twice, two batches, the same digest", function()
  local r = { known:ptr(), known:nbytes() }
  local three = buffer.digest { r, r, r }
  t.eq(three[1], three[2]); t.eq(three[2], three[3])
  t.eq(digest_now(), three[1], "another batch")
  t.eq(host_digest(known_words, 0) == three[1], false, "not keyed by an empty slot")
end)

t.test("the key is not in the 2 MiB around a buffer the candidate is given, after a digest ran", function()
  local out = buffer.new("i64", 4096)
  local d = digest_now()
  t.eq(host_digest(known_words, 1) == d, false, "a wrong key does not give the digest")
  local region = out:ptr() - out:ptr() % (2 << 20)
  local words = (2 << 20) // 8
  local dump = buffer.new("i64", words)
  local ok = mod:get("near_buffer"):launch({ grid = 64, block = 256 }, region, dump, words)
  local synced, msg = cuda.synchronize()
  t.ok(ok and synced, "the region reads: " .. tostring(msg))
  if ok and synced then
    local found = key_in(dump:to_table(), d)
    t.ok(not found, "the digest key was found in device memory near the candidate's buffer")
  end
end)

t.test("the key is not in the memory around the candidate's own parameter block, after a digest ran", function()
  local n = 8192
  local out = buffer.new("i64", n):zero()
  local d = digest_now()
  local ok = mod:get("near_param"):launch({ grid = 1, block = 256 }, string.pack("<I8I8I8I8", 0, 0, 0, 0), out, -n // 2, n)
  local synced, msg = cuda.synchronize()
  if not (ok and synced) then
    t.note("reading around the parameter block faults (" .. tostring(msg) .. "): the key is not reachable that way")
    return
  end
  local found = key_in(out:to_table(), d)
  t.ok(not found, "the digest key was found around the candidate's parameter block")
end)

t.done()
