"""The trace array: one instance's buffers, tracer and settings (kernel/trace/trace.c).

A ``TraceArray`` owns a ring buffer per thread, the ``tracing_on`` switch, the current
tracer, and the ops whose hashes ``set_ftrace_filter``/``set_ftrace_notrace`` edit.
Threads get a small index the first time they write anything: it is the CPU column of
every output format and the key of their ring buffer.
"""
from __future__ import annotations

import itertools
import os
import threading
import weakref
from _thread import get_native_id as _get_native_id
# typing is not imported at run time (it is a fifth of fntrace's import cost);
# the annotations are strings (from __future__ import annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .tracers import Tracer

from ._env import fork_safe_attr
from .core.ops import FTRACE_OPS_FL, Ops
from .core import task
from .core.pid_list import ThreadFilter
from .core.task import thread_cpu, thread_info
from .ring_buffer import CLOCK_IN_NS, TRACE_CLOCKS, ChunkQueue, RingBuffer, trace_clock_now

__all__ = ["TraceArray", "thread_cpu", "thread_info", "DEFAULT_BUFFER_KB", "TRACE_CLOCKS"]

# The kernel's default per-CPU buffer (buffer_size_kb reads "1408").
DEFAULT_BUFFER_KB = 1408


_serials = itertools.count(1)
_object_setattr = object.__setattr__
_arrays: "weakref.WeakSet[TraceArray]" = weakref.WeakSet()


def _forget_own_thread() -> None:
    """The calling thread became fntrace's own (core/task.py fntrace_thread): the
    verdicts its earlier events cached are dropped, so its next event is ignored."""
    for tr in list(_arrays):
        d = getattr(tr.local, "__dict__", {})
        d.pop("buf", None)
        d.pop("ebuf", None)
    if _native is not None:
        _native.forget_cpu_buffer()


task.own_thread_hooks.append(_forget_own_thread)


def _after_fork_in_child() -> None:
    """A forked child's thread has a new native id: where a thread filter is set, its
    verdict is taken again."""
    for tr in list(_arrays):
        if tr.filter.active():
            tr.pids_changed()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# The function_graph options lane_plain sums up (TraceArray.__setattr__).
_LANE_OPTIONS = frozenset({"max_graph_depth", "tracing_thresh", "graph_args", "graph_retval",
                           "sleep_time"})


class _ThreadEnd:
    """Kept in a thread's local storage: freed with it when the thread ends, it tells
    the trace array (threading.local has no other thread-exit hook)."""
    __slots__ = ("tr", "cpu")

    def __init__(self, tr: "TraceArray", cpu: int) -> None:
        self.tr = weakref.ref(tr)
        self.cpu = cpu

    def __del__(self) -> None:
        tr = self.tr()
        if tr is None:
            # The array itself is being freed (its weakref dies first), on whatever
            # thread frees it: not a thread's end, which must not cost that thread
            # its cpu number.
            return
        try:
            cpu = self.cpu
            tr.thread_ended(cpu)
            info = thread_info.get(cpu)
            if info is not None and info[0] == _get_native_id():
                task.thread_ended()         # on the ending thread itself
        except Exception:
            pass


