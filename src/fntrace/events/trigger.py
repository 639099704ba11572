"""Event triggers (kernel/trace/trace_events_trigger.c).

    <trigger>[:count][ if <filter>]          add
    !<trigger>                               remove (count and filter ignored)

triggers: traceon, traceoff, stacktrace, snapshot,
          enable_event:<system>:<event>, disable_event:<system>:<event>

A counted trigger only counts down when it did something ("the count only decrements
when the trigger did work").  Reading the trigger file lists one per line:
``traceoff:count=3 if n > 2``, ``enable_event:fprobes:work__entry:unlimited``.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from time import monotonic_ns
from typing import Any

from ..errors import FntraceError
from ..ring_buffer import TRACE_STACK
from .core import EventFile, find_event_call, stack_text

__all__ = ["Trigger", "parse_trigger", "apply_trigger_command", "TriggerError"]

TRIGGERS = ("traceon", "traceoff", "stacktrace", "snapshot", "enable_event", "disable_event")


class TriggerError(FntraceError):
    pass


class Trigger:
    def __init__(self, cmd: str, count: int, filter_text: str, flt, target: tuple[str, str] | None):
        self.cmd = cmd
        self.count = count              # -1: unlimited
        self.filter_text = filter_text
        self.filter = flt
        self.target = target            # (system, event) for enable/disable_event
        self.target_file: EventFile | None = None

    def key(self) -> tuple:
        # enable_event and disable_event are one trigger type in the kernel: only one
        # of them per target event (trigger-eventonoff.tc)
        if self.target is not None:
            return ("event", self.target)
        return (self.cmd, None)

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
        if self.filter is not None:
            try:
                if not self.filter(values):
                    return
            except Exception:
                return
        if self.do(ef.tr, frame) and self.count > 0:
            self.count -= 1

    def do(self, tr, frame) -> bool:
        """Do the trigger's work; return whether it changed anything."""
        c = self.cmd
        if c == "traceoff":
            if not tr.tracing_on:
                return False
            tr.tracing_on = False
            return True
        if c == "traceon":
            if tr.tracing_on:
                return False
            tr.tracing_on = True
            return True
        if c == "stacktrace":
            if not tr.tracing_on:
                return False
            try:
                buf = tr.local.buf
            except AttributeError:
                buf = tr.cpu_buffer()
            buf.write_payload(monotonic_ns(), TRACE_STACK, 0, 0, 0, 0, ["", stack_text(frame)])
            return True
        if c == "snapshot":
            tr.take_snapshot()
            return True
        tf = self.target_file
        if tf is None:
            return False
        # event_enable_trigger: skip if the event is already in the wanted state (a
        # counted trigger only counts when it switched something)
        if c == "enable_event":
            if not tf.soft_disabled:
                return False
            tf.soft_disabled = False
            return True
        if c == "disable_event":
            if tf.soft_disabled:
                return False
            tf.soft_disabled = True
            return True
        return False


_COUNT = re.compile(r"\d+")


def parse_trigger(text: str, fields: Mapping[str, str]) -> tuple[bool, Trigger]:
    """Parse one trigger command; returns (remove, trigger).  TriggerError with .pos."""
    from .filter import FilterParseError, parse_filter
    s = text.strip()
    base = len(text) - len(text.lstrip())
    remove = s.startswith("!")
    if remove:
        s = s[1:]
        base += 1
    head, sep, ftext = s.partition(" if ")
    if not sep and s.endswith(" if"):
        raise TriggerError("filter is missing after 'if'", pos=base + len(s), command=text)
    head = head.strip()
    parts = head.split(":")
    cmd = parts[0]
    if cmd not in TRIGGERS:
        raise TriggerError(f"unknown trigger {cmd!r} (triggers: {', '.join(TRIGGERS)})",
                           pos=base, command=text)
    pos = base + len(cmd) + 1
    target = None
    rest = parts[1:]
    if cmd in ("enable_event", "disable_event"):
        if len(rest) < 2 or not rest[0] or not rest[1]:
            raise TriggerError(f"{cmd} needs <system>:<event>", pos=pos, command=text)
        target = (rest[0], rest[1])
        if find_event_call(rest[0], rest[1]) is None:
            raise TriggerError(f"no such event {rest[0]}:{rest[1]}", pos=pos, command=text)
        pos += len(rest[0]) + len(rest[1]) + 2
        rest = rest[2:]
    count = -1
    if rest:
        c = rest[0]
        if c == "unlimited":
            count = -1
        elif c.startswith("count="):
            c = c[6:]
            if not _COUNT.fullmatch(c):
                raise TriggerError(f"bad count {rest[0]!r}", pos=pos, command=text)
            count = int(c)
        elif _COUNT.fullmatch(c):
            count = int(c)
        else:
            raise TriggerError(f"bad count {c!r}", pos=pos, command=text)
        if len(rest) > 1:
            raise TriggerError("too many ':' fields", pos=pos + len(c) + 1, command=text)
    flt = None
    ftext = ftext.strip()
    if ftext and not remove:
        fpos = text.find(" if ") + 4
        try:
            flt = parse_filter(ftext, fields)
        except FilterParseError as e:
            raise TriggerError(f"event filter parse error: {e.msg}",
                               pos=fpos + (e.pos or 0), command=text) from None
        ftext = flt.text if flt is not None else ""
    return remove, Trigger(cmd, count, ftext if not remove else "", flt, target)


def apply_trigger_command(ef: EventFile, text: str, files_of_tr) -> None:
    """Write to an event's trigger file.  ``files_of_tr(system, event)`` finds the
    target EventFile in the same instance for enable/disable_event."""
    if not text.strip():
        return
    remove, t = parse_trigger(text, ef.call.fields)
    existing = [x for x in ef.triggers if x.key() == t.key()]
    if remove:
        if not existing:
            raise TriggerError(f"no {t.cmd} trigger to remove", pos=0, command=text)
        for x in existing:
            ef.triggers.remove(x)
            if x.target_file is not None:
                x.target_file.soft_release()
        ef._sync()
        return
    if existing:
        err = TriggerError(f"a {t.cmd} trigger is already set", pos=0, command=text)
        err.errno = 17   # EEXIST
        raise err
    if t.target is not None:
        tf = files_of_tr(*t.target)
        if tf is None:
            raise TriggerError(f"no such event {t.target[0]}:{t.target[1]}", pos=0, command=text)
        t.target_file = tf
        tf.soft_enable(t.cmd == "enable_event")
    ef.triggers.append(t)
    ef._sync()
