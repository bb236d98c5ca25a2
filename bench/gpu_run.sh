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
# environment facts and every test file, GPU required (tools/gpu_check.sh: env.txt, tests.log)
OUT="$OUT" bash tools/gpu_check.sh build/tests/test_* tests/lua/test_*.lua tests/gpu/test_*.lua
export KMRUN=build/kmrun
for b in "$@"; do
  echo "== bench $b"
  build/kmrun "bench/$b.lua" "$OUT/$b.md" 2>&1 | tee "$OUT/$b.log"
done
