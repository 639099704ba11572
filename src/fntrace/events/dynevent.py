"""Dynamic events: the one registry of the events defined at run time, its lock, and the
dispatch of a ``dynamic_events`` command to the probe kind that parses it
(kernel/trace/trace_dynevent.c).

    f:GRP/EVENT SYM[%return] [FETCHARGS]     fprobe_event.py   (the default kind: it
    -:[GRP/]EVENT                                               parses removals and says
                                                                what an unknown letter is)
    p:/r:GRP/EVENT SYM[+LINE|FILE:LINE] ...  line_probe.py     (kprobe_events too)
    e:/t:GRP/EVENT SYSTEM.EVENT ...          eprobe.py

Each probe kind registers its letters with ``register_kind`` when its module loads;
the door that writes commands (tracefs) loads the kinds it offers.  The registry maps
(group, event) to the probe event, whatever its kind; every kind adds and removes its
events under ``lock``, so a definition and a removal never interleave.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from .._env import fork_safe
from ..errors import FntraceError
from .core import unregister_event_call
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["lock", "events", "register_kind", "create", "remove", "clear", "lines"]

lock = fork_safe(threading.RLock())
#: (group, event) -> the probe event of any kind (it has ``call`` and ``specs``)
events: dict[tuple[str, str], Any] = {}

_kinds: dict[str, Callable[[str], Any]] = {}
_default: list[Callable[[str], Any]] = []


def register_kind(letters: str, create: Callable[[str], Any], default: bool = False) -> None:
    """The commands starting with one of ``letters`` go to ``create(cmd)``, which makes
    (and registers) the event or raises a ProbeError; ``default``: the kind every other
    command goes to (it parses removals and refuses what no kind takes)."""
    for c in letters:
        _kinds[c] = create
    if default:
        _default[:] = [create]


def create(cmd: str) -> Any:
    """One dynamic_events command: the event made (None for a removal)."""
    word = cmd.lstrip()
    make = _kinds.get(word[:1]) or (_default[0] if _default else None)
    if make is None:
        raise FntraceError("no dynamic event kind is loaded", pos=0, command=cmd)
    return make(cmd)


def remove(group: str | None, event: str, cmd: str = "") -> None:
    """``-:[GROUP/]EVENT``: ENOENT when there is no such event, EBUSY while enabled."""
    with lock:
        key = next(((g, e) for (g, e) in events if e == event and (group is None or g == group)),
                   None)
        if key is None:
            err = FntraceError(f"no such event {group + '/' if group else ''}{event}",
                               pos=0, command=cmd)
            err.errno = 2   # ENOENT
            raise err
        unregister_event_call(events[key].call)       # EBUSY while enabled
        del events[key]


def clear(which: Callable[[Any], bool] | None = None) -> None:
    """Remove every event (``which``: those it accepts), none if one of them is in use
    (EBUSY), as an O_TRUNC write to dynamic_events or kprobe_events does."""
    with lock:
        keys = [k for k, ev in events.items() if which is None or which(ev)]
        busy = [events[k] for k in keys if events[k].call.files]
        if busy:
            err = FntraceError(f"event {busy[0].call.full_name} is in use")
            err.errno = 16
            raise err
        for k in keys:
            unregister_event_call(events[k].call)
            del events[k]


def lines(which: Callable[[Any], bool] | None = None) -> list[str]:
    """``cat dynamic_events``: each event's probes as commands (``which``: of those it
    accepts)."""
    with lock:
        return [sp.normalized() for ev in events.values() if which is None or which(ev)
                for sp in ev.specs]


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
