-- Every command, walked as a new user would: --help on stdout with status 0, an unknown
-- option refused with status 2 in one line that points at --help, a folder or file that does not exist named
-- in one line with status 2; kmrun's own --help and `kmrun help`; the strategy runner's
-- options; bad values that name themselves; a file named like a command that does not
-- shadow it; strategies by name; tasks from positional folders in sweeps.
local t = require "km.tap"
local testing = require "km.testing"
local json = require "km.json"

local ROOT, KMRUN = testing.paths()
local dir = testing.tmpdir()
require("km.sys").mkdir(dir .. "/io")

-- Runs a command line; returns stdout, stderr, exit status. The outputs go to a folder of
-- their own (io/), never into `dir`, whose contents some tests read as a task folder. A
-- command the shell could not start (126: not executable, e.g. build/kmrun being relinked
-- while the tests run; 127: not found) or one killed by a signal fails the test here, saying
-- so, rather than as a wrong status three assertions later.
local function run(cmd, cwd)
  local o, e = dir .. "/io/stdout", dir .. "/io/stderr"
  local full = string.format("cd '%s' && %s >%s 2>%s", cwd or ROOT, cmd, o, e)
  local ok, how, code = os.execute(full)
  local rc = ok and 0 or code
  local function slurp(p) local f = io.open(p) local s = f and f:read("a") or "" if f then f:close() end return s end
  local out, err = slurp(o), slurp(e)
  if how == "signal" or rc == 126 or rc == 127 then
    t.ok(false, string.format("%s: %s (%s %d): %s", cmd, how == "signal" and "killed" or "could not be run", how, rc, err))
  end
  return out, err, rc
end

local function lines(s)
  local n = 0
  for _ in s:gmatch("[^\n]+") do n = n + 1 end
  return n
end

local function no_traceback(label, s)
  t.ok(not s:find("traceback", 1, true) and not s:find("internal error", 1, true), label .. ": no traceback: " .. s)
end

