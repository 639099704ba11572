"""A compact index of a trace's calls, per thread, for the browser.

A trace of two million events holds about a million calls; a widget per call (or a
Python object per call) would take seconds to build and hundreds of megabytes to keep.
The index keeps each thread's calls as rows of parallel columns (ints only: function
names, argument and return-value texts are interned once and referred to by number),
in the order the calls were entered: the order of the function_graph text, so a
call's descendants are the rows right after it (up to ``subend``).  The columns
(column.py) keep a budget of memory and the rest of their rows in a temporary file,
so the index of a trace of any size takes the same memory.

Rows are added as the trace is read, so the browser can show the start of the trace
while the rest is still being indexed (``build`` runs in a background thread; the UI
reads ``ThreadIndex.n`` rows, which are whole when ``n`` counts them).  Calls come from
``output.calls.CallBuilder``, which decides what a lost return or a missing entry
means; a call made from a return alone (its entry was not in the trace) is a row of its
own after the rows of its children, as the text report prints it.
"""
from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import islice
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Literal

    from ..output.entry import TraceEntry

from ..output.calls import Call, CallBuilder
from ..output.entry import (
    LOST_EVENTS_UNKNOWN, TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_PRINT,
    TRACE_STACK, LostEvents,
)
from ..output.ftrace_text import function_args_text
from ..output.source import TraceSource
from ..output.stat import FunctionStat
from ..output.walk import Verdict
from .column import CACHE_BYTES, CHUNK_SHIFT, Column, Spill

__all__ = ["FunctionRow", "ThreadIndex", "TraceIndex", "function_rows", "format_ns",
           "function_distributions", "Distributions", "COMPLETE", "ENTRY_SEEN", "HAS_RETVAL", "OPEN"]

# Row flags.
COMPLETE = 1     # the call's return was read
ENTRY_SEEN = 2   # its entry was read (else it was made from its return)
HAS_RETVAL = 4   # a return value was recorded
OPEN = 8         # not closed yet (still being read)

#: Entries read between two checks of the stop flag (and two progress updates).
_BATCH = 4096
#: The same for the native walk, which reads them about a hundred times as fast.
_NATIVE_BATCH = 1 << 16
# what IndexRows reads besides calls: arguments and return values, function hits,
# markers and events (output/walk.py's native_for_calls)
_WALKS = {"values": True, "hits": True, "events": True}


class ThreadIndex:
    """One thread slot's calls (rows) and events.

    Row columns: ``func`` (name id), ``depth``, ``start``/``end`` (ns; ``end`` is -1
    while the call is open), ``self_ns``, ``parent`` (row of the enclosing call, -1 at
    the top), ``subend`` (one past the row's last descendant, -1 while open),
    ``args``/``ret`` (text ids, -1: none), ``caller`` (function tracer hits: the
    parent's name id), ``flags``.  Only the first ``n`` rows are whole.

    Events (markers, dynamic events, stack traces, lost-event notices) are kept in time
    order: ``ev_ts`` and ``ev_text``.
    """

    def __init__(self, cpu: int, tid: int, comm: str, spill: Spill | None = None) -> None:
        self.cpu = cpu
        self.tid = tid
        self.comm = comm
        sp = Spill() if spill is None else spill
        self.func = Column(sp, "i")
        self.depth = Column(sp, "i")
        self.start = Column(sp, "q")
        self.end = Column(sp, "q")
        self.self_ns = Column(sp, "q")
        self.parent = Column(sp, "i")
        self.subend = Column(sp, "i")
        self.args = Column(sp, "i", -1)
        self.ret = Column(sp, "i", -1)
        self.caller = Column(sp, "i", -1)
        self.flags = Column(sp, "B")
        self.n = 0
        self.ev_ts = array("q")
        self.ev_text: list[str] = []
        self.nev = 0
        # per function id: hits, total ns, self ns (closed calls)
        self.hit: dict[int, int] = {}
        self.total: dict[int, int] = {}
        self.self_total: dict[int, int] = {}
        self._stack: list[int] = []     # open rows (the builder's thread only)

    @property
    def label(self) -> str:
        return f"{self.comm}-{self.tid}"

    def events_between(self, start: int, end: int) -> tuple[int, int]:
        """The range of event numbers with start <= ts <= end."""
        nev = self.nev
        lo = bisect_left(self.ev_ts, start, 0, nev)
        hi = bisect_right(self.ev_ts, end, lo, nev)
        return lo, hi

    def find(self, fid: int, start: int, stop: int | None = None) -> int:
        """The first row >= start calling function ``fid`` (-1: none)."""
        stop = self.n if stop is None else stop
        if start >= stop:
            return -1
        try:
            return self.func.index(fid, start, stop)
        except ValueError:
            return -1

    def rfind(self, fid: int, stop: int) -> int:
        """The last row < stop calling function ``fid`` (-1: none)."""
        return self.func.rindex(fid, stop)


