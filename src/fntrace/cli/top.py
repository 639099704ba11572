"""``fntrace top PID``: the functions of a running program, live, exact.

    attach (unless the program already serves)      tracefs/attach.py
    set_ftrace_filter   the functions asked for (-F), else the program's own modules
    options/profile-dist 1, options/profile-wide 1, function_profile_enabled 1
    every DELAY s: trace_stat/threads and trace_stat/functionN, read over the control
                   endpoint -> the table (output/top_table.py), drawn by the live
                   screen (tui/top.py) or printed (--batch)
    on quit: every file written put back as it was read; detached if top attached

``py-spy top`` samples stacks; this counts every call of the functions traced (the
function profiler, kernel/trace/ftrace.c's), with their latencies.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from ..errors import FntraceError, UsageError
from .ctl import pid_arg

__all__ = ["EPILOG", "add_arguments", "run", "TopSession", "own_patterns"]

EPILOG = """\
keys (the live screen): s sorts by the next column, / filters by name, t shows the next
thread (all threads first), q quits (and leaves the program as it was).

examples:
  fntrace top 4242                         # the program's own modules
  fntrace top 4242 -F 'shop.*' -F 'json.*'
  fntrace top 4242 --batch -n 3 -d 2       # print the table 3 times, 2 s apart"""

# the files top writes, put back as they were when it ends
_SAVED = ("options/profile-dist", "options/profile-wide", "function_profile_enabled",
          "set_ftrace_filter")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", type=pid_arg, metavar="PID", help="the program's process id")
    p.add_argument("-F", "--filter", action="append", default=[], metavar="GLOB",
                   help="trace the functions matching GLOB (repeatable; set_ftrace_filter's "
                        "grammar); default: the modules beside the program's script "
                        "and its __main__")
    p.add_argument("-d", "--delay", type=float, default=1.0, metavar="SEC",
                   help="seconds between refreshes (default: 1)")
    p.add_argument("-b", "--batch", action="store_true",
                   help="print the table every DELAY seconds instead of the live screen")
    p.add_argument("-n", "--iterations", type=int, default=0, metavar="N",
                   help="--batch: stop after N tables (default: until ^C)")
    p.add_argument("-s", "--sort", default="rate", metavar="KEY",
                   help="rate (calls/s, default), hit, time, self, avg, p99, max, function")
    p.add_argument("-l", "--limit", type=int, default=25, metavar="N",
                   help="--batch: the first N functions (default: 25; 0: all)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SEC",
                   help="how long to wait for the program to answer when attaching "
                        "(default: 10)")


def own_patterns(pid: int) -> list[str]:
    """The program's own code, as set_ftrace_filter patterns: its ``__main__`` and the
    modules and packages beside its script (or the package it runs with -m); the
    standard library and installed packages are left out."""
    pats = ["*:mod:__main__"]
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return pats
    args = argv[1:]
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args = args[2:] if args[0] in ("-X", "-W") else args[1:]
    if args[:1] == ["-m"] and len(args) > 1:
        return pats + [args[1].split(".")[0] + ".*"]
    if not args or args[0] == "-c":
        return pats
    script = os.path.join(cwd, args[0])
    here = os.path.dirname(os.path.realpath(script))
    try:
        names = sorted(os.listdir(here))
    except OSError:
        return pats
    for name in names:
        path = os.path.join(here, name)
        if name.endswith(".py") and os.path.realpath(path) != os.path.realpath(script):
            mod = name[:-3]
        elif os.path.isfile(os.path.join(path, "__init__.py")):
            mod = name
        else:
            continue
        if mod.isidentifier():
            pats.append(f"{mod}.*")
    return pats[:64]


