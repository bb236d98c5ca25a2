-- kmrun tasks — look at a task suite.
--   kmrun tasks list [DIR]            one line per task
--   kmrun tasks check [DIR|TASK...]   load, compile reference and starter (NVRTC), load launch code
local task = require "km.task"
local sandbox = require "km.sandbox"

local USAGE = [[
usage: kmrun tasks list [DIR]
       kmrun tasks check [DIR | TASK_DIR ...]
  list    one line per task: name, level, category, spec forms, shapes
  check   validates every task without a GPU: task.lua fields, reference and starter
          compile with NVRTC (arch sm_90 unless --arch), launch code loads in the sandbox,
          and the kernels the launch code names exist
]]

local function is_task(dir)
  local f = io.open(dir .. "/task.lua")
  if f then f:close() return true end
end

local function collect(args)
  local tasks, errors = {}, {}
  if #args == 0 then args = { "tasks" } end
  for _, a in ipairs(args) do
    if is_task(a) then
      local t, err = task.load(a)
      if t then tasks[#tasks + 1] = t else errors[#errors + 1] = err end
    else
      local ts, es = task.list(a)
      for _, t in ipairs(ts) do tasks[#tasks + 1] = t end
      for _, e in ipairs(es) do errors[#errors + 1] = e end
    end
  end
  return tasks, errors
end

local function forms(t)
  local f = {}
  if t.description_text then f[#f + 1] = "description" end
  if t.math_text then f[#f + 1] = "math" end
  f[#f + 1] = "reference"
  return table.concat(f, "+")
end

local function check_one(t, arch)
  local nvrtc = require "km.nvrtc"
  local problems = {}
  local function chk(label, src, launch, defines)
    local prog, log = nvrtc.compile(src, { arch = arch, defines = defines, name = label .. ".cu" })
    if not prog then problems[#problems + 1] = label .. ": compile failed:\n" .. log return end
    local fn, err = sandbox.load(launch, label .. " launch")
    if not fn then problems[#problems + 1] = label .. ": " .. err return end
    for name in launch:gmatch("k%.([%a_][%w_]*)%s*[{(]") do
      if not prog.kernels[name] and name ~= "scratch" and name ~= "cdiv" and name ~= "set_shared" then
        problems[#problems + 1] = string.format("%s: launch code calls k.%s, which the source does not define", label, name)
      end
    end
  end
  chk("reference", t.reference.source_text, t.reference.launch_text)
  local st = task.starter(t)
  if st then
    chk("starter", st.source, st.launch, st.params)
    local ok, why = task.params_ok(t, st.params)
    if not ok then problems[#problems + 1] = "starter defaults: " .. why end
  end
  return problems
end

local cmd = arg[1]
local rest = {}
local arch = "sm_90"
local i = 2
while arg[i] do
  if arg[i] == "--arch" then arch = arg[i + 1]; i = i + 2
  else rest[#rest + 1] = arg[i]; i = i + 1 end
end

if cmd == "list" then
  local tasks, errors = collect(rest)
  for _, t in ipairs(tasks) do
    print(string.format("%-28s L%d %-14s %-26s %d shapes", t.name, t.level, t.category, forms(t), #t.shapes))
  end
  for _, e in ipairs(errors) do io.stderr:write("invalid: ", e, "\n") end
  return #errors == 0 and 0 or 1
elseif cmd == "check" then
  local tasks, errors = collect(rest)
  local bad = #errors
  for _, e in ipairs(errors) do print("FAIL " .. e) end
  for _, t in ipairs(tasks) do
    local problems = check_one(t, arch)
    if #problems == 0 then print("ok   " .. t.name)
    else
      bad = bad + 1
      print("FAIL " .. t.name)
      for _, p in ipairs(problems) do print("     " .. p:gsub("\n", "\n     ")) end
    end
  end
  print(string.format("%d task(s), %d failed", #tasks + #errors, bad))
  return bad == 0 and 0 or 1
else
  io.stderr:write(USAGE)
  return cmd and 2 or 0
end
