-- GPU: timing sanity — twice the work takes about twice as long; modes agree.
local t = require "km.tap"
local cuda = t.require_gpu()
local nvrtc = require "km.nvrtc"
local buffer = require "km.buffer"
local timing = require "km.timing"

local mod = assert(cuda.load(assert(nvrtc.compile([[
extern "C" __global__ void axpy(float *y, const float *x, float a, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = a * x[i] + y[i];
}
extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64(); while (clock64() - t0 < cycles) {}
}]]))))
local axpy, spin = assert(mod:get("axpy")), assert(mod:get("spin"))

local n = 1 << 26 -- 256 MiB per buffer: well past L2
local x = buffer.new("f32", n):random { seed = 1 }
local y = buffer.new("f32", n):random { seed = 2 }
local function work(m) return function() assert(axpy{ grid = 132 * 8, block = 256 }(y, x, 1.0, m)) end end

t.test("a kernel doing twice the work takes about twice as long (cold mode)", function()
  local one = timing.time(work(n // 2))
  local two = timing.time(work(n))
  t.diag(string.format("n/2: %.4f ms (n=%d, noise %.4f)   n: %.4f ms (n=%d, noise %.4f)   ratio %.3f  SM %.0f MHz",
    one.median, one.n, one.rel_noise, two.median, two.n, two.rel_noise, two.median / one.median, two.sm_clock_mhz))
  t.ok(two.median / one.median > 1.7 and two.median / one.median < 2.3, two.median / one.median)
  t.ok(one.p25 <= one.median and one.median <= one.p75)
  t.ok(one.min <= one.p25 and one.p75 <= one.max)
  t.eq(one.mode, "cold")
  t.ok(two.sm_clock_mhz > 300 and two.sm_clock_mhz < 5000, two.sm_clock_mhz)
end)

t.test("warm, cold and graph modes agree in order of magnitude; spin time matches the clock", function()
  local cold = timing.time(work(n))
  local warm = timing.time(work(n), { mode = "warm" })
  local graph = timing.time(work(n), { mode = "graph" })
  t.diag(string.format("cold %.4f  warm %.4f  graph %.4f ms", cold.median, warm.median, graph.median))
  for _, r in ipairs { warm, graph } do
    t.ok(r.median / cold.median > 0.5 and r.median / cold.median < 2, r.mode .. " " .. r.median)
  end
  -- a spin of C cycles lasts C / clock
  local clk = timing.sm_clock()
  local cycles = 2000000
  local sp = timing.time(function() assert(spin{ grid = 1, block = 32 }(cycles)) end, { mode = "warm" })
  local want = cycles / (clk * 1e3)
  t.diag(string.format("spin %d cycles: %.4f ms, expected %.4f ms at %.0f MHz", cycles, sp.median, want, clk))
  t.ok(math.abs(sp.median / want - 1) < 0.1, sp.median / want)
end)

t.test("the empty-kernel floor is small and measured once", function()
  local f = timing.floor()
  t.diag(string.format("empty-kernel floor: %.2f us (n=%d)", f.median * 1e3, f.n))
  t.ok(f.median > 0 and f.median < 0.05, f.median)
  t.eq(timing.floor(), f)
end)

t.test("measured peaks are plausible and cached", function()
  local p = timing.peaks()
  t.diag(string.format("copy bandwidth %.0f GB/s, FP32 %.1f TFLOP/s", p.bandwidth_gbs, p.fp32_tflops))
  t.ok(p.bandwidth_gbs > 300 and p.bandwidth_gbs < 20000, p.bandwidth_gbs)
  t.ok(p.fp32_tflops > 1 and p.fp32_tflops < 500, p.fp32_tflops)
  t.eq(timing.peaks(), p)
end)

t.test("a failing function stops timing with its error", function()
  local r, msg = timing.time(function() return nil, "boom", "X" end)
  t.eq(r, nil)
  t.eq(msg, "boom")
  t.raises(function() timing.time(work(n), { mode = "hot" }) end, "unknown mode")
end)

t.done()
