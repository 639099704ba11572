"""exceptions:raise, exceptions:handled, exceptions:unwind — exceptions as static events.

    raise     an exception is raised in a function, or reaches it from a callee
    handled   an except clause of the function takes it
    unwind    the function exits by it

Fields: function (module.qualname), type (the exception's class, ``module.Class``
outside builtins) and message.  The message runs none of the program's code: only for
a class whose ``__str__`` is BaseException's own is it read, from ``args`` holding
built-in values (what BaseException.__str__ would print); for any other class it is
the class name.

3.12+: sys.monitoring RAISE, EXCEPTION_HANDLED and PY_UNWIND, global events on
fntrace's tool id (arch/monitoring.py ``extra_callbacks``: OR-ed with the back end's own,
PY_UNWIND shared with function_graph).  Each is set only while its event is enabled; the
tool id is held through arch/lines.py's hold_tool while any is.  With none enabled,
nothing is set and exceptions cost the program nothing.

3.11 has no sys.monitoring, and the setprofile back end does not see raises: while an
exception event is enabled, ``sys.settrace`` (and ``threading.settrace`` for threads
started later) runs a trace function.  Its cost while enabled: one Python call per
function call and return of every function (line events are turned off per frame,
except in a frame between an exception and its next line or return, which is how
``handled`` is told from ``unwind``: a line reached after the exception means an except
clause took it — a ``finally`` clause counts as handled there).  Threads already
running when the event is enabled are not traced.  When the program has a trace
function of its own (a debugger, coverage's), fntrace leaves it alone and says so on
stderr.  Disabled, the trace function is removed.
"""
from __future__ import annotations

import sys
import threading
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

from ..core.records import record_table
from .core import EventCall, _fntrace_code
from .static_emit import emit, program_frame

__all__ = ["exception_calls", "exception_message", "exception_type_name"]

_FIELDS = {"function": "str", "type": "str", "message": "str"}
_MON = sys.version_info >= (3, 12)