-- Every command file, and how to point it at something that does not exist.
local COMMANDS = {}
do
  local p = io.popen("ls " .. ROOT .. "/lua/km/cmd/*.lua")
  for f in p:lines() do COMMANDS[#COMMANDS + 1] = f:match("([%w_]+)%.lua$") end
  p:close()
end
local MISSING = {
  eval = { "/nonexistent/task starter", "/nonexistent/task" },
  tasks = { "check /nonexistent/tasks", "/nonexistent/tasks" },
  sweep = { "--strategies implement /nonexistent/tasks --store " .. dir .. "/s.sqlite", "/nonexistent/tasks" },
  merge = { dir .. "/m.sqlite /nonexistent/in.sqlite", "/nonexistent/in.sqlite" },
  report = { "/nonexistent/run.sqlite", "/nonexistent/run.sqlite" },
  export = { "/nonexistent/run.sqlite", "/nonexistent/run.sqlite" },
  reverify = { "/nonexistent/run.sqlite", "/nonexistent/run.sqlite" },
  serve = { "--socket /nonexistent/s.sock", "/nonexistent" },
  help = { "nonexistent_command", "nonexistent_command" },
}

t.test("every command has a line in `kmrun help` and a way to be pointed at nothing", function()
  local out, err, rc = run(KMRUN .. " help")
  t.eq(rc, 0, err)
  t.eq(err, "")
  for _, c in ipairs(COMMANDS) do
    t.ok(out:find("\n  " .. c .. " ", 1, true), "kmrun help lists " .. c .. ":\n" .. out)
    t.ok(MISSING[c], "this test knows how to run " .. c .. " on a missing folder")
  end
end)

for _, c in ipairs(COMMANDS) do
  t.test("kmrun " .. c .. ": --help, an unknown option, a missing folder", function()
    local out, err, rc = run(KMRUN .. " " .. c .. " --help")
    t.eq(rc, 0, c .. " --help: " .. err)
    t.eq(err, "", c .. " --help writes nothing on stderr")
    t.ok(out:find("^usage: kmrun " .. c), c .. " --help on stdout: " .. out)
    local out2 = run(KMRUN .. " help " .. c)
    t.eq(out2, out, "kmrun help " .. c .. " is " .. c .. " --help")
    out, err, rc = run(KMRUN .. " " .. c .. " -h")
    t.eq(rc, 0)
    out, err, rc = run(KMRUN .. " " .. c .. " --bogus " .. ROOT .. "/tests/tasks")
    t.eq(rc, 2, c .. " --bogus: " .. out .. err)
    t.eq(out, "", c .. " --bogus: nothing on stdout")
    t.ok(err:find("^kmrun " .. c .. "[%w ]*: unknown option %-%-bogus") or err:find("^kmrun tasks: unknown subcommand"),
      c .. " --bogus: " .. err)
    t.eq(lines(err), 1, c .. " --bogus: one line, not the whole usage: " .. err)
    t.ok(err:find("see kmrun " .. c .. " --help", 1, true), c .. " --bogus points at --help: " .. err)
    no_traceback(c, err)
    local m = MISSING[c]
    out, err, rc = run(KMRUN .. " " .. c .. " " .. m[1])
    t.eq(rc, 2, c .. " on a missing path: " .. out .. err)
    t.eq(lines(err), 1, c .. ": one line: " .. err)
    t.ok(err:find(m[2], 1, true), c .. ": names " .. m[2] .. ": " .. err)
    no_traceback(c, err)
  end)
end

t.test("tasks: every subcommand answers --help; a bad --arch names itself", function()
  for _, sub in ipairs { "list", "check", "stats", "dedup" } do
    local out, err, rc = run(KMRUN .. " tasks " .. sub .. " --help")
    t.eq(rc, 0, err)
    t.ok(out:find("^usage: kmrun tasks " .. sub), out)
    out, err, rc = run(KMRUN .. " tasks " .. sub .. " /nonexistent")
    t.eq(rc, 2, sub .. ": " .. out .. err)
    t.ok(err:find("no such folder", 1, true), err)
  end
  local out, err, rc = run(KMRUN .. " tasks check --arch bogus tests/tasks")
  t.eq(rc, 2, out .. err)
  t.eq(lines(err), 1, err)
  t.ok(err:find("--arch: 'bogus' is not an architecture", 1, true), err)
  no_traceback("--arch", err)
  out, err, rc = run(KMRUN .. " tasks check --arch sm_999 tests/tasks")
  t.eq(rc, 2, out .. err)
  t.eq(lines(err), 1, err)
  t.ok(err:find("'sm_999' is not an architecture this NVRTC", 1, true), err)
  out, err, rc = run(KMRUN .. " tasks dedup --threshold 2 tests/tasks")
  t.eq(rc, 2)
  t.ok(err:find("--threshold: '2' wants a number from 0 to 1", 1, true), err)
  -- a folder of its own: what other tests leave in `dir` (stores, copied tasks) is not read
  local none = dir .. "/no_tasks"
  os.execute("mkdir -p " .. none)
  out, err, rc = run(KMRUN .. " tasks check " .. none)
  t.eq(rc, 1, "a folder with no tasks is not a pass: " .. out .. err)
  t.ok(out:find("no tasks found", 1, true), out .. err)
  out, err, rc = run(KMRUN .. " tasks")
  t.eq(rc, 2)
  t.ok(err:find("usage: kmrun tasks list", 1, true), err)
  out, err, rc = run(KMRUN .. " tasks --help")
  t.eq(rc, 0)
  t.ok(out:find("usage: kmrun tasks list", 1, true), out)
end)

t.test("tasks list: numeric order, aligned long names, '1 shape'; a file that is not a task; empty folders", function()
  local suite = dir .. "/suite"
  for _, name in ipairs { "2_b", "10_c", "1_a", "100_a_very_long_problem_name_that_is_wider_than_the_column" } do
    os.execute("mkdir -p " .. suite .. " && cp -r " .. ROOT .. "/tests/tasks/t_rowsum " .. suite .. "/" .. name)
    local f = assert(io.open(suite .. "/" .. name .. "/task.lua"))
    local src = f:read("a"):gsub('name = "t_rowsum"', 'name = "' .. name .. '"')
    f:close()
    if name == "2_b" then src = src:gsub("shapes = %b{}", "shapes = { { rows = 3, cols = 1000 } }") end
    f = assert(io.open(suite .. "/" .. name .. "/task.lua", "w"))
    f:write(src)
    f:close()
  end
  local out, err, rc = run(KMRUN .. " tasks list " .. suite)
  t.eq(rc, 0, err)
  local names, cols = {}, {}
  for l in out:gmatch("[^\n]+") do
    names[#names + 1] = l:match("^(%S+)")
    cols[#cols + 1] = l:find(" L1 ", 1, true)
  end
  t.eq(table.concat(names, " "), "1_a 2_b 10_c 100_a_very_long_problem_name_that_is_wider_than_the_column", out)
  for i = 2, #cols do t.eq(cols[i], cols[1], "the level column aligned: " .. out) end
  t.ok(out:find("1 shape\n", 1, true) and not out:find("1 shapes", 1, true), out)
  t.ok(out:find("4 shapes", 1, true), out)
  -- a file that exists but is not a task: said so, not "no such folder"
  out, err, rc = run(KMRUN .. " tasks list " .. ROOT .. "/README.md")
  t.eq(rc, 2)
  t.eq(lines(err), 1, err)
  t.ok(err:find("README.md: a file, but not a task", 1, true) and not err:find("no such folder", 1, true), err)
  -- a folder without tasks: one line, no empty tables, no "1 task(s), 1 failed"
  local empty = dir .. "/empty"
  os.execute("mkdir -p " .. empty)
  for _, sub in ipairs { "list", "stats", "dedup", "check" } do
    out, err, rc = run(KMRUN .. " tasks " .. sub .. " " .. empty)
    t.eq(rc, 1, sub .. ": " .. out .. err)
    t.eq(out, empty .. ": no tasks found (no folder with a task.lua in it, no PROBLEM.py)\n", sub)
    t.eq(err, "", sub)
  end
end)

t.test("kmrun --help and kmrun help: stdout, status 0, the commands listed", function()
  local out, err, rc = run(KMRUN .. " --help")
  t.eq(rc, 0); t.eq(err, "")
  t.ok(out:find("^usage: kmrun"), out)
  t.ok(out:find("commands:", 1, true) and out:find("kmrun help COMMAND", 1, true), out)
  local out2 = run(KMRUN .. " help")
  t.eq(out2, out)
  out, err, rc = run(KMRUN .. " --bogus")
  t.eq(rc, 2); t.eq(out, "")
  t.ok(err:find("^kmrun: unknown option %-%-bogus"), err)
  t.eq(lines(err), 1, err)
  t.ok(err:find("see kmrun --help", 1, true), err)
  out, err, rc = run(KMRUN .. " --versio")
  t.ok(err:find("did you mean --version?", 1, true), err)
end)

t.test("the strategy runner: options checked, --help, a missing folder, a clear message without tasks", function()
  local out, err, rc = run(KMRUN .. " strategies/repair.lua --round 3 tests/tasks")
  t.eq(rc, 2, out .. err)
  t.ok(err:find("unknown option --round (did you mean --rounds?)", 1, true), err)
  out, err, rc = run(KMRUN .. " strategies/repair.lua --bogus tests/tasks")
  t.eq(rc, 2)
  t.ok(err:find("unknown option --bogus", 1, true), "the task folder is not taken as its value: " .. err)
  out, err, rc = run(KMRUN .. " strategies/repair.lua --help")
  t.eq(rc, 0); t.eq(err, "")
  t.ok(out:find("^repair: ask, judge, [^\n]*\nusage: kmrun repair %[TASKS%.%.%.%]"), out)
  t.ok(out:find("--rounds N", 1, true) and out:find("--set NAME=VALUE", 1, true), out)
  out, err, rc = run(KMRUN .. " repair --seeds x tests/tasks")
  t.eq(rc, 2); t.eq(lines(err), 1, err)
  t.ok(err:find("--seeds: 'x' wants a positive integer", 1, true), err)
  out, err, rc = run(KMRUN .. " repair --forms description,colour tests/tasks")
  t.eq(rc, 2)
  t.ok(err:find("'colour' is not one of description, math or reference", 1, true), err)
  out, err, rc = run(KMRUN .. " repair /nonexistent/tasks")
  t.eq(rc, 2); t.eq(lines(err), 1, err)
  t.ok(err:find("/nonexistent/tasks: no such folder", 1, true), err)
  out, err, rc = run(KMRUN .. " repair", dir)
  t.eq(rc, 2, out .. err)
  t.ok(err:find("no tasks named, and there is no ./tasks folder here", 1, true), err)
  out, err, rc = run(KMRUN .. " repair --set rounds=3 tests/tasks")
  t.eq(rc, 2)
  t.ok(err:find("use --rounds", 1, true), err)
end)

t.test("a file named like a command does not shadow it; ./NAME runs the file", function()
  local f = assert(io.open(dir .. "/report", "w"))
  f:write("print('the local file')")
  f:close()
  local out, err, rc = run(KMRUN .. " report --help", dir)
  t.eq(rc, 0, err)
  t.ok(out:find("^usage: kmrun report"), out)
  out, err, rc = run(KMRUN .. " ./report", dir)
  t.eq(rc, 0, err)
  t.eq(out, "the local file\n")
end)

t.test("strategies by name: kmrun implement TASKS, and in sweeps", function()
  local st = dir .. "/byname.sqlite"
  local out, err, rc = run(KMRUN .. " implement tests/tasks --provider offline --seeds 1 --worker-stderr null --store " .. st)
  t.ok(rc == 0 or rc == 3, "ran (3: no GPU here): " .. out .. err)
  t.ok(out:find("implement on 1 task(s)", 1, true), out)
  local store = require "km.store"
  local db = assert(store.open(st, { readonly = true }))
  local eps = db:episodes {}
  db:close()
  t.eq(#eps, 1)
  t.eq(eps[1].strategy, "implement")
  t.eq(eps[1].task, "t_rowsum")
  out, err, rc = run(KMRUN .. " no_such_strategy tests/tasks")
  t.eq(rc, 2)
  t.ok(err:find("no such script, command or strategy", 1, true) and err:find("repair_then_tune", 1, true), err)
  -- KM_STRATEGIES adds folders
  os.execute("mkdir -p " .. dir .. "/mine && cp " .. ROOT .. "/strategies/implement.lua " .. dir .. "/mine/my_own.lua")
  out, err, rc = run("KM_STRATEGIES=" .. dir .. "/mine " .. KMRUN .. " my_own --help")
  t.eq(rc, 0, err)
  t.ok(out:find("^my_own: one shot%. [^\n]*\nusage: kmrun my_own"), out)
end)

t.test("kmrun sweep reads positional task folders; --out is now --store", function()
  local st = dir .. "/sweep.sqlite"
  local out, err, rc = run(KMRUN .. " sweep --strategies implement,strategies/repair.lua tests/tasks --provider offline" ..
    " --seeds 1 --worker-stderr null --store " .. st)
  t.ok(rc == 0 or rc == 3, out .. err)
  t.ok(not err:find("no tasks found", 1, true), err)
  t.ok(out:find("2 episodes planned", 1, true), out)
  out, err, rc = run(KMRUN .. " sweep --strategies implement --tasks tests/tasks --provider offline --seeds 1" ..
    " --worker-stderr null --out " .. st)
  t.ok(rc == 0 or rc == 3, out .. err)
  t.ok(err:find("note: --out is now --store", 1, true), err)
  t.ok(out:find("already finished", 1, true), out)
  out, err, rc = run(KMRUN .. " sweep tests/tasks --store " .. st)
  t.eq(rc, 2)
  t.ok(err:find("--strategies is required", 1, true), err)
  out, err, rc = run(KMRUN .. " sweep --strategies nope tests/tasks --store " .. st)
  t.eq(rc, 2)
  t.ok(err:find("--strategies: 'nope': no such strategy or file", 1, true), err)
  out, err, rc = run(KMRUN .. " sweep --strategies implement --shard 3/2 tests/tasks --store " .. st)
  t.eq(rc, 2)
  t.ok(err:find("--shard: '3/2' wants I/N with 1 <= I <= N", 1, true), err)
  out, err, rc = run(KMRUN .. " sweep --strategies implement --rerun bogus tests/tasks --store " .. st)
  t.eq(rc, 2)
  t.ok(err:find("--rerun: 'bogus' is not one of compiled, failed, error, correct or all", 1, true), err)
end)

t.test("bad values name themselves: export --format, eval --seeds", function()
  local out, err, rc = run(KMRUN .. " export x.sqlite --format bogus")
  t.eq(rc, 2); t.eq(lines(err), 1, err)
  t.ok(err:find("--format: 'bogus' wants one of sft, direct or jsonl", 1, true), err)
  out, err, rc = run(KMRUN .. " eval tests/tasks/t_rowsum starter --seeds 0")
  t.eq(rc, 2)
  t.ok(err:find("--seeds: '0' wants a positive integer", 1, true), err)
  out, err, rc = run(KMRUN .. " report x.sqlite --by colour")
  t.eq(rc, 2)
  t.ok(err:find("cannot group by 'colour'", 1, true), err)
  out, err, rc = run(KMRUN .. " merge")
  t.eq(rc, 2)
  t.ok(err:find("missing OUT.sqlite", 1, true), err)
  out, err, rc = run(KMRUN .. " eval tests/tasks/t_rowsum")
  t.eq(rc, 2)
  t.ok(err:find("missing CANDIDATE_DIR", 1, true), err)
  out, err, rc = run(KMRUN .. " reverify a.sqlite b.sqlite")
  t.eq(rc, 2)
  t.ok(err:find("unexpected argument 'b.sqlite'", 1, true), err)
  out, err, rc = run(KMRUN .. " export x.sqlite --sample=-1")
  t.eq(rc, 2)
  t.ok(err:find("--sample: '-1' wants a whole number", 1, true), err)
end)

t.test("a command the shell cannot start fails with that reason, not as a wrong exit status", function()
  local f = assert(io.open(dir .. "/not_executable", "w"))
  f:write("#!/bin/sh\nexit 0\n")
  f:close()
  t.raises(function() run(dir .. "/not_executable") end, "could not be run (exit 126)")
  t.raises(function() run(dir .. "/no_such_program") end, "could not be run (exit 127)")
end)

-- a trivial kernel that does not compile for a reason other than the architecture (here:
-- no toolkit headers where CUDA_HOME says) means nothing compiles: exit 2 saying so, not
-- "the architecture is fine" followed by every task failing (exit 1)
t.test("tasks check when NVRTC cannot compile at all: one line and exit 2", function()
  local out, err, rc = run("env CUDA_HOME=" .. dir .. "/no_toolkit " .. KMRUN .. " tasks check " .. ROOT .. "/tests/tasks --arch sm_90")
  t.eq(rc, 2, out .. err)
  t.ok(err:find("NVRTC cannot compile here", 1, true), err)
  t.ok(not out:find("FAIL", 1, true), out)
end)

os.execute("rm -rf " .. dir)
t.done()
