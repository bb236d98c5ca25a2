-- kmrun eval TASK_DIR CANDIDATE_DIR [--json] [--seeds N] [--no-timing] [--timeout S] [--gpu I] [--sanitize]
-- Judges a candidate in an isolated GPU worker and prints the verdict.
-- Exit status: 0 correct, 1 not correct, 2 usage or infrastructure error (no GPU included).
local task = require "km.task"
local json = require "km.json"

local USAGE = [[
usage: kmrun eval TASK_DIR CANDIDATE_DIR [options]
  TASK_DIR        a task folder (task.lua, reference, shapes, tolerance)
  CANDIDATE_DIR   kernel.cu + launch.lua (+ params.lua), or "starter" for the task's own
options:
  --json          print the whole verdict as JSON
  --seeds N       seeds per shape (default 3)
  --no-timing     check correctness only
  --timeout S     seconds before a hung candidate is stopped (default 120)
  --gpu I         the GPU to use (default 0)
  --no-energy     skip the energy pass (joules per call from NVML, a few hundred ms)
  --sanitize      run it under compute-sanitizer memcheck, then racecheck (one seed,
                  no timing): status out_of_bounds or race when they find something
exit status: 0 correct, 1 not correct, 2 usage or infrastructure error
]]

local pos, opts = {}, { seeds = 3, energy = true }
local as_json, gpu, timeout, sanitize, timeout_given = false, 0, 120, false, false
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--json" then as_json = true
  elseif a == "--no-timing" then opts.timing = false
  elseif a == "--no-energy" then opts.energy = false
  elseif a == "--seeds" then opts.seeds = tonumber(arg[i + 1]); i = i + 1
  elseif a == "--timeout" then timeout, timeout_given = tonumber(arg[i + 1]), true; i = i + 1
  elseif a == "--gpu" then gpu = tonumber(arg[i + 1]); i = i + 1
  elseif a == "--sanitize" then sanitize = true
  elseif a == "-h" or a == "--help" then io.stdout:write(USAGE) return 0
  elseif a:sub(1, 2) == "--" then io.stderr:write("kmrun eval: unknown option ", a, "\n", USAGE) return 2
  else pos[#pos + 1] = a end
  i = i + 1
end
if #pos ~= 2 or not opts.seeds or not timeout or not gpu then io.stderr:write(USAGE) return 2 end

if sanitize then -- before anything is loaded: without the tool there is nothing to do
  local found, why = require("km.sanitize").find()
  if not found then io.stderr:write("kmrun eval --sanitize: ", why, "\n") return 2 end
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
    print(string.format("time %.4f ms  reference %.4f ms  speedup %.2fx  roofline %.0f%%",
      v.timing.candidate.median, v.timing.reference.median, v.speedup or 0, 100 * ((v.roofline or {}).fraction or 0)))
  end
  print(v.feedback or "")
end
if v.status == "error" then return 2 end
return v.status == "correct" and 0 or 1
