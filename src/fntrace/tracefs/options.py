"""The trace options' files (kernel/trace/trace.c trace_options_write and
options/NAME): one switch each, on the instance's TraceArray.

    trace_options    every option, "noNAME" when off; a write of NAME or noNAME words
    options/NAME     0 or 1

Their names and the words' grammar are defined once, in output/trace_options.py
(the report's -O takes the same words).  The function profiler's options/graph-time
is its own (tracefs/trace_stat.py); sleep-time, as the kernel's fgraph_sleep_time, is
the function_graph tracer's and the profiler's.
"""
from __future__ import annotations

from ..core import fetch, ops, task
from ..errors import FntraceError
from ..output.trace_options import GRAPH_OPTIONS, OPTIONS, parse_trace_options
from .values import parse_bool

__all__ = ["register_options", "set_option"]


def register_options(fs) -> None:
    """The options' defaults on ``fs.tr`` and their files in ``fs``."""
    opts = fs.tr.options
    opts.setdefault("overwrite", True)
    opts.setdefault("markers", True)
    opts.setdefault("function-trace", True)
    opts.setdefault("sleep-time", True)
    for name, default in GRAPH_OPTIONS.items():
        opts.setdefault(name, default)
    fs._files["trace_options"] = (lambda: _r_trace_options(fs),
                                  lambda d, a: _w_trace_options(fs, d))
    for name in OPTIONS + tuple(GRAPH_OPTIONS):
        fs._files[f"options/{name}"] = (
            (lambda n=name: f"{int(fs.tr.options.get(n, False))}\n"),
            (lambda d, a, n=name: set_option(fs.tr, n, parse_bool(d, n))))


def _r_trace_options(fs) -> str:
    return "".join(f"{'' if fs.tr.options.get(n, False) else 'no'}{n}\n"
                   for n in OPTIONS + tuple(GRAPH_OPTIONS))


def _w_trace_options(fs, data: str) -> None:
    try:
        words = parse_trace_options(data)
    except FntraceError as e:
        fs.error_log.add("trace_options", "No such option", data.rstrip("\n"), e.pos or 0)
        raise
    for name, on in words:
        set_option(fs.tr, name, on)


def set_option(tr, name: str, on: bool) -> None:
    """Option ``name`` of the TraceArray ``tr`` set, and what it switches."""
    tr.options[name] = on
    if name == "object-repr":
        # The program's own __repr__/properties for -A/-R values and fetchargs
        # (core/fetch.py): one switch for the process, as the values are.
        fetch.settings.allow_program_code = on
    if name == "overwrite":
        tr.set_overwrite(on)
    elif name == "funcgraph-args":
        tr.graph_args = on
    elif name == "funcgraph-retval":
        tr.graph_retval = on
    elif name == "func-c-calls":
        # C functions are traced like Python ones: one switch for the process, as the
        # sites it changes are (core/ops.set_c_calls), on while any instance wants it
        ops.set_c_calls(("tracefs", id(tr)), on)
    elif name == "sleep-time":
        tr.sleep_time = on
        if tr.profiler is not None:
            tr.profiler.sleep_time = on
    elif name in ("function-fork", "event-fork"):
        if on:
            task.follow_forks()
        setattr(tr.filter, name.replace("-", "_"), on)
        tr.pids_changed()
