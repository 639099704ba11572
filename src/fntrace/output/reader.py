"""Turning binary records into TraceEntry objects (the kernel's trace_iterator).

Two sources give the same stream: a trace file (``fntrace report``) and the live ring
buffers of a TraceArray (tracefs ``trace`` / ``trace_pipe``).  Names are resolved only
here, when the buffer is read; the hot path never formats anything.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from ..ring_buffer import HAS_PAYLOAD, RECORD, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, args_pairs, text_parts
from .entry import LostEvents, TraceEntry
from .registry import name_of as file_name_of

_iter_records = RECORD.iter_unpack

__all__ = ["decode", "entries_from_file", "entries_from_buffers", "entries_of_chunk"]


def decode(cpu: int, ts: int, typ: int, flags: int, a: int, b: int, c: int, d: int,
           payload: Any, name_of: Callable[[int], str], comm: str, pid: int) -> TraceEntry:
    """One record -> one entry (the type's fields named)."""
    if typ == TRACE_FN:
        # the commonest entry, made in one go (trace_pipe decodes ~100,000 a second)
        e = TraceEntry(ts, cpu, comm, pid, typ, name_of(a), name_of(b) if b else "")
        if payload is not None:
            e.args = args_pairs(payload)
        return e
    e = TraceEntry(ts=ts, cpu=cpu, comm=comm, pid=pid, type=typ, func=name_of(a))
    if typ == TRACE_GRAPH_ENT:
        e.depth = b
        if payload is not None:
            e.args = args_pairs(payload)
    elif typ == TRACE_GRAPH_RET:
        # calltime is ts less the duration measured: under the counter or uptime
        # trace_clock that can be below zero, kept as the unsigned 64-bit field
        e.depth, e.overrun, e.calltime, e.rettime = b, c, d if d <= ts else d - (1 << 64), ts
        if payload is not None:
            e.retval = payload
            e.has_retval = True
    else:
        # PRINT / STACK / EVENT carry their text (and an event name) in the payload.
        if payload is not None:
            e.func, e.text = text_parts(payload)
    return e


def entries_from_file(tf, cpu: int | None = None) -> Iterator[TraceEntry | LostEvents]:
    """Every record of a TraceFile in time order, with LostEvents where chunks said
    records were dropped."""
    syms = tf.symbols
    cache: dict[int, str] = {}

    def name_of(ip: int) -> str:
        n = cache.get(ip)
        if n is None:
            n = cache[ip] = file_name_of(ip, syms)
        return n

    threads = tf.threads
    losses = {c: tf.losses(c) for c in (tf.cpus if cpu is None else [cpu])}
    losses = {c: lst for c, lst in losses.items() if lst}
    if not losses:
        for (c, ts, typ, flags, a, b, cc, d, payload) in tf.records(cpu):
            pid, comm = threads.get(c, (0, "<...>"))
            yield decode(c, ts, typ, flags, a, b, cc, d, payload, name_of, comm, pid)
        return
    # Some chunk says its buffer dropped records before it (a session's buffers saved
    # after overwriting): a LostEvents marker goes before that cpu's next record, as
    # the kernel's iterator reports iter->lost_events.
    seen = dict.fromkeys(losses, 0)
    for (c, ts, typ, flags, a, b, cc, d, payload) in tf.records(cpu):
        pending = losses.get(c)
        if pending:
            n = seen[c]
            while pending and pending[0][0] <= n:
                yield LostEvents(c, pending.pop(0)[1])
            seen[c] = n + 1
        pid, comm = threads.get(c, (0, "<...>"))
        yield decode(c, ts, typ, flags, a, b, cc, d, payload, name_of, comm, pid)
    for c, pending in losses.items():
        for _, lost in pending:         # dropped after the last record kept
            yield LostEvents(c, lost)


def entries_of_chunk(cpu: int, first_seq: int, chunk: bytes, payloads: dict,
                     name_of: Callable[[int], str],
                     thread_info: Mapping[int, tuple[int, str]]
                     ) -> list[TraceEntry | LostEvents]:
    """The entries of a run of one buffer's records (a ring buffer's ``take``, or a
    chunk handed to a sink), ``first_seq`` being the first record's sequence number.
    Only entries: the list is typed to take the LostEvents marker a caller puts
    before them."""
    pid, comm = thread_info.get(cpu, (0, "<...>"))
    out: list[TraceEntry | LostEvents] = []
    get = payloads.get if payloads else None
    seq = first_seq
    for ts, typ, flags, a, b, c, d in _iter_records(chunk):
        payload = get(seq) if get is not None and flags & HAS_PAYLOAD else None
        out.append(decode(cpu, ts, typ, flags, a, b, c, d, payload, name_of, comm, pid))
        seq += 1
    return out


def entries_from_buffers(buffers: Iterable, name_of: Callable[[int], str],
                         thread_info: dict[int, tuple[int, str]], *,
                         consume: bool = False) -> Iterator[TraceEntry | LostEvents]:
    """The records held in live ring buffers, merged by time.  ``consume`` is trace_pipe:
    records are marked read and a LostEvents marker precedes a cpu's records when some
    were overwritten since the last read."""
    streams = []
    lost_markers = []
    for buf in buffers:
        if consume:
            lost, recs = buf.consume()
            if lost:
                lost_markers.append(LostEvents(buf.cpu, lost))
        else:
            recs = list(buf.records())
        streams.append([(r[1], buf.cpu, r) for r in recs])
    yield from lost_markers
    # (ts, cpu, record) tuples compare by time, then cpu (the lowest cpu first on a
    # tie, as the kernel's iterator); seq, unique in a cpu, settles the rest.  One
    # thread's records need no merge.
    merged = streams[0] if len(streams) == 1 else heapq.merge(*streams)
    for ts, cpu, r in merged:
        pid, comm = thread_info.get(cpu, (0, "<...>"))
        _, ts, typ, flags, a, b, c, d, payload = r
        yield decode(cpu, ts, typ, flags, a, b, c, d, payload, name_of, comm, pid)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
