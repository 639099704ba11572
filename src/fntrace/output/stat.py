"""The function profile of a recorded trace: the kernel's ``trace_stat/functionN`` table
made from a trace file (``fntrace stat``), plus self time.

    Function                               Hit    Time            Avg             s^2             Self
    --------                               ---    ----            ---             ---             ----
    __main__.mid                               4    11.837 us       2.959 us        1.813 us        10.108 us

The columns are the function profiler's (output/function_stat.py, ftrace.c's
function_stat_show), counted the way the profiler counts them:

- Hit: one per call, when its entry is read (function_profile_call runs at entry); a
  call whose entry is not in the trace (overwritten, or tracing started inside it) is
  counted when its return is read.
- Time: the sum of the calls' durations, each added when its return is read
  (profile_graph_return): a call with no return in the trace is a hit with no time,
  as in the kernel's table of a profile read while the call runs.  Avg is Time / Hit
  and s^2 the variance in the kernel's integer arithmetic (function_stat_variance).
- Self: the sum of the calls' durations less their callees' (output/calls.py), what
  the profiler's Time shows with ``options/graph-time`` 0.

A function_graph trace gives all the columns; a function trace (one record per call,
no returns) only Function and Hit, the two-column table of a profiler without fgraph.

``function_stats(entries)`` reads an entry stream once and keeps one row per function
(per function and thread with ``per_thread``), never a row per call: its memory is
the number of functions, plus each thread's open call stack.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from .. import _env
from .calls import Call, CallBuilder
from .entry import TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, LostEvents, TraceEntry
from .function_graph import trace_print_graph_duration
from .function_stat import function_stat_variance
from .registry import RenderContext, Renderer, name_of, register_renderer
from .walk import canon_ids

__all__ = ["FunctionStat", "StatCollector", "function_stats", "walked_stats", "forked_stats", "sort_stats", "SORT_KEYS",
           "stat_headers", "stat_row", "stat_table", "StatRenderer"]

# --sort words; "time" is function_stat_cmp's key with fgraph, "hit" without.
SORT_KEYS = ("hit", "time", "avg", "self")

_NAME_WIDTH = 30            # "%-30.30s": the kernel cuts symbols to 30 characters


@dataclass(slots=True)
class FunctionStat:
    """One row: a function's calls (on one thread with per-thread tables).

    func          module.qualname
    cpu           the thread slot of a per-thread row; None: all threads
    hit           calls
    time          ns: the sum of the durations of the calls whose return was read
    time_squared  the sum of their squares (for s^2)
    self_ns       ns: the sum of the calls' durations less their callees'
    timed         calls whose duration is in time (hit less those with no return)
    """
    func: str
    cpu: int | None = None
    hit: int = 0
    time: int = 0
    time_squared: int = 0
    self_ns: int = 0
    timed: int = 0

    @property
    def avg(self) -> int:
        """Time / Hit in ns, the kernel's integer division."""
        return self.time // self.hit if self.hit else 0

    @property
    def variance(self) -> int:
        """The s^2 column's value before printing (ns^2 / 1000, function_stat_variance)."""
        return function_stat_variance(self.hit, self.time, self.time_squared)


class StatCollector:
    """Rows made as entries are fed (``feed``), finished by ``finish()``.

    graph       True: a function_graph stream (times); False: function hits only;
                None: decided by the entries (graph if any graph entry is read)
    per_thread  one row per (thread slot, function) instead of per function

    Besides the rows it counts what the table cannot show whole:
    no_return  calls whose return was not in the trace (hits without time)
    no_entry   calls whose entry was not (counted from their return)
    lost       events the trace's LostEvents markers say were dropped (-1: some)
    """

    def __init__(self, graph: bool | None = None, per_thread: bool = False) -> None:
        self.graph = graph
        self.per_thread = per_thread
        self._rows: dict[object, FunctionStat] = {}
        self._calls = CallBuilder()
        self.no_return = 0
        self.no_entry = 0
        self.lost = 0

    def _row(self, func: str, cpu: int) -> FunctionStat:
        key = (cpu, func) if self.per_thread else func
        r = self._rows.get(key)
        if r is None:
            r = self._rows[key] = FunctionStat(func, cpu if self.per_thread else None)
        return r

    def feed(self, e: TraceEntry | LostEvents) -> None:
        if type(e) is LostEvents:
            if e.lost < 0:
                self.lost = -1
            elif self.lost >= 0:
                self.lost += e.lost
            # what was open on the thread is closed where its records stop (calls.py):
            # a return after the gap is not paired with an entry from before it
            for c in self._calls.feed(e):
                self._add(c)
            return
        typ = e.type
        if typ == TRACE_FN:
            self._row(e.func, e.cpu).hit += 1
            return
        if typ != TRACE_GRAPH_ENT and typ != TRACE_GRAPH_RET:
            return
        if self.graph is None:
            self.graph = True
        if typ == TRACE_GRAPH_ENT:
            # the hit, at entry (function_profile_call); the row made in first-hit order
            self._row(e.func, e.cpu).hit += 1
        for c in self._calls.feed(e):
            self._add(c)

    def _add(self, c: Call) -> None:
        r = self._row(c.func, c.cpu)
        if not c.entry_seen:
            r.hit += 1
            self.no_entry += 1
        if not c.complete:
            self.no_return += 1
            return
        d = c.duration
        r.time += d
        r.time_squared += d * d
        r.self_ns += c.self_ns
        r.timed += 1

    def finish(self) -> list[FunctionStat]:
        """The rows, in the order their functions were first hit (what the kernel's
        stat file sorts from: ties keep it, reversed)."""
        for c in self._calls.finish():
            self._add(c)
        if self.graph is None:
            self.graph = False
        return list(self._rows.values())


