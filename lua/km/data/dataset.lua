-- km.data.dataset — what a task suite holds, and stratified samples of recorded episodes
-- (docs/datasets.md).
--
--   local dataset = require "km.data.dataset"
--   local s = dataset.task_stats(tasks)          -- counts and shares by level, category, ...
--   local rec = dataset.examine(db:episode(id))  -- what export and sampling need of an episode
--   dataset.passes(rec, { verified = true, min_speedup = 1.2, max_reasoning = 20000 })
--   local keys = assert(dataset.parse_keys("category,forms,failure,speedup"))
--   local picked, report = dataset.sample(recs, { n = 100, keys = keys, seed = 1 })
--   io.stderr:write(dataset.format_report(report))
local scrub = require "km.scrub"
local statuses = require "km.statuses"

local M = {}

local type, ipairs, pairs, tostring, tonumber, error = type, ipairs, pairs, tostring, tonumber, error
local getmetatable, setmetatable = getmetatable, setmetatable
local fmt, concat, sort = string.format, table.concat, table.sort
local max, tointeger, mtype = math.max, math.tointeger, math.type
local unpack = table.unpack

----------------------------------------------------------------------------------------
-- the task suite

M.FORMS = { "description", "math", "reference" }

-- The spec forms a task has, in the order of M.FORMS (every task has a reference).
function M.task_forms(t)
  local f = {}
  if t.description_text then f[#f + 1] = "description" end
  if t.math_text then f[#f + 1] = "math" end
  f[#f + 1] = "reference"
  return f
end

-- counts {key -> n} -> sorted list of { key, count, pct } (pct of `total`)
local function tally(counts, total, by_key)
  local list = {}
  for k, n in pairs(counts) do list[#list + 1] = { key = k, count = n, pct = total > 0 and 100 * n / total or 0 } end
  sort(list, function(a, b)
    if not by_key and a.count ~= b.count then return a.count > b.count end
    return tostring(a.key) < tostring(b.key)
  end)
  return list
end

local function bump(t, k) t[k] = (t[k] or 0) + 1 end

-- The suite's mix. Percentages are of the number of tasks; a task counts once in every
-- group it belongs to in `form`, `dtype` and `param` (so those may add up past 100).
function M.task_stats(tasks)
  local n = #tasks
  local level, category, forms, form, dtype, nparams, pname = {}, {}, {}, {}, {}, {}, {}
  local starters, tunable, params_total = 0, 0, 0
  for _, t in ipairs(tasks) do
    bump(level, "L" .. tostring(t.level))
    bump(category, t.category)
    local f = M.task_forms(t)
    bump(forms, concat(f, "+"))
    for _, x in ipairs(f) do bump(form, x) end
    local seen = {}
    for _, io in ipairs(t.inputs or {}) do
      if not seen[io.dtype] then seen[io.dtype] = true; bump(dtype, io.dtype) end
    end
    local np = 0
    if t.starter then
      starters = starters + 1
      local names = {}
      for k in pairs(t.starter.params or {}) do names[#names + 1] = k end
      sort(names)
      for _, k in ipairs(names) do bump(pname, k) end
      np = #names
    end
    if np > 0 then tunable = tunable + 1 end
    params_total = params_total + np
    bump(nparams, np)
  end
  local function pct(x) return n > 0 and 100 * x / n or 0 end
  local by_np = tally(nparams, n, true)
  sort(by_np, function(a, b) return a.key < b.key end)
  for _, e in ipairs(by_np) do e.key = tostring(e.key) end
  return {
    tasks = n,
    level = tally(level, n, true),
    category = tally(category, n),
    forms = tally(forms, n),
    form = tally(form, n),
    dtype = tally(dtype, n),
    starters = { count = starters, pct = pct(starters) },
    tunable = { count = tunable, pct = pct(tunable), params = params_total, mean = n > 0 and params_total / n or 0 },
    params_per_task = by_np,
    param = tally(pname, n),
  }
end

M.STATS_SECTIONS = {
  { "level", "by level" }, { "category", "by category" }, { "forms", "by spec forms (combination)" },
  { "form", "by spec form (has it)" }, { "dtype", "by input dtype (has one)" },
  { "params_per_task", "by tunable parameters per task" }, { "param", "by tunable parameter" },
}

-- The stats as a terminal table.
function M.format_stats(s)
  local out = { fmt("%d task(s)", s.tasks) }
  for _, sec in ipairs(M.STATS_SECTIONS) do
    local list = s[sec[1]]
    out[#out + 1] = ""
    out[#out + 1] = fmt("%-34s %6s %7s", sec[2], "tasks", "%")
    for _, e in ipairs(list) do
      out[#out + 1] = fmt("  %-32s %6d %6.1f%%", tostring(e.key), e.count, e.pct)
    end
  end
  out[#out + 1] = ""
  out[#out + 1] = fmt("%-34s %6d %6.1f%%", "with a starter", s.starters.count, s.starters.pct)
  out[#out + 1] = fmt("%-34s %6d %6.1f%%", "with tunable parameters", s.tunable.count, s.tunable.pct)
  out[#out + 1] = fmt("%-34s %6d  (%.2f per task)", "tunable parameters in all", s.tunable.params, s.tunable.mean)
  return concat(out, "\n") .. "\n"
end

----------------------------------------------------------------------------------------
-- episodes

-- A copy of v with every string scrubbed of this process's secrets (km.scrub); tables keep
-- their metatables (json.array marks).
local function scrubbed(v)
  if type(v) == "string" then return (scrub.text(v)) end
  if type(v) ~= "table" then return v end
  local t = {}
  for k, x in pairs(v) do t[scrubbed(k)] = scrubbed(x) end
  return setmetatable(t, getmetatable(v))
end
M.scrubbed = scrubbed

-- What export and sampling need of one episode (a db:episode table, steps included):
-- { id, task, strategy, model, status, correct, speedup, summary, verdict, candidate,
--   calls (model_call payloads that have a reply), turn_status (per call: the status its
--   reply came to), tools, max_reasoning }. Everything in
-- it has the process's secrets replaced: what an export writes comes from here (the store
-- was scrubbed when written, but perhaps by a process that knew other keys).
function M.examine(ep)
  ep = scrubbed(ep)
  local f = type(ep.final) == "table" and ep.final or {}
  local verdict = type(f.verdict) == "table" and f.verdict or nil
  local summary = type(ep.summary) == "table" and ep.summary or {}
  local calls, max_reason, tools = {}, 0, nil
  -- turn_status[k]: how model call k's reply fared, the first verdict (or note that it held
  -- no usable candidate) after it and before the next call; nil when nothing judged it
  local turn_status = {}
  for _, s in ipairs(ep.steps or {}) do
    local p = s.payload
    -- a payload of another shape (hand-edited) is not a model turn an export can write
    if s.kind == "model_call" and type(p) == "table" and type(p.reply) == "table" and type(p.messages) == "table" then
      calls[#calls + 1] = p
      max_reason = max(max_reason, tonumber(p.reasoning_chars) or 0)
      if type(p.opts) == "table" and p.opts.tools then tools = p.opts.tools end
    elseif #calls > 0 and turn_status[#calls] == nil and type(p) == "table" then
      if s.kind == "verdict" and type(p.status) == "string" then turn_status[#calls] = p.status
      elseif s.kind == "note" and p.text == "no usable candidate in the reply" then
        turn_status[#calls] = type(p.status) == "string" and p.status or "no_code"
      end
    end
  end
  local status = verdict and verdict.status
  local speedup = verdict and tonumber(verdict.speedup)
  return { id = ep.id, task = ep.task, strategy = ep.strategy, model = ep.model, uuid = ep.uuid,
    status = status, correct = status == "correct", speedup = speedup,
    summary = summary, verdict = verdict, candidate = f.candidate,
    calls = calls, model_calls = #calls, tools = tools, max_reasoning = max_reason, turn_status = turn_status }
end

-- The filters export applies before sampling: verified, min_speedup, max_reasoning.
function M.passes(rec, filters)
  filters = filters or {}
  if filters.verified and not rec.correct then return false end
  if filters.min_speedup and not (rec.speedup and rec.speedup >= filters.min_speedup) then return false end
  if filters.max_reasoning and rec.max_reasoning > filters.max_reasoning then return false end
  return true
end

-- A status's row (km.statuses) says whether it is a failure (correct and compiled are not)
-- and where it arose. Failures are bucketed by stage; the bucket is the latest stage met
-- (a trajectory that went from a compile error to a mismatch to correct is a numeric
-- repair): 1 compile (the compile stage: compile_error, load_error), 3 numeric (the rows
-- marked numeric: mismatch, nan_inf), else 2 other (launch_error, crashed, timeout,
-- out_of_bounds, wrong_shape, inputs_modified, too_fast, no_code, error, an unknown status).
local STAGE_NAME = { "compile", "other", "numeric" }
local function stage_of(status)
  local row = statuses.get(status)
  if row and row.numeric then return 3 end
  if row and row.stage == "compile" then return 1 end
  return 2
end

-- The failure-mode bucket of an episode: "clean" when no failing status was met on the
-- way, else "repaired-<stage>" when the final candidate is correct, "failed-<stage>" when
-- not; stage = compile | numeric | other (the latest stage met, see above).
function M.failure_bucket(rec)
  local modes = type(rec.summary) == "table" and rec.summary.failure_modes or nil
  local stage = 0
  if type(modes) == "table" then
    for status, count in pairs(modes) do
      if statuses.failure(status) and (tonumber(count) or 0) > 0 then stage = max(stage, stage_of(status)) end
    end
  end
  if not rec.correct and rec.status and statuses.failure(rec.status) then
    stage = max(stage, stage_of(rec.status))
  end
  if stage == 0 then return "clean" end
  return (rec.correct and "repaired-" or "failed-") .. STAGE_NAME[stage]
end

M.SPEEDUP_BUCKETS = { "<1", "1-1.5", "1.5-2", "2-4", ">=4" }

-- The speedup bucket: <1, 1-1.5, 1.5-2, 2-4, >=4 (lower bound inclusive), or "none".
function M.speedup_bucket(x)
  x = tonumber(x)
  if not x or x ~= x then return "none" end
  if x < 1 then return "<1" elseif x < 1.5 then return "1-1.5" elseif x < 2 then return "1.5-2"
  elseif x < 4 then return "2-4" end
  return ">=4"
end

local FORM_ORDER = { description = 1, math = 2, reference = 3 }

-- The stratification keys: each a function(rec) -> label.
M.KEYS = {
  category = function(r) return tostring(r.summary.category or "?") end,
  forms = function(r)
    local f = r.summary.forms
    if type(f) ~= "table" or #f == 0 then return "?" end
    local l = {}
    for i, x in ipairs(f) do l[i] = tostring(x) end
    sort(l, function(a, b)
      local x, y = FORM_ORDER[a] or 9, FORM_ORDER[b] or 9
      if x ~= y then return x < y end
      return a < b
    end)
    return concat(l, "+")
  end,
  failure = M.failure_bucket,
  speedup = function(r) return M.speedup_bucket(r.speedup or r.summary.speedup) end,
  level = function(r) return r.summary.level and ("L" .. tostring(r.summary.level)) or "?" end,
  task = function(r) return tostring(r.task or "?") end,
  model = function(r) return tostring(r.model or "?") end,
  strategy = function(r) return tostring(r.strategy or "?") end,
}
local ALIASES = { form = "forms", spec = "forms", failures = "failure", failure_modes = "failure", categories = "category" }

-- "category,forms" -> { "category", "forms" }, or nil, message.
function M.parse_keys(s)
  local keys, seen = {}, {}
  for w in tostring(s or ""):gmatch("[^,%s]+") do
    w = ALIASES[w] or w
    if not M.KEYS[w] then
      local names = {}
      for k in pairs(M.KEYS) do names[#names + 1] = k end
      sort(names)
      return nil, "unknown stratification key '" .. w .. "' (" .. concat(names, ", ") .. ")"
    end
    if not seen[w] then seen[w] = true; keys[#keys + 1] = w end
  end
  return keys
end

-- The stratum label of a record: "category=gemm forms=description+math ...", or "all".
function M.stratum(rec, keys)
  if not keys or #keys == 0 then return "all" end
  local parts = {}
  for i, k in ipairs(keys) do
    local fn = M.KEYS[k]
    if not fn then error("unknown stratification key '" .. tostring(k) .. "'", 2) end
    parts[i] = k .. "=" .. fn(rec)
  end
  return concat(parts, " ")
end

-- A seeded generator (splitmix64): the same seed gives the same draws everywhere, and the
-- global math.random is left alone.
local function rng(seed)
  local state = tointeger(tonumber(seed or 1))
  if not state then error("seed must be an integer, got " .. tostring(seed), 2) end
  return function(n) -- an integer in [1, n]
    state = state + 0x9e3779b97f4a7c15
    local z = state
    z = (z ~ (z >> 30)) * 0xbf58476d1ce4e5b9
    z = (z ~ (z >> 27)) * 0x94d049bb133111eb
    z = z ~ (z >> 31)
    return (z >> 1) % n + 1
  end
end
M.rng = rng

local function shuffle(list, draw)
  for i = #list, 2, -1 do
    local j = draw(i)
    list[i], list[j] = list[j], list[i]
  end
  return list
end

-- Draws up to opts.n records round-robin across strata: the strata (grouped by opts.keys)
-- are put in a seeded order and each is shuffled; every round takes the next record of
-- each stratum that has one left, until n are drawn. So a stratum gives at most one more
-- than any other that still has records; a large one cannot crowd out the rest.
-- opts: n (default: all), keys (list, default none: one stratum), seed (default 1).
-- Returns the drawn records in draw order, and a report
-- { seed, keys, requested, available, drawn, strata = { { key, size, drawn }, ... } }
-- (strata largest first). Records are grouped in their input order before shuffling, so
-- the result depends only on the input order, the keys and the seed.
function M.sample(recs, opts)
  opts = opts or {}
  local keys = opts.keys or {}
  local n = opts.n
  if n ~= nil and (mtype(n) ~= "integer" or n < 0) then error("n must be a non-negative integer", 2) end
  local seed = opts.seed or 1
  local groups, names = {}, {}
  for _, r in ipairs(recs) do
    local k = M.stratum(r, keys)
    local g = groups[k]
    if not g then g = {}; groups[k] = g; names[#names + 1] = k end
    g[#g + 1] = r
  end
  sort(names)
  local draw = rng(seed)
  for _, k in ipairs(names) do shuffle(groups[k], draw) end
  local order = shuffle({ unpack(names) }, draw)
  local want = n or #recs
  local picked, taken = {}, {}
  for _, k in ipairs(names) do taken[k] = 0 end
  local round = 1
  while #picked < want do
    local any = false
    for _, k in ipairs(order) do
      if #picked >= want then break end
      local r = groups[k][round]
      if r then
        picked[#picked + 1] = r
        taken[k] = taken[k] + 1
        any = true
      end
    end
    if not any then break end
    round = round + 1
  end
  local strata = {}
  for _, k in ipairs(names) do strata[#strata + 1] = { key = k, size = #groups[k], drawn = taken[k] } end
  sort(strata, function(a, b) if a.size ~= b.size then return a.size > b.size end return a.key < b.key end)
  return picked, { seed = seed, keys = keys, requested = n, available = #recs, drawn = #picked, strata = strata }
end

-- The report as text (for --report on stderr).
function M.format_report(rep)
  local out = { fmt("stratified by %s, seed %s: %d of %d episode(s) drawn%s from %d %s",
    #rep.keys > 0 and concat(rep.keys, ",") or "(nothing: one stratum)", tostring(rep.seed), rep.drawn, rep.available,
    rep.requested and fmt(" (asked %d)", rep.requested) or "", #rep.strata, #rep.strata == 1 and "stratum" or "strata") }
  local w = 7
  for _, s in ipairs(rep.strata) do w = max(w, #s.key) end
  out[#out + 1] = fmt("  %-" .. w .. "s %7s %7s", "stratum", "size", "drawn")
  for _, s in ipairs(rep.strata) do
    out[#out + 1] = fmt("  %-" .. w .. "s %7d %7d", s.key, s.size, s.drawn)
  end
  return concat(out, "\n") .. "\n"
end

return M
