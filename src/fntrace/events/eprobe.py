"""Event probes (kernel/trace/trace_eprobe.c): a new event made from the fields of an
existing one each time it fires.

    e[:[EGRP/][EEVENT]] GRP.EVENT [FETCHARGS] [if FILTER]   (GRP/EVENT also accepted)
    -:[EGRP/]EEVENT

``if FILTER`` (trace_eprobe_parse_filter) is a filter on the attached event's fields:
the probe fires only for the hits that pass it; listings end with it.

EGRP defaults to ``eprobes``, EEVENT to the attached event's name.  FETCHARGS, each
``[NAME=]FETCHARG[:TYPE]``: ``$FIELD`` (a field of the attached event, or a common
field: ``common_pid``, ``common_cpu``, ``comm``), ``$comm``, ``\\IMM``.  An unnamed
argument is named after its field when that is a C identifier (``$prev`` -> ``prev``),
else ``argN``.  Without a type an int is shown in hex (``nr=0x101``), anything else
as the fprobe fetchargs show it.

Line text (print_eprobe_event): ``EEVENT: (GRP.EVENT) NAME=VALUE ...``.

Tracepoint probes (fprobetrace.rst) are the same on a static event (static_events.py):

    t[:[GRP/][EVENT]] TRACEPOINT [FETCHARGS]      TRACEPOINT: gc_start, or gc:gc_start

GRP defaults to ``tracepoints``, EVENT to TRACEPOINT; FETCHARGS name the static
event's fields (its BTF), ``$argN`` its Nth field, ``$comm``, ``\\IMM``; values shown
as the fprobe fetchargs show them.  Line text ``EVENT: (TRACEPOINT) NAME=VALUE ...``.

Mechanism: while the event probe is enabled somewhere, a tap sits among the attached
event's files (like the kernel's eprobe trigger, which keeps the attached event in soft
mode): the attached event is hooked, its filter and enable state are its own, and
each time it fires the tap makes the probe's event from its values.  The attached
event cannot be removed meanwhile (EBUSY).
"""
from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from . import dynevent, fprobe_event as _fe
from .core import (EventCall, _lock as _core_lock, event_calls, find_event_call,
                   register_event_call)
from .filter import FilterParseError, parse_filter
from .probe_parse import (ERRORS, MAX_TRACE_ARGS, FetchArg, ProbeError, _Fail, _good_name,
                          _known_type, _parse_event_name, _parse_imm, _tokens, _type_colon)

__all__ = ["EPROBE_EVENT_SYSTEM", "TPROBE_EVENT_SYSTEM", "EprobeSpec", "EprobeEvent",
           "parse_eprobe_command", "parse_tprobe_command"]

EPROBE_EVENT_SYSTEM = "eprobes"
COMMON_FIELDS = ("common_pid", "common_cpu", "comm")


class EprobeSpec:
    def __init__(self, group: str, event: str, base: tuple[str, str], args: list[FetchArg],
                 command: str) -> None:
        self.group, self.event, self.base, self.args, self.command = group, event, base, args, command
        self.is_return = False
        self.kind = "e"
        self.filter = None          # e: ... if FILTER: on the attached event's fields
        self.filter_text = ""

    @property
    def symbol(self) -> str:
        if self.kind == "t":
            return self.base[1]
        return f"{self.base[0]}.{self.base[1]}"

    def normalized(self) -> str:
        head = f"{self.kind}:{self.group}/{self.event} {self.symbol}"
        tail = [f"if {self.filter_text}"] if self.filter_text else []
        return " ".join([head] + [a.definition() for a in self.args] + tail)


def _arg_parts(raw: str, p: int) -> tuple[str | None, str, str | None, int]:
    """One fetcharg token ``[NAME=]BODY[:TYPE]`` at offset p: (name, body, type, the
    body's offset), or the kernel's error at its caret."""
    eq = raw.find("=")
    if eq == 0:
        raise _Fail("NO_ARG_NAME", p)
    name, body, boff = (raw[:eq], raw[eq + 1:], eq + 1) if eq > 0 else (None, raw, 0)
    bp = p + boff
    colon = _type_colon(body)
    typ = None
    if colon >= 0:
        typ, body = body[colon + 1:], body[:colon]
        if not _known_type(typ):
            raise _Fail("BAD_TYPE", bp + colon + 1)
    if not body:
        raise _Fail("NO_ARG_BODY", bp)
    return name, body, typ, bp


def _head(cmd: str, toks: list, missing: str) -> tuple[str | None, str | None, str, int]:
    """``X[:[GRP/][EVENT]] TARGET``: (group, event, TARGET, its offset); the kernel's
    ``missing`` error when there is no TARGET."""
    head, hpos = toks[0]
    group = event = None
    if head[1:2] == ":":
        group, event = _parse_event_name(head[2:], hpos + 2)
    elif len(head) > 1:
        raise _Fail("BAD_EVENT_NAME", hpos + 1)
    if len(toks) < 2:
        raise _Fail(missing, len(cmd.rstrip()))
    return group, event, toks[1][0], toks[1][1]


