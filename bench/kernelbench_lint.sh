#!/bin/bash
# bench/kernelbench_lint.sh KB_DIR [BUILD] [OUT.md] — kmrun tasks lint over KernelBench's
# levels 1-3 at fp32, fp16 and bf16 on a GPU host (references run through the judge on the
# GPU, and timed), then a markdown table in OUT.md (default /tmp/kernelbench_lint.md): per
# level and precision, the problems linted and flagged, the count per reason, and the names.
# KB_DIR is a KernelBench checkout's KernelBench/ folder (level1..3), never copied into this
# repository. Needs a python with torch (KM_PYTHON, else python3); results are kept in
# KM_LINT_DIR (default ~/.cache/kmrun/lint), so a second run only prints. Each level is
# capped by LEVEL_S seconds (default 3000). Exit status 2 without KB_DIR, 3 where there is
# no GPU, else 0 (flagged problems are the result, not a failure).
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
[ $# -ge 1 ] || { echo "usage: bench/kernelbench_lint.sh KB_DIR [BUILD] [OUT.md]" >&2; exit 2; }
KB=$1
B=${2:-build}
OUT=${3:-/tmp/kernelbench_lint.md}
"$B/kmrun" bench/need_gpu.lua "$0" || exit $?
[ -d "$KB/level1" ] || { echo "bench/kernelbench_lint.sh: $KB/level1: no such folder (KB_DIR is a checkout's KernelBench/ folder)" >&2; exit 2; }
export KM_PYTHON=${KM_PYTHON:-python3}
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
for L in 1 2 3; do
  s=$(date +%s)
  timeout "${LEVEL_S:-3000}" "$B/kmrun" tasks lint "$KB/level$L" --precision fp32,fp16,bf16 --json \
    > "$T/level$L.json" 2> "$T/level$L.err"
  echo "level $L: kmrun tasks lint exit $?, $(( $(date +%s) - s )) s"; grep -v -i warning "$T/level$L.err" | tail -5
done
cat > "$T/table.lua" <<'LUA'
-- the markdown table from the JSON kmrun tasks lint wrote for each level
local json = require "km.json"
local dir, out = arg[1], arg[2]
local lint = require "km.lint"
local lines = { "# kmrun tasks lint over KernelBench levels 1-3", "",
  "Measured " .. os.date("!%Y-%m-%d") .. " on " .. (arg[3] or "?") .. " (bench/kernelbench_lint.sh).", "",
  "| level | precision | linted | flagged | by reason | flagged problems |", "| --- | --- | --- | --- | --- | --- |" }
for level = 1, 3 do
  local f = io.open(dir .. "/level" .. level .. ".json")
  local r = f and json.decode(f:read("a"))
  if f then f:close() end
  for _, prec in ipairs { "fp32", "fp16", "bf16" } do
    local n, names, by = 0, {}, {}
    for _, res in ipairs(r and r.results or {}) do
      if res.precision == prec then
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
for _, row in ipairs(lint.REASONS) do lines[#lines + 1] = "- **" .. row.short .. "**: " .. row.text end
local o = assert(io.open(out, "w"))
o:write(table.concat(lines, "\n"), "\n")
o:close()
print(table.concat(lines, "\n"))
LUA
"$B/kmrun" "$T/table.lua" "$T" "$OUT" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
echo "written: $OUT (JSON per level in $T)"
