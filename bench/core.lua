-- bench/core.lua — the C core's measures, side by side in one run on one GPU:
--   1. NVRTC compile time for a ~50-line kernel, cold (no cache) and cached;
--   2. per-launch cost from Lua against a raw C loop of cuLaunchKernel (bench/raw_bench.c);
--   3. km.timing against an independent C event timer on the same cubin;
--   4. run-to-run spread of km.timing's median;
--   5. the judge's per-call refresh (random fills, poison) against a plain fill of the same bytes.
-- Usage: kmrun bench/core.lua [OUT.md]   (needs build/raw_bench: `make bench` builds it)
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local nvrtc, cuda = require "km.nvrtc", require "km.cuda"
local buffer, timing = require "km.buffer", require "km.timing"
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT
local B = dofile((arg[0]:match("^(.*/)") or "") .. "lib.lua")

local SPEC = A.spec {
  name = "bench/core.lua", synopsis = "[OUT.md]",
  about = "The C core's measures: NVRTC compile, launch cost against raw C, km.timing against a C timer, spread.",
  positional = { { "out", "OUT.md", "also write the lines to this file" } },
  options = { { "refresh-only", nil, "only section 5, the judge's per-call refresh (seconds, not minutes)" } },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local ok, why = cuda.available()
if not ok then io.stderr:write("bench/core.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end

local RAW = (arg[0]:match("^(.*)/bench/") or ".") .. "/build/raw_bench"
local dev = cuda.device()
local say, save = B.report(a.out)
local function wall()
  local p = io.popen("date +%s.%N"); local v = tonumber(p:read("l")); p:close(); return v
end
local function median(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
end
local function sh(cmd)
  local p = io.popen(cmd)
  local o = p:read("a")
  local okc = p:close()
  assert(okc, "failed: " .. cmd .. "\n" .. o)
  return o
end

if not a.refresh_only then -- sections 1-4
-- A ~50-line kernel: a tiled matrix transpose-and-scale with a grid-stride epilogue.
local SRC50 = [[
#define TILE 32
#define ROWS 8
extern "C" __global__ void transpose_scale(float *out, const float *in, int rows, int cols,
                                           float alpha, float beta) {
  __shared__ float tile[TILE][TILE + 1];
  int x = blockIdx.x * TILE + threadIdx.x;
  int y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS) {
    if (x < cols && y + j < rows) {
      tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * cols + x];
    }
  }
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS) {
    if (x < rows && y + j < cols) {
      float v = tile[threadIdx.x][threadIdx.y + j];
      out[(size_t)(y + j) * rows + x] = alpha * v + beta;
    }
  }
}
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
extern "C" __global__ void row_sum(float *out, const float *in, int rows, int cols) {
  int row = blockIdx.x;
  if (row >= rows) return;
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += in[(size_t)row * cols + c];
  acc = warp_sum(acc);
  __shared__ float partial[32];
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x + 31) / 32 ? partial[threadIdx.x] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) out[row] = v;
  }
}
extern "C" __global__ void tiny(float *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1.0f;
}
extern "C" __global__ void axpy(float *y, const float *x, float a, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = a * x[i] + y[i];
}
]]

say("# kmrun core benchmark")
say("")
say("GPU: %s (%s, %d SMs, L2 %d MiB), driver %s, NVRTC %s, date %s",
  dev.name, dev.arch, dev.sm_count, dev.l2_size >> 20, dev.driver_version, nvrtc.version(), os.date("!%Y-%m-%d %H:%M UTC"))
say("")

-- 1. compile
local cold = {}
for i = 1, 5 do
  local t0 = wall()
  local prog = assert(nvrtc.compile(SRC50 .. "\n// " .. i, { cache = false }))
  cold[i] = wall() - t0
  assert(not prog.cached)
end
local prog = assert(nvrtc.compile(SRC50))
local hits = {}
for i = 1, 50 do
  local t0 = wall()
  local p = assert(nvrtc.compile(SRC50))
  hits[i] = wall() - t0
  assert(p.cached)
end
-- `date` costs a process per reading: time 200 hits in one window for the per-hit figure
local t0 = wall()
for _ = 1, 200 do assert(nvrtc.compile(SRC50).cached) end
local hit_ms = (wall() - t0) / 200 * 1e3

-- 16 distinct kernels, one after another and on CPU threads (nvrtc.compile_many)
local list = {}
for i = 1, 16 do list[i] = { SRC50 .. "\n// variant " .. i .. " " .. os.time(), { cache = false } } end
local s0 = wall()
for _, e in ipairs(list) do assert(nvrtc.compile(e[1], e[2])) end
local serial = wall() - s0
local ncpu = tonumber(io.popen("nproc"):read("l")) or 1
s0 = wall()
for _, r in ipairs(nvrtc.compile_many(list, { threads = ncpu })) do assert(not r.error, r.error) end
local parallel = wall() - s0
-- and through compile processes (km.serve.compiler, as the worker pool warms its cache)
local eval = require "km.serve.pool"
local nproc = math.min(16, ncpu)
local comp = eval.compilers(nproc)
for i = 1, nproc do comp.submit(SRC50 .. "\n// start " .. i, { cache = false }) end -- start them
while comp.drain(1000) > 0 do end
s0 = wall()
for _, e in ipairs(list) do comp.submit(e[1] .. "\n// again", e[2]) end
while comp.drain(1000) > 0 do end
local procs_s = wall() - s0
assert(comp.failed == 0, "compile processes failed")
comp.close()