@dataclass(slots=True)
class FunctionRow:
    """One line of the function table (the kernel's function profile, plus self time,
    and the distribution of the calls' durations once it is known: ``dist``, fntrace
    stat's row of the function with its histogram, None until then)."""
    func: str
    hit: int
    time: int       # ns, all calls
    avg: float      # ns
    self_ns: int    # ns
    dist: FunctionStat | None = None

    def pct(self, p: float) -> int:
        """ns: the p-th percentile of the calls' durations (-1: not known yet)."""
        return -1 if self.dist is None else self.dist.percentile(p)


#: (thread slot, or None for all threads; function) -> its row in fntrace stat
Distributions = dict


def function_distributions(source: TraceSource) -> Distributions:
    """Each function's distribution per thread and over all threads, as ``fntrace
    stat --per-thread --dist`` makes them (the native walk, or the entries where it
    cannot read the trace): the table's Min, p50, p90, p99, Max and Stdev."""
    from ..output.stat import function_stats, walked_stats
    walked = walked_stats(source.tf, per_thread=True, dist=True)
    rows = (walked.rows if walked is not None
            else function_stats(source.entries(), per_thread=True, dist=True))
    out: Distributions = {}
    for r in rows:
        out[r.cpu, r.func] = r
        a = out.get((None, r.func))
        if a is None:
            a = out[None, r.func] = FunctionStat(r.func, None, hist={})
        a.add(r)
    return out


