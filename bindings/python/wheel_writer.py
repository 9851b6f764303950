"""Writes the binding's wheel where the `wheel` package is missing (setuptools
before 70.1 needs it for bdist_wheel; a plain Python or a venv of one often
lacks it, and offline pip cannot fetch it).

`setup.py egg_info build` (setuptools, cffi; run in this process) compiles the extension and copies
the package into a temp dir; the wheel is that tree plus a .dist-info made
from the egg-info: METADATA (PKG-INFO with the Requires-Dist lines of
requires.txt), WHEEL and RECORD, as the wheel format (PEP 427) lays them out.
Only CPython wheels are written here; elsewhere the build asks for `wheel`.
"""
import base64
import hashlib
import os
import sys
import sysconfig
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def tag():
    """This interpreter's wheel tag (cp311-cp311-linux_x86_64), or None where
    it is not CPython or the ABI cannot be read."""
    soabi = sysconfig.get_config_var("SOABI") or ""  # cpython-311-x86_64-linux-gnu
    if sys.implementation.name != "cpython" or not soabi.startswith("cpython-"):
        return None
    python = "cp%d%d" % sys.version_info[:2]
    abi = "cp" + soabi.split("-")[1]
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{python}-{abi}-{platform}"


def requires_dist(requires_txt):
    """requires.txt's sections as Requires-Dist lines: `[extra]` and
    `[extra:marker]` become `; extra == "..."` (and the marker)."""
    lines, extra, marker = [], "", ""
    for raw in requires_txt.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("["):
            extra, _, marker = line.strip("[]").partition(":")
            continue
        conds = ([f"({marker})" if extra else marker] if marker else [])
        conds += [f'extra == "{extra}"'] if extra else []
        lines.append(f"Requires-Dist: {line}" + (f" ; {' and '.join(conds)}" if conds else ""))
    return lines


def metadata(egg_info):
    with open(os.path.join(egg_info, "PKG-INFO"), encoding="utf-8") as f:
        pkg_info = f.read()
    requires = os.path.join(egg_info, "requires.txt")
    extra = []
    if os.path.exists(requires) and "\nRequires-Dist:" not in pkg_info:
        with open(requires, encoding="utf-8") as f:
            extra = requires_dist(f.read())
    head, sep, body = pkg_info.partition("\n\n")  # the headers, then the description
    return head.rstrip("\n") + "\n" + "".join(line + "\n" for line in extra) + sep + body


def field(text, name):
    for line in text.splitlines():
        if line.startswith(name + ": "):
            return line[len(name) + 2:].strip()
    raise SystemExit(f"wheel_writer: no {name} in PKG-INFO")


def run_setup(args):
    """Runs setup.py with args in this process (as setuptools.build_meta does:
    it imports what the backend found, pip's build env or the machine's)."""
    argv, cwd = sys.argv, os.getcwd()
    sys.argv = ["setup.py"] + args
    os.chdir(HERE)
    try:
        with open("setup.py", encoding="utf-8") as f:
            code = compile(f.read(), "setup.py", "exec")
        exec(code, {"__file__": os.path.join(HERE, "setup.py"), "__name__": "__main__"})
    finally:
        sys.argv = argv
        os.chdir(cwd)


def build_wheel(wheel_directory):
    wheel_tag = tag()
    with tempfile.TemporaryDirectory(prefix="xfetch-wheel.") as tmp:
        lib, eggs = os.path.join(tmp, "lib"), os.path.join(tmp, "egg")
        os.makedirs(eggs)
        run_setup(["egg_info", "--egg-base", eggs,
                   "build", "--build-base", os.path.join(tmp, "build"), "--build-lib", lib])
        [egg_info] = [os.path.join(eggs, d) for d in os.listdir(eggs) if d.endswith(".egg-info")]
        meta = metadata(egg_info)
        name = field(meta, "Name").replace("-", "_")
        version = field(meta, "Version")
        dist_info = f"{name}-{version}.dist-info"
        files = {f"{dist_info}/METADATA": meta.encode(),
                 f"{dist_info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: xfetch wheel_writer\n"
                                        f"Root-Is-Purelib: false\nTag: {wheel_tag}\n").encode()}
        top_level = os.path.join(egg_info, "top_level.txt")
        if os.path.exists(top_level):
            with open(top_level, "rb") as f:
                files[f"{dist_info}/top_level.txt"] = f.read()
        for root, _, names in os.walk(lib):
            for n in sorted(names):
                path = os.path.join(root, n)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, lib).replace(os.sep, "/")] = f.read()
        record = [f"{arc},sha256={_digest(data)},{len(data)}" for arc, data in files.items()]
        record.append(f"{dist_info}/RECORD,,")
        files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
        wheel_name = f"{name}-{version}-{wheel_tag}.whl"
        with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w",
                             zipfile.ZIP_DEFLATED) as z:
            for arc in sorted(files, key=lambda a: (a.startswith(dist_info), a)):
                z.writestr(arc, files[arc])  # the .dist-info last, as the format asks
    return wheel_name


def _digest(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
