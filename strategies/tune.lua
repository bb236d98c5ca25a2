-- tune: search the starter's declared parameters (exhaustive, random, anneal or bandit:
-- --method), skipping duplicates and points that break the constraints; the winner is
-- measured again beside the runner-up.
local task = require "km.task"
local steps = require "km.run.steps"

return function(ctx)
  local cand = assert(task.starter(ctx.task), ctx.task.name .. " has no starter to tune")
  local verdict = ctx.eval(cand)
  return steps.tune(ctx, cand, verdict, {
    method = ctx.args.method or "exhaustive",
    budget = ctx.args.tune_budget or 16,
  })
end
