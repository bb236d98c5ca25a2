-- km.run.setup — what `kmrun STRATEGY` (km.run.runner) and `kmrun sweep` (km/cmd/sweep.lua) share:
-- the options every strategy run takes (one table, defaults in it, read by km.args), the
-- tasks named on the command line, the model clients (a recorded run replayed, budgets,
-- prices), the store, GPU workers and guidance of a run, and what a run ends with (its exit
-- status, its geomean speedups). Both commands call it; neither calls the other (km.run.runner
-- re-exports these under its old names).
--
--   local a = assert(setup.finish_args(args.read(spec, argv)))   -- spec built on setup.OPTIONS
--   local tasks, code = setup.tasks(a, { name = "kmrun sweep" }) -- nil, exit status on failure
--   local env = assert(setup.run(a, "runs/x.sqlite"))  -- { db, pool, guidance, make_client, cfg }
--   ... sweep.run { ..., make_client = env.make_client } ...
--   return setup.exit_status(res, env.pool)
local task_mod = require "km.task"
local kbtask = require "km.task.kbtask"
local context = require "km.run.context"
local model = require "km.run.model"
local json = require "km.json"
local sys = require "km.sys"

local fmt, concat, insert = string.format, table.concat, table.insert
local ipairs, pairs, type, tostring, tonumber, pcall = ipairs, pairs, type, tostring, tonumber, pcall

local M = {}

