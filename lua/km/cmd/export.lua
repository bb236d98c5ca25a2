-- kmrun export RUN.sqlite --format sft|direct|jsonl [--verified] [--min-speedup X]
--                          [--max-reasoning N] [--sample N] [--stratify KEYS] [--seed S]
--                          [--report] [--weights] [--reasoning] [--meta FILE] [--out FILE]
-- kmrun export --validate FILE [--format F]
-- Writes one JSON object per episode:
--   sft     the trajectory as an OpenAI chat fine-tuning example: every prompt, model turn,
--           tool call and tool result up to the final answer (km.data.sft)
--   direct  task prompt -> final verified solution (no intermediate turns)
--   jsonl   the raw episode with every step (km.store's export)
-- sft and direct lines hold only what the fine-tuning API accepts (messages, tools);
-- --meta writes what kmrun knows about each line to a file of its own. The filters apply
-- first; then --sample draws N episodes round-robin across the strata that --stratify
-- names (km.data.dataset, docs/datasets.md). --validate checks a file against the format.
local cli = require "km.cli"
local json = require "km.json"
local dataset = require "km.data.dataset"
local sft = require "km.data.sft"
local A = require "km.args"

local SPEC = A.spec {
  name = "kmrun export",
  synopsis = "RUN.sqlite [--format sft|direct|jsonl] [options]",
  more_synopses = { "--validate FILE [--format sft|direct|jsonl]" },
  about = "Writes one JSON object per episode (docs/datasets.md).",
  positional = { { "store", "RUN.sqlite", "the run's store" } },
  options = {
    { "format", "F", "sft: trajectory examples in the OpenAI chat fine-tuning format, with tool calls\n" ..
        "direct: task prompt -> final solution pairs (the same format)\n" ..
        "jsonl: whole episodes with every step (kmrun's own format)\n" ..
        "(default sft; --validate without it tells the format from the file)",
      choices = { "sft", "direct", "jsonl" } },
    { "verified", nil, "only episodes whose final candidate was judged correct (the default of\n" ..
        "sft and direct, whose lines are training data; jsonl writes every episode unless given)" },
    { "all", nil, "sft, direct: every episode with model turns, failed ones too" },
    { "shortest-reasoning", nil, "per task, only the episode (of those the other filters keep) whose\n" ..
        "model turns reasoned least: concise traces train better (ConCuR)" },
    { "min-speedup", "X", "only episodes whose final speedup over the reference is at least X", type = "nonneg" },
    { "max-reasoning", "N", "only episodes whose longest reasoning trace is at most N characters", type = "count" },
    { "sample", "N", "after the filters, draw N episodes round-robin across strata (all when\n" ..
        "fewer are left), so no stratum dominates", type = "count" },
    { "stratify", "KEYS", "the strata: comma-separated keys among category, forms, failure,\n" ..
        "speedup, level, task, model, strategy (default: one stratum, a plain\n" ..
        "seeded sample); failure buckets: clean, repaired-compile,\n" ..
        "repaired-numeric, repaired-other (failed-* when the final is not correct);\n" ..
        "speedup buckets: <1, 1-1.5, 1.5-2, 2-4, >=4, none",
      check = function(v)
        local keys, why = dataset.parse_keys(v)
        if not keys then return nil, "'" .. v .. "': " .. why end
        return keys
      end },
    { "seed", "S", "the sample's seed: the same store, options and seed give the same lines", type = "int",
      default = 1 },
    { "report", nil, "print the strata, their sizes and how many were drawn from each (stderr)" },
    { "weights", nil, "sft: assistant turns whose candidate failed (or that gave none) carry\n" ..
        "\"weight\": 0, the others 1 (lines with no passing turn are skipped)" },
    { "reasoning", nil, "include each assistant turn's recorded reasoning, as <think>...</think>\n" ..
        "before its content (sft, direct)" },
    { "meta", "FILE", "write each line's metadata (task, episode, strategy, model, status,\n" ..
        "speedup, stratum) to FILE, line for line: the fine-tuning API refuses\n" ..
        "any key but messages and tools in the examples", type = "path" },
    { "out", "FILE", "write the lines there (default: standard output)", type = "path" },
    { "validate", "FILE", "check FILE against --format (sft and direct: the OpenAI chat\n" ..
        "fine-tuning format; jsonl: kmrun's episode lines; without --format, the\n" ..
        "format of its first line) and say what is wrong, line by line", type = "file" },
  },
  footer = [[
exit status: 0 written (or valid), 1 --validate found problems, or nothing to write (a line
says why and what to do), 2 usage error or a store that is missing, not a kmrun store or
damaged]],
}

local args, acode = A.parse(SPEC, arg)
if not args then return acode end
local function bad(msg) io.stderr:write("kmrun export: ", msg, "\n") return 2 end

-- The format of a file to validate, from its first line that is a JSON object: kmrun's
-- episode lines (jsonl) carry uuid, status and steps; chat examples (sft, direct) messages.
-- nil when no line says.
local function detect_format(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local found
  for line in f:lines() do
    local obj = line:match("%S") and json.decode(line)
    if type(obj) == "table" then
      if obj.messages ~= nil then found = "sft"
      elseif obj.steps ~= nil and obj.uuid ~= nil then found = "jsonl" end
      break
    end
  end
  f:close()
  return found
end

if args.validate then
  if args.store then return A.fail(SPEC, "--validate checks a file: give no store with it") end
  if not args.format then
    local found = detect_format(args.validate)
    args.format = found or "sft"
    io.stderr:write("kmrun export: ", args.validate, ": ", found == "jsonl" and "kmrun episode lines (jsonl)"
      or found and "chat examples (sft/direct)" or "format not recognised; checked as sft",
      found and "; checked as such" or "", " (--format sft|direct|jsonl chooses)\n")
  end
  local r, verr = sft.validate_file(args.validate, args.format == "jsonl" and "episode" or "chat")
  if not r then return bad(args.validate .. ": " .. verr) end
  local shown = 0
  for _, p in ipairs(r.problems) do
    shown = shown + 1
    if shown <= 50 then io.stdout:write(args.validate, ":", p[1], ": ", p[2], "\n") end
  end
  if shown > 50 then io.stdout:write(string.format("... and %d more problem(s)\n", shown - 50)) end
  local what = args.format == "jsonl" and "kmrun episode lines" or "OpenAI chat fine-tuning lines"
  if r.invalid == 0 then
    io.stdout:write(string.format("%s: %d line(s), all valid %s\n", args.validate, r.lines, what))
    return 0
  end
  io.stdout:write(string.format("%s: %d of %d line(s) are not valid %s\n", args.validate, r.invalid,
    math.max(r.lines, r.invalid), what))
  return 1
end
if not args.store then return A.fail(SPEC, "missing RUN.sqlite", true) end
args.format = args.format or "sft"

-- Training lines are verified by default; --all takes failed episodes too.
if args.all and args.verified then return A.fail(SPEC, "--all and --verified contradict each other") end
local training = args.format == "sft" or args.format == "direct"
local filters = { verified = args.verified or (training and not args.all), min_speedup = args.min_speedup,
  max_reasoning = args.max_reasoning }
local sampling = args.sample or args.stratify
local n_sample, keys, seed = args.sample, args.stratify, args.seed
if args.meta and args.out and args.meta == args.out then return bad("--meta and --out name the same file") end

-- A store that is missing, not a kmrun store, or damaged: one line, status 2, nothing written.
local path = args.store
local db, err = cli.open_store(path)
if not db then return bad(err) end
local rows, unreadable = cli.read_list(db, path, "episodes")
if not rows then db:close() return bad(unreadable) end
local failed -- set when a read fails midway (the file damaged after the check): one line, status 2
local out, meta_out = io.stdout, nil
if args.out then
  local oerr
  out, oerr = io.open(args.out, "w")
  if not out then db:close() return bad("cannot write " .. tostring(oerr)) end
end
if args.meta then
  local merr
  meta_out, merr = io.open(args.meta, "w")
  if not meta_out then db:close() return bad("cannot write " .. tostring(merr)) end
end

-- The line for one examined episode, or nil when the format has nothing to write for it.
local function line_for(rec, row_id)
  if args.format == "jsonl" then
    local line, lerr, code = db:export_episode(row_id)
    if not line then failed = failed or path .. ": " .. cli.reword(path, lerr, code) return nil end
    return json.decode(line)
  elseif args.format == "sft" then
    return sft.trajectory(rec, { weights = args.weights, reasoning = args.reasoning })
  end
  return sft.direct(rec, { reasoning = args.reasoning })
end

-- What --meta writes for a line.
local function meta_for(rec, stratum)
  return { task = rec.task, episode = rec.uuid, strategy = rec.strategy, model = rec.model, status = rec.status,
    speedup = rec.speedup, model_calls = rec.model_calls, max_reasoning_chars = rec.max_reasoning, stratum = stratum }
end

-- Whether the format can write a line for the episode (checked before sampling, so a
-- drawn episode always gives a line).
local function writable(rec)
  if args.format == "jsonl" then return true end
  if args.format == "sft" then return rec.model_calls > 0 end
  return rec.candidate ~= nil and rec.model_calls > 0
end

local written, skipped = 0, 0
-- why episodes were not written, counted (the line when nothing was): no model turns,
-- not judged correct (and of those, only compiled), below --min-speedup, over --max-reasoning
local why = { no_model = 0, unverified = 0, compiled = 0, speedup = 0, reasoning = 0 }
local function count_why(rec)
  if filters.verified and not rec.correct then
    why.unverified = why.unverified + 1
    if rec.status == "compiled" then why.compiled = why.compiled + 1 end
  end
  if filters.min_speedup and not (rec.speedup and rec.speedup >= filters.min_speedup) then why.speedup = why.speedup + 1 end
  if filters.max_reasoning and rec.max_reasoning > filters.max_reasoning then why.reasoning = why.reasoning + 1 end
  if not writable(rec) then why.no_model = why.no_model + 1 end
end
local function emit(obj, rec, stratum)
  out:write(json.encode(obj, { nan = "null" }), "\n")
  written = written + 1
  if meta_out then
    local m = meta_for(rec, stratum)
    m.line = written
    meta_out:write(json.encode(m, { nan = "null" }), "\n")
  end
end

-- Episodes whose stored JSON does not parse (a hand-edited or damaged store) are left out and
-- counted; any other failure to read (the file damaged after the check) stops the export.
local function read_episode(id)
  local ep, rerr, code = db:episode(id)
  if ep then return ep end
  if code == "CORRUPT" then unreadable[#unreadable + 1] = { id = id, message = rerr }
  else failed = failed or path .. ": " .. cli.reword(path, rerr, code) end
end

-- --shortest-reasoning: per task, the episode that passes the filters with the fewest
-- reasoning characters over its model turns (then fewer turns, then the earlier one).
local chosen
local function choose_shortest()
  chosen = {}
  local best = {}
  for _, row in ipairs(rows) do
    local ep = read_episode(row.id)
    if failed then return end
    local rec = ep and dataset.examine(ep)
    if rec and dataset.passes(rec, filters) and writable(rec) then
      local chars = 0
      for _, c in ipairs(rec.calls) do chars = chars + (tonumber(c.reasoning_chars) or 0) end
      local b = best[rec.task or "?"]
      if not b or chars < b.chars or (chars == b.chars and rec.model_calls < b.calls) then
        best[rec.task or "?"] = { id = row.id, chars = chars, calls = rec.model_calls }
      end
    end
  end
  for _, b in pairs(best) do chosen[b.id] = true end
end

local function run()
  if args.shortest_reasoning then
    choose_shortest()
    if failed then return end
    local kept = {}
    for _, row in ipairs(rows) do if chosen[row.id] then kept[#kept + 1] = row else skipped = skipped + 1 end end
    rows = kept
  end
  if not sampling then
    -- one pass, one episode in memory at a time
    for _, row in ipairs(rows) do
      local ep = read_episode(row.id)
      local rec = ep and dataset.examine(ep)
      local obj = rec and dataset.passes(rec, filters) and line_for(rec, row.id)
      if failed then return end
      if obj then emit(obj, rec) elseif rec then skipped = skipped + 1; count_why(rec) end
    end
    return
  end
  -- pass 1: what sampling needs of every episode that passes (its steps are dropped);
  -- pass 2: the drawn ones, read again, in draw order
  local pool = {}
  for _, row in ipairs(rows) do
    local ep = read_episode(row.id)
    if failed then return end
    local rec = ep and dataset.examine(ep)
    if rec and dataset.passes(rec, filters) and writable(rec) then
      rec.calls, rec.tools, rec.candidate, rec.verdict = nil, nil, nil, nil
      pool[#pool + 1] = rec
    elseif rec then
      skipped = skipped + 1
      count_why(rec)
    end
  end
  local picked, report = dataset.sample(pool, { n = n_sample, keys = keys, seed = seed })
  skipped = skipped + (#pool - #picked)
  if args.report then io.stderr:write(dataset.format_report(report)) end
  for _, light in ipairs(picked) do
    local ep = read_episode(light.id)
    local rec = ep and dataset.examine(ep)
    local obj = rec and line_for(rec, light.id)
    if failed then return end
    if obj then emit(obj, rec, dataset.stratum(light, keys)) elseif ep then skipped = skipped + 1 end
  end
end

run()
if args.out then out:close() end
if meta_out then meta_out:close() end
db:close()
if failed then return bad(failed) end
if #unreadable > 0 then io.stderr:write("kmrun export: ", cli.skipped_note(path, unreadable, "episode(s)"), "\n") end
io.stderr:write(string.format("kmrun export: %d episode(s) written, %d skipped (%s)\n", written, skipped,
  (sampling and "filters, no model turns, or not drawn" or "filters, or no model turns") ..
    (args.weights and ", or no passing turn" or "")))
if written > 0 then return 0 end

-- Nothing written: why, and what to do, in a line each
local fmt = string.format
local parts, todo = {}, {}
if why.no_model > 0 then
  parts[#parts + 1] = fmt("%d had no model turns (an offline run: its candidates are the tasks' starters)", why.no_model)
  todo[#todo + 1] = "run a strategy with a model (KM_MODEL, OPENAI_BASE_URL; docs/llm.md) for training lines"
end
if why.unverified > 0 then
  parts[#parts + 1] = fmt("%d not judged correct%s", why.unverified,
    why.compiled > 0 and fmt(" (%d only compiled: there was no GPU)", why.compiled) or "")
  if why.compiled > 0 then
    todo[#todo + 1] = "on a GPU host the same strategy command with this store judges compile-only episodes (no model call)"
  end
  if why.no_model < why.unverified then todo[#todo + 1] = "--all takes episodes that did not end correct too" end
end
if why.speedup > 0 then parts[#parts + 1] = fmt("%d below --min-speedup", why.speedup) end
if why.reasoning > 0 then parts[#parts + 1] = fmt("%d over --max-reasoning", why.reasoning) end
if args.format ~= "jsonl" and #rows > 0 then todo[#todo + 1] = "--format jsonl writes the episodes as they are" end
io.stderr:write("kmrun export: nothing written: ", #rows == 0 and "the store holds no episode"
  or fmt("of %d episode(s), %s", #rows, #parts > 0 and table.concat(parts, "; ") or "none was drawn"), "\n",
  #todo > 0 and ("kmrun export: to get lines: " .. table.concat(todo, "; ") .. "\n") or "")
return 1
