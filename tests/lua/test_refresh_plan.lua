-- km.task.kernelbench's refresh plan on the CPU: get_inputs()'s laws and the parameters' memory,
-- learned once so the judge can refresh inputs without Python; every get_inputs() that is
-- more than fresh draws says why; the seeding contract is kept. Skips without torch.
local t = require "km.tap"
local testing = require "km.testing"
local kb = testing.require_torch(t)
local compare = require "km.compare"
local python = require "km.python"
local json = require "km.json"

local DIR = testing.tmpdir()
local BRIDGE = "__import__('sys').modules['km_kb_bridge']"

local function problem(name, p) return testing.problem(DIR, name, p) end

-- every form the plan covers, with number inputs among them
local LAWS = problem("laws", { args = "n",
  init = 'self.fc = nn.Linear(n, 4)\nself.register_buffer("shift", torch.full((4,), 0.25))',
  forward = "x, y, c, d, e, u, m, xl, yl, il, g, k, s, flag, nothing",
  returns = "self.fc(x) * k + self.shift", sizes = "batch_size = 8\nwidth = 6",
  inputs_body = "x = torch.rand(batch_size, width)\n" ..
    "assert x.shape[1] == width and len(x) == batch_size and x.size(0) == batch_size  # reads keep x pure\n" ..
    "u = torch.empty(4, 3).uniform_(-2, 3)\nm = torch.zeros(5).normal_(mean=1.5, std=0.5)",
  inputs = "x, torch.randn(5, dtype=torch.float64), torch.randint(0, 7, (10,)), torch.randint(9, (3,)), " ..
    "torch.randint(low=2, high=5, size=(4,)), u, m, torch.rand_like(x), torch.randn_like(x), " ..
    "torch.randint_like(x, 2, 5), torch.normal(2.0, 0.5, size=(3,)), 3, 0.5, True, None",
  init_inputs = "width" })

local WANT = {
  x = { "uniform", 0, 1 }, y = { "normal", 0, 1 }, c = { "int", 0, 6 }, d = { "int", 0, 8 },
  e = { "int", 2, 4 }, u = { "uniform", -2, 3 }, m = { "normal", 1.5, 0.5 }, xl = { "uniform", 0, 1 },
  yl = { "normal", 0, 1 }, il = { "int", 2, 4 }, g = { "normal", 2.0, 0.5 },
}

-- a Python expression's list, through JSON (python.eval gives scalars)
local function py_list(expr)
  return json.decode(assert(python.eval("__import__('json').dumps(" .. expr .. ")")))
end

local function buffers(spec) return kb.buffers_for(spec, kb.host_buffer) end

local function count(tbl)
  local n = 0
  for _ in pairs(tbl) do n = n + 1 end
  return n
end

local function check_laws(plan, what)
  t.eq(plan.why, nil, what .. ": " .. tostring(plan.why))
  t.eq(count(plan.inputs), 11, what .. ": a law for each tensor input, none for the numbers")
  for name, w in pairs(WANT) do
    local law = plan.inputs[name]
    t.ok(law, what .. ": a law for " .. name)
    t.eq(law.dist, w[1], what .. " " .. name)
    t.eq(law.a + 0.0, w[2] + 0.0, what .. " " .. name .. ".a")
    t.eq(law.b + 0.0, w[3] + 0.0, what .. " " .. name .. ".b")
  end
end

-- the state tensor's pointer as the bridge holds it (variant: the held-out one)
local function state_ptr(p, key, variant)
  local prob = ("%s._problems[%d]%s"):format(BRIDGE, p.id, variant and "._heldout[1]" or "")
  return python.eval(("%s._state()[%q].data_ptr()"):format(prob, key))
end

