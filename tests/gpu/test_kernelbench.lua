-- GPU: KernelBench problems run by torch inside this process, on kmrun's device buffers and
-- kmrun's stream, with no copies: torch's views are the buffers' own pointers, what torch
-- writes is what kmrun's kernels read (and the reverse), in stream order. Skips without a
-- GPU, or without torch (set KM_PYTHON to a python that has a CUDA torch).
local t = require "km.tap"
local testing = require "km.testing"
local kb, _, cuda = testing.require_torch(t, { gpu = true, cuda = true })
local nvrtc = require "km.nvrtc"
local buffer = require "km.buffer"
local compare = require "km.compare"
local python = require "km.python"

local DIR = testing.tmpdir()
local RELU = testing.problem(DIR, "19_ReLU", { sizes = "batch_size = 4096\ndim = 4099" })
local LINEAR = testing.problem(DIR, "linear_relu", { args = "in_features, out_features",
  init = 'self.fc = nn.Linear(in_features, out_features)\nself.register_buffer("shift", torch.full((out_features,), 0.25))',
  returns = "torch.relu(self.fc(x) + self.shift)", sizes = "", inputs = "torch.randn(256, 512)", init_inputs = "512, 384" })
local BIG = testing.problem(DIR, "big_relu", { init = false, sizes = "", inputs = "torch.rand(1 << 14, 1 << 14)" })

local SRC = [[
extern "C" __global__ void relu_f32(const float* x, float* y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
}
extern "C" __global__ void relu_f16(const unsigned short* x, unsigned short* y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = (x[i] & 0x8000) ? 0 : x[i];   // max(x, 0) on the bits (-0 becomes +0)
}
// waits about `cycles` clocks, then writes v everywhere: work torch must wait for
extern "C" __global__ void slow_fill(float* x, long long n, float v, long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) x[i] = v;
}
extern "C" __global__ void linear_relu(const float* x, const float* w, const float* b,
                                       const float* shift, float* y, int rows, int k, int n) {
  int r = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
  double acc = b[c];
  for (int j = 0; j < k; j++) acc += (double)x[r * k + j] * w[c * k + j];
  acc += shift[c];
  y[r * n + c] = acc > 0 ? (float)acc : 0.f;
}
]]
local mod = assert(cuda.load(assert(nvrtc.compile(SRC))))
local function fn(name) return assert(mod:get(name)) end

local function cdiv(a, b) return (a + b - 1) // b end

t.test("torch works on kmrun's device: the problem's device is km.cuda's", function()
  local d = cuda.device()
  local p = assert(kb.load(RELU, { device = "cuda" }))
  t.eq(p.device, "cuda:" .. d.index, "device cuda is km.cuda's")
  t.eq(python.eval("__import__('torch').cuda.get_device_name(" .. d.index .. ")"), d.name)
  p:release()
end)

t.test("ReLU: inputs made on the GPU into kmrun's buffers, outputs written in place", function()
  local p = assert(kb.load(RELU, { device = "cuda" }))
  t.ok(p.device:match("^cuda:%d$"), p.device)
  local s = assert(p:spec(1))
  local io = kb.buffers_for(s, buffer.new)
  local st = cuda.stream() -- non-blocking: kmrun's buffer methods (default stream) are not ordered with it
  io.out:poison()
  assert(cuda.synchronize())
  assert(p:make_inputs(11, io, { stream = st }))
  assert(p:forward(io, { stream = st }))
  assert(st:synchronize())
  -- the views are the buffers' own memory
  local view = ("__import__('sys').modules['km_kb_bridge'].wrap(%d, [4096, 4099], 'f32', __import__('torch').device('%s'))")
    :format(io.out:ptr(), p.device)
  t.eq(python.eval(view .. ".data_ptr()"), io.out:ptr())
  -- kmrun's own kernel on the same input agrees exactly
  local n = io.x:numel()
  local want = buffer.new("f32", { 4096, 4099 })
  assert(fn("relu_f32"):launch({ grid = cdiv(n, 256), block = 256 }, io.x, want, n))
  assert(cuda.synchronize())
  local r = compare.allclose(io.out, want, { atol = 0, rtol = 0 })
  t.ok(r.ok, "torch's output is relu(x): " .. tostring(r.mismatches) .. " mismatches")
  -- and the inputs are the seed's: twice the same, another seed other values
  local c1 = io.x:checksum()
  assert(p:make_inputs(11, io, { stream = st }))
  assert(st:synchronize())
  t.eq(io.x:checksum(), c1)
  assert(p:make_inputs(12, io, { stream = st }))
  assert(st:synchronize())
  t.ok(io.x:checksum() ~= c1)
  t.ok(io.x:check_guards(), "guard zones intact")
  t.ok(io.out:check_guards(), "guard zones intact")
  -- bound to kmrun's stream: the same result with no per-call checks
  io.out:poison()
  assert(cuda.synchronize())
  local run = assert(p:bind(io, { stream = st }))
  assert(run())
  assert(fn("relu_f32"):launch({ grid = cdiv(n, 256), block = 256, stream = st }, io.x, want, n))
  assert(st:synchronize())
  t.ok(compare.allclose(io.out, want, { atol = 0, rtol = 0 }).ok, "bound run")
  -- empty_cache: torch's blocks (holding the output's values) go back to the driver
  assert(p:forward(io, { stream = st, empty_cache = true }))
  assert(st:synchronize())
  t.ok(python.eval("__import__('torch').cuda.memory_reserved()") < 64 << 20, "nothing cached")
  p:release({ empty_cache = true })
