"""Decoded trace entries: what the text renderers read (kernel/trace/trace_entries.h).

The ring buffer keeps fixed-size binary records with symbol ids; a reader turns each one
into a ``TraceEntry`` (names resolved, payload attached) before any text is made, the way
the kernel's ``trace_iterator`` hands ``iter->ent`` to the ``print_line`` callbacks.  The
renderers in this package are pure: entries in, lines out.

Besides entries, a renderer's input may carry ``LostEvents`` markers: the kernel reports
events a CPU buffer dropped with the next event it reads from that buffer
(``iter->lost_events``); here the reader puts a marker in the stream at that point.
"""
from __future__ import annotations

from dataclasses import dataclass
# typing is not imported at run time (most of a reading command's start-up is imports)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, final
else:
    def final(cls):
        return cls

__all__ = [
    "TRACE_FN", "TRACE_GRAPH_ENT", "TRACE_GRAPH_RET", "TRACE_PRINT", "TRACE_STACK",
    "TRACE_EVENT", "LOST_EVENTS_UNKNOWN", "TraceEntry", "LostEvents",
]

# Entry types (enum trace_type) are the ring-buffer record's type numbers, defined once
# in record_format.py: TRACE_FN (function tracer hit: func <-parent), TRACE_GRAPH_ENT /
# TRACE_GRAPH_RET (function_graph entry / return), TRACE_PRINT (trace_marker /
# trace_printk text), TRACE_STACK (func_stack_trace, stacktrace trigger), TRACE_EVENT
# (any other event: name in func, formatted fields in text).
from ..record_format import (  # noqa: E402
    TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_PRINT, TRACE_STACK,
)

# LostEvents.lost when the buffer only knows that something was dropped
# (ring_buffer_iter_dropped(): the kernel passes (unsigned long)-1).
LOST_EVENTS_UNKNOWN: Final = -1


@dataclass(slots=True)
class TraceEntry:
    """One decoded entry, the fields of ``struct trace_entry`` plus the type's payload.

    ts        time of the event, ns of the monotonic clock (printed as secs.usecs)
    cpu       small thread index: the CPU column
    comm      thread name (the kernel's saved cmdline for pid)
    pid       native thread id
    type      one of the TRACE_* constants above
    func      function name (module.qualname); TRACE_EVENT: the event's name;
              TRACE_PRINT: the writer's name, empty for trace_marker
    parent    TRACE_FN: the caller's name (empty: none known)
    depth     graph entries: call depth, 0 = outermost
    calltime  TRACE_GRAPH_RET: when the function was entered, ns
    rettime   TRACE_GRAPH_RET: when it returned, ns (== ts)
    overrun   TRACE_GRAPH_RET: shadow-stack overruns so far (funcgraph-overrun)
    retval    TRACE_GRAPH_RET: an int (the value itself), or a str: the short safe
              repr of any other value (``'abc'``, ``None``), or ``raised X`` when
              an exception left the call; None when nothing was recorded
    has_retval  retval holds a value (it was recorded)
    args      graph entry / function hit with arguments: (name, short repr) pairs;
              None when arguments were not recorded
    text      TRACE_PRINT / TRACE_EVENT: the text after "name: ";
              TRACE_STACK: the frames, newline-joined, innermost first
    """
    ts: int
    cpu: int
    comm: str
    pid: int
    type: int
    func: str = ""
    parent: str = ""
    depth: int = 0
    calltime: int = 0
    rettime: int = 0
    overrun: int = 0
    retval: object = None
    has_retval: bool = False
    args: list[tuple[str, str]] | None = None
    text: str = ""


# final: the readers tell a marker from an entry by ``type(e) is LostEvents``, which a
# checker narrows only for a class that cannot be subclassed.
@final
@dataclass(slots=True, frozen=True)
class LostEvents:
    """Marker: ``lost`` events were dropped on ``cpu`` before the next entry of that cpu.

    ``lost`` is LOST_EVENTS_UNKNOWN when only the fact of the loss is known.
    """
    cpu: int
    lost: int


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
