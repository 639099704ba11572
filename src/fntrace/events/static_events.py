"""Static events: the interpreter's own tracepoints (the kernel's TRACE_EVENTs).

Registered once, when the event table is first read (a lookup, a listing, a new
event's id: events/core.py add_event_source), like the kernel's built-in events; all off
by default; each under ``events/<system>/<event>/`` with enable, filter, trigger, format
and id, listed in ``available_events``, enabled with ``-e SYSTEM:EVENT`` or set_event
(globs too: ``-e 'audit:*'``).  One mechanism per module:

    audit:<name>        sys.addaudithook (events/audit_events.py)
    exceptions:raise, exceptions:handled, exceptions:unwind
                        sys.monitoring RAISE / EXCEPTION_HANDLED / PY_UNWIND on 3.12+,
                        sys.settrace on 3.11 (events/exception_events.py)
    gc:gc_start         generation                   gc.callbacks (here)
    gc:gc_end           generation collected uncollectable
    threads:thread_start   name, tid, parent             (here)
    threads:thread_exit    name, tid
    asyncio:task_create, futures:submit, futures:run
                        fprobes on asyncio's and concurrent.futures' own functions
                        (events/handoff_events.py)
    ftrace:print        ip, buf: trace_marker writes (here)

A disabled event costs nothing: no hook, callback or monitoring event is installed
until one of its events is enabled, and each is removed again when the last is
disabled — except the audit hook, which cannot be removed and then costs one dict test.

Each event writes a line as the kernel's do, ``name: field=value ...``:

    gc_start: generation=2
    gc_end: generation=2 collected=13 uncollectable=0
    raise: function=app.load type=ValueError message="bad header"
    thread_start: name=worker-1 tid=4711 parent=4700
    open: path='/etc/hosts' mode='r' flags=524288

int fields in decimal, str fields as they are, other values as core/fetch.py's
value_repr shows them (no program code runs).
"""
from __future__ import annotations

import gc
import sys
import threading

from ..core.fetch import static_getattr
from .audit_events import audit_calls
from .core import EventCall, _lock as _core_lock, event_calls, register_event_call
from .exception_events import exception_calls
from .handoff_events import handoff_calls
from .static_emit import emit, event_call as _call, print_fmt as _print_fmt, program_frame

__all__ = ["emit", "register_static_events", "marker_passes", "static_calls", "SYSTEMS"]

SYSTEMS = ("audit", "exceptions", "gc", "threads", "asyncio", "futures", "ftrace")


# -- gc:gc_start, gc:gc_end -------------------------------------------------------------

class _GcEvents:
    """One gc.callbacks entry while either gc event is enabled."""

    def __init__(self) -> None:
        self.start = _call("gc", "gc_start", {"generation": "int"}, hook=self._hook)
        self.end = _call("gc", "gc_end", {"generation": "int", "collected": "int",
                                          "uncollectable": "int"}, hook=self._hook)
        self.on = False

    def _hook(self, on: bool) -> None:
        if on == self.on or (not on and (self.start.files or self.end.files)):
            return
        if on:
            gc.callbacks.append(self._callback)
        else:
            try:
                gc.callbacks.remove(self._callback)
            except ValueError:
                pass
        self.on = on

    def _callback(self, phase: str, info: dict) -> None:
        try:
            call = self.start if phase == "start" else self.end
            if not call.files:
                return
            frame = sys._getframe(1)
            if frame is not None and program_frame(frame) is None:
                return          # a collection fntrace's own code set off
            if phase == "start":
                emit(call, {"generation": info.get("generation")}, frame)
            else:
                emit(call, {"generation": info.get("generation"),
                            "collected": info.get("collected"),
                            "uncollectable": info.get("uncollectable")}, frame)
        except BaseException:
            pass


# -- threads:thread_start, threads:thread_exit -------------------------------------------
#
# threading starts every Thread through one module-level name, _start_new_thread (3.11,
# 3.12) or _start_joinable_thread (3.13+), with the Thread's bound _bootstrap.  While
# either event is enabled that name is wrapped: the new thread runs a wrapper that writes
# thread_start, runs the bootstrap and writes thread_exit when it returns.  (So a thread
# started then has one more frame at its bottom, fntrace's; none while disabled.)
# Threads started with _thread.start_new_thread directly are not seen.

_START_NAMES = ("_start_joinable_thread", "_start_new_thread")


