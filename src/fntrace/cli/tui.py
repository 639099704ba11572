"""``fntrace tui``: browse a trace file in the terminal (needs textual: the tui extra)."""
from __future__ import annotations

import argparse

from ..errors import FntraceError

__all__ = ["EPILOG", "add_arguments", "run"]

EPILOG = """\
keys:
  j/k, arrows, PgUp/PgDn, g/G  move            enter/space  fold or unfold a call
  h/l                          fold / unfold (h on a leaf: go to the parent)
  [ ]                          previous / next call of the same function
  /  n  N                      search a function name, next / previous match
  t  T                         next / previous thread
  f                            function table (s: sort column, a: all threads,
                               enter: the function's first call), f again: back
  q                            quit

The trace opens at once and is indexed in the background (the bar at the top).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="fntrace.dat",
                   help="trace file (default: fntrace.dat)")
    from .filters import add_pid_argument
    add_pid_argument(p)
    p.add_argument("--tasks", action="store_true",
                   help="each asyncio Task as a thread of its own (its steps together)")
    p.add_argument("--fold-depth", type=int, default=2, metavar="N",
                   help="calls at depth N or deeper start folded (default: 2)")


def run(args, at_exit: bool) -> int:
    from importlib.util import find_spec

    from ..output.source import TraceSource
    if args.fold_depth < 0:
        raise FntraceError(f"tui: --fold-depth must be 0 or more, not {args.fold_depth}")
    if find_spec("textual") is None:
        raise FntraceError("tui: needs the textual package: pip install 'fntrace[tui]'")
    from .filters import open_traces_arg
    source = TraceSource(open_traces_arg(args.file, args), args.file)
    if args.tasks:
        from ..output.task_view import tasks_as_threads
        source = tasks_as_threads(source)
    # the trace's blocks checked for the native index while textual is imported (the
    # check runs without the GIL: a big trace's first screen comes that much sooner)
    from ..tui.index import TraceIndex
    verdict = TraceIndex.verdict(source)
    try:
        from ..tui.app import TraceBrowser
    except ImportError as e:
        raise FntraceError(f"tui: the textual package does not import ({e}): "
                           "pip install 'fntrace[tui]'") from None
    TraceBrowser(source, fold_depth=args.fold_depth, verdict=verdict).run()
    return 0


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
