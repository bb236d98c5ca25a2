-- km.run.sweep — the scheduler: tasks x strategies x models x repeats, concurrently, resumable.
--
-- It plans the work (and shards it), resumes from what the store already holds, prints
-- progress, and routes what each episode asks for: an episode (km.run.episode) runs its
-- strategy as a coroutine and yields a request; a verdict ("eval") goes to the GPU worker
-- pool, a model call ("chat", "chat_many") to the model client, started at once and polled
-- (client:start / client:poll), so GPU work is spread over every worker and model calls
-- overlap, while Lua stays single-threaded. It starts no new episode once one says the
-- model cannot be used (km.run.model's stop rule), and on SIGINT/SIGTERM marks the episodes in
-- flight interrupted.
--
-- Resuming: an episode is identified by (strategy, task, model, repeat) — the repeat is
-- the store's rep column. Finished episodes in the output store are skipped; one left
-- "running" by a killed sweep is marked "abandoned" and run again; one only compiled (no
-- GPU then) is judged from its stored candidate when a GPU is here (no model call: its
-- steps are copied into the new episode, then the verdict), and opts.rerun names the
-- statuses whose episodes run the strategy again.
-- Every step and every finish is a single SQLite statement in WAL mode, so a SIGKILL at any
-- moment loses no finished episode and leaves none half-written.
local episode = require "km.run.episode"
local leases = require "km.run.leases"
local feedback = require "km.feedback"
local statuses = require "km.statuses"
local sig = require "km.signal"
local wall = require("km.timing").wall

local fmt, insert, concat = string.format, table.insert, table.concat
local ipairs, pairs, type, tostring, tonumber, pcall = ipairs, pairs, type, tostring, tonumber, pcall

local M = {}

-- The short reason a failed episode's line carries (km.run.episode's; kept under its old name).
M.reason = episode.reason

----------------------------------------------------------------------------------------
-- plan and shard

-- The work list: every (strategy, task, model, repeat), in a fixed order.
function M.plan(strategies, tasks, models, repeats)
  local list = {}
  for _, s in ipairs(strategies) do
    for _, t in ipairs(tasks) do
      for _, m in ipairs(models) do
        -- m: a model name, or { raw = name or false, label = what the store calls it }
        local raw, label = m, m
        if type(m) == "table" then raw, label = m.raw, m.label end
        for r = 1, repeats do
          insert(list, { strategy = s, task = t, model = label, raw_model = raw, rep = r,
            key = fmt("%s|%s|%s|%d", s.name, t.name, label or "-", r) })
        end
      end
    end
  end
  table.sort(list, function(a, b) return a.key < b.key end)
  return list
end

-- Deterministic split: shard i of n takes every n-th item starting at i (1-based).
function M.shard(list, i, n)
  local out = {}
  for k, item in ipairs(list) do
    if (k - 1) % n == i - 1 then insert(out, item) end
  end
  return out
end

