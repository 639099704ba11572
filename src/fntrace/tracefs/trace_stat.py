"""The trace_stat/ directory and the function profiler's files (kernel/trace/trace_stat.c,
ftrace.c ftrace_profile_tracefs).

    function_profile_enabled   "0"/"1"; a write is kstrtoul's: any unsigned decimal, not
                               0 enables (ftrace_profile_write); anything else: EINVAL
    trace_stat/functionN       thread N's profile (one per thread index, as the kernel
                               has one per CPU; a file for every thread that has an
                               index, and function0 always)
    options/graph-time         1: a function's time includes the functions it calls
    options/sleep-time         1: and the time its thread was not running
                               (tracers/function_profile.py says what 0 measures;
                               the option is the function_graph tracer's too:
                               tracefs/options.py)
    options/profile-dist       1: each function's calls kept as a distribution, and
                               Min, p50, p90, p99, Max and Self (the time less the
                               callees') shown after s^2 (fntrace's; 0 by default,
                               the kernel's table)
    trace_stat/threads         "N TID NAME" of each thread N with a table (fntrace's)
    options/profile-wide       1: the Function column holds whole names, as wide as
                               the longest (fntrace's; 0 by default: cut to 30
                               characters as the kernel cuts a symbol)

A stat file is made when it is read (stat_seq_init): its rows sorted by the tracer's
key, largest first.  The kernel inserts each row into an rbtree before every row it does
not compare below, so rows that compare equal come out in the reverse of the order the
tracer listed them; the sort here gives the same order.

Only the top level has these files (ftrace_init_tracefs_toplevel).
"""
from __future__ import annotations

import errno
from collections.abc import Callable, Iterable
from functools import partial
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from ..core import task
from ..errors import FntraceError
from ..output.function_stat import (NAME_WIDTH, function_stat_headers, function_stat_key,
                                     function_stat_show)
from ..tracers.function_profile import FunctionProfiler

__all__ = ["StatTracer", "stat_text", "register_function_profiler", "kstrtoul", "stat_names",
           "stat_path"]


class StatTracer:
    """struct tracer_stat: a named file under trace_stat/ (the sort and the text)."""

    def __init__(self, name: str, items: Callable[[], Iterable], key: Callable,
                 show: Callable[[Any], str], headers: Callable[[], str]) -> None:
        self.name = name
        self.items = items          # stat_start/stat_next: the rows, in the tracer's order
        self.key = key              # stat_cmp, as a sort key (larger first)
        self.show = show            # stat_show: one row's text ("" hides it)
        self.headers = headers      # stat_headers


def stat_text(ts: StatTracer) -> str:
    """A read of trace_stat/NAME (stat_seq_init, stat_seq_show)."""
    rows = list(ts.items())
    rows.reverse()                  # ties: the later row first, as the rbtree puts it
    rows.sort(key=ts.key, reverse=True)
    return ts.headers() + "".join(ts.show(r) for r in rows)


def kstrtoul(data: str, name: str) -> int:
    """kstrtoul_from_user(buf, cnt, 10): an unsigned decimal, '+' and one trailing
    newline allowed; EINVAL otherwise, ERANGE past 64 bits."""
    s = data[:-1] if data.endswith("\n") else data
    digits = s[1:] if s.startswith("+") else s
    if not digits or not digits.isascii() or not digits.isdigit():
        raise FntraceError(f"{name}: {data.strip()!r} is not an unsigned number")
    v = int(digits)
    if v >= 1 << 64:
        err = FntraceError(f"{name}: {digits} is out of range")
        err.errno = errno.ERANGE
        raise err
    return v


def _option(data: str, name: str) -> bool:
    """A write of options/NAME (trace_options_core_write): 0 or 1, EINVAL else."""
    v = kstrtoul(data, name)
    if v not in (0, 1):
        raise FntraceError(f"{name}: expected 0 or 1, got {data.strip()!r}")
    return v == 1


