#!/bin/bash
# bench/ab_tree.sh [BASE [DEST]] — run here, before a GPU session: the tree to compare with,
# built and slimmed so it can be carried to the GPU host (which has no network and builds
# nothing). BASE is a commit (default: where this branch left main, `git merge-base HEAD
# main`); DEST a folder inside this checkout that git ignores (default ab/base). It holds
# BASE's files (git archive) and its build/kmrun with build/lib (all a headline needs:
# kmrun finds lua/ beside its build/, the utility kernels are inside the binary); the rest
# of its build is removed (about 10 MB is left). Carry DEST to the GPU host and pass it to
# bench/gpu_session.sh. Exit status 2 on usage errors, else make's.
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
BASE=${1:-$(git merge-base HEAD main 2>/dev/null)}
DEST=${2:-ab/base}
[ -n "$BASE" ] || { echo "usage: bench/ab_tree.sh [BASE [DEST]] (no BASE given and no merge base with main)" >&2; exit 2; }
git rev-parse --verify -q "$BASE^{commit}" >/dev/null || { echo "bench/ab_tree.sh: $BASE: not a commit" >&2; exit 2; }
git check-ignore -q "$DEST" || { echo "bench/ab_tree.sh: $DEST: not a folder git ignores (carry needs one)" >&2; exit 2; }
rm -rf "$DEST" && mkdir -p "$DEST"
git archive "$BASE" | tar -x -C "$DEST"
echo "$(git rev-parse --short "$BASE")" > "$DEST/BASE_COMMIT"
make -C "$DEST" -j"${JOBS:-2}" all >"$DEST/build.log" 2>&1 || { tail -20 "$DEST/build.log" >&2; exit 1; }
# what a headline needs of the build: the executable and its shared libraries
find "$DEST/build" -mindepth 1 -maxdepth 1 ! -name kmrun ! -name lib -exec rm -rf {} +
rm -f "$DEST/build/lib/libkmrun.a"
du -sh "$DEST"
