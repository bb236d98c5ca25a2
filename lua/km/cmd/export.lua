-- kmrun export RUN.sqlite --format sft|direct|jsonl [--verified] [--min-speedup X]
--                          [--max-reasoning N] [--meta] [--out FILE]
-- Writes one JSON object per episode:
--   sft     the trajectory as an OpenAI chat fine-tuning example: every prompt, model turn,
--           tool call and tool result up to the final answer
--   direct  task prompt -> final verified solution (no intermediate turns)
--   jsonl   the raw episode with every step (km.store's export)
local store = require "km.store"
local json = require "km.json"
local prompt = require "km.prompt"

local USAGE = [[
usage: kmrun export RUN.sqlite [--format sft|direct|jsonl] [options]
  --format F        sft (default): trajectory examples in the OpenAI chat format, with tool calls
                    direct: task prompt -> final solution pairs
                    jsonl: whole episodes with every step
  --verified        only episodes whose final candidate was judged correct
  --min-speedup X   only episodes whose final speedup over the reference is at least X
  --max-reasoning N only episodes whose longest reasoning trace is at most N characters
  --meta            add a "kmrun" object (task, episode, status, speedup) to each line
  --out FILE        write there (default: standard output)
]]

local args, pos = { format = "sft" }, {}
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--verified" then args.verified = true
  elseif a == "--meta" then args.meta = true
  elseif a == "--format" or a == "--out" or a == "--min-speedup" or a == "--max-reasoning" then
    args[a:sub(3):gsub("%-", "_")] = arg[i + 1]; i = i + 1
  elseif a == "-h" or a == "--help" then io.stdout:write(USAGE) return 0
  elseif a:sub(1, 2) == "--" then io.stderr:write("kmrun export: unknown option ", a, "\n", USAGE) return 2
  else pos[#pos + 1] = a end
  i = i + 1
end
if #pos ~= 1 or not ({ sft = 1, direct = 1, jsonl = 1 })[args.format] then io.stderr:write(USAGE) return 2 end

local db, err = store.open(pos[1], { readonly = true })
if not db then io.stderr:write("kmrun export: ", tostring(err), "\n") return 2 end
local out = io.stdout
if args.out then
  out = io.open(args.out, "w")
  if not out then io.stderr:write("kmrun export: cannot write ", args.out, "\n") return 2 end
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

local function final_of(ep)
  local f = ep.final
  if type(f) ~= "table" then return nil end
  return f.candidate, f.verdict
end

local written, skipped = 0, 0
for _, row in ipairs(db:episodes {}) do
  local ep = db:episode(row.id)
  local cand, verdict = final_of(ep)
  local correct = verdict and verdict.status == "correct"
  local speedup = verdict and verdict.speedup
  local calls, max_reason, tools = {}, 0, nil
  for _, s in ipairs(ep.steps) do
    if s.kind == "model_call" and type(s.payload) == "table" and s.payload.reply then
      calls[#calls + 1] = s.payload
      max_reason = math.max(max_reason, s.payload.reasoning_chars or 0)
      if s.payload.opts and s.payload.opts.tools then tools = s.payload.opts.tools end
    end
  end
  local keep = (not args.verified or correct)
    and (not args.min_speedup or (speedup and speedup >= tonumber(args.min_speedup)))
    and (not args.max_reasoning or max_reason <= tonumber(args.max_reasoning))
  local obj
  if keep and args.format == "jsonl" then
    obj = json.decode(db:export_episode(row.id))
  elseif keep and args.format == "sft" and #calls > 0 then
    local last = calls[#calls]
    local msgs = json.array {}
    for _, m in ipairs(last.messages) do msgs[#msgs + 1] = oa_message(m) end
    msgs[#msgs + 1] = oa_message { role = "assistant", content = last.reply.content, tool_calls = last.reply.tool_calls }
    obj = { messages = msgs }
    if tools then
      obj.tools = json.array {}
      for k, t in ipairs(tools) do obj.tools[k] = { type = "function", ["function"] = t } end
    end
  elseif keep and args.format == "direct" and cand and #calls > 0 then
    local first = calls[1].messages
    local msgs = json.array {}
    for _, m in ipairs(first) do if m.role == "system" or m.role == "user" then msgs[#msgs + 1] = oa_message(m) end end
    msgs[#msgs + 1] = { role = "assistant", content = prompt.candidate_text(cand) }
    obj = { messages = msgs }
  end
  if obj then
    if args.meta then
      obj.kmrun = { task = ep.task, episode = ep.uuid, strategy = ep.strategy, model = ep.model, status = verdict and verdict.status,
        speedup = speedup, model_calls = #calls, max_reasoning_chars = max_reason }
    end
    out:write(json.encode(obj, { nan = "null" }), "\n")
    written = written + 1
  else
    skipped = skipped + 1
  end
end
if args.out then out:close() end
io.stderr:write(string.format("kmrun export: %d episode(s) written, %d skipped (filters, or no model turns)\n", written, skipped))
db:close()
return 0
