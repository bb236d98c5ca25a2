-- km.sandbox — run Lua that a model or a task wrote (launch code, task.lua, params.lua):
-- an allow-list environment of fresh, bounded library copies, and budgets for work,
-- memory and time that nothing inside can escape. km.limits (C) does the bounding.
--
--   local fn, err = sandbox.load(src, "launch.lua")       -- launch code: a function, or nil, message, CODE
--   local ok, a, b = sandbox.call(fn, { budget = 1e6, memory = 64 << 20, time = 1 }, k, io, s)
--                                                         -- true, results... | false, message, CODE
--   local ok, t = sandbox.exec(src, "task.lua", opts)     -- a file's value: true, value | false, message, CODE
--   local copy, why = sandbox.data(t)                     -- plain data only, bounded in size
--
-- opts (defaults in sandbox.defaults): budget (work units: one per VM instruction, plus
-- what bounded library calls and allocations are charged; 1e7), memory (bytes the call may
-- allocate beyond what the process holds when it starts, and beyond what the function
-- kept from earlier calls; 256 MiB; false: no cap), block (the largest single object
-- the call may make — a string, a table's parts, the stack: 4 MiB, so that no single
-- instruction on it, such as == on two long strings, takes more than a few ms; false:
-- any), time (a wall-clock deadline in seconds, the backstop for many such
-- instructions; 2; false: none), max_source (bytes of source text; 1 MiB).
-- CODE: "BUDGET", "MEMORY", "TIME", "ERROR", "YIELD", "LOAD".
--
-- The environment has math (no random state: random/randomseed), string, table and utf8
-- as fresh tables of bounded functions (no string.dump, pack, packsize, unpack), pairs,
-- ipairs, next, select, type, tostring (no addresses), tonumber, error, assert, rawequal,
-- rawlen, unpack, pcall and xpcall; no io, os, require, load, debug, package, collectgarbage, coroutine,
-- setmetatable/getmetatable. A budget that trips cannot be caught: pcall and xpcall
-- re-raise it, and xpcall's handler runs as an ordinary call after the protected call
-- returned (never inside Lua's error machinery, where hooks are off).
local limits = require "km.limits"

local M = {}

local type, pairs, next, tostring, setmetatable, select, load = type, pairs, next, tostring, setmetatable, select, load
local fmt, tointeger, run, mem = string.format, math.tointeger, limits.run, limits.memory

M.defaults = { budget = 1e7, memory = 256 << 20, block = 4 << 20, time = 2, max_source = 1 << 20 }
local LOAD_OPTS = { budget = 1e6 } -- running a launch chunk only defines its function
local BUDGET_MSG = "instruction budget exceeded"
M.BUDGET_MSG = BUDGET_MSG
local EMPTY = {}

local function copy(t, skip)
  local c = {}
  for k, v in pairs(t) do if not (skip and skip[k]) then c[k] = v end end
  return c
end

local MATH_SKIP = { random = true, randomseed = true }

-- tostring without host addresses: a table, function or thread is named by its type alone
-- ("table", not "table: 0x55d0..."), a userdata by its own __tostring with any address taken
-- out, so sandboxed code learns no address of this process (docs/security.md)
local gsub = string.gsub -- the host's: during a run the string metatable's is the sandbox's
local function plain_tostring(v)
  local tv = type(v)
  if tv == "table" or tv == "function" or tv == "thread" then return tv end
  local s = tostring(v)
  if tv == "userdata" then s = gsub(s, ":? ?0[xX]%x+", "") end
  return s
end
-- The same for text the host writes about a value launch code or a task file gave it (an
-- argument error of a `k` function, a task field's error): nothing it says names an address.
M.text = plain_tostring

-- A text with every run of hex digits that could be an address (0x and 6 or more digits)
-- and every decimal of 12 or more digits (a pointer printed as an integer) replaced: the
-- last line before an error message leaves the sandbox for a verdict's feedback.
function M.no_addresses(s)
  s = gsub(s, "0[xX]%x%x%x%x%x%x+", "0x...")
  return (gsub(s, "%d%d%d%d%d%d%d%d%d%d%d%d+", "..."))
end

-- A fresh environment: nothing in it is shared with the host or with another sandbox.
function M.env()
  local lib = limits.lib()
  local env = {
    math = copy(math, MATH_SKIP), string = lib.string, table = lib.table, utf8 = lib.utf8,
    pairs = pairs, ipairs = ipairs, next = next, select = select, type = type,
    tostring = plain_tostring, tonumber = lib.tonumber, error = error, assert = assert,
    rawequal = rawequal, rawlen = rawlen, unpack = lib.table.unpack,
    pcall = lib.pcall, xpcall = lib.xpcall,
  }
  env._G = env
  return env
end

-- Bytes each sandboxed function kept alive between its calls (its upvalues, what it
-- returned): the next call's memory allowance is what is left of the budget.
local kept = setmetatable({}, { __mode = "k" })

local function mib(n) return n / 1048576 end

local function settle(fn, before, budget, ok, ...)
  local held = (kept[fn] or 0) + (mem() - before)
  kept[fn] = held > 0 and held or nil
  if ok then return true, ... end
  local msg, code = ...
  if code == "BUDGET" then
    msg = fmt("%s (%d instructions; an endless loop?)", BUDGET_MSG, budget)
  elseif type(msg) ~= "string" then
    -- error({}), error(print): what launch code raised is named by its type, as Lua's own
    -- interpreter names it, never by the host's tostring (which prints its address)
    local tm = type(msg)
    msg = (tm == "userdata" or tm == "number" or tm == "boolean" or tm == "nil") and plain_tostring(msg)
      or "(error object is a " .. tm .. " value)"
  end
  return false, M.no_addresses(msg), code
end

-- Calls fn(...) under the budgets. Returns true, results... or false, message, CODE.
function M.call(fn, opts, ...)
  opts = opts or EMPTY
  local d = M.defaults
  local budget = tointeger(opts.budget or d.budget) or d.budget
  local memory = opts.memory
  if memory == nil then memory = d.memory end
  local time = opts.time
  if time == nil then time = d.time end
  local block = opts.block
  if block == nil then block = d.block end
  local allowance
  if memory then
    local held = kept[fn] or 0
    if held > 0 and held >= memory then -- what it kept may be garbage by now
      local before = mem()
      collectgarbage()
      held = held - (before - mem())
      if held < 0 then held = 0 end
      kept[fn] = held > 0 and held or nil
      if held >= memory then
        return false, fmt("memory budget exceeded (the code keeps %.1f MiB between calls; the budget is %.1f MiB)",
          mib(held), mib(memory)), "MEMORY"
      end
    end
    allowance = memory - held
  end
  return settle(fn, mem(), budget, run(fn, budget, allowance, time or nil, block or nil, ...))
end

-- Compiles text (never a binary chunk) in env (a fresh one by default).
local function compile(src, name, opts, env)
  if type(src) ~= "string" then return nil, name .. ": source is not a string" end
  local max = opts.max_source or M.defaults.max_source
  if #src > max then return nil, fmt("%s: the source is %d bytes; the limit is %d", name, #src, max) end
  return load(src, "=" .. name, "t", env or M.env())
end

-- Runs a chunk of text (task.lua, params.lua) under the budgets and returns its value:
-- true, results... or false, message, CODE.
function M.exec(src, name, opts, env)
  name = name or "chunk"
  opts = opts or EMPTY
  local chunk, err = compile(src, name, opts, env)
  if not chunk then return false, err, "LOAD" end
  return M.call(chunk, opts)
end

-- Loads launch code: runs the chunk (budget 1e6 by default) and returns the function it
-- returns, or nil, message, CODE. What the chunk kept counts against that function.
function M.load(src, name, env, opts)
  name = name or "launch.lua"
  opts = opts or LOAD_OPTS
  local chunk, err = compile(src, name, opts, env)
  if not chunk then return nil, err, "LOAD" end
  local ok, fn, code = M.call(chunk, opts)
  if not ok then return nil, fn, code end
  if type(fn) ~= "function" then
    return nil, name .. " must return a function (k, io, s), got " .. type(fn), "LOAD"
  end
  kept[fn] = (kept[fn] or 0) + (kept[chunk] or 0)
  return fn
end

-- The helpers the judge gives launch code beside its kernels (km.judge's k).
M.LAUNCH_HELPERS = { scratch = true, cdiv = true, set_shared = true }

-- The kernels launch code calls (k.NAME{...} or k.NAME(...)) that `kernels` (a set of the
-- names the source defines, as NVRTC lists them) lacks, in the order first called; read
-- from the text, so found without a GPU. -> { name, ... } (empty: none missing)
function M.undefined_kernels(src, kernels)
  local missing, seen = {}, {}
  for name in tostring(src or ""):gmatch("k%.([%a_][%w_]*)%s*[{(]") do
    if not seen[name] and not M.LAUNCH_HELPERS[name] and not (kernels or EMPTY)[name] then
      missing[#missing + 1] = name
    end
    seen[name] = true
  end
  return missing
end

-- A copy of v made of plain data only — tables, strings, numbers, booleans — with at most
-- max_items values (1e5) nested at most max_depth deep (32); or nil, "path: why" (the path
-- of the offending field, as `shapes[2].n`, or "value"). What a task file returned goes
-- through here before the host reads it.
function M.data(v, max_items, max_depth)
  max_items, max_depth = max_items or 100000, max_depth or 32
  local items = 0
  local function bad(path, why) error({ data_error = fmt("%s: %s", path == "" and "value" or path, why) }, 0) end
  local function walk(x, path, depth)
    local tx = type(x)
    if tx == "string" or tx == "number" or tx == "boolean" then return x end
    if tx ~= "table" then bad(path, "a " .. tx .. " is not data") end
    if depth >= max_depth then bad(path, "nested deeper than " .. max_depth .. " levels (a cycle?)") end
    local c = {}
    for k, val in next, x do
      items = items + 1
      if items > max_items then bad(path, "more than " .. max_items .. " values") end
      local tk = type(k)
      if tk ~= "string" and tk ~= "number" and tk ~= "boolean" then bad(path, "a " .. tk .. " key is not data") end
      local sub = tk == "string" and (path == "" and k or path .. "." .. k) or fmt("%s[%s]", path, tostring(k))
      c[k] = walk(val, sub, depth + 1)
    end
    return c
  end
  local ok, res = pcall(walk, v, "", 0)
  if ok then return res end
  if type(res) == "table" and res.data_error then return nil, res.data_error end
  error(res, 0)
end

-- Strings share one metatable whose __index is the string library, so ("").dump would
-- reach string.dump. During a sandboxed call km.limits points that __index at the bounded
-- library; in a process that runs launch code (a GPU worker), this also keeps dump out of
-- reach between calls.
function M.harden_strings()
  local mt = getmetatable("")
  if mt.km_hardened then return end
  local lib = string
  mt.__index = setmetatable({}, { __index = function(_, k) if k ~= "dump" then return lib[k] end end })
  mt.km_hardened = true
end

return M
