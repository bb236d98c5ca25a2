-- kmrun reverify RUN.sqlite [--tasks DIR] [--gpus 0,1] [--json] — re-evaluate every final solution of a
-- run on this machine's GPU(s): which still pass, and how their speedups moved.
local cli = require "km.cli"
local task_mod = require "km.task"
local json = require "km.json"

local A = require "km.args"

local SPEC = A.spec {
  name = "kmrun reverify",
  synopsis = "RUN.sqlite [options]",
  about = [[
Re-judges every episode's final candidate (correct or not) on this machine's GPU and
compares the status and speedup with the recorded ones.]],
  positional = { { "store", "RUN.sqlite", "the run's store", required = true } },
  options = {
    { "tasks", "DIR", "the folder the run's tasks are found in", type = "dir", default = "tasks" },
    { "gpus", "LIST", "GPUs to use, e.g. 0,1 (default: every visible GPU)", type = "ints", aliases = { "gpu" } },
    { "seeds", "N", "verify trials per shape (the last on a fresh seed each evaluation)", type = "positive", default = 3 },
    { "json", nil, "print one JSON object instead of the table" },
  },
  footer = [[
exit status: 0 when every recorded-correct solution still passes, 1 otherwise, 2 on usage
errors or a store that is missing, not a kmrun store or damaged, 3 when there is no GPU.]],
}
local function fail(code, ...) return cli.fail("reverify", code, ...) end
local a, code = A.parse(SPEC, arg)
if not a then return code end
local path, as_json, task_dir, gpus, seeds = a.store, a.json, a.tasks, a.gpus, a.seeds

-- A store that is missing, not a kmrun store, or damaged: one line, status 2.
local db, err = cli.open_store(path)
if not db then return fail(2, err) end
local episodes, skipped = cli.read_list(db, path, "episodes")
if not episodes then db:close() return fail(2, skipped) end
if #skipped > 0 then fail(0, cli.skipped_note(path, skipped, "episode(s)")) end

local jobs, rows = {}, {}
local tasks = {}
for _, e in ipairs(episodes) do
  local f = e.final
  -- a task name is a folder name under --tasks, never a path (the store may be hand-edited)
  local named = type(e.task) == "string" and e.task:match("^[%w_][%w_%-%.]*$") ~= nil
  if type(f) == "table" and type(f.candidate) == "table" and type(f.candidate.source) == "string" and named then
    local t = tasks[e.task]
    if t == nil then t = task_mod.load(task_dir .. "/" .. e.task) or false; tasks[e.task] = t end
    if t then
      local v = type(f.verdict) == "table" and f.verdict or {}
      jobs[#jobs + 1] = { t, f.candidate, { seeds = seeds } }
      rows[#rows + 1] = { episode = e.uuid, task = e.task, strategy = e.strategy, model = e.model,
        was = v.status, was_speedup = tonumber(v.speedup),
        was_device = type(v.device) == "table" and v.device.name or nil }
    else
      io.stderr:write("kmrun reverify: task ", tostring(e.task), " not found under ", task_dir, "; skipped\n")
    end
  end
end
db:close()
if #jobs == 0 then io.stderr:write("kmrun reverify: no final solutions in ", path, "\n") return 1 end

local eval = require "km.serve.pool"
local pool, why = eval.pool { gpus = gpus }
if not pool then -- nothing can be judged here: 3, as for every command that found no GPU
  io.stderr:write("kmrun reverify: no GPU: ", tostring(why), "\n")
  return 3
end
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
