-- km.sandbox — run model-written Lua (launch code) with an allow-list environment and an
-- instruction budget.
--
--   local fn, err = sandbox.load(src, "launch.lua")        -- a function, or nil, message
--   local ok, err = sandbox.call(fn, { budget = 1e6 }, k, io, s)
--
-- The environment has no io, os, require, load, debug, package, string.dump or
-- collectgarbage. When the budget runs out the hook raises, and re-arms itself to raise
-- on every following instruction, so a pcall inside the sandbox cannot swallow it.
local M = {}

local debug, coroutine, setmetatable, pairs, error, type = debug, coroutine, setmetatable, pairs, error, type
local BUDGET_MSG = "instruction budget exceeded (an endless loop in launch code?)"

local function copy(t, skip)
  local c = {}
  for k, v in pairs(t) do if not (skip and skip[k]) then c[k] = v end end
  return c
end

function M.env()
  local env = {
    math = copy(math), table = copy(table), string = copy(string, { dump = true }),
    utf8 = copy(utf8),
    pairs = pairs, ipairs = ipairs, next = next, select = select, type = type,
    tostring = tostring, tonumber = tonumber, error = error, assert = assert,
    rawequal = rawequal, rawlen = rawlen, unpack = table.unpack,
  }
  -- pcall/xpcall that cannot swallow the budget error
  env.pcall = function(f, ...)
    local res = table.pack(pcall(f, ...))
    if not res[1] and type(res[2]) == "string" and res[2]:find(BUDGET_MSG, 1, true) then error(res[2], 0) end
    return table.unpack(res, 1, res.n)
  end
  env.xpcall = function(f, h, ...)
    return env.pcall(function(...) return xpcall(f, h, ...) end, ...)
  end
  env._G = env
  return env
end

-- Loads text only (never binary chunks) into a fresh environment.
function M.load(src, name, env)
  if type(src) ~= "string" then return nil, (name or "chunk") .. ": source is not a string" end
  local chunk, err = load(src, "=" .. (name or "launch.lua"), "t", env or M.env())
  if not chunk then return nil, err end
  local ok, fn = M.call(chunk, { budget = 1e6 })
  if not ok then return nil, fn end
  if type(fn) ~= "function" then
    return nil, (name or "launch.lua") .. " must return a function (k, io, s), got " .. type(fn)
  end
  return fn
end

-- Calls fn(...) in a coroutine with a count hook. Returns true, results... or false, message.
function M.call(fn, opts, ...)
  local budget = math.tointeger(opts and opts.budget or 1e7) or 1e7
  local co = coroutine.create(fn)
  local tripped = false
  local step = budget < 1000 and budget or 1000
  local used = 0
  debug.sethook(co, function()
    if tripped then error(BUDGET_MSG, 0) end
    used = used + step
    if used >= budget then
      tripped = true
      debug.sethook(co, function() error(BUDGET_MSG, 0) end, "", 1)
      error(BUDGET_MSG, 0)
    end
  end, "", step)
  local res = table.pack(coroutine.resume(co, ...))
  if not res[1] then
    local msg = res[2]
    if type(msg) ~= "string" then msg = tostring(msg) end
    return false, tripped and BUDGET_MSG or msg
  end
  if coroutine.status(co) ~= "dead" then return false, "launch code yielded" end
  return true, table.unpack(res, 2, res.n)
end

-- Strings share one metatable whose __index is the string library, so ("").dump would
-- reach string.dump from inside the sandbox. In a process that runs launch code (a GPU
-- worker), point that __index at a view of the library without dump.
function M.harden_strings()
  local mt = getmetatable("")
  if mt.km_hardened then return end
  local lib = string
  mt.__index = setmetatable({}, { __index = function(_, k) if k ~= "dump" then return lib[k] end end })
  mt.km_hardened = true
end

M.BUDGET_MSG = BUDGET_MSG
return M
