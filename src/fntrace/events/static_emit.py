"""What every static event shares: how one is written, and whose code raised it.

The static events (static_events.py: gc, threads, ftrace:print; audit_events.py;
exception_events.py) each find their values their own way, then ``emit`` one: the
event file's triggers, filter and record, as for any event, never raising into the
program.  ``program_frame`` tells the program's events from the ones fntrace's own
code sets off.  Below the three modules, so that none of them imports another for it.
"""
from __future__ import annotations

import os

from ..core.fetch import value_repr
from .core import EventCall, _fntrace_code

__all__ = ["emit", "program_frame", "event_call", "print_fmt"]

_STDLIB = os.path.dirname(os.__file__) + os.sep


def _field_text(v, kind: str) -> str:
    t = type(v)
    if kind == "str" and t is str:
        if v and not any(c.isspace() or c in "\"'=" for c in v):
            return v
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if t is int or t is bool:
        return str(int(v))
    return value_repr(v)


def _filter_value(v):
    """What a filter compares: built-in ints and strs as they are, other values by
    their text."""
    t = type(v)
    if t is int or t is str or t is bool or t is float or v is None:
        return v
    return value_repr(v)


def emit(call: EventCall, values: dict, frame=None) -> None:
    """Write ``call``'s event: triggers, filter and record as for any event.  Never
    raises."""
    try:
        kinds = call.fields
        fvals = {k: _filter_value(v) for k, v in values.items()}
        call.fire(0, fvals,
                  lambda: " ".join(f"{k}={_field_text(values.get(k), kind)}"
                                   for k, kind in kinds.items()),
                  frame)
    except Exception:
        pass


def print_fmt(fields: dict) -> str:
    fmt = " ".join(f"{k}=%d" if kind == "int" else f"{k}=%s" for k, kind in fields.items())
    return f'"{fmt}"' + "".join(f", REC->{k}" for k in fields)


def event_call(system: str, name: str, fields: dict, hook=None, definition: str = ""
               ) -> EventCall:
    """A static event's EventCall, its print_fmt made from its fields."""
    return EventCall(system, name, fields, print_fmt=print_fmt(fields), hook=hook,
                     definition=definition)


def program_frame(frame):
    """The frame an audit event is the program's through, or None when fntrace's own
    code raised it: the first frame out of the standard library decides (fntrace
    opening a file through tempfile is fntrace's)."""
    f = frame
    for _ in range(16):
        if f is None:
            return frame
        fn = f.f_code.co_filename
        if _fntrace_code(fn):
            return None
        if not fn.startswith(_STDLIB) and not fn.startswith("<frozen"):
            return frame
        f = f.f_back
    return frame


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
