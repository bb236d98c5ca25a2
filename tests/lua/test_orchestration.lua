-- The orchestration layer stays small (issue 20): no function in km.sweep, km.episode,
-- km.runner, km.setup or km.ctx is longer than MAX_LINES, km.runner (the command) requires
-- at most MAX_RUNNER_REQUIRES modules, km.sweep (the scheduler) does not require the
-- command, and the defaults of the options every strategy takes are stated once (km.setup's
-- table), not again in the strategies.
local t = require "km.tap"

local fmt, concat = string.format, table.concat

local MAX_LINES = 80
local MAX_RUNNER_REQUIRES = 6
local FILES = { "lua/km/sweep.lua", "lua/km/episode.lua", "lua/km/runner.lua", "lua/km/setup.lua", "lua/km/ctx.lua" }

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

----------------------------------------------------------------------------------------
-- a small Lua reader: the words that open and close blocks, outside comments and strings

-- -> list of { word, line } for function, if, do, repeat, end, until; and requires, a list
-- of { name, line } for require "x" / require("x") / pcall(require, "x")
local function scan(src)
  local words, reqs = {}, {}
  local i, n, line = 1, #src, 1
  local prev, prev2 = nil, nil -- the two tokens before, for require's forms
  local function long_end(from, eq)
    local _, e = src:find("]" .. eq .. "]", from, true)
    return e or n
  end
  local function skip(to)
    local _, k = src:sub(i, to):gsub("\n", "")
    line = line + k
    i = to + 1
  end
  while i <= n do
    local c = src:sub(i, i)
    if c == "\n" then line = line + 1; i = i + 1
    elseif c:match("%s") then i = i + 1
    elseif src:sub(i, i + 1) == "--" then
      local eq = src:match("^%[(=*)%[", i + 2)
      skip(eq and long_end(i + 2, eq) or ((src:find("\n", i, true) or n + 1) - 1))
    elseif c == "[" and src:match("^%[=*%[", i) then
      local eq = src:match("^%[(=*)%[", i)
      local s0 = i
      skip(long_end(i, eq))
      prev2, prev = prev, { kind = "string", value = src:sub(s0 + #eq + 2, i - #eq - 3) }
    elseif c == '"' or c == "'" then
      local j = i + 1
      while j <= n do
        local d = src:sub(j, j)
        if d == "\\" then j = j + 2 elseif d == c then break else j = j + 1 end
      end
      local value = src:sub(i + 1, j - 1)
      if prev and prev.value == "require" and prev.kind == "name" then reqs[#reqs + 1] = { name = value, line = line }
      elseif prev and prev.value == "(" and prev2 and prev2.value == "require" then reqs[#reqs + 1] = { name = value, line = line }
      elseif prev and prev.value == "," and prev2 and prev2.value == "require" then reqs[#reqs + 1] = { name = value, line = line } end
      skip(j)
      prev2, prev = prev, { kind = "string", value = value }
    elseif c:match("[%a_]") then
      local w = src:match("^[%w_]+", i)
      local after_dot = prev and (prev.value == "." or prev.value == ":")
      if not after_dot and (w == "function" or w == "if" or w == "do" or w == "repeat" or w == "end" or w == "until") then
        words[#words + 1] = { word = w, line = line }
      end
      i = i + #w
      prev2, prev = prev, { kind = after_dot and "field" or "name", value = w }
    else
      if c:match("%d") then i = i + #src:match("^[%w_.]+", i)
      else i = i + 1 end
      prev2, prev = prev, { kind = "punct", value = c }
    end
  end
  return words, reqs
end

-- Every function of a source: { name, first, last, lines } (a function's lines count the
-- functions inside it).
local function functions(src)
  local words = scan(src)
  local lines = {}
  for l in (src .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local stack, out = {}, {}
  for _, w in ipairs(words) do
    if w.word == "end" or w.word == "until" then
      local open = table.remove(stack)
      assert(open, "unbalanced block at line " .. w.line)
      if open.word == "function" then
        local name = lines[open.line]:match("function%s+([%w_%.:]+)") or lines[open.line]:match("([%w_%.]+)%s*=%s*function")
          or "(anonymous)"
        out[#out + 1] = { name = name, first = open.line, last = w.line, lines = w.line - open.line + 1 }
      end
    else
      stack[#stack + 1] = w
    end
  end
  assert(#stack == 0, "unclosed block")
  return out
end

----------------------------------------------------------------------------------------
-- the reader reads

t.test("the reader finds functions, their lengths and requires; not in comments or strings", function()
  local src = [==[
local a = require "km.a"
local b = require("km.b")
local ok, c = pcall(require, "km.c")
-- local function commented() end
local s = "function end if do"
local l = [[ require "km.d" function ]]
local function f(x)
  if x then
    for i = 1, 2 do x = x + i end
  end
  repeat x = x - 1 until x < 0
  return function() return x end
end
function M.g() return t.end_ end
]==]
  local fs = functions(src)
  local got = {}
  for _, f in ipairs(fs) do got[#got + 1] = fmt("%s:%d-%d", f.name, f.first, f.last) end
  t.eq(concat(got, " "), "(anonymous):12-12 f:7-13 M.g:14-14")
  local _, reqs = scan(src)
  local names = {}
  for _, r in ipairs(reqs) do names[#names + 1] = r.name end
  t.eq(concat(names, " "), "km.a km.b km.c")
end)

----------------------------------------------------------------------------------------
-- the tree

t.test("no function in the orchestration layer is over " .. MAX_LINES .. " lines", function()
  local over, longest = {}, {}
  for _, path in ipairs(FILES) do
    local top = { lines = 0 }
    for _, f in ipairs(functions(read(path))) do
      if f.lines > top.lines then top = f end
      if f.lines > MAX_LINES then over[#over + 1] = fmt("%s:%d %s (%d lines)", path, f.first, f.name, f.lines) end
    end
    longest[#longest + 1] = fmt("%s %s %d", path:match("([%w_]+)%.lua$"), top.name or "-", top.lines)
  end
  t.note("longest function per module: " .. concat(longest, ", "))
  t.eq(concat(over, ", "), "", "functions over " .. MAX_LINES .. " lines")
end)

t.test("km.runner requires at most " .. MAX_RUNNER_REQUIRES .. " modules; km.sweep and km.episode not the command", function()
  local function required(path)
    local _, reqs = scan(read(path))
    local set, list = {}, {}
    for _, r in ipairs(reqs) do
      if not set[r.name] then set[r.name] = true; list[#list + 1] = r.name end
    end
    return set, list
  end
  local _, list = required("lua/km/runner.lua")
  t.note("km.runner requires " .. #list .. ": " .. concat(list, " "))
  t.ok(#list <= MAX_RUNNER_REQUIRES, "km.runner requires " .. #list .. ": " .. concat(list, " "))
  for _, path in ipairs { "lua/km/sweep.lua", "lua/km/episode.lua", "lua/km/setup.lua", "lua/km/ctx.lua", "lua/km/cmd/sweep.lua" } do
    t.eq(required(path)["km.runner"], nil, path .. " requires km.runner")
  end
  t.eq(required("lua/km/sweep.lua")["km.episode"], true, "the scheduler runs episodes through km.episode")
end)

t.test("the options' defaults are stated once: in km.setup's table, filled in by the parser", function()
  local setup = require "km.setup"
  local a = assert(setup.finish_args(assert(require("km.args").read(require("km.runner").spec(), {}))))
  for key, want in pairs { rounds = 5, samples = 4, seeds = 3, timeout = 120, llm_timeout = 600 } do
    t.eq(a[key], want, key)
    t.eq(setup.option(key).default, want, key .. " in the table")
  end
  t.eq(concat(a.forms, ","), "description,math")
  -- the strategies read them as the parser leaves them, with no second default beside
  for _, name in ipairs { "implement", "repair", "optimize", "tune", "select", "agent", "repair_then_tune" } do
    local src = read("strategies/" .. name .. ".lua")
    for key in pairs { rounds = 1, samples = 1, forms = 1, seeds = 1 } do
      t.eq(src:find("ctx%.args%." .. key .. "%s+or%s"), nil, name .. ".lua states a default for ctx.args." .. key)
    end
  end
end)

t.done()
