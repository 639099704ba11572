"""The report-time filters on the command line (``fntrace report`` and ``fntrace
stat``): the options, and the TraceFilter they make (output/filters.py says what each
does).  Loaded with the command-line parser, so the filter code itself is imported only
when a command runs."""
from __future__ import annotations

import argparse

from ..errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ..output.filters import TraceFilter

__all__ = ["add_filter_arguments", "add_pid_argument", "filter_from_args", "check_matches",
           "pids_from_args", "check_depth", "check_thresh",
           "open_traces_arg"]


def add_filter_arguments(p: argparse.ArgumentParser, *, graph_display: bool = True,
                         thresh_help: str | None = None, depth_help: str | None = None) -> None:
    """The report-time filters (output/filters.py), for report and stat alike.
    ``graph_display``: also -D and --thresh (function_graph's display limits)."""
    g = p.add_argument_group("filters (applied when reading the trace)")
    g.add_argument("-F", "--filter", action="append", default=[], metavar="GLOB",
                   help="only functions matching GLOB (module.qualname, set_ftrace_filter's "
                        "globs; repeatable, ORed); function_graph: the call and everything "
                        "under it, shown from depth 0 (uftrace replay -F)")
    g.add_argument("-N", "--notrace", action="append", default=[], metavar="GLOB",
                   help="leave out functions matching GLOB; function_graph: the call and "
                        "everything under it (uftrace replay -N); wins over -F")
    add_pid_argument(g)
    g.add_argument("--task", action="append", default=[], metavar="NAME",
                   help="only what ran in the asyncio Tasks whose name matches the glob "
                        "NAME (repeatable): one Task's steps, each resume under it")
    g.add_argument("--tid", action="append", default=[], metavar="TID",
                   help="only the thread with this native id (repeatable)")
    g.add_argument("--thread", action="append", default=[], metavar="NAME",
                   help="only threads whose name matches the glob NAME (repeatable)")
    g.add_argument("--cpu", action="append", default=[], metavar="N",
                   help="only thread slot N, the CPU column (repeatable)")
    g.add_argument("--from", dest="time_from", default=None, metavar="TIME",
                   help="only entries at or after TIME: seconds as the report prints them "
                        "(44774.715935) or +SECONDS after the first event (+0.5)")
    g.add_argument("--to", dest="time_to", default=None, metavar="TIME",
                   help="only entries at or before TIME (same forms; the whole microsecond)")
    if graph_display:
        g.add_argument("-D", "--max-depth", default="0", metavar="N",
                       help=depth_help or "function_graph: show at most N levels")
        g.add_argument("--thresh", default="0", metavar="USEC",
                       help=thresh_help or "function_graph: show only calls that took at "
                                          "least USEC microseconds")


def add_pid_argument(p) -> None:
    p.add_argument("--pid", action="append", default=[], metavar="PID",
                   help="only process PID of a trace that followed several (repeatable)")


def pids_from_args(args) -> frozenset[int]:
    return _ints(getattr(args, "pid", None) or [], "--pid", "not a process id")


def open_traces_arg(path: str, args, err=None):
    """The trace at ``path`` with the processes it followed (tracefile/trace_set.py), only
    ``--pid``'s if given; a child's file that cannot be read is named on ``err`` and
    left out."""
    import sys
    from ..tracefile.trace_set import open_traces
    tf = open_traces(path, pids_from_args(args))
    err = err or sys.stderr
    for line in getattr(tf, "bad", ()):
        err.write(f"fntrace: {line}\n")
    return tf


def _ints(values: list[str], what: str, check) -> frozenset[int]:
    out = set()
    for v in values:
        try:
            n = int(v, 10)
        except ValueError:
            raise UsageError(f"{what} {v!r}: {check}") from None
        if n < 0:
            raise UsageError(f"{what} {v!r}: {check}")
        out.add(n)
    return frozenset(out)


