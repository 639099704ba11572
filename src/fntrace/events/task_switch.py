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
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

from ..core.fetch import frame_var
from ..fprobe import Fprobe
from .late_probe import LateProbe, note

__all__ = ["EVENT", "TaskTracker"]

EVENT = "asyncio:task_switch"


class TaskTracker:
    """The task-switch events of one instance (``tr``): ``start()``, ``stop()``;
    ``switches`` counts the events written."""

    def __init__(self, tr) -> None:
        self.tr = tr
        self.probe = LateProbe(Fprobe(entry_handler=self._entry), "asyncio.events",
                               ("Handle._run",))
        self.local = threading.local()
        self.switches = 0
        self._task_types: tuple = ()
        self._get_name: Callable[[object], object] | None = None

    def start(self) -> None:
        self.probe.start()

    def stop(self) -> None:
        self.probe.stop()

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
        # _get_name is set whenever a Task type is known, which a task here implies
        text = "next=-" if task is None else f"next={self._get_name(task)} id={key:x}"  # type: ignore[misc]
        if note(tr, EVENT, text):
            loc.key = key
            self.switches += 1


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
