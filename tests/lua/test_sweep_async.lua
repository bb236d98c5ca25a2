-- The sweep overlaps model calls through km.llm's start/poll: four implement episodes
-- against the loopback fake model server, every reply 0.5 s late, run in about the time
-- of one reply. A client without start (blocking chat only) runs them one after another.
local t = require "km.tap"
local testing = require "km.testing"
local llm = require "km.llm"
local task = require "km.task"

local server = testing.fake_llm_server_or_skip(t)
local DIR = server.dir
local DELAY = 0.5

-- One correct answer for every request (the script's last entry repeats).
local SCRIPT = server:script("answer", { "Here it is.\n```cuda\n// SPEED=2\n" ..
  "extern \"C\" __global__ void rowsum(const float *x, float *y, int rows, int cols) { }\n```\n" ..
  "```lua\nreturn function(k, io, s) k.rowsum{ grid = s.rows, block = 256 }(io.x, io.y, s.rows, s.cols) end\n```" })

-- t_rowsum renamed, its description carrying the directives: implement's only user
-- message is the last user message, where the fake server reads [[delay:...]].
local function make_task(name) return assert(task.load(server:task(name, SCRIPT, (" [[delay:%g]]"):format(DELAY)))) end

local TASKS = {}
for i = 1, 4 do TASKS[i] = make_task("t_async_" .. i) end

local function judge(_, cand)
  if not (cand.source or ""):find("rowsum", 1, true) then return { status = "compile_error", feedback = "no rowsum" } end
  return { status = "correct", feedback = "correct (fake)", speedup = 2,
    timing = { candidate = { median = 0.5, p25 = 0.5, p75 = 0.5 }, reference = { median = 1.0 } } }
end

-- Runs implement over the four tasks; wrap(client) may hide parts of the client.
local function run(jobs, wrap)
  local path = DIR .. "/sweep_" .. jobs .. "_" .. (wrap and "wrapped" or "plain") .. ".sqlite"
  local made = {}
  local t0 = llm.now()
  local res = testing.sweep { strategy = "implement", tasks = TASKS, store = path, args = { quiet = true }, jobs = jobs,
    judge = judge, guidance = true, fresh = true,
    make_client = function()
      local c = llm.new { provider = "openai", base_url = server.base, model = "fake-model" }
      made[#made + 1] = c
      return wrap and wrap(c) or c
    end }
  local elapsed = llm.now() - t0
  local latencies = {}
  for _, ep in ipairs(testing.episodes(path)) do
    for _, s in ipairs(ep.steps) do
      if s.kind == "model_call" then latencies[#latencies + 1] = s.payload.latency_ms end
    end
  end
  return res, elapsed, latencies, made
end

t.test("4 implement episodes with 0.5 s replies overlap through start/poll (jobs = 4)", function()
  local res, elapsed, latencies, made = run(4)
  t.eq(res.ran, 4)
  t.eq(res.correct, 4)
  t.eq(res.stopped, nil)
  local used = {}
  for _, c in ipairs(made) do if c:usage().requests > 0 then used[#used + 1] = c end end
  t.eq(#used, 1, "one client sent the requests")
  t.eq(used[1]:usage().requests, 4)
  t.eq(used[1]:pending(), 0, "every request was polled back")
  t.eq(#latencies, 4)
  for _, ms in ipairs(latencies) do t.ok(ms >= DELAY * 1000 - 10, "each reply took the delay: " .. ms .. " ms") end
  t.note(string.format("4 episodes x %.1f s model reply: %.2f s wall", DELAY, elapsed))
  t.ok(elapsed < 2 * DELAY, "overlapped: " .. elapsed .. " s, serial would be " .. 4 * DELAY .. " s")
end)

t.test("control: a client without start runs the same episodes one after another", function()
  -- only chat, usage and config: the sweep's blocking path
  local function blocking(c)
    return {
      chat = function(_, m, o) return c:chat(m, o) end,
      chat_many = function(_, l, o) return c:chat_many(l, o) end,
      usage = function() return c:usage() end,
      config = function() return c:config() end,
    }
  end
  local res, elapsed = run(4, blocking)
  t.eq(res.correct, 4)
  t.note(string.format("without start/poll: %.2f s wall", elapsed))
  t.ok(elapsed >= 4 * DELAY, "serial: " .. elapsed .. " s")
end)

server.stop()
t.done()
