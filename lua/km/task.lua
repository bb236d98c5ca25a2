-- km.task — load and validate tasks (docs/tasks.md).
--
--   local task = require "km.task"
--   local t, err = task.load("tasks/l1_relu")   -- a validated table, or nil, "file: field: why"
--   local list = task.list("tasks")             -- every task folder, sorted, loaded
--   task.eval_expr("m*k", { m = 2, k = 3 })     -- 6
--   task.shape_of(t.inputs[1], t.shapes[1])     -- { 268435456 }
local M = {}

local type, pairs, ipairs, tostring, tonumber, load = type, pairs, ipairs, tostring, tonumber, load
local fmt, concat, sort = string.format, table.concat, table.sort

local LEVELS = { [1] = true, [2] = true, [3] = true }
local DTYPES = { f32 = true, f64 = true, f16 = true, bf16 = true, i8 = true, i32 = true, i64 = true, u8 = true }
local INITS = { uniform = true, normal = true, int = true }

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
M.read_file = read_file

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- Evaluates an expression over shape symbols: a number stays a number; a string is Lua.
local expr_cache = {}
function M.eval_expr(e, sym)
  if type(e) == "number" then return e end
  if type(e) ~= "string" then error("expression must be a number or a string, got " .. type(e), 2) end
  local chunk = expr_cache[e]
  if not chunk then
    local err
    local body = e:gsub("()([%a_][%w_]*)", function(pos, w)
      if w == "math" or w == "and" or w == "or" or w == "not" or e:sub(pos - 1, pos - 1) == "." then return w end
      return "s." .. w
    end)
    chunk, err = load("local s = ...; return " .. body, "=(expr " .. e .. ")", "t", { math = math })
    if not chunk then error("bad expression '" .. e .. "': " .. err, 2) end
    expr_cache[e] = chunk
  end
  local ok, v = pcall(chunk, sym)
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

local function fail(file, field, why)
  error({ task_error = fmt("%s: %s: %s", file, field, why) }, 0)
end

local function check_io(file, list, what, need_init)
  if type(list) ~= "table" or #list == 0 then fail(file, what, "must be a non-empty list") end
  local seen = {}
  for i, io in ipairs(list) do
    local f = fmt("%s[%d]", what, i)
    if type(io) ~= "table" then fail(file, f, "must be a table") end
    if type(io.name) ~= "string" or not io.name:match("^[%a_][%w_]*$") then fail(file, f .. ".name", "must be an identifier") end
    if seen[io.name] then fail(file, f .. ".name", "duplicate name '" .. io.name .. "'") end
    seen[io.name] = true
    if not DTYPES[io.dtype] then fail(file, f .. ".dtype", "unknown dtype '" .. tostring(io.dtype) .. "'") end
    if type(io.shape) ~= "table" or #io.shape == 0 then fail(file, f .. ".shape", "must be a non-empty list of expressions") end
    if need_init then
      local init = io.init
      if type(init) ~= "table" or not INITS[init[1]] then
        fail(file, f .. ".init", "must be { 'uniform', lo, hi }, { 'normal', mean, std } or { 'int', lo, hi }")
      end
    end
  end
  return seen
end

