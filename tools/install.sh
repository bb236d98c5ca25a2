#!/bin/sh
# tools/install.sh BUILD PREFIX — installs a built tree (`make install PREFIX=...` runs it).
# A plain script so that a tree built elsewhere installs on a host with no compiler or Lua.
#
#   PREFIX/bin/kmrun                      the program (finds PREFIX/share/kmrun/lua)
#   PREFIX/include/kmrun.h                the public C API
#   PREFIX/lib/libkmrun.so, libkmrun.a    the library
#   PREFIX/lib/kmrun/libcjson.so.1        bundled cJSON, libmicrohttpd and Lua 5.4 (liblua5.4.so.0): the
#                                         GPU host has neither package
#   PREFIX/lib/lua/5.4/km.so              `require "km"` for a stock lua5.4
#   PREFIX/lib/pkgconfig/kmrun.pc         pkg-config kmrun
#   PREFIX/share/kmrun/{lua,strategies,guidance}
#
# DESTDIR (from the environment; `make install DESTDIR=...`) stages the install: every file
# goes under DESTDIR/PREFIX and nothing is written outside DESTDIR, while kmrun.pc names
# PREFIX, where a package manager will put the files. PREFIX must then be absolute.
set -eu
[ $# -eq 2 ] || { echo "usage: [DESTDIR=STAGE] tools/install.sh BUILD PREFIX" >&2; exit 2; }
B=$1
P=$2
D=${DESTDIR:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
for f in kmrun lib/libkmrun.so lib/libkmrun.a lib/libcjson.so.1 lib/libmicrohttpd.so.12 lib/liblua5.4.so.0 lib/lua/km.so; do
  [ -f "$B/$f" ] || { echo "install: $B/$f is missing (make BUILD=$B first)" >&2; exit 1; }
done
if [ -n "$D" ]; then
  case $P in /*) ;; *) echo "install: with DESTDIR, PREFIX must be absolute (got $P)" >&2; exit 2 ;; esac
  PC_PREFIX=$P
  P=$D$P
fi
mkdir -p "$P/bin" "$P/include" "$P/lib/kmrun" "$P/lib/lua/5.4" "$P/lib/pkgconfig" "$P/share/kmrun"
P=$(cd "$P" && pwd)
[ -n "$D" ] || PC_PREFIX=$P
cp -f "$B/kmrun" "$P/bin/kmrun"
cp -f "$ROOT/include/kmrun.h" "$P/include/kmrun.h"
cp -f "$B/lib/libkmrun.so" "$B/lib/libkmrun.a" "$P/lib/"
cp -f "$B/lib/libcjson.so.1" "$B/lib/libmicrohttpd.so.12" "$B/lib/liblua5.4.so.0" "$P/lib/kmrun/"
cp -f "$B/lib/lua/km.so" "$P/lib/lua/5.4/km.so"
for d in lua strategies guidance; do
  rm -rf "$P/share/kmrun/$d"
  cp -R "$ROOT/$d" "$P/share/kmrun/$d"
done
VERSION=$(sed -n 's/^#define KMRUN_VERSION "\(.*\)"$/\1/p' "$ROOT/include/kmrun.h")
cat > "$P/lib/pkgconfig/kmrun.pc" <<PC
prefix=$PC_PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include
luadir=\${prefix}/share/kmrun/lua
lua_cpath=\${prefix}/lib/lua/5.4/?.so

Name: kmrun
Description: compile, launch, verify and time CUDA kernels; trajectories; Lua strategies
Version: $VERSION
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lkmrun
Libs.private: -L\${libdir}/kmrun -L/usr/local/cuda/lib64 -l:liblua5.4.so.0 -lnvrtc -lcjson -l:libmicrohttpd.so.12 -lsqlite3 -lcurl -ldl -lm -lpthread
PC
if [ -n "$D" ]; then echo "staged kmrun $VERSION for $PC_PREFIX in $P"; else echo "installed kmrun $VERSION in $P"; fi
