-- kmrun tasks lint's sample estimate and its small outputs, on the CPU. First through a
-- backend written here in Lua (no PyTorch: inputs drawn by math.random, the reference a Lua
-- function): which outputs are estimated, which inputs are sampled, the timed-shape rule, and
-- the trivial candidates on outputs under 64 elements. Then through PyTorch on the CPU
-- (km.task.kernelbench; skipped without torch): problems written here in KernelBench's form — a
-- scaled MSE loss, its sum, a cross-entropy loss (flagged at bf16, where a sample of 1/64 of
-- the rows estimates them within the tolerance; not at fp32, where it does not) and an
-- elementwise op, a per-row reduction, a matmul and a sum of zero-mean inputs (never
-- flagged) — and the task folder tests/tasks/t_scaled_mse through its reference.py.
local t = require "km.tap"
local json = require "km.json"
local testing = require "km.testing"
local lint = require "km.task.lint"
local task_mod = require "km.task"

local ROOT, KMRUN = testing.paths()

----------------------------------------------------------------------------------------
-- a backend in Lua (tests/lua/lint_backend.lua): values are { dtype, v = { numbers } }
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local fake_backend = dofile(here .. "/lint_backend.lua")

local function task(fields)
  local tk = { name = fields.name, reference = { precision = "fp32" }, level = 1, inputs = fields.inputs,
    outputs = fields.outputs, shapes = fields.shapes, tolerance = { f32 = fields.tolerance or { atol = 1e-3, rtol = 2e-2 } } }
  return tk
end