t.test("rand, randn, randint (every form), *_like, uniform_/normal_ of a blank: their laws; params by pointer", function()
  local p = assert(kb.load(LAWS))
  local s = assert(p:spec(1))
  local io = buffers(s)
  local plan = assert(p:refresh_plan(io))
  check_laws(plan, "fp32")
  t.eq(io.y:dtype(), "f32", "a float64 randn is f32 at fp32, still normal")
  t.eq(io.c:dtype(), "i64")
  -- the numbers, as make_inputs reports them
  local made = assert(p:make_inputs(3, io))
  t.eq(plan.scalars.k, 3)
  t.eq(plan.scalars.s, 0.5)
  t.eq(plan.scalars.flag, true)
  t.eq(plan.scalars.nothing, json.null, "None")
  t.eq(count(plan.scalars), count(made.scalars))
  for k, v in pairs(made.scalars) do t.eq(plan.scalars[k], v, k) end
  -- each param: the live state tensor's memory, what write_params copies
  t.eq(count(plan.params), 3)
  for name, key in pairs { fc_weight = "fc.weight", fc_bias = "fc.bias", shift = "shift" } do
    t.eq(plan.params[name].ptr, state_ptr(p, key), name)
    t.eq(plan.params[name].nbytes, io[name]:nbytes(), name)
  end
  t.eq(plan.params.fc_weight.nbytes, 4 * 6 * 4)
  assert(p:write_params(io))
  local at = py_list(("%s.wrap(%d, [24], 'f32', __import__('torch').device('cpu')).tolist()"):format(BRIDGE, plan.params.fc_weight.ptr))
  t.ok(compare.allclose(at, io.fc_weight:to_table(), { atol = 0, rtol = 0 }).ok, "ptr..ptr+nbytes is what write_params writes")
  -- the buffers are checked as make_inputs and write_params check them
  local ok, err, code = p:refresh_plan({ x = io.x })
  t.eq(ok, nil)
  t.eq(code, "MISSING_BUFFER")
  t.ok(err:find("no buffer for input y", 1, true), err)
  local io2 = buffers(s)
  io2.fc_bias = assert(kb.host_buffer("f64", { 4 }))
  ok, err, code = p:refresh_plan(io2)
  t.eq(code, "WRONG_BUFFER")
  t.ok(err:find("parameter fc_bias: the buffer is f64", 1, true), err)
  io2.c = assert(kb.host_buffer("i64", { 11 }))
  ok, err, code = p:refresh_plan(io2)
  t.eq(code, "WRONG_BUFFER")
  t.ok(err:find("input c: the buffer has shape [11]", 1, true), err)
end)

t.test("fp16: a float32 rand is still uniform 0..1, the buffers f16, the params fp16 memory", function()
  local p = assert(kb.load(LAWS, { precision = "fp16" }))
  local s = assert(p:spec(1))
  local io = buffers(s)
  t.eq(io.x:dtype(), "f16")
  t.eq(io.il:dtype(), "f16", "randint_like of a float tensor: floating, cast")
  local plan = assert(p:refresh_plan(io))
  check_laws(plan, "fp16")
  t.eq(plan.params.fc_weight.ptr, state_ptr(p, "fc.weight"))
  t.eq(plan.params.fc_weight.nbytes, 4 * 6 * 2)
end)

