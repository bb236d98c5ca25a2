-- km.run.model — the model client as a strategy sees it (ctx.llm and ctx.models(), built by km.run.ctx):
--
--   * every request kept within the model's context window (km.run.context: older rounds
--     summarised, long texts shortened, the reply's room shrunk) and sent with the run's
--     limits (max_tokens, temperature: the strategy's, else these defaults; --max-tokens
--     and --temperature override both);
--   * every call recorded as a model_call step with what was actually sent, the reply,
--     its own usage, dollars and latency, and the wall-clock times of the request;
--   * the episode's tokens, requests, dollars and latency summed from its own requests, so
--     they are exact whatever else runs at once on the same client;
--   * one label for a call that failed, `model_error` with the client's code, whatever the
--     strategy (docs/strategies.md).
--
--   local model = require "km.run.model"
--   ctx.stats = model.new_stats()
--   ctx.llm = model.wrap(ctx, client, log, args)
--   model.no_candidate(ctx, why)      -- the verdict of a round that produced no candidate
--   model.summary(ctx.stats)          -- the accounting fields of the episode's summary
local context = require "km.run.context"
local statuses = require "km.statuses"

local fmt = string.format
local ipairs, pairs, type, tostring, math = ipairs, pairs, type, tostring, math

local M = {}

M.DEFAULT_MAX_TOKENS = 4096
M.DEFAULT_TEMPERATURE = 0.2
M.OVERFLOW_RETRIES = 3 -- sends again after a server's context_length_exceeded

-- Failure codes after which a run starts no new episode: the server is not there, it
-- refuses the key, or the run's budget is spent (km.run.episode says so as ep.stop; km.run.sweep stops).
local STOP = { CONNECT = true, HTTP_401 = true, HTTP_403 = true, BUDGET_EXCEEDED = true }
function M.stops_run(code) return code ~= nil and STOP[code] == true end

-- Statuses of a round that produced no candidate: the rows of km.statuses at the model
-- stage (no_code, truncated, model_error).
M.NO_CANDIDATE = statuses.names(function(row) return row.stage == "model" end)

function M.new_stats()
  return { model_calls = 0, requests = 0, prompt_tokens = 0, completion_tokens = 0, reasoning_tokens = 0,
    dollars = 0, latency_ms = 0, truncated = 0, model_errors = 0, reasoning_chars = 0, max_reasoning_chars = 0,
    errors = {} }
end

-- The options a call is sent with: the strategy's, the run's overrides, the defaults.
function M.call_opts(args, opts)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  args = args or {}
  o.max_tokens = args.max_tokens or o.max_tokens or M.DEFAULT_MAX_TOKENS
  if args.temperature then o.temperature = args.temperature
  elseif o.temperature == nil then o.temperature = M.DEFAULT_TEMPERATURE end
  return o
end

-- One context budget per server, model and size: what it learns of the model's tokens
-- per character serves every episode.
local budgets = {}

