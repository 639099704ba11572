"""Build the optional native parts (src/fntrace/_native.c, src/fntrace/cli/_launch.c).

Everything else is in pyproject.toml.  Both extensions are optional: without a C
compiler the install still succeeds and fntrace runs its pure-Python paths.

_native.c is one translation unit: it includes src/fntrace/native/native.h and the
parts, one per mechanism (why: native/native.h); they are listed as its dependencies so
that editing a part rebuilds it.

The native twin's record layout and type numbers come from src/fntrace/record_format.py
(the one definition): it is run here and its C header written into the build tree.
"""
import glob
import os
import runpy

from setuptools import Extension, setup

_HERE = os.path.dirname(os.path.abspath(__file__))
_GEN = os.path.join(_HERE, "build", "fntrace-gen")
_fmt = runpy.run_path(os.path.join(_HERE, "src", "fntrace", "record_format.py"))
os.makedirs(_GEN, exist_ok=True)
_hdr = os.path.join(_GEN, "fntrace_record_format.h")
_text = _fmt["c_header"]()
if not os.path.exists(_hdr) or open(_hdr).read() != _text:
    with open(_hdr, "w") as f:
        f.write(_text)

_PARTS = sorted(glob.glob("src/fntrace/native/*.h"))

setup(ext_modules=[
    Extension("fntrace._native", ["src/fntrace/_native.c", "src/fntrace/_native_frame.c",
                                  "src/fntrace/_native_encode.c", "src/fntrace/_native_value.c",
                                  "src/fntrace/_native_read.c"],
              include_dirs=[_GEN],
              depends=[_hdr, *_PARTS],
              optional=True,
              extra_compile_args=["-O2"]),
    Extension("fntrace.cli._launch", ["src/fntrace/cli/_launch.c"], optional=True,
              extra_compile_args=["-O2"]),
])
