"""The trace file's writer thread: ring buffers hand it chunks, it writes blocks.

Like trace-cmd record, full per-thread buffers are handed over as they fill, so a long
run keeps constant memory and loses nothing; the rest is written at the end.  The
writing is done by a thread of its own (trace-cmd's reader processes, here a thread):

    traced threads                         the writer thread (FileSink)
    ring buffer full ── handoff (C) ──>   ChunkQueue ──> SYMS/THRD, CHNK blocks ──> file
                        + one byte ─────>  pipe: c (a chunk), f (finish), 1..64 (a fatal
                                                signal: cli/guard.py)

so the write-out never runs on a traced thread's stack (a thread at its recursion limit,
or one a signal interrupts, loses nothing) and a failed write is counted as lost and
shown, never raised into the program.  While something reads as it goes (``live``'s
printer in place of the file; an open ``trace_pipe``, which gets a copy of each chunk)
the writer thread also flushes every buffer each TICK, so an idle thread's events arrive
too.  Function names go into the file's symbol table once, before the first chunk that
refers to them.  No writer runs while the process forks (the at-fork hooks below).
"""
from __future__ import annotations

import _thread
import os
import select
import sys
import threading
import time
from collections import deque
from array import array
from itertools import repeat, takewhile

from ..core import task
from ..core.records import record_table
from ..core.task import thread_info
from ..record_format import RECORD_SIZE
from ..ring_buffer import PAYLOAD_COST, ChunkQueue
# typing is not imported at run time (the recorder's import cost); annotations are strings
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .writer import TraceFileWriter

__all__ = ["FileSink", "TICK", "PENDING_MIN", "BACKLOG_SAMPLES", "wrapped_fork_before", "wrapped_fork_after"]

# Bytes handed over and not written yet above which a traced thread waits for the
# writer: two full buffers, so memory stays flat however fast the program writes.
PENDING_MIN = 4 << 20

# The writer's backlog over time (STAT's "backlog": readers draw it, the Perfetto
# export as a "buffer fill" counter): one sample per chunk taken off the queue, of the
# bytes handed over and not yet written; past BACKLOG_SAMPLES, pairs of neighbours
# are merged into their larger one, so a run of any length keeps a few KB of them.
# Chunks smaller than BACKLOG_CHUNK (the smallest buffer's, -b 4) taken with others
# share their batch's sample: a thread's last few records, which a program of many
# short threads hands over for each, move the counter by less than a thousandth of
# the writer's limit.
BACKLOG_SAMPLES = 4096
BACKLOG_CHUNK = 4 << 10
# How many bytes of records the writer thread takes off the queue at a time (_drain).
DRAIN_BATCH = 256 << 10

# Seconds between flushes of the buffers while something reads as it goes (fntrace
# live, an open trace_pipe): how late an idle thread's events can be.
TICK = 0.025


# Bytes on the writer's pipe besides signal numbers (1..64).
_CHUNK, _FINISH, _PAUSE = ord("c"), ord("f"), ord("p")
_FINISH_B, _PAUSE_B = bytes((_FINISH,)), bytes((_PAUSE,))
_NOT_SIGNALS = bytes([0, *range(65, 256)])     # a round's bytes that are not signals
# How long a fork waits for the writer thread to step aside (it is between two writes
# within microseconds unless a write blocks: a full pipe to a slow reader).
_PAUSE_WAIT = 2.0


def _write_all(fd: int, data: bytes) -> None:
    """One byte to the writer's non-blocking pipe, waiting while it is full."""
    deadline = time.monotonic() + _PAUSE_WAIT
    while True:
        try:
            os.write(fd, data)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.001)


# Every writer of this process, until it closes: none runs while the process forks
# (FileSink.pause).  (A dict, not a WeakSet: the fork hooks run on the program's
# thread, and a WeakSet's iteration is Python code that would be traced there.)
_live_sinks: dict[int, "FileSink"] = {}


# Threads may fork at the same time (CPython's test_reinit_tls_after_fork): the writers
# stay away until the last of them has forked.  The lock is held only while the writers
# are being stopped or started, never across a fork (a child gets a new one).
_pause_lock = _thread.allocate_lock()
_paused = [0]


def _pause_writers() -> None:
    with _pause_lock:
        _paused[0] += 1
        if _paused[0] == 1:
            for sink in list(_live_sinks.values()):
                sink.pause()


