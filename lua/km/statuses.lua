-- km.statuses — every status kmrun names, one row each: the judge's verdicts, the rounds
-- that produced no candidate, the compile-only verdict and the episode's store statuses.
-- km.verdict owns it (and re-exports it as verdict.statuses); everything that asks "what
-- is this status" asks here: the judge, km.run.model, the ctx, the sweep, guidance, the
-- report, the dataset tools and the commands. Adding a status is adding a row.
--
--   local statuses = require "km.statuses"
--   statuses.get("mismatch").stage           -- "verify"
--   statuses.failure("compiled")             -- false: compile-only, not a failure
--   statuses.names("judge")                  -- the judge's statuses, in the order a candidate meets them
--   statuses.add { name = "x", stage = "verify", failure = true, meaning = "..." }
--
-- A row's properties (docs/eval.md, "Statuses", is the same table in words):
--   name       the status as stored and compared
--   stage      where it arises: compile, verify, measure (the judge's stages), model (a round
--              whose reply held no candidate), run (kmrun or the task failed), episode (a
--              store status only an episode has)
--   colour     its fill in the report's per-task map (nil: the map's grey for "other")
--   failure    counts as a failure (the dataset's failure buckets, the episode's `reason`)
--   fatal      the episode cannot go on after it (the repair loop ends without a candidate)
--   stops      a repair loop stops here with its candidate (nothing more to learn)
--   meaning    one line
-- and the flags some readers select by:
--   judge      the judge can give it (km.verdict.finish accepts it); `error` is one too
--   numeric    the output's values are wrong (the dataset's "numeric" bucket)
--   guide      a guidance file's `statuses:` line may name it
--   ends_as    the episode's store status when an episode's final verdict is this one
--              (nil: "failed")
--   episode    an episode's store status
--   unfinished the episode has not finished (the report leaves it out, counted apart)
--   rerun      a resumed sweep runs the episode again
--   exit       `kmrun eval`'s exit status for a verdict of this status (nil: 1)
local M = {}

local ipairs, pairs, type, error, tostring = ipairs, pairs, type, error, tostring

M.STAGES = { "compile", "verify", "measure", "model", "run", "episode" }
local STAGE = {}
for _, s in ipairs(M.STAGES) do STAGE[s] = true end

-- In the order a candidate meets them; the judge's first, then the rest.
M.ROWS = {
  { name = "compile_error", stage = "compile", colour = "#e6550d", failure = true, judge = true, guide = true,
    meaning = "the kernel does not compile (NVRTC's log and the offending lines), or the candidate is over the size limit" },
  { name = "load_error", stage = "compile", colour = "#fd8d3c", failure = true, judge = true, guide = true,
    meaning = "the module does not load, or launch.lua does not load in the sandbox" },
  { name = "launch_error", stage = "verify", colour = "#fdae6b", failure = true, judge = true, guide = true,
    meaning = "the launch raised: bad grid, too much shared memory, wrong arguments, a sandbox violation or budget" },
  { name = "timeout", stage = "verify", colour = "#7b4173", failure = true, judge = true, guide = true,
    meaning = "the candidate did not finish within the time limit; the worker was stopped" },
  { name = "crashed", stage = "verify", colour = "#843c39", failure = true, judge = true, guide = true,
    meaning = "a fatal CUDA error, or the worker died: the context is gone" },
  { name = "wrong_shape", stage = "verify", colour = "#bd9e39", failure = true, judge = true, guide = true,
    meaning = "launch code returned something that is not an output buffer of the right dtype and size" },
  { name = "mismatch", stage = "verify", colour = "#d62728", failure = true, judge = true, guide = true, numeric = true,
    meaning = "the output differs from the reference beyond the task's tolerance" },
  { name = "nan_inf", stage = "verify", colour = "#ad494a", failure = true, judge = true, guide = true, numeric = true,
    meaning = "every wrong element of the output is NaN or Inf" },
  { name = "inputs_modified", stage = "verify", colour = "#8c6d31", failure = true, judge = true, guide = true,
    meaning = "the candidate wrote to its inputs, or to state the judge relies on (the reference's, the timing gate's page)" },
  { name = "out_of_bounds", stage = "verify", colour = "#a55194", failure = true, judge = true, guide = true,
    meaning = "a guard zone around a buffer changed" },
  { name = "race", stage = "verify", colour = "#ce6dbd", failure = true, judge = true, guide = true,
    meaning = "the output depends on the order threads ran in" },
  { name = "too_fast", stage = "measure", failure = true, judge = true, guide = true,
    meaning = "faster than 0.7x the bound the task's bytes and FLOPs allow: work was skipped" },
  { name = "varying_work", stage = "measure", failure = true, judge = true, guide = true,
    meaning = "the launch code launched other kernels, grids, blocks or shared memory on some timed calls than on the first" },
  { name = "correct", stage = "measure", colour = "#2a9d5c", failure = false, stops = true, judge = true, guide = true,
    ends_as = "correct", episode = true, exit = 0,
    meaning = "verified on every shape and seed, and timed" },
  { name = "error", stage = "run", colour = "#525252", failure = true, judge = true, episode = true, exit = 2,
    meaning = "the task or kmrun failed (a reference that does not build, an internal error), not the candidate" },
  { name = "too_slow", stage = "measure", failure = false, guide = true,
    meaning = "a correct kernel well short of the reference or its roofline (a strategy's, for guidance)" },
  { name = "no_code", stage = "model", colour = "#969696", failure = true, guide = true,
    meaning = "the model's reply held no candidate" },
  { name = "truncated", stage = "model", failure = true,
    meaning = "the model's reply was cut off at its length limit before the candidate was complete" },
  { name = "model_error", stage = "model", failure = true, fatal = true, ends_as = "model_error", episode = true,
    rerun = true, meaning = "the model call failed (the code says how); the episode ends" },
  { name = "compiled", stage = "compile", colour = "#9ecae1", failure = false, stops = true, ends_as = "compiled",
    episode = true, exit = 3, meaning = "the kernel compiles and launch.lua loads; not run (no GPU)" },
  { name = "not_judged", stage = "run", failure = false,
    meaning = "a service's request its deadline passed before it was judged (cause infra: says nothing of the candidate)" },
  { name = "no_correct_candidate", stage = "run", failure = true,
    meaning = "none of the candidates a strategy's pick weighed was correct (km.run.steps.pick)" },
  { name = "failed", stage = "episode", failure = true, episode = true,
    meaning = "the episode ended on a verdict other than correct, compiled or model_error" },
  { name = "running", stage = "episode", failure = false, episode = true, unfinished = true,
    meaning = "the episode is running (or was killed while it ran)" },
  { name = "interrupted", stage = "episode", failure = false, episode = true, unfinished = true, rerun = true,
    meaning = "Ctrl-C or SIGTERM stopped the run while the episode ran; the same command resumes it" },
  { name = "abandoned", stage = "episode", failure = false, episode = true, rerun = true,
    meaning = "a killed sweep left the episode running; a resumed sweep marks it so and runs it again" },
}