class _ThreadEvents:
    def __init__(self) -> None:
        fields = {"name": "str", "tid": "int"}
        # parent: the thread that started it (sched_process_fork's parent_pid), which
        # a reader joins to it (the Perfetto export's flow)
        self.start = _call("threads", "thread_start", {**fields, "parent": "int"},
                           hook=self._hook)
        self.exit = _call("threads", "thread_exit", fields, hook=self._hook)
        self.on = False
        self.name: str | None = None
        self.orig = None
        self.wrapper = None

    def _hook(self, on: bool) -> None:
        if not on and (self.start.files or self.exit.files):
            return
        if on == self.on:
            return
        if on:
            for name in _START_NAMES:
                orig = getattr(threading, name, None)
                if orig is not None:
                    self.name, self.orig = name, orig
                    self.wrapper = self._wrap(orig)
                    setattr(threading, name, self.wrapper)
                    break
        elif self.name is not None:
            if getattr(threading, self.name, None) is self.wrapper:
                setattr(threading, self.name, self.orig)
            # else wrapped again by someone since: ours stays, passing through
        self.on = on

    def _wrap(self, orig):
        events = self

        def start(function, *args, **kwargs):
            if events.on and (events.start.files or events.exit.files):
                function = events._run(function, threading.get_native_id())
            return orig(function, *args, **kwargs)
        start.__wrapped__ = orig
        return start

    def _run(self, function, parent: int):
        events = self

        # Named _bootstrap with the Thread as ``self``: core/task.py finds a starting
        # thread's name (its comm) on a _bootstrap frame before threading lists it.
        def _bootstrap(*args, **kwargs):
            self = getattr(function, "__self__", None)  # noqa: F841 (read by core/task.py)
            events._note(events.start, function, parent)
            try:
                return function(*args, **kwargs)
            finally:
                events._note(events.exit, function)
        return _bootstrap

    def _note(self, call: EventCall, function, parent: int | None = None) -> None:
        try:
            if not call.files:
                return
            t = getattr(function, "__self__", None)
            name = static_getattr(t, "_name") if isinstance(t, threading.Thread) else None
            if type(name) is not str:
                name = "<...>"
            fields = {"name": name, "tid": threading.get_native_id()}
            if parent is not None:
                fields["parent"] = parent
            emit(call, fields, None)
        except BaseException:
            pass


# -- ftrace:print --------------------------------------------------------------------------

def _print_call() -> EventCall:
    # the kernel's ftrace/print format: "%ps: %s", REC->ip, REC->buf
    return EventCall("ftrace", "print", {"ip": "int", "buf": "str"},
                     print_fmt='"%ps: %s", (void *)REC->ip, REC->buf')


def marker_passes(tr, text: str, frame=None) -> bool:
    """A trace_marker write of ``text`` in instance ``tr``: run the ftrace:print
    event's triggers, then its filter (False: the filter drops the marker).  The
    marker is written whether the event is enabled or not, as the kernel's is."""
    ef = tr.event_files.get(("ftrace", "print"))
    if ef is None or (not ef.triggers and ef.filter is None):
        return True
    values = {"ip": 0, "buf": text.rstrip("\n")}
    try:
        from ..core.task import thread_cpu, thread_info
        cpu = thread_cpu()
        pid, comm = thread_info.get(cpu, (0, ""))
        values.update(common_pid=pid, common_cpu=cpu, comm=comm)
        if ef.triggers:
            ef.run_triggers(values, frame)
        if ef.filter is not None:
            return bool(ef.filter(values))
    except Exception:
        return False
    return True


# -- registration ----------------------------------------------------------------------------

_registered: list[EventCall] = []


def static_calls() -> list[EventCall]:
    """Every static event, registered on first use."""
    register_static_events()
    return list(_registered)


def register_static_events() -> None:
    """Register the static events (idempotent).  Under the event table's own lock:
    it is also the table's source, run by the first read (tracefs/fs.py)."""
    if _registered:
        return
    with _core_lock:
        if _registered:
            return
        g = _GcEvents()
        t = _ThreadEvents()
        calls = (audit_calls() + exception_calls() + [g.start, g.end, t.start, t.exit]
                 + handoff_calls() + [_print_call()])
        for c in calls:
            if not c.print_fmt:
                c.print_fmt = _print_fmt(c.fields)
            if (c.system, c.name) not in event_calls:
                register_event_call(c)
            _registered.append(c)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
