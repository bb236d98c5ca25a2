-- kmrun tasks lint decides its trivial candidates at the timed shape, and flags closed forms
-- of small outputs, on the CPU. First through a backend written here in Lua (no PyTorch:
-- inputs drawn by math.random, the reference a Lua function whose answer may depend on the
-- shape, as launch code's may): a trivial answer that passes at the timed shape flags the
-- task whatever the other shapes say; one that passes elsewhere only is a note; where the
-- timed shape could not run, the old rule (every shape judged) decides and a note says so.
-- The closed-form rule: its arithmetic (erf, the probability, the leave-one-out count), a
-- scalar mean over many draws at a loose tolerance flagged, a zero-mean sum far above its
-- tolerance not. Then through PyTorch on the CPU (skipped without torch): problem files
-- written here — an MSE loss at KernelBench's fp32 tolerance flagged closed_form, a sum of
-- zero-mean inputs not — and tasks/l1_mse_loss (a per-row loss) not flagged.
local t = require "km.tap"
local json = require "km.json"
local testing = require "km.testing"
local lint = require "km.task.lint"
local task_mod = require "km.task"

local ROOT = testing.paths()

-- a backend in Lua (tests/lua/lint_backend.lua); B.seeds counts the runs per seed
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local fake_backend = dofile(here .. "/lint_backend.lua")

local function task(fields)
  return { name = fields.name, reference = { precision = "fp32" }, level = 1, inputs = fields.inputs,
    outputs = fields.outputs, shapes = fields.shapes, tolerance = { f32 = fields.tolerance or { atol = 1e-3, rtol = 2e-2 } } }
end

-- reason -> the shapes it flags, as JSON (e.g. "[1]")
local function at(res, reason)
  local s = {}
  for _, f in ipairs(res.flags) do if f.reason == reason then s[#s + 1] = f.shape end end
  return "[" .. table.concat(s, ",") .. "]"
end
local function notes(res) return table.concat(res.notes or {}, "\n") end

local X = { name = "x", dtype = "f32", shape = { "n" }, init = { "uniform", -1, 1 } }
local Y = { { name = "y", dtype = "f32", shape = { "n" } } }
local SHAPES = { { n = 4096 }, { n = 1000 }, { n = 129 } }

-- y = 2x + 1, except at n = `tiny`, where it is x * 1e-6 (below atol: zeros pass there, and
-- the seeds agree)
local function tiny_at(tiny)
  return function(ins, sym)
    local y = {}
    for k, v in ipairs(ins.x) do y[k] = sym.n == tiny and v * 1e-6 or 2 * v + 1 end
    return { y = y }
  end
end

t.test("the trivial candidates, the sample estimate and the closed form are decided at the timed shape", function()
  for _, r in ipairs { "trivial_zeros", "trivial_constant", "trivial_input", "input_independent", "below_tolerance",
    "sample_estimate", "closed_form" } do
    t.ok(lint.AT_TIMED[r], r)
  end
  t.ok(lint.REASON.closed_form, "closed_form is a reason")
  t.ok(lint.VERSION >= 6, "results kept before the rule are not read back: version " .. lint.VERSION)
  t.eq(#lint.CLOSED_FORM_SEEDS, 8)
  t.eq(lint.CLOSED_FORM_P, 0.01)
end)

t.test("zeros that pass at the timed shape only flag the task: launch code can special-case it", function()
  local res = lint.run(task { name = "tiny_timed", inputs = { X }, outputs = Y, shapes = SHAPES },
    { backend = fake_backend(tiny_at(4096)) })
  t.eq(at(res, "trivial_zeros"), "[1]", json.encode(res))
  t.eq(at(res, "input_independent"), "[1]", json.encode(res))
  for _, f in ipairs(res.flags) do t.eq(f.shape, 1, json.encode(f)) end
end)

t.test("zeros that pass at another shape only are a note", function()
  local res = lint.run(task { name = "tiny_late", inputs = { X }, outputs = Y, shapes = SHAPES },
    { backend = fake_backend(tiny_at(1000)) })
  t.eq(#res.flags, 0, json.encode(res.flags))
  t.ok(notes(res):find("zeros pass at shape 2 only (y, max |y| ", 1, true) and notes(res):find("not at the timed shape", 1, true), notes(res))
end)

t.test("where the timed shape could not run here: every shape judged decides, and a note says so", function()
  local skip = { skip = function(sym) return sym.n == 4096 end }
  -- zeros pass at shapes 2 and 3, every shape that ran: flagged at both
  local res = lint.run(task { name = "tiny_all", inputs = { X }, outputs = Y, shapes = SHAPES },
    { backend = fake_backend(function(ins) local y = {} for k, v in ipairs(ins.x) do y[k] = v * 1e-6 end return { y = y } end, skip) })
  t.eq(at(res, "trivial_zeros"), "[2,3]", json.encode(res))
  t.ok(notes(res):find("the timed shape did not run here: trivial candidates flag only where they hold at every shape judged (2, 3)", 1, true), notes(res))
  -- at shape 2 only: a note
  res = lint.run(task { name = "tiny_some", inputs = { X }, outputs = Y, shapes = SHAPES },
    { backend = fake_backend(tiny_at(1000), skip) })
  t.eq(#res.flags, 0, json.encode(res.flags))
  t.ok(notes(res):find("other shapes catch it", 1, true), notes(res))
end)

t.test("an output under 64 elements at the timed shape (only) is judged there: a value the inputs do not decide", function()
  -- y[m] is the inputs' at m >= 64 and a fixed 3 + 1e-7 x at m = 8, the timed shape
  local tk = task { name = "small_timed", inputs = { { name = "x", dtype = "f32", shape = { "m" }, init = { "uniform", -1, 1 } } },
    outputs = { { name = "y", dtype = "f32", shape = { "m" } } }, shapes = { { m = 8 }, { m = 100 } } }
  local res = lint.run(tk, { backend = fake_backend(function(ins, sym)
    local y = {}
    for k, v in ipairs(ins.x) do y[k] = sym.m < 64 and 3 + 1e-7 * v or v end
    return { y = y }
  end) })
  t.eq(at(res, "input_independent"), "[1]", json.encode(res.flags))
  t.eq(at(res, "trivial_constant"), "[1]", json.encode(res.flags))
  t.eq(at(res, "closed_form"), "[1]", json.encode(res.flags))
end)

t.test("erf and the closed-form probability", function()
  t.near(lint.erf(0.5), 0.5204998778, 2e-7)
  t.near(lint.erf(1), 0.8427007929, 2e-7)
  t.near(lint.erf(-1), -0.8427007929, 2e-7)
  t.near(lint.erf(0), 0, 2e-7)
  -- 8 values with mean 10 and sd exactly 2 (K - 1 in the denominator): +-a with a = 2 sqrt(7/8)
  local a = 2 * math.sqrt(7 / 8)
  local vals = {}
  for k = 1, 8 do vals[k] = { 10 + (k % 2 == 0 and a or -a) } end
  local tol = { atol = 0.1, rtol = 0.01 } -- tau = 0.2 at the mean
  local c = lint.closed_form_p(vals, tol)
  local sigma = 2 * math.sqrt(1 + 1 / 7)
  t.near(c.p, lint.erf(0.2 / (sigma * math.sqrt(2))), 1e-12)
  t.near(c.p, 0.0746, 1e-3, "P(|N(0, 2.14^2)| <= 0.2)")
  t.near(c.s, 2, 1e-12); t.near(c.m, 10, 1e-12); t.near(c.tau, 0.2, 1e-12)
  t.eq(c.loo, 0, "each value is 2a * 8/7 from the others' mean")
  -- two elements, independent: the product
  for k = 1, 8 do vals[k][2] = vals[k][1] end
  t.near(lint.closed_form_p(vals, tol).p, c.p * c.p, 1e-12)
  -- no spread: the constant is exact
  local same = {}
  for k = 1, 8 do same[k] = { 4 } end
  t.eq(lint.closed_form_p(same, { atol = 0, rtol = 0 }).p, 1)
  t.eq(lint.closed_form_p(same, { atol = 0, rtol = 0 }).loo, 8)
  -- NaN: not judged (nan_inf says it)
  same[3] = { 0 / 0 }
  t.eq(lint.closed_form_p(same, { atol = 0, rtol = 0 }), nil)
end)

-- 16 rows (under 64: no sample estimate) of 1024 draws of uniform(-1, 1)
local X16 = { name = "x", dtype = "f32", shape = { "rows", "cols" }, init = { "uniform", -1, 1 } }
local LOSS = { { name = "loss", dtype = "f32", shape = { 1 } } }
local S16 = { { rows = 16, cols = 1024 }, { rows = 3, cols = 5 } }

t.test("closed form: a scalar mean over many draws at a loose tolerance is flagged", function()
  -- mean of x^2 over 16384 draws: 1/3, sd 0.298 / 128 = 0.0023; tolerance 1e-3 + 1e-2 / 3 = 0.0043
  local tk = task { name = "mean_sq", inputs = { X16 }, outputs = LOSS, shapes = S16, tolerance = { atol = 1e-3, rtol = 1e-2 } }
  local B = fake_backend(function(ins) local s = 0 for _, v in ipairs(ins.x) do s = s + v * v end return { loss = { s / #ins.x } } end)
  local res = lint.run(tk, { backend = B })
  t.eq(at(res, "closed_form"), "[1]", json.encode(res.flags))
  local f
  for _, x in ipairs(res.flags) do if x.reason == "closed_form" then f = x end end
  local p = tonumber(f.detail:match("with probability ([%d.e%-]+)"))
  t.ok(p and p > 0.5 and p < 1, "P near erf(0.0043 / (0.0023 * 1.07 * 1.41)) = 0.92: " .. f.detail)
  t.ok(f.detail:find("over 8 seeds (101-808)", 1, true), f.detail)
  for _, seed in ipairs(lint.CLOSED_FORM_SEEDS) do
    t.ok(B.seeds[seed], "seed " .. seed .. " ran")
  end
  t.eq(B.seeds[303], 1, "the extra seeds run once, at the timed shape only")
end)

t.test("closed form: a scalar whose spread is far above its tolerance is not flagged (a note gives its probability)", function()
  -- the sum of 16384 draws: sd 74; tolerance 1e-3 + 1e-4 |sum|, about 0.004
  local tk = task { name = "sum", inputs = { X16 }, outputs = LOSS, shapes = S16, tolerance = { atol = 1e-3, rtol = 1e-4 } }
  local res = lint.run(tk, { backend = fake_backend(function(ins) local s = 0 for _, v in ipairs(ins.x) do s = s + v end return { loss = { s } } end) })
  t.eq(#res.flags, 0, json.encode(res.flags))
  local p = tonumber(notes(res):match("closed form not flagged %(loss%): .- with probability ([%d.e%-]+)"))
  t.ok(p and p < 1e-3, notes(res))
end)

t.test("closed form: the seeds' outputs that repeat are counted (the normal model gives 0 at an exact tolerance)", function()
  local exact = { atol = 0, rtol = 0 }
  local c = lint.closed_form_p({ { 1 }, { 1 }, { 1 }, { 2 }, { 3 }, { 4 }, { 5 }, { 6 } }, exact)
  t.ok(c.p < 1e-8, "a spread over an exact tolerance: the normal model says 0 (erf's approximation: 1e-9): " .. c.p)
  t.eq(c.shared, 3, "three seeds give 1")
  t.eq(lint.closed_form_p({ { 1 }, { 1 }, { 2 }, { 2 }, { 3 }, { 4 }, { 5 }, { 6 } }, exact).shared, 2, "two pairs: 2")
  -- within the tolerance of the output taken as the constant, element by element
  local c2 = lint.closed_form_p({ { 1, 7 }, { 1.005, 7 }, { 0.996, 7 }, { 1, 8 }, { 3, 7 }, { 4, 7 }, { 5, 7 }, { 6, 7 } },
    { atol = 0, rtol = 0.01 })
  t.eq(c2.shared, 3, "1, 1.005 and 0.996 pass against 1 at rtol 1e-2 where the second element agrees too")
  t.eq(lint.CLOSED_FORM_SHARED, 3)
end)

t.test("closed form: a small output that takes one value on some seeds only is flagged, at an exact tolerance", function()
  -- y = 1 where the third draw is positive, else the mean of the draws: the two seeds of
  -- SEEDS differ (input_independent and trivial_constant stay quiet), the normal model at
  -- atol = rtol = 0 gives P = 0, but 1 comes out on 6 of the 8 seeds (of this backend's draws)
  local f = function(ins)
    if ins.x[3] > 0 then return { loss = { 1 } } end
    local s = 0 for _, v in ipairs(ins.x) do s = s + v end
    return { loss = { s / #ins.x } }
  end
  local tk = task { name = "saturating", inputs = { X16 }, outputs = LOSS, shapes = S16, tolerance = { atol = 0, rtol = 0 } }
  local res = lint.run(tk, { backend = fake_backend(f) })
  t.eq(at(res, "closed_form"), "[1]", json.encode(res.flags) .. notes(res))
  t.eq(at(res, "input_independent"), "[]", json.encode(res.flags))
  local detail
  for _, x in ipairs(res.flags) do if x.reason == "closed_form" then detail = x.detail end end
  t.ok(detail and detail:find("6 of 8 seeds give one output (3 or more flags)", 1, true), detail)
  t.eq(at(res, "trivial_constant"), "[]", json.encode(res.flags))
  -- the same task whose 1 never comes: not flagged
  local never = function(ins) local s = 0 for _, v in ipairs(ins.x) do s = s + v end return { loss = { s / #ins.x } } end
  local res2 = lint.run(task { name = "plain_mean", inputs = { X16 }, outputs = LOSS, shapes = S16, tolerance = { atol = 0, rtol = 0 } },
    { backend = fake_backend(never) })
  t.eq(at(res2, "closed_form"), "[]", json.encode(res2.flags))
  t.ok(notes(res2):find("1 of 8 seeds give one output", 1, true), notes(res2))
end)

t.test("closed form where the timed shape could not run here: said, not flagged", function()
  local tk = task { name = "mean_sq_big", inputs = { X16 }, outputs = LOSS, shapes = S16, tolerance = { atol = 1e-3, rtol = 1e-2 } }
  local res = lint.run(tk, { backend = fake_backend(function(ins) local s = 0 for _, v in ipairs(ins.x) do s = s + v * v end return { loss = { s / #ins.x } } end,
    { skip = function(sym) return sym.rows == 16 end }) })
  t.eq(at(res, "closed_form"), "[]", json.encode(res.flags))
  t.ok(table.concat(res.unchecked, "\n"):find("closed form (loss): it is decided at the timed shape, which did not run here", 1, true),
    json.encode(res.unchecked))
end)

----------------------------------------------------------------------------------------
-- through PyTorch on the CPU

local okt, why = require("km.task.kernelbench").available()
if not okt then
  t.skip("problem files and tasks/l1_mse_loss through PyTorch on the CPU", "PyTorch not available (set KM_PYTHON to a python with torch): " .. tostring(why))
  t.done()
  return
end

local DIR = testing.tmpdir()
local function lint_json(args) return testing.lint(DIR, args .. " --cpu") end

-- an MSE over 2^21 draws (pred normal, target uniform(-1, 1), as l1_mse_loss had): 4/3, sd of
-- the mean 1.85 / 2^10.5 = 1.3e-3 against KernelBench's fp32 tolerance 1e-4 + 1e-4 * 4/3:
-- a constant passes about 14% of the time. 4096 rows: 1/64 of them misses by 8e-3 (no estimate).
testing.problem(DIR .. "/cf", "94_MSE", { init = false, forward = "pred, target",
  returns = "torch.mean((pred - target) ** 2)", sizes = "batch_size = 4096\ndim = 512",
  inputs = "torch.randn(batch_size, dim), torch.rand(batch_size, dim) * 2 - 1" })
-- the sum of 2^21 draws of uniform(-1, 1): sd 836 against about 1e-4 * |sum|
testing.problem(DIR .. "/sound", "1_Sum", { init = false, returns = "torch.sum(x)", sizes = "batch_size = 4096\ndim = 512",
  inputs = "torch.rand(batch_size, dim) * 2 - 1" })

t.test("PyTorch on the CPU: an MSE loss at fp32 is flagged closed_form, at the timed shape", function()
  local by, rc, text = lint_json(DIR .. "/cf --precision fp32")
  t.eq(rc, 1, text)
  local r = by["94_MSE@fp32"]
  t.ok(r, text)
  t.eq(at(r, "closed_form"), "[1]", text)
  t.eq(at(r, "sample_estimate"), "[]", text)
end)

t.test("PyTorch on the CPU: a zero-mean sum is not flagged", function()
  local by, rc, text = lint_json(DIR .. "/sound --precision fp32")
  t.eq(rc, 0, text)
  local r = by["1_Sum@fp32"]
  t.ok(r and #r.flags == 0, text)
  t.ok(r and notes(r):find("closed form not flagged (out", 1, true), text)
end)

t.test("tasks/l1_mse_loss (a loss per row) on the CPU: not flagged", function()
  local by, rc, text = lint_json(ROOT .. "/tasks/l1_mse_loss")
  t.eq(rc, 0, text)
  local r = by["l1_mse_loss@own"]
  t.ok(r and #r.flags == 0, text)
end)

os.execute("rm -rf " .. DIR)
t.done()
