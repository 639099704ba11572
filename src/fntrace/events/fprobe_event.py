"""fprobe events: dynamic events defined by ``f ...`` commands (kernel/trace/trace_fprobe.c).

    echo 'f:myprobe shop.cart.Cart.add_item qty=$arg2 name=product.name' >> dynamic_events
    echo 'f shop.pricing.price_line%return $retval' >> dynamic_events

Each event is an EventCall backed by an Fprobe on the named function: an entry probe
has only an entry handler (a plain ops, no shadow-stack frame); a ``%return`` probe has
an exit handler, and its ``$argN``/parameter fetchargs are taken at entry and kept in the
call's entry data.  A SYM that is not imported yet is bound when its module loads.

Line text (trace_fprobe.c print_fentry_event / print_fexit_event):
    work__entry: (__main__.work+0) a=1 b='x'
    work__exit: (__main__.main+3 <- __main__.work) arg1=3
where ``+N`` is the line offset from the function's first line (the kernel's +offset).
"""
from __future__ import annotations

from types import FunctionType
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from ..core import fetch, kallsyms
from ..core.ops import sync_discovery
from ..core.records import DynFtrace, record_table
from ..core.regs import _param_names
from ..fprobe import Fprobe, register_fprobe_ips, unregister_fprobe
from ..core.task import thread_cpu, thread_info
from . import dynevent
from .core import EventCall, event_calls, register_event_call

__all__ = ["FprobeEvent", "resolve_symbol", "unbound_events", "unbound_scope"]


MAX_TEXT = 128
FAULT = "(fault)"

_INT_TYPES = {"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64",
              "x8", "x16", "x32", "x64", "len", "bool"}


def _field_kind(t: str | None) -> str:
    if t in _INT_TYPES:
        return "int"
    if t in ("string", "repr", "symbol", "char"):
        return "str"
    return "any"


def _bounded(s: str) -> str:
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT - 3] + "..."


def _base_int(value: Any) -> int | None:
    """An int's value without calling the program's __index__/__int__ (an IntEnum
    member's, say, read at the C level); None for anything else."""
    t = type(value)
    if t is int or t is bool:
        return int(value)
    if issubclass(t, int):
        return int.__int__(value)
    if fetch.settings.allow_program_code and hasattr(value, "__index__"):
        return value.__index__()
    return None


def _truth(value: Any) -> int | None:
    t = type(value)
    if t in (bool, int, float, str, bytes, list, tuple, dict, set, frozenset, type(None)):
        return int(bool(value))
    if fetch.settings.allow_program_code:
        return int(bool(value))
    mro = type.__dict__["__mro__"].__get__(t)
    if not any("__bool__" in type.__dict__["__dict__"].__get__(k)
               or "__len__" in type.__dict__["__dict__"].__get__(k) for k in mro[:-1]):
        return 1                                # an object with neither is true
    return None


def render(value: Any, typ: str | None) -> tuple[Any, str]:
    """(value for filters, text) of one fetched value; never raises an Exception, and
    runs none of the program's code unless asked (the ``repr`` type; ``--repr``)."""
    try:
        if typ is None:
            return value, fetch.value_repr(value)
        if typ == "repr":
            # explicitly the value's own __repr__: the program's code
            s = repr(value)
            return value, _bounded(s if type(s) is str else fetch.value_repr(value))
        if typ == "string":
            if issubclass(type(value), str):
                s = str.__str__(value)
            elif type(value) in (int, float, bool, complex, type(None)):
                s = str(value)                  # C-level for the built-in scalars
            elif fetch.settings.allow_program_code:
                s = str(value)
            else:
                return None, FAULT
            return s, '"' + _bounded(s).replace('"', '\\"') + '"'
        if typ == "len":
            t = type(value)
            if t in (str, bytes, bytearray, list, tuple, dict, set, frozenset, range) \
                    or fetch.settings.allow_program_code:
                n = len(value)
                return n, str(n)
            return None, FAULT
        if typ == "bool":
            b = _truth(value)
            return (None, FAULT) if b is None else (b, str(b))
        if typ == "char":
            i = _base_int(value)
            if i is not None:
                s = chr(i)
            elif issubclass(type(value), str):
                s = str.__str__(value)[:1]
            else:
                return None, FAULT
            return s, f"'{s}'"
        if typ == "symbol":
            t = type(value)
            if t is FunctionType:
                mod, qn = value.__module__, value.__qualname__
            elif issubclass(t, type):
                mod = type.__dict__["__module__"].__get__(value)
                qn = type.__dict__["__qualname__"].__get__(value)
            else:
                s = fetch.value_repr(value)
                return s, s
            s = f"{mod}.{qn}" if isinstance(mod, str) and mod else str(qn)
            return s, s
        value = _base_int(value)
        if value is None:
            return None, FAULT
        bits = int(typ[1:])
        mask = (1 << bits) - 1
        if typ[0] == "x":
            return value, f"0x{value & mask:x}"
        if typ[0] == "u":
            v = value & mask
            return v, str(v)
        v = value & mask
        if v >> (bits - 1):
            v -= 1 << bits
        return v, str(v)
    except Exception:
        return None, FAULT


