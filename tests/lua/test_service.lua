-- kmrun serve --listen on the CPU (compile-only verdicts), a real server process on loopback
-- and real sockets (tests/http_probe.py): the endpoints (evaluate in order and streamed, jobs
-- submitted, polled and cancelled, tasks, health, metrics), a verdict equal to `kmrun eval
-- --json`'s on the same candidate, a completion's blocks extracted (format_ok), identical
-- candidates judged once and cached (fresh bypasses), rewards and their parts, a flagged task
-- rewarded by no preset, a deadline that leaves requests not_judged (infra), and the bad
-- requests (malformed JSON, an unknown task, a 10 MB source, garbage, a quota passed) answered
-- with a 4xx while a good request beside them is judged. The GPU side: tests/gpu/test_service.lua.
local t = require "km.tap"
local sys = require "km.sys"
local json = require "km.json"
local testing = require "km.testing"

local fmt = string.format
local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local PROBE = ROOT .. "/tests/http_probe.py"
local TOKEN = "svc-test-token-0123456789"

-- A flagged task: t_global_max with a kept lint result that flags it (what `kmrun tasks lint`
-- keeps; the CPU here has no PyTorch to lint a CUDA-only reference itself).
local lint = require "km.task.lint"
local flagged = assert(require("km.task").load(ROOT .. "/tests/tasks/t_global_max"))
assert(lint.put(flagged, { where = "cpu", flags = { { reason = "trivial_constant", detail = "a constant passes at shape 1" } } }))

local port, pid = testing.serve_listen(KMRUN, DIR, { token = "trainer " .. TOKEN .. "\n",
  args = { "--tasks", ROOT .. "/tasks", "--tasks", ROOT .. "/tests/tasks", "--quota", "64", "--request-timeout", "3",
    "--baselines", "eager", "--compile-mode", "default" } })
if not port then
  t.skip_all("the server did not start: " .. tostring(testing.read(DIR .. "/server.log")))
end
local ADDR = "127.0.0.1:" .. port
local n = 0

-- One HTTP exchange -> { status, headers, body, json (the body decoded), error }
local function call(method, path, body, o)
  o = o or {}
  n = n + 1
  local out = DIR .. "/r" .. n
  local cmd = fmt("python3 '%s' '%s' %s %s '%s' --token '%s'", PROBE, out, ADDR, method, path, o.token or TOKEN)
  if body then
    testing.write(out .. ".body", type(body) == "string" and body or json.encode(body))
    cmd = cmd .. " --body '" .. out .. ".body'"
  end
  if o.mode then cmd = cmd .. " --mode " .. o.mode end
  testing.sh(cmd)
  local r = json.decode(assert(testing.read(out), "no probe result"))
  if r.status == json.null then r.status = nil end
  r.json = r.body and json.decode(r.body)
  return r
end

local function starter(name)
  local dir = ROOT .. "/tasks/" .. name .. "/starter"
  return { kernel_cu = testing.read(dir .. "/kernel.cu"), launch_lua = testing.read(dir .. "/launch.lua") }
end

-- n requests for task's starter, each a candidate of its own (a comment naming tag, i and the time)
local function distinct(task, n, tag)
  local reqs = {}
  for i = 1, n do
    local c = starter(task)
    c.kernel_cu = c.kernel_cu .. "\n// " .. tag .. " " .. i .. " " .. os.time() .. "\n"
    reqs[i] = { task = task, candidate = c }
  end
  return reqs
end

local BAD_CU = 'extern "C" __global__ void relu(float *y) { y[0] = undeclared; }'

t.test("TCP without a token file, or with one others can read: it refuses to start", function()
  local out, err, rc = testing.run(KMRUN .. " serve --listen 127.0.0.1:0 --tasks " .. ROOT .. "/tasks")
  t.eq(rc, 2, out) t.ok(err:find("--token-file", 1, true), err)
  testing.write(DIR .. "/open_token", TOKEN .. "\n")
  os.execute("chmod 644 '" .. DIR .. "/open_token'")
  out, err, rc = testing.run(KMRUN .. " serve --listen 127.0.0.1:0 --token-file " .. DIR .. "/open_token --tasks " .. ROOT .. "/tasks")
  t.eq(rc, 2, out) t.ok(err:find("readable by no one else", 1, true), err)
  out, err, rc = testing.run(KMRUN .. " serve --tasks " .. ROOT .. "/tasks")
  t.eq(rc, 2, out) t.ok(err:find("only with --listen", 1, true), err)
  -- the baselines are the service's choice, as kmrun eval's: with --listen only
  out, err, rc = testing.run(KMRUN .. " serve --compile-mode default")
  t.eq(rc, 2, out) t.ok(err:find("--compile-mode: only with --listen", 1, true), err)
  out, err, rc = testing.run(KMRUN .. " serve --listen 127.0.0.1:0 --compile-mode fastest --token-file " .. DIR .. "/token")
  t.eq(rc, 2, out) t.ok(err:find("--compile-mode", 1, true), err)
end)

