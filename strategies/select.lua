-- select: best-of-N. Draw --samples candidates (in parallel), from every model in
-- --models if given, judge them all, keep the fastest correct one.
--
-- --set draw_temperature=0.8  the sampling temperature of the drafts (higher: more varied)
local prompt = require "km.run.prompt"
local steps = require "km.run.steps"

return function(ctx)
  local messages = prompt.implement(ctx.task, { forms = ctx.args.forms })
  local cands = {}
  if ctx.offline then
    local cand = ctx.propose(messages)
    cands[1] = cand
  else
    local n = ctx.args.samples
    local list = {}
    for i = 1, n do list[i] = messages end
    for _, model in ipairs(ctx.models()) do
      for _, r in ipairs(model:chat_many(list, { temperature = ctx.args.draw_temperature or 0.8 })) do
        local cand = r[1] and prompt.extract(r[1].content)
        if cand then cand.origin = model:config().model; cands[#cands + 1] = cand end
      end
    end
  end
  if #cands == 0 then return nil, ctx.eval(nil, { why = "no reply held a candidate" }) end
  return steps.pick(ctx, cands)
end
