"""The ``fntrace`` command: record, report, stat, diff, export, view, tui, top, sql, live,
ls, ctl, mount, attach, detach (also ``python -m fntrace``).

Every step raises UsageError (or another FntraceError) with a one-line message; only
``main()`` prints it and picks the exit status:

    0..255  the traced program's own status (record, live); or fntrace dies of the
            signal the program died of (SIGTERM, an uncaught KeyboardInterrupt ...)
    1       report/stat/diff/export/view/tui/top/sql/ls/ctl/mount/attach/detach failed (a bad
            trace file, a bad filter, a refused write, a process that cannot be
            attached); diff: a --fail-if expression held
    2       bad command line

The command line is cut in two before argparse sees it (split_target): fntrace's own
options, then the program — ``script.py``, ``-m MOD`` or ``-c CODE`` — and everything
after it, which is the program's and reaches it untouched, as with ``python -m
cProfile``.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..errors import FntraceError, UsageError
from .args import split_target

__all__ = ["main", "COMMANDS"]

# Every command, one line each: its name, its help, and its module in cli/, which has
# EPILOG, add_arguments(parser) and run(args, at_exit) -> int (the exit status).  Only
# the module of the command given is loaded: a command does not make the parsers of
# the others, nor load their modules (a quarter of every recording's start-up).
COMMANDS: dict[str, tuple[str, str]] = {
    "record": ("run a program traced and write a trace file", "record"),
    "report": ("print a trace file in ftrace text format", "report"),
    "stat": ("the function profile table of a trace file", "stat"),
    "diff": ("compare two trace files function by function (--fail-if for CI)", "diff"),
    "export": ("write a trace file in another tool's format", "export"),
    "view": ("write a trace's HTML report and open it in the browser", "view"),
    "tui": ("browse a trace file in the terminal", "tui"),
    "top": ("a running program's functions, live: calls/s, time, self, p99", "top"),
    "sql": ("SQL over trace files (DuckDB)", "sql"),
    "hist": ("the hist trigger tables of a recording", "hist"),
    "live": ("record and report in one go", "live"),
    "ctl": ("read and write the tracefs of a running program", "ctl"),
    "mount": ("mount the tracefs of a running program (FUSE)", "mount"),
    "ls": ("print available_filter_functions for a target", "ls"),
    "attach": ("make a running Python program controllable (fntrace ctl/mount)", "attach"),
    "detach": ("turn fntrace off in an attached or served program; it runs on", "detach"),
}
# the commands whose command line ends with a program (split_target)
_TAKE_A_PROGRAM = ("record", "live", "ls")


def _version() -> str:
    from .. import __version__, _env
    native = "native" if _env.native() is not None else "pure"
    return (f"fntrace {__version__} (Python {sys.version.split()[0]}, "
            f"{_env.BACKEND} back end, {native} hot path)")


_width: list[int] = []


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter (descriptions and epilogs as written) at argparse's own
    width, ``shutil.get_terminal_size().columns - 2``, found without importing shutil:
    argparse makes a formatter for every argument it is given, and the first one
    imports shutil, with bz2, lzma and fnmatch (8 M instructions, 4% of a recording's
    start-up)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            if not _width:
                _width.append(_columns() - 2)
            width = _width[0]
        super().__init__(prog, indent_increment, max_help_position, width)


def _columns() -> int:
    """shutil.get_terminal_size()'s columns: $COLUMNS, else the terminal of
    sys.__stdout__, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


def _parser(only: str | None = None):
    """The command line's parser, and the module of ``only``, the command given (None:
    none was, for ``fntrace --help`` and a word that is no command, which list the
    commands and need no module)."""
    p = argparse.ArgumentParser(
        prog="fntrace",
        description="ftrace for Python programs: trace function calls with the kernel's "
                    "function tracer formats.",
        epilog="examples:\n"
               "  fntrace live -F 'shop.*' -F '*:mod:__main__' examples/shop_demo.py\n"
               "  fntrace record -p function_graph -m mypkg.main --verbose && fntrace report\n"
               "  fntrace COMMAND --help",
        formatter_class=_Formatter)
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    mod = None
    for name, (help, module) in COMMANDS.items():
        if only is None:
            sub.add_parser(name, help=help, formatter_class=_Formatter)  # for --help
        elif name == only:
            mod = importlib.import_module(f"{__package__}.{module}")
            q = sub.add_parser(name, help=help, epilog=mod.EPILOG, formatter_class=_Formatter)
            mod.add_arguments(q)
    return p, mod


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def main(argv: list[str] | None = None) -> int:
    """The command line; ``argv=None`` means this process is the command (it exits
    when this returns), which lets record stop tracing the quick way."""
    at_exit = argv is None
    if argv is None:
        argv = sys.argv[1:]
    parser, mod = _parser(argv[0] if argv and argv[0] in COMMANDS else None)
    split = None
    if mod is not None:
        sub = _subparser(parser, argv[0])
        if sub is not None and argv[0] in _TAKE_A_PROGRAM:
            try:
                own, split = split_target(sub, argv[1:])
            except UsageError as e:
                sub.error(e.msg)
            argv = [argv[0], *own]
    args = parser.parse_args(argv)
    args.split_target = split
    try:
        return mod.run(args, at_exit)
    except UsageError as e:
        print(f"fntrace: {e.msg}", file=sys.stderr)
        return 2
    except FntraceError as e:
        print(f"fntrace: {e.msg}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `fntrace report | head`: the reader went away; that is not an error.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except OSError as e:
        # A file the command was given that cannot be read or written (the commands
        # name their own files; this is the last word for one they did not foresee).
        where = f"{e.filename}: " if e.filename else ""
        print(f"fntrace: {where}{e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":      # pragma: no cover
    sys.exit(main())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