def function_stats(entries: Iterable[TraceEntry | LostEvents], *, graph: bool | None = None,
                   per_thread: bool = False) -> list[FunctionStat]:
    """The profile of an entry stream: one FunctionStat per function (per thread slot
    and function with ``per_thread``), in first-hit order.  ``graph`` as for
    StatCollector."""
    col = StatCollector(graph, per_thread)
    feed = col.feed
    for e in entries:
        feed(e)
    return col.finish()


def walked_stats(tf, *, per_thread: bool = False, blocks: Iterable | None = None
                 ) -> tuple[list[FunctionStat], int, int] | None:
    """``function_stats`` of a whole trace file (a TraceFile or TraceSet, no filter, no
    task view) by the native walk (_native_read.c's StatWalk): the same rows in the
    same order, with StatCollector's ``no_return`` and ``no_entry``, without an entry
    or a call object per record (``blocks``: ``tf.record_blocks()`` as the caller reads
    them, a progress bar's).  None when the native twin is not there
    (FNTRACE_PURE=1) or says its walk of this trace would not be exact (records out
    of time order, values out of its range): the caller walks the entries instead."""
    out = _walk(canon_ids(tf.symbols), per_thread,
                tf.record_blocks() if blocks is None else blocks)
    if out is None:
        return None
    rows, no_return, no_entry = out
    syms = tf.symbols
    return ([FunctionStat(name_of(ip, syms), cpu, hit, time, sq, self_ns, timed)
             for ip, cpu, hit, time, sq, self_ns, timed in rows], no_return, no_entry)


def _walk(canon: dict[int, int] | None, per_thread: bool, blocks: Iterable,
          firsts: bool = False):
    """StatWalk's answer for these blocks (``canon``: canon_ids of the trace's symbols;
    ``firsts``: each row's first hit too), or None."""
    native = _env.native()
    if native is None:
        return None
    walk = native.StatWalk(per_thread, canon)
    feed = walk.feed
    for cpu, lost, records, ibase in blocks:
        if not feed(cpu, records, lost, ibase):
            return None
    return walk.finish(firsts)


