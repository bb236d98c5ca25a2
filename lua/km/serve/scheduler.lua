-- km.serve.scheduler — a service's batches: each candidate judged once, verdicts cached by
-- content, deadlines kept, and every verdict told who is at fault and what it earns.
--
--   local scheduler = require "km.serve.scheduler"
--   local s = scheduler.new { backend = b, metrics = m, identity = code }
--   local batch = s:add(items, { deadline_s = 60, on_verdict = function(i, v) ... end })
--   s:step(ms)            -- polls the backend, hands out verdicts, ends batches at their deadline
--   batch.done, batch.verdicts
--   s:drop(batch)         -- its client left: its candidates no other batch waits for are let go
--
-- An item: { entry (km.serve.catalog's), cand = { source, launch, params, name } | nil,
-- format_ok, format_why (a completion whose blocks did not extract), preset (km.serve.reward's),
-- fresh (skip the cache) }. The content id of an item (M.content_id) covers the judge's
-- protocol (this kmrun's code and caches: km.serve.resident.identity), the task (its key and the
-- fingerprint of its files) and the candidate; items of one id in flight at once (in one batch
-- or several) share one judging, and a verdict whose cause is the candidate is cached by it.
-- Infrastructure verdicts are never cached: the next asking judges again.
local json = require "km.json"
local hash = require "km.hash"
local reward = require "km.serve.reward"
local wall = require("km.timing").wall

local ipairs, pairs, type, tostring, next = ipairs, pairs, type, tostring, next
local M = {}
local Scheduler = {}
Scheduler.__index = Scheduler

M.PROTOCOL = 1
M.CACHE_SIZE = 100000 -- verdicts kept; over it, the oldest half goes

function M.content_id(identity, entry, cand, opts)
  return hash.sha256(json.encode({ protocol = M.PROTOCOL, judge = identity, task = entry.key,
    fingerprint = entry.fingerprint or "", source = cand.source or "", launch = cand.launch or "",
    params = cand.params or {}, opts = opts or {} }, { nan = "null" }))
end

-- scheduler.new { backend, metrics (km.serve.metrics, optional), identity (the judge's
-- code and caches, a string), cache_size }
function M.new(o)
  return setmetatable({ backend = o.backend, metrics = o.metrics, identity = o.identity or "",
    cache = {}, cache_n = 0, cache_size = o.cache_size or M.CACHE_SIZE, cache_seq = 0,
    works = {}, batches = {}, baselines = {} }, Scheduler)
end

local function copy(v)
  local out = {}
  for k, x in pairs(v) do out[k] = x end
  return out
end

function Scheduler:_count(name, labels, n)
  if self.metrics then self.metrics:inc(name, labels, n) end
end

function Scheduler:_cache_put(id, v)
  if self.cache[id] == nil then self.cache_n = self.cache_n + 1 end
  self.cache_seq = self.cache_seq + 1
  self.cache[id] = { v = v, seq = self.cache_seq }
  if self.cache_n > self.cache_size then -- the older half goes
    local cut = self.cache_seq - self.cache_size // 2
    for k, e in pairs(self.cache) do
      if e.seq <= cut then self.cache[k] = nil; self.cache_n = self.cache_n - 1 end
    end
  end
end

-- The verdict of item (for the request at index i of its batch) from the judge's verdict v.
function Scheduler:_finish(item, v, how)
  v = copy(v)
  v.index = item.index
  v.id = item.id
  v.task_id = item.entry and item.entry.id
  if item.format_ok ~= nil then v.format_ok = item.format_ok end
  if item.entry and item.entry.flag then v.task_flag = item.entry.flag end
  v.judged = how.judged or v.judged
  v.cached = how.cached or nil
  v.shared = how.shared or nil
  local r, parts = reward.of(v, item.preset)
  v.reward, v.reward_components, v.reward_preset = r, parts, item.preset.name
  return v
end

local function not_judged(why)
  return { status = "not_judged", cause = "infra", cause_detail = why,
    feedback = "Not judged: " .. why .. ". This says nothing about the candidate." }
end

-- Hands verdict v to item i of batch (once).
function Scheduler:_deliver(batch, i, v)
  if batch.verdicts[i] ~= nil then return end
  batch.verdicts[i] = v
  batch.left = batch.left - 1
  local m = self.metrics
  if m then
    m:inc("kmrun_verdicts_total", { status = v.status, cause = v.cause })
    m:observe("total", wall() - batch.t0)
  end
  if batch.on_verdict then batch.on_verdict(i, v) end
  if batch.left == 0 then
    batch.done = true
    self.batches[batch] = nil
  end
end

-- Starts item i of batch: answered at once (no candidate in the completion, the cache), or
-- joined to the judging of its content id (under way, or begun here).
function Scheduler:_start(batch, i, item)
  if item.format_ok == false then
    local v = { status = "no_code", cause = "candidate", feedback = item.format_why, task = item.entry.id }
    return self:_deliver(batch, i, self:_finish(item, v, { judged = "not_run" }))
  end
  item.id = M.content_id(self.identity, item.entry, item.cand, self.backend.opts)
  local hit = not item.fresh and self.cache[item.id]
  if hit then
    self:_count("kmrun_cache_hits_total")
    return self:_deliver(batch, i, self:_finish(item, hit.v, { cached = true }))
  end
  self:_count("kmrun_cache_misses_total")
  local w = self.works[item.id]
  if w then
    self:_count("kmrun_shared_total")
    w.waiters[#w.waiters + 1] = { batch = batch, i = i, item = item, shared = true }
    return
  end
  w = { id = item.id, waiters = { { batch = batch, i = i, item = item } }, t0 = wall() }
  w.bjob = self.backend:submit(item.entry, item.cand)
  w.bjob.work = w
  self.works[item.id] = w
end

-- s:add(items, { deadline_s, on_verdict(i, v), client }) -> batch { verdicts, left, done }
function Scheduler:add(items, o)
  o = o or {}
  local batch = { items = items, verdicts = {}, left = #items, done = #items == 0, t0 = wall(),
    deadline = o.deadline_s and (wall() + o.deadline_s) or nil, on_verdict = o.on_verdict, client = o.client }
  self.batches[batch] = true
  for i, item in ipairs(items) do
    item.index = item.index or (i - 1)
    self:_start(batch, i, item)
  end
  if batch.left == 0 then batch.done = true; self.batches[batch] = nil end
  return batch
end

-- What this server has measured of a task: its reference and baselines' times (GET /v1/tasks).
function Scheduler:_note_baselines(entry, v)
  local tm = type(v.timing) == "table" and v.timing or nil
  if not tm or not entry then return end
  local function ms(x) return type(x) == "table" and x.median or nil end
  local b = self.baselines[entry.id] or {}
  b.eager_ms = ms(tm.eager) or b.eager_ms
  b.compile_ms = ms(tm.compile) or b.compile_ms
  b.reference_ms = ms(tm.reference) or b.reference_ms
  b.device = self.backend.device and self.backend.device.name
  self.baselines[entry.id] = b
end

-- A judging ended: its verdict to every item that waits for it, and to the cache.
function Scheduler:_ended(w, bjob)
  self.works[w.id] = nil
  local v = copy(bjob.verdict or {})
  v.cause = bjob.cause
  if bjob.cause == "infra" then v.cause_detail = bjob.cause_detail end
  if bjob.tries > 1 then v.judgings = bjob.tries end -- judged again on a fresh worker
  v.judged = self.backend.kind
  v.judge_seconds = wall() - w.t0
  if self.metrics then
    self.metrics:observe("judge", v.judge_seconds)
    for stage, s in pairs(type(v.stage_seconds) == "table" and v.stage_seconds or {}) do
      if type(s) == "number" then self.metrics:observe(stage, s) end
    end
    self.metrics:inc("kmrun_evaluations_total", { status = v.status, cause = v.cause })
  end
  if v.cause == "candidate" then
    self:_cache_put(w.id, v)
    self:_note_baselines(w.waiters[1] and w.waiters[1].item.entry, v)
  end
  for _, wt in ipairs(w.waiters) do
    self:_deliver(wt.batch, wt.i, self:_finish(wt.item, v, { shared = wt.shared }))
  end
end

-- Takes batch's waiters out of the judgings; a judging nobody waits for any more is let go
-- where no worker has it yet (one under way is kept: its verdict goes to the cache).
function Scheduler:_leave(batch)
  for id, w in pairs(self.works) do
    local kept = {}
    for _, wt in ipairs(w.waiters) do if wt.batch ~= batch then kept[#kept + 1] = wt end end
    w.waiters = kept
    if #kept == 0 and self.backend:cancel(w.bjob) then self.works[id] = nil end
  end
end

-- Ends batch now: every item without a verdict comes back not_judged (cause infra).
function Scheduler:expire(batch, why)
  if batch.done then return end
  self:_leave(batch)
  for i, item in ipairs(batch.items) do
    if batch.verdicts[i] == nil then
      local v = not_judged(why)
      v.task = item.entry and item.entry.id
      self:_deliver(batch, i, self:_finish(item, v, { judged = "not_judged" }))
    end
  end
end

-- The client of batch is gone: nothing more is delivered to it.
function Scheduler:drop(batch)
  batch.on_verdict = nil
  self:_leave(batch)
  batch.done = true
  self.batches[batch] = nil
end

-- Polls the backend for up to ms; ends batches past their deadline.
function Scheduler:step(ms)
  local busy = next(self.works) ~= nil
  if busy then
    for _, bjob in ipairs(self.backend:poll(ms)) do
      local w = bjob.work
      if w and self.works[w.id] == w then self:_ended(w, bjob) end
    end
  end
  local now = wall()
  for batch in pairs(self.batches) do
    if batch.deadline and now >= batch.deadline then
      self:expire(batch, "the batch's deadline_s passed before it was judged")
    end
  end
  return busy
end

-- Items queued or being judged.
function Scheduler:pending()
  local n = 0
  for _ in pairs(self.works) do n = n + 1 end
  return n
end

return M
