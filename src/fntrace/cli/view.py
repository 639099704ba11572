"""``fntrace view FILE``: the trace's HTML report written beside it and opened.

The report is ``fntrace export FILE --format html`` (output/html_report.py): one file
that opens in any browser with no network.  It is written as FILE with ``.html`` for
``.dat`` (``-o`` to choose), then handed to the system's browser where there is one to
show it (a desktop session, or ``$BROWSER``); on a machine without one (a server over
ssh) the path is printed to be copied to a machine that has one.
"""
from __future__ import annotations

import argparse
import os
import sys

__all__ = ["EPILOG", "add_arguments", "run"]

EPILOG = """\
examples:
  fntrace record -p function_graph app.py && fntrace view
  fntrace view run.dat -o /tmp/run.html --no-open
  fntrace diff before.dat after.dat --format html -o changes.html"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="fntrace.dat",
                   help="trace file (default: fntrace.dat)")
    p.add_argument("-o", "--output", default=None, metavar="OUT",
                   help="the report to write (default: FILE with .html)")
    p.add_argument("--no-open", action="store_true",
                   help="write the report and print its path; do not start a browser")
    from .filters import add_pid_argument
    add_pid_argument(p)
    from .args import add_mode_argument
    add_mode_argument(p)


def _can_open() -> bool:
    """Whether the system's browser can show a page here: not on a Linux server
    without a display (webbrowser would start a text browser in the terminal)."""
    if os.environ.get("BROWSER"):
        return True
    if sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def run(args, at_exit: bool) -> int:
    from . import export
    args.format = "html"
    if args.output == "-":
        from ..errors import UsageError
        raise UsageError("-o -: view writes a file to open (fntrace export --format html "
                         "-o - writes the report to standard output)")
    args.output = args.output or export._default_output(args.file, ".html")
    status = export.run(args, at_exit)
    if status:
        return status
    path = os.path.abspath(args.output)
    uri = "file://" + path
    opened = False
    if not args.no_open and _can_open():
        import webbrowser
        try:
            opened = webbrowser.open(uri)
        except webbrowser.Error:
            opened = False
    print(f"{args.output}" + ("" if opened else f"  (open {uri} in a browser)"))
    return 0


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
