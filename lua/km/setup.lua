-- km.setup — what `kmrun STRATEGY` (km.runner) and `kmrun sweep` (km/cmd/sweep.lua) set up
-- before any episode runs: the tasks named on the command line, the model clients (a
-- recorded run replayed, budgets, prices), and the store, GPU workers and guidance of a run.
-- Both commands call it; neither calls the other (km.runner re-exports these under its old
-- names).
--
--   local dirs = assert(setup.task_dirs(args.tasks, "kmrun sweep"))
--   local tasks, errors = setup.collect_tasks(dirs, args.filter, args.precision)
--   local env = assert(setup.run(args, "runs/x.sqlite"))  -- { db, pool, guidance, make_client, cfg }
local task_mod = require "km.task"
local kbtask = require "km.kbtask"
local json = require "km.json"
local sys = require "km.sys"

local fmt, concat, insert = string.format, table.concat, table.insert
local ipairs, pairs, type, tostring, pcall = ipairs, pairs, type, tostring, pcall

local M = {}

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

-- Every task named on the command line, loaded; errors listed (problem files that cannot
-- load for want of PyTorch as one entry: km.kernelbench.fold_errors). precision (fp16,
-- bf16): the precision KernelBench problem files run at (tasks with a CUDA reference keep
-- theirs).
function M.collect_tasks(paths, filter, precision)
  local tasks, errors = {}, {}
  for _, p in ipairs(paths) do
    local f = io.open(p .. "/task.lua")
    if f then f:close() end
    if f or kbtask.is_problem(p) then
      local t, err = task_mod.load(kbtask.is_problem(p) and kbtask.key(p, precision) or p)
      if t then insert(tasks, t) else insert(errors, err) end
    else
      local ts, es = task_mod.list(p, precision)
      if #ts == 0 and #es == 0 then insert(errors, p .. ": no tasks found") end
      for _, t in ipairs(ts) do insert(tasks, t) end
      for _, e in ipairs(es) do insert(errors, e) end
    end
  end
  if filter then
    local kept = {}
    for _, t in ipairs(tasks) do if t.name:match(filter) then insert(kept, t) end end
    tasks = kept
  end
  local folded, line = require("km.kernelbench").fold_errors(errors)
  if line then insert(folded, line) end
  return tasks, folded
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
  local why = fmt("offline (no model configured: set OPENAI_BASE_URL or ANTHROPIC_API_KEY, or KM_MODEL, or --provider), " ..
    "and %s %s no starter to stand in for a model's candidate (%s): %s", #without == 1 and "1 task" or (#without .. " tasks"),
    #without == 1 and "has" or "have", names,
    #kept == 0 and "every episode could only end no_code, so nothing is run" or "they are left out")
  if #kept == 0 then return nil, why end
  return kept, why
end

----------------------------------------------------------------------------------------
-- the model client, recorded


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

-- Shared by `kmrun STRATEGY.lua` and `kmrun sweep`: the store, GPU workers, guidance and a
-- model-client factory for parsed args. Returns env or nil, message, exit status.
function M.run(args, out)
  local store = require "km.store"
  local dir = out:match("^(.*)/[^/]+$")
  if dir then
    local okd, derr = sys.mkdir(dir)
    if not okd then return nil, tostring(derr), 2 end
  end
  -- an existing store is resumed (its episodes read): it must be a good one (km.cli)
  local cli = require "km.cli"
  if not cli.is_new_store(out) then
    local probe, perr = cli.open_store(out)
    if not probe then return nil, perr, 2 end
    local ok, eerr, ecode = probe:episodes {}
    probe:close()
    if not ok then return nil, out .. ": " .. cli.reword(out, eerr, ecode), 2 end
  end
  local db, derr = store.open(out)
  if not db then return nil, "cannot open the store " .. out .. ": " .. tostring(derr), 2 end
  local eval = require "km.eval"
  local pool, why = eval.pool { gpus = args.gpus, timeout = args.timeout, worker_stderr = args.worker_stderr or "inherit" }
  if not pool then
    io.stderr:write("kmrun: no GPU: ", tostring(why), "\n",
      "kmrun: checking that candidates compile (NVRTC, sm_90) without running them\n")
  end
  local guidance
  do
    local okg, G = pcall(require, "km.guidance")
    if okg then guidance = G.load() end
  end
  local function make_client(model, task_name) return M.setup_client(args, model, task_name) end
  local okc, probe, perr = pcall(make_client, nil)
  if not okc or not probe then
    db:close()
    if pool then pool:close() end
    return nil, "model client: " .. tostring(okc and perr or probe), 2
  end
  local cfg = probe:config()
  if cfg.provider == "offline" then
    io.stderr:write("kmrun: offline: no model configured (set OPENAI_BASE_URL or ANTHROPIC_API_KEY, or KM_MODEL); strategies use each task's starter\n")
  elseif cfg.provider ~= "replay" then
    local context = require "km.context"
    local source = "--context"
    if not args.context then
      args.context = context.size_from_models(probe.models and probe:models(), cfg.model)
      source = args.context and "the server's model list" or "default; --context sets it"
      args.context = args.context or context.DEFAULT_SIZE
    end
    if not args.quiet then
      io.stderr:write(fmt("kmrun: model context %d tokens (%s); replies up to %d tokens\n", args.context, source,
        args.max_tokens or require("km.model").DEFAULT_MAX_TOKENS))
    end
  end
  return { db = db, pool = pool, guidance = guidance, make_client = make_client, cfg = cfg }
end

return M
