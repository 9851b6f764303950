"""The build backend pyproject.toml names: setuptools' (build_meta), taken
from the machine when it has setuptools and cffi, so that
`pip install bindings/python` downloads nothing (pip's build isolation
would otherwise fetch them from an index: offline, it fails). Without the
`wheel` package (which setuptools before 70.1 needs to write a wheel, and
which a plain Python often lacks) the wheel is written here, from a
`setup.py build` (wheel_writer.py). The metadata is in setup.cfg, which every
setuptools with a PEP 517 backend reads. On a machine without setuptools or
cffi, the build asks pip for what is missing (get_requires_for_build_*), as a
plain setuptools project does."""
import site
import sys

SETUPTOOLS, WHEEL, CFFI = "setuptools>=40.8", "wheel", "cffi>=1.15"


def _missing():
    """What the build needs that this interpreter cannot import: setuptools
    with a PEP 517 backend (it reads setup.cfg), cffi, and `wheel` when
    setuptools has no bdist_wheel of its own and no wheel can be written here."""
    out = []
    try:
        import setuptools.build_meta  # noqa: F401
    except ImportError:
        out.append(SETUPTOOLS)
    try:
        import cffi  # noqa: F401
    except ImportError:
        out.append(CFFI)
    if not _has_bdist_wheel() and not _can_write_wheel():
        out.append(WHEEL)
    return out


def _has_bdist_wheel():
    try:
        import wheel  # noqa: F401
        return True
    except ImportError:
        pass
    try:
        import setuptools.command.bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        return True
    except ImportError:
        return False


def _can_write_wheel():
    import wheel_writer
    return wheel_writer.tag() is not None


def _importable():
    return not _missing()


def _machine_packages():
    """Whether the build has all it needs, with the machine's setuptools,
    wheel and cffi: pip's isolated build hides the interpreter's
    site-packages from sys.path; they are put back (at the end: the build's
    own packages come first)."""
    if _importable():
        return True
    paths = []
    for prefix in (sys.prefix, sys.base_prefix):
        try:
            paths += site.getsitepackages([prefix])
        except Exception:  # a site module without getsitepackages
            pass
    added = [p for p in dict.fromkeys(paths) if p not in sys.path]
    sys.path.extend(added)
    for name in [m for m in sys.modules if m.split(".")[0] in ("setuptools", "wheel", "cffi",
                                                               "_distutils_hack", "pkg_resources")]:
        del sys.modules[name]  # a failed import's leftovers
    return _importable()  # if not, pip installs what is missing beside them


_HAVE = _machine_packages()


def _meta():
    from setuptools import build_meta
    return build_meta


def _requires():
    """What pip must install into the isolated build: what neither it nor the
    machine has (the machine's site-packages stay on sys.path, after the
    build's own), so pip's error offline names just that."""
    return [] if _HAVE else _missing()


def get_requires_for_build_wheel(config_settings=None):
    return _requires()


def get_requires_for_build_sdist(config_settings=None):
    return [r for r in _requires() if r != WHEEL]


def get_requires_for_build_editable(config_settings=None):
    needed = _requires()  # an editable install needs bdist_wheel itself
    return needed + ([] if _has_bdist_wheel() or WHEEL in needed else [WHEEL])


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if not _has_bdist_wheel():
        import wheel_writer
        return wheel_writer.build_wheel(wheel_directory)
    return _meta().build_wheel(wheel_directory, config_settings, metadata_directory)


if _has_bdist_wheel():  # else pip takes the metadata from the wheel build_wheel writes
    def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
        return _meta().prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_sdist(sdist_directory, config_settings=None):
    return _meta().build_sdist(sdist_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _meta().prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _meta().build_editable(wheel_directory, config_settings, metadata_directory)
