-- km.main — kmrun's own command line, read with the shared parser (km.args) before
-- runtime/glue/kmrun.c runs anything, and the list of kmrun's commands.
--
--   kmrun [options] [SCRIPT.lua | COMMAND | STRATEGY] [ARGS...]
--
-- kmrun.c calls M.plan(argv) (argv[0] the program) and acts on the table it returns:
--   { actions = { { "e", CODE } | { "l", NAME }, ... } in command-line order,
--     interactive (-i), version (-v), ignore_env (-E), warnings (-W),
--     script = a path or "-" (standard input) or nil, script_index = its argv index,
--     command = NAME when the script is lua/km/cmd/NAME.lua, strategy = NAME when found by name }
-- or an integer exit status once it has printed the help or an error.
--
-- What a first word names, in this order: a command (lua/km/cmd/NAME.lua: a file named
-- like a command in the working folder never shadows it; run that one as ./NAME); a path
-- (anything with a "/", or an existing file); a strategy by name (NAME or NAME.lua in
-- the strategies/ folder beside the Lua library: the source tree, or share/kmrun/ when
-- installed; KM_STRATEGIES adds folders, ':'-separated, searched first).
local args = require "km.args"

local ipairs, type, concat = ipairs, type, table.concat

local M = {}

-- Every command, with the line `kmrun help` shows for it (tests/lua/test_cli.lua checks
-- that each lua/km/cmd/*.lua is listed).
M.COMMANDS = {
  { "eval", "judge one candidate against a task in an isolated GPU worker" },
  { "tasks", "list, check, count, deduplicate and lint a task suite (tasks lint: degenerate tasks)" },
  { "sweep", "tasks x strategies x models x repeats, concurrent and resumable" },
  { "merge", "combine stores (e.g. sweep shards) without duplicates" },
  { "report", "what a sweep achieved: tables, fast_p, pass@k, charts, CSV" },
  { "export", "episodes as fine-tuning data (OpenAI chat JSONL) or raw JSONL; --validate" },
  { "reverify", "judge a run's final solutions again on this machine's GPU" },
  { "serve", "a resident GPU worker for kmrun eval (torch imported once)" },
  { "help", "this list, or one command's usage (kmrun help COMMAND)" },
}

M.SPEC = args.spec {
  name = "kmrun",
  synopsis = "[options] [SCRIPT.lua | COMMAND | STRATEGY] [ARGS...]",
  about = [[
Runs a Lua script with the km.* modules, a kmrun command, or a strategy over tasks
(a strategy is a script that returns function(ctx); by name, it is found in the
strategies/ folder: kmrun repair_then_tune tasks/). With no script: an interactive
prompt on a terminal, else the script read from standard input.]],
  stop_at_positional = true,
  positional = { { "script", "SCRIPT" } },
  options = {
    { "e", "CODE", "run the Lua chunk CODE (may be repeated)", short = "e", short_only = true, ordered = true },
    { "l", "NAME", "require library NAME into global NAME (-l g=NAME: into global g)", short = "l",
      short_only = true, ordered = true },
    { "i", nil, "the interactive prompt after running SCRIPT", short = "i", short_only = true },
    { "E", nil, "ignore LUA_PATH, LUA_CPATH and LUA_INIT", short = "E", short_only = true, key = "ignore_env" },
    { "W", nil, "turn warnings on", short = "W", short_only = true, key = "warnings" },
    { "version", nil, "print the versions of kmrun, Lua, NVRTC and the CUDA driver", short = "v" },
  },
  footer = [[
"--" ends the options; "-" as SCRIPT reads the script from standard input.]],
}

local function commands_text()
  local out = { "commands:" }
  for _, c in ipairs(M.COMMANDS) do out[#out + 1] = string.format("  %-10s %s", c[1], c[2]) end
  return concat(out, "\n") .. "\n"
end

-- kmrun's usage: its options, the commands and the environment.
function M.usage()
  return args.usage(M.SPEC) .. commands_text() .. [[
strategies (by name or path): implement, repair, optimize, tune, select, agent, repair_then_tune
  (kmrun STRATEGY --help lists the options every strategy takes)
environment: KM_PATH (Lua module folders searched before the library, ':'-separated),
  KM_CPATH (C modules), KM_STRATEGIES (strategy folders), LUA_PATH, LUA_CPATH, LUA_INIT
  (as lua reads them: LUA_INIT runs before scripts, -e and the prompt, not before commands)
caches: $XDG_CACHE_HOME/kmrun/ (else ~/.cache/kmrun/): nvrtc/ (compiled kernels), specs/
  (problem files' specs), baselines/ (PyTorch timings), lint/ (kmrun tasks lint's results),
  setup/ (what a task's set-up found); KM_CACHE_DIR, KM_SPEC_DIR, KM_BASELINE_DIR,
  KM_LINT_DIR, KM_SETUP_DIR move one each. Each only saves
  time: delete a folder (rm -rf ~/.cache/kmrun/lint) or all of them to clear it.
`kmrun help COMMAND` (or kmrun COMMAND --help) shows a command's options.
]]
end

----------------------------------------------------------------------------------------
-- finding what a name names

local function is_file(p)
  local f = io.open(p, "rb")
  if not f then return false end
  local _, _, code = f:read(0)
  f:close()
  return code ~= 21
end

local function libdir() return package.km_libdir or "" end

-- The command file for NAME, or nil.
function M.command_path(name)
  if type(name) ~= "string" or not name:match("^[%w][%w_%-]*$") or libdir() == "" then return nil end
  local p = libdir() .. "/km/cmd/" .. name .. ".lua"
  if is_file(p) then return p end
end

-- The folders searched for strategies by name, in order.
function M.strategy_dirs()
  local dirs = {}
  for d in (os.getenv("KM_STRATEGIES") or ""):gmatch("[^:]+") do dirs[#dirs + 1] = d end
  if libdir() ~= "" then dirs[#dirs + 1] = libdir():gsub("/[^/]+$", "") .. "/strategies" end
  return dirs
end

-- The strategy file for NAME (with or without .lua), or nil.
function M.strategy_path(name)
  if type(name) ~= "string" or name:find("/", 1, true) or not name:match("^[%w_%-%.]+$") then return nil end
  local file = name:match("%.lua$") and name or (name .. ".lua")
  for _, d in ipairs(M.strategy_dirs()) do
    local p = d .. "/" .. file
    if is_file(p) then return p end
  end
end

-- Strategy names found (sorted), for messages.
function M.strategy_names()
  local seen, out = {}, {}
  for _, d in ipairs(M.strategy_dirs()) do
    for _, f in ipairs(require("km.sys").readdir(d) or {}) do
      local n = f:match("^([%w_%-]+)%.lua$")
      if n and not seen[n] then seen[n] = true; out[#out + 1] = n end
    end
  end
  table.sort(out)
  return out
end

-- What the word `w` runs: "command", path | "script", path | "strategy", path | nil, why.
function M.resolve(w)
  local cmd = M.command_path(w)
  if cmd then return "command", cmd end
  if w == "-" then return "script", "-" end
  if w:find("/", 1, true) then
    if is_file(w) then return "script", w end
    return nil, "cannot open " .. w .. ": no such script"
  end
  -- a bare word: a file here, else a strategy by name
  if is_file(w) then return "script", w end
  local st = M.strategy_path(w)
  if st then return "strategy", st end
  local names = M.strategy_names()
  return nil, string.format("cannot open %s: no such script, command or strategy (commands: %s; strategies: %s)",
    w, (function() local c = {} for i, x in ipairs(M.COMMANDS) do c[i] = x[1] end return concat(c, ", ") end)(),
    #names > 0 and concat(names, ", ") or "none found")
end

----------------------------------------------------------------------------------------
-- the plan

-- argv: the C argv as a table (argv[0] the program). Returns the plan, or an exit status.
function M.plan(argv)
  local a, msg, kind = args.read(M.SPEC, argv, 1)
  if not a then
    if kind == "help" then io.stdout:write(M.usage()) return 0 end
    io.stderr:write("kmrun: ", msg, kind == "unknown" and "; see kmrun --help" or "", "\n")
    return 2
  end
  local plan = { actions = {}, interactive = a.i, version = a.version, ignore_env = a.ignore_env, warnings = a.warnings }
  for _, o in ipairs(a.ordered) do plan.actions[#plan.actions + 1] = { o[1], o[2] } end
  if a._rest_index then
    local w = argv[a._rest_index]
    local what, path = M.resolve(w)
    if not what then
      io.stderr:write("kmrun: ", path, "\n")
      return 2
    end
    plan.script, plan.script_index = path, a._rest_index
    if what == "command" then plan.command = w end
    if what == "strategy" then plan.strategy = w end
  end
  return plan
end

return M
