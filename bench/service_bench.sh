#!/usr/bin/env bash
# bench/service_bench.sh [--cpu-smoke] [OUT_DIR] — the judge as a service, measured on this
# host's GPUs, unattended (docs/service.md; figures go in bench/RESULTS.md):
#   1. batch   768 new candidates over 16 task folders (bench/service_cands.lua: block sizes,
#              deliberate bugs, about 60% correct), sent at once from the Python client
#              (bench/service_bench.py), 5 times, each time new ones, after a warm-up batch
#              (one starter per task: references and baselines set up): batch latency p50/p99,
#              each verdict's latency, new-candidate evaluations per GPU-hour, statuses by cause
#   2. pool    the same kind of batch judged in-process by the pool's eval_many
#              (bench/service_pool.lua), the server stopped: the service's overhead
#   3. fault   2,000 evaluations (hanging and crashing kernels among them) while workers are
#              SIGKILLed every 7 s, a GPU-memory hog runs beside the server (where torch is)
#              and the server is restarted halfway: infra events charged to a candidate (must
#              be 0) and requests answered (must be all)
#   4. soak    10,000 evaluations on one server: host RSS (server and workers) and device
#              memory growth after 1,000 (must be <= 1%)
#   5. with HEADLINE=1, bench/headline.lua beside it (the warm headline's evaluations per GPU-hour)
# Writes OUT_DIR (default service-out/): batch.json, pool.json, fault.json, soak.json,
# summary.md, server logs. --cpu-smoke: the same steps, small, compile-only, on a CPU (what
# tests/lua/test_bench_smoke.lua runs). KMRUN: the kmrun to use (default build/kmrun).
# STEPS="batch pool fault soak" (the default) picks steps, so a long run can be split across
# commands (each writes its own JSON in OUT_DIR; summary.md says what is there); N, REPEAT,
# FAULT_TOTAL, SOAK_TOTAL override the sizes; SERVE_GPUS=0,1 serves on those GPUs only (default
# every one: bench/scaling.sh sets it); SERVE_ARGS adds options to `kmrun serve`, e.g.
# "--compile-mode default" (each task's torch.compile baseline, measured by the first batch, in
# seconds where max-autotune takes minutes).
# Exit status: 0, 3 where there is no GPU (without --cpu-smoke), 1 a step failed.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
SMOKE=0
if [ "${1:-}" = "--cpu-smoke" ]; then SMOKE=1; shift; fi
KMRUN=${KMRUN:-build/kmrun}
if [ $SMOKE = 0 ]; then "$KMRUN" bench/need_gpu.lua "$0" || exit $?; fi
OUT=${1:-service-out}
mkdir -p "$OUT"
if [ $SMOKE = 1 ]; then
  N=32; NT=16; REPEAT=1; FAULT_TOTAL=32; FAULT_BATCH=16; SOAK_TOTAL=48; SOAK_BATCH=16; WARMUP=16; TIMEOUT=20
  EXTRA=(--compile-only); KILL_EVERY=3; RESTART_AFTER=2; WORKER=checker.lua
else
  N=${N:-768}; NT=16; REPEAT=${REPEAT:-5}; FAULT_TOTAL=${FAULT_TOTAL:-2000}; FAULT_BATCH=200
  SOAK_TOTAL=${SOAK_TOTAL:-10000}; SOAK_BATCH=500; WARMUP=1000; TIMEOUT=10
  EXTRA=(); KILL_EVERY=7; RESTART_AFTER=120; WORKER=worker.lua
