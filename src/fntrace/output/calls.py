"""Calls out of a function_graph stream: what the table, flame graph, timeline and
browser views are made of.

A function_graph trace holds an entry record when a function is entered and a return
record (with calltime, rettime) when it returns; the text printer pairs them as it
goes (trace_functions_graph.c's get_return_for_leaf).  Every other view wants whole
calls: a name, where it sat (its stack), when it started, how long it took, how much
of that was its own.  ``CallBuilder`` keeps one open stack per thread slot and hands
back each call when its return is read, so a trace of any length goes through in the
memory of its deepest stack::

    entries (time order)           per-cpu stack                 calls out (at return)
    ENT main     depth 0           [main]
    ENT parse    depth 1           [main, parse]
    RET parse    depth 1           [main]                        parse  (main;parse)
    RET main     depth 0           []                            main   (main)

What a real trace does to that picture, and what is made of it:

- a return whose entry is not in the trace (overwritten, or tracing switched on inside
  the call): the call is made from the return alone (its calltime is recorded), under
  whatever is open above its depth;
- entries whose return never comes (the trace ended, or a return was lost): open
  frames deeper than a return's depth are closed at that return's time, the rest at
  the end of the stream (``finish``), marked ``complete=False``;
- records lost on a thread (a LostEvents marker): a return after the gap cannot be
  told from the return of a different call of the same function, so what was open
  there is closed at the thread's last time before the gap (``complete=False``), and
  a call made from its return alone after it begins no earlier than that time: a
  call open across the gap comes out in two pieces, and the pieces never overlap.

Self time is the call's duration less its children's; a child's duration is taken
as recorded, so rounding cannot make self time negative (it is clamped at 0).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .entry import TRACE_GRAPH_ENT, TRACE_GRAPH_RET, LostEvents, TraceEntry

__all__ = ["Call", "CallBuilder", "iter_calls"]


@dataclass(slots=True)
class Call:
    """One function call, whole.

    cpu, pid, comm  the thread slot, native thread id and thread name
    func            module.qualname
    depth           0 = outermost on its thread
    start, end      ns, the trace's clock (end - start is the duration)
    self_ns         duration less the children's durations
    stack           the names from the outermost open call down to this one
    args            (name, short repr) pairs when recorded, else None
    retval          the return value as recorded (see TraceEntry.retval)
    has_retval      a return value was recorded
    complete        False: no return was read (the duration runs to where the trace,
                    or the thread's open stack, ended)
    entry_seen      False: the entry was not in the trace (made from the return)
    parent_key      (depth, start) of the call it was made in (the frame open under it
                    on its thread when it ended), None at the bottom: with cpu it
                    names the parent call, which ends after it (whose own key is
                    (depth, start))
    """
    cpu: int
    pid: int
    comm: str
    func: str
    depth: int
    start: int
    end: int
    self_ns: int
    stack: tuple[str, ...]
    args: list[tuple[str, str]] | None = None
    retval: object = None
    has_retval: bool = False
    complete: bool = True
    entry_seen: bool = True
    parent_key: tuple[int, int] | None = None

    @property
    def duration(self) -> int:
        return self.end - self.start


class _Frame:
    __slots__ = ("func", "depth", "start", "args", "children", "stack")

    def __init__(self, func: str, depth: int, start: int, args, stack: tuple[str, ...]):
        self.func = func
        self.depth = depth
        self.start = start
        self.args = args
        self.children = 0
        self.stack = stack


class CallBuilder:
    """Feed it a time-ordered entry stream; it returns calls as they end.

    ``feed(entry)`` returns the calls that entry ended (usually none or one);
    ``finish()`` closes what is still open.  Entries that are not graph entries or
    returns are ignored (the caller handles them: events, markers); a LostEvents
    marker closes what is open on its thread slot (see above).
    ``last_ts[cpu]`` is the last time seen per thread slot.

    ``calltime``: a call whose entry was read starts at its return's calltime when that
    lies between the entry and the return (a trace recorded with sleep-time 0, whose
    calltimes leave out the time the thread did not run: ``stat --cpu``), else at its
    entry as always.
    """

    def __init__(self, calltime: bool = False) -> None:
        self.calltime = calltime
        self._stacks: dict[int, list[_Frame]] = {}
        self._who: dict[int, tuple[int, str]] = {}
        self._gap: dict[int, int] = {}          # cpu -> where its last loss began
        self.last_ts: dict[int, int] = {}

    def open_stack(self, cpu: int) -> tuple[str, ...]:
        """The names open on a thread slot now, outermost first."""
        st = self._stacks.get(cpu)
        return st[-1].stack if st else ()

    def feed(self, e: TraceEntry | LostEvents) -> list[Call]:
        if isinstance(e, LostEvents):
            cpu = e.cpu
            if cpu in self.last_ts:
                ts = self.last_ts[cpu]
                self._gap[cpu] = ts
                st = self._stacks.get(cpu)
                if st:
                    return self._close_deeper(st, -1, ts, cpu)
            return []
        typ = e.type
        if typ != TRACE_GRAPH_ENT and typ != TRACE_GRAPH_RET:
            return []
        cpu = e.cpu
        self.last_ts[cpu] = e.ts
        self._who[cpu] = (e.pid, e.comm)
        st = self._stacks.get(cpu)
        if st is None:
            st = self._stacks[cpu] = []
        if typ == TRACE_GRAPH_ENT:
            out = self._close_deeper(st, e.depth, e.ts, cpu) if st and st[-1].depth >= e.depth else []
            parent = st[-1].stack if st else ()
            st.append(_Frame(e.func, e.depth, e.ts, e.args, parent + (e.func,)))
            return out
        out = self._close_deeper(st, e.depth + 1, e.ts, cpu) if st and st[-1].depth > e.depth else []
        if st and st[-1].depth == e.depth and st[-1].func != e.func:
            out += self._close_deeper(st, e.depth, e.ts, cpu)   # its return was lost
        pid, comm = e.pid, e.comm
        start = e.calltime
        if st and st[-1].depth == e.depth and st[-1].func == e.func:
            f = st.pop()
            if not (self.calltime and f.start <= start <= e.ts):
                start = f.start if f.start <= e.ts else start
            dur = e.ts - start
            c = Call(cpu, pid, comm, e.func, e.depth, start, e.ts, max(0, dur - f.children),
                     f.stack, f.args, e.retval, e.has_retval, True, True,
                     (st[-1].depth, st[-1].start) if st else None)
        else:
            # The entry is not in the trace: the call is made from its return.
            gap = self._gap.get(cpu)
            if gap is not None and start < gap:
                start = gap
            parent = st[-1].stack if st else ()
            dur = e.ts - start
            c = Call(cpu, pid, comm, e.func, e.depth, start, e.ts, dur, parent + (e.func,),
                     None, e.retval, e.has_retval, True, False,
                     (st[-1].depth, st[-1].start) if st else None)
        if st:
            st[-1].children += dur
        out.append(c)
        return out

    def _close_deeper(self, st: list[_Frame], depth: int, ts: int, cpu: int) -> list[Call]:
        """Close, as incomplete at ``ts``, every open frame at ``depth`` or deeper."""
        out = []
        pid, comm = self._who.get(cpu, (0, "<...>"))
        while st and st[-1].depth >= depth:
            f = st.pop()
            dur = max(0, ts - f.start)
            out.append(Call(cpu, pid, comm, f.func, f.depth, f.start, f.start + dur,
                            max(0, dur - f.children), f.stack, f.args, None, False, False,
                            True, (st[-1].depth, st[-1].start) if st else None))
            if st:
                st[-1].children += dur
        return out

    def finish(self) -> list[Call]:
        """Close every frame still open, at its thread's last time (innermost first)."""
        out = []
        for cpu, st in self._stacks.items():
            out.extend(self._close_deeper(st, -1, self.last_ts.get(cpu, 0), cpu))
        return out


def iter_calls(entries: Iterable[TraceEntry | LostEvents]) -> Iterator[Call]:
    """Every call of a function_graph entry stream, in the order they end, then the
    calls left open, innermost first."""
    b = CallBuilder()
    feed = b.feed
    for e in entries:
        if isinstance(e, LostEvents) or e.type == TRACE_GRAPH_ENT or e.type == TRACE_GRAPH_RET:
            for c in feed(e):
                yield c
    yield from b.finish()


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
