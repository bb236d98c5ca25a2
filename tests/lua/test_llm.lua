-- km.llm against a real HTTP server on loopback (tests/fake_llm_server.py): both APIs,
-- translation, tools, reasoning, n, retries, timeouts, bad bodies, keys, budgets,
-- concurrency (chat_many; start/poll), offline, replay and the environment.
local t = require "km.tap"
local llm = require "km.llm"
local json = require "km.json"

local KMRUN = arg[-1]:match("kmrun$") and arg[-1] or "build/kmrun"
local HERE = arg[0]:match("^(.*)/[^/]*$") or "."
local SERVER = HERE .. "/../fake_llm_server.py"
local TEST_KEY = "sk-test-key"

if not os.execute("command -v python3 >/dev/null 2>&1") then t.skip_all("python3 not found") end

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir))
local PORT_FILE, LOG, PID_FILE = dir .. "/port", dir .. "/requests.jsonl", dir .. "/pid"

local function sleep(s) os.execute("sleep " .. s) end

local function read_all(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- The server exits by itself after 60 s idle, so even a crashed test leaves nothing behind.
assert(os.execute(string.format("python3 %s %s --log %s --idle 60 >/dev/null 2>&1 & echo $! > %s",
  SERVER, PORT_FILE, LOG, PID_FILE)))
local port
for _ = 1, 200 do
  port = tonumber(read_all(PORT_FILE) or "")
  if port then break end
  sleep(0.05)
end
local PID = (read_all(PID_FILE) or ""):match("%d+")
if not port then
  if PID then os.execute("kill " .. PID) end
  io.stdout:write("1..1\nnot ok 1 - the fake server started\n")
  os.exit(1)
end
local BASE = "http://127.0.0.1:" .. port .. "/v1"   -- OpenAI style: the base ends in /v1
local ABASE = "http://127.0.0.1:" .. port           -- Anthropic style: no /v1

-- What the server received, in order (it logs each request before answering).
local function requests()
  local out = {}
  local f = io.open(LOG)
  if not f then return out end
  for line in f:lines() do out[#out + 1] = assert(json.decode(line)) end
  f:close()
  return out
end
local function mark() return #requests() end
local function since(m)
  local all, out = requests(), {}
  for i = m + 1, #all do out[#out + 1] = all[i] end
  return out
end

-- Fault counters are per directive text; a fresh tag gives each test its own.
local n_tag = 0
local function tag()
  n_tag = n_tag + 1
  return "t=" .. n_tag
end

local function openai(cfg)
  cfg = cfg or {}
  cfg.provider = cfg.provider or "openai"
  cfg.base_url = cfg.base_url or BASE
  cfg.model = cfg.model or "fake-gpt"
  cfg.api_key = cfg.api_key or TEST_KEY
  cfg.backoff_base = cfg.backoff_base or 0.01
  return llm.new(cfg)
end

local function anthropic(cfg)
  cfg = cfg or {}
  cfg.provider = "anthropic"
  cfg.base_url = cfg.base_url or ABASE
  cfg.model = cfg.model or "fake-claude"
  cfg.api_key = cfg.api_key or TEST_KEY
  cfg.backoff_base = cfg.backoff_base or 0.01
  return llm.new(cfg)
end

local function user(text) return { { role = "user", content = text } } end

t.test("OpenAI round trip: content, usage, latency, model, what was sent", function()
  local c = openai()
  local m = mark()
  local r, err, code = c:chat({
    { role = "system", content = "You write CUDA." },
    { role = "user", content = "write relu [[reply:hello there]]" },
  }, { temperature = 0.5, max_tokens = 100, seed = 7, stop = { "</code>", "END" } })
  t.ok(r, tostring(err) .. " " .. tostring(code))
  t.eq(r.content, "hello there")
  t.eq(r.finish_reason, "stop")
  t.eq(r.model, "fake-gpt")
  t.eq(r.provider, "openai")
  t.eq(r.attempts, 1)
  t.eq(r.dollars, 0)
  t.eq(r.reasoning, nil)
  t.eq(#r.tool_calls, 0)
  t.eq(#r.choices, 1)
  t.eq(r.choices[1].content, "hello there")
  t.eq(r.usage.prompt_tokens, 3 + 4)   -- words: "You write CUDA." + "write relu [[reply:hello there]]"
  t.eq(r.usage.completion_tokens, 2)
  t.eq(r.usage.total_tokens, 9)
  t.ok(r.latency_ms > 0 and r.latency_ms < 5000, "latency_ms " .. r.latency_ms)
  local sent = since(m)
  t.eq(#sent, 1)
  local b = sent[1].body
  t.eq(sent[1].path, "/v1/chat/completions")
  t.eq(b.model, "fake-gpt")
  t.eq(b.temperature, 0.5)
  t.eq(b.max_tokens, 100)
  t.eq(b.seed, 7)
  t.eq(b.stop[2], "END")
  t.eq(b.n, nil)
  t.eq(b.messages[1].role, "system")
  t.eq(b.messages[2].content, "write relu [[reply:hello there]]")
  -- extra: vendor fields set at the top level of the body, over what was built
  m = mark()
  assert(c:chat(user("x"), { temperature = 0.1, extra = { temperature = 0.3, top_p = 0.9,
    chat_template_kwargs = { enable_thinking = false } } }))
  local eb = since(m)[1].body
  t.eq(eb.temperature, 0.3)
  t.eq(eb.top_p, 0.9)
  t.eq(eb.chat_template_kwargs.enable_thinking, false)
  t.ok(sent[1].headers.authorization_sent, "an Authorization header was sent")
  t.ok(sent[1].headers.key_is_test_key, "it carried the configured key")
  t.eq(sent[1].headers.content_type, "application/json")
  t.eq(sent[1].headers.expect, json.null, "no Expect: 100-continue")
  -- The default reply carries a fenced CUDA block, as a real model's would.
  local d = assert(c:chat(user("write relu")))
  t.ok(d.content:find("```cuda\n", 1, true), d.content)
  local u = c:usage()
  t.eq(u.requests, 3)
  t.eq(u.prompt_tokens, 7 + 1 + 2)
  t.eq(u.failures, 0)
end)

t.test("Anthropic round trip: content, usage, headers, default max_tokens", function()
  local c = anthropic()
  local m = mark()
  local r, err = c:chat(user("hello [[reply:hi from claude]]"), { temperature = 0 })
  t.ok(r, err)
  t.eq(r.content, "hi from claude")
  t.eq(r.finish_reason, "stop")
  t.eq(r.model, "fake-claude")
  t.eq(r.provider, "anthropic")
  t.eq(r.usage.prompt_tokens, 4)       -- words of "hello [[reply:hi from claude]]"
  t.eq(r.usage.completion_tokens, 3)
  t.eq(r.usage.total_tokens, 7)
  t.ok(r.latency_ms > 0)
  local sent = since(m)
  t.eq(#sent, 1)
  t.eq(sent[1].path, "/v1/messages")
  t.eq(sent[1].body.max_tokens, 4096)
  t.eq(sent[1].body.temperature, 0)
  t.eq(sent[1].body.model, "fake-claude")
  t.ok(sent[1].headers.x_api_key_sent, "x-api-key was sent")
  t.ok(sent[1].headers.key_is_test_key, "it carried the configured key")
  t.ok(not sent[1].headers.authorization_sent, "no Authorization header for Anthropic")
  t.eq(sent[1].headers.anthropic_version, "2023-06-01")
  -- A base URL that already ends in /v1 reaches the same endpoint.
  local c2 = anthropic { base_url = ABASE .. "/v1/", anthropic_version = "2024-01-01" }
  m = mark()
  assert(c2:chat(user("again")))
  sent = since(m)
  t.eq(sent[1].path, "/v1/messages")
  t.eq(sent[1].headers.anthropic_version, "2024-01-01")
end)

local TOOLS = {
  { name = "compile", description = "Compile a CUDA kernel",
    parameters = { type = "object", properties = { src = { type = "string" } }, required = { "src" } } },
}

t.test("Anthropic translation: system, tool calls, tool results, tools, tool_choice", function()
  local c = anthropic()
  local m = mark()
  local r, err = c:chat({
    { role = "system", content = "Rule A." },
    { role = "user", content = "write relu" },
    { role = "system", content = "Rule B." },
    { role = "assistant", content = "Compiling.", tool_calls = {
      { id = "call_1", name = "compile", arguments = '{"src":"k1"}' },
      { id = "call_2", name = "compile", arguments = { src = "k2" } },
    } },
    { role = "tool", tool_call_id = "call_1", content = "ok" },
    { role = "tool", tool_call_id = "call_2", content = "error: x" },
    { role = "user", content = "now fix it [[reply:fixed]]" },
  }, { tools = TOOLS, tool_choice = "compile", stop = "STOP", seed = 3 })
  t.ok(r, err)
  t.eq(r.content, "fixed")
  local b = since(m)[1].body
  t.eq(b.system, "Rule A.\n\nRule B.")
  t.eq(#b.messages, 3)
  t.eq(b.messages[1].role, "user")
  t.eq(b.messages[1].content, "write relu")
  local a = b.messages[2]
  t.eq(a.role, "assistant")
  t.eq(a.content[1].type, "text")
  t.eq(a.content[1].text, "Compiling.")
  t.eq(a.content[2].type, "tool_use")
  t.eq(a.content[2].id, "call_1")
  t.eq(a.content[2].name, "compile")
  t.eq(a.content[2].input.src, "k1")
  t.eq(a.content[3].input.src, "k2")
  local u = b.messages[3]
  t.eq(u.role, "user")
  t.eq(u.content[1].type, "tool_result")
  t.eq(u.content[1].tool_use_id, "call_1")
  t.eq(u.content[1].content, "ok")
  t.eq(u.content[2].tool_use_id, "call_2")
  t.eq(u.content[3].type, "text")
  t.eq(u.content[3].text, "now fix it [[reply:fixed]]")
  for _, msg in ipairs(b.messages) do
    t.ok(msg.role == "user" or msg.role == "assistant", "role " .. msg.role)
  end
  t.eq(b.tools[1].name, "compile")
  t.eq(b.tools[1].description, "Compile a CUDA kernel")
  t.eq(b.tools[1].input_schema.properties.src.type, "string")
  t.eq(b.tools[1].input_schema.required[1], "src")
  t.eq(b.tool_choice.type, "tool")
  t.eq(b.tool_choice.name, "compile")
  t.eq(b.stop_sequences[1], "STOP")
  t.eq(b.seed, nil, "Anthropic has no seed")
end)

t.test("tools and tool_calls round trip (OpenAI and Anthropic)", function()
  local c = openai()
  local m = mark()
  local msgs = { { role = "user", content = 'compile this [[tool:compile:{"src":"__global__ void k(){}"}]]' } }
  local r, err = c:chat(msgs, { tools = TOOLS, tool_choice = "auto" })
  t.ok(r, err)
  t.eq(r.finish_reason, "tool_calls")
  t.eq(r.content, "")
  t.eq(#r.tool_calls, 1)
  local tc = r.tool_calls[1]
  t.eq(tc.id, "call_1")
  t.eq(tc.name, "compile")
  t.eq(tc.arguments, '{"src":"__global__ void k(){}"}')
  t.eq(tc.args.src, "__global__ void k(){}")
  t.eq(r.choices[1].tool_calls[1].name, "compile")
  local b = since(m)[1].body
  t.eq(b.tools[1].type, "function")
  t.eq(b.tools[1]["function"].name, "compile")
  t.eq(b.tools[1]["function"].parameters.required[1], "src")
  t.eq(b.tool_choice, "auto")
  -- The reply goes back as the assistant turn, followed by the tool's result.
  msgs[#msgs + 1] = { role = "assistant", content = r.content, tool_calls = r.tool_calls }
  msgs[#msgs + 1] = { role = "tool", tool_call_id = tc.id, content = "compiled: ok" }
  msgs[#msgs + 1] = { role = "user", content = "good [[reply:done]]" }
  m = mark()
  r = assert(c:chat(msgs, { tools = TOOLS, tool_choice = "compile" }))
  t.eq(r.content, "done")
  b = since(m)[1].body
  t.eq(b.messages[2].tool_calls[1].id, "call_1")
  t.eq(b.messages[2].tool_calls[1].type, "function")
  t.eq(b.messages[2].tool_calls[1]["function"].arguments, '{"src":"__global__ void k(){}"}')
  t.eq(b.messages[3].role, "tool")
  t.eq(b.messages[3].tool_call_id, "call_1")
  t.eq(b.tool_choice["function"].name, "compile")
  -- Anthropic tool_use blocks come back as the same tool_calls shape.
  local ar = assert(anthropic():chat(user('go [[tool:compile:{"src":"a","n":2}]]'), { tools = TOOLS }))
  t.eq(ar.finish_reason, "tool_calls")
  t.eq(ar.tool_calls[1].id, "toolu_1")
  t.eq(ar.tool_calls[1].args.n, 2)
  t.eq(json.decode(ar.tool_calls[1].arguments).src, "a")
  -- Arguments that are not JSON are data: args is absent, arguments kept as sent.
  local bad = assert(c:chat(user("[[tool:compile:{not json]]")))
  t.eq(bad.tool_calls[1].arguments, "{not json")
  t.eq(bad.tool_calls[1].args, nil)
  t.ok(bad.tool_calls[1].arguments_error:find("invalid JSON", 1, true), bad.tool_calls[1].arguments_error)
  -- strictly: a raw newline inside a string is what cJSON takes and json.loads does not
  local raw = assert(c:chat(user('[[tool:compile:{"src": "a\nb"}]]')))
  t.eq(raw.tool_calls[1].args, nil)
  t.ok(raw.tool_calls[1].arguments_error:find("raw newline", 1, true), raw.tool_calls[1].arguments_error)
  t.eq(llm.json_strict('{"src": "a\\nb"}'), true)
end)

t.test("wall-clock times of a request; a failed one says when it ran (4th value, poll info)", function()
  local c = openai()
  local before = os.time()
  local r = assert(c:chat(user("[[delay:0.2]] [[reply:ok]]")))
  t.ok(r.started_at >= before - 1 and r.ended_at >= r.started_at + 0.19, r.started_at .. " " .. r.ended_at)
  t.near((r.ended_at - r.started_at) * 1e3, r.latency_ms, 50)
  local none, _, code, info = c:chat(user("[[fault:400x9:" .. tag() .. "]]"))
  t.eq(none, nil)
  t.eq(code, "HTTP_400")
  t.ok(info and info.attempts == 1 and info.started_at and info.ended_at >= info.started_at and info.latency_ms >= 0)
  local req = c:start(user("[[fault:400x9:" .. tag() .. "]]"))
  local done = {}
  while #done == 0 do done = c:poll(1000) end
  t.eq(done[1].request, req)
  t.eq(done[1].code, "HTTP_400")
  t.ok(done[1].info and done[1].info.attempts == 1, "poll entries carry the info too")
  local many = c:chat_many({ user("[[fault:400x9:" .. tag() .. "]]") })
  t.eq(many[1][3], "HTTP_400")
  t.ok(many[1][4] and many[1][4].attempts == 1)
end)

t.test("the server's model list", function()
  local list = assert(openai():models())
  t.eq(list.data[1].id, "fake-model")
  local _, _, code = llm.new({ provider = "replay", replies = {} }):models()
  t.eq(code, "UNSUPPORTED")
end)

t.test("reasoning content (OpenAI reasoning_content, Anthropic thinking)", function()
  local r = assert(openai():chat(user("[[reasoning:first think hard]] [[reply:42]]")))
  t.eq(r.reasoning, "first think hard")
  t.eq(r.choices[1].reasoning, "first think hard")
  t.eq(r.usage.reasoning_tokens, 3)
  t.eq(r.content, "42")
  local a = assert(anthropic():chat(user("[[reasoning:let me see]] [[reply:43]]")))
  t.eq(a.reasoning, "let me see")
  t.eq(a.content, "43")
end)

t.test("n > 1: one request with n for OpenAI, n parallel requests for Anthropic", function()
  local m = mark()
  local r = assert(openai():chat(user("[[reply:cand]]"), { n = 3 }))
  t.eq(#r.choices, 3)
  t.eq(r.choices[1].content, "cand")
  t.eq(r.choices[3].content, "cand [choice 3]")
  t.eq(r.content, "cand")
  local sent = since(m)
  t.eq(#sent, 1)
  t.eq(sent[1].body.n, 3)
  m = mark()
  local c = anthropic()
  local a = assert(c:chat(user("[[reply:one two]] [[delay:0.3]]"), { n = 3 }))
  t.eq(#a.choices, 3)
  t.eq(a.attempts, 3)
  t.eq(a.usage.completion_tokens, 3 * 2)
  t.ok(a.latency_ms < 900, "the n requests ran in parallel: " .. a.latency_ms .. " ms")
  sent = since(m)
  t.eq(#sent, 3)
  t.eq(sent[1].body.n, nil)
  t.eq(c:usage().requests, 3)
end)

t.test("429 with Retry-After is retried after the server's delay", function()
  local c = openai()
  local t0 = llm.now()
  local r, err = c:chat(user("[[fault:429:retry-after=1:" .. tag() .. "]] [[reply:finally]]"))
  local elapsed = llm.now() - t0
  t.ok(r, err)
  t.eq(r.content, "finally")
  t.eq(r.attempts, 2)
  t.ok(elapsed >= 1.0, "waited " .. elapsed .. " s")
  t.ok(elapsed < 3.0, "but not much longer: " .. elapsed .. " s")
  t.ok(r.latency_ms >= 1000, "latency includes the wait")
  -- Anthropic's 429 and 529-style overloads take the same path.
  local a = assert(anthropic():chat(user("[[fault:503:retry-after=0.2:" .. tag() .. "]]")))
  t.eq(a.attempts, 2)
end)

t.test("500 twice, then success: attempts == 3", function()
  local c = openai()
  local m = mark()
  local r, err = c:chat(user("[[fault:500x2:" .. tag() .. "]] [[reply:ok]]"))
  t.ok(r, err)
  t.eq(r.attempts, 3)
  t.eq(r.content, "ok")
  t.eq(#since(m), 3)
  t.eq(c:usage().requests, 1)
  t.eq(c:usage().attempts, 3)
  -- More failures than retries: the last error comes back, saying how often it tried.
  local r2, msg, code = openai { max_retries = 1 }:chat(user("[[fault:502x5:" .. tag() .. "]]"))
  t.eq(r2, nil)
  t.eq(code, "HTTP_502")
  t.ok(msg:find("HTTP 502: injected fault", 1, true), msg)
  t.ok(msg:find("after 2 attempts", 1, true), msg)
end)

t.test("a dropped connection is retried", function()
  local r, err = openai():chat(user("[[fault:reset:" .. tag() .. "]] [[reply:back]]"))
  t.ok(r, err)
  t.eq(r.attempts, 2)
  t.eq(r.content, "back")
end)

t.test("a hanging server gives TIMEOUT within timeout + slack", function()
  local c = openai { timeout = 1, max_retries = 0 }
  local t0 = llm.now()
  local r, msg, code = c:chat(user("[[fault:hang:" .. tag() .. "]]"))
  local elapsed = llm.now() - t0
  t.eq(r, nil)
  t.eq(code, "TIMEOUT")
  t.ok(msg:find("timed out after 1 s", 1, true), msg)
  t.ok(elapsed >= 0.9 and elapsed < 2.0, "elapsed " .. elapsed)
  -- Timeouts are retried.
  c = openai { timeout = 0.4, max_retries = 1 }
  r, msg, code = c:chat(user("[[fault:hang:" .. tag() .. "]]"))
  t.eq(code, "TIMEOUT")
  t.ok(msg:find("after 2 attempts", 1, true), msg)
  t.eq(c:usage().failures, 1)
end)

t.test("truncated or invalid JSON and empty choices give BAD_RESPONSE, not retried", function()
  local c = openai()
  local m = mark()
  local r, msg, code = c:chat(user("[[fault:truncated]]"))
  t.eq(r, nil)
  t.eq(code, "BAD_RESPONSE")
  t.ok(msg:find("truncated", 1, true), msg)
  r, msg, code = c:chat(user("[[fault:invalid]]"))
  t.eq(code, "BAD_RESPONSE")
  t.ok(msg:find("not valid JSON", 1, true) and msg:find("<html>", 1, true), msg)
  r, msg, code = c:chat(user("[[fault:empty]]"))
  t.eq(code, "BAD_RESPONSE")
  t.ok(msg:find("empty 'choices' list", 1, true), msg)
  t.eq(#since(m), 3, "one attempt each")
  r, msg, code = anthropic():chat(user("[[fault:truncated]]"))
  t.eq(code, "BAD_RESPONSE")
  t.eq(c:usage().failures, 3)
end)

t.test("an unreachable port gives CONNECT quickly", function()
  local c = openai { base_url = "http://127.0.0.1:1/v1" } -- default max_retries: refused is not retried
  local t0 = llm.now()
  local r, msg, code = c:chat(user("hello"))
  local elapsed = llm.now() - t0
  t.eq(r, nil)
  t.eq(code, "CONNECT")
  t.ok(msg:find("127.0.0.1:1", 1, true), msg)
  t.ok(elapsed < 1.0, "elapsed " .. elapsed)
end)

t.test("a wrong key gives HTTP_401 with one clear line and without the key", function()
  local secret = "sk-wrong-secret-0123456789"
  local r, msg, code = openai { api_key = secret }:chat(user("[[auth]] [[echo-key]]"))
  t.eq(r, nil)
  t.eq(code, "HTTP_401")
  t.eq(msg, "HTTP 401: the server rejected the API key (check OPENAI_API_KEY)")
  t.ok(not msg:find(secret, 1, true))
  r, msg, code = anthropic { api_key = secret }:chat(user("[[auth]]"))
  t.eq(code, "HTTP_401")
  t.eq(msg, "HTTP 401: the server rejected the API key (check ANTHROPIC_API_KEY)")
  r, msg, code = openai { api_key = "" }:chat(user("[[auth]]"))
  t.eq(code, "HTTP_401")
  t.ok(msg:find("none is set", 1, true), msg)
  -- The right key passes.
  t.ok(openai():chat(user("[[auth]]")))
  t.ok(anthropic():chat(user("[[auth]]")))
end)

t.test("keys never come back: errors, replies, config, tostring", function()
  local secret = "sk-secret-abcdef-987"
  local c = openai { api_key = secret }
  local r, msg, code = c:chat(user("[[fault:400:" .. tag() .. "]] [[echo-key]]"))
  t.eq(code, "HTTP_400")
  t.ok(msg:find("injected fault", 1, true), msg)
  t.ok(not msg:find(secret, 1, true), "key in the error: " .. msg)
  t.ok(msg:find(("*"):rep(#secret), 1, true), "masked in place: " .. msg)
  t.ok(not msg:find("\n"), "one line")
  r = assert(c:chat(user("[[reply:hello]] [[echo-key]]")))
  t.ok(not r.content:find(secret, 1, true), "key in the reply: " .. r.content)
  t.ok(r.content:find("hello", 1, true))
  local a, amsg = anthropic { api_key = secret }:chat(user("[[fault:500x9:" .. tag() .. "]] [[echo-key]]"))
  t.eq(a, nil)
  t.ok(not amsg:find(secret, 1, true), amsg)
  local cfg = c:config()
  t.eq(cfg.has_key, true)
  for k, v in pairs(cfg) do
    t.ok(not tostring(v):find(secret, 1, true), "config." .. k)
  end
  t.ok(not json.encode(cfg):find(secret, 1, true))
  t.ok(not tostring(c):find(secret, 1, true))
  t.ok(not json.encode(c:usage()):find(secret, 1, true))
  -- The fake server records whether a key came, never its value.
  t.ok(not read_all(LOG):find(secret, 1, true), "request log")
end)

t.test("budget: requests, then tokens and dollars with a price table", function()
  local c = openai { budget = { requests = 2 } }
  assert(c:chat(user("one")))
  assert(c:chat(user("two")))
  local m = mark()
  local r, msg, code = c:chat(user("three"))
  t.eq(r, nil)
  t.eq(msg, "budget exceeded: requests")
  t.eq(code, "BUDGET_EXCEEDED")
  t.eq(#since(m), 0, "nothing reached the server")
  t.eq(c:usage().requests, 2)
  t.eq(c:config().budget.requests, 2)

  local p = openai {
    prices = { ["fake-gpt"] = { input = 200000, output = 100000 } }, -- $0.2 and $0.1 per token
    budget = { dollars = 1.0 },
  }
  local function cost(u) return u.prompt_tokens * 0.2 + u.completion_tokens * 0.1 end
  r = assert(p:chat(user("[[reply:a b c]]")))        -- 3 prompt words, 3 reply words: $0.9
  t.near(r.dollars, cost(r.usage), 1e-12)
  t.near(r.dollars, 0.9, 1e-12)
  t.near(p:usage().dollars, 0.9, 1e-12)
  local r2 = assert(p:chat(user("[[reply:a]]")))     -- still under $1 before it: allowed
  t.near(p:usage().dollars, 0.9 + cost(r2.usage), 1e-12)
  m = mark()
  r, msg, code = p:chat(user("more"))
  t.eq(code, "BUDGET_EXCEEDED")
  t.eq(msg, "budget exceeded: dollars")
  t.eq(#since(m), 0)

  local tk = openai { budget = { tokens = 5 } }
  assert(tk:chat(user("[[reply:a b c d e]]")))
  r, msg, code = tk:chat(user("x"))
  t.eq(msg, "budget exceeded: tokens")
  -- Unpriced models cost 0.
  t.eq(assert(openai { model = "other" }:chat(user("x"))).dollars, 0)
end)

t.test("chat_many: 4 requests of 0.5 s run concurrently, results in order", function()
  local c = openai()
  local lists = {}
  for i = 1, 4 do lists[i] = user("[[delay:0.5]] [[reply:answer " .. i .. "]]") end
  local t0 = llm.now()
  local out = c:chat_many(lists, { temperature = 1 })
  local elapsed = llm.now() - t0
  t.eq(#out, 4)
  for i = 1, 4 do
    t.ok(out[i][1], "entry " .. i .. ": " .. tostring(out[i][2]))
    t.eq(out[i][1].content, "answer " .. i)
  end
  t.ok(elapsed >= 0.5 and elapsed < 1.2, "elapsed " .. elapsed .. " s")
  t.eq(c:usage().requests, 4)
  -- A failure stays in its slot; retries happen per request; the budget is per entry.
  local b = openai { budget = { requests = 3 } }
  out = b:chat_many({
    user("[[reply:fine]]"),
    user("[[fault:404:" .. tag() .. "]]"),
    user("[[fault:500:" .. tag() .. "]] [[reply:retried]]"),
    user("refused"),
  })
  t.eq(out[1][1].content, "fine")
  t.eq(out[2][1], nil)
  t.eq(out[2][3], "HTTP_404")
  t.eq(out[3][1].content, "retried")
  t.eq(out[3][1].attempts, 2)
  t.eq(out[4][1], nil)
  t.eq(out[4][2], "budget exceeded: requests")
  t.eq(out[4][3], "BUDGET_EXCEEDED")
  t.eq(#c:chat_many({}), 0)
end)

-- Polls until nothing is pending (or `limit` seconds pass); returns the entries in the order
-- poll handed them back and a map request -> entry.
local function drain(c, limit, ms)
  local order, by = {}, {}
  local t0 = llm.now()
  while c:pending() > 0 and llm.now() - t0 < (limit or 10) do
    for _, e in ipairs(c:poll(ms or 100)) do
      order[#order + 1] = e
      by[e.request] = e
    end
  end
  return order, by
end

t.test("start/poll: 4 requests of 0.5 s overlap; poll(0) returns {} at once meanwhile", function()
  local c = openai()
  local t0 = llm.now()
  local reqs, want = {}, {}
  for i = 1, 4 do
    reqs[i] = c:start(user("[[delay:0.5]] [[reply:async " .. i .. "]]"), { temperature = 1 })
    want[reqs[i]] = "async " .. i
  end
  t.ok(llm.now() - t0 < 0.2, "start returns at once: " .. (llm.now() - t0) .. " s")
  t.eq(c:pending(), 4)
  t.ok(tostring(reqs[1]):find("^km%.llm%.Request %d+ %(in flight%)$"), tostring(reqs[1]))
  local p0 = llm.now()
  local none = c:poll(0)
  t.eq(type(none), "table")
  t.eq(#none, 0)
  t.ok(llm.now() - p0 < 0.05, "poll(0) took " .. (llm.now() - p0) .. " s")
  local order, by = drain(c, 5, 100)
  local elapsed = llm.now() - t0
  t.ok(elapsed >= 0.5 and elapsed < 1.0, "elapsed " .. elapsed .. " s")
  t.eq(#order, 4)
  for i = 1, 4 do
    local e = by[reqs[i]]
    t.ok(e and e.reply, "request " .. i .. ": " .. tostring(e and e.error))
    t.eq(e.reply.content, want[reqs[i]])
    t.eq(e.reply.attempts, 1)
    t.eq(e.reply.provider, "openai")
    t.eq(e.error, nil)
    t.eq(e.code, nil)
    t.ok(e.reply.latency_ms >= 490, "latency " .. e.reply.latency_ms)
  end
  t.ok(tostring(reqs[1]):find("(done)", 1, true), tostring(reqs[1]))
  t.eq(c:pending(), 0)
  local u = c:usage()
  t.eq(u.requests, 4)
  t.eq(u.attempts, 4)
  t.eq(u.completion_tokens, 4 * 2)
  -- nothing pending: poll does not wait, whatever its timeout
  p0 = llm.now()
  t.eq(#c:poll(1000), 0)
  t.eq(#c:poll(), 0)
  t.ok(llm.now() - p0 < 0.05, "empty poll took " .. (llm.now() - p0) .. " s")
  -- no timeout: waits for the first to finish
  local one = c:start(user("[[delay:0.2]] [[reply:waited]]"))
  local out = c:poll()
  t.eq(#out, 1)
  t.eq(out[1].request, one)
  t.eq(out[1].reply.content, "waited")
end)

t.test("start/poll: a retried request finishes with attempts == 3 after another one", function()
  local c = openai()
  local m = mark()
  local slow = c:start(user("[[fault:500x2:t=async]] [[reply:third time]]"))
  local quick = c:start(user("[[reply:quick]]"))
  local order, by = drain(c, 5, 1000)
  t.eq(#order, 2)
  t.eq(order[1].request, quick, "the quick one first")
  t.eq(order[2].request, slow)
  t.eq(by[quick].reply.attempts, 1)
  t.eq(by[slow].reply.attempts, 3)
  t.eq(by[slow].reply.content, "third time")
  t.eq(#since(m), 4)
  t.eq(c:usage().requests, 2)
  t.eq(c:usage().attempts, 4)
  -- A retry waiting out Retry-After is not in flight: poll(0) returns at once, and a request
  -- started during the wait finishes before it.
  local t0 = llm.now()
  local waiting = c:start(user("[[fault:503:retry-after=0.4:" .. tag() .. "]] [[reply:later]]"))
  t.eq(#c:poll(100), 0, "the 503 came back and the retry waits")
  local p0 = llm.now()
  t.eq(#c:poll(0), 0)
  t.ok(llm.now() - p0 < 0.05, "poll(0) during the wait took " .. (llm.now() - p0) .. " s")
  local other = c:start(user("[[reply:meanwhile]]"))
  local first = c:poll(1000)
  t.eq(#first, 1)
  t.eq(first[1].request, other)
  t.ok(llm.now() - t0 < 0.4, "before the retry was due")
  local second = c:poll(2000)
  t.eq(#second, 1)
  t.eq(second[1].request, waiting)
  t.eq(second[1].reply.content, "later")
  t.eq(second[1].reply.attempts, 2)
  t.ok(llm.now() - t0 >= 0.4, "after Retry-After: " .. (llm.now() - t0) .. " s")
  -- giving up comes back as the entry's error, code and all
  local g = openai { max_retries = 1 }
  local r = g:start(user("[[fault:502x5:" .. tag() .. "]]"))
  local e = g:poll(5000)[1]
  t.eq(e.request, r)
  t.eq(e.reply, nil)
  t.eq(e.code, "HTTP_502")
  t.ok(e.error:find("after 2 attempts", 1, true), e.error)
  t.eq(g:usage().failures, 1)
end)

t.test("start/poll: errors, keys scrubbed, Anthropic n, chat alongside", function()
  local secret = "sk-secret-async-4242"
  local c = openai { api_key = secret }
  local bad = c:start(user("[[fault:400:" .. tag() .. "]] [[echo-key]]"))
  local echo = c:start(user("[[reply:hi]] [[echo-key]]"))
  local _, by = drain(c)
  t.eq(by[bad].code, "HTTP_400")
  t.ok(not by[bad].error:find(secret, 1, true), by[bad].error)
  t.ok(by[bad].error:find(("*"):rep(#secret), 1, true), by[bad].error)
  t.ok(by[echo].reply.content:find("hi", 1, true))
  t.ok(not by[echo].reply.content:find(secret, 1, true), by[echo].reply.content)
  local u = openai { base_url = "http://127.0.0.1:1/v1" }
  u:start(user("hello"))
  local e = u:poll(2000)[1]
  t.eq(e.code, "CONNECT")
  t.eq(u:usage().failures, 1)
  -- Anthropic n = 3: three requests behind one handle, replies as choices
  local a = anthropic()
  local r = a:start(user("[[reply:one two]] [[delay:0.2]]"), { n = 3 })
  t.eq(a:usage().requests, 3)
  t.eq(a:pending(), 1)
  e = a:poll(3000)[1]
  t.eq(e.request, r)
  t.eq(#e.reply.choices, 3)
  t.eq(e.reply.attempts, 3)
  t.eq(e.reply.usage.completion_tokens, 6)
  -- chat while requests are in flight: it returns its own reply and leaves theirs to poll
  local c2 = openai()
  local bg = c2:start(user("[[delay:0.4]] [[reply:background]]"))
  local t0 = llm.now()
  local fg = assert(c2:chat(user("[[reply:foreground]]")))
  t.eq(fg.content, "foreground")
  t.ok(llm.now() - t0 < 0.3, "chat did not wait for the other request")
  t.eq(c2:pending(), 1)
  local many = c2:chat_many({ user("[[reply:m1]]"), user("[[reply:m2]]") })
  t.eq(many[2][1].content, "m2")
  t.eq(c2:pending(), 1)
  e = c2:poll(2000)[1]
  t.eq(e.request, bg)
  t.eq(e.reply.content, "background")
  t.eq(c2:usage().requests, 4)
end)

t.test("start/poll: the budget refuses at start, and the next poll says so", function()
  local c = openai { budget = { requests = 1 } }
  local m = mark()
  local a = c:start(user("[[delay:0.2]] [[reply:allowed]]"))
  local b = c:start(user("refused"))
  t.eq(c:pending(), 2)
  t.eq(c:usage().requests, 1)
  local first = c:poll(0)
  t.eq(#first, 1, "the refusal comes back at once")
  t.eq(first[1].request, b)
  t.eq(first[1].reply, nil)
  t.eq(first[1].error, "budget exceeded: requests")
  t.eq(first[1].code, "BUDGET_EXCEEDED")
  local second = c:poll(2000)
  t.eq(second[1].request, a)
  t.eq(second[1].reply.content, "allowed")
  t.eq(#since(m), 1, "only the allowed one reached the server")
  t.eq(c:usage().requests, 1)
  t.eq(c:usage().failures, 0)
  -- tokens: refused once what was spent (counted when poll hands a reply back) reaches it
  local tk = openai { budget = { tokens = 5 } }
  tk:start(user("[[reply:a b c d e]]"))
  t.ok(tk:poll(2000)[1].reply)
  tk:start(user("x"))
  t.eq(tk:poll(0)[1].error, "budget exceeded: tokens")
end)

t.test("start/poll: closing or collecting a client with requests in flight", function()
  local c = openai()
  local reqs = {}
  for i = 1, 3 do reqs[i] = c:start(user("[[delay:0.5]] [[reply:never seen " .. i .. "]]")) end
  t.eq(#c:poll(50), 0)
  c:close()
  c:close()
  t.raises(function() c:poll(0) end, "closed km.llm.Client")
  t.raises(function() c:start(user("x")) end, "closed km.llm.Client")
  t.raises(function() c:pending() end, "closed km.llm.Client")
  t.ok(tostring(reqs[1]):find("(done)", 1, true), tostring(reqs[1]))
  -- collected without close, handles dropped too
  do
    local c2 = openai()
    for _ = 1, 3 do c2:start(user("[[delay:0.5]]")) end
    c2:poll(20)
  end
  collectgarbage()
  collectgarbage()
  -- a handle that outlives its client
  local h
  do
    local c3 = anthropic()
    h = c3:start(user("[[delay:0.5]]"), { n = 2 })
  end
  collectgarbage()
  collectgarbage()
  t.ok(tostring(h):find("(done)", 1, true), tostring(h))
  -- a to-be-closed client, one request waiting for its retry, one finished and not polled
  do
    local c4 <close> = openai { backoff_base = 5 }
    c4:start(user("[[fault:500:" .. tag() .. "]]"))
    c4:start(user("[[reply:unpolled]]"))
    c4:poll(100)
    c4:start(user("[[reply:unpolled too]]"))
  end
  -- the server is still fine
  t.ok(openai():chat(user("[[reply:still here]]")))
end)

t.test("start/poll: replay and offline", function()
  local c = llm.new { provider = "replay", model = "recorded",
    replies = { "first", { error = "boom", code = "HTTP_500" }, { content = "third", usage = { prompt_tokens = 2, completion_tokens = 3 } } } }
  local reqs = {}
  for i = 1, 4 do reqs[i] = c:start(user("q" .. i)) end
  t.eq(c:pending(), 4)
  local out = c:poll(0)
  t.eq(#out, 4)
  for i = 1, 4 do t.eq(out[i].request, reqs[i], "in start order") end
  t.eq(out[1].reply.content, "first")
  t.eq(out[1].reply.provider, "replay")
  t.eq(out[1].reply.model, "recorded")
  t.eq(out[2].reply, nil)
  t.eq(out[2].error, "boom")
  t.eq(out[2].code, "HTTP_500")
  t.eq(out[3].reply.usage.total_tokens, 5)
  t.eq(out[4].code, "REPLAY_EXHAUSTED")
  t.eq(c:pending(), 0)
  t.eq(c:usage().completion_tokens, 3)
  t.eq(#c:poll(0), 0)
  local b = llm.new { provider = "replay", replies = { "a", "b" }, budget = { requests = 1 } }
  b:start(user("x"))
  b:start(user("y"))
  out = b:poll()
  t.eq(out[1].reply.content, "a")
  t.eq(out[2].code, "BUDGET_EXCEEDED")
  local off = llm.new { provider = "offline" }
  local r = off:start(user("hi"))
  out = off:poll()
  t.eq(#out, 1)
  t.eq(out[1].request, r)
  t.eq(out[1].code, "OFFLINE")
  t.ok(out[1].error:find("no model configured", 1, true))
end)

t.test("start/poll misuse raises and leaves nothing pending", function()
  local c = openai()
  t.raises(function() c:start("hi") end, "table expected")
  t.raises(function() c:start({ { role = "robot", content = "x" } }) end, "role must be")
  t.raises(function() c:start(user("x"), { tools = { { name = "t", parameters = "{not json" } } }) end, "not valid JSON")
  t.raises(function() c:start(user("x"), 5) end, "table expected")
  t.raises(function() c:poll(-1) end, "non-negative")
  t.raises(function() c:poll("soon") end, "number expected")
  t.eq(c:pending(), 0)
  t.eq(c:usage().requests, 0)
end)

t.test("offline provider", function()
  local c = llm.new { provider = "offline" }
  local r, msg, code = c:chat(user("hi"))
  t.eq(r, nil)
  t.eq(msg, "offline: no model configured (set OPENAI_BASE_URL or ANTHROPIC_API_KEY, or KM_MODEL)")
  t.eq(code, "OFFLINE")
  t.eq(c:config().provider, "offline")
  t.eq(c:config().has_key, false)
  local out = c:chat_many({ user("a"), user("b") })
  t.eq(out[2][3], "OFFLINE")
end)

t.test("replay plays replies in order, then says it is exhausted", function()
  local c = llm.new {
    provider = "replay", model = "recorded",
    replies = {
      "first",
      { content = "second", usage = { prompt_tokens = 3, completion_tokens = 4 }, model = "m2" },
      { tool_calls = { { id = "c1", name = "compile", arguments = '{"x":1}' } } },
      { error = "boom", code = "HTTP_500" },
      { choices = { { content = "from choices" } } },
    },
  }
  local r = assert(c:chat(user("a")))
  t.eq(r.content, "first")
  t.eq(r.provider, "replay")
  t.eq(r.model, "recorded")
  t.eq(r.choices[1].content, "first")
  t.eq(r.finish_reason, "stop")
  r = assert(c:chat(user("b")))
  t.eq(r.content, "second")
  t.eq(r.model, "m2")
  t.eq(r.usage.total_tokens, 7)
  r = assert(c:chat(user("c")))
  t.eq(r.tool_calls[1].args.x, 1)
  t.eq(r.finish_reason, "tool_calls")
  local _, msg, code = c:chat(user("d"))
  t.eq(msg, "boom")
  t.eq(code, "HTTP_500")
  local out = c:chat_many({ user("e"), user("f") })
  t.eq(out[1][1].content, "from choices")
  t.eq(out[2][2], "replay exhausted after 5 replies")
  t.eq(out[2][3], "REPLAY_EXHAUSTED")
  _, msg, code = c:chat(user("g"))
  t.eq(code, "REPLAY_EXHAUSTED")
  t.eq(c:usage().prompt_tokens, 3)
  -- replies alone choose the replay provider
  t.eq(llm.new({ replies = {} }):config().provider, "replay")
end)

-- Runs llm.new() in a child with exactly these environment variables.
local function child_config(env, cfg)
  local parts = { "env -i PATH=\"$PATH\"" }
  for k, v in pairs(env) do parts[#parts + 1] = k .. "=" .. v end
  local code = "local c = require('km.llm').new(" .. (cfg or "") .. ") print(require('km.json').encode(c:config()))"
  parts[#parts + 1] = KMRUN .. " -e \"" .. code .. "\""
  local p = io.popen(table.concat(parts, " ") .. " 2>&1")
  local out = p:read("a")
  p:close()
  local v = json.decode(out)
  assert(v, "child said: " .. out)
  return v, out
end

t.test("environment fallback picks provider, base_url, model and key", function()
  local c = child_config {}
  t.eq(c.provider, "offline")
  c = child_config { OPENAI_BASE_URL = "http://10.0.0.1:8000/v1", KM_MODEL = "qwen" }
  t.eq(c.provider, "openai")
  t.eq(c.base_url, "http://10.0.0.1:8000/v1")
  t.eq(c.url, "http://10.0.0.1:8000/v1/chat/completions")
  t.eq(c.model, "qwen")
  t.eq(c.has_key, false)
  local out
  c, out = child_config { ANTHROPIC_API_KEY = "sk-ant-secret-1", KM_MODEL = "claude-x" }
  t.eq(c.provider, "anthropic")
  t.eq(c.base_url, "https://api.anthropic.com")
  t.eq(c.url, "https://api.anthropic.com/v1/messages")
  t.eq(c.model, "claude-x")
  t.eq(c.has_key, true)
  t.eq(c.anthropic_version, "2023-06-01")
  t.ok(not out:find("sk-ant-secret-1", 1, true), "no key in config()")
  c = child_config { ANTHROPIC_API_KEY = "a-key", OPENAI_API_KEY = "o-key" }
  t.eq(c.provider, "openai")
  t.eq(c.base_url, "https://api.openai.com/v1")
  c = child_config { KM_MODEL = "m" }
  t.eq(c.provider, "openai")
  t.eq(c.model, "m")
  c = child_config { ANTHROPIC_API_KEY = "k1234", ANTHROPIC_BASE_URL = "http://proxy:9" }
  t.eq(c.base_url, "http://proxy:9")
  -- The config table wins over the environment.
  c = child_config({ OPENAI_BASE_URL = "http://env/v1", KM_MODEL = "env-model" },
    "{ base_url = 'http://cfg/v1', model = 'cfg-model', timeout = 5 }")
  t.eq(c.base_url, "http://cfg/v1")
  t.eq(c.model, "cfg-model")
  t.eq(c.timeout, 5)
  c = child_config({ ANTHROPIC_API_KEY = "k1234" }, "{ provider = 'openai' }")
  t.eq(c.provider, "openai")
  t.eq(c.has_key, false, "an Anthropic key is not an OpenAI key")
end)

t.test("misuse raises; close is idempotent", function()
  local c = openai()
  t.raises(function() c:chat("hi") end, "table expected")
  t.raises(function() c:chat({}) end, "at least one message")
  t.raises(function() c:chat({ { role = "robot", content = "x" } }) end, "role must be")
  t.raises(function() c:chat({ { role = "user", content = 5 } }) end, "'content' must be a string")
  t.raises(function() c:chat(user("x"), { n = 0 }) end, "'n' must be")
  t.raises(function() c:chat(user("x"), { stop = 3 }) end, "'stop'")
  t.raises(function() c:chat(user("x"), { tools = { { description = "no name" } } }) end, "no name")
  t.raises(function() c:chat_many({ user("x"), "oops" }) end, "entry 2")
  t.raises(function() llm.new { provider = "gemini" } end, "unknown provider")
  t.raises(function() llm.new { timeout = -1 } end, "timeout")
  t.raises(function() llm.new { prices = { m = 3 } } end, "prices")
  c:close()
  c:close()
  t.raises(function() c:chat(user("x")) end, "closed km.llm.Client")
  t.eq(tostring(c), "km.llm.Client (closed)")
  do local _ <close> = openai() end
end)

os.execute("kill " .. PID .. " 2>/dev/null")
os.execute("rm -rf " .. dir)
t.done()
