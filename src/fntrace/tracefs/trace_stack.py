"""The stack tracer's files (kernel/trace/trace_stack.c): the deepest stack seen, its
limit, the functions it looks at, and its switch.  The stack tracer is the process's,
as the kernel's is global: only the top level has them.

    stack_trace           the deepest stack so far, frame by frame (sizes in bytes)
    stack_max_size        that depth; a write sets it (0 starts over)
    stack_trace_filter    set_ftrace_filter's grammar for the functions measured
    stack_tracer_enabled  1 to measure, 0 to stop
"""
from __future__ import annotations

from ..core.hash import hash_lines
from ..core.records import record_table
from ..errors import FilterError, FntraceError
from ..tracers.stack import stack_tracer
from .values import parse_bool

__all__ = ["register_stack_tracer"]


def register_stack_tracer(fs) -> None:
    """Add the files to ``fs`` (the top level's Tracefs: its ``_files``, ``error_log``
    and ``keep_unmatched``)."""
    fs._files.update({
        "stack_trace": (lambda: stack_tracer().table(), None),
        "stack_max_size": (lambda: f"{stack_tracer().max_size}\n", _w_stack_max_size),
        "stack_trace_filter": (_r_stack_filter, lambda d, a: _w_stack_filter(fs, d, a)),
        "stack_tracer_enabled": (lambda: f"{int(stack_tracer().enabled)}\n",
                                 lambda d, a: stack_tracer().set_enabled(
                                     parse_bool(d, "stack_tracer_enabled"))),
    })


def _w_stack_max_size(data: str, append: bool) -> None:
    s = data.strip()
    try:
        val = int(s)
    except ValueError:
        raise FntraceError(f"stack_max_size: {s!r} is not a number") from None
    stack_tracer().set_max_size(val)


def _r_stack_filter() -> str:
    ops = stack_tracer().ops
    lines = hash_lines(ops.filter_hash, record_table.records, ops.mod_cache,
                       empty_line="#### all functions enabled ####")
    return "".join(l + "\n" for l in lines)


def _w_stack_filter(fs, data: str, append: bool) -> None:
    text = data.rstrip("\n")
    try:
        stack_tracer().set_filter(text if text.strip() else None, not append,
                                  fs.keep_unmatched)
    except FilterError as e:
        fs.error_log.add("ftrace", e.msg, text, e.pos or 0)
        raise
