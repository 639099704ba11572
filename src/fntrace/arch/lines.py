"""Line hooks (3.12+): sys.monitoring LINE events on the probed code objects only.

A line probe (events/line_probe.py, ``p SYM+N``) asks for a handler to run each time
a line of one code object is reached.  Only that code object gets local LINE events
(``set_local_events``); every other function runs as before, with no event at all.
The LINE callback returns ``sys.monitoring.DISABLE`` for a line nobody probes, so the
other lines of the probed function cost CPython's own dispatch once per location,
then nothing.

CPython's DISABLE turns the location off for the tool until ``restart_events()``, and
that state outlives the local events being removed and set again; so adding a probe to
a code object that had LINE events before restarts the events (every tool's
disabled locations fire once more and are disabled again on their next hit).

The tool id.  One id carries all of fntrace (arch/monitoring.py).  It is taken while
either the back end patches sites or some line is hooked: ``hold_tool(who)`` /
``release_tool(who)``; the back end keeps the LINE bit of a code object it patches or
unpatches (``line_events(code)``).
"""
from __future__ import annotations

import sys
import threading

from .._env import fork_safe
from ..core.fetch import caller_frame as _getframe
from ..errors import BusyError
from .tool import TOOL_ID, TOOL_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:                       # typing is costly to import; only checkers need this
    from collections.abc import Callable
    from types import CodeType, FrameType
    from typing import Any

    # a line probe's handler: handler(frame, line)
    _LineHandler = Callable[[FrameType, int], object]

__all__ = ["hold_tool", "release_tool", "line_events", "add_line_hook", "remove_line_hook",
           "hooked_lines", "kill"]

_lock = fork_safe(threading.RLock())    # type: ignore[no-untyped-call]  # _env is not annotated
_holders: set[str] = set()
_taken_here = False     # hold_tool took the id from CPython (else another part of fntrace did)
# id(code) -> {line: (handler, ...)}; replaced, never mutated in place (the callback
# reads it without the lock)
_by_code: dict[int, dict[int, tuple[_LineHandler, ...]]] = {}
_codes: dict[int, object] = {}          # id(code) -> code: kept alive while hooked
_had_line: set[int] = set()             # codes that had LINE events (DISABLE may linger)

# sys.monitoring exists from 3.12 on: this module is imported on 3.11 too (never run
# there), so its uses carry an ignore for the checker's 3.11 run, which 3.12+ does not
# need (unused-ignore).


def hold_tool(who: str) -> None:
    """Take fntrace's tool id for ``who`` (the first holder takes it from CPython)."""
    global _taken_here
    with _lock:
        if who in _holders:
            return
        if not _holders:
            mon = sys.monitoring  # type: ignore[attr-defined, unused-ignore]  # 3.12+
            holder = mon.get_tool(TOOL_ID)
            if holder is None:
                mon.use_tool_id(TOOL_ID, TOOL_NAME)
                _taken_here = True
            elif holder != TOOL_NAME:
                raise BusyError(f"sys.monitoring tool id {TOOL_ID} is already used by {holder!r}")
            else:
                _taken_here = False     # fntrace's already: whoever took it frees it
        _holders.add(who)


def release_tool(who: str) -> None:
    """``who`` no longer needs the tool id; the last holder gives it back."""
    with _lock:
        if who not in _holders:
            return
        _holders.discard(who)
        if not _holders and _taken_here:
            sys.monitoring.free_tool_id(TOOL_ID)  # type: ignore[attr-defined, unused-ignore]  # 3.12+


def line_events(code: CodeType) -> int:
    """The LINE bit to keep in ``code``'s local events (0 if no line of it is hooked)."""
    if id(code) in _by_code:
        return sys.monitoring.events.LINE  # type: ignore[attr-defined, no-any-return, unused-ignore]  # 3.12+
    return 0


def hooked_lines(code: CodeType) -> list[int]:
    return sorted(_by_code.get(id(code), {}))


def _on_line(code: CodeType, line: int) -> object:
    lines = _by_code.get(id(code))
    if lines is None:
        return _DISABLE
    hs = lines.get(line)
    if hs is None:
        return _DISABLE
    frame = _getframe(1)
    for h in hs:
        h(frame, line)
    return None


_DISABLE = getattr(getattr(sys, "monitoring", None), "DISABLE", None)


def kill() -> None:
    """ftrace_kill: no line handler runs from now on (the LINE callback goes; the local
    events stay on the code objects and find no callback)."""
    with _lock:
        if _by_code:
            mon = sys.monitoring  # type: ignore[attr-defined, unused-ignore]  # 3.12+
            mon.register_callback(TOOL_ID, mon.events.LINE, None)
            _by_code.clear()
            _codes.clear()


# code and handler: a CodeType and a _LineHandler; Any while events/line_probe.py, which
# passes a record's optional code and an untyped wrapper, does not say so
def add_line_hook(code: Any, line: int, handler: Any) -> None:
    """Run ``handler(frame, line)`` each time ``line`` of ``code`` is reached."""
    mon = sys.monitoring  # type: ignore[attr-defined, unused-ignore]  # 3.12+
    LINE = mon.events.LINE
    with _lock:
        key = id(code)
        first = not _by_code
        if first:
            hold_tool("lines")
            mon.register_callback(TOOL_ID, LINE, _on_line)
        old = _by_code.get(key)
        new = dict(old or {})
        new[line] = new.get(line, ()) + (handler,)
        _by_code[key] = new
        _codes[key] = code
        if old is None:
            mon.set_local_events(TOOL_ID, code, mon.get_local_events(TOOL_ID, code) | LINE)
        if key in _had_line:
            # lines of it were given DISABLE by an earlier probe: that outlives it
            mon.restart_events()
        _had_line.add(key)


def remove_line_hook(code: Any, line: int, handler: Any) -> None:
    mon = sys.monitoring  # type: ignore[attr-defined, unused-ignore]  # 3.12+
    LINE = mon.events.LINE
    with _lock:
        key = id(code)
        old = _by_code.get(key)
        if old is None or line not in old:
            return
        new = dict(old)
        hs = tuple(h for h in new[line] if h is not handler)
        if hs:
            new[line] = hs
        else:
            del new[line]
        if new:
            _by_code[key] = new
            return
        del _by_code[key]
        _codes.pop(key, None)
        try:
            mon.set_local_events(TOOL_ID, code, mon.get_local_events(TOOL_ID, code) & ~LINE)
        except ValueError:
            pass
        if not _by_code:
            mon.register_callback(TOOL_ID, LINE, None)
            release_tool("lines")


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