-- each get_inputs() the judge cannot replay, and the why it gets. The input is x (and y).
local IMPURE = {
  { "product", { inputs = "torch.rand(4) * torch.rand(4)" }, "input x is not a tensor that a torch RNG call made" },
  { "mapped_and_source", { forward = "x, y", inputs_body = "x = torch.rand(4)", inputs = "x, x * 2" },
    "input x: get_inputs() passes it to Tensor.mul after torch.rand" },
  { "int_scaled", { inputs = "torch.randint(0, 5, (4,)) * 2" }, "input x is not a tensor that a torch RNG call made" },
  { "zero_scale", { inputs = "torch.rand(4) * 0" }, "input x is not a tensor that a torch RNG call made" },
  { "abs", { inputs = "torch.rand(4).abs()" }, "input x is not a tensor that a torch RNG call made" },
  { "ones", { inputs = "torch.ones(4)" }, "input x is not a tensor that a torch RNG call made" },
  { "global", { sizes = "X = torch.rand(4)", inputs = "X" }, "input x is not a tensor that a torch RNG call made" },
  -- the same object back: identity holds, purity does not
  { "setitem", { inputs_body = "x = torch.rand(4)\nx[0] = 1", inputs = "x" }, "passes it to Tensor.__setitem__ after torch.rand" },
  { "contiguous", { inputs = "torch.rand(4).contiguous()" }, "passes it to Tensor.contiguous" },
  { "moved", { inputs = "torch.rand(4).cpu()" }, "passes it to Tensor.cpu" }, -- .cuda() on a GPU
  { "in_place", { inputs_body = "x = torch.randn(4)\nx.add_(torch.ones(4))", inputs = "x" }, "passes it to Tensor.add_ after torch.randn" },
  { "through_view", { inputs_body = "x = torch.rand(4)\nx.view(2, 2).mul_(0)", inputs = "x" }, "passes it to Tensor.view" },
  { "out_arg", { inputs_body = "x = torch.rand(4)\ntorch.add(x, 1, out=x)", inputs = "x" }, "passes it to torch.add" },
  { "data_set", { inputs_body = "x = torch.rand(4)\nx.data = torch.ones(4)", inputs = "x" }, "passes it to Tensor.data (set)" },
  { "refilled", { inputs = "torch.empty(4).uniform_().normal_()" }, "passes it to Tensor.normal_ after Tensor.uniform_" },
  { "twice", { forward = "x, y", inputs_body = "x = torch.rand(4)", inputs = "x, x" }, "input y is input x again" },
  { "generator", { inputs = "torch.rand(4, generator=torch.Generator().manual_seed(1))" }, "get_inputs() passes generator= to torch.rand" },
  { "bool_randint", { inputs = "torch.randint(0, 2, (4,), dtype=torch.bool)" }, "input x (torch.randint): a bool tensor, which an int law does not fill" },
  { "blank", { inputs = "torch.empty(4)" }, "input x (torch.empty): never filled" },
  { "tensor_mean", { inputs = "torch.normal(torch.zeros(4), 1.0)" }, "input x (torch.normal): its normal parameters are not numbers" },
  { "drawn_number", { forward = "x, k", inputs_body = "k = int(torch.randint(1, 5, (1,)).item())", inputs = "torch.rand(4), k" },
    "get_inputs() draws a tensor (torch.randint) it does not return as an input" },
}

-- arithmetic with a number maps a uniform or normal draw to another (our tasks' reference.py
-- draw uniform(-1, 1) as torch.rand(n) * 2 - 1)
local AFFINE = {
  { "torch.rand(4) * 2 - 1", { "uniform", -1, 1 } },
  { "torch.rand(4) * (0.5 - -0.5) + -0.5", { "uniform", -0.5, 0.5 } },
  { "3 - torch.randn(4) * 0.5", { "normal", 3, 0.5 } },
  { "torch.rand(4) * -2", { "uniform", -2, 0 } },
  { "torch.rand(4) / 4 + 1", { "uniform", 1, 1.25 } },
  { "2 * torch.randn(4) + 1", { "normal", 1, 2 } },
  { "torch.randn(4).mul_(2).add_(1)", { "normal", 1, 2 } },
  { "torch.mul(torch.rand(4), 3)", { "uniform", 0, 3 } },
}

t.test("a draw times, over, plus or minus a number: the mapped law", function()
  for i, case in ipairs(AFFINE) do
    local path = problem("affine_" .. i, { inputs = case[1], returns = "x", sizes = "" })
    local prob = assert(kb.load(path))
    local plan = assert(prob:refresh_plan(buffers(assert(prob:spec(1)))))
    t.eq(plan.why, nil, case[1] .. ": " .. tostring(plan.why))
    local law = plan.inputs and plan.inputs.x or {}
    t.eq(law.dist, case[2][1], case[1])
    t.ok(law.a and math.abs(law.a - case[2][2]) < 1e-12 and math.abs(law.b - case[2][3]) < 1e-12,
      ("%s: [%s, %s]"):format(case[1], tostring(law.a), tostring(law.b)))
    prob:release()
  end
end)

t.test("impure get_inputs(): each a why, never a plan", function()
  for _, case in ipairs(IMPURE) do
    local name, p, want = case[1], case[2], case[3]
    p.returns, p.sizes = "x", p.sizes or ""
    local path = problem("impure_" .. name, p)
    local prob = assert(kb.load(path))
    local io = buffers(assert(prob:spec(1)))
    local plan, err = prob:refresh_plan(io)
    t.ok(plan, name .. ": " .. tostring(err))
    t.eq(plan.inputs, nil, name .. ": no plan")
    t.ok(type(plan.why) == "string" and plan.why:find(want, 1, true), name .. ": " .. tostring(plan.why))
    t.ok(not plan.why:find("\n"), name .. ": one line")
    -- make_inputs still serves it, per draw
    t.ok(prob:make_inputs(1, io), name .. ": make_inputs")
    prob:release()
  end
end)

