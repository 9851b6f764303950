#!/bin/sh
# A user's configure of the library: `cmake -S . -B build` on a machine
# without Criterion (pkg-config made blind to it) and without redis-server
# turns the tests and the benchmark off and says how to turn them on, and so
# does a parent project's add_subdirectory; nothing in those builds needs
# Criterion. Configures only (the library itself builds in every build).
#   check.sh <source dir> <work dir>
set -eu
src=$1 work=$2
rm -rf "$work" && mkdir -p "$work/pc"
# pkg-config sees hiredis, OpenSSL and zstd (and what they require), not Criterion.
for m in hiredis openssl libssl libcrypto libzstd; do
  f=$(pkg-config --variable=pcfiledir "$m")/$m.pc
  [ -f "$f" ] && ln -s "$f" "$work/pc/$m.pc"
done
configure() { # build dir, cmake args...
  b=$1
  shift
  PKG_CONFIG_LIBDIR="$work/pc" PKG_CONFIG_PATH= "$CMAKE" "$@" -B "$b" \
    -DXF_HAS_REDIS_SERVER=XF_HAS_REDIS_SERVER-NOTFOUND >"$b.log" 2>&1 ||
    { cat "$b.log"; echo "FAILED: configure $*"; exit 1; }
}
expect() { # build dir, pattern in the configure output or cache
  grep -q "$2" "$1.log" "$1/CMakeCache.txt" || { cat "$1.log"; echo "FAILED: $1: no '$2'"; exit 1; }
}

configure "$work/top" -S "$src"
expect "$work/top" "XFETCH_BUILD_TESTS:BOOL=OFF"
expect "$work/top" "XFETCH_BUILD_BENCH:BOOL=OFF"
expect "$work/top" "tests off (Criterion not found): -DXFETCH_BUILD_TESTS=ON"
expect "$work/top" "benchmark off (no redis-server to run it): -DXFETCH_BUILD_BENCH=ON"
[ ! -d "$work/top/tests" ] && [ ! -d "$work/top/bench" ] ||
  { echo "FAILED: the library-only build has tests or the benchmark"; exit 1; }

mkdir -p "$work/parent"
cat >"$work/parent/CMakeLists.txt" <<PARENT
cmake_minimum_required(VERSION 3.16)
project(app C)
add_subdirectory("$src" xfetch)
PARENT
configure "$work/sub" -S "$work/parent"
expect "$work/sub" "XFETCH_BUILD_TESTS:BOOL=OFF"
expect "$work/sub" "tests off (not the top-level project)"
expect "$work/sub" "benchmark off (not the top-level project)"

# Asked for without Criterion: a clear error, not a half-configured build.
if PKG_CONFIG_LIBDIR="$work/pc" PKG_CONFIG_PATH= "$CMAKE" -S "$src" -B "$work/asked" \
  -DXFETCH_BUILD_TESTS=ON >"$work/asked.log" 2>&1; then
  echo "FAILED: -DXFETCH_BUILD_TESTS=ON configured without Criterion"
  exit 1
fi
grep -q "criterion" "$work/asked.log" || { cat "$work/asked.log"; exit 1; }
echo "user_build: library-only configure OK"
