-- km.runner — the command `kmrun STRATEGY [TASKS...]`: its options, its help (from the
-- strategy file's own comment), and main, which runs the strategy over the tasks through
-- km.sweep's scheduler and prints a summary.
--
--   kmrun strategies/repair.lua tasks/ [--model M] [--rounds N] [--store runs/x.sqlite] ...
--
-- A strategy file returns function(ctx) -> candidate, verdict. kmrun hands such a file to
-- runner.main. The ctx it gets, and the summary each episode stores, are km.ctx's; the
-- set-up shared with `kmrun sweep` (tasks, model clients, store and GPU workers) is
-- km.setup's. Both are re-exported here under their old names (runner.ctx, runner.summary,
-- runner.collect_tasks, runner.setup, ...).
local task_mod = require "km.task"
local ctx_mod = require "km.ctx"
local setup = require "km.setup"
local sweep = require "km.sweep"
local A = require "km.args"

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
  return A.spec {
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
  local a, err, kind = A.read(spec or M.spec(), argv)
  if not a then
    if kind == "help" then return { help = true, tasks = {} } end
    return nil, err
  end
  return M.finish_args(a)
end

----------------------------------------------------------------------------------------
-- main

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

-- Old names, kept for callers and tests: the episode's ctx and summary (km.ctx) and the
-- set-up shared with kmrun sweep (km.setup).
M.ctx, M.compile_check, M.summary, M.final_verdict = ctx_mod.new, ctx_mod.compile_check, ctx_mod.summary,
  ctx_mod.final_verdict
M.task_dirs, M.collect_tasks, M.offline_tasks = setup.task_dirs, setup.collect_tasks, setup.offline_tasks
M.load_replay, M.setup_client, M.setup = setup.load_replay, setup.setup_client, setup.run

-- Runs `strategy` (a function(ctx)) over the tasks in argv; returns the exit status.
-- Tasks run concurrently over every GPU worker (km.sweep's scheduler).
function M.main(strategy, script, argv)
  local spec = M.spec(script)
  local args, code = A.parse(spec, argv)
  if not args then return code end
  local ferr
  args, ferr = M.finish_args(args)
  if not args then return A.fail(spec, ferr) end
  local dirs, derr = setup.task_dirs(args.tasks, spec.name)
  if not dirs then io.stderr:write(derr, "\n") return 2 end
  args.tasks = dirs
  local tasks, errors = setup.collect_tasks(args.tasks, args.filter, args.precision)
  for _, e in ipairs(errors) do io.stderr:write("kmrun: skipping invalid task: ", e, "\n") end
  if #tasks == 0 then io.stderr:write("kmrun: no valid tasks\n") return 2 end
  local owhy
  tasks, owhy = setup.offline_tasks(tasks, args)
  if owhy then io.stderr:write("kmrun: ", owhy, "\n") end
  if not tasks then return 2 end
  tasks = require("km.lint").gate(tasks, { skip = true, allow = args.allow_degenerate, who = "kmrun" })
  if #tasks == 0 then io.stderr:write("kmrun: every task was flagged by kmrun tasks lint (--allow-degenerate runs them)\n") return 2 end
  local out = args.store or ("runs/" .. os.date("%Y%m%d-%H%M%S") .. ".sqlite")
  local env, why, scode = setup.run(args, out)
  if not env then io.stderr:write("kmrun: ", why, "\n") return scode end
  local sname = script:match("([^/]+)%.lua$") or script
  if not args.quiet then
    print(fmt("kmrun: %s on %d task(s), %s, model %s (%s); store %s", sname, #tasks,
      env.pool and (env.pool.device.name .. " x" .. #env.pool.slots) or "no GPU", tostring(env.cfg.model or "-"),
      env.cfg.provider, out))
  end
  -- the same command again resumes: finished episodes are kept (km.sweep)
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