-- Providers that answer n choices with n requests (km.llm's table: per_n), by name.
local PER_N = {}
for _, p in ipairs(require("km.llm").providers()) do PER_N[p.name] = p.per_n end
function M.budget_for(cfg, size)
  size = size or context.DEFAULT_SIZE
  local key = fmt("%s|%s|%d", tostring(cfg.url or cfg.provider), tostring(cfg.model), size)
  if not budgets[key] then budgets[key] = context.new { size = size } end
  return budgets[key]
end

-- Counts one call (reply, or err/code/info) in the episode's stats and returns the step's
-- payload and its times.
local function account(ctx, cfg, sent, o, reply, err, code, info, finfo)
  local st = ctx.stats
  st.model_calls = st.model_calls + 1
  local payload = { messages = sent, opts = o, provider = cfg.provider, model = cfg.model }
  if finfo then
    payload.context = { size = finfo.size, estimated = finfo.estimated, dropped = finfo.dropped,
      shortened = finfo.shortened, guidance_dropped = finfo.guidance_dropped, max_tokens = finfo.max_tokens }
  end
  local times = {}
  local nreq = (PER_N[cfg.provider] and o.n) or 1
  if reply then
    -- the call's number in the episode: the assistant turn made of this reply carries it
    -- (km_call), so an export finds the call behind a turn the context shortened
    reply.km_call = st.model_calls
    local u = reply.usage or {}
    payload.reply, payload.usage, payload.latency_ms, payload.dollars = reply, u, reply.latency_ms, reply.dollars
    payload.reasoning_chars = reply.reasoning and #reply.reasoning or 0
    payload.truncated = reply.finish_reason == "length" or nil
    st.requests = st.requests + nreq
    st.prompt_tokens = st.prompt_tokens + (u.prompt_tokens or 0)
    st.completion_tokens = st.completion_tokens + (u.completion_tokens or 0)
    st.reasoning_tokens = st.reasoning_tokens + (u.reasoning_tokens or 0)
    st.dollars = st.dollars + (reply.dollars or 0)
    st.latency_ms = st.latency_ms + (reply.latency_ms or 0)
    st.reasoning_chars = st.reasoning_chars + payload.reasoning_chars
    st.max_reasoning_chars = math.max(st.max_reasoning_chars, payload.reasoning_chars)
    if payload.truncated then st.truncated = st.truncated + 1 end
    times.started_at, times.duration_ms = reply.started_at, reply.latency_ms
  else
    payload.error, payload.code = err, code
    if info then -- the request was sent (and failed): it counts, with its time
      payload.latency_ms, payload.attempts = info.latency_ms, info.attempts
      st.requests = st.requests + nreq
      st.latency_ms = st.latency_ms + (info.latency_ms or 0)
      times.started_at, times.duration_ms = info.started_at, info.latency_ms
    end
    st.model_errors = st.model_errors + 1
    local key = tostring(code or "ERROR")
    local e = st.errors[key]
    if not e then e = { code = key, message = err, count = 0 }; st.errors[key] = e end
    e.count = e.count + 1
    ctx.model_error = { message = err, code = code }
    ctx.no_candidate = { status = "model_error", why = err, code = code }
  end
  return payload, times
end

-- The recorded client for one episode. log(kind, payload, extra) appends a step.
function M.wrap(ctx, client, log, args)
  args = args or {}
  local cfg = client and client:config() or { provider = "offline" }
  local budget = M.budget_for(cfg, args.context)
  local w = {}
  local function call(messages, opts)
    local o = M.call_opts(args, opts)
    if not client then return nil, "offline: no model configured", "OFFLINE" end
    local want = { max_tokens = o.max_tokens, tools = o.tools } -- the reply's room asked for
    local sent, room, finfo = budget:fit(messages, want)
    if not sent then -- nothing was sent: the conversation cannot fit
      local p, tm = account(ctx, cfg, messages, o, nil, room, finfo, nil, nil)
      log("model_call", p, tm)
      return nil, room, finfo
    end
    o.max_tokens = room
    local reply, err, code, info = client:chat(sent, o)
    -- the server says it did not fit (error code context_length_exceeded): the estimate was
    -- low for this model. Each such answer is recorded; the request is fitted again with a
    -- tighter estimate and sent again, at most M.OVERFLOW_RETRIES times.
    for _ = 1, M.OVERFLOW_RETRIES do
      if reply or not (info and info.server_code == "context_length_exceeded") then break end
      local p, tm = account(ctx, cfg, sent, o, nil, err, code, info, finfo)
      log("model_call", p, tm)
      budget:tighten()
      sent, room, finfo = budget:fit(messages, want)
      if not sent then
        p, tm = account(ctx, cfg, messages, o, nil, room, finfo, nil, nil)
        log("model_call", p, tm)
        return nil, room, finfo
      end
      o.max_tokens = room
      reply, err, code, info = client:chat(sent, o)
      if reply then ctx.model_error, ctx.no_candidate = nil, nil end
    end
    if reply and reply.usage then budget:observe(sent, reply.usage.prompt_tokens, o.tools) end
    local p, tm = account(ctx, cfg, sent, o, reply, err, code, info, finfo)
    log("model_call", p, tm)
    return reply, err, code, info
  end
  function w:chat(messages, opts) return call(messages, opts) end
  -- Several conversations at once (best-of-N): each fitted, sent together with the
  -- smallest reply room any of them needs, each recorded.
  function w:chat_many(list, opts)
    local o = M.call_opts(args, opts)
    local fitted, send, room = {}, {}, o.max_tokens
    for i, msgs in ipairs(list) do
      local sent, r, finfo = budget:fit(msgs, o)
      fitted[i] = { sent = sent, room = r, finfo = finfo }
      if sent then send[#send + 1] = sent; fitted[i].k = #send; room = math.min(room, r) end
    end
    o.max_tokens = room
    local got = (#send > 0 and client) and client:chat_many(send, o) or {}
    local res = {}
    for i, f in ipairs(fitted) do
      if f.sent then
        local r = got[f.k] or { nil, "offline: no model configured", "OFFLINE" }
        if r[1] and r[1].usage then budget:observe(f.sent, r[1].usage.prompt_tokens, o.tools) end
        local p, tm = account(ctx, cfg, f.sent, o, r[1], r[2], r[3], r[4], f.finfo)
        log("model_call", p, tm)
        res[i] = r
      else
        local p, tm = account(ctx, cfg, list[i], o, nil, f.room, f.finfo, nil, nil)
        log("model_call", p, tm)
        res[i] = { nil, f.room, f.finfo }
      end
    end
    return res
  end
  function w:usage() return client and client:usage() or {} end
  function w:config() return cfg end
  w.budget = budget
  return w
end

-- The text a model gets when its reply was cut off before the candidate was complete.
function M.truncated_text(reply)
  local n = reply and reply.usage and reply.usage.completion_tokens
  return fmt("Your reply was cut off at the length limit%s (finish_reason: length) before the candidate was complete. " ..
    "Answer with less text: one ```cuda block and one ```lua block, with at most a few lines of explanation.",
    n and n > 0 and fmt(" after %d tokens", n) or "")
end

-- The verdict of a round that produced no candidate: model_error when the model call
-- failed (the message is the client's), truncated when the reply was cut off, else no_code.
function M.no_candidate(ctx, why)
  local nc = ctx.no_candidate or {}
  local status = nc.status or "no_code"
  local text = status == "model_error" and nc.why or why or nc.why or "no candidate"
  return { status = status, feedback = tostring(text), code = nc.code }
end

-- The episode's store status for its final verdict.
function M.episode_status(verdict)
  return statuses.episode_status(verdict and verdict.status)
end

-- The accounting fields of an episode's summary (docs/store.md).
function M.summary(st)
  local errs = {}
  for _, e in pairs(st.errors or {}) do errs[#errs + 1] = e end
  table.sort(errs, function(a, b) return a.code < b.code end)
  return {
    tokens = { prompt = st.prompt_tokens, completion = st.completion_tokens, reasoning = st.reasoning_tokens },
    requests = st.requests, dollars = st.dollars, latency_ms = st.latency_ms, truncated = st.truncated,
    reasoning_chars = st.reasoning_chars, max_reasoning_chars = st.max_reasoning_chars,
    model_errors = #errs > 0 and errs or nil,
  }
end

return M