# trace_stat/functionN is found when it is asked for, as per_thread/<tid>/ is: a file for
# function0 and for each thread index given so far (task.thread_info).  (A file made on
# each thread's first event cost that event a string, a partial and a hook's loop.)
_FUNCTION = "trace_stat/function"


def stat_names(fs) -> list[str]:
    """The trace_stat/functionN files of ``fs`` (a top-level directory has them)."""
    if getattr(fs, "profiler", None) is None:
        return []
    return [f"{_FUNCTION}{cpu}" for cpu in [0, *list(task.thread_info)]]


def stat_path(fs, path: str):
    """The (read, write) pair of trace_stat/functionN of ``fs``, or None."""
    prof = getattr(fs, "profiler", None)
    n = path[len(_FUNCTION):]
    if prof is None or not path.startswith(_FUNCTION) or not n.isdigit() or not n.isascii():
        return None
    cpu = int(n)
    if str(cpu) != n or (cpu != 0 and cpu not in task.thread_info):
        return None
    return (partial(_read_function_stat, prof, cpu), None)


def _read_function_stat(prof: FunctionProfiler, cpu: int) -> str:
    """A read of trace_stat/function<cpu>."""
    dist = prof.dist and prof.graph         # (one answer for the whole read)
    graph, wide = prof.graph, prof.wide
    width = [NAME_WIDTH]

    def rows() -> list[tuple]:
        out = prof.rows(cpu, dist)
        if wide:                            # the column as wide as the longest name
            width[0] = max([NAME_WIDTH, *(len(r[0]) for r in out)])
        return out
    return stat_text(StatTracer(f"function{cpu}", rows,
                                lambda r: function_stat_key(graph)(r),
                                lambda r: function_stat_show(
                                    r[0], r[1], r[2], r[3], graph=graph,
                                    tracing_thresh=prof.tr.tracing_thresh,
                                    dist=r[4:8] if dist else None, name_width=width[0]),
                                lambda: function_stat_headers(graph, dist, width[0])))


def _read_threads(prof: FunctionProfiler) -> str:
    """A read of trace_stat/threads (fntrace's: a CPU needs no name, a thread does):
    ``N TID NAME`` of each thread N with a table, for the reader of functionN."""
    out = []
    for cpu in sorted(list(prof.stats)):
        info = task.thread_info.get(cpu)
        if info is not None:
            out.append(f"{cpu} {info[0]} {info[1]}\n")
    return "".join(out)


def register_function_profiler(fs) -> FunctionProfiler:
    """Give a top-level Tracefs the profiler and its files (``fs.profiler``)."""
    prof = fs.profiler = FunctionProfiler(fs.tr)
    # options/sleep-time (tracefs/options.py) is the function_graph tracer's too
    fs.tr.profiler = prof
    prof.sleep_time = fs.tr.sleep_time

    def w_enabled(data: str, append: bool) -> None:
        prof.set_enabled(kstrtoul(data, "function_profile_enabled") != 0)

    def w_graph_time(data: str, append: bool) -> None:
        prof.graph_time = _option(data, "graph-time")

    def w_profile_dist(data: str, append: bool) -> None:
        prof.dist = _option(data, "profile-dist")

    def w_profile_wide(data: str, append: bool) -> None:
        prof.wide = _option(data, "profile-wide")

    fs._files["function_profile_enabled"] = (lambda: f"{int(prof.enabled)}\n", w_enabled)
    fs._files["options/graph-time"] = (lambda: f"{int(prof.graph_time)}\n", w_graph_time)
    fs._files["options/profile-dist"] = (lambda: f"{int(prof.dist)}\n", w_profile_dist)
    fs._files["options/profile-wide"] = (lambda: f"{int(prof.wide)}\n", w_profile_wide)
    fs._files["trace_stat/threads"] = (partial(_read_threads, prof), None)
    return prof


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