-- Loads and validates dir/task.lua; returns the task table (with dir, files read) or
-- nil, "dir/task.lua: field: why".
function M.load(dir)
  dir = dir:gsub("/+$", "")
  local file = dir .. "/task.lua"
  local ok, res = pcall(function()
    local src = read_file(file)
    if not src then fail(file, "file", "cannot read (is " .. dir .. " a task folder?)") end
    local chunk, err = load(src, "@" .. file, "t", { math = math })
    if not chunk then fail(file, "syntax", err) end
    local okc, t = pcall(chunk)
    if not okc then fail(file, "evaluation", tostring(t)) end
    if type(t) ~= "table" then fail(file, "return value", "task.lua must return a table") end
    local base = dir:match("([^/]+)$")
    if type(t.name) ~= "string" then fail(file, "name", "missing") end
    if t.name ~= base then fail(file, "name", fmt("'%s' does not match the folder '%s'", t.name, base)) end
    if not LEVELS[t.level] then fail(file, "level", "must be 1, 2 or 3") end
    if type(t.category) ~= "string" or t.category == "" then fail(file, "category", "missing") end
    -- spec forms
    if t.description ~= nil then
      if type(t.description) ~= "string" then fail(file, "description", "must be a file name or text") end
      if t.description:match("%.md$") then
        local text = read_file(dir .. "/" .. t.description)
        if not text then fail(file, "description", "cannot read " .. dir .. "/" .. t.description) end
        t.description_text = text
      else
        t.description_text = t.description
      end
    end
    if t.math ~= nil then
      if type(t.math) ~= "string" then fail(file, "math", "must be a string") end
      if t.math:match("%.md$") or t.math:match("%.txt$") then
        local text = read_file(dir .. "/" .. t.math)
        if not text then fail(file, "math", "cannot read " .. dir .. "/" .. t.math) end
        t.math_text = text
      else
        t.math_text = t.math
      end
    end
    local ref = t.reference
    if type(ref) ~= "table" or type(ref.source) ~= "string" or type(ref.launch) ~= "string" then
      fail(file, "reference", "must be { source = 'reference.cu', launch = 'reference.lua' }")
    end
    ref.source_text = read_file(dir .. "/" .. ref.source) or fail(file, "reference.source", "cannot read " .. dir .. "/" .. ref.source)
    ref.launch_text = read_file(dir .. "/" .. ref.launch) or fail(file, "reference.launch", "cannot read " .. dir .. "/" .. ref.launch)
    local ins = check_io(file, t.inputs, "inputs", true)
    local outs = check_io(file, t.outputs, "outputs", false)
    for name in pairs(outs) do
      if ins[name] then fail(file, "outputs", "'" .. name .. "' is also an input") end
    end
    if type(t.shapes) ~= "table" or #t.shapes == 0 then fail(file, "shapes", "must be a non-empty list of symbol bindings") end
    for i, sym in ipairs(t.shapes) do
      if type(sym) ~= "table" then fail(file, fmt("shapes[%d]", i), "must be a table") end
      for _, list in ipairs { t.inputs, t.outputs } do
        for _, io in ipairs(list) do
          local okd, e = pcall(M.shape_of, io, sym)
          if not okd then fail(file, fmt("shapes[%d]", i), tostring(e)) end
        end
      end
    end
    if type(t.tolerance) ~= "table" then fail(file, "tolerance", "must map dtypes to { atol, rtol }") end
    for _, o in ipairs(t.outputs) do
      local tol = t.tolerance[o.dtype]
      if type(tol) ~= "table" or type(tol.atol) ~= "number" or type(tol.rtol) ~= "number" then
        fail(file, "tolerance." .. o.dtype, "needs { atol = number, rtol = number } for output '" .. o.name .. "'")
      end
    end
    for _, k in ipairs { "bytes", "flops" } do
      if t[k] == nil then fail(file, k, "missing (an expression over the shape symbols)") end
      local okx, e = pcall(M.eval_expr, t[k], t.shapes[1])
      if not okx then fail(file, k, tostring(e)) end
    end
    if t.starter ~= nil then
      local st = t.starter
      if type(st) ~= "table" or type(st.dir) ~= "string" then fail(file, "starter", "must be { dir = 'starter', ... }") end
      local sdir = dir .. "/" .. st.dir
      if not exists(sdir .. "/kernel.cu") then fail(file, "starter.dir", "no kernel.cu in " .. sdir) end
      if not exists(sdir .. "/launch.lua") then fail(file, "starter.dir", "no launch.lua in " .. sdir) end
      st.params = st.params or {}
      st.default = st.default or {}
      for k, v in pairs(st.default) do
        if not st.params[k] then fail(file, "starter.default." .. k, "not a declared parameter") end
        local found = false
        for _, x in ipairs(st.params[k]) do found = found or x == v end
        if not found then fail(file, "starter.default." .. k, "value " .. tostring(v) .. " is not in its value set") end
      end
    end
    t.dir = dir
    return t
  end)
  if ok then return res end
  if type(res) == "table" and res.task_error then return nil, res.task_error, "TASK_INVALID" end
  return nil, file .. ": " .. tostring(res), "TASK_INVALID"
