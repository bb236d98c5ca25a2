-- bench/kb_level1.lua — KernelBench level 1 as a whole: every problem file of KB/level1
-- judged at fp32 by one GPU worker (km.serve.pool), twice over: with empty caches (NVRTC,
-- specs, baselines: a fresh XDG_CACHE_HOME) and again with them warm (a fresh worker: torch
-- imported and every problem loaded again). Each problem gets --evals candidates in a row:
-- the eager-equivalent CUDA kernel where one is simple (the elementwise activations, a grid-
-- stride loop), else a deliberately wrong one (a kernel that writes nothing: the check finds
-- the outputs' poison). torch.compile baselines are off (compile_mode "off"); eager is timed.
-- For each pass: evaluations per GPU-hour (by wall time, and by the judge's busy time of the
-- repeat evaluations, a problem's first aside), the stage split (problem load = task,
-- prepare, baselines, verify, measure), statuses, and per problem the device memory held
-- after its evaluations (NVML, the whole device) next to the problem's own input and output
-- bytes at its timed shape. --mode says how the jobs reach the pool: serial (one evaluation
-- at a time, each candidate compiled by the worker), batch (problems' jobs kept submitted
-- WINDOW jobs ahead of the verdicts: the pool compiles the waiting ones on the CPUs while the
-- worker judges, as a sweep or the service does), both (serial, then batch, each from empty
-- caches: side by side). Each pass also says where the worker's wall time went (the pool's
-- counters: judging, and idle because nothing was queued or the queued jobs' compiles ran)
-- and its one-time set-up as the worker told it (km.progress: torch's import, each problem's
-- reference loaded on the GPU, specs built, baselines timed), the problem load's parts.
-- --level N judges KB/levelN instead (every candidate there the wrong one but for the same
-- elementwise names): its memory table for the largest problems of another level.
-- Usage: kmrun bench/kb_level1.lua KB_DIR [OUT.md] [--evals N] [--max-s S] [--first N] [--mode M] [--level N]
--   KB_DIR: a KernelBench checkout's KernelBench/ folder (level1 inside) or a levelN itself
-- Exit status: 0, 2 on usage errors, 3 where there is no GPU (the reason on stderr).
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT
local B = dofile((arg[0]:match("^(.*/)") or "") .. "lib.lua")

local SPEC = A.spec {
  name = "bench/kb_level1.lua", synopsis = "KB_DIR [OUT.md] [options]",
  about = "KernelBench level 1 as a whole: evaluations per GPU-hour, empty and warm, with the stage split.",
  positional = { { "kb", "KB_DIR", "KernelBench's KernelBench/ folder, or its level1", required = true },
    { "out", "OUT.md", "also write the lines to this file" } },
  options = { { "evals", "N", "candidates judged per problem in a row (default 2)", type = "int" },
    { "max-s", "S", "a pass starts no problem after S seconds (default 150)", type = "seconds" },
    { "first", "N", "only the first N problems", type = "int" },
    { "level", "N", "KB_DIR/levelN (default 1; a KB_DIR ending in levelN is that level)", type = "int" },
    { "mode", "M", "serial: one evaluation at a time (pool:eval); batch: problems' jobs kept submitted ahead of the verdicts, so the pool compiles the waiting ones on the CPUs while the worker judges (km.serve.pool); both: each, side by side (default batch)",
      choices = { "serial", "batch", "both" } },
    { "dry-run", nil, "no GPU: compile every problem's candidates (NVRTC, sm_90) and load their launch code" },
    { "pass", "NAME", "internal: judge one pass here and write its records to OUT.md" } },
}
local args, code = A.parse(SPEC, arg)
if not args then return code end
local json = require "km.json"
local timing = require "km.timing"

local KB = args.kb:gsub("/$", "")
if args.level and args.level < 1 then io.stderr:write("bench/kb_level1.lua: --level wants 1 or more\n") return EXIT.USAGE end
local L1 = KB:match("level%d+$") and KB or ("%s/level%d"):format(KB, args.level or 1)
local LEVEL = tonumber(L1:match("level(%d+)$"))
local EVALS, MAX_S = args.evals or 2, args.max_s or 150
local KMRUN, ROOT = arg[-1], arg[0]:match("^(.*)/bench/") or "."

local function problems()
  local files = {}
  local p = io.popen("ls -1 '" .. L1 .. "'/*.py 2>/dev/null | sort -V")
  for f in p:lines() do if not args.first or #files < args.first then files[#files + 1] = f end end
  p:close()
  return files
end

----------------------------------------------------------------------------------------
-- the candidates

-- y = f(x) elementwise, as torch computes it at fp32 (KernelBench's defaults)
local ELEMENTWISE = {
  ["19_ReLU"] = "fmaxf(x, 0.f)",
  ["20_LeakyReLU"] = "x > 0.f ? x : 0.01f * x",
  ["21_Sigmoid"] = "1.f / (1.f + expf(-x))",
  ["22_Tanh"] = "tanhf(x)",
  ["25_Swish"] = "x / (1.f + expf(-x))",
  ["26_GELU_"] = "0.5f * x * (1.f + erff(x * 0.70710678118654752f))",
  ["27_SELU_"] = "1.0507009873554805f * (x > 0.f ? x : 1.6732632423543772f * expm1f(x))",
  ["28_HardSigmoid"] = "fminf(fmaxf(x / 6.f + 0.5f, 0.f), 1.f)",
  ["29_Softplus"] = "x > 20.f ? x : log1pf(expf(x))",
  ["30_Softsign"] = "x / (1.f + fabsf(x))",
  ["31_ELU"] = "x > 0.f ? x : expm1f(x)",
  ["32_HardTanh"] = "fminf(fmaxf(x, -1.f), 1.f)",
  ["88_MinGPTNewGelu"] = "0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)))",
}
-- the one input that is not the output (a problem file's single output is io.out)
local LAUNCH = [[return function(k, io, s)
  local x
  for name, b in pairs(io) do if name ~= "out" then x = b end end
  k.f{ grid = k.device.sm_count * 8, block = 256 }(x, io.out, io.out:numel())
end]]

-- A problem's candidate number i (a comment makes each new to NVRTC's cache) -> cand, kind
local function candidate(file, i, pass)
  local name = file:match("([^/]+)%.py$")
  local expr = ELEMENTWISE[name]
  local salt = ("// %s %s candidate %d\n"):format(name, pass, i)
  if expr then
    return { name = name .. " eager-equivalent", launch = LAUNCH, params = {}, source = salt ..
      "extern \"C\" __global__ void f(const float *xs, float *y, long long n) {\n" ..
      "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n" ..
      "    float x = xs[i];\n    y[i] = " .. expr .. ";\n  }\n}\n" }, "eager"
  end
  return { name = name .. " wrong", params = {}, source = salt .. "extern \"C\" __global__ void f() {}\n",
    launch = "return function(k, io, s) k.f{ grid = 1, block = 32 }() end" }, "wrong"
end

-- --dry-run: every candidate compiled for sm_90 and its launch code loaded, no GPU
local function dry_run()
  local nvrtc, sandbox = require "km.nvrtc", require "km.sandbox"
  local n, kinds, bad = 0, { eager = 0, wrong = 0 }, {}
  for _, file in ipairs(problems()) do
    local cand, kind = candidate(file, 1, "dry-run")
    local prog, log = nvrtc.compile(cand.source, { arch = "sm_90", name = "kernel.cu" })
    local fn, lerr = sandbox.load(cand.launch, "launch.lua")
    if not prog or not fn then bad[#bad + 1] = file .. ": " .. tostring(prog and lerr or log) end
    n, kinds[kind] = n + 1, kinds[kind] + 1
  end
  print(("%d problem(s): %d eager-equivalent, %d wrong; %d do not compile or load"):format(n, kinds.eager, kinds.wrong, #bad))
  for _, b in ipairs(bad) do print("  " .. b) end
  return #bad == 0 and EXIT.OK or 1
end
if args.dry_run then return dry_run() end
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/kb_level1.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end

----------------------------------------------------------------------------------------
-- one pass, in a child process with its caches (--pass)

-- The problem's own input and output bytes at its timed shape (its spec, cached by the worker)
local function footprint(key)
  local ok, t = pcall(function() return assert(require("km.task").load(key)) end)
  if not ok then return nil end
  local task_mod, bytes = require "km.task", 0
  for _, list in ipairs { t.inputs, t.outputs } do
    for _, spec in ipairs(list) do
      bytes = bytes + task_mod.numel(task_mod.shape_of(spec, t.shapes[1])) * task_mod.DTYPE_BYTES[spec.dtype]
    end
  end
  return bytes
end

local function device_used(uuid)
  local okn, nvml = pcall(require, "km.nvml")
  if not okn or not nvml.available() then return nil end
  return (nvml.memory(uuid or 0))
end

-- Batch mode keeps this many jobs submitted and not yet judged: a problem's jobs are submitted
-- whenever fewer wait, until --max-s has passed.
local WINDOW = 16

-- One pass: `pass` names its candidates (new to NVRTC's cache in each pass), `mode` how
-- they are submitted (serial, batch); one JSON record an evaluation into `out`.
local function run_pass(pass, mode, out)
  local eval = require "km.serve.pool"
  local kbtask = require "km.task.kbtask"
  -- the worker's one-time set-up as it tells it (km.progress: torch's import, a problem's
  -- reference loaded on the GPU, a spec built, a baseline timed): stage -> { seconds, count }
  local setup = {}
  local function on_progress(ev)
    if type(ev) == "table" and ev.state == "done" and tonumber(ev.seconds) and type(ev.stage) == "string" then
      local e = setup[ev.stage] or { 0, 0 }
      e[1], e[2] = e[1] + ev.seconds, e[2] + 1
      setup[ev.stage] = e
    end
  end
  local pool = assert(eval.pool { gpus = { 0 }, timeout = 600, on_progress = on_progress })
  local f = assert(io.open(out, "w"))
  local t0 = timing.wall()
  local function record(file, i, kind, v, wall)
    local key = kbtask.key(file, "fp32")
    f:write(json.encode { problem = file:match("([^/]+)%.py$"), i = i, kind = kind, status = v.status,
      wall = wall, eval_seconds = v.eval_seconds, stages = v.stage_seconds, kernel = v.kernel_seconds,
      speedup = v.speedup, feedback = (v.status ~= "correct" and kind == "eager" or v.status == "error") and tostring(v.feedback):sub(1, 300) or nil,
      device_used = device_used(pool.device and pool.device.uuid), footprint = i == EVALS and footprint(key) or nil,
      judge_peak = type(v.device_memory) == "table" and v.device_memory.judge_peak_bytes or nil,
      torch_peak = type(v.device_memory) == "table" and v.device_memory.torch_peak_bytes or nil }, "\n")
    f:flush()
  end
  local function opts_of(i) return { compile_mode = "off", energy = false, seeds = i == 1 and 3 or 1 } end
  local files = problems()
  local at, i_next, live, pending = 1, 1, {}, 0
  -- the next job submitted (a problem's EVALS in a row) -> false once every problem's are, or
  -- --max-s has passed before a problem's first
  local function submit_next()
    if at > #files or (i_next == 1 and timing.wall() - t0 > MAX_S) then return false end
    local file, i = files[at], i_next
    if i == EVALS then at, i_next = at + 1, 1 else i_next = i + 1 end
    local cand, kind = candidate(file, i, pass)
    local job = pool:submit(kbtask.key(file, "fp32"), cand, opts_of(i))
    live[job], pending = { file, i, kind, timing.wall() }, pending + 1
    return true
  end
  local ahead = mode == "serial" and 1 or WINDOW -- serial: the next submitted once a verdict is in
  repeat
    while pending < ahead and submit_next() do end
    for _, job in ipairs(pool:poll(1000)) do
      local m = live[job]
      live[job], pending = nil, pending - 1
      record(m[1], m[2], m[3], job.verdict, mode == "serial" and timing.wall() - m[4] or nil)
    end
  until pending == 0 and not submit_next()
  f:write(json.encode { pass_wall = timing.wall() - t0, pool = pool:stats(), setup = setup }, "\n")
  f:close()
  pool:close()
end

if args.pass then
  local pass, mode = args.pass:match("^([^:]+):?(.*)$")
  run_pass(pass, mode ~= "" and mode or "batch", assert(args.out, "--pass needs OUT"))
  return EXIT.OK
end

----------------------------------------------------------------------------------------
-- the two passes and their table

local say, save = B.report(args.out)

local function read_records(path)
  local recs, wall, pst = {}, nil, nil
  local h = io.open(path)
  if not h then return recs, nil end
  for l in h:lines() do
    local r = json.decode(l)
    if type(r) == "table" and r.pass_wall then
      wall, pst = r.pass_wall, r.pool
      if type(pst) == "table" then pst.setup = r.setup end
    elseif type(r) == "table" then recs[#recs + 1] = r end
  end
  h:close()
  return recs, wall, pst
end

-- The worker's set-up in a pass as it told it (km.progress stages: stage -> { seconds, count })
local function setup_line(pass, p)
  local setup = type(p) == "table" and type(p.setup) == "table" and p.setup or nil
  if not setup then return ("%s: the worker's set-up not told"):format(pass) end
  local parts = {}
  for stage, e in pairs(setup) do
    if type(e) == "table" then parts[#parts + 1] = ("%s %.1f s (%d)"):format(stage, tonumber(e[1]) or 0, tonumber(e[2]) or 0) end
  end
  table.sort(parts)
  return ("%s: the worker's set-up as it told it (seconds, times): %s"):format(pass, #parts > 0 and table.concat(parts, ", ") or "none")
end

-- Where the worker's wall time went in a pass (the pool's counters, km.serve.pool's stats)
local function pool_line(pass, p)
  if type(p) ~= "table" then return ("%s: the pool's counters not recorded"):format(pass) end
  local function f(x) return ("%.1f"):format(tonumber(x) or 0) end
  return ("%s: %s s from the pool's start: the worker busy %s s (the evaluations' own %s s), idle %s s with nothing queued (the worker's start among it), %s s waiting for compiles ahead, %s s for dispatch; %s job(s) sent, %s set-up(s), %s compiled ahead")
    :format(pass, f(p.wall_s), f(p.busy_s), f(p.gpu_s), f(p.idle_driver_s), f(p.idle_compile_s), f(p.idle_dispatch_s),
      tostring(p.sent), tostring(p.setups), tostring(p.warmed))
end

local STAGES = { "task", "prepare", "baselines", "verify", "measure" }
local SLOWEST = 25 -- problems in the table of the slowest

-- A record's stage seconds added into acc (stage -> seconds)
local function add_stages(acc, r)
  for _, k in ipairs(STAGES) do acc[k] = (acc[k] or 0) + (type(r.stages) == "table" and tonumber(r.stages[k]) or 0) end
end
local function summarize(pass, recs, wall)
  local st, statuses, busy_repeat, n_repeat, busy = {}, {}, 0, 0, 0
  local problems = {}
  for _, r in ipairs(recs) do
    add_stages(st, r)
    local key = r.kind .. " " .. tostring(r.status)
    statuses[key] = (statuses[key] or 0) + 1
    busy = busy + (tonumber(r.eval_seconds) or 0)
    if r.i > 1 then busy_repeat, n_repeat = busy_repeat + (tonumber(r.eval_seconds) or 0), n_repeat + 1 end
    problems[r.problem] = true
  end
  local np = 0
  for _ in pairs(problems) do np = np + 1 end
  local ks = {}
  for k, n in pairs(statuses) do ks[#ks + 1] = ("%s %d"):format(k, n) end
  table.sort(ks)
  local function f(x) return ("%.1f"):format(x or 0) end
  say("| %s | %d | %d | %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s |", pass, np, #recs, f(wall),
    wall and wall > 0 and #recs / wall * 3600 or 0, busy_repeat > 0 and n_repeat / busy_repeat * 3600 or 0,
    f(st.task), f(st.prepare), f(st.baselines), f(st.verify), f(st.measure), table.concat(ks, ", "))
end

-- Per problem: its footprint, the device memory held after its evaluations, and the peaks of
-- its evaluations (the verdicts' device_memory: the judge's buffers, torch's allocator).
local function memory_rows(recs)
  local rows, peak = {}, {}
  local function gib(x) return x and ("%.2f"):format(x / 2^30) or "-" end
  for _, r in ipairs(recs) do
    local p = peak[r.problem] or {}
    peak[r.problem] = p
    if r.judge_peak then p.judge = math.max(p.judge or 0, r.judge_peak) end
    if r.torch_peak then p.torch = math.max(p.torch or 0, r.torch_peak) end
    if r.footprint then
      rows[#rows + 1] = ("| %s | %s | %s | %s | %s |"):format(r.problem, gib(r.footprint), gib(r.device_used), gib(p.judge), gib(p.torch))
    end
  end
  return rows
end

-- The problems that took the judge longest in a pass (their evaluations' own seconds, all
-- summed), with their stage split: where a pass's time goes, problem by problem.
local function slowest_rows(recs, n)
  local by = {}
  for _, r in ipairs(recs) do
    local p = by[r.problem] or { problem = r.problem, total = 0, kind = r.kind }
    by[r.problem] = p
    p.total = p.total + (tonumber(r.eval_seconds) or 0)
    add_stages(p, r)
  end
  local list = {}
  for _, p in pairs(by) do list[#list + 1] = p end
  table.sort(list, function(a, b) return a.total > b.total end)
  local rows = {}
  for i = 1, math.min(n, #list) do
    local p = list[i]
    local cells = { p.problem, p.kind, ("%.3f"):format(p.total) }
    for _, k in ipairs(STAGES) do cells[#cells + 1] = ("%.3f"):format(p[k]) end
    rows[i] = "| " .. table.concat(cells, " | ") .. " |"
  end
  return rows
end

local tmp = B.scratch()
local dev = require("km.cuda").device()
say("# KernelBench level %d as a whole (%s), empty then warm caches", LEVEL, L1)
say("")
say("GPU: %s (%s), driver %s, date %s; %d candidate(s) a problem, a pass starts no problem after %d s",
  dev.name, dev.arch, dev.driver_version, os.date("!%Y-%m-%d %H:%M UTC"), EVALS, MAX_S)
say("")
say("| pass | problems | evaluations | wall s | evaluations per GPU-hour (wall) | repeat evaluations per GPU-hour (judge busy) | problem load (task) | prepare | baselines | verify | measure | kind and status |")
say("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
local recs_of, pool_lines = {}, {}
local modes = (args.mode or "batch") == "both" and { "serial", "batch" } or { args.mode or "batch" }
for _, mode in ipairs(modes) do
  -- each mode's empty pass starts from empty caches of its own
  local cache = ("%s/cache-%s"):format(tmp, mode)
  for _, pass in ipairs { "empty", "warm" } do
    local out = ("%s/%s-%s.jsonl"):format(tmp, mode, pass)
    local cmd = ("XDG_CACHE_HOME=%s TMPDIR=%s/tmp KM_CACHE_DIR= KM_BASELINE_DIR= KM_SPEC_DIR= KM_SETUP_DIR= %s %s/bench/kb_level1.lua '%s' %s --pass %s:%s --evals %d --max-s %d%s > %s/%s-%s.log 2>&1")
      :format(cache, tmp, KMRUN, ROOT, L1, out, pass, mode, EVALS, MAX_S, args.first and (" --first " .. args.first) or "", tmp, mode, pass)
    os.execute(cmd)
    local recs, wall, pst = read_records(out)
    recs_of[pass] = recs
    summarize(mode .. ", " .. pass, recs, wall)
    pool_lines[#pool_lines + 1] = pool_line(mode .. ", " .. pass, pst)
    pool_lines[#pool_lines + 1] = setup_line(mode .. ", " .. pass, pst)
  end
end
say("")
for _, l in ipairs(pool_lines) do say("%s", l) end
say("")
say("Problems whose eager-equivalent candidate was not correct (warm pass):")
for _, r in ipairs(recs_of.warm or {}) do
  if r.kind == "eager" and r.status ~= "correct" and r.i == 1 then say("- %s: %s %s", r.problem, r.status, tostring(r.feedback)) end
end
say("")
say("Evaluations that ended in `error` (warm pass; the judge's or the reference's failure, not the candidate's):")
for _, r in ipairs(recs_of.warm or {}) do
  if r.status == "error" then say("- %s (%s, evaluation %d): %s", r.problem, r.kind, r.i, tostring(r.feedback)) end
end
say("")
say("Device memory held after a problem's evaluations (NVML, the whole device: the worker's pool, torch's cached blocks, the context), and its evaluations' peaks (each verdict's device_memory: the judge's own buffers, idle pool included, and torch's allocator), next to the problem's own input and output bytes at its timed shape (warm pass):")
say("")
say("| problem | inputs + outputs GiB | device used GiB | judge's peak GiB | torch's peak GiB |")
say("| --- | --- | --- | --- | --- |")
for _, row in ipairs(memory_rows(recs_of.warm or {})) do say("%s", row) end
say("")
say("The %d problems that took the judge longest (warm pass; seconds, all their evaluations):", SLOWEST)
say("")
say("| problem | candidate | judge s | problem load (task) | prepare | baselines | verify | measure |")
say("| --- | --- | --- | --- | --- | --- | --- | --- |")
for _, row in ipairs(slowest_rows(recs_of.warm or {}, SLOWEST)) do say("%s", row) end
say("")
say("Logs and records: %s", tmp)
save()
return EXIT.OK
