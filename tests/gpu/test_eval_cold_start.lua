-- GPU: kmrun eval's cold start (issue 17 item 5) with the real worker and judge. On a
-- problem file with empty caches torch is imported once, by the worker (a km.task.kernelbench put
-- before the library's through KM_PATH notes each process's first available(), the call that
-- imports torch); the stages are told on stderr and not on stdout; a second run with warm
-- caches tells no spec, compile or baseline, and its --json stdout is the verdict alone; with
-- only the NVRTC cache empty, the candidate is compiled while the worker imports torch, so the
-- judge's own compile is a cache hit. The seconds of the runs are noted (CPU-side
-- counterpart: tests/lua/test_eval_progress.lua).
local t = require "km.tap"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true })
local json = require "km.json"
local wall = require("km.timing").wall

local fmt = string.format
local _, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local GPU = os.getenv("KM_TEST_GPU") or "0"
local RELU = testing.problem(DIR, "19_ReLU", { sizes = "batch_size = 4096\ndim = 4096" })
local CAND = testing.candidate_dir(DIR .. "/cand", testing.relu_candidate())

testing.torch_import_shim(DIR .. "/shim")

local LOG = DIR .. "/torch.log"
local ENV = fmt("KM_PATH=%s/shim KM_TEST_TORCH_LOG=%s KM_SPEC_DIR=%s/spec KM_CACHE_DIR=%s/nvrtc "
  .. "KM_BASELINE_DIR=%s/baselines KM_LINT_DIR=%s/no-lint", DIR, LOG, DIR, DIR, DIR, DIR)

-- -> stdout, stderr, exit status, seconds. env: more NAME=value words (later ones win)
local function kmrun_eval(args, env)
  local w0 = wall()
  local out, err, rc = testing.run(fmt("env %s %s %s eval %s %s --gpu %s --no-energy --baselines eager %s",
    ENV, env or "", KMRUN, RELU, CAND, GPU, args))
  return out, err, rc, wall() - w0
end

local function has(text, s) return text:find(s, 1, true) ~= nil end

t.test("empty caches: torch imported once, in the worker; the stages on stderr only", function()
  local out, err, rc, s = kmrun_eval("")
  t.eq(rc, 0, out .. err)
  t.ok(out:find("^correct  19_ReLU  "), out)
  t.eq(testing.read(LOG), "worker\n", "the driver left the spec to the worker, which imports torch anyway")
  t.ok(has(err, "kmrun eval: importing torch..."), err)
  t.ok(not has(out, "kmrun eval:"), "nothing of it on stdout: " .. out)
  t.ok(#(require("km.sys").readdir(DIR .. "/spec") or {}) > 0, "the worker kept the spec")
  t.note(fmt("cold kmrun eval: %.1f s; stderr:\n%s", s, err))
end)

t.test("warm caches: no spec, compile or baseline told; --json's stdout is the verdict", function()
  local out, err, rc, s = kmrun_eval("")
  t.eq(rc, 0, out .. err)
  for _, line in ipairs { "building the task spec", "compiling the candidate", "PyTorch eager baseline" } do
    t.ok(not has(err, line), line .. " told on a warm run: " .. err)
  end
  t.eq(testing.read(LOG), "worker\nworker\n", "every fresh worker imports torch; the driver never")
  t.note(fmt("warm kmrun eval: %.1f s; stderr:\n%s", s, err))
  out, err, rc = kmrun_eval("--json")
  t.eq(rc, 0, err)
  local v = json.decode(out)
  t.eq(v.status, "correct")
  t.ok(v.stage_seconds.task > 0, "the worker's set-up is the task stage's")
  t.ok(not has(err, "kmrun eval:"), "--json, stderr not a terminal: " .. err)
end)

t.test("an empty NVRTC cache: the candidate is compiled while the worker imports torch", function()
  local out, err, rc, s = kmrun_eval("--json", fmt("KM_CACHE_DIR=%s/nvrtc2", DIR))
  t.eq(rc, 0, err)
  local v = json.decode(out)
  t.eq(v.cached_compile, true, "the judge's compile found the compile process's entry")
  t.note(fmt("kmrun eval, only the NVRTC cache empty: %.1f s (task stage %.2f s, prepare %.3f s)", s,
    v.stage_seconds.task, v.stage_seconds.prepare or -1))
end)

os.execute("rm -rf " .. DIR)
t.done()
