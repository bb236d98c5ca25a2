-- km.run.context — keeps every request of a conversation within the model's context window.
--
--   local context = require "km.run.context"
--   local budget = context.new { size = 8192 }            -- one per model (calibration)
--   local sent, max_tokens, info = budget:fit(messages, { max_tokens = 4096, tools = TOOLS })
--   -- sent: a copy of messages that fits, or nil, why, "CONTEXT_OVERFLOW"
--   budget:observe(sent, reply.usage.prompt_tokens, tools)  -- learn the model's tokens/char
--
-- No tokenizer is at hand, so a request's size is estimated from its characters at a
-- tokens-per-character ratio: a conservative guess (code runs about 3 characters a token)
-- until the server's own usage counts have been seen, then the highest ratio seen plus a
-- margin. When a request would not fit with room for the reply, older rounds go first
-- (each summarised in one line appended to the task prompt), then guidance shown in earlier
-- rounds, then the longest texts left are shortened in the middle (a candidate's code
-- blocks stay whole while they can), then the reply's room shrinks to a floor, then the
-- guidance in the task prompt goes. The system prompt, the task prompt (the spec), the
-- latest candidate and the latest verdict always stay. When even that does not fit the
-- request is not sent: nil, a message naming the numbers, "CONTEXT_OVERFLOW".
local json = require "km.json"

local fmt, concat, insert = string.format, table.concat, table.insert
local ipairs, pairs, type, tostring, math = ipairs, pairs, type, tostring, math
local ceil, floor, max, min = math.ceil, math.floor, math.max, math.min

local M = {}

M.DEFAULT_SIZE = 32768      -- tokens, when neither --context nor the server says
M.GUESS_RATIO = 0.34        -- tokens per character before any usage was seen (~2.9 chars/token)
M.MARGIN = 1.10             -- on the highest ratio seen
M.PER_MESSAGE = 8           -- chat-template tokens around each message
M.PER_REQUEST = 16          -- and around the whole request
M.SAFETY = 64               -- tokens kept free in every request
M.MIN_REPLY = 256           -- the reply's room never shrinks below min(this, max_tokens)

local Budget = {}
Budget.__index = Budget

-- opts: size (tokens; default M.DEFAULT_SIZE), ratio (tokens per character to start from).
function M.new(opts)
  opts = opts or {}
  local size = opts.size or M.DEFAULT_SIZE
  if type(size) ~= "number" or size < 256 then error("km.run.context: size must be a number of tokens >= 256", 2) end
  return setmetatable({ size = floor(size), ratio = opts.ratio, seen = 0 }, Budget)
end

-- The context size a server's model list states for `model` (or its only model): vLLM's
-- max_model_len, llama.cpp's meta.n_ctx / n_ctx_train, context_length / context_window
-- (OpenRouter, LM Studio, ...). nil when it says nothing.
function M.size_from_models(list, model)
  if type(list) ~= "table" then return nil end
  local data = type(list.data) == "table" and list.data or (type(list.models) == "table" and list.models) or {}
  local pick
  for _, m in ipairs(data) do
    if type(m) == "table" and (m.id == model or m.name == model or m.model == model) then pick = m break end
  end
  if not pick and #data == 1 then pick = data[1] end
  if type(pick) ~= "table" then return nil end
  local meta = type(pick.meta) == "table" and pick.meta or {}
  for _, k in ipairs { "max_model_len", "context_length", "context_window", "max_context_length", "n_ctx" } do
    local v = pick[k]
    if type(v) == "number" and v >= 256 then return floor(v) end
  end
  for _, k in ipairs { "n_ctx", "n_ctx_train" } do
    local v = meta[k]
    if type(v) == "number" and v >= 256 then return floor(v) end
  end
  return nil
end

local function text_chars(m)
  local n = #(m.content or "")
  for _, c in ipairs(m.tool_calls or {}) do
    local f = type(c["function"]) == "table" and c["function"] or {}
    n = n + #(c.name or f.name or "") + #(type(c.arguments) == "string" and c.arguments or type(f.arguments) == "string" and f.arguments or "") + 16
  end
  return n
end

local function tools_chars(tools)
  if not tools then return 0 end
  local ok, s = pcall(json.encode, tools)
  return ok and #s or 0
end

-- Characters that count toward a request: every message's text, tool calls, tool schemas.
function M.chars(messages, tools)
  local n = tools_chars(tools)
  for _, m in ipairs(messages) do n = n + text_chars(m) end
  return n
end

function Budget:tokens_per_char()
  if self.ratio and self.seen > 0 then return self.ratio * M.MARGIN end
  return math.max(self.ratio or 0, M.GUESS_RATIO)
end

-- Estimated prompt tokens of a request.
function Budget:estimate(messages, tools)
  return ceil(M.chars(messages, tools) * self:tokens_per_char()) + M.PER_MESSAGE * #messages + M.PER_REQUEST
