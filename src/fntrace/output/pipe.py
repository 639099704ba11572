"""The printing state of one open ``trace_pipe`` (kernel/trace/trace.c trace_iterator,
tracing_read_pipe; trace_functions_graph.c print_graph_entry).

A ``trace`` read prints a whole buffer at once; a ``trace_pipe`` reader prints what it
has consumed so far and comes back for more, so what the printer knows must outlive a
read: function_graph's per-cpu depth, the function open at each depth and the last pid
(``struct fgraph_cpu_data``, kept by one GraphPrinter for the reader's life), and the
entries not printed yet.

    pr = PipeRenderer("function_graph", options)
    pr.feed(cpu, entries)            # what a read consumed, per cpu, in order
    lines = pr.lines()               # what can be printed now

Cpus are merged by time (the kernel's trace_find_next_entry): the oldest head first.
``lines(upto=ts)`` prints only entries up to ``ts`` (a reader that knows every cpu has
been read up to then: ``fntrace live``); the rest waits for the next call.

function_graph's leaf test (get_return_for_leaf) needs the next entry of the entry's
cpu: if it is the matching return the call prints as one line (``func();``), else as an
open block (``func() {``) closed later by ``}``.  When the entry is the last one read,
the kernel's pipe prints the open block at once (``grace_ns=0``); ``fntrace live``
waits up to ``grace_ns`` for the return to be read before deciding, so a call that
returns quickly prints as it would in ``trace``.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .function_graph import GraphPrinter

from ..ring_buffer import HAS_PAYLOAD, RECORD
from .entry import TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, LostEvents, TraceEntry
from .ftrace_text import _comm, format_entry, format_lost_events
from .reader import decode, entries_of_chunk
from .registry import _GRAPH_KEYWORDS, GraphTextRenderer, FunctionTextRenderer, RenderContext, renderer_for

__all__ = ["PipeRenderer"]


class PipeRenderer:
    """The lines of a consuming read, one reader's state kept across reads.

    tracer    the current tracer's name (its renderer is chosen as for ``trace``)
    options   trace options by tracefs name (TRACE_OPTIONS defaults)
    nr_cpus   function_graph's CPU column is at least as wide as nr_cpus - 1 (and
              as the highest cpu seen so far)
    grace_ns  how long a graph entry whose return has not been read yet waits before
              it prints as an open block (0: at once, as the kernel's pipe)
    """

    def __init__(self, tracer: str = "function", options: Mapping[str, bool] | None = None,
                 *, nr_cpus: int | None = None, grace_ns: int = 0) -> None:
        self.tracer = tracer
        self.ctx = RenderContext(tracer, options, nr_cpus=nr_cpus, header=False)
        self.renderer = renderer_for(tracer, options)
        self.grace_ns = grace_ns
        self.printer = None
        if isinstance(self.renderer, GraphTextRenderer):
            from .function_graph import GraphPrinter
            # the CPU column is as wide as the highest cpu seen so far, at least
            # nr_cpus - 1 (threads still to come may widen it)
            self.printer = GraphPrinter(
                nr_cpus=None, **{kw: self.ctx.options[n] for n, kw in _GRAPH_KEYWORDS.items()})
            self.printer._max_cpu = max(0, (nr_cpus or 1) - 1)
        self._plain = isinstance(self.renderer, FunctionTextRenderer)
        self._print_parent = self.ctx.options["print-parent"]
        self._prefix: dict[int, str] = {}       # cpu -> "comm-pid [cpu] " of a line
        self._names: dict[int, str] = {}        # ip -> name
        self._name_of: Callable[[int], str] | None = None
        self._thread_info: Mapping[int, tuple[int, str]] = {}
        # cpu -> items not printed yet, each (ts, item); a LostEvents marker takes the
        # time of the entry it precedes.
        self._cpus: dict[int, deque] = {}
        self.nr_items = 0

    # -- input ---------------------------------------------------------------------
    def feed(self, cpu: int, items: Iterable[TraceEntry | LostEvents]) -> None:
        """Entries of one cpu, in the order they were written (a LostEvents marker
        first where events were lost before them)."""
        dq = self._cpus.get(cpu)
        if dq is None:
            dq = self._cpus[cpu] = deque()
        marker = None
        for it in items:
            if isinstance(it, LostEvents):
                marker = it
                continue
            if marker is not None:
                dq.append((it.ts, marker))
                marker = None
            dq.append((it.ts, it))
            self.nr_items += 1
        if marker is not None:
            ts = dq[-1][0] if dq else 0
            dq.append((ts, marker))

    def feed_chunk(self, cpu: int, first_seq: int, chunk: bytes, payloads: dict | None,
                   name_of: Callable[[int], str], thread_info: Mapping[int, tuple[int, str]],
                   lost: int = 0) -> None:
        """A run of one buffer's records (``RingBuffer.take``, a sink's chunk).  The
        default format prints a plain function hit straight from its record (the
        common case at high rates: no entry object is made); anything else is
        decoded into an entry first."""
        if not self._plain:
            items = entries_of_chunk(cpu, first_seq, chunk, payloads or {}, name_of,
                                     thread_info)
            if lost:
                items.insert(0, LostEvents(cpu, lost))
            self.feed(cpu, items)
            return
        dq = self._cpus.get(cpu)
        if dq is None:
            dq = self._cpus[cpu] = deque()
        self._name_of = name_of
        self._thread_info = thread_info
        if lost:
            dq.append((-1, LostEvents(cpu, lost)))
        # The default format's line of a function hit depends on nothing printed
        # before it: it is made here, in one loop, and only ordered later.
        prefix = self._prefix.get(cpu)
        if prefix is None:
            pid, comm = thread_info.get(cpu, (0, "<...>"))
            flags_col = "....." if self.ctx.options["irq-info"] else ""
            prefix = self._prefix[cpu] = f"{_comm(comm):>16}-{pid:<7} [{cpu:03d}] {flags_col} "
        names = self._names
        pp = self._print_parent
        append = dq.append
        seq = first_seq
        for ts, typ, flags, a, b, c, d in RECORD.iter_unpack(chunk):
            if typ == TRACE_FN and not flags & HAS_PAYLOAD:
                fn = names.get(a)
                if fn is None:
                    fn = names[a] = name_of(a)
                us = (ts + 500) // 1000
                if b and pp:
                    parent = names.get(b)
                    if parent is None:
                        parent = names[b] = name_of(b)
                    append((ts, f"{prefix}{us // 1000000:5d}.{us % 1000000:06d}: {fn} <-{parent}"))
                else:
                    append((ts, f"{prefix}{us // 1000000:5d}.{us % 1000000:06d}: {fn}"))
            else:
                pid, comm = thread_info.get(cpu, (0, "<...>"))
                payload = payloads.get(seq) if payloads and flags & HAS_PAYLOAD else None
                append((ts, decode(cpu, ts, typ, flags, a, b, c, d, payload, name_of, comm, pid)))
            seq += 1
        self.nr_items += seq - first_seq

    def pending(self) -> int:
        """Items fed and not printed yet."""
        return sum(len(dq) for dq in self._cpus.values())

    def take_back(self) -> dict[int, list]:
        """Everything not printed yet, per cpu, as (ts, item) pairs for ``feed_pairs``,
        and forget it (a reader closing hands what it consumed but did not show back
        to the others).  An item is an entry, a LostEvents marker, or a line of the
        default format already made."""
        out = {cpu: list(dq) for cpu, dq in self._cpus.items() if dq}
        self._cpus.clear()
        return out

    def feed_pairs(self, cpu: int, pairs: Iterable[tuple]) -> None:
        """What ``take_back`` returned (of this renderer or another)."""
        dq = self._cpus.get(cpu)
        if dq is None:
            dq = self._cpus[cpu] = deque()
        dq.extend(pairs)

    # -- output --------------------------------------------------------------------
    def lines(self, *, upto: int | None = None, now: int | None = None,
              final: bool = False) -> list[str]:
        """The lines that can be printed now, in time order across cpus.

        upto   print no entry newer than this (ns); None: no limit
        now    the present (ns, the records' clock), for the graph's grace; None:
               the grace has passed for every entry
        final  nothing more will come: a held entry prints as an open block
        """
        out: list[str] = []
        cpus = self._cpus
        printer = self.printer
        while True:
            best = None
            best_key = None
            for cpu, dq in cpus.items():
                if dq:
                    key = (dq[0][0], cpu)
                    if best_key is None or key < best_key:
                        best, best_key = dq, key
            if best is None:
                break
            ts, item = best[0]
            if upto is not None and ts > upto and not final:
                break
            if type(item) is str:
                if len(cpus) == 1 or sum(1 for d in cpus.values() if d) == 1:
                    # one thread has anything: print its run without the merge
                    lim = None if final else upto
                    while best:
                        ts, item = best[0]
                        if lim is not None and ts > lim:
                            break
                        best.popleft()
                        if type(item) is str:
                            out.append(item)
                        elif isinstance(item, LostEvents):
                            out.append(format_lost_events(item.cpu, item.lost))
                        else:
                            out.extend(self._line(item))
                    continue
                best.popleft()
                out.append(item)
                continue
            if isinstance(item, LostEvents):
                best.popleft()
                out.append(format_lost_events(item.cpu, item.lost))
                continue
            if printer is not None and item.type == TRACE_GRAPH_ENT:
                if len(best) < 2:
                    if (not final and self.grace_ns and now is not None
                            and now - ts < self.grace_ns):
                        break       # its return may still come: everything waits
                    best.popleft()
                    out.extend(printer.print_graph_entry(self._seen(printer, item), None))
                    continue
                best.popleft()
                nxt = best[0][1]
                leaf = None
                if (isinstance(nxt, TraceEntry) and nxt.type == TRACE_GRAPH_RET
                        and nxt.pid == item.pid and nxt.func == item.func):
                    leaf = nxt
                    best.popleft()
                out.extend(printer.print_graph_entry(self._seen(printer, item), leaf))
                continue
            best.popleft()
            out.extend(self._line(item))
        return out

    @staticmethod
    def _seen(p: GraphPrinter, e: TraceEntry) -> TraceEntry:
        if e.comm:
            p._comms[e.pid] = e.comm
        if e.cpu > p._max_cpu:
            p._max_cpu = e.cpu
        return e

    def _line(self, e: TraceEntry) -> list[str]:
        p = self.printer
        if p is not None:
            return p.print_line(self._seen(p, e))
        if self._plain:
            o = self.ctx.options
            text = format_entry(e, irq_info=o["irq-info"], print_parent=o["print-parent"])
            return text.split("\n") if text is not None else []
        return list(self.renderer.lines([e], self.ctx))


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
