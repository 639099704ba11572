"""``fntrace report``: a trace file printed as the kernel prints ``trace``."""
from __future__ import annotations

from collections.abc import Iterator

from ..output.ftrace_text import render_function_trace
from ..output.reader import entries_from_file

__all__ = ["report_text"]


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


def report_text(tf, *, print_parent: bool = True, irq_info: bool = False) -> Iterator[str]:
    tracer = tf.header.get("tracer", "function")
    entries, written = _counts(tf)
    nr_cpus = max(len(tf.threads), 1)
    yield from render_function_trace(entries_from_file(tf), header=True, tracer=tracer,
                                     nr_entries=entries, written=written, nr_cpus=nr_cpus,
                                     irq_info=irq_info, print_parent=print_parent)