def _frame_pos(frame) -> str:
    """``func+N``: the frame's function and its line offset from the def line."""
    code = frame.f_code
    rec = record_table.by_code.get(id(code))
    name = rec.name if rec is not None else code.co_qualname
    lineno = frame.f_lineno or code.co_firstlineno
    return f"{name}+{max(0, lineno - code.co_firstlineno)}"


def _fetch(expr: tuple, frame, retval: Any) -> Any:
    """One fetcharg's value.  Locals are read without the f_locals snapshot, attributes
    and items without the program's descriptors (core/fetch.py): a Fault otherwise."""
    k = expr[0]
    if k == "param":
        return fetch.frame_var(frame, expr[1])
    if k == "arg":
        names = _param_names(frame.f_code)
        return fetch.frame_var(frame, names[expr[1] - 1])
    if k == "retval":
        return retval
    if k == "comm":
        return thread_info[thread_cpu()][1]
    if k == "stack":
        f = frame.f_back
        for _ in range(expr[1]):
            if f is None:
                break
            f = f.f_back
        if f is None:
            raise LookupError("no such caller")
        rec = record_table.by_code.get(id(f.f_code))
        return rec.name if rec is not None else f.f_code.co_qualname
    if k == "stackdepth":
        n, f = 0, frame
        while f is not None:
            n += 1
            f = f.f_back
        return n
    if k == "imm":
        return expr[1]
    if k == "attr":
        return fetch.static_getattr(_fetch(expr[1], frame, retval), expr[2])
    if k == "item":
        return fetch.static_getitem(_fetch(expr[1], frame, retval), expr[2])
    raise LookupError(f"cannot fetch {k}")


def _uses_entry(expr: tuple) -> bool:
    k = expr[0]
    if k in ("param", "arg"):
        return True
    if k in ("attr", "item"):
        return _uses_entry(expr[1])
    return False


def probe_call(spec, hook, head: str = "(%lx)", refs: tuple = ("REC->__probe_ip",)) -> EventCall:
    """The EventCall of a probe event (f, p, r, e, t): one field per fetcharg, the
    kernel's print fmt (the probe's address(es), then NAME=%s per fetcharg)."""
    fmt = " ".join([head] + [f"{a.name}=%s" for a in spec.args])
    print_fmt = f'"{fmt}", ' + ", ".join([*refs] + [f"REC->{a.name}" for a in spec.args])
    return EventCall(spec.group, spec.event, {a.name: _field_kind(a.type) for a in spec.args},
                     print_fmt=print_fmt, hook=hook, definition=spec.normalized())


