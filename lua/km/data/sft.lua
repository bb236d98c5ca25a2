-- km.data.sft — OpenAI chat fine-tuning lines from recorded episodes, and a check of any JSONL
-- file against that format (kmrun export, docs/datasets.md).
--
--   local sft = require "km.data.sft"
--   local obj = sft.trajectory(rec, { weights = true, reasoning = true })  -- rec: km.data.dataset.examine
--   local obj = sft.direct(rec, { reasoning = true })
--   local problems = sft.check_chat(obj)        -- {} when the line is valid
--   local report = sft.validate_file(path, "chat" | "episode")
--
-- The format (https://platform.openai.com/docs/guides/fine-tuning, chat models): one JSON
-- object per line with `messages` (system, user, assistant, tool messages) and optionally
-- `tools` and `parallel_tool_calls`; nothing else at the top level. An assistant message
-- may carry `weight` 0 or 1 (0: not trained on). Tool calls' arguments are JSON text.
-- Reasoning has no field of its own there; --reasoning writes it into the assistant's
-- content as <think>...</think> before the answer, the convention of open reasoning models'
-- chat templates (DeepSeek-R1, Qwen3).
local json = require "km.json"
local utf8_error = require("km.text").utf8_error
local prompt = require "km.run.prompt"

local M = {}

local fmt = string.format
local ipairs, pairs, type, tostring, next, getmetatable = ipairs, pairs, type, tostring, next, getmetatable
local math_type = math.type

-- Statuses a turn may end with and still be trained on (compile-only runs had no GPU).
local PASSED = { correct = true, compiled = true }

----------------------------------------------------------------------------------------
-- building lines

-- Whether a recorded tool call's arguments are strict JSON (km.llm.json_strict): a call
-- a model wrote with broken arguments (a raw newline in a string) got a tool error back
-- and is left out of training lines, with that error.
local function valid_call(c)
  local args = c.arguments
  if type(args) ~= "string" then return type(c.args) == "table" end
  return (require("km.llm").json_strict(args)) == true
end

-- OpenAI chat format for one message as kmrun records it.
function M.message(m)
  local r = { role = m.role, content = m.content or "" }
  if type(m.tool_calls) == "table" and #m.tool_calls > 0 then
    r.tool_calls = json.array {}
    for _, c in ipairs(m.tool_calls) do
      if valid_call(c) then
        local args = c.arguments
        if type(args) ~= "string" then args = json.encode(c.args or {}) end
        r.tool_calls[#r.tool_calls + 1] = { id = c.id, type = "function", ["function"] = { name = c.name, arguments = args } }
      end
    end
    if #r.tool_calls == 0 then r.tool_calls = nil end
  end
  if m.tool_call_id then r.tool_call_id = m.tool_call_id end
  return r
end

local function with_reasoning(content, reasoning)
  if type(reasoning) ~= "string" or reasoning == "" then return content end
  return "<think>\n" .. reasoning .. "\n</think>\n\n" .. (content or "")
end

-- For each assistant message of the final conversation, the model call that produced it
-- (matched by content, in order), so its outcome and reasoning can be found.
local function calls_by_turn(msgs, calls)
  local used, out, by_number = {}, {}, {}
  -- the runner numbers each reply (km_call) and the turn made of it carries the number,
  -- so a turn the context budget shortened still finds its call
  for k, c in ipairs(calls) do
    if type(c.reply) == "table" and c.reply.km_call then by_number[c.reply.km_call] = k end
  end
  for i, m in ipairs(msgs) do
    local k = m.role == "assistant" and m.km_call and by_number[m.km_call]
    if k and not used[k] then
      used[k] = true
      out[i] = k
    elseif m.role == "assistant" then
      for k, c in ipairs(calls) do
        if not used[k] and type(c.reply) == "table" and c.reply.content == m.content then
          used[k] = true
          out[i] = k
          break
        end
      end
    end
  end
  return out
end

-- The trajectory as one training example: the last model call's conversation and its reply.
-- opts.weights: assistant turns whose candidate failed (or that gave none: no code, cut
-- off) get weight 0, the others 1; nil, why when no turn is left to train on. opts.reasoning: each assistant turn's
-- recorded reasoning in <think> before its content. nil when there is no model turn.
function M.trajectory(rec, opts)
  opts = opts or {}
  local calls = rec.calls or {}
  if #calls == 0 then return nil end
  local last = calls[#calls]
  local turns = calls_by_turn(last.messages, calls)
  local msgs = json.array {}
  local trained = 0
  local bad_calls = {} -- ids of calls left out (broken arguments): their tool results go too
  for _, m in ipairs(last.messages) do
    for _, c in ipairs(type(m.tool_calls) == "table" and m.tool_calls or {}) do
      if not valid_call(c) and c.id then bad_calls[c.id] = true end
    end
  end
  local function add(m, k)
    if m.role == "tool" and bad_calls[m.tool_call_id] then return end
    local r = M.message(m)
    if m.role == "assistant" and not r.tool_calls and r.content == "" and type(m.tool_calls) == "table" and #m.tool_calls > 0 then
      return -- every call of the turn was left out, and it said nothing else
    end
    if m.role == "assistant" then
      local call = k and calls[k]
      if opts.reasoning and call then r.content = with_reasoning(r.content, call.reply.reasoning) end
      if opts.weights then
        local st = k and rec.turn_status and rec.turn_status[k]
        if k == #calls and st == nil then st = rec.status end
        -- a turn with tool calls is a step of the agent's work (its tests may fail), and a
        -- turn nothing judged is not known to have failed: both kept
        local ok = r.tool_calls ~= nil or st == nil or PASSED[st] == true
        r.weight = ok and 1 or 0
      end
    end
    if r.weight ~= 0 and m.role == "assistant" then trained = trained + 1 end
    msgs[#msgs + 1] = r
  end
  for i, m in ipairs(last.messages) do add(m, turns[i]) end
  add({ role = "assistant", content = last.reply.content, tool_calls = last.reply.tool_calls }, #calls)
  if opts.weights and trained == 0 then return nil, "no turn passed" end
  local obj = { messages = msgs }
  if rec.tools then
    obj.tools = json.array {}
    for k, t in ipairs(rec.tools) do obj.tools[k] = { type = "function", ["function"] = t } end
  end
  return obj
end

-- Task prompt -> final solution: the first call's system and user messages and the final
-- candidate as the answer. nil without a candidate or a model turn.
function M.direct(rec, opts)
  opts = opts or {}
  local calls = rec.calls or {}
  if not rec.candidate or #calls == 0 then return nil end
  local msgs = json.array {}
  for _, m in ipairs(calls[1].messages) do
    if m.role == "system" or m.role == "user" then msgs[#msgs + 1] = M.message(m) end
  end
  local content = prompt.candidate_text(rec.candidate)
  if opts.reasoning then
    -- the reasoning of the call whose reply held the final candidate (the last one)
    content = with_reasoning(content, calls[#calls].reply.reasoning)
  end
  msgs[#msgs + 1] = { role = "assistant", content = content }
  return { messages = msgs }
end

----------------------------------------------------------------------------------------
-- checking lines

local TOP = { messages = true, tools = true, parallel_tool_calls = true, functions = true }
local ROLES = { system = true, user = true, assistant = true, tool = true, ["function"] = true }
local MSG_KEYS = { role = true, content = true, name = true, weight = true, tool_calls = true,
  tool_call_id = true, function_call = true }

-- Decoded JSON arrays carry json.array_mt; a plain Lua table counts as one when it is a
-- non-empty sequence.
local function is_array(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  if mt == json.array_mt then return true end
  if mt ~= nil or next(v) == nil then return false end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  return n == #v
end

local function is_object(v) return type(v) == "table" and not is_array(v) end

-- A content value: a string, or a list of { type = "text", text = ... } parts.
local function content_ok(c)
  if type(c) == "string" then return true end
  if is_array(c) and #c > 0 then
    for _, p in ipairs(c) do
      if type(p) ~= "table" or type(p.type) ~= "string" then return false end
    end
    return true
  end
  return false
end

-- The tool_calls of message `where` (role role): each call's shape, its id kept in call_ids.
local function check_tool_calls(say, where, m, role, call_ids)
  if role ~= "assistant" then say("%s: tool_calls on a %s message", where, tostring(role)) end
  if not is_array(m.tool_calls) or #m.tool_calls == 0 then
    say("%s: tool_calls is not a non-empty list", where)
    return
  end
  for j, c in ipairs(m.tool_calls) do
    local cw = fmt("%s.tool_calls[%d]", where, j)
    if type(c) ~= "table" then say("%s is not an object", cw)
    else
      if type(c.id) ~= "string" or c.id == "" then say("%s: no id", cw) else call_ids[c.id] = true end
      if c.type ~= "function" then say("%s: type is not \"function\"", cw) end
      local f = c["function"]
      if type(f) ~= "table" then say("%s: no function", cw)
      else
        if type(f.name) ~= "string" or f.name == "" then say("%s: the function has no name", cw) end
        if type(f.arguments) ~= "string" then say("%s: arguments are not JSON text", cw)
        elseif json.decode(f.arguments) == nil and f.arguments ~= "null" then
          say("%s: arguments do not parse as JSON", cw)
        end
      end
    end
  end
end

-- One message (messages[i], an object): its keys, role, content, weight, tool calls and
-- tool answer. counts.assistants and counts.trained are counted up.
local function check_message(say, where, m, call_ids, counts)
  local mk = {}
  for k in pairs(m) do mk[#mk + 1] = tostring(k) end
  table.sort(mk)
  for _, k in ipairs(mk) do
    if not MSG_KEYS[k] then say("%s: unexpected key \"%s\"", where, k) end
  end
  local role = m.role
  if not ROLES[role] then
    say("%s: role %s is not system, user, assistant or tool", where, role == nil and "missing" or ("\"" .. tostring(role) .. "\""))
  end
  local has_calls = m.tool_calls ~= nil or m.function_call ~= nil
  if m.content == nil or m.content == json.null then
    if not (role == "assistant" and has_calls) then say("%s (%s): no content", where, tostring(role)) end
  elseif not content_ok(m.content) then
    say("%s (%s): content is not text", where, tostring(role))
  end
  if m.name ~= nil and type(m.name) ~= "string" then say("%s: name is not a string", where) end
  if m.weight ~= nil then
    if role ~= "assistant" then say("%s: weight on a %s message (only assistant messages have one)", where, tostring(role))
    elseif not (m.weight == 0 or m.weight == 1) or math_type(m.weight) == nil then
      say("%s: weight is %s (0 or 1)", where, json.encode(m.weight))
    end
  end
  if role == "assistant" then
    counts.assistants = counts.assistants + 1
    if m.weight ~= 0 then counts.trained = counts.trained + 1 end
  end
  if m.tool_calls ~= nil then check_tool_calls(say, where, m, role, call_ids) end
  if role == "tool" then
    if type(m.tool_call_id) ~= "string" then say("%s: a tool message without tool_call_id", where)
    elseif not call_ids[m.tool_call_id] then
      say("%s: tool_call_id \"%s\" answers no earlier tool call", where, m.tool_call_id)
    end
  end
end

-- The line's "tools" list: each a function with a name and, when given, a schema object.
local function check_tools(say, tools)
  if not is_array(tools) then say("\"tools\" is not a list") return end
  for j, tl in ipairs(tools) do
    local tw = fmt("tools[%d]", j)
    if type(tl) ~= "table" or tl.type ~= "function" or type(tl["function"]) ~= "table" then
      say("%s is not { type = \"function\", function = { name, ... } }", tw)
    elseif type(tl["function"].name) ~= "string" then
      say("%s: the function has no name", tw)
    elseif tl["function"].parameters ~= nil and not is_object(tl["function"].parameters) then
      say("%s: parameters is not a JSON schema object", tw)
    end
  end
end

-- The problems of one decoded line in the chat format (a list of strings; {} when valid).
function M.check_chat(obj)
  local bad = {}
  local function say(...) bad[#bad + 1] = fmt(...) end
  if not is_object(obj) then
    say("not a JSON object")
    return bad
  end
  local keys = {}
  for k in pairs(obj) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    if not TOP[k] then say("unexpected top-level key \"%s\" (allowed: messages, tools, parallel_tool_calls)", k) end
  end
  local msgs = obj.messages
  if msgs == nil then say("no \"messages\"") return bad end
  if not is_array(msgs) or #msgs == 0 then say("\"messages\" is not a non-empty list") return bad end
  local call_ids, counts = {}, { assistants = 0, trained = 0 }
  for i, m in ipairs(msgs) do
    local where = fmt("messages[%d]", i)
    if not is_object(m) then
      say("%s is not an object", where)
    else
      check_message(say, where, m, call_ids, counts)
    end
  end
  if counts.assistants == 0 then say("no assistant message (nothing to train on)")
  elseif counts.trained == 0 then say("every assistant message has weight 0 (nothing to train on)") end
  if obj.tools ~= nil then check_tools(say, obj.tools) end
  if obj.parallel_tool_calls ~= nil and type(obj.parallel_tool_calls) ~= "boolean" then
    say("parallel_tool_calls is not true or false")
  end
  return bad
end

-- The problems of one decoded line of `--format jsonl` (a raw episode).
function M.check_episode(obj)
  local bad = {}
  if not is_object(obj) then return { "not a JSON object" } end
  if type(obj.uuid) ~= "string" then bad[#bad + 1] = "no uuid" end
  if type(obj.status) ~= "string" then bad[#bad + 1] = "no status" end
  if not is_array(obj.steps) then bad[#bad + 1] = "no steps list"
  else
    for i, s in ipairs(obj.steps) do
      if type(s) ~= "table" or type(s.kind) ~= "string" or math_type(s.seq) ~= "integer" then
        bad[#bad + 1] = fmt("steps[%d] is not { seq, kind, payload }", i)
      end
    end
  end
  return bad
end

-- Checks every line of a file. kind: "chat" (sft, direct) or "episode" (jsonl). Returns
-- { lines, invalid, problems = { { line, message }, ... } }, or nil, message when the file
-- cannot be read.
function M.validate_file(path, kind)
  local f, err = io.open(path, "rb")
  if not f then return nil, tostring(err) end
  local check = kind == "episode" and M.check_episode or M.check_chat
  local r = { lines = 0, invalid = 0, problems = {} }
  local n = 0
  for line in f:lines() do
    n = n + 1
    if line:match("^%s*$") then
      r.invalid = r.invalid + 1
      r.problems[#r.problems + 1] = { n, "an empty line (JSONL has one object per line)" }
    else
      r.lines = r.lines + 1
      local where = utf8_error(line)
      local obj, jerr
      if not where then obj, jerr = json.decode(line) end
      local bad = where and { "not valid UTF-8 (JSON text is UTF-8): " .. where:gsub(" %(line %d+%)$", " of the line") }
        or obj == nil and { "not JSON: " .. tostring(jerr) } or check(obj)
      if #bad > 0 then
        r.invalid = r.invalid + 1
        for _, b in ipairs(bad) do r.problems[#r.problems + 1] = { n, b } end
      end
    end
  end
  f:close()
  if n == 0 then r.problems[1] = { 0, "the file is empty" }; r.invalid = 1 end
  return r
end

M.PASSED = PASSED

return M
