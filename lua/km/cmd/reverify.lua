-- kmrun reverify RUN.sqlite [--gpus 0,1] [--json] — re-evaluate every final solution of a
-- run on this machine's GPU(s): which still pass, and how their speedups moved.
local store = require "km.store"
local task_mod = require "km.task"
local json = require "km.json"

local USAGE = [[
usage: kmrun reverify RUN.sqlite [--tasks DIR] [--gpus 0,1] [--json] [--seeds N]
  Re-judges every episode's final candidate (correct or not) on this GPU and compares the
  status and speedup with the recorded ones. Tasks are looked up under --tasks (default:
  tasks/). Exit status: 0 when every recorded-correct solution still passes, 1 otherwise.
]]
local path, as_json, task_dir, gpus, seeds = nil, false, "tasks", nil, 3
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--json" then as_json = true
  elseif a == "--tasks" then task_dir = arg[i + 1]; i = i + 1
  elseif a == "--seeds" then seeds = tonumber(arg[i + 1]); i = i + 1
  elseif a == "--gpus" then gpus = {}; for g in arg[i + 1]:gmatch("[^,]+") do gpus[#gpus + 1] = tonumber(g) end; i = i + 1
  elseif a == "-h" or a == "--help" then io.stdout:write(USAGE) return 0
  elseif a:sub(1, 2) == "--" then io.stderr:write("kmrun reverify: unknown option ", a, "\n", USAGE) return 2
  else path = a end
  i = i + 1
end
if not path then io.stderr:write(USAGE) return 2 end
local db, err = store.open(path, { readonly = true })
if not db then io.stderr:write("kmrun reverify: ", tostring(err), "\n") return 2 end

local jobs, rows = {}, {}
local tasks = {}
for _, e in ipairs(db:episodes {}) do
  local f = e.final
  if type(f) == "table" and type(f.candidate) == "table" and f.candidate.source then
    local t = tasks[e.task]
    if t == nil then t = task_mod.load(task_dir .. "/" .. e.task) or false; tasks[e.task] = t end
    if t then
      jobs[#jobs + 1] = { t, f.candidate, { seeds = seeds } }
      rows[#rows + 1] = { episode = e.uuid, task = e.task, strategy = e.strategy, model = e.model,
        was = f.verdict and f.verdict.status, was_speedup = f.verdict and f.verdict.speedup,
        was_device = f.verdict and f.verdict.device and f.verdict.device.name }
    else
      io.stderr:write("kmrun reverify: task ", tostring(e.task), " not found under ", task_dir, "; skipped\n")
    end
  end
end
db:close()
if #jobs == 0 then io.stderr:write("kmrun reverify: no final solutions in ", path, "\n") return 1 end

local eval = require "km.eval"
local pool, why = eval.pool { gpus = gpus }
if not pool then io.stderr:write("kmrun reverify: no GPU: ", tostring(why), "\n") return 2 end
local verdicts = pool:eval_many(jobs)
local device = pool.device
pool:close()

local still, lost, gained, ratios = 0, 0, 0, {}
for k, r in ipairs(rows) do
  local v = verdicts[k]
  r.now, r.now_speedup, r.feedback = v.status, v.speedup, v.status ~= "correct" and v.feedback or nil
  if r.was == "correct" and v.status == "correct" then still = still + 1 end
  if r.was == "correct" and v.status ~= "correct" then lost = lost + 1 end
  if r.was ~= "correct" and v.status == "correct" then gained = gained + 1 end
  if r.was_speedup and r.now_speedup then
    r.speedup_ratio = r.now_speedup / r.was_speedup
    ratios[#ratios + 1] = r.speedup_ratio
  end
end
local gm
if #ratios > 0 then
  local s = 0
  for _, x in ipairs(ratios) do s = s + math.log(x) end
  gm = math.exp(s / #ratios)
end
if as_json then
  print(json.encode({ device = device.name, episodes = rows, still_correct = still, lost = lost, gained = gained,
    speedup_ratio_geomean = gm }, { nan = "null" }))
else
  print(string.format("reverify on %s (%s): %d solutions", device.name, device.uuid, #rows))
  print(string.format("%-28s %-16s %-10s %-10s %9s %9s", "task", "strategy", "was", "now", "was x", "now x"))
  for _, r in ipairs(rows) do
    print(string.format("%-28s %-16s %-10s %-10s %9s %9s", r.task, tostring(r.strategy), tostring(r.was), r.now,
      r.was_speedup and string.format("%.2f", r.was_speedup) or "-", r.now_speedup and string.format("%.2f", r.now_speedup) or "-"))
  end
  print(string.format("still correct %d, no longer correct %d, newly correct %d%s", still, lost, gained,
    gm and string.format("; speedups moved by %.3fx (geomean of now/was)", gm) or ""))
end
return lost == 0 and 0 or 1
