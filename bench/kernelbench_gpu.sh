#!/bin/bash
# bench/kernelbench_gpu.sh KB_DIR [BUILD] — the issue-8 measures on a GPU host, in one run:
# KernelBench's 19_ReLU judged as it is (twice, a fresh process each), PyTorch eager by
# km.timing against triton's do_bench on five problems, and every problem's reference through
# the judge's path (kmrun tasks check, capped by REFS_S seconds, default 600), the
# per-candidate cost against a CUDA twin and the baselines table (TABLE_S, COMPILE_MODE).
# KB_DIR is a KernelBench checkout's KernelBench/ folder (level1..3), carried to the host
# beside the build and never copied into this repository. Needs a python with torch
# (KM_PYTHON, else python3). Exit status 2 without KB_DIR, 3 where there is no GPU.
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
[ $# -ge 1 ] || { echo "usage: bench/kernelbench_gpu.sh KB_DIR [BUILD]" >&2; exit 2; }
KB=$1
B=${2:-build}
"$B/kmrun" bench/need_gpu.lua "$0" || exit $?
export KM_PYTHON=${KM_PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
for i in 1 2; do
  s=$(date +%s.%N); "$B/kmrun" eval "$KB/level1/19_ReLU.py" bench/kb_relu --json --no-energy > /tmp/kb_relu_$i.json 2>&1; rc=$?; e=$(date +%s.%N)
  echo "19_ReLU: kmrun eval run $i: exit $rc, $(python3 -c "print(round($e - $s, 2))") s"
  python3 -c "import json; v = json.load(open('/tmp/kb_relu_$i.json')); print(' ', v['status'], v.get('feedback', '')[:200])"
done
"$B/kmrun" bench/eager_timing.lua "$KB/level1/19_ReLU.py" "$KB/level1/1_Square_matrix_multiplication_.py" \
  "$KB/level1/23_Softmax.py" "$KB/level2/1_Conv2D_ReLU_BiasAdd.py" "$KB/level1/40_LayerNorm.py" 2>&1 | grep -v Warning
R=${REFS_S:-600}
# every problem loads and runs its reference in fp32: kmrun tasks check, as a user runs it
s=$(date +%s); timeout "$R" "$B/kmrun" tasks check "$KB/level1" "$KB/level2" "$KB/level3" > /tmp/kb_check.txt 2>&1; rc=$?
echo "kmrun tasks check levels 1-3: exit $rc, $(( $(date +%s) - s )) s"; grep -v "^ok" /tmp/kb_check.txt | grep -v -i warning | tail -40
# per-candidate cost with a PyTorch reference against its CUDA twin (target: at most 1.2x),
# then the eager / torch.compile / CUDA-reference / starter table for our tasks
"$B/kmrun" bench/pytorch_cost.lua 2>&1 | grep -v -i warning
timeout "${TABLE_S:-500}" "$B/kmrun" bench/baselines_table.lua --compile-mode "${COMPILE_MODE:-max-autotune-no-cudagraphs}" \
  --max-s $(( ${TABLE_S:-500} - 60 )) 2>&1 | grep -v -i warning
