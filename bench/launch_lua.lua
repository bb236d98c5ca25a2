-- launch_lua.lua N — microseconds per launch of the 4x256 `tiny` kernel through the Lua 5.4
-- binding (km.cuda), the loop of bench/core.lua's section 2. Runs under kmrun and under a
-- stock lua5.4 with km.so alike (bench/launch_overhead.sh runs both).
local km = require "km"
local cuda, nvrtc, buffer, timing = km.cuda, km.nvrtc, km.buffer, km.timing
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
if arg and (arg[1] == "-h" or arg[1] == "--help") then print("usage: launch_lua.lua [N]   (default 200000)") os.exit(0) end
local N = tonumber(arg and arg[1] or "200000")
if not N then io.stderr:write("launch_lua.lua: N must be a number, got ", tostring(arg[1]), "\n") os.exit(2) end
local okg, why = cuda.available()
if not okg then io.stderr:write("launch_lua.lua: no GPU: ", tostring(why), "\n") os.exit(3) end
local prog = assert(nvrtc.compile([[
extern "C" __global__ void tiny(float *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1.0f;
}
]], { arch = cuda.device().arch }))
local tiny = assert(assert(cuda.load(prog)):get("tiny"))
local p = buffer.new("f32", 1024):zero()
local cfg = { grid = 4, block = 256 }
for _ = 1, 1000 do tiny:launch(cfg, p, 1024) end
assert(cuda.synchronize())
local s = timing.wall()
for _ = 1, N do tiny:launch(cfg, p, 1024) end
assert(cuda.synchronize())
print(string.format("%.4f", (timing.wall() - s) / N * 1e6))
