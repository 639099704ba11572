"""Hist triggers: events aggregated where they happen (kernel/trace/trace_events_hist.c,
Documentation/trace/histogram.rst).

    hist:keys=<field1[,field2,...]>[:values=<field1[,field2,...]>]
      [:sort=<field1[,field2,...]>][:size=#entries][:pause][:continue]
      [:clear][:name=histname1][:nohitcount][:<var>=<expr>][:<handler>.<action>]
      [if <filter>]

Written to an event's ``trigger`` file; the event's ``hist`` file shows the table:

    # event histogram
    #
    # trigger info: hist:keys=n:vals=hitcount:sort=hitcount:size=2048 [active]
    #

    { n:          1 } hitcount:          3
    { n:          2 } hitcount:          5

    Totals:
        Hits: 8
        Entries: 2
        Dropped: 0

One entry per key: a hit adds 1 to ``hitcount`` and each value field to its sum.  A
key or value is a field of the event, a common field (``common_pid``, ``common_cpu``,
``comm``, ``common_timestamp``, ``common_stacktrace``), a variable (``$name``) or an
expression of them (``common_timestamp.usecs-$ts0``).  Variables are kept per entry
and read once by another trigger with the same key: that is how two events become one
latency, handed on by an action (``onmatch(SYS.EVENT).trace(synth,$lat)``,
``onmax($lat).save(field,...)``, ``onchange($v).snapshot()``) to a synthetic event
(events/synth.py).

Values taken from the program are never asked anything: an int subclass is read as its
base int, a str subclass as its base str, anything else by fntrace's own safe text
(events/fprobe_event.py's ``render``); no __hash__, __eq__ or __repr__ of the program's
runs when a key is made.
"""
from __future__ import annotations

import errno as _errno
import re
import threading
from collections.abc import Callable, Mapping
from time import monotonic_ns
from types import CodeType, FunctionType, MethodType
# typing is not imported at run time (the recorder's start-up); annotations are strings
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .core import EventCall
    from .filter import EventFilter

from .._env import fork_safe, fork_safe_attr
from ..core import fetch
from ..core.records import record_table
from ..errors import FntraceError
from ..ring_buffer import TRACE_CLOCKS
from .core import EventFile, filter_passes, find_event_call, stack_text

__all__ = ["HistTrigger", "HistError", "parse_hist", "apply_hist_command", "hist_text",
           "hist_triggers_of", "HIST_ERRORS", "set_hist_paused"]

U64 = (1 << 64) - 1

# trace_events_hist.c err_text[], by HIST_ERR_ name.
HIST_ERRORS: dict[str, str] = {
    "DUPLICATE_VAR": "Variable already defined",
    "VAR_NOT_UNIQUE": "Variable name not unique, need to use fully qualified name "
                      "(subsys.event.var) for variable",
    "TOO_MANY_VARS": "Too many variables defined",
    "MALFORMED_ASSIGNMENT": "Malformed assignment",
    "NAMED_MISMATCH": "Named hist trigger doesn't match existing named trigger (includes variables)",
    "TRIGGER_EEXIST": "Hist trigger already exists",
    "TRIGGER_ENOENT_CLEAR": "Can't clear or continue a nonexistent hist trigger",
    "SET_CLOCK_FAIL": "Couldn't set trace_clock",
    "BAD_FIELD_MODIFIER": "Invalid field modifier",
    "TOO_MANY_SUBEXPR": "Too many subexpressions (3 max)",
    "TIMESTAMP_MISMATCH": "Timestamp units in expression don't match",
    "EVENT_FILE_NOT_FOUND": "Event file not found",
    "HIST_NOT_FOUND": "Matching event histogram not found",
    "HIST_CREATE_FAIL": "Couldn't create histogram for field",
    "FIELD_VAR_CREATE_FAIL": "Couldn't create field variable",
    "SYNTH_EVENT_NOT_FOUND": "Couldn't find synthetic event",
    "SYNTH_COUNT_MISMATCH": "Param count doesn't match synthetic event field count",
    "ONX_NOT_VAR": "For onmax(x) or onchange(x), x must be a variable",
    "ONX_VAR_NOT_FOUND": "Couldn't find onmax or onchange variable",
    "TOO_MANY_PARAMS": "Too many action params",
    "PARAM_NOT_FOUND": "Couldn't find param",
    "INVALID_PARAM": "Invalid action param",
    "ACTION_NOT_FOUND": "No action found",
    "NO_SAVE_PARAMS": "No params found for save()",
    "TOO_MANY_SAVE_ACTIONS": "Can't have more than one save() action per hist",
    "ACTION_MISMATCH": "Handler doesn't support action",
    "NO_CLOSING_PAREN": "No closing paren found",
    "SUBSYS_NOT_FOUND": "Missing subsystem",
    "INVALID_SUBSYS_EVENT": "Invalid subsystem or event name",
    "INVALID_REF_KEY": "Using variable references in keys not supported",
    "VAR_NOT_FOUND": "Couldn't find variable",
    "FIELD_NOT_FOUND": "Couldn't find field",
    "EMPTY_ASSIGNMENT": "Empty assignment",
    "INVALID_SORT_MODIFIER": "Invalid sort modifier",
    "EMPTY_SORT_FIELD": "Empty sort field",
    "TOO_MANY_SORT_FIELDS": "Too many sort fields (Max = 2)",
    "INVALID_SORT_FIELD": "Sort field must be a key or a val",
    "INVALID_STR_OPERAND": "String type can not be an operand in expression",
    "EXPECT_NUMBER": "Expecting numeric literal",
    "UNARY_MINUS_SUBEXPR": "Unary minus not supported in sub-expressions",
    "DIVISION_BY_ZERO": "Division by zero",
    # not the kernel's words (it returns -EINVAL without a log entry): fntrace logs them
    "BAD_SIZE": "size must be a number from 128 to 131072",
    "TOO_MANY_KEYS": "Too many keys (Max = 3)",
    "NO_KEYS": "hist trigger needs keys=",
}

TRACING_MAP_BITS_MIN, TRACING_MAP_BITS_MAX, TRACING_MAP_BITS_DEFAULT = 7, 17, 11
TRACING_MAP_VARS_MAX = 16
HIST_ACTIONS_MAX = 8
SYNTH_FIELDS_MAX = 64
STACK_DEPTH = 16

KEY_MODS = ("hex", "sym", "execname", "log2", "buckets", "usecs", "stacktrace")
VAL_MODS = ("hex", "usecs", "percent", "graph")
_SORT_MODS = ("descending", "ascending")


class HistError(FntraceError):
    """A hist command the kernel rejects: .kind is the HIST_ERR_ name, .pos the caret."""

    def __init__(self, kind: str, pos: int, command: str, errno: int = _errno.EINVAL,
                 detail: str = "") -> None:
        # the kernel's words exactly, as error_log shows them; the caret says where
        super().__init__(HIST_ERRORS[kind], pos=pos, command=command)
        self.kind = kind
        self.detail = detail
        self.errno = errno


# -- values taken from the program, made safe to key on --------------------------------

