-- bench/measure_profile.lua — where a warm judge's measure stage goes (issue 17: the measure
-- stage against the candidates' own kernel time). In one process, km.judge judges each
-- task's starter once to set the task up (reference, baselines, kept results), then EVALS
-- more times; only those are counted. Per task: the measure stage's seconds, the kernel's own
-- timed seconds (samples x mean) and their ratio. Over all tasks, wall seconds of what the
-- candidate's timings spend them on, the judge's own methods wrapped for this run only:
-- time_run, timing.time, the timed samples' before and after hooks (the after hook of a checked call
-- holds its check: the wait for the GPU, the inputs proven, the reference, the compare),
-- fill_inputs, compare.allclose, cuda.synchronize; with counts. Nothing is synchronized
-- beyond what the judge does (the probe of bench/RESULTS.md's round 5 waited for the GPU
-- before each check; this does not, so hook times hold the GPU backlog).
--
--   build/kmrun bench/measure_profile.lua [TASK_DIR...] [--evals N]
--
-- Default tasks: eight of tasks/ from small to large kernels. torch.compile is not timed;
-- energy is not measured. Exit status: 0, 1 when an evaluation is not correct, 2 on usage
-- errors, 3 where there is no GPU (the reason on stderr).
local A = require "km.args"
local EXIT = require("km.runner").EXIT

local SPEC = A.spec {
  name = "bench/measure_profile.lua", synopsis = "[TASK_DIR...] [options]",
  about = "Where a warm judge's measure stage goes: per task, and per part of the candidates' timings.",
  positional = { { "tasks", "TASK_DIR", "task folders (default: eight of tasks/)", many = true } },
  options = { { "evals", "N", "counted evaluations per task, after one that sets the task up", type = "positive", default = 4 } },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/measure_profile.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end

local timing, compare, cuda = require "km.timing", require "km.compare", require "km.cuda"
local task = require "km.task"
local wall = timing.wall
local fmt = string.format
local ROOT = arg[0]:match("^(.*)/bench/") or "."
local dirs = a.tasks and #a.tasks > 0 and a.tasks or {}
if #dirs == 0 then
  for _, n in ipairs { "l1_relu", "l1_cross_entropy", "l1_matmul_square", "l2_bias_layernorm", "l3_causal_attention",
    "l1_maxpool2d", "l2_silu_mul_add", "l1_softmax" } do dirs[#dirs + 1] = ROOT .. "/tasks/" .. n end
end

local J = assert(require("km.judge").new())
local Judge = getmetatable(J).__index
local acc, counting, in_cand = {}, false, false
local function add(k, dt)
  if not counting then return end
  local e = acc[k] or { s = 0, n = 0 }
  e.s, e.n = e.s + dt, e.n + 1
  acc[k] = e
end
local function timed(key, f)
  return function(...)
    local t0 = wall()
    local r = table.pack(f(...))
    add(key(...), wall() - t0)
    return table.unpack(r, 1, r.n)
  end
end
-- the candidate's timings (check = true) apart from the cached ones (reference, starter, eager)
local time_run = Judge.time_run
Judge.time_run = function(self, st, run, sym, opts, check)
  in_cand = check and true or false
  local t0 = wall()
  local r = table.pack(time_run(self, st, run, sym, opts, check))
  add(check and "candidate: time_run" or "other timings: time_run", wall() - t0)
  in_cand = false
  return table.unpack(r, 1, r.n)
end
local function cand_key(name) return function() return (in_cand and "candidate: " or "outside timings: ") .. name end end
Judge.fill_inputs = timed(cand_key("fill_inputs"), Judge.fill_inputs)
compare.allclose = timed(cand_key("compare.allclose"), compare.allclose)
cuda.synchronize = timed(cand_key("cuda.synchronize"), cuda.synchronize)
local time = timing.time
timing.time = function(fn, o)
  if not in_cand or type(o) ~= "table" then return time(fn, o) end
  local no = {}
  for k, v in pairs(o) do no[k] = v end
  for _, h in ipairs { "before", "after" } do
    local f = o[h]
    if f then no[h] = function(ph) local t0 = wall(); local x, y, z = f(ph); add("candidate: " .. h .. " hook, " .. ph, wall() - t0); return x, y, z end end
  end
  local t0 = wall()
  local r = table.pack(time(fn, no))
  add("candidate: timing.time", wall() - t0)
  return table.unpack(r, 1, r.n)
end

local opts = { energy = false, compile_mode = "off" }
local rows, rc, m_all, k_all = {}, 0, 0, 0
print(fmt("# bench/measure_profile.lua: %s, %s", J.device.name, os.date("!%Y-%m-%d %H:%M UTC")))
print("| task | measure s per eval | kernel s per eval | measure / kernel | samples per eval | checked calls per eval |")
print("| --- | --- | --- | --- | --- | --- |")
for _, dir in ipairs(dirs) do
  local tk, terr = task.load(dir)
  if not tk then io.stderr:write("bench/measure_profile.lua: ", tostring(terr), "\n") return EXIT.USAGE end
  local cand = assert(task.starter(tk))
  counting = false
  J:eval(tk, cand, opts) -- sets the task up: not counted
  counting = true
  local m, k, n, c = 0, 0, 0, 0
  for _ = 1, a.evals do
    local v = J:eval(tk, cand, opts)
    if v.status ~= "correct" then rc = 1 end
    local ct = v.timing and v.timing.candidate or {}
    m, k = m + ((v.stage_seconds or {}).measure or 0), k + (v.kernel_seconds or 0)
    n, c = n + (ct.n or 0), c + (ct.checked_calls or 0)
  end
  counting = false
  m_all, k_all = m_all + m, k_all + k
  print(fmt("| %s | %.4f | %.4f | %.2fx | %.1f | %.1f |", tk.name, m / a.evals, k / a.evals, k > 0 and m / k or 0,
    n / a.evals, c / a.evals))
end
print(fmt("| all | %.4f | %.4f | %.2fx | | |", m_all / (#dirs * a.evals), k_all / (#dirs * a.evals), k_all > 0 and m_all / k_all or 0))
print()
print("| counted evaluations' part | seconds | calls |")
print("| --- | --- | --- |")
local keys = {}
for key in pairs(acc) do keys[#keys + 1] = key end
table.sort(keys, function(x, y) return acc[x].s > acc[y].s end)
for _, key in ipairs(keys) do print(fmt("| %s | %.4f | %d |", key, acc[key].s, acc[key].n)) end
print(fmt("\nkernel seconds of the counted evaluations (samples x mean): %.4f", k_all))
return rc
