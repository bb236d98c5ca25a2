-- km.serve.requests — a POST /v1/evaluate (or /v1/jobs) body read into scheduler items,
-- or the reason it is refused (docs/service.md, "API").
--
--   local requests = require "km.serve.requests"
--   local items, opts, why = requests.parse(body_text, catalog)
--   -- opts: { deadline_s, stream, reward (preset), fresh }; why: a message for a 400/413
--
-- A request is { task, precision?, candidate = { kernel_cu, launch_lua, params? } } or
-- { task, precision?, completion = "a model's reply" }; a completion's fenced blocks are
-- extracted as strategies extract them (km.run.prompt.extract): where that fails the item is
-- answered `no_code` with format_ok = false and the extraction's message as feedback. Each may
-- carry its own `reward` and `fresh`; the batch's apply otherwise.
local json = require "km.json"
local prompt = require "km.run.prompt"
local reward = require "km.serve.reward"
local verdict = require "km.verdict"

local fmt = string.format
local type, pairs, ipairs, tostring, math, next = type, pairs, ipairs, tostring, math, next

local M = {}
M.MAX_ITEMS = 4096   -- requests in one batch
M.MAX_DEADLINE = 86400

local function bad(i, text) return nil, nil, fmt("requests[%d]: %s", i - 1, text), 400 end

-- A candidate's params: NVRTC defines (a name, and a number, boolean or a short word).
local function params_ok(p)
  if p == nil then return {} end
  if type(p) ~= "table" then return nil, "candidate.params: an object of NAME = value" end
  local out = {}
  for k, v in pairs(p) do
    if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then return nil, "candidate.params: a name is [A-Za-z_][A-Za-z0-9_]*" end
    local tv = type(v)
    if tv == "string" and not v:match("^[%w_.+%-]*$") then return nil, "candidate.params." .. k .. ": a number or a word" end
    if tv ~= "number" and tv ~= "string" and tv ~= "boolean" then return nil, "candidate.params." .. k .. ": a number or a word" end
    out[k] = v
  end
  return out
end

-- One request -> item | nil, why, http status
local function item_of(i, r, catalog, batch)
  if type(r) ~= "table" then return bad(i, "a request is an object { task, candidate | completion }") end
  local entry, why = catalog:get(r.task, r.precision)
  if not entry then return bad(i, why) end
  local preset, pwhy = reward.preset(r.reward == nil and batch.reward or r.reward)
  if not preset then return bad(i, pwhy) end
  local item = { entry = entry, preset = preset, fresh = r.fresh == true or (r.fresh == nil and batch.fresh == true) }
  local c = r.candidate
  if type(c) == "table" then
    if type(c.kernel_cu) ~= "string" or type(c.launch_lua) ~= "string" then
      return bad(i, "candidate: kernel_cu and launch_lua are strings")
    end
    local big = verdict.oversized(c.kernel_cu, c.launch_lua)
    if big then return nil, nil, fmt("requests[%d]: %s", i - 1, big), 413 end
    local params, perr = params_ok(c.params)
    if not params then return bad(i, perr) end
    item.cand = { name = type(c.name) == "string" and c.name or nil, source = c.kernel_cu, launch = c.launch_lua, params = params }
  elseif type(r.completion) == "string" then
    local cand, ewhy = prompt.extract(r.completion)
    if cand and verdict.oversized(cand.source, cand.launch) then
      return nil, nil, fmt("requests[%d]: %s", i - 1, verdict.oversized(cand.source, cand.launch)), 413
    end
    item.format_ok = cand ~= nil
    if cand then item.cand = { source = cand.source, launch = cand.launch, params = cand.params or {} }
    else item.format_why = ewhy end
  else
    return bad(i, "a request has a candidate { kernel_cu, launch_lua, params } or a completion (text)")
  end
  return item
end

-- The batch's options -> opts | nil, why
local function batch_opts(b)
  local o = { stream = b.stream == true, fresh = b.fresh == true, reward = b.reward }
  if b.deadline_s ~= nil then
    if type(b.deadline_s) ~= "number" or b.deadline_s <= 0 or b.deadline_s ~= b.deadline_s then
      return nil, "deadline_s: a number of seconds > 0"
    end
    o.deadline_s = math.min(b.deadline_s, M.MAX_DEADLINE)
  end
  if b.stream ~= nil and type(b.stream) ~= "boolean" then return nil, "stream: true or false" end
  return o
end

-- body (JSON text) -> items, opts | nil, nil, why, http status
function M.parse(body, catalog)
  local b = json.decode(body or "")
  if type(b) ~= "table" then return nil, nil, "the body is not a JSON object", 400 end
  if type(b.requests) ~= "table" or (#b.requests == 0 and next(b.requests) ~= nil) then
    return nil, nil, "requests: a list of { task, candidate | completion }", 400
  end
  if #b.requests > M.MAX_ITEMS then return nil, nil, fmt("requests: at most %d in one batch", M.MAX_ITEMS), 413 end
  local o, why = batch_opts(b)
  if not o then return nil, nil, why, 400 end
  local items = {}
  for i, r in ipairs(b.requests) do
    local item, _, iwhy, code = item_of(i, r, catalog, o)
    if not item then return nil, nil, iwhy, code end
    items[i] = item
  end
  return items, o
end

return M
