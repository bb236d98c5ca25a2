#!/bin/bash
# bench/kb_harness.sh KB_SRC [PROBLEM] [BUILD] [--out FILE] — issue 17 on a GPU host: a KernelBench
# problem (default kb/KernelBench/level1/19_ReLU.py) judged by a fresh `kmrun eval` and by
# KernelBench's own harness, side by side, on the same kernel (bench/kb_relu/kernel.cu).
# kmrun: `kmrun eval PROBLEM bench/kb_relu --no-energy --baselines eager --json` once to fill
# its caches (a scratch XDG_CACHE_HOME), then KM_RUNS (3) timed runs, a fresh process each.
# KernelBench: bench/kb_harness.py in a fresh python each time calls eval_kernel_against_ref as
# its scripts/eval_from_generations.py does (5 correctness trials, 100 timed trials, the
# reference timed too) on a load_inline ModelNew: with a fresh build_dir (cold compile), then
# the same build_dir (warm compile cache). Then, unless KM_SERVED=0, a `kmrun serve` on the
# same caches and KM_RUNS fresh `kmrun eval` processes judged by it ("kmrun eval (served)":
# torch imported once, by the server; its start is not timed, as a running server's is not
# paid by an eval). Wall s: process start to exit, each under timeout
# (seconds: KM_S 180 per kmrun run, KB_COLD_S 400, KB_WARM_S 300; a run past it says so).
# Prints the GPU, the UTC date and a table (run, wall s, verdict, kernel time), then KernelBench
# wall / kmrun wall (cold and warm); --out FILE writes the same text to FILE.
# KB_SRC: the folder holding KernelBench's kernelbench package (KB_SRC/src/kernelbench or
# KB_SRC/kernelbench), never copied into this repository; from a checkout (or its git dir):
#   mkdir -p kb/kbsrc && git -C KERNELBENCH_GIT archive HEAD src/kernelbench | tar x -C kb/kbsrc
# Needs a python with torch (KM_PYTHON, else python3) and, for KernelBench's load_inline,
# nvcc, ninja and a C++ compiler; modules KernelBench imports but never calls here (openai,
# litellm, dotenv, tqdm, pydantic, requests) get stand-ins where missing (the output says which).
# Exit status 0 when every run was correct, 1 when one was not or timed out, 2 on bad
# arguments, 3 where there is no GPU or KernelBench cannot run (what lacks is said).
set -u
OUT= ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --out) [ $# -ge 2 ] || { echo "bench/kb_harness.sh: --out needs a FILE" >&2; exit 2; }; OUT=$2; shift 2 ;;
    -*) echo "bench/kb_harness.sh: unknown option $1" >&2; exit 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
