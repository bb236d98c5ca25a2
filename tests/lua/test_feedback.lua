-- What a model and a user read about a correct verdict's speed: every figure named with
-- the baseline it was divided by, and taken from the verdict that holds it (issue 19).
local t = require "km.tap"
local feedback = require "km.feedback"
local prompt = require "km.run.prompt"

-- A problem file's verdict: eager 1.02 ms (the speedup's baseline), the reference as the
-- judge timed it 5 ms, torch.compile 0.9 ms; the candidate 0.81 ms.
local function eager_verdict()
  return { status = "correct", speedup = 1.02 / 0.81, speedup_over = "pytorch_eager", speedup_eager = 1.02 / 0.81,
    speedup_compile = 0.9 / 0.81, compile_mode = "default", speedup_baseline = 1.5 / 0.81,
    timing = { candidate = { median = 0.81, p25 = 0.8, p75 = 0.82 }, reference = { median = 5.0 },
      eager = { median = 1.02 }, compile = { median = 0.9 }, baseline = { median = 1.5 } },
    roofline = { fraction = 0.4, bound_ms = 0.3 } }
end

t.test("correct feedback names eager with eager's own time, not the reference's", function()
  local text = feedback.correct(4, 3, eager_verdict())
  t.ok(text:find("0.8100 ms; PyTorch eager 1.0200 ms; speedup 1.26x over eager", 1, true), text)
  t.ok(not text:find("5.0000 ms (speedup", 1, true) and not text:find("vs PyTorch eager 5", 1, true), text)
  t.ok(text:find("torch.compile[default] 0.9000 ms: 1.11x", 1, true), text)
  t.ok(text:find("starter 1.5000 ms: 1.85x", 1, true), text)
  t.ok(text:find("40% of the roofline bound", 1, true), text)
end)

t.test("a CUDA task's speedup is over the CUDA reference, and says so", function()
  local v = { status = "correct", speedup = 2.0, speedup_over = "cuda_reference", speedup_cuda_reference = 2.0,
    timing = { candidate = { median = 0.5 }, reference = { median = 1.0 } }, roofline = { fraction = 0.5 } }
  local text = feedback.correct(2, 3, v)
  t.ok(text:find("0.5000 ms; CUDA reference 1.0000 ms; speedup 2.00x over the CUDA reference", 1, true), text)
  t.ok(not text:find("eager", 1, true), text)
  t.eq(feedback.speedup_cell(v), "2.00x CUDA ref")
  t.eq(feedback.speedup_cell(eager_verdict()), "1.26x eager")
  t.eq(feedback.speedup_cell({ status = "mismatch" }), "-")
end)

t.test("a verdict timed against nothing says there is no speedup", function()
  local text = feedback.correct(1, 1, { status = "correct", timing = { candidate = { median = 0.5 } } })
  t.ok(text:find("no baseline was timed, so no speedup", 1, true), text)
end)

t.test("the prompt's verdict text labels each time with its baseline", function()
  local v = eager_verdict()
  v.feedback = feedback.correct(4, 3, v)
  local text = prompt.verdict_text(v)
  t.ok(text:find("Timing on the timed shape", 1, true), text)
  t.ok(not text:find("reference 5.0000", 1, true), "no unnamed reference time: " .. text)
  local _, n = text:gsub("PyTorch eager 1%.0200 ms; speedup 1%.26x over eager", "")
  t.eq(n, 2, "the feedback and the timing line both: " .. text)
end)

t.done()