end

-- Learns from a reply's usage: prompt_tokens for the messages (and tools) that were sent.
function Budget:observe(messages, prompt_tokens, tools)
  if type(prompt_tokens) ~= "number" or prompt_tokens <= 0 then return end
  local chars = M.chars(messages, tools)
  if chars < 200 then return end -- too little text to say anything about the ratio
  local r = max(0, prompt_tokens - M.PER_MESSAGE * #messages - M.PER_REQUEST) / chars
  if self.seen == 0 or r > self.ratio then self.ratio = r end
  self.seen = self.seen + 1
end

-- After the server said a request did not fit (its error code context_length_exceeded):
-- the estimate was low; half as much again from now on.
function Budget:tighten()
  self.ratio = self:tokens_per_char() * 1.5
  self.seen = math.max(self.seen, 1)
end

----------------------------------------------------------------------------------------
-- compaction

local function copy_msg(m)
  local c = {}
  for k, v in pairs(m) do c[k] = v end
  return c
end

-- "round": an assistant turn and what answered it (tool results, the next user message).
local function split(messages)
  local prefix, rounds = {}, {}
  local i = 1
  while messages[i] and messages[i].role == "system" do insert(prefix, messages[i]); i = i + 1 end
  while messages[i] and messages[i].role ~= "assistant" do insert(prefix, messages[i]); i = i + 1 end
  while messages[i] do
    if messages[i].role == "assistant" or #rounds == 0 then insert(rounds, {}) end
    insert(rounds[#rounds], messages[i])
    i = i + 1
  end
  return prefix, rounds
end

local function first_line(s, n)
  s = tostring(s or ""):gsub("^%s+", "")
  local line = s:match("^[^\n]*") or ""
  if #line > n then line = line:sub(1, n - 3) .. "..." end
  return line
end

-- One line for a round that is dropped: what was asked of the tools and what came back.
local function round_line(k, round)
  local parts = {}
  for _, m in ipairs(round) do
    if m.role == "assistant" then
      local calls = {}
      for _, c in ipairs(m.tool_calls or {}) do calls[#calls + 1] = c.name or (c["function"] or {}).name or "?" end
      if #calls > 0 then parts[#parts + 1] = "called " .. concat(calls, ", ") end
    elseif m.role == "tool" then
      parts[#parts + 1] = "tool: " .. first_line(m.content, 80)
    elseif m.role == "user" then
      parts[#parts + 1] = first_line(m.content, 120)
    end
  end
  return fmt("- earlier reply %d: %s", k, #parts > 0 and concat(parts, "; ") or "(no feedback)")
end

-- Shortens text to about `limit` characters: the fenced code blocks stay whole when they
-- fit (they are the candidate), the prose around them is cut in the middle.
function M.shorten(text, limit)
  text = tostring(text or "")
  if #text <= limit then return text end
  local blocks, code = {}, 0
  for b in text:gmatch("```[^\n]*\n.-```") do blocks[#blocks + 1] = b; code = code + #b end
  if #blocks > 0 and code + 200 <= limit then
    local keep = limit - code - 100
    local head = text:sub(1, floor(keep / 2)):gsub("```[^\n]*\n.*$", "")
    return head .. fmt("\n[... %d characters cut to fit the context ...]\n", #text - code - #head) .. concat(blocks, "\n")
  end
  local head, tail = floor(limit * 2 / 3), floor(limit / 3) - 60
  if tail < 0 then tail = 0 end
  return text:sub(1, head) .. fmt("\n[... %d characters cut to fit the context ...]\n", #text - head - tail) ..
    (tail > 0 and text:sub(-tail) or "")
end

-- The index of the last round whose assistant turn holds a candidate (a kernel in a code
-- block or in a tool call's arguments), or nil.
local function latest_candidate(rounds)
  for i = #rounds, 1, -1 do
    for _, m in ipairs(rounds[i]) do
      if m.role == "assistant" then
        if (m.content or ""):find("__global__", 1, true) then return i end
        for _, c in ipairs(m.tool_calls or {}) do
          local a = c.arguments or (type(c["function"]) == "table" and c["function"].arguments)
          if type(a) == "string" and a:find("__global__", 1, true) then return i end
        end
      end
    end
  end
  return nil
end

-- The task prompt with a "## Guidance" section removed (the spec itself stays).
local function without_guidance(content)
  local a = content:find("\n## Guidance\n", 1, true) or (content:sub(1, 12) == "## Guidance\n" and 0)
  if not a then return nil end
  local b = content:find("\n## [^#]", a + 13)
  return content:sub(1, a) .. (b and content:sub(b + 1) or "")
end

-- Budget:fit's working state st: head (the copied prefix), task_msg (its last message) and
-- task_text (its text without notes), rounds (those kept), notes (a line per round left
-- out), tools; out and est (the messages assembled and their estimate).

-- The messages of st: the prefix, the task message with the notes on the rounds left out,
-- then the rounds kept.
local function assemble(st)
  local out = {}
  for i, m in ipairs(st.head) do out[i] = m end
  if st.task_msg and #st.notes > 0 then
    st.task_msg.content = st.task_text .. "\n\n## Earlier replies (left out to fit the context)\n" .. concat(st.notes, "\n")
  elseif st.task_msg then
    st.task_msg.content = st.task_text
  end
  for _, r in ipairs(st.rounds) do for _, m in ipairs(r) do out[#out + 1] = m end end
  return out
end

-- Assembles st's messages again and estimates them (st.out, st.est).
local function reassemble(self, st)
  st.out = assemble(st)
  st.est = self:estimate(st.out, st.tools)
end

-- 1. older rounds go, oldest first; the latest round and the latest candidate stay
local function drop_old_rounds(self, st, want, limit, info)
  local rounds = st.rounds
  local k = 0
  while st.est + want > limit and #rounds > 1 do
    local keep = latest_candidate(rounds)
    local j = 1
    if j == keep then j = 2 end
    if j >= #rounds then break end
    k = k + 1
    insert(st.notes, round_line(k, table.remove(rounds, j)))
    info.dropped = info.dropped + 1
    reassemble(self, st)
  end
end

-- 2. guidance shown in earlier feedback goes (the latest round keeps its own)
local function drop_round_guidance(self, st, info)
  local rounds = st.rounds
  for i = 1, #rounds - 1 do
    for j, m in ipairs(rounds[i]) do
      local stripped = m.role ~= "assistant" and m.content and without_guidance(m.content)
      if stripped then
        local c = copy_msg(m)
        c.content = stripped
        rounds[i][j] = c
        info.guidance_dropped = true
      end
    end
  end
  reassemble(self, st)
end

-- 3. long texts in the rounds kept are shortened, the longest first
local function shorten_long_texts(self, st, want, limit, info)
  local rounds = st.rounds
  for _ = 1, 16 do
    if st.est + want <= limit then break end
    local bi, bj, blen = nil, nil, 0
    for i, r in ipairs(rounds) do
      for j, m in ipairs(r) do
        if #(m.content or "") > blen then bi, bj, blen = i, j, #m.content end
      end
    end
    if not bi or blen < 600 then break end
    local c = copy_msg(rounds[bi][bj])
    local excess_chars = ceil((st.est + want - limit) / self:tokens_per_char()) + 100
    c.content = M.shorten(c.content, max(400, blen - excess_chars))
    if #c.content >= blen then break end
    rounds[bi][bj] = c
    info.shortened = info.shortened + 1
    reassemble(self, st)
  end
end

-- Returns the messages to send (a copy when anything changed), the max_tokens to ask for,
-- and info { estimated, dropped, shortened, guidance_dropped, max_tokens, size }; or nil,
-- why, "CONTEXT_OVERFLOW". opts: max_tokens (the reply's room wanted), tools.
function Budget:fit(messages, opts)
  opts = opts or {}
  local want = opts.max_tokens or 4096
  local floor_tokens = min(want, M.MIN_REPLY)
  local limit = self.size - M.SAFETY
  local tools = opts.tools
  local est = self:estimate(messages, tools)
  local info = { size = self.size, dropped = 0, shortened = 0 }
  if est + want <= limit then
    info.estimated, info.max_tokens = est, want
    return messages, want, info
  end
  local prefix, rounds = split(messages)
  local st = { head = {}, rounds = rounds, notes = {}, tools = tools }
  for i, m in ipairs(prefix) do st.head[i] = copy_msg(m) end
  st.task_msg = st.head[#st.head]
  st.task_text = st.task_msg and st.task_msg.content or ""
  reassemble(self, st)
  drop_old_rounds(self, st, want, limit, info)
  if st.est + want > limit then drop_round_guidance(self, st, info) end
  shorten_long_texts(self, st, want, limit, info)
  -- 4. the reply's room shrinks, down to its floor
  local room = want
  if st.est + room > limit then room = max(floor_tokens, limit - st.est) end
  -- 5. the guidance in the task prompt goes
  if st.est + room > limit and st.task_msg then
    local stripped = without_guidance(st.task_text)
    if stripped then
      st.task_text = stripped
      info.guidance_dropped = true
      reassemble(self, st)
      room = want
      if st.est + room > limit then room = max(floor_tokens, limit - st.est) end
    end
  end
  if st.est + room > limit then
    return nil, fmt("the request needs about %d tokens plus %d for the reply, over the model's context of %d tokens, even with earlier replies left out",
      st.est, room, self.size), "CONTEXT_OVERFLOW"
  end
  info.estimated, info.max_tokens = st.est, room
  return st.out, room, info
end

return M
