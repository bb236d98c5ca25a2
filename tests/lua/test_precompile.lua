-- km.task.precompile on the CPU: which tasks a run compiles ahead and under what key, the claim
-- that settles who compiles a task (the judge waits only for a precompiler that has it and
-- still runs), and — with PyTorch — a real precompiler process whose compiled graph a later
-- process's torch.compile finds in inductor's cache (inductor on the CPU: the GPU test does
-- the same on CUDA, and checks that precompiling runs nothing on the GPU).
local t = require "km.tap"
local testing = require "km.testing"
local sys = require "km.sys"
local json = require "km.json"
local pre = require "km.task.precompile"

local kb = require "km.task.kernelbench"
local okt, tinfo = kb.available()
local NO_TORCH = not okt and ("PyTorch not available (set KM_PYTHON to a python with torch): " .. tostring(tinfo)) or nil
-- t.test, or the test skipped with the reason where PyTorch is missing
local function torch_test(name, fn)
  if NO_TORCH then t.skip(name, NO_TORCH) else t.test(name, fn) end
end

local DIR = testing.tmpdir()
local ROOT, KMRUN = testing.paths()
local wall = require("km.timing").wall

local function problem_task(path, text, precision)
  return { reference = { pytorch = path, precision = precision or "fp32", source_text = text } }
end

local function ref_task(path, text, ins, outs)
  local t_ = { reference = { pytorch_file = path, pytorch_text = text }, inputs = {}, outputs = {} }
  for i, n in ipairs(ins) do t_.inputs[i] = { name = n } end
  for i, n in ipairs(outs) do t_.outputs[i] = { name = n } end
  return t_
end

t.test("sys.create: exactly one of two creates of a path wins; the loser is told EXISTS", function()
  local p = DIR .. "/claimed"
  t.eq(sys.create(p, "first"), true)
  local ok, msg, code = sys.create(p, "second")
  t.eq(ok, nil)
  t.eq(code, "EXISTS", msg)
  local f = assert(io.open(p, "rb"))
  t.eq(f:read("a"), "first")
  f:close()
  local _, _, code2 = sys.create(DIR .. "/no/such/folder/x")
  t.eq(code2, "NOT_FOUND")
end)

