-- bench/pytorch_cost.lua — what a PyTorch reference costs per candidate in a running pool:
-- the same ReLU candidates judged against (a) tasks/l1_relu/reference.py as a KernelBench
-- problem file (PyTorch eager reference) and (b) its CUDA twin (tasks/l1_relu with the same
-- shapes: n = 2^28 and the problem file's held-out n; CUDA reference, no PyTorch), one warm
-- worker each, side by side.
-- Issue 17's target: (a) at most 1.2x (b).
--
--   build/kmrun bench/pytorch_cost.lua [--n N] [--seeds S] [--dry-run]
--
-- The first evaluation on each side (worker start, torch import, the baselines, read from
-- the disk cache or measured) is reported apart; the N after it are the per-candidate cost.
-- --dry-run writes and loads both tasks and says what it would run, with no GPU. Exit status:
-- 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local eval = require "km.serve.pool"
local task = require "km.task"
local testing = require "km.testing"
local timing = require "km.timing"
local cuda = require "km.cuda"
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT

local SPEC = A.spec {
  name = "bench/pytorch_cost.lua",
  about = "Per-candidate cost with a PyTorch reference against the same task's CUDA reference.",
  options = {
    { "n", "N", "candidates per side", type = "positive", default = 8 },
    { "seeds", "S", "seeds per shape", type = "positive", default = 3 },
    { "gpus", "I", "the GPU", type = "ints", default = { 0 } },
    { "dry-run", nil, "write and load both tasks, say what would run, and stop (no GPU needed)" },
  },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local ROOT = arg[0]:match("^(.*)/bench/") or "."

-- The twin keeps the task's name: a task's folder is named as the task (km.task checks it).
local dir = testing.tmpdir()
local twin, problem = dir .. "/cuda/l1_relu", dir .. "/l1_relu.py"
assert(os.execute(("mkdir -p '%s' && cp -r '%s/tasks/l1_relu/.' '%s'"):format(twin, ROOT, twin)))
assert(os.execute(("cp '%s/tasks/l1_relu/reference.py' '%s'"):format(ROOT, problem)))
-- The twin verifies the shapes the problem file does: its own (n = 2^28) and the held-out
-- one the problem file gets (km.task.kbtask), so the ratio is the reference's cost and not a
-- second shape's. Without torch the problem file does not load: the twin keeps one shape.
local pt = task.load(problem)
local held = pt and pt.shapes[2] and pt.shapes[2].n
local tl = assert(testing.read(twin .. "/task.lua"))
local shapes
tl, shapes = tl:gsub("shapes = %b{},", held and ("shapes = { { n = 1 << 28 }, { n = %d } },"):format(held)
  or "shapes = { { n = 1 << 28 } },")
assert(shapes == 1, "tasks/l1_relu/task.lua: no 'shapes = {...},' to set")
testing.write(twin .. "/task.lua", tl)

if a.dry_run then
  local ok = true
  for _, path in ipairs { twin, problem } do
    local t, err = task.load(path)
    if t then
      print(("would judge %d candidates against %s (%s reference, shapes: %d)"):format(a.n + 1, path,
        t.reference.pytorch and "PyTorch" or (t.reference.source and "CUDA" or "PyTorch"), #t.shapes))
    else
      ok = false
      io.stderr:write("bench/pytorch_cost.lua: ", tostring(err), "\n")
    end
  end
  os.execute("rm -rf '" .. dir .. "'")
  return ok and EXIT.OK or 1
end
local okg, why = cuda.available()
if not okg then
  os.execute("rm -rf '" .. dir .. "'")
  io.stderr:write("bench/pytorch_cost.lua: no GPU: ", tostring(why), "\n")
  return EXIT.NO_GPU
end

local SRC = [[// candidate %d
extern "C" __global__ void relu(const float *x, float *y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = fmaxf(x[i], 0.0f);
}]]
local LAUNCH = [[return function(k, io, s)
  local n = io.x:numel()
  k.relu{ grid = math.min(k.cdiv(n, %d), k.device.sm_count * 32), block = %d }(io.x, io.%s, n)
end]]
local BLOCKS = { 128, 256, 512, 1024 }

local function side(path, out, extra)
  local t = assert(task.load(path))
  local pool = assert(eval.pool { gpus = { a.gpus[1] }, timeout = 600 })
  local opts = { seeds = a.seeds, energy = false }
  for k, v in pairs(extra or {}) do opts[k] = v end
  local function cand(i)
    local b = BLOCKS[(i - 1) % #BLOCKS + 1]
    return { name = "relu" .. i, source = SRC:format(i), launch = LAUNCH:format(b, b, out) }
  end
  -- every candidate compiled before the first is judged, on both sides alike: in a running
  -- pool the driver compiles waiting jobs ahead (km.serve.pool), so neither side's per-candidate
  -- cost holds NVRTC (the side run second would otherwise find the first side's compiles)
  local all = {}
  for i = 0, a.n do all[#all + 1] = cand(i) end
  eval.warm(all, pool.device and pool.device.arch, { cache_dir = pool.cache_dir })
  local w0 = timing.wall()
  local v0 = pool:eval(t, cand(0), opts)
  local first = timing.wall() - w0
  assert(v0.status == "correct", v0.feedback)
  local w1 = timing.wall()
  local stages = {} -- the judge's stage seconds (verdict.stage_seconds), summed over the N
  for i = 1, a.n do
    local v = pool:eval(t, cand(i), opts)
    assert(v.status == "correct", v.feedback)
    for k, s in pairs(v.stage_seconds or {}) do if type(s) == "number" then stages[k] = (stages[k] or 0) + s end end
  end
  local per = (timing.wall() - w1) / a.n
  pool:close()
  local list = {}
  for k, s in pairs(stages) do list[#list + 1] = ("%s %.4f"):format(k, s / a.n) end
  table.sort(list)
  return first, per, v0, table.concat(list, ", ")
end

local fp, pp, vp, sp = side(problem, "out")
local fc, pc, vc, sc = side(twin, "y", { eager = false, compile_mode = "off" }) -- no PyTorch at all
print(("device %s, %s; %d candidates per side, %d seeds, n = 2^28"):format(vp.device and vp.device.name or "?",
  os.date("!%Y-%m-%d"), a.n, a.seeds))
print(("PyTorch reference (problem file): first %.2f s, then %.3f s per candidate (speedup over %s)"):format(fp, pp, vp.speedup_over))
print(("CUDA reference (twin task):       first %.2f s, then %.3f s per candidate (speedup over %s)"):format(fc, pc, vc.speedup_over))
print(("stage seconds per candidate, PyTorch reference: %s"):format(sp))
print(("stage seconds per candidate, CUDA reference:    %s"):format(sc))
print(("per-candidate ratio PyTorch / CUDA: %.2fx (target: at most 1.2x)"):format(pp / pc))
os.execute("rm -rf '" .. dir .. "'")