def _whole(text: str, what: str, unit: str, at_least: str) -> int:
    """A whole number of 0 or more (int()'s bases), or one line saying what it is not."""
    try:
        n = int(text, 0)
    except ValueError:
        raise UsageError(f"bad {what} {text!r}: not a {unit}") from None
    if n < 0:
        raise UsageError(f"bad {what} {n}: must be {at_least}")
    return n


def check_depth(text: str) -> int:
    return _whole(text, "max depth", "number", "0 (unlimited) or more")


def check_thresh(text: str) -> int:
    return _whole(text, "threshold", "whole number of microseconds",
                  "0 (off) or more microseconds")


def filter_from_args(args, *, graph_display: bool = True) -> "TraceFilter":
    """The TraceFilter of the command line (UsageError, one line, for a bad value)."""
    from ..output.filters import TraceFilter, check_glob, parse_time
    max_depth = thresh_ns = 0
    if graph_display:
        max_depth = check_depth(args.max_depth)
        thresh_ns = check_thresh(args.thresh) * 1000
    return TraceFilter(
        functions=tuple(check_glob(g, "-F") for g in args.filter),
        notrace=tuple(check_glob(g, "-N") for g in args.notrace),
        tids=_ints(args.tid, "--tid", "not a thread id"),
        threads=tuple(args.thread),
        cpus=_ints(args.cpu, "--cpu", "not a thread slot (0, 1, ...)"),
        time_from=parse_time(args.time_from, "--from") if args.time_from is not None else None,
        time_to=parse_time(args.time_to, "--to") if args.time_to is not None else None,
        max_depth=max_depth, thresh_ns=thresh_ns, tasks=tuple(getattr(args, "task", ())))


def check_matches(flt: "TraceFilter", symbols, path: str,
                  threads: "Mapping[int, tuple[int, str]] | None" = None,
                  cpus: "Iterable[int] | None" = None) -> None:
    """Refuse, as ``record`` refuses them, filters that match nothing in the trace: -F
    and -N globs that match no function of its symbol table (naming the closest), a
    --tid, --thread or --cpu that is none of its threads (naming them).  A UsageError
    (exit status 2), before anything is printed.  ``threads``: slot -> (native id,
    name), every thread the trace holds (one slot a thread)."""
    if flt.functions or flt.notrace:
        from ..core.kallsyms import close_names
        from ..output.filters import function_matcher
        names = sorted({sym[0] for sym in symbols.values()})
        for label, globs in (("-F", flt.functions), ("-N", flt.notrace)):
            for g in globs:
                match = function_matcher([g])
                if any(match(n) for n in names):
                    continue
                close = close_names(g, names)
                hint = (" (closest: " + ", ".join(repr(c) for c in close) + ")") if close else ""
                raise UsageError(f"{label} {g!r}: no function in {path} matches{hint}")
    if threads is None:
        return
    listed = sorted(set(threads.values()))

    def its_threads(limit: int = 8) -> str:
        shown = ", ".join(f"{tid} {name!r}" for tid, name in listed[:limit])
        more = f", and {len(listed) - limit} more" if len(listed) > limit else ""
        return f"(its threads: {shown}{more})" if listed else "(it holds no thread)"

    tids = {tid for tid, _ in listed}
    for tid in sorted(flt.tids):
        if tid not in tids:
            raise UsageError(f"--tid {tid}: no thread in {path} has that id {its_threads()}")
    if flt.threads:
        import fnmatch
        thread_names = {name for _, name in listed}
        for g in flt.threads:
            if not any(fnmatch.fnmatchcase(n, g) for n in thread_names):
                raise UsageError(f"--thread {g!r}: no thread in {path} matches "
                                 f"{its_threads()}")
    slots = set(cpus if cpus is not None else threads)
    for cpu in sorted(flt.cpus):
        if cpu not in slots:
            raise UsageError(f"--cpu {cpu}: {path} has no thread slot {cpu} "
                             f"(its slots: {', '.join(map(str, sorted(slots))) or 'none'})")


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
