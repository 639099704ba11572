"""Options more than one command's parser takes (record and live, export): one
definition each, below main.py and the command modules that add them."""
from __future__ import annotations

import argparse

from ..errors import FntraceError

__all__ = ["add_mode_argument"]


def _mode(text: str) -> int:
    from ..outfile import parse_mode
    try:
        return parse_mode(text)
    except FntraceError as e:
        raise argparse.ArgumentTypeError(e.msg) from None


def add_mode_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", type=_mode, default=None, metavar="OCTAL",
                   help="permissions of the files written (default 0600: a trace holds "
                        "the program's values; 0644 lets other users read them)")


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
