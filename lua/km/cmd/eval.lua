-- kmrun eval TASK_DIR CANDIDATE_DIR [--json] [--seeds N] [--no-timing] [--timeout S] [--gpus I] [--sanitize]
-- Judges a candidate in an isolated GPU worker (a `kmrun serve`'s where one runs and matches;
-- the choice is km.serve.pool.judge_one's) and prints the verdict; without a GPU it
-- compiles the candidate, checks the kernels its launch code calls, and says so (as
-- strategies do). Slow one-time work (torch's import,
-- a spec built, NVRTC, baselines measured) is told on stderr as it happens (km.progress).
-- Exit status: 0 correct, 1 not correct (a compile error included), 2 usage or
-- infrastructure error, 3 no GPU: it compiles, its launch code loads and calls only kernels
-- the source defines; nothing was run.
local task = require "km.task"
local json = require "km.json"
local progress = require "km.progress"

local A = require "km.args"

local SPEC = A.spec {
  name = "kmrun eval",
  synopsis = "TASK_DIR CANDIDATE_DIR [options]",
  about = [[
Judges a candidate in an isolated GPU worker and prints the verdict. Without a GPU the
candidate is compiled (NVRTC, sm_90), its launch code loaded in the sandbox and the kernels
it calls looked up in the source: a compile error is a verdict (exit 1), launch code calling
a kernel the source does not define is launch_error (exit 1), and a candidate that passes
all three is 'compiled' (exit 3).]],
  positional = {
    { "task_dir", "TASK_DIR", "a task folder (task.lua, reference, shapes, tolerance), or a KernelBench\n" ..
        "problem file (PROBLEM.py: class Model, get_inputs, get_init_inputs)", required = true, type = "path" },
    { "cand_dir", "CANDIDATE_DIR", 'kernel.cu + launch.lua (+ params.lua), or "starter" for the task\'s own',
      required = true },
  },
  options = {
    { "json", nil, "print the whole verdict as JSON" },
    { "seeds", "N", "verify trials per shape (the last on a fresh seed each evaluation)", type = "positive", default = 3 },
    { "no-timing", nil, "check correctness only" },
    { "timeout", "S", "seconds before a hung candidate is stopped (default 120; --sanitize: its own)",
      type = "seconds" },
    { "gpus", "I", "the GPU to use (the first of a list)", type = "ints", aliases = { "gpu" }, default = { 0 } },
    { "precision", "P", "a problem file's precision: fp32, fp16 or bf16 (KernelBench's casts)",
      type = "choice", choices = { "fp32", "fp16", "bf16" } },
    { "no-energy", nil, "skip the energy pass (joules per call from NVML, a few hundred ms)" },
    { "no-server", nil, "judge in a worker of its own even where a `kmrun serve` runs on the GPU" },
    { "serve", nil, "judge through a `kmrun serve` on the GPU, starting one where none runs (it\n" ..
        "keeps torch imported for later kmrun evals, and stops after 30 min without work)" },
    { "sanitize", nil, "run it under compute-sanitizer memcheck, then racecheck (one seed,\n" ..
        "no timing): status out_of_bounds or race when they find something" },
    { "quiet", nil, "no progress lines on stderr (what a slow first run is doing: torch's\n" ..
        "import, a spec built, NVRTC, baselines measured); --json: none unless stderr is a terminal" },
    table.unpack(require("km.task.baseline").OPTIONS),
  },
  footer = "exit status: 0 correct, 1 not correct (a compile error included), 2 usage or infrastructure\n" ..
    "error, 3 no GPU: it compiles, its launch code loads and calls only kernels the source\n" ..
    "defines, but nothing was run",
}

local a, code = A.parse(SPEC, arg)
if not a then return code end
if a.serve and (a.no_server or a.sanitize) then return A.fail(SPEC, "--serve: not with " .. (a.no_server and "--no-server" or "--sanitize")) end
local pos = { a.task_dir, a.cand_dir }
if a.cand_dir ~= "starter" then
  local f = io.open(a.cand_dir, "rb")
  if not f then return A.fail(SPEC, "CANDIDATE_DIR: '" .. a.cand_dir .. "' no such folder") end
  f:close()
end
local opts = require("km.task.baseline").judge_opts(a, { seeds = a.seeds, energy = not a.no_energy })
if a.no_timing then opts.timing = false end
local as_json, gpu, sanitize = a.json, a.gpus[1], a.sanitize
local timeout, timeout_given = a.timeout or 120, a._given.timeout
-- progress on stderr, never stdout: work this process blocks on is told at once, a worker's
-- when it has run half a second. None with --quiet, nor with --json unless stderr is a
-- terminal (a program reading the verdict may have merged stderr into it).
local quiet = a.quiet or (as_json and not require("km.sys").isatty(io.stderr))
local printer = not quiet and progress.printer("kmrun eval", io.stderr) or nil
if printer then progress.sink(function(ev) printer.event(ev, 0) end) end
local on_progress = printer and function(ev) printer.event(ev) end

if sanitize then -- before anything is loaded: without the tool there is nothing to do
  local found, why = require("km.serve.sanitize").find()
  if not found then io.stderr:write("kmrun eval --sanitize: ", why, "\n") return 2 end
end

local kbtask = require "km.task.kbtask"
local problem = kbtask.is_problem(pos[1])
-- the task by its absolute path: the same spec-cache key here, in a worker of ours and in a
-- kmrun serve started elsewhere
pos[1] = require("km.sys").realpath(pos[1]) or pos[1]
if problem then
  pos[1] = kbtask.key(pos[1], a.precision)
else
  if a.precision then return A.fail(SPEC, "--precision applies to a problem file (PROBLEM.py)") end
  local d = io.open(pos[1] .. "/task.lua", "rb")
  if not d then return A.fail(SPEC, "TASK_DIR: '" .. pos[1] .. "' is neither a task folder nor a problem file (.py)") end
  d:close()
end

-- The task here, with lint's word on it (a flagged task: a warning, the verdict still given).
local function load_task()
  local lt, err = task.load(pos[1])
  if lt then require("km.task.lint").gate({ lt }, { who = "kmrun eval" }) end
  return lt, err
end
-- Loaded here where that needs no torch: a task folder, or a problem file whose spec is
-- cached. A spec not cached yet is built where torch is imported anyway: in the GPU worker
-- (which keeps it in the spec cache for this process to read), or here when there is none.
-- So one kmrun eval imports torch once.
local t, terr
if not problem or kbtask.cached(pos[1]) then
  t, terr = load_task()
  if not t then io.stderr:write("kmrun eval: ", terr, "\n") return 2 end
end
local cand, cerr
if pos[2] ~= "starter" then cand, cerr = task.candidate(pos[2])
elseif t then cand, cerr = task.starter(t)
else cerr = kbtask.name(pos[1]) .. " has no starter" end -- a problem file has none
if not cand then io.stderr:write("kmrun eval: ", cerr, "\n") return 2 end

local eval = require "km.serve.pool"
local v, why, hint
if sanitize then -- the sanitized runs are slow: their own default timeout (km.serve.sanitize)
  v, why = eval.sanitize(t or pos[1], cand, { gpu = gpu, timeout = timeout_given and timeout or nil })
  if not v then io.stderr:write("kmrun eval --sanitize: ", tostring(why), "\n") return 2 end
else
  opts.timeout = timeout
  -- served, a worker of its own, or compile-only: the pool's choice (km.serve.pool.judge_one)
  local how
  v, how = eval.judge_one(t or pos[1], cand, opts, { gpu = gpu, timeout = timeout,
    serve = a.no_server and "never" or a.serve and "start" or "ask",
    torch_ahead = problem or require("km.task.baseline").needs_torch({ t }, a),
    on_progress = on_progress, tick = printer and printer.tick, load_task = load_task,
    -- a server left running is told of even with --json (stderr; --quiet alone hides it),
    -- and no GPU always
    say = function(line, kind)
      if kind == "always" or not quiet or (kind == "started" and not a.quiet) then io.stderr:write("kmrun eval: ", line, "\n") end
    end })
  if not v then io.stderr:write("kmrun eval: ", tostring(how), "\n") return 2 end
  if how.task then t = how.task end
  if not quiet then hint = how.hint end
end
-- a spec the worker built: read back from the spec cache (no torch), for lint's word on it
if not t and kbtask.cached(pos[1]) then t = load_task() end
if printer then printer.close() end
if hint then io.stderr:write(hint, "\n") end
local name = t and t.name or kbtask.name(pos[1])
if as_json then
  print(json.encode(v, { pretty = true, nan = "null" }))
else
  print(string.format("%s  %s  %s", v.status, name, cand.name or pos[2]))
  if v.timing and v.timing.candidate then
    -- each speedup beside the time it was divided by (km.feedback.speed)
    print(string.format("time %s; roofline %.0f%%", require("km.feedback").speed(v), 100 * ((v.roofline or {}).fraction or 0)))
    local parts = {}
    for k, why in pairs(v.baselines and v.baselines.errors or {}) do parts[#parts + 1] = k .. ": not measured (" .. tostring(why) .. ")" end
    if #parts > 0 then print("baselines: " .. table.concat(parts, "  ")) end
  end
  print(v.feedback or "")
end
-- the exit status is the verdict's row's (km.statuses): correct 0, error 2, compiled 3, else 1
return require("km.statuses").prop(v.status, "exit") or 1
