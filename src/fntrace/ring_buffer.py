"""Per-thread ring buffers of fixed-size binary records (kernel/trace/ring_buffer.c).

One ``RingBuffer`` per thread (the kernel's per-CPU buffer; the thread's small index is
the CPU column).  Records are 32 bytes (layout: record_format.py):

    slot = seq % nrec
    +--------+--------+-----+--------+          seq: how many records were ever written
    | oldest |  ...   | ... | newest |          lo:  the oldest sequence still held
    +--------+--------+-----+--------+          read: the first not yet consumed (trace_pipe)

Full buffer: overwrite mode drops the oldest record (``overrun``), stop mode drops the new
one (``dropped``); with a sink attached (``fntrace record``) the records not handed over
yet go to the sink as one chunk instead, so nothing is lost.  Objects that do not fit a
record (argument reprs, marker text) ride beside it in ``payloads``, keyed by sequence
number, and go when their record is overwritten.  (The native twin with a sink lists
them in record order instead and settles the list into ``payloads`` when it is read:
``payloads_by_seq`` pairs a handed-over list with its chunk's flagged records.)

The sink is a ``ChunkQueue``: the writing thread only copies the chunk out and appends
it (the kernel's reader-page swap; the native twin hands a full buffer's page itself
and writes on in a new one), in C when the native twin is built, so handing a
chunk over runs no Python frame on the traced thread's stack — a thread at its
recursion limit, or one a signal handler interrupts, still hands it over whole.  The
reader (the trace file's writer thread, tracefile/sink.py) takes chunks off in order.
"""
from __future__ import annotations

import itertools
import struct
import time
from collections import deque
from collections.abc import Iterator, Mapping
from _thread import get_ident as _get_ident
from os import getpid as _getpid
from os import write as _os_write
from time import sleep as _sleep
from _thread import RLock as _RLock
from _thread import allocate_lock as _allocate_lock
# typing is not imported at run time (it is a fifth of fntrace's import cost);
# the annotations are strings (from __future__ import annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from . import _env
from .record_format import (
    FORMAT, HAS_PAYLOAD, OFFSETS, RECORD_SIZE, TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET,
    TRACE_PRINT, TRACE_STACK,
)

__all__ = ["RECORD", "RECORD_SIZE", "RingBuffer", "ChunkQueue", "TRACE_FN", "TRACE_GRAPH_ENT",
           "TRACE_GRAPH_RET", "TRACE_PRINT", "TRACE_STACK", "TRACE_EVENT", "HAS_PAYLOAD",
           "PAYLOAD_SEP", "args_pairs", "text_parts", "TRACE_CLOCKS", "CLOCK_IN_NS",
           "trace_clock_now", "quiet_pending", "payloads_by_seq"]

# The record's layout, type numbers and flag bits: record_format.py, their one definition.
RECORD = struct.Struct(FORMAT)
assert RECORD.size == RECORD_SIZE

# A payload waits in the buffer until the writer takes it, while the program runs.  It
# is one str, never a list or tuple: a str is not a container the cyclic GC tracks, so
# the program's gc.get_objects() counts stay as without fntrace.  Its parts are
# separated by NUL, which no identifier and no safe repr (core/fetch.py) contains:
#   ENT/FN arguments  "name\0value\0name\0value..."   (_native.c args_payload)
#   PRINT/STACK/EVENT "event-name\0text"                ("" as the name: none)
PAYLOAD_SEP = "\0"


def args_pairs(payload) -> list[tuple[str, str]]:
    """The (name, value) pairs of an ENT/FN payload (a list of pairs in older files)."""
    if type(payload) is not str:
        return [tuple(p) for p in payload]
    if not payload:
        return []
    it = iter(payload.split(PAYLOAD_SEP))
    return list(zip(it, it))


def text_parts(payload) -> tuple[str, str]:
    """(event name, text) of a PRINT/STACK/EVENT payload."""
    if type(payload) is str:
        name, sep, text = payload.partition(PAYLOAD_SEP)
        return (name, text) if sep else ("", payload)
    if isinstance(payload, (list, tuple)) and len(payload) == 2:
        return payload[0] or "", payload[1] or ""
    return "", str(payload)

