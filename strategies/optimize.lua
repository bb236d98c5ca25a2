-- optimize: get a correct kernel, then show the model its time, the roofline fraction and
-- guidance for a correct kernel of this category; keep the fastest correct version.
local prompt = require "km.run.prompt"
local steps = require "km.run.steps"

return function(ctx)
  local messages = prompt.implement(ctx.task, { forms = ctx.args.forms })
  local best, best_v, rounds = steps.repair(ctx, messages, ctx.args.rounds)
  if not best_v or best_v.status ~= "correct" or ctx.offline then return best, best_v end
  local reply = { content = prompt.candidate_text(best) }
  local verdict = best_v
  for _ = 1, ctx.args.rounds do
    prompt.append_feedback(messages, reply, verdict, ctx.guidance:for_verdict(ctx.task, verdict),
      string.format("It is correct and reaches %.0f%% of the roofline bound. Make it faster; reply with the whole candidate.",
        100 * ((verdict.roofline or {}).fraction or 0)))
    local cand, why
    cand, reply, why = ctx.propose(messages)
    if not reply then break end
    verdict = ctx.eval(cand, { why = why })
    if verdict.status == "correct" and verdict.timing.candidate.median < best_v.timing.candidate.median then
      best, best_v = cand, verdict
    end
  end
  return best, best_v
end
