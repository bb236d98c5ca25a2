-- km.sweep — tasks x strategies x models x repeats, concurrently, resumable.
--
-- Each episode runs as a coroutine. When a strategy asks for a verdict, its coroutine
-- yields and the job goes to the worker pool; when it asks a model and the client can run
-- requests asynchronously (client:start / client:poll), that yields too. So GPU work is
-- spread over every worker and model calls overlap, while Lua stays single-threaded.
--
-- Resuming: an episode is identified by (strategy, task, model, repeat) — the repeat is
-- the store's rep column. Finished episodes in the output store are skipped; one left
-- "running" by a killed sweep is marked "abandoned" and run again; one only compiled (no
-- GPU then) is judged from its stored candidate when a GPU is here (no model call: its
-- steps are copied into the new episode, then the verdict), and opts.rerun names the
-- statuses whose episodes run the strategy again.
-- Every step and every finish is a single SQLite statement in WAL mode, so a SIGKILL at any
-- moment loses no finished episode and leaves none half-written.
local episode_ctx = require "km.ctx"
local feedback = require "km.feedback"
local statuses = require "km.statuses"
local wall = require("km.timing").wall

local fmt, insert, concat = string.format, table.insert, table.concat
local ipairs, pairs, type, tostring, pcall = ipairs, pairs, type, tostring, pcall

local M = {}

-- The short reason a failed episode's line carries: the first line that says something
-- (a compile log's first error, else the feedback's or the error's first line), without
-- a Lua chunk's "file:line:" prefix, cut to `width` characters.
function M.reason(verdict, err, width)
  width = width or 72
  local text
  if err then text = tostring(err)
  elseif type(verdict) == "table" then
    local log = type(verdict.compile_log) == "string" and verdict.compile_log or ""
    text = log:match("error: ([^\n]+)") or verdict.feedback or verdict.why or verdict.error
    if type(text) == "table" then text = text.message end
  end
  if type(text) ~= "string" then return nil end
  local line = text:match("^%s*([^\n]*%S)") or ""
  -- "The kernel does not compile. NVRTC says:" introduces the log: the next line is the news
  if line:match(":$") then line = line .. " " .. (text:match("\n%s*([^\n]*%S)") or "") end
  repeat local n line, n = line:gsub("^[%w_%./%-]+%.lua:%d+: ", "") until n == 0
  line = line:gsub("%s+", " ")
  if #line > width then line = line:sub(1, width - 3) .. "..." end
  return line ~= "" and line or nil
end

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

local function is_tty()
  return os.getenv("TERM") and os.getenv("TERM") ~= "dumb" and require("km.sys").isatty(io.stdout)
end

-- A pool as ctx.eval sees it inside a coroutine: eval yields until the verdict is back.
local function yielding_pool(pool)
  return setmetatable({
    eval = function(_, t, cand, opts) return coroutine.yield("eval", t, cand, opts) end,
  }, { __index = pool })
end

-- A client whose chat yields when it can run asynchronously.
local function yielding_client(client)
  if not client.start then return client end
  return setmetatable({
    chat = function(_, messages, opts)
      local reply, err, code, info = coroutine.yield("chat", client, messages, opts)
      -- start() raised (misuse): raise it here, inside the episode that caused it
      if reply == nil and code == "START_FAILED" then error(err, 2) end
      return reply, err, code, info
    end,
  }, { __index = function(_, k)
    local v = client[k]
    if type(v) == "function" then return function(_, ...) return v(client, ...) end end
    return v
  end })
end

-- The strategy that judges a compile-only episode's stored candidate where there is a GPU:
-- the earlier episode's steps are copied (its prompts and model turns stay whole for
-- exports), then the candidate is judged. No model call.
local function judge_stored(db, earlier)
  return function(ctx)
    local ep = db:episode(earlier.id)
    for _, st in ipairs(ep and ep.steps or {}) do
      ctx.log(st.kind, st.payload, { started_at = st.started_at, duration_ms = st.duration_ms })
    end
    ctx.log("note", { text = "compile-only before (episode " .. tostring(earlier.uuid) ..
      "): its stored candidate judged here, without a model call", judged_from = earlier.uuid })
    local cand = earlier.final.candidate
    return cand, ctx.eval(cand)
  end
end

