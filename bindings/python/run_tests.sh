#!/usr/bin/env bash
# Installs the binding the way users do, in one step (pip compiles the C
# library's sources into the extension), into a temp venv offline
# (--no-build-isolation --no-index), then runs pytest with that venv.
# It installs from an sdist built off the source tree, so the build runs away
# from the repo (the case of pip copying the project to a temp dir); the
# tests (test_install.py) also do `pip install bindings/python` from a clean
# copy of the checkout. Exit code = pytest's.
# Usage: bindings/python/run_tests.sh [pytest args...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${XFETCH_PYTHON:-/usr/bin/python3}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/xfetch-py.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1

echo "run_tests: sdist -> $tmp/dist" >&2
# From a copy, so the source tree gets no build/, csrc/ or *.egg-info.
cp -r "$here" "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src/csrc" "$tmp/src/src/"*.egg-info
(cd "$tmp/src" && XFETCH_SOURCE_DIR="$here/../.." "$py" -c \
  'from setuptools import build_meta as b; b.build_sdist("'"$tmp/dist"'")') \
  >"$tmp/sdist.log" 2>&1 || { cat "$tmp/sdist.log" >&2; exit 1; }

echo "run_tests: venv + pip install (offline) -> $tmp/venv" >&2
# --without-pip: no ensurepip (Debian's python3-venv) needed; the venv's python
# runs Debian's pip (python3-pip) from the system site-packages, into the venv.
"$py" -m venv --system-site-packages --without-pip "$tmp/venv"
(cd "$tmp" && "$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-index \
  "$tmp/dist/"xfetch-*.tar.gz) >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log" >&2; exit 1; }

echo "run_tests: pytest" >&2
cd "$here/tests"  # the tests import the installed package, not ../src
set +e
"$tmp/venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
rc=$?
set -e
exit "$rc"