end

-- Every task folder under dir (sorted by name); errors are returned alongside.
function M.list(dir)
  local p = io.popen("ls -1 '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
  local names = {}
  for name in p:lines() do names[#names + 1] = name end
  p:close()
  sort(names)
  local tasks, errors = {}, {}
  for _, name in ipairs(names) do
    local d = dir:gsub("/+$", "") .. "/" .. name
    if exists(d .. "/task.lua") then
      local t, err = M.load(d)
      if t then tasks[#tasks + 1] = t else errors[#errors + 1] = err end
    end
  end
  return tasks, errors
end

-- The tunables a kernel source declares with defaults: `#ifndef NAME` followed by
-- `#define NAME value`. Numbers become numbers. Launch code reads them as k.params.
function M.default_params(source)
  local p = {}
  for name, body in (source or ""):gmatch("#%s*ifndef%s+([%a_][%w_]*)%s*\n%s*#%s*define%s+([^\n]*)") do
    local dname, value = body:match("^([%a_][%w_]*)%s+(.-)%s*$")
    if dname == name and value ~= "" then
      value = value:gsub("^%((.*)%)$", "%1")
      local num = tonumber((value:gsub("^([%d%.eE+-]+)[fFuUlL]+$", "%1")))
      p[name] = num and (math.tointeger(num) or num) or value
    end
  end
  return p
end

-- A task's starter as a candidate: { source, launch, params, name }.
function M.starter(t)
  if not t.starter then return nil, t.name .. " has no starter" end
  local d = t.dir .. "/" .. t.starter.dir
  local params = {}
  for k, v in pairs(t.starter.default or {}) do params[k] = v end
  return { name = t.name .. "/starter", source = read_file(d .. "/kernel.cu"), launch = read_file(d .. "/launch.lua"), params = params }
end

-- A candidate folder: kernel.cu + launch.lua (+ params.lua).
function M.candidate(dir)
  dir = dir:gsub("/+$", "")
  local source = read_file(dir .. "/kernel.cu")
  if not source then return nil, "cannot read " .. dir .. "/kernel.cu", "CANDIDATE_INVALID" end
  local launch = read_file(dir .. "/launch.lua")
  if not launch then return nil, "cannot read " .. dir .. "/launch.lua", "CANDIDATE_INVALID" end
  local params = {}
  local ptext = read_file(dir .. "/params.lua")
  if ptext then
    local chunk, err = load(ptext, "@" .. dir .. "/params.lua", "t", {})
    if not chunk then return nil, err, "CANDIDATE_INVALID" end
    local ok, p = pcall(chunk)
    if not ok or type(p) ~= "table" then return nil, dir .. "/params.lua must return a table", "CANDIDATE_INVALID" end
    params = p
  end
  return { name = dir, source = source, launch = launch, params = params }
end

-- Checks a parameter assignment against a starter's value sets and constraints.
function M.params_ok(t, params)
  local st = t.starter
  if not st then return true end
  for k, v in pairs(params) do
    if st.params[k] then
      local found = false
      for _, x in ipairs(st.params[k]) do found = found or x == v end
      if not found then return false, fmt("%s=%s is not in %s's value set", k, tostring(v), k) end
    end
  end
  for _, c in ipairs(st.constraints or {}) do
    local okc, v = pcall(M.eval_expr, "(" .. c .. ") and 1 or 0", params)
    if not okc or v ~= 1 then return false, "constraint fails: " .. c end
  end
  return true
end

return M
