#!/bin/bash
# bench/headline_ab.sh TREE... — the headline (bench/headline.lua: make demo's command with
# empty, then warm caches) for other checkouts of kmrun and for this one, side by side on one
# GPU: each TREE's build/kmrun on that tree's tasks and Lua, then this tree's, ROUNDS times
# (default 1) in that order. Each pass's table goes to OUT_DIR/<tree's folder name>-N.md and
# OUT_DIR/this-N.md (OUT_DIR default /tmp/headline_ab); the lines are printed as they come.
# A TREE is typically `git worktree add old <commit>` built with `make`, or bench/ab_tree.sh's
# copy. Each is named by its BASE_COMMIT file (ab_tree.sh writes it) and this tree by a COMMIT
# file at its root where there is one (a copy whose .git is not this tree's), else by git. Exit status 2 on
# usage errors, 3 where there is no GPU, else the last failing headline's (0 when all ran).
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
[ $# -ge 1 ] || { echo "usage: bench/headline_ab.sh TREE... (OUT_DIR, ROUNDS in the environment)" >&2; exit 2; }
OUT=${OUT_DIR:-/tmp/headline_ab}
ROUNDS=${ROUNDS:-1}
B=${KMRUN:-build/kmrun}
"$B" bench/need_gpu.lua "$0" || exit $?
for tree in "$@"; do
  [ -x "$tree/build/kmrun" ] || { echo "bench/headline_ab.sh: $tree/build/kmrun: not built (make -C $tree)" >&2; exit 2; }
done
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
rc=0
for r in $(seq 1 "$ROUNDS"); do
  for tree in "$@"; do
    name=$(basename "$tree")
    echo "== round $r: $tree ($(cat "$tree/BASE_COMMIT" 2>/dev/null || git -C "$tree" rev-parse --short HEAD 2>/dev/null || echo "no git"))"
    (cd "$tree" && build/kmrun bench/headline.lua "$OUT/$name-$r.md") || rc=$?
  done
  echo "== round $r: this tree ($(cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo "no git"))"
  "$B" bench/headline.lua "$OUT/this-$r.md" || rc=$?
done
exit $rc
