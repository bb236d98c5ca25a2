-- kmrun sweep --strategies A,B [TASKS...] --store FILE [options] — tasks x strategies x models
-- x repeats, concurrent and resumable (km.run.sweep). Options: SPEC below and km.run.setup.OPTIONS
-- (every strategy run's, shared with `kmrun STRATEGY`).
local setup = require "km.run.setup"
local leases = require "km.run.leases"
local sweep = require "km.run.sweep"

local A = require "km.args"
local main = require "km.main"

local options = {
  { "strategies", "A[,B...]", "strategies by name (repair, tune, ...) or path (my.lua); required", type = "list" },
  { "repeat", "K", "episodes per (strategy, task, model)", type = "positive", default = 1 },
  { "shard", "I/N", "run only the I-th of N deterministic slices (for N hosts or array jobs)",
    check = function(v)
      local i, n = v:match("^(%d+)/(%d+)$")
      i, n = tonumber(i), tonumber(n)
      if not i or i < 1 or i > n then return nil, "wants I/N with 1 <= I <= N" end
      return { i, n }
    end },
}
for _, o in ipairs(setup.OPTIONS) do
  if o[1] == "store" then -- a sweep resumes from its store: it is named, never a timestamp
    local c = {}
    for k, v in pairs(o) do c[k] = v end
    c[3] = "the sweep's store (required: the same command again resumes it)"
    o = c
  end
  options[#options + 1] = o
end
local SPEC = A.spec {
  name = "kmrun sweep",
  synopsis = "--strategies A,B [TASKS...] [options]",
  about = [[
Runs every (strategy, task, model, repeat) concurrently over the GPU workers, into one
store. The same command again skips finished episodes (and judges compile-only ones once
a GPU is here); merge shards with `kmrun merge`.]],
  positional = { { "task_args", "TASKS", "task folders, or folders of task folders (default ./tasks)", many = true } },
  options = options,
  footer = setup.EXIT_STATUS,
}

local argv = {}
for i = 1, #arg do argv[i] = arg[i] end
local args, code = A.parse(SPEC, argv)
if not args then return code end
local ferr
args, ferr = setup.finish_args(args)
if not args then return A.fail(SPEC, ferr) end
if not args.strategies then return A.fail(SPEC, "--strategies is required (e.g. --strategies repair,tune)") end
local store_path = args.store
if not store_path then return A.fail(SPEC, "--store is required (the sweep's store, e.g. runs/sweep.sqlite)") end

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() end
  return f ~= nil
end
local strategies = {}
for _, name in ipairs(args.strategies) do
  -- a name (repair) is looked up in the strategies folder; a path (a/b.lua, or a file here) is read
  local path = name
  if not name:find("/", 1, true) and not exists(name) then path = main.strategy_path(name) or name end
  local chunk, lerr = loadfile(path)
  if not chunk then
    return A.fail(SPEC, "--strategies: '" .. name .. "': " .. (exists(path) and lerr or "no such strategy or file"))
  end
  local ok, fn = pcall(chunk)
  if not ok or type(fn) ~= "function" then
    io.stderr:write("kmrun sweep: ", path, " must return function(ctx)", ok and "" or (": " .. tostring(fn)), "\n")
    return 2
  end
  strategies[#strategies + 1] = { name = path:match("([^/]+)%.lua$") or path, fn = fn, path = path }
end
local tasks, tcode, dropped = setup.tasks(args, { name = "kmrun sweep" })
if not tasks then return tcode end
local models = args.models or { false }
local shard = args.shard

local env, why, scode = setup.run(args, store_path, tasks, "kmrun sweep")
if not env then io.stderr:write("kmrun sweep: ", why, "\n") return scode end
tasks = env.tasks
local db, pool = env.db, env.pool
local res = sweep.run { strategies = strategies, tasks = tasks, models = models, repeats = args["repeat"],
  jobs = args.jobs, rerun = args.rerun, store = db, pool = pool, args = args, make_client = env.make_client,
  guidance = env.guidance, shard = shard, argv = argv, name = "sweep", replay = args.replay }
print(string.format("sweep: %d run, %d correct%s, %d skipped as already finished%s, %.0f s; store %s%s",
  res.ran, res.correct, setup.speedup_summary(res.speedups_by), res.skipped, setup.dropped_text(dropped), res.seconds,
  store_path,
  pool and (", " .. #pool.slots .. " GPU worker(s)") or " (no GPU)"))
if leases.held_line(res) then print("sweep: " .. leases.held_line(res)) end
db:close()
if pool then pool:close() end
if res.interrupted then
  io.stderr:write(string.format("kmrun sweep: interrupted (%s): %d episode(s) marked interrupted; the same command resumes them\n",
    res.interrupted, res.n_interrupted or 0))
end
return setup.exit_status(res, pool, dropped)
