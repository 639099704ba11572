"""Which printer a trace read uses (kernel/trace/trace.c ``s_show`` and
``print_trace_line``), in one place for every reader: the tracefs ``trace``,
``trace_pipe`` and ``snapshot`` files, ``fntrace report`` and the Python API.

The kernel asks the current tracer: a tracer with a ``print_header`` / ``print_line`` of
its own (function_graph) prints its header and its lines, and hands back only the entries
it does not draw; every other tracer (function, nop) gets the default header
(``# entries-in-buffer/entries-written``, the TASK-PID column help) and the default line
format.  ``render_trace`` does the same with the renderers of this package:

    function_graph   GraphPrinter (output/function_graph.py)
    anything else    render_function_trace (output/ftrace_text.py)

Options are passed in their tracefs names (``trace_options``, ``options/*``); any name
left out has the kernel's default for it, the value TRACE_OPTIONS gives.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from .entry import LostEvents, TraceEntry
from .ftrace_text import render_function_trace
from .function_graph import GraphPrinter

__all__ = ["TRACE_OPTIONS", "render_trace"]

# The options that change the text, in their tracefs names, with their defaults: the
# kernel's tracer_flags.val of function_graph (trace_functions_graph.c) and fntrace's
# generic defaults (print-parent on; irq-info off, since a Python thread has no
# interrupt state to show).
TRACE_OPTIONS: Mapping[str, bool] = {
    "print-parent": True,
    "irq-info": False,
    "funcgraph-overrun": False,
    "funcgraph-cpu": True,
    "funcgraph-overhead": True,
    "funcgraph-proc": False,
    "funcgraph-duration": True,
    "funcgraph-abstime": False,
    "funcgraph-tail": False,
    "funcgraph-retval": False,
    "funcgraph-retval-hex": False,
    "funcgraph-args": False,
}

# tracefs option name -> GraphPrinter keyword
_GRAPH_KEYWORDS: Mapping[str, str] = {
    "funcgraph-overrun": "overrun",
    "funcgraph-cpu": "cpu",
    "funcgraph-overhead": "overhead",
    "funcgraph-proc": "proc",
    "funcgraph-duration": "duration",
    "funcgraph-abstime": "abstime",
    "funcgraph-tail": "tail",
    "funcgraph-retval": "retval",
    "funcgraph-retval-hex": "retval_hex",
    "funcgraph-args": "args",
    "irq-info": "irq_info",
    "print-parent": "print_parent",
}

_GRAPH_TRACER = "function_graph"


def render_trace(entries: Iterable[TraceEntry | LostEvents], *, tracer: str = "function",
                 options: Mapping[str, bool] | None = None, nr_entries: int | None = None,
                 written: int | None = None, nr_cpus: int | None = None,
                 header: bool = True) -> Iterator[str]:
    """The lines of a trace read (no newlines), printed the way ``tracer`` prints them.

    entries     decoded entries merged across cpus in time order, with LostEvents
                markers where a buffer dropped events (output/reader.py)
    tracer      the current tracer's name: "function_graph" uses the graph printer,
                any other name ("function", "nop", ...) the default format, whose
                header starts ``# tracer: NAME``
    options     trace options by tracefs name, e.g. {"funcgraph-retval": True,
                "print-parent": False}; a name left out takes its TRACE_OPTIONS default,
                and names that do not change the text ("overwrite", "markers", ...)
                are ignored, so an instance's whole option dict can be passed
    nr_entries  entries in the buffer, for the ``entries-in-buffer/entries-written``
                line of the default header; None: the TraceEntry items of ``entries``
    written     entries ever written (nr_entries + those lost); None: nr_entries plus
                what the LostEvents markers count
    nr_cpus     cpus (thread slots) of the buffer: ``#P:`` in the default header, the
                width of function_graph's CPU column (the digits of nr_cpus - 1, as
                the kernel sizes it from nr_cpu_ids); None: highest cpu seen + 1
    header      True for ``trace`` and ``snapshot`` (header then lines), False for
                ``trace_pipe`` (lines only)

    function_graph's header has no entries line (its print_header prints the column
    titles only), so the counts are not read for it.  A graph entry whose cpu has
    nothing after it prints as an open block (``func() {``), as ``trace_pipe`` shows a
    call still running.
    """
    opts = dict(TRACE_OPTIONS)
    if options:
        opts.update((name, bool(on)) for name, on in options.items() if name in opts)
    if tracer == _GRAPH_TRACER:
        printer = GraphPrinter(nr_cpus=nr_cpus,
                               **{kw: opts[name] for name, kw in _GRAPH_KEYWORDS.items()})
        if header:
            yield from printer.headers()
        yield from printer.render(entries)
        return
    if header and (nr_cpus is None or nr_entries is None or written is None):
        # The header comes first: count what it shows before printing anything.
        entries = list(entries)
        seen = [e for e in entries if isinstance(e, TraceEntry)]
        if nr_cpus is None:
            nr_cpus = max((e.cpu for e in entries), default=0) + 1
        if nr_entries is None:
            nr_entries = len(seen)
        if written is None:
            written = nr_entries + sum(e.lost for e in entries
                                       if isinstance(e, LostEvents) and e.lost > 0)
    yield from render_function_trace(
        entries, header=header, tracer=tracer, nr_entries=nr_entries or 0,
        written=written if written is not None else (nr_entries or 0),
        nr_cpus=max(1, nr_cpus or 1), irq_info=opts["irq-info"],
        print_parent=opts["print-parent"])


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