say("## 1. NVRTC compile, ~50-line kernel (%d lines)", select(2, SRC50:gsub("\n", "")))
say("")
say("| | time |")
say("| --- | --- |")
say("| cold compile (cache off), median of 5 | %.1f ms |", median(cold) * 1e3)
say("| cache hit, mean of 200 | %.3f ms |", hit_ms)
say("| 16 distinct kernels, one after another | %.0f ms |", serial * 1e3)
say("| the same 16 with compile_many on %d CPU threads | %.0f ms (%.1fx) |", ncpu, parallel * 1e3, serial / parallel)
say("| the same 16 through %d compile processes | %.0f ms (%.1fx) |", nproc, procs_s * 1e3, serial / procs_s)
say("")

-- 2. launch overhead
local mod = assert(cuda.load(prog))
local tiny, axpy = assert(mod:get("tiny")), assert(mod:get("axpy"))
local cubin_path = os.tmpname()
local f = assert(io.open(cubin_path, "wb")); f:write(prog.cubin); f:close()
local p = buffer.new("f32", 1024):zero()
local N = 200000
local cfg = { grid = 4, block = 256 }
for _ = 1, 1000 do tiny:launch(cfg, p, 1024) end
assert(cuda.synchronize())
local function lua_loop()
  local s = wall()
  for _ = 1, N do tiny:launch(cfg, p, 1024) end
  assert(cuda.synchronize())
  return (wall() - s) / N * 1e6
end
local function lua_call_loop()
  local s = wall()
  for _ = 1, N do tiny(cfg)(p, 1024) end
  assert(cuda.synchronize())
  return (wall() - s) / N * 1e6
end
local raw, lua, luac = {}, {}, {}
for i = 1, 3 do
  raw[i] = tonumber(sh(RAW .. " launch " .. cubin_path .. " " .. N))
  lua[i] = lua_loop()
  luac[i] = lua_call_loop()
end
say("## 2. Launch overhead (%d launches of a 4x256 kernel, 3 rounds, medians)", N)
say("")
say("| loop | us per launch | vs raw |")
say("| --- | --- | --- |")
say("| raw C cuLaunchKernel | %.3f | 1.00 |", median(raw))
say("| Lua fn:launch(cfg, ...) | %.3f | %.2f |", median(lua), median(lua) / median(raw))
say("| Lua fn(cfg)(...) | %.3f | %.2f |", median(luac), median(luac) / median(raw))
say("")

-- 3. timing agreement and 4. spread
say("## 3-4. km.timing (cold) vs an independent C event timer, axpy (12 bytes/element)")
say("")
say("| n | independent (ms) | km.timing (ms) | ratio | km samples | spread of 5 medians |")
say("| --- | --- | --- | --- | --- | --- |")
for _, lg in ipairs { 22, 24, 26, 28 } do
  local n = 1 << lg
  local x = buffer.new("f32", n):fill(1)
  local y = buffer.new("f32", n):zero()
  local run = function() assert(axpy{ grid = dev.sm_count * 8, block = 256 }(y, x, 1.0, n)) end
  local meds, last = {}, nil
  for i = 1, 5 do
    last = timing.time(run)
    meds[i] = last.median
  end
  local indep = tonumber(sh(string.format("%s time %s %d 200", RAW, cubin_path, n)))
  local lo, hi = math.min(table.unpack(meds)), math.max(table.unpack(meds))
  local m = median(meds)
  say("| 2^%d | %.4f | %.4f | %.3f | %d | %.2f%% |", lg, indep, m, m / indep, last.n, (hi - lo) / m * 100)
  x:free(); y:free()
end
say("")
local fl = timing.floor()
say("Empty-kernel floor (warm mode): %.2f us; SM clock while running: %.0f MHz.", fl.median * 1e3, timing.sm_clock())
os.remove(cubin_path)
say("")
end -- sections 1-4

-- 5. what the judge writes before every timed call: fresh inputs (the random fill) and
-- poisoned outputs, against a plain fill of the same bytes (the write bandwidth)
say("## 5. The judge's per-call refresh, 2^28 elements (km.timing, warm)")
say("")
say("| operation | ms | GB/s written | vs a plain fill |")
say("| --- | --- | --- | --- |")
do
  local n = 1 << 28
  local f32, bf16 = buffer.new("f32", n), buffer.new("bf16", n)
  local function ms(fn) return timing.time(fn, { mode = "warm" }).median end
  local base = ms(function() f32:fill(0) end)
  local rows = {
    { "plain fill, f32", base, 4 },
    { "random normal, f32", ms(function() f32:random { dist = "normal", mean = 0, std = 1, seed = 1 } end), 4 },
    { "random uniform, f32", ms(function() f32:random { dist = "uniform", lo = 0, hi = 1, seed = 1 } end), 4 },
    { "random normal, bf16", ms(function() bf16:random { dist = "normal", mean = 0, std = 1, seed = 1 } end), 2 },
    { "poison (outputs), f32", ms(function() f32:poison() end), 4 },
    { "sparse poison (a timed call's outputs), f32: bytes of the buffer", ms(function() f32:poison { sparse = 7 } end), 4 },
    { "random_check (a timed check's inputs), f32 normal: bytes read", ms(function()
      f32:random_check { dist = "normal", mean = 0, std = 1, seed = 1 } end), 4 },
  }
  for _, r in ipairs(rows) do
    say("| %s | %.3f | %.0f | %.2fx |", r[1], r[2], n * r[3] / (r[2] * 1e-3) / 1e9, r[2] / (base * r[3] / 4))
  end
  f32:free(); bf16:free()
end

save()
