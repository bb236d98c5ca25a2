-- Each strategy's --help is its own (issue 19, item 9): it starts with the strategy's
-- one-line description (its file's leading comment), lists the options it reads and its
-- own --set options; every ctx.args name a strategy reads is an option or declared.
local t = require "km.tap"
local testing = require "km.testing"
local runner = require "km.run.runner"

local ROOT, KMRUN = testing.paths()

local NAMES = {}
for name in io.popen("ls " .. ROOT .. "/strategies"):lines() do
  if name:match("%.lua$") then NAMES[#NAMES + 1] = name:gsub("%.lua$", "") end
end

t.test("every strategy's help starts with its own description", function()
  t.ok(#NAMES >= 1, "strategies/ holds strategies")
  local firsts = {}
  for _, name in ipairs(NAMES) do
    local text, rc = testing.sh(KMRUN .. " " .. name .. " --help")
    t.eq(rc, 0, name)
    local first = text:match("^[^\n]*")
    -- the leading comment's first words, after the name
    local comment = testing.read(ROOT .. "/strategies/" .. name .. ".lua"):match("^%-%- " .. name .. ": ([^\n]*)")
    t.ok(comment, name .. ": its file starts with '-- " .. name .. ": ...'")
    t.ok(first:find(name .. ": " .. comment, 1, true) == 1, first)
    t.ok(not firsts[first], "not shared: " .. first)
    firsts[first] = name
    t.ok(text:find("\nusage: kmrun " .. name .. " [TASKS...] [options]\n", 1, true), text:sub(1, 300))
    -- kmrun help NAME says the same
    local same = testing.sh(KMRUN .. " help " .. name)
    t.eq(same, text, "kmrun help " .. name)
  end
end)

t.test("each lists the options it reads and its own --set options", function()
  local function help(name) return (testing.sh(KMRUN .. " " .. name .. " --help")) end
  local function section(text, title)
    return text:match("\n" .. title:gsub("%p", "%%%0") .. ":\n(.-)\n%S") or ""
  end
  local repair = help("repair")
  t.ok(section(repair, "repair reads"):find("--rounds N", 1, true), repair)
  t.ok(not section(repair, "repair reads"):find("--samples", 1, true), "repair does not read --samples")
  t.ok(section(repair, "repair's own options (--set NAME=VALUE, read as ctx.args.NAME)"):find("none", 1, true), repair)
  local sel = help("select")
  t.ok(section(sel, "select reads"):find("--samples N", 1, true), sel)
  t.ok(section(sel, "select's own options (--set NAME=VALUE, read as ctx.args.NAME)"):find("--set draw_temperature=0.8", 1, true), sel)
  local agent = help("agent")
  t.ok(agent:find("--set turns=15", 1, true), agent)
  local tune = help("tune")
  t.ok(section(tune, "tune reads"):find("--method M", 1, true) and section(tune, "tune reads"):find("--tune-budget N", 1, true), tune)
  -- the options every run takes come after, -h with them
  t.ok(section(tune, "options of every strategy run"):find("--store FILE", 1, true), tune)
  t.ok(tune:find("options of every strategy run:", 1, true) > tune:find("tune reads:", 1, true))
end)

t.test("every ctx.args name a strategy reads is an option or one of its --set options", function()
  for _, name in ipairs(NAMES) do
    local info = assert(runner.strategy_info(ROOT .. "/strategies/" .. name .. ".lua"))
    t.eq(#info.unknown, 0, name .. " reads undeclared ctx.args." .. table.concat(info.unknown, ", ctx.args."))
  end
end)

t.test("a user's strategy: its comment and --set lines make its help", function()
  local dir = testing.tmpdir()
  local path = dir .. "/mine.lua"
  testing.write(path, "-- mine: ask twice and keep the shorter kernel.\n--\n" ..
    "-- --set tries=2  how many times to ask\n" ..
    "return function(ctx) return nil, ctx.eval(nil, { why = tostring(ctx.args.tries) }) end\n")
  local text, rc = testing.sh(KMRUN .. " " .. path .. " --help")
  t.eq(rc, 0, text)
  t.ok(text:find("^mine: ask twice and keep the shorter kernel%.\n"), text)
  t.ok(text:find("\n  %-%-set tries=2 +how many times to ask\n"), text)
  local info = runner.strategy_info(path)
  t.eq(#info.unknown, 0)
  os.execute("rm -rf " .. dir)
end)

t.done()
