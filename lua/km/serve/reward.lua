-- km.serve.reward — a verdict's reward and its parts (docs/service.md, "Rewards").
--
--   local reward = require "km.serve.reward"
--   local preset, why = reward.preset { preset = "fast_p", p = 1.0 }   -- or "fast_p"
--   local r, parts = reward.of(verdict, preset)   -- r: number, or nil where the cause is infra
--
-- The parts (reward_components) travel beside the scalar, so a trainer can shape its own:
-- format (a candidate was found in the reply), compiled, correct, checks_passed/checks_total
-- (the judge's comparisons run), speedup_eager, speedup_compile (over torch.compile),
-- speedup (the verdict's headline one, over `speedup_over`), roofline (fraction of the bound).
-- A preset is a named formula over the parts; every preset gives nil for an infrastructure
-- verdict (a trainer masks it) and 0 for a task `kmrun tasks lint` flagged (its verdicts
-- prove little). Without a GPU a verdict is compile-only: correct and the speedups are 0.
local type, tonumber, tostring, pairs, ipairs, math = type, tonumber, tostring, pairs, ipairs, math

local M = {}

local function num(x) return type(x) == "number" and x == x and x or nil end

-- The parts of verdict v (v.format_ok false: no candidate was found in a completion).
function M.components(v)
  local status = v.status
  local format = v.format_ok ~= false
  local compile_stage = status == "compile_error" or (status == "load_error" and not v.kernels) or status == "no_code"
  local passed, total = 0, 0
  for _, c in ipairs(type(v.checks) == "table" and v.checks or {}) do
    total = total + 1
    if c.ok then passed = passed + 1 end
  end
  local correct = status == "correct"
  return {
    format = format and 1 or 0,
    compiled = (format and not compile_stage and status ~= "not_judged") and 1 or 0,
    correct = correct and 1 or 0,
    checks_passed = passed, checks_total = total,
    speedup = correct and num(v.speedup) or nil, speedup_over = correct and v.speedup_over or nil,
    speedup_eager = correct and num(v.speedup_eager) or nil,
    speedup_compile = correct and num(v.speedup_compile) or nil,
    roofline = correct and type(v.roofline) == "table" and num(v.roofline.fraction) or nil,
  }
end

-- The presets: name -> { params = defaults, about = the formula in words, f(parts, params) }.
M.PRESETS = {
  fast_p = { params = { p = 1.0 },
    about = "1 if correct and speedup over eager (else the verdict's speedup) > p, else 0 (KernelBench's fast_p)",
    f = function(c, o)
      local s = c.speedup_eager or c.speedup or 0
      return (c.correct == 1 and s > o.p) and 1 or 0
    end },
  correct_speedup = { params = { cap = 10 },
    about = "0.3 * correct + correct * min(speedup, cap)",
    f = function(c, o)
      return 0.3 * c.correct + c.correct * math.min(c.speedup_eager or c.speedup or 0, o.cap)
    end },
  weighted = { params = { w_compile = 0.1, w_correct = 0.3, w_perf = 0.6, cap = 4 },
    about = "w_compile * compiled + w_correct * correct + w_perf * correct * min(speedup, cap) / cap",
    f = function(c, o)
      local perf = c.correct * math.min(c.speedup_eager or c.speedup or 0, o.cap) / o.cap
      return o.w_compile * c.compiled + o.w_correct * c.correct + o.w_perf * perf
    end },
}
M.DEFAULT = "weighted"

-- A request's reward choice ("name" or { preset = name, param = number, ... }; nil: the
-- default) -> { name, params } or nil, why.
function M.preset(choice)
  if choice == nil then choice = M.DEFAULT end
  if type(choice) == "string" then choice = { preset = choice } end
  if type(choice) ~= "table" then return nil, "reward: a preset name or { preset = name, ... }" end
  local name = choice.preset or M.DEFAULT
  local p = M.PRESETS[name]
  if not p then
    local names = {}
    for k in pairs(M.PRESETS) do names[#names + 1] = k end
    table.sort(names)
    return nil, "reward: no preset '" .. tostring(name) .. "' (" .. table.concat(names, ", ") .. ")"
  end
  local params = {}
  for k, d in pairs(p.params) do
    local x = choice[k]
    if x ~= nil and not tonumber(x) then return nil, "reward: " .. k .. " is a number" end
    params[k] = x ~= nil and tonumber(x) or d
  end
  return { name = name, params = params }
end

-- The reward of verdict v under preset (M.preset's) -> reward | nil (infra), parts.
function M.of(v, preset)
  local parts = M.components(v)
  if v.cause == "infra" then return nil, parts end
  if v.task_flag then return 0, parts end
  local r = M.PRESETS[preset.name].f(parts, preset.params)
  return r, parts
end

return M
