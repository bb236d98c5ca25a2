-- km.run.runner — the command `kmrun STRATEGY [TASKS...]`: its options, its help (from the
-- strategy file's own comment), and main, which runs the strategy over the tasks through
-- km.run.sweep's scheduler and prints a summary.
--
--   kmrun strategies/repair.lua tasks/ [--model M] [--rounds N] [--store runs/x.sqlite] ...
--
-- A strategy file returns function(ctx) -> candidate, verdict. kmrun hands such a file to
-- runner.main. Each episode is km.run.episode's (its ctx and summary km.run.ctx's); what is shared
-- with `kmrun sweep` (the options and their defaults, tasks, model clients, store and GPU
-- workers, the exit status) is km.run.setup's. Both are re-exported here under their old names
-- (runner.OPTIONS, runner.ctx, runner.summary, runner.collect_tasks, runner.setup, ...).
local task_mod = require "km.task"
local ctx_mod = require "km.run.ctx"
local setup = require "km.run.setup"
local leases = require "km.run.leases"
local sweep = require "km.run.sweep"
local A = require "km.args"

local fmt, concat, insert = string.format, table.concat, table.insert
local ipairs, pairs, tostring = ipairs, pairs, tostring

local M = {}

-- The options every strategy takes, with their defaults (km.run.setup's one table), and the
-- exit statuses (docs/strategies.md).
M.OPTIONS, M.EXIT, M.EXIT_STATUS = setup.OPTIONS, setup.EXIT, setup.EXIT_STATUS

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
  for key in src:gmatch("ctx%.args%.([%a_][%w_]*)") do
    if not seen[key] then
      seen[key] = true
      local o = setup.option(key)
      if o then info.reads[#info.reads + 1] = o
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

-- Parses argv (a list of strings) into the runner's options: { tasks = {...}, ... }, or
-- nil, message.
function M.parse_args(argv, spec)
  local a, err, kind = A.read(spec or M.spec(), argv)
  if not a then
    if kind == "help" then return { help = true, tasks = {} } end
    return nil, err
  end
  return setup.finish_args(a)
end

----------------------------------------------------------------------------------------
-- main

-- Old names, kept for callers and tests: the episode's ctx and summary (km.run.ctx) and what
-- kmrun sweep shares (km.run.setup).
M.ctx, M.compile_check, M.summary, M.final_verdict = ctx_mod.new, ctx_mod.compile_check, ctx_mod.summary,
  ctx_mod.final_verdict
M.task_dirs, M.collect_tasks, M.offline_tasks = setup.task_dirs, setup.collect_tasks, setup.offline_tasks
M.load_replay, M.setup_client, M.setup, M.finish_args = setup.load_replay, setup.setup_client, setup.run,
  setup.finish_args
M.exit_status, M.speedup_summary = setup.exit_status, setup.speedup_summary

-- The line after the run: correct over planned (with earlier runs of the store), the tasks
-- dropped as invalid, geomean speedups, seconds, store, workers, and why it stopped.
local function summary_line(res, env, out, dropped)
  local before = res.before
  local by = {}
  for _, src in ipairs { res.speedups_by, before.speedups_by } do
    for over, xs in pairs(src) do
      by[over] = by[over] or {}
      for _, x in ipairs(xs) do insert(by[over], x) end
    end
  end
  return fmt("summary: %d/%d correct%s%s%s, %.0f s, store %s%s%s", res.correct + before.correct, res.ran + before.n,
    before.n > 0 and fmt(" (%d finished in earlier runs of this store)", before.n) or "",
    setup.dropped_text(dropped), setup.speedup_summary(by), res.seconds, out,
    env.pool and fmt(", %d GPU worker(s)", #env.pool.slots) or " (no GPU: compile checks only)",
    res.stopped and (", stopped: " .. tostring(res.stopped)) or "")
end

-- Runs `strategy` (a function(ctx)) over the tasks in argv; returns the exit status.
-- Tasks run concurrently over every GPU worker (km.run.sweep's scheduler).
function M.main(strategy, script, argv)
  local spec = M.spec(script)
  local args, code = A.parse(spec, argv)
  if not args then return code end
  local ferr
  args, ferr = setup.finish_args(args)
  if not args then return A.fail(spec, ferr) end
  local tasks, tcode, dropped = setup.tasks(args, { name = spec.name, prefix = "kmrun" })
  if not tasks then return tcode end
  local out = args.store or leases.default_store()
  local env, why, scode = setup.run(args, out, tasks, "kmrun")
  if not env then io.stderr:write("kmrun: ", why, "\n") return scode end
  tasks = env.tasks
  local sname = script:match("([^/]+)%.lua$") or script
  if not args.quiet then
    print(fmt("kmrun: %s on %d task(s), %s, model %s (%s); store %s", sname, #tasks,
      env.pool and (env.pool.device.name .. " x" .. #env.pool.slots) or "no GPU", tostring(env.cfg.model or "-"),
      env.cfg.provider, out))
  end
  -- the same command again resumes: finished episodes are kept (km.run.sweep)
  local res = sweep.run { strategies = { { name = sname, fn = strategy, path = script } }, tasks = tasks,
    models = args.models or { false }, repeats = 1, jobs = args.jobs, store = env.db, pool = env.pool, args = args,
    make_client = env.make_client, guidance = env.guidance, argv = argv, name = sname, rerun = args.rerun, replay = args.replay }
  print(summary_line(res, env, out, dropped))
  if leases.held_line(res) then print("kmrun: " .. leases.held_line(res)) end
  if res.interrupted then
    io.stderr:write(fmt("kmrun: interrupted (%s): %d episode(s) marked interrupted in %s; %s resumes the run%s\n",
      res.interrupted, res.n_interrupted or 0, out,
      args.store and "the same command" or ("the same command with --store " .. out),
      " (finished episodes are kept)"))
  end
  env.db:close()
  if env.pool then env.pool:close() end
  return setup.exit_status(res, env.pool, dropped)
end

return M
