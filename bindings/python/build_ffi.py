"""cffi build script (API mode): compiles xfetch._native.

By default the extension compiles the C library's own sources, so
`pip install bindings/python` is the whole install (build needs a C compiler,
libhiredis-dev, libzstd-dev, and cmake when building from a git checkout):

- in a git checkout (../../CMakeLists.txt), csrc/ is refreshed from it first:
  the .c files of XF_<LAYER>_SOURCES lists there
  and every header of src/core, src/net, src/link, src/near, src/share and src/drivers (all flat in csrc/src:
  the names are unique), include/xfetch.h with its parts (include/xfetch/*.h),
  and scripts_gen.c, made from lua/*.lua (XF_LUA, in that order) by
  cmake/embed_lua.cmake, the generator the CMake build runs;
- in an unpacked sdist (PKG-INFO here), csrc/ came with it (MANIFEST.in), so
  builds away from the repo (pip building an sdist in a temp dir) work, and
  need no cmake. A copy of this directory with csrc/ filled works the same.

XFETCH_SOURCE_DIR=<repo root> names the checkout explicitly. XFETCH_PREFIX=<a
`cmake --install --prefix` tree> links that tree's libxfetch.a instead and
compiles no library source. Either way the extension needs only the system's
libhiredis, libssl and libzstd at run time.
"""
import os
import re
import subprocess
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "csrc")  # the library sources the extension compiles
LAYERS = ("core", "net", "link", "near", "share", "drivers")  # CMakeLists.txt's XF_<LAYER>_SOURCES
DIRS = {"core": "core", "net": "net", "link": "link", "near": "near", "share": "share",
        "drivers": "drivers"}  # their src/ dirs
SUBDIRS = ("src", "include", os.path.join("include", "xfetch"))  # csrc/'s directories


def _cmake_list(root, name):
    """The paths in `set(NAME ...)` of root/CMakeLists.txt, in order (the
    library's one list of sources and of Lua scripts)."""
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        m = re.search(r"\bset\(\s*%s\s(.*?)\)" % name, f.read(), re.S)
    if not m:
        raise SystemExit(f"build_ffi: no set({name} ...) in {root}/CMakeLists.txt")
    paths = [t.replace("${CMAKE_CURRENT_SOURCE_DIR}/", "") for t in m.group(1).split()]
    return [os.path.join(root, p) for p in paths if "$" not in p]  # not ${XF_LUA_C}


def embed_lua(root, out):
    """Writes out (scripts_gen.c) from root's lua/*.lua with cmake/embed_lua.cmake,
    the generator the CMake build runs; it rewrites out only when it changes."""
    cmd = ["cmake", "-DOUT=" + out, "-DSCRIPTS=" + ";".join(_cmake_list(root, "XF_LUA")),
           "-P", os.path.join(root, "cmake", "embed_lua.cmake")]
    try:
        subprocess.run(cmd, check=True)
    except OSError:
        raise SystemExit("build_ffi: cmake is needed to embed lua/*.lua into C "
                         "(Debian: apt-get install cmake), or install from an sdist")
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"build_ffi: {' '.join(cmd)} failed ({e.returncode})")


def _source_root():
    """The xfetch checkout to take the C sources from, or None to build the
    csrc/ that is already here (an sdist, or a copy of this directory made
    after a build had filled csrc/)."""
    root = os.environ.get("XFETCH_SOURCE_DIR")
    if root:
        return os.path.abspath(root)
    if os.path.exists(os.path.join(HERE, "PKG-INFO")):
        return None
    root = os.path.dirname(os.path.dirname(HERE))
    if os.path.exists(os.path.join(root, "cmake", "embed_lua.cmake")):
        return root
    if os.path.exists(os.path.join(CSRC, "scripts_gen.c")):
        return None
    raise SystemExit("build_ffi: no C sources: neither in an xfetch checkout (../../src) "
                     "nor an sdist (csrc/); set XFETCH_SOURCE_DIR or XFETCH_PREFIX")


