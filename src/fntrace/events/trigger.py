"""Event triggers (kernel/trace/trace_events_trigger.c).

    <trigger>[:count][ if <filter>]          add
    !<trigger>                               remove (count and filter ignored)

triggers: traceon, traceoff, stacktrace, snapshot,
          enable_event:<system>:<event>, disable_event:<system>:<event>

A counted trigger only counts down when it did something ("the count only decrements
when the trigger did work").  Reading the trigger file lists one per line:
``traceoff:count=3 if n > 2``, ``enable_event:fprobes:work__entry:unlimited``.

An event has at most one trigger of each type (struct event_command's trigger_type):
traceon and traceoff are both ETT_TRACE_ONOFF, enable_event and disable_event are both
ETT_EVENT_ENABLE (one per target event).  register_trigger() refuses a second one with
-EEXIST (TriggerExistsError: no error_log entry, nothing changes), and
unregister_trigger() removes the event's trigger of the type, whichever of the two
commands set it (``!traceoff`` removes a traceon trigger).
"""
from __future__ import annotations

import errno as _errno
import re
from collections.abc import Mapping
from time import monotonic_ns
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from ..errors import FntraceError
from ..ring_buffer import PAYLOAD_SEP, TRACE_STACK
from .core import EventFile, event_buffer_of, filter_passes, find_event_call, stack_text
from .filter import PAGE_SIZE

__all__ = ["Trigger", "parse_trigger", "apply_trigger_command", "TriggerError",
           "TriggerExistsError", "TRIGGER_TYPES"]

TRIGGERS = ("traceon", "traceoff", "stacktrace", "snapshot", "enable_event", "disable_event",
            "enable_hist", "disable_hist")

# trace_events_trigger.c: each event_command's .trigger_type.
TRIGGER_TYPES: dict[str, str] = {
    "traceon": "ETT_TRACE_ONOFF",
    "traceoff": "ETT_TRACE_ONOFF",
    "snapshot": "ETT_SNAPSHOT",
    "stacktrace": "ETT_STACKTRACE",
    "enable_event": "ETT_EVENT_ENABLE",
    "disable_event": "ETT_EVENT_ENABLE",
    "enable_hist": "ETT_HIST_ENABLE",
    "disable_hist": "ETT_HIST_ENABLE",
}


class TriggerError(FntraceError):
    """A trigger command the kernel rejects (-EINVAL); .pos is the caret's offset."""


class TriggerExistsError(FntraceError):
    """register_trigger(): the event already has a trigger of this type (-EEXIST).
    Not a parse error: the kernel logs nothing for it."""

    errno = _errno.EEXIST


class Trigger:
    def __init__(self, cmd: str, count: int, filter_text: str, flt, target: tuple[str, str] | None):
        self.cmd = cmd
        self.count = count              # -1: unlimited
        self.filter_text = filter_text
        self.filter = flt
        self.target = target            # (system, event) for enable/disable_event
        self.target_file: EventFile | None = None

    def key(self) -> tuple:
        """What makes two triggers "the same" to register_trigger: the trigger type,
        and for enable/disable_event the target event too
        (event_enable_register_trigger compares enable_data->file)."""
        return (TRIGGER_TYPES[self.cmd], self.target)

    def __str__(self) -> str:
        name = self.cmd
        if self.target is not None:
            name += f":{self.target[0]}:{self.target[1]}"
        name += ":unlimited" if self.count == -1 else f":count={self.count}"
        if self.filter_text:
            name += f" if {self.filter_text}"
        return name

    # -- running ---------------------------------------------------------------------
    def fire(self, ef: EventFile, values: Mapping[str, Any], frame) -> None:
        if self.count == 0:
            return
        if self.filter is not None and not filter_passes(self.filter, values):
            return
        if self.do(ef.tr, frame) and self.count > 0:
            self.count -= 1

    def do(self, tr, frame) -> bool:
        """Do the trigger's work; return whether it changed anything."""
        c = self.cmd
        if c == "traceon" or c == "traceoff":
            return _switch(tr, "tracing_on", c == "traceon")
        if c == "stacktrace":
            if not tr.tracing_on:
                return False
            buf = event_buffer_of(tr)
            if buf is None:
                return False
            buf.write_payload(monotonic_ns(), TRACE_STACK, 0, 0, 0, 0, PAYLOAD_SEP + stack_text(frame))
            return True
        if c == "snapshot":
            tr.take_snapshot()
            return True
        tf = self.target_file
        if tf is None:
            return False
        # event_enable_trigger: skip if the event is already in the wanted state (a
        # counted trigger only counts when it switched something)
        if c in ("enable_hist", "disable_hist"):
            from .hist import set_hist_paused
            return set_hist_paused(tf, c == "disable_hist")
        if c == "enable_event" or c == "disable_event":
            return _switch(tf, "soft_disabled", c == "disable_event")
        return False


