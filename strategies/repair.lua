-- repair: ask, judge, feed the verdict (and guidance chosen by it) back; N rounds.
local prompt = require "km.prompt"

return function(ctx)
  local messages = prompt.implement(ctx.task, { forms = ctx.args.forms })
  local cand, verdict
  local rounds = ctx.args.rounds
  for round = 1, rounds do
    local reply, why
    cand, reply, why = ctx.propose(messages)
    verdict = ctx.eval(cand, { why = why }) -- no candidate: no_code, truncated or model_error
    if verdict.status == "correct" or verdict.status == "model_error" or ctx.offline or round == rounds then break end
    prompt.append_feedback(messages, reply, verdict, ctx.guidance:for_verdict(ctx.task, verdict))
  end
  return cand, verdict
end