def _args_of(toks: list) -> list:
    """The fetcharg tokens (the kernel counts them once the target is found)."""
    if len(toks) - 2 > MAX_TRACE_ARGS:
        raise _Fail("TOO_MANY_ARGS", toks[2 + MAX_TRACE_ARGS][1])
    return toks[2:]


def _arg_name(name: str | None, cand: str, k: int, p: int, used: set[str]) -> str:
    """The fetcharg's name: given, else its field's, else argN; unique in the probe."""
    if name is None:
        name = cand if _good_name(cand) else f"arg{k + 1}"
    elif not _good_name(name):
        raise _Fail("BAD_ARG_NAME", p)
    if name in used:
        raise _Fail("USED_ARG_NAME", p)
    used.add(name)
    return name


def parse_eprobe_command(cmd: str) -> EprobeSpec:
    try:
        return _parse(cmd)
    except _Fail as f:
        raise ProbeError(ERRORS[f.kind], pos=f.pos, command=cmd, kind=f.kind) from None


def _split_filter(toks: list) -> tuple[list, list]:
    """__trace_eprobe_create(): the words before a word ``if``, and from it on."""
    for i in range(2, len(toks)):
        if toks[i][0] == "if":
            return toks[:i], toks[i:]
    return toks, []


def _parse_filter(cmd: str, ftoks: list, base) -> tuple[Any, str]:
    """trace_eprobe_parse_filter(): the words after ``if``, joined by one space, are a
    filter on the attached event (its fields and the common ones)."""
    words = ftoks[1:]
    if not words:
        raise _Fail("NO_EP_FILTER", ftoks[0][1])
    text = " ".join(w for w, _ in words)
    try:
        flt = parse_filter(text, base.fields)
    except FilterParseError as e:
        # the caret at the word the filter's error is in, at the same place in it
        at, off = words[0][1], 0
        for w, p in words:
            if off > (e.pos or 0):
                break
            at = p + (e.pos or 0) - off
            off += len(w) + 1
        raise ProbeError(f"event filter parse error: {e.msg}", pos=at, command=cmd,
                         kind="BAD_FILTER") from None
    return flt, text


def _parse(cmd: str) -> EprobeSpec:
    toks, ftoks = _split_filter(_tokens(cmd))
    group, event, btok, bpos = _head(cmd, toks, "NO_EVENT_INFO")
    sep = btok.find(".")
    if sep < 0:
        sep = btok.find("/")
    if sep <= 0 or sep == len(btok) - 1:
        raise _Fail("NO_EVENT_INFO", bpos)
    bsys, bname = btok[:sep], btok[sep + 1:]
    base = find_event_call(bsys, bname)
    if base is None:
        raise _Fail("BAD_ATTACH_EVENT", bpos)
    group = group or EPROBE_EVENT_SYSTEM
    event = event or bname
    argtoks = _args_of(toks)
    fields = set(base.fields) | set(COMMON_FIELDS)
    args: list[FetchArg] = []
    used: set[str] = set()
    for k, (raw, p) in enumerate(argtoks):
        name, body, typ, bp = _arg_parts(raw, p)
        if body in ("$comm", "$COMM"):
            expr: tuple = ("field", "comm")
        elif body[:1] == "$":
            f = body[1:]
            if f not in fields:
                raise _Fail("BAD_ATTACH_ARG", bp)
            expr = ("field", f)
        elif body[:1] == "\\":
            expr = _parse_imm(body, bp)
        else:
            raise _Fail("BAD_FETCH_ARG", bp)
        name = _arg_name(name, body[1:] if body[:1] == "$" else body, k, p, used)
        args.append(FetchArg(name, expr, typ, body))
    spec = EprobeSpec(group, event, (bsys, bname), args, cmd)
    if ftoks:
        spec.filter, spec.filter_text = _parse_filter(cmd, ftoks, base)
    return spec


# -- t: probes on static events -----------------------------------------------------------

TPROBE_EVENT_SYSTEM = "tracepoints"


def _static_call(name: str):
    """A static event by its bare name (unique among the static events), or
    SYSTEM:EVENT; None if there is none."""
    from .static_events import SYSTEMS, static_calls
    calls = static_calls()
    sysname, sep, ev = name.partition(":")
    if sep:
        return next((c for c in calls if c.system == sysname and c.name == ev), None)
    found = [c for c in calls if c.name == name and c.system in SYSTEMS]
    return found[0] if len(found) == 1 else None


def parse_tprobe_command(cmd: str) -> EprobeSpec:
    try:
        return _parse_t(cmd)
    except _Fail as f:
        raise ProbeError(ERRORS[f.kind], pos=f.pos, command=cmd, kind=f.kind) from None


