"""``fntrace report``: a trace file printed as the kernel prints ``trace``."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator

from ..output.filters import TraceFilter, filter_entries, native_split
from ..output.ftrace_text import native_function_text
from ..output.function_graph import native_graph_text
from ..output.task_view import task_entries
from ..output.reader import entries_from_file
from ..output.registry import nr_cpus_of, renderer_for
from ..output.render import render_trace
from ..errors import UsageError
from ..ring_buffer import CLOCK_IN_NS, TRACE_CLOCKS
from .args import add_report_options, report_opts

__all__ = ["report_text", "report_pieces", "task_stream", "loss_notes", "trace_loss_notes", "graph_display_filter",
           "time_in_ns_of", "EPILOG", "add_arguments", "run", "print_report"]


def _counts(tf) -> tuple[int, int]:
    """(entries in the file, entries written): written includes what was lost, so the
    header shows drops the way the kernel's entries-in-buffer/entries-written does."""
    entries = tf.nr_records()
    written = entries + tf.lost()
    stats = tf.stats or {}
    cpus = stats.get("cpus")
    if isinstance(cpus, dict):
        w = sum(int(c.get("written", 0)) for c in cpus.values() if isinstance(c, dict))
        written = max(written, w)
    return entries, written


def graph_display_filter(entries, max_depth: int = 0, thresh_ns: int = 0):
    """max_graph_depth and tracing_thresh applied when reading (uftrace replay -D/-t):
    entries at or below the depth limit are dropped; with a threshold only returns that
    took at least that long are kept, and no entries (the kernel's tracing_thresh)."""
    return filter_entries(entries, TraceFilter(max_depth=max_depth, thresh_ns=thresh_ns),
                          graph=True)


def time_in_ns_of(tf) -> bool:
    """The trace clock counts ns (timestamps print as seconds): the kernel's
    TRACE_FILE_TIME_IN_NS; counter and uptime print raw."""
    clock = (tf.stats or {}).get("trace_clock", "local")
    return CLOCK_IN_NS[TRACE_CLOCKS.index(clock)] if clock in TRACE_CLOCKS else True


def loss_notes(stats: dict | None, entries: int, written: int) -> list[str]:
    """Header lines saying what was lost, when something was (nothing is lost silently:
    the kernel's entries-written shows drops; these say why, and show the errors of
    callbacks, which lose calls without dropping records)."""
    stats = stats or {}
    notes = []
    errors = int(stats.get("callback_errors") or 0)
    not_written = int(stats.get("lost_in_writer") or 0)
    lost = max(0, written - entries)
    if lost or not_written:
        why = []
        cpus = stats.get("cpus")
        if not isinstance(cpus, dict):
            cpus = {}
        overrun = sum(int(c.get("overrun", 0)) for c in cpus.values() if isinstance(c, dict))
        dropped = sum(int(c.get("dropped", 0)) for c in cpus.values() if isinstance(c, dict))
        if overrun:
            why.append(f"{overrun} overwritten")
        if dropped:
            why.append(f"{dropped} dropped")
        if not_written:
            why.append(f"{not_written} not written: {stats.get('write_error', 'write failed')}")
        notes.append(f"# LOST EVENTS: {max(lost, not_written)}"
                     + (f" ({'; '.join(why)})" if why else ""))
    if errors:
        notes.append(f"# callback errors: {errors} (contained; their calls are missing)")
    faults = int(stats.get("repr_faults") or 0)
    if faults:
        notes.append(f"# --repr: {faults} calls of the program's __repr__ raised or were slow "
                     "(shown as (fault), or a slow type by its safe text from then on)")
    if notes:
        notes.append("#")
    return notes


def trace_loss_notes(tf) -> list[str]:
    """loss_notes() of a trace file (a TraceFile or a TraceSource): its counts and the
    recorder's stats."""
    entries, written = _counts(tf)
    stats = tf.stats or {}
    return loss_notes(stats, entries, written + int(stats.get("lost_in_writer") or 0))


def task_stream(entries, stats: dict | None, options: dict, flt: TraceFilter | None):
    """The entries with the asyncio task view applied (output/task_view.py) when the
    trace has task switches or ``--task`` asks for it; else as they are."""
    tasks = flt.tasks if flt is not None else ()
    show = bool(options.get("funcgraph-task", True))
    comm = bool(options.get("task-comm", False))
    if not tasks and not comm and (
            show or not int((stats or {}).get("task_switches") or 0)):
        return entries
    return task_entries(entries, show=show, tasks=tasks, comm=comm)


def report_text(tf, *, max_depth: int = 0, thresh_ns: int = 0,
                options: dict | None = None, flt: TraceFilter | None = None) -> Iterator[str]:
    """A trace file's text, as the kernel prints ``trace`` (output/render.py), with the
    report-time filters (``flt``; or only the depth and threshold), and what was lost
    in the header."""
    return _report(tf, max_depth, thresh_ns, options, flt, None)


def report_pieces(tf, *, max_depth: int = 0, thresh_ns: int = 0,
                  options: dict | None = None, flt: TraceFilter | None = None,
                  on_block: Callable[[int], None] | None = None) -> Iterator[str]:
    """report_text's text in pieces, each one or more lines ending in a newline: the
    body of a function_graph trace printed whole, with no filter, by the native
    printer (output/function_graph.py's native_graph_text; ``on_block`` is told of
    the records it reads), else report_text's lines."""
    return _report(tf, max_depth, thresh_ns, options, flt, on_block or (lambda n: None))


