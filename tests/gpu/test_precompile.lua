-- GPU: km.task.precompile on CUDA.
-- - Precompiling runs nothing on the GPU: every task's reference.py, and a problem whose
--   misaligned fp16 matmul inductor would benchmark padded and plain, leave no kernel, copy
--   or fill in CUPTI's record (torch.profiler), whatever each compile's outcome.
-- - A pool's precompiler compiles tasks ahead; the judge's torch.compile baseline then comes
--   from inductor's cache (precompiled, cache hits, no miss), and the verdicts are the same.
-- - A candidate timed while the precompiler compiles gets the time it gets when it is done.
local t = require "km.tap"
local testing = require "km.testing"
testing.require_torch(t, { gpu = true, cuda = true })
local task = require "km.task"
local eval = require "km.serve.pool"
local pre = require "km.task.precompile"
local json = require "km.json"
local sys = require "km.sys"
local wall = require("km.timing").wall

local DIR = testing.tmpdir()
local GPU = tonumber(os.getenv("KM_TEST_GPU") or "0")
local ROOT, KMRUN = testing.paths()

local function task_dirs()
  local out = {}
  for _, n in ipairs(assert(sys.readdir(ROOT .. "/tasks"))) do
    if io.open(ROOT .. "/tasks/" .. n .. "/reference.py", "rb") then out[#out + 1] = ROOT .. "/tasks/" .. n end
  end
  return out
end

t.test("precompiling runs nothing on the GPU (CUPTI's record, every task's reference.py and a padded matmul)", function()
  -- bench/precompile_gpu_work.lua: each problem precompiled under torch.profiler (CUDA activity)
  local mm = testing.problem(DIR .. "/p", "1_Misaligned_Matmul", { forward = "a, b", returns = "torch.matmul(a, b)",
    sizes = "M = 4095\nK = 4093\nN = 4091", inputs = "torch.randn(M, K), torch.randn(K, N)" })
  local function probe(paths, precision)
    local out, err, rc = testing.run(("cd %s && %s bench/precompile_gpu_work.lua %s --precision %s --json"):format(
      ROOT, KMRUN, table.concat(paths, " "), precision))
    local rows, warm = {}, nil
    for line in out:gmatch("[^\n]+") do
      local r = line:match("^{") and json.decode(line)
      if type(r) == "table" and r.path then rows[#rows + 1] = r end
      if type(r) == "table" and r.warm_up then warm = r end
    end
    return rows, out, err, rc, warm
  end
  local rows, out, err, rc, warm = probe({ ROOT .. "/tasks" }, "fp32")
  t.eq(rc, 0, out .. err:sub(-1500))
  -- the precompiler's first compile (torch's one-time set-up, as it starts): copies at most
  t.ok(warm and warm.ok, json.encode(warm or {}))
  for _, n in ipairs(warm and warm.names or {}) do t.ok(n:find("^Memcpy"), "the warm-up ran no kernel: " .. n) end
  t.note(("the precompiler's warm-up: %d GPU records (%s)"):format(warm and warm.gpu or -1,
    table.concat(warm and warm.names or {}, "; ")))
  local ok, refused = 0, {}
  for _, r in ipairs(rows) do
    t.eq(r.gpu, 0, r.path .. ": " .. json.encode(r.names or {}))
    if r.ok then ok = ok + 1 elseif r.code == "GPU_WORK" then refused[#refused + 1] = r.path end
  end
  t.ok(#rows >= 40, #rows .. " problems")
  t.ok(ok >= #rows - 5, ("%d of %d compiled ahead"):format(ok, #rows))
  t.note(("tasks: %d of %d compiled ahead; refused as GPU work: %s"):format(ok, #rows, #refused > 0 and table.concat(refused, ", ") or "none"))
  -- inductor would benchmark a padded matmul against the plain one: refused before any of it
  local mrows, mout, merr = probe({ mm }, "fp16")
  t.eq(#mrows, 1, mout .. merr:sub(-1500))
  t.eq(mrows[1] and mrows[1].gpu, 0, json.encode(mrows[1] or {}))
  t.note("a misaligned fp16 matmul: " .. (mrows[1] and (mrows[1].ok and "compiled ahead" or tostring(mrows[1].code)) or "?"))
end)

local function pool(env, entries)
  return assert(eval.pool { gpus = { GPU }, timeout = 120, env = env, precompile = entries, torch_ahead = true })
end

t.test("a pool's precompiler: the judge's torch.compile baseline comes from inductor's cache", function()
  local env = { KM_BASELINE_DIR = DIR .. "/b1", TORCHINDUCTOR_CACHE_DIR = DIR .. "/inductor-pool" }
  local tasks = { assert(task.load(ROOT .. "/tasks/l1_softplus")), assert(task.load(ROOT .. "/tasks/l2_gemm_bias_relu")) }
  local entries = {}
  for i, tk in ipairs(tasks) do entries[i] = assert(pre.entry(tk, "default")) end
  local p = pool(env, entries)
  t.ok(p.precompiler and p.precompiler.pid, "the pool started a precompiler")
  -- the judge reaches a task after the precompiler finished it (a run's judge usually finds
  -- it done or under way: then it waits for it; tests/lua/test_precompile.lua)
  local w0 = wall()
  while pre.status(p.precompiler).compiled + pre.status(p.precompiler).failed < #entries and wall() - w0 < 300 do sys.sleep(0.1) end
  t.eq(pre.status(p.precompiler).compiled, #entries, json.encode(pre.status(p.precompiler)))
  for _, tk in ipairs(tasks) do
    local v = p:eval(tk, assert(task.starter(tk)), { seeds = 1, compile_mode = "default" })
    t.eq(v.status, "correct", v.feedback)
    local c = v.baselines and v.baselines.compile
    t.ok(c, json.encode(v.baselines or {}))
    t.eq(c.precompiled, true, tk.name)
    t.ok((c.compile_cache_hits or 0) >= 1, tk.name .. ": cache hits " .. tostring(c.compile_cache_hits))
    t.eq(c.compile_cache_misses, 0, tk.name)
    t.note(("%s: torch.compile baseline %.4f ms, compiled in %.2f s with inductor's cache warm"):format(
      tk.name, c.median, c.compile_seconds))
  end
  p:close()
  t.eq(p.precompiler, nil)
end)

t.test("a candidate timed while the precompiler compiles gets the time it gets after", function()
  local env = { KM_BASELINE_DIR = DIR .. "/b2", TORCHINDUCTOR_CACHE_DIR = DIR .. "/inductor-busy" }
  local entries = {}
  for _, d in ipairs(task_dirs()) do
    local e = pre.entry(assert(task.load(d)), "default")
    if e then entries[#entries + 1] = e end
  end
  local tk = assert(task.load(ROOT .. "/tasks/l1_softplus"))
  local cand = assert(task.starter(tk))
  local p = pool(env, entries)
  local during, after = {}, {}
  local opts = { seeds = 1, compile_mode = "off", eager = false }
  p:eval(tk, cand, opts) -- set up (torch, the reference)
  while #during < 5 and pre.status(p.precompiler).running do
    local v = p:eval(tk, cand, opts)
    t.eq(v.status, "correct", v.feedback)
    during[#during + 1] = v.timing.candidate.median
  end
  local s = pre.status(p.precompiler)
  local w0 = wall()
  while pre.status(p.precompiler).running and wall() - w0 < 600 do sys.sleep(0.2) end
  for _ = 1, 5 do after[#after + 1] = p:eval(tk, cand, opts).timing.candidate.median end
  local final = pre.status(p.precompiler)
  p:close()
  table.sort(during) table.sort(after)
  t.ok(#during >= 3, ("%d timings while it compiled (it had %d of %d done)"):format(#during, s.compiled, s.entries))
  local md, ma = during[(#during + 1) // 2], after[3]
  t.ok(math.abs(md / ma - 1) < 0.03, ("median of medians %.4f ms while compiling, %.4f ms after"):format(md, ma))
  t.note(("l1_softplus starter: %.4f ms while the precompiler compiled (%d timings), %.4f ms after; it compiled %d of %d tasks"):format(
    md, #during, ma, final.compiled, #entries))
end)

sys.rmtree(DIR)
t.done()
