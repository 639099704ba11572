"""asyncio:task_switch — which asyncio Task a thread runs, written when it changes.

The kernel writes sched:sched_switch when a CPU changes task, and function_graph shows
it as a banner between the two tasks' calls.  A Python thread running an event loop
changes task at each step of a Task: the loop runs every callback through
``asyncio.events.Handle._run``, and a Task's step (``__step``, ``__wakeup``) is a
callback whose ``__self__`` is the Task.  An fprobe on ``Handle._run`` (fntrace's own
entry hook: no frame added to the program's stack, none of its code run) reads the
callback, and when the Task differs from the thread's last one writes

    asyncio:task_switch: next=NAME id=N          (NAME: the Task's name, "-" outside any)

into the thread's buffer, before the calls of that step.  Readers place every call
under the Task it ran in (output/task_view.py: ``-O funcgraph-task``, ``--task NAME``).
Nothing is probed until the program imports asyncio.
"""
from __future__ import annotations

import sys
import threading
from time import monotonic_ns

from ..core.fetch import frame_var
from ..core.ops import sync_discovery
from ..core.records import record_table
from ..fprobe import Fprobe, register_fprobe_ips, unregister_fprobe
from ..ring_buffer import PAYLOAD_SEP, TRACE_EVENT

__all__ = ["EVENT", "TaskTracker"]

EVENT = "asyncio:task_switch"


class TaskTracker:
    """The task-switch events of one instance (``tr``): ``start()``, ``stop()``;
    ``switches`` counts the events written."""

    def __init__(self, tr) -> None:
        self.tr = tr
        self.fp = Fprobe(entry_handler=self._entry)
        self.local = threading.local()
        self.bound = False
        self.switches = 0
        self._task_types: tuple = ()
        self._get_name = None

    def start(self) -> None:
        events = sys.modules.get("asyncio.events")
        handle = getattr(events, "Handle", None)
        if handle is not None and record_table.lookup(handle._run) is not None:
            self._bind(handle._run)
            return
        # asyncio not imported yet: its records are made when its body starts (the
        # discovery trap, on for this module's name), and Handle._run probed then
        record_table.listeners.append(self._on_load)
        record_table.set_scope(self, lambda name: name == "asyncio.events")
        sync_discovery()

    def stop(self) -> None:
        self._unwatch()
        if self.bound:
            self.bound = False
            try:
                unregister_fprobe(self.fp)
            except Exception:
                pass

    def _unwatch(self) -> None:
        try:
            record_table.listeners.remove(self._on_load)
        except ValueError:
            return
        record_table.set_scope(self, False)
        sync_discovery()

    def _on_load(self, name: str, new) -> None:
        if self.bound or name != "asyncio.events":
            return
        for rec in new:
            if rec.name == "asyncio.events.Handle._run":
                self._bind(rec)
                self._unwatch()
                return

    def _bind(self, what) -> None:
        register_fprobe_ips(self.fp, [what])
        self.bound = True

    def _types(self) -> tuple:
        tasks = sys.modules.get("asyncio.tasks")
        task = getattr(tasks, "Task", None)
        if task is None:
            return ()
        # the base class's method: a Task subclass's own get_name is program code
        self._get_name = task.get_name
        self._task_types = tuple({task, getattr(tasks, "_PyTask", task)})
        return self._task_types

    def _entry(self, fp, ip, ret_ip, fregs, data) -> None:
        tr = self.tr
        if not tr.tracing_on:
            return
        cb = getattr(frame_var(fregs.frame, "self"), "_callback", None)
        task = getattr(cb, "__self__", None)
        if task is not None and not isinstance(task, self._task_types or self._types()):
            task = None
        key = id(task) if task is not None else 0
        loc = self.local
        if getattr(loc, "key", None) == key:
            return
        try:
            buf = tr.local.ebuf
        except AttributeError:
            buf = tr.event_buffer()
        if buf is None:
            return
        loc.key = key
        text = "next=-" if task is None else f"next={self._get_name(task)} id={key:x}"
        buf.write_payload(monotonic_ns(), TRACE_EVENT, 0, 0, 0, 0, EVENT + PAYLOAD_SEP + text)
        self.switches += 1


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
