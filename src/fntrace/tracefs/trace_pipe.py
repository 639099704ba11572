"""``trace_pipe``: consuming reads, kept open across reads (kernel/trace/trace.c
tracing_open_pipe, tracing_read_pipe, wait_on_pipe).

One ``TracePipe`` per instance holds what its readers share; each open file is a
``PipeReader`` with its own printing state (output/pipe.py, the kernel's
``trace_iterator``):

    r = fs.open_pipe("trace_pipe")          # or open_pipe(cpus={1}): one thread's
    text = r.read(timeout=1.0)              # "" if nothing came within a second
    r.close()

Semantics, as the kernel's:

* A read consumes: each event goes to exactly one reader.  Readers take in turn, every
  buffer at once (``RingBuffer.take``, safe against the writing threads), and print in
  time order across threads.
* A read blocks until there is something to show (``timeout=None``: for ever), without
  spinning: it sleeps on a condition, woken every ``POLL`` seconds to look at the
  buffers (the writers are the traced program's hot path: they never signal) and at
  once when chunks are copied in or the reader is closed.
* Events lost before a read (overwritten, or copies dropped) print as
  ``CPU:N [LOST M EVENTS]`` before that thread's next line.
* function_graph: a call whose return is already read prints as one line; otherwise
  ``func() {`` now and ``}`` later, the reader remembering each thread's depth and open
  functions across reads.
* Closing a reader loses nothing for the others: what it consumed and has not returned
  from ``read`` (the rest of a ``read(size=...)``) goes back to the pipe, and the next
  read of any reader shows it first.

With a sink (``fntrace record``, ``fntrace live``: full buffers are handed to the trace
file or the live printer), a reader must not take events away from the file.  There the
pipe shows **copies**: each chunk, as it is handed over, is copied to the pipe while a
reader is open (the sink's thread flushes the buffers every few ms while one is, so an
idle thread's events come too); each copy still goes to one reader.  Events handed over
while no reader was open are not shown; copies a reader does not come for are held up to
``COPY_LIMIT`` bytes, the oldest dropped beyond that (and shown as lost).
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterable

from ..core.task import thread_info
from ..output.entry import LostEvents
from ..output.pipe import PipeRenderer
from ..output.registry import name_of, nr_cpus_of
from ..ring_buffer import payloads_by_seq

__all__ = ["TracePipe", "PipeReader", "InstancePipe", "trace_pipe_of", "COPY_LIMIT"]

# Bytes of chunk copies held for readers of a recording's pipe (see the docstring).
COPY_LIMIT = 8 << 20

# Options that change a pipe's text: a reader's printer is remade when one changes.
_TEXT_OPTIONS = ("print-parent", "irq-info", "funcgraph-overrun", "funcgraph-cpu",
                 "funcgraph-overhead", "funcgraph-proc", "funcgraph-duration",
                 "funcgraph-abstime", "funcgraph-tail", "funcgraph-retval",
                 "funcgraph-retval-hex", "funcgraph-args", "view")


class TracePipe:
    """What the readers of one instance's trace_pipe share."""

    def __init__(self, tr) -> None:
        self.tr = tr
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.readers = 0
        # cpu -> items a closed reader had consumed and not shown: first in line
        self.returned: dict[int, list] = {}
        # a recording's copies: (cpu, chunk, first_seq, payloads), oldest first
        self.copies: deque = deque()
        self.copy_bytes = 0
        self.copies_lost: dict[int, int] = {}
        # text a closed reader had made and not returned, by its thread selection
        self.returned_text: list[tuple[frozenset | None, str]] = []

    # -- a recording's copies (called by the sink's thread) -------------------------
    def add_copy(self, cpu: int, chunk: bytes, first_seq: int, payloads: dict) -> None:
        """A chunk handed to the sink: keep a copy for the readers (if any)."""
        with self.lock:
            if not self.readers:
                return
            self.copies.append((cpu, chunk, first_seq,
                                dict(payloads_by_seq(chunk, first_seq, payloads)) if payloads else {}))
            self.copy_bytes += len(chunk)
            while self.copy_bytes > COPY_LIMIT and len(self.copies) > 1:
                c, old, _, _ = self.copies.popleft()
                self.copy_bytes -= len(old)
                self.copies_lost[c] = self.copies_lost.get(c, 0) + len(old) // 32
            self.cond.notify_all()

    # -- readers --------------------------------------------------------------------
    def _has_data(self, cpus) -> bool:
        if self.returned_text and any(k == _key(cpus) for k, _ in self.returned_text):
            return True
        if any(cpus is None or c in cpus for c in self.returned):
            return True
        if self.tr.sink is not None:
            return any(cpus is None or c[0] in cpus for c in self.copies)
        for b in list(self.tr.buffers.values()):
            if (cpus is None or b.cpu in cpus) and b.seq != b.read:
                return True
        return False

    def take(self, cpus: set[int] | None) -> list[tuple]:
        """Consume what there is for ``cpus`` (None: every thread), as a list of
        ("items", cpu, (ts, item) pairs) (given back by a closed reader) and ("chunk", cpu,
        lost, first_seq, records, payloads) (taken from a buffer, or copied)."""
        out: list[tuple] = []
        with self.lock:
            for cpu in [c for c in self.returned if cpus is None or c in cpus]:
                out.append(("items", cpu, self.returned.pop(cpu)))
            if self.tr.sink is not None:
                keep: deque = deque()
                lost = {c: self.copies_lost.pop(c) for c in list(self.copies_lost)
                        if cpus is None or c in cpus}
                while self.copies:
                    item = self.copies.popleft()
                    cpu, chunk, first, pay = item
                    if cpus is not None and cpu not in cpus:
                        keep.append(item)
                        continue
                    self.copy_bytes -= len(chunk)
                    out.append(("chunk", cpu, lost.pop(cpu, 0), first, chunk, pay))
                for cpu, n in lost.items():
                    out.append(("items", cpu, [(-1, LostEvents(cpu, n))]))
                self.copies = keep
                return out
            # The instance's lock keeps a buffer from being resized or shrunk (its
            # thread ended) while it is copied.
            with self.tr.lock:
                bufs = [b for b in self.tr.buffers.values() if cpus is None or b.cpu in cpus]
                taken = [(b.cpu, b.take()) for b in bufs if b.seq != b.read]
        for cpu, (lost, first, chunk, pay) in taken:
            if lost or chunk:
                out.append(("chunk", cpu, lost, first, chunk, pay))
        return out

    def give_back(self, items: dict[int, list]) -> None:
        """A closing reader's consumed, unshown items: the next read shows them first."""
        if not items:
            return
        with self.lock:
            for cpu, its in items.items():
                self.returned[cpu] = its + self.returned.get(cpu, [])
            self.cond.notify_all()

    def give_back_text(self, cpus, text: str) -> None:
        with self.lock:
            self.returned_text.append((_key(cpus), text))
            self.cond.notify_all()

    def take_text(self, cpus) -> str:
        """Text given back by a closed reader with the same thread selection."""
        if not self.returned_text:
            return ""
        with self.lock:
            k = _key(cpus)
            mine = [t for c, t in self.returned_text if c == k]
            self.returned_text = [(c, t) for c, t in self.returned_text if c != k]
        return "".join(mine)

    def wait(self, timeout: float, cpus) -> None:
        with self.lock:
            if not self._has_data(cpus):
                self.cond.wait(timeout)

    def wake(self) -> None:
        with self.lock:
            self.cond.notify_all()


