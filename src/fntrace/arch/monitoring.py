"""sys.monitoring back end (3.12+): a site is patched by enabling local events on its
code object, so functions nobody traces run with no callback at all (PEP 669).

One tool id carries all of fntrace — every ops, instance and tracer multiplexes on it
through core/dispatch.py — and it is taken only while some site is patched.

The discovery trap.  While some ops traces every function, listing every function of
every loaded module up front would be most of a short run's cost, and most of those
functions never run.  Instead a global PY_START stays on: the first time a code object
that is not a site starts, ``_trap`` lists its module (the module-load path then patches
what the registered ops select, as for a module imported later) and the call goes on
as a traced one; a code object that is still not a site gets DISABLE, so CPython stops
calling for it.  CPython quirk: a location turned off by DISABLE stays off when local
events are set on it later (even with the global event off) until restart_events(),
so patching such a code object restarts the events.
"""
from __future__ import annotations

import sys
import weakref

from ..core import dispatch
from ..core.records import FTRACE_FL, DynFtrace, record_table
from ..errors import BusyError  # noqa: F401  (raised by lines.hold_tool now)
from . import lines as _lines
from .tool import TOOL_ID

TYPE_CHECKING = False
if TYPE_CHECKING:                       # typing is costly to import; only checkers need this
    from collections.abc import Callable
    from types import CodeType
    from typing import Any

__all__ = ["MonitoringBackend", "TOOL_ID"]

# sys.monitoring exists from 3.12 on: the module is imported on 3.11 too (never run
# there), so its uses carry an ignore for the checker's 3.11 run, which 3.12+ does not
# need (unused-ignore).

_RET = int(FTRACE_FL.RET)
_DIRECT_EN = int(FTRACE_FL.DIRECT_EN)


# Global events other parts of fntrace set on the same tool id, whether or not the back
# end runs (events/exception_events.py: RAISE, EXCEPTION_HANDLED, PY_UNWIND while its
# events are enabled): event bit -> callback.  The back end's global events are always
# OR-ed with them, and PY_UNWIND calls both users' callbacks when both want it.
extra_callbacks: dict[int, Callable[..., object]] = {}


def extra_mask() -> int:
    m = 0
    for ev in extra_callbacks:
        m |= ev
    return m


def both_callbacks(first: Callable[..., object] | None,
                   second: Callable[..., object] | None) -> Callable[..., object] | None:
    """One callback calling ``first`` then ``second`` (either may be None); ``first``'s
    result is returned."""
    if first is None or second is None:
        return first if second is None else second

    def both(*args: Any) -> object:
        r = first(*args)
        second(*args)
        return r
    return both


