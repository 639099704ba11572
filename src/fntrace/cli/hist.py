"""``fntrace hist``: the hist files of a recording (events/hist.py), as they read when
the program ended: ``cat events/SYS/EVENT/hist`` after the fact.

A recording keeps each event's ``hist`` text in its trace file's stats; a followed
process keeps its own (a hist trigger counts in the process it runs in)."""
from __future__ import annotations

import argparse
import os
import sys

from ..core.hash import glob_match
from ..errors import UsageError
from .filters import add_pid_argument, open_traces_arg

__all__ = ["EPILOG", "add_arguments", "run", "hist_sections"]

EPILOG = """\
hist triggers are set with -e EVENT -T 'hist:keys=...' on record or live (or written
to events/SYS/EVENT/trigger of a served program); their tables are kept in the trace
file.  One event's table prints as its hist file reads; with several, each starts with
a '# events/SYS/EVENT/hist' line.

examples:
  fntrace record -e 'f:h app.handle route' -T 'hist:keys=route:sort=hitcount.descending' app.py
  fntrace hist                        # every event's table
  fntrace hist fntrace.dat 'fprobes:*'   # only these events"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="fntrace.dat",
                   help="trace file (default: fntrace.dat)")
    p.add_argument("events", nargs="*", metavar="SYS:EVENT",
                   help="only these events (globs, as set_event takes them)")
    add_pid_argument(p)


def hist_sections(traces, events: list[str] | None = None) -> list[str]:
    """The hist texts of ``traces`` [(pid, stats)], each under a '#' title line when
    there is more than one; a process's tables are titled with its pid when several
    processes have some."""
    found = []
    for pid, stats in traces:
        for name, text in ((stats or {}).get("hists") or {}).items():
            sysname, _, ev = name.partition(":")
            if events and not any(_matches(e, sysname, ev) for e in events):
                continue
            found.append((pid, name, text))
    if len(found) == 1:
        return [found[0][2]]
    pids = {pid for pid, _, _ in found}
    out = []
    for pid, name, text in found:
        sysname, _, ev = name.partition(":")
        where = f" (process {pid})" if len(pids) > 1 else ""
        out.append(f"# events/{sysname}/{ev}/hist{where}\n{text}")
    return out


def _matches(pattern: str, sysname: str, ev: str) -> bool:
    sp, _, ep = pattern.rpartition(":")
    return glob_match(sp or "*", sysname) and glob_match(ep or "*", ev)


def run(args, at_exit: bool) -> int:
    if not os.path.exists(args.file):
        raise UsageError(f"{args.file}: no such file")
    tf = open_traces_arg(args.file, args)
    files = getattr(tf, "files", None) or [tf]
    traces = [(int(f.header.get("pid") or 0), f.stats) for f in files]
    sections = hist_sections(traces, args.events)
    if not sections:
        what = f" for {' '.join(args.events)}" if args.events else ""
        sys.stderr.write(f"fntrace: {args.file}: no hist trigger was set{what} "
                         "(-e EVENT -T 'hist:keys=...')\n")
        return 1
    sys.stdout.write("\n".join(sections))
    sys.stdout.flush()
    return 0


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
