"""``fntrace tui``."""
from __future__ import annotations

import argparse

from ..errors import FntraceError

__all__ = ["EPILOG", "add_arguments", "run_tui"]

EPILOG = ""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="fntrace.dat",
                   help="trace file (default: fntrace.dat)")


def run_tui(args) -> int:
    raise FntraceError("tui: not built yet")


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