class TraceArray:
    """An instance: buffers, tracer, filters.

    The attributes the tracers read per event are slots: the native twin reads them.

    sink    optional ChunkQueue (ring_buffer.py): full buffers are handed to it
            (fntrace record) instead of overwriting
    """

    __slots__ = ("tracing_on", "local", "graph_fops", "graph_notrace_fops", "max_graph_depth",
                 "tracing_thresh", "graph_args", "graph_retval", "sleep_time", "serial",
                 "lane_plain", "__dict__", "__weakref__")
    # Set by the flight recorder only (flight.py), and read with __dict__.get: not a slot.
    snapshot_hook: Callable[[], None]

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _LANE_OPTIONS:
            # One slot the native function_graph tests on every call instead of these
            # five (function_graph.c.h graph_lane_enter): all of them off, sleep-time on.
            object.__setattr__(self, "lane_plain", not (
                getattr(self, "max_graph_depth", 0) or getattr(self, "tracing_thresh", 0)
                or getattr(self, "graph_args", False) or getattr(self, "graph_retval", False)
                or not getattr(self, "sleep_time", True)))

    def __init__(self, name: str = "", buffer_size_kb: int = DEFAULT_BUFFER_KB,
                 overwrite: bool = True, sink: ChunkQueue | None = None):
        self.name = name
        # Unique for the process: the native twin's per-thread cache of "this array's
        # buffer" tells arrays apart by it, not by address.
        self.serial = next(_serials)
        _arrays.add(self)
        self.buffer_size_kb = buffer_size_kb
        self.overwrite = overwrite
        self.sink = sink
        # its trace_pipe's shared state, made by the first reader (tracefs/trace_pipe.py)
        self.trace_pipe = None
        self.tracing_on = True
        # trace_clock: an index into TRACE_CLOCKS, copied into every buffer
        self.clock_id = 0
        self.buffers: dict[int, RingBuffer] = {}
        # Per thread: .buf, the buffer the function tracers write (None: the thread is
        # ignored, see cpu_buffer), .ebuf, the one events write, and .release, what
        # tells this array the thread ended (_ThreadEnd, put there with the thread's
        # buffer).  Replaced when a thread filter changes (pids_changed), so every
        # thread takes its verdict again; the ones replaced are kept (_kept_locals):
        # dropping one would announce the end of threads still running.  (One local,
        # not two: a thread's storage in each is made at its first event and freed at
        # its end, a cost each short-lived thread pays.)
        self.local = threading.local()
        self._kept_locals: list[threading.local] = []
        self.filter = ThreadFilter()
        # Reentrant: program code CPython runs while a thread holds it (a finalizer, a
        # pending call) may be traced and ask for that thread's buffer (thread_ended
        # drops such events instead: _ending)
        self.lock = threading.RLock()
        fork_safe_attr(self)    # new in a forked child: another thread may hold it
        self.pid = os.getpid()
        self.options: dict[str, bool] = {"print-parent": True, "irq-info": False}
        # The ops whose hashes set_ftrace_filter / set_ftrace_notrace edit; tracers
        # set its func and register it.
        self.ops = Ops(None, FTRACE_OPS_FL.PID | FTRACE_OPS_FL.TRACE_ARRAY, self,
                       name=f"{name or 'global'}_ops")
        # function_graph settings: set_graph_function / set_graph_notrace are kept as
        # the filter hashes of two ops that are never registered (so they share the
        # grammar, the :mod: cache and the module-load path), max_graph_depth,
        # tracing_thresh (ns), and what graph entries/returns record.
        self.graph_fops = Ops(None, 0, self, name="set_graph_function")
        self.graph_notrace_fops = Ops(None, 0, self, name="set_graph_notrace")
        self.max_graph_depth = 0
        self.tracing_thresh = 0
        self.graph_args = False
        self.graph_retval = False
        # options/sleep-time (the kernel's fgraph_sleep_time): False, a graph return
        # records as its calltime its return time less the thread's CPU time in the call
        self.sleep_time = True
        # the top level's function profiler (tracefs/trace_stat.py), which follows
        # sleep-time too
        self.profiler = None
        self.event_files: dict = {}          # (system, event) -> EventFile
        self.snapshot: list | None = None     # copies of the buffers (the snapshot file)
        self.tracer: Tracer | None = None       # (set_tracer below: never None after)
        # cpu -> (written, overrun, dropped) of buffers freed when their thread ended
        self.retired: dict[int, tuple[int, int, int]] = {}
        # cpu -> events dropped while that thread hands its buffer over (thread_ended)
        self._ending: dict[int, int] = {}
        from .tracers import nop
        self.set_tracer(nop.NopTracer())

    # -- buffers -------------------------------------------------------------------
    def thread_buffer(self) -> RingBuffer | None:
        """The calling thread's buffer, made on its first use (any writer: the thread
        filters are the callers'); None while the thread hands its buffer over (see
        ``_ending``)."""
        cpu = thread_cpu()
        ending = self._ending
        if ending and cpu in ending:
            ending[cpu] += 1
            return None
        # Only this thread makes the buffer of its slot: looked up without the lock.
        buf = self.buffers.get(cpu)
        if buf is None:
            with self.lock:
                buf = self.buffers.get(cpu)
                if buf is not None:
                    return buf
                buf = RingBuffer(cpu, self.buffer_size_kb, self.overwrite, self.sink,
                                 self.clock_id)
                self.buffers[cpu] = buf
            # Dropped with the thread's local storage when the thread ends.  Made with
            # the buffer: a slot's buffer is made on its own thread, and what forgets
            # the buffers forgets these too (forget_threads, after a fork).
            self.local.release = _ThreadEnd(self, cpu)
        return buf

    def cpu_buffer(self) -> RingBuffer | None:
        """The calling thread's buffer for the function tracers (slow path: a thread's
        first event, or the first after a thread filter changed), None if the thread is
        ignored (fntrace's own threads, set_ftrace_pid / set_ftrace_notrace_pid,
        tracing_cpumask): cached in tr.local.buf either way (ftrace_ignore_pid)."""
        if self._ending and thread_cpu() in self._ending:
            return self.thread_buffer()         # counted, not cached
        flt = self.filter
        # (no list and no mask: only fntrace's own threads are ignored, asked here
        # without the two calls ignore_function() takes)
        if (flt.ftrace.pids or flt.ftrace.comms or flt.ftrace_no.pids or flt.ftrace_no.comms
                or flt.cpumask is not None):
            ignored = flt.ignore_function()
        else:
            ignored = _get_native_id() in task.own_threads
        buf = None if ignored else self.thread_buffer()
        self.local.buf = buf
        return buf

    def event_buffer(self) -> RingBuffer | None:
        """The same for events (set_event_pid / set_event_notrace_pid: ignore_pid),
        cached in tr.local.ebuf."""
        if self._ending and thread_cpu() in self._ending:
            return self.thread_buffer()         # counted, not cached
        local = self.local
        buf = None if self.filter.ignore_event() else self.thread_buffer()
        local.ebuf = buf
        return buf

    def pids_changed(self) -> None:
        """A thread filter changed: every thread takes its verdict again at its next
        event (a new serial for the native twin's per-thread cache, a new local for the
        Python one)."""
        self._kept_locals.append(self.local)
        self.local = threading.local()
        self.serial = next(_serials)

    def forget_threads(self) -> None:
        """After fork, in the child that records on: the parent's buffers and threads
        are not this process's; every thread takes a new buffer at its next event.
        (The storage of the thread that forked is dropped here, which tells this
        array its end: thread_ended has no buffer of it to hand over.)"""
        self.buffers = {}
        self.retired = {}
        self._kept_locals = []
        self.local = threading.local()
        self.serial = next(_serials)

    def thread_ended(self, cpu: int) -> None:
        """A thread that wrote here has ended: memory must not grow with the number of
        threads that lived.  With a sink (fntrace record) its records are handed over
        and its buffer freed; otherwise the buffer shrinks to the records it holds,
        which stay readable until the trace is read or cleared."""
        if os.getpid() != self.pid:
            # A forked child drops the other threads' storage before its at-fork hooks
            # run, and inherits self.lock as it was: held, if another thread had it.
            # The buffers are the parent's to hand over; the child leaves them alone.
            return
        flt = self.filter
        if flt.function_fork or flt.event_fork:
            # ftrace_pid_follow_sched_process_exit: an ended thread leaves the lists (a
            # later thread may get its native id)
            native = thread_info.get(cpu, (None,))[0]
            if native is not None:
                flt.forget(native)
        # While the lock is held here, CPython may run program code on this thread
        # (a finalizer the flush's allocations trigger, a pending call): its events
        # must not ask for this thread's buffer under the same lock (a deadlock,
        # CPython's test_capi pending calls): they are dropped and counted.
        ending = self._ending
        ending[cpu] = 0
        try:
            with self.lock:
                buf = self.buffers.get(cpu)
                if buf is None:
                    return
                if self.sink is None:
                    buf.shrink()
                    return
                try:
                    buf.handoff(True, True)     # (the writer comes for it later)
                except Exception:
                    return      # kept: nothing is lost, the end of the run takes it
                del self.buffers[cpu]
                # Each thread's native cache holds its buffer by a borrowed pointer
                # (_native.c cpu_buffer), checked against the serial: a new serial
                # sends every thread back to tr.local once.  A thread still ending
                # runs the program's weakref callbacks and finalizers after this
                # (3.13: clear_locals), and they may be traced.
                # (past __setattr__, which only the function_graph options need: a
                # program of many short threads comes here for each)
                _object_setattr(self, "serial", next(_serials))
                self.retired[cpu] = (buf.seq + buf.dropped, buf.overrun, buf.dropped)
        finally:
            missed = ending.pop(cpu, 0)
            if missed:
                w, o, d = self.retired.get(cpu, (0, 0, 0))
                self.retired[cpu] = (w, o, d + missed)

    def set_buffer_size_kb(self, kb: int) -> None:
        with self.lock:
            self.buffer_size_kb = kb
            for b in self.buffers.values():
                b.resize(kb)

    def set_overwrite(self, on: bool) -> None:
        self.overwrite = on
        for b in self.buffers.values():
            b.overwrite = on

    # -- trace_clock ------------------------------------------------------------------
    @property
    def clock(self) -> str:
        return TRACE_CLOCKS[self.clock_id]

    @property
    def clock_in_ns(self) -> bool:
        """The clock counts nanoseconds (timestamps print as seconds.microseconds)."""
        return CLOCK_IN_NS[self.clock_id]

    def clock_now(self) -> int:
        """A reading of this instance's clock (the per_thread stats' "now ts")."""
        return trace_clock_now(self.clock_id)

    def set_clock(self, name: str) -> None:
        """tracing_set_clock(): every buffer reads the new clock from its next record
        on, and what they hold is cleared, the snapshot's too (timestamps of two clocks
        cannot be ordered against each other).  ValueError for an unknown name."""
        clock = TRACE_CLOCKS.index(name)
        with self.lock:
            self.clock_id = clock
            for b in self.buffers.values():
                b.clock = clock
                b.reset()
            if self.snapshot is not None:
                for b in self.snapshot:
                    b.clock = clock
                    b.reset()

    def clear(self) -> None:
        """``echo > trace``.  Under the lock a trace_pipe read takes the buffers with:
        a reset in the middle of a take would leave it marking records read that the
        reset already dropped."""
        with self.lock:
            for b in list(self.buffers.values()):
                b.reset()

    def flush(self) -> None:
        for b in list(self.buffers.values()):
            b.flush()

    def take_snapshot(self) -> None:
        """``echo 1 > snapshot`` / the snapshot trigger: keep a copy of every buffer (or,
        with a ``snapshot_hook``, the flight recorder's, call it: it writes them out)."""
        hook = self.__dict__.get("snapshot_hook")
        if hook is not None:
            hook()
            return
        with self.lock:
            snap = []
            for b in self.buffers.values():
                c = RingBuffer(b.cpu, 1, b.overwrite)
                c.nrec, c.data, c.payloads = b.nrec, bytearray(b.data), dict(b.payloads)
                c.seq, c.read, c.overrun, c.dropped = b.seq, b.read, b.overrun, b.dropped
                snap.append(c)
            self.snapshot = snap

    def event_file(self, call):
        """This instance's file for an event call (events/core.py makes it)."""
        from .events.core import event_file
        return event_file(self, call)

    def event_formats(self) -> dict[str, dict]:
        """The events this instance has files for, as a trace file keeps them: event
        name -> {"system", "fields" (name -> kind, in order), "print_fmt"}.  A reader
        splits an event's text into its fields with them (the kernel's events/*/format
        files, which trace-cmd saves with a trace for the same reason)."""
        out: dict[str, dict] = {}
        for ef in list(self.event_files.values()):
            call = ef.call
            out[call.name] = {"system": call.system, "fields": dict(call.fields),
                              "print_fmt": call.print_fmt}
        return out

    def entries(self) -> tuple[int, int]:
        """(entries in buffer, entries written) over every thread."""
        bufs = list(self.buffers.values())
        return sum(b.entries for b in bufs), sum(b.written for b in bufs)

    # -- tracer ------------------------------------------------------------------
    def set_tracer(self, tracer: Any) -> None:
        """``echo NAME > current_tracer``: stop the old tracer, clear the buffer, start."""
        old = self.tracer
        if old is not None:
            old.reset(self)
        self.clear()
        self.tracer = tracer
        tracer.init(self)


# The native twin's tracer callbacks read the slots above; the hot path learns their
# offsets from here rather than importing this module.
from . import _env  # noqa: E402

_native = _env.native()
if _env.native() is not None:
    _env.native().bind_trace_array(TraceArray)

from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
