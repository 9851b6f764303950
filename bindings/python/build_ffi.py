"""cffi build script (API mode): compiles xfetch._native against the C library.

Finds the library with XFETCH_PREFIX (a `cmake --install --prefix` tree) first,
then `pkg-config --static xfetch`. libxfetch.a is linked in statically, so the
extension needs only the system's libhiredis at run time.
"""
import os
import shlex
import subprocess

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))


def _from_prefix(prefix):
    for libdir in ("lib", "lib64", "lib/x86_64-linux-gnu"):
        archive = os.path.join(prefix, libdir, "libxfetch.a")
        if os.path.exists(archive):
            return [os.path.join(prefix, "include")], [archive], [], ["hiredis", "m"]
    raise SystemExit(f"build_ffi: no libxfetch.a under XFETCH_PREFIX={prefix}")


def _from_pkg_config():
    try:
        out = subprocess.check_output(["pkg-config", "--static", "--cflags", "--libs", "xfetch"])
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("build_ffi: set XFETCH_PREFIX or make `pkg-config xfetch` work")
    flags = shlex.split(out.decode())
    incs = [f[2:] for f in flags if f.startswith("-I")]
    dirs = [f[2:] for f in flags if f.startswith("-L")]
    libs = [f[2:] for f in flags if f.startswith("-l") and f != "-lxfetch"]
    archives = [os.path.join(d, "libxfetch.a") for d in dirs]
    archives = [a for a in archives if os.path.exists(a)][:1]
    if not archives:  # no static archive: link the shared one
        libs.insert(0, "xfetch")
    return incs, archives, dirs, libs


prefix = os.environ.get("XFETCH_PREFIX")
include_dirs, extra_objects, library_dirs, libraries = (
    _from_prefix(prefix) if prefix else _from_pkg_config())

ffibuilder = FFI()
with open(os.path.join(HERE, "xfetch_cdef.h")) as f:
    ffibuilder.cdef(f.read())
# depends: an in-tree rebuild relinks when libxfetch.a or the header changes.
headers = [os.path.join(d, "xfetch.h") for d in include_dirs]
ffibuilder.set_source("xfetch._native", "#include <xfetch.h>",
                      include_dirs=include_dirs, extra_objects=extra_objects,
                      library_dirs=library_dirs, libraries=libraries,
                      depends=extra_objects + [h for h in headers if os.path.exists(h)])

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
