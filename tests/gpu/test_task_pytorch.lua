-- GPU: every task's PyTorch reference (tasks/*/reference.py) against its CUDA reference, at
-- every shape set and two seeds, on the same kmrun device buffers. The inputs are drawn by
-- the task's own init rules (km.buffer random, as the judge draws them for a task with a
-- CUDA reference; the problem's get_inputs() is not used here); the CUDA reference runs as
-- the judge runs it (Judge:run_reference); then the problem's forward runs on those same
-- input buffers (in place, no copies) into its own output buffers, which are compared with
-- the reference's under the task's tolerance; the inputs must come out unchanged. The
-- bridge checks every buffer against the problem's own tensors, so a shape set other than
-- the first is its own problem: reference.py with the shape symbols set after it. fp32,
-- TF32 off (km.task.kernelbench's default). One line per task. Skips without a GPU or torch.
local t = require "km.tap"
local testing = require "km.testing"
local kb, _, cuda = testing.require_torch(t, { gpu = true, cuda = true })
local task = require "km.task"
local judge = require "km.judge"
local buffer = require "km.buffer"
local compare = require "km.compare"
local wall = require("km.timing").wall

local fmt = string.format

local ROOT = testing.paths()
local ONLY = os.getenv("KM_TEST_TASK") -- one task's name: check only that one
local SEEDS = { 1, 2 }
local DIR = testing.tmpdir()

local tasks, errors = task.list(ROOT .. "/tasks")
local J = assert(judge.new())

-- The problem at shape set si (km.testing): reference.py, or a copy with that set's symbols.
local function problem_file(tk, si) return testing.problem_at_shape(tk, si, DIR) end

-- The problem's name for the task's i-th output (docs/tasks.md: `out`, or `out0, out1, ...`).
local function torch_name(tk, i) return #tk.outputs == 1 and "out" or "out" .. (i - 1) end

t.test("every task has a PyTorch reference", function()
  for _, e in ipairs(errors) do t.note(e) end
  t.eq(#errors, 0)
  t.ok(#tasks >= 40, #tasks .. " tasks")
  for _, tk in ipairs(tasks) do t.ok(tk.reference.pytorch_file, tk.name) end
end)

local t_all = wall()
for _, tk in ipairs(tasks) do
  if ONLY and tk.name ~= ONLY then goto next_task end
  t.test(tk.name .. ": reference.py agrees with reference.cu at every shape set and seed", function()
    local t0 = wall()
    local st = assert(J:task_state(tk))
    local worst, fails = {}, {}
    for si, sym in ipairs(tk.shapes) do
      local prob, lerr = kb.load(problem_file(tk, si), { device = "cuda" })
      t.ok(prob, fmt("shape set %d: %s", si, tostring(lerr)))
      for _, seed in ipairs(SEEDS) do
        local where = fmt("shape set %d %s seed %d", si, task.fmt_shape(sym), seed)
        local ins, dims, sums = {}, {}, {}
        for _, d in ipairs(tk.inputs) do
          dims[d.name] = task.shape_of(d, sym)
          ins[d.name] = buffer.new(d.dtype, dims[d.name])
        end
        for _, d in ipairs(tk.outputs) do dims[d.name] = task.shape_of(d, sym) end
        J:fill_inputs(tk, sym, ins, seed)
        for name, b in pairs(ins) do sums[name] = b:checksum() end
        local ref_io, rs, rmsg = J:run_reference(st, ins, dims, sym)
        t.ok(ref_io, fmt("%s: the CUDA reference failed (%s): %s", where, tostring(rs), tostring(rmsg)))
        -- the problem's forward on the same input buffers, into its own outputs
        local pio = {}
        for name, b in pairs(ins) do pio[name] = b end
        for i, d in ipairs(tk.outputs) do pio[torch_name(tk, i)] = buffer.new(d.dtype, dims[d.name]):poison() end
        local okf, ferr = prob:forward(pio, { empty_cache = true })
        t.ok(okf, fmt("%s: forward: %s", where, tostring(ferr)))
        assert(cuda.synchronize())
        for name, b in pairs(ins) do t.eq(b:checksum(), sums[name], where .. ": input " .. name .. " changed") end
        for i, d in ipairs(tk.outputs) do
          local tol = tk.tolerance[d.dtype]
          local r = compare.allclose(pio[torch_name(tk, i)], ref_io[d.name], { atol = tol.atol, rtol = tol.rtol, poison = true })
          local w = worst[d.name] or { abs = 0, rel = 0 }
          worst[d.name] = w
          if r.max_abs and r.max_abs > w.abs then w.abs = r.max_abs end
          if r.max_rel and r.max_rel > w.rel and r.max_rel < math.huge then w.rel = r.max_rel end
          if not r.ok then
            fails[#fails + 1] = fmt("%s: %s: %d of %d elements outside atol %g rtol %g (max abs %g, max rel %g; first at %s: torch %s, CUDA %s; nan %d, unwritten %d)",
              where, d.name, r.mismatches or -1, r.n or -1, tol.atol, tol.rtol, r.max_abs or 0, r.max_rel or 0,
              tostring(r.first and r.first.index), tostring(r.first and r.first.got), tostring(r.first and r.first.want),
              r.nan or 0, r.unwritten or 0)
          end
          ref_io[d.name]:free()
          pio[torch_name(tk, i)]:free()
        end
        for _, b in pairs(ins) do b:free() end
      end
      prob:release { empty_cache = true }
    end
    local parts = {}
    for i, d in ipairs(tk.outputs) do
      local w, tol = worst[d.name], tk.tolerance[d.dtype]
      parts[i] = fmt("%s max abs %.2g rel %.2g (atol %g rtol %g)", d.name, w.abs, w.rel, tol.atol, tol.rtol)
    end
    t.note(fmt("%-28s %-4s %d shape sets x %d seeds  %s  %.1f s", tk.name, #fails == 0 and "ok" or "FAIL",
      #tk.shapes, #SEEDS, table.concat(parts, "; "), wall() - t0))
    for _, f in ipairs(fails) do t.note("  " .. f) end
    t.eq(#fails, 0, "comparisons outside the tolerance")
  end)
  ::next_task::
end
t.note(fmt("all tasks: %.1f s", wall() - t_all))

os.execute("rm -rf " .. DIR)
t.done()
