-- km.report.load — reading a report's episodes from trajectory stores (km.report.load).
local M = {}

local cli = require "km.cli"
local statuses = require "km.statuses"
local metrics = require "km.report.metrics"

local concat, sort = table.concat, table.sort
local ipairs, pairs, type, tostring = ipairs, pairs, type, tostring
local finite = metrics.finite

----------------------------------------------------------------------------------------
-- loading

local function key_of(ep)
  return concat({ tostring(ep.task), tostring(ep.strategy), tostring(ep.model), tostring(ep.rep) }, "\0")
end

local STAGE = {}
for _, k in ipairs(metrics.STAGES) do STAGE[k] = true end

-- Where one episode's GPU time went, from its verdict steps: judged (verdicts that came from
-- the judge: they carry eval_seconds or stage_seconds; a compile-only or no-candidate verdict
-- does not), recorded (of those, the ones with stage_seconds: stores from before the field
-- have none), stages (seconds per stage, summed over the recorded ones), kernel (the
-- candidates' own timed GPU seconds, verdict.kernel_seconds), timed (verdicts with it) and
-- samples (the timed samples behind those seconds).
local function eval_cost(steps)
  local c = { judged = 0, recorded = 0, stages = {}, kernel = 0, timed = 0, samples = 0 }
  for _, st in ipairs(steps or {}) do
    local v = st.kind == "verdict" and type(st.payload) == "table" and st.payload or nil
    if v and type(v.verdict) == "table" then v = v.verdict end
    local ss = v and type(v.stage_seconds) == "table" and v.stage_seconds or nil
    if v and (ss or finite(v.eval_seconds)) then
      c.judged = c.judged + 1
      if ss then
        c.recorded = c.recorded + 1
        for _, k in ipairs(metrics.STAGES) do
          if finite(ss[k]) then c.stages[k] = (c.stages[k] or 0) + ss[k] end
        end
        for k, x in pairs(ss) do -- a stage a later judge adds
          if not STAGE[k] and type(k) == "string" and finite(x) then c.stages[k] = (c.stages[k] or 0) + x end
        end
        if finite(v.kernel_seconds) then
          c.kernel, c.timed = c.kernel + v.kernel_seconds, c.timed + 1
          local cand = type(v.timing) == "table" and type(v.timing.candidate) == "table" and v.timing.candidate
          if cand and finite(cand.n) then c.samples = c.samples + cand.n end
        end
      end
    end
  end
  return c
end

-- Reads the episodes of every file; keeps the final episode per (task, strategy, model, seed).
-- Returns the list (ordered by task, strategy, model, seed) and
-- info = { files, runs, read, superseded, unfinished, notes }, or nil, message, CODE (NOT_FOUND,
-- NOT_A_STORE or the store's code) naming the file. Each file is checked first (km.cli:
-- damaged pages, not a kmrun store); rows whose stored JSON does not parse are left out,
-- and info.notes says so, one line per file. Each kept episode's verdict steps are read for
-- its GPU time (ep.cost, eval_cost above); an episode whose steps cannot be read has none.
function M.load(paths)
  if type(paths) == "string" then paths = { paths } end
  if type(paths) ~= "table" then error("report.load: expected a list of paths", 2) end
  local info = { files = {}, runs = 0, read = 0, superseded = 0, unfinished = 0, notes = {} }
  local latest, order, dbs = {}, 0, {}
  local function close_all() for _, db in ipairs(dbs) do db:close() end end
  for fi, path in ipairs(paths) do
    local db, err, code = cli.open_store(path)
    if not db then close_all() return nil, err, code end
    dbs[fi] = db
    info.files[#info.files + 1] = path
    local runs, rskipped, rcode = cli.read_list(db, path, "runs")
    if not runs then close_all() return nil, rskipped, rcode end
    local episodes, skipped, ecode = cli.read_list(db, path, "episodes")
    if not episodes then close_all() return nil, skipped, ecode end
    if #rskipped > 0 then info.notes[#info.notes + 1] = cli.skipped_note(path, rskipped, "run(s)") end
    if #skipped > 0 then info.notes[#info.notes + 1] = cli.skipped_note(path, skipped, "episode(s)") end
    info.runs = info.runs + #runs
    for _, ep in ipairs(episodes) do
      info.read = info.read + 1
      order = order + 1
      if statuses.prop(ep.status, "unfinished") then
        info.unfinished = info.unfinished + 1
      else
        ep.file, ep.order, ep.file_index = path, order, fi
        local k = key_of(ep)
        local prev = latest[k]
        if not prev then
          latest[k] = ep
        else
          info.superseded = info.superseded + 1
          local a, b = prev.started_at or 0, ep.started_at or 0
          if b > a or (b == a and ep.order > prev.order) then latest[k] = ep end
        end
      end
    end
  end
  local list = {}
  for _, ep in pairs(latest) do list[#list + 1] = ep end
  sort(list, function(a, b) return key_of(a) < key_of(b) end)
  -- the GPU time of the episodes that count (their steps; the others are never read). An
  -- episode whose steps do not parse keeps no cost: its group's GPU time is "partly recorded"
  -- and says how many (the episode itself still counts).
  for _, ep in ipairs(list) do
    local full = dbs[ep.file_index]:episode(ep.id)
    if full then ep.cost = eval_cost(full.steps) end
  end
  close_all()
  return list, info
end

return M
