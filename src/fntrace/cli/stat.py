"""``fntrace stat``: the function profile table of a trace file (output/stat.py), as
the kernel's ``trace_stat/functionN`` prints it, plus self time."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator

from ..errors import UsageError
from ..output.stat import COLUMNS, DIST_COLUMNS, KERNEL_COLUMNS, SORT_KEYS
from .filters import add_filter_arguments

__all__ = ["EPILOG", "add_arguments", "run"]

EPILOG = """\
the columns are the function profiler's (trace_stat/functionN): Hit, Time (the calls'
total duration), Avg, s^2 (their variance, us^2), plus Self (Time less the callees'
time); a function trace (-p function) has Hit only.  -F/-N and the other filters
work as in fntrace report: with function_graph, -F counts a call and what runs under
it.

more columns (-c/--columns, --dist, --where): Stdev (of the calls' durations), Min,
Max, and the percentiles p50, p90 and p99 (nearest rank; read from a histogram with
32 buckets per power of two, so within 1.6% of the exact value, exact below 64 ns
and at either end), and Where (the function's file:line).

examples:
  fntrace stat                                  # fntrace.dat, all threads, by total time
  fntrace stat run.dat --sort self --limit 20   # where the time is spent
  fntrace stat run.dat --per-thread             # one table per thread (functionN)
  fntrace stat run.dat -F 'json.decoder.*' --wide   # under json's decoder, whole names
  fntrace stat run.dat --dist --sort p99        # latency distributions, worst tail first
  fntrace stat run.dat -c hit,avg,p99,where     # the columns asked for, in that order
  fntrace stat cpu.dat --cpu-time --sort self   # CPU time (record --cpu-time): compare
                                                # with plain stat to see who waits"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="fntrace.dat",
                   help="trace file (default: fntrace.dat)")
    p.add_argument("-s", "--sort", choices=SORT_KEYS, default=None, metavar="COLUMN",
                   help="sort by this column, largest first; function and where sort A "
                        "to Z (default: time; hit for a function trace); one of "
                        + ", ".join(SORT_KEYS))
    p.add_argument("-c", "--columns", default=None, metavar="LIST",
                   help="the columns to show, comma-separated, in order: "
                        + ",".join(COLUMNS) + " (default: " + ",".join(KERNEL_COLUMNS)
                        + ", the function profiler's)")
    p.add_argument("--dist", action="store_true",
                   help="the distribution columns: " + ",".join(DIST_COLUMNS))
    p.add_argument("--where", action="store_true",
                   help="add the Where column: each function's file:line")
    p.add_argument("--cpu-time", action="store_true",
                   help="durations as the threads' CPU time (a trace recorded with "
                        "--cpu-time); default: wall time, the time a thread waited "
                        "(sleep, I/O, a lock, the GIL) included")
    p.add_argument("-l", "--limit", default="0", metavar="N",
                   help="show the first N rows of each table (default: all)")
    p.add_argument("--per-thread", action="store_true",
                   help="one table per thread (the kernel's trace_stat/functionN per "
                        "CPU); default: one table for all threads")
    p.add_argument("-w", "--wide", action="store_true",
                   help="show whole function names (the kernel cuts them at 30 characters)")
    add_filter_arguments(p, thresh_help="hide functions whose average call took less than "
                                        "USEC microseconds (the profiler's tracing_thresh)",
                         depth_help="function_graph: count only the calls of the first N "
                                    "levels (their self time then holds the deeper calls')")


def columns_of(args) -> list[str] | None:
    """The columns -c/--dist/--where ask for (None: the kernel's table)."""
    cols: list[str] | None = None
    if args.columns is not None:
        cols = []
        for c in args.columns.split(","):
            c = c.strip().lower()
            if c == "s^2":
                c = "s2"
            if c not in COLUMNS:
                raise UsageError(f"--columns {args.columns!r}: no column {c!r} (known: "
                                 f"{', '.join(COLUMNS)})")
            cols.append(c)
    if args.dist:
        cols = (cols or []) + [c for c in DIST_COLUMNS if c not in (cols or ())]
    if args.where:
        cols = (cols or list(KERNEL_COLUMNS)) + ([] if cols and "where" in cols
                                                 else ["where"])
    return cols


def where_of(source) -> Callable[[str], str]:
    """name -> the function's ``file:line`` as the trace's symbols give it (the file
    relative to the working directory when it is under it)."""
    places: dict[str, str] = {}
    cwd = os.getcwd() + os.sep
    for sym in source.symbols.values():
        if len(sym) < 3 or sym[0] in places:
            continue
        f = str(sym[1])
        if f.startswith(cwd):
            f = f[len(cwd):]
        # (a C function has a file, <built-in>, and no line)
        places[sym[0]] = f"{f}:{sym[2]}" if f and sym[2] else f
    return lambda func: places.get(func, "")


def _limit(text: str) -> int:
    try:
        n = int(text, 10)
    except ValueError:
        n = -1
    if n < 0:
        raise UsageError(f"--limit {text!r}: not a number of rows (0: all)")
    return n


def stat_lines(source, args) -> Iterator[str]:
    """The output of ``fntrace stat`` for an open TraceSource, line by line."""
    from dataclasses import replace

    from ..output.stat import needs_dist, stat_table
    from .filters import check_matches, filter_from_args
    from .report import trace_loss_notes

    flt = filter_from_args(args)
    check_matches(flt, source.symbols, source.name, source.threads, source.cpus)
    # --thresh is the profiler's: rows whose average is below it are hidden
    # (function_stat_show), not calls.
    thresh_ns = flt.thresh_ns
    flt = replace(flt, thresh_ns=0)
    limit = _limit(args.limit)
    columns = columns_of(args)
    graph = source.tracer == "function_graph"
    if not graph and args.sort not in (None, "hit", "function", "where"):
        raise UsageError(f"--sort {args.sort}: a {source.tracer} trace has hits only "
                         "(record with -p function_graph for times)")
    if not graph and columns is not None and set(columns) - {"hit", "where"}:
        raise UsageError(f"--columns/--dist: a {source.tracer} trace has hits only "
                         "(record with -p function_graph for times)")
    dist = needs_dist(columns or (), args.sort)
    cpu = args.cpu_time
    if cpu:
        check_cpu_time(source)
    rows, no_return, no_entry, _ = collect_stats(source, flt, per_thread=args.per_thread,
                                                 dist=dist, cpu=cpu)
    where = where_of(source) if "where" in (columns or ()) or args.sort == "where" else None

    # What the table cannot show whole, above it (as report's header says it).
    notes = trace_loss_notes(source)
    if notes and notes[-1] == "#":
        notes.pop()
    if no_return:
        notes.append(f"# {no_return} calls have no return in the trace: counted in Hit, "
                     "not in Time")
    if no_entry:
        notes.append(f"# {no_entry} calls have no entry in the trace: counted from "
                     "their return")
    if cpu:
        notes.append("# durations: the threads' CPU time (recorded with --cpu-time)")
    if notes:
        yield from notes
        yield "#"
    if not args.per_thread:
        yield from stat_table(rows, graph, sort=args.sort, limit=limit,
                              tracing_thresh=thresh_ns, wide=args.wide, columns=columns,
                              where=where)
        return
    by_cpu: dict[int, list] = {}
    for r in rows:
        by_cpu.setdefault(r.cpu, []).append(r)
    first = True
    for cpu in sorted(by_cpu):
        if not first:
            yield ""
        first = False
        tid, name = source.threads.get(cpu, (0, "<...>"))
        yield f"# trace_stat/function{cpu}: {name}-{tid}"
        yield from stat_table(by_cpu[cpu], graph, sort=args.sort, limit=limit,
                              tracing_thresh=thresh_ns, wide=args.wide, columns=columns,
                              where=where)


def check_cpu_time(source) -> None:
    """--cpu-time: the trace must hold the calls' CPU time (recorded with sleep-time
    0)."""
    if source.header.get("sleep_time", True) is not False:
        raise UsageError(f"--cpu-time: {source.name} holds wall time only (record with "
                         "--cpu-time, the trace option nosleep-time)")


def collect_stats(source, flt, *, per_thread: bool = False, dist: bool = False,
                  edges: bool = False, cpu: bool = False):
    """The rows of an open TraceSource under filter ``flt`` (output/stat.py's
    StatWalked): by the native walk where it can (its blocks filtered natively, the
    processes of a trace walked in forked children), else by the entries.  ``cpu``:
    durations from the returns' calltimes (a trace recorded with sleep-time 0)."""
    from ..output.filters import filter_entries, native_split
    from ..output.stat import StatCollector, collected, forked_stats, walked_stats
    from .report import task_stream, time_in_ns_of
    graph = source.tracer == "function_graph"
    stream = source.entries()
    entries = task_stream(stream, source.stats, {"funcgraph-task": False}, flt)
    walked = None
    # the native walk, when there is one: fed the threads kept, whole, and the other
    # filters applied to its blocks natively (or, when they cannot be, not used)
    # (the task view left out of the stream only switch events, which no row counts:
    # the walk, which counts no event, reads the trace as it is unless --task picks)
    split = (native_split(flt, source, graph=graph, time_in_ns=time_in_ns_of(source))
             if entries is stream or not flt.tasks else None)
    if split is not None:
        keep, filt = split
        # (the blocks of the filter's window only, where the file's index says which)
        window = (None, None) if filt is None else (filt.since, filt.until)

        def fed(blocks):
            if keep is not None:
                blocks = (b for b in blocks if b[0] in keep)
            if filt is not None:
                blocks = ((c, lost, filt(c, records, base), base)
                          for c, lost, records, base in blocks)
            return blocks

        # a trace of several processes: its files walked at the same time (the bar is
        # drawn from its first advance: its thread starts once the children are forked)
        with source.parts_progress() as advance:
            walked = forked_stats(
                source, lambda part: fed(source.part_record_blocks(part, False, *window)),
                per_thread=per_thread, on_records=advance, dist=dist, edges=edges,
                cpu=cpu)
        blocks = None if walked is not None else source.record_blocks(None, False, *window)
        if blocks is not None:
            try:
                walked = walked_stats(source.tf, per_thread=per_thread,
                                      blocks=fed(blocks), dist=dist, edges=edges,
                                      cpu=cpu)
            finally:
                blocks.close()      # a walk that declined half way: its bar goes
    if walked is not None:
        return walked
    col = StatCollector(graph, per_thread, dist, edges, cpu)
    feed = col.feed
    for e in filter_entries(entries, flt, graph=graph,
                            time_in_ns=time_in_ns_of(source), threads=source.threads):
        feed(e)
    return collected(col)


def run(args, at_exit: bool) -> int:
    from ..output.source import TraceSource
    from ..tracefile.parallel import jobs_setting
    from .progress import track_source
    jobs_setting()                      # (a bad FNTRACE_JOBS refused before anything)
    columns_of(args)                    # (and a bad -c before the trace is opened)
    if not os.path.exists(args.file):
        raise UsageError(f"{args.file}: no such file")
    from .filters import open_traces_arg
    source = track_source(TraceSource(open_traces_arg(args.file, args), args.file), "stat")
    out = sys.stdout
    for line in stat_lines(source, args):
        out.write(line + "\n")
    out.flush()
    if source.truncated:
        sys.stderr.write(f"fntrace: {args.file}: trace file is cut short; counted up to the "
                         "last whole chunk\n")
        sys.stderr.flush()
    return 0


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