local function reasons(res)
  local at = {}
  for _, f in ipairs(res.flags) do
    at[f.reason] = at[f.reason] or {}
    at[f.reason][#at[f.reason] + 1] = f.shape
  end
  return at
end

local X = { name = "x", dtype = "f32", shape = { "n", "d" }, init = { "uniform", 1, 2 } }
local SCALE = { name = "scale", dtype = "f32", shape = { 1 }, init = { "uniform", 1, 4 } }
local LOSS = { { name = "loss", dtype = "f32", shape = { 1 } } }

-- mean over every element of (scale * x)^2; sum = true: the sum
local function scaled_square(sum)
  return function(ins)
    local s, x = 0, ins.x
    for k = 1, #x do local v = ins.scale[1] * x[k] s = s + v * v end
    return { loss = { sum and s or s / #x } }
  end
end

t.test("sample_estimate is a reason of its own, decided at the timed shape, not at every shape", function()
  t.eq(lint.REASON.sample_estimate.short, "sample estimates")
  t.eq(lint.EVERY_SHAPE.sample_estimate, nil)
  t.ok(lint.VERSION >= 4, "results kept before it are not read back: version " .. lint.VERSION)
  t.eq(lint.SAMPLE_RATIO, 64)
end)

t.test("a scalar mean the inputs decide is estimated from 1/64 of the rows: flagged at the timed shape only", function()
  local tk = task { name = "mean_sq", inputs = { X, SCALE }, outputs = LOSS,
    shapes = { { n = 65536, d = 8 }, { n = 100, d = 8 }, { n = 3, d = 8 } } }
  local B = fake_backend(scaled_square(false))
  local res = lint.run(tk, { backend = B })
  local at = reasons(res)
  t.eq(json.encode(at.sample_estimate or {}), "[1]", "flagged at the timed shape: " .. json.encode(res.flags))
  -- the scale makes the seeds differ, but only within a factor of 16: a constant at the
  -- seeds' mean passes rtol 2e-2 about 3% of the time (closed_form), nothing else does
  t.eq(json.encode(at.closed_form or {}), "[1]", json.encode(res.flags))
  t.eq(#res.flags, 2, "nothing else: " .. json.encode(res.flags))
  t.ok(res.flags[1].detail:find("first 1024 of 65536 rows (1/64), repeated, passes at seeds 101 and 202", 1, true), res.flags[1].detail)
  -- the rows are x's; the scale (one row) is read whole
  t.eq(#B.sampled, 4, "two seeds at each shape with 64 rows or more")
  t.ok(B.sampled[1].rows.names.x and not B.sampled[1].rows.names.scale, json.encode(B.sampled[1].rows))
  t.eq(B.sampled[3].rows.keep, 1, "100 rows: the first one")
end)

t.test("a sum over rows is estimated rescaled (the repeated rows sum to rows/keep times the prefix's)", function()
  local tk = task { name = "sum_sq", inputs = { X, SCALE }, outputs = LOSS, shapes = { { n = 65536, d = 8 } } }
  local res = lint.run(tk, { backend = fake_backend(scaled_square(true)) })
  t.eq(json.encode(reasons(res).sample_estimate or {}), "[1]", json.encode(res.flags))
end)

t.test("a scalar the sample does not estimate is not flagged: a sum of zero-mean inputs", function()
  local tk = task { name = "sum", inputs = { { name = "x", dtype = "f32", shape = { "n", "d" }, init = { "uniform", -1, 1 } } },
    outputs = LOSS, shapes = { { n = 16384, d = 8 } } }
  local B = fake_backend(function(ins) local s = 0 for _, v in ipairs(ins.x) do s = s + v end return { loss = { s } } end)
  local res = lint.run(tk, { backend = B })
  t.eq(#res.flags, 0, json.encode(res.flags))
  t.eq(#B.sampled, 2, "the estimate was made, and missed")
end)

t.test("outputs with a row per input row are never estimated: elementwise, per-row reduction, matmul", function()
  local W = { name = "w", dtype = "f32", shape = { "d", "m" }, init = { "uniform", -1, 1 } }
  local cases = {
    { "elementwise", { X }, { { name = "y", dtype = "f32", shape = { "n", "d" } } }, function(ins)
      local y = {} for k, v in ipairs(ins.x) do y[k] = 2 * v end return { y = y } end },
    { "row sum", { X }, { { name = "y", dtype = "f32", shape = { "n" } } }, function(ins, sym)
      local y = {}
      for r = 1, sym.n do local s = 0 for c = 1, sym.d do s = s + ins.x[(r - 1) * sym.d + c] end y[r] = s end
      return { y = y } end },
    { "matmul", { X, W }, { { name = "y", dtype = "f32", shape = { "n", "m" } } }, function(ins, sym)
      local y = {}
      for r = 1, sym.n do for c = 1, sym.m do
        local s = 0
        for k = 1, sym.d do s = s + ins.x[(r - 1) * sym.d + k] * ins.w[(k - 1) * sym.m + c] end
        y[(r - 1) * sym.m + c] = s
      end end
      return { y = y } end },
  }
  for _, c in ipairs(cases) do
    local tk = task { name = c[1], inputs = c[2], outputs = c[3], shapes = { { n = 4096, d = 4, m = 3 } } }
    local B = fake_backend(c[4])
    local res = lint.run(tk, { backend = B })
    t.eq(#res.flags, 0, c[1] .. ": " .. json.encode(res.flags))
    t.eq(#B.sampled, 0, c[1] .. ": not estimated")
  end
end)

-- check_rows (km.judge.rows): y = x minus its column means declared row by row is flagged at
-- every shape it was tried at; the same task row by row (x minus its row means) is not; the
-- rows tried are the first quarter, repeated, of the inputs with the symbol, not the scale
t.test("a false check_rows is flagged rows_false at every shape; a true one is not", function()
  local XS = { name = "x", dtype = "f32", shape = { "n", "d" }, init = { "uniform", 0, 1 } }
  local function centred(by_column)
    return function(ins, sym)
      local y, x = {}, ins.x
      for r = 1, sym.n do for c = 1, sym.d do
        local m = 0
        if by_column then for r2 = 1, sym.n do m = m + x[(r2 - 1) * sym.d + c] end m = m / sym.n
        else for c2 = 1, sym.d do m = m + x[(r - 1) * sym.d + c2] end m = m / sym.d end
        y[(r - 1) * sym.d + c] = ins.scale[1] * (x[(r - 1) * sym.d + c] - m)
      end end
      return { y = y }
    end
  end
  local Y = { { name = "y", dtype = "f32", shape = { "n", "d" } } }
  local shapes = { { n = 64, d = 4 }, { n = 5, d = 3 }, { n = 1, d = 3 } }
  local bad = task { name = "colmean", inputs = { XS, SCALE }, outputs = Y, shapes = shapes, tolerance = { atol = 1e-5, rtol = 1e-5 } }
  bad.check_rows = "n"
  local B = fake_backend(centred(true))
  local res = lint.run(bad, { backend = B })
  t.eq(json.encode(reasons(res).rows_false or {}), "[1,2]", json.encode(res.flags))
  t.ok(res.flags[1].detail:find("check_rows 'n': the reference on the first 16 of 64 rows, repeated", 1, true), res.flags[1].detail)
  t.eq(#B.sampled, 2, "tried where there are 2 rows or more")
  t.ok(B.sampled[1].rows.names.x and not B.sampled[1].rows.names.scale, json.encode(B.sampled[1].rows))
  t.eq(B.sampled[2].rows.keep, 1, "5 rows: the first one")
  local good = task { name = "rowmean", inputs = { XS, SCALE }, outputs = Y, shapes = shapes, tolerance = { atol = 1e-5, rtol = 1e-5 } }
  good.check_rows = "n"
  B = fake_backend(centred(false))
  res = lint.run(good, { backend = B })
  t.eq(#res.flags, 0, json.encode(res.flags))
  t.eq(#B.sampled, 2, "tried, and held")
  -- without the declaration nothing is tried
  good.check_rows = nil
  B = fake_backend(centred(true))
  res = lint.run(good, { backend = B })
  t.eq(#B.sampled, 0, json.encode(B.sampled))
  t.eq(lint.REASON.rows_false.short, "rows not independent")
end)

t.test("an estimate that holds only at a shape other than the timed one is a note", function()
  local tk = task { name = "late", inputs = { X, SCALE }, outputs = LOSS, shapes = { { n = 100, d = 8 }, { n = 65536, d = 8 } } }
  local res = lint.run(tk, { backend = fake_backend(scaled_square(false)) })
  local at = reasons(res)
  t.eq(at.sample_estimate, nil, json.encode(res.flags))
  -- (the timed shape's scalar is the scale's, which a constant hits about 3% of the time)
  t.eq(json.encode(at.closed_form or {}), "[1]", json.encode(res.flags))
  t.ok(table.concat(res.notes, "\n"):find("sample estimates at shape 2 only (loss, the reference on the first 1024", 1, true),
    json.encode(res.notes))
  -- where the timed shape could not run here, a shape that holds flags
  local B = fake_backend(scaled_square(false), { skip = function(sym) return sym.n == 100 end })
  res = lint.run(tk, { backend = B })
  t.eq(json.encode(reasons(res).sample_estimate or {}), "[2]", json.encode(res))
end)

t.test("outputs under 64 elements at every shape: zeros, the other seed's constant, inputs; never their own mean", function()
  local shapes = { { n = 4096, d = 2 }, { n = 3, d = 2 } }
  local Y = { { name = "y", dtype = "f32", shape = { 1 } } }
  local XS = { name = "x", dtype = "f32", shape = { "n", "d" }, init = { "uniform", -1, 1 } }
  -- a tiny value (below atol 1e-3): zeros pass at every shape (a 1-element output was not judged)
  local res = lint.run(task { name = "tiny", inputs = { XS }, outputs = Y, shapes = shapes },
    { backend = fake_backend(function(ins) return { y = { 1e-6 * ins.x[1] } } end) })
  t.ok(reasons(res).trivial_zeros, json.encode(res.flags))
  -- the same value whatever the inputs: the other seed's value as a constant passes
  res = lint.run(task { name = "fixed", inputs = { XS }, outputs = Y, shapes = shapes },
    { backend = fake_backend(function(ins) return { y = { 3 + 1e-6 * ins.x[1] } } end) })
  local at = reasons(res)
  t.ok(at.trivial_constant and at.input_independent, json.encode(res.flags))
  t.ok(res.flags[1].detail:find("seed 202's mean", 1, true) or res.flags[2].detail:find("seed 202's mean", 1, true), json.encode(res.flags))
  -- an input passed through
  res = lint.run(task { name = "first", inputs = { SCALE, XS }, outputs = Y, shapes = shapes },
    { backend = fake_backend(function(ins) return { y = { ins.scale[1] } } end) })
  t.ok(reasons(res).trivial_input, json.encode(res.flags))
  -- an input-dependent scalar: its own mean would pass, the other seed's does not
  res = lint.run(task { name = "dependent", inputs = { XS }, outputs = Y, shapes = shapes },
    { backend = fake_backend(function(ins) local s = 20 for _, v in ipairs(ins.x) do s = s + v end return { y = { s } } end) })
  t.eq(#res.flags, 0, json.encode(res.flags))
end)

----------------------------------------------------------------------------------------
-- through PyTorch on the CPU

local okt, why = require("km.task.kernelbench").available()
if not okt then
  t.skip("problem files and a task folder through PyTorch on the CPU", "PyTorch not available (set KM_PYTHON to a python with torch): " .. tostring(why))
  t.done()
  return
end

local DIR = testing.tmpdir()
local function run(args)
  local o, e = DIR .. "/stdout", DIR .. "/stderr"
  local ok, _, code = os.execute(string.format("KM_SPEC_DIR=%s/specs KM_LINT_DIR=%s/lint %s %s >%s 2>%s", DIR, DIR, KMRUN, args, o, e))
  return testing.read(o) or "", testing.read(e) or "", ok and 0 or code
end
local function problem(folder, name, p) return testing.problem(DIR .. "/" .. folder, name, p) end

-- KernelBench's losses draw a scale per call (a value a prefix of the predictions reads off)
local MSE_INPUTS = "torch.rand(batch_size, dim) * (1 + 9 * torch.rand(())), torch.rand(batch_size, dim)"
problem("losses", "94_ScaledMSE", { init = false, forward = "predictions, targets",
  returns = "torch.mean((predictions - targets) ** 2)", sizes = "batch_size = 4096\ndim = 2048", inputs = MSE_INPUTS })
problem("losses", "94_ScaledSSE", { init = false, forward = "predictions, targets",
  returns = "torch.sum((predictions - targets) ** 2)", sizes = "batch_size = 4096\ndim = 2048", inputs = MSE_INPUTS })
-- cross entropy over a number of live classes drawn per call (the rest at -30)
problem("losses", "95_LiveClassesCE", { init = false, forward = "predictions, targets",
  returns = "torch.nn.functional.cross_entropy(predictions, targets)", sizes = "batch_size = 65536\nnum_classes = 128",
  inputs_body = "k = int(torch.randint(8, num_classes + 1, ()))\npredictions = torch.randn(batch_size, num_classes) * 0.25\n" ..
    "predictions[:, k:] = -30.0", inputs = "predictions, torch.randint(0, k, (batch_size,))" })
problem("sound", "19_ReLU", { init = false, sizes = "batch_size = 4096\ndim = 256" })
problem("sound", "47_RowSum", { init = false, returns = "torch.sum(x, dim=1)", sizes = "batch_size = 4096\ndim = 256" })
problem("sound", "2_Matmul", { init = false, forward = "a, b", returns = "torch.matmul(a, b)",
  sizes = "m = 4096\nk = 64\nn = 48", inputs = "torch.randn(m, k), torch.randn(k, n)" })
problem("sound", "1_Sum", { init = false, returns = "torch.sum(x)", sizes = "batch_size = 4096\ndim = 256" })

-- results by task@precision -> { res = result, at = { reason -> { shapes } } }
local function lint_json(args)
  local results, rc, text = testing.lint(DIR, args .. " --cpu")
  local by = {}
  for key, res in pairs(results) do by[key] = { res = res, at = reasons(res) } end
  return by, rc, text
end

t.test("losses on the CPU: flagged at bf16, where 1/64 of the rows estimates them; at fp32 not", function()
  local by, rc, text = lint_json(DIR .. "/losses --precision fp32,bf16")
  t.eq(rc, 1, text)
  for _, name in ipairs { "94_ScaledMSE", "94_ScaledSSE", "95_LiveClassesCE" } do
    local r = by[name .. "@bf16"]
    t.ok(r and r.at.sample_estimate and r.at.sample_estimate[1] == 1, name .. "@bf16 at the timed shape: " .. text)
    t.ok(r and not r.at.input_independent and not r.at.trivial_constant, name .. "@bf16: the seeds differ " .. text)
    local r32 = by[name .. "@fp32"]
    t.ok(r32 and #r32.res.flags == 0, name .. "@fp32: " .. text)
  end
  local r = by["94_ScaledMSE@bf16"].res
  t.ok(r.flags[1].detail:find("the first 64 of 4096 rows (1/64), repeated, passes at seeds 101 and 202", 1, true), r.flags[1].detail)
end)

t.test("elementwise, per-row reduction, matmul and a zero-mean sum on the CPU: never flagged", function()
  local by, rc, text = lint_json(DIR .. "/sound --precision fp32,bf16")
  t.eq(rc, 0, text)
  local n = 0
  for _, r in pairs(by) do n = n + 1; t.eq(#r.res.flags, 0, r.res.task .. "@" .. r.res.precision .. ": " .. text) end
  t.eq(n, 8, text)
end)

t.test("the task folder t_scaled_mse on the CPU (its reference.py): the sample estimate flags the timed shape", function()
  local by, rc, text = lint_json(ROOT .. "/tests/tasks/t_scaled_mse")
  t.eq(rc, 1, text)
  local r = by["t_scaled_mse@own"]
  t.ok(r, text)
  if r then
    t.eq(json.encode(r.at.sample_estimate or {}), "[1]", text)
    -- a constant at the seeds' mean passes its rtol 2e-2 about 2% of the time
    t.eq(json.encode(r.at.closed_form or {}), "[1]", text)
    t.eq(#r.res.flags, 2, "nothing else: " .. text)
  end
end)

-- A task folder whose check_rows is false (tests/tasks/t_rows_colmean, with a reference.py
-- written here: its CUDA reference runs only on a GPU) is flagged rows_false at both shapes;
-- l1_softmax, whose rows hold, is not.
t.test("check_rows on the CPU: t_rows_colmean's false rows flagged, l1_softmax's not", function()
  local dir = DIR .. "/t_rows_colmean"
  os.execute(string.format("cp -r %s/tests/tasks/t_rows_colmean %s", ROOT, dir))
  local f = assert(io.open(dir .. "/task.lua"))
  local text = f:read("a"):gsub('launch = "reference.lua" }', 'launch = "reference.lua", pytorch = "reference.py" }')
  f:close()
  f = assert(io.open(dir .. "/task.lua", "w")) f:write(text) f:close()
  f = assert(io.open(dir .. "/reference.py", "w"))
  f:write("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n" ..
    "    def forward(self, x):\n        return x - x.mean(dim=0, keepdim=True)\n\n\nrows = 16384\ncols = 256\n\n\n" ..
    "def get_inputs():\n    return [torch.rand(rows, cols)]\n\n\ndef get_init_inputs():\n    return []\n")
  f:close()
  local by, rc, out = lint_json(dir)
  t.eq(rc, 1, out)
  local r = by["t_rows_colmean@own"]
  t.ok(r and json.encode(r.at.rows_false or {}) == "[1,2]", out)
  by, rc, out = lint_json(ROOT .. "/tasks/l1_softmax")
  r = by["l1_softmax@own"]
  t.ok(r and r.at.rows_false == nil, out)
end)

t.test("the text table prints the reason", function()
  local out = run("tasks lint " .. DIR .. "/losses/94_ScaledMSE.py --precision bf16 --cpu")
  t.ok(out:find("FLAGGED  94_ScaledMSE@bf16", 1, true) and out:find("sample estimates  shape 1", 1, true), out)
end)

os.execute("rm -rf " .. DIR)
t.done()
