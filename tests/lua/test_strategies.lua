-- Every strategy, driven by the loopback fake model server against a fake evaluator:
-- the repair loop (a buggy first answer, a fixed second one; the feedback reached the
-- second prompt; the trajectory holds every turn; the export parses), implement, optimize,
-- tune, select, agent (tool calls), repair_then_tune, offline runs, and bad model input.
local t = require "km.tap"
local testing = require "km.testing"
local runner = require "km.run.runner"
local store = require "km.store"
local json = require "km.json"
local task = require "km.task"

local server, ROOT, KMRUN = testing.fake_llm_server_or_skip(t)
local DIR = server.dir
local CLIENT = { provider = "openai", base_url = server.base, model = "fake-model" }

-- A test task: t_rowsum with a description that names a reply script for the fake model
-- (and any other directives for the server).
local function make_task(...) return assert(task.load(server:task(...))) end
local function write_script(name, entries) return server:script(name, entries) end

-- A candidate as the model would write it. SPEED sets the fake evaluator's speedup; BUG
-- makes it a mismatch.
local function answer(tag, speed, bug)
  return string.format("Here is %s.\n```cuda\n#ifndef BLOCK\n#define BLOCK 256\n#endif\n" ..
    "// SPEED=%s %s\nextern \"C\" __global__ void rowsum(const float *x, float *y, int rows, int cols) { }\n```\n" ..
    "```lua\nreturn function(k, io, s) k.rowsum{ grid = s.rows, block = k.params.BLOCK or 256 }(io.x, io.y, s.rows, s.cols) end\n```",
    tag, speed or 1, bug and "BUG" or "")
end

-- The fake evaluator: BUG -> mismatch; otherwise correct, timed by SPEED and BLOCK.
local function judge(tk, cand, opts)
  if not cand.source:find("rowsum", 1, true) then return { status = "compile_error", feedback = "no rowsum kernel" } end
  if cand.source:find("BUG", 1, true) then
    return { status = "mismatch", feedback = "'y' differs from the reference: y[3] got 1.5, want 2.5 (fake evaluator)" }
  end
  local speed = tonumber(cand.source:match("SPEED=([%d%.]+)")) or 1
  local block = tonumber((cand.params or {}).BLOCK) or 256
  speed = speed * (block == 512 and 1.5 or 1)
  local med = 1.0 / speed
  return { status = "correct", feedback = "correct (fake)", speedup = speed, roofline = { fraction = 0.5, bound_ms = 0.4 },
    timing = { candidate = { median = med, p25 = med, p75 = med }, reference = { median = 1.0 } } }
end