-- The models as the store names them (the default client's model, or its provider), so a
-- resumed sweep recognises the episodes it already finished.
local function model_labels(models, make_client)
  local labels = {}
  for i, m in ipairs(models) do
    local cfg = m and { model = m } or make_client(nil):config()
    labels[i] = { raw = m, label = m or cfg.model or cfg.provider }
  end
  return labels
end

----------------------------------------------------------------------------------------
-- resume

local function has_candidate(e)
  local f = e.final
  return type(f) == "table" and type(f.candidate) == "table" and type(f.candidate.source) == "string"
end

-- The key an episode of the store runs under (as M.plan's item.key).
local function key_of(e)
  return fmt("%s|%s|%s|%d", e.strategy or "", e.task or "", e.model or "-", e.rep or 0)
end

-- The latest episode of each key in the store (none with fresh); those left running by a
-- run that is gone are marked abandoned (never one a live run holds: km.run.leases), and the
-- statuses that run again are left out. seen[key] is the newest finished episode id of each
-- key (the claims' "seen": one finished later was another run's work).
-- -> latest (key -> episode), abandoned (a count), seen
local function latest_episodes(db, fresh)
  local latest, abandoned, seen = {}, 0, {}
  for _, e in ipairs(db:episodes {}) do
    local key = key_of(e)
    if e.status == "running" then
      if db:abandon(e.id, key, { note = "left running by an interrupted sweep; run again" }) then
        abandoned = abandoned + 1
      end
    else
      if e.id > (seen[key] or 0) then seen[key] = e.id end
      if not fresh and not statuses.prop(e.status, "rerun") then -- abandoned, interrupted, model_error run again
        latest[key] = e
      end
    end
  end
  return latest, abandoned, seen
end

-- Counts a planned episode finished in an earlier run.
local function count_before(before, e)
  before.n = before.n + 1
  if e.status == "compiled" then before.compiled = before.compiled + 1 end
  local sm = type(e.summary) == "table" and e.summary or {}
  if e.status == "correct" then
    before.correct = before.correct + 1
    if tonumber(sm.speedup) then
      local over = sm.speedup_over or "unnamed"
      before.speedups_by[over] = before.speedups_by[over] or {}
      insert(before.speedups_by[over], tonumber(sm.speedup))
    end
  end
end

-- What of the plan is left to run, given the store. The latest episode of each key
-- decides; the statuses in opts.rerun run again; without opts.rerun, compile-only ones are
-- judged from their stored candidate when there is a pool (docs/sweeps.md).
-- -> todo, { before = { n, correct, compiled, speedups_by }, redo = status -> n, abandoned, judge }
function M.resume(db, plan, opts)
  local rerun = {}
  for _, st in ipairs(opts.rerun or {}) do rerun[st] = true end
  local judge = not opts.rerun and opts.pool ~= nil
  local latest, abandoned, seen = latest_episodes(db, opts.fresh)
  local todo, redo = {}, {}
  local before = { n = 0, correct = 0, compiled = 0, speedups_by = {} }
  for _, item in ipairs(plan) do
    item.seen = seen[item.key] or 0
    local e = latest[item.key]
    local st = e and e.status
    if e and (rerun.all or rerun[st] or (st == "compiled" and judge and has_candidate(e))) then
      if not (rerun.all or rerun[st]) then item.judged_from = e end
      insert(todo, item)
      redo[st] = (redo[st] or 0) + 1
    elseif e then
      count_before(before, e)
    else
      insert(todo, item)
    end
  end
  return todo, { before = before, redo = redo, abandoned = abandoned, judge = judge }
end

----------------------------------------------------------------------------------------
-- progress

local function is_tty()
  return os.getenv("TERM") and os.getenv("TERM") ~= "dumb" and require("km.sys").isatty(io.stdout)
end

-- The line before any episode runs: what is planned, finished before and run again.
local function intro_line(n_plan, n_todo, resumed, shard)
  local again = {}
  for st, n in pairs(resumed.redo) do again[#again + 1] = fmt("%d %s", n, st) end
  table.sort(again)
  return fmt("sweep: %d episodes planned, %d already finished, %d to run%s%s%s\n", n_plan, n_plan - n_todo, n_todo,
    resumed.abandoned > 0 and fmt(" (%d abandoned ones again)", resumed.abandoned) or "",
    #again > 0 and fmt(" (again: %s%s)", concat(again, ", "),
      (resumed.redo.compiled and resumed.judge) and ", compile-only before, judged now from their stored code" or "") or "",
    shard and fmt(", shard %d/%d", shard[1], shard[2]) or "")
end

-- Episodes a minute, or a second once past 1,000 a minute ("12.5/min", "40.2/s").
function M.rate_text(per_min)
  if per_min >= 1000 then return fmt("%.1f/s", per_min / 60) end
  return fmt("%.1f/min", per_min)
end

-- The progress printer: a line per finished episode, aligned columns under a header; on a
-- terminal a bar instead, and after it (show() with no arguments, at the end of the run) the
-- lines of the episodes that did not end correct, so a terminal shows what failed as piped
-- output does (compile-only ones, `compiled` on a machine without a GPU, are counted in one
-- line instead). Nothing when quiet. tally: { total, finished, correct }.
local function printer(todo, tally, quiet)
  if quiet then return function() end end
  local tty, t0, header_done = is_tty(), wall(), false
  local w = { task = 4, strategy = 8, model = 5 }
  for _, item in ipairs(todo) do
    w.task = math.max(w.task, #item.task.name)
    w.strategy = math.max(w.strategy, #item.strategy.name)
    w.model = math.max(w.model, #tostring(item.model or "-"))
  end
  local line_fmt = fmt("%%-%ds  %%-%ds  %%-%ds  %%3s  %%-13s  %%s\n", w.task, w.strategy, w.model)
  local held, compiled, bar_open = {}, 0, false
  local function line(item, status, extra)
    if not header_done then
      header_done = true
      io.stdout:write(fmt(line_fmt, "task", "strategy", "model", "rep", "status",
        fmt("%-14s %-5s %-11s %-7s %s", "speedup", "evals", "model calls", "seconds", "reason")))
    end
    io.stdout:write(fmt(line_fmt, item.task.name, item.strategy.name, tostring(item.model or "-"), item.rep, status,
      extra or ""))
  end
  local function finish()
    if bar_open then io.stdout:write("\n") bar_open = false end
    if #held > 0 then
      io.stdout:write(fmt("%d episode%s did not end correct:\n", #held, #held == 1 and "" or "s"))
      for _, h in ipairs(held) do line(h[1], h[2], h[3]) end
    end
    if compiled > 0 then
      io.stdout:write(fmt("%d episode%s compiled and not run (no GPU here)\n", compiled, compiled == 1 and "" or "s"))
    end
    held, compiled = {}, 0
    io.stdout:flush()
  end
  return function(item, status, extra)
    if not item then
      if tty then finish() end
      return
    end
    local total, finished = tally.total, tally.finished
    local rate = finished / math.max(wall() - t0, 1e-9) * 60
    local eta = rate > 0 and (total - finished) / rate or 0
    if tty then
      if status == "compiled" then compiled = compiled + 1
      elseif status ~= "correct" then held[#held + 1] = { item, status, extra } end
      local width = 30
      local fill = total > 0 and math.floor(width * finished / total) or width
      io.stdout:write(fmt("\r[%s%s] %d/%d episodes, %d correct, %s, ETA %dm%02ds ", string.rep("#", fill),
        string.rep(".", width - fill), finished, total, tally.correct, M.rate_text(rate), eta // 60, math.floor(eta % 60)))
      bar_open = true
      if finished == total then finish() end
    else
      line(item, status, extra)
    end
    io.stdout:flush()
  end
end

-- Counts a finished episode in the tally and prints its line.
local function count_done(ep, tally, show)
  tally.finished = tally.finished + 1
  local status, v, sm = ep.status, ep.verdict, ep.summary
  if ep.error then
    io.stderr:write("sweep: episode ", ep.item.key, " failed: ", tostring(ep.error), "\n")
    show(ep.item, "error", fmt("%-14s %-5s %-11s %-7s %s", "-", "-", "-", "-", M.reason(nil, ep.error) or ""))
    return
  end
  if status == "model_error" then tally.model_errors = tally.model_errors + 1 end
  if status == "compiled" then tally.compiled = tally.compiled + 1 end
  if status == "correct" then
    tally.correct = tally.correct + 1
    if v and v.speedup then
      insert(tally.speedups, v.speedup)
      -- kept apart by what each is over: a geomean across baselines means nothing
      local over = v.speedup_over or "unnamed"
      tally.speedups_by[over] = tally.speedups_by[over] or {}
      insert(tally.speedups_by[over], v.speedup)
    end
  end
  show(ep.item, status, (fmt("%-14s %-5d %-11d %-7.1f %s", feedback.speedup_cell(status == "correct" and v or nil),
    sm and sm.evals or 0, sm and sm.model_calls or 0, sm and sm.seconds or 0, sm and sm.reason or ""):gsub("%s+$", "")))
  -- a model that cannot be reached, refuses the key or is out of budget stops the run
  -- cleanly: no new episodes start; the ones in flight finish
  if ep.stop then tally.stopped = tally.stopped or ep.stop end
end

----------------------------------------------------------------------------------------
-- the loop: requests to the GPU pool and the model clients

-- One client per model (its budget spans the sweep); replays get one per task, since each
-- task plays back its own recorded turns. -> get(model, task_name), clients (key -> client)
local function client_cache(make_client, replay)
  local clients = {}
  local function get(model, task_name)
    task_name = replay and task_name or nil
    local key = (model or "-") .. "|" .. (task_name or "")
    if not clients[key] then clients[key] = make_client(model, task_name) end
    return clients[key]
  end
  return get, clients
end

-- Sends an episode's request on its way; waiting[handle] = what to do with its answer.
-- A start() that raises comes back to the episode as START_FAILED.
local function route(ep, waiting, pool, advance, what, a, b, c)
  if what == "eval" then
    waiting[pool:submit(a, b, c)] = function(job) advance(ep, job.verdict) end
  elseif what == "chat" then
    local ok, req = pcall(a.start, a, b, c)
    if not ok then return advance(ep, nil, req, "START_FAILED") end
    waiting[req] = function(r) advance(ep, r.reply, r.error, r.code, r.info) end
  elseif what == "chat_many" then
    local results, left = {}, #b
    if left == 0 then return advance(ep, results) end
    for i, messages in ipairs(b) do
      local ok, req = pcall(a.start, a, messages, c)
      if not ok then return advance(ep, nil, req, "START_FAILED") end
      waiting[req] = function(r)
        results[i] = { r.reply, r.error, r.code, r.info }
        left = left - 1
        if left == 0 then advance(ep, results) end
      end
    end
  else
    error("sweep: unexpected request " .. tostring(what))
  end
end

-- Waits a little for what is in flight and hands each answer on: model replies (a short
-- wait when no GPU work is pending), then verdicts (a short wait while model transfers
-- are in flight, so they keep moving). Nothing is handed on once a signal is caught.
local function collect(pool, clients, waiting)
  local gpu_busy = pool and pool:pending() > 0
  local chats = 0
  for _, client in pairs(clients) do
    if client.poll then
      for _, r in ipairs(client:poll(gpu_busy and 0 or 50) or {}) do
        local k = waiting[r.request]
        if k and not sig.caught() then waiting[r.request] = nil; k(r) end
      end
    end
    if client.pending then chats = chats + client:pending() end
  end
  if pool and pool:pending() > 0 then
    for _, job in ipairs(pool:poll(chats > 0 and 5 or 100)) do
      local k = waiting[job]
      if k and not sig.caught() then waiting[job] = nil; k(job) end
    end
  end
end

local function count(set) local n = 0 for _ in pairs(set) do n = n + 1 end return n end

-- Runs the episodes of `todo`, at most `jobs` at once, until all have ended, the run is
-- stopped (no new episode starts; those in flight finish) or a signal is caught.
-- -> the episodes still in flight, the index of the first item not started
local function schedule(todo, env, clients, jobs, tally, show)
  local running, waiting, next_item = {}, {}, 1
  local function advance(ep, ...)
    local what, a, b, c = ep:resume(...)
    if what == "done" then
      running[ep] = nil
      count_done(ep, tally, show)
    else
      route(ep, waiting, env.pool, advance, what, a, b, c)
    end
  end
  local function can_start() return next_item <= #todo and not tally.stopped and not sig.caught() end
  local L = env.leases
  while (can_start() or next(running)) and not sig.caught() do
    while can_start() and count(running) < jobs do
      local item = todo[next_item]
      next_item = next_item + 1
      if L:claim(item) then
        local ep = L:start(item, function() return episode.start(item, env) end)
        running[ep] = true
        advance(ep)
      else
        tally.total = tally.total - 1 -- another run's: not this run's to finish
      end
    end
    collect(env.pool, clients, waiting)
    L:tick()
  end
  show() -- the end of the run: a terminal's bar is followed by what did not end correct
  return running, next_item
end

----------------------------------------------------------------------------------------
-- the sweep

-- Runs the sweep. opts: strategies = { {name, fn, path} }, tasks, models (list of names or
-- { false } for the default), repeats, jobs, store (open km.Store), pool (or nil), args
-- (runner options), make_client(model, task_name) -> client, guidance, shard = {i, n},
-- replay (a client per task), rerun (statuses whose episodes run the strategy again, "all"
-- for every one; without it, compile-only ones are judged from their stored candidate when
-- there is a pool), fresh (ignore what the store holds), name, argv. The result counts what
-- ran now; before = { n, correct, compiled, speedups_by } counts the planned episodes
-- finished in earlier runs.
function M.run(opts)
  local db, pool, args = opts.store, opts.pool, opts.args
  local plan = M.plan(opts.strategies, opts.tasks, model_labels(opts.models, opts.make_client), opts.repeats or 1)
  if opts.shard then plan = M.shard(plan, opts.shard[1], opts.shard[2]) end
  local todo, resumed = M.resume(db, plan, opts)
  local run_id = db:begin_run { name = opts.name or "sweep", config = { args = opts.argv, planned = #plan, todo = #todo,
    shard = opts.shard and fmt("%d/%d", opts.shard[1], opts.shard[2]) or nil } }
  if not args.quiet then io.stdout:write(intro_line(#plan, #todo, resumed, opts.shard)) end
  local tally = { total = #todo, finished = 0, correct = 0, compiled = 0, model_errors = 0, speedups = {}, speedups_by = {} }
  local get_client, clients = client_cache(opts.make_client, opts.replay)
  local env = { store = db, run_id = run_id, leases = leases.new(db, run_id), pool = pool, client = get_client,
    guidance = opts.guidance, args = args }
  local t0 = wall()
  -- SIGINT/SIGTERM: no traceback; the loop stops, what was in flight is marked interrupted
  sig.catch()
  -- 4 episodes per GPU worker by default: while one is judged, the others compile their next
  -- candidates (NVRTC: a few hundred ms each with an empty cache) or wait for the model, and
  -- the driver compiles the waiting ones ahead; with 2 the GPU waited for compiles (bench/RESULTS.md)
  local running, next_item = schedule(todo, env, clients, opts.jobs or math.max(2, 4 * (pool and #pool.slots or 1)),
    tally, printer(todo, tally, args.quiet))
  local interrupted = sig.caught()
  sig.release()
  local n_interrupted = 0
  if interrupted then
    for ep in pairs(running) do if ep:interrupt(interrupted) then n_interrupted = n_interrupted + 1 end end
    db:finish_run(run_id, "interrupted")
  else
    if tally.stopped then io.stderr:write("kmrun: stopping: ", tostring(tally.stopped), "\n") end
    db:finish_run(run_id, tally.stopped and "stopped" or "finished")
  end
  return { planned = #plan, ran = tally.finished, correct = tally.correct, compiled = tally.compiled, seconds = wall() - t0,
    skipped = #plan - #todo, before = resumed.before, speedups = tally.speedups, speedups_by = tally.speedups_by,
    stopped = tally.stopped, model_errors = tally.model_errors, interrupted = interrupted,
    n_interrupted = n_interrupted, not_started = #todo - next_item + 1, held = env.leases.held,
    holders = env.leases.holders }
end

return M
