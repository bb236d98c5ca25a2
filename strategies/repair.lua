-- repair: ask, judge, feed the verdict (and guidance chosen by it) back; N rounds.
local prompt = require "km.prompt"

return function(ctx)
  local messages = prompt.implement(ctx.task, { forms = ctx.args.forms or { "description", "math" } })
  local cand, verdict
  for round = 1, ctx.args.rounds or 5 do
    local reply, why
    cand, reply, why = ctx.propose(messages)
    if not cand and not reply then break end -- the model is unreachable or out of budget
    verdict = ctx.eval(cand, { why = why })
    if verdict.status == "correct" or ctx.offline then break end
    prompt.append_feedback(messages, reply, verdict, ctx.guidance:for_verdict(ctx.task, verdict))
  end
  return cand, verdict
end
