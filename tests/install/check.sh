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
pc="$work/prefix/lib/pkgconfig"
[ -d "$pc" ] || pc=$(dirname "$(find "$work/prefix" -name xfetch.pc)")
# shellcheck disable=SC2046
$CC -o "$work/pc_shared" "$(dirname "$0")/consumer.c" $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs xfetch)
LD_LIBRARY_PATH="$(PKG_CONFIG_PATH="$pc" pkg-config --variable=libdir xfetch)" "$work/pc_shared"
# shellcheck disable=SC2046
$CC -o "$work/pc_static" "$(dirname "$0")/consumer.c" -Wl,-Bstatic $(PKG_CONFIG_PATH="$pc" pkg-config --static --libs-only-l xfetch | sed 's/-lm//') -Wl,-Bdynamic -lm $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs-only-L xfetch)
"$work/pc_static"
echo "install_consumer: find_package and pkg-config OK"