def _copy_if_changed(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    if os.path.exists(dst):
        with open(dst, "rb") as f:
            if f.read() == data:
                return  # keep the mtime: no needless recompile
    with open(dst, "wb") as f:
        f.write(data)


def sync_csrc(root):
    """Makes csrc/ the library's sources from the checkout root: src/ the .c
    files of the three layers' source lists (CMakeLists.txt) and every header
    of src/core, src/net, src/link, src/near, src/share and src/drivers, flat, include/xfetch.h and its parts
    include/xfetch/*.h (not the libuv/libevent adapter headers), and
    scripts_gen.c, the Lua scripts embedded by CMake's generator. The build
    compiles csrc/ (setuptools wants paths inside the project) and the sdist
    ships it, so a build from the sdist needs neither the checkout nor cmake."""
    want = {os.path.join("src", os.path.basename(p)): p
            for layer in LAYERS for p in _cmake_list(root, f"XF_{layer.upper()}_SOURCES")
            if p.endswith(".c")}
    for layer in LAYERS:
        d = os.path.join(root, "src", DIRS[layer])
        for f in os.listdir(d):
            if f.endswith(".h"):
                want[os.path.join("src", f)] = os.path.join(d, f)
    want[os.path.join("include", "xfetch.h")] = os.path.join(root, "include", "xfetch.h")
    parts = os.path.join("include", "xfetch")  # the umbrella's parts
    for f in os.listdir(os.path.join(root, parts)):
        if f.endswith(".h"):
            want[os.path.join(parts, f)] = os.path.join(root, parts, f)
    for sub in SUBDIRS:
        os.makedirs(os.path.join(CSRC, sub), exist_ok=True)
        for f in os.listdir(os.path.join(CSRC, sub)):  # a file the library dropped
            path = os.path.join(sub, f)
            if path not in want and path not in SUBDIRS:
                os.remove(os.path.join(CSRC, path))
    for rel, src in want.items():
        _copy_if_changed(src, os.path.join(CSRC, rel))
    embed_lua(root, os.path.join(CSRC, "scripts_gen.c"))


def _from_prefix(prefix):
    for libdir in ("lib", "lib64", "lib/x86_64-linux-gnu"):
        archive = os.path.join(prefix, libdir, "libxfetch.a")
        if os.path.exists(archive):
            return dict(include_dirs=[os.path.join(prefix, "include")],
                        extra_objects=[archive],
                        libraries=["hiredis", "ssl", "crypto", "zstd", "m"],
                        depends=[archive, os.path.join(prefix, "include", "xfetch.h")])
    raise SystemExit(f"build_ffi: no libxfetch.a under XFETCH_PREFIX={prefix}")


def _from_sources():
    root = _source_root()
    if root is not None:
        sync_csrc(root)
    elif not os.path.exists(os.path.join(CSRC, "scripts_gen.c")):
        raise SystemExit("build_ffi: this sdist has no csrc/ (made by an sdist of a checkout)")
    def rel(*p):  # setuptools wants paths relative to setup.py
        return os.path.join("csrc", *p)

    sources = sorted(rel("src", f) for f in os.listdir(os.path.join(CSRC, "src"))
                     if f.endswith(".c")) + [rel("scripts_gen.c")]
    headers = [rel("src", f) for f in os.listdir(os.path.join(CSRC, "src")) if f.endswith(".h")]
    headers += [rel("include", "xfetch", f)
                for f in os.listdir(os.path.join(CSRC, "include", "xfetch"))]
    # As CMake compiles them (C11 + _GNU_SOURCE), every symbol hidden but the
    # module's init: the extension exports no xf_* that could clash with a
    # libxfetch.so in the same process. No -Werror: a newer compiler's new
    # warning must not break a user's install (the CMake build has -Werror,
    # and tests/test_install.py checks that this build warns about nothing).
    return dict(sources=sources, include_dirs=[rel("include"), rel("src")],
                libraries=["hiredis", "ssl", "crypto", "zstd", "m"],  # ssl, crypto: TLS (stream_tls.c)
                define_macros=[("_GNU_SOURCE", None)],
                extra_compile_args=["-std=c11", "-fvisibility=hidden"],
                depends=headers + [rel("include", "xfetch.h")])


prefix = os.environ.get("XFETCH_PREFIX")
ffibuilder = FFI()
with open(os.path.join(HERE, "xfetch_cdef.h")) as f:
    ffibuilder.cdef(f.read())
ffibuilder.set_source("xfetch._native",
                      "#include <xfetch.h>\n",
                      **(_from_prefix(prefix) if prefix else _from_sources()))

if __name__ == "__main__":  # an in-place build, for development
    os.chdir(HERE)
    ffibuilder.compile(tmpdir="build", verbose="-v" in sys.argv)
