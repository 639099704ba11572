"""Line probes, the kprobe of Python (kernel/trace/trace_kprobe.c), and kretprobes.

    p[:[GRP/][EVENT]] SYM[+LINES] [FETCHARGS]     a probe on a line of a function
    p[:[GRP/][EVENT]] FILE:LINE [FETCHARGS]       the same, the line named in its file
    p[:[GRP/][EVENT]] SYM[+0]%return [FETCHARGS]  a return probe
    r[MAXACTIVE][:[GRP/][EVENT]] SYM[+0] [FETCHARGS]  a return probe
    -:[GRP/]EVENT                                 remove (as for every dynamic event)

SYM is ``module.qualname``; ``SYM+N`` is the line N lines after the function's first
line (``co_firstlineno``: its ``def`` line, or its first decorator's), so ``+0`` is the
function's entry — the same +N the fprobe lines show.  ``FILE:LINE``: FILE is a path
(absolute or relative to the current directory) or a bare file name matched against
the last component of the file Python compiled the module from (``co_filename``); the
probe is then listed as the SYM+N it names.  GRP defaults to ``kprobes``, EVENT to
``p_<SYM>_<N>`` / ``r_<SYM>_0`` with every character that is not in a C identifier
replaced by ``_`` (the kernel's ``%c_%s_%ld``).

FETCHARGS are the fprobe ones (probe_parse.py); at a line they may also name the
function's local variables (read from the frame at that line without running the
program's code: core/fetch.py; a local not assigned yet is ``(fault)``).  $retval only
on a return probe.

A line without code of that function (blank, a comment, a docstring, an ``else:``, a
line of a nested function, beyond its end) is refused with the kernel's
BAD_INSN_BNDRY ("Probe point is not an instruction boundary"), the nearest lines that
have code named, the error_log caret at the ``+N`` (at LINE for FILE:LINE).

Mechanism.  ``+0`` and return probes are fprobes (fprobe_event.py), listed as p:/r:.
A line N > 0 fires each time the line is reached (every iteration of a loop):

  3.12+  only that code object gets sys.monitoring LINE events (arch/lines.py); other
         lines of it are turned off by DISABLE on their first hit, other functions get
         no event at all.
  3.11   a local trace function on that code's frames only: an fprobe on the function
         sets ``sys.settrace`` for the thread while it runs (and for nothing else) and
         the frame's ``f_trace``; functions it calls meanwhile cost one call of a trace
         function that returns None (and run in CPython's slower tracing mode), others
         nothing.  If the thread already has a trace function (a debugger, coverage) the
         probe misses that call rather than take it away.  ``sys.settrace`` raises its
         audit event each time the function is entered.

Line text (trace_kprobe.c print_kprobe_event): ``p_mod_f_3: (mod.f+3) x=1 total=10``.
"""
from __future__ import annotations

import os
import re
import sys
import threading

from ..core.records import DynFtrace, record_table
from ..core.regs import _param_names
from ..errors import FntraceError
from ..fprobe import Fprobe, register_fprobe_ips, unregister_fprobe
from . import dynevent, fprobe_event as _fe
from .core import event_calls, register_event_call
from .probe_parse import (ERRORS, MAX_TRACE_ARGS, ProbeError, RemoveSpec, _expand_meta_args,
                          _Fail, _kstrtoull, _parse_arg, _parse_event_name, _tokens,
                          _valid_symbol, parse_probe_command)

__all__ = ["KPROBE_EVENT_SYSTEM", "LineSpec", "LineProbeEvent",
           "kprobe_events_lines", "kprobe_events_clear", "code_lines"]

KPROBE_EVENT_SYSTEM = "kprobes"
HAVE_MONITORING = hasattr(sys, "monitoring")
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def _default_name(kind: str, symbol: str, offset: int) -> str:
    return _NOT_IDENT.sub("_", f"{kind}_{symbol}_{offset}")[:63]


def _err(kind: str, pos: int, cmd: str, extra: str = "") -> ProbeError:
    return ProbeError(ERRORS[kind] + extra, pos=pos, command=cmd, kind=kind)


# --------------------------------------------------------------------------------------
# Lines with code