# trace_clock (kernel/trace/trace.c trace_clocks[]): the names ``trace_clock`` lists, in
# the order of their numbers (RingBuffer.clock; the native twin's FNT_CLOCK_*).  Every
# writer passes a CLOCK_MONOTONIC reading; local, global, perf and mono are that clock in
# one process (there is no cross-CPU skew to pay for), so the record keeps it; the others
# are read where the record is written.
TRACE_CLOCKS: tuple[str, ...] = ("local", "global", "counter", "uptime", "perf", "mono",
                                 "mono_raw", "boot")
# in_ns of trace_clocks[]: counter and uptime are not nanoseconds, and print raw
CLOCK_IN_NS: tuple[bool, ...] = (True, True, False, False, True, True, True, True)
_CLOCK_KEEP = frozenset((0, 1, 4, 5))
_BOOT = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
_RAW = getattr(time, "CLOCK_MONOTONIC_RAW", time.CLOCK_MONOTONIC)
# trace_clock_counter(): one count for the process, as the kernel's is one for the system
_counter = itertools.count(1)


def _py_trace_clock_now(clock: int) -> int:
    """A reading of trace clock number ``clock`` (the counter counts up by one)."""
    if clock == 2:
        return next(_counter)
    if clock == 3:
        # trace_clock_jiffies(): jiffies as clock_t, USER_HZ = 100 per second
        return time.clock_gettime_ns(_BOOT) // 10_000_000
    if clock == 6:
        return time.clock_gettime_ns(_RAW)
    if clock == 7:
        return time.clock_gettime_ns(_BOOT)
    return time.monotonic_ns()


def quiet_pending(limit: int) -> int:
    """Pending bytes below which a quiet hand-over (a thread that ended hands its last
    records over) does not wake the reader: a program of many short threads would
    have it wake, and write a block, for each.  What waits is written at the reader's
    next wake (a full buffer's hand-over, a tick, the end of the recording, a fork);
    always below the limit a writer waits at (its native twin: ring_buffer.c.h's
    QUIET_PENDING)."""
    return limit // 4 if limit > 0 else 1 << 18


class ChunkQueue:
    """Where ring buffers in record mode hand their chunks.

    items      (cpu, records, first_seq, payloads) in hand-over order: the records bytes
               (or a full native buffer's own bytearray), the payloads a dict by
               sequence number (or a native buffer's list: payloads_by_seq)
    notify_fd  a pipe the reader waits on: one byte ``c`` per chunk (-1: nobody waits)
    pending    bytes handed over and not yet taken off by the reader (a payload
               counts PAYLOAD_COST)
    limit      a writer waits (the GIL released) while pending is above this, so a
               slow disk slows the program instead of losing records (0: no limit)
    closed     the reader has gone: writers stop waiting for it
    hold       0, or the ident of the thread that ends the recording after a fatal
               signal: any other thread that hands over waits until the reader has
               gone (the program stops where it is meanwhile)
    """
    __slots__ = ("items", "notify_fd", "pending", "limit", "closed", "hold", "lock", "pid")

    def __init__(self, notify_fd: int = -1, limit: int = 0) -> None:
        self.items: deque = deque()
        self.notify_fd = notify_fd
        self.pending = 0
        self.limit = limit
        self.closed = False
        self.hold = 0
        # ``pending`` is changed by the writers and the reader: a ``+=`` and a ``-=`` of
        # two threads must not lose one another (a pure writer's add lost would leave
        # pending above the limit for ever: the writer would wait for ever).  The
        # native hand-over runs no bytecode and needs no lock.
        self.lock = _allocate_lock()
        # A forked child hands nothing over to its parent's queue: the locks another
        # thread held at fork stay held, and nobody reads it (the child takes a sink
        # of its own when it is followed).
        self.pid = _getpid()

    def take(self) -> tuple | None:
        """The oldest chunk, or None (reader side)."""
        with self.lock:
            try:
                item = self.items.popleft()
            except IndexError:
                return None
            self.pending -= len(item[1]) + PAYLOAD_COST * len(item[3])
        return item

    def take_some(self, max_bytes: int, out: list[tuple]) -> int:
        """The oldest chunks, appended to ``out``: the first whatever its size and the
        next ones while fewer than ``max_bytes`` of records are taken (none when
        empty); returns what they counted in ``pending`` (reader side).  A program of
        many short threads queues a small chunk for each: the reader takes them
        together, not a round of its loop each.  (``out`` is the reader's own list,
        used again each time, and the lock is taken without ``with``: the reader makes
        no object the program's gc.get_objects() could count — sink.py.)"""
        size = cost = 0
        lock = self.lock
        lock.acquire()
        try:
            items = self.items
            while items and size < max_bytes:
                item = items.popleft()
                n = len(item[1])
                size += n
                cost += n + PAYLOAD_COST * len(item[3])
                out.append(item)
            self.pending -= cost
        finally:
            lock.release()
        return cost


