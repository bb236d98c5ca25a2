-- GPU: a candidate whose kernels printf a million lines is judged through km.serve.pool's pool:
-- the verdict is still `correct`, carries the exact line and byte counts and the first
-- 4 KiB, and nothing floods the judging process's stdout or stderr.
local t = require "km.tap"
t.require_gpu()
local json = require "km.json"
local testing = require "km.testing"

local ROOT, KMRUN = testing.paths()
local LINES = 1000000
local PER_LAUNCH = 64 * 256 -- lines one launch prints at most: well inside the 1 MiB device printf buffer
local SEEDS = 20            -- 4 shapes x 20 seeds = 80 launches; 62 print the million

-- The honest reduction plus a chatter kernel: a device counter lets exactly LINES lines
-- through in total, over the launches, whatever their number past 62.
local SOURCE = [[
__device__ unsigned long long printed;
extern "C" __global__ void chatter(unsigned long long limit) {
  unsigned long long i = atomicAdd(&printed, 1ull);
  if (i < limit) printf("line %llu\n", i);
}
extern "C" __global__ void rowsum(const float *x, float *y, int rows, int cols) {
  __shared__ float part[256];
  int r = blockIdx.x;
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols; c += 256) acc += x[(size_t)r * cols + c];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[r] = part[0];
}]]
local LAUNCH = ([[return function(k, io, s)
  k.chatter{ grid = %d, block = 256 }(%d)
  k.rowsum{ grid = s.rows, block = 256 }(io.x, io.y, s.rows, s.cols)
end]]):format(PER_LAUNCH // 256, LINES)

-- The judging runs in a child kmrun whose stdout and stderr we read: the worker inherits
-- its stderr, so a flood would show here.
local function judge_in_child(source, launch, seeds)
  local dir = testing.tmpdir()
  testing.write(dir .. "/judge.lua", ([[
local task = require "km.task"
local eval = require "km.serve.pool"
local json = require "km.json"
local t = assert(task.load(%q))
local pool = assert(eval.pool { gpus = { tonumber(os.getenv("KM_TEST_GPU") or "0") }, timeout = 300 })
local v = pool:eval(t, { name = "chatty", source = %q, launch = %q }, { seeds = %d, timing = false })
pool:close()
io.stdout:write("VERDICT ", json.encode(v, { nan = "null" }), "\n")
]]):format(ROOT .. "/tests/tasks/t_rowsum", source, launch, seeds))
  local p = io.popen(KMRUN .. " " .. dir .. "/judge.lua 2>&1")
  local out = p:read("a")
  p:close()
  os.execute("rm -rf " .. dir)
  local line = out:match("VERDICT ([^\n]*)")
  return line and json.decode(line), out
end

t.test("a million printed lines: correct, counted exactly, cut, and the terminal stays quiet", function()
  local t0 = os.time()
  local v, out = judge_in_child(SOURCE, LAUNCH, SEEDS)
  t.note(("judged in %d s; %d bytes of output from the judging process"):format(os.time() - t0, #out))
  t.ok(v, out:sub(1, 2000))
  t.eq(v.status, "correct", v.feedback)
  local want_bytes = 0
  for i = 0, LINES - 1 do want_bytes = want_bytes + #("line " .. i .. "\n") end
  t.eq(v.printf.lines, LINES)
  t.eq(v.printf.bytes, want_bytes)
  t.eq(v.printf.truncated, true)
  t.ok(#v.printf.text <= 4096 and #v.printf.text > 1000, #v.printf.text)
  t.ok(v.printf.text:find("^line %d+\n"), v.printf.text:sub(1, 100))
  t.ok(v.feedback:find("printed 1000000 lines", 1, true), v.feedback)
  -- the judging process printed its verdict and little else: no flood
  local rest = out:gsub("VERDICT [^\n]*\n?", "")
  t.ok(#rest < 4096, ("%d bytes besides the verdict: %s"):format(#rest, rest:sub(1, 500)))
end)

t.test("a candidate that prints nothing gets printf.lines = 0 and no extra feedback", function()
  local quiet = SOURCE:gsub('printf%("line %%llu\\n", i%);', "(void)i;")
  local v, out = judge_in_child(quiet, LAUNCH, 1)
  t.ok(v, out:sub(1, 2000))
  t.eq(v.status, "correct", v.feedback)
  t.eq(v.printf.lines, 0)
  t.eq(v.printf.bytes, 0)
  t.eq(v.printf.truncated, false)
  t.ok(not v.feedback:find("printed", 1, true), v.feedback)
end)

t.done()
