-- kmrun tasks — look at a task suite.
--   kmrun tasks list [DIR]            one line per task
--   kmrun tasks check [DIR|TASK...]   load, compile reference and starter (NVRTC), load launch code
--   kmrun tasks stats [DIR] [--json]  the suite's mix (docs/datasets.md)
--   kmrun tasks dedup [DIR] [--threshold 0.8] [--json]   near-duplicate tasks (MinHash)
--   kmrun tasks lint [DIR|TASK...] [--precision fp32,fp16,bf16] [--json]   degenerate tasks (km.task.lint)
local task = require "km.task"
local sandbox = require "km.sandbox"
local sys = require "km.sys"

local A = require "km.args"

local OVERVIEW = [[
usage: kmrun tasks list [DIR | TASK_DIR ...]
       kmrun tasks check [DIR | TASK_DIR ...] [--arch sm_XX]
       kmrun tasks stats [DIR | TASK_DIR ...] [--json]
       kmrun tasks dedup [DIR | TASK_DIR ...] [--threshold X] [--shingle K] [--json]
       kmrun tasks lint [DIR | TASK_DIR ...] [--precision fp32,fp16,bf16] [--json] [--cpu]
  list    one line per task: name, level, category, spec forms, shapes
  check   validates every task without a GPU: task.lua fields, reference and starter
          compile with NVRTC (arch sm_90 unless --arch), launch code loads in the sandbox,
          and the kernels the launch code names exist
  stats   counts and shares by level, category, spec forms, input dtype, starters and
          tunable parameters
  dedup   pairs of tasks whose description + reference are near duplicates (shingles and
          MinHash, verified by exact Jaccard; default threshold 0.8, shingles of 4 tokens),
          most similar first, and per category the largest cluster's share
  lint    tasks that cannot tell a right kernel from a wrong one: trivial outputs (zeros, a
          constant, an input) that pass, outputs that ignore the inputs, sit below the
          tolerance or hold NaN, references that are non-deterministic or too short to time
DIR defaults to ./tasks. `kmrun tasks SUBCOMMAND --help` shows a subcommand's options.
exit status: 0 all tasks valid, 1 some invalid (or none found; lint: some flagged), 2 usage
error or a folder that does not exist
]]

local DIRS = { "dirs", "DIR", "a folder of task folders or KernelBench problem files (PROBLEM.py), or\n" ..
  "task folders and problem files (default ./tasks)", many = true, type = "path" }
local function sub_spec(name, about, options)
  return A.spec { name = "kmrun tasks " .. name, synopsis = "[DIR | TASK_DIR ...] [options]", about = about,
    positional = { DIRS }, options = options or {} }
