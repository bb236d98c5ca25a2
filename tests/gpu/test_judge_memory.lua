-- GPU: the judge and torch share one device. A PyTorch reference's cached blocks stay with
-- torch between calls (handing them back waits for the whole device), and go back to the
-- driver when kmrun's own allocation finds no room: the allocation is then tried again. An
-- evaluation leaves no live tensor of the reference's outputs behind.
local t = require "km.tap"
local testing = require "km.testing"
local kb, _, cuda = testing.require_torch(t, { gpu = true })
local judge = require "km.judge"

-- get_inputs() first takes 60% of the free memory for a temporary: torch keeps the block
local HOG = testing.problem(testing.tmpdir(), "hog", { sizes = "", inputs = "torch.randn(1024)", inputs_body =
  "free, _ = torch.cuda.mem_get_info()\ntmp = torch.empty(int(free * 0.6), dtype=torch.uint8)\ntmp.fill_(1)\ndel tmp" })

t.test("an allocation that finds no room gets torch's cached blocks back, then succeeds", function()
  local free0, total = cuda.mem_info()
  local prob = assert(kb.load(HOG, { precision = "fp32", device = "cuda" }))
  local spec = assert(prob:spec(1))
  local io = kb.buffers_for(spec, function(dtype, shape) return judge.alloc(dtype, shape) end)
  assert(prob:make_inputs(7, io))
  cuda.synchronize()
  local free1 = cuda.mem_info()
  -- torch kept its block: more than half of what was free is gone, a quarter of the device is left
  t.ok(free1 < free0 * 0.5, ("free %d of %d before, %d after"):format(free0, total, free1))
  t.ok(free1 > total // 4, ("free %d of %d"):format(free1, total))
  -- more than is free now, less than was free before
  local want = math.floor((free1 + (free0 - free1) * 0.5) / 4) * 4
  t.ok(want > free1, "the request does not fit without torch's block")
  local b = judge.alloc("f32", { want // 4 })
  t.eq(b:nbytes(), want)
  b:free()
  t.ok(cuda.mem_info() > free1, "torch handed its block back")
  prob:release { empty_cache = true }
end)

t.test("an allocation larger than the device still fails, with the driver's words", function()
  local _, total = cuda.mem_info()
  local ok, err = pcall(judge.alloc, "u8", { total * 2 })
  t.ok(not ok)
  t.ok(tostring(err):find("OUT_OF_MEMORY", 1, true), tostring(err))
end)

-- Every verdict says the evaluation's own device memory at its peak: the judge's buffers
-- (the trials' inputs and outputs, the reference's) and torch's allocator (the problem's
-- model ran as the reference). 4096 x 2048 f32: 32 MiB in, 32 MiB out.
t.test("a verdict carries the evaluation's peak device memory: the judge's and torch's", function()
  local dir = testing.tmpdir()
  local relu = testing.problem(dir, "19_ReLU", { sizes = "batch_size = 4096\ndim = 2048" })
  local tk = assert(require("km.task.kbtask").load(relu))
  local J = assert(judge.new())
  local io_bytes = 2 * 4096 * 2048 * 4
  local v = J:eval(tk, testing.relu_candidate(), { compile_mode = "off", energy = false, seeds = 1 })
  t.eq(v.status, "correct", tostring(v.feedback))
  local m = v.device_memory or {}
  t.ok((m.judge_peak_bytes or 0) >= io_bytes, ("judge peak %s >= %d"):format(tostring(m.judge_peak_bytes), io_bytes))
  t.ok((m.torch_peak_bytes or 0) >= 4096 * 2048 * 4, "torch's peak holds the reference's output: " .. tostring(m.torch_peak_bytes))
  -- after it, torch holds none of it: the timing's checks keep the reference's outputs in
  -- torch's memory for their compares, and the timing's end unbinds them (else each problem a
  -- worker judged would hold an output's worth of device memory)
  local allocated = tonumber(require("km.python").eval("__import__('torch').cuda.memory_allocated()"))
  t.ok(allocated and allocated < 4096 * 2048 * 4, "torch's live tensors after the evaluation: " .. tostring(allocated))
  -- a second evaluation counts from what is held after the first, not from zero: its peak
  -- is at least the idle pool the first left, and no more than the device
  local v2 = J:eval(tk, testing.relu_candidate(), { compile_mode = "off", energy = false, seeds = 1 })
  local _, total = cuda.mem_info()
  t.ok(v2.device_memory.judge_peak_bytes >= io_bytes and v2.device_memory.judge_peak_bytes < total,
    "the second evaluation's peak: " .. tostring(v2.device_memory.judge_peak_bytes))
  J:forget(tk.dir or relu)
end)

-- The other way round: a PyTorch reference whose forward needs more than is free while the
-- judge's pool holds idle buffers of other shapes (a KernelBench level run in one worker:
-- 27_SELU_'s reference at 12 GiB ran out of memory so). The forward runs once more after the
-- idle buffers and torch's cached blocks went back to the driver (km.judge.launch).
t.test("a PyTorch reference that finds no room gets the judge's idle buffers back, then runs", function()
  local pool_mod = require "km.judge.pool"
  local limit = pool_mod.LIMIT
  pool_mod.LIMIT = 1 << 62
  local J = assert(judge.new())
  local free0 = cuda.mem_info()
  local held, got = {}, 0
  while got + (1 << 30) <= free0 * 0.6 do
    held[#held + 1] = J.pool:get("u8", { 1 << 30 })
    got = got + (1 << 30)
  end
  for _, b in ipairs(held) do J.pool:put(b, true) end
  cuda.synchronize()
  local need = cuda.mem_info() + got // 2 -- fits only once the idle buffers are gone
  local prob = testing.problem(testing.tmpdir(), "needs_room", { sizes = "batch_size = 16\ndim = 1024",
    body = ("tmp = torch.empty(%d, dtype=torch.uint8, device=x.device)\ntmp.fill_(0)"):format(need),
    returns = "torch.relu(x) + tmp[0].float()" })
  local tk = assert(require("km.task.kbtask").load(prob))
  local v = J:eval(tk, testing.relu_candidate(), { timing = false, seeds = 1, compile_mode = "off", energy = false })
  pool_mod.LIMIT = limit
  t.eq(v.status, "correct", tostring(v.feedback))
  t.ok(J.pool.bytes < got, ("the idle buffers went back to the driver: %d of %d bytes idle"):format(J.pool.bytes, got))
  J:forget(tk.dir or prob)
end)

t.done()
