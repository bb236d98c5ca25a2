-- bench/cold_eval.lua — the first evaluation of a new candidate on a warm task: the
-- reinforcement-learning case, where every candidate is new and the tasks are set up. One GPU
-- worker (km.serve.pool); for each task folder: its starter judged once (the task set up, its
-- baselines found or timed: not counted), then --new candidates never compiled before (the
-- starter with a comment of its own: a miss in NVRTC's cache), each judged alone as a full
-- evaluation (3 seeds). Per new candidate: wall seconds from submit to verdict, the worker's
-- seconds on it (eval_seconds: compile, verify, measure), NVRTC's milliseconds. Run by
-- bench/headline.lua with its warm pass's caches; prints one markdown row (and OUT.md).
-- Usage: kmrun bench/cold_eval.lua [OUT.md] [--tasks DIR] [--new N] [--compile-mode M]
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT
local B = dofile((arg[0]:match("^(.*/)") or "") .. "lib.lua")

local SPEC = A.spec {
  name = "bench/cold_eval.lua", synopsis = "[OUT.md] [options]",
  about = "The first evaluation of new candidates on warm tasks: wall and GPU seconds per candidate, compile included.",
  positional = { { "out", "OUT.md", "also write the row to this file" } },
  options = { { "tasks", "DIR", "the task folder (default tasks/)" },
    { "new", "N", "new candidates per task (default 2)", type = "int" },
    { "compile-mode", "MODE", "torch.compile's mode for baselines (default: default)" } },
}
local args, code = A.parse(SPEC, arg)
if not args then return code end
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/cold_eval.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end
local eval = require "km.serve.pool"
local task = require "km.task"
local timing = require "km.timing"
local sys = require "km.sys"

local ROOT = arg[0]:match("^(.*)/bench/") or "."
local TASKS, NEW = args.tasks or (ROOT .. "/tasks"), args.new or 2
local opts = { compile_mode = args.compile_mode or "default", energy = false }

local dirs = {}
local p = io.popen("ls -1d '" .. TASKS .. "'/*/ 2>/dev/null | sort")
for d in p:lines() do dirs[#dirs + 1] = d:gsub("/$", "") end
p:close()

local pool = assert(eval.pool { gpus = { 0 }, timeout = 600 })
local walls, busy, compile_ms, correct, n = {}, 0, {}, 0, 0
for _, dir in ipairs(dirs) do
  local tk = task.load(dir)
  local starter = tk and task.starter(tk)
  if starter then
    pool:eval(tk, starter, opts) -- the task set up: not counted
    for i = 1, NEW do
      local c = { name = starter.name, launch = starter.launch, params = starter.params,
        source = ("// new candidate %d %d\n"):format(i, sys.random(1 << 40)) .. starter.source }
      local w0 = timing.wall()
      local v = pool:eval(tk, c, opts)
      walls[#walls + 1] = timing.wall() - w0
      busy = busy + (tonumber(v.eval_seconds) or 0)
      compile_ms[#compile_ms + 1] = tonumber(v.compile_ms) or 0
      if v.status == "correct" then correct = correct + 1 end
      n = n + 1
    end
  end
end
pool:close()
local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[(#s + 1) // 2] or 0
end
local wsum = 0
for _, w in ipairs(walls) do wsum = wsum + w end
local row = ("| cold: a new candidate on a warm task | %d/%d correct | %d | wall per candidate median %.3f s, mean %.3f s | the worker's seconds per candidate %.3f | NVRTC median %.1f ms | %.0f new candidates per GPU-hour |")
  :format(correct, n, n, median(walls), n > 0 and wsum / n or 0, n > 0 and busy / n or 0, median(compile_ms), wsum > 0 and n / wsum * 3600 or 0)
print(row)
B.write_out(args.out, row)
return EXIT.OK
