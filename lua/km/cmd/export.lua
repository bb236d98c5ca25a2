-- kmrun export RUN.sqlite --format sft|direct|jsonl [--verified] [--min-speedup X]
--                          [--max-reasoning N] [--sample N] [--stratify KEYS] [--seed S]
--                          [--report] [--meta] [--out FILE]
-- Writes one JSON object per episode:
--   sft     the trajectory as an OpenAI chat fine-tuning example: every prompt, model turn,
--           tool call and tool result up to the final answer
--   direct  task prompt -> final verified solution (no intermediate turns)
--   jsonl   the raw episode with every step (km.store's export)
-- The filters apply first; then --sample draws N episodes round-robin across the strata
-- that --stratify names (km.dataset, docs/datasets.md).
local cli = require "km.cli"
local json = require "km.json"
local prompt = require "km.prompt"
local dataset = require "km.dataset"

local USAGE = [[
usage: kmrun export RUN.sqlite [--format sft|direct|jsonl] [options]
  --format F        sft (default): trajectory examples in the OpenAI chat format, with tool calls
                    direct: task prompt -> final solution pairs
                    jsonl: whole episodes with every step
  --verified        only episodes whose final candidate was judged correct
  --min-speedup X   only episodes whose final speedup over the reference is at least X
  --max-reasoning N only episodes whose longest reasoning trace is at most N characters
  --sample N        after the filters, draw N episodes round-robin across strata (all when
                    fewer are left), so no stratum dominates
  --stratify KEYS   the strata: comma-separated keys among category, forms, failure,
                    speedup, level, task, model, strategy (default: one stratum, a plain
                    seeded sample); failure buckets: clean, repaired-compile,
                    repaired-numeric, repaired-other (failed-* when the final is not correct);
                    speedup buckets: <1, 1-1.5, 1.5-2, 2-4, >=4, none
  --seed S          the sample's seed (integer, default 1): the same store, options and seed
                    give the same lines
  --report          print the strata, their sizes and how many were drawn from each (stderr)
  --meta            add a "kmrun" object (task, episode, status, speedup; stratum when
                    sampling) to each line
  --out FILE        write there (default: standard output)
]]

local args, pos = { format = "sft" }, {}
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--verified" then args.verified = true
  elseif a == "--meta" then args.meta = true
  elseif a == "--report" then args.report = true
  elseif a == "--format" or a == "--out" or a == "--min-speedup" or a == "--max-reasoning" or a == "--sample"
      or a == "--stratify" or a == "--seed" then
    if arg[i + 1] == nil then io.stderr:write("kmrun export: ", a, " needs a value\n", USAGE) return 2 end
    args[a:sub(3):gsub("%-", "_")] = arg[i + 1]; i = i + 1
  elseif a == "-h" or a == "--help" then io.stdout:write(USAGE) return 0
  elseif a:sub(1, 2) == "--" then io.stderr:write("kmrun export: unknown option ", a, "\n", USAGE) return 2
  else pos[#pos + 1] = a end
  i = i + 1
end
if #pos ~= 1 or not ({ sft = 1, direct = 1, jsonl = 1 })[args.format] then io.stderr:write(USAGE) return 2 end

local function bad(msg) io.stderr:write("kmrun export: ", msg, "\n") return 2 end
local filters = { verified = args.verified }
for _, k in ipairs { "min_speedup", "max_reasoning" } do
  if args[k] then
    filters[k] = tonumber(args[k])
    if not filters[k] then return bad("--" .. k:gsub("_", "-") .. " needs a number, got '" .. args[k] .. "'") end
  end
end
local sampling = args.sample or args.stratify
local n_sample, keys, seed
if args.sample then
  n_sample = math.tointeger(tonumber(args.sample))
  if not n_sample or n_sample < 0 then return bad("--sample needs a non-negative integer, got '" .. args.sample .. "'") end
end
if args.stratify then
  local kerr
  keys, kerr = dataset.parse_keys(args.stratify)
  if not keys then return bad(kerr) end
end
seed = 1
if args.seed then
  seed = math.tointeger(tonumber(args.seed))
  if not seed then return bad("--seed needs an integer, got '" .. args.seed .. "'") end
end

-- A store that is missing, not a kmrun store, or damaged: one line, status 2, nothing written.
local path = pos[1]
local db, err = cli.open_store(path)
if not db then return bad(err) end
local rows, unreadable = cli.read_list(db, path, "episodes")
if not rows then db:close() return bad(unreadable) end
local failed -- set when a read fails midway (the file damaged after the check): one line, status 2
local out = io.stdout
if args.out then
  local oerr
  out, oerr = io.open(args.out, "w")
  if not out then db:close() return bad("cannot write " .. tostring(oerr)) end
end

-- OpenAI chat format for one message as kmrun records it.
local function oa_message(m)
  local r = { role = m.role, content = m.content or "" }
  if m.tool_calls and #m.tool_calls > 0 then
    r.tool_calls = json.array {}
    for k, c in ipairs(m.tool_calls) do
      r.tool_calls[k] = { id = c.id, type = "function", ["function"] = { name = c.name, arguments = c.arguments or json.encode(c.args or {}) } }
    end
  end
  if m.tool_call_id then r.tool_call_id = m.tool_call_id end
  return r
end

-- The line for one examined episode, or nil when the format has nothing to write for it.
local function line_for(rec, row_id, stratum)
  local calls, obj = rec.calls, nil
  if args.format == "jsonl" then
    local line, lerr, code = db:export_episode(row_id)
    if not line then failed = failed or path .. ": " .. cli.reword(path, lerr, code) return nil end
    obj = json.decode(line)
  elseif args.format == "sft" and #calls > 0 then
    local last = calls[#calls]
    local msgs = json.array {}
    for _, m in ipairs(last.messages) do msgs[#msgs + 1] = oa_message(m) end
    msgs[#msgs + 1] = oa_message { role = "assistant", content = last.reply.content, tool_calls = last.reply.tool_calls }
    obj = { messages = msgs }
    if rec.tools then
      obj.tools = json.array {}
      for k, t in ipairs(rec.tools) do obj.tools[k] = { type = "function", ["function"] = t } end
    end
  elseif args.format == "direct" and rec.candidate and #calls > 0 then
    local first = calls[1].messages
    local msgs = json.array {}
    for _, m in ipairs(first) do if m.role == "system" or m.role == "user" then msgs[#msgs + 1] = oa_message(m) end end
    msgs[#msgs + 1] = { role = "assistant", content = prompt.candidate_text(rec.candidate) }
    obj = { messages = msgs }
  end
  if obj and args.meta then
    obj.kmrun = { task = rec.task, episode = rec.uuid, strategy = rec.strategy, model = rec.model, status = rec.status,
      speedup = rec.speedup, model_calls = #calls, max_reasoning_chars = rec.max_reasoning, stratum = stratum }
  end
  return obj
end

-- Whether the format can write a line for the episode (checked before sampling, so a
-- drawn episode always gives a line).
local function writable(rec)
  if args.format == "jsonl" then return true end
  if args.format == "sft" then return rec.model_calls > 0 end
  return rec.candidate ~= nil and rec.model_calls > 0
end

local written, skipped = 0, 0
local function emit(obj)
  out:write(json.encode(obj, { nan = "null" }), "\n")
  written = written + 1
end

-- Episodes whose stored JSON does not parse (a hand-edited or damaged store) are left out and
-- counted; any other failure to read (the file damaged after the check) stops the export.
local function read_episode(id)
  local ep, rerr, code = db:episode(id)
  if ep then return ep end
  if code == "CORRUPT" then unreadable[#unreadable + 1] = { id = id, message = rerr }
  else failed = failed or path .. ": " .. cli.reword(path, rerr, code) end
end

local function run()
  if not sampling then
    -- one pass, one episode in memory at a time
    for _, row in ipairs(rows) do
      local ep = read_episode(row.id)
      local rec = ep and dataset.examine(ep)
      local obj = rec and dataset.passes(rec, filters) and line_for(rec, row.id)
      if failed then return end
      if obj then emit(obj) elseif rec then skipped = skipped + 1 end
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
    end
  end
  local picked, report = dataset.sample(pool, { n = n_sample, keys = keys, seed = seed })
  skipped = skipped + (#pool - #picked)
  if args.report then io.stderr:write(dataset.format_report(report)) end
  for _, light in ipairs(picked) do
    local ep = read_episode(light.id)
    local obj = ep and line_for(dataset.examine(ep), light.id, args.meta and dataset.stratum(light, keys) or nil)
    if failed then return end
    if obj then emit(obj) elseif ep then skipped = skipped + 1 end
  end
end

run()
if args.out then out:close() end
db:close()
if failed then return bad(failed) end
if #unreadable > 0 then io.stderr:write("kmrun export: ", cli.skipped_note(path, unreadable, "episode(s)"), "\n") end
io.stderr:write(string.format("kmrun export: %d episode(s) written, %d skipped (%s)\n", written, skipped,
  sampling and "filters, no model turns, or not drawn" or "filters, or no model turns"))
return 0
