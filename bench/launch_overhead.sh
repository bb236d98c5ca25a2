#!/bin/sh
# bench/launch_overhead.sh [BUILD] [N] — launch overhead side by side, in one run on one GPU:
# a raw C cuLaunchKernel loop (bench/raw_bench.c), libkmrun's C API (bench/launch_capi.c),
# the Lua 5.4 binding inside kmrun and under a stock lua5.4 with km.so, and LuaJIT through
# km.ffi (a launcher closure, and km_launch called directly). Same 4x256 kernel and protocol
# as bench/core.lua section 2: N launches (default 200000) after 1000 warm-up, 3 rounds,
# medians. Interpreters missing on this host are taken from BUILD/carry (make copies them).
# Needs: make BUILD=... all (builds BUILD/bench/launch_capi) and make BUILD=... BUILD/raw_bench.
# Exit status 3 where there is no GPU (bench/need_gpu.lua says why).
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
B=${1:-build}
"$B/kmrun" "$(dirname "$0")/need_gpu.lua" "$0" || exit $?
N=${2:-200000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "$B" && pwd)
run() { "$@" 2>/tmp/launch_overhead.err || { echo "FAILED: $* ($(tail -1 /tmp/launch_overhead.err))" >&2; echo nan; }; }
pick() { command -v "$1" 2>/dev/null || { [ -x "$B/carry/$1" ] && echo "$B/carry/$1"; }; }
LUA54=$(pick lua5.4)
LUAJIT=$(pick luajit)
export LD_LIBRARY_PATH="$B/carry${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KMRUN_LIB="$B/lib/libkmrun.so"
CUBIN=$(mktemp)
median() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
raw="" capi="" kmr="" stock="" jit="" jitd=""
for round in 1 2 3; do
  capi="$capi $(run "$B/bench/launch_capi" "$N" "$CUBIN")"
  raw="$raw $(run "$B/raw_bench" launch "$CUBIN" "$N")"
  kmr="$kmr $(run "$B/kmrun" "$ROOT/bench/launch_lua.lua" "$N")"
  [ -n "$LUA54" ] && stock="$stock $(cd / && LUA_CPATH="$B/lib/lua/?.so;;" LUA_PATH="$ROOT/lua/?.lua;;" run "$LUA54" "$ROOT/bench/launch_lua.lua" "$N")"
  if [ -n "$LUAJIT" ]; then
    jit="$jit $(LUA_PATH="$ROOT/lua/?.lua;;" run "$LUAJIT" "$ROOT/bench/launch_ffi.lua" "$N")"
    jitd="$jitd $(LUA_PATH="$ROOT/lua/?.lua;;" run "$LUAJIT" "$ROOT/bench/launch_ffi.lua" "$N" direct)"
  fi
done
rm -f "$CUBIN"
R=$(median $raw)
line() { [ -n "$2" ] && m=$(median $2) && awk -v n="$1" -v m="$m" -v r="$R" 'BEGIN { printf "| %s | %.3f | %.2f |\n", n, m, m / r }'; }
echo "## Launch overhead ($N launches of a 4x256 kernel, 3 rounds, medians)"
echo
echo "| loop | us per launch | vs raw |"
echo "| --- | --- | --- |"
line "raw C cuLaunchKernel" "$raw"
line "C API km_launch (libkmrun)" "$capi"
line "Lua 5.4 in kmrun, fn:launch(cfg, ...)" "$kmr"
line "stock lua5.4 + km.so, fn:launch(cfg, ...)" "$stock" || echo "| stock lua5.4 | (no lua5.4) | |"
line "LuaJIT FFI, km.ffi launcher()" "$jit" || echo "| LuaJIT FFI | (no luajit) | |"
line "LuaJIT FFI, C.km_launch direct" "$jitd" || true
