-- km.serve.server — `kmrun serve --listen`: the judge as an HTTP/JSON service (docs/service.md).
--
--   local server = require "km.serve.server"
--   server.run { listen = "127.0.0.1:8470", token_file = "~/.kmrun-token", tasks = { "tasks/" } }
--
-- Transport is km.http (libmicrohttpd, a thread per connection); everything else runs here,
-- on one Lua thread, in one loop: take the requests that came in, answer what needs no
-- GPU at once, hand batches to the scheduler (km.serve.scheduler: dedup, cache, deadlines,
-- causes, rewards), poll the backend (km.serve.backend: the GPU pool, or compile-only
-- workers), and answer a batch when it is done, or write each verdict as it comes (stream).
--
-- Routes: POST /v1/evaluate, POST /v1/jobs, GET|DELETE /v1/jobs/ID, GET /v1/tasks,
-- GET /v1/health, GET /metrics. Errors are JSON { error } with a 4xx; a client over its
-- quota of outstanding evaluations gets 429 with Retry-After, a full server 503.
local http = require "km.http"
local json = require "km.json"
local sys = require "km.sys"
local hash = require "km.hash"
local wall = require("km.timing").wall
local catalog_mod = require "km.serve.catalog"
local backend_mod = require "km.serve.backend"
local scheduler_mod = require "km.serve.scheduler"
local metrics_mod = require "km.serve.metrics"
local requests = require "km.serve.requests"

local fmt = string.format
local ipairs, pairs, type, tostring, tonumber, math = ipairs, pairs, type, tostring, tonumber, math

local M = {}
M.QUOTA = 4096        -- evaluations a client may have outstanding
M.MAX_QUEUE = 65536   -- evaluations queued on the server before it answers 503
M.JOB_TTL = 1800      -- seconds a finished job is kept for its client to fetch
M.MAX_BODY = 8 << 20  -- bytes of a request body

local JSON_HDR = { ["Content-Type"] = "application/json" }

local function encode(t) return json.encode(t, { nan = "null" }) end

-- "HOST:PORT" | "unix:PATH" | ":PORT" -> { host, port } | { unix } | nil, why
function M.parse_listen(s)
  if type(s) ~= "string" then return nil, "--listen: HOST:PORT or unix:PATH" end
  local path = s:match("^unix:(.+)$")
  if path then return { unix = path } end
  local host, port = s:match("^%[?([^%]]*)%]?:(%d+)$")
  port = tonumber(port)
  if not port or port > 65535 then return nil, "--listen: HOST:PORT or unix:PATH, not '" .. s .. "'" end
  return { host = host ~= "" and host or "127.0.0.1", port = port }
end

