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

With ``dist`` a row also keeps the distribution of its calls' durations -- the
shortest, the longest, and a log-linear histogram (log_hist.py) -- for the percentile,
min, max and stdev columns and ``fntrace diff``: a percentile read from it is within
1/64 (1.6%) of the exact one, and exact at either end.  With ``edges`` the walk counts
the calls of each caller -> callee edge (diff's call paths).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from collections import namedtuple
# typing is not imported at run time (most of a reading command's start-up is imports)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple

from .. import _env
from ..log_hist import hist_index, hist_percentile
from .calls import Call, CallBuilder
from .entry import TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, LostEvents, TraceEntry
from .function_graph import trace_print_graph_duration
from .function_stat import function_stat_variance
from .registry import RenderContext, Renderer, name_of, register_renderer
from .walk import canon_ids

__all__ = ["FunctionStat", "StatCollector", "StatWalked", "function_stats", "walked_stats",
           "forked_stats", "sort_stats", "SORT_KEYS", "COLUMNS", "DIST_COLUMNS",
           "KERNEL_COLUMNS", "needs_dist", "collected",
           "stat_headers", "stat_row", "stat_table", "StatRenderer"]

# The table's columns, in the order they print; the kernel's five by default.
COLUMNS = ("hit", "time", "avg", "s2", "stdev", "min", "p50", "p90", "p99", "max", "self",
           "where")
KERNEL_COLUMNS = ("hit", "time", "avg", "s2", "self")
# what --dist shows: the distribution of each function's calls
DIST_COLUMNS = ("hit", "time", "avg", "stdev", "min", "p50", "p90", "p99", "max", "self")
# columns read from the distribution (a walk with dist=True)
_DIST_NEEDED = frozenset(("stdev", "min", "p50", "p90", "p99", "max"))
# --sort words: any column, and the function's name; "time" is function_stat_cmp's key
# with fgraph, "hit" without.
SORT_KEYS = COLUMNS + ("function",)

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
    min, max      ns: the shortest and longest of those calls (with dist; 0: none)
    hist          {hist_index: calls} of those calls (with dist; else None)
    """
    func: str
    cpu: int | None = None
    hit: int = 0
    time: int = 0
    time_squared: int = 0
    self_ns: int = 0
    timed: int = 0
    min: int = 0
    max: int = 0
    hist: dict[int, int] | None = None

    @property
    def avg(self) -> int:
        """Time / Hit in ns, the kernel's integer division."""
        return self.time // self.hit if self.hit else 0

    @property
    def variance(self) -> int:
        """The s^2 column's value before printing (ns^2 / 1000, function_stat_variance)."""
        return function_stat_variance(self.hit, self.time, self.time_squared)

    @property
    def stdev(self) -> int:
        """ns: the sample standard deviation of the timed calls' durations (0 for
        fewer than two), exact from the sums."""
        n = self.timed
        if n < 2:
            return 0
        return math.isqrt(max(0, n * self.time_squared - self.time * self.time)
                          // (n * (n - 1)))

    def percentile(self, p: float) -> int:
        """ns: the ``p``-th percentile (0 < p <= 100) of the timed calls' durations, the
        nearest rank's, read from the histogram (log_hist.hist_percentile); 0
        without calls or a distribution."""
        return hist_percentile(self.hist, self.timed, self.min, self.max, p)

    def add(self, o: FunctionStat) -> None:
        """Add row ``o``'s calls to this one's (the same function's in another part of
        a trace)."""
        if o.timed and (not self.timed or o.min < self.min):
            self.min = o.min
        if o.timed and (not self.timed or o.max > self.max):
            self.max = o.max
        self.hit += o.hit
        self.time += o.time
        self.time_squared += o.time_squared
        self.self_ns += o.self_ns
        self.timed += o.timed
        if o.hist is not None:
            h = self.hist
            if h is None:
                h = self.hist = {}
            for i, n in o.hist.items():
                h[i] = h.get(i, 0) + n


class StatCollector:
    """Rows made as entries are fed (``feed``), finished by ``finish()``.

    graph       True: a function_graph stream (times); False: function hits only;
                None: decided by the entries (graph if any graph entry is read)
    per_thread  one row per (thread slot, function) instead of per function

    Besides the rows it counts what the table cannot show whole:
    no_return  calls whose return was not in the trace (hits without time)
    no_entry   calls whose entry was not (counted from their return)
    lost       events the trace's LostEvents markers say were dropped (-1: some)
    edges      with ``edges``: {(caller, callee): calls}, caller "" for none
    """

    def __init__(self, graph: bool | None = None, per_thread: bool = False,
                 dist: bool = False, edges: bool = False, cpu: bool = False) -> None:
        self.graph = graph
        self.per_thread = per_thread
        self.dist = dist
        self.count_edges = edges
        self._rows: dict[object, FunctionStat] = {}
        # cpu: durations from the returns' calltimes (CallBuilder's calltime)
        self._calls = CallBuilder(calltime=cpu)
        self.no_return = 0
        self.no_entry = 0
        self.lost = 0
        self.edges: dict[tuple[str, str], int] = {}

    def _row(self, func: str, cpu: int) -> FunctionStat:
        key = (cpu, func) if self.per_thread else func
        r = self._rows.get(key)
        if r is None:
            r = self._rows[key] = FunctionStat(func, cpu if self.per_thread else None,
                                               hist={} if self.dist else None)
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
            if self.count_edges:
                k = (e.parent, e.func)
                self.edges[k] = self.edges.get(k, 0) + 1
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
        if self.count_edges:
            st = c.stack
            k = (st[-2] if len(st) > 1 else "", c.func)
            self.edges[k] = self.edges.get(k, 0) + 1
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
        if self.dist:
            if not r.timed or d < r.min:
                r.min = d
            if not r.timed or d > r.max:
                r.max = d
            i = hist_index(d)
            h = r.hist
            # a row has its hist when self.dist (_row): no check on this path
            h[i] = h.get(i, 0) + 1      # type: ignore[index, union-attr]
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
                   per_thread: bool = False, dist: bool = False) -> list[FunctionStat]:
    """The profile of an entry stream: one FunctionStat per function (per thread slot
    and function with ``per_thread``), in first-hit order.  ``graph`` and ``dist`` as
    for StatCollector."""
    col = StatCollector(graph, per_thread, dist)
    feed = col.feed
    for e in entries:
        feed(e)
    return col.finish()


if TYPE_CHECKING:
    class StatWalked(NamedTuple):
        rows: list[FunctionStat]
        no_return: int
        no_entry: int
        edges: dict[tuple[str, str], int] | None = None
else:
    StatWalked = namedtuple("StatWalked", "rows no_return no_entry edges", defaults=(None,))
StatWalked.__doc__ = """A walk's answer: the rows, StatCollector's ``no_return`` and
    ``no_entry``, and with ``edges`` its ``edges`` (else None)."""


def collected(col: StatCollector) -> StatWalked:
    """A StatCollector's rows and counts, as the walks below give them."""
    rows = col.finish()
    return StatWalked(rows, col.no_return, col.no_entry,
                      col.edges if col.count_edges else None)


def walked_stats(tf, *, per_thread: bool = False, blocks: Iterable | None = None,
                 dist: bool = False, edges: bool = False, cpu: bool = False
                 ) -> StatWalked | None:
    """``function_stats`` of a whole trace file (a TraceFile or TraceSet, no filter, no
    task view) by the native walk (_native_read.c's StatWalk): the same rows in the
    same order, with StatCollector's ``no_return`` and ``no_entry`` (and ``edges``
    with ``edges``), without an entry or a call object per record (``blocks``:
    ``tf.record_blocks()`` as the caller reads them, a progress bar's).  None when the
    native twin is not there (FNTRACE_PURE=1) or says its walk of this trace would not
    be exact (records out of time order, values out of its range): the caller walks
    the entries instead."""
    out = _walk(canon_ids(tf.symbols), per_thread,
                tf.record_blocks() if blocks is None else blocks, dist=dist, edges=edges,
                cpu=cpu)
    if out is None:
        return None
    syms = tf.symbols
    return StatWalked([_row(t, syms, False, dist) for t in out[0]], out[1], out[2],
                      _edges(out[3], syms) if edges else None)


def _row(t: tuple, syms, firsts: bool, dist: bool) -> FunctionStat:
    """StatWalk's row tuple made a FunctionStat: (id, slot, hit, time, time_squared,
    self_ns, timed), then with ``firsts`` three more, then with ``dist`` (min, max,
    hist)."""
    r = FunctionStat(name_of(t[0], syms), *t[1:7])
    if dist:
        r.min, r.max, r.hist = t[-3:]
    return r


def _edges(pairs: Iterable[tuple[int, int, int]], syms) -> dict[tuple[str, str], int]:
    """StatWalk's edges (caller id + 1 or 0, callee id, calls) by name."""
    out: dict[tuple[str, str], int] = {}
    for frm, to, n in pairs:
        k = (name_of(frm - 1, syms) if frm else "", name_of(to, syms))
        out[k] = out.get(k, 0) + n
    return out


def _walk(canon: dict[int, int] | None, per_thread: bool, blocks: Iterable,
          firsts: bool = False, dist: bool = False, edges: bool = False,
          cpu: bool = False):
    """StatWalk's answer for these blocks (``canon``: canon_ids of the trace's symbols;
    ``firsts``: each row's first hit too), or None."""
    native = _env.native()
    if native is None:
        return None
    walk = native.StatWalk(per_thread, canon, False, dist, edges, cpu)
    feed = walk.feed
    for cpu, lost, records, ibase in blocks:
        if not feed(cpu, records, lost, ibase):
            return None
    return walk.finish(firsts)


def forked_stats(source, blocks_of: Callable[[int], Iterable], *, per_thread: bool = False,
                 on_records: Callable[[int], None] | None = None, dist: bool = False,
                 edges: bool = False, cpu: bool = False) -> StatWalked | None:
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
        return _walk(canon, per_thread, fed(), True, dist, edges, cpu)

    parts = map_parts(source.part_sizes(), work, on_records)
    if parts is None:
        return None
    # (canonical id, slot) -> [first hit, FunctionStat]
    merged: dict[tuple[int, int | None], list] = {}
    no_return = no_entry = 0
    counts: dict[tuple[str, str], int] = {}
    for part in parts:
        no_return += part[1]
        no_entry += part[2]
        if edges:
            for k, n in _edges(part[3], syms).items():
                counts[k] = counts.get(k, 0) + n
        for t in part[0]:
            first = list(t[7:10])
            m = merged.get((t[0], t[1]))
            if m is None:
                merged[t[0], t[1]] = [first, _row(t, syms, True, dist)]
                continue
            m[0] = min(m[0], first)
            m[1].add(_row(t, syms, True, dist))
    rows = sorted(merged.values(), key=lambda m: m[0])
    return StatWalked([r for _, r in rows], no_return, no_entry, counts if edges else None)


_SORT: dict[str, Callable[[FunctionStat], object]] = {
    "hit": lambda r: r.hit,
    "time": lambda r: r.time,
    "avg": lambda r: r.avg,
    "s2": lambda r: r.variance,
    "stdev": lambda r: r.stdev,
    "min": lambda r: r.min,
    "p50": lambda r: r.percentile(50),
    "p90": lambda r: r.percentile(90),
    "p99": lambda r: r.percentile(99),
    "max": lambda r: r.max,
    "self": lambda r: r.self_ns,
}


def sort_stats(rows: Iterable[FunctionStat], key: str = "time",
               where: Callable[[str], str] | None = None) -> list[FunctionStat]:
    """Largest first by ``key`` (one of SORT_KEYS), as stat_seq_init sorts: rows that
    compare equal come out in the reverse of the order they were listed.  The names
    (``function``) and places (``where``, by ``where(func)``) sort A to Z."""
    out = list(rows)
    if key == "function":
        out.sort(key=lambda r: r.func)
        return out
    if key == "where":
        w = where or (lambda f: "")
        out.sort(key=lambda r: _place_key(w(r.func)))
        return out
    try:
        k = _SORT[key]
    except KeyError:
        raise ValueError(f"unknown sort key {key!r} (known: {', '.join(SORT_KEYS)})") from None
    out.reverse()
    out.sort(key=k, reverse=True)       # type: ignore[arg-type]
    return out


def _place_key(place: str) -> tuple[str, int]:
    """``file:line`` sorted by file, then line as a number."""
    f, _, line = place.rpartition(":")
    return (f, int(line)) if line.isdigit() else (place, 0)


def needs_dist(columns: Iterable[str], sort: str | None = None) -> bool:
    """Whether these columns (or this sort key) are read from the distribution: the
    walk is then made with ``dist``."""
    return bool(_DIST_NEEDED.intersection(columns)) or sort in _DIST_NEEDED


_TITLES = {"hit": "Hit", "time": "Time", "avg": "Avg", "s2": "s^2", "stdev": "Stdev",
           "min": "Min", "p50": "p50", "p90": "p90", "p99": "p99", "max": "Max",
           "self": "Self", "where": "Where"}


def _columns(graph: bool, self_column: bool, columns: Iterable[str] | None) -> list[str]:
    if columns is None:
        columns = KERNEL_COLUMNS if self_column else KERNEL_COLUMNS[:-1]
    if not graph:
        return [c for c in columns if c in ("hit", "where")] or ["hit"]
    return list(columns)


def stat_headers(graph: bool = True, *, self_column: bool = True,
                 name_width: int = _NAME_WIDTH, columns: Iterable[str] | None = None
                 ) -> list[str]:
    """The two header lines: function_stat_headers(), with a Self column after s^2
    and the Function column ``name_width`` wide; or, given ``columns`` (names from
    COLUMNS), those columns in that order."""
    cols = _columns(graph, self_column, columns)
    top = f"  {'Function':<{name_width}}"
    dash = f"  {'--------':<{name_width}}"
    for c in cols:
        t = _TITLES[c]
        if c == "hit":
            top += f"  {t:>10}"
            dash += f"  {'---':>10}"
        else:
            top += f"    {t:<12}"
            dash += "    " + f"{'-' * len(t):<12}"
    return [top.rstrip(), dash.rstrip()]


def stat_row(r: FunctionStat, graph: bool = True, *, self_column: bool = True,
             name_width: int = _NAME_WIDTH, tracing_thresh: int = 0,
             columns: Iterable[str] | None = None,
             where: Callable[[str], str] | None = None) -> str | None:
    """One row as function_stat_show() prints it (the name cut to ``name_width``),
    then the Self duration, or the ``columns`` asked for (``where(func)``: the
    function's file:line); None for a row the kernel does not show (no hits, or an
    average below ``tracing_thresh`` ns)."""
    if r.hit == 0:
        return None
    if graph and tracing_thresh and r.avg < tracing_thresh:
        return None
    line = f"  {r.func[:name_width]:<{name_width}}"
    for c in _columns(graph, self_column, columns):
        if c == "hit":
            line += f"  {r.hit:10d}"
        elif c == "where":
            line += "    " + (where(r.func) if where is not None else "")
        else:
            line += "    " + trace_print_graph_duration(_SORT[c](r))   # type: ignore[arg-type]
    return line.rstrip() if columns is not None else line


def stat_table(rows: Iterable[FunctionStat], graph: bool = True, *, sort: str | None = None,
               limit: int = 0, tracing_thresh: int = 0, self_column: bool = True,
               wide: bool = False, columns: Iterable[str] | None = None,
               where: Callable[[str], str] | None = None) -> Iterator[str]:
    """The table's lines: headers, then the rows sorted (default: time with a graph,
    hits without, as function_stat_cmp), at most ``limit`` of them (0: all).
    ``wide``: the Function column as wide as the longest name instead of cut at 30.
    ``columns`` and ``where`` as for stat_row."""
    rows = sort_stats(rows, sort or ("time" if graph else "hit"), where)
    shown: list[FunctionStat] = []
    for r in rows:
        if limit and len(shown) >= limit:
            break
        if r.hit and not (graph and tracing_thresh and r.avg < tracing_thresh):
            shown.append(r)         # the rows function_stat_show prints
    width = _NAME_WIDTH
    if wide:
        width = max([_NAME_WIDTH] + [len(r.func) for r in shown])
    yield from stat_headers(graph, self_column=self_column, name_width=width,
                            columns=columns)
    for r in shown:
        line = stat_row(r, graph, self_column=self_column, name_width=width,
                        columns=columns, where=where)
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
