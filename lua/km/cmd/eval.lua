-- kmrun eval TASK_DIR CANDIDATE_DIR [--json] [--seeds N] [--no-timing] [--timeout S] [--gpus I] [--sanitize]
-- Judges a candidate in an isolated GPU worker and prints the verdict.
-- Exit status: 0 correct, 1 not correct, 2 usage or infrastructure error (no GPU included).
local task = require "km.task"
local json = require "km.json"

local A = require "km.args"

local SPEC = A.spec {
  name = "kmrun eval",
  synopsis = "TASK_DIR CANDIDATE_DIR [options]",
  about = "Judges a candidate in an isolated GPU worker and prints the verdict.",
  positional = {
    { "task_dir", "TASK_DIR", "a task folder (task.lua, reference, shapes, tolerance), or a KernelBench\n" ..
        "problem file (PROBLEM.py: class Model, get_inputs, get_init_inputs)", required = true, type = "path" },
    { "cand_dir", "CANDIDATE_DIR", 'kernel.cu + launch.lua (+ params.lua), or "starter" for the task\'s own',
      required = true },
  },
  options = {
    { "json", nil, "print the whole verdict as JSON" },
    { "seeds", "N", "seeds per shape", type = "positive", default = 3 },
    { "no-timing", nil, "check correctness only" },
    { "timeout", "S", "seconds before a hung candidate is stopped (default 120; --sanitize: its own)",
      type = "seconds" },
    { "gpus", "I", "the GPU to use (the first of a list)", type = "ints", aliases = { "gpu" }, default = { 0 } },
    { "precision", "P", "a problem file's precision: fp32, fp16 or bf16 (KernelBench's casts)",
      type = "choice", choices = { "fp32", "fp16", "bf16" } },
    { "no-energy", nil, "skip the energy pass (joules per call from NVML, a few hundred ms)" },
    { "sanitize", nil, "run it under compute-sanitizer memcheck, then racecheck (one seed,\n" ..
        "no timing): status out_of_bounds or race when they find something" },
    table.unpack(require("km.baseline").OPTIONS),
  },
  footer = "exit status: 0 correct, 1 not correct, 2 usage or infrastructure error",
}

local a, code = A.parse(SPEC, arg)
if not a then return code end
local pos = { a.task_dir, a.cand_dir }
if a.cand_dir ~= "starter" then
  local f = io.open(a.cand_dir, "rb")
  if not f then return A.fail(SPEC, "CANDIDATE_DIR: '" .. a.cand_dir .. "' no such folder") end
  f:close()
end
local opts = require("km.baseline").judge_opts(a, { seeds = a.seeds, energy = not a.no_energy })
if a.no_timing then opts.timing = false end
local as_json, gpu, sanitize = a.json, a.gpus[1], a.sanitize
local timeout, timeout_given = a.timeout or 120, a._given.timeout

if sanitize then -- before anything is loaded: without the tool there is nothing to do
  local found, why = require("km.sanitize").find()
  if not found then io.stderr:write("kmrun eval --sanitize: ", why, "\n") return 2 end
end

local kbtask = require "km.kbtask"
if kbtask.is_problem(pos[1]) then
  pos[1] = kbtask.key(pos[1], a.precision)
else
  if a.precision then return A.fail(SPEC, "--precision applies to a problem file (PROBLEM.py)") end
  local d = io.open(pos[1] .. "/task.lua", "rb")
  if not d then return A.fail(SPEC, "TASK_DIR: '" .. pos[1] .. "' is neither a task folder nor a problem file (.py)") end
  d:close()
end
local t, err = task.load(pos[1])
if not t then io.stderr:write("kmrun eval: ", err, "\n") return 2 end
local cand, cerr
if pos[2] == "starter" then cand, cerr = task.starter(t)
else cand, cerr = task.candidate(pos[2]) end
if not cand then io.stderr:write("kmrun eval: ", cerr, "\n") return 2 end

local eval = require "km.eval"
local v, why
if sanitize then -- the sanitized runs are slow: their own default timeout (km.sanitize)
  v, why = eval.sanitize(t, cand, { gpu = gpu, timeout = timeout_given and timeout or nil })
  if not v then io.stderr:write("kmrun eval --sanitize: ", tostring(why), "\n") return 2 end
else
  local pool
  pool, why = eval.pool { gpus = { gpu }, timeout = timeout }
  if not pool then io.stderr:write("kmrun eval: no GPU to evaluate on: ", tostring(why), "\n") return 2 end
  opts.timeout = timeout
  v = pool:eval(t, cand, opts)
  pool:close()
end
if as_json then
  print(json.encode(v, { pretty = true, nan = "null" }))
else
  print(string.format("%s  %s  %s", v.status, t.name, cand.name or pos[2]))
  if v.timing and v.timing.candidate then
    print(string.format("time %.4f ms  reference %.4f ms  speedup %.2fx over %s  roofline %.0f%%",
      v.timing.candidate.median, v.timing.reference.median, v.speedup or 0,
      v.speedup_over == "pytorch_eager" and "PyTorch eager" or "the CUDA reference", 100 * ((v.roofline or {}).fraction or 0)))
    local parts = {}
    if v.timing.eager then parts[#parts + 1] = string.format("eager %.4f ms (%.2fx)", v.timing.eager.median, v.speedup_eager) end
    if v.timing.compile then
      parts[#parts + 1] = string.format("torch.compile[%s] %.4f ms (%.2fx)", v.compile_mode or "?", v.timing.compile.median, v.speedup_compile)
    end
    if v.speedup_cuda_reference and v.speedup_over ~= "cuda_reference" then
      parts[#parts + 1] = string.format("CUDA reference %.4f ms (%.2fx)", v.timing.reference.median, v.speedup_cuda_reference)
    end
    for k, why in pairs(v.baselines and v.baselines.errors or {}) do parts[#parts + 1] = k .. ": not measured (" .. tostring(why) .. ")" end
    if #parts > 0 then print("baselines: " .. table.concat(parts, "  ")) end
  end
  print(v.feedback or "")
end
if v.status == "error" then return 2 end
return v.status == "correct" and 0 or 1
