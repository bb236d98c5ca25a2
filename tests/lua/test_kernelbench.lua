-- km.task.kernelbench on the CPU: KernelBench problem files (written here, in KernelBench's
-- format) loaded into the embedded interpreter; names, dtypes, shapes, seeds, precision
-- casts, parameters, tuple outputs; tensors exchanged as DLPack views of host memory; and
-- each kind of bad problem file a clear message naming the file. Skips without torch.
local t = require "km.tap"
local testing = require "km.testing"
local kb = testing.require_torch(t)
local compare = require "km.compare"
local python = require "km.python"

local DIR = testing.tmpdir()

local function problem(name, p) return testing.problem(DIR, name, p) end

local HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
local F = "import torch.nn.functional as F"

local RELU = problem("19_ReLU", { imports = F, sizes = "batch_size = 16\ndim = 33" })

local LINEAR = problem("linear_relu", { imports = F, args = "in_features, out_features, scale",
  init = "self.fc = nn.Linear(in_features, out_features)\nself.block = nn.Sequential(nn.Identity())\n" ..
    'self.register_buffer("shift", torch.full((out_features,), 0.25))\n' ..
    'self.register_buffer("steps", torch.zeros((), dtype=torch.int64), persistent=False)\nself.scale = scale',
  returns = "torch.relu(self.fc(x) * self.scale + self.shift)",
  sizes = "batch_size = 8\nin_features = 12\nout_features = 5\nscale = 2.0",
  inputs = "torch.randn(batch_size, in_features)", init_inputs = "in_features, out_features, scale" })

local TUPLE = problem("tuple_out", { imports = F, forward = "A, B, k: int", returns = "A + B * k, A.sum(dim=1), (A * B).mean()",
  sizes = "", inputs = "torch.rand(4, 6), torch.rand(4, 6), 3" })

local MIXED = problem("mixed_dtypes", { imports = F, args = "num_classes",
  init = "self.proj = nn.Linear(num_classes, num_classes, bias=False)", forward = "predictions, targets, mask",
  body = "logits = self.proj(predictions)\npicked = logits.gather(1, targets.unsqueeze(1)).squeeze(1)", returns = "picked * mask",
  sizes = "", inputs = "torch.randn(10, 7), torch.randint(0, 7, (10,)), torch.rand(10) > 0.5", init_inputs = "7" })

-- first, before anything here loads a problem on meta: torch's import does not warm the meta
-- device (sympy: a second), a CPU load does not, a meta load does, once (kb_bridge.warm_meta)
t.test("the meta device is warmed by the first load on it, not by torch's import", function()
  local function has_sympy() return python.eval("'sympy' in __import__('sys').modules") end
  t.eq(has_sympy(), false, "torch imported, sympy not")
  assert(kb.load(RELU)):release()
  t.eq(has_sympy(), false, "a CPU load runs nothing on meta")
  local p = assert(kb.load(RELU, { device = "meta" }))
  t.eq(has_sympy(), true, "a meta load warmed it first")
  t.ok(p:spec(1), "and its spec")
  p:release()
end)

local NAMES = problem("names", { imports = F,
  init = "self.layers = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])\nself.out = nn.Parameter(torch.ones(3))",
  forward = "out, *rest", body = "y = self.layers[1](self.layers[0](out)) * self.out\nfor r in rest:\n    y = y + r",
  returns = "y", sizes = "", inputs = "torch.rand(2, 3), torch.rand(2, 3), torch.rand(2, 3)" })

local function names_of(list)
  local out = {}
  for i, d in ipairs(list) do out[i] = d.name end
  return table.concat(out, ",")
end

local function shape_of(d) return table.concat(d.shape, "x") end

-- buffers (host memory torch owns, addressed by pointer) for every tensor of a spec
local function buffers(spec)
  return kb.buffers_for(spec, kb.host_buffer)
end

