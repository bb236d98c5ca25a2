-- The numbers bench/smollm2.sh prints: from a run's store and the proxy's log of what the
-- server answered.   kmrun bench/smollm2_summary.lua RUN.sqlite USAGE.jsonl N_CTX
local store = require "km.store"
local json = require "km.json"
local A = require "km.args"

local SPEC = A.spec {
  name = "bench/smollm2_summary.lua", synopsis = "RUN.sqlite USAGE.jsonl N_CTX",
  about = "The numbers bench/smollm2.sh prints, from a run's store and the proxy's usage log.",
  positional = {
    { "store", "RUN.sqlite", "the run's store", required = true },
    { "usage", "USAGE.jsonl", "tests/usage_proxy.py's log", required = true },
    { "n_ctx", "N_CTX", "the server's context window (tokens)", required = true, type = "positive" },
  },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local path, usage_log, n_ctx = a.store, a.usage, a.n_ctx
local db = assert(store.open(path, { readonly = true }))
local eps = db:episodes {}

-- the server's own numbers
local srv = { requests = 0, prompt = 0, completion = 0, cut = 0, status = {}, max_prompt = 0, over = 0 }
for line in io.lines(usage_log) do
  local r = assert(json.decode(line))
  srv.requests = srv.requests + 1
  srv.status[r.status] = (srv.status[r.status] or 0) + 1
  local u = type(r.usage) == "table" and r.usage or {}
  srv.prompt = srv.prompt + (u.prompt_tokens or 0)
  srv.completion = srv.completion + (u.completion_tokens or 0)
  if r.finish_reason == "length" then srv.cut = srv.cut + 1 end
  srv.max_prompt = math.max(srv.max_prompt, (u.prompt_tokens or 0))
  if (u.prompt_tokens or 0) + (r.max_tokens or 0) > n_ctx then srv.over = srv.over + 1 end
end

-- the client's, per episode
local c = { requests = 0, prompt = 0, completion = 0, cut = 0, episodes = #eps, first_ok = 0, first_n = 0,
  compiled = 0, calls = 0, rounds_to_compile = {}, status = {}, modes = {}, dropped = 0, errors = {} }
for _, e in ipairs(eps) do
  local s = e.summary or {}
  c.requests = c.requests + (s.requests or 0)
  c.prompt = c.prompt + ((s.tokens or {}).prompt or 0)
  c.completion = c.completion + ((s.tokens or {}).completion or 0)
  c.cut = c.cut + (s.truncated or 0)
  c.calls = c.calls + (s.model_calls or 0)
  c.status[e.status] = (c.status[e.status] or 0) + 1
  for k, n in pairs(s.failure_modes or {}) do c.modes[k] = (c.modes[k] or 0) + n end
  for _, me in ipairs(s.model_errors or {}) do c.errors[#c.errors + 1] = me.code .. ": " .. tostring(me.message) end
  if type(s.compile_ok_first) == "boolean" then
    c.first_n = c.first_n + 1
    if s.compile_ok_first then c.first_ok = c.first_ok + 1 end
  end
  -- the round whose candidate first compiled (no GPU: "compiled" is the best verdict here)
  local ep = db:episode(e.id)
  local round = 0
  for _, st in ipairs(ep.steps) do
    if st.kind == "model_call" then
      round = round + 1
      c.dropped = c.dropped + ((st.payload.context or {}).dropped or 0)
    end
    if st.kind == "verdict" and st.payload.status == "compiled" then
      c.rounds_to_compile[#c.rounds_to_compile + 1] = round
      break
    end
  end
end
db:close()

local function list(t)
  local ks = {}
  for k, n in pairs(t) do ks[#ks + 1] = string.format("%s %d", tostring(k), n) end
  table.sort(ks)
  return table.concat(ks, ", ")
end
local rt = c.rounds_to_compile
local sum = 0
for _, r in ipairs(rt) do sum = sum + r end
print(string.format("server:  %d requests (%s), prompt %d, completion %d tokens, %d cut off at max_tokens, largest prompt %d, over the window %d",
  srv.requests, list(srv.status), srv.prompt, srv.completion, srv.cut, srv.max_prompt, srv.over))
print(string.format("kmrun:   %d requests, prompt %d, completion %d tokens, %d cut off; equal to the server: %s",
  c.requests, c.prompt, c.completion, c.cut,
  tostring(c.requests == srv.requests and c.prompt == srv.prompt and c.completion == srv.completion and c.cut == srv.cut)))
print(string.format("episodes %d (%s); model calls %d (%.2f per episode); compile@1 %d/%d; a candidate compiled in %d episodes, at round %.2f on average; older rounds left out %d times",
  c.episodes, list(c.status), c.calls, c.calls / math.max(1, c.episodes), c.first_ok, c.first_n, #rt, #rt > 0 and sum / #rt or 0, c.dropped))
print("verdicts met: " .. list(c.modes))
if #c.errors > 0 then print("model errors: " .. table.concat(c.errors, "; ")) end
