-- GPU: km.serve.pool.sanitize / kmrun eval --sanitize — compute-sanitizer finds what the ordinary
-- judge cannot: a shared-memory race (racecheck -> `race`), a read one element past the end
-- of an input (memcheck -> `out_of_bounds`; guard zones catch writes only); an honest kernel
-- stays `correct`.
local t = require "km.tap"
t.require_gpu()
local task = require "km.task"
local eval = require "km.serve.pool"
local sanitize = require "km.serve.sanitize"
local testing = require "km.testing"

local ROOT, KMRUN = testing.paths()
local rowsum = assert(task.load(ROOT .. "/tests/tasks/t_rowsum"))
local GPU = tonumber(os.getenv("KM_TEST_GPU") or "0")
if not sanitize.find() then t.skip_all("no compute-sanitizer: " .. select(2, sanitize.find())) end

local function reduction(opts)
  return ([[
extern "C" __global__ void rowsum(const float *x, float *y, int rows, int cols) {
  __shared__ float part[256];
  int r = blockIdx.x;
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols; c += 256) acc += x[(size_t)r * cols + c];
  part[threadIdx.x] = acc;
  %s
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    %s
  }
  if (threadIdx.x == 0) y[r] = part[0];
  %s
}]]):format(opts.sync and "__syncthreads();" or "", opts.sync and "__syncthreads();" or "", opts.tail or "")
end
local LAUNCH = [[return function(k, io, s) k.rowsum{ grid = s.rows, block = 256 }(io.x, io.y, s.rows, s.cols) end]]
local HONEST = reduction { sync = true }
local RACY = reduction { sync = false }
-- reads x[rows * cols], one past the end of the input, and keeps the result correct
local READS_PAST = reduction { sync = true, tail = [[
  if (threadIdx.x == 0 && r == rows - 1) {
    float extra = x[(size_t)rows * cols];
    if (extra == 1234.5f) y[r] += 1.0f;
  }]] }

local function cand(name, src) return { name = name, source = src, launch = LAUNCH, params = {} } end

t.test("the read past the end passes the ordinary judge: guard zones catch writes only", function()
  local pool = assert(eval.pool { gpus = { GPU }, timeout = 120 })
  local v = pool:eval(rowsum, cand("reads past", READS_PAST), { seeds = 1, timing = false })
  pool:close()
  t.eq(v.status, "correct", v.feedback)
end)

t.test("a reduction missing __syncthreads -> race", function()
  local t0 = os.time()
  local v = assert(eval.sanitize(rowsum, cand("racy", RACY), { gpu = GPU }))
  t.note(("%d s; %s"):format(os.time() - t0, v.feedback))
  t.eq(v.status, "race")
  t.ok(v.sanitizer.racecheck.candidate_findings > 0)
  t.ok(v.feedback:find("__syncthreads", 1, true) and v.feedback:find("rowsum", 1, true), v.feedback)
  t.eq(v.sanitizer.memcheck.candidate_findings, 0)
end)

t.test("a read one element past the end of an input -> out_of_bounds", function()
  local t0 = os.time()
  local v = assert(eval.sanitize(rowsum, cand("reads past", READS_PAST), { gpu = GPU }))
  t.note(("%d s; %s"):format(os.time() - t0, v.feedback))
  t.eq(v.status, "out_of_bounds")
  t.ok(v.feedback:find("Invalid __global__ read", 1, true), v.feedback)
  t.ok(v.feedback:find("kernel.cu", 1, true), "the finding names a source line: " .. v.feedback)
  t.eq(v.sanitizer.racecheck, nil) -- memcheck convicted it: racecheck not run
end)

t.test("kmrun eval --sanitize: an honest kernel is correct (exit 0)", function()
  local dir = testing.candidate_dir(testing.tmpdir(), { source = HONEST, launch = LAUNCH })
  local t0 = os.time()
  local p = io.popen(KMRUN .. " eval " .. ROOT .. "/tests/tasks/t_rowsum " .. dir .. " --sanitize --json 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  os.execute("rm -rf " .. dir)
  t.note(("%d s"):format(os.time() - t0))
  t.ok(out:find("rc=0", 1, true), out:sub(-1500))
  local v = require("km.json").decode(out:match("(%b{})%s*rc=%d+%s*$") or "null")
  t.ok(v and v.status == "correct", out:sub(-1500))
  t.ok(v.sanitizer.memcheck and v.sanitizer.racecheck, "both tools ran")
  t.eq(v.sanitizer.memcheck.candidate_findings + v.sanitizer.racecheck.candidate_findings, 0)
  t.ok(v.feedback:find("found no problem", 1, true), v.feedback)
end)

t.done()
