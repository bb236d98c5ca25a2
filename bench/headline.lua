-- bench/headline.lua — `make demo`'s command (repair_then_tune over tasks/, torch.compile
-- baselines in default mode) on one GPU, twice in one run: with empty caches (compile,
-- baselines, timings, task specs: a fresh XDG_CACHE_HOME) and again with them warm. For
-- each pass: evaluations, wall seconds, evaluations per GPU-hour, the stages' seconds summed
-- over the verdicts (stage_seconds), the candidates' own timed kernel seconds
-- (kernel_seconds) and the measure stage over them (harness overhead). Then, on the warm
-- caches, the first evaluation of new candidates on set-up tasks (bench/cold_eval.lua: wall
-- and worker seconds per new candidate, compile included; --cold N a task, 0: none).
-- --ab VAR=A,B: after those two passes, more warm passes on the same warm caches with the
-- environment variable VAR set to A, then B, --ab-rounds times (default 2): a lever read
-- by the driver or its workers (KM_QUEUE_AHEAD=0,1) measured side by side in one run.
-- Usage: kmrun bench/headline.lua [OUT.md] [--tasks DIR] [--compile-mode M] [--cold N] [--ab VAR=A,B [--ab-rounds N]]
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT
local B = dofile((arg[0]:match("^(.*/)") or "") .. "lib.lua")

local SPEC = A.spec {
  name = "bench/headline.lua", synopsis = "[OUT.md] [options]",
  about = "make demo's command with empty and with warm caches: evaluations per GPU-hour and where the time goes.",
  positional = { { "out", "OUT.md", "also write the lines to this file" } },
  options = { { "tasks", "DIR", "the task folder (default tasks/)" },
    { "compile-mode", "MODE", "torch.compile's mode for baselines (default: default, as make demo)" },
    { "cold", "N", "new candidates a task judged on the warm caches (bench/cold_eval.lua; default 2, 0: none)", type = "int" },
    { "ab", "VAR=A,B", "more warm passes with the environment variable VAR set to A, then B (e.g. KM_QUEUE_AHEAD=0,1)" },
    { "ab-rounds", "N", "how many A, B pairs --ab runs (default 2)", type = "int" } },
}
local args, code = A.parse(SPEC, arg)
if not args then return code end
local AB
if args.ab then
  local var, a, b = args.ab:match("^([%a_][%w_]*)=([^,]*),([^,]*)$")
  if not var then io.stderr:write("bench/headline.lua: --ab wants VAR=A,B (e.g. KM_QUEUE_AHEAD=0,1), not ", args.ab, "\n") return EXIT.USAGE end
  AB = { var = var, a, b }
  for _, x in ipairs(AB) do
    if not x:match("^[%w._/:-]*$") then io.stderr:write("bench/headline.lua: --ab: ", x, ": letters, digits and ._/:- only\n") return EXIT.USAGE end
  end
end
if args.ab_rounds and not AB then io.stderr:write("bench/headline.lua: --ab-rounds needs --ab\n") return EXIT.USAGE end
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/headline.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end
local report = require "km.report"

local ROOT = arg[0]:match("^(.*)/bench/") or "."
local KMRUN = arg[-1]
local TASKS = args.tasks or (ROOT .. "/tasks")
local MODE = args.compile_mode or "default"
local say, save = B.report(args.out)
local function wall() local p = io.popen("date +%s.%N"); local v = tonumber(p:read("l")); p:close(); return v end
local dev = require("km.cuda").device()

