-- GPU: the driver, modules, launch marshalling, streams, events, graphs, faults.
local t = require "km.tap"
local cuda = t.require_gpu()
local nvrtc = require "km.nvrtc"
local buffer = require "km.buffer"
local testing = require "km.testing"

local _, KMRUN = testing.paths()

local function build(src, opts)
  local prog, log = nvrtc.compile(src, opts)
  assert(prog, log)
  return assert(cuda.load(prog)), prog
end

t.test("driver entry points resolve at the header's version and the device answers", function()
  local d = cuda.device()
  t.note(string.format("%s %s, %d SMs, %.1f GiB, L2 %d MiB, clock %d MHz, driver %s, %s",
    d.name, d.arch, d.sm_count, d.total_mem / 2^30, d.l2_size >> 20, d.clock_mhz, d.driver_version, d.uuid))
  t.ok(#d.name > 0)
  t.ok(d.sm_count > 0)
  t.ok(d.l2_size > 0)
  t.ok(d.uuid:match("^GPU%-%x+%-%x+%-%x+%-%x+%-%x+$"), d.uuid)
  t.eq(cuda.driver_version(), d.driver_version)
  local free, total = cuda.mem_info()
  t.ok(free > 0 and total >= free)
  -- cuMemAlloc_v2 and cuCtxSynchronize as the header declares them: an allocation
  -- larger than 4 GiB (the v1 ABI took 32-bit sizes) works and synchronize succeeds
  local big = buffer.new("u8", (4 << 30) + 4096)
  big:fill(7)
  t.ok(cuda.synchronize())
  t.eq(big:to_table(3)[3], 7)
  big:free()
end)

local SCALARS = [[
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
extern "C" __global__ void scalars(double *out, int8_t a, uint8_t b, short c, unsigned short d,
    int e, unsigned int f, long long g, unsigned long long h, float i, double j,
    __half k, __nv_bfloat16 l, const float *p) {
  out[0] = a; out[1] = b; out[2] = c; out[3] = d; out[4] = e; out[5] = f;
  out[6] = (double)g; out[7] = (double)h; out[8] = i; out[9] = j;
  out[10] = __half2float(k); out[11] = __bfloat162float(l); out[12] = p[1];
}
]]

t.test("launch marshals every scalar type and pointers at the declared width", function()
  local mod = build(SCALARS)
  local fn = assert(mod:get("scalars"))
  local out = buffer.new("f64", 13)
  local p = buffer.new("f32", 4):from_table({ 0, 2.5, 0, 0 })
  assert(fn:launch({ grid = 1, block = 1 }, out, -5, 200, -30000, 60000, -2000000000,
    4000000000, -(1 << 40), 1 << 50, 0.1, 1 / 3, 1.5, -2.25, p))
  local v = out:to_table()
  local want = { -5, 200, -30000, 60000, -2000000000, 4000000000, -(1 << 40), 2^50 }
  for k = 1, 8 do t.eq(v[k], want[k], "param " .. k) end
  t.near(v[9], 0.1, 1e-8, "float")
  t.eq(v[10], 1 / 3, "double")
  t.eq(v[11], 1.5, "half")
  t.eq(v[12], -2.25, "bf16")
  t.eq(v[13], 2.5, "pointer")
  -- the callable form gives the same result
  out:zero()
  assert(fn{ grid = 1, block = 1 }(out, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, p))
  t.eq(out:to_table()[6], 6)
end)

t.test("wrong argument count or kind raises naming the parameter", function()
  local fn = assert(build(SCALARS):get("scalars"))
  local out = buffer.new("f64", 13)
  local err = t.raises(function() fn:launch({ grid = 1, block = 1 }, out, 1) end, "takes 14 arguments")
  t.ok(err:find("(out, a, b", 1, true), err)
  t.raises(function()
    fn:launch({ grid = 1, block = 1 }, out, 1.5, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, out)
  end, "argument 2 'a' (int8_t)")
  t.raises(function()
    fn:launch({ grid = 1, block = 1 }, out, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 5.5)
  end, "argument 14 'p' (const float *)")
  t.raises(function()
    fn:launch({ grid = 1, block = 1 }, 2.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, out)
  end, "argument 1 'out' (double *)")
  t.raises(function()
    fn:launch({ grid = 1, block = 1 }, out, 1, 300, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, out)
  end, "out of range")
end)

t.test("without a signature, Lua integers pass as ints and floats as floats; wrappers override", function()
  local _, prog = build([[extern "C" __global__ void mix(float *o, float a, int b) { o[0] = a; o[1] = (float)b; }]])
  local mod = assert(cuda.load(prog.cubin)) -- a bare cubin: sizes only, no declared types
  local fn = assert(mod:get("mix"))
  local o = buffer.new("f32", 2)
  assert(fn:launch({ grid = 1, block = 1 }, o, 2.5, 7))
  t.eq(o:to_table()[1], 2.5)
  t.eq(o:to_table()[2], 7.0)
  assert(fn:launch({ grid = 1, block = 1 }, o, cuda.f32(3), cuda.i32(9)))
  t.eq(o:to_table()[1], 3.0)
  t.eq(o:to_table()[2], 9.0)
  t.eq(fn:attributes().params[2].kind, "unknown")
end)

t.test("a freed buffer raises when used again", function()
  local b = buffer.new("f32", 4)
  b:free()
  b:free() -- idempotent
  t.raises(function() b:fill(1) end, "attempt to use a freed km.Buffer")
  local fn = assert(build([[extern "C" __global__ void k(float *x) { x[0] = 1; }]]):get("k"))
  t.raises(function() fn:launch({ grid = 1, block = 1 }, b) end, "freed km.Buffer")
  -- a freed module makes its functions unusable, not dangling
  local mod = build([[extern "C" __global__ void k2(float *x) { x[0] = 1; }]])
  local k2 = assert(mod:get("k2"))
  mod:free()
  t.raises(function() k2:launch({ grid = 1, block = 1 }, buffer.new("f32", 1)) end, "freed km.Module")
end)

t.test("a missing kernel and an impossible launch are nil, message, code", function()
  local mod = build([[extern "C" __global__ void k(float *x) { x[threadIdx.x] = 1; }]])
  local fn, msg, code = mod:get("nope")
  t.eq(fn, nil)
  t.eq(code, "CUDA_ERROR_NOT_FOUND")
  t.ok(msg:find("nope", 1, true), msg)
  local k = assert(mod:get("k"))
  local x = buffer.new("f32", 2048)
  local ok, m2, c2 = k:launch({ grid = 1, block = 2048 }, x)
  t.eq(ok, nil)
  t.eq(c2, "CUDA_ERROR_INVALID_VALUE")
  t.ok(m2:find("block 2048", 1, true), m2)
end)

t.test("attributes and occupancy", function()
  local mod = build([[extern "C" __global__ void __launch_bounds__(256) k(float *x) {
    __shared__ float s[1024]; s[threadIdx.x] = x[threadIdx.x]; __syncthreads(); x[threadIdx.x] = s[255 - threadIdx.x]; }]])
  local k = assert(mod:get("k"))
  local a = k:attributes()
  t.eq(a.shared_static, 4096)
  t.eq(a.max_threads, 256)
  t.ok(a.registers > 0)
  t.eq(a.params[1].kind, "ptr")
  local blocks, frac = k:occupancy(256)
  t.ok(blocks >= 1 and frac > 0 and frac <= 1, tostring(blocks) .. " " .. tostring(frac))
end)

t.test("streams, events and graph capture replay a launch sequence", function()
  local mod = build([[extern "C" __global__ void inc(int *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1; }]])
  local inc = assert(mod:get("inc"))
  local n = 1000
  local x = buffer.new("i32", n):zero()
  local s = cuda.stream()
  local e1, e2 = cuda.event(), cuda.event()
  e1:record(s)
  assert(inc:launch({ grid = 4, block = 256, stream = s }, x, n))
  e2:record(s)
  assert(s:synchronize())
  t.ok(e1:elapsed(e2) >= 0)
  local g = assert(cuda.capture(function()
    assert(inc{ grid = 4, block = 256 }(x, n))
    assert(inc{ grid = 4, block = 256 }(x, n))
  end))
  for _ = 1, 5 do assert(g:launch()) end
  assert(cuda.synchronize())
  local v = x:to_table()
  t.eq(v[1], 11)
  t.eq(v[n], 11)
  g:free()
  t.raises(function() g:launch() end, "freed km.Graph")
end)

t.test("an illegal address is CUDA_ERROR_ILLEGAL_ADDRESS in a child; this process goes on", function()
  local script = os.tmpname()
  testing.write(script, [[
    local cuda, nvrtc = require "km.cuda", require "km.nvrtc"
    local prog = assert(nvrtc.compile('extern "C" __global__ void bad(float *p) { p[threadIdx.x] = 1.0f; }'))
    local k = assert(assert(cuda.load(prog)):get("bad"))
    assert(k:launch({ grid = 1, block = 32 }, 0x10))   -- a pointer into nothing
    local ok, msg, code = cuda.synchronize()
    print(code)
    print(msg)
  ]])
  local p = io.popen(KMRUN .. " " .. script .. " 2>&1")
  local out = p:read("a")
  p:close()
  os.remove(script)
  t.ok(out:match("^CUDA_ERROR_ILLEGAL_ADDRESS\n"), out)
  -- the parent's context is untouched
  local b = buffer.new("f32", 8):fill(2)
  t.eq(b:to_table()[8], 2.0)
  t.ok(cuda.synchronize())
end)

t.done()
