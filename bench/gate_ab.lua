-- bench/gate_ab.lua — km.timing's gate on and off, side by side: each task's timed reference
-- (a problem file's PyTorch eager model, or a task folder's CUDA reference) timed by the
-- judge's protocol twice with the gate and twice without, alternating, in one process on one
-- GPU. Prints each timing's median, spread (min, p25, p75, p90), samples, stop and noise:
-- without the gate a Python forward's launch gaps land inside the timed window.
--
--   build/kmrun bench/gate_ab.lua TASK_OR_PROBLEM...
--
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local judge_mod = require "km.judge"
local task = require "km.task"
local timing = require "km.timing"
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT

local SPEC = A.spec {
  name = "bench/gate_ab.lua", synopsis = "TASK_OR_PROBLEM...",
  about = "A task's timed reference with km.timing's gate on and off, alternating, side by side.",
  positional = { { "tasks", "TASK_OR_PROBLEM", "task folders or problem files (reference.py)", required = true, many = true } },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/gate_ab.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end

-- the judge's timings, with the samples kept and the gate as asked
local gate_on, time = true, timing.time
timing.time = function(fn, o) o.samples, o.gate = true, gate_on return time(fn, o) end

local judge = assert(judge_mod.new())
print(("device %s, %s"):format(judge.device.name, os.date("!%Y-%m-%d %H:%M UTC")))
print(("%-40s %-7s %9s %9s %9s %9s %9s %4s %-11s %7s %6s"):format("task (reference)", "gate", "median", "min", "p25",
  "p75", "p90", "n", "stop", "noise", "wall s"))
local function q(s, p)
  local sorted = {}
  for i, x in ipairs(s) do sorted[i] = x end
  table.sort(sorted)
  return sorted[math.max(1, math.floor(#sorted * p + 0.5))]
end
local failed = false
for _, f in ipairs(a.tasks) do
  local t, terr = task.load(f)
  local st, serr = t and judge:task_state(t)
  if not st then
    print(("%-40s failed to load: %s"):format(f, tostring(terr or serr)))
    failed = true
  else
    -- a task's reference.py loads as a problem named "reference": its folder names it
    local name = t.name == "reference" and f:match("([^/]+)/reference%.py$") or t.name
    local label = (name .. (st.prob and " (eager)" or " (CUDA)")):sub(1, 40)
    for round = 1, 2 do
      for _, g in ipairs(round == 1 and { true, false } or { false, true }) do
        gate_on = g
        local w0 = timing.wall()
        local r, s, e = judge:time_run(st, st.ref, t.shapes[1], {}, false)
        if r then
          print(("%-40s %-7s %9.4f %9.4f %9.4f %9.4f %9.4f %4d %-11s %7.4f %6.2f"):format(label, g and "on" or "off",
            r.median, r.min, r.p25, r.p75, q(r.samples, 0.9), r.n, r.stop, r.rel_noise, timing.wall() - w0))
        else
          print(("%-40s %-7s failed: %s %s"):format(label, g and "on" or "off", tostring(s), tostring(e)))
          failed = true
        end
      end
    end
    if st.prob then st.prob:release { empty_cache = true } end
    judge.tasks[t.dir] = nil
    judge.pool:drop(true)
  end
end
return failed and 1 or 0