-- The model's cost an episode judged from a stored candidate carries over from the one it
-- was judged from (the report counts only a key's latest episode).
local CARRIED = { "model_calls", "tokens", "requests", "dollars", "latency_ms", "truncated", "reasoning_chars",
  "max_reasoning_chars", "forms" }

local function has_candidate(e)
  local f = e.final
  return type(f) == "table" and type(f.candidate) == "table" and type(f.candidate.source) == "string"
end

-- Runs the sweep. opts: strategies = { {name, fn, path} }, tasks, models (list of names or
-- { false } for the default), repeats, jobs, store (open km.Store), pool (or nil), args
-- (runner options), make_client(model) -> client, guidance, shard = {i, n}, out (path),
-- rerun (statuses whose episodes run the strategy again, "all" for every one; without it,
-- compile-only ones are judged from their stored candidate when there is a pool), fresh
-- (ignore what the store holds). The result counts what ran now; before = { n, correct,
-- compiled, speedups_by } counts the planned episodes finished in earlier runs.
function M.run(opts)
  local db, pool, args = opts.store, opts.pool, opts.args
  -- the model as the store names it (the default client's model, or its provider), so a
  -- resumed sweep recognises the episodes it already finished
  local labels = {}
  for i, m in ipairs(opts.models) do
    local cfg = m and { model = m } or opts.make_client(nil):config()
    labels[i] = { raw = m, label = m or cfg.model or cfg.provider }
  end
  local plan = M.plan(opts.strategies, opts.tasks, labels, opts.repeats or 1)
  if opts.shard then plan = M.shard(plan, opts.shard[1], opts.shard[2]) end

  -- resume: what is already finished in this store. The latest episode of each key
  -- decides; the statuses in `rerun` run again: by default "compiled" when a GPU is here,
  -- so a sweep first run without one has its episodes judged (docs/sweeps.md).
  local rerun, judge = {}, false
  for _, st in ipairs(opts.rerun or {}) do rerun[st] = true end
  if not opts.rerun and pool then judge = true end
  local latest, abandoned = {}, 0
  for _, e in ipairs(opts.fresh and {} or db:episodes {}) do
    local key = fmt("%s|%s|%s|%d", e.strategy or "", e.task or "", e.model or "-", e.rep or 0)
    if e.status == "running" then
      db:finish_episode(e.id, "abandoned", { summary = { note = "left running by an interrupted sweep; run again" } })
      abandoned = abandoned + 1
    elseif not statuses.prop(e.status, "rerun") then -- abandoned, interrupted, model_error run again
      latest[key] = e
    end
  end
  local todo, redo = {}, {}
  local before = { n = 0, correct = 0, compiled = 0, speedups_by = {} }
  for _, item in ipairs(plan) do
    local e = latest[item.key]
    local st = e and e.status
    if e and (rerun.all or rerun[st]) then
      insert(todo, item)
      redo[st] = (redo[st] or 0) + 1
    elseif e and st == "compiled" and judge and has_candidate(e) then
      item.judged_from = e
      insert(todo, item)
      redo[st] = (redo[st] or 0) + 1
    elseif e then
      before.n = before.n + 1
      if st == "compiled" then before.compiled = before.compiled + 1 end
      local sm = type(e.summary) == "table" and e.summary or {}
      if st == "correct" then
        before.correct = before.correct + 1
        if tonumber(sm.speedup) then
          local over = sm.speedup_over or "unnamed"
          before.speedups_by[over] = before.speedups_by[over] or {}
          insert(before.speedups_by[over], tonumber(sm.speedup))
        end
      end
    else
      insert(todo, item)
    end
  end
  local run_id = db:begin_run { name = opts.name or "sweep", config = { args = opts.argv, planned = #plan, todo = #todo,
    shard = opts.shard and fmt("%d/%d", opts.shard[1], opts.shard[2]) or nil } }

  local tty = is_tty()
  local total, finished, correct, speedups, speedups_by, stopped = #todo, 0, 0, {}, {}, nil
  local t0 = wall()
  -- a line per finished episode: aligned columns under a header (or a bar on a terminal)
  local w = { task = 4, strategy = 8, model = 5 }
  for _, item in ipairs(todo) do
    w.task = math.max(w.task, #item.task.name)
    w.strategy = math.max(w.strategy, #item.strategy.name)
    w.model = math.max(w.model, #tostring(item.model or "-"))
  end
  local line_fmt = fmt("%%-%ds  %%-%ds  %%-%ds  %%3s  %%-13s  %%s\n", w.task, w.strategy, w.model)
  local header_done = false
  local function progress(item, status, extra)
    if args.quiet then return end
    local rate = finished / math.max(wall() - t0, 1e-9) * 60
    local eta = rate > 0 and (total - finished) / rate or 0
    if tty then
      local width = 30
      local fill = total > 0 and math.floor(width * finished / total) or width
      io.stdout:write(fmt("\r[%s%s] %d/%d episodes, %d correct, %.1f/min, ETA %dm%02ds ",
        string.rep("#", fill), string.rep(".", width - fill), finished, total, correct, rate, eta // 60, math.floor(eta % 60)))
      if finished == total then io.stdout:write("\n") end
    else
      if not header_done then
        header_done = true
        io.stdout:write(fmt(line_fmt, "task", "strategy", "model", "rep", "status",
          fmt("%-14s %-5s %-11s %-7s %s", "speedup", "evals", "model calls", "seconds", "reason")))
      end
      io.stdout:write(fmt(line_fmt, item.task.name, item.strategy.name, tostring(item.model or "-"), item.rep, status,
        extra or ""))
    end
    io.stdout:flush()
  end
  if not args.quiet then
    local again_note = {}
    for st, n in pairs(redo) do again_note[#again_note + 1] = fmt("%d %s", n, st) end
    table.sort(again_note)
    io.stdout:write(fmt("sweep: %d episodes planned, %d already finished, %d to run%s%s%s", #plan, #plan - #todo, #todo,
      abandoned > 0 and fmt(" (%d abandoned ones again)", abandoned) or "",
      #again_note > 0 and fmt(" (again: %s%s)", concat(again_note, ", "),
        (redo.compiled and judge) and ", compile-only before, judged now from their stored code" or "") or "",
      opts.shard and fmt(", shard %d/%d", opts.shard[1], opts.shard[2]) or ""), "\n")
  end

  local clients = {}
  -- one client per model (its budget spans the sweep); replays get one per task, since
  -- each task plays back its own recorded turns
  local function client_for(model, task_name)
    local key = (model or "-") .. "|" .. (task_name or "")
    if not clients[key] then clients[key] = opts.make_client(model, task_name) end
    return clients[key]
  end

  -- the episode coroutines
  local running, next_item = {}, 1
  local jobs = opts.jobs or math.max(2, 2 * (pool and #pool.slots or 1))
  local function start(item)
    local t = item.task
    local client = client_for(item.raw_model, opts.replay and t.name)
    local ep = db:begin_episode(run_id, { task = t.name, strategy = item.strategy.name, model = item.model, rep = item.rep })
    local env = { store = db, episode = ep, pool = pool and yielding_pool(pool) or nil, client = yielding_client(client),
      guidance = opts.guidance, args = args, arch = pool and pool.device.arch or "sm_90" }
    local ctx = episode_ctx.new(t, env)
    local usage0 = client:usage()
    local fn = item.judged_from and judge_stored(db, item.judged_from) or item.strategy.fn
    local co = coroutine.create(function()
      local t1 = wall()
      local ok, cand, verdict = pcall(fn, ctx)
      local status, err
      if not ok then
        db:append(ep, "note", { text = "strategy error", error = tostring(cand) })
        status, err, cand, verdict = "error", cand, nil, nil
      else
        -- a strategy that gave up because the model failed ends on model_error (km.model)
        verdict = episode_ctx.final_verdict(ctx, verdict) or {}
        status = require("km.model").episode_status(verdict)
      end
      local summary = episode_ctx.summary(t, ctx, verdict, wall() - t1, usage0, client:usage())
      summary.sweep_key = item.key
      if item.judged_from then
        local earlier = type(item.judged_from.summary) == "table" and item.judged_from.summary or {}
        for _, k in ipairs(CARRIED) do if earlier[k] ~= nil then summary[k] = earlier[k] end end
        summary.judged_from = item.judged_from.uuid
      end
      -- why it did not end correct, in a line (the episode's line shows it; so does the store)
      if statuses.failure(status) then
        summary.reason = M.reason(verdict, err) or (status == "error" and "the strategy returned no verdict") or nil
      end
      db:finish_episode(ep, status, { final = cand and { candidate = cand, verdict = verdict } or nil, summary = summary })
      return status, verdict, ctx, summary
    end)
    return { co = co, item = item, ep = ep, ctx = ctx, t0 = wall() }
  end

  local waiting = {} -- job or request -> running entry
  local model_errors = 0 -- episodes that ended on a model error
  local function step(entry, ...)
    local res = table.pack(coroutine.resume(entry.co, ...))
    if not res[1] then
      io.stderr:write("sweep: episode ", entry.item.key, " failed: ", tostring(res[2]), "\n")
      entry.dead = true
      finished = finished + 1
      progress(entry.item, "error", fmt("%-14s %-5s %-11s %-7s %s", "-", "-", "-", "-", M.reason(nil, res[2]) or ""))
      return
    end
    if coroutine.status(entry.co) == "dead" then
      entry.dead = true
      finished = finished + 1
      local v, ctx, sm = res[3], res[4], res[5]
      if res[2] == "model_error" then model_errors = model_errors + 1 end
      if res[2] == "correct" then
        correct = correct + 1
        if v and v.speedup then
          insert(speedups, v.speedup)
          -- kept apart by what each is over: a geomean across baselines means nothing
          local over = v.speedup_over or "unnamed"
          speedups_by[over] = speedups_by[over] or {}
          insert(speedups_by[over], v.speedup)
        end
      end
      progress(entry.item, res[2], (fmt("%-14s %-5d %-11d %-7.1f %s",
        feedback.speedup_cell(res[2] == "correct" and v or nil), sm and sm.evals or 0, sm and sm.model_calls or 0,
        sm and sm.seconds or 0, sm and sm.reason or ""):gsub("%s+$", "")))
      -- a model that cannot be reached, refuses the key or is out of budget stops the run
      -- cleanly: no new episodes start; the ones in flight finish
      local me = ctx and ctx.model_error
      if me and (me.code == "BUDGET_EXCEEDED" or me.code == "CONNECT" or tostring(me.code):match("^HTTP_40[13]$")) then
        stopped = stopped or me.message
      end
      return
    end
    local what = res[2]
    if what == "eval" then
      local job = pool:submit(res[3], res[4], res[5])
      waiting[job] = entry
    elseif what == "chat" then
      local client = res[3]
      local okr, req = pcall(client.start, client, res[4], res[5])
      if not okr then return step(entry, nil, req, "START_FAILED") end
      waiting[req] = entry
    else
      error("sweep: unexpected yield " .. tostring(what))
    end
  end

  -- SIGINT/SIGTERM: no traceback; the loop stops, what was in flight is marked interrupted
  local sig = require "km.signal"
  sig.catch()
  while ((next_item <= #todo and not stopped) or next(running)) and not sig.caught() do
    while next_item <= #todo and #running < jobs and not stopped and not sig.caught() do
      local entry = start(todo[next_item])
      next_item = next_item + 1
      insert(running, entry)
      step(entry)
    end
    -- model requests in flight (wait a little for them when no GPU work is pending)
    local gpu_busy = pool and pool:pending() > 0
    for _, client in pairs(clients) do
      if client.poll then
        for _, r in ipairs(client:poll(gpu_busy and 0 or 50) or {}) do
          local entry = waiting[r.request]
          if entry and not sig.caught() then waiting[r.request] = nil; step(entry, r.reply, r.error, r.code, r.info) end
        end
      end
    end
    -- verdicts (a short wait while model transfers are in flight, so they keep moving)
    if pool and pool:pending() > 0 then
      local chats = 0
      for _, client in pairs(clients) do if client.pending then chats = chats + client:pending() end end
      for _, job in ipairs(pool:poll(chats > 0 and 5 or 100)) do
        local entry = waiting[job]
        if entry and not sig.caught() then waiting[job] = nil; step(entry, job.verdict) end
      end
    end
    local alive = {}
    for _, e in ipairs(running) do if not e.dead then insert(alive, e) end end
    running = alive
  end
  local interrupted = sig.caught()
  sig.release()
  local n_interrupted = 0
  if interrupted then
    -- every episode in flight is marked, with what it spent so far; the same command
    -- (same store) runs them again
    for _, e in ipairs(running) do
      if not e.dead then
        local sm = episode_ctx.summary(e.item.task, e.ctx, nil, wall() - e.t0)
        sm.sweep_key, sm.note = e.item.key, "interrupted by " .. interrupted .. "; the same command resumes it"
        db:finish_episode(e.ep, "interrupted", { summary = sm })
        n_interrupted = n_interrupted + 1
      end
    end
    db:finish_run(run_id, "interrupted")
  else
    if stopped then io.stderr:write("kmrun: stopping: ", tostring(stopped), "\n") end
    db:finish_run(run_id, stopped and "stopped" or "finished")
  end
  return { planned = #plan, ran = finished, correct = correct, seconds = wall() - t0, skipped = #plan - #todo, before = before,
    speedups = speedups, speedups_by = speedups_by, stopped = stopped, model_errors = model_errors, interrupted = interrupted,
    n_interrupted = n_interrupted, not_started = #todo - next_item + 1 }
end

return M
