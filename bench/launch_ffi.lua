-- launch_ffi.lua N — microseconds per launch of the 4x256 `tiny` kernel through LuaJIT's FFI
-- and libkmrun (km.ffi): a launcher packs its arguments once, each call is one km_launch.
-- Run by bench/launch_overhead.sh (KMRUN_LIB names the library).
local ffi = require "ffi"
local kf = require "km.ffi"
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU or no libkmrun (the reason on stderr).
if arg and (arg[1] == "-h" or arg[1] == "--help") then print("usage: luajit launch_ffi.lua [N [direct]]") os.exit(0) end
local N = tonumber(arg and arg[1] or "200000")
if not N then io.stderr:write("launch_ffi.lua: N must be a number, got ", tostring(arg[1]), "\n") os.exit(2) end
local okl, rt, why = pcall(kf.open) -- raises where libkmrun cannot be loaded
if not okl then rt, why = nil, rt end
if not rt then io.stderr:write("launch_ffi.lua: no GPU: ", tostring(why), "\n") os.exit(3) end
local prog = assert(kf.compile([[
extern "C" __global__ void tiny(float *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1.0f;
}
]], { arch = rt:device().arch }))
local tiny = assert(assert(rt:load(prog)):kernel("tiny"))
local p = assert(rt:buffer("f32", 1024))
assert(p:fill(0))
local launch, spec = tiny:launcher({ grid = 4, block = 256 }, p, kf.i32(1024))
for _ = 1, 1000 do launch() end
assert(rt:synchronize())
ffi.cdef [[
struct km_timespec { long tv_sec; long tv_nsec; };
int clock_gettime(int clk, struct km_timespec *ts);
]]
local ts = ffi.new("struct km_timespec")
local function now_us()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3
end
local C, h, cfg, args = kf.C, tiny.h, spec.cfg, spec.args
local mode = arg and arg[2] or "launcher"
local s = now_us()
if mode == "direct" then -- the C function itself, no Lua closure around it
  for _ = 1, N do C.km_launch(h, cfg, args) end
else
  for _ = 1, N do launch() end
end
assert(rt:synchronize())
print(string.format("%.4f", (now_us() - s) / N))