def _resume_writers() -> None:
    with _pause_lock:
        if _paused[0] > 0:
            _paused[0] -= 1
        if _paused[0] == 0:
            for sink in list(_live_sinks.values()):
                sink.resume()


def _after_fork_in_child() -> None:
    global _pause_lock
    _pause_lock = _thread.allocate_lock()
    _paused[0] = 0
    _wrapped_forks.clear()


# Threads inside os.fork() wrapped by the guard (cli/guard.py, wrap_fork): there the
# writers come back once fork() has returned, after CPython's count of threads for its
# "multi-threaded fork()" warning, which 3.13 makes after the at-fork hooks.  A fork
# that does not go through the wrapper (a C extension's) has them back in the hook.
_wrapped_forks: set[int] = set()


def wrapped_fork_before() -> None:
    """A thread enters os.fork() through the guard's wrapper (the writers stop in
    the at-fork hook, as for any fork)."""
    _wrapped_forks.add(_thread.get_ident())


def wrapped_fork_after() -> None:
    """fork() has returned in the parent, through the wrapper: the writers go on."""
    _wrapped_forks.discard(_thread.get_ident())
    _resume_writers()


def _after_fork_in_parent() -> None:
    if _thread.get_ident() not in _wrapped_forks:
        _resume_writers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_pause_writers, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


