#!/usr/bin/env bash
# The GPU host's build check and test run, in one call: environment facts (GPU, driver,
# whether NVRTC runs confined), then the given test files (default: every GPU test plus the
# closed-world and truth tests), GPU required. Logs go to $OUT (or ./gpu-out): env.txt,
# tests.log; the reply shows failures and the summary. Needs a carried build/.
#
#   bash tools/gpu_check.sh [TEST...]
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export KMRUN=build/kmrun KM_REQUIRE_GPU=1 KM_PYTHON=${KM_PYTHON:-python3}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  uname -r
  ldd build/kmrun | grep -E "not found|lua|cjson|nvrtc|sqlite|curl"
  build/kmrun -v
  build/kmrun -e 'print("nvrtc confinement:", require("km.nvrtc").confinement())'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if [ $# -gt 0 ]; then tests=("$@"); else
  tests=(build/tests/test_confine tests/lua/test_closed_world.lua tests/lua/test_truth.lua tests/gpu/test_*.lua)
fi
start=$(date +%s)
if command -v prove >/dev/null; then
  prove -v --timer --exec tests/exec "${tests[@]}" > "$OUT/tests.log" 2>&1
  rc=$?
  # the reply shows the end of the output: failures, diagnostics and the summary
  grep -v "^ok \|^\[" "$OUT/tests.log" | grep -v "^# *stack traceback\|^# *\[C\]\|tap.lua\|^# *tests/" | tail -120
  grep -E "^\[[0-9:]+\] .* ok|^\[[0-9:]+\].*(ms|wallclock)" "$OUT/tests.log" | tail -40
else # no perl's prove on the host: each file on its own
  rc=0
  for t in "${tests[@]}"; do echo "== $t"; tests/exec "$t" || rc=1; done > "$OUT/tests.log" 2>&1
  grep -v "^ok " "$OUT/tests.log" | tail -150
fi
echo "gpu_check: $(( $(date +%s) - start )) s, prove exit $rc"
exit $rc