t.test("GET /v1/health: compile-only here, and says why", function()
  local r = call("GET", "/v1/health")
  t.eq(r.status, 200, r.body)
  t.eq(r.json.kind, "compile_only")
  t.ok(r.json.why and r.json.tasks >= 40, r.body)
  t.eq(call("GET", "/v1/health", nil, { token = "not-the-token-at-all" }).status, 401)
end)

t.test("POST /v1/evaluate: verdicts in request order, equal to kmrun eval --json's", function()
  local relu = starter("l1_relu")
  local r = call("POST", "/v1/evaluate", { requests = {
    { task = "l1_relu", candidate = relu },
    { task = "l1_relu", candidate = { kernel_cu = BAD_CU, launch_lua = relu.launch_lua } },
    { task = "l1_gelu", candidate = starter("l1_gelu") },
  } })
  t.eq(r.status, 200, r.body)
  local v = r.json.verdicts
  t.eq(#v, 3)
  t.eq(v[1].index, 0) t.eq(v[2].index, 1) t.eq(v[3].index, 2)
  t.eq(v[1].status, "compiled") t.eq(v[2].status, "compile_error") t.eq(v[3].status, "compiled")
  for _, x in ipairs(v) do
    t.eq(x.cause, "candidate") t.eq(x.judged, "compile_only")
    t.eq(type(x.reward), "number") t.eq(type(x.reward_components), "table")
  end
  t.eq(v[1].reward_components.compiled, 1) t.eq(v[2].reward_components.compiled, 0)
  -- the same candidate through kmrun eval --json, on this CPU
  local cdir = testing.candidate_dir(DIR .. "/cand", { source = BAD_CU, launch = relu.launch_lua })
  local out = testing.run(KMRUN .. " eval " .. ROOT .. "/tasks/l1_relu " .. cdir .. " --json --quiet")
  local e = assert(json.decode(out), out)
  local fields = 0
  for k, x in pairs(e) do
    fields = fields + 1
    t.eq(json.encode(v[2][k]), json.encode(x), "field " .. k)
  end
  t.ok(fields >= 3, "kmrun eval's verdict has its fields")
  local out2 = testing.run(KMRUN .. " eval " .. ROOT .. "/tasks/l1_relu starter --json --quiet")
  for k, x in pairs(json.decode(out2)) do t.eq(json.encode(v[1][k]), json.encode(x), "starter: field " .. k) end
end)

t.test("a completion: its fenced blocks extracted (format_ok), or no_code with format_ok false", function()
  local relu = starter("l1_relu")
  local reply = "Here it is.\n```cuda\n" .. relu.kernel_cu .. "\n```\n\n```lua\n" .. relu.launch_lua .. "\n```\n"
  local r = call("POST", "/v1/evaluate", { requests = {
    { task = "l1_relu", completion = reply }, { task = "l1_relu", completion = "I could not do it." } } })
  t.eq(r.status, 200, r.body)
  local v = r.json.verdicts
  t.eq(v[1].format_ok, true) t.eq(v[1].status, "compiled")
  t.eq(v[2].format_ok, false) t.eq(v[2].status, "no_code") t.eq(v[2].cause, "candidate")
  t.eq(v[2].reward, 0) t.eq(v[2].reward_components.format, 0)
  t.ok(v[2].feedback:find("cuda", 1, true), v[2].feedback)
end)

t.test("identical candidates judged once; then cached; fresh: true judges again", function()
  local relu = starter("l1_relu")
  relu.kernel_cu = relu.kernel_cu .. "\n// dedup " .. os.time() .. "\n"
  local reqs = {}
  for i = 1, 6 do reqs[i] = { task = "l1_relu", candidate = relu } end
  local r = call("POST", "/v1/evaluate", { requests = reqs })
  local shared, ids = 0, {}
  for _, v in ipairs(r.json.verdicts) do
    if v.shared then shared = shared + 1 end
    ids[v.id] = true
  end
  t.eq(shared, 5, "five share the first one's judging")
  t.eq(select("#", next(ids)) > 0 and #r.json.verdicts, 6)
  local again = call("POST", "/v1/evaluate", { requests = { { task = "l1_relu", candidate = relu } } })
  t.eq(again.json.verdicts[1].cached, true, "cached")
  local fresh = call("POST", "/v1/evaluate", { fresh = true, requests = { { task = "l1_relu", candidate = relu } } })
  t.eq(fresh.json.verdicts[1].cached, nil, "fresh: judged again")
  -- the same source for another task is another content id
  local other = call("POST", "/v1/evaluate", { requests = { { task = "l1_sigmoid", candidate = relu } } })
  t.ok(other.json.verdicts[1].id ~= r.json.verdicts[1].id, "the task is part of the id")
end)

t.test("stream: one JSON line per request, in completion order, indices all there", function()
  local reqs = distinct("l1_relu", 5, "stream")
  local r = call("POST", "/v1/evaluate", { stream = true, requests = reqs })
  t.eq(r.status, 200, r.body)
  t.eq(r.headers["content-type"], "application/x-ndjson")
  local seen = {}
  for line in r.body:gmatch("[^\n]+") do
    local v = json.decode(line)
    seen[#seen + 1] = v.index
    t.eq(v.status, "compiled")
  end
  table.sort(seen)
  t.eq(table.concat(seen, ","), "0,1,2,3,4")
end)

t.test("jobs: submit (202), poll until done, a finished job's verdicts; cancel; another client's job is not found", function()
  local r = call("POST", "/v1/jobs", { requests = { { task = "l1_relu", candidate = starter("l1_relu") } } })
  t.eq(r.status, 202, r.body)
  local id = r.json.job
  local view
  for _ = 1, 100 do
    view = call("GET", "/v1/jobs/" .. id).json
    if view.done then break end
    sys.sleep(0.1)
  end
  t.eq(view.done, true) t.eq(view.total, 1) t.eq(view.verdicts[1].status, "compiled")
  local d = call("DELETE", "/v1/jobs/" .. id)
  t.eq(d.status, 200)
  t.eq(call("GET", "/v1/jobs/" .. id).status, 404, "gone once cancelled")
  t.eq(call("GET", "/v1/jobs/nosuchjob").status, 404)
end)

t.test("GET /v1/tasks: ids, shapes, tolerances, the prompt; the flagged task says so", function()
  local r = call("GET", "/v1/tasks")
  t.eq(r.status, 200)
  local by = {}
  for _, e in ipairs(r.json.tasks) do by[e.id] = e end
  t.ok(by.l1_relu and by.l1_relu.shapes[1] and by.l1_relu.tolerance.f32, "l1_relu listed")
  t.ok(by.l1_relu.prompt[2].content:find("l1_relu", 1, true), "the prompt a model would see")
  t.eq(by.t_global_max.lint.flagged, true)
end)

t.test("a flagged task: the verdict carries the flag and reason, and no preset rewards it", function()
  local relu = starter("l1_relu") -- it compiles: weighted would give it 0.1 on an unflagged task
  local c, l = relu.kernel_cu, relu.launch_lua
  for _, preset in ipairs { "fast_p", "correct_speedup", "weighted" } do
    local r = call("POST", "/v1/evaluate", { reward = preset, requests = { { task = "t_global_max", candidate = { kernel_cu = c, launch_lua = l } } } })
    local v = r.json.verdicts[1]
    t.eq(v.task_flag.flagged, true, r.body)
    t.ok(v.task_flag.reason:find("constant", 1, true), v.task_flag.reason)
    t.eq(v.reward, 0, preset) t.eq(v.reward_preset, preset)
  end
end)

t.test("deadline_s: what was not judged in time comes back not_judged, cause infra, reward null", function()
  local reqs = distinct("l1_softmax", 40, "deadline")
  local r = call("POST", "/v1/evaluate", { deadline_s = 0.05, requests = reqs })
  t.eq(r.status, 200, r.body)
  local late = 0
  for _, v in ipairs(r.json.verdicts) do
    if v.status == "not_judged" then
      late = late + 1
      t.eq(v.cause, "infra") t.eq(v.reward, nil) t.eq(v.judged, "not_judged")
    else
      t.eq(v.cause, "candidate")
    end
  end
  t.ok(late > 0, "some were not judged in 50 ms")
end)

t.test("bad requests: 400 malformed JSON, 400 unknown task, 413 a 10 MB source, garbage closed, 429 over the quota", function()
  t.eq(call("POST", "/v1/evaluate", "{not json").status, 400)
  local u = call("POST", "/v1/evaluate", { requests = { { task = "no_such_task", candidate = starter("l1_relu") } } })
  t.eq(u.status, 400) t.ok(u.json.error:find("no_such_task", 1, true), u.body)
  local big = call("POST", "/v1/evaluate", { requests = { { task = "l1_relu",
    candidate = { kernel_cu = string.rep("x", 10 << 20), launch_lua = "" } } } })
  t.eq(big.status, 413, tostring(big.error))
  local g = call("POST", "/v1/evaluate", "x", { mode = "garbage" })
  t.ok(g.status == nil or (g.status >= 400 and g.status < 500), tostring(g.status))
  local reqs = {}
  for i = 1, 65 do reqs[i] = { task = "l1_relu", candidate = starter("l1_relu") } end
  local q = call("POST", "/v1/evaluate", { requests = reqs })
  t.eq(q.status, 429, q.body) t.ok(tonumber(q.headers["retry-after"]), "Retry-After")
  t.eq(call("GET", "/v1/nothing").status, 404)
  t.eq(call("GET", "/v1/evaluate").status, 405)
  -- and a good request is judged as before
  local ok = call("POST", "/v1/evaluate", { requests = { { task = "l1_relu", candidate = starter("l1_relu") } } })
  t.eq(ok.status, 200) t.eq(ok.json.verdicts[1].status, "compiled")
end)

t.test("a client sending one byte a second is cut off; one that hangs up mid-stream leaves the rest judged", function()
  n = n + 1
  local slow_out = DIR .. "/slow" .. n
  testing.write(slow_out .. ".body", json.encode { requests = { { task = "l1_relu", candidate = starter("l1_relu") } } })
  local slow = assert(sys.spawn({ "python3", PROBE, slow_out, ADDR, "POST", "/v1/evaluate", "--token", TOKEN,
    "--body", slow_out .. ".body", "--mode", "slow" }, { stdout = "null", stderr = "null" }))
  local reqs = distinct("l1_relu", 12, "drop")
  local d = call("POST", "/v1/evaluate", { stream = true, requests = reqs }, { mode = "stream-drop" })
  t.ok(d.body:find("compiled", 1, true), "it read a line before hanging up")
  local ok = call("POST", "/v1/evaluate", { requests = { { task = "l1_relu", candidate = starter("l1_relu") } } })
  t.eq(ok.status, 200) t.eq(ok.json.verdicts[1].status, "compiled")
  sys.wait(slow, true)
  local sr = json.decode(testing.read(slow_out))
  t.ok(sr.status == json.null and sr.seconds < 15, "the slow client was cut off: " .. tostring(sr.seconds))
  t.eq(call("GET", "/v1/health").json.queue, 0, "nothing left queued for the client that left")
  local full = {}
  for i = 1, 64 do full[i] = { task = "l1_relu", candidate = starter("l1_relu") } end
  t.eq(call("POST", "/v1/evaluate", { requests = full }).status, 200, "the batch it left is off its quota")
end)

t.test("GET /metrics: Prometheus text with the queue, rates, latencies, causes, cache and busy share", function()
  local r = call("GET", "/metrics")
  t.eq(r.status, 200)
  for _, name in ipairs { "kmrun_queue_length", "kmrun_evaluations_per_second", 'kmrun_latency_seconds{stage="judge",quantile="0.99"}',
    'kmrun_verdicts_total{cause="infra",status="not_judged"}', "kmrun_cache_hits_total", "kmrun_shared_total",
    'kmrun_gpu_busy_share{gpu="0"}', 'kmrun_rejected_total{reason="429"}', "kmrun_slow_connections_cut_total 1" } do
    t.ok(r.body:find(name, 1, true), name)
  end
end)

sys.kill(pid, "TERM")
sys.wait(pid, true)
t.ok(not (testing.read(DIR .. "/server.log") or ""):find("internal error", 1, true), "no internal error in the server's log")
sys.rmtree(DIR)
t.done()
