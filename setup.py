"""Build the optional native twin of the hot path (src/fntrace/_native.c).

Everything else is in pyproject.toml.  The extension is optional: without a C compiler
the install still succeeds and fntrace runs its pure-Python hot path.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("fntrace._native", ["src/fntrace/_native.c"], optional=True,
                             extra_compile_args=["-O2"])])
