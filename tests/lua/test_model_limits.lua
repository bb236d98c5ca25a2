-- The agent layer against a model server with real limits (tests/fake_llm_server.py with a
-- context window): every request kept within the window (km.run.context), limits sent, replies
-- cut off at max_tokens named as such, exact per-episode accounting while episodes run at
-- once, one label for model errors in every strategy, tool_choice and strict tool
-- arguments, Ctrl-C and exit statuses of kmrun itself.
local t = require "km.tap"
local testing = require "km.testing"
local runner = require "km.run.runner"
local store = require "km.store"
local json = require "km.json"
local llm = require "km.llm"
local task = require "km.task"
local context = require "km.run.context"

local CONTEXT = 1500 -- the fake server's window, in its tokens (words)
local server, ROOT, KMRUN = testing.fake_llm_server_or_skip(t, { context = CONTEXT })
local DIR = server.dir
local CLIENT = { provider = "openai", base_url = server.base, model = "fake-model" }

-- t_rowsum naming its reply script (and other directives: extra) for the fake model
local function make_task(name, script, extra) return assert(task.load(server:task(name, script, extra))) end
local function write_script(name, entries) return server:script(name, entries) end

local function answer(tag, bug)
  return string.format("Here is %s.\n```cuda\n// %s\nextern \"C\" __global__ void rowsum(const float *x, float *y, int rows, int cols) { }\n```\n" ..
    "```lua\nreturn function(k, io, s) k.rowsum{ grid = s.rows, block = 256 }(io.x, io.y, s.rows, s.cols) end\n```",
    tag, bug and "BUG" or "")
end

local function judge(_, cand)
  if cand.source:find("BUG", 1, true) then return { status = "mismatch", feedback = "'y' differs (fake evaluator)" } end
  return { status = "correct", feedback = "correct (fake)", speedup = 1,
    timing = { candidate = { median = 1, p25 = 1, p75 = 1 }, reference = { median = 1 } } }
end

local function run(strategy_file, tasks, args, client_cfg, repeats)
  local path = DIR .. "/" .. strategy_file:gsub("%W", "_") .. os.time() .. math.random(1e6) .. ".sqlite"
  local function quiet(a)
    a.quiet = true
    a.context = a.context or CONTEXT -- what kmrun's setup reads from the server's model list
  end
  local res = testing.sweep { strategy = strategy_file:gsub("%.lua$", ""), tasks = tasks, store = path, argv = args,
    args = quiet, repeats = repeats, judge = judge, client = client_cfg or CLIENT, guidance = true, fresh = true }
  return path, res
end

local episodes = testing.episodes

