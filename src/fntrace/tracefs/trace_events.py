"""The event files (kernel/trace/trace_events.c, trace_events_trigger.c,
trace_events_filter.c, trace_events_hist.c): which events are on, and each event's
directory.

    set_event                          SYSTEM:EVENT words, !word to disable
    available_events                   every event (top level)
    events/enable, events/SYSTEM/enable          every event, a system's: 0, 1 or X
    events/SYSTEM/EVENT/{enable,filter,trigger,hist,format,id}

An instance has its own event files (TraceArray.event_file); the events themselves
(events/core.py) are the process's.  A filter or trigger write that fails changes
nothing and leaves its caret in the instance's error_log.
"""
from __future__ import annotations

from ..errors import FntraceError
from .values import parse_bool

__all__ = ["EVENT_LEAVES", "register_trace_events", "event_path"]

# the files of each events/<system>/<event>/ directory
EVENT_LEAVES = ("enable", "filter", "trigger", "format", "id", "hist")


def register_trace_events(fs) -> None:
    """Add set_event (and the top level's available_events) to ``fs``; the events/
    tree is found by ``event_path``."""
    fs._files["set_event"] = (lambda: _r_set_event(fs), lambda d, a: _w_set_event(fs, d, a))
    if fs.top:
        # event_trace_init(): the top level's only
        fs._files["available_events"] = (
            lambda: "".join(f"{c.system}:{c.name}\n" for c in _calls()), None)


def _calls(system: str | None = None):
    from ..events.core import event_calls
    return [c for (sy, _), c in list(event_calls.items()) if system in (None, sy)]


def event_path(fs, path: str):
    """The (read, write) pair of a file under events/ of ``fs``, or None."""
    from ..events.core import find_event_call
    parts = path.split("/")
    if parts == ["events", "enable"]:
        return (lambda: _r_enable_many(fs, _calls()),
                lambda d, a: _w_enable_many(fs, _calls(), d))
    if len(parts) == 3 and parts[2] == "enable":
        calls = _calls(parts[1])
        if not calls:
            return None
        return (lambda: _r_enable_many(fs, calls), lambda d, a: _w_enable_many(fs, calls, d))
    if len(parts) != 4:
        return None
    call = find_event_call(parts[1], parts[2])
    if call is None:
        return None
    ef = fs.tr.event_file(call)
    leaf = parts[3]
    if leaf == "enable":
        return (lambda: ef.enable_text() + "\n",
                lambda d, a: ef.set_enabled(parse_bool(d, "enable")))
    if leaf == "filter":
        return ((lambda: (ef.filter_text or "none") + "\n"),
                lambda d, a: _w_event_filter(fs, ef, d))
    if leaf == "trigger":
        return (lambda: _r_trigger(ef), lambda d, a: _w_trigger(fs, ef, d))
    if leaf == "hist":
        from ..events.hist import hist_text
        return (lambda: hist_text(ef), None)
    if leaf == "format":
        return (call.format_text, None)
    if leaf == "id":
        return (lambda: f"{call.id}\n", None)
    return None


def _r_enable_many(fs, calls) -> str:
    states = {fs.tr.event_file(c).enable_text()[0] for c in calls}
    if not states:
        return "0\n"
    return ("X" if len(states) > 1 else states.pop()) + "\n"


def _w_enable_many(fs, calls, data: str) -> None:
    on = parse_bool(data, "enable")
    for c in calls:
        fs.tr.event_file(c).set_enabled(on)


def _w_event_filter(fs, ef, data: str) -> None:
    from ..events.filter import FilterParseError
    text = data.strip()
    try:
        ef.set_filter(text)
    except FilterParseError as e:
        fs.error_log.add("event filter parse error", e.msg, text, e.pos or 0)
        raise


def _r_trigger(ef) -> str:
    if not ef.triggers:
        return ("# Available triggers:\n# traceon traceoff snapshot stacktrace enable_event "
                "disable_event enable_hist disable_hist hist\n")
    return "".join(f"{t}\n" for t in ef.triggers)


def _w_trigger(fs, ef, data: str) -> None:
    from ..events.core import find_event_call
    from ..events.hist import HistError
    from ..events.trigger import TriggerError, apply_trigger_command

    def files_of_tr(system, event):
        c = find_event_call(system, event)
        return fs.tr.event_file(c) if c is not None else None
    text = data.rstrip("\n")
    try:
        apply_trigger_command(ef, text, files_of_tr)
    except TriggerError as e:
        fs.error_log.add("event trigger", e.msg, text, e.pos or 0)
        raise
    except HistError as e:
        # hist_err(): logged as hist:SYSTEM:EVENT with the command and its caret
        fs.error_log.add(f"hist:{ef.call.system}:{ef.call.name}", e.msg, text, e.pos or 0)
        raise


def _r_set_event(fs) -> str:
    return "".join(f"{c.system}:{c.name}\n" for c in _calls()
                   if fs.tr.event_file(c).enabled)


def _w_set_event(fs, data: str, append: bool) -> None:
    from ..core.hash import glob_match
    words = data.split()
    plan = []
    for w in words:
        on = not w.startswith("!")
        pat = w.lstrip("!")
        sysp, _, evp = pat.rpartition(":")
        if not sysp:
            sysp = "*"
        matched = [c for c in _calls()
                   if glob_match(sysp, c.system) and glob_match(evp or "*", c.name)]
        if not matched:
            raise FntraceError(f"set_event: no event matches {w!r}", command=data)
        plan.append((on, matched))
    if not append:
        for c in _calls():
            fs.tr.event_file(c).set_enabled(False)
    for on, matched in plan:
        for c in matched:
            fs.tr.event_file(c).set_enabled(on)
