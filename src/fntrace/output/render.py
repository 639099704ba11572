"""A trace read, for every reader: the tracefs ``trace``, ``trace_pipe`` and ``snapshot``
files, ``fntrace report`` and the Python API (kernel/trace/trace.c ``s_show``).

The view is chosen by the registry (output/registry.py ``renderer_for``): the current
tracer's own (function_graph's printer) or the default format (function, nop, ...).

    render_trace(entries, tracer=..., options=...)    decoded entries -> lines
    trace_array_lines(tr, ...)                         a live instance's buffers -> lines

Options are passed in their tracefs names (``trace_options``, ``options/*``); any name
left out has the kernel's default for it, the value TRACE_OPTIONS gives.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
# typing is not imported at run time (it is a fifth of fntrace's import cost).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .entry import LostEvents, TraceEntry

from .registry import TRACE_OPTIONS, RenderContext, name_of, nr_cpus_of, renderer_for

__all__ = ["TRACE_OPTIONS", "render_trace", "trace_array_lines"]


def render_trace(entries: Iterable[TraceEntry | LostEvents], *, tracer: str = "function",
                 options: Mapping[str, bool] | None = None, nr_entries: int | None = None,
                 written: int | None = None, nr_cpus: int | None = None,
                 header: bool = True, view: str | None = None,
                 time_in_ns: bool = True) -> Iterator[str]:
    """The lines of a trace read (no newlines), printed the way ``tracer`` prints them
    (or as the registered view ``view``).

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
    nr_cpus     thread slots of the buffer: ``#P:`` in the default header, the width
                of function_graph's CPU column; None: highest cpu seen + 1
    header      True for ``trace`` and ``snapshot`` (header then lines), False for
                ``trace_pipe`` (lines only)
    time_in_ns  False for a trace_clock that does not count nanoseconds (counter,
                uptime): timestamps print raw
    """
    ctx = RenderContext(tracer, options, nr_entries=nr_entries, written=written,
                        nr_cpus=nr_cpus, header=header, time_in_ns=time_in_ns)
    return renderer_for(tracer, options, view=view).lines(entries, ctx)


def trace_array_lines(tr, *, tracer: str | None = None, buffers: Iterable | None = None,
                      header: bool = True, consume: bool = False,
                      view: str | None = None) -> Iterator[str]:
    """A live instance read: ``trace`` (its buffers), ``snapshot`` (``buffers`` = the
    snapshot copies), ``trace_pipe`` (``consume``: records are marked read, lines
    only).  ``tracer`` defaults to the instance's current one."""
    from ..core.task import thread_info
    from .reader import entries_from_buffers
    bufs = list(tr.buffers.values()) if buffers is None else list(buffers)
    if tracer is None:
        tracer = tr.tracer.name if tr.tracer is not None else "nop"
    # counted before a consuming read takes the records
    nr_entries = sum(b.entries for b in bufs)
    written = sum(b.written for b in bufs)
    time_in_ns = getattr(tr, "clock_in_ns", True)
    if not consume:
        body = _native_body(bufs, tracer, tr.options, time_in_ns, view, thread_info)
        if body is not None:
            graph = tracer == "function_graph"
            # (function_graph's header has no entries counts)
            head = render_trace((), tracer=tracer, options=tr.options,
                                nr_entries=None if graph else nr_entries,
                                written=None if graph else written,
                                nr_cpus=nr_cpus_of(b.cpu for b in bufs),
                                header=header, view=view, time_in_ns=time_in_ns)
            return _lines(head, body)
    entries = entries_from_buffers(bufs, name_of, thread_info, consume=consume)
    return render_trace(entries, tracer=tracer, options=tr.options, nr_entries=nr_entries,
                        written=written, nr_cpus=nr_cpus_of(b.cpu for b in bufs),
                        header=header and not consume, view=view,
                        time_in_ns=time_in_ns)


def _lines(head: Iterable[str], body: Iterable[str]) -> Iterator[str]:
    """The header's lines, then the native body's (pieces of whole lines, each ending
    in a newline), as lines without newlines."""
    yield from head
    for piece in body:
        yield from piece[:-1].split("\n")


class _LiveBlocks:
    """Live ring buffers seen as a trace file's blocks (tracefile/reader.py
    ``record_blocks``), so that a ``trace`` or ``snapshot`` read is printed by the
    native walk that prints ``fntrace report`` (about twenty times the Python
    printer's speed: a served program pays for every read).  Each buffer's records are
    copied once, as ``RingBuffer.records`` reads them; a buffer that holds payloads
    (markers, events, stack traces, arguments, return values) makes it decline: the
    Python printer prints those."""

    def __init__(self, bufs: list, thread_info: Mapping[int, tuple[int, str]]) -> None:
        from ..core.records import record_table
        from ..record_format import RECORD_SIZE
        self.blocks: dict[int, tuple] = {}
        for b in bufs:
            if b.payloads:
                raise LookupError("payloads")
            nrec, data = b.nrec, b.data
            # (lo from this seq: a write between two reads of the buffer's counters
            # would make them disagree)
            seq = b.seq
            lo = max(b.read, seq - nrec, 0)
            s, e = (lo % nrec) * RECORD_SIZE, (seq % nrec) * RECORD_SIZE
            recs = bytes(data[s:e]) if s < e or lo == seq else bytes(data[s:]) + bytes(data[:e])
            # a writer that lapped the copy (overwrite mode): the oldest copied are gone
            over = b.seq - nrec - lo
            if over > 0:
                recs = recs[over * RECORD_SIZE:]
            if b.payloads:
                raise LookupError("payloads")
            self.blocks[b.cpu] = (b.cpu, 0, recs, 0)
        self.cpus = sorted(self.blocks)
        self.threads = {c: thread_info.get(c, (0, "<...>")) for c in self.cpus}
        # (a copy, made in one step: the tuples list(items()) makes may start a
        # collection, whose finalizers can let a thread that records a new function in)
        self.symbols = {ip: (r.name, r.filename, r.line)
                        for ip, r in record_table.by_ip.copy().items()}

    def record_blocks(self, cpu: int | None = None, payloads: bool = False,
                      since: int | None = None, until: int | None = None) -> Iterator[tuple]:
        for c in (self.cpus if cpu is None else [cpu]):
            block = self.blocks.get(c)
            if block is not None and block[2]:
                yield block + (b"",) if payloads else block


def _native_body(bufs: list, tracer: str, options: Mapping[str, bool], time_in_ns: bool,
                 view: str | None, thread_info: Mapping[int, tuple[int, str]]
                 ) -> Iterator[str] | None:
    """The body of a non-consuming read printed by the native walk (``_LiveBlocks``),
    or None: no native twin, another view, a trace it does not print."""
    from .. import _env
    if _env.native() is None or not bufs:
        return None
    graph = tracer == "function_graph"
    if renderer_for(tracer, options, view=view).name != ("function_graph" if graph
                                                         else "function"):
        return None
    try:
        src = _LiveBlocks(bufs, thread_info)
    except LookupError:
        return None
    opts = dict(options)
    if graph:
        from .function_graph import native_graph_text
        return native_graph_text(src, opts, nr_cpus_of(b.cpu for b in bufs))
    from .ftrace_text import native_function_text
    return native_function_text(src, opts, time_in_ns)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
