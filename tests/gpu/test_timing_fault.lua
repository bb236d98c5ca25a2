-- GPU: a kernel that faults first in a timing, judged by an in-process km.judge (library use,
-- bench scripts; no worker's context check behind it): the verdict is `crashed`, whether the
-- fault shows at a wait of the timing loop or as the driver's sticky error raised in the next
-- input refresh (a hook), never an error raised out of Judge:eval. One test: the context is
-- lost after it, so nothing else can run in this process.
local t = require "km.tap"
t.require_gpu()
local judge_mod = require "km.judge"
local testing = require "km.testing"

local rowsum, STARTER = testing.test_task("t_rowsum")
local LAST = "if (threadIdx.x == 0) y[r] = part[0];"
-- the kernel writes far out of any allocation once `late` is set
local SOURCE = testing.edit(testing.edit(STARTER.source, "int rows, int cols)", "int rows, int cols, int late)"), LAST,
  LAST .. "\n  if (late && r == 0 && threadIdx.x == 0) y[1ll << 40] = 1.f;")
-- verify makes one call per shape (seeds = 1) and the precision trial at the timed shape
-- (verify.trial_count); every later call (the timing's, from its first) faults
local VERIFY_CALLS = require("km.judge.verify").trial_count(rowsum, { seeds = 1 })
local LAUNCH = ([[local calls = 0
return function(k, io, s)
  calls = calls + 1
  k.rowsum{ grid = s.rows, block = k.params.BLOCK }(io.x, io.y, s.rows, s.cols, calls > %d and 1 or 0)
end]]):format(VERIFY_CALLS)

t.test("a kernel faulting from its timing's first call: crashed, context lost, nothing raised", function()
  local j = assert(judge_mod.new())
  local ok, v = pcall(j.eval, j, rowsum, { name = "faults once timed", source = SOURCE, launch = LAUNCH,
    params = STARTER.params }, { seeds = 1, energy = false })
  t.ok(ok, "Judge:eval returned: " .. tostring(not ok and v or ""))
  if not ok then return end
  t.eq(v.status, "crashed", v.feedback)
  t.eq(v.context_lost, true)
  t.ok(v.feedback:find("timed", 1, true), v.feedback)
  t.eq(v.failed_at, nil, "not blamed on a verified trial")
end)

t.done()
