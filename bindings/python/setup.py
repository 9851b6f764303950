# setuptools reads the metadata from setup.cfg; only cffi_modules needs setup().
from setuptools import setup

setup(cffi_modules=["build_ffi.py:ffibuilder"])
