-- km.task.shape — the vocabulary of a task's buffers: dtypes and their sizes in bytes, element
-- counts, and shape expressions over the task's symbols (docs/tasks.md).
--
--   local shape = require "km.task.shape"
--   shape.eval_expr("m*k", { m = 2, k = 3 })          -- 6
--   shape.shape_of({ name = "x", shape = { "n" } }, { n = 4 })  -- { 4 }
--   shape.numel({ 2, 3 }), shape.DTYPE_BYTES.f16      -- 6, 2
--
-- Both task forms use it: km.task (task folders) and km.task.kbtask (KernelBench problem files),
-- which is why it is a module of its own (km.task re-exports it under its old names).
-- Expressions are task input, so hostile (DESIGN.md): they run in km.sandbox with a budget
-- and their own copy of math.
local sandbox = require "km.sandbox"

local M = {}

local type, pairs, ipairs, tostring, load, error = type, pairs, ipairs, tostring, load, error
local fmt, concat, sort = string.format, table.concat, table.sort
local text = sandbox.text -- a value named without a host address

local MAX_EXPR = 4096                                                -- bytes of one expression
local EXPR_OPTS = { budget = 1e5, memory = 16 << 20, time = false } -- no loops: bounded by the budget

-- the dtypes a task may use, with their sizes in bytes
M.DTYPE_BYTES = { f32 = 4, f64 = 8, f16 = 2, bf16 = 2, i8 = 1, i32 = 4, i64 = 8, u8 = 1 }

-- Whether the name w at pos in e is a shape symbol: not math, a Lua word, a field after a
-- dot, or the rest of a number (the e3 of 1e3, the x1F of 0x1F).
local function is_symbol(e, pos, w)
  local before = e:sub(pos - 1, pos - 1)
  return not (w == "math" or w == "and" or w == "or" or w == "not" or before == "." or before:match("%d"))
end

local function symbols_in(e)
  local names = {}
  for pos, w in e:gmatch("()([%a_][%w_]*)") do
    if is_symbol(e, pos, w) then names[#names + 1] = w end
  end
  return names
end

-- Evaluates an expression over shape symbols: a number stays a number; a string is Lua,
-- run in the sandbox with its own copy of math. An expression that does not parse or
-- evaluate raises a message that names the expression and what is wrong with it, without
-- a position in this file (callers add which field of which file held it).
local expr_cache, expr_count = {}, 0
function M.eval_expr(e, sym)
  if type(e) == "number" then return e end
  if type(e) ~= "string" then error("expression must be a number or a string, got " .. type(e), 2) end
  local chunk = expr_cache[e]
  if not chunk then
    if #e > MAX_EXPR then error(fmt("expression of %d bytes: the limit is %d", #e, MAX_EXPR), 0) end
    local err
    local body = e:gsub("()([%a_][%w_]*)", function(pos, w) return is_symbol(e, pos, w) and "s." .. w or w end)
    chunk, err = load("local s = ...; return " .. body, "=(expr)", "t", { math = sandbox.env().math })
    if not chunk then error("bad expression '" .. e .. "': " .. tostring(err):gsub("^%(expr%):%d+: ", ""), 0) end
    if expr_count >= 4096 then expr_cache, expr_count = {}, 0 end
    expr_cache[e], expr_count = chunk, expr_count + 1
  end
  local ok, v = sandbox.call(chunk, EXPR_OPTS, sym)
  if not ok or type(v) ~= "number" then
    local unknown, seen = {}, {}
    for _, w in ipairs(symbols_in(e)) do
      if type(sym) == "table" and sym[w] == nil and not seen[w] then unknown[#unknown + 1], seen[w] = w, true end
    end
    if #unknown > 0 then
      error(fmt("expression '%s': %s %s not a symbol of the shape set %s", e, concat(unknown, ", "),
        #unknown == 1 and "is" or "are", M.fmt_shape(sym)), 0)
    end
    error(fmt("expression '%s' does not evaluate to a number with %s: %s", e, M.fmt_shape(sym),
      ok and ("it gives " .. type(v)) or text(v):gsub("^%(expr%):%d+: ", "")), 0)
  end
  if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2^62 then v = math.tointeger(v) end
  return v
end

function M.fmt_shape(sym)
  local keys = {}
  for k in pairs(sym) do keys[#keys + 1] = k end
  sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = k .. "=" .. text(sym[k]) end
  return "{" .. concat(parts, ", ") .. "}"
end

-- The concrete dimensions of an input/output under one shape binding.
function M.shape_of(io, sym)
  local dims = {}
  for i, d in ipairs(io.shape) do
    local ok, v = pcall(M.eval_expr, d, sym)
    if not ok then error(fmt("%s: dimension %d: %s", text(io.name), i, text(v)), 0) end
    if math.type(v) ~= "integer" or v < 0 then
      error(fmt("%s: dimension %d ('%s') is %s, not a non-negative integer", text(io.name), i, text(d), text(v)), 0)
    end
    dims[i] = v
  end
  return dims
end

function M.numel(dims)
  local n = 1
  for _, d in ipairs(dims) do n = n * d end
  return n
end

return M
