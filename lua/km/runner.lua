-- km.runner — runs a strategy over tasks: builds the ctx a strategy sees, records every
-- step in the store, prints a line per task and a summary.
--
--   kmrun strategies/repair.lua tasks/ [--model M] [--rounds N] [--store runs/x.sqlite] ...
--
-- A strategy file returns function(ctx) -> candidate, verdict. kmrun hands such a file to
-- runner.main. Everything the strategy does through ctx lands in the store:
--   ctx.task       the task (km.task)           ctx.args     parsed command-line options
--   ctx.llm        the model client; :chat(messages, opts), :chat_many(list, opts)
--   ctx.propose(messages [, opts]) -> candidate | nil, reply, why  (asks the model; offline:
--                  the task's starter, and says so)
--   ctx.eval(candidate [, opts]) -> verdict      (isolated GPU workers; no GPU: compile only)
--   ctx.compile(candidate) -> verdict-like table  (NVRTC only)
--   ctx.guidance   the guidance library; :for_task / :for_verdict record what was shown
--   ctx.log(kind, payload)   ctx.say(fmt, ...)   ctx.budget   ctx.offline   ctx.gpu
local task_mod = require "km.task"
local prompt = require "km.prompt"
local json = require "km.json"
local wall = require("km.timing").wall

local fmt, concat, insert = string.format, table.concat, table.insert
local ipairs, pairs, type, tostring, tonumber, pcall = ipairs, pairs, type, tostring, tonumber, pcall

local M = {}

-- The options every strategy takes (kmrun STRATEGY and kmrun sweep), in km.args' form.
-- A strategy's own options travel as --set NAME=VALUE (ctx.args.NAME). Add new ones here:
-- an option no spec declares is refused.
M.OPTIONS = {
  { "tasks", "DIR[,DIR]", "task folders, or folders of task folders (as the TASKS arguments)", type = "list" },
  { "store", "FILE", "the run's store (default runs/<timestamp>.sqlite)", type = "path", old = { "out" } },
  { "models", "M[,M...]", "model names (else KM_MODEL); several: one episode per model",
    type = "list", aliases = { "model" } },
  { "provider", "P", "openai, anthropic, replay or offline (default: from the environment)",
    choices = { "openai", "anthropic", "replay", "offline" } },
  { "base-url", "URL", "the model server (else OPENAI_BASE_URL)" },
  { "replay", "FILE", "replay the model turns recorded in FILE (.sqlite or .jsonl)", type = "file" },
  { "llm-timeout", "S", "seconds before a model request is given up (default 600)", type = "seconds" },
  { "context", "N", "the model's context window in tokens (default: the server's model list, else 32768)",
    type = "positive" },
  { "max-tokens", "N", "room for each reply (default: the strategy's, else 4096)", type = "positive" },
  { "temperature", "T", "sampling temperature (default: the strategy's, else 0.2)", type = "nonneg" },
  { "rounds", "N", "repair/optimize rounds", type = "positive", default = 5 },
  { "samples", "N", "candidates drawn per round by best-of-N strategies", type = "positive", default = 4 },
  { "method", "M", "the tuner's search: exhaustive, random, anneal or bandit (default per strategy)",
    choices = { "exhaustive", "random", "anneal", "bandit" } },
  { "tune-budget", "N", "points the tuner may measure (default per strategy)", type = "positive" },
  { "forms", "LIST", "spec forms shown to the model: description,math,reference", type = "choices",
    choices = { "description", "math", "reference" } },
  { "gpus", "LIST", "GPUs to use, e.g. 0,1 (default: every visible GPU, one worker each)", type = "ints",
    aliases = { "gpu" } },
  { "seeds", "N", "seeds per shape", type = "positive", default = 3 },
  { "timeout", "S", "seconds per candidate before it is stopped", type = "seconds", default = 120 },
  { "jobs", "N", "episodes in flight at once (default 2 per GPU worker)", type = "positive" },
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
for _, o in ipairs(require("km.baseline").OPTIONS) do M.OPTIONS[#M.OPTIONS + 1] = o end

M.EXIT_STATUS = [[
Exit status: 0 when every episode ended correct, 1 otherwise, 2 on usage errors, 3 when
there was no GPU (candidates were only compiled), 4 when the model could not be used (the
run was stopped by it, or an episode ended on a model error), 130 on Ctrl-C (143 on SIGTERM).]]

-- What a strategy file says of itself: its description (the leading comment's first
-- paragraph, as one line), its own options (comment lines `-- --set NAME=DEFAULT  what`,
-- read as ctx.args.NAME) and the runner options it reads (ctx.args.KEY in its source).
-- -> { description, sets = { { name, default, help } }, reads = { option, ... },
-- unknown = { NAME, ... } (ctx.args names neither an option nor declared) } | nil, why
function M.strategy_info(path)
  local src, err = task_mod.read_file(path)
  if not src then return nil, err end
  local info = { sets = {}, reads = {}, unknown = {} }
  local words, in_para = {}, true
  for line in (src .. "\n"):gmatch("([^\n]*)\n") do
    local c = line:match("^%-%-(.*)$")
    if not c or line:match("^%-%-%[") then break end
    local name, default, help = c:match("^%s*%-%-set%s+([%a_][%w_]*)=(%S*)%s*(.*)$")
    if name then
      in_para = false
      info.sets[#info.sets + 1] = { name = name, default = default, help = help }
    elseif c:match("^%s*$") then
      in_para = false
    elseif in_para then
      words[#words + 1] = c:match("^%s*(.-)%s*$")
    elseif #info.sets > 0 and c:match("^%s%s+%S") then -- a --set line's continuation
      local last = info.sets[#info.sets]
      last.help = last.help .. " " .. c:match("^%s*(.-)%s*$")
    end
  end
  info.description = #words > 0 and concat(words, " ") or nil
  local declared, seen = {}, {}
  for _, st in ipairs(info.sets) do declared[st.name] = true end
  local by_key = {}
  for _, o in ipairs(M.OPTIONS) do by_key[o.key or (o[1]:gsub("%-", "_"))] = o end
  for key in src:gmatch("ctx%.args%.([%a_][%w_]*)") do
    if not seen[key] then
      seen[key] = true
      if by_key[key] then info.reads[#info.reads + 1] = by_key[key]
      elseif not declared[key] then info.unknown[#info.unknown + 1] = key end
    end
  end
  return info
end

-- The spec of `kmrun STRATEGY` for the strategy file at `script`: its help starts with the
-- strategy's own description and lists the options it reads and its own --set options
-- before the options every strategy run takes.
function M.spec(script)
  local name = tostring(script or "STRATEGY"):match("([^/]+)%.lua$") or tostring(script or "STRATEGY")
  local info = script and M.strategy_info(script) or { sets = {}, reads = {} }
  local reads, own, common = name .. " reads", name .. "'s own options (--set NAME=VALUE, read as ctx.args.NAME)",
    "options of every strategy run"
  local options, picked = {}, {}
  for _, o in ipairs(info.reads) do picked[o] = true end
  for _, o in ipairs(M.OPTIONS) do
    local c = {}
    for k, v in pairs(o) do c[k] = v end
    c.section = picked[o] and reads or common
    options[#options + 1] = c
  end
  local rows = {}
  for _, st in ipairs(info.sets) do
    rows[#rows + 1] = { own, "--set " .. st.name .. "=" .. st.default, st.help }
  end
  if #rows == 0 then rows[1] = { own, "none", "" } end
  return require("km.args").spec {
    name = "kmrun " .. name,
    -- "repair: ask, judge, ..." (the file's own name before the colon gives way to the
    -- name it runs under: a copy keeps its description)
    title = info.description and (name .. ": " .. info.description:gsub("^[%a_][%w_]*:%s+", "")),
    synopsis = "[TASKS...] [options]",
    about = "Runs the strategy over every task; each episode is recorded in the run's store.",
    positional = { { "task_args", "TASKS", "task folders, or folders of task folders (default ./tasks)", many = true } },
    options = options,
    rows = rows,
    section_order = { "arguments", reads, own, common },
    help_section = common,
    footer = M.EXIT_STATUS,
  }
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
    for _, o in ipairs(M.OPTIONS) do
      if (o.key or o[1]:gsub("%-", "_")) == k then return nil, "--set: " .. k .. " is an option of its own: use --" .. o[1] end
    end
    a[k] = tonumber(v) or v
  end
  return a
end

-- Parses argv (a list of strings) into the runner's options: { tasks = {...}, ... }, or
-- nil, message.
function M.parse_args(argv, spec)
  local a, err, kind = require("km.args").read(spec or M.spec(), argv)
  if not a then
    if kind == "help" then return { help = true, tasks = {} } end
    return nil, err
  end
  return M.finish_args(a)
end

-- The task folders to run: the ones named (each a folder, or a KernelBench problem file),
-- else ./tasks when it exists. Returns the list, or nil, one line saying what is wrong
-- (`who`: "kmrun NAME").
function M.task_dirs(named, who)
  local is_dir = require("km.args").is_dir
  if #named == 0 then
    if is_dir("tasks") then return { "tasks" } end
    return nil, who .. ": no tasks named, and there is no ./tasks folder here: name task folders (" .. who .. " tasks/)"
  end
  local kbtask = require "km.kbtask"
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
  local kbtask = require "km.kbtask"
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
-- ctx

-- Builds the ctx for one episode. env: { store, episode, pool (or nil), client, guidance, args }
function M.ctx(t, env)
  local store, ep = env.store, env.episode
  local model = require "km.model"
  local ctx = { task = t, args = env.args, gpu = env.pool ~= nil, stats = model.new_stats() }
  local st0 = ctx.stats
  st0.evals, st0.gpu_seconds, st0.failure_modes = 0, 0, {}
  local function log(kind, payload, extra)
    if store then store:append(ep, kind, payload or {}, extra) end
  end
  ctx.log = log
  ctx.say = function(f, ...) if not env.args.quiet then io.stdout:write(fmt(f, ...), "\n") io.stdout:flush() end end

  -- the model: every call within the context, recorded, counted per request (km.model)
  local function wrap(client) return model.wrap(ctx, client, log, env.args) end
  local client = env.client
  local cfg = client and client:config() or { provider = "offline" }
  ctx.offline = cfg.provider == "offline"
  ctx.llm = wrap(client)
  ctx.budget = setmetatable({}, { __index = function(_, k) return (client and client:usage() or {})[k] end })
  -- every model named by --models (comma-separated), each recorded; else just ctx.llm
  function ctx.models()
    if not env.args.models then return { ctx.llm } end
    local list = {}
    local names = env.args.models
    if type(names) ~= "table" then
      names = {}
      for name in tostring(env.args.models):gmatch("[^,]+") do names[#names + 1] = name end
    end
    for _, name in ipairs(names) do
      local c = require("km.llm").new { provider = cfg.provider ~= "offline" and cfg.provider or nil, model = name }
      list[#list + 1] = wrap(c)
    end
    return list
  end

  -- guidance, recording what was shown
  local lib = env.guidance
  local shown = {}
  ctx.guidance = {
    for_task = function(_, task, opts)
      if not lib then return {} end
      local list = lib:for_task(task, opts)
      local ids = {}
      for i, g in ipairs(list) do ids[i] = g.id; shown[g.id] = true end
      log("guidance", { ids = ids, reason = "task" })
      return list
    end,
    for_verdict = function(_, task, verdict, opts)
      if not lib then return {} end
      opts = opts or {}
      opts.exclude = opts.exclude or shown
      if opts.status_only == nil then opts.status_only = true end
      opts.limit = opts.limit or 2
      local list = lib:for_verdict(task, verdict, opts)
      local ids = {}
      for i, g in ipairs(list) do ids[i] = g.id; shown[g.id] = true end
      log("guidance", { ids = ids, reason = verdict.status })
      return list
    end,
    search = function(_, words) return lib and lib:search(words) or {} end,
    get = function(_, id) return lib and lib:get(id) end,
    lib = lib,
  }

  -- candidates and verdicts
  function ctx.compile(cand) return M.compile_check(cand, env.arch) end

  function ctx.eval(cand, opts)
    opts = opts or {}
    if type(cand) ~= "table" then
      -- no candidate: no_code, truncated or model_error (km.model), counted like a verdict
      local v = model.no_candidate(ctx, opts.why)
      ctx.stats.failure_modes[v.status] = (ctx.stats.failure_modes[v.status] or 0) + 1
      log("verdict", v)
      return v
    end
    log("candidate", { name = cand.name, source = cand.source, launch = cand.launch, params = cand.params, origin = cand.origin })
    local v
    local t0 = wall()
    if env.pool then
      local o = { seeds = opts.seeds or env.args.seeds, timing = opts.timing, timeout = opts.timeout or env.args.timeout, baseline = opts.baseline,
        energy = opts.energy or env.args.energy }
      require("km.baseline").judge_opts(env.args, o)
      v = env.pool:eval(t, cand, o)
    else
      v = ctx.compile(cand)
    end
    local st = ctx.stats
    st.evals = st.evals + 1
    if st.compile_ok_first == nil then st.compile_ok_first = v.status ~= "compile_error" end
    if v.status == "correct" and not st.rounds_to_correct then st.rounds_to_correct = st.evals end
    st.failure_modes[v.status] = (st.failure_modes[v.status] or 0) + 1
    local secs = wall() - t0
    if env.pool then st.gpu_seconds = st.gpu_seconds + (v.eval_seconds or secs) end
    log("verdict", v, { duration_ms = secs * 1e3 })
    if v.timing then log("timing", { timing = v.timing, speedup = v.speedup, roofline = v.roofline }) end
    return v
  end

  -- Asks the model for a candidate; offline, the task's starter stands in.
  function ctx.propose(messages, opts)
    opts = opts or {}
    if ctx.offline then
      local cand = task_mod.starter(t)
      if not cand then return nil, nil, "offline and the task has no starter" end
      cand.origin = "starter (offline: no model configured)"
      if not ctx.offline_noted then
        ctx.offline_noted = true
        log("note", { text = "offline: no model configured; using the task's starter" })
      end
      return cand, { content = prompt.candidate_text(cand), offline = true }
    end
    local reply, err, code = ctx.llm:chat(messages, opts)
    if not reply then return nil, nil, err, code end -- ctx.model_error and ctx.no_candidate are set
    local cand, why = prompt.extract(reply.content, { default_launch = opts.default_launch })
    if not cand then
      local status = "no_code"
      if reply.finish_reason == "length" then status, why = "truncated", model.truncated_text(reply) end
      ctx.no_candidate = { status = status, why = why }
      log("note", { text = "no usable candidate in the reply", why = why, status = status })
      return nil, reply, why
    end
    ctx.no_candidate = nil
    cand.origin = "model"
    return cand, reply
  end

  return ctx
end

-- What a candidate gets where there is no GPU (ctx.eval without workers, kmrun eval):
-- kernel.cu compiled by NVRTC for `arch` (default sm_90) and launch.lua loaded in the
-- sandbox, nothing run. -> a verdict: compile_error, or compiled (exit status 3).
function M.compile_check(cand, arch)
  local nvrtc = require "km.nvrtc"
  local src = cand.source or ""
  local prog, log_text = nvrtc.compile(src, { arch = arch or "sm_90", defines = cand.params, name = "kernel.cu" })
  if not prog then
    return { status = "compile_error", feedback = require("km.feedback").compile(tostring(log_text), src, "kernel.cu"),
      compile_log = log_text }
  end
  local fn, err = require("km.sandbox").load(cand.launch or "", "launch.lua")
  if not fn then return { status = "compile_error", feedback = "launch.lua does not load: " .. tostring(err) } end
  return { status = "compiled", feedback = "kernel.cu compiles and launch.lua loads (not run: no GPU).",
    compile_log = prog.log, kernels = prog.kernels }
end

----------------------------------------------------------------------------------------
-- main

-- The episode summary kept in the store (episodes.summary); docs/store.md lists it and
-- `kmrun report` reads it.
function M.summary(t, ctx, verdict, seconds)
  local st = ctx.stats
  local s = {
    status = verdict and verdict.status, speedup = verdict and verdict.speedup,
    speedup_baseline = verdict and verdict.speedup_baseline,
    -- what speedup is against, and the candidate over each baseline the judge timed (nil
    -- where it timed none); km.report's fast_p per baseline reads these
    speedup_over = verdict and verdict.speedup_over, speedup_eager = verdict and verdict.speedup_eager,
    speedup_compile = verdict and verdict.speedup_compile,
    speedup_cuda_reference = verdict and verdict.speedup_cuda_reference,
    compile_mode = verdict and verdict.compile_mode,
    roofline = verdict and verdict.roofline and verdict.roofline.fraction,
    level = t.level, category = t.category, forms = ctx.args.forms or { "description", "math" },
    evals = st.evals, model_calls = st.model_calls, compile_ok_first = st.compile_ok_first,
    rounds_to_correct = st.rounds_to_correct, failure_modes = st.failure_modes,
    seconds = seconds, gpu_seconds = st.gpu_seconds,
    model_error = ctx.model_error,
  }
  -- tokens, requests, dollars, latency, truncated replies, reasoning: summed per request
  for k, v in pairs(require("km.model").summary(st)) do s[k] = v end
  require("km.lint").annotate_summary(s, t) -- the task's lint result and held-out shape
  return s
end

-- The verdict an episode ends with: the strategy's, or model_error when it returned none
-- because the model failed.
function M.final_verdict(ctx, verdict)
  if (verdict == nil or verdict.status == nil) and ctx.model_error then
    return require("km.model").no_candidate(ctx)
  end
  return verdict
end

-- Exit statuses of kmrun STRATEGY and kmrun sweep (README, docs/strategies.md).
M.EXIT = { OK = 0, NOT_ALL_CORRECT = 1, USAGE = 2, NO_GPU = 3, MODEL = 4 }

-- The exit status for a finished (or interrupted) run: 128 + the signal when interrupted;
-- MODEL when the model could not be used (the run was stopped by it, or an episode ended
-- on a model error); NO_GPU when candidates were only compiled (now, or before and still
-- not judged); else 0 or 1 over every planned episode, those finished in earlier runs of
-- the same store too (res.before, km.sweep).
function M.exit_status(res, pool)
  if res.interrupted then return require("km.signal").exit_status(res.interrupted) end
  if res.stopped or (res.model_errors or 0) > 0 then return M.EXIT.MODEL end
  local before = res.before or { n = 0, correct = 0, compiled = 0 }
  if not pool and (res.ran > 0 or before.compiled > 0) then return M.EXIT.NO_GPU end
  return (res.correct + before.correct == res.ran + before.n) and M.EXIT.OK or M.EXIT.NOT_ALL_CORRECT
end

local function geomean(xs)
  if #xs == 0 then return nil end
  local s = 0
  for _, x in ipairs(xs) do s = s + math.log(x) end
  return math.exp(s / #xs)
end

-- ", geomean speedup 1.26x over eager (3 correct)" for each baseline speedups were divided
-- by (km.sweep's speedups_by: speedup_over -> list); "" when there are none.
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

-- Shared by `kmrun STRATEGY.lua` and `kmrun sweep`: the store, GPU workers, guidance and a
-- model-client factory for parsed args. Returns env or nil, message, exit status.
function M.setup(args, out)
  local store = require "km.store"
  local dir = out:match("^(.*)/[^/]+$")
  if dir then os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'") end
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

-- Runs `strategy` (a function(ctx)) over the tasks in argv; returns the exit status.
-- Tasks run concurrently over every GPU worker (km.sweep's scheduler).
function M.main(strategy, script, argv)
  local A = require "km.args"
  local spec = M.spec(script)
  local args, code = A.parse(spec, argv)
  if not args then return code end
  local ferr
  args, ferr = M.finish_args(args)
  if not args then return A.fail(spec, ferr) end
  local dirs, derr = M.task_dirs(args.tasks, spec.name)
  if not dirs then io.stderr:write(derr, "\n") return 2 end
  args.tasks = dirs
  local tasks, errors = M.collect_tasks(args.tasks, args.filter, args.precision)
  for _, e in ipairs(errors) do io.stderr:write("kmrun: skipping invalid task: ", e, "\n") end
  if #tasks == 0 then io.stderr:write("kmrun: no valid tasks\n") return 2 end
  local owhy
  tasks, owhy = M.offline_tasks(tasks, args)
  if owhy then io.stderr:write("kmrun: ", owhy, "\n") end
  if not tasks then return 2 end
  tasks = require("km.lint").gate(tasks, { skip = true, allow = args.allow_degenerate, who = "kmrun" })
  if #tasks == 0 then io.stderr:write("kmrun: every task was flagged by kmrun tasks lint (--allow-degenerate runs them)\n") return 2 end
  local out = args.store or ("runs/" .. os.date("%Y%m%d-%H%M%S") .. ".sqlite")
  local env, why, scode = M.setup(args, out)
  if not env then io.stderr:write("kmrun: ", why, "\n") return scode end
  local sname = script:match("([^/]+)%.lua$") or script
  if not args.quiet then
    print(fmt("kmrun: %s on %d task(s), %s, model %s (%s); store %s", sname, #tasks,
      env.pool and (env.pool.device.name .. " x" .. #env.pool.slots) or "no GPU", tostring(env.cfg.model or "-"),
      env.cfg.provider, out))
  end
  -- the same command again resumes: finished episodes are kept (km.sweep)
  local sweep = require "km.sweep"
  local res = sweep.run { strategies = { { name = sname, fn = strategy, path = script } }, tasks = tasks,
    models = args.models or { false }, repeats = 1, jobs = args.jobs, store = env.db, pool = env.pool, args = args,
    make_client = env.make_client, guidance = env.guidance, argv = argv, name = sname, rerun = args.rerun, replay = args.replay }
  local before = res.before
  local by = {}
  for _, src in ipairs { res.speedups_by, before.speedups_by } do
    for over, xs in pairs(src) do
      by[over] = by[over] or {}
      for _, x in ipairs(xs) do insert(by[over], x) end
    end
  end
  print(fmt("summary: %d/%d correct%s%s, %.0f s, store %s%s%s", res.correct + before.correct, res.ran + before.n,
    before.n > 0 and fmt(" (%d finished in earlier runs of this store)", before.n) or "",
    M.speedup_summary(by), res.seconds, out,
    env.pool and fmt(", %d GPU worker(s)", #env.pool.slots) or " (no GPU: compile checks only)",
    res.stopped and (", stopped: " .. tostring(res.stopped)) or ""))
  if res.interrupted then
    io.stderr:write(fmt("kmrun: interrupted (%s): %d episode(s) marked interrupted in %s; %s resumes the run%s\n",
      res.interrupted, res.n_interrupted or 0, out,
      args.store and "the same command" or ("the same command with --store " .. out),
      " (finished episodes are kept)"))
  end
  env.db:close()
  if env.pool then env.pool:close() end
  return M.exit_status(res, env.pool)
end

return M