local BY_NAME = {}

local FIELDS = { name = "string", stage = "string", colour = "string", failure = "boolean", fatal = "boolean",
  stops = "boolean", meaning = "string", judge = "boolean", numeric = "boolean", guide = "boolean",
  ends_as = "string", episode = "boolean", unfinished = "boolean", rerun = "boolean", exit = "number" }

local function check(row)
  if type(row) ~= "table" then error("km.statuses: a row is a table", 3) end
  for k, v in pairs(row) do
    if not FIELDS[k] then error("km.statuses: unknown property '" .. tostring(k) .. "'", 3) end
    if type(v) ~= FIELDS[k] then error("km.statuses: property '" .. k .. "' is a " .. FIELDS[k], 3) end
  end
  if not row.name or not row.name:match("^[a-z_]+$") then error("km.statuses: a row needs a name of a-z and _", 3) end
  if not STAGE[row.stage] then error("km.statuses: '" .. row.name .. "': unknown stage '" .. tostring(row.stage) .. "'", 3) end
  if type(row.failure) ~= "boolean" then error("km.statuses: '" .. row.name .. "': say whether it is a failure", 3) end
  if type(row.meaning) ~= "string" then error("km.statuses: '" .. row.name .. "': a row needs a meaning", 3) end
end

for _, row in ipairs(M.ROWS) do
  check(row)
  BY_NAME[row.name] = row
end

-- Registers a status (raises on a malformed row or a name already taken).
function M.add(row)
  check(row)
  if BY_NAME[row.name] then error("km.statuses: '" .. row.name .. "' exists", 2) end
  M.ROWS[#M.ROWS + 1] = row
  BY_NAME[row.name] = row
  return row
end

-- The row of a status, or nil.
function M.get(name) return BY_NAME[name] end

-- A property of a status (nil for an unknown status).
function M.prop(name, key)
  local row = BY_NAME[name]
  return row and row[key]
end

-- The names whose rows have `flag` (a property name, truthy) or, with a function, pass it.
function M.names(flag)
  local out = {}
  for _, row in ipairs(M.ROWS) do
    local keep
    if type(flag) == "function" then keep = flag(row) else keep = row[flag] end
    if keep then out[#out + 1] = row.name end
  end
  return out
end

-- name -> true for the rows that have `flag`.
function M.set(flag)
  local out = {}
  for _, n in ipairs(M.names(flag)) do out[n] = true end
  return out
end

-- Counts as a failure; an unknown status does (what no row vouches for is not a success).
function M.failure(name)
  local row = BY_NAME[name]
  return row == nil or row.failure
end

-- The episode's store status for its final verdict.
function M.episode_status(name)
  return M.prop(name, "ends_as") or "failed"
end

return M
