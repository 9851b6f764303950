#!/usr/bin/env bash
# Builds and installs the C library into a temp prefix, installs the binding
# into a temp venv (offline: --no-build-isolation --no-index), runs pytest.
# Exit code = pytest's. Usage: bindings/python/run_tests.sh [pytest args...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${XFETCH_PYTHON:-/usr/bin/python3}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/xfetch-py.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "run_tests: C library -> $tmp/prefix" >&2
cmake -S "$repo" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DXFETCH_BUILD_TESTS=OFF \
  -DXFETCH_BUILD_BENCH=OFF -DCMAKE_INSTALL_PREFIX="$tmp/prefix" >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log" >&2; exit 1; }
cmake --build "$tmp/build" -j2 >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log" >&2; exit 1; }
cmake --install "$tmp/build" --prefix "$tmp/prefix" >>"$tmp/cmake.log" 2>&1

echo "run_tests: venv + pip install (offline) -> $tmp/venv" >&2
# --without-pip: no ensurepip (Debian's python3-venv) needed; the venv's python
# runs Debian's pip (python3-pip) from the system site-packages, into the venv.
"$py" -m venv --system-site-packages --without-pip "$tmp/venv"
# Build from a copy so the source tree gets no build/ or *.egg-info.
cp -r "$here" "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src/src/"*.egg-info
XFETCH_PREFIX="$tmp/prefix" PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-index "$tmp/src" \
  >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log" >&2; exit 1; }

echo "run_tests: pytest" >&2
cd "$here/tests"  # the tests import the installed package, not ../src
set +e
"$tmp/venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
rc=$?
set -e
exit "$rc"
