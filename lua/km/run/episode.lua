-- km.run.episode — one episode: a strategy run over one task with one model, from its row in
-- the store to that row finished. The strategy runs as a coroutine over its ctx (km.run.ctx);
-- whatever it needs from outside the driver it asks for by yielding a request, and the
-- caller (km.run.sweep's scheduler) answers by resuming it:
--
--   local ep = episode.start(item, env)
--   local what, a, b, c = ep:resume()
--   -- "eval",      task, candidate, opts  -> ep:resume(verdict)
--   -- "chat",      client, messages, opts -> ep:resume(reply, err, code, info)
--   -- "chat_many", client, list, opts     -> ep:resume({ { reply, err, code, info }, ... })
--   -- "done",      status, verdict, summary: its row is finished in the store
--   ep:interrupt("SIGINT")  -- ends it "interrupted" with what it spent so far
--
-- item: { strategy = { name, fn }, task, model (the store's label), raw_model (the name the
-- client factory takes, false for the default), rep, key, judged_from (an earlier
-- compile-only episode whose stored candidate is judged instead of running the strategy) }.
-- env: { store, run_id, pool (or nil: compile only), client = function(model, task_name)
-- -> client (the run's one factory; ctx.llm and ctx.models() are both served by it),
-- guidance, args }.
--
-- A request is yielded only where it can wait: a model client without start (blocking chat
-- only) is called in place. The statuses an episode ends with are rows of km.statuses
-- (their `ends_as`, `episode`, `fatal` properties); none is named here but "error" (the
-- strategy raised) and "interrupted".
local episode_ctx = require "km.run.ctx"
local model = require "km.run.model"
local statuses = require "km.statuses"
local wall = require("km.timing").wall

local ipairs, type, tostring, pcall, setmetatable, select = ipairs, type, tostring, pcall, setmetatable, select
local yield, create, resume, costatus = coroutine.yield, coroutine.create, coroutine.resume, coroutine.status

local M = {}

-- The short reason a failed episode's line carries: the first line that says something
-- (a compile log's first error, else the feedback's or the error's first line), without
-- a Lua chunk's "file:line:" prefix, cut to `width` characters.
function M.reason(verdict, err, width)
  width = width or 72
  local text
  if err then text = tostring(err)
  elseif type(verdict) == "table" then
    local log = type(verdict.compile_log) == "string" and verdict.compile_log or ""
    text = log:match("error: ([^\n]+)") or verdict.feedback or verdict.why or verdict.error
    if type(text) == "table" then text = text.message end
  end
  if type(text) ~= "string" then return nil end
  local line = text:match("^%s*([^\n]*%S)") or ""
  -- "The kernel does not compile. NVRTC says:" introduces the log: the next line is the news
  if line:match(":$") then line = line .. " " .. (text:match("\n%s*([^\n]*%S)") or "") end
  repeat local n line, n = line:gsub("^[%w_%./%-]+%.lua:%d+: ", "") until n == 0
  line = line:gsub("%s+", " ")
  if #line > width then line = line:sub(1, width - 3) .. "..." end
  return line ~= "" and line or nil
end

----------------------------------------------------------------------------------------
-- the requests: a pool and a client as the ctx sees them inside the coroutine

-- ctx.eval's pool: eval yields until the verdict is back.
local function yielding_pool(pool)
  return setmetatable({
    eval = function(_, t, cand, opts) return yield("eval", t, cand, opts) end,
  }, { __index = pool })
end

-- A start() that raised (misuse) comes back as START_FAILED: raised here, inside the
-- episode that caused it.
local function raise_start_failed(err, code, level)
  if code == "START_FAILED" then error(err, level + 1) end
end

-- A client whose chat and chat_many yield when it can run requests asynchronously
-- (client:start / client:poll); one without start is the client as it is.
function M.yielding_client(client)
  if not client or not client.start then return client end
  return setmetatable({
    chat = function(_, messages, opts)
      local reply, err, code, info = yield("chat", client, messages, opts)
      if reply == nil then raise_start_failed(err, code, 2) end
      return reply, err, code, info
    end,
    chat_many = function(_, list, opts)
      local res, err, code = yield("chat_many", client, list, opts)
      if res == nil then raise_start_failed(err, code, 2) end
      return res
    end,
  }, { __index = function(_, k)
    local v = client[k]
    if type(v) == "function" then return function(_, ...) return v(client, ...) end end
    return v
  end })
end

----------------------------------------------------------------------------------------
-- an episode judged from a stored candidate

-- The strategy that judges a compile-only episode's stored candidate where there is a GPU:
-- the earlier episode's steps are copied (its prompts and model turns stay whole for
-- exports), then the candidate is judged. No model call.
local function judge_stored(db, earlier)
  return function(ctx)
    local ep = db:episode(earlier.id)
    for _, st in ipairs(ep and ep.steps or {}) do
      ctx.log(st.kind, st.payload, { started_at = st.started_at, duration_ms = st.duration_ms })
    end
    ctx.log("note", { text = "compile-only before (episode " .. tostring(earlier.uuid) ..
      "): its stored candidate judged here, without a model call", judged_from = earlier.uuid })
    local cand = earlier.final.candidate
    return cand, ctx.eval(cand)
  end
end

-- The model's cost an episode judged from a stored candidate carries over from the one it
-- was judged from (the report counts only a key's latest episode).
local CARRIED = { "model_calls", "tokens", "requests", "dollars", "latency_ms", "truncated", "reasoning_chars",
  "max_reasoning_chars", "forms" }

----------------------------------------------------------------------------------------
-- the episode

local Episode = {}
Episode.__index = Episode

-- Starts an episode: its row in the store (status running) and its ctx; the strategy runs
-- at the first resume.
function M.start(item, env)
  local t, db = item.task, env.store
  local client = env.client(item.raw_model, t.name)
  local rec = db:begin_episode(env.run_id, { task = t.name, strategy = item.strategy.name, model = item.model, rep = item.rep })
  local pool = env.pool
  local ctx = episode_ctx.new(t, { store = db, episode = rec, pool = pool and yielding_pool(pool) or nil,
    client = M.yielding_client(client), guidance = env.guidance, args = env.args,
    arch = pool and pool.device.arch or "sm_90",
    client_for = function(name) return M.yielding_client(env.client(name, t.name)) end })
  local self = setmetatable({ item = item, record = rec, ctx = ctx, store = db, t0 = wall() }, Episode)
  local fn = item.judged_from and judge_stored(db, item.judged_from) or item.strategy.fn
  self.co = create(function() return self:body(fn) end)
  return self
end

-- The coroutine's body: the strategy, then the row finished.
function Episode:body(fn)
  local ctx, db = self.ctx, self.store
  local ok, cand, verdict = pcall(fn, ctx)
  local status, err
  if not ok then
    db:append(self.record, "note", { text = "strategy error", error = tostring(cand) })
    status, err, cand, verdict = "error", cand, nil, nil
  else
    -- a strategy that gave up because the model failed ends on model_error (km.run.model)
    verdict = episode_ctx.final_verdict(ctx, verdict) or {}
    status = statuses.episode_status(verdict.status)
  end
  local summary = self:summarize(status, verdict, err)
  db:finish_episode(self.record, status, { final = cand and { candidate = cand, verdict = verdict } or nil, summary = summary })
  return status, verdict, summary
end

-- The episode's summary (km.run.ctx's, with the sweep key, what a judged-from episode carries
-- over and, for one that did not end correct, the reason in a line).
function Episode:summarize(status, verdict, err)
  local item = self.item
  local summary = episode_ctx.summary(item.task, self.ctx, verdict, wall() - self.t0)
  summary.sweep_key = item.key
  if item.judged_from then
    local earlier = type(item.judged_from.summary) == "table" and item.judged_from.summary or {}
    for _, k in ipairs(CARRIED) do if earlier[k] ~= nil then summary[k] = earlier[k] end end
    summary.judged_from = item.judged_from.uuid
  end
  if statuses.failure(status) then
    summary.reason = M.reason(verdict, err) or (status == "error" and "the strategy returned no verdict") or nil
  end
  return summary
end

-- Ends the episode: its outcome kept on it; `stop` says why the run should start no new
-- episode (a model that cannot be reached, refuses the key or is out of budget: km.run.model).
function Episode:finish(status, verdict, summary, err)
  self.done, self.status, self.verdict, self.summary, self.error = true, status, verdict, summary, err
  local me = self.ctx.model_error
  if me and model.stops_run(me.code) then self.stop = me.message end
  return "done", status, verdict, summary
end

-- Runs the strategy until its next request (what, ...) or its end ("done", status,
-- verdict, summary). An episode whose bookkeeping raised ends "error" with ep.error set
-- (its row may be left running; a resumed sweep runs it again).
function Episode:resume(...)
  if self.done then error("km.run.episode: resumed after it ended", 2) end
  local res = table.pack(resume(self.co, ...))
  if not res[1] then return self:finish("error", nil, nil, res[2]) end
  if costatus(self.co) == "dead" then return self:finish(res[2], res[3], res[4]) end
  return select(2, table.unpack(res, 1, res.n))
end

-- Stops an episode in flight: its row ends "interrupted" with what it spent so far; the
-- same command (same store) runs it again.
function Episode:interrupt(why)
  if self.done then return false end
  local sm = episode_ctx.summary(self.item.task, self.ctx, nil, wall() - self.t0)
  sm.sweep_key, sm.note = self.item.key, "interrupted by " .. tostring(why) .. "; the same command resumes it"
  self.store:finish_episode(self.record, "interrupted", { summary = sm })
  self.done, self.status, self.summary = true, "interrupted", sm
  return true
end

return M
