-- km.task — load and validate tasks (docs/tasks.md).
--
--   local task = require "km.task"
--   local t, err = task.load("tasks/l1_relu")   -- a validated table, or nil, "file: field: why"
--   local list = task.list("tasks")             -- every task folder, sorted, loaded
--   task.eval_expr("m*k", { m = 2, k = 3 })     -- 6
--   task.shape_of(t.inputs[1], t.shapes[1])     -- { 268435456 }
--
-- Task files are hostile input (DESIGN.md): task.lua and params.lua run in km.sandbox with
-- a budget and their own copies of the libraries, and what they return is copied as plain
-- data; expressions run in the sandbox too; every file a task names must be a relative
-- name that resolves (symlinks followed) to a regular file inside the task's folder, of
-- at most MAX_FILE bytes.
local sandbox = require "km.sandbox"
local limits = require "km.limits"
local sys = require "km.sys"
local shape = require "km.task.shape"
local utf8_error = require("km.text").utf8_error

local M = {}

local type, pairs, ipairs, tostring, tonumber, load = type, pairs, ipairs, tostring, tonumber, load
local fmt, concat, sort = string.format, table.concat, table.sort
local text = sandbox.text -- a value named without a host address (a task file's table, a params value)

local MAX_FILE = 16 << 20                                   -- bytes of one file a task names
local MAX_SHAPES, MAX_IO = 64, 64                            -- shape sets, inputs/outputs
local FILE_OPTS = { budget = 1e7, memory = 64 << 20, time = 2 } -- task.lua, params.lua
M.MAX_FILE = MAX_FILE

local LEVELS = { [1] = true, [2] = true, [3] = true }
-- the dtypes a task may use (with their sizes in bytes) and shape expressions: km.task.shape,
-- which km.task.kbtask uses too; kept here under their old names
local DTYPES = shape.DTYPE_BYTES
M.DTYPE_BYTES = DTYPES
M.eval_expr, M.fmt_shape, M.shape_of, M.numel = shape.eval_expr, shape.fmt_shape, shape.shape_of, shape.numel
local INITS = { uniform = true, normal = true, int = true }

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
M.read_file = read_file

-- Reads `name` inside the folder `dir`: a relative name with no '..' that resolves
-- (symlinks followed) inside dir, to a regular file of at most MAX_FILE bytes.
-- Returns the text, or nil, why, CODE.
function M.read_inside(dir, name)
  if type(name) ~= "string" then return nil, "must be a file name, got " .. type(name), "BAD_NAME" end
  local path, kind, size = limits.resolve_inside(dir, name)
  if not path then return nil, kind, size end
  if kind ~= "file" then return nil, fmt("'%s' is not a regular file (%s)", name, kind), "NOT_FILE" end
  if size > MAX_FILE then return nil, fmt("'%s' is %d bytes; the limit is %d", name, size, MAX_FILE), "TOO_LARGE" end
  local f, err = io.open(path, "rb")
  if not f then return nil, err, "NOT_FOUND" end
  local text = f:read(MAX_FILE + 1) or ""
  f:close()
  if #text > MAX_FILE then return nil, fmt("'%s' is over %d bytes", name, MAX_FILE), "TOO_LARGE" end
  return text
end
local read_inside = M.read_inside

-- read_inside for a text file: nil, "DIR/NAME is not valid UTF-8: byte ... at offset N"
-- for one that is not (task text reaches prompts, and a server refuses a request that is not
-- UTF-8: it is refused here, where it enters).
local function read_text(dir, name)
  local text, why, code = read_inside(dir, name)
  if not text then return nil, why, code end
  local bad = utf8_error(text)
  if bad then return nil, fmt("%s/%s is not valid UTF-8: %s", dir, name, bad), "NOT_UTF8" end
  return text
end
M.read_text = read_text

-- Runs a task file's text (task.lua, params.lua) in the sandbox; returns its value copied
-- as plain data, or nil, "field: why".
local function run_file(text, file)
  local ok, v, code = sandbox.exec(text, file, FILE_OPTS)
  if not ok then return nil, (code == "LOAD" and "syntax: " or "evaluation: ") .. v end
  if type(v) ~= "table" then return nil, "return value: must return a table, got " .. type(v) end
  return sandbox.data(v)
end

local function fail(file, field, why)
  error({ task_error = fmt("%s: %s: %s", file, field, why) }, 0)
end

-- Every string of task.lua's table (keys and values) but its name, which is the folder's
-- (whatever bytes the file system holds), must be UTF-8: these reach prompts. A bad one is
-- named by its field, and by its offset in task.lua where it is written there literally.
local function check_strings(file, src, v, field)
  for k, x in pairs(v) do
    local f = type(k) == "number" and fmt("%s[%d]", field, k) or (field == "" and tostring(k) or field .. "." .. tostring(k))
    for _, s in ipairs { k, x } do
      if type(s) == "string" and not (field == "" and k == "name" and s == x) then
        local where, bad = utf8_error(s)
        if where then
          local at = src:find(s:sub(1, bad), 1, true)
          if at then where = utf8_error(src:sub(1, at + bad - 1)) .. " of task.lua" else where = where .. " of the string" end
          fail(file, f, "not valid UTF-8: " .. where)
        end
      end
    end
    if type(x) == "table" then check_strings(file, src, x, f) end
  end
end

local function check_io(file, list, what, need_init)
  if type(list) ~= "table" or #list == 0 then fail(file, what, "must be a non-empty list") end
  if #list > MAX_IO then fail(file, what, fmt("has %d entries; the limit is %d", #list, MAX_IO)) end
  local seen = {}
  for i, io in ipairs(list) do
    local f = fmt("%s[%d]", what, i)
    if type(io) ~= "table" then fail(file, f, "must be a table") end
    if type(io.name) ~= "string" or not io.name:match("^[%a_][%w_]*$") then fail(file, f .. ".name", "must be an identifier") end
    if seen[io.name] then fail(file, f .. ".name", "duplicate name '" .. io.name .. "'") end
    seen[io.name] = true
    if not DTYPES[io.dtype] then fail(file, f .. ".dtype", "unknown dtype '" .. text(io.dtype) .. "'") end
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

-- The description and math of t: text, or a file in the folder (description_text, math_text).
local function check_texts(file, dir, t)
  local function text_or_file(field, pattern)
    local v = t[field]
    if type(v) ~= "string" then fail(file, field, "must be a file name or text") end
    if not v:match(pattern) then return v end
    local text, fwhy = read_text(dir, v)
    if not text then fail(file, field, fwhy) end
    return text
  end
  if t.description ~= nil then t.description_text = text_or_file("description", "%.md$") end
  if t.math ~= nil then
    if type(t.math) ~= "string" then fail(file, "math", "must be a string") end
    t.math_text = t.math:match("%.txt$") and text_or_file("math", "%.txt$") or text_or_file("math", "%.md$")
  end
end

-- t.reference: its source and launch read (source_text, launch_text), and its PyTorch form.
local function check_reference(file, dir, t)
  local ref = t.reference
  if type(ref) ~= "table" or type(ref.source) ~= "string" or type(ref.launch) ~= "string" then
    fail(file, "reference", "must be { source = 'reference.cu', launch = 'reference.lua' [, pytorch = 'reference.py'] }")
  end
  for _, k in ipairs { "source", "launch" } do
    local text, why = read_text(dir, ref[k])
    if not text then fail(file, "reference." .. k, why) end
    ref[k .. "_text"] = text
  end
  -- reference.pytorch: the same truth in KernelBench's form (reference.py), carried as
  -- pytorch_file (its resolved path) and pytorch_text. ref.pytorch itself is cleared:
  -- on a task table it means "PyTorch is THE reference" (a problem file, km.task.kbtask).
  if ref.pytorch ~= nil then
    local name = ref.pytorch
    if type(name) ~= "string" or not name:match("%.py$") then
      fail(file, "reference.pytorch", "must be the name of a .py file in the folder (KernelBench's form), got " .. text(name))
    end
    local text, why = read_text(dir, name)
    if not text then fail(file, "reference.pytorch", why) end
    ref.pytorch_file, ref.pytorch_text, ref.pytorch = limits.resolve_inside(dir, name), text, nil
  end
end

-- t's inputs and outputs, its shape sets (every shape evaluates at each), its tolerances,
-- bytes and flops.
local function check_shapes(file, t)
  local ins = check_io(file, t.inputs, "inputs", true)
  local outs = check_io(file, t.outputs, "outputs", false)
  for name in pairs(outs) do
    if ins[name] then fail(file, "outputs", "'" .. name .. "' is also an input") end
  end
  if type(t.shapes) ~= "table" or #t.shapes == 0 then fail(file, "shapes", "must be a non-empty list of symbol bindings") end
  if #t.shapes > MAX_SHAPES then fail(file, "shapes", fmt("has %d shape sets; the limit is %d", #t.shapes, MAX_SHAPES)) end
  for i, sym in ipairs(t.shapes) do
    if type(sym) ~= "table" then fail(file, fmt("shapes[%d]", i), "must be a table") end
    for _, field in ipairs { "inputs", "outputs" } do
      for j, io in ipairs(t[field]) do
        local okd, e = pcall(M.shape_of, io, sym)
        if not okd then fail(file, fmt("%s[%d].shape", field, j), fmt("at shapes[%d]: %s", i, text(e))) end
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
    if not okx then fail(file, k, text(e)) end
  end
end

-- t.check_rows (optional): a shape symbol whose index is independent work (a row of a
-- softmax, an element of an activation, an image of a batch): the first dimension of every
-- output and of at least one input, and of no other dimension anywhere, bound by every
-- shape set. A timed call's check may then run the reference on a sample of those rows
-- (km.judge.rows); the reference must compute a row from that row of the inputs alone.
local function check_rows_decl(file, t)
  local r = t.check_rows
  if r == nil then return end
  if type(r) ~= "string" or not r:match("^[%a_][%w_]*$") then fail(file, "check_rows", "must be a shape symbol") end
  for i, sym in ipairs(t.shapes) do
    if math.type(sym[r]) ~= "integer" then fail(file, "check_rows", fmt("'%s' is not bound by shapes[%d]", r, i)) end
  end
  local split_inputs = 0
  for _, field in ipairs { "inputs", "outputs" } do
    for j, io in ipairs(t[field]) do
      for d, e in ipairs(io.shape) do
        local uses = type(e) == "string" and (" " .. e .. " "):find("[^%w_]" .. r .. "[^%w_]") ~= nil
        if uses and (d > 1 or e ~= r) then
          fail(file, fmt("%s[%d].shape", field, j), fmt("uses check_rows' '%s' other than as its first dimension", r))
        end
      end
      local split = io.shape[1] == r
      if field == "outputs" and not split then
        fail(file, fmt("outputs[%d].shape", j), fmt("must begin with check_rows' '%s': every output is split by row", r))
      end
      if field == "inputs" and split then split_inputs = split_inputs + 1 end
    end
  end
  if split_inputs == 0 then fail(file, "check_rows", fmt("no input begins with '%s'", r)) end
end

-- t.starter: its folder holds kernel.cu and launch.lua; its defaults are declared values.
local function check_starter(file, dir, st)
  if type(st) ~= "table" or type(st.dir) ~= "string" then fail(file, "starter", "must be { dir = 'starter', ... }") end
  local sdir, kind = limits.resolve_inside(dir, st.dir)
  if not sdir then fail(file, "starter.dir", kind) end
  if kind ~= "directory" then fail(file, "starter.dir", "'" .. st.dir .. "' is not a folder") end
  for _, f in ipairs { "kernel.cu", "launch.lua" } do
    local p, fkind = limits.resolve_inside(dir, st.dir .. "/" .. f)
    if not p then fail(file, "starter.dir", fkind) end
    if fkind ~= "file" then fail(file, "starter.dir", st.dir .. "/" .. f .. " is not a regular file") end
    local _, why, code = read_text(dir, st.dir .. "/" .. f)
    if code == "NOT_UTF8" then fail(file, "starter", why) end
  end
  st.params = st.params or {}
  st.default = st.default or {}
  for k, v in pairs(st.default) do
    if not st.params[k] then fail(file, "starter.default." .. k, "not a declared parameter") end
    local found = false
    for _, x in ipairs(st.params[k]) do found = found or x == v end
    if not found then fail(file, "starter.default." .. k, "value " .. text(v) .. " is not in its value set") end
  end
end

-- Loads and validates dir/task.lua; returns the task table (with dir, files read) or
-- nil, "dir/task.lua: field: why".
function M.load(dir)
  -- a KernelBench problem file is a task as it is (km.task.kbtask; needs PyTorch)
  local kbtask = require "km.task.kbtask"
  if kbtask.is_problem(dir) then return kbtask.load(dir) end
  dir = dir:gsub("/+$", "")
  local file = dir .. "/task.lua"
  local ok, res = pcall(function()
    local src, rwhy, rcode = read_inside(dir, "task.lua")
    if not src then
      fail(file, "file", rcode == "NOT_FOUND" and "cannot read (is " .. dir .. " a task folder?)" or rwhy)
    end
    local t, why = run_file(src, file)
    if not t then error({ task_error = file .. ": " .. why }, 0) end
    check_strings(file, src, t, "")
    local base = dir:match("([^/]+)$")
    if type(t.name) ~= "string" then fail(file, "name", "missing") end
    if t.name ~= base then fail(file, "name", fmt("'%s' does not match the folder '%s'", t.name, base)) end
    if not LEVELS[t.level] then fail(file, "level", "must be 1, 2 or 3") end
    if type(t.category) ~= "string" or t.category == "" then fail(file, "category", "missing") end
    check_texts(file, dir, t)
    check_reference(file, dir, t)
    check_shapes(file, t)
    check_rows_decl(file, t)
    if t.starter ~= nil then check_starter(file, dir, t.starter) end
    t.dir = dir
    return t
  end)
  if ok then return res end
  if type(res) == "table" and res.task_error then return nil, res.task_error, "TASK_INVALID" end
  return nil, file .. ": " .. text(res), "TASK_INVALID"
end

-- The tasks under dir, unloaded: each task folder (with a task.lua) and problem file (.py),
-- sorted by name; a problem file named at the precision (km.task.kbtask.key).
-- "2_foo" before "10_foo": names compared with their runs of digits as numbers
-- (KernelBench's problem files are numbered 1_ ... 100_).
function M.natural_less(a, b)
  local function key(s) return (s:gsub("%d+", function(d) return ("0"):rep(24 - #d) .. d end)) end
  local ka, kb = key(a), key(b)
  if ka ~= kb then return ka < kb end
  return a < b
end

-- The tasks in dir, in natural order (M.natural_less): task folders and problem files.
function M.entries(dir, precision)
  local names = sys.readdir(dir) or {}
  table.sort(names, M.natural_less)
  local out = {}
  for _, name in ipairs(names) do
    local d = dir:gsub("/+$", "") .. "/" .. name
    if limits.realpath(d .. "/task.lua") then out[#out + 1] = d -- exists; never opened here (a FIFO would block)
    elseif name:match("%.py$") and limits.realpath(d) then out[#out + 1] = require("km.task.kbtask").key(d, precision) end
  end
  return out
end

-- Every task folder under dir (sorted by name); errors are returned alongside, and the
-- paths that gave them (failed[i] gave errors[i]). precision (fp16, bf16): the precision
-- KernelBench problem files in it load at (km.task.kbtask).
-- progress(k, n, path): called before each task loads.
function M.list(dir, precision, progress)
  local tasks, errors, failed = {}, {}, {}
  local list = M.entries(dir, precision)
  for k, d in ipairs(list) do
    if progress then progress(k, #list, d) end
    local t, err = M.load(d)
    if t then tasks[#tasks + 1] = t else errors[#errors + 1], failed[#failed + 1] = err, d end
  end
  return tasks, errors, failed
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
  local d = t.starter.dir
  local source, e1 = read_inside(t.dir, d .. "/kernel.cu")
  if not source then return nil, t.name .. ": starter: " .. e1 end
  local launch, e2 = read_inside(t.dir, d .. "/launch.lua")
  if not launch then return nil, t.name .. ": starter: " .. e2 end
  local params = {}
  for k, v in pairs(t.starter.default or {}) do params[k] = v end
  return { name = t.name .. "/starter", source = source, launch = launch, params = params }
end

-- A candidate folder: kernel.cu + launch.lua (+ params.lua).
function M.candidate(dir)
  dir = dir:gsub("/+$", "")
  if limits.realpath(dir) and not sys.readdir(dir) then
    local parent = dir:match("^(.*)/[^/]+$") or "."
    return nil, fmt("%s: a file, not a candidate folder: name the folder that holds kernel.cu and launch.lua (%s?)",
      dir, parent), "CANDIDATE_INVALID"
  end
  local source, e1 = read_inside(dir, "kernel.cu")
  if not source then return nil, dir .. "/kernel.cu: " .. e1, "CANDIDATE_INVALID" end
  local launch, e2 = read_inside(dir, "launch.lua")
  if not launch then return nil, dir .. "/launch.lua: " .. e2, "CANDIDATE_INVALID" end
  local params = {}
  local ptext, e3, code = read_inside(dir, "params.lua")
  if ptext then
    local file = dir .. "/params.lua"
    local p, why = run_file(ptext, file)
    if not p then return nil, file .. ": " .. why, "CANDIDATE_INVALID" end
    params = p
  elseif code ~= "NOT_FOUND" then
    return nil, dir .. "/params.lua: " .. e3, "CANDIDATE_INVALID"
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
      if not found then return false, fmt("%s=%s is not in %s's value set", k, text(v), k) end
    end
  end
  for _, c in ipairs(st.constraints or {}) do
    local okc, v = pcall(M.eval_expr, "(" .. c .. ") and 1 or 0", params)
    if not okc or v ~= 1 then return false, "constraint fails: " .. c end
  end
  return true
end

return M