class MonitoringBackend:
    name = "monitoring"

    def __init__(self) -> None:
        self.active = False
        self.call_ops = True
        self._patched: dict[int, tuple[DynFtrace, CodeType]] = {}   # ip -> (rec, code patched)
        self._unwind = False
        self._want_unwind = False
        self._trap_on = False
        # given DISABLE by the trap: id(code) -> weakref (plain dict and weakref, not
        # WeakSet: the update path must not run library code that would be traced)
        self._trapped: dict[int, weakref.ref[CodeType]] = {}

    def _events(self, rec: DynFtrace) -> int:
        E = sys.monitoring.events  # type: ignore[attr-defined, unused-ignore]  # 3.12+
        if rec.flags & _DIRECT_EN:
            return 0            # only the direct trampoline: the stub calls it, no event
        ev: int = E.PY_START
        if rec.flags & _RET:
            ev |= E.PY_RETURN | E.PY_YIELD | E.PY_RESUME
        if dispatch.G.c_calls:
            # the C functions it calls (C_RETURN and C_RAISE come with CALL: they
            # cannot be set on their own)
            ev |= E.CALL
        return ev

    # -- C calls (--c-calls: dispatch.on_call) ------------------------------------------
    def _register_c_calls(self) -> None:
        mon = sys.monitoring  # type: ignore[attr-defined, unused-ignore]  # 3.12+
        E = mon.events
        reg = dispatch.as_registered
        mon.register_callback(TOOL_ID, E.CALL, reg(dispatch.on_call))
        mon.register_callback(TOOL_ID, E.C_RETURN, reg(dispatch.on_c_return))
        mon.register_callback(TOOL_ID, E.C_RAISE, reg(dispatch.on_c_raise))
        self._c_registered = True

    def set_c_calls(self, on: bool) -> None:
        """CALL on every patched site from now on (or off): their C calls are seen."""
        if not self.active:
            return
        if on and not getattr(self, "_c_registered", False):
            self._register_c_calls()
        for rec, code in list(self._patched.values()):
            sys.monitoring.set_local_events(  # type: ignore[attr-defined, unused-ignore]  # 3.12+
                TOOL_ID, code, self._events(rec) | _lines.line_events(code))

    def start(self, call_ops: bool = True) -> None:
        if self.active:
            return
        mon = sys.monitoring  # type: ignore[attr-defined, unused-ignore]  # 3.12+
        _lines.hold_tool("backend")      # shared with line probes (arch/lines.py)
        E = mon.events
        self.call_ops = call_ops
        reg = dispatch.as_registered
        mon.register_callback(TOOL_ID, E.PY_START,
                              reg(dispatch.on_py_start if call_ops
                                  else dispatch.on_py_start_global))
        on_return = reg(dispatch.on_py_return)
        mon.register_callback(TOOL_ID, E.PY_RETURN, on_return)
        mon.register_callback(TOOL_ID, E.PY_YIELD, on_return)
        mon.register_callback(TOOL_ID, E.PY_RESUME, reg(dispatch.on_py_resume))
        if dispatch.G.c_calls:
            self._register_c_calls()
        self.active = True
        if self._want_unwind:
            self.set_unwind(True)

    def set_unwind(self, on: bool) -> None:
        """PY_UNWIND is global-only (python/cpython#142186): graph users need it on
        everywhere, and the callback ignores frames that are not patched sites."""
        self._want_unwind = on
        if not self.active or on == self._unwind:
            return
        mon = sys.monitoring  # type: ignore[attr-defined, unused-ignore]  # 3.12+
        E = mon.events
        reg = dispatch.as_registered
        mon.register_callback(TOOL_ID, E.PY_UNWIND,
                              reg(both_callbacks(dispatch.on_py_unwind if on else None,
                                                 extra_callbacks.get(E.PY_UNWIND))))
        mon.register_callback(TOOL_ID, E.PY_THROW, reg(dispatch.on_py_throw if on else None))
        self._unwind = on
        self._set_global()

    def _set_global(self) -> None:
        E = sys.monitoring.events  # type: ignore[attr-defined, unused-ignore]  # 3.12+
        ev = (E.PY_UNWIND | E.PY_THROW) if self._unwind else 0
        if self._trap_on:
            ev |= E.PY_START
        sys.monitoring.set_events(  # type: ignore[attr-defined, unused-ignore]  # 3.12+
            TOOL_ID, ev | extra_mask())

    # -- the discovery trap ---------------------------------------------------------
    def set_trap(self, on: bool) -> None:
        """Discover functions as they first run (see the module docstring)."""
        if on == self._trap_on or not self.active:
            return
        self._trap_on = on
        dispatch.G.trap = self._trap if on else None
        self._set_global()

    def _trap(self, code: CodeType, glb: dict[str, Any]) -> bool:
        """A code object that is not a site starts: list its module if that was not
        done yet; True if it is a site now."""
        record_table.discover(code, glb)
        if id(code) in dispatch.sites:
            return True
        name = glb.get("__name__")
        if type(name) is str and name.partition(".")[0] == "fntrace":
            # fntrace's own (the writer thread's loop): never a site, and no weakref
            # made while the program runs (its gc.get_objects() would count it)
            return False
        try:
            self._trapped[id(code)] = weakref.ref(code)
        except TypeError:
            pass
        return False

    def stop(self) -> None:
        if not self.active:
            return
        mon = sys.monitoring  # type: ignore[attr-defined, unused-ignore]  # 3.12+
        for rec, code in list(self._patched.values()):
            self._unpatch(code)
        self._patched.clear()
        self._trap_on = False
        dispatch.G.trap = None
        mon.set_events(TOOL_ID, extra_mask())
        E = mon.events
        # Only where another part of fntrace still wants the event: register_callback
        # raises an audit event ("sys.monitoring.register_callback"), and the program's
        # audit hooks would see fntrace leave (at the end of a recording, after the
        # program's last line: CPython's test_audit).  The callbacks left behind get
        # no event: none is on, globally or on a code object.
        for ev in (E.PY_START, E.PY_RETURN, E.PY_YIELD, E.PY_RESUME, E.PY_UNWIND, E.PY_THROW):
            if ev in extra_callbacks:
                mon.register_callback(TOOL_ID, ev, extra_callbacks[ev])
        _lines.release_tool("backend")
        self._unwind = False
        self._c_registered = False
        self.active = False

    def kill(self) -> None:
        """ftrace_kill: nothing traced from now on, in O(1): no site is left, so the
        callbacks that the local events still bring find none and return at once.
        They stay registered (but where another part of fntrace wants the event): the
        end of a recording must not raise audit events the program's hooks would see
        after its last line (stop())."""
        if not self.active:
            return
        mon = sys.monitoring  # type: ignore[attr-defined, unused-ignore]  # 3.12+
        E = mon.events
        for ev in (E.PY_START, E.PY_RETURN, E.PY_YIELD, E.PY_RESUME, E.PY_UNWIND, E.PY_THROW):
            if ev in extra_callbacks:
                mon.register_callback(TOOL_ID, ev, extra_callbacks[ev])
        self._trap_on = False
        dispatch.G.trap = None
        mon.set_events(TOOL_ID, extra_mask())
        dispatch.forget(dispatch.sites)
        self._unwind = self._want_unwind = False
        _lines.kill()

    def profile_taken(self) -> str | None:
        """sys.setprofile is the program's own on this back end (a tool id of its own
        since 3.12): never taken from fntrace."""
        return None

    # -- the arch ops of the update path ------------------------------------------------
    def make_call(self, rec: DynFtrace) -> None:
        code = rec.site_code
        if code is None:
            return      # a C function (--c-calls): its callers' CALL events reach it
        dispatch.sites[id(code)] = rec
        self._patched[rec.ip] = (rec, code)
        sys.monitoring.set_local_events(  # type: ignore[attr-defined, unused-ignore]  # 3.12+
            TOOL_ID, code, self._events(rec) | _lines.line_events(code))
        if self._trapped:
            ref = self._trapped.get(id(code))
            if ref is not None and ref() is code:
                # DISABLE outlives set_local_events: re-arm (every trapped location;
                # those still not sites are turned off again on their next start)
                self._trapped.clear()
                sys.monitoring.restart_events()  # type: ignore[attr-defined, unused-ignore]  # 3.12+

    def modify_call(self, rec: DynFtrace) -> None:
        # The slot (rec.func / rec.ops) was already rewritten; the event set, or the code
        # patched (a stub came or went), may change.
        if rec.site_code is None:
            return      # a C function: nothing patched
        old = self._patched.get(rec.ip)
        if old is not None and old[1] is not rec.site_code:
            self._unpatch(old[1])
            self.make_call(rec)
            return
        sys.monitoring.set_local_events(  # type: ignore[attr-defined, unused-ignore]  # 3.12+
            TOOL_ID, rec.site_code, self._events(rec) | _lines.line_events(rec.site_code))

    def _unpatch(self, code: CodeType) -> None:
        try:
            sys.monitoring.set_local_events(  # type: ignore[attr-defined, unused-ignore]  # 3.12+
                TOOL_ID, code, _lines.line_events(code))
        except ValueError:
            pass
        dispatch.forget(dispatch.sites, id(code))

    def make_nop(self, rec: DynFtrace) -> None:
        old = self._patched.pop(rec.ip, None)
        if old is not None:
            self._unpatch(old[1])
        elif rec.site_code is not None:
            self._unpatch(rec.site_code)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
