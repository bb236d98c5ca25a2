#!/usr/bin/env bash
# Runs on the GPU host with a carried build/: environment facts, every test (GPU tests
# required), then the benchmarks. Logs go to $OUT (or ./gpu-out).
#
#   bash bench/gpu_run.sh [BENCH...]   (BENCH: a script's name in bench/, e.g. core eval)
#
# Exit status 3 where there is no GPU (bench/need_gpu.lua says why).
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
build/kmrun bench/need_gpu.lua "$0" || exit $?
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export KMRUN=build/kmrun
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee "$OUT/env.txt"
ldd build/kmrun | grep -E "not found|lua|cjson|nvrtc|sqlite|curl" | tee -a "$OUT/env.txt"
build/kmrun -v | tee -a "$OUT/env.txt"
tests=(build/tests/test_* tests/lua/test_*.lua tests/gpu/test_*.lua)
if command -v prove >/dev/null; then
  KM_REQUIRE_GPU=1 prove -v --exec tests/exec "${tests[@]}" > "$OUT/tests.log" 2>&1
  # the reply shows the end of the output: failures, diagnostics and the summary
  grep -v "^ok " "$OUT/tests.log" | grep -v "^# *stack traceback\|^# *\[C\]\|tap.lua" | tail -150
else
  for t in "${tests[@]}"; do echo "== $t"; KM_REQUIRE_GPU=1 tests/exec "$t"; echo "exit $?"; done 2>&1 | tee "$OUT/tests.log"
fi
for b in "$@"; do
  echo "== bench $b"
  build/kmrun "bench/$b.lua" "$OUT/$b.md" 2>&1 | tee "$OUT/$b.log"
done
