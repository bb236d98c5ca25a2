-- kmrun tasks lint and the held-out shape, on the CPU (tests/lua/test_lint.lua is about
-- Lua source lint): degenerate problems written here in KernelBench's format are flagged with
-- their reasons and a sound one is left alone (exit 0); results are kept and read back by the
-- gate that strategies and sweeps use; the held-out shape is derived by the documented rule,
-- verified through the bridge's variant at its own sizes, and never shown in a prompt; tasks
-- list shows progress and builds cold specs in parallel. Skips without torch.
local t = require "km.tap"
local json = require "km.json"
local testing = require "km.testing"
local kb = testing.require_torch(t)

local ROOT, KMRUN = testing.paths()
local DIR = testing.tmpdir()
local SPECS, LINTS = DIR .. "/specs", DIR .. "/lint"

local function run(args, env)
  local o, e = DIR .. "/stdout", DIR .. "/stderr"
  local cmd = string.format("KM_SPEC_DIR=%s KM_LINT_DIR=%s %s %s %s >%s 2>%s", SPECS, LINTS, env or "", KMRUN, args, o, e)
  local ok, _, code = os.execute(cmd)
  return testing.read(o) or "", testing.read(e) or "", ok and 0 or code
end

-- a problem file in DIR/folder: p's fields (testing.problem_text), or a string, the text after
-- the torch imports
local function problem(folder, name, p)
  if type(p) == "string" then p = "import torch\nimport torch.nn as nn\n\n" .. p end
  return testing.problem(DIR .. "/" .. folder, name, p)
end

local RELU = problem("sound", "19_ReLU", { sizes = "batch_size = 16\ndim = 64" })
-- a norm divided down: every output is ~1e-6, far below fp32's atol of 1e-4
local DIVIDED = problem("bad", "98_Divided", { args = "scale", init = "self.scale = scale",
  returns = "x / torch.linalg.vector_norm(x, dim=1, keepdim=True) / self.scale", sizes = "batch_size = 16\ndim = 256",
  init_inputs = "1e4" })
-- softmax over a very wide row: at bf16 every probability is under atol 1e-2
local SOFTMAX = problem("wide", "23_Softmax_wide", { returns = "torch.softmax(x, dim=1)", sizes = "batch_size = 4\ndim = 16384" })
-- the head count divides the width: an odd width cannot be viewed as heads (rule mult8)
local HEADS = problem("rules", "heads", { args = "heads", init = "self.heads = heads",
  returns = "x.view(x.shape[0], self.heads, x.shape[1] // self.heads, 1).sum(-1).sum(-1)",
  sizes = "batch_size = 32\nwidth = 64\nheads = 8", inputs_body = "assert width % heads == 0",
  inputs = "torch.randn(batch_size, width)", init_inputs = "heads" })
local CONV = problem("rules", "conv", { args = "c_in, c_out, k", init = "self.conv = nn.Conv1d(c_in, c_out, k)",
  forward = "x, scale", returns = "self.conv(x) * scale", sizes = "batch_size = 2\nc_in = 4\nc_out = 32\nlength = 40\nkernel_size = 3",
  inputs = "torch.randn(batch_size, c_in, length), 0.5", init_inputs = "c_in, c_out, kernel_size" })
local NOSIZES = problem("rules", "fixed", { init = false, returns = "x * 2", sizes = "", inputs = "torch.randn(8, 12)" })

local kbtask = require "km.task.kbtask"
local task = require "km.task"

