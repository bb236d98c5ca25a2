-- GPU: kmrun serve with the real worker and judge behind the socket (CPU side:
-- tests/lua/test_serve.lua). On a KernelBench-format problem with its own caches: a served
-- `kmrun eval` gives the verdict a worker of its own gives (correct, the same kernel timed),
-- the second served evaluation skips torch's import and is faster than `--no-server`; a
-- candidate that loses the context gets `crashed` and the next served evaluation is judged
-- by a fresh worker; a problem file edited on disk is judged as edited (a fresh worker: the
-- old one keeps the model it loaded); `kmrun serve --stop` ends it, and a `kmrun eval` whose
-- own worker was slow to import torch says `kmrun serve` exists; `kmrun eval --serve` starts
-- a server where none runs, and the next one is judged by it. The seconds are noted.
local t = require "km.tap"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true })
local json = require "km.json"
local sys = require "km.sys"
local serve = require "km.serve.resident"
local wall = require("km.timing").wall

local fmt = string.format
local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local GPU = os.getenv("KM_TEST_GPU") or "0"
local SOCK = DIR .. "/serve.sock"
local RELU = testing.problem(DIR, "19_ReLU", { sizes = "batch_size = 4096\ndim = 4096" })
local CAND = testing.candidate_dir(DIR .. "/cand", testing.relu_candidate())
local WILD = testing.candidate_dir(DIR .. "/wild", { source = [[extern "C" __global__ void relu(const float *x, float *y, long long n) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *(volatile float *)(y - (1ll << 40)) = 1.f; // far outside anything mapped
}]], launch = testing.relu_candidate().launch })

local ENV = fmt("KM_SERVE_SOCKET=%s KM_SPEC_DIR=%s/spec KM_CACHE_DIR=%s/nvrtc KM_BASELINE_DIR=%s/baselines KM_LINT_DIR=%s/no-lint",
  SOCK, DIR, DIR, DIR, DIR)

local function has(text, s) return text:find(s, 1, true) ~= nil end

local function kmrun_eval(cand, args)
  local w0 = wall()
  local out, err, rc = testing.run(fmt("env %s %s eval %s %s --gpu %s --no-energy --baselines eager --json %s",
    ENV, KMRUN, RELU, cand, GPU, args or ""))
  return json.decode(out) or {}, err, rc, wall() - w0
end

local LOG = DIR .. "/serve.log"
local pid = assert(sys.spawn({ "sh", "-c", fmt("exec env %s %s serve --gpu %s --idle 300 2>%s", ENV, KMRUN, GPU, LOG) }))
local up
for _ = 1, 1200 do
  up = serve.hello(SOCK)
  if up or sys.wait(pid) ~= false then break end
  sys.sleep(0.1)
end
if not up then
  t.test("kmrun serve starts", function() t.ok(false, "it did not answer: " .. (testing.read(LOG) or "")) end)
  if sys.wait(pid) == false then sys.kill(pid, "KILL") sys.wait(pid, true) end
  t.done()
end

local served = {}
t.test("served: correct, the same verdict's shape as a worker of its own; the second skips torch's import", function()
  local v, err, rc, s = kmrun_eval(CAND)
  t.eq(rc, 0, err)
  t.eq(v.status, "correct", err)
  t.eq(v.server.pid, pid, "judged by the server")
  served[1] = s
  local v2, err2, rc2, s2 = kmrun_eval(CAND)
  t.eq(rc2, 0, err2)
  t.eq(v2.server.evaluations, 2)
  t.ok(v2.timing and v2.timing.candidate and v2.timing.candidate.median > 0, "timed")
  served[2] = s2
  local v3, err3, rc3, s3 = kmrun_eval(CAND, "--no-server")
  t.eq(rc3, 0, err3)
  t.eq(v3.server, nil, "--no-server: a worker of its own")
  t.eq(v3.status, "correct")
  -- the same kernel on the same GPU: the two medians agree within 5%
  local a, b = v2.timing.candidate.median, v3.timing.candidate.median
  t.ok(math.abs(a - b) / b < 0.05, fmt("served %.4f ms, own worker %.4f ms", a, b))
  t.ok(s2 < s3, fmt("a served warm evaluation (%.2f s) is faster than a fresh worker's (%.2f s)", s2, s3))
  t.note(fmt("kmrun eval: served, first %.2f s, warm %.2f s; --no-server %.2f s", served[1], s2, s3))
end)