[ ${#ARGS[@]} -ge 1 ] && [ ${#ARGS[@]} -le 3 ] || {
  echo "usage: bench/kb_harness.sh KB_SRC [PROBLEM] [BUILD] [--out FILE]   (--help says more)" >&2; exit 2; }
SRC=${ARGS[0]} P=${ARGS[1]:-kb/KernelBench/level1/19_ReLU.py} B=${ARGS[2]:-build}
"$B/kmrun" bench/need_gpu.lua "$0" || exit $?
[ -f "$SRC/src/kernelbench/eval.py" ] || [ -f "$SRC/kernelbench/eval.py" ] ||
  { echo "bench/kb_harness.sh: no kernelbench/eval.py in $SRC or $SRC/src (see --help)" >&2; exit 2; }
[ -f "$P" ] || { echo "bench/kb_harness.sh: no problem file $P" >&2; exit 2; }
export KM_PYTHON=${KM_PYTHON:-python3}
PY=$KM_PYTHON

# KernelBench's imports (stand-ins where missing) and load_inline's tools, once, not timed
CHECK=$("$PY" bench/kb_harness.py --check "$SRC") || {
  [ -z "$CHECK" ] || echo "$CHECK"; echo "bench/kb_harness.sh: KernelBench's harness cannot run here" >&2; exit 3; }

T=$(mktemp -d "${TMPDIR:-/tmp}/kb_harness.XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
FAILED=0

# timed SIDE RUN LIMIT RESULT TAG CMD...: runs CMD under `timeout` (its process group killed
# at the limit, so nothing is left behind), stdout to $T/TAG.out, stderr to $T/TAG.err, and
# adds the row (side, run, wall s, exit status, result file, limit) to $T/runs.tsv
timed() {
  local side=$1 name=$2 limit=$3 res=$4 tag=$5 s e rc
  shift 5
  s=$(date +%s.%N)
  timeout -k 10 "$limit" "$@" > "$T/$tag.out" 2> "$T/$tag.err"
  rc=$?
  e=$(date +%s.%N)
  local wall; wall=$(awk "BEGIN { printf \"%.2f\", $e - $s }")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$side" "$name" "$wall" "$rc" "$res" "$limit" >> "$T/runs.tsv"
  echo "$side, $name: $wall s, exit $rc" >&2
  if [ $rc -ne 0 ]; then
    FAILED=1
    tail -n 8 "$T/$tag.err" >&2
    [ "$res" = "$T/$tag.out" ] || tail -n 8 "$T/$tag.out" >&2 # kmrun's stdout is its verdict, in the table
  fi
}

# kmrun: its own caches in a scratch folder, filled by the first run, warm for the rest
ENV=(env XDG_CACHE_HOME="$T/cache" KM_CACHE_DIR= KM_BASELINE_DIR= KM_SPEC_DIR= KM_SERVE_SOCKET="$T/serve.sock")
KM=("${ENV[@]}" "$B/kmrun" eval "$P" bench/kb_relu --no-energy --baselines eager --json)
timed "kmrun eval" "fill (empty caches)" "${KM_S:-180}" "$T/km0.out" km0 "${KM[@]}" --no-server
for i in $(seq 1 "${KM_RUNS:-3}"); do
  timed "kmrun eval" "warm $i" "${KM_S:-180}" "$T/km$i.out" "km$i" "${KM[@]}" --no-server
done

# kmrun eval judged by a kmrun serve on the same caches: started, its first evaluation (the
# task set up in its worker) not counted, then KM_RUNS fresh kmrun eval processes
if [ "${KM_SERVED:-1}" != 0 ]; then
  "${ENV[@]}" "$B/kmrun" serve --idle 600 2> "$T/serve.log" &
  SERVE=$!
  for _ in $(seq 1 600); do "${ENV[@]}" "$B/kmrun" serve --status > /dev/null 2>&1 && break; sleep 0.2; done
  timed "kmrun eval (served)" "its first" "${KM_S:-180}" "$T/kms0.out" kms0 "${KM[@]}"
  for i in $(seq 1 "${KM_RUNS:-3}"); do
    timed "kmrun eval (served)" "warm $i" "${KM_S:-180}" "$T/kms$i.out" "kms$i" "${KM[@]}"
  done
  grep -q '"server"' "$T/kms1.out" 2>/dev/null || { echo "bench/kb_harness.sh: the served runs were not judged by kmrun serve:" >&2; tail -n 5 "$T/serve.log" "$T/kms1.err" >&2; FAILED=1; }
  "${ENV[@]}" "$B/kmrun" serve --stop > /dev/null 2>&1
  wait $SERVE
fi

# KernelBench: a fresh build_dir, then the same one again
timed KernelBench "cold (fresh build_dir)" "${KB_COLD_S:-400}" "$T/kb_cold.json" kb_cold \
  "$PY" bench/kb_harness.py "$SRC" "$P" "$T/kb_build" "$T/kb_cold.json"
timed KernelBench "warm (same build_dir)" "${KB_WARM_S:-300}" "$T/kb_warm.json" kb_warm \
  "$PY" bench/kb_harness.py "$SRC" "$P" "$T/kb_build" "$T/kb_warm.json"

{
  echo "# $(basename "$P" .py): KernelBench's harness and a fresh kmrun eval, side by side (bench/kb_harness.sh)"
  echo
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i 0 2>/dev/null || echo unknown)"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "$CHECK"
  echo "kmrun: $B/kmrun eval $P bench/kb_relu --no-energy --baselines eager --json (caches filled by the first run; --no-server, then judged by a kmrun serve)"
  echo
  "$PY" bench/kb_harness.py --table "$T/runs.tsv"
} | tee ${OUT:+"$OUT"}
exit $FAILED
