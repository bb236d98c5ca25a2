-- km.judge's input plan on the CPU, with stand-ins for the buffers and the problem: how a
-- call's inputs are drawn by the judge's own fill (a task's init rules; a problem file's
-- refresh plan, its laws and parameters), what each fill is asked for, what is kept per
-- shape, and where a problem without a plan goes back to get_inputs(). The GPU side (the
-- fill, random_check, copy_in) is tests/gpu/test_buffer.lua's and test_pytorch_ref.lua's.
local t = require "km.tap"
local testing = require "km.testing"
local task = require "km.task"
local judge_mod = require "km.judge"
local buffer = require "km.buffer"

local ROOT = testing.paths()

-- a buffer that records what it was asked to do
local function recorder()
  return setmetatable({ calls = {} }, { __index = {
    random = function(self, law) self.calls[#self.calls + 1] = law return self end } })
end

local function judge_with(st)
  local j = setmetatable({ tasks = {}, opts = {}, truth_checks = 0 }, judge_mod.Judge)
  function j:truth_check() self.truth_checks = self.truth_checks + 1 end
  if st then j.tasks[st.task.dir] = st end
  return j
end

t.test("a task's init rules are its plan: each input's law, drawn from seed * 7919 + its index", function()
  local tk = assert(task.load(ROOT .. "/tasks/l2_gemm_bias_relu"))
  local sym = tk.shapes[1]
  local J = judge_with(nil)
  local io = {}
  for _, spec in ipairs(tk.inputs) do io[spec.name] = recorder() end
  J:fill_inputs(tk, sym, io, 42)
  for i, spec in ipairs(tk.inputs) do
    local law = io[spec.name].calls[1]
    t.ok(law, spec.name .. " drawn")
    t.eq(law.seed, 42 * 7919 + i, spec.name .. ": its seed")
    t.eq(law.dist, spec.init[1], spec.name .. ": its law")
    if law.dist == "uniform" then
      t.eq(law.lo, task.eval_expr(spec.init[2], sym)); t.eq(law.hi, task.eval_expr(spec.init[3], sym))
    end
  end
  local st = { task = tk }
  local plan = J:input_plan(st, sym, io)
  t.eq(J:input_plan(st, sym, io), plan, "kept per task and shape")
  t.ok(J:input_plan(st, tk.shapes[2], io) ~= plan, "another shape, another plan")
end)

-- a problem file: x drawn (normal), w a parameter copied from the model
local function problem_task()
  return { dir = "/nonexistent/problem", name = "p",
    inputs = { { name = "x", dtype = "f32", shape = { 4 } }, { name = "w", dtype = "f32", shape = { 4 }, role = "parameter" } },
    outputs = { { name = "out", dtype = "f32", shape = { 4 } } }, shapes = { { } } }
end

t.test("a problem file's refresh plan: its laws as fills, its parameters as raw copies, no Python per call", function()
  local tk = problem_task()
  local asked = 0
  local prob = { refresh_plan = function(_, io)
    asked = asked + 1
    t.ok(io.x and io.w, "the plan is asked with the call's buffers")
    return { inputs = { x = { dist = "normal", a = 1.5, b = 2 } }, params = { w = { ptr = 4096, nbytes = 16 } } }
  end, make_inputs = function() error("get_inputs() called although there is a plan") end }
  local st = { task = tk, prob = prob }
  local J = judge_with(st)
  local copies = {}
  local real = buffer.copy_in
  buffer.copy_in = function(b, ptr, n) copies[#copies + 1] = { b, ptr, n } end
  local io = { x = recorder(), w = recorder() }
  local ok, err = pcall(function()
    J:fill_inputs(tk, {}, io, 7)        -- a verified trial's
    J:fill_inputs(tk, {}, io, 8, true)  -- a timed call's
  end)
  buffer.copy_in = real
  t.ok(ok, tostring(err))
  t.eq(asked, 1, "the plan is learned once")
  t.eq(#io.x.calls, 2)
  t.eq(io.x.calls[1].dist, "normal"); t.eq(io.x.calls[1].mean, 1.5); t.eq(io.x.calls[1].std, 2)
  t.eq(io.x.calls[2].seed, 8 * 7919 + 1)
  t.eq(#io.w.calls, 0, "a parameter is not drawn")
  t.eq(#copies, 2); t.eq(copies[1][1], io.w); t.eq(copies[1][2], 4096); t.eq(copies[1][3], 16)
  t.eq(J.truth_checks, 1, "the truth proven before parameters are handed out, except in a timed refresh")
end)

t.test("a problem without a plan (a why, or a draw the plan does not know) fills through get_inputs()", function()
  for _, answer in ipairs { { why = "input x is not a tensor that a torch RNG call made" },
    { inputs = {}, params = { w = { ptr = 1, nbytes = 16 } } } } do
    local tk = problem_task()
    local made = {}
    local prob = { refresh_plan = function() return answer end,
      make_inputs = function(_, seed, ins) made[#made + 1] = { seed, ins } return true end,
      write_params = function() return true end }
    local J = judge_with({ task = tk, prob = prob })
    local io = { x = recorder(), w = recorder() }
    J:fill_inputs(tk, {}, io, 5)
    J:fill_inputs(tk, {}, io, 6, true)
    t.eq(#made, 2, "get_inputs() for each call")
    t.eq(made[1][1], 5); t.eq(made[1][2].x, io.x); t.eq(made[1][2].w, nil, "parameters are not inputs")
    t.eq(#io.x.calls, 0, "no fill of the judge's")
    t.eq(J:input_plan(J.tasks[tk.dir], {}, io), false, "and that is kept")
  end
end)

t.done()