def _report(tf, max_depth: int, thresh_ns: int, options: dict | None,
            flt: TraceFilter | None, on_block) -> Iterator[str]:
    tracer = tf.header.get("tracer", "function")
    nr_cpus = nr_cpus_of(tf.threads)
    opts = dict(options or {})
    # What was recorded is shown unless turned off.
    opts.setdefault("funcgraph-args", bool(tf.header.get("graph_args")))
    opts.setdefault("funcgraph-retval", bool(tf.header.get("graph_retval")))
    entries, written = _counts(tf)
    stats = dict(tf.stats or {})
    clock = stats.get("trace_clock", "local")
    # counter and uptime timestamps print raw, as the kernel's trace does
    in_ns = CLOCK_IN_NS[TRACE_CLOCKS.index(clock)] if clock in TRACE_CLOCKS else True
    not_written = int(stats.get("lost_in_writer") or 0)
    written += not_written
    notes = loss_notes(stats, entries, written)
    if flt is None:
        flt = TraceFilter(max_depth=max_depth, thresh_ns=thresh_ns)
    raw = entries_from_file(tf)
    stream = task_stream(raw, stats, opts, flt)
    body = None
    graph = tracer == "function_graph"
    if on_block is not None and stream is raw and \
            renderer_for(tracer, opts).name == ("function_graph" if graph else "function"):
        # the native printer, the threads kept fed to it whole, the other filters
        # applied to its blocks natively (or, when they cannot be, not used)
        split = native_split(flt, tf, graph=graph, time_in_ns=in_ns)
        if split is not None:
            body = native_graph_text(tf, opts, nr_cpus, on_block, *split) if graph else \
                native_function_text(tf, opts, in_ns, on_block, *split)
    if body is not None:
        # (function_graph's header has no entries counts)
        lines = render_trace((), tracer=tracer, options=opts, nr_cpus=nr_cpus,
                             time_in_ns=in_ns, nr_entries=None if graph else entries,
                             written=None if graph else written)
        for i, line in enumerate(lines):
            yield line + "\n"
            if i == 1:
                yield from (n + "\n" for n in notes)
        yield from body
        return
    stream = filter_entries(stream, flt, graph=tracer == "function_graph",
                            time_in_ns=in_ns, threads=tf.threads)
    lines = render_trace(stream, tracer=tracer, options=opts, nr_entries=entries,
                         written=written, nr_cpus=nr_cpus, time_in_ns=in_ns)
    # the notes go after "# tracer: NAME" and its "#"
    nl = "" if on_block is None else "\n"
    for i, line in enumerate(lines):
        yield line + nl
        if i == 1:
            yield from (n + nl for n in notes)


# -- the command ---------------------------------------------------------------------
EPILOG = """\
examples:
  fntrace report                       # fntrace.dat, as the kernel prints 'trace'
  fntrace report run.dat -O funcgraph-proc -O nofuncgraph-cpu
  fntrace report run.dat -F 'markdown.*' -D 2 --thresh 100   # under markdown: 2 levels, >= 100 us
  fntrace report run.dat --thread 'worker*' -N '*.escape' --from +0.5 --to +0.75"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .filters import add_filter_arguments
    p.add_argument("file", nargs="?", default="fntrace.dat",
                   help="trace file (default: fntrace.dat)")
    add_report_options(p)
    add_filter_arguments(p)


def run(args, at_exit: bool) -> int:
    from .filters import filter_from_args
    if not os.path.exists(args.file):
        raise UsageError(f"{args.file}: no such file")
    ropts = report_opts(args)
    ropts["flt"] = filter_from_args(args)
    print_report(args.file, ropts, sys.stdout, sys.stderr, args)
    return 0


def print_report(path: str, ropts: dict, out, err, args=None) -> None:
    """The report of the trace file ``path`` written to ``out`` (``ropts``: report_opts'
    options and the filter), with a progress bar where one should show."""
    from .filters import open_traces_arg
    from .progress import ProgressBar, track_tracefile
    tf = open_traces_arg(path, args, err)
    if ropts.get("flt") is not None:
        from .filters import check_matches
        check_matches(ropts["flt"], tf.symbols, path, tf.threads, tf.cpus)
    tracked = track_tracefile(tf, "report", out)
    bar: list = []

    def on_block(n: int) -> None:
        # the native printer's reading, on a bar of its own when one should show
        if not bar:
            bar.append(ProgressBar("report", tf.nr_records()) if tracked is not tf else None)
        if bar[0] is not None:
            bar[0].advance(n)
    # lines go out some 256 kB at a time (a write per line cost a tenth of a report
    # to a file in system time; a terminal's reader sees no difference)
    write = out.write
    batch: list[str] = []
    add = batch.append
    size = 0
    try:
        for piece in report_pieces(tracked, on_block=on_block, **ropts):
            add(piece)
            size += len(piece)
            if size >= 1 << 18:
                write("".join(batch))
                batch.clear()
                size = 0
    finally:
        if batch:           # what was read before a damaged block is still printed
            write("".join(batch))
        if bar and bar[0] is not None:
            bar[0].close()
    out.flush()
    if tf.truncated:
        err.write(f"fntrace: {path}: trace file is cut short; reported up to the last "
                  "whole chunk\n")
        err.flush()


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
