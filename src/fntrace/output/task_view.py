"""Calls under the asyncio Task they ran in (events/task_switch.py writes the switches).

A thread running an event loop interleaves its Tasks' steps; each step starts with an
``asyncio:task_switch: next=NAME id=N`` event.  Reading a trace, the current Task of
each thread slot is the last switch read on it, so

    --task NAME          keeps the entries of the Tasks whose name matches the glob
                         NAME (repeatable): one Task's steps, one after another, its
                         coroutines' resumes under it instead of between the others'
    -O nofuncgraph-task  leaves the switch events out of the text (shown by default:
                         they say which Task the calls below them belong to)
    -O task-comm         the TASK of TASK-PID (function tracer) and of funcgraph-proc
                         is the asyncio Task's name instead of the thread's
"""
from __future__ import annotations

import fnmatch
from bisect import bisect_right
from collections.abc import Iterable, Iterator

from ..ring_buffer import TRACE_EVENT
from .entry import LostEvents, TraceEntry

__all__ = ["EVENT", "task_entries", "task_of_text", "tasks_as_threads", "SwitchPoints"]

EVENT = "asyncio:task_switch"


def task_of_text(text: str) -> str | None:
    """The Task name of a switch event's text (None: outside any Task)."""
    for word in text.split():
        if word.startswith("next="):
            name = word[5:]
            return None if name == "-" else name
    return None


def task_entries(entries: Iterable[TraceEntry | LostEvents], *, show: bool = True,
                 tasks: tuple[str, ...] = (), comm: bool = False
                 ) -> Iterator[TraceEntry | LostEvents]:
    """The entries, the switch events shown or not, only the ``tasks`` globs' Tasks'
    entries when given (LostEvents markers are always kept); ``comm``: an entry's
    TASK (the function tracer's TASK-PID, function_graph's funcgraph-proc) is the
    asyncio Task it ran in, where it ran in one."""
    current: dict[int, str | None] = {}
    keep: dict[int, bool] = {}
    for e in entries:
        if type(e) is not LostEvents and e.type == TRACE_EVENT and e.func == EVENT:
            name = task_of_text(e.text or "")
            current[e.cpu] = name
            ok = keep[e.cpu] = (not tasks or (name is not None and any(
                fnmatch.fnmatchcase(name, g) for g in tasks)))
            if show and ok:
                yield e
            continue
        if type(e) is not LostEvents:
            if tasks and not keep.get(e.cpu, False):
                continue
            if comm:
                name = current.get(e.cpu)
                if name is not None:
                    e.comm = name
        yield e


class SwitchPoints:
    """Per thread slot, what a switch event says from its time on (the OpenTelemetry
    span, the asyncio Task): ``add`` in time order, ``at(cpu, ts)`` the value then."""

    def __init__(self) -> None:
        self.points: dict[int, tuple[list[int], list]] = {}

    def add(self, cpu: int, ts: int, value) -> None:
        times, values = self.points.setdefault(cpu, ([], []))
        times.append(ts)
        values.append(value)

    def at(self, cpu: int, ts: int):
        p = self.points.get(cpu)
        if p is None:
            return None
        i = bisect_right(p[0], ts) - 1
        return p[1][i] if i >= 0 else None


def tasks_as_threads(source):
    """``source`` (a TraceSource) with each (thread, asyncio Task) as a thread of its
    own: a slot per pair, named after the Task (``fntrace tui --tasks``); what ran
    outside any Task keeps its thread's name.  The switch events themselves are left
    out (each slot is one Task)."""
    from .source import TraceSource

    class _TasksAsThreads(TraceSource):
        def __init__(self) -> None:
            super().__init__(source.tf, source.name)
            self.threads = {}           # made as the Tasks are met

        def record_blocks(self, *args, **kwargs) -> None:
            """None: the slots are made of the entries, which no walk of the file's
            blocks sees (TraceSource.record_blocks)."""
            return None

        def entries(self, cpu: int | None = None):
            slots: dict[tuple[int, str | None], int] = {}
            current: dict[int, str | None] = {}

            def slot(c: int) -> int:
                key = (c, current.get(c))
                n = slots.get(key)
                if n is None:
                    n = slots[key] = len(slots)
                return n
            for e in super().entries(cpu):
                if type(e) is LostEvents:
                    yield LostEvents(slot(e.cpu), e.lost)
                    continue
                if e.type == TRACE_EVENT and e.func == EVENT:
                    current[e.cpu] = task_of_text(e.text or "")
                    continue
                task = current.get(e.cpu)
                e.cpu = slot(e.cpu)
                if task is not None:
                    e.comm = task
                yield e

    return _TasksAsThreads()


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
