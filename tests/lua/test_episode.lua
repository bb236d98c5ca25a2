-- km.run.episode drives one episode: a fake strategy's requests come out of ep:resume in order
-- ("eval", "chat", "chat_many"), its answers go back in, and it ends "done" with the status,
-- verdict and summary its row in the store also holds; ep:interrupt ends it "interrupted";
-- a strategy that raises ends "error" with a reason; a model that refuses the key stops the
-- run. Through km.run.sweep: chat_many yields to the scheduler (the episodes in flight move on
-- while its requests wait), and ctx.models() is served by the run's one client factory
-- (--base-url, budgets, prices as for ctx.llm).
local t = require "km.tap"
local testing = require "km.testing"
local episode = require "km.run.episode"
local sweep = require "km.run.sweep"
local setup = require "km.run.setup"
local store = require "km.store"
local task = require "km.task"

local DIR = testing.tmpdir()
local TASK = assert(task.load("tests/tasks/t_rowsum"))
local CAND = { name = "c", source = 'extern "C" __global__ void rowsum() {}', launch = "return function() end" }
local REPLY_CODE = "```cuda\nextern \"C\" __global__ void rowsum() {}\n```\n```lua\nreturn function(k, io, s) end\n```"

local function args(list)
  local a = assert(setup.finish_args(assert(require("km.args").read(require("km.run.runner").spec(), list or {}))))
  a.quiet = true
  return a
end