t.test("a candidate that loses the context: crashed; the next is judged by a fresh worker", function()
  local v, err = kmrun_eval(WILD)
  t.ok(v.status == "crashed" or v.status == "out_of_bounds", tostring(v.status) .. err)
  t.ok(v.server ~= nil, "served")
  local v2, err2, rc2 = kmrun_eval(CAND)
  t.eq(rc2, 0, err2)
  t.eq(v2.status, "correct")
  t.ok(v2.worker_start_seconds ~= nil, "a fresh worker judged it")
end)

t.test("a problem file edited while served: judged against the edited model, then the restored one", function()
  local original = testing.read(RELU)
  testing.write(RELU, testing.problem_text { sizes = "batch_size = 4096\ndim = 4096", returns = "torch.relu(x) * 2" })
  local v, err = kmrun_eval(CAND)
  t.eq(v.status, "mismatch", "the ReLU candidate against relu(x) * 2: " .. tostring(v.status) .. err)
  t.ok(v.server and v.server.task_restarts >= 1, "a fresh worker loaded the edited model")
  testing.write(RELU, original)
  local v2, err2, rc2 = kmrun_eval(CAND)
  t.eq(rc2, 0, err2)
  t.eq(v2.status, "correct", "and the restored one")
end)

t.test("kmrun serve --stop: the server ends and removes its socket", function()
  local out, _, rc = testing.run(fmt("%s serve --stop --socket %s", KMRUN, SOCK))
  t.eq(rc, 0, out)
  t.ok(sys.wait(pid, true))
  t.eq(select(3, require("km.proc").connect(SOCK)), "NOT_FOUND")
  t.note(testing.read(LOG) or "")
  -- no server now: a worker of its own imports torch; a slow import ends with the hint
  local out2, err2, rc2 = testing.run(fmt("env %s %s eval %s %s --gpu %s --no-energy --baselines eager",
    ENV, KMRUN, RELU, CAND, GPU))
  t.eq(rc2, 0, out2 .. err2)
  local secs = tonumber(err2:match("importing torch[%.:]+ ([%d%.]+) s"))
  t.eq(has(err2, "`kmrun serve &`"), (secs or 0) >= serve.HINT_SECONDS, "the hint, after an import of " .. tostring(secs) .. " s: " .. err2)
end)

t.test("kmrun eval --serve: starts a server where none runs; the next kmrun eval is judged by it", function()
  t.eq(select(3, require("km.proc").connect(SOCK)), "NOT_FOUND", "no server left by the test before")
  local v1, err1, rc1, s1 = kmrun_eval(CAND, "--serve")
  t.eq(rc1, 0, err1)
  t.eq(v1.status, "correct", err1)
  t.ok(has(err1, "started a kmrun serve on " .. SOCK), err1)
  t.ok(type(v1.server) == "table", "judged by the server it started: " .. err1)
  local v2, err2, rc2, s2 = kmrun_eval(CAND, "--serve")
  t.eq(rc2, 0, err2)
  t.eq(v2.status, "correct", err2)
  t.ok(not has(err2, "started a kmrun serve"), "the running one is used: " .. err2)
  t.eq(v2.server.pid, v1.server.pid)
  t.ok(s2 < s1, ("the second evaluation %.2f s, the first (the server started, torch imported) %.2f s"):format(s2, s1))
  t.note(("kmrun eval --serve: %.2f s starting the server, then %.2f s"):format(s1, s2))
  local out, _, rc = testing.run(fmt("%s serve --stop --socket %s", KMRUN, SOCK))
  t.eq(rc, 0, out)
end)

if sys.wait(pid) == false then sys.kill(pid, "KILL") sys.wait(pid, true) end
os.execute("rm -rf " .. DIR)
t.done()