def forked_stats(source, blocks_of: Callable[[int], Iterable], *, per_thread: bool = False,
                 on_records: Callable[[int], None] | None = None
                 ) -> tuple[list[FunctionStat], int, int] | None:
    """``walked_stats`` of a trace of several processes (a TraceSource of a TraceSet),
    each process's blocks (``blocks_of(i)``: the i-th file's, as the caller feeds them)
    walked in a forked child (tracefile/parallel.py's map_parts) and the rows added up:
    a row is one function's (on one thread, and no thread is in two files), first hit
    where the first of its parts was (the rows' order, as one walk of them all orders
    them).  None when forking is not worth it, or a child's walk declined or failed:
    the caller walks the trace itself."""
    from ..tracefile.parallel import map_parts
    if _env.native() is None:
        return None
    tf = source.tf
    syms = tf.symbols
    canon = canon_ids(syms)     # (once, before the children are forked)

    def work(part: int, progress: Callable[[int], None]):
        def fed():
            for block in blocks_of(part):
                progress(len(block[2]) // 32)
                yield block
        return _walk(canon, per_thread, fed(), True)

    parts = map_parts(source.part_sizes(), work, on_records)
    if parts is None:
        return None
    # (canonical id, slot) -> [first hit, FunctionStat]
    merged: dict[tuple[int, int | None], list] = {}
    no_return = no_entry = 0
    for rows, nr, ne in parts:
        no_return += nr
        no_entry += ne
        for ip, cpu, hit, time, sq, self_ns, timed, *first in rows:
            m = merged.get((ip, cpu))
            if m is None:
                merged[ip, cpu] = [first, FunctionStat(name_of(ip, syms), cpu, hit, time,
                                                       sq, self_ns, timed)]
                continue
            m[0] = min(m[0], first)
            r = m[1]
            r.hit += hit
            r.time += time
            r.time_squared += sq
            r.self_ns += self_ns
            r.timed += timed
    rows = sorted(merged.values(), key=lambda m: m[0])
    return [r for _, r in rows], no_return, no_entry


_SORT = {
    "hit": lambda r: r.hit,
    "time": lambda r: r.time,
    "avg": lambda r: r.avg,
    "self": lambda r: r.self_ns,
}


def sort_stats(rows: Iterable[FunctionStat], key: str = "time") -> list[FunctionStat]:
    """Largest first by ``key`` (one of SORT_KEYS), as stat_seq_init sorts: rows that
    compare equal come out in the reverse of the order they were listed."""
    try:
        k = _SORT[key]
    except KeyError:
        raise ValueError(f"unknown sort key {key!r} (known: {', '.join(SORT_KEYS)})") from None
    out = list(rows)
    out.reverse()
    out.sort(key=k, reverse=True)
    return out


def stat_headers(graph: bool = True, *, self_column: bool = True,
                 name_width: int = _NAME_WIDTH) -> list[str]:
    """The two header lines: function_stat_headers(), with a Self column after s^2
    and the Function column ``name_width`` wide."""
    if not graph:
        lines = [f"  {'Function':<{name_width}}  {'Hit':>10}",
                 f"  {'--------':<{name_width}}  {'---':>10}"]
    else:
        cols = ("Time", "Avg", "s^2") + (("Self",) if self_column else ())
        dash = tuple("-" * len(c) for c in cols)
        lines = [f"  {'Function':<{name_width}}  {'Hit':>10}" + "".join(f"    {c:<12}" for c in cols),
                 f"  {'--------':<{name_width}}  {'---':>10}" + "".join(f"    {c:<12}" for c in dash)]
        lines = [line.rstrip() for line in lines]
    return lines


def stat_row(r: FunctionStat, graph: bool = True, *, self_column: bool = True,
             name_width: int = _NAME_WIDTH, tracing_thresh: int = 0) -> str | None:
    """One row as function_stat_show() prints it (the name cut to ``name_width``),
    then the Self duration; None for a row the kernel does not show (no hits, or an
    average below ``tracing_thresh`` ns)."""
    if r.hit == 0:
        return None
    line = f"  {r.func[:name_width]:<{name_width}}  {r.hit:10d}"
    if not graph:
        return line
    avg = r.avg
    if tracing_thresh and avg < tracing_thresh:
        return None
    line += ("    " + trace_print_graph_duration(r.time)
             + "    " + trace_print_graph_duration(avg)
             + "    " + trace_print_graph_duration(r.variance))
    if self_column:
        line += "    " + trace_print_graph_duration(r.self_ns)
    return line


def stat_table(rows: Iterable[FunctionStat], graph: bool = True, *, sort: str | None = None,
               limit: int = 0, tracing_thresh: int = 0, self_column: bool = True,
               wide: bool = False) -> Iterator[str]:
    """The table's lines: headers, then the rows sorted (default: time with a graph,
    hits without, as function_stat_cmp), at most ``limit`` of them (0: all).
    ``wide``: the Function column as wide as the longest name instead of cut at 30."""
    rows = sort_stats(rows, sort or ("time" if graph else "hit"))
    shown = []
    for r in rows:
        if limit and len(shown) >= limit:
            break
        if r.hit and not (graph and tracing_thresh and r.avg < tracing_thresh):
            shown.append(r)         # the rows function_stat_show prints
    width = _NAME_WIDTH
    if wide:
        width = max([_NAME_WIDTH] + [len(r.func) for r in shown])
    yield from stat_headers(graph, self_column=self_column, name_width=width)
    for r in shown:
        line = stat_row(r, graph, self_column=self_column, name_width=width)
        if line is not None:
            yield line


class StatRenderer(Renderer):
    """The profile table as a view in the renderer registry: ``renderer_for(tracer,
    view="stat")``.  It reads the whole trace before printing (not for trace_pipe)."""

    name = "stat"
    tracers = ()
    needs = frozenset()
    streaming = False

    def lines(self, entries: Iterable[TraceEntry | LostEvents],
              ctx: RenderContext) -> Iterator[str]:
        graph = ctx.tracer == "function_graph"
        rows = function_stats(entries, graph=graph)
        return stat_table(rows, graph)


register_renderer(StatRenderer(), replace=True)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
