"""Typed trace events: a trace file read from a script or a notebook.

    import fntrace
    src = fntrace.open_trace("fntrace.dat")
    for ev in src:                        # src.events(): time order, every thread
        match ev:
            case fntrace.GraphReturn(func="shop.cart.total", duration=d) if d > 1_000_000:
                print("slow total:", d / 1e6, "ms on", ev.thread)
            case fntrace.DynamicEvent(name="price__entry", fields={"qty": q}):
                print("qty", q)

Each record of the file becomes one frozen dataclass, named for what happened rather
than for the record type the kernel gives it:

    FunctionHit   the function tracer saw a call (func <-parent)            TRACE_FN
    GraphEntry    function_graph: a function was entered                    TRACE_GRAPH_ENT
    GraphReturn   function_graph: it returned (calltime, duration, retval)  TRACE_GRAPH_RET
    DynamicEvent  a dynamic event fired (``-e 'f mod.func x'``): its fields TRACE_EVENT
    Marker        a trace_marker / printk write                             TRACE_PRINT
    StackTrace    a stack trace (func_stack_trace, the stacktrace trigger)  TRACE_STACK
    Lost          events a thread's buffer dropped before its next event

Every event but Lost has ``ts`` (ns of the trace clock), ``tid`` (the native thread
id), ``thread`` (its name) and ``cpu`` (the small thread index the text shows in the
CPU column).  Argument values, return values and event fields are kept as the trace
shows them: the short text the recorder made (``'a b'``, ``[1, 2]``, ``3``), never
the objects, which the recorder never kept.

A dynamic event's text is ``(where) name=value name=value``: the field names are the
event's own (the file keeps each event's fields), and a value may hold spaces (a quoted
string, a list), so the text is split at the next field's ``name=`` only where that is
not inside quotes or brackets.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from .entry import (
    TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_PRINT, TRACE_STACK,
    LostEvents, TraceEntry,
)

__all__ = [
    "TraceEvent", "FunctionHit", "GraphEntry", "GraphReturn", "DynamicEvent", "Marker",
    "StackTrace", "Lost", "typed_events", "to_event", "parse_event_fields",
]


@dataclass(frozen=True, slots=True)
class FunctionHit:
    """The function tracer saw ``func`` called from ``parent`` ("" when no caller is
    known).  ``args``: parameter name -> value text, when recorded with -A, else None."""
    ts: int
    tid: int
    thread: str
    cpu: int
    func: str
    parent: str
    args: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class GraphEntry:
    """function_graph: ``func`` was entered at ``depth`` (0 = outermost of its thread).
    ``args`` as FunctionHit's."""
    ts: int
    tid: int
    thread: str
    cpu: int
    func: str
    depth: int
    args: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class GraphReturn:
    """function_graph: ``func`` returned (``ts`` is the return time).

    calltime  when it was entered, ns (the same clock as ts)
    duration  ts - calltime, ns
    retval    with -R: an int (the value itself) or the short text of any other value
              (``'abc'``, ``None``); ``raised ValueError`` when an exception left the
              call; None when no value was recorded (see has_retval)
    """
    ts: int
    tid: int
    thread: str
    cpu: int
    func: str
    depth: int
    calltime: int
    duration: int
    retval: object = None
    has_retval: bool = False

    @property
    def raised(self) -> bool:
        """An exception, not a return, ended the call (known only with -R)."""
        return isinstance(self.retval, str) and self.retval.startswith("raised")


@dataclass(frozen=True, slots=True)
class DynamicEvent:
    """A dynamic event fired.

    name    the event's name (``mod_func__entry``, or the name given with ``f:NAME``)
    func    the probed function (``mod.func``)
    caller  a ``%return`` probe: where the function returned to (``mod.main+3``);
            "" for an entry probe
    fields  field name -> value text, in the event's order (``{"x": "1", "s": "'a b'"}``)
    text    the whole formatted text, as ``fntrace report`` prints it
    """
    ts: int
    tid: int
    thread: str
    cpu: int
    name: str
    func: str
    caller: str
    fields: dict[str, str]
    text: str


@dataclass(frozen=True, slots=True)
class Marker:
    """A write to trace_marker (``writer`` "") or a printk by ``writer``; ``text``
    without the newline that ends the write."""
    ts: int
    tid: int
    thread: str
    cpu: int
    text: str
    writer: str = ""


@dataclass(frozen=True, slots=True)
class StackTrace:
    """A stack trace: ``frames`` innermost first (``mod.func`` names)."""
    ts: int
    tid: int
    thread: str
    cpu: int
    frames: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Lost:
    """``count`` events were dropped on thread slot ``cpu`` before its next event
    (-1: dropped, how many unknown)."""
    cpu: int
    count: int


TraceEvent = (FunctionHit | GraphEntry | GraphReturn | DynamicEvent | Marker | StackTrace
              | Lost)


# -- dynamic event text ---------------------------------------------------------------

_OPEN = {"[": "]", "(": ")", "{": "}"}
_CLOSE = frozenset(_OPEN.values())


