#!/bin/bash
# bench/gpu_session.sh [BASE_TREE [KB_BASE_TREE [KB_DIR]]] — issue 44's GPU measures still to
# make, in one call of at most about 9 minutes, with nothing built (build/, ab/ and kb/
# carried). Logs under $OUT (default /tmp/gpu_session), each part's exit in summary.txt:
#   1. the GPU tests of the judge's newest changes: tests/gpu/test_unwritten_first.lua (the first
#      trial's look at unwritten outputs), tests/lua/test_truth.lua, tests/gpu/test_trust.lua and
#      tests/gpu/test_trust5_state.lua (a restore builds the model again),
#      tests/gpu/test_kernelbench.lua and tests/gpu/test_heldout.lua (the driver's spec taken at
#      load); gpu_tests.log (cap TESTS_S, default 150 s)
#   2. KernelBench level 1 as a whole, side by side in this one run (issue 44, item 3):
#      KB_BASE_TREE (default ab/kbbase: de55a1d, where the first figure was measured, built by
#      bench/ab_tree.sh) one evaluation at a time as its figure was, then this tree batched,
#      then this tree batched with KM_UNWRITTEN_FIRST=0 (that look's share); each pass starts
#      no problem after KB_PASS_S (default 60 s); kb_base.md, kb_this.md, kb_this_unwritten0.md
#   3. KernelBench level 2 batched (its memory table; the loads without the host copy);
#      kb_level2.md (cap 90 s)
#   4. the headline side by side (bench/headline_ab.sh BASE_TREE, default ab/base: 86af816)
#      with what is left of 540 s (at least 150 s); headline_ab.log and ab/*.md
# The whole GPU suite is a call of its own: tools/gpu_check.sh.
# Exit status 2 on usage errors, 3 where there is no GPU, else 0 (each part's own status is
# in its log and in summary.txt).
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
AB=${1:-ab/base}
KBBASE=${2:-ab/kbbase}
KB=${3:-kb/KernelBench}
OUT=${OUT:-/tmp/gpu_session}
B=${KMRUN:-build/kmrun}
"$B" bench/need_gpu.lua "$0" || exit $?
for tree in "$AB" "$KBBASE"; do
  [ -x "$tree/build/kmrun" ] || { echo "bench/gpu_session.sh: $tree/build/kmrun: not built (bench/ab_tree.sh, then carry it)" >&2; exit 2; }
done
[ -d "$KB/level1" ] || { echo "bench/gpu_session.sh: $KB/level1: no KernelBench folder (carry kb/)" >&2; exit 2; }
KB=$(cd "$KB" && pwd)
mkdir -p "$OUT"
START=$SECONDS
left() { echo $(( 540 - (SECONDS - START) )); }
part() { echo "$1: exit $2, $(( SECONDS - START )) s into the session" | tee -a "$OUT/summary.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; date -u
  echo "base trees: $AB ($(cat "$AB/BASE_COMMIT" 2>/dev/null || echo '?')), $KBBASE ($(cat "$KBBASE/BASE_COMMIT" 2>/dev/null || echo '?')); this tree: $(cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo '?')"; } \
  | tee "$OUT/summary.txt"
KMRUN="$B" KM_REQUIRE_GPU=1 timeout "${TESTS_S:-150}" prove -v --timer --exec tests/exec tests/gpu/test_unwritten_first.lua \
  tests/lua/test_truth.lua tests/gpu/test_trust.lua tests/gpu/test_trust5_state.lua tests/gpu/test_kernelbench.lua \
  tests/gpu/test_heldout.lua > "$OUT/gpu_tests.log" 2>&1
part "GPU tests (unwritten first, truth, trust, trust5_state, kernelbench, heldout)" $?
P=${KB_PASS_S:-60}
(cd "$KBBASE" && timeout $(( 3 * P )) build/kmrun bench/kb_level1.lua "$KB" "$OUT/kb_base.md" --mode serial --max-s "$P") \
  > "$OUT/kb_base.log" 2>&1
part "KernelBench level 1, $KBBASE serial" $?
timeout $(( 2 * P )) "$B" bench/kb_level1.lua "$KB" "$OUT/kb_this.md" --mode batch --max-s "$P" > "$OUT/kb_this.log" 2>&1
part "KernelBench level 1, this tree batched" $?
KM_UNWRITTEN_FIRST=0 timeout $(( 2 * P )) "$B" bench/kb_level1.lua "$KB" "$OUT/kb_this_unwritten0.md" --mode batch \
  --max-s "$P" > "$OUT/kb_this_unwritten0.log" 2>&1
part "KernelBench level 1, this tree batched, KM_UNWRITTEN_FIRST=0" $?
timeout 90 "$B" bench/kb_level1.lua "$KB" "$OUT/kb_level2.md" --level 2 --mode batch --max-s 40 > "$OUT/kb_level2.log" 2>&1
part "KernelBench level 2" $?
T=$(left)
if [ "$T" -ge 150 ]; then
  OUT_DIR="$OUT/ab" timeout "$T" bash bench/headline_ab.sh "$AB" > "$OUT/headline_ab.log" 2>&1
  part "headline A/B" $?
else
  part "headline A/B (not run: $T s left)" 0
fi
grep -hE "^\| (serial|batch)" "$OUT"/kb_*.md 2>/dev/null
exit 0