local function steps_of(ep, kind)
  local out = {}
  for _, s in ipairs(ep.steps) do if s.kind == kind then out[#out + 1] = s end end
  return out
end

local function words(s) local n = 0 for _ in tostring(s or ""):gmatch("%S+") do n = n + 1 end return n end

----------------------------------------------------------------------------------------
-- km.run.context on its own

t.test("context: fits, drops older rounds with a note, keeps spec, latest candidate and verdict", function()
  local b = context.new { size = 2000 }
  local msgs = { { role = "system", content = "sys" }, { role = "user", content = "the task spec" } }
  local s, room = b:fit(msgs, { max_tokens = 500 })
  t.eq(s, msgs, "a small request goes as it is")
  t.eq(room, 500)
  local code = "```cuda\nextern \"C\" __global__ void k() {}\n```"
  msgs[#msgs + 1] = { role = "assistant", content = "first try " .. code }
  msgs[#msgs + 1] = { role = "user", content = "Verdict: mismatch.\n" .. string.rep("x", 1500) }
  for i = 1, 4 do
    msgs[#msgs + 1] = { role = "assistant", content = "no code here " .. i .. string.rep(" blah", 300) }
    msgs[#msgs + 1] = { role = "user", content = "Verdict: no_code.\nround " .. i }
  end
  local sent, r2, info = b:fit(msgs, { max_tokens = 500 })
  t.ok(sent, tostring(r2))
  t.ok(info.dropped >= 1, "older rounds dropped")
  t.ok(b:estimate(sent) + r2 <= 2000, "within the window")
  t.eq(sent[1].content, "sys")
  t.ok(sent[2].content:find("the task spec", 1, true) and sent[2].content:find("Earlier replies", 1, true), sent[2].content)
  t.eq(sent[#sent].content, "Verdict: no_code.\nround 4", "the latest verdict stays")
  local kept_candidate = false
  for _, m in ipairs(sent) do if m.role == "assistant" and m.content:find("__global__", 1, true) then kept_candidate = true end end
  t.ok(kept_candidate, "the latest candidate stays")
  t.eq(#msgs, 12, "the strategy's own list is left alone")
  -- hopeless: the spec alone is larger than the window
  local huge = { { role = "user", content = string.rep("word ", 20000) } }
  local none, msg, code2 = b:fit(huge, { max_tokens = 100 })
  t.eq(none, nil)
  t.eq(code2, "CONTEXT_OVERFLOW")
  t.ok(msg:find("2000", 1, true), msg)
end)

t.test("context: learns tokens per character from usage; the size from a model list", function()
  local b = context.new { size = 8192 }
  local msgs = { { role = "user", content = string.rep("abcd ", 400) } }
  local guess = b:estimate(msgs)
  b:observe(msgs, 410)
  t.ok(b:estimate(msgs) < guess, "a cheaper tokenizer than the guess is learned")
  t.ok(b:estimate(msgs) >= 410, "never below what the server counted")
  t.eq(context.size_from_models({ data = { { id = "m", max_model_len = 4096 } } }, "m"), 4096)
  t.eq(context.size_from_models({ data = { { id = "x", meta = { n_ctx_train = 2048 } } } }, "m"), 2048)
  t.eq(context.size_from_models({ data = { { id = "a" }, { id = "b" } } }, "m"), nil)
  local c = llm.new { provider = "openai", base_url = server.base, model = "fake-model" }
  t.eq(context.size_from_models(assert(c:models()), "fake-model"), CONTEXT)
  local down = llm.new { provider = "openai", base_url = "http://127.0.0.1:9/v1", connect_timeout = 2 }
  local none, _, code = down:models()
  t.eq(none, nil)
  t.eq(code, "CONNECT")
end)

----------------------------------------------------------------------------------------
-- strategies against a window

t.test("a long repair episode never passes the window: no 400, older rounds summarised", function()
  local entries = {}
  for i = 1, 7 do entries[i] = { reply = "thinking " .. i, filler = 250 } end -- long replies, no code
  entries[8] = answer("finally")
  local tk = make_task("t_window", write_script("window", entries))
  local path = run("repair.lua", { tk }, { "--rounds", "8", "--context", tostring(CONTEXT), "--max-tokens", "300" })
  local ep = episodes(path)[1]
  local calls = steps_of(ep, "model_call")
  t.eq(#calls, 8)
  local dropped = 0
  for i, s in ipairs(calls) do
    t.ok(not s.payload.error, "call " .. i .. ": " .. tostring(s.payload.error))
    local prompt_words = s.payload.usage and s.payload.usage.prompt_tokens or 0
    t.ok(prompt_words + s.payload.opts.max_tokens <= CONTEXT, "call " .. i .. " within the window")
    dropped = dropped + ((s.payload.context or {}).dropped or 0)
  end
  t.ok(dropped > 0, "older rounds were left out")
  t.eq(ep.status, "correct")
  -- what each round adds is bounded: a reply without code is kept short
  local last = calls[#calls].payload.messages
  for _, m in ipairs(last) do
    if m.role == "assistant" then t.ok(#m.content <= 1700, "a no-code reply is kept short: " .. #m.content) end
  end
  -- the export still knows which call each shortened turn came from: no-code turns weigh 0
  local p = io.popen(KMRUN .. " export " .. path .. " --format sft --weights 2>/dev/null")
  local line = p:read("l"); p:close()
  local sft = assert(json.decode(line))
  local zero, one = 0, 0
  for _, m in ipairs(sft.messages) do
    if m.role == "assistant" then
      if m.weight == 0 then zero = zero + 1 else one = one + 1 end
      t.eq(m.km_call, nil, "no kmrun field in the example")
    end
  end
  t.ok(zero >= 1 and one == 1, string.format("weights: %d zero, %d one", zero, one))
end)

t.test("the server's context_length_exceeded: recorded, the estimate tightened, sent again", function()
  local model = require "km.run.model"
  local b = model.budget_for({ url = server.base .. "/chat/completions", model = "fake-model" }, CONTEXT)
  local saved_ratio, saved_seen = b.ratio, b.seen
  b.ratio, b.seen = 0.05, 1 -- as if the model's tokenizer were far cheaper than it is
  local tk = make_task("t_overflow", write_script("overflow", { answer("fits") }))
  local path = run("implement.lua", { tk })
  b.ratio, b.seen = math.max(saved_ratio or 0, b.ratio), math.max(saved_seen, b.seen)
  local ep = episodes(path)[1]
  local calls = steps_of(ep, "model_call")
  t.ok(#calls >= 2, "the 400 and the request sent again: " .. #calls)
  t.eq(calls[1].payload.code, "HTTP_400")
  t.ok(calls[#calls].payload.reply, "the last one went through")
  t.eq(ep.status, "correct")
  t.eq(ep.summary.requests, #calls)
  t.eq(ep.summary.model_errors[1].code, "HTTP_400", "the 400s are counted, not hidden")
end)

t.test("limits are sent; a reply cut off at max_tokens is named as such and counted", function()
  local tk = make_task("t_cut", write_script("cut", { { reply = "```cuda\nextern", filler = 400 }, answer("short") }))
  local m0 = #server.requests()
  local path = run("repair.lua", { tk }, { "--max-tokens", "120", "--temperature", "0.5" })
  local reqs = server.requests()
  t.eq(reqs[m0 + 1].body.max_tokens, 120)
  t.eq(reqs[m0 + 1].body.temperature, 0.5)
  local ep = episodes(path)[1]
  local v1 = steps_of(ep, "verdict")[1].payload
  t.eq(v1.status, "truncated")
  t.ok(v1.feedback:find("cut off", 1, true), v1.feedback)
  local second = reqs[m0 + 2].body.messages
  t.ok(second[#second].content:find("cut off", 1, true), "the model is told its reply was cut off")
  t.eq(ep.summary.truncated, 1)
  t.eq(ep.summary.failure_modes.truncated, 1)
  t.eq(ep.status, "correct")
end)

t.test("strategy defaults: temperature 0.2, max_tokens 4096 unless the strategy says otherwise", function()
  local tk = make_task("t_defaults", write_script("defaults", { answer("one") }))
  local m0 = #server.requests()
  run("implement.lua", { tk })
  local body = server.requests()[m0 + 1].body
  t.eq(body.temperature, 0.2)
  t.ok(body.max_tokens <= 4096 and body.max_tokens > 0, tostring(body.max_tokens))
end)

t.test("exact accounting: concurrent episodes sum their own requests to the server's totals", function()
  local tasks = {}
  for i = 1, 4 do
    tasks[i] = make_task("t_acct" .. i, write_script("acct" .. i, { answer("try " .. i, true), "no code " .. i, answer("fixed " .. i) }))
  end
  local u0 = #server.usage()
  local path = run("repair.lua", tasks, { "--jobs", "4" })
  local served = server.usage()
  local want = { prompt = 0, completion = 0, n = 0 }
  for i = u0 + 1, #served do
    want.prompt = want.prompt + served[i].prompt_tokens
    want.completion = want.completion + served[i].completion_tokens
    want.n = want.n + 1
  end
  local got = { prompt = 0, completion = 0, n = 0 }
  for _, ep in ipairs(episodes(path)) do
    got.prompt = got.prompt + ep.summary.tokens.prompt
    got.completion = got.completion + ep.summary.tokens.completion
    got.n = got.n + ep.summary.requests
    t.eq(ep.summary.requests, 3, ep.task .. ": its own three requests, not the client's total")
    local sum = 0
    for _, s in ipairs(steps_of(ep, "model_call")) do
      sum = sum + s.payload.usage.prompt_tokens
      t.ok(s.started_at > 1.6e9 and s.duration_ms >= 0, "wall-clock start and duration of the request")
      t.ok(s.payload.reply.ended_at >= s.payload.reply.started_at)
    end
    t.eq(ep.summary.tokens.prompt, sum)
  end
  t.eq(got.n, want.n)
  t.eq(got.prompt, want.prompt)
  t.eq(got.completion, want.completion)
end)

t.test("one HTTP 400, one label: model_error in every strategy, with the server's message", function()
  for _, s in ipairs { "repair.lua", "implement.lua", "repair_then_tune.lua", "agent.lua", "select.lua", "optimize.lua" } do
    local name = "t_400_" .. s:gsub("%W", "_")
    local tk = make_task(name, write_script(name, { answer("x") }), " [[fault:400x99:" .. name .. "]]")
    local path, res = run(s, { tk }, { "--samples", "2" })
    local ep = episodes(path)[1]
    t.eq(ep.status, "model_error", s)
    t.eq(ep.summary.status, "model_error", s)
    t.eq(ep.summary.failure_modes.model_error, 1, s)
    local me = ep.summary.model_errors and ep.summary.model_errors[1]
    t.eq(me and me.code, "HTTP_400", s)
    t.ok(me and me.message:find("injected fault", 1, true), s)
    t.eq(res.model_errors, 1, s)
    t.eq(runner.exit_status(res, {}), runner.EXIT.MODEL, s)
    if s == "repair.lua" then -- the report shows the error with the server's message
      local p = io.popen(KMRUN .. " report " .. path .. " 2>&1")
      local rep_out = p:read("a"); p:close()
      t.ok(rep_out:find("HTTP_400 x1: HTTP 400: injected fault", 1, true), rep_out)
      t.ok(rep_out:find("model_error 1", 1, true), rep_out)
      local html = DIR .. "/errors.html"
      os.execute(KMRUN .. " report " .. path .. " --html " .. html .. " >/dev/null 2>&1")
      local page = io.open(html):read("a")
      t.ok(page:find("<h2>Model errors</h2>", 1, true) and page:find("injected fault", 1, true), "the HTML page too")
    end
  end
end)

t.test("reasoning as data: recorded, in the report, exported with --reasoning, curated by length", function()
  local long = string.rep("let me think ", 200)
  local tk = make_task("t_reason", write_script("reason", {
    { reply = answer("long"), reasoning = long }, { reply = answer("short"), reasoning = "brief" } }))
  local bad = make_task("t_reason_bad", write_script("reason_bad", { { reply = answer("bug", true), reasoning = "hmm" } }))
  local path = run("implement.lua", { tk, bad }, { "--jobs", "1" }, nil, 2)
  local function export(flags)
    local p = io.popen(KMRUN .. " export " .. path .. " " .. flags .. " 2>/dev/null")
    local lines = {}
    for l in p:lines() do lines[#lines + 1] = assert(json.decode(l)) end
    p:close()
    return lines
  end
  t.eq(#export("--format sft"), 2, "training lines are verified by default")
  t.eq(#export("--format sft --all"), 4, "--all: failed ones too")
  local cur = export("--format sft --shortest-reasoning --reasoning")
  t.eq(#cur, 1, "one per task, the verified one with the least reasoning")
  local last = cur[1].messages[#cur[1].messages]
  t.ok(last.content:find("<think>\nbrief", 1, true) and last.content:find("Here is short", 1, true), last.content)
  local eps = episodes(path)
  local chars = 0
  for _, ep in ipairs(eps) do chars = chars + (ep.summary.reasoning_chars or 0) end
  t.eq(chars, #long + #"brief" + 2 * #"hmm")
  local p = io.popen(KMRUN .. " report " .. path .. " --by task 2>&1")
  local out = p:read("a"); p:close()
  t.ok(out:find("reasoning", 1, true), out)
  local rows = {} -- the task's row, across the table's panels (report lines fit 120 columns)
  for r in out:gmatch("\nt_reason%s[^\n]*") do rows[#rows + 1] = r end
  local row = table.concat(rows)
  t.ok(row:find("1%.3k"), row) -- (2600 + 5) / 2 characters per episode
end)

t.test("agent: tool_choice is sent; arguments that are not strict JSON go back as a tool error", function()
  local code = { kernel_cu = "extern \"C\" __global__ void rowsum(const float *x, float *y, int rows, int cols) { }",
    launch_lua = "return function(k, io, s) k.rowsum{ grid = s.rows, block = 256 }(io.x, io.y, s.rows, s.cols) end" }
  local raw = '{"kernel_cu": "line one\nline two", "launch_lua": "x"}' -- a raw newline in a string
  local tk = make_task("t_tools", write_script("tools", {
    { raw_tools = { { "compile", raw } } },
    { tools = { { "submit", code } } },
  }))
  local m0 = #server.requests()
  local path = run("agent.lua", { tk })
  local reqs = server.requests()
  t.eq(reqs[m0 + 1].body.tool_choice, "auto")
  local ep = episodes(path)[1]
  t.eq(ep.status, "correct")
  local r1 = steps_of(ep, "tool_result")[1].payload.result
  t.ok(r1:find("not valid JSON", 1, true) and r1:find("raw newline", 1, true), r1)
  local c1 = steps_of(ep, "tool_call")[1].payload
  t.ok(c1.arguments_error and not c1.args, "the bad call is recorded as such")
  -- the sft export holds only valid JSON arguments
  local p = io.popen(KMRUN .. " export " .. path .. " --format sft 2>/dev/null")
  local line = p:read("l"); p:close()
  local sft = assert(json.decode(line))
  local n = 0
  for _, m in ipairs(sft.messages) do
    for _, c in ipairs(m.tool_calls or {}) do
      n = n + 1
      t.ok(llm.json_strict(c["function"].arguments), c["function"].arguments)
    end
  end
  t.eq(n, 1, "the call with broken arguments is left out")
  local strict_ok, strict_why = llm.json_strict(raw)
  t.eq(strict_ok, false)
  t.ok(strict_why:find("raw newline", 1, true), strict_why)
end)

t.test("guidance follows the failure: none for a reply without code", function()
  local tk = make_task("t_guides", write_script("guides", { "I would use shared memory.", answer("ok") }))
  local path = run("repair.lua", { tk })
  local ep = episodes(path)[1]
  local g = steps_of(ep, "guidance")
  for _, s in ipairs(g) do
    if s.payload.reason == "no_code" then
      for _, id in ipairs(s.payload.ids) do t.ok(id == "reading-verdicts", "only a guide for no_code: " .. id) end
    end
  end
end)

----------------------------------------------------------------------------------------
-- kmrun itself: exit statuses and Ctrl-C

local function sh(cmd)
  local p = io.popen(cmd .. "; echo \"rc=$?\"")
  local out = p:read("a"); p:close()
  return out, tonumber(out:match("rc=(%d+)%s*$"))
end

t.test("exit statuses: 3 without a GPU (model fine), 4 when the model cannot be used", function()
  local tk = make_task("t_exit", write_script("exit", { answer("fine") }))
  local env = "env -u ANTHROPIC_API_KEY OPENAI_BASE_URL=" .. server.base .. " KM_MODEL=fake-model "
  local out, rc = sh(env .. KMRUN .. " " .. ROOT .. "/strategies/implement.lua " .. tk.dir .. " --store " .. DIR .. "/exit3.sqlite --quiet 2>&1")
  t.eq(rc, 3, out)
  local env_down = "env -u ANTHROPIC_API_KEY OPENAI_BASE_URL=http://127.0.0.1:9/v1 KM_MODEL=m "
  out, rc = sh(env_down .. KMRUN .. " " .. ROOT .. "/strategies/implement.lua " .. tk.dir .. " --store " .. DIR .. "/exit4.sqlite --quiet 2>&1")
  t.eq(rc, 4, out)
  t.ok(not out:find("traceback", 1, true), out)
end)

t.test("Ctrl-C: one line, exit 130, run and episodes marked interrupted; the same command resumes", function()
  local tk = make_task("t_int", write_script("int", { answer("slow") }), " [[delay:3]]")
  local st = DIR .. "/int.sqlite"
  local env = "env -u ANTHROPIC_API_KEY OPENAI_BASE_URL=" .. server.base .. " KM_MODEL=fake-model "
  local cmd = env .. KMRUN .. " " .. ROOT .. "/strategies/repair.lua " .. tk.dir .. " --store " .. st .. " --quiet"
  local pidf, errf = DIR .. "/int.pid", DIR .. "/int.err"
  local n0 = #server.requests()
  os.execute(string.format("(%s 2>%s & echo $! > %s; wait $!; echo $? > %s.rc) >/dev/null 2>&1 &", cmd, errf, pidf, pidf))
  -- wait until the episode is running (its request is at the server), then SIGINT kmrun
  for _ = 1, 200 do
    if #server.requests() > n0 then break end
    os.execute("sleep 0.05")
  end
  local pid = io.open(pidf):read("a"):match("%d+")
  os.execute("kill -INT " .. pid)
  local rc
  for _ = 1, 100 do
    local f = io.open(pidf .. ".rc")
    rc = f and tonumber(f:read("a"))
    if f then f:close() end
    if rc then break end
    os.execute("sleep 0.05")
  end
  local err = io.open(errf):read("a")
  t.eq(rc, 130, err)
  t.ok(err:find("interrupted (SIGINT)", 1, true), err)
  t.ok(not err:find("traceback", 1, true) and not err:find("interrupted!", 1, true), err)
  local db = assert(store.open(st, { readonly = true }))
  t.eq(db:runs()[1].status, "interrupted")
  t.eq(db:episodes()[1].status, "interrupted")
  db:close()
  -- the same command again: the interrupted episode runs and finishes
  local out, rc2 = sh(cmd .. " 2>&1")
  t.eq(rc2, 3, out) -- no GPU here: compiled only
  db = assert(store.open(st, { readonly = true }))
  local eps = db:episodes()
  db:close()
  t.eq(#eps, 2)
  t.eq(eps[2].status, "compiled")
end)

server.stop()
t.done()