class TraceIndex:
    """Every thread's rows, built by ``build`` (call it in a background thread)."""

    def __init__(self, source: TraceSource, cache_bytes: int = CACHE_BYTES,
                 chunk_shift: int = CHUNK_SHIFT, verdict: Verdict | None = None) -> None:
        self.source = source
        # whether the native walk may read the trace, when already asked (``verdict()``)
        self._verdict = verdict
        # the rows of every thread: in memory up to cache_bytes, the rest in a file
        self.spill = Spill(cache_bytes, chunk_shift)
        self.names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self.texts: list[str] = []
        self._text_ids: dict[str, int] = {}
        self.threads: dict[int, ThreadIndex] = {}
        for cpu, (tid, comm) in sorted(source.threads.items()):
            self.threads[cpu] = ThreadIndex(cpu, tid, comm, self.spill)
        self.total = source.nr_records()
        self.read = 0
        self.first_ts: int | None = None
        self.done = False
        self.error: str | None = None
        self.stop = threading.Event()
        self.lock = threading.Lock()    # held while rows are added or closed
        self._it: Iterator[TraceEntry | LostEvents] | None = None
        self._builder: CallBuilder | None = None
        # the native twin's walk (None: the Python loop reads the trace), made on the
        # first step; False when there is none
        self._walk: Iterator | Literal[False] | None = None

    # -- names --------------------------------------------------------------

    def name_id(self, name: str) -> int:
        i = self._name_ids.get(name)
        if i is None:
            i = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return i

    def text_id(self, text: str) -> int:
        i = self._text_ids.get(text)
        if i is None:
            i = self._text_ids[text] = len(self.texts)
            self.texts.append(text)
        return i

    def ids_matching(self, substring: str) -> set[int]:
        """Function ids whose name contains ``substring`` (case-insensitive)."""
        s = substring.lower()
        return {i for i, n in enumerate(list(self.names)) if s in n.lower()}

    def thread(self, cpu: int, tid: int = 0, comm: str = "<...>") -> ThreadIndex:
        t = self.threads.get(cpu)
        if t is None:
            t = self.threads[cpu] = ThreadIndex(cpu, tid, comm, self.spill)
        return t

    # -- building -----------------------------------------------------------

    def build(self, limit: int | None = None) -> None:
        """Read the trace (the rest of it, or ``limit`` more entries at most); stops
        early when ``stop`` is set.  ``done`` is set when the whole trace is read."""
        try:
            if self._step(limit):
                if self._builder is not None:
                    with self.lock:
                        for c in self._builder.finish():
                            self._close(self.threads[c.cpu], c)
                self.done = True
        except Exception as e:  # a damaged file: say so in the browser, keep what was read
            self.error = f"{type(e).__name__}: {e}"
            self.done = True

    def _step(self, limit: int | None) -> bool:
        """Index up to ``limit`` entries (all with None); True at the end of the trace."""
        walk = self._walk
        if walk is None:
            walk = self._walk = self._native_walk()
        if walk is not False:
            return self._native_step(walk, limit)
        it, builder = self._it, self._builder
        if it is None or builder is None:       # (made together, at the first step)
            builder = self._builder = CallBuilder()
            it = self._it = iter(self.source.entries())
        feed = builder.feed
        close = self._close
        text_id = self.text_id
        name_id = self.name_id
        threads = self.threads
        stop = self.stop
        lock = self.lock
        count = self.read
        left = limit
        while not stop.is_set():
            if left is not None and left <= 0:
                return False
            batch = list(islice(it, _BATCH if left is None else min(_BATCH, left)))
            if not batch:
                return True
            if left is not None:
                left -= len(batch)
            with lock:
                for e in batch:
                    if isinstance(e, LostEvents):
                        t = threads.get(e.cpu) or self.thread(e.cpu)
                        n = "some" if e.lost == LOST_EVENTS_UNKNOWN else str(e.lost)
                        ts = t.ev_ts[t.nev - 1] if t.nev else (t.start[t.n - 1] if t.n else 0)
                        self._event(t, ts, f"[LOST {n} EVENTS]")
                        continue
                    if self.first_ts is None:
                        self.first_ts = e.ts
                    typ = e.type
                    t = threads.get(e.cpu) or self.thread(e.cpu, e.pid, e.comm)
                    if typ == TRACE_GRAPH_ENT or typ == TRACE_GRAPH_RET:
                        for c in feed(e):
                            close(threads[c.cpu], c)
                        if typ == TRACE_GRAPH_ENT:
                            st = t._stack
                            r = t.n
                            t.func.append(name_id(e.func))
                            t.depth.append(e.depth)
                            t.start.append(e.ts)
                            t.end.append(-1)
                            t.self_ns.append(0)
                            t.parent.append(st[-1] if st else -1)
                            t.subend.append(-1)
                            t.args.append(text_id(function_args_text(e.args)) if e.args is not None else -1)
                            t.ret.append(-1)
                            t.caller.append(-1)
                            t.flags.append(ENTRY_SEEN | OPEN)
                            st.append(r)
                            t.n = r + 1
                    elif typ == TRACE_FN:
                        r = t.n
                        fid = name_id(e.func)
                        t.func.append(fid)
                        t.depth.append(0)
                        t.start.append(e.ts)
                        t.end.append(e.ts)
                        t.self_ns.append(0)
                        t.parent.append(-1)
                        t.subend.append(r + 1)
                        t.args.append(text_id(function_args_text(e.args)) if e.args is not None else -1)
                        t.ret.append(-1)
                        t.caller.append(name_id(e.parent) if e.parent else -1)
                        t.flags.append(ENTRY_SEEN)
                        t.hit[fid] = t.hit.get(fid, 0) + 1
                        t.n = r + 1
                    elif typ == TRACE_PRINT:
                        self._event(t, e.ts, f"{e.func or 'tracing_mark_write'}: {e.text}")
                    elif typ == TRACE_EVENT:
                        self._event(t, e.ts, f"{e.func}: {e.text}")
                    elif typ == TRACE_STACK:
                        self._event(t, e.ts, "<stack trace>\n" + e.text)
                count += len(batch)
                self.read = count
        return False

    # -- the native twin (_native_read.c's IndexRows) ------------------------------

    @staticmethod
    def verdict(source: TraceSource) -> Verdict:
        """Whether the native walk may read ``source`` (every block decoded and checked),
        asked now in a thread of its own: given to TraceIndex, its first step does not
        wait for it (``fntrace tui`` asks before it imports textual)."""
        return Verdict(source, **_WALKS)

    def _native_walk(self) -> Iterator | Literal[False]:
        """The native walk of a trace of calls or function hits (with their arguments
        and return values as text or 64-bit ints, markers and events with their text),
        with its blocks fed as it asks; False when there is no native twin or the trace
        holds more (the Python loop reads it)."""
        from ..output.registry import name_of
        from ..output.walk import drive, native_for_calls
        source = self.source
        walkable = (self._verdict.result() if self._verdict is not None
                    else native_for_calls(source, **_WALKS))
        if walkable is None:
            return False
        native, slots = walkable
        syms = source.symbols
        top = max(syms, default=0)
        fids = array("i", [-1]) * (top + 1)
        for ip in sorted(syms):
            fids[ip] = self.name_id(name_of(ip, syms))

        def resolve(ip: int) -> int:
            return self.name_id(name_of(ip, syms))
        nslots = max(slots | set(source.threads), default=-1) + 1
        walker = native.IndexRows(nslots, fids, resolve, _NATIVE_BATCH, self.text_id)
        return drive(walker, source, nslots, payloads=True)

    def _native_step(self, walk: Iterator, limit: int | None) -> bool:
        stop = self.stop
        left = limit
        while not stop.is_set():
            if left is not None and left <= 0:
                return False
            batch = next(walk, None)
            if batch is None:
                return True
            nrec, first_ts, rows, updates, stats, losses = batch
            with self.lock:
                if self.first_ts is None and first_ts is not None:
                    self.first_ts = first_ts
                threads = self.threads
                for k, ts, what in losses:
                    t = threads.get(k) or self.thread(k)
                    if type(what) is str:       # a marker's or an event's text
                        self._event(t, ts, what)
                        continue
                    n = "some" if what == LOST_EVENTS_UNKNOWN else str(what)
                    self._event(t, ts, f"[LOST {n} EVENTS]")
                for (k, n, func, depth, start, end, self_ns, parent, subend, flags, args,
                     ret, caller) in rows:
                    t = threads.get(k) or self.thread(k)
                    t.func.frombytes(func)
                    t.depth.frombytes(depth)
                    t.start.frombytes(start)
                    t.end.frombytes(end)
                    t.self_ns.frombytes(self_ns)
                    t.parent.frombytes(parent)
                    t.subend.frombytes(subend)
                    t.args.frombytes(args)
                    t.ret.frombytes(ret)
                    if caller is None:          # (no function hit among them)
                        t.caller.extend_fill(n)
                    else:
                        t.caller.frombytes(caller)
                    t.flags.frombytes(flags)
                    t.n += n
                for k, r, end, self_ns, subend, flags, ret in updates:
                    t = threads[k]
                    t.end[r] = end
                    t.self_ns[r] = self_ns
                    t.subend[r] = subend
                    t.flags[r] = flags
                    t.ret[r] = ret
                for k, fid, hit, total, self_ns, timed in stats:
                    t = threads[k]
                    t.hit[fid] = hit
                    if timed:                   # (a function hit has no time)
                        t.total[fid] = total
                        t.self_total[fid] = self_ns
                self.read += nrec
            if left is not None:
                left -= nrec
        return False

    def _event(self, t: ThreadIndex, ts: int, text: str) -> None:
        t.ev_ts.append(ts)
        t.ev_text.append(text)
        t.nev += 1

    def _close(self, t: ThreadIndex, c: Call) -> None:
        fid = self.name_id(c.func)
        dur = c.end - c.start
        flags = (COMPLETE if c.complete else 0) | (HAS_RETVAL if c.has_retval else 0)
        ret = self.text_id(_retval_text(c.retval)) if c.has_retval else -1
        if c.entry_seen:
            r = t._stack.pop()
            t.end[r] = c.end
            t.self_ns[r] = c.self_ns
            t.ret[r] = ret
            t.flags[r] = flags | ENTRY_SEEN
            t.subend[r] = t.n
        else:
            st = t._stack
            r = t.n
            t.func.append(fid)
            t.depth.append(c.depth)
            t.start.append(c.start)
            t.end.append(c.end)
            t.self_ns.append(c.self_ns)
            t.parent.append(st[-1] if st else -1)
            t.subend.append(r + 1)
            t.args.append(-1)
            t.ret.append(ret)
            t.caller.append(-1)
            t.flags.append(flags)
            t.n = r + 1
        t.hit[fid] = t.hit.get(fid, 0) + 1
        t.total[fid] = t.total.get(fid, 0) + dur
        t.self_total[fid] = t.self_total.get(fid, 0) + c.self_ns

    # -- reading ------------------------------------------------------------

    def nr_rows(self) -> int:
        return sum(t.n for t in self.threads.values())

    def progress(self) -> float:
        if self.done:
            return 1.0
        return min(1.0, self.read / self.total) if self.total else 0.0


