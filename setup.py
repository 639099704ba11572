"""Build the optional native parts (src/fntrace/_native.c, src/fntrace/cli/_launch.c).

Everything else is in pyproject.toml.  Both extensions are optional: without a C
compiler the install still succeeds and fntrace runs its pure-Python paths.
"""
from setuptools import Extension, setup

setup(ext_modules=[
    Extension("fntrace._native", ["src/fntrace/_native.c", "src/fntrace/_native_frame.c",
                                         "src/fntrace/_native_value.c"],
              optional=True,
              extra_compile_args=["-O2"]),
    Extension("fntrace.cli._launch", ["src/fntrace/cli/_launch.c"], optional=True,
              extra_compile_args=["-O2"]),
])
