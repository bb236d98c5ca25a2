-- repair: ask, judge, feed the verdict (and guidance chosen by it) back; N rounds.
local prompt = require "km.run.prompt"
local steps = require "km.run.steps"

return function(ctx)
  local messages = prompt.implement(ctx.task, { forms = ctx.args.forms })
  -- the loop and its one stop rule (km.statuses' fatal and stops: correct, compiled) are
  -- km.run.steps.repair's, which optimize and repair_then_tune run too
  local cand, verdict = steps.repair(ctx, messages, ctx.args.rounds)
  return cand, verdict
end