def _switch(obj: Any, attr: str, value: bool) -> bool:
    """Set a switch; whether it changed (a counted trigger counts only a change)."""
    if bool(getattr(obj, attr)) == value:
        return False
    setattr(obj, attr, value)
    return True


_COUNT = re.compile(r"\d+")


def parse_trigger(text: str, fields: Mapping[str, str]) -> tuple[bool, Trigger]:
    """Parse one trigger command; returns (remove, trigger).  TriggerError with .pos,
    the offset in text of the field that is wrong (its end if it is missing)."""
    from .filter import FilterParseError, parse_filter
    s = text.strip()
    s_off = len(text) - len(text.lstrip())    # where s starts in text
    remove = s.startswith("!")
    if remove:
        s = s[1:]
        s_off += 1
    head, sep, ftext = s.partition(" if ")
    if not sep and s.endswith(" if"):
        raise TriggerError("filter is missing after 'if'", pos=s_off + len(s), command=text)
    f_off = s_off + len(head) + len(sep)      # where the filter starts in text
    base = s_off + len(head) - len(head.lstrip())
    head = head.strip()
    end = base + len(head)
    parts: list[tuple[str, int]] = []         # each ':' field and where it starts
    at = base
    for part in head.split(":"):
        parts.append((part, at))
        at += len(part) + 1
    cmd = parts[0][0]
    if cmd not in TRIGGERS:
        raise TriggerError(f"unknown trigger {cmd!r} (triggers: {', '.join(TRIGGERS)})",
                           pos=base, command=text)
    target = None
    rest = parts[1:]
    if cmd in ("enable_event", "disable_event", "enable_hist", "disable_hist"):
        if len(rest) < 2 or not rest[0][0] or not rest[1][0]:
            raise TriggerError(f"{cmd} needs <system>:<event>",
                               pos=rest[0][1] if rest else end, command=text)
        target = (rest[0][0], rest[1][0])
        if find_event_call(*target) is None:
            raise TriggerError(f"no such event {target[0]}:{target[1]}", pos=rest[0][1],
                               command=text)
        rest = rest[2:]
    count = -1
    if rest:
        c, cpos = rest[0]
        if c == "unlimited":
            count = -1
        elif c.startswith("count="):
            if not _COUNT.fullmatch(c[6:]):
                raise TriggerError(f"bad count {c!r}", pos=cpos, command=text)
            count = int(c[6:])
        elif _COUNT.fullmatch(c):
            count = int(c)
        else:
            raise TriggerError(f"bad count {c!r}", pos=cpos, command=text)
        if len(rest) > 1:
            raise TriggerError("too many ':' fields", pos=rest[1][1], command=text)
    flt = None
    fstrip = ftext.strip()
    if fstrip and not remove:
        f_off += len(ftext) - len(ftext.lstrip())
        try:
            flt = parse_filter(fstrip, fields)
        except FilterParseError as e:
            raise TriggerError(f"event filter parse error: {e.msg}",
                               pos=f_off + (e.pos or 0), command=text) from None
        fstrip = flt.text if flt is not None else ""
    return remove, Trigger(cmd, count, fstrip if not remove else "", flt, target)


def apply_trigger_command(ef: EventFile, text: str, files_of_tr) -> None:
    """Write to an event's trigger file.  ``files_of_tr(system, event)`` finds the
    target EventFile in the same instance for enable/disable_event."""
    if not text.strip():
        return
    if len(text) >= PAGE_SIZE:
        # event_trigger_regex_write: -EINVAL before anything is parsed, no error_log entry
        raise FntraceError(f"trigger too long: a write is less than a page ({PAGE_SIZE} bytes)",
                           pos=0, command=text)
    word = text.strip().lstrip("!")
    if word == "hist" or word.startswith(("hist:", "hist ")):
        from .hist import apply_hist_command
        apply_hist_command(ef, text)
        return
    remove, t = parse_trigger(text, ef.call.fields)
    existing = [x for x in ef.triggers if x.key() == t.key()]
    if remove:
        if not existing:
            raise TriggerError(f"no {t.cmd} trigger to remove", pos=0, command=text)
        for x in existing:
            ef.triggers.remove(x)
            if x.target_file is not None and x.cmd in ("enable_event", "disable_event"):
                x.target_file.soft_release()
        ef._sync()
        return
    if existing:
        raise TriggerExistsError(
            f"File exists: the event already has a {existing[0].cmd} trigger "
            f"({TRIGGER_TYPES[t.cmd]})", pos=0, command=text)
    if t.target is not None:
        tf = files_of_tr(*t.target)
        if tf is None:
            raise TriggerError(f"no such event {t.target[0]}:{t.target[1]}", pos=0, command=text)
        t.target_file = tf
        if t.cmd in ("enable_event", "disable_event"):
            tf.soft_enable()
    ef.triggers.append(t)
    ef._sync()


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