end)

t.test("stream order: torch waits for kmrun's work queued before it on the same stream", function()
  local p = assert(kb.load(RELU, { device = "cuda" }))
  local s = assert(p:spec(1))
  local io = kb.buffers_for(s, buffer.new)
  local st = cuda.stream()
  assert(p:make_inputs(1, io, { stream = st }))
  assert(st:synchronize())
  local n = io.x:numel()
  -- ~20 ms of spinning before x becomes 3.0 everywhere; torch reads x right after
  local cycles = 20 * 1000 * (cuda.device().clock_mhz or 1500)
  assert(fn("slow_fill"):launch({ grid = 132, block = 256, stream = st }, io.x, n, 3.0, cycles))
  assert(p:forward(io, { stream = st }))
  assert(st:synchronize())
  local threes = buffer.new("f32", { 4096, 4099 }):fill(3)
  local r = compare.allclose(io.out, threes, { atol = 0, rtol = 0 })
  t.ok(r.ok, "relu ran after the fill: " .. tostring(r.mismatches) .. " stale elements")
  -- and kmrun's work queued after torch's sees torch's result
  assert(p:make_inputs(2, io, { stream = st }))
  assert(p:forward(io, { stream = st }))
  local want = buffer.new("f32", { 4096, 4099 })
  assert(fn("relu_f32"):launch({ grid = cdiv(n, 256), block = 256, stream = st }, io.x, want, n))
  assert(st:synchronize())
  t.ok(compare.allclose(io.out, want, { atol = 0, rtol = 0 }).ok)
  p:release()
end)

t.test("parameters written into kmrun's buffers drive a kmrun kernel that matches torch", function()
  local p = assert(kb.load(LINEAR, { device = "cuda" }))
  local s = assert(p:spec(1))
  local io = kb.buffers_for(s, buffer.new)
  assert(io.fc_weight and io.fc_bias and io.shift, "params by state_dict name")
  assert(p:make_inputs(5, io))
  assert(p:write_params(io))
  assert(p:forward(io))
  assert(p:synchronize())
  local got = buffer.new("f32", { 256, 384 })
  assert(fn("linear_relu"):launch({ grid = { cdiv(384, 128), 256 }, block = 128 },
    io.x, io.fc_weight, io.fc_bias, io.shift, got, 256, 512, 384))
  assert(cuda.synchronize())
  local r = compare.allclose(io.out, got, { atol = 1e-4, rtol = 1e-4 })
  t.ok(r.ok, "fp32 (TF32 off) within KernelBench's 1e-4: max abs " .. tostring(r.max_abs))
  t.eq(io.shift:to_table(1)[1], 0.25)
  p:release()
end)

t.test("fp16: buffers are f16 and torch's ReLU matches kmrun's bit for bit", function()
  local p = assert(kb.load(RELU, { device = "cuda", precision = "fp16" }))
  local s = assert(p:spec(1))
  t.eq(s.inputs[1].dtype, "f16")
  t.eq(s.outputs[1].dtype, "f16")
  local io = kb.buffers_for(s, buffer.new)
  assert(p:make_inputs(3, io))
  assert(p:forward(io))
  assert(p:synchronize())
  local n = io.x:numel()
  local want = buffer.new("f16", { 4096, 4099 })
  assert(fn("relu_f16"):launch({ grid = cdiv(n, 256), block = 256 }, io.x, want, n))
  assert(cuda.synchronize())
  t.ok(compare.allclose(io.out, want, { atol = 0, rtol = 0 }).ok)
  p:release()
end)

t.test("a 1 GiB input is made on the GPU; torch keeps its block while memory is plentiful, and hands it back on request", function()
  local p = assert(kb.load(BIG, { device = "cuda" }))
  local s = assert(p:spec(1))
  local io = kb.buffers_for(s, buffer.new)
  local wall = require("km.timing").wall
  local t0 = wall()
  assert(p:make_inputs(1, io))
  assert(p:synchronize())
  local ms = (wall() - t0) * 1e3
  t.note(("make_inputs: %d MiB in %.1f ms"):format(io.x:nbytes() >> 20, ms))
  t.ok(ms < 2000, "made on the GPU, not the CPU: " .. ms .. " ms")
  t.eq(python.eval("__import__('torch').cuda.memory_allocated()") < 64 << 20, true, "get_inputs()'s tensor freed")
  -- handing the block back is a cudaFree, which waits for the whole device: only when less
  -- than a quarter of it is free (km.judge asks for it when an allocation finds no room)
  local kept = python.eval("__import__('torch').cuda.memory_reserved()")
  t.ok(kept >= 1 << 30, "its block kept for the next call: " .. kept)
  kb.empty_cache()
  local left = python.eval("__import__('torch').cuda.memory_reserved()")
  t.ok(kept - left >= 1 << 30, ("and handed back by kb.empty_cache(): %d bytes reserved before, %d after"):format(kept, left))
  p:release({ empty_cache = true })
end)

os.execute("rm -rf " .. DIR)
t.done()