t.test("held-out shape: every size of 16 or more scaled by 3/4 and made odd; dims become symbols", function()
  local tk = assert(kbtask.load(RELU))
  t.eq(#tk.shapes, 2, "two shape sets")
  t.eq(tk.shapes[1].batch_size, 16); t.eq(tk.shapes[1].dim, 64)
  t.eq(tk.shapes[2].batch_size, 13, "(3*16)//4 | 1"); t.eq(tk.shapes[2].dim, 49, "(3*64)//4 | 1")
  t.eq(tk.heldout.shape, 2); t.eq(tk.heldout.rule, "odd")
  t.eq(table.concat(tk.inputs[1].shape, ","), "batch_size,dim", "the input's dims are the sizes' names")
  t.eq(table.concat(task.shape_of(tk.outputs[1], tk.shapes[2]), ","), "13,49")
end)

t.test("held-out shape: sizes that must divide fall back to multiples of 8; small integers kept", function()
  local th = assert(kbtask.load(HEADS))
  t.eq(th.heldout and th.heldout.rule, "mult8", "an odd width cannot be split into 8 heads")
  t.eq(th.shapes[2].width, 48); t.eq(th.shapes[2].batch_size, 24)
  t.eq(th.heldout.sizes.heads, nil, "heads = 8 is below 16: the operator, kept")
  local tc = assert(kbtask.load(CONV))
  t.eq(tc.heldout.rule, "odd")
  t.eq(tc.heldout.sizes.kernel_size, nil, "kernel_size 3 kept")
  t.eq(tc.heldout.sizes.c_in, nil, "c_in 4 kept")
  t.eq(tc.shapes[2].c_out, 25); t.eq(tc.shapes[2].length, 31)
  t.eq(tc.shapes[2].scale, 0.5, "number inputs are in every shape set")
  t.eq(tc.shapes[1].batch_size, nil, "batch_size 2 is below 16: no symbol")
  -- the output length is length - kernel_size + 1, not a size itself: a symbol of its own
  local out = tc.outputs[1].shape
  t.eq(type(out[3]), "string", "the output's length is a symbol")
  t.eq(tc.shapes[1][out[3]], 38); t.eq(tc.shapes[2][out[3]], 29)
  local tf = assert(kbtask.load(NOSIZES))
  t.eq(#tf.shapes, 1, "no module-level sizes: one shape set")
  t.ok(tf.heldout == nil and tostring(tf.heldout_why):find("no module-level integer", 1, true), tostring(tf.heldout_why))
end)

t.test("held-out shape: the bridge runs the problem at its held-out sizes for buffers of those shapes", function()
  local tc = assert(kbtask.load(CONV))
  local prob = assert(kb.load(CONV, { device = "cpu" }))
  for si, sym in ipairs(tc.shapes) do
    local io, ins, params = {}, {}, {}
    for _, s in ipairs(tc.inputs) do
      io[s.name] = assert(kb.host_buffer(s.dtype, task.shape_of(s, sym)))
      if s.role == "parameter" then params[s.name] = io[s.name] else ins[s.name] = io[s.name] end
    end
    for _, s in ipairs(tc.outputs) do io[s.name] = assert(kb.host_buffer(s.dtype, task.shape_of(s, sym))) end
    assert(prob:make_inputs(7, ins)); assert(prob:write_params(params)); assert(prob:forward(io))
    -- conv1d by hand from the buffers the bridge wrote
    local x, w, b, y = io.x:to_table(), io.conv_weight:to_table(), io.conv_bias:to_table(), io.out:to_table()
    local C, O, L, K = 4, sym.c_out, sym.length, 3
    local Lo = L - K + 1
    local err = 0
    for n = 0, 1 do for o = 0, O - 1 do for l = 0, Lo - 1 do
      local acc = b[o + 1]
      for c = 0, C - 1 do for k = 0, K - 1 do acc = acc + w[(o * C + c) * K + k + 1] * x[(n * C + c) * L + l + k + 1] end end
      err = math.max(err, math.abs(acc * 0.5 - y[(n * O + o) * Lo + l + 1]))
    end end end
    t.ok(err < 1e-4, string.format("shape %d: forward matches conv1d by hand (max err %g)", si, err))
    t.eq(#y, 2 * O * Lo, "shape " .. si .. ": output size")
    for _, h in pairs(io) do h:free() end
  end
  prob:release()
end)

t.test("held-out shape: prompts list only the timed shape and name the sizes", function()
  local prompt = require "km.run.prompt"
  local tk = assert(kbtask.load(RELU))
  local text = prompt.interface(tk) .. prompt.task_text(tk, { "reference" })
  t.ok(text:find("batch_size=16", 1, true), "the timed shape is shown")
  t.ok(not text:find("=13", 1, true) and not text:find("=49", 1, true), "the held-out sizes never are")
  t.ok(text:find("its sizes are `s.batch_size`, `s.dim`", 1, true), "the sizes are named for launch code")
end)

t.test("lint flags degenerate problems with reasons and exits 1; never a traceback", function()
  local out, err, rc = run("tasks lint " .. DIR .. "/bad --json")
  t.eq(rc, 1, "exit 1: " .. err)
  local r = json.decode(out)
  t.eq(#r.results, 1)
  local res = r.results[1]
  t.eq(res.where, "cpu")
  local reasons = {}
  for _, f in ipairs(res.flags) do reasons[f.reason] = (reasons[f.reason] or 0) + 1 end
  t.ok(reasons.trivial_zeros == 2, "zeros pass at both shapes (the held-out one too)")
  t.ok(reasons.input_independent, "other inputs pass too")
  t.ok(not err:find("traceback", 1, true), err)
  local unchecked = table.concat(res.unchecked, "\n")
  t.ok(unchecked:find("timing", 1, true), "says that timing was not checked: " .. unchecked)
  -- softmax over a wide row: sound at fp32, degenerate at bf16
  out, err, rc = run("tasks lint " .. SOFTMAX .. " --precision fp32,bf16")
  t.eq(rc, 1, "exit 1")
  t.ok(out:find("FLAGGED  23_Softmax_wide@bf16", 1, true), out)
  t.ok(out:find("zeros pass", 1, true), out)
  t.ok(out:find("2 task-precision(s) linted", 1, true), out)
  t.ok(out:find("no GPU here", 1, true), "says where it ran: " .. out)
end)

t.test("lint leaves a sound problem alone: exit 0", function()
  local out, err, rc = run("tasks lint " .. RELU .. " --precision fp32,fp16,bf16")
  t.eq(rc, 0, "exit 0: " .. out .. err)
  t.ok(out:find("0 flagged", 1, true), out)
  t.ok(not out:find("FLAGGED", 1, true), out)
end)

t.test("lint results are kept; the gate warns, and skips flagged tasks unless allowed", function()
  local kept = testing.sh("ls " .. LINTS .. " | wc -l")
  t.ok(tonumber(kept) >= 4, "results kept: " .. kept)
  -- a second run reads them: the same flags, marked as kept, nothing run again
  local out1 = json.decode((run("tasks lint " .. DIVIDED .. " --json"))).results[1]
  local out2 = json.decode((run("tasks lint " .. DIVIDED .. " --json"))).results[1]
  t.eq(out2.cached, true, "read back")
  t.eq(json.encode(out2.flags), json.encode(out1.flags), "the same flags")
  local out3 = json.decode((run("tasks lint " .. DIVIDED .. " --json --no-cache"))).results[1]
  t.eq(out3.cached, nil, "--no-cache runs it again")
  -- kept by content: a copy under another name reads it back under its own name and path
  local twin = DIR .. "/twin/98_Twin.py"
  testing.sh("mkdir -p " .. DIR .. "/twin && cp " .. DIVIDED .. " " .. twin)
  local out4 = json.decode((run("tasks lint " .. twin .. " --json"))).results[1]
  t.eq(out4.cached, true, "the copy's result is the kept one")
  t.eq(out4.task, "98_Twin")
  t.eq(out4.path, twin)
  -- the gate in this process reads the same folder
  local lint = require "km.task.lint"
  local script = DIR .. "/gate.lua"
  testing.write(script, string.format([[
    local lint = require "km.task.lint"
    local kbtask = require "km.task.kbtask"
    local ts = { assert(kbtask.load(%q)), assert(kbtask.load(%q)) }
    local kept, skipped = lint.gate(ts, { skip = true, who = "test" })
    print("kept", #kept, kept[1].name, "skipped", skipped, "flagged", ts[1].lint.flagged)
    local all = lint.gate(ts, { skip = true, allow = true, who = "test" })
    print("allowed", #all)
    local s = {}
    lint.annotate_summary(s, ts[1])
    print("summary", s.lint.flagged, s.lint.reasons[1], s.heldout_shape)
  ]], DIVIDED, RELU))
  local text = testing.sh(string.format("KM_LINT_DIR=%s KM_SPEC_DIR=%s %s %s", LINTS, SPECS, KMRUN, script))
  t.ok(text:find("kept\t1\t19_ReLU\tskipped\t1\tflagged\ttrue", 1, true), text)
  t.ok(text:find("98_Divided (fp32): kmrun tasks lint flagged it (trivial_zeros, input_independent); skipped", 1, true), text)
  t.ok(text:find("allowed\t2", 1, true), text)
  t.ok(text:find("summary\ttrue\ttrivial_zeros\t2", 1, true), text)
  t.ok(lint.REASON.trivial_zeros ~= nil)
end)

t.test("lint of a task folder on the CPU: its reference.py at the shapes that fit, the rest said", function()
  local out, err, rc = run("tasks lint " .. ROOT .. "/tasks/l1_relu --json")
  t.eq(rc, 0, err)
  local res = json.decode(out).results[1]
  t.eq(#res.flags, 0, "l1_relu is sound")
  local u = table.concat(res.unchecked, "\n")
  t.ok(u:find("shape 1: 2048 MiB of buffers, over the CPU's limit", 1, true), u)
end)

-- an RNN-like reference keeping its state as plain tensor attributes (KernelBench level 3's
-- 33_VanillaRNN, 35_LSTM): at fp16/bf16 they take the model's precision with its parameters
local PLAIN = problem("plain", "33_plain_state", { args = "n", init = "self.lin = nn.Linear(n, n)\nself.h0 = torch.randn(n, n)\n" ..
  "self.hs = [torch.randn(n, n)]\nself.pair = (torch.randn(n, n), 3)",
  returns = "torch.mm(torch.mm(torch.mm(self.lin(x), self.h0), self.hs[0]), self.pair[0])", sizes = "n = 64",
  inputs = "torch.randn(8, n)", init_inputs = "n" })

t.test("lint: a reference's plain tensor attributes (an h0, in a list or tuple too) run at fp16 and bf16", function()
  local out, err, rc = run("tasks lint " .. PLAIN .. " --precision fp32,fp16,bf16 --cpu --json")
  t.eq(rc, 0, out .. err)
  local r = json.decode(out)
  t.eq(#r.results, 3, out)
  for _, res in ipairs(r.results) do
    t.eq(#res.flags, 0, res.precision .. ": " .. out)
    for _, u in ipairs(res.unchecked or {}) do t.ok(u:match("^timing:"), res.precision .. ": " .. u) end
  end
end)

-- a forward that makes an fp32 tensor of its own (KernelBench level 3's 35_LSTM draws h0
-- with torch.randn): at fp16 the reference cannot run as written
local OWN_FP32 = problem("own", "35_own_fp32", [[
class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        h = torch.randn(x.shape[1], x.shape[1], device=x.device)
        return torch.mm(x, h)

def get_inputs():
    return [torch.randn(8, 64)]

def get_init_inputs():
    return []
]])

t.test("lint: a reference that cannot run at a precision is flagged 'reference fails', not left unchecked", function()
  local out, err, rc = run("tasks lint " .. OWN_FP32 .. " --precision fp32,fp16 --cpu --json")
  t.eq(rc, 1, out .. err)
  local r = json.decode(out)
  for _, res in ipairs(r.results) do
    local reasons = {}
    for _, f in ipairs(res.flags) do reasons[#reasons + 1] = f.reason end
    if res.precision == "fp16" then
      t.eq(table.concat(reasons, ","), "reference_error", out)
      t.ok(res.flags[1].detail:find("dtype", 1, true), res.flags[1].detail)
    else
      t.eq(#reasons, 0, out)
    end
    for _, u in ipairs(res.unchecked or {}) do t.ok(u:match("^timing:"), res.precision .. ": " .. u) end
  end
end)

-- the device was out of memory: says nothing about the task
local OOM = problem("oom", "oom_inputs", [[
class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2

def get_inputs():
    x = torch.randn(4, 8)
    if x.device.type != "meta":  # the spec (shapes, on torch's meta device) is made; data is not
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB (a test)")
    return [x]

def get_init_inputs():
    return []
]])

t.test("lint: out of GPU memory leaves the task unchecked, not flagged, and the result is not kept", function()
  for round = 1, 2 do
    local out, err, rc = run("tasks lint " .. OOM .. " --cpu --json")
    t.eq(rc, 0, out .. err)
    local res = json.decode(out).results[1]
    t.eq(#res.flags, 0, out)
    t.ok(table.concat(res.unchecked, " "):find("out of memory", 1, true), out)
    t.ok(not res.cached, "round " .. round .. ": linted again, not read from the cache")
  end
  local lint = require "km.task.lint"
  t.ok(lint.transient { unchecked = { "lint failed: judge.lua:87: CUDA_ERROR_OUT_OF_MEMORY: allocating" } })
  t.ok(not lint.transient { unchecked = { "timing: timing needs a GPU" } })
end)

t.test("lint: a path that does not exist is one line, exit 2", function()
  local out, err, rc = run("tasks lint " .. DIR .. "/nope")
  t.eq(rc, 2)
  t.ok(err:find("no such folder", 1, true) and not err:find("traceback", 1, true), err)
end)

t.test("tasks list: cold problem specs built in parallel, progress on stderr; warm loads say nothing", function()
  local folder = DIR .. "/many"
  for i = 1, 4 do
    problem("many", i .. "_Scale", { init = false, returns = "x * " .. i, sizes = "n = " .. 100 + i, inputs = "torch.randn(n)" })
  end
  local out, err, rc = run("tasks list " .. folder, "KM_SPEC_JOBS=2")
  t.eq(rc, 0, err)
  t.ok(err:find("kmrun tasks: 4 problem spec%(s%) built in [%d.]+ s %(2 in parallel%)"), err)
  t.ok(out:find("1_Scale", 1, true) and out:find("4_Scale", 1, true) and out:find("2 shapes", 1, true), out)
  out, err, rc = run("tasks list " .. folder, "KM_SPEC_JOBS=2")
  t.eq(rc, 0)
  t.eq(err, "", "warm: nothing on stderr")
end)

t.test("report: flagged tasks left out of fast_p and correctness by default, said why; the gap per level", function()
  local store = require "km.store"
  local report = require "km.report"
  local F = DIR .. "/report.sqlite"
  local db = assert(store.open(F))
  local rid = db:begin_run { name = "sweep" }
  -- task, level, status, speedup, lint flagged?, failed shape, held-out shape
  local EPS = {
    { "1_ok", 1, "correct", 2.0, false }, { "2_ok", 1, "mismatch", nil, false, 2, 2 },
    { "3_deg", 1, "correct", 3.0, true }, { "4_ok", 2, "correct", 0.5, false },
    { "5_ok", 2, "mismatch", nil, false, 1 }, { "6_own", 2, "mismatch", nil, false, 3 },
  }
  for _, e in ipairs(EPS) do
    local ep = assert(db:begin_episode(rid, { task = e[1], strategy = "repair", model = "m" }))
    local verdict = { status = e[3], speedup = e[4], speedup_over = e[4] and "pytorch_eager" or nil,
      failed_at = e[6] and { shape = e[6], seed = 1 } or nil }
    assert(db:finish_episode(ep, e[3] == "correct" and "correct" or "failed", {
      final = { candidate = { name = e[1], source = "", launch = "" }, verdict = verdict },
      summary = { status = e[3], speedup = e[4], speedup_over = e[4] and "pytorch_eager" or nil, level = e[2],
        category = "kernelbench", lint = e[5] and { flagged = true, reasons = { "trivial_zeros" }, where = "cuda" } or
          { flagged = false, reasons = {}, where = "cuda" }, heldout_shape = e[7] } }))
  end
  db:close()
  local eps, info = assert(report.load(F))
  local r = report.build(eps, info, { by = { "level" } })
  t.eq(r.all.n, 5, "the flagged task's episode is left out")
  t.eq(r.all.correct, 2); t.near(r.all.correctness, 0.4, 1e-9)
  t.eq(r.degenerate.episodes, 1); t.eq(r.degenerate.tasks[1], "3_deg"); t.eq(r.degenerate.reasons.trivial_zeros, 1)
  local text = report.text(r)
  -- prose lines wrap at 120 columns, continued two spaces in: read them joined
  local prose = text:gsub("\n  +", " ")
  t.ok(prose:find("left out: 1 episode(s) of 1 task(s) that kmrun tasks lint flagged (trivial_zeros 1: 3_deg); --include-degenerate counts them", 1, true), text)
  -- level 1: 1_ok correct, 2_ok failed at the held-out shape: 1 of 2 failed a later shape
  t.ok(text:find("level 1       2 passed the timed shape, 1 failed a later one (50.0%), 1 at the held-out shape", 1, true), text)
  -- level 2: 4_ok correct, 6_own failed at shape 3 (5_ok failed the timed shape: not counted)
  t.ok(text:find("level 2       2 passed the timed shape, 1 failed a later one (50.0%)\n", 1, true), text)
  local j = json.decode(report.json(r))
  t.eq(j.left_out.degenerate, 1); t.eq(j.degenerate.tasks[1], "3_deg")
  t.eq(j.generalization_by_level[1].failed_heldout, 1); t.near(j.generalization_by_level[1].gap, 0.5, 1e-9)
  local all = report.build(eps, info, { by = { "level" }, include_degenerate = true })
  t.eq(all.all.n, 6, "--include-degenerate counts them"); t.eq(all.all.correct, 3)
  t.ok(report.text(all):find("included: 1 episode(s) of 1 task(s)", 1, true))
  local out, _, rc = run("report " .. F .. " --include-degenerate --json")
  t.eq(rc, 0); t.eq(json.decode(out).all.n, 6)
end)

os.execute("rm -rf " .. DIR)
t.done()
