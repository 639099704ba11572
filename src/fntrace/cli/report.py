"""``fntrace report``: a trace file printed as the kernel prints ``trace``."""
from __future__ import annotations

from collections.abc import Iterator

from ..output.ftrace_text import render_function_trace
from ..output.function_graph import GraphPrinter
from ..output.reader import entries_from_file

__all__ = ["report_text"]

_TEXT_KW = ("print_parent", "irq_info")
_GRAPH_KW = ("cpu", "overhead", "proc", "duration", "abstime", "tail", "retval",
             "retval_hex", "overrun", "args", "irq_info")


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
    from ..output.entry import TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TraceEntry
    for e in entries:
        if isinstance(e, TraceEntry) and e.type in (TRACE_GRAPH_ENT, TRACE_GRAPH_RET):
            if max_depth and e.depth >= max_depth:
                continue
            if thresh_ns:
                if e.type == TRACE_GRAPH_ENT or e.rettime - e.calltime < thresh_ns:
                    continue
        yield e


def report_text(tf, *, max_depth: int = 0, thresh_ns: int = 0, **opts) -> Iterator[str]:
    tracer = tf.header.get("tracer", "function")
    nr_cpus = max(len(tf.threads), 1)
    if tracer == "function_graph":
        kw = {k: v for k, v in opts.items() if k in _GRAPH_KW}
        # What was recorded is shown unless turned off.
        kw.setdefault("args", bool(tf.header.get("graph_args")))
        kw.setdefault("retval", bool(tf.header.get("graph_retval")))
        p = GraphPrinter(nr_cpus=nr_cpus, **kw)
        yield from p.headers()
        yield from p.render(graph_display_filter(entries_from_file(tf), max_depth, thresh_ns))
        return
    entries, written = _counts(tf)
    kw = {k: v for k, v in opts.items() if k in _TEXT_KW}
    yield from render_function_trace(entries_from_file(tf), header=True, tracer=tracer,
                                     nr_entries=entries, written=written, nr_cpus=nr_cpus, **kw)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
