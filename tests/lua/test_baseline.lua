-- PyTorch baselines on the CPU (km.task.baseline's keys and records: tests/lua/test_jsoncache.lua):
-- torch.compile through the bridge (a mode that fails falls back, every mode failing is a
-- clear error, the compiled model gives eager's values on the same memory), a task's own
-- names for its reference.py, and the options that choose baselines. The judge measures
-- baselines on the GPU (tests/gpu/test_task_pytorch.lua). Skips without torch.
local t = require "km.tap"
local baseline = require "km.task.baseline"
local compare = require "km.compare"
local testing = require "km.testing"
local kb = testing.require_torch(t)

local DIR = testing.tmpdir()
local _, KMRUN = testing.paths()

local SCALE = testing.problem(DIR, "scale_add", { args = "k", init = "self.k = k", forward = "a, b",
  returns = "torch.relu(a * self.k + b)", sizes = "", inputs = "torch.randn(64, 33), torch.randn(64, 33)", init_inputs = "3.0" })

local sh = testing.sh

t.test("a task's own names: forward's inputs and outputs by position", function()
  local p = assert(kb.load(SCALE, { names = { inputs = { "x", "y" }, outputs = { "z" } } }))
  local s = assert(p:spec(1))
  t.eq(s.inputs[1].name .. "," .. s.inputs[2].name, "x,y")
  t.eq(s.outputs[1].name, "z")
  local io = kb.buffers_for(s, kb.host_buffer)
  assert(p:make_inputs(3, io))
  assert(p:forward(io))
  local x, y, z = io.x:to_table(), io.y:to_table(), io.z:to_table()
  t.near(z[7], math.max(x[7] * 3 + y[7], 0), 1e-6)
  p:release()
  -- counts that do not match the problem: an error that says both
  local q = assert(kb.load(SCALE, { names = { inputs = { "x" }, outputs = { "z" } } }))
  local ok, err, code = q:spec(1)
  t.eq(ok, nil)
  t.eq(code, "BAD_OUTPUTS")
  t.ok(err:find(SCALE, 1, true) == 1, err)
  t.ok(err:find("get_inputs() gives 2 inputs and forward 1 outputs; the task names 1 inputs (x) and 1 outputs (z)", 1, true), err)
  q:release()
  local r = assert(kb.load(SCALE, { names = { inputs = { "x", "x" }, outputs = { "z" } } }))
  ok, err = r:spec(1)
  t.eq(ok, nil)
  t.ok(err:find("distinct Lua names", 1, true), err)
  r:release()
end)

t.test("torch.compile: a failing mode falls back; the compiled model gives eager's values", function()
  if not os.execute("command -v g++ >/dev/null 2>&1") then
    t.skip("no C++ compiler: torch.compile's CPU backend (inductor) needs g++")
    return
  end
  local p = assert(kb.load(SCALE))
  local s = assert(p:spec(1))
  local io = kb.buffers_for(s, kb.host_buffer)
  assert(p:make_inputs(5, io))
  local okb, berr = p:bind(io, { variant = "compile" })
  t.eq(okb, nil, "bind(compile) before compile")
  t.ok(tostring(berr):find("before compile()", 1, true), berr)
  -- every mode failing: both reasons, one code
  local c, err, code = p:compile(io, { mode = "no-such-mode", fallback = "nor-this-one" })
  t.eq(c, nil)
  t.eq(code, "COMPILE_FAILED")
  t.ok(err:find("no-such-mode: RuntimeError: Unrecognized mode=no-such-mode", 1, true), err)
  t.ok(err:find("nor-this-one: RuntimeError: Unrecognized mode=nor-this-one", 1, true), err)
  -- the asked mode failing, default compiles (inductor builds C++ here: ~10 s)
  c, err = p:compile(io, { mode = "no-such-mode" })
  t.ok(c, err)
  t.eq(c.mode, "default")
  t.eq(c.asked, "no-such-mode")
  t.eq(#c.failed, 1)
  t.ok(c.seconds > 0)
  -- eager and compiled on the same inputs: the same values, in the same output buffer
  assert(p:forward(io))
  local want = io.out:to_table()
  io.out:from_table((function() local z = {} for i = 1, #want do z[i] = -1 end return z end)())
  local run = assert(p:bind(io, { variant = "compile" }))
  t.eq(run(), true)
  t.ok(compare.allclose(io.out:to_table(), want, { atol = 1e-6, rtol = 1e-5 }).ok, "compiled == eager")
  -- new inputs are read by the compiled model at each call
  assert(p:make_inputs(6, io))
  t.eq(run(), true)
  local got = io.out:to_table()
  assert(p:forward(io))
  t.ok(compare.allclose(got, io.out:to_table(), { atol = 1e-6, rtol = 1e-5 }).ok, "compiled follows new inputs")
  p:release()
end)

t.test("options: --baselines and --compile-mode, checked and mapped", function()
  local o = baseline.judge_opts({})
  t.eq(o.eager, true)
  t.eq(o.compile_mode, nil, "the default mode (km.task.kernelbench.COMPILE_MODE)")
  o = baseline.judge_opts { baselines = { "eager" }, compile_mode = "default" }
  t.eq(o.eager, true)
  t.eq(o.compile_mode, "off")
  o = baseline.judge_opts { baselines = { "compile" }, compile_mode = "max-autotune" }
  t.eq(o.eager, false)
  t.eq(o.compile_mode, "max-autotune")
  o = baseline.judge_opts { baselines = { "none" } }
  t.eq(o.eager, false)
  t.eq(o.compile_mode, "off")
  local out, rc = sh(KMRUN .. " eval --baselines fast tasks/l1_relu starter")
  t.eq(rc, 2, out)
  t.ok(out:find("'fast' is not one of", 1, true), out)
  out, rc = sh(KMRUN .. " eval --compile-mode turbo tasks/l1_relu starter")
  t.eq(rc, 2, out)
  t.ok(out:find("turbo", 1, true), out)
  out, rc = sh(KMRUN .. " eval --help")
  t.eq(rc, 0)
  t.ok(out:find("--compile-mode", 1, true) and out:find("--baselines", 1, true), out)
  out, rc = sh(KMRUN .. " sweep --help")
  t.eq(rc, 0)
  t.ok(out:find("--compile-mode", 1, true), out)
end)

t.test("a problem's spec is kept on disk by content: read back without torch, read again when the file changes", function()
  local jc, kbtask = require "km.jsoncache", require "km.task.kbtask"
  local specs = DIR .. "/specs"
  local dir_of = jc.dir
  jc.dir = function(kind, env) return kind == "specs" and specs or dir_of(kind, env) end
  local path = testing.problem(DIR, "spec_cached", { init = false, returns = "x * 2", sizes = "", inputs = "torch.rand(8, 3)" })
  local pt = assert(kbtask.load(path))
  t.eq(table.concat(pt.inputs[1].shape, "x"), "8x3")
  local files = io.popen("ls " .. specs):read("a")
  local key = files:match("^(%x+)%.json\n$")
  t.ok(key, "one record: " .. files)
  -- what the record says is what the next load sees: torch was not asked
  local rec = testing.read(specs .. "/" .. key .. ".json")
  testing.write(specs .. "/" .. key .. ".json", (rec:gsub("%[8, *3%]", "[5,3]")))
  t.eq(table.concat(assert(kbtask.load(path)).inputs[1].shape, "x"), "5x3")
  -- a changed file is described again, under another key
  testing.write(path, (testing.read(path):gsub("8, 3", "9, 3")))
  t.eq(table.concat(assert(kbtask.load(path)).inputs[1].shape, "x"), "9x3")
  local _, n = io.popen("ls " .. specs):read("a"):gsub("%.json", "")
  t.eq(n, 2, "a second record")
  -- a record that does not parse is described again
  testing.write(specs .. "/" .. key .. ".json", "{")
  testing.write(path, (testing.read(path):gsub("9, 3", "8, 3")))
  t.eq(table.concat(assert(kbtask.load(path)).inputs[1].shape, "x"), "8x3")
  jc.dir = dir_of
end)

t.test("kmrun tasks check on problem files: specs load; references run only where there is a GPU", function()
  if require("km.cuda").available() then t.skip("a GPU is here: tests/gpu/test_pytorch_ref.lua covers the run") return end
  local d = DIR .. "/check"
  os.execute("mkdir -p " .. d)
  testing.write(d .. "/scale_add.py", testing.read(SCALE))
  local out, rc = sh(KMRUN .. " tasks check " .. d .. " --precision bf16")
  t.eq(rc, 0, out)
  t.ok(out:find("ok   scale_add%s+[%d.]+ s\n1 task%(s%), 0 failed"), out)
  t.ok(out:find("problem files' references not run: no CUDA driver", 1, true), out)
  out, rc = sh(KMRUN .. " tasks check " .. d .. " --no-gpu")
  t.eq(rc, 0, out)
  t.ok(out:find("references not run: --no-gpu", 1, true), out)
  out, rc = sh(KMRUN .. " tasks check " .. d .. " --precision fp64")
  t.eq(rc, 2, out)
end)

-- The judge's baseline logic with stand-ins for its GPU parts: host buffers for its pool,
-- a wall-clock timer for km.timing's protocol, torch on the CPU. What is real: the task,
-- its reference.py through the bridge with the task's names, torch.compile, km.task.baseline's
-- folder, and Judge:baselines itself (order, cache, errors, the pool's hold messages).
local judge_mod = require "km.judge"
local task = require "km.task"

local function task_dir(name, pytorch)
  local d = DIR .. "/" .. name
  os.execute("mkdir -p " .. d)
  testing.write(d .. "/task.lua", [[return {
  name = "]] .. name .. [[", level = 1, category = "elementwise", description = "y = relu(3a + b)",
  reference = { source = "reference.cu", launch = "reference.lua", pytorch = "reference.py" },
  inputs = { { name = "a", dtype = "f32", shape = { "m", "n" }, init = { "uniform", -1, 1 } },
             { name = "b", dtype = "f32", shape = { "m", "n" }, init = { "uniform", -1, 1 } } },
  outputs = { { name = "y", dtype = "f32", shape = { "m", "n" } } },
  shapes = { { m = 64, n = 33 } },
  tolerance = { f32 = { atol = 1e-5, rtol = 1e-5 } },
  bytes = "12*m*n", flops = "3*m*n",
}]])
  testing.write(d .. "/reference.cu", 'extern "C" __global__ void k() {}\n')
  testing.write(d .. "/reference.lua", "return function(k, io, s) end\n")
  testing.write(d .. "/reference.py", pytorch)
  return assert(task.load(d))
end

local GOOD_PY = testing.problem_text { forward = "u, v", returns = "torch.relu(u * 3.0 + v)", sizes = "",
  inputs = "torch.rand(64, 33), torch.rand(64, 33)" }

-- a judge whose GPU parts are stood in for; timed = the runs it timed
local function cpu_judge(dir)
  local j = setmetatable({ device = { uuid = "GPU-cpu-test", name = "stand-in" }, tasks = {}, opts = {},
    torch_device = "cpu", timed = {}, held = {} }, judge_mod.Judge)
  j.pool = { put_all = function() end }
  function j:trial_io(tk, sym, seed) -- host buffers filled by the task's rule (uniform)
    local io = {}
    for i, spec in ipairs(tk.inputs) do
      local d = task.shape_of(spec, sym)
      local b = kb.host_buffer(spec.dtype, d)
      local vals = {}
      for k = 1, task.numel(d) do vals[k] = ((seed * 31 + i * 7 + k * 13) % 200) / 100 - 1 end
      io[spec.name] = b:from_table(vals)
    end
    for _, spec in ipairs(tk.outputs) do io[spec.name] = kb.host_buffer(spec.dtype, task.shape_of(spec, sym)) end
    return io, {}, {}
  end
  function j:time_run(st, run, sym, opts, check) -- the bound model, timed by the wall clock
    local io = self:trial_io(st.task, sym, 1)
    local bound = assert(run.torch:bind(io, { variant = run.variant }))
    local ms = {}
    for i = 1, 5 do
      local w = require("km.timing").wall()
      assert(bound(false))
      ms[i] = (require("km.timing").wall() - w) * 1e3
    end
    table.sort(ms)
    assert(bound()) -- once more with the copy into io's outputs, for the test to read
    self.timed[#self.timed + 1] = run.variant
    self.outs = io
    return { median = ms[3], n = 5, mode = "cold" }
  end
  j.on_hold = function(which) j.held[#j.held + 1] = which or "done" end
  return j
end

t.test("the judge's baselines: measured once, then read from disk; the task's names; the hold messages", function()
  if not os.execute("command -v g++ >/dev/null 2>&1") then t.skip("no C++ compiler for torch.compile") return end
  local cache = DIR .. "/judge-cache"
  local tk = task_dir("t_good", GOOD_PY)
  local j = cpu_judge()
  local st = { task = tk, times = {}, base_times = {} }
  -- the folder is asked for at each call: this test's
  local baseline_dir = baseline.dir
  baseline.dir = function() return cache end
  local ok, bl = pcall(j.baselines, j, st, { m = 64, n = 33 }, { compile_mode = "default" })
  t.ok(ok, bl)
  t.ok(bl.eager and bl.compile, require("km.json").encode(bl.errors or {}))
  t.eq(bl.eager.cached, false)
  t.eq(bl.compile.cached, false)
  t.eq(bl.compile.mode, "default")
  t.ok(bl.compile.compile_seconds > 0)
  t.eq(table.concat(j.timed, ","), "eager,compile")
  t.eq(table.concat(j.held, ","), "eager,compile,done", "the pool hears when measuring starts and ends")
  -- the model ran on the task's own names: y = relu(3a + b)
  local a, b, y = j.outs.a:to_table(), j.outs.b:to_table(), j.outs.y:to_table()
  t.near(y[5], math.max(3 * a[5] + b[5], 0), 1e-5)
  -- memoized in this worker
  t.eq(j:baselines(st, { m = 64, n = 33 }, { compile_mode = "default" }), bl)
  -- a fresh worker: both from the disk, nothing timed, no hold
  local j2 = cpu_judge()
  local bl2 = j2:baselines({ task = tk, times = {}, base_times = {} }, { m = 64, n = 33 }, { compile_mode = "default" })
  t.eq(bl2.eager.cached, true)
  t.eq(bl2.compile.cached, true)
  t.eq(bl2.eager.median, bl.eager.median)
  t.eq(#j2.timed, 0)
  t.eq(#j2.held, 0)
  -- another mode is another record; eager off measures compile only; both off: none
  local j3 = cpu_judge()
  local bl3 = j3:baselines({ task = tk, times = {}, base_times = {} }, { m = 64, n = 33 }, { compile_mode = "no-such-mode", eager = false })
  t.eq(bl3.eager, nil)
  t.eq(bl3.compile.cached, false, "a new mode: measured")
  t.eq(bl3.compile.mode, "default")
  t.eq(bl3.compile.asked, "no-such-mode")
  t.ok(bl3.compile.failed[1]:find("no-such-mode", 1, true))
  t.eq(j3:baselines({ task = tk, times = {}, base_times = {} }, { m = 64, n = 33 }, { compile_mode = "off", eager = false }), nil)
  -- a compile that fails in every mode is kept as unavailable: a fresh worker does not try again
  -- (a model torch.compile cannot compile in any mode, stood in for: its compile fails)
  local j4 = cpu_judge()
  function j4:torch_model(s4)
    local p4 = judge_mod.Judge.torch_model(self, s4)
    return setmetatable({ compile = function() return nil, "torch.compile failed in every mode tried: stand-in", "COMPILE_FAILED" end },
      { __index = p4 })
  end
  local bl4 = j4:baselines({ task = tk, times = {}, base_times = {} }, { m = 64, n = 33 }, { compile_mode = "bogus-a", eager = false })
  t.eq(bl4.compile, nil)
  t.ok(bl4.errors.compile:find("every mode tried: stand-in", 1, true), bl4.errors.compile)
  t.eq(table.concat(j4.held, ","), "compile,done")
  local j5 = cpu_judge()
  local bl5 = j5:baselines({ task = tk, times = {}, base_times = {} }, { m = 64, n = 33 }, { compile_mode = "bogus-a", eager = false })
  t.ok(bl5.errors.compile:find("kept from an earlier run", 1, true), bl5.errors.compile)
  t.eq(#j5.held, 0, "nothing tried")
  baseline.dir = baseline_dir
end)

t.test("the judge's baselines: a reference.py that does not fit the task is an error in the verdict, not a failure", function()
  local tk = task_dir("t_bad", testing.problem_text { init = false, forward = "u", returns = "u", sizes = "",
    inputs = "torch.rand(64, 33)" })
  local j = cpu_judge()
  local bl = j:baselines({ task = tk, times = {}, base_times = {} }, { m = 64, n = 33 }, { compile_mode = "off" })
  t.eq(bl.eager, nil)
  t.ok(bl.errors.eager:find("reference.py does not load", 1, true), bl.errors.eager)
  t.ok(bl.errors.eager:find("the task names 2 inputs (a, b)", 1, true), bl.errors.eager)
  t.eq(#j.timed, 0)
end)

os.execute("rm -rf " .. DIR)
t.done()
