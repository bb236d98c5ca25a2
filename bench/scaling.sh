#!/usr/bin/env bash
# bench/scaling.sh [OUT_DIR] — issue 47: the same work on 1, 2, 4 and 8 GPUs of this host, in
# one lease, unattended; figures go in bench/RESULTS.md. For each N (NS, default "1 2 4 8";
# those over this host's GPU count are skipped), on GPUs 0..N-1:
#   headline  make demo's command (strategies/repair_then_tune.lua over tasks/, torch.compile
#             baselines in default mode) on warm caches (one warm-up pass on every N's GPUs
#             first: compiles, baselines, specs), a fresh store each N: evaluations per GPU-hour
#   service   bench/service_bench.sh's batch step: 768 new candidates over 16 task folders from
#             the Python client, REPEAT (default 3) batches after a warm-up batch, the server on
#             those GPUs (SERVE_GPUS), NVRTC's cache empty each N (new candidates compile)
# Each run's pool writes its counters (KM_POOL_STATS: workers' busy and idle seconds and why,
# the driver's CPU and its time outside the pool), from which bench/scaling.lua names the
# limiting stage (driver CPU, dispatch, compile, store, supply). Then
# `kmrun bench/scaling.lua table OUT_DIR OUT_DIR/scaling.md` writes the table: N, evaluations per
# GPU-hour, efficiency against 1 GPU, statuses unlike 1 GPU's on the same candidates, the
# limiting stage. OUT_DIR default scaling-out/. STEPS="headline service" (the default) picks
# steps and NS the GPU counts, so a run longer than one command splits into several into one
# folder (each N's files are its own; the table reads what is there). KMRUN: the kmrun to use
# (default build/kmrun). The CPU side of it: `kmrun bench/scaling.lua sim` (tests/lua/test_bench_smoke.lua).
# Exit status: 0, 3 where there is no GPU, 1 a step failed.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
KMRUN=${KMRUN:-build/kmrun}
"$KMRUN" bench/need_gpu.lua "$0" || exit $?
OUT=${1:-scaling-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
KMRUN=$(cd "$(dirname "$KMRUN")" && pwd)/$(basename "$KMRUN")
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l); [ "$GPUS" -ge 1 ] || GPUS=1
NS=${NS:-1 2 4 8}
STEPS=${STEPS:-headline service}
REPEAT=${REPEAT:-3}
want() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
list() { seq -s, 0 $(( $1 - 1 )); }
now() { date +%s.%N; }
printf '{"gpus": "%s x %s", "date": "%s"}\n' "$GPUS" "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
  "$(date -u '+%Y-%m-%d %H:%M UTC')" > "$OUT/host.json"
MAXN=0
for n in $NS; do [ "$n" -le "$GPUS" ] && [ "$n" -gt "$MAXN" ] && MAXN=$n; done
[ "$MAXN" -ge 1 ] || { echo "bench/scaling.sh: none of NS=\"$NS\" fits this host's $GPUS GPU(s)" >&2; exit 1; }

# make demo's command with this run's caches (as bench/headline.lua's passes)
headline() { # headline N STORE LOG
  XDG_CACHE_HOME="$OUT/cache" TMPDIR="$OUT/tmp" KM_CACHE_DIR= KM_BASELINE_DIR= KM_SETUP_DIR= \
    "$KMRUN" strategies/repair_then_tune.lua tasks --gpus "$(list "$1")" --compile-mode default --store "$2" > "$3" 2>&1
}

if want headline; then
  mkdir -p "$OUT/cache" "$OUT/tmp"
  if [ ! -e "$OUT/headline-warmup.sqlite" ]; then
    echo "== headline: warm-up on $MAXN GPU(s)"
    headline "$MAXN" "$OUT/headline-warmup.sqlite" "$OUT/headline-warmup.log" || { echo "warm-up failed: $OUT/headline-warmup.log" >&2; exit 1; }
  fi
  for n in $NS; do
    [ "$n" -le "$GPUS" ] || { echo "== headline: N=$n skipped ($GPUS GPUs)"; continue; }
    rm -f "$OUT/headline-$n.sqlite"*
    t0=$(now)
    KM_POOL_STATS="$OUT/headline-$n.stats.json" headline "$n" "$OUT/headline-$n.sqlite" "$OUT/headline-$n.log" \
      || { echo "headline N=$n failed: $OUT/headline-$n.log" >&2; exit 1; }
    awk -v a="$(now)" -v b="$t0" 'BEGIN { print a - b }' > "$OUT/headline-$n.wall"
    echo "== headline: N=$n: $(tail -1 "$OUT/headline-$n.log")"
  done
fi

if want service; then
  for n in $NS; do
    [ "$n" -le "$GPUS" ] || { echo "== service: N=$n skipped ($GPUS GPUs)"; continue; }
    echo "== service: N=$n"
    rm -rf "$OUT/nvrtc-$n"
    KM_POOL_STATS="$OUT/service-$n/pool-stats.json" KM_CACHE_DIR="$OUT/nvrtc-$n" SERVE_GPUS="$(list "$n")" \
      STEPS=batch REPEAT=$REPEAT KMRUN="$KMRUN" bash bench/service_bench.sh "$OUT/service-$n" || exit 1
  done
fi

"$KMRUN" bench/scaling.lua table "$OUT" "$OUT/scaling.md"
