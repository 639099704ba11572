"""A trace file as every view and export reads it (the kernel's trace_iterator over a
whole buffer, plus what the file says about itself).

    src = open_trace("fntrace.dat")
    src.tracer, src.header, src.threads, src.stats
    for e in src.entries(): ...          # TraceEntry / LostEvents, in time order

``entries()`` may be called again for a second pass; nothing is cached between passes,
so a view that reads the trace once holds only what it keeps itself.  ``events()``
gives the same trace as typed, documented events for scripts and notebooks (the public
reader: ``fntrace.open_trace``), and ``calls()`` whole calls.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ContextManager

    from .trace_events import TraceEvent

from ..tracefile.trace_set import TraceSet, open_traces
from ..tracefile.reader import TraceFile
from .calls import Call, iter_calls
from .entry import LostEvents, TraceEntry
from .reader import entries_from_file

__all__ = ["TraceSource", "open_trace"]


class TraceSource:
    """One trace file, opened.

    name       the path it was opened from
    tracer     the tracer that recorded it (function, function_graph, nop, ...)
    header     the recording's settings (tracer, pid, argv, filters, clock, ...)
    threads    thread slot (the CPU column) -> (native thread id, thread name)
    stats      what the recorder counted (written/overrun/dropped per slot, callback
               errors, exit status, trace_clock); None if the file was cut short
    pid        the traced process's id (the first one, of a trace that followed several)
    processes  each process of the trace (process_of: a thread slot's)
    truncated  the file was cut short: what is whole is read, the rest is not
    tf         the underlying TraceFile (records, symbols)

    Iterating over it gives ``events()``.
    """

    def __init__(self, tf: TraceFile | TraceSet, name: str | None = None) -> None:
        self.tf = tf
        self.name = name or tf.name
        self.header: dict[str, Any] = tf.header
        self.tracer: str = str(tf.header.get("tracer", "function"))
        self.threads: dict[int, tuple[int, str]] = tf.threads
        self.stats: dict[str, Any] | None = tf.stats
        self.pid: int = int(tf.header.get("pid") or 0)
        self.truncated: bool = bool(tf.truncated)
        # a child's file left out of a trace of several processes, one line each
        self.bad: list[str] = list(getattr(tf, "bad", ()))

    def process_of(self, cpu: int) -> int:
        """The process a thread slot belongs to (the one process of a plain file)."""
        if isinstance(self.tf, TraceSet):
            return self.tf.pid_of_cpu.get(cpu, self.pid)
        return self.pid

    @property
    def processes(self) -> list[dict]:
        """Each process of the trace: pid, ppid, argv, file (the first one first)."""
        procs = self.header.get("processes")
        if procs:
            return list(procs)
        return [{"pid": self.pid, "ppid": None, "argv": self.header.get("argv"),
                 "file": self.name}]

    @property
    def symbols(self) -> dict[int, tuple]:
        return self.tf.symbols

    @property
    def cpus(self) -> list[int]:
        """The thread slots that have records or a thread entry, in ascending order."""
        return self.tf.cpus

    def places(self) -> dict[str, tuple[str, int]]:
        """Function name -> (source file, first line), from the symbol table (the
        first symbol of a name, when two share it)."""
        out: dict[str, tuple[str, int]] = {}
        for name, file, line in self.symbols.values():
            out.setdefault(name, (file, line))
        return out

    @property
    def trace_clock(self) -> str:
        return str((self.stats or {}).get("trace_clock", "local"))

    def nr_records(self) -> int:
        """Records in the file (every entry; LostEvents markers not counted)."""
        return self.tf.nr_records()

    def lost(self) -> int:
        """Records the recorder said were dropped or overwritten."""
        return self.tf.lost()

    def first_time(self) -> int | None:
        """The first record's time, from the file's index: None without one."""
        return self.tf.first_time()

    def entries(self, cpu: int | None = None) -> Iterator[TraceEntry | LostEvents]:
        """Every entry in time order (one thread slot's with ``cpu``)."""
        return entries_from_file(self.tf, cpu)

    def record_blocks(self, cpu: int | None = None, payloads: bool = False,
                      since: int | None = None, until: int | None = None
                      ) -> Iterator[tuple] | None:
        """The decoded records block by block, one thread slot after another (``cpu``:
        that slot's), for the native walks: ``(cpu, lost before, 32-byte records,
        symbol id base)`` (TraceFile.record_blocks; ``payloads``: and the block's
        payloads; ``since``, ``until``: the blocks of that window, where the file's
        index says which).  A source whose entries are not read from records (made in
        memory) returns None: its views walk ``entries()``."""
        return self.tf.record_blocks(cpu, payloads, since, until)

    def part_sizes(self) -> list[int] | None:
        """The records of each process's file of a trace of several processes, for a
        walk that reads them apart (``part_record_blocks``, tracefile/parallel.py);
        None for one file, or a source whose views do not walk its blocks."""
        if not isinstance(self.tf, TraceSet) or self.record_blocks() is None:
            return None
        return [f.nr_records() for f in self.tf.files]

    def part_record_blocks(self, part: int, payloads: bool = False,
                           since: int | None = None, until: int | None = None
                           ) -> Iterator[tuple]:
        """``record_blocks()`` of the ``part``-th process's file only, its slots and
        ids numbered as in the whole trace (TraceSet.part_record_blocks)."""
        assert isinstance(self.tf, TraceSet)
        return self.tf.part_record_blocks(part, payloads, since, until)

    def parts_progress(self) -> ContextManager[Callable[[int], None] | None]:
        """What a reader of the parts in other processes (tracefile/parallel.py's
        map_parts) tells of the records read, ``advance(n)``: None here; a source the
        CLI reads with a progress bar draws it (cli/progress.py), from the first
        advance until the context ends."""
        return contextlib.nullcontext(None)

    def events(self, cpu: int | None = None) -> Iterator[TraceEvent]:
        """The trace as typed events, in time order (one thread slot's with ``cpu``):
        FunctionHit, GraphEntry, GraphReturn, DynamicEvent, Marker, StackTrace, Lost
        (output/trace_events.py).  Each call reads the file again."""
        # (imported here: the views and exports read entries, not typed events)
        from .trace_events import typed_events
        return typed_events(self.entries(cpu), self.event_fields)

    def __iter__(self) -> Iterator[TraceEvent]:
        return self.events()

    def calls(self) -> Iterator[Call]:
        """Whole calls of a function_graph trace (output/calls.py's Call: func, start,
        end, duration, self_ns, stack, args, retval, ...), each when its return is
        read, then the calls the trace left open (``complete`` False)."""
        return iter_calls(self.entries())

    @property
    def event_fields(self) -> dict[str, list[str]]:
        """Event name -> its field names in order, as the recorder wrote them (none
        in a file cut short before its end)."""
        formats = (self.stats or {}).get("event_formats") or {}
        out = {}
        for name, fmt in formats.items():
            fields = fmt.get("fields") if isinstance(fmt, dict) else None
            if isinstance(fields, (dict, list)):
                out[str(name)] = [str(f) for f in fields]
        return out

    def __repr__(self) -> str:
        return (f"<TraceSource {self.name!r} tracer={self.tracer} "
                f"records={self.nr_records()} threads={len(self.threads)}>")


def open_trace(path: str | os.PathLike[str], pids=None) -> TraceSource:
    """Open a trace file written by ``fntrace record`` (or ``output=``), with the files
    of the processes it followed (tracefile/trace_set.py; ``pids``: only those processes).
    Raises TraceFileError (a FntraceError) with a one-line reason for a file that is
    not one; a file cut short opens with ``truncated`` set."""
    return TraceSource(open_traces(path, pids), os.fsdecode(path))


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
