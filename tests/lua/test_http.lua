-- km.http (libmicrohttpd) on loopback, with real sockets: requests handed to this Lua loop
-- and answered later, a streamed answer written as it comes, query and headers, a token
-- checked before the body is read (401), a body over the limit (413), a client that sends
-- one byte a second cut off while another is answered, a stalled upload, binary garbage, a
-- client that hangs up seen as gone, a Unix socket of mode 0600, and a token file that
-- others could read refused. Clients are tests/http_probe.py processes.
local t = require "km.tap"
local http = require "km.http"
local sys = require "km.sys"
local json = require "km.json"
local testing = require "km.testing"

local ROOT = testing.paths()
local DIR = testing.tmpdir()
local PROBE = ROOT .. "/tests/http_probe.py"
local TOKEN = "0123456789abcdef-test-token"
local n = 0

-- Starts a probe; -> a function that returns its result once it has one (nil before).
local function probe(addr, method, path, o)
  o = o or {}
  n = n + 1
  local out = DIR .. "/probe" .. n .. ".json"
  local argv = { "python3", PROBE, out, addr, method, path }
  if o.body then
    local bf = DIR .. "/body" .. n
    testing.write(bf, o.body)
    argv[#argv + 1] = "--body"; argv[#argv + 1] = bf
  end
  if o.token then argv[#argv + 1] = "--token"; argv[#argv + 1] = o.token end
  if o.mode then argv[#argv + 1] = "--mode"; argv[#argv + 1] = o.mode end
  local pid = assert(sys.spawn(argv, { stdout = "null", stderr = "null" }))
  return function()
    local text = testing.read(out)
    if not text then return nil end
    sys.wait(pid, true)
    local r = json.decode(text)
    if r.status == json.null then r.status = nil end -- no answer: the connection was closed
    return r
  end
end

-- Serves srv with handler(r) until every check in `waits` has a result (or `limit` s).
local function serve_until(srv, waits, handler, limit)
  local t0 = os.time()
  local results = {}
  while os.time() - t0 < (limit or 20) do
    local r = srv:poll(20)
    if r then handler(r) end
    local all = true
    for i, w in ipairs(waits) do
      results[i] = results[i] or w()
      all = all and results[i] ~= nil
    end
    if all then return results end
  end
  return results
end

local function echo(srv)
  return function(r)
    srv:respond(r.id, 200, json.encode { method = r.method, path = r.path, query = r.query, body = r.body,
      client = r.client, auth = r.headers.authorization ~= nil }, { ["Content-Type"] = "application/json", ["X-Kmrun"] = "yes" })
  end
end

t.test("a request handed to Lua, answered; query, headers and client; 401 without the token; 404-free routing is Lua's", function()
  local srv = assert(http.listen { host = "127.0.0.1", port = 0, tokens = { { "alice", TOKEN } } })
  local port = srv:port()
  t.ok(port > 0, "a port was bound")
  local addr = "127.0.0.1:" .. port
  local res = serve_until(srv, {
    probe(addr, "POST", "/v1/x?a=1&b=two", { body = '{"k":1}', token = TOKEN }),
    probe(addr, "POST", "/v1/x", { body = '{"k":1}' }),
    probe(addr, "GET", "/v1/x", { token = "wrong-token-wrong-token" }),
  }, echo(srv))
  t.eq(res[1].status, 200, tostring(res[1].error))
  local b = json.decode(res[1].body)
  t.eq(b.method, "POST") t.eq(b.path, "/v1/x") t.eq(b.query.a, "1") t.eq(b.query.b, "two")
  t.eq(b.body, '{"k":1}') t.eq(b.client, "alice", "the token's name is the client") t.eq(res[1].headers["x-kmrun"], "yes")
  t.eq(res[2].status, 401, "no token") t.ok(res[2].headers["www-authenticate"], "says Bearer")
  t.eq(res[3].status, 401, "a wrong token")
  srv:close()
end)

t.test("a body over max_body: 413 before it is read; binary garbage: a 400 or a closed connection", function()
  local srv = assert(http.listen { host = "127.0.0.1", port = 0, max_body = 1000 })
  local addr = "127.0.0.1:" .. srv:port()
  local seen = 0
  local res = serve_until(srv, {
    probe(addr, "POST", "/big", { body = string.rep("x", 5000) }),
    probe(addr, "POST", "/g", { body = "x", mode = "garbage" }),
    probe(addr, "POST", "/ok", { body = "small" }),
  }, function(r) seen = seen + 1; echo(srv)(r) end)
  t.eq(res[1].status, 413, tostring(res[1].error))
  t.ok(res[2].status == nil or (res[2].status >= 400 and res[2].status < 500), "garbage: " .. tostring(res[2].status))
  t.eq(res[3].status, 200, "a good request beside them is answered")
  t.eq(seen, 1, "only the good request reached Lua")
  srv:close()
end)

t.test("a streamed answer arrives line by line; a client that hangs up mid-stream is seen as gone", function()
  local srv = assert(http.listen { host = "127.0.0.1", port = 0 })
  local addr = "127.0.0.1:" .. srv:port()
  local streams = {}
  local handler = function(r)
    srv:stream(r.id, 200, { ["Content-Type"] = "application/x-ndjson" })
    streams[#streams + 1] = { id = r.id, path = r.path, k = 0 }
  end
  local full, drop = probe(addr, "GET", "/full"), probe(addr, "GET", "/drop", { mode = "stream-drop" })
  local gone_seen, t0 = false, os.time()
  local res = {}
  while os.time() - t0 < 20 and not (res[1] and res[2] and gone_seen) do
    local r = srv:poll(20)
    if r then handler(r) end
    for _, s in ipairs(streams) do
      if not s.ended then
        s.k = s.k + 1
        local ok, _, code = srv:write(s.id, json.encode { i = s.k } .. "\n")
        if not ok then t.eq(code, "GONE") gone_seen = s.path == "/drop" srv:finish(s.id) s.ended = true
        elseif s.path == "/full" and s.k == 5 then srv:finish(s.id) s.ended = true end
        sys.sleep(0.05)
      end
    end
    res[1], res[2] = res[1] or full(), res[2] or drop()
  end
  t.eq(res[1].status, 200, tostring(res[1].error))
  local lines = {}
  for line in res[1].body:gmatch("[^\n]+") do lines[#lines + 1] = json.decode(line).i end
  t.eq(table.concat(lines, ","), "1,2,3,4,5")
  t.ok(gone_seen, "the write after the client hung up says GONE")
  t.eq(srv:stats().open, 0, "no request is left held")
  srv:close()
end)

t.test("one byte a second: cut at request_timeout while a good request is answered; a stalled body too", function()
  local srv = assert(http.listen { host = "127.0.0.1", port = 0, request_timeout = 2, io_timeout = 30 })
  local addr = "127.0.0.1:" .. srv:port()
  local slow = probe(addr, "POST", "/slow", { body = '{"a":1}', mode = "slow" })
  local stall = probe(addr, "POST", "/stall", { body = '{"a":1}', mode = "stall" })
  sys.sleep(0.3)
  local good = probe(addr, "GET", "/good")
  local res = serve_until(srv, { slow, stall, good }, echo(srv), 20)
  t.eq(res[3] and res[3].status, 200, "the good request")
  t.ok(res[3].seconds < 2, "answered at once: " .. tostring(res[3].seconds))
  t.ok(res[1] and res[1].status == nil, "the slow client gets no answer: its connection is closed")
  t.ok(res[1].seconds < 10, "cut within seconds: " .. tostring(res[1].seconds))
  t.ok(res[2] and res[2].status == nil and res[2].seconds < 10, "the stalled upload is cut: " .. tostring(res[2] and res[2].seconds))
  t.ok(srv:stats().cut >= 2, "counted")
  srv:close()
end)

t.test("a Unix socket: mode 0600; answered as on TCP", function()
  local path = DIR .. "/h.sock"
  local srv = assert(http.listen { unix = path })
  local p = io.popen("stat -c %a '" .. path .. "'")
  t.eq(p:read("l"), "600")
  p:close()
  local res = serve_until(srv, { probe("unix:" .. path, "GET", "/u?x=1") }, echo(srv))
  t.eq(res[1].status, 200, tostring(res[1].error))
  t.eq(json.decode(res[1].body).client, "unix")
  srv:close()
  local _, _, code = http.listen { unix = path }
  t.eq(code, "EXISTS", "the socket file is left for its owner to remove")
  os.remove(path)
end)

t.test("read_secret: a token file others could read is refused", function()
  local f = DIR .. "/token"
  testing.write(f, TOKEN .. "\n")
  os.execute("chmod 644 '" .. f .. "'")
  local s, why, code = http.read_secret(f)
  t.eq(s, nil) t.eq(code, "INSECURE") t.ok(why:find("644", 1, true), why)
  os.execute("chmod 600 '" .. f .. "'")
  t.eq(http.read_secret(f), TOKEN .. "\n")
  local _, _, c2 = http.read_secret(DIR .. "/none")
  t.eq(c2, "NOT_FOUND")
end)

t.test("close wakes a request that waits for its answer; misuse raises", function()
  local srv = assert(http.listen { host = "127.0.0.1", port = 0 })
  local addr = "127.0.0.1:" .. srv:port()
  local w = probe(addr, "GET", "/never")
  local r
  for _ = 1, 200 do r = srv:poll(20) if r then break end end
  t.ok(r, "the request came")
  srv:close() -- its thread waits for an answer that will never come
  local res
  for _ = 1, 200 do res = w() if res then break end sys.sleep(0.02) end
  t.ok(res and res.status == nil, "its connection is closed")
  t.raises(function() srv:poll(0) end, "closed")
  srv:close()
end)

t.test("misuse raises without leaving the server locked: a second answer, a bad header", function()
  local srv = assert(http.listen { host = "127.0.0.1", port = 0, tokens = { { "alice", TOKEN } } })
  local addr = "127.0.0.1:" .. srv:port()
  local errors = {}
  local res = serve_until(srv, { probe(addr, "GET", "/a", { token = TOKEN }) }, function(r)
    -- a header value that is not a string, then one with a newline: raised before anything is held
    errors[#errors + 1] = select(2, pcall(srv.respond, srv, r.id, 200, "x", { ["X-N"] = 1 }))
    errors[#errors + 1] = select(2, pcall(srv.respond, srv, r.id, 200, "x", { ["X-N"] = "a\nb" }))
    srv:respond(r.id, 200, "first")
    -- a second answer: refused (raised while the request is held, GONE once it is released)
    local ok, a, b = pcall(srv.respond, srv, r.id, 200, "second")
    errors[#errors + 1] = ok and tostring(b) or tostring(a)
  end)
  t.eq(res[1].status, 200) t.eq(res[1].body, "first")
  t.ok(tostring(errors[1]):find("must be strings", 1, true), tostring(errors[1]))
  t.ok(tostring(errors[2]):find("newline", 1, true), tostring(errors[2]))
  t.ok(errors[3]:find("answered already", 1, true) or errors[3]:find("gone", 1, true), errors[3])
  -- the server still answers: no lock was left held by the errors above
  res = serve_until(srv, { probe(addr, "GET", "/b", { token = TOKEN }) }, echo(srv), 10)
  t.eq(res[1] and res[1].status, 200, "answered after the misuse")
  srv:close()
end)

sys.rmtree(DIR)
t.done()