t.test("a ReLU problem: spec, seeded inputs, forward into the given memory", function()
  local p = assert(kb.load(RELU))
  t.eq(p.name, "19_ReLU")
  t.eq(p.device, "cpu")
  t.eq(p.tolerance.atol, 1e-4)
  local s = assert(p:spec(1))
  t.eq(names_of(s.inputs), "x")
  t.eq(names_of(s.outputs), "out")
  t.eq(#s.params, 0)
  t.eq(s.inputs[1].dtype, "f32")
  t.eq(shape_of(s.inputs[1]), "16x33")
  t.eq(shape_of(s.outputs[1]), "16x33")
  local io = buffers(s)
  assert(p:make_inputs(7, io))
  local x = io.x:to_table()
  local negatives = 0
  for _, v in ipairs(x) do if v < 0 then negatives = negatives + 1 end end
  t.ok(negatives > 100 and negatives < 430, "randn: about half negative, got " .. negatives)
  io.out:from_table(x) -- stale values forward must overwrite
  t.eq(p:forward(io), true)
  local want = {}
  for i, v in ipairs(x) do want[i] = math.max(v, 0) end
  local r = compare.allclose(io.out:to_table(), want, { atol = 0, rtol = 0 })
  t.ok(r.ok, "out = relu(x)")
  -- the same seed, the same inputs; another seed, others
  local again = buffers(s)
  assert(p:make_inputs(7, again))
  t.ok(compare.allclose(again.x:to_table(), x, { atol = 0, rtol = 0 }).ok, "seed 7 twice")
  assert(p:make_inputs(8, again))
  t.ok(not compare.allclose(again.x:to_table(), x, { atol = 0, rtol = 0 }).ok, "seed 8 differs")
  -- seed 7 is torch.manual_seed(7) then get_inputs(), as KernelBench draws them (the bridge
  -- seeds only the generators get_inputs() can draw from, not every backend torch knows)
  python.exec("import torch; torch.manual_seed(7); _km_want = torch.randn(16, 33).flatten().tolist()")
  local want7 = {}
  for i = 1, 16 * 33 do want7[i] = python.eval("_km_want[" .. (i - 1) .. "]") end
  t.ok(compare.allclose(x, want7, { atol = 0, rtol = 0 }).ok, "seed 7's inputs are torch.manual_seed(7)'s")
  p:release()
  t.raises(function() p:spec(1) end, "released")
end)

t.test("sizes: the problem at other module-level sizes (a task's reference.py at another shape set)", function()
  local p = assert(kb.load(RELU, { sizes = { batch_size = 3, dim = 5 } }))
  local s = assert(p:spec(1))
  t.eq(shape_of(s.inputs[1]), "3x5")
  t.eq(shape_of(s.outputs[1]), "3x5")
  local io = buffers(s)
  assert(p:make_inputs(2, io))
  t.eq(p:forward(io), true)
  local want = {}
  for i, v in ipairs(io.x:to_table()) do want[i] = math.max(v, 0) end
  t.ok(compare.allclose(io.out:to_table(), want, { atol = 0, rtol = 0 }).ok, "out = relu(x) at 3x5")
  -- the problem at its own sizes is another problem: buffers of the other sizes are refused
  local own = assert(kb.load(RELU))
  t.eq(shape_of(assert(own:spec(1)).inputs[1]), "16x33")
  local ok, err = own:forward(io)
  t.ok(not ok and tostring(err):find("shape", 1, true), tostring(err))
  own:release(); p:release()
  -- bad sizes: the caller's error, raised before anything loads
  t.raises(function() kb.load(RELU, { sizes = { dim = 1.5 } }) end, "integers")
  t.raises(function() kb.load(RELU, { sizes = "dim=3" }) end, "a table")
  local bad, why = kb.load(RELU, { sizes = { ["not a name"] = 3 } })
  t.ok(not bad and tostring(why):find("sizes", 1, true), tostring(why))
end)

-- a problem whose forward counts its runs (builtins: the held-out variant's module is another)
local COUNTED = problem("counted_scale", { imports = "import builtins", args = "dim",
  init = "self.w = nn.Parameter(torch.ones(dim))",
  body = "builtins.km_forwards = getattr(builtins, 'km_forwards', 0) + 1", returns = "x * self.w",
  sizes = "batch_size = 16\ndim = 40", inputs = "torch.rand(batch_size, dim)", init_inputs = "dim" })

local function forwards() return python.eval("getattr(__import__('builtins'), 'km_forwards', 0)") end
local HELD = "__import__('sys').modules['km_kb_bridge']._problems[%d]._heldout"

t.test("spec: a spec made before (the driver's, on meta) is taken as it is: the model runs for no name or shape", function()
  local meta = assert(kb.load(COUNTED, { device = "meta" }))
  local spec = assert(meta:spec())
  meta:release()
  t.ok(spec.heldout and spec.heldout.spec, "the problem has a held-out shape")
  local n0 = forwards()
  local p = assert(kb.load(COUNTED, { spec = spec }))
  t.eq(p.adopted, true)
  assert(p:snapshot())
  t.eq(forwards() - n0, 0, "loaded and snapshotted, its held-out variant built: no forward")
  t.eq(python.eval(HELD:format(p.id) .. "[0]['rule']"), spec.heldout.rule)
  -- without one, the names and the held-out shape come from two forwards (own and held-out sizes)
  local q = assert(kb.load(COUNTED))
  t.eq(q.adopted, false)
  assert(q:snapshot())
  t.eq(forwards() - n0, 2, "the old way: the problem and its held-out variant run")
  -- both give the same spec, and the same outputs at either shape
  local ps, qs = assert(p:spec(3)), assert(q:spec(3))
  t.eq(names_of(ps.params), names_of(qs.params))
  t.eq(shape_of(ps.heldout.spec.inputs[1]), shape_of(qs.heldout.spec.inputs[1]))
  for _, sp in ipairs { ps, ps.heldout.spec } do
    local a, b = buffers(sp), buffers(sp)
    for _, d in ipairs(sp.params) do a[d.name] = nil b[d.name] = nil end
    assert(p:make_inputs(5, a)); assert(q:make_inputs(5, b))
    t.eq(p:forward(a), true); t.eq(q:forward(b), true)
    t.ok(compare.allclose(a.out:to_table(), b.out:to_table(), { atol = 0, rtol = 0 }).ok, "the same outputs at " .. shape_of(sp.inputs[1]))
  end
  p:release(); q:release()
  -- a spec that does not fit (another problem's, a parameter's shape changed) is not taken
  local other = assert(kb.load(RELU, { device = "meta" }))
  local rspec = assert(other:spec())
  other:release()
  rspec.name = "counted_scale"
  local r = assert(kb.load(COUNTED, { spec = rspec }))
  t.eq(r.adopted, false, "a spec with other parameters")
  r:release()
  spec.params[1].shape[1] = 41
  r = assert(kb.load(COUNTED, { spec = spec }))
  t.eq(r.adopted, false, "a parameter's shape changed")
  r:release()
  t.raises(function() kb.load(COUNTED, { spec = "x" }) end, "spec must be a table")
end)

t.test("bind: checked once, then each run is the model (and the copy, unless run(false))", function()
  local p = assert(kb.load(TUPLE))
  local s = assert(p:spec(1))
  local io = buffers(s)
  assert(p:make_inputs(4, io))
  local run = assert(p:bind(io))
  local a, b = io.A:to_table(), io.B:to_table()
  io.out0:from_table({ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 })
  t.eq(run(false), true)
  t.eq(io.out0:to_table()[5], 0.0, "run(false) leaves the output buffers alone")
  t.eq(run(), true)
  t.near(io.out0:to_table()[5], a[5] + b[5] * 3, 1e-6)
  -- the bound buffers are read at each run: new inputs, new outputs
  assert(p:make_inputs(5, io))
  t.eq(run(), true)
  local a2, b2 = io.A:to_table(), io.B:to_table()
  t.ok(a2[5] ~= a[5])
  t.near(io.out0:to_table()[5], a2[5] + b2[5] * 3, 1e-6)
  local ok, err, code = p:bind({ A = io.A })
  t.eq(ok, nil)
  t.eq(code, "MISSING_BUFFER")
  t.ok(err:find("no buffer for input B", 1, true), err)
  p:release()
  t.raises(function() run() end, "released")
end)

-- run("keep"): outputs compared where torch put them (km.judge's timed checks). Kept: those of
-- their buffer's shape and dtype, contiguous, in memory of their own; the rest copied.
local IDENT = problem("ident_and_scaled", { imports = F, forward = "x", returns = "x, x * 2, (x * 2).t()",
  sizes = "", inputs = "torch.rand(3, 5)" })
t.test("bind: run('keep') gives the outputs' addresses, kept until the next run; the others copied", function()
  local function f32_at(addr) return python.eval(("__import__('ctypes').c_float.from_address(%d).value"):format(addr)) end
  local p = assert(kb.load(TUPLE))
  local io = buffers(assert(p:spec(1)))
  assert(p:make_inputs(4, io))
  local run = assert(p:bind(io))
  local a, b = io.A:to_table(), io.B:to_table()
  local ok, kept = run("keep")
  t.eq(ok, true)
  t.eq(type(kept.out0), "number", "A + B * k: kept")
  t.ok(kept.out0 ~= io.out0:ptr(), "in torch's memory, not the bound buffer")
  t.near(f32_at(kept.out0 + 4 * 4), a[5] + b[5] * 3, 1e-6)
  t.eq(io.out0:to_table()[5], 0.0, "a kept output is not copied")
  t.eq(type(kept.out1), "number", "A.sum(dim=1): kept")
  local mean = 0
  for i = 1, #a do mean = mean + a[i] * b[i] end
  t.near(f32_at(kept.out2), mean / #a, 1e-6, "(A * B).mean(): kept, a 0-d tensor as its view")
  p:release()
  p = assert(kb.load(IDENT))
  io = buffers(assert(p:spec(1)))
  assert(p:make_inputs(2, io))
  run = assert(p:bind(io))
  ok, kept = run("keep")
  t.eq(ok, true)
  local names = {}
  for name in pairs(kept) do names[#names + 1] = name end
  table.sort(names)
  t.eq(table.concat(names, ","), "out1", "the input itself and a transposed (non-contiguous) output are copied")
  local x = io.x:to_table()
  t.near(io.out0:to_table()[4], x[4], 0, "out0 = x, copied")
  t.near(f32_at(kept.out1 + 3 * 4), x[4] * 2, 1e-6)
  -- unbind: the kept outputs and the bound views go (a timing's end, km.judge.timed); a run
  -- needs a bind again
  local held = ("__import__('sys').modules['km_kb_bridge']._problems[%d].%s is None"):format(p.id, "%s")
  t.eq(python.eval(held:format("kept")), false, "kept after run('keep')")
  t.eq(p:unbind(), true)
  t.eq(python.eval(held:format("kept")), true, "the kept outputs dropped")
  t.eq(python.eval(held:format("bound")), true, "the binding dropped")
  local rok, rerr = run("keep")
  t.ok(not rok and tostring(rerr):find("before bind", 1, true), tostring(rerr))
  run = assert(p:bind(io))
  t.eq((run("keep")), true, "bound again")
  p:release()
end)

t.test("DLPack views wrap the very pointer, without a copy", function()
  local h = assert(kb.host_buffer("f32", { 2, 3 }))
  local ptr = h:ptr()
  local expr = ("__import__('sys').modules['km_kb_bridge'].wrap(%d, [2, 3], 'f32', __import__('torch').device('cpu'))"):format(ptr)
  t.eq(python.eval(expr .. ".data_ptr()"), ptr)
  t.eq(python.exec("_v = " .. expr .. "\n_v.fill_(2.5)\n_v[1, 2] = -1\ndel _v"), true)
  local v = h:to_table()
  t.eq(v[1], 2.5)
  t.eq(v[6], -1.0)
  for _, dt in ipairs { "f64", "f16", "bf16", "i8", "i32", "i64", "u8" } do
    local b = assert(kb.host_buffer(dt, 4))
    local e = ("__import__('sys').modules['km_kb_bridge'].wrap(%d, [4], '%s', __import__('torch').device('cpu'))"):format(b:ptr(), dt)
    t.eq(python.exec("_v = " .. e .. "\n_v.fill_(3)\ndel _v"), true)
    t.eq(b:to_table()[4] + 0.0, 3.0, dt)
    b:free()
  end
  h:free()
  t.raises(function() h:ptr() end, "freed")
end)

t.test("parameters and buffers by state_dict name; init arguments; Linear+ReLU values", function()
  local p = assert(kb.load(LINEAR, { seed = 3 }))
  t.eq(#p.init_args, 3)
  t.eq(p.init_args[1], 12)
  t.eq(p.init_args[3], 2.0)
  local s = assert(p:spec(1))
  t.eq(names_of(s.params), "shift,fc_weight,fc_bias,steps", "state_dict order: own tensors, then children's")
  local by = {}
  for _, d in ipairs(s.params) do by[d.name] = d end
  t.eq(by.fc_weight.key, "fc.weight")
  t.eq(by.fc_weight.kind, "parameter")
  t.eq(shape_of(by.fc_weight), "5x12")
  t.eq(by.shift.kind, "buffer")
  t.eq(by.steps.dtype, "i64", "integer buffers keep their dtype")
  t.eq(#by.steps.shape, 0)
  local io = buffers(s)
  assert(p:make_inputs(5, io))
  assert(p:write_params(io))
  assert(p:forward(io))
  local x, w, b, shift = io.x:to_table(), io.fc_weight:to_table(), io.fc_bias:to_table(), io.shift:to_table()
  t.eq(shift[1], 0.25)
  local want = {}
  for i = 0, 7 do
    for j = 0, 4 do
      local acc = b[j + 1]
      for k = 0, 11 do acc = acc + x[i * 12 + k + 1] * w[j * 12 + k + 1] end
      want[i * 5 + j + 1] = math.max(acc * 2.0 + 0.25, 0)
    end
  end
  local r = compare.allclose(io.out:to_table(), want, { atol = 1e-5, rtol = 1e-5 })
  t.ok(r.ok, "relu(x W^T + b) * 2 + 0.25, max abs error " .. tostring(r.max_abs))
  -- the weights follow the load seed
  local q = assert(kb.load(LINEAR, { seed = 3 }))
  local io2 = buffers(s)
  assert(q:write_params(io2))
  t.ok(compare.allclose(io2.fc_weight:to_table(), w, { atol = 0, rtol = 0 }).ok, "seed 3 twice")
  local other = assert(kb.load(LINEAR, { seed = 4 }))
  assert(other:write_params(io2))
  t.ok(not compare.allclose(io2.fc_weight:to_table(), w, { atol = 0, rtol = 0 }).ok, "seed 4 differs")
end)

t.test("a tuple-returning model: out0, out1, out2 (a 0-d tensor); number inputs", function()
  local p = assert(kb.load(TUPLE))
  local s = assert(p:spec(1))
  t.eq(names_of(s.inputs), "A,B,k")
  t.eq(s.inputs[3].scalar, 3)
  t.eq(s.inputs[3].dtype, nil)
  t.eq(names_of(s.outputs), "out0,out1,out2")
  t.eq(shape_of(s.outputs[1]), "4x6")
  t.eq(shape_of(s.outputs[2]), "4")
  t.eq(#s.outputs[3].shape, 0)
  local io = buffers(s)
  t.eq(io.k, nil)
  t.eq(io.out2:numel(), 1)
  local r = assert(p:make_inputs(2, io))
  t.eq(r.scalars.k, 3)
  assert(p:forward(io))
  local a, b = io.A:to_table(), io.B:to_table()
  local o0, o1, o2 = io.out0:to_table(), io.out1:to_table(), io.out2:to_table()
  t.near(o0[7], a[7] + b[7] * 3, 1e-6)
  local row, prod = 0, 0
  for k = 1, 6 do row = row + a[k] end
  for k = 1, 24 do prod = prod + a[k] * b[k] end
  t.near(o1[1], row, 1e-5)
  t.near(o2[1], prod / 24, 1e-5)
end)

t.test("fp16 and bf16: floating inputs, parameters and outputs cast; integers and bools kept", function()
  for _, prec in ipairs { "fp16", "bf16" } do
    local p = assert(kb.load(MIXED, { precision = prec }))
    t.eq(p.tolerance.atol, 1e-2)
    local s = assert(p:spec(1))
    local want = prec == "fp16" and "f16" or "bf16"
    t.eq(names_of(s.inputs), "predictions,targets,mask")
    t.eq(s.inputs[1].dtype, want, prec)
    t.eq(s.inputs[2].dtype, "i64", "class indices stay integers")
    t.eq(s.inputs[3].dtype, "u8", "bool travels as u8")
    t.eq(s.inputs[3].torch_dtype, "bool")
    t.eq(s.params[1].name, "proj_weight")
    t.eq(s.params[1].dtype, want)
    t.eq(s.outputs[1].dtype, want)
    t.eq(s.tolerance.rtol, 1e-2)
    local io = buffers(s)
    assert(p:make_inputs(3, io))
    assert(p:write_params(io))
    assert(p:forward(io))
    local pr, tg, mk, w = io.predictions:to_table(), io.targets:to_table(), io.mask:to_table(), io.proj_weight:to_table()
    local out = io.out:to_table()
    for i = 0, 9 do
      t.ok(mk[i + 1] == 0 or mk[i + 1] == 1, "mask bytes are 0 or 1")
      t.ok(math.type(tg[i + 1]) == "integer" and tg[i + 1] >= 0 and tg[i + 1] < 7)
      local c, acc = tg[i + 1], 0
      for k = 0, 6 do acc = acc + pr[i * 7 + k + 1] * w[c * 7 + k + 1] end
      t.near(out[i + 1], acc * mk[i + 1], 0.05 + 0.02 * math.abs(acc), prec .. " row " .. i)
    end
  end
end)

t.test("naming: forward's names unless they clash; state_dict dots become underscores", function()
  local p = assert(kb.load(NAMES))
  local s = assert(p:spec(1))
  t.eq(names_of(s.outputs), "out")
  t.eq(names_of(s.inputs), "in0,in1,in2", "'out' is the output's; *rest has no names")
  t.eq(names_of(s.params), "p_out,layers_0_weight,layers_0_bias,layers_1_weight,layers_1_bias")
  t.eq(s.params[1].key, "out")
  local io = buffers(s)
  assert(p:make_inputs(1, io))
  assert(p:write_params(io))
  assert(p:forward(io))
end)

t.test("wrong, missing and mismatched buffers: clear errors, nothing written", function()
  local p = assert(kb.load(RELU))
  local s = assert(p:spec(1))
  local io = buffers(s)
  local ok, err, code = p:forward({ x = io.x })
  t.eq(ok, nil)
  t.eq(code, "MISSING_BUFFER")
  t.ok(err:find("no buffer for output out", 1, true), err)
  ok, err, code = p:make_inputs(1, { out = io.out })
  t.eq(code, "MISSING_BUFFER")
  t.ok(err:find("no buffer for input x", 1, true), err)
  local small = assert(kb.host_buffer("f32", { 16, 32 }))
  ok, err, code = p:forward({ x = io.x, out = small })
  t.eq(code, "WRONG_BUFFER")
  t.ok(err:find("output out: the buffer has shape [16, 32], the problem's tensor has shape [16, 33]", 1, true), err)
  local f64 = assert(kb.host_buffer("f64", { 16, 33 }))
  ok, err, code = p:make_inputs(1, { x = f64 })
  t.eq(code, "WRONG_BUFFER")
  t.ok(err:find("input x: the buffer is f64, the problem's tensor is f32 (float32)", 1, true), err)
  -- a buffer of the same count in another shape is viewed in the problem's shape
  local flat = assert(kb.host_buffer("f32", 16 * 33))
  assert(p:make_inputs(1, { x = flat }))
  t.raises(function() p:forward({ x = 1 }) end, "buffers.x: a buffer")
  t.raises(function() p:make_inputs(1.5, io) end, "integer seed")
  t.raises(function() kb.load(RELU, { precision = "fp8" }) end, "fp32, fp16 or bf16")
end)

t.test("the meta device: specs with no memory and no compute", function()
  for _, path in ipairs { RELU, LINEAR, TUPLE, MIXED } do
    local cpu, meta = assert(kb.load(path)):spec(1), assert(kb.load(path, { device = "meta" })):spec(1)
    t.eq(meta.device, "meta")
    for _, group in ipairs { "inputs", "params", "outputs" } do
      t.eq(#meta[group], #cpu[group], path .. " " .. group)
      for i, d in ipairs(cpu[group]) do
        t.eq(meta[group][i].name, d.name)
        t.eq(meta[group][i].dtype, d.dtype)
        t.eq(table.concat(meta[group][i].shape or {}, "x"), table.concat(d.shape or {}, "x"), d.name)
      end
    end
  end
  local p = assert(kb.load(RELU, { device = "meta" }))
  local io = buffers(assert(p:spec(1)))
  local ok, err = p:make_inputs(1, io)
  t.eq(ok, nil)
  t.ok(err:find(RELU .. ": loaded on the meta device, which gives specs only", 1, true), err)
  t.eq(p:forward(io), nil)
end)

t.test("a CUDA device asked where there is none: NO_CUDA, with the reason", function()
  if require("km.cuda").available() then return t.note("this machine has a GPU: nothing to check") end
  local p, err, code = kb.load(RELU, { device = "cuda" })
  t.eq(p, nil)
  t.eq(code, "NO_CUDA")
  t.ok(err:find(RELU .. ": device cuda asked but ", 1, true), err)
  p, err, code = kb.load(RELU, { device = 0 })
  t.eq(code, "NO_CUDA")
  t.ok(err:find("device cuda:0 asked but torch ", 1, true), err)
  p, err, code = kb.load(RELU, { device = "tpu:7" })
  t.eq(code, "PROBLEM_ERROR")
  t.ok(err:find("device 'tpu:7'", 1, true), err)
end)

-- each bad problem file: nil, a message that names the file and the cause, a code. bad(p):
-- a problem whose forward returns x of an input torch.randn(4) unless p says otherwise, and
-- with no __init__ unless it has one (the line numbers below are of these texts)
local function bad(p)
  p.imports, p.sizes, p.returns, p.inputs = F, "", p.returns or "x", p.inputs or "torch.randn(4)"
  if not p.init then p.init = false end
  return testing.problem_text(p)
end

local BAD = {
  { "syntax", HEAD .. "class Model(nn.Module):\n    def forward(self, x)\n        return x\n",
    "SYNTAX_ERROR", "syntax error at line 6: expected ':'" },
  { "no_model", HEAD .. "def get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n",
    "NOT_A_PROBLEM", "not a KernelBench problem: no Model" },
  { "not_module", HEAD .. "class Model:\n    pass\n\ndef get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n",
    "NOT_A_PROBLEM", "Model is not a subclass of torch.nn.Module" },
  { "import_raises", HEAD .. "import no_such_package_here\n",
    "IMPORT_ERROR", "importing it raised ModuleNotFoundError: No module named 'no_such_package_here'\n  line 5, in <module>: import no_such_package_here" },
  { "inputs_raise", bad { inputs = "torch.randn(4, 4) @ torch.randn(5, 5)" }, "BAD_INPUTS", "get_inputs() raised RuntimeError: " },
  { "init_raises", bad { init_body = 'raise ValueError("no init for you")' },
    "PROBLEM_ERROR", "get_init_inputs() raised ValueError: no init for you\n  line 13, in get_init_inputs: raise ValueError(\"no init for you\")" },
  { "ctor_raises", bad { args = "n", init = "self.fc = nn.Linear(n, -n)", init_inputs = "3" },
    "PROBLEM_ERROR", "Model(*get_init_inputs()) raised RuntimeError" },
  { "forward_raises", bad { returns = "x.view(3, 7)" },
    "FORWARD_ERROR", "forward raised RuntimeError: shape '[3, 7]' is invalid for input of size 4\n  line 7, in forward" },
  { "float_output", bad { returns = "float(x.sum())" }, "BAD_OUTPUTS", "forward returned a float; outputs must be tensors" },
  { "tuple_with_int", bad { returns = "x, 3" }, "BAD_OUTPUTS", "forward's output 1 is a int; outputs must be tensors" },
  { "inputs_not_list", HEAD .. [[
class Model(nn.Module):
    def forward(self, x):
        return x

def get_inputs():
    return torch.randn(4)

def get_init_inputs():
    return []
]], "BAD_INPUTS", "get_inputs() returned a Tensor, not a list" },
  { "input_is_string", bad { inputs = '"hello"' }, "BAD_INPUTS", "get_inputs() item 0 is a str; inputs are tensors or numbers" },
  { "complex_input", bad { returns = "x.abs()", inputs = "torch.randn(4, dtype=torch.complex64)" },
    "UNSUPPORTED_DTYPE", "input x has dtype complex64, which kmrun buffers cannot hold" },
  { "exits", HEAD .. "import sys\nsys.exit(2)\n",
    "IMPORT_ERROR", "importing it raised SystemExit: 2" },
}

t.test("bad problem files: each a clear message naming the file, never a crash", function()
  for _, case in ipairs(BAD) do
    local name, text, want_code, want = case[1], case[2], case[3], case[4]
    local path = problem("bad_" .. name, text)
    local p, err, code = kb.load(path)
    if p then p, err, code = p:spec(1) end
    t.eq(p, nil, name)
    t.eq(code, want_code, name .. ": " .. tostring(err))
    t.ok(type(err) == "string" and err:find(path, 1, true) == 1, name .. ": starts with the path: " .. tostring(err))
    t.ok(err:find(want, 1, true), name .. ": " .. err)
    if name == "inputs_raise" then -- the problem's own frame, with its line
      t.ok(err:find("\n  line 10, in get_inputs: return [torch.randn(4, 4) @ torch.randn(5, 5)]", 1, true), err)
    end
  end
  local p, err, code = kb.load(DIR .. "/missing.py")
  t.eq(p, nil)
  t.eq(code, "ENOENT")
  t.ok(err:find(DIR .. "/missing.py: cannot read: No such file or directory", 1, true), err)
  -- the interpreter is fine after all that
  t.ok(assert(kb.load(RELU)):spec(1))
end)

-- A GPU worker starts torch's import on a thread of its own (KM_TORCH_AHEAD): meanwhile the
-- version that keys the baselines kept on disk is read before it starts, ready() says
-- whether torch can be had without waiting, and available() waits for the import to end.
t.test("torch imported ahead: the version at once, ready() false until the import ends", function()
  local _, KMRUN = testing.paths()
  local script = DIR .. "/ahead.lua"
  testing.write(script, [[
local kb = require "km.task.kernelbench"
local wall = require("km.timing").wall
local t0 = wall()
print("ahead", kb.import_ahead())
print("ready", kb.ready())
require("km.sys").sleep(0.1) -- the import is loading torch's libraries by now
local t1 = wall()
print("version", kb.version())
print("version_s", string.format("%.3f", wall() - t1))
local ok, info = kb.available()
print("available", ok, info and info.version)
print("ready", kb.ready())
print("ahead again", kb.import_ahead())
]])
  local out, rc = testing.sh(KMRUN .. " " .. script)
  t.eq(rc, 0, out)
  t.ok(out:find("ahead\ttrue\nready\tfalse\n", 1, true), out)
  local v = out:match("version\t(%S+)\n")
  t.ok(v and out:find("available\ttrue\t" .. v:gsub("%p", "%%%0"), 1) ~= nil, "version() is torch.__version__: " .. out)
  -- read before the import began: asked while it loads torch's libraries, it waited 0.2 s
  t.ok(tonumber(out:match("version_s\t(%S+)")) < 0.05, "the version did not wait for the import: " .. out)
  t.ok(out:find("available\ttrue[^\n]*\nready\ttrue\nahead again\ttrue", 1), out)
end)

t.test("without torch: a clear reason, and load says it with the path", function()
  local _, KMRUN = testing.paths()
  local script = DIR .. "/no_torch.lua"
  testing.write(script, [[local kb = require "km.task.kernelbench"
print(kb.available())
print(kb.load("]] .. RELU .. [["))]])
  -- a python whose torch cannot be imported: PYTHONPATH puts a broken torch first
  local fake = DIR .. "/fake_site/torch"
  require("km.sys").mkdir(fake)
  testing.write(fake .. "/__init__.py", "raise ImportError('this torch is broken on purpose')\n")
  local p = io.popen("PYTHONPATH=" .. DIR .. "/fake_site " .. KMRUN .. " " .. script .. " 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  -- the Python tried, what it said, and KM_PYTHON (issue 19, item 6)
  t.ok(out:find("^nil\tPyTorch is not importable by [^\n]*: ImportError: this torch is broken on purpose; [^\n]*KM_PYTHON[^\n]*\tNO_TORCH\n"), out)
  t.ok(out:find("\nnil\t" .. RELU .. ": PyTorch is not importable", 1, true), out)
  t.ok(out:find("rc=0", 1, true), out)
  p = io.popen("KM_PYTHON=/nonexistent/python " .. KMRUN .. " " .. script .. " 2>&1; echo rc=$?")
  out = p:read("a")
  p:close()
  t.ok(out:find("^nil\tno Python: cannot run /nonexistent/python"), out)
  t.ok(out:find("NO_PYTHON", 1, true), out)
end)

os.execute("rm -rf " .. DIR)
t.done()
