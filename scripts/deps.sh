#!/usr/bin/env bash
# Installs the Debian 12 packages xfetch needs to build, test and benchmark.
# Skips what is already installed; runs apt-get update at most once.
set -euo pipefail
pkgs=(cmake make ninja-build gcc g++ pkg-config libhiredis-dev libcriterion-dev redis-server redis-tools
      libpcg-cpp-dev python3 python3-cffi python3-pytest python3-pytest-xdist python3-redis python3-setuptools
      python3-wheel python3-pip python3-dev python3-dogpile.cache python3-prometheus-client python3-django python3-django-redis
      gnuplot-nox valgrind clang
      libclang-rt-14-dev libuv1-dev libevent-dev mypy libssl-dev openssl libzstd-dev
      python3-fastapi python3-uvicorn python3-asyncpg python3-httpx
      "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing ${missing[*]}; run as root (or install them) first" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
