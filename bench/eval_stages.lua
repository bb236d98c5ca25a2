-- bench/eval_stages.lua — where a fresh `kmrun eval` of a problem file spends its time, step
-- by step in one process (torch's import, the task from the spec cache, the judge and its
-- CUDA context, the problem loaded and snapshotted on the GPU), then EVALS evaluations of the
-- same candidate in that judge: the first times the eager baseline, the later ones are what
-- a warm pool pays per candidate (issue 17: 19_ReLU at most 0.8 s).
--
--   build/kmrun bench/eval_stages.lua PROBLEM.py [CANDIDATE_DIR] [--evals N]
--
-- CANDIDATE_DIR holds kernel.cu and launch.lua (default bench/kb_relu). torch.compile is not
-- timed (compile_mode "off"); energy is not measured. Exit status: 0, 1 when an evaluation is
-- not correct, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT

local SPEC = A.spec {
  name = "bench/eval_stages.lua", synopsis = "PROBLEM.py [CANDIDATE_DIR] [options]",
  about = "A fresh evaluation's steps, then the per-candidate cost in a warm judge.",
  positional = { { "problem", "PROBLEM.py", "a KernelBench problem file", required = true },
    { "candidate", "CANDIDATE_DIR", "kernel.cu and launch.lua (default bench/kb_relu)" } },
  options = { { "evals", "N", "evaluations in the judge", type = "positive", default = 3 } },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/eval_stages.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end

local wall = require("km.timing").wall
local ROOT = arg[0]:match("^(.*)/bench/") or "."
local dir = a.candidate or (ROOT .. "/bench/kb_relu")
local T0 = wall()
local t = wall()
local function lap(what)
  print(("%-44s %.3f s"):format(what, wall() - t))
  t = wall()
end
local kb = require "km.task.kernelbench"
local okt, terr = kb.available()
if not okt then io.stderr:write("bench/eval_stages.lua: PyTorch: ", tostring(terr), "\n") return 1 end
lap("import torch")
local tk = assert(require("km.task").load(a.problem))
lap("the task (spec cache)")
local J = assert(require("km.judge").new())
lap("the judge and its CUDA context")
local prob = assert(kb.load(tk.reference.pytorch, { precision = tk.reference.precision, device = "cuda" }))
assert(prob:snapshot())
lap("the problem on the GPU, snapshotted")
prob:release({ empty_cache = true })
local function read(p) local f = assert(io.open(p)) local s = f:read("a") f:close() return s end
local cand = { name = "candidate", source = read(dir .. "/kernel.cu"), launch = read(dir .. "/launch.lua") }
local rc = 0
for i = 1, a.evals do
  local w = wall()
  local v = J:eval(tk, cand, { energy = false, compile_mode = "off" })
  local parts = {}
  for k, s in pairs(v.stage_seconds or {}) do parts[#parts + 1] = ("%s %.3f"):format(k, s) end
  table.sort(parts)
  print(("evaluation %d: %s in %.3f s (%s); n %s, median %.4f ms, %s checked calls"):format(i, v.status,
    wall() - w, table.concat(parts, ", "), tostring(v.timing and v.timing.candidate.n),
    v.timing and v.timing.candidate.median or -1, tostring(v.timing and v.timing.candidate.checked_calls)))
  if v.status ~= "correct" then rc = 1 end
end
print(("%s, %s; in all %.3f s"):format(J.device.name, os.date("!%Y-%m-%d"), wall() - T0))
return rc
