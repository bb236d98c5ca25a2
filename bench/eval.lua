-- bench/eval.lua — seconds per evaluated candidate and candidates per GPU-hour, with a
-- KernelBench-style evaluation (torch load_inline, 5 checks, 100 timed trials) of the
-- same kernel side by side in the same run.
-- Usage: kmrun bench/eval.lua [OUT.md] [--no-torch]
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local task = require "km.task"
local eval = require "km.serve.pool"
local json = require "km.json"
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT
local B = dofile((arg[0]:match("^(.*/)") or "") .. "lib.lua")

local SPEC = A.spec {
  name = "bench/eval.lua", synopsis = "[OUT.md] [options]",
  about = "Seconds per evaluated candidate and candidates per GPU-hour, beside a KernelBench-style evaluation.",
  positional = { { "out", "OUT.md", "also write the lines to this file" } },
  options = { { "no-torch", nil, "leave out the KernelBench-style (torch load_inline) side" } },
}
local args, code = A.parse(SPEC, arg)
if not args then return code end
local out_path, use_torch = args.out, not args.no_torch
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/eval.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end
local ROOT = arg[0]:match("^(.*)/bench/") or "."
local say, save = B.report(out_path)
local function wall() local p = io.popen("date +%s.%N"); local v = tonumber(p:read("l")); p:close(); return v end

-- a fresh compile cache for the cold pass, shared with the workers through the environment
local cache = os.tmpname(); os.remove(cache)
local pool = assert(eval.pool { gpus = { 0 }, timeout = 120, env = { KM_CACHE_DIR = cache } })
local dev = pool.device
say("# kmrun evaluation benchmark")
say("")
say("GPU: %s (%s), driver %s, NVRTC %s, date %s", dev.name, dev.arch, dev.driver_version, dev.nvrtc, os.date("!%Y-%m-%d %H:%M UTC"))
say("")

local tasks = {}
for _, t in ipairs((task.list(ROOT .. "/tasks"))) do
  if t.level == 1 and t.starter then tasks[#tasks + 1] = t end
end

say("## Level-1 starters: one evaluation = compile + %s + timing (candidate; reference and starter baseline cached per worker)", "every shape x 3 seeds")
say("")
say("| task | status | cold eval (s) | cached eval (s) | speedup vs reference |")
say("| --- | --- | --- | --- | --- |")
local cold_sum, warm_sum, n_ok = 0, 0, 0
for _, t in ipairs(tasks) do
  local cand = task.starter(t)
  local t0 = wall()
  local v1 = pool:eval(t, cand, { seeds = 3 })
  local t1 = wall()
  local v2 = pool:eval(t, cand, { seeds = 3 })
  local t2 = wall()
  cold_sum, warm_sum = cold_sum + (t1 - t0), warm_sum + (t2 - t1)
  if v2.status == "correct" then n_ok = n_ok + 1 end
  say("| %s | %s | %.2f | %.2f | %s |", t.name, v2.status, t1 - t0, t2 - t1, v2.speedup and string.format("%.2fx", v2.speedup) or "-")
end
local per = warm_sum / math.max(#tasks, 1)
say("")
say("%d/%d starters correct. Mean seconds per evaluation: %.2f cold (first compile of candidate, reference and starter), %.2f cached; %.0f evaluations per GPU-hour on one GPU (cached).",
  n_ok, #tasks, cold_sum / math.max(#tasks, 1), per, 3600 / per)
say("")

if use_torch then
  local relu = assert(task.load(ROOT .. "/tasks/l1_relu"))
  local cand = task.starter(relu)
  local src = os.tmpname() .. ".cu"
  local f = assert(io.open(src, "w")); f:write(cand.source); f:close()
  local n = relu.shapes[1].n
  local t0 = wall()
  local p = io.popen("python3 " .. ROOT .. "/bench/kernelbench_style.py " .. src .. " " .. n .. " 2>&1")
  local outp = p:read("a"); p:close()
  local kb_wall = wall() - t0
  local kb = json.decode(outp:match("(%b{})%s*$") or "null")
  -- the same kernel through kmrun, cold cache (a new cache folder) and warm
  local cache2 = os.tmpname(); os.remove(cache2)
  local pool2 = assert(eval.pool { gpus = { 0 }, env = { KM_CACHE_DIR = cache2 } })
  local s0 = wall()
  local v = pool2:eval(relu, cand, { seeds = 3 })
  local s1 = wall()
  local v2 = pool2:eval(relu, cand, { seeds = 3 })
  local s2 = wall()
  pool2:close()
  say("## The same kernel (tasks/l1_relu starter, n = %d), side by side", n)
  say("")
  say("| harness | status | compile (s) | whole evaluation (s) | kernel median (ms) |")
  say("| --- | --- | --- | --- | --- |")
  if kb then
    say("| KernelBench-style (load_inline, 5 checks, 100 timed) | %s | %.1f | %.1f | %.4f |", kb.correct and "correct" or "wrong",
      kb.compile_s, kb_wall, kb.median_ms)
  else
    say("| KernelBench-style | failed: %s | | | |", (outp:gsub("\n", " ")):sub(-300))
  end
  say("| kmrun eval, cold cache (4 shapes x 3 seeds, noise-aware timing) | %s | %.3f | %.2f | %.4f |", v.status, (v.compile_ms or 0) / 1e3, s1 - s0,
    v.timing and v.timing.candidate.median or 0 / 0)
  say("| kmrun eval, cached | %s | %.3f | %.2f | %.4f |", v2.status, (v2.compile_ms or 0) / 1e3, s2 - s1, v2.timing and v2.timing.candidate.median or 0 / 0)
  if kb then say("") say("Ratio of whole-evaluation time, KernelBench-style / kmrun cold: %.0fx; / kmrun cached: %.0fx.", kb_wall / (s1 - s0), kb_wall / (s2 - s1)) end
end
pool:close()
save()
