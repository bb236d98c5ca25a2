#!/usr/bin/env bash
# GPU call 1 (run CM): pending test, KB level 1 with the problem-by-problem split, greet_later A/B, level 2 memory
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export KM_PYTHON=${KM_PYTHON:-python3}
git rev-parse --short HEAD > COMMIT 2>/dev/null || true
{ date -u; nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv; } > "$OUT/env.txt" 2>&1
(timeout 120 prove -v --timer --exec tests/exec tests/gpu/test_trust5_exact.lua) > "$OUT/trust5_exact.log" 2>&1
tail -3 "$OUT/trust5_exact.log"
timeout 200 build/kmrun bench/kb_level1.lua kb/KernelBench "$OUT/kb1.md" --mode batch --max-s 80 > "$OUT/kb1.log" 2>&1
grep -E "^\| batch|set-up" "$OUT/kb1.md"
timeout 150 build/kmrun bench/headline.lua "$OUT/greet.md" --cold 0 --ab KM_GREET_LATER=0,1 --ab-rounds 2 > "$OUT/greet.log" 2>&1
grep -E "^\| (warm|empty)|--ab|warm pass" "$OUT/greet.md" | head -12
timeout 170 build/kmrun bench/kb_level1.lua kb/KernelBench "$OUT/kb2.md" --level 2 --mode batch --max-s 60 > "$OUT/kb2.log" 2>&1
grep -E "^\| batch" "$OUT/kb2.md"
rm -f COMMIT
