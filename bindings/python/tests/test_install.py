"""The one-step install users run: `pip install bindings/python` as written
(pip's build isolation on) from a clean copy of the checkout (git's files
only: no csrc/, build/ or C library install), into a fresh venv, offline;
then get_or_compute against the fixture's redis-server from that venv: with
every other Python here that lacks the `wheel` package, and with a
setuptools older than 61 (it reads no pyproject.toml metadata). The
machine's own Python and setuptools run it in the Python guide's install
block (test_docs.py) and build a wheel here, installed where there are no
sources. Each of these compiles the C library."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(REPO, "cmake", "embed_lua.cmake"))
    or not shutil.which("git") or not shutil.which("cmake"),
    reason="needs an xfetch git checkout, git and cmake")


def clean_copy(dest):
    """Copies the checkout's files as a fresh clone would have them (tracked
    and new, not ignored), so no build product of the tree leaks in."""
    files = subprocess.run(["git", "-C", REPO, "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], check=True, capture_output=True).stdout
    for rel in files.decode().split("\0"):
        if rel and os.path.isfile(os.path.join(REPO, rel)):  # not a deleted file
            os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
            shutil.copy2(os.path.join(REPO, rel), os.path.join(dest, rel))


PROBE = """
import setuptools.build_meta, cffi
try:
    import wheel
except ImportError:
    wheel = None
import sys
print(wheel is None, sys.executable)
"""


def pythons_without_wheel():
    """The machine's other Pythons (pyenv's, PATH's) that have setuptools and
    cffi but not the `wheel` package, as a plain Python often is."""
    found = glob.glob(os.path.join(os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv")),
                                   "versions", "*", "bin", "python3"))
    found += [os.path.join(d, "python3") for d in os.environ.get("PATH", "").split(os.pathsep)]
    out = {}
    for py in found:
        if not os.access(py, os.X_OK):
            continue
        fits, _, real = subprocess.run([py, "-c", PROBE], capture_output=True,
                                       text=True).stdout.strip().partition(" ")
        if fits == "True":
            out.setdefault(os.path.realpath(real), py)  # pyenv's shims run one of these
    return sorted(out.values())


@pytest.mark.parametrize("python", pythons_without_wheel() or [
    pytest.param(None, marks=pytest.mark.skip(reason="no Python with setuptools and cffi "
                                              "but without wheel on this machine"))])
def test_pip_install_needs_no_wheel_package(tmp_path, server, python):
    pip_install_and_fetch(python, tmp_path, server)


def oldest_setuptools_wheel():
    """The oldest setuptools wheel on this machine (Pythons bundle one for
    ensurepip) that has a PEP 517 backend (40.8+) and predates pyproject.toml
    metadata (61), or None."""
    found = glob.glob(os.path.join(os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv")),
                                   "versions", "*", "lib", "python3*", "ensurepip", "_bundled",
                                   "setuptools-*-py3-none-any.whl"))
    found += glob.glob("/usr/share/python-wheels/setuptools-*-py3-none-any.whl")
    versions = {}
    for path in found:
        v = tuple(int(x) for x in os.path.basename(path).split("-")[1].split(".")[:2])
        if (40, 8) <= v < (61, 0):
            versions.setdefault(v, path)
    return versions[min(versions)] if versions else None


OLD_SETUPTOOLS = oldest_setuptools_wheel()


@pytest.mark.skipif(OLD_SETUPTOOLS is None, reason="no setuptools wheel of 40.8 to 60 here")
def test_pip_install_with_a_setuptools_older_than_61(tmp_path, server):
    pip_install_and_fetch(sys.executable, tmp_path, server, setuptools_wheel=OLD_SETUPTOOLS)


def pip_install_and_fetch(python, tmp_path, server, setuptools_wheel=None):
    """`pip install xfetch/bindings/python` with python's pip into a venv of
    it (with setuptools_wheel installed in it first, when given), offline;
    then two calls through the installed package."""
    clean_copy(str(tmp_path / "xfetch"))
    assert not (tmp_path / "xfetch" / "bindings" / "python" / "csrc").exists()
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    py = str(venv / "bin" / "python")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("XFETCH_PREFIX", None)
    env.pop("XFETCH_SOURCE_DIR", None)
    if setuptools_wheel:
        subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", setuptools_wheel],
                       env=env, check=True)
        version = subprocess.run([py, "-c", "import setuptools; print(setuptools.__version__)"],
                                 env=env, capture_output=True, text=True).stdout.strip()
        assert os.path.basename(setuptools_wheel).startswith(f"setuptools-{version}-")
    pip = subprocess.run([py, "-m", "pip", "install", "-v", "xfetch/bindings/python"],
                         cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    assert pip.returncode == 0, pip.stdout[-5000:]
    compiled_every_source_without_a_warning(pip.stdout)

    script = """
import sys, xfetch
calls = []
def load():
    calls.append(1)
    return b"computed"
c = xfetch.Cache(sys.argv[1], prefix=sys.argv[2])
a = c.fetch("k", load, ttl=60)
b = c.fetch("k", load, ttl=60)
print(xfetch.__file__)
print(a.value.decode(), a.source, b.value.decode(), b.source, len(calls))
"""
    out = subprocess.run([py, "-c", script, server.url, f"install-test:{tmp_path.name}:"],
                         cwd=str(tmp_path), env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    where, result = out.stdout.splitlines()
    assert where.startswith(str(venv))
    assert result == "computed loader computed cache 1"
    links_no_xfetch_library(os.path.dirname(where))


def compiled_every_source_without_a_warning(pip_output):
    for name in ("flow", "blocking", "batch", "share", "scripts_gen"):
        assert f"{name}.c -o " in pip_output, name
    assert [ln for ln in pip_output.splitlines() if "csrc/" in ln and "warning:" in ln] == []


def links_no_xfetch_library(package_dir):
    """The extension links hiredis, OpenSSL (and libc/libm), no libxfetch."""
    ext = [os.path.join(package_dir, f) for f in os.listdir(package_dir)
           if f.startswith("_native") and f.endswith(".so")]
    needed = subprocess.run(["ldd", ext[0]], capture_output=True, text=True).stdout
    assert "libhiredis" in needed and "libxfetch" not in needed


def test_a_wheel_installs_without_the_sources(tmp_path, server):
    clean_copy(str(tmp_path / "xfetch"))
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("XFETCH_PREFIX", None)
    env.pop("XFETCH_SOURCE_DIR", None)
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w",
                            str(dist), "xfetch/bindings/python"], cwd=str(tmp_path), env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert built.returncode == 0, built.stdout[-5000:]
    compiled_every_source_without_a_warning(built.stdout)
    [wheel] = list(dist.glob("xfetch-*.whl"))
    shutil.rmtree(tmp_path / "xfetch")  # no sources, no build tree left
    import zipfile
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith((".c", ".h"))], names
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    py = str(venv / "bin" / "python")
    pip = subprocess.run([py, "-m", "pip", "install", "--no-deps", str(wheel)],
                         cwd=str(tmp_path), env=env, capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    script = ("import sys, xfetch; c = xfetch.Cache(sys.argv[1], prefix='wheel-test:'); "
              "print(xfetch.__file__, c.get_or_compute('k', lambda: {'a': 1}, ttl=60)); "
              "c.close()")
    out = subprocess.run([py, "-c", script, server.url], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    where, value = out.stdout.split(" ", 1)
    assert where.startswith(str(venv)) and value.strip() == "{'a': 1}"
    links_no_xfetch_library(os.path.dirname(where))
