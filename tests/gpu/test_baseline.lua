-- GPU: PyTorch baselines in verdicts. A task with a CUDA reference and a reference.py gets
-- speedup over eager, with torch.compile and the CUDA reference beside it; a KernelBench
-- problem's eager time is its reference; both are read from the disk cache the second time
-- (another worker: the same numbers); measuring torch.compile is not charged to the
-- candidate's timeout; --baselines none leaves the CUDA reference alone.
local t = require "km.tap"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true, cuda = true })
local task = require "km.task"
local eval = require "km.serve.pool"

local DIR = testing.tmpdir()
local CACHE = DIR .. "/baselines"
local GPU = tonumber(os.getenv("KM_TEST_GPU") or "0")
local ROOT, KMRUN = testing.paths()

local RELU = testing.problem(DIR, "19_ReLU", { sizes = "", inputs = "torch.randn(4096, 4096)" })
local RELU_CAND = testing.relu_candidate()

local function pool(opts)
  opts.gpus = { GPU }
  opts.env = { KM_BASELINE_DIR = CACHE }
  return assert(eval.pool(opts))
end

t.test("our task with reference.py: speedup over eager; torch.compile and the CUDA reference beside it", function()
  local lt = assert(task.load(ROOT .. "/tasks/l1_softplus"))
  local p = pool { timeout = 120 }
  local cand = assert(task.starter(lt))
  local v = p:eval(lt, cand, { seeds = 1, compile_mode = "default" })
  p:close()
  t.eq(v.status, "correct", v.feedback)
  t.eq(v.speedup_over, "pytorch_eager")
  t.ok(v.baselines and v.baselines.eager and v.baselines.compile, require("km.json").encode(v.baselines or {}))
  t.eq(v.baselines.errors, nil)
  t.near(v.speedup, v.speedup_eager, 1e-12)
  t.near(v.speedup_eager, v.baselines.eager.median / v.timing.candidate.median, 1e-9)
  t.near(v.speedup_compile, v.baselines.compile.median / v.timing.candidate.median, 1e-9)
  t.near(v.speedup_cuda_reference, v.timing.reference.median / v.timing.candidate.median, 1e-9)
  t.eq(v.compile_mode, "default")
  t.eq(v.baselines.eager.cached, false)
  -- where the time went: every stage, and this worker's start
  for _, k in ipairs { "task", "prepare", "baselines", "verify", "measure" } do
    t.ok(type(v.stage_seconds[k]) == "number" and v.stage_seconds[k] >= 0, k)
  end
  t.ok(v.worker_start_seconds and v.worker_start_seconds > 0, "worker start reported")
  t.ok(v.baselines.compile.compile_seconds > 0)
  t.note(("l1_softplus starter: %.4f ms; eager %.4f ms, compile %.4f ms, CUDA reference %.4f ms"):format(
    v.timing.candidate.median, v.baselines.eager.median, v.baselines.compile.median, v.timing.reference.median))
  -- a fresh worker: both baselines from the disk, the very numbers
  local p2 = pool { timeout = 120 }
  local v2 = p2:eval(lt, cand, { seeds = 1, compile_mode = "default" })
  p2:close()
  t.eq(v2.status, "correct", v2.feedback)
  t.eq(v2.baselines.eager.cached, true)
  t.eq(v2.baselines.compile.cached, true)
  t.eq(v2.baselines.eager.median, v.baselines.eager.median)
  t.eq(v2.baselines.compile.median, v.baselines.compile.median)
  -- a worker that imports torch ahead (kmrun's runs and kmrun eval ask for it): baselines on
  -- disk are read without waiting for the import, and the first candidate's checks use the
  -- CUDA reference while it runs; v2's worker imported torch inside its first evaluation
  local p4 = pool { timeout = 120, torch_ahead = true }
  local v4 = p4:eval(lt, cand, { seeds = 1, compile_mode = "default" })
  local v5 = p4:eval(lt, cand, { seeds = 1, compile_mode = "default" }) -- torch imported by now, or soon
  p4:close()
  t.eq(v4.status, "correct", v4.feedback)
  t.eq(v5.status, "correct", v5.feedback)
  t.eq(v4.baselines.eager.cached, true)
  t.eq(v4.baselines.eager.median, v.baselines.eager.median)
  t.ok(v4.eval_seconds < v2.eval_seconds / 2, ("first evaluation %.3f s with the import ahead, %.3f s without")
    :format(v4.eval_seconds, v2.eval_seconds))
  t.note(("a fresh worker's first evaluation: %.3f s importing torch on the way, %.3f s with it imported ahead"):format(
    v2.eval_seconds, v4.eval_seconds))
  -- none: the CUDA reference is the baseline, no PyTorch
  local p3 = pool { timeout = 120 }
  local v3 = p3:eval(lt, cand, { seeds = 1, eager = false, compile_mode = "off" })
  p3:close()
  t.eq(v3.speedup_over, "cuda_reference")
  t.eq(v3.baselines, nil)
  t.near(v3.speedup, v3.speedup_cuda_reference, 1e-12)
end)

t.test("a KernelBench problem: eager is the reference; torch.compile's time is not the candidate's", function()
  local rt = assert(task.load(RELU))
  -- 2 s per candidate (an evaluation of this problem takes about 0.3 s): torch's import and
  -- compiling (inductor, triton, autotuning) take longer than that together — 4.4 s where
  -- inductor's cache already held the graph — and are given their own limit by the pool
  local p = pool { timeout = 2 }
  local v = p:eval(rt, RELU_CAND, { seeds = 1, compile_mode = "max-autotune-no-cudagraphs" })
  p:close()
  t.eq(v.status, "correct", v.feedback)
  t.eq(v.speedup_over, "pytorch_eager")
  t.eq(v.speedup_cuda_reference, nil)
  t.ok(v.speedup_compile and v.speedup_compile > 0)
  t.ok(v.compile_mode == "max-autotune-no-cudagraphs" or v.compile_mode == "default", tostring(v.compile_mode))
  local setup = v.stage_seconds.task + v.stage_seconds.baselines
  t.ok(setup > 2, ("the one-time set-up (%.1f s: import %.1f, baselines %.1f, compiling %.1f) took longer than " ..
    "the candidate's limit, and did not count against it"):format(setup, v.stage_seconds.task, v.stage_seconds.baselines,
    v.baselines.compile.compile_seconds))
  t.near(v.timing.reference.median, v.baselines.eager.median, 1e-12)
end)

t.test("kmrun eval prints every baseline", function()
  local cdir = testing.candidate_dir(DIR .. "/cand", RELU_CAND)
  local p = io.popen("KM_BASELINE_DIR=" .. CACHE .. " " .. KMRUN .. " eval " .. RELU .. " " .. cdir ..
    " --no-energy --compile-mode max-autotune-no-cudagraphs --gpu " .. GPU .. " 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  t.ok(out:find("rc=0", 1, true), out)
  t.ok(out:find("over eager", 1, true), out)
  -- every baseline named with its time and ratio (km.feedback.speed's wording)
  t.ok(out:find("PyTorch eager [%d.]+ ms; speedup [%d.]+x over eager %(torch.compile%[[%w-]+%] [%d.]+ ms: [%d.]+x%)"), out)
end)

os.execute("rm -rf " .. DIR)
t.done()