t.test("entry: a problem file or a task's reference.py, keyed by what the judge's compile depends on", function()
  local a = pre.entry(problem_task("/p/1_x.py", "text"), "default")
  t.eq(a.path, "/p/1_x.py")
  t.eq(a.precision, "fp32")
  t.eq(a.names, nil)
  t.eq(#a.key, 64)
  t.eq(a.text, nil, "the text is in the key, not carried")
  local b = pre.entry(ref_task("/t/reference.py", "text", { "x", "w" }, { "y" }), "default")
  t.eq(b.names.inputs[2], "w")
  t.eq(b.names.outputs[1], "y")
  local keys = {
    a.key, b.key,
    pre.entry(problem_task("/p/1_x.py", "text2"), "default").key,              -- the file's content
    pre.entry(problem_task("/p/1_x.py", "text", "fp16"), "default").key,       -- the precision
    pre.entry(problem_task("/p/1_x.py", "text"), "reduce-overhead").key,       -- the mode
    pre.entry(ref_task("/t/reference.py", "text", { "x", "v" }, { "y" }), "default").key, -- the names
  }
  local seen = {}
  for i, k in ipairs(keys) do t.ok(not seen[k], "key " .. i .. " differs from the others") seen[k] = true end
  t.eq(pre.entry(problem_task("/p/1_x.py", "text"), "default").key, a.key, "the same task: the same key")
end)

t.test("entry: nothing where there is no PyTorch model, or the mode benchmarks on the GPU as it compiles", function()
  t.eq(pre.entry({ reference = { source_text = "cuda" } }, "default"), nil)
  t.eq(pre.entry(problem_task("/p/1_x.py", "text"), "max-autotune-no-cudagraphs"), nil)
  t.eq(pre.entry(problem_task("/p/1_x.py", "text"), "max-autotune"), nil)
  t.eq(pre.entry(problem_task("/p/1_x.py", "text"), nil), nil)
end)

torch_test("entries: none without a compile baseline or in a mode that benchmarks; one per distinct task", function()
  local tasks = { problem_task("/p/1_x.py", "a"), problem_task("/p/2_y.py", "b"), problem_task("/p/1_x.py", "a") }
  t.eq(#pre.entries(tasks, { baselines = { "eager" }, compile_mode = "default" }), 0)
  t.eq(#pre.entries(tasks, { baselines = { "none" }, compile_mode = "default" }), 0)
  t.eq(#pre.entries(tasks, { compile_mode = "max-autotune-no-cudagraphs" }), 0)
  local list = pre.entries(tasks, { baselines = { "eager", "compile" }, compile_mode = "default" })
  t.eq(#list, 2)
  t.eq(list[1].path, "/p/1_x.py")
  t.eq(list[2].path, "/p/2_y.py")
end)

t.test("before_compile: nothing to do without a precompiler's folder", function()
  t.eq(pre.before_compile(pre.entry(problem_task("/p/1_x.py", "a"), "default"), nil), nil)
  t.eq(pre.before_compile(nil, DIR), nil)
  t.eq(pre.before_compile(pre.entry(problem_task("/p/1_x.py", "a"), "default"), DIR .. "/gone"), nil,
    "a folder removed (the pool closed): the judge compiles")
end)

torch_test("before_compile: an unclaimed task is the judge's, and the precompiler then skips it", function()
  local d = testing.tmpdir()
  local e = pre.entry(problem_task("/p/1_x.py", "a"), "default")
  local r = pre.before_compile(e, d)
  t.eq(r.by, "judge")
  t.eq(r.waited, 0)
  local f = assert(io.open(d .. "/" .. e.key .. ".claim", "rb"))
  t.eq(f:read("a"), "judge")
  f:close()
  -- the precompiler's process, over the same entry: claimed already, so nothing compiled
  testing.write(d .. "/plan.json", json.encode { entries = { { key = e.key, path = "/p/1_x.py", precision = "fp32", mode = "default" } } })
  local out, rc = testing.sh(("KM_BASELINE_DIR=%s %s %s/lua/km/task/precompiler.lua %s"):format(d .. "/b", KMRUN, ROOT, d))
  t.eq(rc, 0, out)
  t.eq(out:find("compiled", 1, true), nil, out)
  t.eq(io.open(d .. "/" .. e.key .. ".done", "rb"), nil, "no result: it did not compile it")
  sys.rmtree(d)
end)

t.test("before_compile: a task the precompiler has: the judge waits for its result", function()
  local d = testing.tmpdir()
  local e = pre.entry(problem_task("/p/1_x.py", "a"), "default")
  testing.write(d .. "/pid", tostring(sys.pid())) -- a precompiler that runs (this process)
  assert(sys.create(d .. "/" .. e.key .. ".claim", "precompiler"))
  testing.write(d .. "/" .. e.key .. ".done", json.encode { ok = true, seconds = 1.5 })
  local r = pre.before_compile(e, d)
  t.eq(r.by, "precompiler")
  t.eq(r.result.ok, true)
  t.ok(r.waited < 1, r.waited)
  -- still compiling: the judge waits until the result comes (here, never: its limit)
  local e2 = pre.entry(problem_task("/p/2_y.py", "b"), "default")
  assert(sys.create(d .. "/" .. e2.key .. ".claim", "precompiler"))
  local w0 = wall()
  local r2 = pre.before_compile(e2, d, { wait_s = 0.3 })
  t.eq(r2.by, "precompiler")
  t.eq(r2.result, nil)
  t.ok(wall() - w0 >= 0.3 and wall() - w0 < 2, wall() - w0)
  sys.rmtree(d)
end)

t.test("before_compile: a precompiler that is gone is not waited for", function()
  local d = testing.tmpdir()
  local pid = assert(sys.spawn({ "true" }))
  sys.wait(pid, true)
  testing.write(d .. "/pid", tostring(pid))
  local e = pre.entry(problem_task("/p/1_x.py", "a"), "default")
  assert(sys.create(d .. "/" .. e.key .. ".claim", "precompiler"))
  local w0 = wall()
  local r = pre.before_compile(e, d, { wait_s = 30 })
  t.eq(r.by, "precompiler")
  t.eq(r.result, nil)
  t.ok(wall() - w0 < 2, "returned at once: " .. (wall() - w0))
  -- a zombie (exited, not reaped by its parent) is gone too
  local z = assert(sys.spawn({ "true" }))
  local z0 = wall()
  while wall() - z0 < 5 do
    local f = io.open("/proc/" .. z .. "/stat", "rb")
    local st = f and f:read("a") or ""
    if f then f:close() end
    if st:match("^%d+ %b() Z") then break end
    sys.sleep(0.01)
  end
  testing.write(d .. "/pid", tostring(z))
  local e2 = pre.entry(problem_task("/p/2_y.py", "b"), "default")
  assert(sys.create(d .. "/" .. e2.key .. ".claim", "precompiler"))
  w0 = wall()
  pre.before_compile(e2, d, { wait_s = 30 })
  t.ok(wall() - w0 < 2, "a zombie is not waited for: " .. (wall() - w0))
  sys.wait(z, true)
  sys.rmtree(d)
end)

-- With PyTorch: a real precompiler process (inductor on the CPU), then torch.compile of the
-- same problem in another process, which finds the graph in inductor's cache.
torch_test("a precompiler's graph is found by a later process's torch.compile (CPU inductor)", function()
  local ind = DIR .. "/inductor"
  local path = testing.problem(DIR .. "/p", "7_Linear_ReLU", { args = "n, m", init = "self.lin = nn.Linear(n, m)",
    returns = "torch.relu(self.lin(x)) * 2 + 1", sizes = "", inputs = "torch.randn(32, 64)", init_inputs = "64, 48" })
  local text = assert(io.open(path, "rb")):read("a")
  local e = pre.entry(problem_task(path, text), "default")
  local bdir = DIR .. "/baselines"
  local env = { TORCHINDUCTOR_CACHE_DIR = ind, KM_BASELINE_DIR = bdir, KM_PYTHON = os.getenv("KM_PYTHON") }
  local h = assert(pre.start({ e }, { device = "cpu", env = env }))
  t.ok(h.dir and h.pid, "started")
  local w0 = wall()
  -- a judge reaching the task after the precompiler claimed it (it claims once torch is in)
  while not io.open(h.dir .. "/" .. e.key .. ".claim", "rb") and wall() - w0 < 120 do sys.sleep(0.05) end
  local r = pre.before_compile(e, h.dir, { wait_s = 300 })
  t.eq(r.by, "precompiler", "it claimed the task first")
  t.ok(r.result and r.result.ok, json.encode(r.result or {}))
  t.eq(r.result.fx_misses, 1, "compiled once, into the cache")
  local s = pre.status(h)
  t.eq(s.compiled, 1)
  pre.stop(h)
  t.eq(io.open(h.dir or "/nonexistent/x", "rb"), nil)
  t.ok(wall() - w0 < 300)
  -- a later run with the same caches: nothing left to compile
  local old = os.getenv("KM_BASELINE_DIR")
  local list
  do
    -- entries() reads the baselines' folder the judge and the precompiler use
    local bd = require("km.task.baseline")
    local dir0 = bd.dir
    bd.dir = function() return bdir end
    list = pre.entries({ problem_task(path, text) }, { compile_mode = "default" })
    bd.dir = dir0
  end
  t.eq(#list, 0, "kept as compiled")
  t.eq(old, os.getenv("KM_BASELINE_DIR"))
  -- the judge's torch.compile in a fresh process: inductor's cache has the graph
  local script = DIR .. "/judge.lua"
  testing.write(script, ([[
local kb = require "km.task.kernelbench"
local prob = assert(kb.load(%q, { device = "cpu" }))
local s = assert(prob:spec())
local io_ = {}
for _, x in ipairs(s.inputs) do io_[x.name] = kb.host_buffer(x.dtype, x.shape) end
for _, x in ipairs(s.outputs) do io_[x.name] = kb.host_buffer(x.dtype, x.shape) end
local r = assert(prob:compile(io_, { mode = "default", fallback = false }))
print(require("km.json").encode(r))
]]):format(path))
  local out, err, rc = testing.run(("TORCHINDUCTOR_CACHE_DIR=%s %s %s"):format(ind, KMRUN, script))
  t.eq(rc, 0, err)
  local res = json.decode(out:match("{.*}") or "null")
  t.ok(res, out .. err)
  t.eq(res.fx_hits, 1, "the compiled graph came from the cache")
  t.eq(res.fx_misses, 0)
  -- and with an empty cache the same compile misses (what the hit above saved)
  local out2, err2 = testing.run(("TORCHINDUCTOR_CACHE_DIR=%s %s %s"):format(DIR .. "/inductor-empty", KMRUN, script))
  local res2 = json.decode(out2:match("{.*}") or "null")
  t.ok(res2, out2 .. err2)
  t.eq(res2.fx_misses, 1)
  -- a compile for the CPU says nothing on stderr: no torch log line (W/I/E + date), such as
  -- cpp_extension's "No CUDA runtime is found" on a host with a toolkit and no GPU
  t.ok(not ("\n" .. err2):find("\n[WIE]%d%d%d%d ") and not err2:find("No CUDA runtime", 1, true), err2)
end)

torch_test("torch.compile's outputs are checked against eager's: a compiled graph that computes otherwise is refused", function()
  local path = testing.problem(DIR .. "/c", "3_Compiled_Otherwise", { sizes = "", inputs = "torch.randn(16, 16)",
    body = "if torch.compiler.is_compiling():\n    return x + 1\n", returns = "x" })
  local prob = assert(kb.load(path, { device = "cpu" }))
  local s = assert(prob:spec())
  local io_ = {}
  for _, x in ipairs(s.inputs) do io_[x.name] = kb.host_buffer(x.dtype, x.shape) end
  for _, x in ipairs(s.outputs) do io_[x.name] = kb.host_buffer(x.dtype, x.shape) end
  local r, msg, code = prob:compile(io_, { mode = "default", fallback = false })
  prob:release()
  t.eq(r, nil)
  t.eq(code, "COMPILE_MISMATCH", msg)
  t.ok(tostring(msg):find("differ from eager", 1, true), msg)
end)

torch_test("precompile refuses a forward that makes tensors from Python values (made on the GPU as it traces)", function()
  local path = testing.problem(DIR .. "/v", "93_Min_Const", { sizes = "", inputs = "torch.randn(8, 8)",
    returns = "torch.min(x, torch.tensor(0.0, device=x.device))" })
  local m = assert(kb.load(path, { device = "meta" }))
  local r, msg, code = m:precompile { device = "cpu" }
  m:release()
  t.eq(r, nil)
  t.eq(code, "GPU_WORK", msg)
  t.ok(tostring(msg):find("line %d+: %.tensor"), msg)
end)

torch_test("a problem loaded on the meta device queues no seeding for CUDA (it would copy to the GPU when CUDA starts)", function()
  local path = testing.problem(DIR .. "/s", "5_Seeded", { args = "n", init = "self.lin = torch.nn.Linear(n, n)",
    returns = "self.lin(x)", sizes = "", inputs = "torch.randn(4, 8)", init_inputs = "8" })
  local out, err, rc = testing.run(([[%s -c '
import sys; sys.path.insert(0, "%s/lua/km/task")
import kb_bridge as kb, torch
calls = [0]
seed_all = torch.cuda.manual_seed_all
def counted(seed):
    calls[0] += 1
    return seed_all(seed)
torch.cuda.manual_seed_all = counted
r = kb.load("%s", "fp32", "meta", 42, False, None); kb.spec(r["id"], 7)
meta = calls[0]
r2 = kb.load("%s", "fp32", "cpu", 42, False, None); kb.spec(r2["id"], 7)
print("queued", meta, calls[0] - meta)
']]):format(os.getenv("KM_PYTHON") or "python3", ROOT, path, path))
  t.eq(rc, 0, err)
  local meta, cpu = out:match("queued (%d+) (%d+)")
  t.eq(meta, "0", out .. err)
  t.ok(tonumber(cpu) and tonumber(cpu) > 0, "the CPU load still seeds as before (torch.manual_seed): " .. out)
end)

torch_test("precompile refuses a problem not on meta, and a mode that benchmarks on the GPU", function()
  local path = testing.problem(DIR .. "/q", "19_ReLU", { sizes = "", inputs = "torch.randn(8, 8)" })
  local p = assert(kb.load(path, { device = "cpu" }))
  local r, msg = p:precompile { device = "cpu" }
  t.eq(r, nil)
  t.ok(tostring(msg):find("meta device", 1, true), msg)
  p:release()
  local m = assert(kb.load(path, { device = "meta" }))
  local r2, msg2 = m:precompile { device = "cpu", mode = "max-autotune" }
  t.eq(r2, nil)
  t.ok(tostring(msg2):find("runs work on the GPU", 1, true), msg2)
  m:release()
end)

sys.rmtree(DIR)
t.done()