class FprobeEvent:
    """One ``f`` dynamic event: its spec, its EventCall and (while hooked) its Fprobe."""

    def __init__(self, spec) -> None:
        self.spec = spec
        if spec.is_return:
            self.call = probe_call(spec, self._hook, "(%lx <- %lx)",
                                   ("REC->__probe_func", "REC->__probe_ret_ip"))
        else:
            self.call = probe_call(spec, self._hook)
        self.fp: Fprobe | None = None
        self.error: str | None = None
        self.nhit = 0                  # kprobe_profile's hits
        self.specs = [spec]            # one per probe point (same event, same args)
        self.want = False
        self.bound: list[DynFtrace] = []
        # fetchargs taken at entry on a %return probe
        self.entry_args = [i for i, a in enumerate(spec.args)
                           if spec.is_return and _uses_entry(a.expr)]

    @property
    def symbols(self) -> list[str]:
        return [sp.symbol for sp in self.specs]

    def add_probe(self, spec) -> None:
        """Another function for the same event (same kind, same arguments)."""
        self.specs.append(spec)
        self.call.definition = "\n".join(sp.normalized() for sp in self.specs)
        if self.fp is not None:
            fp, self.fp = self.fp, None
            unregister_fprobe(fp)
        self._bind()

    # -- hooking ------------------------------------------------------------------------
    def _targets(self) -> list[DynFtrace]:
        names = set(self.symbols)
        return [r for r in record_table.records if r.name in names]

    def _hook(self, on: bool) -> None:
        self.want = on
        if on:
            self._bind()
        elif self.fp is not None:
            fp, self.fp = self.fp, None
            unregister_fprobe(fp)

    def _bind(self) -> None:
        if not self.want or self.fp is not None:
            return
        recs = self._targets()
        if not recs:
            return                      # bound when the module is imported
        if not getattr(self.spec, "resolved", True):
            # Defined before its module was imported: parameter names and $arg* can
            # only be checked now.  (Same event name: explicit, or from SYM.)
            from .probe_parse import ProbeError, ProbeSpec, parse_probe_command
            try:
                spec = parse_probe_command(self.spec.command, resolve_symbol)
            except ProbeError as e:
                self.error = f"{e.msg} (at column {(e.pos or 0) + 1} of {self.spec.command!r})"
                return
            assert isinstance(spec, ProbeSpec)      # the same f command, parsed before
            self.spec = spec
            self.call.fields = {a.name: _field_kind(a.type) for a in spec.args}
            self.call.definition = spec.normalized()
            self.entry_args = [i for i, a in enumerate(spec.args)
                               if spec.is_return and _uses_entry(a.expr)]
        if self.spec.is_return:
            n = len(self.entry_args)
            fp = Fprobe(self._entry_capture if n else None, self._exit, n,
                        name=self.call.full_name, entry_data_type=lambda k: [None] * k)
        else:
            fp = Fprobe(self._entry, None, name=self.call.full_name)
        register_fprobe_ips(fp, recs)
        self.fp = fp
        self.bound = recs

    def on_module_load(self, new: list[DynFtrace]) -> None:
        names = set(self.symbols)
        if self.want and any(r.name in names for r in new):
            if self.fp is not None:
                fp, self.fp = self.fp, None      # rebind: a further probe point appeared
                unregister_fprobe(fp)
            self._bind()

    # -- firing ------------------------------------------------------------------------
    def _values(self, frame, retval, entry_data, rendered: list) -> dict:
        vals = {}
        for i, a in enumerate(self.spec.args):
            if entry_data is not None and i in self.entry_args:
                v, t = entry_data[self.entry_args.index(i)]
            else:
                try:
                    x = _fetch(a.expr, frame, retval)
                    if a.type is None:
                        # its text only if a line is written (a hist trigger
                        # alone needs none)
                        vals[a.name] = x
                        rendered.append((a.name, x))
                        continue
                    v, t = render(x, a.type)
                except BaseException:
                    v, t = None, FAULT
            vals[a.name] = v
            rendered.append(f"{a.name}={t}")
        return vals

    @property
    def nmissed(self) -> int:
        """kprobe_profile's misses: calls the probe could not serve (recursion, no
        shadow-stack room) and handlers that failed."""
        fp = self.fp
        return fp.nmissed + fp.nerrors if fp is not None else 0

    def _entry(self, fp, ip, ret_ip, fregs, data) -> None:
        self.nhit += 1
        frame = fregs.frame
        rendered: list[str] = []
        vals = self._values(frame, None, None, rendered)
        head = f"({ip.name}+0)"
        self.call.fire(ip.ip, vals, lambda: _line(head, rendered), frame)

    def _entry_capture(self, fp, ip, ret_ip, fregs, data) -> None:
        frame = fregs.frame
        for j, i in enumerate(self.entry_args):
            a = self.spec.args[i]
            try:
                data[j] = render(_fetch(a.expr, frame, None), a.type)
            except BaseException:
                data[j] = (None, FAULT)

    def _exit(self, fp, ip, ret_ip, fregs, data) -> None:
        self.nhit += 1
        frame = fregs.frame
        rendered: list[str] = []
        vals = self._values(frame, fregs.retval, data, rendered)
        from ..core.dispatch import caller_frame
        back = caller_frame(frame)
        where = _frame_pos(back) if back is not None else "0"
        head = f"({where} <- {ip.name})"
        self.call.fire(ip.ip, vals, lambda: _line(head, rendered), frame)


def _line(head: str, rendered: list) -> str:
    """The event's text: ``head`` and each fetcharg's NAME=TEXT (a (name, value) pair
    is rendered here, only when the line is written)."""
    out = [head]
    for r in rendered:
        out.append(r if r.__class__ is str else f"{r[0]}={render(r[1], None)[1]}")
    return " ".join(out)


def _on_module_load(module: str, new: list[DynFtrace]) -> None:
    with dynevent.lock:
        for ev in list(dynevent.events.values()):
            ev.on_module_load(new)


