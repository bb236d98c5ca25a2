-- The sweep overlaps model calls through km.llm's start/poll: four implement episodes
-- against the loopback fake model server, every reply 0.5 s late, run in about the time
-- of one reply. A client without start (blocking chat only) runs them one after another.
local t = require "km.tap"
local testing = require "km.testing"
local sweep = require "km.sweep"
local runner = require "km.runner"
local store = require "km.store"
local json = require "km.json"
local llm = require "km.llm"
local task = require "km.task"

local ROOT = io.popen("readlink -f " .. (arg[0]:match("^(.*)/tests/lua/") or ".")):read("l")

local server, why = testing.fake_llm_server(ROOT)
if not server then t.skip_all(why) end
local DIR = server.dir
local DELAY = 0.5

-- One correct answer for every request (the script's last entry repeats).
local SCRIPT = DIR .. "/answer.json"
do
  local f = assert(io.open(SCRIPT, "w"))
  f:write(json.encode { "Here it is.\n```cuda\n// SPEED=2\nextern \"C\" __global__ void rowsum(const float *x, float *y, int rows, int cols) { }\n```\n" ..
    "```lua\nreturn function(k, io, s) k.rowsum{ grid = s.rows, block = 256 }(io.x, io.y, s.rows, s.cols) end\n```" })
  f:close()
end

-- t_rowsum renamed, its description carrying the directives: implement's only user
-- message is the last user message, where the fake server reads [[delay:...]].
local function make_task(name)
  local d = DIR .. "/" .. name
  os.execute("rm -rf " .. d .. " && cp -r " .. ROOT .. "/tests/tasks/t_rowsum " .. d)
  local src = io.open(d .. "/task.lua"):read("a"):gsub('name = "t_rowsum"', 'name = "' .. name .. '"')
  src = src:gsub('description = "[^"]*"',
    string.format('description = "Sum each row. [[delay:%g]] [[script:%s]]"', DELAY, SCRIPT))
  local f = io.open(d .. "/task.lua", "w"); f:write(src); f:close()
  return assert(task.load(d))
end

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
  local db = assert(store.open(path))
  local fn = assert(loadfile(ROOT .. "/strategies/implement.lua"))()
  local a = assert(runner.parse_args {})
  a.quiet = true
  local made = {}
  local t0 = llm.now()
  local res = sweep.run { strategies = { { name = "implement", fn = fn } }, tasks = TASKS, models = { false },
    repeats = 1, jobs = jobs, store = db, pool = testing.fake_pool(judge), args = a, fresh = true,
    guidance = require("km.guidance").load(ROOT .. "/guidance"),
    make_client = function()
      local c = llm.new { provider = "openai", base_url = server.base, model = "fake-model" }
      made[#made + 1] = c
      return wrap and wrap(c) or c
    end }
  local elapsed = llm.now() - t0
  local eps = db:episodes {}
  local latencies = {}
  for _, e in ipairs(eps) do
    for _, s in ipairs(db:episode(e.id).steps) do
      if s.kind == "model_call" then latencies[#latencies + 1] = s.payload.latency_ms end
    end
  end
  db:close()
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