def code_lines(code) -> list[int]:
    """The lines of ``code`` that have instructions of its own, after its first line."""
    first = code.co_firstlineno
    return sorted({ln for _, _, ln in code.co_lines() if ln is not None and ln > first})


def _nearest(code, line: int) -> str:
    lines = [code.co_firstlineno] + code_lines(code)
    below = [ln for ln in lines if ln < line]
    above = [ln for ln in lines if ln > line]
    first = code.co_firstlineno
    near = ([below[-1]] if below else []) + ([above[0]] if above else [])
    return ", ".join(f"+{ln - first} (line {ln})" for ln in near)


def _check_line(code, offset: int, cmd: str, pos: int, symbol: str) -> None:
    line = code.co_firstlineno + offset
    if offset > 0 and line not in code_lines(code):
        raise _err("BAD_INSN_BNDRY", pos, cmd,
                   f": no code of {symbol} at +{offset} (line {line}); "
                   f"nearest lines with code: {_nearest(code, line)}")


def _compiled_codes(path: str):
    """Every code object compiled from the file at ``path`` (None if unreadable)."""
    try:
        with open(path, "rb") as f:
            src = f.read()
        top = compile(src, path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return None
    out, todo = [], [top]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(k for k in c.co_consts if hasattr(k, "co_lines"))
    return out


def _source_code(symbol: str):
    """SYM's code object compiled from its module's source, for a module not imported
    yet (None if that cannot be known)."""
    from ..core import kallsyms
    found = kallsyms.find_function(symbol)
    if not isinstance(found, tuple):    # None or UNREADABLE
        return None
    src, info = found
    if not src.path:
        return None
    for c in _compiled_codes(src.path) or ():
        if c.co_qualname == info.qualname and c.co_firstlineno == info.line:
            return c
    return None


def _records(symbol: str) -> list[DynFtrace]:
    """SYM's records; the table is brought up to date first when it has none (a
    module imported since: in a served program, its own ``__main__``)."""
    recs = [r for r in record_table.records if r.name == symbol and r.code is not None]
    if not recs:
        record_table.refresh()
        recs = [r for r in record_table.records if r.name == symbol and r.code is not None]
    return recs


def _file_matches(want: str, filename: str) -> bool:
    if not filename:
        return False
    if os.sep not in want and "/" not in want:
        return os.path.basename(filename) == want
    return os.path.abspath(want) == os.path.abspath(filename)


def _resolve_file_line(path: str, line: int) -> tuple[str, int] | None:
    """FILE:LINE -> (SYM, N): the innermost function whose own code has the line (or
    whose def line it is); None if no module of that file is known."""
    record_table.refresh()
    best = None
    best_first = 0                      # best's code's co_firstlineno
    for r in record_table.records:
        c = r.code
        if c is None or c.co_name.startswith("<") or not _file_matches(path, c.co_filename):
            continue
        if line == c.co_firstlineno or line in code_lines(c):
            if best is None or c.co_firstlineno > best_first:
                best, best_first = r, c.co_firstlineno
    if best is None:
        # no function has code there: the one whose span holds it, for the error
        for r in record_table.records:
            c = r.code
            if c is None or not _file_matches(path, c.co_filename):
                continue
            if c.co_firstlineno <= line <= max([c.co_firstlineno] + code_lines(c)) + 1:
                if best is None or c.co_firstlineno > best_first:
                    best, best_first = r, c.co_firstlineno
    if best is not None:
        return best.name, line - best_first
    # not imported yet: the program's main script, or a file given by its path
    from ..core import kallsyms
    for modname, src in list(kallsyms.main_sources.items()):
        if src.path and _file_matches(path, src.path):
            return _from_source(modname, src.path, line)
    if (os.sep in path or "/" in path or os.path.exists(path)) and os.path.isfile(path):
        mod = _module_name_of(path)
        if mod is not None:
            return _from_source(mod, path, line)
    return None


def _module_name_of(path: str) -> str | None:
    """The module name a file on sys.path is imported as."""
    ap = os.path.abspath(path)
    stem = os.path.splitext(ap)[0]
    for d in sys.path:
        d = os.path.abspath(d or ".")
        if stem.startswith(d + os.sep):
            rel = stem[len(d) + 1:].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            if rel and all(p.isidentifier() for p in rel):
                return ".".join(rel)
    return None


def _from_source(modname: str, path: str, line: int) -> tuple[str, int] | None:
    codes = _compiled_codes(path)
    if not codes:
        return None
    best = None
    for c in codes:
        if c.co_name.startswith("<"):
            # the module body, and what is not a function one can name: a 3.11
            # comprehension (its own code object before PEP 709 inlined it), a lambda,
            # a generator expression; the line is then its enclosing function's
            continue
        if line == c.co_firstlineno or line in code_lines(c):
            if best is None or c.co_firstlineno > best.co_firstlineno:
                best = c
    if best is None:
        # no function has it: name the one whose span holds it, for the error
        for c in codes:
            if c.co_name != "<module>" and c.co_firstlineno <= line <= max(
                    [c.co_firstlineno] + code_lines(c)):
                if best is None or c.co_firstlineno > best.co_firstlineno:
                    best = c
        if best is None:
            return None
    return f"{modname}.{best.co_qualname}", line - best.co_firstlineno


# --------------------------------------------------------------------------------------
# The grammar

class LineSpec:
    """A parsed ``p SYM+N`` command (N > 0)."""

    def __init__(self, group: str, event: str, symbol: str, offset: int, args: list,
                 command: str, resolved: bool) -> None:
        self.group, self.event, self.symbol, self.offset = group, event, symbol, offset
        self.args, self.command, self.resolved = args, command, resolved
        self.is_return = False

    def normalized(self) -> str:
        head = f"p:{self.group}/{self.event} {self.symbol}+{self.offset}"
        return " ".join([head] + [a.definition() for a in self.args])


class _Listed:
    """A probe kept as an fprobe (+0, return probes), listed the kprobe way."""

    def __init__(self, kind: str, spec, offset_text: str) -> None:
        self.kind, self.spec, self.offset_text = kind, spec, offset_text

    @property
    def symbol(self) -> str:
        return self.spec.symbol

    def normalized(self) -> str:
        s = self.spec
        head = f"{self.kind}:{s.group}/{s.event} {s.symbol}{self.offset_text}"
        return " ".join([head] + [a.definition() for a in s.args])


def _parse_location(tok: str, spos: int, cmd: str):
    """SYM[+N][%return] or FILE:LINE -> (symbol, offset, is_return, pos of +N)."""
    is_return = False
    pct = tok.find("%")
    if pct >= 0:
        if tok[pct:] != "%return":
            raise _Fail("BAD_ADDR_SUFFIX", spos + pct)
        is_return, tok = True, tok[:pct]
    colon = tok.rfind(":")
    if colon >= 0:
        path, lnum = tok[:colon], tok[colon + 1:]
        n = _kstrtoull(lnum) if lnum[:1].isdigit() else None
        if not path or n is None:
            raise _Fail("BAD_PROBE_ADDR", spos + colon + 1)
        found = _resolve_file_line(path, n)
        if found is None:
            raise _Fail("FILE_NOT_FOUND", spos)
        return found[0], found[1], is_return, spos + colon + 1
    plus = tok.find("+")
    off: int | None
    sym, off, opos = tok, 0, spos
    if plus >= 0:
        sym, offs = tok[:plus], tok[plus + 1:]
        off = _kstrtoull(offs) if offs[:1].isdigit() else None
        if off is None:
            raise _Fail("BAD_PROBE_ADDR", spos)
        opos = spos + plus
    if not _valid_symbol(sym):
        raise _Fail("BAD_PROBE_ADDR", spos)
    return sym, off, is_return, opos


def parse_kprobe_command(cmd: str):
    """A ``p``/``r`` command -> (kind, spec): kind "line" (LineSpec) or "fprobe" (a
    ProbeSpec for an fprobe at the entry or the return, and its listing).  ProbeError
    with the kernel's kind and caret."""
    try:
        return _parse(cmd)
    except _Fail as f:
        raise ProbeError(ERRORS[f.kind], pos=f.pos, command=cmd, kind=f.kind) from None


def _parse(cmd: str):
    toks = _tokens(cmd)
    head, hpos = toks[0]
    kind = head[0]
    rest = head[1:]
    colon = rest.find(":")
    maxact = rest if colon < 0 else rest[:colon]
    if maxact:
        if kind == "p":
            raise _Fail("BAD_MAXACT_TYPE", hpos + 1)
        if not maxact.isdigit() or not 0 < int(maxact) < 1 << 32:
            raise _Fail("BAD_MAXACT", hpos + 1)
    group = event = None
    if colon >= 0:
        group, event = _parse_event_name(rest[colon + 1:], hpos + 1 + colon + 1)
    group = group or KPROBE_EVENT_SYSTEM
    if len(toks) < 2:
        raise ProbeError("No symbol to probe", pos=len(cmd.rstrip()), command=cmd)
    tok, spos = toks[1]
    symbol, offset, is_return, opos = _parse_location(tok, spos, cmd)
    is_return = is_return or kind == "r"
    if is_return and offset:
        raise _Fail("BAD_RETPROBE", spos)
    if event is None:
        event = _default_name("r" if is_return else "p", symbol, offset)
    args_start = spos + len(tok)
    if is_return or offset == 0:
        # an fprobe: parse the same arguments as ``f`` would
        pre = f"f:{group}/{event} {symbol}" + ("%return" if is_return else "")
        fcmd = pre + cmd[args_start:]
        try:
            spec = parse_probe_command(fcmd, _fe.resolve_symbol)
        except ProbeError as e:
            p = e.pos or 0
            p = p - len(pre) + args_start if p >= len(pre) else spos
            raise ProbeError(e.msg, pos=p, command=cmd, kind=e.kind) from None
        listed = _Listed("r" if kind == "r" else "p", spec,
                         ("%return" if kind == "p" else "") if is_return else "+0")
        return "fprobe", (spec, listed)
    # a line
    recs = _records(symbol)
    code = recs[0].code if recs else None
    resolved = True
    if code is None:
        code = _source_code(symbol)
        if code is None:
            found = _fe.resolve_symbol(symbol)
            if found is None:
                raise _Fail("BAD_PROBE_ADDR", spos)
            resolved = False
    if code is not None:
        _check_line(code, offset, cmd, opos, symbol)
    argtoks = toks[2:]
    params: list[str] | None
    names: list[str] | None
    if code is not None:
        params = list(_param_names(code))
        names = params + [v for v in (code.co_varnames + code.co_cellvars + code.co_freevars)
                          if v not in params]
    else:
        params = names = None
    items = _expand_meta_args(argtoks, params)
    if len(items) > MAX_TRACE_ARGS:
        raise _Fail("TOO_MANY_ARGS", argtoks[0][1])
    used: set[str]
    args, used, memory = [], set(), None
    for k, (raw, p, generated) in enumerate(items):
        if raw is None:
            raise _Fail("NOFENTRY_ARGS", p)      # $arg* before the function is known
        arg, mem = _parse_arg(raw, p, k, generated, names, None, False, used)
        args.append(arg)
        memory = memory or mem
    if memory is not None:
        raise memory
    return "line", LineSpec(group, event, symbol, offset, args, cmd, resolved)


# --------------------------------------------------------------------------------------
# The events

class KprobeFprobeEvent(_fe.FprobeEvent):
    """``p SYM+0`` and return probes: an fprobe event listed as p:/r:."""

    def __init__(self, spec, listed: _Listed) -> None:
        super().__init__(spec)
        self.specs = [listed]
        self.call.definition = listed.normalized()

    def add_probe(self, spec) -> None:  # pragma: no cover - refused before
        raise FntraceError("a kprobe event has one probe point")


class LineProbeEvent:
    """One ``p SYM+N`` event: its EventCall and, while enabled, its line hooks."""

    def __init__(self, spec: LineSpec) -> None:
        self.spec = spec
        self.specs = [spec]
        self.call = _fe.probe_call(spec, self._hook)
        self.fp: bool | None = None     # not None while bound (what fprobe_event.py looks at)
        self.error: str | None = None
        self.nhit = self.nmissed = 0        # kprobe_profile
        self.want = False
        self._hooks: list[tuple] = []       # (record, line)

    @property
    def symbols(self) -> list[str]:
        return [self.spec.symbol]

    def _hook(self, on: bool) -> None:
        self.want = on
        if on:
            self._bind()
        else:
            self._unbind()

    def _bind(self) -> None:
        if not self.want or self.fp is not None:
            return
        recs = _records(self.spec.symbol)
        if not recs:
            return                          # bound when its module is imported
        spec = self.spec
        if not spec.resolved:
            try:
                kind, spec = parse_kprobe_command(spec.command)
            except ProbeError as e:
                self.error = f"{e.msg} (at column {(e.pos or 0) + 1} of {self.spec.command!r})"
                return
            self.spec = spec
            self.specs = [spec]
            self.call.fields = {a.name: _fe._field_kind(a.type) for a in spec.args}
        hooked = []
        for rec in recs:
            code = rec.code
            assert code is not None     # _records() keeps those with code
            line = code.co_firstlineno + spec.offset
            if line not in code_lines(code):
                self.error = (f"no code at {spec.symbol}+{spec.offset}; nearest lines with "
                              f"code: {_nearest(code, line)}")
                continue
            _attach(rec, line, self._fire)
            hooked.append((rec, line))
        if hooked:
            self._hooks = hooked
            self.fp = True

    def _unbind(self) -> None:
        hooks, self._hooks = self._hooks, []
        for rec, line in hooks:
            _detach(rec, line, self._fire)
        self.fp = None

    def on_module_load(self, new: list[DynFtrace]) -> None:
        if self.want and any(r.name == self.spec.symbol for r in new):
            self._unbind()
            self._bind()

    def _fire(self, frame, line: int) -> None:
        self.nhit += 1
        rendered: list[str] = []
        vals = {}
        for a in self.spec.args:
            try:
                v, t = _fe.render(_fe._fetch(a.expr, frame, None), a.type)
            except BaseException:
                v, t = None, _fe.FAULT
            vals[a.name] = v
            rendered.append(f"{a.name}={t}")
        rec = record_table.by_code.get(id(frame.f_code))
        name = rec.name if rec is not None else self.spec.symbol
        ip = rec.ip if rec is not None else 0
        head = f"({name}+{self.spec.offset})"
        self.call.fire(ip, vals, lambda: " ".join([head] + rendered), frame)


# --------------------------------------------------------------------------------------
# Hooking a line: sys.monitoring (3.12+) or a local trace function (3.11)

def _safe(handler):
    ev = handler.__self__

    def run(frame, line):
        try:
            handler(frame, line)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:
            ev.nmissed += 1         # contained, and shown in kprobe_profile
    return run


_wrapped: dict[tuple, object] = {}


def _attach(rec: DynFtrace, line: int, handler) -> None:
    w = _wrapped.setdefault((id(handler.__self__), rec.ip, line), _safe(handler))
    if HAVE_MONITORING:
        from ..arch.lines import add_line_hook
        add_line_hook(rec.code, line, w)
    else:
        _Tracer311.add(rec, line, w)


def _detach(rec: DynFtrace, line: int, handler) -> None:
    w = _wrapped.pop((id(handler.__self__), rec.ip, line), None)
    if w is None:
        return
    if HAVE_MONITORING:
        from ..arch.lines import remove_line_hook
        remove_line_hook(rec.code, line, w)
    else:
        _Tracer311.remove(rec, line, w)


class _Tracer311:
    """3.11: per probed code object, an fprobe that turns on a local trace function for
    its frames while they run (see the module docstring)."""

    lock = threading.RLock()
    lines: dict[int, dict[int, tuple]] = {}     # id(code) -> {line: handlers}
    probes: dict[int, Fprobe] = {}              # rec.ip -> its fprobe
    tls = threading.local()
    missed = 0

    @classmethod
    def add(cls, rec: DynFtrace, line: int, h) -> None:
        with cls.lock:
            key = id(rec.code)
            d = dict(cls.lines.get(key, {}))
            d[line] = d.get(line, ()) + (h,)
            cls.lines[key] = d
            if rec.ip not in cls.probes:
                fp = Fprobe(cls._enter, cls._leave, 1, name=f"line probes of {rec.name}",
                            entry_data_type=lambda n: [None] * n)
                register_fprobe_ips(fp, [rec])
                cls.probes[rec.ip] = fp

    @classmethod
    def remove(cls, rec: DynFtrace, line: int, h) -> None:
        with cls.lock:
            key = id(rec.code)
            d = dict(cls.lines.get(key, {}))
            hs = tuple(x for x in d.get(line, ()) if x is not h)
            if hs:
                d[line] = hs
            else:
                d.pop(line, None)
            if d:
                cls.lines[key] = d
                return
            cls.lines.pop(key, None)
            fp = cls.probes.pop(rec.ip, None)
            if fp is not None:
                unregister_fprobe(fp)

    @staticmethod
    def _global(frame, event, arg):
        return None

    @classmethod
    def _local(cls, frame, event, arg):
        if event == "line":
            d = cls.lines.get(id(frame.f_code))
            if d is not None:
                hs = d.get(frame.f_lineno)
                if hs:
                    for h in hs:
                        h(frame, frame.f_lineno)
        return cls._local

    @classmethod
    def _enter(cls, fp, ip, ret_ip, fregs, data):
        tls = cls.tls
        depth = getattr(tls, "depth", 0)
        if depth == 0:
            prev = sys.gettrace()
            if prev is not None:
                cls.missed += 1          # the thread's trace function is someone else's
                return True              # no exit handler for this call
            sys.settrace(cls._global)
        tls.depth = depth + 1
        frame = fregs.frame
        frame.f_trace_lines = True
        frame.f_trace = cls._local
        return False

    @classmethod
    def _leave(cls, fp, ip, ret_ip, fregs, data):
        tls = cls.tls
        depth = getattr(tls, "depth", 1) - 1
        tls.depth = depth
        try:
            fregs.frame.f_trace = None
        except Exception:
            pass
        if depth == 0 and sys.gettrace() is cls._global:
            sys.settrace(None)


# --------------------------------------------------------------------------------------
# Commands

def _create(cmd: str):
    """A ``p``/``r`` command (dynevent.py dispatches them here): a line probe, or an
    fprobe listed as a kprobe for ``+0`` and return probes."""
    with dynevent.lock:
        kind, spec = parse_kprobe_command(cmd)
        if kind == "fprobe":
            spec, listed = spec
        key = (spec.group, spec.event)
        if key in dynevent.events or key in event_calls:
            raise ProbeError(ERRORS["EVENT_EXIST"], pos=0, command=cmd, kind="EVENT_EXIST")
        ev = KprobeFprobeEvent(spec, listed) if kind == "fprobe" else LineProbeEvent(spec)
        register_event_call(ev.call)
        dynevent.events[key] = ev
        if not _records(spec.symbol):
            record_table.refresh()
        if not _records(spec.symbol):
            record_table.set_scope("fprobe_events", _fe.unbound_scope)
            from ..core.ops import sync_discovery
            sync_discovery()
        return ev


dynevent.register_kind("pr", _create)


def _is_kprobe(ev) -> bool:
    return isinstance(ev, (LineProbeEvent, KprobeFprobeEvent))


def kprobe_events_lines() -> list[str]:
    """``cat kprobe_events``: the p:/r: probes only."""
    return dynevent.lines(_is_kprobe)


def kprobe_profile_read() -> str:
    """``cat kprobe_profile`` (probes_profile_seq_show): each p:/r: event's name,
    hits and misses."""
    with dynevent.lock:
        evs = [ev for ev in dynevent.events.values() if _is_kprobe(ev)]
    return "".join(f"  {ev.call.name:<44} {ev.nhit:15d} {ev.nmissed:15d}\n" for ev in evs)


def kprobe_events_create(cmd: str):
    """A ``kprobe_events`` write: p:, r: and -: only."""
    toks = _tokens(cmd)
    c = toks[0][0][0] if toks else ""
    if c == "-":
        spec = parse_probe_command(cmd, _fe.resolve_symbol)
        if isinstance(spec, RemoveSpec):
            ev = next((e for (g, n), e in dynevent.events.items()
                       if n == spec.event and (spec.group is None or g == spec.group)), None)
            if ev is not None and not _is_kprobe(ev):
                err = FntraceError(f"{spec.event} is not a kprobe event", pos=0, command=cmd)
                err.errno = 2
                raise err
        return dynevent.create(cmd)
    if c not in ("p", "r"):
        raise ProbeError(f"Unknown probe type '{c}' (p or r)", pos=0, command=cmd)
    return dynevent.create(cmd)


def kprobe_events_clear() -> None:
    """``echo > kprobe_events``: remove every p:/r: probe (EBUSY if one is in use)."""
    dynevent.clear(_is_kprobe)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
