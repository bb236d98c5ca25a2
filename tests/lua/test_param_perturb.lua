-- Which inputs a timed call hands perturbed (km.judge.inputs.perturbed: a problem file's
-- floating nn.Parameters, never its buffers, integer state or a task folder's inputs) and
-- the parameter key of a call's seed (mixed with this process's secret: not the seed, the
-- same for the same seed, another for another). The perturbation itself runs on the GPU:
-- tests/gpu/test_trust5_state.lua.
local t = require "km.tap"
local inputs = require "km.judge.inputs"

t.test("a problem file's floating nn.Parameters are perturbed, nothing else", function()
  local P = inputs.perturbed
  for _, dt in ipairs { "f32", "f16", "bf16", "f64" } do
    t.eq(P { role = "parameter", kind = "parameter", dtype = dt }, true, dt)
  end
  t.eq(P { role = "parameter", kind = "parameter", dtype = "i64" }, false, "an integer parameter")
  t.eq(P { role = "parameter", kind = "buffer", dtype = "f32" }, false, "a buffer (running statistics, a mask)")
  t.eq(P { role = "input", dtype = "f32" }, false, "a problem file's input")
  t.eq(P { name = "w", dtype = "f32", init = { "uniform", 0, 1 } }, false, "a task folder's input (drawn every call)")
end)

t.test("the parameter key: a function of the seed and this process's secret", function()
  local k = inputs.param_key
  t.eq(math.type(k(1)), "integer")
  t.eq(k(12345), k(12345), "the same seed, the same key (the check regenerates it)")
  local seen = {}
  for s = 1, 1000 do
    local key = k(s)
    t.ok(key ~= s, "not the seed")
    t.ok(not seen[key], "another seed, another key")
    seen[key] = true
  end
  t.ok(k(1) ~= 1 * -7046029254386353131, "the secret is mixed in")
end)

t.done()