def safe_key(v: Any) -> int | str:
    """An int or a str standing for ``v`` that no program code made."""
    t = type(v)
    if t is int or t is str:
        return v
    if t is bool:
        return int(v)
    if t is float:
        return int(v) if v == v and v not in (float("inf"), float("-inf")) else 0
    if v is None:
        return "(null)"                 # as the kernel prints a NULL string
    if issubclass(t, int):
        return int.__int__(v)
    if issubclass(t, str):
        return str.__str__(v)
    return fetch.value_repr(v)


# -- fields and expressions --------------------------------------------------------------

class Field:
    """One key, value, variable or operand.

    name      the event field, common field, ``hitcount``, ``$var`` or a constant
    mods      modifiers in the order written (``hex``, ``log2``, ...)
    buckets   the .buckets=N size
    var       the variable this field is assigned to (``ts0=...``), or ""
    op        for an expression: '+', '-', '*', '/', 'neg'; operands in .args
    """

    def __init__(self, name: str, mods: list[str] | None = None, buckets: int = 0,
                 op: str = "", args: list["Field"] | None = None, const: int | None = None,
                 ref: "VarRef | None" = None) -> None:
        self.name = name
        self.mods = mods or []
        self.buckets = buckets
        self.var = ""
        self.op = op
        self.args = args or []
        self.const = const
        self.ref = ref
        self.is_str = False

    def text(self, with_var: bool = True) -> str:
        """As the trigger info prints it (hist_field_print)."""
        if self.op:
            body = self._expr_text()
        else:
            body = self.name
            for m in self.mods:
                body += f".{m}" + (f"={self.buckets}" if m == "buckets" else "")
        return (f"{self.var}=" if with_var and self.var else "") + body

    def _expr_text(self) -> str:
        if self.op == "neg":
            return "-(" + self.args[0].text(False) + ")" if self.args[0].op else "-" + self.args[0].text(False)
        return f"{self.args[0].text(False)}{self.op}{self.args[1].text(False)}"

    def units(self) -> str | None:
        """'usecs'/'nsecs' for a timestamp, for TIMESTAMP_MISMATCH."""
        if self.op:
            for a in self.args:
                u = a.units()
                if u is not None:
                    return u
            return None
        if self.name == "common_timestamp":
            return "usecs" if "usecs" in self.mods else "nsecs"
        if self.ref is not None and self.ref.target is not None:
            return self.ref.target.units()
        return None

    def refs(self) -> list["VarRef"]:
        out = [self.ref] if self.ref is not None else []
        for a in self.args:
            out.extend(a.refs())
        return out


class VarRef:
    """``$name`` or ``sys.event.$name``: a variable of this or another trigger."""

    def __init__(self, system: str | None, event: str | None, name: str) -> None:
        self.system = system
        self.event = event
        self.name = name
        self.field = ""                         # a field variable's event field
        self.pos = 0
        self.owner: HistTrigger | None = None   # the trigger that sets it
        self.target: Field | None = None

    def text(self) -> str:
        return (f"{self.system}.{self.event}." if self.system else "") + "$" + self.name


class Action:
    """``onmatch(SYS.EVENT).trace(synth,params)``, ``.synth(params)``,
    ``onmax($var).save(f,...)``/``.snapshot()``/``.trace(...)``, ``onchange(...)``."""

    def __init__(self, handler: str, arg: str, action: str, params: list[str],
                 text: str) -> None:
        self.handler = handler          # onmatch, onmax, onchange
        self.arg = arg                  # SYS.EVENT or $var
        self.action = action            # trace, snapshot, save
        self.params = params
        self.text = text
        self.synth: EventCall | None = None     # the synthetic EventCall for trace()
        self.param_fields: list[Field] = []
        self.track: Field | None = None  # onmax/onchange: the variable tracked

    def __str__(self) -> str:
        return self.text


class Entry:
    __slots__ = ("hitcount", "sums", "vars", "max", "saved", "comm")

    def __init__(self, n_vals: int) -> None:
        self.hitcount = 0
        self.sums = [0] * n_vals
        self.vars: dict[str, int | str] = {}
        self.max: int | None = None
        self.saved: dict[str, Any] = {}
        self.comm = ""


