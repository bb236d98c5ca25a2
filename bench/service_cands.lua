-- bench/service_cands.lua OUT.json — the service benchmark's candidates (bench/service_bench.sh):
-- N new candidates over the first NTASKS task folders (default 768 over 16), made from each
-- task's starter by template. About 60% are meant to be correct: the starter at each value of
-- its tunables (block sizes, tiles, warps), cycled. The rest carry a deliberate bug: a launch
-- that does nothing or half the work (mismatch), a source that does not compile
-- (compile_error), a launch calling a kernel that is not there (launch_error); with --faults,
-- also kernels that hang (timeout) or write to a wild address (crashed). Every candidate ends
-- with a comment naming the run's --tag and its number, so each is new to the judge (a fresh
-- compile, a fresh content id). Each entry: { task, candidate = { kernel_cu, launch_lua,
-- params }, kind, expect } (expect: the status the kind is meant to get on a GPU).
local A = require "km.args"
local task = require "km.task"
local json = require "km.json"

local SPEC = A.spec {
  name = "bench/service_cands.lua", synopsis = "OUT.json [options]",
  about = "The service benchmark's candidates: new ones from each task's starter, about 60% correct.",
  positional = { { "out", "OUT.json", "where to write the list", required = true } },
  options = {
    { "tasks", "DIR", "the task folders (default tasks/)", default = "tasks" },
    { "n", "N", "candidates (default 768)", type = "positive", default = 768 },
    { "ntasks", "K", "tasks used (default 16: the first K with a starter)", type = "positive", default = 16 },
    { "tag", "T", "a word in every candidate's comment: another tag, other candidates", default = "run" },
    { "faults", nil, "add hanging and crashing kernels (the fault run)" },
  },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end

-- Every combination of a starter's tunables, in a fixed order.
local function param_sets(t)
  local sets = { {} }
  local names = {}
  for k in pairs(t.starter.params or {}) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    local next_sets = {}
    for _, s in ipairs(sets) do
      for _, v in ipairs(t.starter.params[k]) do
        local c = {}
        for kk, vv in pairs(s) do c[kk] = vv end
        c[k] = v
        next_sets[#next_sets + 1] = c
      end
    end
    sets = next_sets
  end
  local ok = {}
  for _, s in ipairs(sets) do if task.params_ok(t, s) then ok[#ok + 1] = s end end
  return ok
end

-- The starter's launch code run with every integer size halved: half the output written.
local function half_launch(launch)
  return "local inner = (function()\n" .. launch .. "\nend)()\nreturn function(k, io, s)\n" ..
    "  local h = {}\n  for key, v in pairs(s) do h[key] = (math.type(v) == 'integer' and v > 1) and v // 2 or v end\n" ..
    "  return inner(k, io, h)\nend\n"
end

-- A kernel body that first does `what` (hang, crash) in every __global__ function.
local function poison_kernels(src, what)
  local stmt = what == "hang" and "for (;;) { __nanosleep(1000); }" or "if (threadIdx.x == 0) *(volatile int *)16 = 1;"
  return (src:gsub("(__global__[^{;]-%b())%s*{", "%1 { " .. stmt .. " "))
end

-- kind -> the status meant, and how a starter becomes it
local KINDS = {
  correct = { expect = "correct" },
  skip = { expect = "mismatch", launch = function() return "return function(k, io, s) end\n" end },
  half = { expect = "mismatch", launch = function(l) return half_launch(l) end },
  compile = { expect = "compile_error", source = function(s) return s .. "\nthis is not C++;\n" end },
  nokernel = { expect = "launch_error", launch = function() return "return function(k, io, s) k.no_such_kernel { grid = 1, block = 1 }() end\n" end },
  hang = { expect = "timeout", source = function(s) return poison_kernels(s, "hang") end },
  crash = { expect = "crashed", source = function(s) return poison_kernels(s, "crash") end },
}
-- 20 slots: 12 correct (60%), 3 skip/half, 3 compile, 2 no kernel (with --faults, 2 of the
-- correct become a hang and a crash)
local PLAN = { "correct", "skip", "correct", "compile", "correct", "half", "correct", "nokernel", "correct", "correct",
  "skip", "correct", "compile", "correct", "half", "correct", "correct", "nokernel", "correct", "compile" }
if a.faults then PLAN[3], PLAN[14] = "hang", "crash" end

local tasks = {}
for _, d in ipairs(task.entries(a.tasks)) do
  if #tasks >= a.ntasks then break end
  local t = task.load(d)
  if t and t.starter then tasks[#tasks + 1] = t end
end
if #tasks == 0 then io.stderr:write("bench/service_cands.lua: no task with a starter in ", a.tasks, "\n") return 2 end

local out, counts = {}, {}
local per = {}
for i = 1, a.n do
  local t = tasks[(i - 1) % #tasks + 1]
  local st = assert(task.starter(t))
  per[t.name] = (per[t.name] or 0) + 1
  local k = per[t.name]
  local kind = PLAN[(k - 1) % #PLAN + 1]
  local sets = param_sets(t)
  local params = sets[(k - 1) % math.max(1, #sets) + 1] or st.params
  local src, launch = st.source, st.launch
  if KINDS[kind].source then src = KINDS[kind].source(src) end
  if KINDS[kind].launch then launch = KINDS[kind].launch(launch) end
  src = src .. string.format("\n// service_bench %s %d %s\n", a.tag, i, kind)
  out[i] = { task = t.name, kind = kind, expect = KINDS[kind].expect,
    candidate = { kernel_cu = src, launch_lua = launch, params = params } }
  counts[kind] = (counts[kind] or 0) + 1
end
local f = assert(io.open(a.out, "w"))
f:write(json.encode(out), "\n")
f:close()
local parts = {}
for _, kind in ipairs { "correct", "skip", "half", "compile", "nokernel", "hang", "crash" } do
  if counts[kind] then parts[#parts + 1] = kind .. " " .. counts[kind] end
end
print(string.format("bench/service_cands.lua: %d candidates over %d tasks (%s) -> %s", a.n, #tasks, table.concat(parts, ", "), a.out))
return 0
