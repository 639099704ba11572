"""Synthetic events (kernel/trace/trace_events_synth.c): events made by hist trigger
actions out of other events' fields and variables.

    echo 'wakeup_latency u64 lat; pid_t pid; int prio' >> synthetic_events
    echo 's:handler_lat u64 lat; char[] route' >> dynamic_events
    echo '!wakeup_latency' >> synthetic_events           # or -:synthetic/NAME

Each is an EventCall in the ``synthetic`` system (``events/synthetic/NAME/``) with the
usual enable, filter, trigger, format, id and hist files.  An action such as
``onmatch(SYS.EVENT).trace(wakeup_latency,$lat,pid,prio)`` fires it; its line reads
``wakeup_latency: lat=12 pid=3 prio=120``.
"""
from __future__ import annotations

import errno as _errno
import re
import threading
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from .._env import fork_safe
from ..errors import FntraceError
from .core import (EventCall, event_calls, find_event_call, register_event_call,
                   unregister_event_call)

__all__ = ["SynthError", "SynthEvent", "synth_create", "synth_remove", "synth_lines",
           "synth_fire", "find_synth", "SYNTH_ERRORS", "synth_command"]

SYSTEM = "synthetic"
SYNTH_FIELDS_MAX = 64
STR_VAR_LEN_MAX = 256

SYNTH_ERRORS = {
    "BAD_NAME": "Illegal name",
    "INVALID_CMD": "Command must be of the form: <name> field[;field] ...",
    "INVALID_DYN_CMD": "Command must be of the form: s or -:[synthetic/]<name> field[;field] ...",
    "EVENT_EXISTS": "Event already exists",
    "TOO_MANY_FIELDS": "Too many fields",
    "INCOMPLETE_TYPE": "Incomplete type",
    "INVALID_TYPE": "Invalid type",
    "INVALID_FIELD": "Invalid field",
    "INVALID_ARRAY_SPEC": "Invalid array specification",
}

# synth_field_size()'s types, and synth_field_fmt()'s formats
_TYPES = {"s64": "%lld", "u64": "%llu", "s32": "%d", "u32": "%u", "s16": "%d", "u16": "%u",
          "s8": "%d", "u8": "%u", "char": "%d", "unsigned char": "%u", "int": "%d",
          "unsigned int": "%u", "long": "%ld", "unsigned long": "%lu", "bool": "%d",
          "pid_t": "%d", "gfp_t": "%x"}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_lock = fork_safe(threading.RLock())


class SynthError(FntraceError):
    def __init__(self, kind: str, pos: int, command: str, errno: int = _errno.EINVAL) -> None:
        super().__init__(SYNTH_ERRORS[kind], pos=pos, command=command)
        self.kind = kind
        self.errno = errno


class SynthField:
    def __init__(self, type_: str, name: str) -> None:
        self.type = type_
        self.name = name
        self.is_string = "char[" in type_ or type_.endswith("]") and type_.startswith("char")
        self.is_stack = "long[" in type_

    @property
    def kind(self) -> str:
        return "str" if self.is_string or self.is_stack else "int"

    def text(self) -> str:
        if self.is_string and "[" not in self.type:
            return f"{self.type} {self.name}"
        return f"{self.type} {self.name}"

    def fmt(self) -> str:
        if self.is_string:
            return "%.*s"
        if self.is_stack:
            return "%s"
        return _TYPES.get(self.type, "%llu")

    def value_text(self, v: Any) -> str:
        if self.is_string or self.is_stack:
            return str(v) if v.__class__ is str else str(v)
        if not isinstance(v, int):
            return str(v)
        u = v & ((1 << 64) - 1)
        t = self.type
        if t.startswith("u") or t in ("gfp_t", "unsigned char", "unsigned int", "unsigned long"):
            return f"{u:x}" if t == "gfp_t" else str(u)
        bits = {"s8": 8, "char": 8, "s16": 16, "s32": 32, "int": 32, "pid_t": 32, "bool": 8}.get(t, 64)
        u &= (1 << bits) - 1
        return str(u - (1 << bits) if u >> (bits - 1) else u)


class SynthEvent:
    def __init__(self, name: str, fields: list[SynthField]) -> None:
        self.name = name
        self.fields = fields
        self.call = EventCall(
            SYSTEM, name, {f.name: f.kind for f in fields},
            print_fmt='"' + ", ".join(f"{f.name}={f.fmt()}" for f in fields) + '"'
            + "".join(f", REC->{f.name}" if not (f.is_string or f.is_stack)
                      else f", __get_str({f.name})" for f in fields),
            definition=self.text())
        self.call.synth = self

    def text(self) -> str:
        """__synth_event_show()"""
        return f"{self.name}\t" + "; ".join(f.text() for f in self.fields)

    def in_use(self) -> bool:
        if self.call.files:
            return True
        from .hist import HistTrigger
        for c in list(event_calls.values()):
            for ef in c.files:
                for t in ef.triggers:
                    if isinstance(t, HistTrigger) and any(a.synth is self.call for a in t.actions):
                        return True
        return False


_synths: dict[str, SynthEvent] = {}