def _retval_text(v: object) -> str:
    return str(v)


def function_rows(index: TraceIndex, cpu: int | None = None,
                  dists: Distributions | None = None) -> list[FunctionRow]:
    """The function table of one thread slot (``cpu``) or of all: hits, total time,
    average and self time per function, from the calls indexed so far; with ``dists``
    (function_distributions of the whole trace) each row's distribution.

    Kept small and separate so a shared table builder can take its place."""
    hit: dict[int, int] = {}
    total: dict[int, int] = {}
    self_t: dict[int, int] = {}
    ts = [index.threads[cpu]] if cpu is not None else list(index.threads.values())
    for t in ts:
        for fid, h in list(t.hit.items()):
            hit[fid] = hit.get(fid, 0) + h
        for fid, v in list(t.total.items()):
            total[fid] = total.get(fid, 0) + v
        for fid, v in list(t.self_total.items()):
            self_t[fid] = self_t.get(fid, 0) + v
    names = index.names
    dists = dists or {}
    rows = [FunctionRow(names[fid], h, total.get(fid, 0), total.get(fid, 0) / h if h else 0.0,
                        self_t.get(fid, 0), dists.get((cpu, names[fid])))
            for fid, h in hit.items()]
    rows.sort(key=lambda r: (-r.time, -r.hit, r.func))
    return rows


def format_ns(ns: float) -> str:
    """A duration as the function_graph text prints it, in the unit that fits."""
    us = ns / 1000
    if us < 1000:
        return f"{us:.3f} us"
    if us < 1_000_000:
        return f"{us / 1000:.3f} ms"
    return f"{us / 1_000_000:.3f} s"


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
