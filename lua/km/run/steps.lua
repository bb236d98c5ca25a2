-- km.run.steps — building blocks strategies share: the repair loop, the tuner, the final pick.
-- Each takes the ctx (km.run.ctx) so everything it does is recorded.
local prompt = require "km.run.prompt"
local search = require "km.run.search"
local task_mod = require "km.task"
local statuses = require "km.statuses"

local fmt, insert = string.format, table.insert
local ipairs, pairs, math = ipairs, pairs, math

local M = {}

local function copy(t) local c = {} for k, v in pairs(t or {}) do c[k] = v end return c end

-- Asks, judges and feeds the verdict back until correct or out of rounds.
-- Returns the last candidate, its verdict, and the rounds used.
-- A failed model call ends the loop with a model_error verdict (km.run.model); feedback is only
-- appended when another round will send it.
function M.repair(ctx, messages, rounds)
  local cand, verdict
  for round = 1, rounds do
    local reply, why
    cand, reply, why = ctx.propose(messages)
    verdict = ctx.eval(cand, { why = why }) -- no candidate: no_code, truncated or model_error
    -- a fatal status (model_error) ends without a candidate; one that stops (correct,
    -- compiled) ends with it (their rows in km.statuses)
    local row = statuses.get(verdict.status) or {}
    if row.fatal then return nil, verdict, round end
    if row.stops or ctx.offline or round == rounds then
      return cand, verdict, round
    end
    prompt.append_feedback(messages, reply, verdict, ctx.guidance:for_verdict(ctx.task, verdict))
  end
  return cand, verdict, rounds
end

-- The parameters a candidate can be tuned over: the task starter's declared space,
-- limited to those the candidate uses — a macro its source guards with #ifndef, or a
-- value its launch code reads as k.params.NAME.
function M.space_of(task, cand)
  local st = task.starter
  if not st or not st.params then return nil end
  local space, n = {}, 0
  for name, vals in pairs(st.params) do
    if cand.source:find("#%s*ifndef%s+" .. name .. "%f[^%w_]") or (cand.launch or ""):find("params%." .. name .. "%f[^%w_]") then
      space[name] = vals
      n = n + 1
    end
  end
  return n > 0 and space or nil
end

-- Searches the candidate's parameters (ask/tell), timing each correct point; the final
-- pick is measured again beside the runner-up so noise cannot decide it.
-- opts: method ("exhaustive" | "random" | "anneal" | "bandit"), budget, seed.
function M.tune(ctx, cand, verdict, opts)
  opts = opts or {}
  local space = M.space_of(ctx.task, cand)
  if not space or not verdict or verdict.status ~= "correct" then return cand, verdict end
  local constraints = ctx.task.starter.constraints or {}
  local s = search.new(space, { method = opts.method or "exhaustive", budget = opts.budget or 16, seed = opts.seed or 1,
    accept = function(p) return task_mod.params_ok(ctx.task, p) end })
  local seen = {}
  local base_key = s:key(cand.params or {})
  if verdict.timing then s:tell(cand.params or {}, verdict.timing.candidate.median); seen[base_key] = { cand = cand, verdict = verdict } end
  while true do
    local p = s:ask()
    if not p then break end
    local key = s:key(p)
    if not seen[key] then
      local c = copy(cand)
      c.params = copy(cand.params) -- parameters outside the space keep their values
      for k, v in pairs(p) do c.params[k] = v end
      c.name = (cand.name or "candidate") .. " " .. key
      local v = ctx.eval(c, { seeds = 1 })
      seen[key] = { cand = c, verdict = v }
      s:tell(p, v.status == "correct" and v.timing and v.timing.candidate.median or nil)
    end
  end
  ctx.log("note", { text = "tuning", method = s.method, points = #s.results, rejected = s.rejected, constraints = constraints })
  local ranked = s:ranked()
  local finalists = {}
  for i = 1, math.min(2, #ranked) do
    if ranked[i].score < math.huge then insert(finalists, seen[s:key(ranked[i].params)].cand) end
  end
  return M.pick(ctx, finalists, { fallback = { cand = cand, verdict = verdict } })
end

-- Re-measures candidates with full checks and returns the fastest correct one.
function M.pick(ctx, cands, opts)
  opts = opts or {}
  local best, best_v
  for _, c in ipairs(cands) do
    local v = ctx.eval(c)
    if v.status == "correct" and v.timing and (not best_v or v.timing.candidate.median < best_v.timing.candidate.median) then
      best, best_v = c, v
    end
  end
  if best then
    ctx.log("note", { text = "picked", name = best.name, median_ms = best_v.timing.candidate.median, among = #cands })
    return best, best_v
  end
  if opts.fallback then return opts.fallback.cand, opts.fallback.verdict end
  return nil, { status = "no_correct_candidate", feedback = fmt("none of %d candidates was correct", #cands) }
end

return M
