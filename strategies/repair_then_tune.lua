-- repair_then_tune: implement -> repair until correct -> tune its parameters -> keep the
-- fastest correct version (re-measured). Offline, the task's starter is repaired (it is
-- already correct) and tuned.
local prompt = require "km.run.prompt"
local steps = require "km.run.steps"

return function(ctx)
  local messages = prompt.implement(ctx.task, {
    forms = ctx.args.forms,
    guides = ctx.guidance:for_task(ctx.task, { limit = 2 }),
  })
  local cand, verdict = steps.repair(ctx, messages, ctx.args.rounds)
  if not verdict or verdict.status ~= "correct" then return cand, verdict end
  return steps.tune(ctx, cand, verdict, { method = ctx.args.method or "bandit", budget = ctx.args.tune_budget or 8 })
end