-- A model client that can run requests asynchronously, as km.llm's does (start / poll /
-- pending), written down: every request started is answered at the next poll, in order.
-- log (a list) gets "start <tag>" and "reply <tag>" entries, tag the last message's content.
local function fake_client(name, log, opts)
  opts = opts or {}
  local c, pending, n = { name = name, started = {} }, {}, 0
  function c:config() return { provider = "openai", model = name, base_url = opts.base_url, budget = opts.budget or {} } end
  function c:usage() return { requests = n } end
  function c:start(messages)
    n = n + 1
    local tag = messages[#messages].content
    local req = { tag = tag }
    pending[#pending + 1] = req
    if log then log[#log + 1] = "start " .. name .. " " .. tag end
    return req
  end
  function c:poll()
    local out = {}
    for i, req in ipairs(pending) do
      if log then log[#log + 1] = "reply " .. name .. " " .. req.tag end
      out[i] = { request = req, reply = { content = REPLY_CODE .. " " .. req.tag, usage = { prompt_tokens = 3, completion_tokens = 4 } } }
    end
    pending = {}
    return out
  end
  function c:pending() return #pending end
  return c
end

local function open_store(name)
  local db = assert(store.open(DIR .. "/" .. name .. ".sqlite"))
  return db, db:begin_run { name = "test" }
end

local function item(fn, key)
  return { strategy = { name = "fake", fn = fn }, task = TASK, model = "m", raw_model = "m", rep = 1, key = key or "fake|t|m|1" }
end

local function stored(db)
  local eps = db:episodes {}
  return db:episode(eps[#eps].id)
end

t.test("an episode yields eval, chat and chat_many in the strategy's order and ends done with its row", function()
  local db, run_id = open_store("drive")
  local client = fake_client("m")
  local seen = {}
  local ep = episode.start(item(function(ctx)
    local v = ctx.eval(CAND, { seeds = 1 })
    seen.first = v.status
    local reply = assert(ctx.llm:chat({ { role = "user", content = "one" } }))
    seen.reply = reply.content
    local many = ctx.llm:chat_many({ { { role = "user", content = "a" } }, { { role = "user", content = "b" } } })
    seen.many = #many .. " " .. many[2][1].content:sub(-1)
    return CAND, ctx.eval(CAND)
  end), { store = db, run_id = run_id, pool = testing.fake_pool(function() end), args = args(),
    client = function() return client end })

  local what, tk, cand, o = ep:resume()
  t.eq(what, "eval")
  t.eq(tk, TASK)
  t.eq(cand.name, "c")
  t.eq(o.seeds, 1, "the strategy's options go with the request")
  local c, messages
  what, c, messages = ep:resume({ status = "mismatch", feedback = "y[0] got 1, want 2" })
  t.eq(seen.first, "mismatch")
  t.eq(what, "chat")
  t.eq(c, client, "the request names the client to send it through")
  t.eq(messages[#messages].content, "one")
  local list
  what, c, list = ep:resume({ content = "plain words", usage = { prompt_tokens = 1, completion_tokens = 1 } })
  t.eq(seen.reply, "plain words")
  t.eq(what, "chat_many", "chat_many yields like chat")
  t.eq(c, client)
  t.eq(#list, 2)
  t.eq(list[2][#list[2]].content, "b")
  what = ep:resume({ { { content = "x" } }, { { content = "y" } } })
  t.eq(seen.many, "2 y")
  t.eq(what, "eval")
  local status, verdict, summary
  what, status, verdict, summary = ep:resume({ status = "correct", feedback = "ok", speedup = 2 })
  t.eq(what, "done")
  t.eq(status, "correct")
  t.eq(verdict.speedup, 2)
  t.eq(summary.evals, 2)
  t.eq(summary.model_calls, 3, "one chat and two of chat_many, each recorded")
  t.eq(summary.sweep_key, "fake|t|m|1")
  t.ok(ep.done and ep.status == "correct" and ep.stop == nil)
  t.raises(function() ep:resume() end, "resumed after it ended")
  local row = stored(db)
  t.eq(row.status, "correct")
  t.eq(row.summary.evals, 2)
  local kinds = {}
  for _, s in ipairs(row.steps) do kinds[s.kind] = (kinds[s.kind] or 0) + 1 end
  t.eq(kinds.model_call, 3)
  t.eq(kinds.verdict, 2)
  db:close()
end)

t.test("a strategy that returns no verdict, or raises, ends failed or error with a reason", function()
  local db, run_id = open_store("error")
  local env = { store = db, run_id = run_id, args = args(), client = function() return fake_client("m") end }
  local what, status, _, summary = episode.start(item(function() end), env):resume()
  t.eq(what, "done")
  t.eq(status, "failed")
  t.eq(summary.reason, nil)
  what, status, _, summary = episode.start(item(function() error("the strategy broke") end), env):resume()
  t.eq(what, "done")
  t.eq(status, "error")
  t.ok(summary.reason:find("the strategy broke", 1, true), summary.reason)
  t.eq(stored(db).status, "error")
  db:close()
end)

t.test("interrupt: an episode waiting for a verdict ends interrupted, with what it spent", function()
  local db, run_id = open_store("interrupt")
  local ep = episode.start(item(function(ctx) return CAND, ctx.eval(CAND) end),
    { store = db, run_id = run_id, pool = testing.fake_pool(function() end), args = args(),
      client = function() return fake_client("m") end })
  t.eq(ep:resume(), "eval")
  t.eq(stored(db).status, "running")
  t.eq(ep:interrupt("SIGINT"), true)
  t.eq(ep:interrupt("SIGINT"), false, "once")
  local row = stored(db)
  t.eq(row.status, "interrupted")
  t.ok(row.summary.note:find("interrupted by SIGINT", 1, true), row.summary.note)
  t.eq(ep.status, "interrupted")
  t.raises(function() ep:resume({ status = "correct" }) end, "resumed after it ended")
  db:close()
end)

t.test("a model that refuses the key ends the episode on model_error and says the run should stop", function()
  local db, run_id = open_store("stop")
  local ep = episode.start(item(function(ctx)
    local cand, _, why = ctx.propose({ { role = "user", content = "go" } })
    return cand, ctx.eval(cand, { why = why })
  end), { store = db, run_id = run_id, args = args(), client = function() return fake_client("m") end })
  t.eq(ep:resume(), "chat")
  local what, status = ep:resume(nil, "HTTP 401: bad key", "HTTP_401")
  t.eq(what, "done")
  t.eq(status, "model_error")
  t.eq(ep.stop, "HTTP 401: bad key")
  t.eq(stored(db).status, "model_error")
  db:close()
end)

t.test("a client without start is called in place: nothing is yielded for it", function()
  local db, run_id = open_store("blocking")
  local blocking = {
    config = function() return { provider = "openai", model = "m" } end,
    usage = function() return {} end,
    chat = function() return { content = REPLY_CODE } end,
    chat_many = function(_, list) local r = {} for i = 1, #list do r[i] = { { content = REPLY_CODE } } end return r end,
  }
  local ep = episode.start(item(function(ctx)
    ctx.llm:chat({ { role = "user", content = "x" } })
    ctx.llm:chat_many({ { { role = "user", content = "x" } } })
    return nil, { status = "correct" }
  end), { store = db, run_id = run_id, args = args(), client = function() return blocking end })
  local what, status = ep:resume()
  t.eq(what, "done")
  t.eq(status, "correct")
  db:close()
end)

-- Two episodes through the scheduler, each asking chat_many for two drafts then judging.
local function select_like(ctx)
  local name = ctx.task.name
  local many = ctx.llm:chat_many({ { { role = "user", content = name .. "-1" } }, { { role = "user", content = name .. "-2" } } })
  local cand = require("km.run.prompt").extract(many[1][1].content)
  return cand, ctx.eval(cand)
end

t.test("through km.run.sweep, chat_many yields: both episodes' requests are out before any reply is back", function()
  local db = assert(store.open(DIR .. "/sweep_many.sqlite"))
  local log = {}
  local made = 0
  local t2 = {}
  for k, v in pairs(TASK) do t2[k] = v end
  t2.name = "t_other"
  local res = sweep.run { strategies = { { name = "draft", fn = select_like } }, tasks = { TASK, t2 }, models = { "m" },
    repeats = 1, jobs = 2, store = db, args = args(), fresh = true,
    pool = testing.fake_pool(function() return { status = "correct", feedback = "ok", speedup = 1.5 } end),
    make_client = function(model) made = made + 1 return fake_client(model, log) end }
  db:close()
  t.eq(res.ran, 2)
  t.eq(res.correct, 2)
  t.eq(made, 1, "one client for the model, shared by the episodes")
  t.eq(table.concat(log, ", "), "start m t_other-1, start m t_other-2, start m t_rowsum-1, start m t_rowsum-2, " ..
    "reply m t_other-1, reply m t_other-2, reply m t_rowsum-1, reply m t_rowsum-2")
end)

t.test("ctx.models() is served by the run's client factory: its set-up (--base-url, budgets) holds for every model", function()
  local prices = DIR .. "/prices.json"
  testing.write(prices, '{"a": {"input": 1, "output": 2}, "b": {"input": 3, "output": 4}}')
  local a = args { "--models", "a,b", "--provider", "openai", "--base-url", "http://127.0.0.1:9/v1",
    "--budget-requests", "7", "--prices", prices }
  local asked, got = {}, {}
  local db = assert(store.open(DIR .. "/models.sqlite"))
  local res = sweep.run { strategies = { { name = "models", fn = function(ctx)
      for _, m in ipairs(ctx.models()) do
        local cfg = m:config()
        got[#got + 1] = string.format("%s %s %s", cfg.model, cfg.base_url, cfg.budget.requests)
      end
      return nil, { status = "correct" }
    end } }, tasks = { TASK }, models = { "a" }, repeats = 1, store = db, args = a, fresh = true,
    make_client = function(model, task_name)
      asked[#asked + 1] = tostring(model)
      return assert(setup.setup_client(a, model, task_name))
    end }
  db:close()
  t.eq(res.ran, 1)
  t.eq(table.concat(got, ", "), "a http://127.0.0.1:9/v1 7, b http://127.0.0.1:9/v1 7")
  t.eq(table.concat(asked, " "), "a b", "the episode's own model's client is the one ctx.models() hands back for it")
end)

os.execute("rm -rf " .. DIR)
t.done()
