"""``fntrace ctl``: the tracefs of a running program, from a shell.

    fntrace ctl                                  the programs you can control
    fntrace ctl PID FILE                         cat FILE (trace_pipe streams until ^C)
    fntrace ctl PID FILE VALUE                   echo VALUE > FILE
    fntrace ctl PID FILE VALUE --append          echo VALUE >> FILE
    fntrace ctl PID --ls [DIR]                   ls DIR
    fntrace ctl PID --mkdir instances/NAME       mkdir, rmdir

Every request goes through the program's control endpoint (tracefs/client.py) and
ends in its tracefs write handlers.  A refused write prints the error as the kernel
gives it (its errno's message, what was wrong) and the error_log entry with its caret,
and exits with status 1.
"""
from __future__ import annotations

import argparse
import errno
import os
import signal
import sys

from ..errors import FntraceError, UsageError

# The client and its sockets are loaded by run(): the parser of every fntrace
# command reads this module's arguments.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..tracefs.client import ClientPipe

__all__ = ["EPILOG", "add_arguments", "parse_pid", "pid_arg", "run"]

EPILOG = """\
examples:
  fntrace ctl                                      # PID and command line of each
  fntrace ctl 4242 current_tracer function         # echo function > current_tracer
  fntrace ctl 4242 set_ftrace_filter '!json.*' --append
  fntrace ctl 4242 trace_pipe                      # stream until ^C"""


def add_arguments(p) -> None:
    p.add_argument("pid", nargs="?", metavar="PID",
                   help="the program (started with --serve, calling fntrace.serve(), or "
                        "attached); without it, list the programs you can control")
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="a tracefs file: print it, or write VALUE to it")
    p.add_argument("value", nargs="?", metavar="VALUE",
                   help="write VALUE to FILE (like echo VALUE > FILE)")
    p.add_argument("-a", "--append", action="store_true",
                   help="append instead of replace (like echo VALUE >> FILE)")
    p.add_argument("--ls", nargs="?", const="", default=None, metavar="DIR",
                   help="list a directory of the tracefs (the top level without DIR)")
    p.add_argument("--mkdir", metavar="instances/NAME", help="make an instance")
    p.add_argument("--rmdir", metavar="instances/NAME", help="remove an instance")


def parse_pid(text: str) -> int:
    """A process id given on the command line (``ctl``, ``mount``, ``attach``, ``detach``)."""
    try:
        pid = int(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a process id") from None
    if pid <= 0:
        raise UsageError(f"{text!r} is not a process id")
    return pid


def _refused(path: str, e: FntraceError, err) -> int:
    why = os.strerror(e.errno) if e.errno else "error"
    err.write(f"fntrace: {path}: write error: {why}: {e.msg}\n")
    log = getattr(e, "error_log", "")
    if log:
        err.write(log if log.endswith("\n") else log + "\n")
    err.flush()
    return 1


def _stream(pipe: "ClientPipe", out) -> int:
    """Copy trace_pipe to stdout until ^C (or the program ends): quietly, as cat."""
    try:
        while True:
            text = pipe.read(None)
            if text:
                out.write(text)
                out.flush()
    except KeyboardInterrupt:
        return 130
    except FntraceError as e:
        if e.errno in (errno.ESRCH, errno.EIO):
            # the program has exited (or stopped serving): the stream ends, as cat's
            # does at the end of a file
            return 0
        raise
    finally:
        pipe.close()


def pid_arg(text: str) -> int:
    try:
        return parse_pid(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run(args, at_exit: bool, out=None, err=None) -> int:
    from ..tracefs.client import Client, ClientPipe
    from ..tracefs.endpoint import list_endpoints
    out = out or sys.stdout
    err = err or sys.stderr
    if args.pid is None:
        if args.file or args.ls is not None or args.mkdir or args.rmdir:
            raise UsageError("give the PID first: fntrace ctl PID ...")
        for pid, cmdline in list_endpoints():
            out.write(f"{pid:>7}  {cmdline}\n")
        return 0
    pid = parse_pid(args.pid)
    actions = [a for a in (args.file is not None, args.ls is not None, bool(args.mkdir),
                           bool(args.rmdir)) if a]
    if len(actions) != 1:
        raise UsageError("give one of FILE, --ls [DIR], --mkdir DIR, --rmdir DIR")
    if args.append and args.value is None:
        raise UsageError("--append needs a VALUE to write")
    if args.file is not None and args.file.strip("/").split("/")[-1] == "trace_pipe":
        if args.value is not None:
            raise UsageError(f"{args.file} cannot be written")
        pipe = ClientPipe(pid, args.file.strip("/"))
        # ^C ends the stream quietly, even when the shell set SIGINT to be ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
        return _stream(pipe, out)
    with Client(pid) as c:
        if args.ls is not None:
            for name in c.ls(args.ls.strip("/")):
                out.write(name + "\n")
            return 0
        if args.mkdir or args.rmdir:
            path = (args.mkdir or args.rmdir).strip("/")
            try:
                (c.mkdir if args.mkdir else c.rmdir)(path)
            except FntraceError as e:
                err.write(f"fntrace: {'mkdir' if args.mkdir else 'rmdir'} {path}: "
                          f"{os.strerror(e.errno)}: {e.msg}\n")
                return 1
            return 0
        path = args.file.strip("/")
        if args.value is None:
            out.write(c.read(path))
            out.flush()
            return 0
        try:
            c.write(path, args.value, append=args.append)
        except FntraceError as e:
            if e.errno in (errno.ESRCH, errno.EIO):
                raise           # the program went away: not the file's refusal
            return _refused(path, e, err)
        return 0


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
