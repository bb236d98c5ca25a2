local nvrtc, cuda = require "km.nvrtc", require "km.cuda"
local buffer, compare, timing = require "km.buffer", require "km.compare", require "km.timing"
local scale = assert(assert(cuda.load(assert(nvrtc.compile([[extern "C" __global__ void scale(float *y,
  const float *x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i]; }]])))):get("scale"))
local n = 1 << 24
local x, y, want = buffer.new("f32", n):random { seed = 1 }, buffer.new("f32", n), buffer.new("f32", n)
local launch = function() assert(scale { grid = (n + 255) // 256, block = 256 }(y, x, 2.0, n)) end
launch(); assert(scale { grid = (n + 255) // 256, block = 256 }(want, x, 2.0, n))
print(compare.allclose(y, want, { atol = 0, rtol = 0 }).ok, timing.time(launch).median, "ms")
