-- What a cold start says (issue 17 item 5): km.progress's stages, their frames from a GPU
-- worker through km.serve.pool's pool, the pool's compile ahead of a worker's set-up, and
-- `kmrun eval`'s lines on stderr, on the CPU:
--   * without a GPU, on a task folder and on a KernelBench problem file (torch from
--     KM_PYTHON): importing torch, building the spec, compiling, each once, on stderr only;
--     nothing of it on a second run with warm caches, nor with --quiet; with --json (stderr
--     not a terminal) stdout is the verdict's JSON alone and stderr says none of it;
--   * with a GPU worker whose judge is a stand-in (KM_PATH puts a km.judge before the
--     library's: the real module, its Judge replaced; the worker, pool and command are the
--     real ones): torch is imported once in a kmrun eval, by the worker, which builds the
--     spec the driver then reads back; the worker's slow stages are told on the driver's
--     stderr, and a warm run tells none of them but torch's import.
local t = require "km.tap"
local progress = require "km.progress"
local eval = require "km.serve.pool"
local json = require "km.json"
local testing = require "km.testing"

local fmt = string.format
local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()

if require("km.cuda").available() then t.note("a GPU is present: kmrun eval's no-GPU runs are not checked here") end
local NO_GPU = not require("km.cuda").available()

----------------------------------------------------------------------------------------
-- km.progress

-- a file-like sink for the printer
local function buffer()
  local b = { text = "" }
  function b:write(...) for _, s in ipairs { ... } do self.text = self.text .. s end return self end
  function b:flush() end
  return b
end