record_table.listeners.append(_on_module_load)


def resolve_symbol(symbol: str):
    """The parser's Resolver (probe_parse.Resolver): SYM's FuncProto — its parameter
    names, and the types its annotations name in its source (btf.func_proto, which
    never evaluates them) — UNRESOLVED if its module is not imported yet, None if it
    does not exist."""
    from .btf import func_proto
    from .probe_parse import UNRESOLVED
    for attempt in range(2):
        if attempt:
            record_table.refresh()
        for r in record_table.records:
            if r.name == symbol and r.code is not None:
                return func_proto(r.code, r.module)
    # Not loaded: the module's source says (core/kallsyms.py), as the kernel's BTF
    # would for a module not loaded yet.
    found = kallsyms.find_function(symbol)
    if found is kallsyms.UNREADABLE:
        return UNRESOLVED
    if not isinstance(found, tuple):    # None; the checker does not narrow UNREADABLE
        return None
    src, info = found
    return _source_proto(src, info)


def _source_proto(src, info):
    from .btf import SourceModule
    text = None
    if src.path:
        try:
            with open(src.path, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read()
        except OSError:
            text = None
    if text is not None:
        try:
            return SourceModule(text, src.name).proto(info.qualname, info.line, info.params)
        except Exception:
            pass
    return list(info.params)


def _create(cmd: str) -> FprobeEvent | None:
    """An ``f`` command (define) or ``-:`` (remove), and any command no other kind
    takes (parse_probe_command says what is wrong with it).  ProbeError on a bad
    command, with the kernel's error kind and caret position; nothing changes then."""
    from .probe_parse import ERRORS, ProbeError, RemoveSpec, parse_probe_command
    with dynevent.lock:
        spec = parse_probe_command(cmd, resolve_symbol)
        if isinstance(spec, RemoveSpec):
            dynevent.remove(spec.group, spec.event, cmd)
            return None
        key = (spec.group, spec.event)
        old = dynevent.events.get(key)
        if old is not None:
            # trace_probe_compare_arg_type / append_trace_fprobe: another probe for an
            # existing event must be of the same kind with the same arguments.
            kind, pos = None, 0
            if old.spec.is_return != spec.is_return:
                kind = "DIFF_PROBE_TYPE"
            else:
                for i, (a, b) in enumerate(zip(old.spec.args + [None] * len(spec.args),
                                               spec.args + [None] * len(old.spec.args))):
                    if a is None and b is None:
                        break
                    # trace_probe_compare_arg_type: names and types; here also what
                    # is fetched (one fetch per event), however it is written
                    if a is None or b is None or (a.name, a.type, a.expr) != (b.name, b.type, b.expr):
                        kind, pos = "DIFF_ARG_TYPE", _arg_pos(cmd, i)
                        break
                if kind is None and spec.symbol in old.symbols:
                    kind = "SAME_PROBE"
            if kind is not None:
                e = ProbeError(ERRORS.get(kind, kind), pos=pos, command=cmd)
                e.kind = kind
                raise e
            old.add_probe(spec)
            return old
        if key in event_calls:
            e = ProbeError(ERRORS.get("EVENT_EXIST", "EVENT_EXIST"), pos=0, command=cmd)
            e.kind = "EVENT_EXIST"
            raise e
        ev = FprobeEvent(spec)
        register_event_call(ev.call)
        dynevent.events[key] = ev
        if not ev._targets():
            # bound when its module loads: the module-load notifier must look there
            record_table.set_scope("fprobe_events", unbound_scope)
            sync_discovery()
        return ev


def unbound_scope(name: str) -> bool:
    """The modules an event waiting for its function may find it in."""
    prefix = name + "."
    return any(ev.fp is None and any(s.startswith(prefix) for s in ev.symbols)
               for ev in list(dynevent.events.values()))


def _arg_pos(cmd: str, i: int) -> int:
    """Where the i-th fetcharg starts in a command (after 'f[:...]' and SYM)."""
    import re
    words = [m.start() for m in re.finditer(r"\S+", cmd)]
    k = i + 2
    return words[k] if k < len(words) else len(cmd)


def unbound_events() -> list[str]:
    """Enabled events whose function never appeared."""
    with dynevent.lock:
        return [ev.call.full_name + " (" + ev.spec.symbol + ")"
                + (f": {ev.error}" if ev.error else ": the function never appeared")
                for ev in dynevent.events.values() if ev.want and ev.fp is None]


dynevent.register_kind("f-", _create, default=True)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