class FileSink:
    """The trace file's writer thread and the queue the ring buffers hand chunks to.

    Runs only fntrace's own code and C functions, so nothing it does is ever traced.
    The file belongs to the process that opened it: a child made by fork() inherits no
    writer thread (none runs while the process forks) and writes nothing to it (the
    file is unbuffered: nothing of it is left in memory for the child to flush either);
    a followed child makes a sink of its own (Recording.adopt_child).
    """

    def __init__(self, writer: TraceFileWriter, buffer_kb: int) -> None:
        self.writer = writer
        self.pid = os.getpid()
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.wfd, False)
        # (kept: the queue's is set to 0 when the recording ends)
        self.limit = max(PENDING_MIN, 2 * buffer_kb * 1024)
        self.queue = ChunkQueue(self.wfd, self.limit)
        self.next_ip = 1
        self.threads_written: set[int] = set()
        self._threads_seen = 0            # thread_info's slots looked at
        self.lost = 0                     # records in chunks that could not be written
        # the backlog's samples, time ns and bytes pending (BACKLOG_SAMPLES), as two
        # arrays: a sample is no new object (see "What the program counts" below)
        self._bl_time = array("q")
        self._bl_pending = array("q")
        self._batch: list[tuple[Any, ...]] = []     # the chunks of one drain (used again each time)
        self.error: str | None = None     # the first write error
        self.on_signal: Callable[[int], None] | None = None    # on_signal(signum): set by record()
        self.on_progress: Callable[..., None] | None = None   # called between two chunks written
        self._finish_stats: dict[str, Any] | None = None
        self._done = _thread.allocate_lock()
        self._done.acquire()
        self._stopped = False
        # set by record(): flush_buffers() hands every buffer's records over (False if
        # it could not now); array: the instance written, whose trace_pipe (once a
        # reader opened it) gets copies for its readers
        self.flush_buffers: Callable[[], bool] | None = None
        self.array: Any = None            # a TraceArray (a layer above the trace file)
        self._next_tick = 0
        self._poller = select.poll()
        self._poller.register(self.rfd, select.POLLIN)
        # poll(0)'s answer as a bool, its list made and dropped in C (_signalled)
        self._pipe_ready = map(bool, map(self._poller.poll, repeat(0)))
        self._timeouts: deque[float] = deque()
        self._stash = b""           # pipe bytes read during a drain, for the next round
        self._running = False
        self._native_id = self._last_native = 0
        self._exited = _thread.allocate_lock()
        # The thread's first round is done before the program runs: what it makes on
        # its way in must not appear among the program's objects (gc.get_objects()).
        self._first = _thread.allocate_lock()
        self._first.acquire()
        _live_sinks[id(self)] = self
        self._start()
        self._first.acquire(timeout=10)

    def mine(self) -> bool:
        return os.getpid() == self.pid

    # -- the writer thread ----------------------------------------------------------
    #
    # The program must not see this thread: not in threading.enumerate() (it is a
    # _thread thread), not in sys._current_frames() (CPython's test_threading counts
    # them in a forked child), not in fork()'s "process is multi-threaded" warning.
    # Its loop is a pipeline of C iterators, so while it waits it has no Python frame:
    #
    #   deque(takewhile(bool, map(_step, map(bool, map(poll, iter(timeouts.popleft, None))))), 0)
    #
    #     takewhile(bool, ..)   stops when _step returns False
    #     map(_step, ..)        one round of the loop
    #     map(bool, ..)         did the pipe say something (poll()'s list gone at once)
    #     map(poll, ..)         waits here, no Python frame held
    #     iter(popleft, None)   the next wait (ms; -1: for ever), which _step appends
    #
    # and around every os.fork() it is not there at all (pause/resume: the fork hooks
    # below): the parent's warning counts the process's threads, and a child must not
    # inherit a writer stopped halfway through a write with its locks held.
    def _start(self) -> None:
        self._running = True
        self._exited.acquire(blocking=False)
        self._timeouts.append(0)          # the first round: set up, then wait
        # (bool: poll()'s list is gone before the round; the program would count it)
        rounds = takewhile(bool, map(self._step, map(bool, map(
            self._poller.poll, iter(self._timeouts.popleft, None)))))
        _thread.start_new_thread(deque, (rounds, 0))

    # What the program counts.  Its gc.get_objects() sees every container of the
    # process, this thread's too (CPython's test_descr counts them before and after
    # ten calls).  So a round makes no container that outlives a moment: the pipe's
    # state is a bool (poll()'s list is gone before the round), the chunks come in a list kept for all
    # rounds, the backlog and the file's index are arrays, locks are taken without
    # `with` (its bound __exit__), nothing is looped over with an iterator object, and
    # every write - where the GIL goes to the program - happens with no such
    # temporary alive.  The chunks themselves and their payloads were untracked by
    # the hand-over (ring_buffer.c.h).  The program cannot see the rest: it gets the
    # GIL at a write, or after a switch interval (5 ms) that no step of a round lasts.
    def _step(self, ready: bool) -> bool:
        """One round of the loop: what the pipe said, done; False ends the thread."""
        if not self._native_id:
            task.fntrace_thread()
            self._native_id = threading.get_native_id()
            if self._first.locked():
                self._first.release()
        try:
            go = self._round(ready)
        except BaseException as e:      # fntrace's own failure: shown at the end
            if self.error is None:
                self.error = f"{type(e).__name__}: {e}"
            self.queue.closed = True   # nobody waits for a writer that has gone
            go = False
        if go:
            # (bytes a drain read off the pipe are the next round's: no waiting then)
            timeout = 0 if self._stash else self._interval()
            self._timeouts.append(-1 if timeout is None else timeout * 1000)
            return True
        # a native id is reused by later threads, which are the program's
        task.own_threads.discard(self._native_id)
        self._last_native, self._native_id = self._native_id, 0
        self._running = False
        self._exited.release()
        return False

    def _round(self, ready: bool) -> bool:
        data, self._stash = self._stash, b""
        if ready:
            try:
                more = os.read(self.rfd, 65536)     # all of it: a signal may be last
            except InterruptedError:
                more = None
            except OSError:
                more = b""
            if more is not None:
                if not more:
                    return False
                data += more
        finish = _FINISH_B in data
        # (a pause that timed out leaves its byte behind: only a pause still wanted
        # ends the thread)
        pause = _PAUSE_B in data and _paused[0] > 0
        signals = data.translate(None, _NOT_SIGNALS) if data else b""
        if signals and self.on_signal is not None:
            # tracing off first (on_signal), then everything is written: a drain
            # before would never end while the program fills the queue as fast as
            # it is written
            self.on_signal(signals[0])     # writes everything and ends the process
        if not finish and self._interval() is not None:
            now = time.monotonic_ns()
            if now >= self._next_tick:
                self._tick(now)
                return not pause
        self._drain(bounded=not finish)
        if finish:
            self._close()
            return False
        return not pause

    def _signalled(self) -> bool:
        """Has a fatal signal's number come down the pipe?  (Read now, between two
        chunks of a long drain, kept for the round: a backlog that takes seconds to
        print must not let the program run on for those seconds.)"""
        if not next(self._pipe_ready):
            return False
        try:
            more = os.read(self.rfd, 65536)
        except OSError:
            return False
        if not more:
            return False
        self._stash += more
        return bool(more.translate(None, _NOT_SIGNALS))     # (no generator: see above)

    def pause(self) -> None:
        """Before a fork: the writer thread ends (what is queued stays queued) and is
        gone from the process before this returns."""
        if not self._running or not self.mine() or self._stopped:
            return
        try:
            _write_all(self.wfd, bytes((_PAUSE,)))
        except OSError:
            return
        if not self._exited.acquire(timeout=_PAUSE_WAIT):
            return          # stuck in a write (a full pipe to a reader): let it be
        self._exited.release()
        task.wait_thread_gone(self._last_native, _PAUSE_WAIT)

    def resume(self) -> None:
        """After a fork, in the parent: the writer goes on."""
        if self._running or not self.mine() or self._stopped or self.queue.closed:
            return
        self._start()

    @property
    def pipe(self) -> Any:
        return None if self.array is None else self.array.trace_pipe

    def _interval(self) -> float | None:
        """How long the loop may sleep: for ever unless something reads as it goes
        (``fntrace live``'s printer, an open trace_pipe), which wants the buffers
        flushed every TICK seconds so that an idle thread's events reach it."""
        if getattr(self.writer, "streaming", False) or (
                self.pipe is not None and self.pipe.readers):
            return max(0.0, (self._next_tick - time.monotonic_ns()) / 1e9)
        return None

    def _tick(self, now: int) -> None:
        """Flush every buffer (not waiting: this thread is the one that would have
        to make room), take the chunks off, and tell the printer that every thread has
        been read up to ``now``."""
        self._next_tick = now + int(TICK * 1e9)
        flushed = self.flush_buffers() if self.flush_buffers is not None else False
        self._drain(bounded=True)
        tick = getattr(self.writer, "tick", None)
        if tick is not None and self.error is None:
            try:
                tick(now if flushed else None, time.monotonic_ns())
            except BaseException as e:    # the printer's own failure: shown at the end
                self.error = f"{type(e).__name__}: {e}"

    def _drain(self, bounded: bool = False) -> None:
        """Write the queued chunks; ``bounded``: only those queued now, so that the
        loop gets back to its pipe (a fatal signal waits there) however fast the
        program queues more.  Small chunks are taken off the queue a batch at a time
        (DRAIN_BATCH bytes of records: a big chunk is a batch alone), with one look
        at the tables (_sync_tables) for all of them."""
        q = self.queue
        batch = self._batch
        budget = len(q.items) if bounded else -1
        while budget:
            if bounded and self._signalled():
                return          # the round ends: the signal is seen now, not after
            if self.on_progress is not None:
                self.on_progress()
            self._backlog(q.pending)        # (before the take: the chunks are part of it)
            rest = q.take_some(DRAIN_BATCH, batch)
            n = len(batch)
            if not n:
                return
            try:
                self._write_batch(batch, n, rest)
            finally:
                batch.clear()
            if bounded:
                budget = max(0, budget - n)

    def _write_batch(self, batch: list[tuple[Any, ...]], n: int, rest: int) -> None:
        """The chunks taken (``rest``: what they counted in pending), written."""
        q = self.queue
        if self.error is not None:
            for i in range(n):
                self.lost += len(batch[i][1]) // RECORD_SIZE
            return
        pipe = self.pipe
        if pipe is not None and pipe.readers:
            # an open trace_pipe sees a copy: the file still gets every event
            for cpu, chunk, first_seq, payloads in batch:
                pipe.add_copy(cpu, chunk, first_seq, payloads)
        done = 0
        try:
            # (the tables once a batch: every chunk taken was handed over after
            # its thread and functions were in them)
            self._sync_tables()
            writer = self.writer
            for i in range(n):
                cpu, chunk, first_seq, payloads = batch[i]
                if done and len(chunk) >= BACKLOG_CHUNK:
                    # the backlog before each chunk, as if taken alone (the first's
                    # is above): what is queued now and the batch's chunks left
                    self._bl_time.append(time.monotonic_ns())
                    self._bl_pending.append(q.pending + rest)
                writer.write_chunk(cpu, chunk, first_seq, 0, payloads or None)
                rest -= len(chunk) + PAYLOAD_COST * len(payloads)
                done += 1
            while len(self._bl_time) > BACKLOG_SAMPLES:
                self._thin_backlog()
        except BaseException as e:    # a full disk, say: counted, shown at the end
            self.error = f"{type(e).__name__}: {e}"
            for i in range(done, n):
                self.lost += len(batch[i][1]) // RECORD_SIZE

    def _backlog(self, pending: int) -> None:
        bp = self._bl_pending
        if bp and bp[-1] == pending == 0:
            return                  # (an idle writer's rounds: nothing to draw)
        self._bl_time.append(time.monotonic_ns())
        bp.append(pending)
        if len(bp) > BACKLOG_SAMPLES:
            self._thin_backlog()

    def _thin_backlog(self) -> None:
        # each pair's larger sample, at its own time: peaks stay as they were (in
        # place: no new object)
        bt, bp = self._bl_time, self._bl_pending
        n = len(bp)
        j = 0
        for i in range(0, n, 2):
            k = i + 1 if i + 1 < n and bp[i + 1] > bp[i] else i
            bt[j] = bt[k]
            bp[j] = bp[k]
            j += 1
        del bt[j:]
        del bp[j:]

    @property
    def backlog(self) -> list[list[int]]:
        """The backlog's samples, [time ns, bytes pending] each."""
        return [[t, p] for t, p in zip(self._bl_time, self._bl_pending)]

    def _sync_tables(self) -> None:
        hi = record_table._next_ip
        if hi > self.next_ip:
            # (one call a symbol, no tuple or list of them: see "What the program counts")
            by_ip = record_table.by_ip
            writer = self.writer
            ip = self.next_ip
            while ip < hi:
                r = by_ip.get(ip)
                if r is None:
                    break           # still being made: the next chunk takes it
                writer.add_symbol(ip, r.name, r.filename, r.line)
                ip += 1
            self.next_ip = ip
        # Slots are numbered in the order threads come (task.thread_cpu: the next is
        # len(thread_info)): only the ones after those seen are new.  (Looking at all
        # of them for every chunk made a program of thousands of short threads, a
        # server's thread per request, quadratic.)
        cpu = self._threads_seen
        if cpu >= len(thread_info):
            return
        written = self.threads_written
        writer = self.writer
        try:
            while cpu < len(thread_info):
                info = thread_info.get(cpu)
                if info is None:
                    break               # (being made: the next chunk takes it)
                if cpu not in written:
                    writer.add_thread(cpu, info[0], info[1])
                    written.add(cpu)
                cpu += 1
        finally:
            self._threads_seen = cpu

    def _close(self) -> None:
        if self.on_progress is not None:
            # the queue is empty: a program thread that waited for room in it is back
            # in the program's code, where it can be stopped
            self.on_progress(settle=0.05)
        try:
            stats = self._finish_stats or {}
            stats["lost_in_writer"] = self.lost
            if self._bl_time:
                stats["backlog"] = {"limit": self.limit, "samples": self.backlog}
            if self.error is not None:
                stats["write_error"] = self.error
            if self.error is None:
                self._sync_tables()
            self.writer.close(stats)
        except BaseException as e:
            if self.error is None:
                self.error = f"{type(e).__name__}: {e}"
        finally:
            self.queue.closed = True
            _live_sinks.pop(id(self), None)
            for fd in (self.rfd, self.wfd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._done.release()

    # -- the other threads ------------------------------------------------------------
    def finish(self, stats: dict[str, Any]) -> None:
        """Write what is queued, then STAT and END, and close (from any thread but the
        writer's); returns when the file is complete."""
        if not self.mine() or self._stopped:
            return
        self._stopped = True
        self._finish_stats = stats
        os.set_blocking(self.wfd, True)
        os.write(self.wfd, bytes((_FINISH,)))
        while True:
            try:
                if self._done.acquire(timeout=1):
                    self._done.release()
                    return
            except KeyboardInterrupt:     # a second ^C must not leave the file open
                continue

    def finish_here(self, stats: dict[str, Any]) -> None:
        """The same, on the writer thread itself (a fatal signal).  The program's
        threads still run: each write gives them the GIL, and a busy one keeps it a
        switch interval (5 ms) before this thread gets it back — a shorter interval
        for the few moments the process has left."""
        try:
            sys.setswitchinterval(1e-4)
        except (ValueError, AttributeError):
            pass
        self._stopped = True
        self._finish_stats = stats
        self._drain()
        self._close()


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
