-- bench/baselines_table.lua — the eager / torch.compile / CUDA-reference / starter table for
-- our tasks, measured side by side in one run on one GPU: each task's starter judged in a
-- GPU worker with both PyTorch baselines (km.judge, the candidate's timing protocol).
--
--   build/kmrun bench/baselines_table.lua [--compile-mode MODE] [--max-s S] [TASK_DIR...]
--
-- Default: every task under tasks/, torch.compile in max-autotune-no-cudagraphs (falling back
-- to default, as verdicts do). Baselines go to the disk cache (KM_BASELINE_DIR), so a second
-- run re-times only the starters. --max-s stops starting tasks after S seconds and reports
-- what it has. Ratios are geometric means; "x eager" is the time over eager's (above 1: slower).
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local task = require "km.task"
local eval = require "km.serve.pool"
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT

local SPEC = A.spec {
  name = "bench/baselines_table.lua",
  synopsis = "[TASK_DIR...] [options]",
  about = "The eager / torch.compile / CUDA-reference / starter table for our tasks.",
  positional = { { "dirs", "TASK_DIR", "task folders (default: every task under tasks/)", many = true } },
  options = {
    { "compile-mode", "MODE", "torch.compile's mode (default max-autotune-no-cudagraphs)" },
    { "max-s", "S", "start no task after S seconds", type = "seconds" },
    { "gpus", "I", "the GPU", type = "ints", default = { 0 } },
  },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local dirs = a.dirs or {}
if #dirs == 0 then
  for _, t in ipairs(task.list("tasks")) do dirs[#dirs + 1] = t.dir end
end

local pool, why = eval.pool { gpus = { a.gpus[1] }, timeout = 300 }
if not pool then io.stderr:write("bench/baselines_table.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end
local t0 = os.time()
local rows, by_level = {}, {}
local function add(level, key, x)
  if not (x and x > 0) then return end
  by_level[level] = by_level[level] or {}
  local l = by_level[level]
  l[key] = l[key] or {}
  table.insert(l[key], x)
end

print(("device %s, %s, torch.compile mode %s"):format(pool.device and pool.device.name or "?", os.date("!%Y-%m-%d"),
  a.compile_mode or "max-autotune-no-cudagraphs"))
print(("%-28s %2s %10s %10s %10s %10s  %-26s %8s %8s %8s"):format("task", "L", "starter ms", "CUDA ref", "eager",
  "compile", "compile mode", "st/eager", "st/comp", "ref/eag"))
for _, dir in ipairs(dirs) do
  if a.max_s and os.time() - t0 > a.max_s then print("(stopped: --max-s)") break end
  local t, err = task.load(dir)
  local cand = t and task.starter(t)
  if not cand then
    print(("%-28s failed to load: %s"):format(dir, tostring(err)))
  else
    local v = pool:eval(t, cand, { seeds = 1, compile_mode = a.compile_mode, energy = false })
    local tm = v.timing or {}
    local st, ref = tm.candidate and tm.candidate.median, tm.reference and tm.reference.median
    local eg, cp = tm.eager and tm.eager.median, tm.compile and tm.compile.median
    local function r(x, y) return (x and y) and x / y or nil end
    local function f(x, w) return x and ("%" .. w .. ".4f"):format(x) or ("%" .. w .. "s"):format("-") end
    local function g(x) return x and ("%8.2f"):format(x) or ("%8s"):format("-") end
    print(("%-28s %2d %s %s %s %s  %-26s %s %s %s%s"):format(t.name, t.level, f(st, 10), f(ref, 10), f(eg, 10), f(cp, 10),
      v.compile_mode or "-", g(r(st, eg)), g(r(st, cp)), g(r(ref, eg)),
      v.status ~= "correct" and ("  " .. v.status .. ": " .. tostring(v.feedback):sub(1, 80)) or
      (v.baselines and v.baselines.errors and ("  " .. require("km.json").encode(v.baselines.errors):sub(1, 120)) or "")))
    rows[#rows + 1] = v
    for _, lv in ipairs { t.level, "all" } do
      add(lv, "st_eager", r(st, eg)); add(lv, "st_comp", r(st, cp)); add(lv, "ref_eager", r(ref, eg))
    end
  end
end
pool:close()

local function gm(xs)
  if not xs or #xs == 0 then return "-" end
  local s = 0
  for _, x in ipairs(xs) do s = s + math.log(x) end
  return ("%.2f (n=%d)"):format(math.exp(s / #xs), #xs)
end
print("\ngeometric means of time ratios (above 1: slower than the baseline)")
print(("%-6s %-16s %-16s %-16s"):format("level", "starter/eager", "starter/compile", "CUDA ref/eager"))
for _, lv in ipairs { 1, 2, 3, "all" } do
  local l = by_level[lv]
  if l then print(("%-6s %-16s %-16s %-16s"):format(tostring(lv), gm(l.st_eager), gm(l.st_comp), gm(l.ref_eager))) end
end
print(("%d task(s), %d s"):format(#rows, os.time() - t0))