-- The model client's providers (km.llm's table, one row each): their names for --provider,
-- and "set A or B" from the variables that pick a networked one, for the offline lines.
local PROVIDERS, HINTS = {}, {}
for _, p in ipairs(require("km.llm").providers()) do
  PROVIDERS[#PROVIDERS + 1] = p.name
  if p.network and p.hint then HINTS[#HINTS + 1] = p.hint end
end
local SET_HINT = "set " .. concat(HINTS, " or ")

----------------------------------------------------------------------------------------
-- options

-- The options every strategy takes (kmrun STRATEGY and kmrun sweep), in km.args' form: a
-- default stated here is the one the parser fills in (strategies read ctx.args.rounds, not
-- `ctx.args.rounds or 5`). A strategy's own options travel as --set NAME=VALUE
-- (ctx.args.NAME). Add new ones here: an option no spec declares is refused.
M.OPTIONS = {
  { "tasks", "DIR[,DIR]", "task folders, or folders of task folders (as the TASKS arguments)", type = "list" },
  { "store", "FILE", "the run's store (default runs/<timestamp>-<pid>.sqlite)", type = "path", old = { "out" } },
  { "models", "M[,M...]", "model names (else KM_MODEL); several: one episode per model",
    type = "list", aliases = { "model" } },
  { "provider", "P", concat(PROVIDERS, ", ") .. " (default: from the environment)", choices = PROVIDERS },
  { "base-url", "URL", "the model server (else OPENAI_BASE_URL)" },
  { "replay", "FILE", "replay the model turns recorded in FILE (.sqlite or .jsonl)", type = "file" },
  { "llm-timeout", "S", "seconds before a model request is given up", type = "seconds", default = 600 },
  { "context", "N", fmt("the model's context window in tokens (default: the server's model list, else %d)",
    context.DEFAULT_SIZE), type = "positive" },
  -- no parser default for these two: a strategy's own value stands unless the option is given
  { "max-tokens", "N", fmt("room for each reply (default: the strategy's, else %d)", model.DEFAULT_MAX_TOKENS),
    type = "positive" },
  { "temperature", "T", fmt("sampling temperature (default: the strategy's, else %g)", model.DEFAULT_TEMPERATURE),
    type = "nonneg" },
  { "rounds", "N", "repair/optimize rounds", type = "positive", default = 5 },
  { "samples", "N", "candidates drawn per round by best-of-N strategies", type = "positive", default = 4 },
  { "method", "M", "the tuner's search: exhaustive, random, anneal or bandit (default per strategy)",
    choices = { "exhaustive", "random", "anneal", "bandit" } },
  { "tune-budget", "N", "points the tuner may measure (default per strategy)", type = "positive" },
  { "forms", "LIST", "spec forms shown to the model: description,math,reference", type = "choices",
    choices = { "description", "math", "reference" }, default = { "description", "math" } },
  { "gpus", "LIST", "GPUs to use, e.g. 0,1 (default: every visible GPU, one worker each)", type = "ints",
    aliases = { "gpu" } },
  { "seeds", "N", "verify trials per shape (the last on a fresh seed each evaluation)", type = "positive", default = 3 },
  { "timeout", "S", "seconds per candidate before it is stopped", type = "seconds", default = 120 },
  { "jobs", "N", "episodes in flight at once (default 4 per GPU worker)", type = "positive" },
  { "budget-requests", "N", "stop cleanly after N model requests", type = "positive" },
  { "budget-tokens", "N", "stop cleanly after N tokens", type = "positive" },
  { "budget-dollars", "X", "stop cleanly after X dollars (needs --prices)", type = "nonneg" },
  { "prices", "FILE", 'JSON { "model": { "input": $ per 1M tokens, "output": $ per 1M tokens } }', type = "file" },
  { "filter", "PATTERN", "only tasks whose name matches the Lua pattern", type = "pattern" },
  { "precision", "P", "KernelBench problem files at fp32 (default), fp16 or bf16 (KernelBench's casts)",
    type = "choice", choices = { "fp32", "fp16", "bf16" } },
  { "energy", nil, "measure joules per call of every timed candidate (NVML; ~0.3 s each)" },
  { "worker-stderr", "W", "the GPU workers' stderr: inherit or null", choices = { "inherit", "null" } },
  { "rerun", "STATUSES", "run the strategy again for the episodes of this store that ended so:\n" ..
      "compiled, failed, error, correct, or all (default: none; a finished\n" ..
      "episode is kept, and a compile-only one is judged from its stored\n" ..
      "candidate, without a model call, when a GPU is here)",
    type = "choices", choices = { "compiled", "failed", "error", "correct", "all" } },
  { "quiet", nil, "no per-episode lines" },
  { "allow-degenerate", nil, "run tasks that kmrun tasks lint flagged (they are skipped otherwise)" },
  { "set", "NAME=VALUE", "a strategy's own option, read as ctx.args.NAME (may be repeated)", type = "list",
    key = "set_list" },
}
for _, o in ipairs(require("km.task.baseline").OPTIONS) do M.OPTIONS[#M.OPTIONS + 1] = o end

-- The option a ctx.args key names, or nil.
function M.option(key)
  for _, o in ipairs(M.OPTIONS) do
    if (o.key or o[1]:gsub("%-", "_")) == key then return o end
  end
end

-- After parsing: tasks from both places, --set values as fields, the first model as the
-- client's default. Returns a, or nil, message.
function M.finish_args(a)
  local tasks = {}
  for _, d in ipairs(a.task_args or {}) do tasks[#tasks + 1] = d end
  for _, d in ipairs(a.tasks or {}) do tasks[#tasks + 1] = d end
  a.tasks = tasks
  if a.models and #a.models > 0 then a.model = a.models[1] else a.models = nil end
  for _, kv in ipairs(a.set_list or {}) do
    local k, v = kv:match("^([%a_][%w_]*)=(.*)$")
    if not k then return nil, "--set: '" .. kv .. "' wants NAME=VALUE" end
    local o = M.option(k)
    if o then return nil, "--set: " .. k .. " is an option of its own: use --" .. o[1] end
    a[k] = tonumber(v) or v
  end
  return a
end

----------------------------------------------------------------------------------------
-- tasks

-- The task folders to run: the ones named (each a folder, or a KernelBench problem file),
-- else ./tasks when it exists. Returns the list, or nil, one line saying what is wrong
-- (`who`: "kmrun NAME").
function M.task_dirs(named, who)
  local is_dir = require("km.args").is_dir
  if #named == 0 then
    if is_dir("tasks") then return { "tasks" } end
    return nil, who .. ": no tasks named, and there is no ./tasks folder here: name task folders (" .. who .. " tasks/)"
  end
  for _, d in ipairs(named) do
    if not is_dir(d) then
      local f = io.open((d:gsub("#%w+$", "")), "rb")
      if f and kbtask.is_problem(d) then f:close() -- a problem file is a task as it is
      elseif f then f:close() return nil, who .. ": " .. d .. ": not a folder (a task is a folder with task.lua, or a KernelBench problem file .py)"
      else return nil, who .. ": " .. d .. ": no such folder" end
    end
  end
  return named
end

-- The name a task that did not load goes by: its folder's, or its problem file's.
local function dropped_name(path)
  if kbtask.is_problem(path) then return kbtask.name(path) end
  return (path:gsub("/+$", ""):match("([^/]+)$") or path)
end

-- Every task named on the command line, loaded; errors listed (problem files that cannot
-- load for want of PyTorch as one entry: km.task.kernelbench.fold_errors), and the tasks
-- dropped for them ({ name, why }); with a filter, only those whose name it matches. precision
-- (fp16, bf16): the precision KernelBench problem files run at (tasks with a CUDA reference
-- keep theirs). -> tasks, errors, dropped, found (the tasks found before the filter)
function M.collect_tasks(paths, filter, precision)
  local tasks, errors, dropped = {}, {}, {}
  local function drop(path, err)
    local name = dropped_name(path)
    if filter and not name:match(filter) then return end -- not asked for: not said either
    insert(errors, err)
    insert(dropped, { name = name, why = err })
  end
  for _, p in ipairs(paths) do
    local f = io.open(p .. "/task.lua")
    if f then f:close() end
    if f or kbtask.is_problem(p) then
      local t, err = task_mod.load(kbtask.is_problem(p) and kbtask.key(p, precision) or p)
      if t then insert(tasks, t) else drop(p, err) end
    else
      local ts, es, failed = task_mod.list(p, precision)
      if #ts == 0 and #es == 0 then insert(errors, p .. ": no tasks found") end
      for _, t in ipairs(ts) do insert(tasks, t) end
      for i, e in ipairs(es) do drop(failed[i], e) end
    end
  end
  local found = tasks
  if filter then
    local kept = {}
    for _, t in ipairs(tasks) do if t.name:match(filter) then insert(kept, t) end end
    tasks = kept
  end
  local folded, line = require("km.task.kernelbench").fold_errors(errors)
  if line then insert(folded, line) end
  return tasks, folded, dropped, found
end

-- The first names of a list of tasks: "l1_relu, l1_gelu, l1_silu and 37 more".
function M.names_text(tasks, n)
  n = n or 3
  local names = {}
  for i = 1, math.min(#tasks, n) do names[i] = tasks[i].name end
  return concat(names, ", ") .. (#tasks > n and fmt(" and %d more", #tasks - n) or "")
end

-- The summary's words for tasks dropped as invalid ("" when none):
-- ", 1 task dropped (invalid): l1_bad".
function M.dropped_text(dropped)
  if not dropped or #dropped == 0 then return "" end
  return fmt(", %d task%s dropped (invalid): %s", #dropped, #dropped == 1 and "" or "s", M.names_text(dropped, 5))
end

-- Offline (no model configured) a strategy's only candidate is the task's starter: a task
-- without one (a KernelBench problem file) can only end no_code. Such tasks are refused up
-- front: returns the tasks that have a starter and a line naming those left out, or nil and
-- the line when none has one. Online (or replaying), the tasks as they are.
function M.offline_tasks(tasks, args)
  local ok, client = pcall(M.setup_client, args)
  if not ok or not client or client:config().provider ~= "offline" then return tasks end
  local kept, without = {}, {}
  for _, t in ipairs(tasks) do
    if t.starter then insert(kept, t) else insert(without, t.name) end
  end
  if #without == 0 then return tasks end
  local names = concat(without, ", ", 1, math.min(#without, 3)) .. (#without > 3 and fmt(" and %d more", #without - 3) or "")
  local why = fmt("offline (no model configured: " .. SET_HINT .. ", or KM_MODEL, or --provider), " ..
    "and %s %s no starter to stand in for a model's candidate (%s): %s", #without == 1 and "1 task" or (#without .. " tasks"),
    #without == 1 and "has" or "have", names,
    #kept == 0 and "every episode could only end no_code, so nothing is run" or "they are left out")
  if #kept == 0 then return nil, why end
  return kept, why
end


-- The tasks a command runs, from its parsed options: named (else ./tasks), loaded, those
-- an offline run cannot serve left out, and those kmrun tasks lint flags gated. Says on
-- stderr what it skipped; returns the tasks, nil and the tasks dropped as invalid ({ name,
-- why }: the run's summary counts them and its exit status is not 0), or nil and the exit
-- status (2) when none is left (a --filter that matches no task says so).
-- who: { name = "kmrun repair" (for the task folders' errors), prefix = "kmrun" }.
function M.tasks(args, who)
  local prefix = who.prefix or who.name
  local dirs, derr = M.task_dirs(args.tasks, who.name)
  if not dirs then io.stderr:write(derr, "\n") return nil, 2 end
  args.tasks = dirs
  local tasks, errors, dropped, found = M.collect_tasks(dirs, args.filter, args.precision)
  for _, e in ipairs(errors) do io.stderr:write(prefix, ": skipping invalid task: ", e, "\n") end
  if #tasks == 0 and #dropped == 0 and args.filter and #found > 0 then
    io.stderr:write(fmt("%s: --filter '%s' matches none of the %d task(s) found (%s); it is a Lua pattern matched " ..
      "against task names (l1_ matches l1_relu; %%- for a '-')\n", prefix, args.filter, #found, M.names_text(found)))
    return nil, 2
  end
  if #tasks == 0 then io.stderr:write(prefix, ": no valid tasks\n") return nil, 2 end
  local owhy
  tasks, owhy = M.offline_tasks(tasks, args)
  if owhy then io.stderr:write(prefix, ": ", owhy, "\n") end
  if not tasks then return nil, 2 end
  return tasks, nil, dropped
end

-- The tasks kmrun tasks lint flagged left out, unless --allow-degenerate (km.task.lint's
-- gate: it reads the kept results, whose key asks Python for torch's version) -> tasks |
-- nil, why when none is left.
function M.gate(args, tasks, prefix)
  tasks = require("km.task.lint").gate(tasks, { skip = true, allow = args.allow_degenerate, who = prefix })
  if #tasks == 0 then return nil, "every task was flagged by kmrun tasks lint (--allow-degenerate runs them)" end
  return tasks
end

----------------------------------------------------------------------------------------
-- the model clients


-- Loads recorded replies (for --replay) from a store or a JSONL export.
function M.load_replay(path, task_name)
  local replies = {}
  local function take_steps(steps)
    for _, s in ipairs(steps) do
      if s.kind == "model_call" and type(s.payload) == "table" and s.payload.reply then insert(replies, s.payload.reply) end
    end
  end
  if path:match("%.sqlite$") or path:match("%.db$") then
    -- checked like every store a command reads (km.cli); rows whose JSON does not parse are
    -- left out; the pages are checked by reading them (this runs once per task)
    local cli = require "km.cli"
    local db, err = cli.open_store(path, { check = false })
    if not db then return nil, err:sub(#path + 3) end
    local eps, eerr = cli.read_list(db, path, "episodes", task_name and { task = task_name } or nil)
    if not eps then db:close() return nil, eerr:sub(#path + 3) end
    for _, e in ipairs(eps) do
      local ep = db:episode(e.id)
      if ep then take_steps(ep.steps) end
    end
    db:close()
  else
    local f, err = io.open(path)
    if not f then return nil, err end
    for line in f:lines() do
      local ep = json.decode(line)
      if ep and (not task_name or ep.task == task_name) then take_steps(ep.steps or {}) end
    end
    f:close()
  end
  return replies
end

local function make_llm(args, task_name)
  local llm = require "km.llm"
  local cfg = { model = args.model, provider = args.provider, timeout = args.llm_timeout }
  if args.base_url then cfg.base_url = args.base_url end
  if args.replay then
    local replies, err = M.load_replay(args.replay, task_name)
    if not replies then return nil, "cannot read " .. args.replay .. ": " .. tostring(err) end
    cfg.provider, cfg.replies = "replay", replies
  end
  if args.budget_requests or args.budget_tokens or args.budget_dollars then
    cfg.budget = { requests = args.budget_requests, tokens = args.budget_tokens, dollars = args.budget_dollars }
  end
  if args.prices then
    -- a JSON file: { "model-name": { "input": dollars per million tokens, "output": ... } }
    local text = task_mod.read_file(args.prices)
    local prices, perr = text and json.decode(text)
    if type(prices) ~= "table" then return nil, "cannot read the price table " .. args.prices .. ": " .. tostring(perr or "unreadable") end
    cfg.prices = prices
  end
  return llm.new(cfg)
end

-- The model client the command-line options describe (for a task, when replaying).
function M.setup_client(args, model, task_name)
  local a = {}
  for k, v in pairs(args) do a[k] = v end
  if model then a.model = model end
  return make_llm(a, task_name)
end

----------------------------------------------------------------------------------------
-- the run: store, GPU workers, guidance, clients

-- Shared by `kmrun STRATEGY.lua` and `kmrun sweep`: the store, GPU workers, the lint's gate
-- (M.gate), guidance and a model-client factory for parsed args (tasks: the loaded tasks,
-- whose needs the GPU workers are started for). The first worker's process starts first and
-- its CUDA context comes up while this process does the rest (the gate's Python, the model
-- server's model list): its greeting is waited for last (KM_GREET_LATER=0: at once, for
-- side-by-side runs). Returns env (env.tasks: the tasks the gate kept) or nil, message, exit
-- status.
function M.run(args, out, tasks, prefix)
  local db, derr, dcode = require("km.run.leases").open_store(out, args.store ~= nil)
  if not db then return nil, derr, dcode end
  local eval = require "km.serve.pool"
  local pool, why = eval.pool { gpus = args.gpus, timeout = args.timeout, worker_stderr = args.worker_stderr or "inherit",
    torch_ahead = require("km.task.baseline").needs_torch(tasks, args),
    precompile = require("km.task.precompile").entries(tasks, args), greet_later = os.getenv("KM_GREET_LATER") ~= "0" }
  local function fail(msg, code)
    db:close()
    if pool then pool:close() end
    return nil, msg, code
  end
  local gerr
  tasks, gerr = M.gate(args, tasks, prefix or "kmrun")
  if not tasks then return fail(gerr, 2) end
  local guidance
  do
    local okg, G = pcall(require, "km.run.guidance")
    if okg then guidance = G.load() end
  end
  local function make_client(model, task_name) return M.setup_client(args, model, task_name) end
  local okc, probe, perr = pcall(make_client, nil)
  if not okc or not probe then return fail("model client: " .. tostring(okc and perr or probe), 2) end
  local cfg = probe:config()
  if cfg.provider == "offline" then
    io.stderr:write("kmrun: offline: no model configured (" .. SET_HINT .. ", or KM_MODEL); strategies use each task's starter\n")
  elseif cfg.provider ~= "replay" then
    local source = "--context"
    if not args.context then
      args.context = context.size_from_models(probe.models and probe:models(), cfg.model)
      source = args.context and "the server's model list" or "default; --context sets it"
      args.context = args.context or context.DEFAULT_SIZE
    end
    if not args.quiet then
      io.stderr:write(fmt("kmrun: model context %d tokens (%s); replies up to %d tokens\n", args.context, source,
        args.max_tokens or model.DEFAULT_MAX_TOKENS))
    end
  end
  if pool then pool, why = pool:ready() end
  if not pool then
    io.stderr:write("kmrun: no GPU: ", tostring(why), "\n",
      "kmrun: checking that candidates compile (NVRTC, sm_90) without running them\n")
  end
  return { db = db, pool = pool, guidance = guidance, make_client = make_client, cfg = cfg, tasks = tasks }
end

----------------------------------------------------------------------------------------
-- the end of a run

-- Exit statuses of kmrun STRATEGY and kmrun sweep (README, docs/strategies.md).
M.EXIT = { OK = 0, NOT_ALL_CORRECT = 1, USAGE = 2, NO_GPU = 3, MODEL = 4 }

M.EXIT_STATUS = [[
Exit status: 0 when every episode ended correct, 1 otherwise (a task named that is not valid
and was dropped included), 2 on usage errors, 3 when there was no GPU and every episode's
candidate compiled (nothing was run; a compile error is 1, as from kmrun eval), 4 when the
model could not be used (the run was stopped by it, or an episode ended on a model error),
130 on Ctrl-C (143 on SIGTERM).]]

-- The exit status for a finished (or interrupted) run: 128 + the signal when interrupted;
-- MODEL when the model could not be used (the run was stopped by it, or an episode ended
-- on a model error); NO_GPU when candidates were only compiled (now, or before and still
-- not judged) and every episode ended compiled or correct; else 0 or 1 over every planned
-- episode, those finished in earlier runs of the same store too (res.before, km.run.sweep).
-- An episode that ended on a compile error is 1 with or without a GPU, as kmrun eval's
-- compile_error is; so is a run where a task was dropped as invalid (dropped: setup.tasks').
function M.exit_status(res, pool, dropped)
  if res.interrupted then return require("km.signal").exit_status(res.interrupted) end
  if res.stopped or (res.model_errors or 0) > 0 then return M.EXIT.MODEL end
  -- a named task that could not be loaded is a task not done: never 0 (nor 3, which says
  -- every candidate compiled)
  if dropped and #dropped > 0 then return M.EXIT.NOT_ALL_CORRECT end
  local before = res.before or { n = 0, correct = 0, compiled = 0 }
  local n, correct = res.ran + before.n, res.correct + before.correct
  local compiled = (res.compiled or 0) + before.compiled
  if not pool and compiled > 0 and correct + compiled == n then return M.EXIT.NO_GPU end
  return correct == n and M.EXIT.OK or M.EXIT.NOT_ALL_CORRECT
end

local function geomean(xs)
  if #xs == 0 then return nil end
  local s = 0
  for _, x in ipairs(xs) do s = s + math.log(x) end
  return math.exp(s / #xs)
end

-- ", geomean speedup 1.26x over eager (3 correct)" for each baseline speedups were divided
-- by (km.run.sweep's speedups_by: speedup_over -> list); "" when there are none.
function M.speedup_summary(by)
  local parts, keys = {}, {}
  for over in pairs(by or {}) do keys[#keys + 1] = over end
  table.sort(keys)
  for _, over in ipairs(keys) do
    local xs = by[over]
    parts[#parts + 1] = fmt("%.2fx %s (%d correct)", geomean(xs), require("km.feedback").over(over), #xs)
  end
  return #parts > 0 and (", geomean speedup " .. concat(parts, ", ")) or ""
end

return M
