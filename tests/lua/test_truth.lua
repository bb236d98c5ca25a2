-- The reference's own state (issue 16): what a PyTorch reference keeps between calls is
-- listed (parameters, buffers, plain tensor attributes, module-level tensors), copied to
-- the host before any candidate code runs, and written back after a candidate altered it.
-- On the CPU with PyTorch (KM_PYTHON); the GPU side (digests, the judge) is
-- tests/gpu/test_trust.lua.
local t = require "km.tap"
local testing = require "km.testing"
local kb = testing.require_torch(t)
local python = require "km.python"

local DIR = testing.tmpdir()
local PROB = testing.problem(DIR, "state", { before = "SCALE = torch.full((3,), 2.0)", args = "n",
  init = "self.fc = nn.Linear(n, n)\nself.bn = nn.BatchNorm1d(n)\nself.h0 = torch.randn(2, n)\nself.extra = [torch.zeros(4)]",
  returns = "self.bn(self.fc(x)) + self.h0.sum()", sizes = "", inputs = "torch.randn(8, 16)", init_inputs = "16" })

local p = assert(kb.load(PROB, { device = "cpu" }))
local P = ("km_kb_bridge._problems[%d]"):format(p.id)
python.exec("import km_kb_bridge")

t.test("the truth lists parameters, buffers, tensor attributes and module-level tensors", function()
  local names = python.eval("','.join(sorted(" .. P .. "._truth().keys()))")
  for _, want in ipairs { "state:fc.weight", "state:fc.bias", "state:bn.running_mean", "state:bn.running_var",
    "state:bn.num_batches_tracked", "attr:h0", "attr:extra[0]", "global:SCALE" } do
    t.ok(names:find(want, 1, true), want .. " in " .. names)
  end
  t.eq(#assert(p:truth()), 0, "truth() lists GPU storages only")
end)

t.test("snapshot, alter, restore: the model is as it was loaded", function()
  local snap = assert(p:snapshot())
  t.eq(snap.storages, 10)
  local w0 = python.eval(P .. ".model.fc.weight.sum().item()")
  local h0 = python.eval(P .. ".model.h0.sum().item()")
  python.exec("with __import__('torch').no_grad():\n  " .. P .. ".model.fc.weight.zero_()\n  " .. P .. ".model.h0.fill_(7)\n  "
    .. P .. ".module.SCALE.zero_()")
  t.eq(python.eval(P .. ".model.fc.weight.abs().sum().item()"), 0.0)
  t.eq(assert(p:restore()), 10)
  t.eq(python.eval(P .. ".model.fc.weight.sum().item()"), w0)
  t.eq(python.eval(P .. ".model.h0.sum().item()"), h0)
  t.eq(python.eval(P .. ".module.SCALE.sum().item()"), 6.0)
end)

t.test("restore before snapshot is an error, not a crash", function()
  local q = assert(kb.load(PROB, { device = "cpu" }))
  local ok, err = q:restore()
  t.eq(ok, nil)
  t.ok(tostring(err):find("before snapshot", 1, true), err)
  q:release()
end)

p:release()
os.execute("rm -rf " .. DIR)
t.done()
