"""The build backend pyproject.toml names: setuptools' (build_meta), taken
from the machine when it has setuptools, wheel and cffi, so that
`pip install bindings/python` downloads nothing (pip's build isolation
would otherwise fetch them from an index: offline, it fails). On a machine
without them, the build asks pip for them (get_requires_for_build_*), as a
plain setuptools project does."""
import site
import sys

REQUIRES = ["setuptools>=61", "wheel", "cffi>=1.15"]


def _importable():
    try:
        import cffi  # noqa: F401
        import setuptools.build_meta  # noqa: F401
        import wheel  # noqa: F401
        return True
    except ImportError:
        return False


def _machine_packages():
    """Whether the machine's setuptools, wheel and cffi can be used: pip's
    isolated build hides the interpreter's site-packages from sys.path;
    they are put back (at the end: the build's own packages come first)."""
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
    for name in [m for m in sys.modules if m.split(".")[0] in ("setuptools", "wheel", "cffi")]:
        del sys.modules[name]  # a failed import's leftovers
    if _importable():
        return True
    for p in added:
        sys.path.remove(p)
    return False


_HAVE = _machine_packages()


def _meta():
    from setuptools import build_meta
    return build_meta


def get_requires_for_build_wheel(config_settings=None):
    return [] if _HAVE else list(REQUIRES)


def get_requires_for_build_sdist(config_settings=None):
    return [] if _HAVE else list(REQUIRES)


def get_requires_for_build_editable(config_settings=None):
    return [] if _HAVE else list(REQUIRES)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _meta().prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _meta().build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    return _meta().build_sdist(sdist_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _meta().prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _meta().build_editable(wheel_directory, config_settings, metadata_directory)