class HistData:
    """The table (a tracing_map); shared by the triggers of one ``name=``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: dict[tuple, Entry] = {}
        self.hits = 0
        self.drops = 0
        self.lock = threading.Lock()
        fork_safe_attr(self)            # taken on every hit
        self.users = 0
        self.snapshot_note: str = ""

    def clear(self) -> None:
        with self.lock:
            self.entries = {}
            self.hits = 0
            self.drops = 0


_named: dict[str, tuple[HistData, "HistTrigger"]] = {}
_named_lock = fork_safe(threading.Lock())


class HistTrigger:
    cmd = "hist"
    target = None
    target_file = None
    count = -1
    now: Callable[[], int] = staticmethod(monotonic_ns)   # the instance's trace clock
    # set by apply_hist_command; EventFile._sync reads it with getattr, True if unset
    needs_common: bool
    # on a trigger made for another's field variable (_make_hidden): that other one
    hidden_for: HistTrigger

    def release(self) -> None:
        """Let go of the data and the synthetic events (the event file drops it)."""
        _release(self)
        _drop_hidden(self)

    def __init__(self, text: str) -> None:
        self.source = text
        self.keys: list[Field] = []
        self.vals: list[Field] = []
        self.vars: list[Field] = []
        self.sort: list[tuple[str, bool]] = [("hitcount", False)]
        self.size = 1 << TRACING_MAP_BITS_DEFAULT
        self.name = ""
        self.paused = False
        self.pause_cmd = ""             # pause, cont, clear (applied to an existing one)
        self.nohitcount = False
        self.clock = ""
        self.filter_text = ""
        self.filter: EventFilter | None = None
        self.actions: list[Action] = []
        self.data: HistData | None = None
        self.ef: EventFile | None = None
        self.errors = 0
        self.want_comm = False
        self.fast: Callable[[Mapping[str, Any]], None] | None = None
        self.field_vars: list[VarRef] = []     # SYS.EVENT.FIELD params, made at apply
        self.hidden: list[HistTrigger] = []     # the triggers made for them

    # -- identity -----------------------------------------------------------------------
    def key(self) -> tuple:
        """hist_trigger_match(): keys, vals, sort, filter, actions and name."""
        return ("hist", self.name, tuple(f.text() for f in self.keys),
                tuple(f.text() for f in self.vals), tuple(f.text() for f in self.vars),
                tuple(self.sort), self.filter_text, tuple(a.text for a in self.actions))

    def uses_timestamps(self) -> bool:
        """hist_data->enable_timestamps: common_timestamp is read, so the instance runs
        on this trigger's clock (clock=, global when not given)."""
        return "common_timestamp" in self.field_names()

    def field_names(self) -> set[str]:
        """Every field name the trigger reads (keys, values, variables, params)."""
        out: set[str] = set()

        def walk(f: Field) -> None:
            out.add(f.name)
            for a in f.args:
                walk(a)
        for f in self.keys + self.vals + self.vars:
            walk(f)
        for a in self.actions:
            for f in a.param_fields:
                walk(f)
            out.update(a.params)
        return out

    def info(self) -> str:
        """event_hist_trigger_print()"""
        s = "hist:" + (f"{self.name}:" if self.name else "")
        s += "keys=" + ",".join(self._key_text(f) for f in self.keys)
        s += ":vals=" + ",".join(["hitcount"] + [f.text() for f in self.vals
                                                 if f.name != "hitcount" or f.mods])
        if self.vars:
            s += ":" + ",".join(f.text() for f in self.vars)
        s += ":sort=" + ",".join(n + (".descending" if d else "") for n, d in self.sort)
        s += f":size={self.size}"
        if self.uses_timestamps():
            s += f":clock={self.clock or 'global'}"
        if self.nohitcount:
            s += ":nohitcount"
        for a in self.actions:
            s += ":" + a.text
        if self.filter_text:
            s += " if " + self.filter_text
        return s + (" [paused]" if self.paused else " [active]")

    @staticmethod
    def _key_text(f: Field) -> str:
        if f.name in ("common_stacktrace", "stacktrace"):
            return "common_stacktrace"
        return f.text()

    def __str__(self) -> str:
        return self.info()

    # -- a hit --------------------------------------------------------------------------
    def fire(self, ef: EventFile, values: Mapping[str, Any], frame) -> None:
        if self.paused:
            return
        if self.filter is not None and not filter_passes(self.filter, values):
            return
        fast = self.fast
        if fast is not None:
            fast(values)
            return
        ts = self.now()
        data: HistData = self.data  # type: ignore[assignment]  # set before the trigger is attached
        try:
            key = self._key_tuple(values, frame, ts)
        except _Skip:
            return
        env: dict[int, Any] = {}
        refs = self._refs
        if refs:
            # Another trigger's variables, kept in its entry of the same key, are read
            # once: all of them or, if one is not set, none (the hit does not count).
            ents = []
            for r in refs:
                owner = r.owner
                od = owner.data if owner is not None else None
                # tracing_map_lookup() compares the owner's key size: a compound key
                # (pid,lat) finds the entry of a trigger keyed on pid alone
                n = len(owner.keys) if owner is not None else 0
                e = od.entries.get(key if n >= len(key) else key[:n]) \
                    if od is not None else None
                if e is None or r.name not in e.vars:
                    return
                ents.append(e)
            for r, e in zip(refs, ents):
                env[id(r)] = e.vars.pop(r.name, None)
        with data.lock:
            data.hits += 1
            e = data.entries.get(key)
            if e is None:
                if len(data.entries) >= data.size:
                    data.drops += 1
                    return
                e = data.entries[key] = Entry(len(self.vals))
            e.hitcount += 1
            if self.want_comm:
                e.comm = values.get("comm", "") or e.comm
            for i, f in enumerate(self.vals):
                if f.name == "hitcount" and not f.op:
                    e.sums[i] += 1
                    continue
                v = _eval(f, values, ts, env, e)
                if v.__class__ is int:
                    e.sums[i] += v
            for f in self.vars:
                v = _eval(f, values, ts, env, e)
                if v is not None:
                    e.vars[f.var] = v
        if self.actions:
            self._run_actions(ef, key, e, values, ts, env)

    def _key_tuple(self, values, frame, ts) -> tuple:
        out = []
        for f in self.keys:
            if f.name in ("common_stacktrace", "stacktrace"):
                out.append(stack_text(frame, STACK_DEPTH) if frame is not None else "")
                continue
            v = _eval(f, values, ts, _NOENV)
            if v is None:
                raise _Skip
            if v.__class__ is int:
                if "log2" in f.mods:
                    v = max(0, (v & U64) - 1).bit_length() if v > 1 else 0
                elif f.buckets:
                    v = ((v & U64) // f.buckets) * f.buckets
            out.append(v)
        return tuple(out)

    def _run_actions(self, ef, key, e, values, ts, env) -> None:
        # each action compares with the value before this hit (the kernel keeps one
        # per action): onchange($v).save(...):onchange($v).snapshot() runs both
        old = e.max
        for a in self.actions:
            try:
                if a.handler == "onmatch":
                    # the referenced variables came from the matching event: all resolved
                    self._action_do(a, ef, key, e, values, ts, env)
                    continue
                tv = e.vars.get(a.track.var) if a.track is not None else None
                if tv is None or tv.__class__ is not int:
                    continue
                if a.handler == "onmax":
                    if old is not None and tv <= old:
                        continue
                else:           # onchange
                    if old is not None and tv == old:
                        continue
                e.max = tv
                self._action_do(a, ef, key, e, values, ts, env)
            except Exception:
                self.errors += 1

    def _action_do(self, a: Action, ef, key, e, values, ts, env) -> None:
        if a.action == "save":
            e.saved = {p: _eval(f, values, ts, env, e) for p, f in zip(a.params, a.param_fields)}
            return
        if a.action == "snapshot":
            tr = ef.tr
            tr.take_snapshot()
            label = "onmax" if a.handler == "onmax" else "onchange"
            self.data.snapshot_note = (  # type: ignore[union-attr]  # set before attached
                "\nSnapshot taken (see tracing/snapshot).  Details:\n"
                f"\ttriggering value {{ {label}({a.arg}) }}: {e.max:10d}"
                f"\ttriggered by event with key: {self._key_text_line(key)}\n")
            return
        # trace(): generate the synthetic event
        args = []
        for f in a.param_fields:
            v = _eval(f, values, ts, env, e)
            if v is None:
                return
            args.append(v)
        from .synth import synth_fire
        synth_fire(a.synth, args, ef.tr)  # type: ignore[arg-type]  # a trace() action has one

    # -- reading ------------------------------------------------------------------------
    def _key_text_line(self, key: tuple, comms: dict | None = None) -> str:
        parts = []
        multiline = False
        for f, v in zip(self.keys, key):
            name = f.name
            if f.name in ("common_stacktrace", "stacktrace"):
                parts.append("common_stacktrace:\n" + "".join(
                    f"{' ' * 9}{line}\n" for line in str(v).splitlines()))
                multiline = True
                continue
            if v.__class__ is str and not f.mods:
                parts.append(f"{name}: {_one_line(v):<50}")
                continue
            u = v & U64 if v.__class__ is int else 0
            if "hex" in f.mods:
                parts.append(f"{name}: {u:x}")
            elif "sym" in f.mods:
                parts.append(f"{name}: [{u:x}] {_sym(v):<45}")
            elif "execname" in f.mods:
                comm = (comms or {}).get(key, "") if comms is not None else ""
                parts.append(f"{name}: {comm:<16}[{u:10d}]")
            elif "log2" in f.mods:
                parts.append(f"{name}: ~ 2^{u:<2d}")
            elif f.buckets:
                parts.append(f"{name}: ~ {u}-{u + f.buckets - 1}")
            elif v.__class__ is str:
                parts.append(f"{name}: {_one_line(v):<50}")
            else:
                parts.append(f"{name}: {u:10d}")
        return "{ " + ", ".join(parts) + ("" if multiline else " ") + "}"

    def table(self) -> str:
        """hist_trigger_show(): this trigger's table, header to totals."""
        data = self.data
        assert data is not None             # a listed trigger was applied
        with data.lock:
            items = [(k, e.hitcount, list(e.sums), e.comm, e.max, dict(e.saved))
                     for k, e in data.entries.items()]
            hits, drops, note = data.hits, data.drops, data.snapshot_note
        out = ["# event histogram\n#\n# trigger info: " + self.info() + "\n#\n\n"]
        totals = [sum(s[i] for _, _, s, *_ in items) for i in range(len(self.vals))]
        maxes = [max((s[i] for _, _, s, *_ in items), default=0) for i in range(len(self.vals))]
        ht = sum(h for _, h, *_ in items)
        hmax = max((h for _, h, *_ in items), default=0)
        items = self._sorted(items)
        comms = {k: c for k, _, _, c, *_ in items}
        for k, h, sums, _c, mx, saved in items:
            line = self._key_text_line(k, comms)
            if not self.nohitcount:
                line += " hitcount: " + f"{h:10d}"
            for i, f in enumerate(self.vals):
                if f.var or f.op:
                    continue        # variables and expressions are not shown as values
                hc = f.name == "hitcount"
                line += " " + _val_text(f.name, f.mods, h if hc else sums[i],
                                        ht if hc else totals[i], hmax if hc else maxes[i])
            for a in self.actions:
                # track_data_print()
                if a.handler in ("onmax", "onchange") and mx is not None:
                    line += f"\n\t{'max' if a.handler == 'onmax' else 'changed'}: {mx:10d}"
                    if a.action == "save":
                        for p, sv in saved.items():
                            line += (f"  {p}: {sv:<32}" if sv.__class__ is str
                                     else f"  {p}: {(sv or 0) & U64:10d}")
            out.append(line + "\n")
        out.append(note)
        out.append(f"\nTotals:\n    Hits: {hits}\n    Entries: {len(items)}\n    Dropped: {drops}\n")
        return "".join(out)

    def _sorted(self, items: list) -> list:
        keynames = [f.text(False) for f in self.keys]
        keyplain = [f.name for f in self.keys]
        valnames = [f.var or f.text(False) for f in self.vals]
        valplain = [f.var or f.name for f in self.vals]
        for name, desc in reversed(self.sort):
            if name == "hitcount":
                def get(it, i=1):       # the three variants take the same parameters
                    return it[i]
            elif name in keynames or name in keyplain:
                i = keynames.index(name) if name in keynames else keyplain.index(name)

                def get(it, i=i):
                    v = it[0][i]
                    return (1, v) if v.__class__ is str else (0, v & U64)
            else:
                i = valnames.index(name) if name in valnames else valplain.index(name)

                def get(it, i=i):
                    return it[2][i]
            items.sort(key=get, reverse=desc)
        return items

    @property
    def _refs(self) -> list[VarRef]:
        r = self.__dict__.get("_refs_c")
        if r is None:
            r = []
            for f in self.vals + self.vars:
                r.extend(f.refs())
            for a in self.actions:
                for f in a.param_fields:
                    r.extend(x for x in f.refs() if x.owner is not self)
            seen, out = set(), []
            for x in r:
                if x.owner is self:
                    continue            # own variables are read from the entry itself
                if (x.system, x.event, x.name) not in seen:
                    seen.add((x.system, x.event, x.name))
                    out.append(x)
            self.__dict__["_refs_c"] = out
            r = out
        return r


class _Skip(Exception):
    pass


# A kernel string key is a C string printed with %-50s; a Python one may hold a newline,
# which would split the entry across lines that readers of the table take one a line.
_CONTROL = {i: f"\\x{i:02x}" for i in (*range(32), 127)}
_CONTROL.update({10: "\\n", 9: "\\t", 13: "\\r"})


def _one_line(v: str) -> str:
    return v if v.isprintable() else v.translate(_CONTROL)


def _sym(v: Any) -> str:
    """.sym: the function at "address" ``v`` (a record's ip), as %ps prints it."""
    if v.__class__ is str:
        return v
    rec = record_table.by_ip.get(v)
    return rec.name if rec is not None and rec.index else f"0x{v & U64:x}"


def _sym_ip(v: Any) -> Any:
    """A function, method or code object as its record's ip (the kernel keys an
    address); anything else as it is.  Only the exact types: no __getattr__ runs."""
    t = type(v)
    if t is FunctionType:
        code = v.__code__
    elif t is MethodType and type(v.__func__) is FunctionType:
        code = v.__func__.__code__
    elif t is CodeType:
        code = v
    else:
        return v
    rec = record_table.by_code.get(id(code))
    return rec.ip if rec is not None else v


def _val_text(name: str, mods: list[str], v: int, total: int, mx: int) -> str:
    """hist_trigger_print_val()"""
    if "percent" in mods:
        if total == 0:
            return f" {name} (%):[ERROR]" if v else f" {name} (%):   0.00"
        pc = v * 10000 // total
        return f" {name} (%): {pc // 100:3d}.{pc % 100:02d}"
    if "graph" in mods:
        n = (v * 20 // mx) if mx else 0
        return f" {name}: {'#' * n:>20}"
    if "hex" in mods:
        return f" {name}: {v & U64:10x}"
    return f" {name}: {v & U64:10d}"


def _eval(f: Field, values: Mapping[str, Any], ts: int, env: dict, entry: Entry | None = None):
    """A field's value for this hit: int, str, or None (unset variable, missing field)."""
    if f.op:
        if f.op == "neg":
            a = _eval(f.args[0], values, ts, env, entry)
            return None if a is None else -a
        a = _eval(f.args[0], values, ts, env, entry)
        b = _eval(f.args[1], values, ts, env, entry)
        if a is None or b is None or a.__class__ is not int or b.__class__ is not int:
            return None
        if f.op == "+":
            return (a + b) & U64
        if f.op == "-":
            return (a - b) & U64
        if f.op == "*":
            return (a * b) & U64
        return U64 if b == 0 else (a & U64) // (b & U64)
    if f.const is not None:
        return f.const
    if f.ref is not None:
        if id(f.ref) in env:
            return env[id(f.ref)]
        if entry is not None and f.ref.owner is not None:
            return entry.vars.get(f.ref.name)
        return None
    n = f.name
    if n == "common_timestamp":
        return ts // 1000 if "usecs" in f.mods else ts
    if n == "hitcount":
        return 1
    v = values.get(n, _NONE)
    if v is _NONE:
        return None
    if f.mods and "sym" in f.mods:
        v = _sym_ip(v)
    return safe_key(v)


_NONE = object()
_NOENV: dict = {}


def _root_operator(s: str) -> tuple[str, int]:
    """contains_operator(): the root operator of s and its offset: the rightmost + or -
    (a - at the start is unary), else the rightmost * or /; ("", -1) for none."""
    m = s.rfind("-")
    if m == 0:
        return "neg", 0
    p = s.rfind("+")
    if p >= 0 or m >= 0:
        return ("+", p) if p > m else ("-", m)
    d, x = s.rfind("/"), s.rfind("*")
    if d >= 0 or x >= 0:
        return ("*", x) if x > d else ("/", d)
    return "", -1


def _subexpr_check(text: str, pos: int) -> tuple[str, int] | None:
    """parse_expr()'s recursion over text (at pos in the command), for its errors'
    carets: each binary operator counts a sub-expression, left operand first, and the
    parse_expr() entered after the 3rd reports TOO_MANY_SUBEXPR at its own operand;
    -(...) followed by more is UNARY_MINUS_SUBEXPR inside the parenthesis."""
    n = [0]

    def walk(s: str, off: int) -> tuple[str, int] | None:
        if n[0] > 3:
            return ("TOO_MANY_SUBEXPR", off)
        op, sep = _root_operator(s)
        if not op:
            return None
        if op == "neg":
            if s[1:2] != "(":
                return None
            inner = s[2:]
            r = inner.rfind(")")
            if r >= 0 and r + 1 != len(inner):
                return ("UNARY_MINUS_SUBEXPR", off + 2)
            return walk(inner[:r] if r >= 0 else inner, off + 2)
        n[0] += 1
        return walk(s[:sep], off) or walk(s[sep + 1:], off + sep + 1)

    return walk(text, pos)


def _binop(op: str, a: Field, b: Field) -> Field:
    """An expression of two operands; of two constants, the constant it makes (parse_expr
    folds them: the trigger info prints x=16-8-4-2 as x=2)."""
    if a.const is None or b.const is None:
        return Field("", op=op, args=[a, b])
    x, y = a.const, b.const
    v = (x + y if op == "+" else x - y if op == "-" else x * y if op == "*"
         else x // y) & U64
    return Field(str(v), const=v)


# -- parsing -----------------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMON = {"common_pid": "int", "common_cpu": "int", "cpu": "int", "comm": "str",
           "common_comm": "str", "common_timestamp": "int", "common_stacktrace": "stack",
           "stacktrace": "stack"}


class _Parser:
    def __init__(self, command: str, fields: Mapping[str, str], system: str, event: str,
                 tr) -> None:
        self.cmd = command
        self.fields = fields
        self.system = system
        self.event = event
        self.tr = tr
        self.trig: HistTrigger | None = None

    def err(self, kind: str, pos: int, errno: int = _errno.EINVAL, detail: str = "") -> HistError:
        return HistError(kind, pos, self.cmd, errno, detail)

    def kind_of(self, name: str) -> str | None:
        if name in self.fields:
            return self.fields[name]
        return _COMMON.get(name)

    # field[.mod[.mod]] with .buckets=N
    def field(self, text: str, pos: int, where: str) -> Field:
        if not text:
            raise self.err("EMPTY_ASSIGNMENT" if where == "var" else "FIELD_NOT_FOUND", pos)
        if _EXPR_CHARS.search(text.lstrip("-")) or text.startswith("-") or "$" in text \
                or text[0].isdigit():
            return self.expr(text, pos, where)
        name, *mods = text.split(".")
        f = Field(name)
        kind = self.kind_of(name)
        if name == "hitcount" and where in ("val", "sort"):
            kind = "int"
        if kind is None:
            raise self.err("FIELD_NOT_FOUND", pos, detail=name)
        at = pos + len(name) + 1
        allowed = KEY_MODS if where == "key" else VAL_MODS if where == "val" else ("usecs", "hex")
        for m in mods:
            mname, eq, arg = m.partition("=")
            if mname not in allowed or (mname == "buckets") != bool(eq):
                raise self.err("BAD_FIELD_MODIFIER", at)
            if mname == "buckets":
                if not arg.isdigit() or int(arg) == 0:
                    raise self.err("BAD_FIELD_MODIFIER", at)
                f.buckets = int(arg)
            # .execname and .usecs are taken on any field, as parse_field() takes
            # them: .execname shows the thread's name at the hit, .usecs changes
            # only common_timestamp
            f.mods.append(mname)
            at += len(m) + 1
        if kind == "stack" and where != "key":
            raise self.err("HIST_CREATE_FAIL", pos)
        if kind == "str":
            if where == "val":
                raise self.err("HIST_CREATE_FAIL", pos, detail=f"{name} is a string")
            f.is_str = True
        return f

    # expressions: operand (op operand)*, + - * /, at most 3 sub-expressions
    def expr(self, text: str, pos: int, where: str) -> Field:
        if where == "key":
            if "$" in text:
                raise self.err("INVALID_REF_KEY", pos)
        toks = []       # (kind, text, pos)
        i = 0
        while i < len(text):
            c = text[i]
            if c in "+-*/":
                toks.append(("op", c, pos + i))
                i += 1
                continue
            j = i
            while j < len(text) and text[j] not in "+-*/":
                j += 1
            toks.append(("x", text[i:j], pos + i))
            i = j
        chk = _subexpr_check(text, pos)
        if chk is not None:
            raise self.err(*chk)
        n_ops = sum(1 for t in toks if t[0] == "op")
        if n_ops > 3:
            raise self.err("TOO_MANY_SUBEXPR", pos)
        k = [0]

        def operand() -> Field:
            if k[0] >= len(toks):
                raise self.err("FIELD_NOT_FOUND", pos + len(text))
            kind, t, p = toks[k[0]]
            if kind == "op":
                if t == "-":
                    if k[0] != 0:
                        raise self.err("UNARY_MINUS_SUBEXPR", p)
                    k[0] += 1
                    return Field("", op="neg", args=[operand()])
                raise self.err("FIELD_NOT_FOUND", p)
            k[0] += 1
            return self.operand(t, p)

        def term() -> Field:
            a = operand()
            while k[0] < len(toks) and toks[k[0]][1] in "*/":
                op, p = toks[k[0]][1], toks[k[0]][2]
                k[0] += 1
                b = operand()
                if op == "/" and b.const == 0:
                    raise self.err("DIVISION_BY_ZERO", p + 1)
                a = _binop(op, a, b)
            return a

        a = term()
        while k[0] < len(toks):
            op = toks[k[0]][1]
            k[0] += 1
            b = term()
            a = _binop(op, a, b)
        if a.op in ("+", "-", "*", "/"):
            ua, ub = a.args[0].units(), a.args[1].units()
            if ua and ub and ua != ub:
                raise self.err("TIMESTAMP_MISMATCH", pos)
        return a

    def operand(self, t: str, p: int) -> Field:
        if t[:1].isdigit():
            if not t.isdigit() or len(t) > 21:
                raise self.err("EXPECT_NUMBER", p)
            return Field(t, const=int(t))
        if "$" in t:
            head, _, name = t.rpartition("$")
            system = event = None
            if head:
                parts = head.rstrip(".").split(".")
                if len(parts) != 2 or not head.endswith("."):
                    raise self.err("INVALID_SUBSYS_EVENT", p)
                system, event = parts
            ref = VarRef(system, event, name)
            self.resolve(ref, p)
            return Field("$" + name if not system else t, ref=ref)
        f = self.field(t, p, "operand")
        if f.is_str:
            raise self.err("INVALID_STR_OPERAND", p)
        return f

    def resolve(self, ref: VarRef, pos: int) -> None:
        """Find the trigger that sets $name: this one first, then the instance's."""
        trig = self.trig
        if ref.system is None and trig is not None:
            for f in trig.vars + trig.vals + trig.keys:
                if f.var == ref.name:
                    ref.owner, ref.target = trig, f
                    return
        found = []
        for ef in list(getattr(self.tr, "event_files", {}).values()):
            if ref.system is not None and (ef.call.system, ef.call.name) != (ref.system, ref.event):
                continue
            for t in ef.triggers:
                if isinstance(t, HistTrigger):
                    for f in t.vars + t.vals + t.keys:
                        if f.var == ref.name:
                            found.append((t, f))
        if not found:
            raise self.err("VAR_NOT_FOUND", pos, detail="$" + ref.name)
        if len(found) > 1 and ref.system is None:
            raise self.err("VAR_NOT_UNIQUE", pos)
        ref.owner, ref.target = found[0]

    def parse(self) -> tuple[bool, HistTrigger]:
        text = self.cmd
        s = text.rstrip()
        off = len(text) - len(text.lstrip())
        s = s.lstrip()
        remove = s.startswith("!")
        if remove:
            s, off = s[1:], off + 1
        for state in (" [active]", " [paused]"):
            if s.endswith(state):
                s = s[:-len(state)]     # a line read back from the trigger file
        m = re.search(r"[ \t]if[ \t]", s)
        head, ftext = (s[:m.start()], s[m.end():]) if m else (s, "")
        fpos = off + (m.end() if m else len(s))
        t = HistTrigger(text)
        self.trig = t
        parts: list[tuple[str, int]] = []
        at = off
        # ':' separates attributes, except inside an action's parentheses
        depth, start = 0, 0
        for i, c in enumerate(head):
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif c == ":" and depth == 0:
                parts.append((head[start:i], at + start))
                start = i + 1
        parts.append((head[start:], at + start))
        if parts[0][0] != "hist":
            raise self.err("FIELD_NOT_FOUND", parts[0][1])
        pending_vals: list[tuple[str, int]] = []
        pending_sort: tuple[str, int] | None = None
        pending_actions: list[tuple[str, int]] = []
        for j, (p, ppos) in enumerate(parts[1:]):
            if not p:
                continue
            if j == 0 and _IDENT.fullmatch(p) and p not in _WORDS:
                t.name = p              # "hist:NAME:keys=..." as the trigger file lists it
                continue
            if p in ("pause", "cont", "continue", "clear"):
                t.pause_cmd = "cont" if p == "continue" else p
                continue
            if p in ("nohitcount", "NOHC"):
                t.nohitcount = True
                continue
            if p.startswith(("onmatch(", "onmax(", "onchange(")):
                pending_actions.append((p, ppos))
                continue
            attr, eq, val = p.partition("=")
            vpos = ppos + len(attr) + 1
            if eq and not val:
                # parse_hist_trigger_attrs(): "NAME=" with nothing after the first '='
                raise self.err("EMPTY_ASSIGNMENT", ppos)
            if attr in ("keys", "key"):
                items = _split_commas(val, vpos)
                if len(items) > 3:
                    raise self.err("TOO_MANY_KEYS", items[3][1])
                for it, ip in items:
                    name, eq2, rest = it.partition("=")
                    if eq2 and _IDENT.fullmatch(name) and not name == "buckets" \
                            and "." not in name and rest and not it.startswith(name + ".buckets"):
                        f = self.field(rest, ip + len(name) + 1, "key")
                        f.var = name
                    else:
                        f = self.field(it, ip, "key")
                    if f.name in ("common_stacktrace", "stacktrace") and f.mods:
                        raise self.err("BAD_FIELD_MODIFIER", ip)
                    t.keys.append(f)
            elif attr in ("values", "vals", "val"):
                pending_vals.extend(_split_commas(val, vpos))
            elif attr == "sort":
                pending_sort = (val, vpos)
            elif attr == "size":
                if not val.isdigit():
                    raise self.err("BAD_SIZE", vpos)
                n = int(val)
                bits = max(0, n - 1).bit_length()
                if bits < TRACING_MAP_BITS_MIN or bits > TRACING_MAP_BITS_MAX:
                    raise self.err("BAD_SIZE", vpos)
                t.size = 1 << bits
            elif attr == "name":
                if not _IDENT.fullmatch(val):
                    raise self.err("MALFORMED_ASSIGNMENT", vpos)
                t.name = val
            elif attr == "clock":
                if val not in TRACE_CLOCKS:     # (x86-tsc: there is no TSC clock here)
                    raise self.err("SET_CLOCK_FAIL", vpos)
                t.clock = val
            elif eq:
                # variables: name=expr[,name=expr]
                for it, ip in _split_commas(p, ppos):
                    name, eq2, rest = it.partition("=")
                    if not eq2 or not _IDENT.fullmatch(name):
                        raise self.err("MALFORMED_ASSIGNMENT", ip)
                    if not rest:
                        raise self.err("EMPTY_ASSIGNMENT", ip + len(name) + 1)
                    if any(v.var == name for v in t.vars + t.vals + t.keys):
                        raise self.err("DUPLICATE_VAR", ip)
                    f = self.field(rest, ip + len(name) + 1, "var")
                    f.var = name
                    t.vars.append(f)
                    if len(t.vars) > TRACING_MAP_VARS_MAX:
                        raise self.err("TOO_MANY_VARS", ip)
            else:
                raise self.err("FIELD_NOT_FOUND", ppos, detail=attr)
        if not t.keys and not remove:
            raise self.err("NO_KEYS", off)
        for it, ip in pending_vals:
            name, eq2, rest = it.partition("=")
            if eq2 and _IDENT.fullmatch(name) and rest and "." not in name:
                f = self.field(rest, ip + len(name) + 1, "val")
                f.var = name
            else:
                f = self.field(it, ip, "val")
            if f.name == "hitcount" and not f.mods and not f.op:
                continue
            t.vals.append(f)
        if t.nohitcount and not t.vals:
            raise self.err("BAD_FIELD_MODIFIER", off)
        if pending_sort is not None:
            self.parse_sort(t, *pending_sort)
        if len(pending_actions) > HIST_ACTIONS_MAX:
            raise self.err("TOO_MANY_PARAMS", pending_actions[-1][1])
        for a, apos in pending_actions:
            t.actions.append(self.action(t, a, apos))
        if ftext.strip():
            from .filter import FilterParseError, parse_filter
            flt_fields = dict(self.fields)
            flt_fields.update({"common_pid": "int", "common_cpu": "int", "comm": "str"})
            ft = ftext.strip()
            try:
                t.filter = parse_filter(ft, flt_fields)
            except FilterParseError as e:
                raise HistError("FIELD_NOT_FOUND", fpos + (e.pos or 0), self.cmd,
                                detail=f"filter: {e.msg}") from None
            t.filter_text = t.filter.text if t.filter is not None else ""
        return remove, t

    def parse_sort(self, t: HistTrigger, val: str, vpos: int) -> None:
        items = _split_commas(val, vpos)
        sort = []
        names = {"hitcount"} | {f.name for f in t.keys} | {f.text(False) for f in t.keys} \
            | {f.var or f.name for f in t.vals} | {f.text(False) for f in t.vals}
        for i, (it, ip) in enumerate(items):
            # create_sort_keys(): these two errors point at "sort=", field by field
            if not it or it.startswith("."):
                raise self.err("EMPTY_SORT_FIELD", vpos - len("sort="))
            if i == 1 and len(items) > 2:
                raise self.err("TOO_MANY_SORT_FIELDS", vpos - len("sort="))
            base, dot, mod = it.rpartition(".")
            desc = False
            if dot and mod in _SORT_MODS:
                it, desc = base, mod == "descending"
            elif dot and it not in names:
                if base in names:
                    raise self.err("INVALID_SORT_MODIFIER", ip + len(base) + 1)
            if it not in names:
                raise self.err("INVALID_SORT_FIELD", ip)
            sort.append((it, desc))
        t.sort = sort

    def action(self, t: HistTrigger, text: str, pos: int) -> Action:
        m = re.fullmatch(r"(onmatch|onmax|onchange)\(([^)]*)\)(?:\.([A-Za-z_][A-Za-z0-9_]*)"
                         r"\((.*)\))?", text)
        if m is None:
            if text.count("(") > text.count(")"):
                raise self.err("NO_CLOSING_PAREN", pos + len(text))
            raise self.err("ACTION_NOT_FOUND", pos)
        handler, arg, action, params = m.group(1), m.group(2), m.group(3), m.group(4)
        if action is None:
            raise self.err("ACTION_NOT_FOUND", pos + len(text))
        apos = pos + m.start(2)
        plist = [p.strip() for p in params.split(",")] if params.strip() else []
        ppos = pos + m.start(4)
        a = Action(handler, arg, action, plist, text)
        if handler == "onmatch":
            sys_, dot, ev = arg.partition(".")
            if not dot:
                raise self.err("SUBSYS_NOT_FOUND", apos)
            if find_event_call(sys_, ev) is None:
                raise self.err("INVALID_SUBSYS_EVENT", apos)
            if action in ("save", "snapshot"):
                raise self.err("ACTION_MISMATCH", pos + m.start(3))
        else:
            if not arg.startswith("$"):
                raise self.err("ONX_NOT_VAR", apos)
            name = arg[1:]
            track = next((f for f in t.vars + t.vals if f.var == name), None)
            if track is None:
                raise self.err("ONX_VAR_NOT_FOUND", apos)
            a.track = track
        if action == "save":
            if not plist:
                raise self.err("NO_SAVE_PARAMS", ppos)
            if sum(1 for x in t.actions if x.action == "save") >= 1:
                raise self.err("TOO_MANY_SAVE_ACTIONS", pos)
            for p in plist:
                a.param_fields.append(self.param(p, ppos + params.find(p)))
            return a
        if action == "snapshot":
            if plist:
                raise self.err("TOO_MANY_PARAMS", ppos)
            return a
        # trace(synth, params) or synth(params)
        from .synth import find_synth
        if action == "trace":
            if not plist:
                raise self.err("SYNTH_EVENT_NOT_FOUND", ppos)
            sname, plist = plist[0], plist[1:]
            spos = ppos
        else:
            sname, spos = action, pos + m.start(3)
        synth = find_synth(sname)
        if synth is None:
            raise self.err("SYNTH_EVENT_NOT_FOUND", spos, detail=sname)
        a.synth = synth
        a.params = plist
        if len(plist) > SYNTH_FIELDS_MAX:
            raise self.err("TOO_MANY_PARAMS", ppos)
        if len(plist) != len(synth.fields):
            raise self.err("SYNTH_COUNT_MISMATCH", ppos)
        for p in plist:
            a.param_fields.append(self.param(p, ppos + max(0, params.find(p))))
        return a

    def param(self, p: str, pos: int) -> Field:
        if not p:
            raise self.err("INVALID_PARAM", pos)
        if p.startswith("$") or "." in p and "$" in p:
            return self.operand(p, pos)
        if p[:1].isdigit():
            return self.operand(p, pos)
        if p.count(".") == 2:
            # SYS.EVENT.FIELD: a field of another event, kept for this one in a
            # variable of a trigger fntrace adds there (a "field variable")
            sysname, ev, fld = p.split(".")
            other = find_event_call(sysname, ev)
            if other is None:
                raise self.err("INVALID_SUBSYS_EVENT", pos)
            if fld not in other.fields and _COMMON.get(fld) not in ("int", "str"):
                raise self.err("PARAM_NOT_FOUND", pos, detail=p)
            if (sysname, ev) == (self.system, self.event):
                return Field(fld)
            ref = VarRef(sysname, ev, "synthetic_" + fld)
            ref.field = fld
            ref.pos = pos
            assert self.trig is not None      # parse() sets it before any param
            self.trig.field_vars.append(ref)
            return Field(p, ref=ref)
        kind = self.kind_of(p)
        if kind is None:
            raise self.err("PARAM_NOT_FOUND", pos, detail=p)
        return Field(p)


_EXPR_CHARS = re.compile(r"[+\-*/]")
_WORDS = ("pause", "cont", "continue", "clear", "nohitcount", "NOHC")


def _split_commas(val: str, pos: int) -> list[tuple[str, int]]:
    out, at = [], pos
    for it in val.split(","):
        out.append((it, at))
        at += len(it) + 1
    return out


def parse_hist(command: str, fields: Mapping[str, str], system: str = "", event: str = "",
               tr=None) -> tuple[bool, HistTrigger]:
    """Parse one hist command: (remove, trigger), or HistError with the caret."""
    return _Parser(command, fields, system, event, tr).parse()


def hist_triggers_of(ef: EventFile) -> list[HistTrigger]:
    return [t for t in ef.triggers if isinstance(t, HistTrigger)]


def apply_hist_command(ef: EventFile, text: str) -> None:
    """A hist command written to ``ef``'s trigger file (event_hist_trigger_parse)."""
    call = ef.call
    remove, t = parse_hist(text, call.fields, call.system, call.name, ef.tr)
    mine = hist_triggers_of(ef)
    same = [x for x in mine if x.key() == t.key()]
    if remove:
        if not same:
            raise HistError("HIST_NOT_FOUND", 0, text, _errno.ENOENT)
        for x in same:
            _in_use_check(x, ef, text)
            ef.triggers.remove(x)
            _release(x)
            _drop_hidden(x)
        ef._sync()
        return
    if t.pause_cmd:
        if same:
            for x in same:
                if t.pause_cmd == "pause":
                    x.paused = True
                elif t.pause_cmd == "cont":
                    x.paused = False
                else:
                    assert x.data is not None       # x was applied
                    x.data.clear()
            return
        if t.pause_cmd in ("cont", "clear"):
            raise HistError("TRIGGER_ENOENT_CLEAR", 0, text, _errno.ENOENT)
        t.paused = True
    elif same:
        raise HistError("TRIGGER_EEXIST", 0, text, _errno.EEXIST)
    if t.uses_timestamps():
        _set_clock(t, ef, text)
    _make_hidden(t, ef, text)
    with _named_lock:
        if t.name:
            have = _named.get(t.name)
            if have is not None:
                data, first = have
                if not _compatible(first, t):
                    _drop_hidden(t)
                    raise HistError("NAMED_MISMATCH", 0, text)
                t.data = data
            else:
                t.data = HistData(t.size)
                _named[t.name] = (t.data, t)
        else:
            t.data = HistData(t.size)
        t.data.users += 1
    t.ef = ef
    t.want_comm = any("execname" in f.mods for f in t.keys)
    t.fast = _compile_hit(t)
    t.needs_common = t.filter is not None or t.want_comm or any(
        _COMMON.get(n) in ("int", "str") and n not in t.ef.call.fields
        for n in t.field_names())
    for r in t._refs:
        if r.owner is not None:
            r.owner.__dict__.setdefault("_readers", []).append(t)
    _synth_users(t, +1)
    ef.triggers.append(t)
    ef._sync()


def _synth_users(t: HistTrigger, n: int) -> None:
    """A trigger whose actions generate synthetic events is one more (or one fewer)
    user of each: a synthetic event in use is not removed (synth.py)."""
    for a in t.actions:
        if a.synth is not None:
            a.synth.synth.users += n


def _set_clock(t: HistTrigger, ef: EventFile, text: str) -> None:
    """hist_register_trigger(): a trigger reading common_timestamp switches its
    instance to its clock (tracing_set_clock, which clears the buffers: so only when
    the clock changes), and reads common_timestamp from the instance's clock, as the
    kernel reads it from the ring buffer event."""
    tr = ef.tr
    want = t.clock or "global"
    if tr is None or not hasattr(tr, "set_clock"):
        return
    if tr.clock != want:
        try:
            tr.set_clock(want)
        except ValueError:
            raise HistError("SET_CLOCK_FAIL", 0, text) from None
    t.now = tr.clock_now


def _make_hidden(t: HistTrigger, ef: EventFile, text: str) -> None:
    """Field variables (create_field_var_hist): for each SYS.EVENT.FIELD param, a
    trigger on that event keyed as its first hist trigger, under the same filter, that
    keeps FIELD in ``synthetic_FIELD`` (listed in its trigger and hist files, as the
    kernel lists it); it goes when ``t`` goes."""
    for ref in t.field_vars:
        assert ref.event is not None        # a field variable names its SYS.EVENT
        tef = ef.tr.event_file(find_event_call(ref.system, ref.event))
        base = next((x for x in hist_triggers_of(tef) if not x.__dict__.get("hidden_for")),
                    None)
        if base is None:
            _drop_hidden(t)
            raise HistError("FIELD_VAR_CREATE_FAIL", ref.pos, text)
        cmd = (f"hist:keys={','.join(f.text() for f in base.keys)}:{ref.name}={ref.field}"
               + (f" if {base.filter_text}" if base.filter_text else ""))
        h = next((x for x in hist_triggers_of(tef) if x.source == cmd), None)
        if h is None:
            apply_hist_command(tef, cmd)
            h = hist_triggers_of(tef)[-1]
            h.hidden_for = t
            t.hidden.append(h)
        ref.owner, ref.target = h, h.vars[0]


def _drop_hidden(t: HistTrigger) -> None:
    for h in t.hidden:
        hef = h.ef
        if hef is not None and h in hef.triggers:
            hef.triggers.remove(h)
            _release(h)
            hef._sync()
    t.hidden = []


def _compatible(a: HistTrigger, b: HistTrigger) -> bool:
    return (len(a.keys) == len(b.keys) and len(a.vals) == len(b.vals)
            and [f.name for f in a.keys] == [f.name for f in b.keys]
            and [f.text() for f in a.vals] == [f.text() for f in b.vals]
            and [f.text() for f in a.vars] == [f.text() for f in b.vars]
            and a.sort == b.sort)


def _in_use_check(x: HistTrigger, ef: EventFile, text: str) -> None:
    """A trigger whose variables another live trigger reads cannot go first (-EBUSY)."""
    readers = [r for r in x.__dict__.get("_readers", [])
               if r is not x and r.ef is not None and r in r.ef.triggers]
    if readers:
        e = FntraceError(f"a variable of this trigger is used by {readers[0].ef.call.full_name}'s "
                         "hist trigger: remove that one first", pos=0, command=text)
        e.errno = _errno.EBUSY
        raise e


def _release(x: HistTrigger) -> None:
    if x.ef is None:
        return                  # (already let go)
    _synth_users(x, -1)
    assert x.data is not None           # x.ef is set: x was applied
    with _named_lock:
        x.data.users -= 1
        if x.name and x.data.users <= 0:
            _named.pop(x.name, None)
    x.ef = None


# -- the hit, compiled --------------------------------------------------------------------
#
# A trigger whose fields are plain (event and common fields with their modifiers,
# common_timestamp, hitcount; no variable references, expressions, stack traces or
# actions) gets its hit as one generated function: the same steps as fire()'s general
# path, without a call per field.  The bar is a hit costing no more than
# writing the event to the ring buffer.

def _plain(f: Field) -> bool:
    return not f.op and f.const is None and f.ref is None and \
        f.name not in ("common_stacktrace", "stacktrace")


def _field_code(f: Field, var: str, missing: str) -> list[str]:
    if f.name == "common_timestamp":
        return [f"    {var} = _now() // 1000" if "usecs" in f.mods else f"    {var} = _now()"]
    code = [f"    {var} = values.get({f.name!r}, _M)",
            f"    if {var} is _M:",
            f"        {missing}"]
    if "sym" in f.mods:
        code.append(f"    {var} = _sym_ip({var})")
    code += [f"    if {var}.__class__ is not int and {var}.__class__ is not str:",
             f"        {var} = _sk({var})"]
    if "log2" in f.mods:
        code += [f"    if {var}.__class__ is int:",
                 f"        {var} = (({var} & _U64) - 1).bit_length() if {var} > 1 else 0"]
    elif f.buckets:
        code += [f"    if {var}.__class__ is int:",
                 f"        {var} = (({var} & _U64) // {f.buckets}) * {f.buckets}"]
    return code


def _compile_hit(t: HistTrigger) -> Callable[[Mapping[str, Any]], None] | None:
    if t.actions or t._refs or not all(_plain(f) for f in t.keys + t.vals + t.vars):
        return None
    lines = ["def _hit(values):"]
    for i, f in enumerate(t.keys):
        lines += _field_code(f, f"k{i}", "return")
    for i, f in enumerate(t.vals):
        if f.name != "hitcount":
            lines += _field_code(f, f"v{i}", f"v{i} = None")
    for i, f in enumerate(t.vars):
        lines += _field_code(f, f"x{i}", f"x{i} = None")
    key = "(" + "".join(f"k{i}, " for i in range(len(t.keys))) + ")"
    lines += [f"    key = {key}",
              "    with _lock:",
              "        _data.hits += 1",
              "        ents = _data.entries",
              "        e = ents.get(key)",
              "        if e is None:",
              "            if len(ents) >= _size:",
              "                _data.drops += 1",
              "                return",
              "            e = ents[key] = _Entry(_nvals)",
              "        e.hitcount += 1"]
    if t.want_comm:
        lines.append("        e.comm = values.get('comm', '') or e.comm")
    if t.vals:
        lines.append("        sums = e.sums")
    for i, f in enumerate(t.vals):
        if f.name == "hitcount":
            lines.append(f"        sums[{i}] += 1")
        else:
            lines += [f"        if v{i}.__class__ is int:",
                      f"            sums[{i}] += v{i}"]
    for i, f in enumerate(t.vars):
        lines += [f"        if x{i} is not None:",
                  f"            e.vars[{f.var!r}] = x{i}"]
    assert t.data is not None           # apply_hist_command gives it first
    env: dict[str, Any] = {"_M": _NONE, "_sk": safe_key, "_sym_ip": _sym_ip, "_U64": U64, "_now": t.now,
           "_lock": t.data.lock, "_data": t.data, "_size": t.data.size, "_Entry": Entry,
           "_nvals": len(t.vals)}
    exec(compile("\n".join(lines) + "\n", f"<hist {t.info()}>", "exec"), env)
    return env["_hit"]


def set_hist_paused(ef: EventFile, paused: bool) -> bool:
    """enable_hist/disable_hist: pause or continue the event's hist triggers; whether
    anything changed."""
    changed = False
    for t in hist_triggers_of(ef):
        if t.paused != paused:
            t.paused = paused
            changed = True
    return changed


def hist_text(ef: EventFile) -> str:
    """The event's ``hist`` file: one table per hist trigger, two newlines between."""
    return "\n\n".join(t.table() for t in hist_triggers_of(ef))


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