-- A pass's numbers from its store, as kmrun report sums them (km.report: the verdict steps'
-- stage_seconds and kernel_seconds, report.gpu_time): episodes and how many are correct, the
-- judged evaluations that recorded their stages, stage seconds, kernel seconds and samples.
local function summarize(path)
  local eps = assert(report.load(path))
  local sum = { episodes = #eps, correct = 0 }
  for _, e in ipairs(eps) do if e.status == "correct" then sum.correct = sum.correct + 1 end end
  local g = report.gpu_time(eps)
  sum.evals, sum.stages = g.recorded, g.stages or {}
  sum.kernel, sum.timed, sum.samples = g.kernel or 0, g.timed, g.samples
  return sum
end

-- The timings a pass measured and kept in its baselines folder (km.task.baseline records made
-- since `since`, UTC text): the PyTorch baselines (eager, torch.compile: their compile_seconds)
-- and the cached timings (CUDA reference, starter), with their samples and why each stopped.
local function kept_timings(dir, since)
  local json = require "km.json"
  local k = { records = 0, compiled = 0, compile_seconds = 0, samples = 0, stops = {}, ungated = 0,
    precompiled = 0, cache_hits = 0, cache_misses = 0, waited = 0 }
  local p = io.popen("ls " .. dir .. "/*.json 2>/dev/null")
  for f in p:lines() do
    local h = io.open(f)
    local rec = h and json.decode(h:read("a"))
    if h then h:close() end
    if type(rec) == "table" and type(rec.median) == "number" and tostring(rec.measured_at) >= since then
      k.records, k.samples = k.records + 1, k.samples + (tonumber(rec.n) or 0)
      local why = tostring(rec.stop)
      k.stops[why] = (k.stops[why] or 0) + 1
      if (tonumber(rec.gate_timeouts) or 0) > 0 then k.ungated = k.ungated + 1 end
      if type(rec.compile_seconds) == "number" then k.compiled, k.compile_seconds = k.compiled + 1, k.compile_seconds + rec.compile_seconds end
      -- km.task.precompile: compiled ahead by the pool's precompiler; inductor's FX graph cache
      if rec.precompiled == true then k.precompiled = k.precompiled + 1 end
      k.cache_hits = k.cache_hits + (tonumber(rec.compile_cache_hits) or 0)
      k.cache_misses = k.cache_misses + (tonumber(rec.compile_cache_misses) or 0)
      k.waited = k.waited + (tonumber(rec.precompile_wait_seconds) or 0)
    end
  end
  p:close()
  return k
end

-- From a pass's store: candidates the worker compiled itself (not an NVRTC cache hit: the
-- driver compiles waiting jobs ahead) and their compile seconds, and the tasks whose timings
-- took the most samples (samples, evaluations, measure seconds).
local function verdict_facts(path)
  local db = assert(require("km.store").open(path))
  local f = { misses = 0, miss_ms = 0, by_task = {}, ungated = 0, eval_seconds = 0, worker_seconds = 0, medians = {} }
  for _, e in ipairs(assert(db:episodes {})) do
    local ep = db:episode(e.id)
    for _, stp in ipairs(ep and ep.steps or {}) do
      local v = stp.kind == "verdict" and stp.payload
      if type(v) == "table" then
        if v.cached_compile == false then f.misses, f.miss_ms = f.misses + 1, f.miss_ms + (tonumber(v.compile_ms) or 0) end
        local c = v.timing and v.timing.candidate
        if c and (tonumber(c.gate_timeouts) or 0) > 0 then f.ungated = f.ungated + 1 end
        f.eval_seconds = f.eval_seconds + (tonumber(v.eval_seconds) or 0)
        f.worker_seconds = f.worker_seconds + (tonumber(v.worker_seconds) or tonumber(v.eval_seconds) or 0)
        local at = tonumber(stp.started_at) -- when the driver logged it
        if at then f.first_at, f.last_at = math.min(f.first_at or at, at), math.max(f.last_at or at, at) end
        -- the first verdict: its worker's start (km.serve.pool) and its own seconds
        if at and at == f.first_at then f.first_eval, f.first_start = tonumber(v.eval_seconds), tonumber(v.worker_start_seconds) end
        -- each candidate's timed medians, by task, name and parameters (passes compared below)
        if c and tonumber(c.median) and v.status == "correct" then
          local ps = {}
          for pk, pv in pairs(type(v.params) == "table" and v.params or {}) do ps[#ps + 1] = tostring(pk) .. "=" .. tostring(pv) end
          table.sort(ps)
          local key = tostring(e.task) .. " " .. tostring(v.candidate) .. " " .. table.concat(ps, ",")
          f.medians[key] = f.medians[key] or {}
          table.insert(f.medians[key], c.median)
        end
        local b = f.by_task[e.task] or { task = e.task, n = 0, evals = 0, measure = 0, verify = 0, set_up = 0, eval = 0, noise = 0, timed = 0 }
        f.by_task[e.task] = b
        b.evals = b.evals + 1
        b.n = b.n + (c and tonumber(c.n) or 0)
        local ss = v.stage_seconds or {}
        b.measure = b.measure + (tonumber(ss.measure) or 0)
        b.verify, b.set_up = b.verify + (tonumber(ss.verify) or 0), b.set_up + (tonumber(ss.task) or 0)
        b.eval = b.eval + (tonumber(v.eval_seconds) or 0)
        if c and tonumber(c.rel_noise) then b.noise, b.timed = b.noise + c.rel_noise, b.timed + 1 end
      end
    end
  end
  db:close()
  local list = {}
  for _, b in pairs(f.by_task) do list[#list + 1] = b end
  table.sort(list, function(x, y) return x.measure > y.measure end)
  f.top = list
  return f
end

local tmp = B.scratch()
say("# make demo's command, empty then warm caches")
say("")
say("GPU: %s (%s), driver %s, NVRTC %s, date %s", dev.name, dev.arch, dev.driver_version, require("km.nvrtc").version(),
  os.date("!%Y-%m-%d %H:%M UTC"))
say("")
say("| pass | episodes correct | evaluations | wall s | evaluations per GPU-hour | task | prepare | baselines | verify | measure | energy | kernel s (timed) | samples per timed eval | measure / kernel |")
say("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
-- One pass of make demo's command on the scratch caches (env: "VAR=value " or ""), its row
-- said -> its store's path, wall seconds, since (UTC text)
local ends = {} -- a pass's file name -> { its command's start, its end } (wall clock)
local function run_pass(label, file, env)
  local st = tmp .. "/" .. file .. ".sqlite"
  -- TMPDIR: torch's caches too (inductor's, and Triton's inside it) start empty
  local cmd = ("%sXDG_CACHE_HOME=%s/cache TMPDIR=%s/tmp KM_CACHE_DIR= KM_BASELINE_DIR= KM_SETUP_DIR= %s %s/strategies/repair_then_tune.lua %s --compile-mode %s --store %s > %s/%s.log 2>&1")
    :format(env, tmp, tmp, KMRUN, ROOT, TASKS, MODE, st, tmp, file)
  local t0, since = wall(), os.date("!%Y-%m-%dT%H:%M:%SZ")
  os.execute(cmd)
  local t1 = wall()
  local secs = t1 - t0
  ends[file] = { t0, t1 }
  local s = summarize(st)
  local g = s.stages
  local function f(x) return x and ("%.1f"):format(x) or "-" end
  say("| %s | %d/%d | %d | %.1f | %.0f | %s | %s | %s | %s | %s | %s | %.2f (%d) | %.1f | %s |", label, s.correct, s.episodes, s.evals,
    secs, s.evals / secs * 3600, f(g.task), f(g.prepare), f(g.baselines), f(g.verify), f(g.measure), f(g.energy),
    s.kernel, s.timed, s.timed > 0 and s.samples / s.timed or 0, s.kernel > 0 and ("%.2fx"):format((g.measure or 0) / s.kernel) or "-")
  return st, secs, since
end
local kept = {}
for _, pass in ipairs { "empty", "warm" } do
  local st, secs, since = run_pass(pass, pass, "")
  kept[pass] = kept_timings(tmp .. "/cache/kmrun/baselines", since)
  kept[pass].facts = verdict_facts(st)
  kept[pass].wall = secs
  kept[pass].ends = ends[pass]
end
-- --ab: warm passes alternating the variable's two values, each row named by its value
if AB then
  local sums = { {}, {} }
  for r = 1, args.ab_rounds or 2 do
    for side = 1, 2 do
      local st, secs = run_pass(("warm, %s=%s (%d)"):format(AB.var, AB[side], r), ("ab%d-%d"):format(side, r),
        ("%s=%s "):format(AB.var, AB[side]))
      local s = summarize(st)
      sums[side][#sums[side] + 1] = s.evals / secs * 3600
    end
  end
  local function mean(xs) local a = 0 for _, x in ipairs(xs) do a = a + x end return a / #xs end
  say("")
  local ma, mb = mean(sums[1]), mean(sums[2])
  say("--ab %s: warm evaluations per GPU-hour %s=%s %.0f, %s=%s %.0f (mean of %d passes each): %s", AB.var, AB.var, AB[1],
    ma, AB.var, AB[2], mb, #sums[1], ma > 0 and ("%.3fx"):format(mb / ma) or "-")
end
-- the first evaluation of new candidates on warm tasks, on the warm pass's caches
if (args.cold or 2) > 0 then
  local row = tmp .. "/cold.md"
  os.execute(("XDG_CACHE_HOME=%s/cache TMPDIR=%s/tmp KM_CACHE_DIR= KM_BASELINE_DIR= KM_SETUP_DIR= %s %s/bench/cold_eval.lua %s --tasks %s --new %d --compile-mode %s > %s/cold.log 2>&1")
    :format(tmp, tmp, KMRUN, ROOT, row, TASKS, args.cold or 2, MODE, tmp))
  local h = io.open(row)
  say("%s", h and h:read("l") or ("| cold: a new candidate on a warm task | failed: see " .. tmp .. "/cold.log |"))
  if h then h:close() end
end
say("")
for _, pass in ipairs { "empty", "warm" } do
  local k = kept[pass]
  local stops = {}
  for why, n in pairs(k.stops) do stops[#stops + 1] = ("%s %d"):format(why, n) end
  table.sort(stops)
  say("%s pass: %d timing(s) measured and kept (baselines, reference, starter), %d samples, stopped by: %s; torch.compile compiled %d task(s) in %.1f s",
    pass, k.records, k.samples, #stops > 0 and table.concat(stops, ", ") or "-", k.compiled, k.compile_seconds)
  say("%s pass: %d of them compiled ahead by the precompiler (the judge waited %.1f s for it); inductor's graph cache %d hit(s), %d miss(es); the judges were busy %.1f s of %.1f s",
    pass, k.precompiled, k.waited, k.cache_hits, k.cache_misses, k.facts.eval_seconds, k.wall)
  -- where the rest went: the workers outside evaluations (worker_seconds), the verdicts'
  -- spread in the store, and the process's start and end around them
  local span = (k.facts.last_at or 0) - (k.facts.first_at or 0)
  say("%s pass: the workers' own seconds %.1f (%.2f outside evaluations); first to last verdict %.1f s; before and after them %.1f s",
    pass, k.facts.worker_seconds, k.facts.worker_seconds - k.facts.eval_seconds, span, k.wall - span)
  -- before the first verdict: the driver's set-up, the worker's start, the first evaluation
  if k.facts.first_at and k.ends then
    local before = k.facts.first_at - k.ends[1]
    local fs, fe = k.facts.first_start, k.facts.first_eval
    say("%s pass: %.2f s to the first verdict (the worker's start %s s, which the driver's set-up overlaps; the first evaluation %s s; the rest %s s: the driver's set-up beyond the worker's start, and the dispatch); %.2f s after the last (the run's end, the worker's exit)",
      pass, before, fs and ("%.2f"):format(fs) or "-", fe and ("%.2f"):format(fe) or "-",
      (fs and fe) and ("%.2f"):format(before - fs - fe) or "-", k.ends[2] - k.facts.last_at)
  end
  local f, top = k.facts, {}
  for i = 1, math.min(6, #f.top) do
    local b = f.top[i]
    top[#top + 1] = ("%s %d samples / %d evals, %.2f s"):format(b.task, b.n, b.evals, b.measure)
  end
  say("%s pass: %d candidate(s) compiled by the worker (%.1f s of NVRTC); most measure seconds: %s", pass, f.misses,
    f.miss_ms / 1000, table.concat(top, "; "))
  -- the tasks that took the judges longest: their stages and their timings' calls and noise
  if pass == "warm" then
    say("")
    say("| warm pass: task (the 8 longest) | evaluations | judge s | task s | verify s | measure s | samples per timed eval | mean rel. noise |")
    say("| --- | --- | --- | --- | --- | --- | --- | --- |")
    local byeval = {}
    for _, b in ipairs(f.top) do byeval[#byeval + 1] = b end
    table.sort(byeval, function(x, y) return x.eval > y.eval end)
    for i = 1, math.min(8, #byeval) do
      local b = byeval[i]
      say("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.1f | %s |", b.task, b.evals, b.eval, b.set_up, b.verify, b.measure,
        b.timed > 0 and b.n / b.timed or 0, b.timed > 0 and ("%.2f%%"):format(100 * b.noise / b.timed) or "-")
    end
    say("")
  end
  -- km.timing's gate: timings where one opened by its timeout went on ungated (docs/timing.md)
  say("%s pass: gates opened by their timeout in %d kept timing(s) and %d candidate timing(s)", pass, k.ungated, f.ungated)
end
-- The same candidates timed in both passes: the empty pass's timings ran beside its
-- precompiler (and the compiling of everything), the warm pass's beside nothing of the kind
do
  local ratios, worst, wkey = {}, 0, nil
  local function med(xs) table.sort(xs) return xs[(#xs + 1) // 2] end
  for key, xs in pairs(kept.empty.facts.medians) do
    local ys = kept.warm.facts.medians[key]
    if ys then
      local r = med(xs) / med(ys)
      ratios[#ratios + 1] = r
      if math.abs(r - 1) > worst then worst, wkey = math.abs(r - 1), key end
    end
  end
  local lsum = 0
  for _, r in ipairs(ratios) do lsum = lsum + math.log(r) end
  table.sort(ratios)
  local within = 0
  for _, r in ipairs(ratios) do if math.abs(r - 1) <= 0.02 then within = within + 1 end end
  say("")
  say("The same candidates in both passes: %d; their timed medians empty / warm: geomean %.4f, %d within 2%%, farthest %.1f%% (%s)",
    #ratios, #ratios > 0 and math.exp(lsum / #ratios) or 0, within, worst * 100, tostring(wkey))
end
say("")
say("Stage columns are seconds summed over the verdicts; kernel s is the candidates' own timed GPU time (n x mean per")
say("timed evaluation); measure / kernel is the harness overhead of the measure stage. Logs: %s", tmp)
save()
return EXIT.OK