def _parse(command: str, body: str, off: int) -> tuple[str, list[SynthField]]:
    m = re.match(r"\s*(\S+)", body)
    if m is None:
        raise SynthError("INVALID_CMD", off, command)
    name = m.group(1)
    npos = off + m.start(1)
    if not _IDENT.fullmatch(name):
        raise SynthError("BAD_NAME", npos, command)
    rest = body[m.end():]
    rpos = off + m.end()
    fields: list[SynthField] = []
    at = rpos
    version = 1
    for part in rest.split(";"):
        words = part.split()
        ppos = at + len(part) - len(part.lstrip())
        wpos, j = [], 0
        for w in words:
            j = part.index(w, j)
            wpos.append(at + j)
            j += len(w)
        at += len(part) + 1
        # __create_synth_event(): a part may hold several fields, as long as none of
        # the command's fields so far is a version 2 one (a dynamic array: char[])
        i = n_here = 0
        while i < len(words):
            if len(fields) >= SYNTH_FIELDS_MAX:
                raise SynthError("TOO_MANY_FIELDS", wpos[i], command)
            fpos = wpos[i]
            if words[i] == "unsigned" and i + 1 < len(words):
                typ, k = "unsigned " + words[i + 1], i + 2
            else:
                typ, k = words[i], i + 1
            if k >= len(words):
                raise SynthError("INCOMPLETE_TYPE" if words[i] == "unsigned" else
                                 "INVALID_FIELD", fpos, command)
            fname, npos = words[k], wpos[k]
            i = k + 1
            arr, apos = "", npos          # parse_synth_field: errpos(field_name)
            if "[" in fname:
                fname, _, arr = fname.partition("[")
                arr = "[" + arr
            if "[" in typ:
                typ, _, a2 = typ.partition("[")
                arr, apos = "[" + a2, fpos
            if arr:
                if not re.fullmatch(r"\[\d{0,3}\]", arr):
                    raise SynthError("INVALID_ARRAY_SPEC", apos, command)
                if arr != "[]" and int(arr[1:-1]) > STR_VAR_LEN_MAX:
                    raise SynthError("INVALID_ARRAY_SPEC", apos, command)
                if typ not in ("char", "long", "unsigned long"):
                    raise SynthError("INVALID_TYPE", fpos, command)
                typ = typ + arr
            elif typ not in _TYPES:
                raise SynthError("INVALID_TYPE", fpos, command)
            if not _IDENT.fullmatch(fname):
                raise SynthError("BAD_NAME", npos, command)
            if any(f.name == fname for f in fields):
                raise SynthError("INVALID_FIELD", npos, command)
            if arr == "[]":
                version = 2
            if version > 1 and n_here >= 1:
                raise SynthError("INVALID_CMD", ppos, command)
            fields.append(SynthField(typ, fname))
            n_here += 1
    return name, fields


def synth_command(command: str) -> None:
    """A write line of ``synthetic_events``: a definition or ``!NAME ...``."""
    s = command.strip()
    if not s:
        return
    off = len(command) - len(command.lstrip())
    if s.startswith("!"):
        name = s[1:].split()[0] if s[1:].split() else ""
        synth_remove(name, command)
        return
    # check_command(): before the first ';' there must be a name, a type and a field
    if len(s.split(";", 1)[0].split()) < 3:
        raise SynthError("INVALID_CMD", 0, command)
    name, fields = _parse(command, s, off)
    synth_create(name, fields, command)


def synth_create(name: str, fields: list[SynthField], command: str = "") -> SynthEvent:
    with _lock:
        if name in _synths or find_event_call(SYSTEM, name) is not None:
            raise SynthError("EVENT_EXISTS", command.find(name), command, _errno.EEXIST)
        ev = SynthEvent(name, fields)
        register_event_call(ev.call)
        _synths[name] = ev
        return ev


def synth_remove(name: str, command: str = "") -> None:
    with _lock:
        ev = _synths.get(name)
        if ev is None:
            e = FntraceError(f"no synthetic event {name!r}", pos=0, command=command)
            e.errno = _errno.ENOENT
            raise e
        if ev.in_use():
            e = FntraceError(f"synthetic event {name} is in use", pos=0, command=command)
            e.errno = _errno.EBUSY
            raise e
        unregister_event_call(ev.call)
        del _synths[name]


def synth_dyn_command(command: str) -> "EventCall | bool":
    """``s:[synthetic/]NAME fields`` and ``-:[synthetic/]NAME`` in dynamic_events: the
    event made, or True for a removal; False if the command is not a synthetic
    event's."""
    s = command.strip()
    off = len(command) - len(command.lstrip())
    if s.startswith("s:") or s.startswith("s "):
        body = s[2:]
        boff = off + 2
        if body.startswith("synthetic/"):
            body, boff = body[len("synthetic/"):], boff + len("synthetic/")
        elif "/" in body.split()[0] if body.split() else False:
            raise SynthError("INVALID_DYN_CMD", off, command)
        name, fields = _parse(command, body, boff)
        return synth_create(name, fields, command).call
    if s.startswith("-:"):
        name = s[2:].split()[0] if s[2:].split() else ""
        if name.startswith("synthetic/"):
            synth_remove(name[len("synthetic/"):], command)
            return True
        if name in _synths:
            synth_remove(name, command)
            return True
    return False


def synth_lines() -> list[str]:
    with _lock:
        return [ev.text() for ev in _synths.values()]


def synth_clear() -> None:
    """Every synthetic event not in use goes (a truncating write of synthetic_events)."""
    with _lock:
        busy = [n for n, ev in _synths.items() if ev.in_use()]
        if busy:
            e = FntraceError(f"synthetic event {busy[0]} is in use")
            e.errno = _errno.EBUSY
            raise e
        for n in list(_synths):
            unregister_event_call(_synths.pop(n).call)


def find_synth(name: str) -> EventCall | None:
    ev = _synths.get(name)
    return ev.call if ev is not None else None


def synth_fire(call: EventCall, args: list, tr) -> None:
    """An action's trace(): the synthetic event happens with ``args``, in its fields'
    order.  Its own triggers run (a hist on it), then it is recorded where enabled."""
    ev: SynthEvent = call.synth
    values = {f.name: v for f, v in zip(ev.fields, args)}
    call.fire(0, values, lambda: " ".join(f"{f.name}={f.value_text(v)}"
                                         for f, v in zip(ev.fields, args)), only_tr=tr)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