end
local SUBS = {
  { "list", sub_spec("list", "One line per task: name, level, category, spec forms, shapes.") },
  { "check", sub_spec("check", [[
Validates every task without a GPU: task.lua fields, reference and starter compile with
NVRTC, launch code loads in the sandbox, and the kernels the launch code names exist. A
KernelBench problem file loads (its spec), and where there is a GPU its PyTorch reference
runs once on it, through the judge's own path (inputs from get_inputs() made on the GPU,
parameters written out, forward into kmrun's buffers).]], {
    { "precision", "P", "problem files at fp32 (default), fp16 or bf16", type = "choice",
      choices = { "fp32", "fp16", "bf16" } },
    { "no-gpu", nil, "do not run problem files' references even where there is a GPU" },
    { "arch", "ARCH", "the GPU architecture NVRTC compiles for, e.g. sm_80, sm_90, sm_90a", default = "sm_90",
      check = function(v)
        if v:match("^sm_%d%d%d?[af]?$") or v:match("^compute_%d%d%d?[af]?$") then return v end
        return nil, "is not an architecture (sm_80, sm_90, sm_90a, compute_90, ...)"
      end },
  }) },
  { "stats", sub_spec("stats", "Counts and shares by level, category, spec forms, input dtype, starters and tunables.", {
    { "json", nil, "print one JSON object" },
  }) },
  { "dedup", sub_spec("dedup", [[
Pairs of tasks whose description + reference are near duplicates (shingles and MinHash,
verified by exact Jaccard), most similar first, and per category the largest cluster's share.]], {
    { "threshold", "X", "similarity from 0 to 1 at or above which a pair is reported", type = "ratio", default = 0.8 },
    { "shingle", "K", "tokens per shingle (default 4)", type = "positive" },
    { "json", nil, "print one JSON object" },
  }) },
  { "lint", sub_spec("lint", [[
For every task x shape set x precision, runs the reference and trivial candidates (zeros, a
constant at the output's mean, an input passed through, the reference on other inputs)
through the judge's comparison (the task's atol + rtol; NaN never passes) and flags, with a
reason: a trivial output passes; the output does not depend on the inputs; most of it is
below the tolerance's resolution, or it holds NaN/Inf; two runs of the reference disagree;
the reference is too short to time (GPU only). With a GPU it runs there through the judge;
without one PyTorch references run on the CPU, and what could not be checked (CUDA-only
references, timing, sizes too large) is said. What this machine lacks (PyTorch, a GPU,
GPU memory) is "not checked", said once, never a flag and never kept. Results are kept
(KM_LINT_DIR, else $XDG_CACHE_HOME/kmrun/lint, else ~/.cache/kmrun/lint; --no-cache lints
again, deleting the folder clears them) by content, precision, where they ran and torch
version; kmrun eval, strategies and sweeps read them (docs/tasks.md, "Linting tasks").
Exit status: 0 nothing flagged, 1 something flagged (or no task found), 2 usage error.]], {
    { "precision", "P[,P...]", "problem files at these precisions (default fp32): fp32, fp16, bf16",
      type = "choices", choices = { "fp32", "fp16", "bf16" } },
    { "json", nil, "print one JSON object: { results = [...], reasons = {...} }" },
    { "cpu", nil, "run references on the CPU even where there is a GPU" },
    { "no-cache", nil, "lint again even where a result is kept" },
  }) },
}

local function is_task(dir)
  if require("km.task.kbtask").is_problem(dir) then return true end
  local f = io.open(dir .. "/task.lua")
  if f then f:close() return true end
end

local function is_tty()
  return os.getenv("TERM") and os.getenv("TERM") ~= "dumb" and sys.isatty(io.stderr)
end

-- Progress on stderr while tasks load (KernelBench level 3 takes minutes on a cold cache):
-- on a terminal one line rewritten in place ("[12/50] 41_GRUBidirectional.py"); otherwise a
-- line for each load that took a second or more, so logs show where the time went.
local function progress_meter()
  local tty, t0, last = is_tty(), nil, nil
  local wall = require("km.timing").wall
  local function finish_last()
    if last and not tty and wall() - t0 >= 1 then
      io.stderr:write(string.format("kmrun tasks: [%d/%d] %s: %.1f s\n", last[1], last[2], last[3], wall() - t0))
    end
  end
  return function(k, n, path)
    finish_last()
    if not k then
      if tty and last then io.stderr:write("\r\27[K") end
      last = nil
      return
    end
    last, t0 = { k, n, path }, wall()
    if tty then io.stderr:write(string.format("\r\27[K[%d/%d] loading %s", k, n, path)) end
  end
end

-- Builds the specs of problem files not yet kept on disk (km.task.kbtask.cached) in parallel child
-- processes (`kmrun tasks check --no-gpu`: loading fills the cache), up to a quarter of the
-- machine's cores and 8, when there are at least 4; the loads after read them from disk.
local function prebuild_specs(paths, progress)
  local cold = {}
  local kbtask = require "km.task.kbtask"
  for _, p in ipairs(paths) do if kbtask.is_problem(p) and not kbtask.cached(p) then cold[#cold + 1] = p end end
  if #cold < 4 or not package.km_exe or os.getenv("KM_SPEC_JOBS") == "1" then return end
  local cores = sys.cpu_count()
  local jobs = math.min(#cold, 8, tonumber(os.getenv("KM_SPEC_JOBS") or "") or math.max(1, cores // 4))
  if jobs < 2 then return end
  local pids = {}
  for j = 1, jobs do
    local groups = { by = {} }
    for k = j, #cold, jobs do groups.by[#groups.by + 1] = cold[k] end
    -- each child at one precision: the files' own tags say which
    local by_prec = {}
    for _, p in ipairs(groups.by) do
      local file, tag = p:match("^(.*%.py)#(%w+)$")
      tag = tag or "fp32"
      by_prec[tag] = by_prec[tag] or {}
      table.insert(by_prec[tag], file or p)
    end
    for prec, files in pairs(by_prec) do
      local argv = { package.km_exe, "tasks", "check", "--no-gpu", "--precision", prec }
      for _, f in ipairs(files) do argv[#argv + 1] = f end
      local pid = sys.spawn(argv, { env = { KM_SPEC_JOBS = "1" }, stdout = "null", stderr = "null" })
      if pid then pids[#pids + 1] = pid end
    end
  end
  -- wait for the children, showing how many specs are built
  local wall = require("km.timing").wall
  local t0, tty = wall(), is_tty()
  while true do
    local alive = 0
    for _, pid in ipairs(pids) do
      if sys.wait(pid) == false then alive = alive + 1 end -- true once reaped, nil after
    end
    local done = 0
    for _, p in ipairs(cold) do if kbtask.cached(p) then done = done + 1 end end
    if tty then
      io.stderr:write(string.format("\r\27[K[%d/%d] problem specs built (%d in parallel)", done, #cold, jobs))
    end
    if alive == 0 then break end
    sys.sleep(0.5)
  end
  if tty then io.stderr:write("\r\27[K") end
  if not tty then
    io.stderr:write(string.format("kmrun tasks: %d problem spec(s) built in %.1f s (%d in parallel)\n", #cold, wall() - t0, jobs))
  end
end

-- -> tasks, errors (tasks that did not load), empty (folders with no task in them);
-- or nil, message for a path that is not a folder, task or problem file. Progress goes to
-- stderr while they load.
local function collect(args, precision)
  local tasks, errors, empty = {}, {}, {}
  if #args == 0 then args = { "tasks" } end
  local kbtask = require "km.task.kbtask"
  local paths = {}
  for _, a in ipairs(args) do
    if is_task(a) then
      paths[#paths + 1] = kbtask.is_problem(a) and kbtask.key(a, precision) or a
    else
      if not A.is_dir(a) then
        local f = io.open(a, "rb")
        if f then f:close() return nil, a .. ": a file, but not a task: name a folder of tasks, a task folder, or a problem file (PROBLEM.py)" end
        return nil, a .. ": no such folder (nor a task folder or problem file)"
      end
      local list = task.entries(a, precision)
      for _, p in ipairs(list) do paths[#paths + 1] = p end
      if #list == 0 then empty[#empty + 1] = a .. ": no tasks found (no folder with a task.lua in it, no PROBLEM.py)" end
    end
  end
  local progress = progress_meter()
  prebuild_specs(paths, progress)
  for k, p in ipairs(paths) do
    progress(k, #paths, p)
    local t, err = task.load(p)
    if t then tasks[#tasks + 1] = t else errors[#errors + 1] = err end
  end
  progress(nil)
  return tasks, errors, empty
end

-- "2_foo" before "10_foo": names compared with their runs of digits as numbers
-- (KernelBench's problem files are numbered 1_ ... 100_).
local function natural_less(a, b) return task.natural_less(a.name, b.name) end

local function forms(t)
  local f = {}
  if t.description_text then f[#f + 1] = "description" end
  if t.math_text then f[#f + 1] = "math" end
  f[#f + 1] = "reference"
  return table.concat(f, "+")
end

local function check_one(t, arch)
  if t.reference.pytorch then return {} end -- a problem file: its spec loaded (km.task.kbtask)
  local nvrtc = require "km.nvrtc"
  local problems = {}
  local function chk(label, src, launch, defines)
    local prog, log = nvrtc.compile(src, { arch = arch, defines = defines, name = label .. ".cu" })
    if not prog then problems[#problems + 1] = label .. ": compile failed:\n" .. log return end
    local fn, err = sandbox.load(launch, label .. " launch")
    if not fn then problems[#problems + 1] = label .. ": " .. err return end
    for _, name in ipairs(sandbox.undefined_kernels(launch, prog.kernels)) do
      problems[#problems + 1] = string.format("%s: launch code calls k.%s, which the source does not define", label, name)
    end
  end
  chk("reference", t.reference.source_text, t.reference.launch_text)
  local st = task.starter(t)
  if st then
    chk("starter", st.source, st.launch, st.params)
    local ok, why = task.params_ok(t, st.params)
    if not ok then problems[#problems + 1] = "starter defaults: " .. why end
  end
  return problems
end

local function pct(x) return string.format("%.0f%%", 100 * x) end

-- Folders that held no task at all: one line each and nothing else (no empty tables, no
-- "0 task(s)" totals); true when that is all there was.
-- The errors as printed: without PyTorch, every problem file's "not importable" is one line
-- naming the Python tried and KM_PYTHON (km.task.kernelbench.fold_errors), not one per file.
local function shown(errors)
  local kept, line = require("km.task.kernelbench").fold_errors(errors)
  if not line then return errors end
  local out = {}
  for i, e in ipairs(kept) do out[i] = e end
  out[#out + 1] = line
  return out
end

-- Folders whose every task failed to load (problem files without PyTorch, say): the
-- errors alone, on stderr, and true (no empty table or total after them).
local function nothing(tasks, errors, empty)
  if #tasks == 0 and #errors > 0 then
    for _, e in ipairs(empty) do io.stderr:write("kmrun tasks: ", e, "\n") end
    for _, e in ipairs(shown(errors)) do io.stderr:write("invalid: ", e, "\n") end
    return true
  end
  if #tasks > 0 or #errors > 0 then
    for _, e in ipairs(empty) do io.stderr:write("kmrun tasks: ", e, "\n") end
    return false
  end
  for _, e in ipairs(empty) do print(e) end
  return true
end

local cmd, a = A.parse_sub(OVERVIEW, SUBS, arg)
if not cmd then return a end
local rest = a.dirs
if #rest == 0 then
  local f = io.open("tasks/.", "rb")
  if not f then
    io.stderr:write("kmrun tasks ", cmd, ": no folder named, and there is no ./tasks folder here (kmrun tasks ", cmd, " DIR)\n")
    return 2
  end
  f:close()
end
local arch, as_json, threshold, shingle = a.arch, a.json, a.threshold, a.shingle

if cmd == "list" then
  local tasks, errors, empty = collect(rest)
  if not tasks then io.stderr:write("kmrun tasks ", cmd, ": ", errors, "\n") return 2 end
  if nothing(tasks, errors, empty) then return 1 end
  table.sort(tasks, natural_less)
  local w = { name = 4, category = 8, forms = 5 }
  for _, t in ipairs(tasks) do
    w.name, w.category = math.max(w.name, #t.name), math.max(w.category, #tostring(t.category))
    w.forms = math.max(w.forms, #forms(t))
  end
  local line = string.format("%%-%ds  L%%-2s %%-%ds  %%-%ds  %%s", w.name, w.category, w.forms)
  for _, t in ipairs(tasks) do
    print(string.format(line, t.name, tostring(t.level), tostring(t.category), forms(t),
      #t.shapes == 1 and "1 shape" or (#t.shapes .. " shapes")))
  end
  for _, e in ipairs(shown(errors)) do io.stderr:write("invalid: ", e, "\n") end
  return #errors == 0 and 0 or 1
elseif cmd == "check" then
  -- an architecture NVRTC does not know would fail every task alike: say so once
  local nvrtc = require "km.nvrtc"
  local probe, plog = nvrtc.compile('extern "C" __global__ void k() {}', { arch = arch, cache = false })
  if not probe and tostring(plog):find("arch", 1, true) then
    io.stderr:write("kmrun tasks check: --arch: '", arch, "' is not an architecture this NVRTC (",
      tostring(nvrtc.version and nvrtc.version() or "?"), ") compiles for\n")
    return 2
  elseif not probe then -- nothing would compile here, whatever the tasks hold
    io.stderr:write("kmrun tasks check: NVRTC cannot compile here: ", (tostring(plog):match("[^\n]+") or "?"), "\n")
    return 2
  end
  local tasks, errors, empty = collect(rest, a.precision)
  if not tasks then io.stderr:write("kmrun tasks ", cmd, ": ", errors, "\n") return 2 end
  if nothing(tasks, errors, empty) then return 1 end
  local bad = #errors
  for _, e in ipairs(shown(errors)) do print("FAIL " .. e) end
  -- problem files' references run on the GPU where there is one (one judge, this process)
  local judge, no_run
  local timing = require "km.timing"
  local t0 = timing.wall()
  for _, t in ipairs(tasks) do
    if t.reference.pytorch and not judge and not no_run then
      if a.no_gpu then no_run = "--no-gpu"
      else judge, no_run = require("km.judge").new() end
      if not judge then no_run = no_run or "no GPU" end
    end
  end
  for _, t in ipairs(tasks) do
    local w0 = timing.wall()
    local problems = check_one(t, arch)
    if #problems == 0 and t.reference.pytorch and judge then
      local why, lost = judge:try_reference(t, 1)
      if why then problems[1] = "the reference does not run here: " .. why:gsub("\n", "\n  ") end
      if lost then judge = nil; no_run = "the GPU context was lost by " .. t.name end
    end
    if #problems == 0 then print(string.format("ok   %-40s %6.2f s", t.name, timing.wall() - w0))
    else
      bad = bad + 1
      print("FAIL " .. t.name)
      for _, p in ipairs(problems) do print("     " .. p:gsub("\n", "\n     ")) end
    end
  end
  print(string.format("%d task(s), %d failed, %.1f s", #tasks + #errors, bad, timing.wall() - t0))
  if no_run then print("problem files' references not run: " .. no_run) end
  return bad == 0 and 0 or 1
elseif cmd == "stats" then
  local dataset = require "km.data.dataset"
  local tasks, errors, empty = collect(rest)
  if not tasks then io.stderr:write("kmrun tasks ", cmd, ": ", errors, "\n") return 2 end
  if nothing(tasks, errors, empty) then return 1 end
  for _, e in ipairs(shown(errors)) do io.stderr:write("invalid: ", e, "\n") end
  local s = dataset.task_stats(tasks)
  if as_json then
    s.invalid = #errors
    io.stdout:write(require("km.json").encode(s), "\n")
  else
    io.stdout:write(dataset.format_stats(s))
    if #errors > 0 then io.stdout:write(string.format("%d invalid task(s) left out\n", #errors)) end
  end
  return #errors == 0 and 0 or 1
elseif cmd == "lint" then
  local lint = require "km.task.lint"
  local precisions = a.precision or { "fp32" }
  local results, bad = {}, 0
  local backend, no_gpu
  local seen_folder = {} -- a task folder has its own dtypes: linted once, whatever the precision
  local progress = progress_meter()
  for pi, prec in ipairs(precisions) do
    local tasks, errors, empty = collect(rest, prec)
    if not tasks then io.stderr:write("kmrun tasks lint: ", errors, "\n") return 2 end
    if pi == 1 and nothing(tasks, errors, empty) then return 1 end
    bad = bad + #errors
    for _, e in ipairs(shown(errors)) do io.stderr:write("invalid: ", e, "\n") end
    table.sort(tasks, natural_less)
    for k, t in ipairs(tasks) do
      if t.reference.pytorch or not seen_folder[t.dir] then
        seen_folder[t.dir] = true
        progress(k, #tasks, t.name .. "@" .. prec)
        local res = not a.no_cache and lint.cached(t) or nil
        if res and (a.cpu and res.where ~= "cpu") then res = nil end
        -- kept by content: another file with the same text may have made it
        if res then res.cached, res.task, res.path = true, t.name, t.path or t.dir end
        if not res then
          if not backend then backend, no_gpu = lint.backend { cpu = a.cpu } end
          local ok, r = pcall(lint.run, t, { backend = backend })
          if not ok then
            r = { task = t.name, path = t.path or t.dir, precision = t.reference.precision or "fp32", level = t.level,
              where = backend.where, shapes = #t.shapes, flags = {}, unchecked = { "lint failed: " .. tostring(r) } }
          elseif not r.context_lost and not lint.transient(r) then
            lint.put(t, r)
          end
          res = r
          if r.context_lost then backend = nil end -- a fresh judge (and context) for the next task
        end
        if t.reference.pytorch == nil then res.precision = "own" end
        results[#results + 1] = res
      end
    end
  end
  progress(nil)
  local flagged = 0
  for _, r in ipairs(results) do if lint.flagged(r) then flagged = flagged + 1 end end
  if a.json then
    io.stdout:write(lint.json(results, { flagged = flagged, invalid = bad, where = backend and backend.where or nil,
      no_gpu = no_gpu }), "\n")
  else
    io.stdout:write(lint.format(results))
    if no_gpu then
      local ran, kept = 0, 0
      for _, r in ipairs(results) do
        if r.cached then kept = kept + 1 elseif not r.machine then ran = ran + 1 end
      end
      local what = ran > 0 and ran .. " reference(s) ran on the CPU" or "no reference ran"
      if kept > 0 then what = what .. string.format(", %d result(s) kept from an earlier lint", kept) end
      print("no GPU here (" .. tostring(no_gpu) .. "): " .. what .. "; timing and CUDA-only references not checked")
    end
  end
  return (flagged == 0 and bad == 0) and 0 or 1
else -- dedup
  local dedup = require "km.data.dedup"
  local tasks, errors, empty = collect(rest)
  if not tasks then io.stderr:write("kmrun tasks ", cmd, ": ", errors, "\n") return 2 end
  if nothing(tasks, errors, empty) then return 1 end
  for _, e in ipairs(shown(errors)) do io.stderr:write("invalid: ", e, "\n") end
  local docs = {}
  for k, t in ipairs(tasks) do docs[k] = dedup.document(t, { shingle = shingle }) end
  local r = dedup.find(docs, { threshold = threshold })
  r.shingle = shingle or dedup.SHINGLE
  r.permutations = dedup.PERMUTATIONS
  if as_json then
    local json = require "km.json"
    r.pairs = json.array(r.pairs)
    r.clusters = json.array(r.clusters)
    r.categories = json.array(r.categories)
    for _, c in ipairs(r.categories) do c.members = json.array(c.members) end
    r.nearest = r.nearest or json.null
    io.stdout:write(json.encode(r), "\n")
    return #errors == 0 and 0 or 1
  end
  print(string.format("%d task(s), shingles of %d tokens, %d MinHash permutations, %d candidate pair(s) from LSH",
    r.tasks, r.shingle, r.permutations, r.candidates))
  if #r.pairs == 0 then
    print(string.format("no pairs at or above %.2f", threshold))
    if r.nearest then
      print(string.format("most similar pair: %s  %s  %.3f", r.nearest.a, r.nearest.b, r.nearest.similarity))
    end
  else
    print(string.format("%d pair(s) at or above %.2f (exact Jaccard; MinHash estimate beside it):", #r.pairs, threshold))
    for _, p in ipairs(r.pairs) do
      print(string.format("  %.3f  (est %.3f)  %-28s %s", p.similarity, p.estimate, p.a, p.b))
    end
  end
  for _, c in ipairs(r.clusters) do print("cluster: " .. table.concat(c, " ")) end
  print("template domination (largest cluster's share of its category):")
  for _, c in ipairs(r.categories) do
    local note = ""
    if c.largest >= 2 and c.share > 0.5 then note = "  <- dominated by one template"
    elseif c.largest >= 2 then note = "  (" .. table.concat(c.members, ", ") .. ")" end
    print(string.format("  %-16s %3d task(s)  largest cluster %d (%s)%s", c.category, c.tasks, c.largest, pct(c.share), note))
  end
  return #errors == 0 and 0 or 1
end