def _parse_t(cmd: str) -> EprobeSpec:
    """t[:[GRP/][EVENT]] TRACEPOINT [FETCHARGS]: FETCHARGS name the static event's
    fields (``generation``), ``$argN`` (its Nth field), ``$comm`` or ``\\IMM``."""
    toks = _tokens(cmd)
    group, event, tp, tpos = _head(cmd, toks, "NO_TRACEPOINT")
    base = _static_call(tp)
    if base is None:
        raise _Fail("NO_TRACEPOINT", tpos)
    group = group or TPROBE_EVENT_SYSTEM
    if event is None:       # fprobetrace.rst: TRACEPOINT, "_TRACEPOINT" if it starts with a digit
        event = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_"
                        for c in base.name)[:63]
        if event[:1].isdigit():
            event = "_" + event[:62]
    fields = list(base.fields)
    args: list[FetchArg] = []
    used: set[str] = set()
    for k, (raw, p) in enumerate(_args_of(toks)):
        name, body, typ, bp = _arg_parts(raw, p)
        text = body
        if body in ("$comm", "$COMM"):
            expr: tuple = ("field", "comm")
            cand = "comm"
        elif body.startswith("$arg"):
            tail = body[4:]
            if not tail.isdigit() or int(tail) == 0:
                raise _Fail("BAD_ARG_NUM" if tail.isdigit() else "BAD_VAR", bp)
            if int(tail) > len(fields):
                raise _Fail("NO_BTFARG", bp)
            cand = fields[int(tail) - 1]
            expr, text = ("field", cand), cand
        elif body[:1] == "\\":
            expr, cand = _parse_imm(body, bp), ""
        elif body[:1] == "$":
            raise _Fail("BAD_VAR", bp)
        else:
            if body not in fields:
                raise _Fail("NO_BTFARG", bp)
            expr, cand = ("field", body), body
        name = _arg_name(name, cand, k, p, used)
        args.append(FetchArg(name, expr, typ, text))
    spec = EprobeSpec(group, event, (base.system, base.name), args, cmd)
    spec.kind = "t"
    return spec


class _Tap:
    """Stands among the attached event's files; runs the probe when it fires."""

    enabled = False
    soft_disabled = True
    filter = None
    tr = None
    needs_common = True         # $common_pid, $comm may be asked for

    def __init__(self, ev: "EprobeEvent") -> None:
        self.ev = ev
        self.triggers = (self,)

    def run_triggers(self, values, frame) -> None:
        try:
            self.ev._fire(values, frame)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:
            pass


def _text(value, typ):
    if typ is None and type(value) is int:
        return value, f"0x{value & ((1 << 64) - 1):x}"
    return _fe.render(value, typ)


class EprobeEvent:
    def __init__(self, spec: EprobeSpec) -> None:
        self.spec = spec
        self.specs = [spec]
        self.call = _fe.probe_call(spec, self._hook, "(%s)")
        self.fp = True          # always bound: the attached event exists
        self.error = None
        self.want = False
        self._tap: _Tap | None = None
        self._base: EventCall | None = None

    @property
    def symbols(self) -> list[str]:
        return []

    def on_module_load(self, new) -> None:
        pass

    def _hook(self, on: bool) -> None:
        self.want = on
        with _core_lock:
            if on and self._tap is None:
                base = find_event_call(*self.spec.base)
                if base is None:
                    return
                self._tap, self._base = _Tap(self), base
                base.files.append(self._tap)  # type: ignore[arg-type]  # an EventFile look-alike
                base._update_hook()
            elif not on and self._tap is not None:
                base, tap = self._base, self._tap
                self._tap = self._base = None
                assert base is not None     # set with _tap
                if tap in base.files:
                    base.files.remove(tap)  # type: ignore[arg-type]  # an EventFile look-alike
                base._update_hook()

    def _fire(self, values, frame) -> None:
        flt = self.spec.filter
        if flt is not None and not flt(values):
            return
        rendered, vals = [], {}
        for a in self.spec.args:
            k = a.expr[0]
            try:
                v = values[a.expr[1]] if k == "field" else a.expr[1]
                v, t = _text(v, a.type) if self.spec.kind == "e" else _fe.render(v, a.type)
            except BaseException:
                v, t = None, _fe.FAULT
            vals[a.name] = v
            rendered.append(f"{a.name}={t}")
        head = f"({self.spec.symbol})"
        self.call.fire(0, vals, lambda: " ".join([head] + rendered), frame)


def _create(cmd: str) -> EprobeEvent:
    """An ``e`` or ``t`` command (dynevent.py dispatches them here)."""
    with dynevent.lock:
        parse = parse_eprobe_command if cmd.lstrip()[:1] == "e" else parse_tprobe_command
        spec = parse(cmd)
        key = (spec.group, spec.event)
        if key in dynevent.events or key in event_calls:
            raise ProbeError(ERRORS["EVENT_EXIST"], pos=0, command=cmd, kind="EVENT_EXIST")
        ev = EprobeEvent(spec)
        register_event_call(ev.call)
        dynevent.events[key] = ev
        return ev


dynevent.register_kind("et", _create)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
