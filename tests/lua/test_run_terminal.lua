-- What a run shows on a terminal (issue 43, item 4): the progress bar, and after it a line for
-- each episode that did not end correct (task, status, reason), as piped output has. Run on a
-- real pseudo-terminal (util-linux `script`) over CPU tasks: without a GPU candidates only
-- compile, so one task's starter is made not to compile and its line must follow the bar.
-- Also: the bar's rate turns to per second past 1,000 a minute.
local t = require "km.tap"
local testing = require "km.testing"
local sys = require "km.sys"

local fmt = string.format
local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local NO_GPU = not require("km.cuda").available()

local TASKS = DIR .. "/tasks"
testing.task_copy(ROOT .. "/tasks/l1_relu", TASKS, "l1_relu")
testing.task_copy(ROOT .. "/tests/tasks/t_rowsum", TASKS, "t_rowsum")
local bad = testing.task_copy(ROOT .. "/tasks/l1_relu", TASKS, "l1_relu_bad")
local src = assert(testing.read(bad .. "/starter/kernel.cu"))
testing.write(bad .. "/starter/kernel.cu", src .. "\nthis is not C;\n")

local function have_script()
  local _, _, rc = testing.run("script --version")
  return rc == 0
end

-- cmd run on a pseudo-terminal; its output with the terminal's \r\n made \n, and its status
-- (script -e returns the command's)
local function on_terminal(cmd)
  local out, err, rc = testing.run("TERM=xterm script -qfec '" .. cmd:gsub("'", "'\\''") .. "' /dev/null")
  return (out:gsub("\r\n", "\n")), err, rc
end

local TERMINAL_TEST = "on a terminal: the bar, then a line for the episode that did not end correct"
if not have_script() then t.skip(TERMINAL_TEST, "no `script` (util-linux) here") else t.test(TERMINAL_TEST, function()
  for _, cmd in ipairs {
    fmt("%s implement %s --provider offline --store %s/a.sqlite", KMRUN, TASKS, DIR),
    fmt("%s sweep --strategies implement %s --provider offline --store %s/b.sqlite", KMRUN, TASKS, DIR),
  } do
    local out, _, rc = on_terminal(cmd)
    t.eq(rc, 1, out)
    local bar = out:find("[##############################] 3/3 episodes", 1, true)
    t.ok(bar, "the bar: " .. out)
    local after = out:sub(bar or 1)
    t.ok(after:find("\n1 episode did not end correct:\ntask ", 1, true), "said after the bar: " .. out)
    local row = after:match("\n(l1_relu_bad%s[^\n]*)")
    t.ok(row and row:find("implement", 1, true), "its line after the bar: " .. out)
    t.ok(row and row:find("expected a declaration", 1, true), "with the compiler's reason: " .. tostring(row))
    t.ok(not after:find("\nl1_relu ", 1, true) and not after:find("\nt_rowsum ", 1, true), "no line for the others: " .. out)
    if NO_GPU then t.ok(after:find("\n2 episodes compiled and not run (no GPU here)\n", 1, true), out) end
    t.ok(not out:find("\ntask%s+strategy[^\n]*\nl1_relu "), "no per-episode table on a terminal: " .. out)
  end
end) end

t.test("piped: a line per episode, no bar (as before)", function()
  local out, err, rc = testing.run(fmt("%s implement %s --provider offline --store %s/c.sqlite", KMRUN, TASKS, DIR))
  t.eq(rc, 1, out .. err)
  t.ok(not out:find("[###", 1, true), out)
  for _, name in ipairs { "l1_relu", "l1_relu_bad", "t_rowsum" } do
    t.ok(out:find("\n" .. name .. " ", 1, true), name .. ": " .. out)
  end
  t.ok(not out:find("did not end correct", 1, true), out)
end)

t.test("rates past 1,000 a minute are shown per second", function()
  local sweep = require "km.run.sweep"
  t.eq(sweep.rate_text(12.34), "12.3/min")
  t.eq(sweep.rate_text(999.9), "999.9/min")
  t.eq(sweep.rate_text(1000), "16.7/s")
  t.eq(sweep.rate_text(150000), "2500.0/s")
end)

sys.rmtree(DIR)
t.done()
