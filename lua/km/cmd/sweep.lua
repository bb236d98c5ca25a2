-- kmrun sweep — tasks x strategies x models x repeats, concurrent and resumable.
local runner = require "km.runner"
local sweep = require "km.sweep"
local store = require "km.store"

local USAGE = [[
usage: kmrun sweep --strategies A.lua,B.lua --tasks DIR[,DIR...] --out runs/NAME.sqlite [options]
  --models M1,M2     models to sweep (default: the configured one, or offline)
  --repeat K         episodes per (strategy, task, model) (default 1)
  --jobs N           episodes in flight at once (default 2 per GPU worker)
  --gpus 0,1         GPUs to use (default: every visible GPU, one worker each)
  --shard I/N        run only the I-th of N deterministic slices (for N hosts or array jobs)
  and every strategy option (--rounds, --seeds, --timeout, --forms, --budget-*, ...)
The same command again skips finished episodes; merge shards with `kmrun merge`.
Exit status: 0 when every episode ended correct, 1 when some did not, 2 on usage errors,
3 without a GPU (candidates only compiled).
]]

local argv = {}
for i = 1, #arg do argv[i] = arg[i] end
local args, err = runner.parse_args(argv)
if not args then io.stderr:write("kmrun sweep: ", err, " (--help lists the options)\n") return 2 end
if args.help then io.stdout:write(USAGE) return 0 end
if not args.strategies or not args.out then io.stderr:write(USAGE) return 2 end
local task_dirs = {}
for d in tostring(args.tasks or ""):gmatch("[^,]+") do task_dirs[#task_dirs + 1] = d end
for _, d in ipairs(args.tasks_extra or args.tasks_list or {}) do task_dirs[#task_dirs + 1] = d end
for _, d in ipairs(args.tasks_positional or {}) do task_dirs[#task_dirs + 1] = d end
if #task_dirs == 0 then io.stderr:write("kmrun sweep: --tasks is required\n", USAGE) return 2 end

local strategies = {}
for path in tostring(args.strategies):gmatch("[^,]+") do
  local chunk, lerr = loadfile(path)
  if not chunk then io.stderr:write("kmrun sweep: ", lerr, "\n") return 2 end
  local ok, fn = pcall(chunk)
  if not ok or type(fn) ~= "function" then
    io.stderr:write("kmrun sweep: ", path, " must return function(ctx)", ok and "" or (": " .. tostring(fn)), "\n")
    return 2
  end
  strategies[#strategies + 1] = { name = path:match("([^/]+)%.lua$") or path, fn = fn, path = path }
end
local tasks, errors = runner.collect_tasks(task_dirs, args.filter)
for _, e in ipairs(errors) do io.stderr:write("kmrun sweep: skipping invalid task: ", e, "\n") end
if #tasks == 0 then io.stderr:write("kmrun sweep: no valid tasks\n") return 2 end
local models = {}
for m in tostring(args.models or ""):gmatch("[^,]+") do models[#models + 1] = m end
if #models == 0 then models[1] = false end
local shard
if args.shard then
  local i, n = tostring(args.shard):match("^(%d+)/(%d+)$")
  i, n = tonumber(i), tonumber(n)
  if not i or i < 1 or i > n then io.stderr:write("kmrun sweep: --shard wants I/N with 1 <= I <= N\n") return 2 end
  shard = { i, n }
end

local env, why, code = runner.setup(args, args.out)
if not env then io.stderr:write("kmrun sweep: ", why, "\n") return code end
local db, pool = env.db, env.pool
local res = sweep.run { strategies = strategies, tasks = tasks, models = models, repeats = args["repeat"] or 1,
  jobs = args.jobs and tonumber(args.jobs), store = db, pool = pool, args = args, make_client = env.make_client,
  guidance = env.guidance, shard = shard, argv = argv, name = "sweep" }
print(string.format("sweep: %d run, %d correct, %d skipped as already finished, %.0f s; store %s%s",
  res.ran, res.correct, res.skipped, res.seconds, args.out, pool and (", " .. #pool.slots .. " GPU worker(s)") or " (no GPU)"))
db:close()
if pool then pool:close() end
if not pool then return 3 end
return res.correct == res.ran and 0 or 1
