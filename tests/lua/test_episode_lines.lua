-- What a run prints about its episodes (issue 19): each speedup named with the baseline
-- it was divided by, taken from the verdict; every failed line carries a short reason;
-- the run summary keeps speedups over eager apart from those over the CUDA reference and
-- never calls a speedup over eager one "over the reference".
local t = require "km.tap"
local testing = require "km.testing"
local runner = require "km.run.runner"
local task = require "km.task"

local dir = testing.tmpdir()

-- Tasks named for what the fake judge answers.
local function make_task(name) return assert(task.load(testing.rowsum_task(dir, name))) end

local function judge(tk)
  if tk.name == "eager_task" then -- a problem file's verdict: over eager, its own time in timing.eager
    return { status = "correct", speedup = 1.02 / 0.81, speedup_over = "pytorch_eager", speedup_eager = 1.02 / 0.81,
      timing = { candidate = { median = 0.81 }, reference = { median = 5.0 }, eager = { median = 1.02 } } }
  elseif tk.name == "cuda_task" then
    return { status = "correct", speedup = 2.0, speedup_over = "cuda_reference", speedup_cuda_reference = 2.0,
      timing = { candidate = { median = 0.5 }, reference = { median = 1.0 } } }
  elseif tk.name == "bad_task" then
    return { status = "mismatch", feedback = "'y' differs from the reference in 3 of 64 elements (fake judge).\nAt shape 1:" }
  end
  return { status = "compile_error", feedback = "The kernel does not compile. NVRTC says:\nkernel.cu(3): error: identifier \"x\" is undefined",
    compile_log = "kernel.cu(3): error: identifier \"x\" is undefined\n1 error detected" }
end

local STRATEGIES = {
  { name = "judged", fn = function(ctx)
      if ctx.task.name == "raising_task" then error("judged needs a starter for " .. ctx.task.name) end
      local v = ctx.eval({ source = "extern \"C\" __global__ void k() {}", launch = "return function() end" })
      return nil, v
    end },
}

-- Runs the fake strategy over the tasks; returns what it printed and the result.
local function run(tasks)
  local res, out = testing.sweep { strategies = STRATEGIES, tasks = tasks, store = dir .. "/run" .. math.random(1e9) .. ".sqlite",
    judge = judge, fresh = true, capture = "stdout" }
  return out, res
end

local text, res = run { make_task("eager_task"), make_task("cuda_task"), make_task("bad_task"), make_task("broken_task"),
  make_task("raising_task") }

local function line_of(name) return text:match("\n(" .. name .. " [^\n]*)") or "" end

t.test("a correct episode's line names the baseline its speedup is over", function()
  t.ok(line_of("eager_task"):find("1.26x eager", 1, true), text)
  t.ok(line_of("cuda_task"):find("2.00x CUDA ref", 1, true), text)
  t.ok(text:find("\ntask%s+strategy%s+model%s+rep%s+status%s+speedup"), "the column says speedup: " .. text)
  t.ok(text:find("^sweep: 5 episodes planned"), text)
end)

t.test("every failed episode's line carries a short reason", function()
  t.ok(line_of("bad_task"):find("'y' differs from the reference in 3 of 64 elements", 1, true), text)
  t.ok(line_of("broken_task"):find("identifier \"x\" is undefined", 1, true), text)
  local l = line_of("raising_task")
  t.ok(l:find("judged needs a starter for raising_task", 1, true), text)
  t.ok(not l:find("test_episode_lines.lua:", 1, true), "no chunk prefix: " .. l)
  for _, name in ipairs { "bad_task", "broken_task", "raising_task" } do
    t.ok(#line_of(name) < 200, "short: " .. line_of(name))
  end
end)

t.test("the summary: a geomean per baseline, never 'over the reference' for eager", function()
  t.eq(#res.speedups_by.pytorch_eager, 1)
  t.eq(#res.speedups_by.cuda_reference, 1)
  local s = runner.speedup_summary(res.speedups_by)
  t.eq(s, ", geomean speedup 2.00x over the CUDA reference (1 correct), 1.26x over eager (1 correct)")
  t.eq(runner.speedup_summary {}, "")
  t.eq(runner.speedup_summary { pytorch_eager = { 2, 0.5 } }, ", geomean speedup 1.00x over eager (2 correct)")
end)

t.test("the reason is kept in the store's episode summary", function()
  local r = testing.sweep { strategies = STRATEGIES, tasks = { make_task("bad_task") }, store = dir .. "/r.sqlite",
    args = { quiet = true }, judge = judge, fresh = true }
  t.eq(r.ran, 1)
  local eps = testing.episodes(dir .. "/r.sqlite")
  t.ok(eps[1].summary.reason:find("differs from the reference", 1, true), tostring(eps[1].summary.reason))
end)

os.execute("rm -rf " .. dir)
t.done()
