# setuptools reads the metadata from pyproject.toml; only cffi_modules needs setup().
from setuptools import setup

setup(cffi_modules=["build_ffi.py:ffibuilder"])
