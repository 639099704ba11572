"""Hand-off events: work made on one thread of control and run on another.

A reader that sees both ends joins them (the Perfetto export draws a flow from one to
the other, as it does for sched_wakeup_new and a thread's start)::

    asyncio:task_create   name, id     a Task was made: BaseEventLoop.create_task
                                       returned it (asyncio.create_task, TaskGroup,
                                       asyncio.run all go through it), on the thread
                                       that made it; ``id`` as asyncio:task_switch
                                       writes it, so the Task's first step is found
    futures:submit        fn, id       a callable handed to a ThreadPoolExecutor (its
                                       work item made, inside submit()), on the
                                       submitting thread
    futures:run           fn, id       a worker thread starts it (the work item's
                                       run()); ``id`` is the work item's

    task_create: name=Task-2 id=7f3a1c2e5b40
    submit: fn=app.fetch id=7f3a1c2e6d00
    run: fn=app.fetch id=7f3a1c2e6d00

Each is an fprobe on the library's own function (events/late_probe.py: probed once the
module is imported), registered while the event is enabled and gone when it is not: a
disabled event costs nothing.  The handlers read the call's frame and the objects'
C-level attributes only (no program code runs).  A work item's id is its address: one
freed may be reused by a later one, which a reader meets after the first has run.
Executors of other processes (ProcessPoolExecutor) hand their work over in pickles and
are not followed; an event loop written in C (uvloop) makes its Tasks where no probe
sees them.
"""
from __future__ import annotations

import functools
import sys
from types import MethodType
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

from ..core.fetch import Fault, frame_var, static_getattr, value_repr
from ..fprobe import Fprobe
from .core import EventCall
from .late_probe import LateProbe
from .static_emit import emit, event_call

__all__ = ["handoff_calls"]


def _var(frame, name: str):
    try:
        return frame_var(frame, name)
    except LookupError:             # (Fault is one)
        return None


def _attr(obj, name: str):
    try:
        return static_getattr(obj, name)
    except Fault:
        return None


def _hex_id(obj) -> str:
    # (asyncio:task_switch's ``id=``: the reader matches the text)
    return f"{id(obj):x}"


def _callable_name(fn) -> str:
    """``module.qualname`` of a function, a bound method's or a partial's function;
    the value's text for anything else."""
    for _ in range(8):
        t = type(fn)
        try:
            if t is MethodType:
                fn = static_getattr(fn, "__func__")
            elif t is functools.partial:
                fn = static_getattr(fn, "func")
            else:
                break
        except Fault:
            break
    try:
        mod, qn = static_getattr(fn, "__module__"), static_getattr(fn, "__qualname__")
    except Fault:
        mod = qn = None
    if type(mod) is str and type(qn) is str:
        return f"{mod}.{qn}"
    return value_repr(fn)


class _Probed:
    """An event written by an fprobe on library functions, probed while enabled."""

    def __init__(self, calls: list[EventCall], fp: Fprobe, module: str,
                 qualnames: tuple[str, ...]) -> None:
        self.calls = calls
        self.fp, self.module, self.qualnames = fp, module, qualnames
        self.probe: LateProbe | None = None

    def hook(self, on: bool) -> None:
        if not on and any(c.files for c in self.calls):
            return
        if on and self.probe is None:
            self.probe = LateProbe(self.fp, self.module, self.qualnames)
            self.probe.start()
        elif not on and self.probe is not None:
            self.probe.stop()
            self.probe = None


# -- asyncio:task_create ---------------------------------------------------------------

class _TaskCreate:
    def __init__(self) -> None:
        self.call = event_call("asyncio", "task_create", {"name": "str", "id": "str"},
                               hook=self._hook)
        self.probed = _Probed([self.call], Fprobe(exit_handler=self._exit, name="task_create"),
                              "asyncio.base_events", ("BaseEventLoop.create_task",))
        self._types: tuple = ()
        self._get_name: Callable[[object], object] | None = None

    def _hook(self, on: bool) -> None:
        self.probed.hook(on)

    def _exit(self, fp, ip, ret_ip, fregs, data) -> None:
        if not self.call.files:
            return
        task = fregs.retval
        if not self._types:
            tasks = sys.modules.get("asyncio.tasks")
            base = getattr(tasks, "Task", None)
            if base is None:
                return
            # the base class's method: a Task subclass's own get_name is program code
            self._get_name = base.get_name
            self._types = tuple({base, getattr(tasks, "_PyTask", base)})
        if not isinstance(task, self._types):
            return
        name = self._get_name(task)  # type: ignore[misc]  # set with _types
        emit(self.call, {"name": name if type(name) is str else "<...>",
                         "id": _hex_id(task)}, None)


# -- futures:submit, futures:run -------------------------------------------------------

class _Futures:
    def __init__(self) -> None:
        fields = {"fn": "str", "id": "str"}
        self.submit = event_call("futures", "submit", fields, hook=self._hook)
        self.run = event_call("futures", "run", fields, hook=self._hook)
        self.probed = _Probed([self.submit, self.run],
                              Fprobe(entry_handler=self._entry, name="futures"),
                              "concurrent.futures.thread", ("_WorkItem.__init__",
                                                            "_WorkItem.run"))

    def _hook(self, on: bool) -> None:
        self.probed.hook(on)

    def _entry(self, fp, ip, ret_ip, fregs, data) -> None:
        call = self.run if ip.name.endswith(".run") else self.submit
        if not call.files:
            return
        frame = fregs.frame
        item = _var(frame, "self")
        if call is self.run:
            fn = _attr(item, "fn")
            if fn is None:
                fn = _attr(item, "task")            # 3.14: (fn, args, kwargs)
        else:
            fn = _var(frame, "fn")
            if fn is None:
                fn = _var(frame, "task")
        if type(fn) is tuple and fn:
            fn = fn[0]
        emit(call, {"fn": _callable_name(fn), "id": _hex_id(item)}, None)


def handoff_calls() -> list[EventCall]:
    """The hand-off events' EventCalls (new ones each call: register once)."""
    t, f = _TaskCreate(), _Futures()
    return [t.call, f.submit, f.run]


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
