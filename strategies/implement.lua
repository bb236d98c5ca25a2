-- implement: one shot. Show the task, ask once, judge the answer.
local prompt = require "km.run.prompt"

return function(ctx)
  local messages = prompt.implement(ctx.task, {
    forms = ctx.args.forms,
    guides = ctx.guidance:for_task(ctx.task, { limit = 2 }),
  })
  local cand, _, why = ctx.propose(messages)
  return cand, ctx.eval(cand, { why = why })
end