CHUNK_NOTIFY = b"c"
# How long (ms) a thread is held after a fatal signal (ChunkQueue.hold): the process ends
# well before; should it not, the thread goes on.
HOLD_MS = 10_000
# What a payload object is counted as in ChunkQueue.pending (a short list or string).
PAYLOAD_COST = 128


class _PyRingBufferBase:
    """The counters and write() of a ring buffer; fntrace._native.RingBufferBase is its
    native twin (same attribute names, same behaviour)."""
    __slots__ = ("cpu", "data", "nrec", "seq", "read", "overrun", "dropped", "overwrite",
                 "sink", "payloads", "clock", "lock", "read_events")
    # The slots' types, for the checker (annotations without a value: no class attribute
    # that would clash with a slot).  RingBuffer.__init__ sets them.
    cpu: int
    data: bytearray
    nrec: int
    seq: int
    read: int
    overrun: int
    dropped: int
    overwrite: bool
    sink: ChunkQueue | None
    payloads: dict[int, Any]
    clock: int
    lock: Any                   # an RLock (pure path only: the native twin has none)
    read_events: int

    def __init__(self, cpu: int, size_kb: int, overwrite: bool = True,
                 sink: ChunkQueue | None = None, clock: int = 0):
        self.cpu = cpu
        self.clock = clock
        self.read_events = 0
        self.nrec = max(1, size_kb * 1024 // RECORD_SIZE)
        self.data = bytearray(self.nrec * RECORD_SIZE)
        self.seq = 0
        self.read = 0
        self.overrun = 0
        self.dropped = 0
        self.overwrite = overwrite
        self.sink = sink
        self.payloads = {}
        self.lock = _RLock()

    # -- writing (hot path) -------------------------------------------------------------
    def write(self, ts: int, typ: int, flags: int, a: int, b: int, c: int, d: int) -> int:
        """Append one record; returns its sequence number, or -1 if it was dropped."""
        seq = self.seq
        if seq - self.read >= self.nrec:
            # The slot still holds a record nobody has read.
            if self.sink is not None:
                try:
                    self.handoff()
                except Exception:
                    # Only the pure path can fail here (a RecursionError at the
                    # thread's limit, MemoryError): counted, never raised into the
                    # program.
                    self.dropped += 1
                    return -1
            elif self.overwrite:
                # Under the lock a reader on another thread copies with (take): it
                # must not copy a slot while it is refilled.  A write that does not
                # overwrite fills a slot already read, and needs no lock.
                with self.lock:
                    seq = self.seq
                    if seq - self.read >= self.nrec:
                        self.overrun += 1
                        if self.payloads:
                            self.payloads.pop(seq - self.nrec, None)
                    _pack_into(self.data, (seq % self.nrec) * RECORD_SIZE, ts, typ, flags,
                               a, b, c, d)
                    self.seq = seq + 1
                return seq
            else:
                self.dropped += 1
                return -1
        if self.clock and self.clock not in _CLOCK_KEEP:     # (0: local, the default)
            now = trace_clock_now(self.clock)
            if typ == TRACE_GRAPH_RET:
                # a return's calltime moves with its timestamp: the duration stays the
                # one measured (the kernel's graph times are trace_clock_local's too)
                # (as the unsigned 64-bit field: below zero under counter or uptime)
                d = (d + now - ts) & 0xFFFF_FFFF_FFFF_FFFF
            ts = now
        _pack_into(self.data, (seq % self.nrec) * RECORD_SIZE, ts, typ, flags, a, b, c, d)
        self.seq = seq + 1
        return seq

    def write_payload(self, ts: int, typ: int, a: int, b: int, c: int, d: int, payload: Any) -> int:
        seq = self.write(ts, typ, HAS_PAYLOAD, a, b, c, d)
        if seq >= 0:
            self.payloads[seq] = payload
        return seq

    def handoff(self, wait: bool = True, quiet: bool = False) -> None:
        """Hand every record not handed over yet to the sink as one chunk, in order.

        ``wait``: the buffer's own thread (it was full) waits for the reader while the
        queue is over its limit.  Another thread flushing the buffer (the reader, so
        that events of an idle thread reach it) passes False: no waiting, and a last
        record whose payload is still being stored stays for the next hand-over.
        ``quiet``: the reader is not woken while less than ``quiet_pending(limit)``
        waits (a thread's last records: see quiet_pending).

        The reader-page swap must be whole for every other thread: here a thread switch
        may come between any two bytecodes, so the owner's and a flusher's hand-overs
        take the buffer's lock (the native twin needs none: it runs no bytecode).  A
        write does not take it: it only ever fills a slot already handed over."""
        q = self.sink
        if q is None or q.pid != _getpid():
            return
        with self.lock:
            start, end = max(self.read, self.seq - self.nrec), self.seq
            if not wait and end > start and _payload_missing(self, end - 1):
                end -= 1
            if end <= start:
                return
            n, nrec = end - start, self.nrec
            s = start % nrec
            data = self.data
            if s + n <= nrec:
                chunk = bytes(data[s * RECORD_SIZE:(s + n) * RECORD_SIZE])
            else:
                chunk = bytes(data[s * RECORD_SIZE:]) + bytes(data[:(s + n - nrec) * RECORD_SIZE])
            pay = _take_payloads(self, start, end)
            self.read = end
            with q.lock:
                q.items.append((self.cpu, chunk, start, pay))
                q.pending += len(chunk) + PAYLOAD_COST * len(pay)
        if q.notify_fd >= 0 and not (quiet and q.pending < quiet_pending(q.limit)):
            try:
                _os_write(q.notify_fd, CHUNK_NOTIFY)
            except OSError:         # the pipe is full: the reader is awake anyway
                pass
        held = q.hold and q.hold != _get_ident()
        if wait and (q.limit and q.pending > q.limit or held):
            limit = q.limit
            n = 0
            while held and n < HOLD_MS or q.pending > limit and not q.closed:
                _sleep(0.001)
                n += 1
                held = q.hold and q.hold != _get_ident()


def _payload_missing(buf, seq: int) -> bool:
    """Does record ``seq`` carry a payload not stored yet?  The pure writer stores it
    just after the record (write_payload): a reader on another thread may come between."""
    flags = _unpack_flags(buf.data, (seq % buf.nrec) * RECORD_SIZE + _FLAGS_OFFSET)[0]
    return bool(flags & HAS_PAYLOAD) and seq not in buf.payloads


def payloads_by_seq(records: bytes | bytearray | memoryview, first_seq: int,
                    payloads: Mapping[int, Any] | list[Any]) -> Mapping[int, Any]:
    """A handed-over chunk's payloads keyed by sequence number.  A dict is that already;
    a list is what a native buffer with a sink keeps (ring_buffer.c.h rb_write_payload:
    no int key made per payload): the payloads of the chunk's records flagged
    HAS_PAYLOAD, in their order.  A mismatch is refused as _native.pack_payloads, its
    twin for the trace file, refuses it."""
    if not isinstance(payloads, list):
        return payloads
    mv = memoryview(records).cast("B")
    out: dict[int, Any] = {}
    k = 0
    for i in range(mv.nbytes // RECORD_SIZE):
        if _unpack_flags(mv, i * RECORD_SIZE + _FLAGS_OFFSET)[0] & HAS_PAYLOAD:
            if k == len(payloads):
                raise ValueError(f"record {first_seq + i} has the TF_HAS_PAYLOAD flag but "
                                 f"the chunk's {len(payloads)} payloads are used up")
            out[first_seq + i] = payloads[k]
            k += 1
    if k < len(payloads):
        raise ValueError(f"{len(payloads)} payloads for the chunk's {k} records with the "
                         f"TF_HAS_PAYLOAD flag")
    return out


def _take_payloads(buf, start: int, end: int) -> dict:
    """Move the payloads of records start..end-1 out of the buffer; those of records
    before ``start`` (overwritten: lost) go with them and are dropped."""
    held = buf.payloads
    if not held:
        return {}
    if type(held) is not dict:
        pop = held.pop
        return {k: pop(k) for k in range(start, end) if k in held}
    # The dict is swapped out before it is looked at: a writer on another thread
    # stores into whichever dict buf.payloads is when it writes (the native writer in
    # one step, with its record), so a payload of a record after `end` stored while
    # this runs is either in `held`, and put back, or in the new dict.  (Checking
    # first and swapping after let such a payload leave with this chunk.)
    buf.payloads = {}
    if min(held) >= start and max(held) < end:
        # every payload held is this chunk's (the rule while a sink is attached)
        return held
    later = {k: v for k, v in held.items() if k >= end}
    if later:
        buf.payloads.update(later)
    return {k: v for k, v in held.items() if start <= k < end}


_native = _env.native()
if TYPE_CHECKING:
    # The checker sees the pure base; the native twin has the same attributes and methods.
    _Base = _PyRingBufferBase
else:
    _Base = _native.RingBufferBase if _native is not None else _PyRingBufferBase
trace_clock_now = _native.trace_clock_now if _native is not None else _py_trace_clock_now
# a buffer's storage: the native one is not zeroed first (see ring_data)
_ring_data = _native.ring_data if _native is not None else bytearray
_pack_into = RECORD.pack_into
_unpack_flags = struct.Struct("<H").unpack_from


class _NoLock:
    """The native twin's writes run no bytecode: a reader needs no lock against them."""
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


def _lock_of(buf):
    return buf.lock if _native is None else _NO_LOCK

_FLAGS_OFFSET = OFFSETS["flags"]


class RingBuffer(_Base):
    """One thread's buffer.

    cpu        the thread's index (CPU column)
    nrec       capacity in records (buffer_size_kb * 1024 // RECORD_SIZE)
    seq        records ever accepted (the next record's sequence number)
    read       first sequence not consumed by trace_pipe
    overrun    records overwritten before anyone read them (overwrite mode)
    dropped    records refused because the buffer was full (stop mode)
    clock      the trace_clock its timestamps are read from (TRACE_CLOCKS index)
    read_events  records consumed by trace_pipe (the per_thread stats file)
    """
    __slots__ = ()
    # (__init__ is the base's: RingBuffer(cpu, size_kb, overwrite=True, sink=None,
    # clock=0), natively one call.)

    # -- the sink (record mode) -----------------------------------------------------
    def flush(self, quiet: bool = False) -> None:
        """Hand every record not handed over yet to the sink (``handoff``)."""
        if self.sink is not None:
            self.handoff(True, quiet)

    # -- reading ------------------------------------------------------------------------
    @property
    def lo(self) -> int:
        return max(self.read, self.seq - self.nrec, 0)

    @property
    def entries(self) -> int:
        """Records in the buffer now (not consumed, not overwritten)."""
        return self.seq - self.lo

    @property
    def written(self) -> int:
        """Every record ever offered, lost ones included: entries-written."""
        return self.seq + self.dropped

    def records(self, start: int | None = None) -> Iterator[tuple]:
        """(seq, ts, type, flags, a, b, c, d, payload) from ``start`` (default: oldest held)."""
        lo = self.lo if start is None else max(start, self.seq - self.nrec, 0)
        unpack = RECORD.unpack_from
        data, nrec, pay = self.data, self.nrec, self.payloads
        for q in range(lo, self.seq):
            ts, typ, flags, a, b, c, d = unpack(data, (q % nrec) * RECORD_SIZE)
            yield (q, ts, typ, flags, a, b, c, d, pay.get(q) if flags & HAS_PAYLOAD else None)

    def take(self) -> tuple[int, int, bytes, dict]:
        """trace_pipe's consuming read of this buffer, from any thread: (events lost
        since the last take, the first record's sequence number, the records as bytes,
        their payloads), every record returned marked read.

        The kernel swaps a reader page out of the ring so the writer cannot touch it;
        here the records are copied out and the copy checked afterwards: a writer in
        overwrite mode that lapped the reader during the copy overwrote the oldest
        records copied: they are dropped and counted as lost.  (The native writer runs
        no bytecode, so a copy sees each write whole; the pure writer's overwriting
        write takes the buffer's lock, as this does.)  A last record whose payload is still being stored stays for the next
        take.  Readers of one buffer take in turn (the trace pipe's lock); the writer
        never moves ``read``, so nothing else can race with it."""
        with _lock_of(self):
            return self._take()

    def _take(self) -> tuple[int, int, bytes, dict]:
        nrec, data = self.nrec, self.data
        end = self.seq
        read = self.read
        start = max(read, end - nrec, 0)
        lost = max(0, start - read)
        if end > start and _payload_missing(self, end - 1):
            end -= 1
        if end <= start:
            if lost:
                self.read = start
            return lost, start, b"", {}
        n = end - start
        s = start % nrec
        if s + n <= nrec:
            chunk = bytes(data[s * RECORD_SIZE:(s + n) * RECORD_SIZE])
        else:
            chunk = bytes(data[s * RECORD_SIZE:]) + bytes(data[:(s + n - nrec) * RECORD_SIZE])
        # The payloads are taken before the copy is checked: an overwriting write
        # between the two pops the payload of the record it overwrites, and such a
        # record is then always among those the check cuts (its slot was refilled).
        pay = _take_payloads(self, start, end)
        valid = self.seq - nrec
        if valid > start:
            cut = min(valid, end) - start
            chunk = chunk[cut * RECORD_SIZE:]
            lost += cut
            start += cut
            if pay:
                pay = {k: v for k, v in pay.items() if k >= start}
        self.read = end
        self.read_events += end - start
        return lost, start, chunk, pay

    def consume(self) -> tuple[int, list[tuple]]:
        """trace_pipe: (events lost since the last read, the records now held), and
        mark them read (``take``, decoded)."""
        lost, first, chunk, pay = self.take()
        recs = [(first + i, *r, pay.get(first + i) if r[2] & HAS_PAYLOAD else None)
                for i, r in enumerate(RECORD.iter_unpack(chunk))]
        return lost, recs

    def reset(self) -> None:
        """``echo > trace``: empty the buffer (counters restart too)."""
        self.seq = self.read = self.overrun = self.dropped = self.read_events = 0
        self.payloads.clear()

    def shrink(self) -> None:
        """Keep only the records held now, in a buffer just large enough (its thread
        has ended: nothing more will be written, and a thousand finished threads must
        not keep a thousand full buffers)."""
        lo, seq, old_n = self.lo, self.seq, self.nrec
        n = max(1, seq - lo)
        if n >= old_n:
            return
        old = self.data
        data = bytearray(n * RECORD_SIZE)
        for q in range(lo, seq):
            a, b = (q % old_n) * RECORD_SIZE, (q % n) * RECORD_SIZE
            data[b:b + RECORD_SIZE] = old[a:a + RECORD_SIZE]
        self.data = data
        self.nrec = n

    def resize(self, size_kb: int) -> None:
        self.nrec = max(1, size_kb * 1024 // RECORD_SIZE)
        self.data = _ring_data(self.nrec * RECORD_SIZE)
        self.reset()


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