def _top_level_spaces(text: str, start: int) -> Iterator[int]:
    """The offsets of the spaces from ``start`` on that are outside quotes and
    brackets (a value's text is ``repr``'s: quotes with backslash escapes)."""
    n = len(text)
    i = start
    quote = ""
    depth = 0
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c == "'" or c == '"':
            quote = c
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth = max(0, depth - 1)
        elif c == " " and depth == 0:
            yield i
        i += 1


def _value_end(text: str, start: int, next_name: str | None) -> int:
    """Where the value starting at ``start`` ends: at the space before ``next_name=``
    that is outside quotes and brackets (the end of the text for the last field).
    A value cut short by the recorder (``'abc...``) leaves a quote open: then the
    first `` next_name=`` after it is taken."""
    n = len(text)
    if next_name is None:
        return n
    sep = " " + next_name + "="
    for i in _top_level_spaces(text, start):
        if text.startswith(sep, i):
            return i
    j = text.find(sep, start)
    return n if j < 0 else j


def _generic_fields(body: str) -> dict[str, str]:
    """``name=value`` pairs when the event's field names are not known (a file cut
    short before the recorder wrote them): a field starts at each top-level space
    followed by an identifier and ``=``."""
    out: dict[str, str] = {}
    n = len(body)
    i = 0
    while i < n:
        eq = body.find("=", i)
        if eq < 0:
            break
        name = body[i:eq]
        # the value runs to the next top-level " ident="
        end = n
        for j in _top_level_spaces(body, eq + 1):
            k = body.find("=", j + 1)
            if k > j + 1 and body[j + 1:k].isidentifier():
                end = j
                break
        out[name] = body[eq + 1:end]
        i = end + 1
    return out


def parse_event_fields(text: str, names: Sequence[str] | None = None
                       ) -> tuple[str, str, dict[str, str]]:
    """Split a dynamic event's text into (func, caller, fields).

    ``text`` is ``(mod.func+0) x=1 s='a b'`` (an entry probe) or
    ``(mod.main+3 <- mod.func) arg1=3`` (a ``%return`` probe); ``names`` are the
    event's field names in order (None: found from the text itself).  Values are the
    text as written.
    """
    func = caller = ""
    body = text
    if text.startswith("("):
        close = text.find(")")
        if close > 0:
            head = text[1:close]
            body = text[close + 1:].lstrip(" ")
            where, arrow, target = head.partition(" <- ")
            if arrow:
                func, caller = target, where
            else:
                func = where[:-2] if where.endswith("+0") else where
    if names is None:
        return func, caller, _generic_fields(body)
    fields: dict[str, str] = {}
    pos = 0
    names = list(names)
    for k, name in enumerate(names):
        prefix = name + "="
        if not body.startswith(prefix, pos):
            # not the text this event's fields make: read it as it stands
            return func, caller, _generic_fields(body)
        start = pos + len(prefix)
        end = _value_end(body, start, names[k + 1] if k + 1 < len(names) else None)
        fields[name] = body[start:end]
        pos = end + 1
    return func, caller, fields


# -- entries -> events ------------------------------------------------------------------

def _args(pairs: list[tuple[str, str]] | None) -> dict[str, str] | None:
    return None if pairs is None else dict(pairs)


def to_event(e: TraceEntry | LostEvents,
             event_fields: Mapping[str, Sequence[str]] | None = None) -> TraceEvent | None:
    """One decoded entry as a typed event (None for a type this reader does not know).
    ``event_fields``: event name -> field names (TraceSource keeps them)."""
    if isinstance(e, LostEvents):
        return Lost(e.cpu, e.lost)
    t = e.type
    if t == TRACE_FN:
        return FunctionHit(e.ts, e.pid, e.comm, e.cpu, e.func, e.parent, _args(e.args))
    if t == TRACE_GRAPH_ENT:
        return GraphEntry(e.ts, e.pid, e.comm, e.cpu, e.func, e.depth, _args(e.args))
    if t == TRACE_GRAPH_RET:
        return GraphReturn(e.ts, e.pid, e.comm, e.cpu, e.func, e.depth, e.calltime,
                           e.ts - e.calltime, e.retval, e.has_retval)
    if t == TRACE_EVENT:
        names = event_fields.get(e.func) if event_fields else None
        func, caller, fields = parse_event_fields(e.text, names)
        return DynamicEvent(e.ts, e.pid, e.comm, e.cpu, e.func, func, caller, fields,
                            e.text)
    if t == TRACE_PRINT:
        text = e.text[:-1] if e.text.endswith("\n") else e.text
        return Marker(e.ts, e.pid, e.comm, e.cpu, text, e.func)
    if t == TRACE_STACK:
        frames = tuple(f for f in e.text.split("\n") if f) if e.text else ()
        return StackTrace(e.ts, e.pid, e.comm, e.cpu, frames)
    return None


def typed_events(entries: Iterable[TraceEntry | LostEvents],
                 event_fields: Mapping[str, Sequence[str]] | None = None
                 ) -> Iterator[TraceEvent]:
    """Every entry of a stream as a typed event, in the stream's order."""
    for e in entries:
        ev = to_event(e, event_fields)
        if ev is not None:
            yield ev


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