def _key(cpus) -> frozenset | None:
    return frozenset(cpus) if cpus is not None else None


_pipes_lock = threading.Lock()


def trace_pipe_of(tr) -> TracePipe:
    """The instance's TracePipe (made on first use)."""
    pipe = tr.trace_pipe
    if pipe is None:
        with _pipes_lock:
            pipe = tr.trace_pipe
            if pipe is None:
                pipe = tr.trace_pipe = TracePipe(tr)
    return pipe


class PipeReader:
    """One open ``trace_pipe``: ``read(timeout)`` blocks until there is something to
    show (or ``timeout`` seconds pass: then ""), consumes it and returns its text;
    ``timeout=None`` waits for ever.  Other readers and the buffers' writers are not
    held up while it waits.  ``read(timeout, size)`` returns at most ``size``
    characters, whole lines where it can; the rest comes with the next read.

    cpus   the threads (their small index, the CPU column) this reader shows; None:
           every thread (``per_thread/<tid>/trace_pipe`` opens with one)
    """

    POLL = 0.05

    def __init__(self, fs, path: str = "trace_pipe", *, cpus: Iterable[int] | None = None,
                 grace_ns: int = 0) -> None:
        self.fs = fs
        self.path = path
        self.cpus = set(cpus) if cpus is not None else None
        self.closed = False
        self.pipe = trace_pipe_of(fs.tr)
        self.grace_ns = grace_ns
        self._key: tuple | None = None
        self._printer: PipeRenderer | None = None
        self._left = ""
        self._lock = threading.Lock()
        with self.pipe.lock:
            self.pipe.readers += 1
        q = fs.tr.sink
        fd = getattr(q, "notify_fd", -1)
        if fd >= 0:
            # a recording's sink thread: start flushing the buffers for this reader
            try:
                os.write(fd, b"c")
            except OSError:
                pass

    def _renderer(self) -> PipeRenderer:
        """The printer for the current tracer and options (remade, keeping what it
        had not printed, when they change, as the kernel re-copies the tracer)."""
        tr = self.fs.tr
        tracer = tr.tracer.name if tr.tracer is not None else "nop"
        opts = {n: tr.options[n] for n in _TEXT_OPTIONS if n in tr.options}
        key = (tracer, tuple(sorted(opts.items())))
        if key != self._key:
            old = self._printer
            self._printer = PipeRenderer(tracer, opts, grace_ns=self.grace_ns,
                                         nr_cpus=nr_cpus_of(list(tr.buffers)))
            self._key = key
            if old is not None:
                for cpu, pairs in old.take_back().items():
                    self._printer.feed_pairs(cpu, pairs)
        assert self._printer is not None    # made with the first key
        return self._printer

    def _read_once(self) -> str:
        pr = self._renderer()
        for got in self.pipe.take(self.cpus):
            if got[0] == "items":
                pr.feed_pairs(got[1], got[2])
            else:
                _, cpu, lost, first, chunk, pay = got
                pr.feed_chunk(cpu, first, chunk, pay, name_of, thread_info, lost)
        lines = pr.lines(now=time.monotonic_ns())
        return self.pipe.take_text(self.cpus) + "".join(line + "\n" for line in lines)

    def read(self, timeout: float | None = None, size: int | None = None) -> str:
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not self.closed:
                if not self._left:
                    self._left = self._read_once()
                if self._left:
                    return self._cut(size)
                if end is not None:
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    self.pipe.wait(min(self.POLL, left), self.cpus)
                else:
                    self.pipe.wait(self.POLL, self.cpus)
        return ""

    def _cut(self, size: int | None) -> str:
        text = self._left
        if size is None or len(text) <= size:
            self._left = ""
            return text
        cut = text.rfind("\n", 0, size) + 1 or max(1, size)
        self._left = text[cut:]
        return text[:cut]

    def close(self) -> None:
        """Done: what this reader consumed and did not return goes back to the pipe."""
        if self.closed:
            return
        self.closed = True
        self.pipe.wake()
        with self._lock:
            back = self._printer.take_back() if self._printer is not None else {}
            # Text already made (the rest of a sized read) cannot be unprinted: it
            # is kept as the next reader's first lines.
            text, self._left = self._left, ""
        self.pipe.give_back(back)
        if text:
            self.pipe.give_back_text(self.cpus, text)
        with self.pipe.lock:
            self.pipe.readers -= 1

    def __enter__(self) -> "PipeReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InstancePipe(PipeReader):
    """An open trace_pipe that holds its instance (trace_array_get/put): what
    Tracefs.open_pipe hands out."""

    def close(self) -> None:
        if not self.closed:
            super().close()
            self.fs.trace_array_put()


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