fi
STEPS=${STEPS:-batch pool fault soak}
want() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
TOKEN="$OUT/token"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TOKEN"
chmod 600 "$TOKEN"
SPID=
PORT=0
start_server() { # start_server LOG [args...]: a server on 127.0.0.1:$PORT; sets SPID, PORT, URL
  local log=$1; shift
  rm -f "$OUT/port"
  "$KMRUN" serve --listen "127.0.0.1:$PORT" --port-file "$OUT/port" --token-file "$TOKEN" --tasks tasks \
    --timeout "$TIMEOUT" --quota 100000 ${SERVE_GPUS:+--gpus "$SERVE_GPUS"} ${SERVE_ARGS:-} "${EXTRA[@]}" "$@" 2>> "$OUT/$log" &
  SPID=$!
  for _ in $(seq 600); do [ -s "$OUT/port" ] && break; kill -0 $SPID 2>/dev/null || break; sleep 0.1; done
  [ -s "$OUT/port" ] || { echo "service_bench: the server did not start (see $OUT/$log)" >&2; exit 1; }
  PORT=$(cat "$OUT/port")
  URL="http://127.0.0.1:$PORT"
}
stop_server() { [ -n "$SPID" ] && kill -TERM $SPID 2>/dev/null && wait $SPID 2>/dev/null; SPID=; }
trap 'stop_server' EXIT
bench() { python3 bench/service_bench.py "$@" --url "$URL" --token-file "$TOKEN"; }
cands() { "$KMRUN" bench/service_cands.lua "$@" --ntasks $NT > /dev/null || exit 1; }
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l); [ "$GPUS" -ge 1 ] || GPUS=1
if [ -n "${SERVE_GPUS:-}" ]; then GPUS=$(echo "$SERVE_GPUS" | tr ',' '\n' | wc -l); fi

cands "$OUT/warm.json" --n $NT --tag warm
FILES=
for r in $(seq $REPEAT); do cands "$OUT/cands-$r.json" --n $N --tag "batch$r"; FILES="$FILES${FILES:+,}$OUT/cands-$r.json"; done
if want batch; then
  echo "== 1. batch: $N new candidates over $NT tasks, $REPEAT times"
  start_server server.log
  bench batch --cands "$OUT/warm.json" --repeat 1 --out "$OUT/warm-result.json" > /dev/null || exit 1
  bench batch --cands "$FILES" --repeat $REPEAT --gpus $GPUS --out "$OUT/batch.json" || exit 1
  stop_server
fi

if [ $SMOKE = 0 ] && want pool; then
  echo "== 2. pool: the same batch in-process (eval_many)"
  cands "$OUT/cands-pool.json" --n $N --tag pool
  "$KMRUN" bench/service_pool.lua "$OUT/cands-pool.json" "$OUT/pool.json" || exit 1
  if [ "${HEADLINE:-0}" = 1 ]; then "$KMRUN" bench/headline.lua "$OUT/headline.md" > "$OUT/headline.log" 2>&1; fi
fi

if want fault; then
echo "== 3. fault: $FAULT_TOTAL evaluations; workers killed every $KILL_EVERY s, a memory hog, a restart"
rm -f "$OUT/restart" "$OUT/fault.json"
cands "$OUT/cands-fault.json" --n $((FAULT_TOTAL < N ? FAULT_TOTAL : N)) --tag fault --faults
PORT=0
start_server server-fault.log
HOG=
if [ $SMOKE = 0 ] && python3 -c 'import torch' 2>/dev/null; then
  python3 -c 'import torch, time; f, t = torch.cuda.mem_get_info(); x = torch.empty(int(f * 0.6), dtype=torch.uint8, device="cuda"); time.sleep(300)' &
  HOG=$!
