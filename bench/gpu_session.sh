#!/bin/bash
# bench/gpu_session.sh [BASE_TREE [KB_DIR]] — issue 44's and issue 45's (item 5) GPU measures
# in one call of at most about 9 minutes, with nothing built (build/ carried). Logs under
# $OUT (default /tmp/gpu_session):
#   1. the headline side by side (bench/headline_ab.sh): BASE_TREE (default ab/base, made
#      here by bench/ab_tree.sh: main before this branch, built) then this tree, each with
#      empty then warm caches, this tree's table with the cold row (new candidates on warm
#      tasks); headline_ab.log and ab/*.md  (cap HEADLINE_S, default 270 s)
#   2. the stop rule alone: this tree's headline under KM_STOP_RULE=interval (the rule before
#      the gini one), no cold row, beside the A/B's own pass of this tree; interval.md (cap
#      STOP_S, default 80 s)
#   3. the GPU tests of the change: tests/gpu/test_timing_spread.lua (one kernel judged 10
#      times: the speedups' spread), tests/gpu/test_same_work.lua, tests/gpu/test_judge_memory.lua
#      (the verdicts' peak device memory); gpu_tests.log (cap 110 s)
#   4. KernelBench level 1 as a whole (bench/kb_level1.lua --mode both: one evaluation at a
#      time, then a batch of problems at once, KB_DIR default kb/KernelBench; each of the four
#      passes starts no problem after KB_PASS_S, default 25 s; at most 200 s); kb_level1.md
#   5. bench/measure_profile.lua --evals 4 (where verify's and measure's time goes) with what is
#      left (at least 40 s); profile.md
#   6. tests/gpu/test_sampled_proofs.lua with what is left of 530 s; sampled_proofs.log
# Exit status 2 on usage errors, 3 where there is no GPU, else 0 (each part's own status is
# in its log and in summary.txt).
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
AB=${1:-ab/base}
KB=${2:-kb/KernelBench}
OUT=${OUT:-/tmp/gpu_session}
B=${KMRUN:-build/kmrun}
"$B" bench/need_gpu.lua "$0" || exit $?
[ -x "$AB/build/kmrun" ] || { echo "bench/gpu_session.sh: $AB/build/kmrun: not built (bench/ab_tree.sh, then carry $AB)" >&2; exit 2; }
[ -d "$KB/level1" ] || [ -d "$KB" ] || { echo "bench/gpu_session.sh: $KB: no KernelBench folder (carry kb/)" >&2; exit 2; }
mkdir -p "$OUT"
START=$SECONDS
left() { echo $(( 530 - (SECONDS - START) )); }
part() { echo "$1: exit $2, $(( SECONDS - START )) s into the session" | tee -a "$OUT/summary.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks_throttle_reasons.active --format=csv; date -u
  echo "base tree: $AB ($(cat "$AB/BASE_COMMIT" 2>/dev/null || echo '?')); this tree: $(cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo '?')"; } \
  | tee "$OUT/summary.txt"
OUT_DIR="$OUT/ab" timeout "${HEADLINE_S:-270}" bash bench/headline_ab.sh "$AB" > "$OUT/headline_ab.log" 2>&1
part "headline A/B" $?
KM_STOP_RULE=interval timeout "${STOP_S:-80}" "$B" bench/headline.lua "$OUT/interval.md" --cold 0 > "$OUT/interval.log" 2>&1
part "headline, KM_STOP_RULE=interval" $?
KMRUN="$B" timeout 110 prove -v --exec tests/exec tests/gpu/test_timing_spread.lua tests/gpu/test_same_work.lua \
  tests/gpu/test_judge_memory.lua > "$OUT/gpu_tests.log" 2>&1
part "GPU tests (spread, same work, judge memory)" $?
T=$(( $(left) - 60 )); [ "$T" -gt 200 ] && T=200
if [ "$T" -ge 80 ]; then
  P=$(( (T - 40) / 4 )); [ "$P" -gt "${KB_PASS_S:-25}" ] && P=${KB_PASS_S:-25}
  timeout "$T" "$B" bench/kb_level1.lua "$KB" "$OUT/kb_level1.md" --mode both --max-s "$P" > "$OUT/kb_level1.log" 2>&1
  part "KernelBench level 1" $?
else
  part "KernelBench level 1 (not run: $T s left)" 0
fi
T=$(( $(left) - 40 )); [ "$T" -gt 90 ] && T=90
if [ "$T" -ge 40 ]; then
  timeout "$T" "$B" bench/measure_profile.lua --evals 4 > "$OUT/profile.md" 2>&1
  part "measure_profile" $?
else
  part "measure_profile (not run: $T s left)" 0
fi
T=$(left)
if [ "$T" -ge 40 ]; then
  KMRUN="$B" timeout "$T" prove -v --exec tests/exec tests/gpu/test_sampled_proofs.lua > "$OUT/sampled_proofs.log" 2>&1
  part "test_sampled_proofs" $?
else
  part "test_sampled_proofs (not run: $T s left)" 0
fi
exit 0