-- A token file's tokens: one a line, "SECRET" or "NAME SECRET" (a client's name in the
-- quota and the metrics). -> { { name, secret }, ... } | nil, why
function M.read_tokens(path)
  local text, why = http.read_secret(path)
  if not text then return nil, why end
  local list = {}
  for line in text:gmatch("[^\n]+") do
    line = line:gsub("^%s+", ""):gsub("%s+$", "")
    if line ~= "" and not line:match("^#") then
      local name, secret = line:match("^(%S+)%s+(%S+)$")
      if not name then name, secret = "client" .. (#list + 1), line end
      if #secret < 16 then return nil, path .. ": a token of 16 characters or more" end
      list[#list + 1] = { name, secret }
    end
  end
  if #list == 0 then return nil, path .. ": no token in it" end
  return list
end

---------------------------------------------------------------------------------------
-- answers

local function answer(sv, r, code, body, headers)
  sv.metrics:inc("kmrun_http_requests_total", { code = code })
  return sv.http:respond(r.id, code, body, headers or JSON_HDR)
end

local function fail(sv, r, code, why, extra)
  local h = { ["Content-Type"] = "application/json" }
  for k, v in pairs(extra or {}) do h[k] = v end
  sv.metrics:inc("kmrun_rejected_total", { reason = tostring(code) })
  return answer(sv, r, code, encode { error = why } .. "\n", h)
end

local function health(sv)
  local b = sv.backend
  return { ok = true, kind = b.kind, why = b.why, device = b.device, tasks = sv.catalog:count(),
    queue = b:pending(), pid = sys.pid(), since = sv.since, uptime_s = wall() - sv.t0,
    protocol = scheduler_mod.PROTOCOL }
end

local function metrics_text(sv)
  return sv.metrics:text({ kmrun_queue_length = sv.backend:pending(), kmrun_cache_entries = sv.scheduler.cache_n,
    kmrun_connections_total = sv.http:stats().connections, kmrun_slow_connections_cut_total = sv.http:stats().cut },
    sv.backend:busy())
end

-- Seconds until a client's outstanding evaluations would be judged at the recent rate.
local function retry_after(sv, n)
  local rate = math.max(sv.metrics:rate(), 0.5)
  return tostring(math.max(1, math.min(300, math.ceil(n / rate))))
end

-- A batch for client of r: refused (429/503), or begun. -> batch | nil (answered already)
local function begin(sv, r, items, o)
  local client = r.client
  local out = sv.outstanding[client] or 0
  if out + #items > sv.quota then
    fail(sv, r, 429, fmt("over this client's quota: %d evaluations outstanding, %d asked, %d allowed", out, #items, sv.quota),
      { ["Retry-After"] = retry_after(sv, out + #items - sv.quota) })
    return nil
  end
  if sv.scheduler:pending() + #items > sv.max_queue then
    fail(sv, r, 503, "the server's queue is full", { ["Retry-After"] = retry_after(sv, sv.scheduler:pending()) })
    return nil
  end
  sv.outstanding[client] = out + #items
  local batch
  batch = sv.scheduler:add(items, { deadline_s = o.deadline_s, client = client, on_verdict = function(i, v)
    sv.outstanding[client] = sv.outstanding[client] - 1
    if batch and batch.stream then batch.stream(i, v) end
  end })
  return batch
end

local function evaluate(sv, r)
  local items, o, why, code = requests.parse(r.body, sv.catalog)
  if not items then return fail(sv, r, code, why) end
  local batch = begin(sv, r, items, o)
  if not batch then return end
  if o.stream then
    sv.http:stream(r.id, 200, { ["Content-Type"] = "application/x-ndjson" })
    local s = { rid = r.id, batch = batch }
    for i = 1, #items do -- answered already (cache hits, no_code)
      if batch.verdicts[i] then sv.http:write(r.id, encode(batch.verdicts[i]) .. "\n") end
    end
    batch.stream = function(_, v)
      if s.gone then return end
      if not sv.http:write(r.id, encode(v) .. "\n") then s.gone = true end
    end
    sv.streams[#sv.streams + 1] = s
    sv.metrics:inc("kmrun_http_requests_total", { code = 200 })
  else
    sv.waiting[#sv.waiting + 1] = { rid = r.id, batch = batch }
  end
end

local function job_view(job)
  local verdicts, n = {}, 0
  for i = 1, #job.batch.items do
    verdicts[i] = job.batch.verdicts[i] or json.null
    if job.batch.verdicts[i] then n = n + 1 end
  end
  return { job = job.id, done = job.batch.done, total = #job.batch.items, judged = n, verdicts = verdicts }
end

local function jobs(sv, r)
  local id = r.path:match("^/v1/jobs/([%w]+)$")
  if r.path == "/v1/jobs" and r.method == "POST" then
    local items, o, why, code = requests.parse(r.body, sv.catalog)
    if not items then return fail(sv, r, code, why) end
    local batch = begin(sv, r, items, o)
    if not batch then return end
    local jid = hash.sha256(tostring(sys.random(1 << 62)), tostring(wall())):sub(1, 24)
    sv.jobs[jid] = { id = jid, batch = batch, client = r.client, t = wall() }
    return answer(sv, r, 202, encode { job = jid, total = #items } .. "\n")
  end
  local job = id and sv.jobs[id]
  if not job or job.client ~= r.client then return fail(sv, r, 404, "no job " .. tostring(id)) end
  if r.method == "GET" then return answer(sv, r, 200, encode(job_view(job)) .. "\n") end
  if r.method == "DELETE" then
    sv.scheduler:expire(job.batch, "its job was cancelled by its client")
    local view = job_view(job)
    sv.jobs[id] = nil
    return answer(sv, r, 200, encode(view) .. "\n")
  end
  return fail(sv, r, 405, r.method .. " " .. r.path .. ": GET or DELETE")
end

-- One request, by route.
local function route(sv, r)
  local p, m = r.path, r.method
  if p == "/v1/evaluate" then
    if m ~= "POST" then return fail(sv, r, 405, "POST /v1/evaluate") end
    return evaluate(sv, r)
  elseif p == "/v1/jobs" or p:match("^/v1/jobs/") then
    return jobs(sv, r)
  elseif p == "/v1/tasks" and m == "GET" then
    return answer(sv, r, 200, encode { tasks = sv.catalog:list(sv.scheduler.baselines) } .. "\n")
  elseif p == "/v1/health" and m == "GET" then
    return answer(sv, r, 200, encode(health(sv)) .. "\n")
  elseif p == "/metrics" and m == "GET" then
    return answer(sv, r, 200, metrics_text(sv), { ["Content-Type"] = "text/plain; version=0.0.4" })
  end
  return fail(sv, r, 404, m .. " " .. p .. ": no such endpoint (docs/service.md)")
end

---------------------------------------------------------------------------------------
-- the loop

-- A batch whose client is gone: dropped, and what it had outstanding off its client's quota.
local function drop(sv, batch)
  if not batch.done then sv.outstanding[batch.client] = (sv.outstanding[batch.client] or 0) - batch.left end
  sv.scheduler:drop(batch)
end

-- The request w (waiting or streamed) whose client left: its batch dropped, the request let go.
local function gone(sv, w)
  drop(sv, w.batch)
  sv.http:finish(w.rid)
  return false
end

-- The items of list for which still(item) is true, in order.
local function kept(list, still)
  local out = {}
  for _, x in ipairs(list) do if still(x) then out[#out + 1] = x end end
  return out
end

-- Non-streamed batches done are answered; streams done are ended; a client gone has its
-- batch dropped; finished jobs nobody fetched go after JOB_TTL.
local function settle(sv)
  sv.waiting = kept(sv.waiting, function(w)
    if w.batch.done then
      local ok = sv.http:respond(w.rid, 200, encode { verdicts = w.batch.verdicts } .. "\n", JSON_HDR)
      sv.metrics:inc("kmrun_http_requests_total", { code = ok and 200 or "gone" })
      return false
    end
    return sv.http:alive(w.rid) or gone(sv, w)
  end)
  sv.streams = kept(sv.streams, function(s)
    if s.gone or not sv.http:alive(s.rid) then return gone(sv, s) end
    if s.batch.done then sv.http:finish(s.rid); return false end
    return true
  end)
  for id, job in pairs(sv.jobs) do
    if job.batch.done and wall() - job.t > M.JOB_TTL then sv.jobs[id] = nil end
  end
end

local function loop(sv, sig)
  while not sv.stop and not sig.caught() do
    local busy = sv.scheduler:pending() > 0
    local r = sv.http:poll(busy and 0 or 50)
    while r do
      local ok, err = pcall(route, sv, r)
      if not ok then
        sv.say("kmrun serve: internal error on " .. tostring(r.path) .. ": " .. tostring(err))
        pcall(fail, sv, r, 500, "internal error")
      end
      r = sv.http:poll(0)
    end
    if busy then sv.scheduler:step(20) else sv.scheduler:step(0) end
    settle(sv)
  end
end

-- The server's parts from o (M.run's), or nil, why, CODE.
local function open(o)
  local where, why = M.parse_listen(o.listen)
  if not where then return nil, why, "USAGE" end
  local tokens
  if o.token_file then
    tokens, why = M.read_tokens(o.token_file)
    if not tokens then return nil, why, "INSECURE" end
  elseif not where.unix then
    return nil, "--listen on TCP needs --token-file (a file of mode 0600 holding the token clients send)", "USAGE"
  end
  local cat, errs = catalog_mod.new(o.tasks or {})
  for _, e in ipairs(errs) do (o.say or print)("kmrun serve: " .. e) end
  if cat:count() == 0 then return nil, "no tasks to serve (--tasks DIR)", "USAGE" end
  local srv, lwhy, lcode = http.listen { host = where.host, port = where.port, unix = where.unix, tokens = tokens,
    max_body = o.max_body or M.MAX_BODY, io_timeout = o.io_timeout or 10, request_timeout = o.request_timeout or 30 }
  if not srv then return nil, lwhy, lcode end
  return { http = srv, where = where, catalog = cat }
end

-- The service: o.listen, o.token_file, o.tasks (roots), o.gpus, o.compile_only, o.timeout,
-- o.quota, o.max_queue, o.max_body, o.io_timeout, o.request_timeout, o.baseline_args (parsed
-- --baselines / --compile-mode), o.say, o.ready(info)
-- (called once listening: { port, unix, kind }). -> true | nil, why, CODE
function M.run(o)
  local say = o.say or function(line) io.stderr:write(line, "\n") end
  o.say = say
  local parts, why, code = open(o)
  if not parts then return nil, why, code end
  -- a problem file's model, or a task's reference.py for its baselines: workers import torch ahead
  local torch, loaded = false, {}
  for _, id in ipairs(parts.catalog.ids) do
    local e = parts.catalog.by_id[id]
    torch = torch or e.kind == "problem"
    loaded[#loaded + 1] = e.task
  end
  -- o.baseline_args: --baselines, --compile-mode as kmrun eval reads them (default: its defaults)
  local baseline = require "km.task.baseline"
  torch = torch or baseline.needs_torch(loaded, o.baseline_args or {})
  local judge_opts
  if o.baseline_args then
    judge_opts = baseline.judge_opts(o.baseline_args, { seeds = 3, energy = true })
    judge_opts.timeout = o.timeout or 120
  end
  local backend = backend_mod.new { gpus = o.gpus, timeout = o.timeout, compile_only = o.compile_only,
    torch_ahead = torch, wrap = o.wrap, opts = judge_opts }
  local metrics = metrics_mod.new()
  local sv = { http = parts.http, catalog = parts.catalog, backend = backend, metrics = metrics, say = say,
    scheduler = scheduler_mod.new { backend = backend, metrics = metrics,
      identity = encode(require("km.serve.resident").identity()) },
    quota = o.quota or M.QUOTA, max_queue = o.max_queue or M.MAX_QUEUE, outstanding = {}, waiting = {},
    streams = {}, jobs = {}, t0 = wall(), since = os.date("!%Y-%m-%dT%H:%M:%SZ") }
  local w = parts.where
  local at = w.unix and ("unix:" .. w.unix) or fmt("%s:%d", w.host, parts.http:port())
  say(fmt("kmrun serve: listening on %s (%d task%s; %s%s)", at, parts.catalog:count(), parts.catalog:count() == 1 and "" or "s",
    backend.kind == "gpu" and ("GPU: " .. tostring(backend.device and backend.device.name)) or "compile-only",
    backend.why and (": " .. backend.why) or ""))
  if o.ready then o.ready { port = parts.http:port(), unix = w.unix, kind = backend.kind, at = at } end
  local sig = require "km.signal"
  sig.catch()
  loop(sv, sig)
  sig.release()
  parts.http:close()
  if w.unix then os.remove(w.unix) end
  backend:close()
  say("kmrun serve: stopped")
  return true
end

return M
