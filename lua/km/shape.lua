-- km.shape — the vocabulary of a task's buffers: dtypes and their sizes in bytes, element
-- counts, and shape expressions over the task's symbols (docs/tasks.md).
--
--   local shape = require "km.shape"
--   shape.eval_expr("m*k", { m = 2, k = 3 })          -- 6
--   shape.shape_of({ name = "x", shape = { "n" } }, { n = 4 })  -- { 4 }
--   shape.numel({ 2, 3 }), shape.DTYPE_BYTES.f16      -- 6, 2
--
-- Both task forms use it: km.task (task folders) and km.kbtask (KernelBench problem files),
-- which is why it is a module of its own (km.task re-exports it under its old names).
-- Expressions are task input, so hostile (DESIGN.md): they run in km.sandbox with a budget
-- and their own copy of math.
local sandbox = require "km.sandbox"

local M = {}

local type, pairs, ipairs, tostring, load, error = type, pairs, ipairs, tostring, load, error
local fmt, concat, sort = string.format, table.concat, table.sort

local MAX_EXPR = 4096                                                -- bytes of one expression
local EXPR_OPTS = { budget = 1e5, memory = 16 << 20, time = false } -- no loops: bounded by the budget

-- the dtypes a task may use, with their sizes in bytes
M.DTYPE_BYTES = { f32 = 4, f64 = 8, f16 = 2, bf16 = 2, i8 = 1, i32 = 4, i64 = 8, u8 = 1 }

-- Evaluates an expression over shape symbols: a number stays a number; a string is Lua,
-- run in the sandbox with its own copy of math.
local expr_cache, expr_count = {}, 0
function M.eval_expr(e, sym)
  if type(e) == "number" then return e end
  if type(e) ~= "string" then error("expression must be a number or a string, got " .. type(e), 2) end
  local chunk = expr_cache[e]
  if not chunk then
    if #e > MAX_EXPR then error(fmt("expression of %d bytes: the limit is %d", #e, MAX_EXPR), 2) end
    local err
    local body = e:gsub("()([%a_][%w_]*)", function(pos, w)
      if w == "math" or w == "and" or w == "or" or w == "not" or e:sub(pos - 1, pos - 1) == "." then return w end
      return "s." .. w
    end)
    chunk, err = load("local s = ...; return " .. body, "=(expr " .. e .. ")", "t", { math = sandbox.env().math })
    if not chunk then error("bad expression '" .. e .. "': " .. err, 2) end
    if expr_count >= 4096 then expr_cache, expr_count = {}, 0 end
    expr_cache[e], expr_count = chunk, expr_count + 1
  end
  local ok, v = sandbox.call(chunk, EXPR_OPTS, sym)
  if not ok or type(v) ~= "number" then
    error(fmt("expression '%s' does not evaluate to a number with %s: %s", e, M.fmt_shape(sym), tostring(v)), 2)
  end
  if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2^62 then v = math.tointeger(v) end
  return v
end

function M.fmt_shape(sym)
  local keys = {}
  for k in pairs(sym) do keys[#keys + 1] = k end
  sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = k .. "=" .. tostring(sym[k]) end
  return "{" .. concat(parts, ", ") .. "}"
end

-- The concrete dimensions of an input/output under one shape binding.
function M.shape_of(io, sym)
  local dims = {}
  for i, d in ipairs(io.shape) do
    local v = M.eval_expr(d, sym)
    if math.type(v) ~= "integer" or v < 0 then
      error(fmt("%s: dimension %d ('%s') is %s, not a non-negative integer", io.name, i, tostring(d), tostring(v)), 2)
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
