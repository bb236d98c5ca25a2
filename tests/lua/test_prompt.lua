-- km.run.prompt: spec forms, extraction of candidates from replies, feedback.
local t = require "km.tap"
local testing = require "km.testing"
local prompt = require "km.run.prompt"
local task = require "km.task"

local ROOT = testing.paths()
local relu = assert(task.load(ROOT .. "/tasks/l1_relu"))

local KERNEL = 'extern "C" __global__ void relu(const float *x, float *y, long long n) {\n  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n  if (i < n) y[i] = fmaxf(x[i], 0.f);\n}'
local LAUNCH = "return function(k, io, s)\n  k.relu{ grid = k.cdiv(s.n, 256), block = 256 }(io.x, io.y, s.n)\nend"

t.test("the prompt shows the chosen spec forms and always the interface", function()
  local m = prompt.implement(relu, { forms = { "math" } })
  t.eq(#m, 2)
  t.eq(m[1].role, "system")
  local u = m[2].content
  t.ok(u:find("max(x_i, 0)", 1, true), "math shown")
  t.ok(not u:find("rectified linear unit", 1, true), "description not shown")
  t.ok(not u:find("relu_ref", 1, true), "reference not shown")
  t.ok(u:find("input `x`: f32[n]", 1, true), u)
  t.ok(u:find("n=268435456} (timed)", 1, true), u)
  local r = prompt.implement(relu, { forms = { "description", "reference" } })[2].content
  t.ok(r:find("rectified linear unit", 1, true) and r:find("relu_ref", 1, true))
  t.raises(function() prompt.implement(relu, { forms = { "poetry" } }) end, "unknown spec form")
end)

t.test("a reply with a cuda and a lua block gives a candidate", function()
  local c = assert(prompt.extract("Here:\n```cuda\n" .. KERNEL .. "\n```\nand\n```lua\n" .. LAUNCH .. "\n```\n"))
  t.ok(c.source:find("fmaxf", 1, true))
  t.ok(c.launch:find("k.relu", 1, true))
  t.eq(c.kernels[1], "relu")
end)

t.test("missing language tags are tolerated", function()
  local c = assert(prompt.extract("```\n" .. KERNEL .. "\n```\n```\n" .. LAUNCH .. "\n```"))
  t.eq(c.kernels[1], "relu")
  local c2 = assert(prompt.extract("```cpp\n" .. KERNEL .. "\n```\n```lua\n" .. LAUNCH .. "\n```"))
  t.eq(c2.kernels[1], "relu")
end)

t.test("bad replies get a precise message back", function()
  local c, why = prompt.extract("I think you should use a grid-stride loop.")
  t.eq(c, nil)
  t.ok(why:find("no ```cuda code block", 1, true), why)
  c, why = prompt.extract("```cuda\n" .. KERNEL .. "\n```\n```cuda\n" .. KERNEL:gsub("relu", "relu2") .. "\n```\n```lua\n" .. LAUNCH .. "\n```")
  t.eq(c, nil)
  t.ok(why:find("2 ```cuda blocks", 1, true) and why:find("block 2 defines relu2", 1, true), why)
  c, why = prompt.extract("```cuda\n" .. KERNEL .. "\n```\n```lua\nreturn function(k, io, s\n```")
  t.eq(c, nil)
  t.ok(why:find("launch.lua does not load", 1, true), why)
  c, why = prompt.extract("```cuda\n" .. KERNEL .. "\n```\n```lua\nreturn function(k, io, s) k.relu_v2{ grid = 1, block = 1 }(io.x) end\n```")
  t.eq(c, nil)
  t.ok(why:find("k.relu_v2", 1, true) and why:find("defines only: relu", 1, true), why)
  c, why = prompt.extract("```cuda\n__global__ void relu(float *x) {}\n```\n```lua\n" .. LAUNCH .. "\n```")
  t.eq(c, nil)
  t.ok(why:find("extern \"C\"", 1, true), why)
  c, why = prompt.extract("```cuda\n" .. KERNEL .. "\n```")
  t.eq(c, nil)
  t.ok(why:find("no ```lua block", 1, true), why)
  c, why = prompt.extract("")
  t.eq(c, nil)
  t.ok(why:find("empty", 1, true), why)
end)

t.test("feedback carries the verdict, the guidance and the request", function()
  local msgs = prompt.implement(relu)
  prompt.append_feedback(msgs, { content = "my answer" }, { status = "mismatch", feedback = "y[3] got 1 want 0" },
    { { id = "g", title = "Boundaries", text = "Guard the tail." } })
  t.eq(#msgs, 4)
  t.eq(msgs[3].role, "assistant")
  t.eq(msgs[3].content, "my answer")
  t.ok(msgs[4].content:find("Verdict: mismatch", 1, true))
  t.ok(msgs[4].content:find("y[3] got 1 want 0", 1, true))
  t.ok(msgs[4].content:find("### Boundaries", 1, true))
  t.ok(msgs[4].content:find("Fix the candidate", 1, true))
end)

t.test("a candidate renders back into a reply that extracts to itself", function()
  local c = assert(prompt.extract(prompt.candidate_text { source = KERNEL, launch = LAUNCH }))
  t.eq(c.source, KERNEL .. "\n")
  t.eq(c.launch, LAUNCH .. "\n")
end)

t.done()