fi
( # the faults: a worker SIGKILLed every KILL_EVERY s; the server restarted once, on its port
  t0=$(date +%s); restarted=0
  while sleep $KILL_EVERY; do
    spid=$(cat "$OUT/server.pid" 2>/dev/null) || true
    w=$(pgrep -P "${spid:-0}" -f "$WORKER" | shuf -n 1)
    [ -n "$w" ] && kill -KILL "$w" 2>/dev/null && echo "killed worker $w" >> "$OUT/faults.log"
    if [ $restarted = 0 ] && [ $(( $(date +%s) - t0 )) -ge $RESTART_AFTER ]; then
      restarted=1; echo "restart" >> "$OUT/faults.log"; touch "$OUT/restart"
    fi
  done
) &
KILLER=$!
echo $SPID > "$OUT/server.pid"
( # the restart: the server stopped and started again on the same port
  while [ ! -e "$OUT/restart" ]; do sleep 0.2; [ -e "$OUT/fault.json" ] && exit 0; done
  kill -TERM "$(cat "$OUT/server.pid")"; sleep 0.5
  "$KMRUN" serve --listen "127.0.0.1:$PORT" --token-file "$TOKEN" --tasks tasks --timeout "$TIMEOUT" --quota 100000 \
    "${EXTRA[@]}" 2>> "$OUT/server-restart.log" &
  echo $! > "$OUT/server.pid"
  wait
) &
RESTARTER=$!
bench fault --cands "$OUT/cands-fault.json" --total $FAULT_TOTAL --batch $FAULT_BATCH --out "$OUT/fault.json"
FAULT_RC=$?
kill $KILLER 2>/dev/null; [ -n "$HOG" ] && kill $HOG 2>/dev/null
kill -TERM "$(cat "$OUT/server.pid")" 2>/dev/null; kill $RESTARTER 2>/dev/null; wait $RESTARTER 2>/dev/null
SPID=
[ $FAULT_RC = 0 ] || exit 1
fi

if want soak; then
  echo "== 4. soak: $SOAK_TOTAL evaluations on one server"
  PORT=0
  start_server server-soak.log
  bench soak --cands "$OUT/cands-1.json" --total $SOAK_TOTAL --batch $SOAK_BATCH --pids $SPID \
    --warmup $WARMUP --out "$OUT/soak.json" || exit 1
  stop_server
fi

python3 - "$OUT" $SMOKE <<'PY'
import json, os, sys
out, smoke = sys.argv[1], sys.argv[2] == "1"
def load(n):
    p = os.path.join(out, n)
    return json.load(open(p)) if os.path.exists(p) else None
b, pool, f, s = load("batch.json"), load("pool.json"), load("fault.json"), load("soak.json")
dev = (b["health"][0].get("device") or {}).get("name") if b else "?"
lines = [f"# bench/service_bench.sh ({'CPU smoke, compile-only' if smoke else 'GPU'}; {dev})", ""]
if b:
    lines.append(f"batch: {b['batches'][0]['n']} candidates, p50 {b['batch_latency_p50']:.2f} s, p99 {b['batch_latency_p99']:.2f} s; "
                 f"{b['evaluations_per_gpu_hour']:.0f} new evaluations per GPU-hour on {b['gpus']} GPU(s); by cause {b['batches'][-1]['by_cause']}")
    if not smoke:
        lines.append(f"target: 768-candidate batch p50 <= 90 s: {'met' if b['batch_latency_p50'] <= 90 else 'NOT met'}")
if pool and b:
    ov = b["batch_latency_p50"] / pool["seconds"] - 1
    lines.append(f"pool: {pool['n']} in-process in {pool['seconds']:.2f} s; service overhead {100 * ov:+.1f}% (target <= 5%: {'met' if ov <= 0.05 else 'NOT met'})")
if f: lines.append(f"fault: {f['sent']} sent, {f['answered']} answered, {f['missing']} missing, {f['infra_charged_to_candidate']} infra events charged to a candidate "
             f"(target 0: {'met' if f['infra_charged_to_candidate'] == 0 and f['missing'] == 0 else 'NOT met'}); {f['statuses']}")
g = lambda x: "n/a" if x is None else f"{100 * x:+.2f}%"
if s: lines.append(f"soak: {s['evaluations']} evaluations; RSS growth {g(s['rss_growth'])}, device memory growth {g(s['gpu_memory_growth'])} after {s['warmup']} (target <= 1%)")
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