-- Runs one strategy file over the given tasks with a fresh store; returns the store path,
-- the sweep result and what the run said on stderr (a stop's one line, kept for the test).
local function run(strategy_file, tasks, args, client_cfg)
  local path = DIR .. "/" .. strategy_file:gsub("%W", "_") .. os.time() .. math.random(1e6) .. ".sqlite"
  local res, err = testing.sweep { strategy = strategy_file:gsub("%.lua$", ""), tasks = tasks, store = path, argv = args,
    args = { quiet = true }, judge = judge, client = client_cfg or CLIENT, guidance = true, fresh = true,
    capture = "stderr" }
  return path, res, err
end

local function episode(path)
  local eps = testing.episodes(path)
  local ep = eps[#eps]
  local kinds = {}
  for _, s in ipairs(ep.steps) do kinds[s.kind] = (kinds[s.kind] or 0) + 1 end
  return ep, kinds
end

t.test("repair: a buggy first answer, feedback, a fixed second one; trajectory and export", function()
  local tk = make_task("t_repair", write_script("repair", { answer("a first try", 1, true), answer("the fix", 2) }))
  local path, res = run("repair.lua", { tk })
  t.eq(res.correct, 1)
  local ep, kinds = episode(path)
  t.eq(ep.status, "correct")
  t.eq(kinds.model_call, 2)
  t.eq(kinds.candidate, 2)
  t.eq(kinds.verdict, 2)
  t.ok((kinds.guidance or 0) >= 1, "guidance recorded")
  -- the second prompt carried the verdict, its feedback and guidance
  local second = nil
  for _, s in ipairs(ep.steps) do if s.kind == "model_call" then second = s end end
  local msgs = second.payload.messages
  t.eq(msgs[#msgs - 1].role, "assistant")
  t.ok(msgs[#msgs - 1].content:find("a first try", 1, true))
  t.ok(msgs[#msgs].content:find("Verdict: mismatch", 1, true), msgs[#msgs].content)
  t.ok(msgs[#msgs].content:find("got 1.5, want 2.5", 1, true))
  t.ok(msgs[#msgs].content:find("## Guidance", 1, true))
  -- what the server received matches
  local reqs = server.requests()
  local last = reqs[#reqs].body.messages
  t.ok(last[#last].content:find("Verdict: mismatch", 1, true))
  -- usage and latency recorded per call
  t.ok(second.payload.usage.prompt_tokens > 0 and second.payload.latency_ms >= 0)
  t.eq(ep.summary.rounds_to_correct, 2)
  t.eq(ep.summary.failure_modes.mismatch, 1)
  -- the exports parse: sft holds every turn, direct the prompt and the final answer
  local p = io.popen(KMRUN .. " export " .. path .. " --format sft --verified 2>/dev/null")
  local line = p:read("l"); p:close()
  local sft = assert(json.decode(line))
  t.eq(#sft.messages, 5) -- system, user, assistant (buggy), user (feedback), assistant (fix)
  t.eq(sft.messages[5].role, "assistant")
  t.ok(sft.messages[5].content:find("the fix", 1, true))
  p = io.popen(KMRUN .. " export " .. path .. " --format direct 2>/dev/null")
  local direct = assert(json.decode(p:read("l"))); p:close()
  t.eq(#direct.messages, 3)
  t.ok(direct.messages[3].content:find("SPEED=2", 1, true))
end)

-- strategies/repair.lua and km.run.steps.repair (the loop optimize and repair_then_tune run)
-- stop by one rule: driven round by round by the same script, with a first verdict of every
-- status in km.statuses, online and offline, they ask the model as often, send the same
-- conversation and end on the same candidate and verdict. A status that stops (correct;
-- compiled, where there is no GPU) ends the loop with its candidate, a fatal one without.
t.test("repair.lua and km.run.steps.repair stop by one rule: every status, online and offline", function()
  local statuses, steps, prompt = require "km.statuses", require "km.run.steps", require "km.run.prompt"
  local repair = assert(loadfile(ROOT .. "/strategies/repair.lua"))()
  local tk = assert(task.load(ROOT .. "/tests/tasks/t_rowsum"))
  -- round 1 is judged `first` (a model-stage status: no candidate), later rounds mismatch
  local function scripted(first, offline)
    local ctx = { task = tk, offline = offline, args = { rounds = 3, forms = { "description" } }, sent = {},
      guidance = { for_verdict = function() return {} end } }
    function ctx.propose(messages)
      ctx.sent[#ctx.sent + 1] = json.encode(messages)
      local n = #ctx.sent
      if n == 1 and statuses.get(first).stage == "model" then return nil, "reply 1", "no candidate (scripted)" end
      return { name = "c" .. n, source = "", launch = "" }, "reply " .. n
    end
    function ctx.eval() return { status = #ctx.sent == 1 and first or "mismatch", feedback = "scripted" } end
    return ctx
  end
  for _, row in ipairs(statuses.ROWS) do
    for _, offline in ipairs { false, true } do
      local what = row.name .. (offline and " (offline)" or "")
      local a, b = scripted(row.name, offline), scripted(row.name, offline)
      local ca, va = repair(a)
      local cb, vb = steps.repair(b, prompt.implement(tk, { forms = b.args.forms }), b.args.rounds)
      t.eq(#a.sent, #b.sent, what .. ": rounds")
      t.eq(table.concat(a.sent, "\n"), table.concat(b.sent, "\n"), what .. ": the same conversation")
      t.eq(ca and ca.name, cb and cb.name, what .. ": the candidate")
      t.eq(va.status, vb.status, what .. ": the verdict")
      local stops = row.fatal or row.stops or offline
      t.eq(#a.sent, stops and 1 or 3, what .. ": " .. (stops and "stops at round 1" or "goes on to the last round"))
      if row.fatal then t.eq(ca, nil, what .. ": no candidate") end
    end
  end
  -- the case that once differed: a compile-only verdict (a run with no GPU) online
  local a = scripted("compiled", false)
  local ca, va = repair(a)
  t.eq(#a.sent, 1, "compiled stops the repair strategy")
  t.eq(ca.name, "c1"); t.eq(va.status, "compiled")
end)

t.test("replay: an episode's model turns play back from its store, with no server", function()
  local tk = make_task("t_replay", write_script("replay", { answer("first", 1, true), answer("second", 2) }))
  local path = run("repair.lua", { tk })
  local n_before = #server.requests()
  local argv = { "--replay", path }
  local a = assert(runner.parse_args(argv))
  local replayed_path = DIR .. "/replayed.sqlite"
  local res = testing.sweep { strategy = "repair", tasks = { tk }, store = replayed_path, argv = argv, judge = judge,
    fresh = true, replay = true, make_client = function(model, task_name) return assert(runner.setup_client(a, model, task_name)) end }
  t.eq(res.correct, 1)
  t.eq(#server.requests(), n_before, "the server was not asked")
  local orig, replayed = episode(path), episode(replayed_path)
  local function cands(ep)
    local list = {}
    for _, s in ipairs(ep.steps) do if s.kind == "candidate" then list[#list + 1] = s.payload.source end end
    return list
  end
  local a1, b1 = cands(orig), cands(replayed)
  t.eq(#b1, #a1)
  for i = 1, #a1 do t.eq(b1[i], a1[i], "candidate " .. i) end
end)

t.test("a price table turns tokens into dollars", function()
  testing.write(DIR .. "/prices.json", '{"fake-model": {"input": 1000000, "output": 2000000}}')
  local a = assert(runner.parse_args { "--prices", DIR .. "/prices.json", "--model", "fake-model", "--base-url", server.base, "--provider", "openai" })
  local c = assert(runner.setup_client(a))
  local reply = assert(c:chat({ { role = "user", content = "three words here" } }))
  t.ok(reply.dollars > 0, tostring(reply.dollars))
  t.eq(reply.dollars, reply.usage.prompt_tokens * 1 + reply.usage.completion_tokens * 2)
end)

t.test("implement: one call, one verdict", function()
  local tk = make_task("t_impl", write_script("impl", { answer("one shot", 1.2) }))
  local path, res = run("implement.lua", { tk })
  t.eq(res.correct, 1)
  local _, kinds = episode(path)
  t.eq(kinds.model_call, 1)
  t.eq(kinds.verdict, 1)
end)

t.test("a KernelBench problem file through a strategy: the prompt is its PyTorch program and io's names", function()
  local kb = require "km.task.kernelbench"
  local okk, kwhy = kb.available()
  if not okk then t.skip("PyTorch not available: " .. tostring(kwhy)) return end
  local script = write_script("kb_impl", { answer("for the problem", 1.1) })
  local path = testing.problem(DIR, "linear_relu", { before = "# [[script:" .. script .. "]]", args = "k",
    init = "self.fc = nn.Linear(k, 4)", forward = "x, scale: float", returns = "torch.relu(self.fc(x) * scale)",
    sizes = "", inputs = "torch.rand(2, 8), 0.5", init_inputs = "8" })
  local tk = assert(task.load(path))
  local store_path, res = run("implement.lua", { tk })
  t.eq(res.ran, 1)
  local ep, kinds = episode(store_path)
  t.eq(kinds.model_call, 1, json.encode(kinds))
  t.ok(ep.status ~= "error", ep.status)
  local prompt
  for _, s in ipairs(ep.steps) do
    if s.kind == "model_call" then prompt = json.encode(s.payload) end
  end
  for _, want in ipairs { "```python", "class Model(nn.Module)", "parameter `fc_weight`: f32[4, 8]",
    "(the model's `fc.weight`)", "output `out`: f32[2, 4]", "its number inputs are `s.scale`" } do
    t.ok(prompt and prompt:find(want, 1, true), want .. " in the prompt")
  end
  -- named on the command line, a problem file is a task; offline it has no starter to fall
  -- back on, so the run is refused up front (tests/lua/test_problem_files_run.lua)
  local p = io.popen("cd " .. DIR .. " && " .. KMRUN .. " implement " .. path .. " --provider offline 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  t.ok(out:find("(linear_relu): every episode could only end no_code, so nothing is run", 1, true), out)
  t.ok(out:find("rc=2%s*$"), out)
end)

t.test("optimize: keeps the fastest correct version", function()
  local tk = make_task("t_opt", write_script("opt", { answer("v1", 1), answer("v2", 3), answer("v3 slower", 2), answer("v4 broken", 9, true) }))
  local path = run("optimize.lua", { tk }, { "--rounds", "3" })
  local ep = episode(path)
  t.eq(ep.status, "correct")
  t.eq(ep.final.verdict.speedup, 3)
  t.ok(ep.final.candidate.source:find("SPEED=3", 1, true))
end)

t.test("tune: searches the starter's parameters and re-measures the pick", function()
  local tk = make_task("t_tune", write_script("tune", { "unused" }))
  local path = run("tune.lua", { tk }, { "--method", "exhaustive" }, { provider = "offline" })
  local ep, kinds = episode(path)
  t.eq(ep.final.candidate.params.BLOCK, 512)
  t.eq(ep.final.verdict.speedup, 1.5)
  t.ok(kinds.verdict >= 6, "one per point plus the final pair") -- 1 + 5 points (duplicate skipped) + 2
end)

t.test("select: best of N drawn in parallel", function()
  local tk = make_task("t_sel", write_script("sel", { answer("a", 1.1), answer("b", 2.5), answer("c", 1.7), answer("d", 9, true) }))
  local path = run("select.lua", { tk }, { "--samples", "4" })
  local ep, kinds = episode(path)
  t.eq(kinds.model_call, 4)
  t.eq(ep.final.verdict.speedup, 2.5)
end)

t.test("agent: the model drives through tool calls and submits", function()
  local code = { kernel_cu = "// SPEED=2\nextern \"C\" __global__ void rowsum(const float *x, float *y, int rows, int cols) { }",
    launch_lua = "return function(k, io, s) k.rowsum{ grid = s.rows, block = 256 }(io.x, io.y, s.rows, s.cols) end" }
  local bug = { kernel_cu = code.kernel_cu .. " // BUG", launch_lua = code.launch_lua }
  local tk = make_task("t_agent", write_script("agent", {
    { tools = { { "read_guidance", { topic = "warp reduction" } } } },
    { tools = { { "run_tests", bug } } },
    { tools = { { "benchmark", code } } },
    { tools = { { "submit", code } } },
  }))
  local path = run("agent.lua", { tk })
  local ep, kinds = episode(path)
  t.eq(ep.status, "correct")
  t.eq(kinds.tool_call, 4)
  t.eq(kinds.tool_result, 4)
  local results = {}
  for _, s in ipairs(ep.steps) do if s.kind == "tool_result" then results[#results + 1] = s.payload.result end end
  t.ok(results[1]:find("## Guidance", 1, true), results[1])
  t.ok(results[2]:find("Verdict: mismatch", 1, true), results[2])
  t.ok(results[4]:find("Verdict: correct", 1, true), results[4])
  -- the sft export keeps the tool calls and results
  local p = io.popen(KMRUN .. " export " .. path .. " --format sft 2>/dev/null")
  local sft = assert(json.decode(p:read("l"))); p:close()
  local tool_msgs, calls = 0, 0
  for _, m in ipairs(sft.messages) do
    if m.role == "tool" then tool_msgs = tool_msgs + 1 end
    if m.tool_calls then calls = calls + #m.tool_calls; t.eq(m.tool_calls[1].type, "function") end
  end
  t.eq(tool_msgs, 3)
  t.eq(calls, 4)
  t.ok(sft.tools and #sft.tools == 5, "the tool schemas travel with the example")
end)

t.test("repair_then_tune: repair, then tune the repaired kernel's parameters", function()
  local tk = make_task("t_rtt", write_script("rtt", { answer("buggy", 1, true), answer("fixed", 2) }))
  local path = run("repair_then_tune.lua", { tk }, { "--method", "exhaustive", "--tune-budget", "8" })
  local ep = episode(path)
  t.eq(ep.status, "correct")
  t.eq(ep.final.candidate.params.BLOCK, 512)
  t.eq(ep.final.verdict.speedup, 3)
end)

t.test("offline: strategies fall back to the starter and say so", function()
  local tk = make_task("t_off", write_script("off", { "unused" }))
  local path = run("repair_then_tune.lua", { tk }, {}, { provider = "offline" })
  local ep, kinds = episode(path)
  for _, s in ipairs(ep.steps) do if s.payload.error then t.diag(s.payload.error) end end
  t.eq(ep.status, "correct")
  t.eq(kinds.model_call, nil)
  local noted = false
  for _, s in ipairs(ep.steps) do
    if s.kind == "note" and tostring(s.payload.text):find("offline", 1, true) then noted = true end
  end
  t.ok(noted, "the offline fallback is recorded")
end)

t.test("a reply without code gets a precise message back, recorded", function()
  local tk = make_task("t_nocode", write_script("nocode", { "I would use shared memory.", answer("now with code", 1.5) }))
  local path = run("repair.lua", { tk })
  local ep, kinds = episode(path)
  t.eq(ep.status, "correct")
  t.eq(kinds.model_call, 2)
  local v1
  for _, s in ipairs(ep.steps) do if s.kind == "verdict" then v1 = v1 or s.payload end end
  t.eq(v1.status, "no_code")
  t.ok(v1.feedback:find("no ```cuda code block", 1, true), v1.feedback)
end)

t.test("an unreachable server stops the run cleanly, keeping what was done", function()
  local a = make_task("t_down_a", write_script("down", { "x" }))
  local b = make_task("t_down_b", write_script("down2", { "x" }))
  local path, res, err = run("repair.lua", { a, b }, { "--jobs", "1" },
    { provider = "openai", base_url = "http://127.0.0.1:9/v1", model = "m", connect_timeout = 2, max_retries = 0 })
  t.ok(err:find("^kmrun: stopping: cannot connect to http://127.0.0.1:9/"), "one line says why: " .. err)
  t.ok(res.stopped and res.stopped:find("CONNECT", 1, true) or res.stopped:find("connect", 1, true), tostring(res.stopped))
  t.eq(res.ran, 1, "no new episode starts after the stop")
  local db = assert(store.open(path, { readonly = true }))
  local eps = db:episodes {}
  t.eq(#eps, 1)
  t.eq(eps[1].status, "model_error")
  t.eq(eps[1].summary.model_error.code, "CONNECT")
  t.eq(eps[1].summary.status, "model_error")
  t.eq(eps[1].summary.failure_modes.model_error, 1)
  db:close()
end)

t.test("a wrong key gives one clear line and a clean stop", function()
  local tk = make_task("t_key", write_script("key", { "x" }))
  local _, res = run("repair.lua", { tk }, {}, { provider = "openai", base_url = server.base, model = "m", api_key = "sk-wrong" })
  -- the fake server checks keys only when asked: ask for it through the description
  t.ok(res.ran == 1)
  local tk2 = make_task("t_key2", write_script("key2", { "x" }), " [[auth]]")
  local path2, res2, err2 = run("repair.lua", { tk2 }, {},
    { provider = "openai", base_url = server.base, model = "m", api_key = "sk-wrong-key-123" })
  t.ok(err2:find("kmrun: stopping: HTTP 401", 1, true) and not err2:find("sk-wrong-key-123", 1, true), err2)
  t.ok(res2.stopped and res2.stopped:find("HTTP 401", 1, true), tostring(res2.stopped))
  t.ok(not res2.stopped:find("sk-wrong-key-123", 1, true), "the key never appears")
  local db = assert(store.open(path2, { readonly = true }))
  local ep = db:episode(db:episodes {}[1].id)
  db:close()
  t.ok(not json.encode(ep):find("sk-wrong-key-123", 1, true), "nor in the trajectory")
end)

server.stop()
t.done()
