-- GPU: kmrun serve --listen with the real pool, workers and judge (CPU side:
-- tests/lua/test_service.lua). Side by side on one GPU, the service's verdicts equal
-- `kmrun eval --json`'s on the same candidates (status, every check's shape, output and
-- result, what the speedup is over): the task's starter (correct), a launch that writes
-- nothing, a source that does not compile, and a kernel that writes to a wild address
-- (crashed, charged to the candidate: its worker saw its context lost). A correct verdict
-- carries its reward and parts (correct, speedups, roofline); the identical candidate sent
-- again is answered from the cache.
local t = require "km.tap"
local testing = require "km.testing"
t.require_gpu()
local json = require "km.json"
local sys = require "km.sys"

local fmt = string.format
local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local GPU = os.getenv("KM_TEST_GPU") or "0"
local TASK = ROOT .. "/tasks/l1_relu"
local starter = { kernel_cu = testing.read(TASK .. "/starter/kernel.cu"), launch_lua = testing.read(TASK .. "/starter/launch.lua") }
local CANDS = {
  starter = starter,
  skip = { kernel_cu = starter.kernel_cu, launch_lua = "return function(k, io, s) end\n" },
  compile = { kernel_cu = starter.kernel_cu .. "\nthis is not C++;\n", launch_lua = starter.launch_lua },
  wild = { kernel_cu = starter.kernel_cu:gsub("(__global__[^{;]-%b())%s*{",
    "%1 { if (blockIdx.x == 0 && threadIdx.x == 0) *(volatile float *)(1ll << 46) = 1.f; ", 1), launch_lua = starter.launch_lua },
}
local ORDER = { "starter", "skip", "compile", "wild" }

local function eval_json(name)
  local c = CANDS[name]
  local d = testing.candidate_dir(DIR .. "/" .. name, { source = c.kernel_cu, launch = c.launch_lua })
  local out = testing.run(fmt("%s eval %s %s --gpu %s --json --quiet", KMRUN, TASK, d, GPU))
  return json.decode(out) or {}
end

-- kmrun eval first, each alone on the GPU (no server yet)
local want = {}
for _, name in ipairs(ORDER) do want[name] = eval_json(name) end

local port, pid = testing.serve_listen(KMRUN, DIR, { token = "gpu-test-token-0123456789\n",
  args = { "--tasks", TASK, "--gpus", GPU }, tries = 1200, step_s = 0.1 })
t.ok(port, "the server started: " .. tostring(testing.read(DIR .. "/server.log")))

local function evaluate(body)
  testing.write(DIR .. "/body.json", json.encode(body))
  testing.sh(fmt("python3 '%s/tests/http_probe.py' '%s/r.json' 127.0.0.1:%d POST /v1/evaluate --token gpu-test-token-0123456789 --body '%s/body.json' --timeout 600",
    ROOT, DIR, port, DIR))
  local r = json.decode(testing.read(DIR .. "/r.json"))
  return json.decode(r.body or "") or {}, r
end

local function checks_text(v)
  local parts = {}
  for _, c in ipairs(type(v.checks) == "table" and v.checks or {}) do
    parts[#parts + 1] = fmt("%s/%s/%s/%s", tostring(c.shape), tostring(c.output), tostring(c.ok), tostring(c.fresh))
  end
  return table.concat(parts, " ")
end

t.test("the service's verdicts equal kmrun eval's, side by side on one GPU", function()
  local reqs = {}
  for i, name in ipairs(ORDER) do reqs[i] = { task = "l1_relu", candidate = CANDS[name] } end
  local got, raw = evaluate { requests = reqs, reward = "fast_p" }
  t.ok(got.verdicts, tostring(raw.body))
  for i, name in ipairs(ORDER) do
    local v, w = got.verdicts[i], want[name]
    t.eq(v.status, w.status, name)
    t.eq(v.judged, "gpu", name)
    t.eq(checks_text(v), checks_text(w), name .. ": the checks")
    t.eq(v.speedup_over, w.speedup_over, name .. ": what the speedup is over")
    t.eq(v.cause, "candidate", name)
  end
  t.eq(want.starter.status, "correct")
  t.eq(want.compile.status, "compile_error")
  t.eq(want.wild.status, "crashed")
  local s = got.verdicts[1]
  t.eq(s.reward_components.correct, 1)
  t.ok(s.reward_components.speedup and s.reward_components.roofline, "speedup and roofline in the parts")
  t.eq(s.reward, (s.reward_components.speedup_eager or s.reward_components.speedup) > 1 and 1 or 0, "fast_p")
  local again = evaluate { requests = { reqs[1] } }
  t.eq(again.verdicts[1].cached, true, "the same candidate again: from the cache")
end)

sys.kill(pid, "TERM")
sys.wait(pid, true)
sys.rmtree(DIR)
t.done()
