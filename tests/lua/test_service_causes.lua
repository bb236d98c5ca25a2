-- Who is at fault (km.serve.backend and km.serve.scheduler): the real km.serve.pool pool over
-- a stand-in GPU worker (testing.standin_worker) that dies, answers `error`, or dies while it
-- sets a task up. A candidate whose judging killed its worker is judged once more on a fresh
-- worker before `crashed` is charged; a worker lost during set-up, or an `error` verdict, is
-- the infrastructure's, with no reward; infra verdicts are never cached. Rewards and their
-- parts come from the verdict's numbers (km.serve.reward).
local t = require "km.tap"
local testing = require "km.testing"
local backend = require "km.serve.backend"
local scheduler = require "km.serve.scheduler"
local reward = require "km.serve.reward"
local metrics = require "km.serve.metrics"

local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local MARK = DIR .. "/died_once"

local WORKER = testing.standin_worker(DIR .. "/worker.lua", [[
  if req.op == "eval" then
    local name = req.candidate.name
    if name == "dies_once" then
      local f = io.open(]] .. string.format("%q", MARK) .. [[, "r")
      if not f then f = io.open(]] .. string.format("%q", MARK) .. [[, "w") f:write("x") f:close() os.exit(9) end
      f:close()
    elseif name == "dies_always" then
      os.exit(9)
    elseif name == "setup_dies" then
      ch:send(json.encode { id = req.id, progress = { stage = "reference", state = "start" } })
      os.exit(9)
    end
    local v = { status = "correct", speedup = 2.5, speedup_eager = 2.5, speedup_over = "pytorch_eager",
      checks = { { ok = true }, { ok = true } }, roofline = { fraction = 0.4 }, feedback = "fine" }
    if name == "error" then v = { status = "error", feedback = "the reference does not build" } end
    ch:send(json.encode { id = req.id, verdict = v })
  end
]])

local entry = { id = "t_rowsum", key = ROOT .. "/tests/tasks/t_rowsum", fingerprint = "f" }
local function item(name, preset)
  return { entry = entry, cand = { name = name, source = "// " .. name, launch = "return function() end", params = {} },
    preset = assert(reward.preset(preset or "fast_p")) }
end

local b = backend.new { gpus = { 0 }, timeout = 20, wrap = { KMRUN, WORKER } }
t.eq(b.kind, "gpu", "the stand-in worker makes a GPU pool")
local m = metrics.new()
local s = scheduler.new { backend = b, metrics = m, identity = "test" }

local function judge(items, o)
  local batch = s:add(items, o)
  local t0 = os.time()
  while not batch.done and os.time() - t0 < 30 do s:step(50) end
  return batch.verdicts
end

t.test("a candidate that killed its worker once: judged again on a fresh worker, its verdict its own", function()
  local v = judge { item("dies_once") }
  t.eq(v[1].status, "correct") t.eq(v[1].cause, "candidate") t.eq(v[1].judgings, 2)
  t.eq(v[1].reward, 1, "fast_p: correct at 2.5x over eager")
end)

t.test("a candidate that kills its worker every time: crashed, charged to it after a second judging", function()
  local v = judge { item("dies_always") }
  t.eq(v[1].status, "crashed") t.eq(v[1].cause, "candidate") t.eq(v[1].retried, 1) t.eq(v[1].judgings, 2)
  t.eq(v[1].reward, 0)
end)

t.test("a worker lost while it set the task up, and an error verdict: infra, no reward, not cached", function()
  local v = judge { item("setup_dies"), item("error") }
  t.eq(v[1].cause, "infra") t.eq(v[1].reward, nil)
  t.ok(v[1].cause_detail:find("reference", 1, true), v[1].cause_detail)
  t.eq(v[2].cause, "infra") t.eq(v[2].reward, nil)
  t.ok(v[2].cause_detail:find("does not build", 1, true), v[2].cause_detail)
  local again = judge { item("error") }
  t.eq(again[1].cached, nil, "an infra verdict is never cached")
  t.eq(m:get("kmrun_verdicts_total", { status = "error", cause = "infra" }), 2)
end)

t.test("rewards: each preset's formula over the parts", function()
  local v = judge({ item("ok", "correct_speedup"), item("ok", { preset = "fast_p", p = 3 }),
    item("ok", { preset = "weighted", cap = 5 }) })
  t.eq(v[1].reward_components.checks_passed, 2) t.eq(v[1].reward_components.checks_total, 2)
  t.eq(v[1].reward_components.roofline, 0.4) t.eq(v[1].reward_components.speedup_eager, 2.5)
  t.near(v[1].reward, 0.3 + 2.5, 1e-12, "0.3 * correct + min(speedup, 10)")
  t.eq(v[2].reward, 0, "fast_p at p = 3: 2.5x is not enough")
  t.near(v[3].reward, 0.1 + 0.3 + 0.6 * 2.5 / 5, 1e-12, "weighted")
  t.eq(v[2].shared or v[3].shared, true, "one content id: judged once for the three")
  local p, why = reward.preset("nope")
  t.eq(p, nil) t.ok(why:find("fast_p", 1, true), why)
  local c = reward.components { status = "mismatch", checks = { { ok = true }, { ok = false } } }
  t.eq(c.compiled, 1) t.eq(c.correct, 0) t.eq(c.checks_passed, 1) t.eq(c.speedup, nil)
end)

b:close()
testing.sh("rm -rf '" .. DIR .. "'")
t.done()
