-- bench/kernelbench_lint_table.lua DIR OUT.md [GPU] [JOBS] — the markdown table of
-- bench/kernelbench_lint.sh: DIR/level<L>/<problem>.json hold what `kmrun tasks lint --json`
-- printed for one problem (empty where the deadline or a crash cut it short; its .err beside
-- it says why). Per level and precision: problems linted and flagged, the count per reason,
-- the flagged names; then per level the problems not linted, or linted with a check left
-- undone (a result's `unchecked`, e.g. out of GPU memory) and nothing flagged: never counted
-- as passing.
local json = require "km.json"
local lint = require "km.task.lint"
local sys = require "km.sys"
local dir, out, gpu, jobs = arg[1], arg[2], arg[3], arg[4]
if dir == "-h" or dir == "--help" then
  print("usage: kmrun bench/kernelbench_lint_table.lua DIR OUT.md [GPU] [JOBS]\n"
    .. "The table of bench/kernelbench_lint.sh from DIR/level<L>/<problem>.json (kmrun tasks lint --json).")
  os.exit(0)
end
if not dir or not out or dir:match("^%-") then
  io.stderr:write("usage: kmrun bench/kernelbench_lint_table.lua DIR OUT.md [GPU] [JOBS]\n")
  os.exit(2)
end

local slurp = require("km.testing").read

-- one level: the results of every problem that finished, and the names of those that did not
local function read_level(level)
  local results, missing = {}, {}
  local names = sys.readdir(dir .. "/level" .. level) or {}
  table.sort(names)
  for _, name in ipairs(names) do
    local problem = name:match("^(.*)%.err$")
    if problem then
      local text = slurp(dir .. "/level" .. level .. "/" .. problem .. ".json")
      local ok, r = pcall(json.decode, text or "")
      if ok and type(r) == "table" and r.results and #r.results > 0 then
        for _, res in ipairs(r.results) do results[#results + 1] = res end
      else
        local why = (slurp(dir .. "/level" .. level .. "/" .. name) or ""):match("([^\n]+)\n?$") or "no output"
        missing[#missing + 1] = problem .. " (" .. why:sub(1, 80) .. ")"
      end
    end
  end
  return results, missing
end

local lines = { "# kmrun tasks lint over KernelBench levels 1-3", "",
  "Measured " .. os.date("!%Y-%m-%d") .. " on " .. (gpu or "?") .. " (bench/kernelbench_lint.sh, "
    .. (jobs or "?") .. " problems at a time on the one GPU).", "",
  "| level | precision | linted | flagged | by reason | flagged problems |", "| --- | --- | --- | --- | --- | --- |" }
local not_linted = {}
for level = 1, 3 do
  local results, missing = read_level(level)
  not_linted[level] = missing
  for _, prec in ipairs { "fp32", "fp16", "bf16" } do
    local n, names, by = 0, {}, {}
    for _, res in ipairs(results) do
      if res.precision == prec and not lint.flagged(res) and #(res.unchecked or {}) > 0 then
        missing[#missing + 1] = res.task .. "@" .. prec .. " (" .. tostring(res.unchecked[1]):gsub("%s+", " "):sub(1, 80) .. ")"
      elseif res.precision == prec then
        n = n + 1
        if lint.flagged(res) then
          names[#names + 1] = res.task
          for _, why in ipairs(lint.reasons(res)) do by[why] = (by[why] or 0) + 1 end
        end
      end
    end
    local reasons = {}
    for _, row in ipairs(lint.REASONS) do
      if by[row.key] then reasons[#reasons + 1] = row.short .. " " .. by[row.key] end
    end
    lines[#lines + 1] = string.format("| %d | %s | %d | %d | %s | %s |", level, prec, n, #names,
      table.concat(reasons, ", "), table.concat(names, ", "))
  end
end
lines[#lines + 1] = ""
for level = 1, 3 do
  local m = not_linted[level]
  lines[#lines + 1] = string.format("Not linted, level %d: %s", level, #m == 0 and "none" or #m .. ": " .. table.concat(m, "; "))
  lines[#lines + 1] = ""
end
for _, row in ipairs(lint.REASONS) do lines[#lines + 1] = "- **" .. row.short .. "**: " .. row.text end
local o = assert(io.open(out, "w"))
o:write(table.concat(lines, "\n"), "\n")
o:close()
print(table.concat(lines, "\n"))