class TopSession:
    """The running program's tracefs, set up for ``top`` and put back by ``close``."""

    def __init__(self, pid: int, patterns: list[str], *, given: bool,
                 timeout: float = 10.0) -> None:
        from ..tracefs.attach import attach
        from ..tracefs.client import Client
        self.pid = pid
        _, already = attach(pid, timeout=timeout)
        self.attached = not already
        self.client = Client(pid)
        self.saved: dict[str, str] = {}
        self.patterns: list[str] = []
        self.skipped: list[str] = []
        self.unreached = ""
        try:
            info = self.client.info()
            if info.get("backend") == "profile" and info.get("hot_path") == "pure":
                # (sys.setprofile sets the calling thread's hook only; native: ProfileShim)
                self.unreached = (
                    "the program runs fntrace's pure setprofile hook (no native module "
                    f"for Python {info.get('python')}, or FNTRACE_PURE=1): the threads "
                    "already running, its main thread among them, are not counted; "
                    "threads started from now on are")
            for path in _SAVED:
                self.saved[path] = self.client.read(path)
            self._filter(patterns, given)
            for path in ("options/profile-dist", "options/profile-wide"):
                self.client.write(path, "1")
            self.client.write("function_profile_enabled", "0")
            self.client.write("function_profile_enabled", "1")     # (the tables anew)
        except BaseException:
            self.close()
            raise

    def _filter(self, patterns: list[str], given: bool) -> None:
        first = True
        for pat in patterns:
            try:
                self.client.write("set_ftrace_filter", pat, append=not first)
            except FntraceError:
                if given:
                    raise
                self.skipped.append(pat)    # (a module of the default not imported yet)
                continue
            first = False
            self.patterns.append(pat)
        if first:
            raise FntraceError(f"top: no function of process {self.pid} matches "
                               + " ".join(patterns) + " (-F names them)")

    def threads(self) -> dict[int, str]:
        """Thread slot -> NAME-TID, of the threads with a table."""
        out = {}
        for line in self.client.read("trace_stat/threads").splitlines():
            cpu, tid, name = (line.split(" ", 2) + ["", ""])[:3]
            if cpu.isdigit():
                out[int(cpu)] = f"{name}-{tid}"
        return out

    def tables(self) -> dict[int, str]:
        """Each thread's trace_stat/functionN."""
        out = {}
        for name in self.client.ls("trace_stat"):
            if name.startswith("function") and name[8:].isdigit():
                out[int(name[8:])] = self.client.read(f"trace_stat/{name}")
        return out

    def close(self) -> None:
        """Everything written put back as it was read; detached if top attached."""
        try:
            if self.saved.get("function_profile_enabled", "0").strip() == "0":
                self.client.write("function_profile_enabled", "0")
            for path in ("options/profile-dist", "options/profile-wide"):
                if path in self.saved:
                    self.client.write(path, self.saved[path].strip())
            if "set_ftrace_filter" in self.saved:
                _restore_filter(self.client, self.saved["set_ftrace_filter"])
        except (FntraceError, OSError):
            pass                        # (the program may have ended meanwhile)
        finally:
            self.client.close()
        if self.attached:
            from ..tracefs.attach import detach
            try:
                detach(self.pid)
            except (FntraceError, OSError):
                pass


def _restore_filter(client, text: str) -> None:
    """set_ftrace_filter as it read: its functions written back (all functions: the
    file emptied)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    client.write("set_ftrace_filter", "")
    for ln in lines:
        try:
            client.write("set_ftrace_filter", ln, append=True)
        except FntraceError:
            pass


def run(args, at_exit: bool) -> int:
    from ..output.top_table import TOP_SORT_KEYS, TopTable, top_lines
    if args.sort not in TOP_SORT_KEYS:
        raise UsageError(f"--sort {args.sort!r}: one of {', '.join(TOP_SORT_KEYS)}")
    if not args.delay > 0:
        raise UsageError(f"--delay {args.delay}: must be more than 0")
    if args.iterations < 0 or args.limit < 0:
        raise UsageError("--iterations and --limit take 0 or more")
    if not args.batch:
        from importlib.util import find_spec
        if find_spec("textual") is None:
            raise FntraceError("top: the live screen needs the textual package: pip "
                               "install 'fntrace[tui]' (or use --batch)")
    given = bool(args.filter)
    patterns = args.filter or own_patterns(args.pid)
    session = TopSession(args.pid, patterns, given=given, timeout=args.timeout)
    try:
        for pat in session.skipped:
            sys.stderr.write(f"fntrace top: {pat}: no function matches yet; left out\n")
        if session.unreached:
            sys.stderr.write(f"fntrace top: {session.unreached}\n")
            sys.stderr.flush()
        table = TopTable()
        table.update(session.tables(), time.monotonic())
        if not args.batch:
            from ..tui.top import TopScreen
            TopScreen(session, table, delay=args.delay, sort=args.sort,
                      title=f"fntrace top {args.pid}: " + " ".join(session.patterns)).run()
            return 0
        n = 0
        while True:
            time.sleep(args.delay)
            table.update(session.tables(), time.monotonic())
            n += 1
            sys.stdout.write(f"# {time.strftime('%H:%M:%S')} process {args.pid}: "
                             + " ".join(session.patterns) + "\n")
            for line in top_lines(table.rows(), sort=args.sort, limit=args.limit):
                sys.stdout.write(line + "\n")
            sys.stdout.write("\n")
            sys.stdout.flush()
            if args.iterations and n >= args.iterations:
                return 0
    except KeyboardInterrupt:
        return 0
    finally:
        session.close()


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