t.test("a parameter that is not contiguous: a why naming it", function()
  local path = problem("strided_param", { init = 'self.register_buffer("w", torch.ones(3, 4).t())',
    returns = "x @ self.w", sizes = "", inputs = "torch.rand(2, 4)" })
  local p = assert(kb.load(path))
  local plan = assert(p:refresh_plan(buffers(assert(p:spec(1)))))
  t.eq(plan.why, "parameter w (w) is not contiguous on cpu")
end)

t.test("held-out buffers get the held-out variant's plan; the problem's its own", function()
  local path = problem("heldout", { args = "dim", init = "self.fc = nn.Linear(dim, dim)",
    forward = "x, n", returns = "self.fc(x) * n", sizes = "batch_size = 16\ndim = 32",
    inputs = "torch.rand(batch_size, dim), batch_size", init_inputs = "dim" })
  local p = assert(kb.load(path))
  local s = assert(p:spec(1))
  t.ok(s.heldout.spec, "a held-out shape: " .. tostring(s.heldout.why))
  local held = buffers(s.heldout.spec)
  local own = buffers(s)
  local plan = assert(p:refresh_plan(held))
  t.eq(plan.inputs.x.dist, "uniform")
  t.eq(plan.scalars.n, 13, "the variant's get_inputs() (batch_size 16 -> 13)")
  t.eq(plan.params.fc_weight.ptr, state_ptr(p, "fc.weight", true))
  t.eq(plan.params.fc_weight.nbytes, 25 * 25 * 4)
  t.eq(assert(p:make_inputs(1, held)).scalars.n, 13, "make_inputs agrees")
  plan = assert(p:refresh_plan(own))
  t.eq(plan.scalars.n, 16)
  t.eq(plan.params.fc_weight.ptr, state_ptr(p, "fc.weight"))
  t.eq(plan.params.fc_weight.nbytes, 32 * 32 * 4)
  t.ok(plan.params.fc_weight.ptr ~= state_ptr(p, "fc.weight", true))
end)

t.test("the seeding contract: make_inputs(seed) as before, torch's generators untouched", function()
  local p = assert(kb.load(LAWS))
  local io = buffers(assert(p:spec(1)))
  assert(p:make_inputs(7, io))
  local x, c = io.x:to_table(), io.c:to_table()
  python.exec("import torch; torch.manual_seed(5)")
  local plan = assert(p:refresh_plan(io))
  t.eq(plan.why, nil)
  local after = py_list("__import__('torch').rand(3).tolist()")
  python.exec("import torch; torch.manual_seed(5)")
  local want = py_list("__import__('torch').rand(3).tolist()")
  t.ok(compare.allclose(after, want, { atol = 0, rtol = 0 }).ok, "the draw after the plan is the seed's own")
  assert(p:make_inputs(7, io))
  t.ok(compare.allclose(io.x:to_table(), x, { atol = 0, rtol = 0 }).ok, "make_inputs(7) twice, a plan between")
  t.ok(compare.allclose(io.c:to_table(), c, { atol = 0, rtol = 0 }).ok)
end)

t.test("the trace composes with the device context: its tensors land on that device", function()
  t.eq(python.exec(([[
import torch
_b = %s
_rec = _b._Recorder()
with torch.device("meta"), _b._tracing(_rec):
    _x = torch.randn(3)
    _i = torch.randint(4, (2,))
_ok = (_x.device.type, _i.device.type, _rec.draw_of(_x).law, _rec.draw_of(_i).law)
del _x, _i, _rec, _b
]]):format(BRIDGE)), true)
  t.eq(python.eval("repr(_ok)"), "('meta', 'meta', ('normal', 0.0, 1.0), ('int', 0, 3))")
  local p = assert(kb.load(LAWS, { device = "meta" }))
  local ok, err = p:refresh_plan(buffers(assert(p:spec(1))))
  t.eq(ok, nil)
  t.ok(err:find("loaded on the meta device", 1, true), err)
end)

os.execute("rm -rf " .. DIR)
t.done()
