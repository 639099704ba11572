"""``fntrace stat``."""
from __future__ import annotations

import argparse

from ..errors import FntraceError

__all__ = ["EPILOG", "add_arguments", "run_stat"]

EPILOG = ""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="fntrace.dat",
                   help="trace file (default: fntrace.dat)")


def run_stat(args) -> int:
    raise FntraceError("stat: not built yet")


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
