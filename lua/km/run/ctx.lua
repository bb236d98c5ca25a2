-- km.run.ctx — the ctx a strategy sees in one episode, and what the episode leaves in the store:
-- its summary and the verdict it ends with. Built by km.run.episode for every episode of
-- `kmrun STRATEGY` and `kmrun sweep` (km.run.runner re-exports these under its old names).
--
--   local ctx = require("km.run.ctx").new(task, { store, episode, pool, client, client_for, guidance, args, arch })
--
-- Everything a strategy does through ctx lands in the store:
--   ctx.task       the task (km.task)           ctx.args     parsed command-line options
--   ctx.llm        the model client; :chat(messages, opts), :chat_many(list, opts)
--   ctx.models()   a client per model of --models (else { ctx.llm }), from the same factory
--   ctx.propose(messages [, opts]) -> candidate | nil, reply, why  (asks the model; offline:
--                  the task's starter, and says so)
--   ctx.eval(candidate [, opts]) -> verdict      (isolated GPU workers; no GPU: compile only)
--   ctx.compile(candidate) -> verdict-like table  (NVRTC only)
--   ctx.guidance   the guidance library; :for_task / :for_verdict record what was shown
--   ctx.log(kind, payload)   ctx.say(fmt, ...)   ctx.budget   ctx.offline   ctx.gpu
local task_mod = require "km.task"
local prompt = require "km.run.prompt"
local model = require "km.run.model"
local pool_mod = require "km.serve.pool" -- judging reached through the pool (its compile-only check)
local wall = require("km.timing").wall

local fmt = string.format
local ipairs, pairs, type, tostring, setmetatable = ipairs, pairs, type, tostring, setmetatable

local M = {}

----------------------------------------------------------------------------------------
-- the ctx's parts

-- ctx.llm, ctx.models(), ctx.budget, ctx.offline: every call within the context, recorded,
-- counted per request (km.run.model). ctx.models() gets its clients from the episode's client
-- factory (env.client_for(name): the run's, so --base-url, prices, budgets and replay hold
-- for it as for ctx.llm, and its requests yield as ctx.llm's do).
local function model_part(ctx, env, log)
  local function wrap(client) return model.wrap(ctx, client, log, env.args) end
  local client = env.client
  local cfg = client and client:config() or { provider = "offline" }
  ctx.offline = cfg.provider == "offline"
  ctx.llm = wrap(client)
  ctx.budget = setmetatable({}, { __index = function(_, k) return (client and client:usage() or {})[k] end })
  -- every model named by --models (comma-separated), each recorded; else just ctx.llm
  function ctx.models()
    local names = env.args.models
    if not names or not env.client_for then return { ctx.llm } end
    if type(names) ~= "table" then
      local list = {}
      for name in tostring(names):gmatch("[^,]+") do list[#list + 1] = name end
      names = list
    end
    local list = {}
    for _, name in ipairs(names) do list[#list + 1] = wrap(env.client_for(name)) end
    return list
  end
end

-- ctx.guidance: the guidance library, recording what was shown.
local function guidance_part(lib, log)
  local shown = {}
  local function record(list, reason)
    local ids = {}
    for i, g in ipairs(list) do ids[i] = g.id; shown[g.id] = true end
    log("guidance", { ids = ids, reason = reason })
    return list
  end
  return {
    for_task = function(_, task, opts)
      if not lib then return {} end
      return record(lib:for_task(task, opts), "task")
    end,
    for_verdict = function(_, task, verdict, opts)
      if not lib then return {} end
      opts = opts or {}
      opts.exclude = opts.exclude or shown
      if opts.status_only == nil then opts.status_only = true end
      opts.limit = opts.limit or 2
      return record(lib:for_verdict(task, verdict, opts), verdict.status)
    end,
    search = function(_, words) return lib and lib:search(words) or {} end,
    get = function(_, id) return lib and lib:get(id) end,
    lib = lib,
  }
end

-- Counts a verdict in the episode's stats.
local function count_verdict(st, v, secs, gpu)
  st.evals = st.evals + 1
  if st.compile_ok_first == nil then st.compile_ok_first = v.status ~= "compile_error" end
  if v.status == "correct" and not st.rounds_to_correct then st.rounds_to_correct = st.evals end
  st.failure_modes[v.status] = (st.failure_modes[v.status] or 0) + 1
  if gpu then st.gpu_seconds = st.gpu_seconds + (v.eval_seconds or secs) end
end

-- ctx.eval: the candidate judged by the GPU workers (compiled only without them); no
-- candidate: the round's no_code, truncated or model_error (km.run.model), counted like a verdict.
local function eval_part(ctx, t, env, log)
  return function(cand, opts)
    opts = opts or {}
    if type(cand) ~= "table" then
      local v = model.no_candidate(ctx, opts.why)
      ctx.stats.failure_modes[v.status] = (ctx.stats.failure_modes[v.status] or 0) + 1
      log("verdict", v)
      return v
    end
    log("candidate", { name = cand.name, source = cand.source, launch = cand.launch, params = cand.params, origin = cand.origin })
    local v
    local t0 = wall()
    if env.pool then
      local o = { seeds = opts.seeds or env.args.seeds, timing = opts.timing, timeout = opts.timeout or env.args.timeout,
        baseline = opts.baseline, energy = opts.energy or env.args.energy }
      require("km.task.baseline").judge_opts(env.args, o)
      v = env.pool:eval(t, cand, o)
    else
      v = ctx.compile(cand)
    end
    local secs = wall() - t0
    count_verdict(ctx.stats, v, secs, env.pool ~= nil)
    log("verdict", v, { duration_ms = secs * 1e3 })
    if v.timing then log("timing", { timing = v.timing, speedup = v.speedup, roofline = v.roofline }) end
    return v
  end
end

-- ctx.propose: asks the model for a candidate; offline, the task's starter stands in.
local function propose_part(ctx, t, log)
  return function(messages, opts)
    opts = opts or {}
    if ctx.offline then
      local cand = task_mod.starter(t)
      if not cand then return nil, nil, "offline and the task has no starter" end
      cand.origin = "starter (offline: no model configured)"
      if not ctx.offline_noted then
        ctx.offline_noted = true
        log("note", { text = "offline: no model configured; using the task's starter" })
      end
      return cand, { content = prompt.candidate_text(cand), offline = true }
    end
    local reply, err, code = ctx.llm:chat(messages, opts)
    if not reply then return nil, nil, err, code end -- ctx.model_error and ctx.no_candidate are set
    local cand, why = prompt.extract(reply.content, { default_launch = opts.default_launch })
    if not cand then
      local status = "no_code"
      if reply.finish_reason == "length" then status, why = "truncated", model.truncated_text(reply) end
      ctx.no_candidate = { status = status, why = why }
      log("note", { text = "no usable candidate in the reply", why = why, status = status })
      return nil, reply, why
    end
    ctx.no_candidate = nil
    cand.origin = "model"
    return cand, reply
  end
end

----------------------------------------------------------------------------------------
-- the ctx

-- Builds the ctx for one episode. env: { store, episode, pool (or nil), client,
-- client_for (name -> client: ctx.models()'s), guidance, args, arch }
function M.new(t, env)
  local store, ep = env.store, env.episode
  local ctx = { task = t, args = env.args, gpu = env.pool ~= nil, stats = model.new_stats() }
  local st0 = ctx.stats
  st0.evals, st0.gpu_seconds, st0.failure_modes = 0, 0, {}
  local function log(kind, payload, extra)
    if store then store:append(ep, kind, payload or {}, extra) end
  end
  ctx.log = log
  ctx.say = function(f, ...) if not env.args.quiet then io.stdout:write(fmt(f, ...), "\n") io.stdout:flush() end end
  model_part(ctx, env, log)
  ctx.guidance = guidance_part(env.guidance, log)
  function ctx.compile(cand) return M.compile_check(cand, env.arch) end
  ctx.eval = eval_part(ctx, t, env, log)
  ctx.propose = propose_part(ctx, t, log)
  return ctx
end

-- The compile-only verdict (km.serve.compile, through the pool's module): what ctx.compile and
-- ctx.eval without workers give.
M.compile_check = pool_mod.compile_check

-- The episode summary kept in the store (episodes.summary); docs/store.md lists it and
-- `kmrun report` reads it.
function M.summary(t, ctx, verdict, seconds)
  local st = ctx.stats
  local s = {
    status = verdict and verdict.status, speedup = verdict and verdict.speedup,
    speedup_baseline = verdict and verdict.speedup_baseline,
    -- what speedup is against, and the candidate over each baseline the judge timed (nil
    -- where it timed none); km.report's fast_p per baseline reads these
    speedup_over = verdict and verdict.speedup_over, speedup_eager = verdict and verdict.speedup_eager,
    speedup_compile = verdict and verdict.speedup_compile,
    speedup_cuda_reference = verdict and verdict.speedup_cuda_reference,
    compile_mode = verdict and verdict.compile_mode,
    roofline = verdict and verdict.roofline and verdict.roofline.fraction,
    level = t.level, category = t.category, forms = ctx.args.forms,
    evals = st.evals, model_calls = st.model_calls, compile_ok_first = st.compile_ok_first,
    rounds_to_correct = st.rounds_to_correct, failure_modes = st.failure_modes,
    seconds = seconds, gpu_seconds = st.gpu_seconds,
    model_error = ctx.model_error,
  }
  -- tokens, requests, dollars, latency, truncated replies, reasoning: summed per request
  for k, v in pairs(model.summary(st)) do s[k] = v end
  require("km.task.lint").annotate_summary(s, t) -- the task's lint result and held-out shape
  return s
end

-- The verdict an episode ends with: the strategy's, or model_error when it returned none
-- because the model failed.
function M.final_verdict(ctx, verdict)
  if (verdict == nil or verdict.status == nil) and ctx.model_error then
    return model.no_candidate(ctx)
  end
  return verdict
end

return M
