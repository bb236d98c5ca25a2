#!/usr/bin/env bash
# On a GPU host with a carried build/: the headline run over every task (offline), the
# same work as a sweep on one GPU and on all GPUs (timed), then report and reverify.
# Usage: bash bench/gpu_sweeps.sh [GPUS_FOR_THE_MULTI_RUN]   (default 0,1)
# Exit status 3 where there is no GPU (bench/need_gpu.lua says why).
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
build/kmrun bench/need_gpu.lua "$0" || exit $?
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
K=build/kmrun
MULTI=${1:-0,1}
echo "== headline: kmrun strategies/repair_then_tune.lua tasks/"
$K strategies/repair_then_tune.lua tasks/ --store "$OUT/headline.sqlite" --worker-stderr null > "$OUT/headline.log" 2>&1
echo "exit status $?"
tail -44 "$OUT/headline.log"
gpus_list="0"
[ "$MULTI" != "0" ] && gpus_list="0 $MULTI"
for g in $gpus_list; do
  echo "== sweep on GPUs $g"
  $K sweep --strategies strategies/repair_then_tune.lua --tasks tasks --gpus "$g" --store "$OUT/sweep-gpus-${g/,/_}.sqlite" \
    --worker-stderr null --quiet 2>&1 | tail -2
done
echo "== report"
$K report "$OUT/headline.sqlite" --html "$OUT/report.html" 2>&1 | tail -40
echo "== reverify"
$K reverify "$OUT/headline.sqlite" --gpus 0 2>&1 | tail -3
