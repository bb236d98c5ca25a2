#!/bin/bash
# bench/headline_ab.sh OTHER_TREE [OUT_DIR] [ROUNDS] — the headline (bench/headline.lua: make
# demo's command with empty, then warm caches) for another checkout of kmrun and for this one,
# side by side on one GPU: OTHER_TREE's build/kmrun on OTHER_TREE's tasks and Lua, then this
# tree's, ROUNDS times (default 1), alternating. Each pass's table goes to
# OUT_DIR/{other,this}-N.md (default /tmp/headline_ab); the lines are printed as they come.
# OTHER_TREE is typically `git worktree add old <commit>` built with `make`. Exit status 2 on
# usage errors, 3 where there is no GPU, else the last headline's.
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
[ $# -ge 1 ] || { echo "usage: bench/headline_ab.sh OTHER_TREE [OUT_DIR] [ROUNDS]" >&2; exit 2; }
OTHER=$1
OUT=${2:-/tmp/headline_ab}
ROUNDS=${3:-1}
B=${KMRUN:-build/kmrun}
"$B" bench/need_gpu.lua "$0" || exit $?
[ -x "$OTHER/build/kmrun" ] || { echo "bench/headline_ab.sh: $OTHER/build/kmrun: not built (make -C $OTHER)" >&2; exit 2; }
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
echo "other: $(git -C "$OTHER" rev-parse --short HEAD 2>/dev/null || echo "$OTHER"); this: $(git rev-parse --short HEAD 2>/dev/null)"
rc=0
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r: other"
  (cd "$OTHER" && build/kmrun bench/headline.lua "$OUT/other-$r.md") || rc=$?
  echo "== round $r: this"
  "$B" bench/headline.lua "$OUT/this-$r.md" || rc=$?
done
exit $rc
