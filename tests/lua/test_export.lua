-- kmrun export's fine-tuning lines: valid OpenAI chat fine-tuning JSONL with every option
-- (--meta to a file of its own, --weights, --reasoning, tool calls), and --validate, which
-- checks any file against the format and says what is wrong, line by line.
local t = require "km.tap"
local testing = require "km.testing"
local store = require "km.store"
local json = require "km.json"
local sft = require "km.data.sft"

local ROOT, KMRUN = testing.paths()
local dir = testing.tmpdir()
local sh, write = testing.sh, testing.write

local function lines(path)
  local out = {}
  for l in io.lines(path) do out[#out + 1] = l end
  return out
end


local SRC = 'extern "C" __global__ void k(float *y) { y[0] = 1; }'
local function reply_text(tag) return "```cuda\n" .. SRC .. " // " .. tag .. "\n```\n```lua\nreturn function() end\n```" end

-- Episode 1 (repair): call 1 gives no code, call 2 a kernel that does not compile, call 3 the
-- correct one; every reply has reasoning. Episode 2 (agent): a tool call, its result, then
-- the submitted answer. Episode 3: failed to the end.
local STORE = dir .. "/run.sqlite"
do
  local db = assert(store.open(STORE))
  local run = assert(db:begin_run { name = "synthetic" })
  -- 1
  local ep = assert(db:begin_episode(run, { task = "l1_relu", strategy = "repair", model = "m1", rep = 1 }))
  local msgs = { { role = "system", content = "You write CUDA kernels." }, { role = "user", content = "Implement relu." } }
  local replies = { "I think it is easy.", reply_text("v2"), reply_text("v3") }
  local outcome = { { "note", { text = "no usable candidate in the reply", why = "no ```cuda block" } },
    { "verdict", { status = "compile_error" } }, { "verdict", { status = "correct", speedup = 1.7 } } }
  for c = 1, 3 do
    local reply = { content = replies[c], reasoning = "thinking " .. c, usage = { prompt_tokens = 10, completion_tokens = 5 } }
    db:append(ep, "model_call", { messages = msgs, reply = reply, reasoning_chars = #reply.reasoning })
    if c > 1 then db:append(ep, "candidate", { source = SRC, launch = "return function() end" }) end
    db:append(ep, outcome[c][1], outcome[c][2])
    local nm = {}
    for i, x in ipairs(msgs) do nm[i] = x end
    nm[#nm + 1] = { role = "assistant", content = reply.content }
    nm[#nm + 1] = { role = "user", content = "Feedback " .. c }
    msgs = nm
  end
  db:finish_episode(ep, "correct", { final = { candidate = { source = SRC, launch = "return function() end", params = {} },
    verdict = { status = "correct", speedup = 1.7 } }, summary = { status = "correct", speedup = 1.7, level = 1,
    category = "elementwise" } })
  -- 2: an agent with tools
  ep = assert(db:begin_episode(run, { task = "l1_gelu", strategy = "agent", model = "m1", rep = 1 }))
  local tools = { { name = "run_tests", description = "Check the candidate.", parameters = { type = "object",
    properties = { kernel_cu = { type = "string" } } } } }
  local m0 = { { role = "system", content = "You write CUDA kernels." }, { role = "user", content = "Implement gelu." } }
  local call = { id = "call_1", name = "run_tests", arguments = '{"kernel_cu": "x"}' }
  db:append(ep, "model_call", { messages = m0, opts = { tools = tools }, reply = { content = "", tool_calls = { call } } })
  db:append(ep, "verdict", { status = "mismatch" })
  local m1 = { m0[1], m0[2], { role = "assistant", content = "", tool_calls = { call } },
    { role = "tool", tool_call_id = "call_1", content = "mismatch at 3" } }
  db:append(ep, "model_call", { messages = m1, opts = { tools = tools }, reply = { content = reply_text("final") } })
  db:append(ep, "verdict", { status = "correct", speedup = 1.1 })
  db:finish_episode(ep, "correct", { final = { candidate = { source = SRC, launch = "return function() end", params = {} },
    verdict = { status = "correct", speedup = 1.1 } }, summary = { status = "correct", speedup = 1.1, level = 1,
    category = "elementwise" } })
  -- 3: failed throughout
  ep = assert(db:begin_episode(run, { task = "l1_tanh", strategy = "repair", model = "m1", rep = 1 }))
  db:append(ep, "model_call", { messages = m0, reply = { content = reply_text("bad") } })
  db:append(ep, "verdict", { status = "mismatch" })
  db:finish_episode(ep, "failed", { final = { candidate = { source = SRC, launch = "return function() end", params = {} },
    verdict = { status = "mismatch" } }, summary = { status = "mismatch", level = 1, category = "elementwise" } })
  db:finish_run(run, "finished")
  db:close()
end

local function export(opts, out)
  out = out or (dir .. "/out.jsonl")
  local text, rc = sh(KMRUN .. " export " .. STORE .. " " .. opts .. " --out " .. out)
  return out, rc, text
end

t.test("sft lines hold only messages and tools, whatever the options", function()
  for _, opts in ipairs { "", "--weights", "--reasoning", "--weights --reasoning --meta " .. dir .. "/m.jsonl",
      "--verified --sample 2 --stratify strategy --meta " .. dir .. "/m2.jsonl" } do
    local out, rc, text = export(opts)
    t.eq(rc, 0, opts .. ": " .. text)
    for i, l in ipairs(lines(out)) do
      local obj = assert(json.decode(l))
      for k in pairs(obj) do t.ok(k == "messages" or k == "tools", opts .. ": line " .. i .. " key " .. k) end
      local bad = sft.check_chat(obj)
      t.eq(#bad, 0, opts .. ": line " .. i .. ": " .. table.concat(bad, "; "))
    end
    local vout, vrc = sh(KMRUN .. " export --validate " .. out)
    t.eq(vrc, 0, opts .. ": " .. vout)
    t.ok(vout:find("all valid OpenAI chat fine-tuning lines", 1, true), vout)
  end
end)

t.test("--meta writes the metadata to a file of its own, line for line", function()
  local meta = dir .. "/meta.jsonl"
  local out, rc, text = export("--meta " .. meta)
  t.eq(rc, 0, text)
  local data, m = lines(out), lines(meta)
  t.eq(#m, #data)
  for i, l in ipairs(m) do
    local o = assert(json.decode(l))
    t.eq(o.line, i)
    t.ok(o.task and o.episode and o.status and o.strategy, l)
  end
  t.eq(json.decode(m[1]).task, "l1_relu")
  t.eq(json.decode(m[1]).speedup, 1.7)
  local _, rc2, err = export("--meta")
  t.eq(rc2, 2)
  t.ok(err:find("--meta needs a value (FILE)", 1, true), err)
end)

t.test("--weights: failed assistant turns weigh 0, the rest 1", function()
  local out, rc, text = export("--weights --meta " .. dir .. "/w.meta")
  t.eq(rc, 0, text)
  local got = {}
  for i, l in ipairs(lines(out)) do
    local obj = json.decode(l)
    local w = {}
    for _, msg in ipairs(obj.messages) do
      if msg.role == "assistant" then w[#w + 1] = tostring(msg.weight) else t.eq(msg.weight, nil, "only assistants") end
    end
    got[json.decode(lines(dir .. "/w.meta")[i]).task] = table.concat(w, ",")
  end
  t.eq(got.l1_relu, "0,0,1", "no code, compile error, correct")
  t.eq(got.l1_gelu, "1,1", "a tool-calling turn is kept; the correct answer")
  t.eq(got.l1_tanh, nil, "no turn passed: no line")
  t.ok(text:find("2 episode(s) written, 1 skipped", 1, true), text)
end)

t.test("--reasoning puts each turn's recorded reasoning in <think> before its content", function()
  local out, rc, text = export("--reasoning")
  t.eq(rc, 0, text)
  local obj = json.decode(lines(out)[1])
  local seen = {}
  for _, msg in ipairs(obj.messages) do
    if msg.role == "assistant" then seen[#seen + 1] = msg.content:match("^<think>\n(.-)\n</think>\n\n") end
  end
  t.eq(table.concat(seen, ","), "thinking 1,thinking 2,thinking 3")
  out = export("")
  t.ok(not lines(out)[1]:find("<think>", 1, true), "not without the option")
  out = export("--format direct --reasoning")
  obj = json.decode(lines(out)[1])
  t.ok(obj.messages[#obj.messages].content:find("^<think>\nthinking 3\n</think>"), obj.messages[#obj.messages].content)
end)

t.test("tool calls: arguments are JSON text, tool results answer a call", function()
  local out = export("")
  local gelu
  for _, l in ipairs(lines(out)) do if l:find("Implement gelu", 1, true) then gelu = json.decode(l) end end
  t.ok(gelu, "the agent's line")
  t.eq(gelu.tools[1].type, "function")
  t.eq(gelu.tools[1]["function"].name, "run_tests")
  local call = gelu.messages[3].tool_calls[1]
  t.eq(call.type, "function")
  t.eq(type(call["function"].arguments), "string")
  t.ok(json.decode(call["function"].arguments), "parses")
  t.eq(gelu.messages[4].tool_call_id, "call_1")
end)

t.test("--validate says what is wrong, line by line", function()
  local bad = dir .. "/bad.jsonl"
  write(bad, table.concat({
    json.encode { messages = { { role = "user", content = "hi" }, { role = "assistant", content = "ok" } } },
    json.encode { messages = { { role = "user", content = "hi" }, { role = "assistant", content = "ok" } }, kmrun = { task = "x" } },
    "{not json",
    json.encode { messages = { { role = "user", content = "hi" } } },
    json.encode { messages = { { role = "robot", content = "hi" }, { role = "assistant", content = "ok", weight = 2 } } },
    json.encode { messages = { { role = "user", content = "hi", weight = 1 }, { role = "assistant", content = "ok", weight = 0 } } },
    json.encode { messages = { { role = "user", content = "hi" }, { role = "assistant", content = json.null,
      tool_calls = { { id = "c1", type = "function", ["function"] = { name = "f", arguments = "{bad" } } } },
      { role = "tool", tool_call_id = "c9", content = "r" }, { role = "assistant", content = "done" } } },
    json.encode { messages = {} },
    "",
  }, "\n") .. "\n")
  local out, rc = sh(KMRUN .. " export --validate " .. bad)
  t.eq(rc, 1, out)
  local want = {
    ":2: unexpected top-level key \"kmrun\"",
    ":3: not JSON",
    ":4: no assistant message",
    ":5: messages[1]: role \"robot\" is not system, user, assistant or tool",
    ":5: messages[2]: weight is 2 (0 or 1)",
    ":6: messages[1]: weight on a user message",
    ":6: every assistant message has weight 0",
    ":7: messages[2].tool_calls[1]: arguments do not parse as JSON",
    ":7: messages[3]: tool_call_id \"c9\" answers no earlier tool call",
    ":8: \"messages\" is not a non-empty list",
    ":9: an empty line",
  }
  for _, w in ipairs(want) do t.ok(out:find(bad .. w, 1, true), w .. " in:\n" .. out) end
  t.ok(not out:find(bad .. ":1:", 1, true), "line 1 is valid")
  t.ok(out:find("8 of 8 line(s) are not valid", 1, true), out)
  -- a missing file, and --validate with a store: usage errors
  out, rc = sh(KMRUN .. " export --validate " .. dir .. "/nope.jsonl")
  t.eq(rc, 2)
  t.ok(out:find("--validate: '" .. dir .. "/nope.jsonl' no such file", 1, true), out)
  out, rc = sh(KMRUN .. " export " .. STORE .. " --validate " .. bad)
  t.eq(rc, 2, out)
  -- jsonl episodes are checked as kmrun's own lines
  local raw = export("--format jsonl")
  out, rc = sh(KMRUN .. " export --validate " .. raw .. " --format jsonl")
  t.eq(rc, 0, out)
  t.ok(out:find("3 line(s), all valid kmrun episode lines", 1, true), out)
  out, rc = sh(KMRUN .. " export --validate " .. raw .. " --format sft")
  t.eq(rc, 1, "an episode line is not a chat example")
end)

t.test("--validate without --format tells the format from the file", function()
  local raw = export("--format jsonl")
  local out, rc = sh(KMRUN .. " export --validate " .. raw)
  t.eq(rc, 0, out)
  t.ok(out:find(raw .. ": kmrun episode lines (jsonl); checked as such (--format sft|direct|jsonl chooses)", 1, true), out)
  t.ok(out:find("3 line(s), all valid kmrun episode lines", 1, true), out)
  local chat = export("")
  out, rc = sh(KMRUN .. " export --validate " .. chat)
  t.eq(rc, 0, out)
  t.ok(out:find("chat examples (sft/direct); checked as such", 1, true), out)
  t.ok(out:find("all valid OpenAI chat fine-tuning lines", 1, true), out)
  -- a file whose first line is neither: checked as sft, and said so
  local odd = dir .. "/odd.jsonl"
  write(odd, '{"hello": 1}\n')
  out, rc = sh(KMRUN .. " export --validate " .. odd)
  t.eq(rc, 1, out)
  t.ok(out:find("format not recognised; checked as sft (--format sft|direct|jsonl chooses)", 1, true), out)
end)

t.test("nothing to write (an offline run without a GPU): why, what to do, exit 1", function()
  local st = dir .. "/offline.sqlite"
  local out, rc = sh(KMRUN .. " implement " .. ROOT .. "/tests/tasks --provider offline --quiet --worker-stderr null --store " .. st)
  t.ok(rc == 3 or rc == 0, out) -- 3: no GPU here
  out, rc = sh(KMRUN .. " export " .. st)
  t.eq(rc, 1, out)
  t.ok(out:find("kmrun export: nothing written: of 1 episode(s), 1 had no model turns (an offline run", 1, true), out)
  t.ok(out:find("kmrun export: to get lines: run a strategy with a model", 1, true), out)
  t.ok(out:find("--format jsonl writes the episodes as they are", 1, true), out)
  if rc == 3 then t.ok(out:find("1 not judged correct (1 only compiled: there was no GPU)", 1, true), out) end
  out, rc = sh(KMRUN .. " export " .. st .. " --format jsonl")
  t.eq(rc, 0, out)
  t.ok(out:find("1 episode(s) written", 1, true), out)
end)

t.test("the lines parse with Python's json module too", function()
  if not os.execute("command -v python3 >/dev/null 2>&1") then return t.note("skipped: no python3") end
  local out = export("--weights --reasoning")
  local py = dir .. "/check.py"
  write(py, [[
import json, sys
n = 0
for line in open(sys.argv[1]):
    obj = json.loads(line)
    assert set(obj) <= {"messages", "tools"}, obj.keys()
    for m in obj["messages"]:
        for c in m.get("tool_calls") or []:
            json.loads(c["function"]["arguments"])
    n += 1
print("ok", n)
]])
  local res, rc = sh("python3 " .. py .. " " .. out)
  t.eq(rc, 0, res)
  t.ok(res:find("ok 2", 1, true), res)
end)

os.execute("rm -rf " .. dir)
t.done()
