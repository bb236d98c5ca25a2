-- GPU: every task in tasks/ — the reference builds and is not degenerate, the starter is
-- correct on every shape and seed, and the reference's timed shape runs 0.5-20 ms.
local t = require "km.tap"
t.require_gpu()
local task = require "km.task"
local eval = require "km.serve.pool"
local testing = require "km.testing"

local ROOT = testing.paths()
local tasks, errors = task.list(ROOT .. "/tasks")
local pool = assert(eval.pool { gpus = { tonumber(os.getenv("KM_TEST_GPU") or "0") }, timeout = 60 })

t.test("every task folder loads", function()
  for _, e in ipairs(errors) do t.note(e) end
  t.eq(#errors, 0)
  t.ok(#tasks >= 40, #tasks .. " tasks")
end)

local levels = {}
for _, tk in ipairs(tasks) do
  levels[tk.level] = (levels[tk.level] or 0) + 1
  t.test(tk.name .. ": starter correct, reference 0.5-20 ms", function()
    local v = pool:eval(tk, task.starter(tk), { seeds = 3, baseline = false })
    local ref = v.timing and v.timing.reference
    t.note(string.format("%-28s %-10s ref %8.3f ms  starter %8.3f ms  speedup %5.2fx  roofline %3.0f%%",
      tk.name, v.status, ref and ref.median or -1, v.timing and v.timing.candidate.median or -1,
      v.speedup or 0, 100 * ((v.roofline or {}).fraction or 0)))
    if v.status ~= "correct" then t.note(v.feedback or "") end
    t.eq(v.status, "correct")
    t.ok(ref and ref.median >= 0.5 and ref.median <= 20, "reference time " .. tostring(ref and ref.median))
  end)
end

t.test("the suite's mix: about 20 level-1, 14 level-2, 6 level-3 tasks", function()
  t.note(string.format("level 1: %d, level 2: %d, level 3: %d", levels[1] or 0, levels[2] or 0, levels[3] or 0))
  t.ok((levels[1] or 0) >= 20 and (levels[2] or 0) >= 14 and (levels[3] or 0) >= 6)
end)

pool:close()
t.done()