_type_dict = type.__dict__["__dict__"].__get__
_type_mro = type.__dict__["__mro__"].__get__
_type_module = type.__dict__["__module__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_exc_args = BaseException.__dict__["args"].__get__
_PLAIN = (str, int, float, bool, type(None))


def exception_type_name(t: type) -> str:
    try:
        mod, qn = _type_module(t), _type_qualname(t)
    except Exception:
        return "?"
    if type(qn) is not str:
        return "?"
    return qn if mod == "builtins" or type(mod) is not str else f"{mod}.{qn}"


def exception_message(exc) -> str:
    """What str(exc) would be, where that runs none of the program's code; else the
    class name."""
    t = type(exc)
    try:
        for k in _type_mro(t):
            d = _type_dict(k)
            if "__str__" in d:
                if d["__str__"] is not BaseException.__dict__["__str__"]:
                    return exception_type_name(t)
                break
        args = _exc_args(exc)
        if len(args) == 0:
            return ""
        if len(args) == 1:
            a = args[0]
            ta = type(a)
            if ta is str:
                return a
            if ta in _PLAIN:
                return str(a)
            return exception_type_name(t)
        if all(type(a) in _PLAIN for a in args):
            from ..core.fetch import value_repr
            return value_repr(args)
    except Exception:
        pass
    return exception_type_name(t)


def _function_name(frame, code) -> str:
    rec = record_table.by_code.get(id(code))
    if rec is not None:
        return rec.name
    glb = frame.f_globals if frame is not None else None
    mod = glb.get("__name__", "") if type(glb) is dict else ""
    return f"{mod}.{code.co_qualname}" if type(mod) is str and mod else code.co_qualname


class _ExceptionEvents:
    def __init__(self) -> None:
        self.raise_ = EventCall("exceptions", "raise", _FIELDS,
                                hook=lambda on: self._hook("raise", on))
        self.handled = EventCall("exceptions", "handled", _FIELDS,
                                 hook=lambda on: self._hook("handled", on))
        self.unwind = EventCall("exceptions", "unwind", _FIELDS,
                                hook=lambda on: self._hook("unwind", on))
        self.calls = {"raise": self.raise_, "handled": self.handled, "unwind": self.unwind}
        self.on: set[str] = set()
        self.busy: set[int] = set()
        self.pending: dict = {}         # 3.11: frame -> exception, between raise and line

    def _emit(self, call: EventCall, frame, code, exc) -> None:
        if _fntrace_code(code.co_filename):
            return
        if frame is not None and program_frame(frame) is None:
            return              # stdlib code fntrace called
        me = threading.get_ident()
        if me in self.busy:
            return
        self.busy.add(me)
        try:
            emit(call, {"function": _function_name(frame, code),
                        "type": exception_type_name(type(exc)),
                        "message": exception_message(exc)}, frame)
        except BaseException:
            pass
        finally:
            self.busy.discard(me)

    def _hook(self, which: str, on: bool) -> None:
        if on:
            self.on.add(which)
        else:
            self.on.discard(which)
        if _MON:
            self._set_monitoring(which, on)
        else:
            self._set_trace()

    # -- 3.12+: sys.monitoring ------------------------------------------------------------
    def _frame(self, code):
        f = sys._getframe(2)
        return f if f is not None and f.f_code is code else None

    def _on_raise(self, code, offset, exc):
        try:
            if self.raise_.files:
                self._emit(self.raise_, self._frame(code), code, exc)
        except BaseException:
            pass

    def _on_handled(self, code, offset, exc):
        try:
            if self.handled.files:
                self._emit(self.handled, self._frame(code), code, exc)
        except BaseException:
            pass

    def _on_unwind(self, code, offset, exc):
        try:
            if self.unwind.files:
                self._emit(self.unwind, self._frame(code), code, exc)
        except BaseException:
            pass

    def _set_monitoring(self, which: str, on: bool) -> None:
        if sys.version_info < (3, 12):
            return                      # not reached (_hook checks _MON); for a checker
        from ..arch import monitoring as m
        from ..core.ops import backend
        mon = sys.monitoring
        E = mon.events
        ev, cb = {"raise": (E.RAISE, self._on_raise),
                  "handled": (E.EXCEPTION_HANDLED, self._on_handled),
                  "unwind": (E.PY_UNWIND, self._on_unwind)}[which]
        if on == (ev in m.extra_callbacks):
            return
        live = backend if isinstance(backend, m.MonitoringBackend) and backend.active else None
        if on:
            if not m.extra_callbacks:
                _hold_tool()
            m.extra_callbacks[ev] = cb
        else:
            del m.extra_callbacks[ev]
        own = None
        if ev == E.PY_UNWIND and live is not None and live._unwind:
            from ..core import dispatch
            own = dispatch.on_py_unwind
        mon.register_callback(m.TOOL_ID, ev, m.both_callbacks(own, m.extra_callbacks.get(ev)))
        if live is not None:
            live._set_global()
        else:
            mon.set_events(m.TOOL_ID, m.extra_mask())
        if not m.extra_callbacks:
            _release_tool()

    # -- 3.11: sys.settrace ---------------------------------------------------------------
    def _set_trace(self) -> None:
        if self.on:
            cur = sys.gettrace()
            if cur is not None and cur != self._global:
                try:
                    sys.stderr.write("fntrace: exceptions events: sys.settrace is the "
                                     f"program's ({cur!r}); not traced\n")
                except Exception:
                    pass
                return
            threading.settrace(self._global)
            sys.settrace(self._global)
            # the frames running now (the caller's), which 'call' events did not see
            f: FrameType | None = sys._getframe(1)
            while f is not None:
                if not _fntrace_code(f.f_code.co_filename) and f.f_trace is None:
                    f.f_trace_lines = False
                    f.f_trace = self._local
                f = f.f_back
        else:
            if threading.gettrace() == self._global:
                threading.settrace(None)
            if sys.gettrace() == self._global:
                sys.settrace(None)
            self.pending.clear()

    def _global(self, frame, event, arg):
        if not self.on:
            try:
                sys.settrace(None)
            except Exception:
                pass
            return None
        try:                    # (module globals are None late in finalization)
            if _fntrace_code(frame.f_code.co_filename):
                return None
            frame.f_trace_lines = False
        except BaseException:
            return None
        return self._local

    def _local(self, frame, event, arg):
        if not self.on:
            return None
        try:
            if event == "exception":
                exc = arg[1]
                if self.raise_.files:
                    self._emit(self.raise_, frame, frame.f_code, exc)
                self.pending[id(frame)] = exc
                frame.f_trace_lines = True
            elif event == "line":
                exc = self.pending.pop(id(frame), None)
                frame.f_trace_lines = False
                if exc is not None and self.handled.files:
                    self._emit(self.handled, frame, frame.f_code, exc)
            elif event == "return":
                exc = self.pending.pop(id(frame), None)
                if exc is not None and self.unwind.files:
                    self._emit(self.unwind, frame, frame.f_code, exc)
        except BaseException:
            pass
        return self._local


def _hold_tool() -> None:
    try:
        from ..arch.lines import hold_tool
    except ImportError:                 # no shared holder: take it if free
        if sys.version_info < (3, 12):
            return                      # not reached (only with _MON); for a checker
        from ..arch.tool import TOOL_ID, TOOL_NAME
        if sys.monitoring.get_tool(TOOL_ID) is None:
            sys.monitoring.use_tool_id(TOOL_ID, TOOL_NAME)
        return
    hold_tool("exceptions")


def _release_tool() -> None:
    try:
        from ..arch.lines import release_tool
    except ImportError:
        return
    release_tool("exceptions")


def exception_calls() -> list[EventCall]:
    return list(_ExceptionEvents().calls.values())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
