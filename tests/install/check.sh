#!/bin/sh
# Installs the build in $1 into a fresh prefix under $2, then builds a tiny
# consumer with find_package(xfetch) (shared and static) and with pkg-config.
set -eu
build=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
"$CMAKE" --install "$build" --prefix "$work/prefix" >/dev/null
"$CMAKE" -S "$(dirname "$0")" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
"$CMAKE" --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib" "$work/consumer/consumer_shared"
"$work/consumer/consumer_static"
pc=$(dirname "$(find "$work/prefix" -name xfetch.pc)")
pcf() { PKG_CONFIG_PATH="$pc" pkg-config "$@"; }
libdir=$(pcf --variable=libdir xfetch)
# Shared, run from the prefix through its rpath (no LD_LIBRARY_PATH).
# shellcheck disable=SC2046
$CC -o "$work/pc_shared" "$(dirname "$0")/consumer.c" $(pcf --cflags --libs xfetch) -Wl,-rpath,"$libdir"
"$work/pc_shared"
# The archive (xfetch-static.pc) beside the shared library: no libxfetch.so needed.
# shellcheck disable=SC2046
$CC -o "$work/pc_static" "$(dirname "$0")/consumer.c" $(pcf --cflags --libs xfetch-static)
if readelf -d "$work/pc_static" | grep -q 'NEEDED.*libxfetch'; then
  echo "pc_static needs libxfetch.so"
  exit 1
fi
"$work/pc_static"
# Fully static (cc -static with --static's private dependencies), where the
# system has the dependencies' archives.
has_archive() { [ -f "$($CC -print-file-name="$1")" ]; }
if has_archive libhiredis.a && has_archive libssl.a && has_archive libcrypto.a; then
  # shellcheck disable=SC2046
  $CC -static -o "$work/pc_all_static" "$(dirname "$0")/consumer.c" \
    $(pcf --static --cflags --libs xfetch) 2>"$work/pc_all_static.log"
  "$work/pc_all_static"
fi
echo "install_consumer: find_package and pkg-config OK"