t.test("no sink: stages tell nothing; a sink hears start and done with seconds", function()
  local old = progress.sink(nil)
  progress.start("torch")() -- nothing to tell, nothing raised
  local evs = {}
  progress.sink(function(ev) evs[#evs + 1] = ev end)
  local a, b = progress.run("spec", function(x) return x, x + 1 end, 1)
  t.eq(a, 1) t.eq(b, 2)
  t.eq(#evs, 2)
  t.eq(evs[1].stage, "spec") t.eq(evs[1].state, "start")
  t.eq(evs[2].state, "done") t.ok(evs[2].seconds >= 0) t.eq(evs[2].failed, nil)
  t.raises(function() progress.run("nvrtc", error, "boom", 0) end, "boom")
  t.eq(evs[4].stage, "nvrtc") t.eq(evs[4].state, "done") t.eq(evs[4].failed, true)
  -- the end goes where the start went, even when the sink changed in between
  local done = progress.start("eager")
  progress.sink(nil)
  done()
  t.eq(evs[6].stage, "eager")
  progress.sink(old)
end)

t.test("the printer: a line per stage, the seconds when over one, quick work from afar unsaid", function()
  local out = buffer()
  local p = progress.printer("kmrun eval", out)
  p.event({ stage = "torch", state = "start" }, 0)
  t.eq(out.text, "kmrun eval: importing torch...")
  p.event { stage = "torch", state = "done", seconds = 2.46 }
  t.eq(out.text, "kmrun eval: importing torch... 2.5 s\n")
  out.text = ""
  p.event({ stage = "spec", state = "start" }, 0)
  p.event { stage = "spec", state = "done", seconds = 0.2 }
  t.eq(out.text, "kmrun eval: building the task spec (cached after this run)...\n", "under a second: no time")
  out.text = ""
  p.event({ stage = "nvrtc", state = "start" }, 0)
  p.event({ stage = "torch", state = "start" }, 0) -- another begins: the first line ends
  p.event { stage = "nvrtc", state = "done", seconds = 1.5 }
  p.event { stage = "torch", state = "done", seconds = 0.1, failed = true }
  t.eq(out.text, "kmrun eval: compiling the candidate (NVRTC; cached after this run)...\n"
    .. "kmrun eval: importing torch...\n"
    .. "kmrun eval: compiling the candidate (NVRTC; cached after this run): 1.5 s\n"
    .. "kmrun eval: importing torch: failed\n")
  -- from another process: told once it has run the delay; done sooner, nothing
  out.text = ""
  local q = progress.printer("kmrun eval", out, { delay = 0.05 })
  q.event { stage = "eager", state = "start" }
  q.tick()
  q.event { stage = "eager", state = "done", seconds = 0.01 }
  t.eq(out.text, "")
  q.event { stage = "torch.compile", state = "start" }
  os.execute("sleep 0.1")
  q.tick()
  t.ok(out.text:find("^kmrun eval: compiling and timing the torch.compile baseline"), out.text)
  q.event { stage = "torch.compile", state = "done", seconds = 12 }
  t.ok(out.text:find("%.%.%. 12%.0 s\n$"), out.text)
  q.close()
end)

----------------------------------------------------------------------------------------
-- the pool: frames about a job, the compile ahead of a worker's set-up

-- A candidate named "setup" finds a set-up that lasts until its compile ahead is in the
-- workers' cache (at most 10 s), and a moment for the compile process's answer to reach
-- the driver; any other, none.
local STANDIN = testing.standin_worker(DIR .. "/standin.lua", [[
  local function say(ev) ch:send(json.encode { id = req.id, progress = ev }) end
  say { stage = "torch", state = "start" }
  ch:send(json.encode { id = req.id, hold = "task" })
  if req.candidate.name == "setup" then
    local compiled, wall = require("km.serve.pool").compiled, require("km.timing").wall
    local o, t0 = require("km.judge").compile_opts("sm_90", req.candidate.params or {}), wall()
    while not compiled(req.candidate.source, o, os.getenv("KM_CACHE_DIR")) and wall() - t0 < 10 do
      os.execute("sleep 0.05")
    end
    os.execute("sleep 0.3")
  end
  say { stage = "torch", state = "done", seconds = 2 }
  ch:send(json.encode { id = req.id, hold = false })
  ch:send(json.encode { id = req.id, verdict = { status = "correct", candidate = req.candidate.name } })
]])

local KERNEL = 'extern "C" __global__ void relu(const float *x, float *y, int n) {\n'
  .. '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;\n}\n'
local LAUNCH = "return function(k, io, s) k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n) end\n"

t.test("a worker's progress frames reach on_progress in order, then its verdict", function()
  local seen = {}
  local pool = assert(eval.pool { gpus = { 0 }, timeout = 30, wrap = { KMRUN, STANDIN }, warm = false,
    worker_stderr = "null", on_progress = function(ev, job, gpu) seen[#seen + 1] = { ev, job, gpu } end })
  local v = pool:eval({ name = "t", dir = DIR .. "/t" }, { name = "quick" }, { timeout = 30 })
  t.eq(v.status, "correct")
  t.eq(#seen, 2)
  t.eq(seen[1][1].stage, "torch") t.eq(seen[1][1].state, "start")
  t.eq(seen[2][1].state, "done") t.eq(seen[2][1].seconds, 2)
  t.eq(seen[1][2].cand.name, "quick", "the job it is about") t.eq(seen[1][3], 0, "the GPU")
  pool:close()
end)

t.test("a worker's first job of a PyTorch-referenced task is compiled while the worker sets up", function()
  local cache = DIR .. "/nvrtc-ahead"
  local nv = {}
  local pool = assert(eval.pool { gpus = { 0 }, timeout = 30, wrap = { KMRUN, STANDIN }, worker_stderr = "null",
    env = { KM_CACHE_DIR = cache },
    on_progress = function(ev) if ev.stage == "nvrtc" then nv[#nv + 1] = ev end end })
  local torch_task = { name = "p", dir = DIR .. "/p.py", reference = { pytorch = DIR .. "/p.py" } }
  local cand = { name = "setup", source = KERNEL, launch = LAUNCH, params = {} }
  local o = require("km.judge").compile_opts("sm_90", {})
  t.eq(eval.compiled(KERNEL, o, cache), false)
  t.eq(pool:eval(torch_task, cand).status, "correct")
  t.eq(#nv, 2, "start and done while the worker set up")
  t.eq(nv[1].state, "start") t.eq(nv[2].state, "done") t.eq(nv[2].failed, nil)
  t.eq(eval.compiled(KERNEL, o, cache), true, "in the workers' cache")
  -- the task is set up on that worker now: its judge compiles at once, nothing to gain
  -- (a compile ahead is told as it starts, when the job is sent: these need no set-up time)
  local other = KERNEL:gsub("relu", "relu2")
  pool:eval(torch_task, { name = "again", source = other, launch = LAUNCH, params = {} })
  t.eq(#nv, 2, "not again for a task the worker has")
  -- a CUDA task's set-up is short: no compile ahead either
  pool:eval({ name = "c", dir = DIR .. "/c" }, { name = "cuda", source = other .. " ", launch = LAUNCH, params = {} })
  t.eq(#nv, 2, "not for a task without a PyTorch reference")
  t.eq(eval.compiled(other .. " ", o, cache), false)
  pool:close()
  -- a fresh worker, a compile already cached: nothing to do, nothing said
  pool = assert(eval.pool { gpus = { 0 }, timeout = 30, wrap = { KMRUN, STANDIN }, worker_stderr = "null",
    env = { KM_CACHE_DIR = cache }, on_progress = function(ev) if ev.stage == "nvrtc" then nv[#nv + 1] = ev end end })
  pool:eval(torch_task, cand)
  t.eq(#nv, 2, "cached: not compiled again")
  pool:close()
end)

----------------------------------------------------------------------------------------
-- kmrun eval

-- kmrun eval with the environment `env` (a string of NAME=value words); -> stdout, stderr, rc
local function kmrun_eval(env, args)
  return testing.run(fmt("env %s %s eval %s", env, KMRUN, args))
end

local LINES = {
  torch = "kmrun eval: importing torch...",
  spec = "kmrun eval: building the task spec (cached after this run)...",
  nvrtc = "kmrun eval: compiling the candidate (NVRTC; cached after this run)...",
  eager = "kmrun eval: timing the PyTorch eager baseline (cached after this run)...",
}
local function has(text, line) return text:find(line, 1, true) ~= nil end

local function cand_dir()
  local d = DIR .. "/cand"
  require("km.sys").mkdir(d)
  testing.write(d .. "/kernel.cu", KERNEL)
  testing.write(d .. "/launch.lua", "return function(k, io, s)\n  local n = io.x:numel()\n"
    .. "  k.relu{ grid = k.cdiv(n, 256), block = 256 }(io.x, io.out, n)\nend\n")
  return d
end
local CAND = cand_dir()

t.test("kmrun eval without a GPU on a task folder: the compile is told once, on stderr", function()
  if not NO_GPU then return t.note("skipped: a GPU is present") end
  local env = fmt("KM_CACHE_DIR=%s/nv-task KM_LINT_DIR=%s/no-lint", DIR, DIR)
  local out, err, rc = kmrun_eval(env, ROOT .. "/tasks/l1_relu starter")
  t.eq(rc, 3, out .. err)
  t.ok(has(err, LINES.nvrtc), err)
  t.ok(not out:find("kmrun eval:", 1, true), "nothing of it on stdout: " .. out)
  out, err, rc = kmrun_eval(env, ROOT .. "/tasks/l1_relu starter")
  t.eq(rc, 3)
  t.ok(not has(err, LINES.nvrtc), "cached: not told again: " .. err)
  -- empty caches again: --quiet says nothing; --json's stdout is the JSON verdict alone
  out, err = kmrun_eval(fmt("KM_CACHE_DIR=%s/nv-task2 KM_LINT_DIR=%s/no-lint", DIR, DIR),
    ROOT .. "/tasks/l1_relu starter --quiet")
  t.ok(not has(err, LINES.nvrtc), "--quiet: " .. err)
  out, err = kmrun_eval(fmt("KM_CACHE_DIR=%s/nv-task3 KM_LINT_DIR=%s/no-lint", DIR, DIR),
    ROOT .. "/tasks/l1_relu starter --json")
  t.eq(json.decode(out).status, "compiled")
  t.ok(not has(err, LINES.nvrtc), "--json, stderr not a terminal: " .. err)
end)

-- torch for the rest: from KM_PYTHON
local kb_ok, kb_why = require("km.task.kernelbench").available()
if not kb_ok then
  t.skip("kmrun eval on a problem file", "PyTorch not available (set KM_PYTHON to a python with torch): " .. tostring(kb_why))
  os.execute("rm -rf " .. DIR)
  return t.done()
end

-- a problem file whose module takes 0.7 s to run, so that its spec takes long enough to be told
local SLOW = testing.problem(DIR, "slow_relu", { imports = "import time\ntime.sleep(0.7)", sizes = "batch_size = 16\ndim = 1024" })

t.test("kmrun eval without a GPU on a problem file: torch's import, the spec and the compile, once", function()
  if not NO_GPU then return t.note("skipped: a GPU is present") end
  local env = fmt("KM_SPEC_DIR=%s/spec-cpu KM_CACHE_DIR=%s/nv-cpu KM_LINT_DIR=%s/no-lint", DIR, DIR, DIR)
  local out, err, rc = kmrun_eval(env, SLOW .. " " .. CAND)
  t.eq(rc, 3, out .. err)
  local a, b, c = err:find(LINES.torch, 1, true), err:find(LINES.spec, 1, true), err:find(LINES.nvrtc, 1, true)
  t.ok(a and b and c and a < b and b < c, "in order: " .. err)
  t.ok(out:find("^compiled  slow_relu  "), out)
  t.ok(not out:find("kmrun eval:", 1, true), "nothing of it on stdout: " .. out)
  -- warm caches: the spec is read, the compile is cached, torch is not imported
  out, err, rc = kmrun_eval(env, SLOW .. " " .. CAND)
  t.eq(rc, 3)
  for k, line in pairs(LINES) do t.ok(not has(err, line), k .. " told on a warm run: " .. err) end
  t.ok(out:find("^compiled  slow_relu  "), out)
end)

-- The GPU path with a stand-in judge: the real worker (km.serve.worker), pool and kmrun eval; the
-- judge's set-up and holds as the real one's (a PyTorch reference loaded under the hold
-- "torch", baselines not kept yet measured under "eager" then "compile"), on the CPU.
local SHIM = DIR .. "/shim"
require("km.sys").mkdir(SHIM .. "/km")
testing.write(SHIM .. "/km/judge.lua", [[
local real = dofile(package.km_libdir .. "/km/judge.lua")
real.new = function()
  local cuda = require "km.cuda"
  cuda.synchronize = function() return true end -- no context to check
  local task_mod, kb = require "km.task", require "km.task.kernelbench"
  local J = { device = { name = "stand-in", arch = "sm_90" }, tasks = {} }
  function J:has_task(key) return self.tasks[key] ~= nil end
  function J:forget(key) self.tasks[key] = nil end
  function J:task_state(tk)
    if type(tk) == "string" then
      if self.tasks[tk] then return self.tasks[tk] end
      local lt, err = task_mod.load(tk)
      if not lt then return nil, err end
      tk = lt
    end
    if self.tasks[tk.dir] then return self.tasks[tk.dir] end
    self.on_hold("torch")
    local prob, err = kb.load(tk.reference.pytorch, { precision = tk.reference.precision, device = "cpu" })
    self.on_hold(nil)
    if not prob then return nil, err end
    self.tasks[tk.dir] = { task = tk, prob = prob }
    return self.tasks[tk.dir]
  end
  function J:eval(tk, cand)
    local st, err = self:task_state(tk)
    if not st then return { status = "error", feedback = err } end
    local prog, log = require("km.nvrtc").compile(cand.source, real.compile_opts(self.device.arch, cand.params))
    if not prog then return { status = "compile_error", feedback = log } end
    local mark = os.getenv("KM_TEST_BASELINES")
    local f = io.open(mark)
    if f then f:close() else -- not kept yet: measured
      self.on_hold("eager") os.execute("sleep 1.2") self.on_hold("compile") self.on_hold(nil)
      io.open(mark, "w"):close()
    end
    return { status = "correct", feedback = "judged by a stand-in", stage_seconds = { task = 0 }, eval_seconds = 0 }
  end
  return J
end
return real
]])
-- each process's first km.task.kernelbench.available() (the one that imports torch), noted
testing.torch_import_shim(SHIM)

t.test("kmrun eval with a GPU worker: torch imported once, by the worker; its slow stages told", function()
  local log = DIR .. "/torch.log"
  local env = fmt("KM_PATH=%s KM_TEST_TORCH_LOG=%s KM_TEST_BASELINES=%s/baselines-kept KM_SPEC_DIR=%s/spec-gpu "
    .. "KM_CACHE_DIR=%s/nv-gpu KM_LINT_DIR=%s/no-lint", SHIM, log, DIR, DIR, DIR, DIR)
  local out, err, rc = kmrun_eval(env, SLOW .. " " .. CAND)
  t.eq(rc, 0, out .. err)
  t.ok(out:find("^correct  slow_relu  "), out)
  t.eq(testing.read(log), "worker\n", "one import, in the worker (the driver left the spec to it)")
  t.ok(has(err, LINES.torch) and has(err, LINES.spec) and has(err, LINES.eager), err)
  t.ok(err:find("baseline %(cached after this run%)%.%.%. 1%.%d s\n"), "the baseline's seconds: " .. err)
  t.ok(not out:find("kmrun eval:", 1, true), "nothing of it on stdout: " .. out)
  t.ok(#(require("km.sys").readdir(DIR .. "/spec-gpu") or {}) > 0, "the worker kept the spec")
  -- warm: the spec read (in both processes, without torch in the driver), the baselines kept
  out, err, rc = kmrun_eval(env, SLOW .. " " .. CAND)
  t.eq(rc, 0, err)
  t.eq(testing.read(log), "worker\nworker\n", "a fresh worker imports torch; the driver never")
  for _, k in ipairs { "spec", "nvrtc", "eager" } do t.ok(not has(err, LINES[k]), k .. " told on a warm run: " .. err) end
  t.ok(has(err, LINES.torch), "torch's import, every fresh worker's: " .. err)
  -- empty caches with --json: the verdict's JSON alone on stdout, the stages unsaid
  out, err, rc = kmrun_eval(env:gsub("spec%-gpu", "spec-gpu2"):gsub("nv%-gpu", "nv-gpu2")
    :gsub("baselines%-kept", "baselines-kept2"), SLOW .. " " .. CAND .. " --json")
  t.eq(rc, 0, err)
  t.eq(json.decode(out).status, "correct", "stdout is the JSON verdict only")
  t.ok(not err:find("kmrun eval:", 1, true), "--json, stderr not a terminal: " .. err)
  t.eq(testing.read(log), "worker\nworker\nworker\n")
end)

os.execute("rm -rf " .. DIR)
t.done()
