-- bench/measure_profile.lua — where a warm judge's measure stage goes (issue 17: the measure
-- stage against the candidates' own kernel time). In one process, km.judge judges each
-- task's starter once to set the task up (reference, baselines, kept results), then EVALS
-- more times; only those are counted. Per task: the measure stage's seconds, the kernel's own
-- timed seconds (samples x mean) and their ratio. Over all tasks, wall seconds of what the
-- candidate's timings spend them on, the judge's own methods wrapped for this run only:
-- time_run, timing.time, the timed samples' before and after hooks (the after hook of a checked call
-- holds its check: the wait for the GPU, the inputs proven, the reference, the compare),
-- fill_inputs, compare.allclose, cuda.synchronize; with counts. Nothing is synchronized
-- beyond what the judge does (the probe of bench/RESULTS.md's round 5 waited for the GPU
-- before each check; this does not, so hook times hold the GPU backlog).
--
-- With --cupti, torch.profiler (CUPTI's activity records, in this process) also records
-- everything the GPU ran during the candidates' counted timings (time_run): how much of
-- their wall time the GPU was busy at all, and what with — the candidate's own kernels, the
-- reference (a CUDA reference's or torch's kernels), and km's own kernels by kind (L2 flush,
-- fresh inputs, poison, checks, the timing gate, which waits on the host), copies and fills,
-- and the 20 kernels and copies that took longest by name (what a kind's seconds are made of).
-- That says whether the stage waits on the host (checks' round trips) or on GPU work; the
-- GPU's idle time is then put down to the work that ended just before each gap (what the
-- host was answering: a check's read, a first call's wait, ...).
--
--   build/kmrun bench/measure_profile.lua [TASK_DIR...] [--evals N] [--cupti] [--warmup A,B | --ab OPT=A,B]
--
-- --warmup A,B: the counted evaluations alternate between two warm-up protocols, each N
-- (warm-up calls, the judge's `warmup`) or N/MS (and at least MS milliseconds of them, its
-- `warmup_ms`; the judge's own when left out), in one process on the same tasks, and a second
-- table gives each side's measure stage and counted kernel time and the candidates' medians
-- B over A (does the median move with less warm-up after verify has run the kernel?). A side
-- ending in w (e.g. 1w) lets verify's last call, at the timed shape, count as a warm-up call
-- (the judge's default since round 11); without it every timing makes its own.
-- --ab OPT=A,B: the same, alternating any judge option between two values (true, false, a
-- number or a word), e.g. --ab check_every=2,4; several options joined by + change together
-- (--ab check_draw=each,subset+check_lines=1,16: the timed-call checks before and after
-- round 13).
--
-- Default tasks: eight of tasks/ from small to large kernels. torch.compile is not timed;
-- energy is not measured. Exit status: 0, 1 when an evaluation is not correct, 2 on usage
-- errors, 3 where there is no GPU (the reason on stderr).
local A = require "km.args"
local EXIT = require("km.run.runner").EXIT

local SPEC = A.spec {
  name = "bench/measure_profile.lua", synopsis = "[TASK_DIR...] [options]",
  about = "Where a warm judge's measure stage goes: per task, and per part of the candidates' timings.",
  positional = { { "tasks", "TASK_DIR", "task folders (default: eight of tasks/)", many = true } },
  options = {
    { "evals", "N", "counted evaluations per task, after one that sets the task up", type = "positive", default = 4 },
    { "cupti", nil, "also what the GPU ran during the candidates' timings (torch.profiler; needs torch)", type = "flag" },
    { "warmup", "A,B", "alternate the counted evaluations between two warm-ups per timing, each N calls or N/MS (calls/least ms), w after it: verify's last call counts" },
    { "ab", "OPT=A,B", "alternate the counted evaluations between two values of a judge option (true, false, a number or a word; several joined by +)" },
  },
}
local a, code = A.parse(SPEC, arg)
if not a then return code end
local sides -- the two sides of --warmup or --ab: { label, apply = function(opts) }
if a.warmup and a.ab then
  io.stderr:write("bench/measure_profile.lua: --warmup and --ab are two ways of taking sides: one at a time\n")
  return EXIT.USAGE
end
if a.ab then
  local function value(text)
    if text == "true" then return true elseif text == "false" then return false end
    return tonumber(text) or text
  end
  sides = { { labels = {}, set = {} }, { labels = {}, set = {} } }
  for part in (a.ab .. "+"):gmatch("(.-)%+") do
    local key, v1, v2 = part:match("^([%a_][%w_]*)=([^,]+),([^,]+)$")
    if not key then
      io.stderr:write("bench/measure_profile.lua: --ab wants OPT=A,B (a judge option and two values; several joined by +), not ", a.ab, "\n")
      return EXIT.USAGE
    end
    for i, text in ipairs { v1, v2 } do
      local side = sides[i]
      side.labels[#side.labels + 1] = key .. "=" .. text
      side.set[key] = value(text)
    end
  end
  for _, side in ipairs(sides) do
    side.label = table.concat(side.labels, " ")
    side.apply = function(o) for k, v in pairs(side.set) do o[k] = v end end
  end
end
if a.warmup then
  local function side(text)
    local body, w = text:match("^(.-)(w?)$")
    local n, ms = body:match("^(%d+)/(%d*%.?%d+)$")
    n = n or body:match("^(%d+)$")
    return n and { label = "warmup " .. (ms and string.format("%s/%sms", n, ms) or n) .. w,
      apply = function(o) o.warmup, o.warmup_ms, o.warmed = tonumber(n), tonumber(ms), w == "w" end }
  end
  local s1, s2 = a.warmup:match("^([^,]+),([^,]+)$")
  sides = s1 and { side(s1), side(s2) }
  if not (sides and sides[1] and sides[2]) then
    io.stderr:write("bench/measure_profile.lua: --warmup wants A,B, each N (warm-up calls) or N/MS (calls/least ms), w after it for verify's last call counted, not ", a.warmup, "\n")
    return EXIT.USAGE
  end
end
local okg, why = require("km.cuda").available()
if not okg then io.stderr:write("bench/measure_profile.lua: no GPU: ", tostring(why), "\n") return EXIT.NO_GPU end

local timing, compare, cuda = require "km.timing", require "km.compare", require "km.cuda"
local task = require "km.task"
local json = require "km.json"
local wall = timing.wall
local fmt = string.format
local ROOT = arg[0]:match("^(.*)/bench/") or "."
local dirs = a.tasks and #a.tasks > 0 and a.tasks or {}
if #dirs == 0 then
  for _, n in ipairs { "l1_relu", "l1_cross_entropy", "l1_matmul_square", "l2_bias_layernorm", "l3_causal_attention",
    "l1_maxpool2d", "l2_silu_mul_add", "l1_softmax" } do dirs[#dirs + 1] = ROOT .. "/tasks/" .. n end
end

local J = assert(require("km.judge").new())
local Judge = getmetatable(J).__index
local acc, counting, in_cand = {}, false, false
local side_tag = "" -- with --warmup or --ab: " [side]" after the keys that compare the sides
local function add(k, dt)
  if not counting then return end
  local e = acc[k] or { s = 0, n = 0 }
  e.s, e.n = e.s + dt, e.n + 1
  acc[k] = e
end
local function timed(key, f)
  return function(...)
    local t0 = wall()
    local r = table.pack(f(...))
    add(key(...), wall() - t0)
    return table.unpack(r, 1, r.n)
  end
end
-- the candidate's timings (check = true) apart from the cached ones (reference, starter, eager)
local time_run = Judge.time_run
local mark = function() end -- --cupti: the candidates' timings marked in the profile
Judge.time_run = function(self, st, run, sym, opts, check)
  in_cand = check and true or false
  if in_cand and counting then mark(true) end
  local t0 = wall()
  local r = table.pack(time_run(self, st, run, sym, opts, check))
  add(check and "candidate: time_run" .. side_tag or "other timings: time_run", wall() - t0)
  if in_cand and counting then mark(false) end
  in_cand = false
  return table.unpack(r, 1, r.n)
end
local function cand_key(name) return function() return (in_cand and "candidate: " or "outside timings: ") .. name end end
-- the measure stage around the candidate's timing: what else it spends, piece by piece
local judge_mod = require "km.judge"
Judge.measure = timed(function() return "measure stage: Judge:measure" .. side_tag end, Judge.measure)
Judge.baselines = timed(function() return "measure stage: baselines (the baselines stage's call too)" end, Judge.baselines)
Judge.peaks = timed(function() return "measure stage: peaks" end, Judge.peaks)
judge_mod.speedups = timed(function() return "measure stage: speedups" end, judge_mod.speedups)
timing.floor = timed(function() return "measure stage: timing.floor" end, timing.floor)
Judge.fill_inputs = timed(cand_key("fill_inputs"), Judge.fill_inputs)
Judge.truth_check = timed(cand_key("truth_check"), Judge.truth_check)
Judge.proven_inputs = timed(cand_key("proven_inputs (guards, inputs checked)"), Judge.proven_inputs)
Judge.run_reference = timed(cand_key("run_reference (unbound)"), Judge.run_reference)
compare.allclose = timed(cand_key("compare.allclose"), compare.allclose)
cuda.synchronize = timed(cand_key("cuda.synchronize"), cuda.synchronize)
-- the host's side of a timed call and its check, piece by piece: what the judge enqueues
-- (launch code, fresh inputs, the ledger's ops, the bound PyTorch reference) and what it
-- does once the ledger was read (the reads, the compare's result)
for _, name in ipairs { "truth_enqueue", "truth_read", "seal_enqueue", "seal_read", "input_plan" } do
  Judge[name] = timed(cand_key(name), Judge[name])
end
compare.enqueue = timed(cand_key("compare.enqueue"), compare.enqueue)
-- the evaluation's other stages and verify's pieces (outside timings: verify's trials; the
-- prepare stage is in the stage table)
Judge.verify = timed(function() return "verify stage: Judge:verify" end, Judge.verify)
Judge.task_state = timed(function() return "task stage: Judge:task_state" end, Judge.task_state)
for _, name in ipairs { "trial_io", "trial_reference", "try_fast_reference", "try_fast_at", "exact_agrees", "seal_truth", "ledger" } do
  Judge[name] = timed(cand_key(name), Judge[name])
end
do
  local kb = require "km.task.kernelbench"
  kb.empty_cache = timed(cand_key("kernelbench.empty_cache"), kb.empty_cache)
end
compare.result = timed(cand_key("compare.result"), compare.result)
local sandbox = require "km.sandbox"
sandbox.call = timed(cand_key("launch code (sandbox.call)"), sandbox.call)
local python_mod = require "km.python"
python_mod.call = timed(function(_, fn) return (in_cand and "candidate: " or "outside timings: ") .. "python " .. tostring(fn) end,
  python_mod.call)
do
  local reg = debug.getregistry()
  for mt, names in pairs { ["km.Ledger"] = { "begin", "read", "guards", "random_check", "digest" },
    ["km.Buffer"] = { "random", "poison" } } do
    local methods = reg[mt] and reg[mt].__index
    if type(methods) == "table" then
      for _, n in ipairs(names) do
        if methods[n] then methods[n] = timed(cand_key(mt:gsub("^km%.", "") .. ":" .. n), methods[n]) end
      end
    end
  end
end
local time = timing.time
-- The timing loop's own host time (km_timer_core.c: flush, gate, events, the launch, the
-- waits, the clock probes) between the hooks, by what came before and after: "core: A -> B".
local reads = 0 -- the ledger's reads so far: an after hook that read one held a check
do
  local methods = debug.getregistry()["km.Ledger"].__index
  local read = methods.read
  methods.read = function(...) reads = reads + 1 return read(...) end
end
timing.time = function(fn, o)
  if not in_cand or type(o) ~= "table" then return time(fn, o) end
  local no = {}
  for k, v in pairs(o) do no[k] = v end
  local last_t, last = wall(), "timing.time called"
  local function core(now, this) add(fmt("core: %s -> %s", last, this), now - last_t) end
  for _, h in ipairs { "before", "after" } do
    local f = o[h]
    if f then
      no[h] = function(ph)
        local t0, r0 = wall(), reads
        core(t0, h .. " " .. ph)
        local x, y, z = f(ph)
        last_t = wall()
        add("candidate: " .. h .. " hook, " .. ph, last_t - t0)
        last = h .. " " .. ph .. (reads > r0 and " (checked)" or "")
        return x, y, z
      end
    end
  end
  local t0 = wall()
  local r = table.pack(time(fn, no))
  local t1 = wall()
  core(t1, "return")
  add("candidate: timing.time", t1 - t0)
  -- the run's end, from the last sample enqueued to the return (the result's `tail`): what the
  -- host does there, the GPU has finished and waits for
  local tail = type(r[1]) == "table" and r[1].tail
  if tail then
    add("end: samples read, stop decided" .. side_tag, tail.read_ms / 1e3)
    add("end: the closing clock probe" .. side_tag, tail.probe_ms / 1e3)
    add("end: the rest of the timing core" .. side_tag, (tail.total_ms - tail.read_ms - tail.probe_ms) / 1e3)
    add("end: the binding, to the return" .. side_tag, (t1 - last_t) - tail.total_ms / 1e3)
  end
  return table.unpack(r, 1, r.n)
end

-- --cupti: torch.profiler in this process (km.python), CUDA activity and the marks
local python, cand_names = nil, {}
if a.cupti then
  python = require "km.python"
  local okp, perr = python.available()
  if not okp then io.stderr:write("bench/measure_profile.lua: --cupti: ", tostring(perr), "\n") return EXIT.USAGE end
  assert(python.exec([[
import torch
from torch.profiler import profile, ProfilerActivity
_km_prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
]], "measure_profile"))
  mark = function(start)
    if start then
      assert(python.exec("_km_rf = torch.autograd.profiler.record_function('kmrun_candidate_time_run'); _km_rf.__enter__()"))
    else
      assert(python.exec("_km_rf.__exit__(None, None, None)"))
    end
  end
end
-- What the GPU ran inside the marked windows, by kind -> rows { what, seconds, count }, the
-- windows' wall seconds, the seconds the GPU was busy (any work), busy without the gate's wait
local ANALYZE = [==[
import json
_km_prof.__exit__(None, None, None)
_evs = _km_prof.profiler.kineto_results.events()
_CUDA = torch.autograd.DeviceType.CUDA
_wins = sorted((e.start_ns(), e.start_ns() + e.duration_ns()) for e in _evs
               if e.name() == 'kmrun_candidate_time_run' and e.device_type() != _CUDA)
# (the mark's own GPU-side copy, a user annotation spanning the window, is not GPU work)
_gpu = sorted((e.start_ns(), e.start_ns() + e.duration_ns(), e.name()) for e in _evs
              if e.device_type() == _CUDA and e.duration_ns() > 0 and e.name() != 'kmrun_candidate_time_run')
_cand = set(json.loads(_km_cand_names))
def _kind(n):
    if n.startswith('km_'):
        return {'km_flush': 'km: L2 flush', 'km_random': 'km: fresh inputs', 'km_fill64': 'km: fresh inputs',
                'km_poison_sparse': 'km: poison', 'km_gate': 'km: timing gate (waits on the host)',
                'km_random_check': 'km: checks (inputs, guards, checksums, compare)',
                'km_guard_count': 'km: checks (inputs, guards, checksums, compare)',
                'km_checksum': 'km: checks (inputs, guards, checksums, compare)',
                'km_compare': 'km: checks (inputs, guards, checksums, compare)'}.get(n, 'km: other (' + n + ')')
    if n.startswith('Memcpy') or n.startswith('Memset'): return n.split(' (')[0] + ' (any)'
    if any(c in n for c in _cand): return 'the candidate\'s kernels'
    return 'the reference and anything else'
_rows, _names, _wall, _busy, _busy_ng, _idle, _gaps, _pairs = {}, {}, 0, 0, 0, {}, [], {}
# the host's CUDA API calls CUPTI recorded (where it records them), to set against the gaps
_api = sorted((e.start_ns(), e.start_ns() + e.duration_ns(), e.name()) for e in _evs
              if e.device_type() != _CUDA and e.name().startswith('cu') and e.duration_ns() > 0)
def _gap(what, ns):
    if ns > 0:
        r = _idle.setdefault(what, [0, 0]); r[0] += ns; r[1] += 1
for (w0, w1) in _wins:
    _wall += w1 - w0
    spans, spans_ng, kinds = [], [], []
    for (g0, g1, n) in _gpu:
        if g1 <= w0 or g0 >= w1: continue
        c0, c1 = max(g0, w0), min(g1, w1)
        k = _kind(n)
        r = _rows.setdefault(k, [0, 0]); r[0] += c1 - c0; r[1] += 1
        r = _names.setdefault((k, n), [0, 0]); r[0] += c1 - c0; r[1] += 1
        spans.append((c0, c1))
        kinds.append((c0, c1, k, n))
        if n != 'km_gate': spans_ng.append((c0, c1))
    # the GPU's idle time, each gap put down to the work that ended last before it (what the
    # host was answering), and the gaps at the window's start and end
    kinds.sort()
    end, last, last_n = w0, 'the start of the timing (set-up before the first GPU work)', '(start)'
    for (c0, c1, k, n) in kinds:
        if c0 > end:
            _gap('after ' + last, c0 - end); _gaps.append((end, c0))
            # by name: the work before the gap and the work that ended it
            r = _pairs.setdefault((last_n[:40], n[:40]), [0, 0]); r[0] += c0 - end; r[1] += 1
        if c1 > end: end, last, last_n = c1, k, n
    _gap('after the last GPU work (the end of the timing)' if kinds else 'a timing with no GPU work', w1 - end)
    if w1 > end: _gaps.append((end, w1))
    for lst, which in ((spans, 0), (spans_ng, 1)):
        lst.sort(); cur0 = cur1 = None; tot = 0
        for (c0, c1) in lst:
            if cur1 is None or c0 > cur1:
                if cur1 is not None: tot += cur1 - cur0
                cur0, cur1 = c0, c1
            else: cur1 = max(cur1, c1)
        if cur1 is not None: tot += cur1 - cur0
        if which == 0: _busy += tot
        else: _busy_ng += tot
# what the host was inside while the GPU idled (the calls overlapping each gap)
_in_gap, _j = {}, 0
_gaps.sort()
for (a0, a1, n) in _api:
    while _j < len(_gaps) and _gaps[_j][1] <= a0: _j += 1
    k = _j
    while k < len(_gaps) and _gaps[k][0] < a1:
        o = min(a1, _gaps[k][1]) - max(a0, _gaps[k][0])
        if o > 0: r = _in_gap.setdefault(n, [0, 0]); r[0] += o; r[1] += 1
        k += 1
_km_result = json.dumps({'api_in_gaps': sorted(([k, v[0] / 1e9, v[1]] for k, v in _in_gap.items()), key=lambda r: -r[1])[:15],
    'api_events': len(_api), 'windows': len(_wins), 'gpu_events': len(_gpu), 'wall': _wall / 1e9, 'busy': _busy / 1e9,
    'busy_no_gate': _busy_ng / 1e9,
    'rows': sorted(([k, v[0] / 1e9, v[1]] for k, v in _rows.items()), key=lambda r: -r[1]),
    'names': sorted(([k[0], k[1][:80], v[0] / 1e9, v[1]] for k, v in _names.items()), key=lambda r: -r[2])[:20],
    'idle': sorted(([k, v[0] / 1e9, v[1]] for k, v in _idle.items()), key=lambda r: -r[1]),
    'pairs': sorted(([k[0], k[1], v[0] / 1e9, v[1]] for k, v in _pairs.items()), key=lambda r: -r[2])[:12]})
]==]

local opts = { energy = false, compile_mode = "off" }

-- --warmup N,M: per task and side, the measure stage, the counted kernel time and the
-- candidate's medians; then the sides against each other
local ab, ab_order = {}, {}
local function ab_add(name, side, v)
  if not ab[name] then ab[name] = { {}, {} } ab_order[#ab_order + 1] = name end
  local s = ab[name][side]
  local ct = v.timing and v.timing.candidate or {}
  s.m = (s.m or 0) + ((v.stage_seconds or {}).measure or 0)
  s.k = (s.k or 0) + (v.kernel_seconds or 0)
  if v.status == "correct" and ct.median then
    s.log = (s.log or 0) + math.log(ct.median) s.n = (s.n or 0) + 1
  end
end
local function ab_print()
  local w = sides
  print(fmt("\n| task | measure / kernel, %s | measure / kernel, %s | median, %s over %s (geomean) |",
    w[1].label, w[2].label, w[2].label, w[1].label))
  print("| --- | --- | --- | --- |")
  local tm, tk2, lr, nr = { 0, 0 }, { 0, 0 }, 0, 0
  for _, name in ipairs(ab_order) do
    local s1, s2 = ab[name][1], ab[name][2]
    local ratio = (s1.n or 0) > 0 and (s2.n or 0) > 0 and math.exp(s2.log / s2.n - s1.log / s1.n)
    if ratio then lr, nr = lr + math.log(ratio), nr + 1 end
    for i, s in ipairs { s1, s2 } do tm[i], tk2[i] = tm[i] + (s.m or 0), tk2[i] + (s.k or 0) end
    print(fmt("| %s | %.2fx | %.2fx | %s |", name, (s1.k or 0) > 0 and s1.m / s1.k or 0, (s2.k or 0) > 0 and s2.m / s2.k or 0,
      ratio and fmt("%.4f", ratio) or "n/a"))
  end
  print(fmt("| all | %.2fx | %.2fx | %s |\n", tk2[1] > 0 and tm[1] / tk2[1] or 0, tk2[2] > 0 and tm[2] / tk2[2] or 0,
    nr > 0 and fmt("%.4f", math.exp(lr / nr)) or "n/a"))
end
local rows, rc, m_all, k_all, v_all, started = {}, 0, 0, 0, 0, false
local stage_sum, evals_counted = {}, 0 -- the counted evaluations' stage seconds, summed
print(fmt("# bench/measure_profile.lua: %s, %s", J.device.name, os.date("!%Y-%m-%d %H:%M UTC")))
print("| task | measure s per eval | kernel s per eval | measure / kernel | samples per eval | extra samples per eval | warm-up calls per eval | checked calls per eval | verify s per eval |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for _, dir in ipairs(dirs) do
  local tk, terr = task.load(dir)
  if not tk then io.stderr:write("bench/measure_profile.lua: ", tostring(terr), "\n") return EXIT.USAGE end
  local cand = assert(task.starter(tk))
  -- the kernels' names: the word before the "(" after __global__ (launch bounds aside)
  for name in cand.source:gsub("__launch_bounds__%s*%b()", ""):gmatch("__global__[^(;{]-([%w_]+)%s*%(") do
    cand_names[#cand_names + 1] = name
  end
  counting = false
  J:eval(tk, cand, opts) -- sets the task up: not counted
  counting = true
  if python and not started then assert(python.exec("_km_prof.__enter__()")) started = true end
  local m, k, n, c, vs, x, wu = 0, 0, 0, 0, 0, 0, 0
  for e = 1, a.evals do
    local side = sides and (e - 1) % 2 + 1
    if side then sides[side].apply(opts) side_tag = " [" .. sides[side].label .. "]" end
    local v = J:eval(tk, cand, opts)
    if side then ab_add(tk.name, side, v) end
    if v.status ~= "correct" then rc = 1 end
    local ct = v.timing and v.timing.candidate or {}
    m, k = m + ((v.stage_seconds or {}).measure or 0), k + (v.kernel_seconds or 0)
    vs = vs + ((v.stage_seconds or {}).verify or 0)
    for sname, sec in pairs(v.stage_seconds or {}) do stage_sum[sname] = (stage_sum[sname] or 0) + sec end
    stage_sum["(whole evaluation)"] = (stage_sum["(whole evaluation)"] or 0) + (v.eval_seconds or 0)
    evals_counted = evals_counted + 1
    n, c = n + (ct.n or 0), c + (ct.checked_calls or 0)
    x, wu = x + (ct.n_extra or 0), wu + (ct.warmup_calls or 0)
  end
  counting = false
  m_all, k_all, v_all = m_all + m, k_all + k, v_all + vs
  print(fmt("| %s | %.4f | %.4f | %.2fx | %.1f | %.1f | %.1f | %.1f | %.4f |", tk.name, m / a.evals, k / a.evals, k > 0 and m / k or 0,
    n / a.evals, x / a.evals, wu / a.evals, c / a.evals, vs / a.evals))
end
print(fmt("| all | %.4f | %.4f | %.2fx | | | | | %.4f |", m_all / (#dirs * a.evals), k_all / (#dirs * a.evals), k_all > 0 and m_all / k_all or 0,
  v_all / (#dirs * a.evals)))
if sides then ab_print() end
print()
print(fmt("| stage (%d counted evaluations) | seconds | ms per evaluation |", evals_counted))
print("| --- | --- | --- |")
local snames = {}
for sname in pairs(stage_sum) do snames[#snames + 1] = sname end
table.sort(snames, function(x, y) return stage_sum[x] > stage_sum[y] end)
for _, sname in ipairs(snames) do
  print(fmt("| %s | %.4f | %.2f |", sname, stage_sum[sname], 1e3 * stage_sum[sname] / math.max(1, evals_counted)))
end
print()
print("| counted evaluations' part | seconds | calls |")
print("| --- | --- | --- |")
local keys = {}
for key in pairs(acc) do keys[#keys + 1] = key end
table.sort(keys, function(x, y) return acc[x].s > acc[y].s end)
for _, key in ipairs(keys) do print(fmt("| %s | %.4f | %d |", key, acc[key].s, acc[key].n)) end
print(fmt("\nkernel seconds of the counted evaluations (samples x mean): %.4f", k_all))
if python and started then
  assert(python.exec("_km_cand_names = " .. fmt("%q", json.encode(json.array(cand_names)))))
  assert(python.exec(ANALYZE, "measure_profile_analyze"))
  local r = json.decode(assert(python.eval("_km_result")))
  print(fmt("\n## What the GPU ran during the candidates' counted timings (CUPTI: %d windows, %d GPU records)", r.windows, r.gpu_events))
  print(fmt("\nwall %.4f s; GPU busy %.4f s (%.1f%%); busy without the timing gate's wait %.4f s (%.1f%%)\n",
    r.wall, r.busy, r.wall > 0 and 100 * r.busy / r.wall or 0, r.busy_no_gate, r.wall > 0 and 100 * r.busy_no_gate / r.wall or 0))
  print("| GPU work | seconds | records | share of the windows' wall |")
  print("| --- | --- | --- | --- |")
  for _, row in ipairs(r.rows) do
    print(fmt("| %s | %.4f | %d | %.1f%% |", row[1], row[2], row[3], r.wall > 0 and 100 * row[2] / r.wall or 0))
  end
  print("\n| the 20 GPU kernels and copies that took longest, by name | kind | seconds | records |")
  print("| --- | --- | --- | --- |")
  for _, row in ipairs(r.names or {}) do print(fmt("| %s | %s | %.4f | %d |", row[2], row[1], row[3], row[4])) end
  print("\n| the GPU idle, after | seconds | gaps | share of the windows' wall |")
  print("| --- | --- | --- | --- |")
  for _, row in ipairs(r.idle) do
    print(fmt("| %s | %.4f | %d | %.1f%% |", row[1]:gsub("^after ", ""), row[2], row[3], r.wall > 0 and 100 * row[2] / r.wall or 0))
  end
  print("\n| the GPU idle, by name: the work before the gap | the work that ended it | seconds | gaps |")
  print("| --- | --- | --- | --- |")
  for _, row in ipairs(r.pairs or {}) do print(fmt("| %s | %s | %.4f | %d |", row[1], row[2], row[3], row[4])) end
  print(fmt("\n| the host inside, while the GPU idled (%d CUDA API calls recorded) | seconds | calls |", r.api_events or 0))
  print("| --- | --- | --- |")
  for _, row in ipairs(r.api_in_gaps or {}) do print(fmt("| %s | %.4f | %d |", row[1], row[2], row[3])) end
end
return rc
