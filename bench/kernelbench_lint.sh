#!/bin/bash
# bench/kernelbench_lint.sh KB_DIR [BUILD] [OUT.md] — kmrun tasks lint over KernelBench's
# levels 1-3 at fp32, fp16 and bf16 on a GPU host (references run through the judge on the
# GPU, and timed), then a markdown table in OUT.md (default /tmp/kernelbench_lint.md): per
# level and precision, the problems linted and flagged, the count per reason (km.task.lint's
# REASONS, the sample estimate of a loss's one element among them), and the names.
# KB_DIR is a KernelBench checkout's KernelBench/ folder (level1..3), never copied into this
# repository. Needs a python with torch (KM_PYTHON, else python3); results are kept in
# KM_LINT_DIR (default ~/.cache/kmrun/lint), so a second run only prints; they are keyed by
# km.task.lint's version, so a run after a check was added or changed lints every problem again.
# One `kmrun tasks lint` per problem file, JOBS at a time (default 8; level 3 first, the
# slowest), then those that ran out of GPU memory again RETRY_JOBS at a time (default 2), all
# under one deadline of DEADLINE_S seconds (default 3000): a problem not finished by then is
# listed as not linted, never counted as passing. Exit status 2 without
# KB_DIR, 3 where there is no GPU, else 0 (flagged problems are the result, not a failure).
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
export B T KM_END=$(( $(date +%s) + ${DEADLINE_S:-3000} ))
lint_one() { # FILE LEVEL: one problem at three precisions, within what is left of the deadline
  local left=$(( KM_END - $(date +%s) )) name
  name=$(basename "$1" .py)
  mkdir -p "$T/level$2"
  [ "$left" -gt 5 ] || { echo "$name: deadline" > "$T/level$2/$name.err"; return 0; }
  timeout "$left" "$B/kmrun" tasks lint "$1" --precision fp32,fp16,bf16 --json \
    > "$T/level$2/$name.json" 2> "$T/level$2/$name.err"
  echo "level $2 $name: exit $?" >&2
}
export -f lint_one
s=$(date +%s)
for L in 3 2 1; do for f in "$KB/level$L"/*.py; do [ -f "$f" ] && echo "$f $L"; done; done |
  xargs -P "${JOBS:-8}" -L 1 bash -c 'lint_one "$0" "$1"' 2> "$T/progress.log"
echo "linted in $(( $(date +%s) - s )) s, ${JOBS:-8} at a time; exit statuses:"
sed 's/.*: //' "$T/progress.log" | sort | uniq -c
# out of GPU memory with JOBS at once says nothing about a problem: those again, fewer at a
# time (RETRY_JOBS, default 2), within what is left of the deadline
for j in "$T"/level*/*.json; do
  grep -qi "out of memory\|out_of_memory" "$j" 2>/dev/null || continue
  L=${j%/*}; L=${L##*/level}; echo "$KB/level$L/$(basename "$j" .json).py $L"
done > "$T/retry.list"
if [ -s "$T/retry.list" ]; then
  s=$(date +%s)
  xargs -P "${RETRY_JOBS:-2}" -L 1 bash -c 'lint_one "$0" "$1"' < "$T/retry.list" 2>> "$T/progress.log"
  echo "$(wc -l < "$T/retry.list") out of GPU memory, linted again ${RETRY_JOBS:-2} at a time in $(( $(date +%s) - s )) s"
fi
"$B/kmrun" bench/kernelbench_lint_table.lua "$T" "$OUT" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
  "${JOBS:-8} (out of memory: ${RETRY_JOBS:-2})"
echo "written: $OUT (JSON per problem in $T/level*/)"
