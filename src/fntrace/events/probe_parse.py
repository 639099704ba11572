"""The fprobe dynamic-event grammar (kernel/trace/trace_fprobe.c, trace_probe.c), for
Python functions.  Pure: a command in, a ProbeSpec / RemoveSpec or a ProbeError out.

    f[:[GRP/][EVENT]] SYM [FETCHARGS]            probe on function entry
    f[N][:[GRP/][EVENT]] SYM%return [FETCHARGS]  probe on function exit (N ignored)
    -:[GRP/]EVENT                                remove an event

SYM is ``module.qualname`` (``pkg.mod.Class.method``, ``mod.outer.<locals>.inner``).
GRP defaults to ``fprobes``, EVENT to ``SYM__entry`` / ``SYM__exit`` with every
character that cannot be in a C identifier replaced by ``_``.

FETCHARGS, each ``[NAME=]FETCHARG[:TYPE]``:

    PARAM          a parameter of SYM by name (the Python signature plays BTF)
    $argN          the Nth parameter (N >= 1); unnamed, it becomes the parameter's name
    $arg*          every parameter, by name
    $retval        the return value (%return only)
    $comm          the thread's name
    $stackN        the Nth caller (N < 1000);  $stack: the stack depth
    \\IMM           an immediate: \\123, \\0x1f, \\-1, \\"string"
    X.attr X->attr X[3] X['key']   access chains on any of the above

    TYPE: string s8 s16 s32 s64 u8 u16 u32 u64 x8 x16 x32 x64 bool repr len char
          symbol, or a bitfield b<width>@<offset>/<container-bits>

Kernel-only forms (@ADDR, @SYM, +OFFS(ARG) dereferences) are parsed as the kernel
parses them, fetch instructions counted (FETCH_INSN_MAX), and refused only once the
whole command has passed every check the kernel makes: an error the kernel reports
later in the command (a bad bitfield, a name used twice, an argument too long) wins,
at its own caret.  %reg and & forms are refused where the kernel refuses them.

Every error has the kernel's kind (ERRORS) and the caret position the kernel would
log, as a 0-based offset into the command as written.  The checks run in the kernel's
order: the MAXACTIVE and %suffix of the probe, the event name, then (our addition)
the symbol, then the $arg pre-pass (traceprobe_expand_meta_args), the argument count,
and each argument left to right: its name, its length, its type, its body, the BTF
checks of its type (BAD_TYPE4STR), then finalize_fetch_insn's.

BTF.  The resolver tells the parser what it knows of SYM (Resolver, FuncProto,
BtfType): its parameter names, and, when it knows them, the types of its parameters
and return value.  With types the parser refuses what the kernel refuses with BTF:
$retval of a function that returns None (NO_RETVAL), a field a type does not have
(NO_PTR_STRCT on a value such as an int, NO_BTF_FIELD on a class), :string on what
is never a str (BAD_TYPE4STR).  Whatever the resolver cannot decide is BTF_ANY and
accepted, as the kernel accepts what it has no BTF for.

Each FetchArg keeps its text as written (parg->comm), which is what dynamic_events
lists: ``$retval->name:string`` reads back as ``$retval->name:string``.
"""
from __future__ import annotations

import errno as _errno
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from fntrace.errors import FntraceError

from .parsing import ParseFail as _Fail, kstrtoull as _kstrtoull

__all__ = [
    "ERRORS",
    "UNRESOLVED",
    "BTF_ANY",
    "BTF_VOID",
    "BtfType",
    "FuncProto",
    "Resolver",
    "ProbeError",
    "FetchArg",
    "ProbeSpec",
    "RemoveSpec",
    "parse_probe_command",
    "FPROBE_EVENT_SYSTEM",
    "MAX_TRACE_ARGS",
    "MAX_ARG_NAME_LEN",
    "MAX_ARGSTR_LEN",
    "MAX_EVENT_NAME_LEN",
    "MAX_STACK_NUM",
    "FETCH_INSN_MAX",
    "FETCH_TYPES",
]

FPROBE_EVENT_SYSTEM = "fprobes"
MAX_TRACE_ARGS = 128        # trace_probe.h
MAX_ARG_NAME_LEN = 32       # trace_probe.h
MAX_ARGSTR_LEN = 63         # trace_probe.h: a FETCHARG (without NAME=) is at most 63
MAX_EVENT_NAME_LEN = 64     # trace.h: names are at most 63 characters
MAX_ARRAY_LEN = 64          # trace_probe.h
MAX_STACK_NUM = 1000        # $stackN: N < 1000
FETCH_INSN_MAX = 16         # trace_probe.h: fetch instructions of one argument, END included

# kernel/trace/trace_probe.h ERRORS, verbatim.
ERRORS: dict[str, str] = {
    "FILE_NOT_FOUND": "Failed to find the given file",
    "NO_REGULAR_FILE": "Not a regular file",
    "BAD_REFCNT": "Invalid reference counter offset",
    "REFCNT_OPEN_BRACE": "Reference counter brace is not closed",
    "BAD_REFCNT_SUFFIX": "Reference counter has wrong suffix",
    "BAD_UPROBE_OFFS": "Invalid uprobe offset",
    "BAD_MAXACT_TYPE": "Maxactive is only for function exit",
    "BAD_MAXACT": "Invalid maxactive number",
    "MAXACT_TOO_BIG": "Maxactive is too big",
    "BAD_PROBE_ADDR": "Invalid probed address or symbol",
    "NON_UNIQ_SYMBOL": "The symbol is not unique",
    "BAD_RETPROBE": "Retprobe address must be an function entry",
    "NO_TRACEPOINT": "Tracepoint is not found",
    "BAD_TP_NAME": "Invalid character in tracepoint name",
    "BAD_ADDR_SUFFIX": "Invalid probed address suffix",
    "NO_GROUP_NAME": "Group name is not specified",
    "GROUP_TOO_LONG": "Group name is too long",
    "BAD_GROUP_NAME": "Group name must follow the same rules as C identifiers",
    "NO_EVENT_NAME": "Event name is not specified",
    "EVENT_TOO_LONG": "Event name is too long",
    "BAD_EVENT_NAME": "Event name must follow the same rules as C identifiers",
    "EVENT_EXIST": "Given group/event name is already used by another event",
    "RETVAL_ON_PROBE": "$retval is not available on probe",
    "NO_RETVAL": "This function returns 'void' type",
    "BAD_STACK_NUM": "Invalid stack number",
    "BAD_ARG_NUM": "Invalid argument number",
    "BAD_VAR": "Invalid $-valiable specified",
    "BAD_REG_NAME": "Invalid register name",
    "BAD_MEM_ADDR": "Invalid memory address",
    "BAD_IMM": "Invalid immediate value",
    "IMMSTR_NO_CLOSE": "String is not closed with '\"'",
    "FILE_ON_KPROBE": "File offset is not available with kprobe",
    "BAD_FILE_OFFS": "Invalid file offset value",
    "SYM_ON_UPROBE": "Symbol is not available with uprobe",
    "TOO_MANY_OPS": "Dereference is too much nested",
    "DEREF_NEED_BRACE": "Dereference needs a brace",
    "BAD_DEREF_OFFS": "Invalid dereference offset",
    "DEREF_OPEN_BRACE": "Dereference brace is not closed",
    "COMM_CANT_DEREF": "$comm can not be dereferenced",
    "BAD_FETCH_ARG": "Invalid fetch argument",
    "ARRAY_NO_CLOSE": "Array is not closed",
    "BAD_ARRAY_SUFFIX": "Array has wrong suffix",
    "BAD_ARRAY_NUM": "Invalid array size",
    "ARRAY_TOO_BIG": "Array number is too big",
    "BAD_TYPE": "Unknown type is specified",
    "BAD_STRING": "String accepts only memory argument",
    "BAD_SYMSTRING": "Symbol String doesn't accept data/userdata",
    "BAD_BITFIELD": "Invalid bitfield",
    "ARG_NAME_TOO_LONG": "Argument name is too long",
    "NO_ARG_NAME": "Argument name is not specified",
    "BAD_ARG_NAME": "Argument name must follow the same rules as C identifiers",
    "USED_ARG_NAME": "This argument name is already used",
    "ARG_TOO_LONG": "Argument expression is too long",
    "NO_ARG_BODY": "No argument expression",
    "BAD_INSN_BNDRY": "Probe point is not an instruction boundary",
    "FAIL_REG_PROBE": "Failed to register probe event",
    "DIFF_PROBE_TYPE": "Probe type is different from existing probe",
    "DIFF_ARG_TYPE": "Argument type or name is different from existing probe",
    "SAME_PROBE": "There is already the exact same probe event",
    "NO_EVENT_INFO": "This requires both group and event name to attach",
    "BAD_ATTACH_EVENT": "Attached event does not exist",
    "BAD_ATTACH_ARG": "Attached event does not have this field",
    "NO_EP_FILTER": "No filter rule after 'if'",
    "NOSUP_BTFARG": "BTF is not available or not supported",
    "NO_BTFARG": "This variable is not found at this probe point",
    "NO_BTF_ENTRY": "No BTF entry for this probe point",
    "BAD_VAR_ARGS": "$arg* must be an independent parameter without name etc.",
    "NOFENTRY_ARGS": "$arg* can be used only on function entry or exit",
    "DOUBLE_ARGS": "$arg* can be used only once in the parameters",
    "ARGS_2LONG": "$arg* failed because the argument list is too long",
    "ARGIDX_2BIG": "$argN index is too big",
    "NO_PTR_STRCT": "This is not a pointer to union/structure.",
    "NOSUP_DAT_ARG": "Non pointer structure/union argument is not supported.",
    "BAD_HYPHEN": "Failed to parse single hyphen. Forgot '>'?",
    "NO_BTF_FIELD": "This field is not found.",
    "BAD_BTF_TID": "Failed to get BTF type info.",
    "BAD_TYPE4STR": "This type does not fit for string.",
    "NEED_STRING_TYPE": "$comm and immediate-string only accepts string type",
    "TOO_MANY_ARGS": "Too many arguments are specified",
    "TOO_MANY_EARGS": "Too many entry arguments specified",
}

# trace_probe.c reserved_field_names: an argument may not take one of these names.
RESERVED_FIELD_NAMES = frozenset({
    "common_type", "common_flags", "common_preempt_count", "common_pid",
    "common_tgid", "__probe_ip", "__probe_ret_ip", "__probe_func",
})

FETCH_TYPES = frozenset({
    "string", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64",
    "x8", "x16", "x32", "x64", "bool", "repr", "len", "char", "symbol",
})


class _Unresolved:
    """resolve()'s answer for a symbol whose module is not imported yet."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNRESOLVED"

    def __reduce__(self) -> str:
        return "UNRESOLVED"


UNRESOLVED: Any = _Unresolved()


class BtfType:
    """One type as a resolver knows it: the parser's ``struct btf_type``.  It holds
    only what lets the parser refuse what the kernel refuses with BTF; whatever a
    resolver cannot decide is BTF_ANY, which every check accepts.

    name     what to call it: ``int``, ``shop.cart.Cart``
    kind     "void"    no value: a function that returns None (NO_RETVAL)
             "value"   int, str, bytes, ...: a field it lacks is NO_PTR_STRCT
                       ("not a pointer to union/structure")
             "struct"  a class: a field it lacks is NO_BTF_FIELD
             "any"     not known (BTF_ANY)
    members  the fields (attributes) a value of the type has: a mapping (a name it
             does not hold is a field the type lacks), or a function of the name
             returning the field's BtfType, BTF_ANY (it may have it, type not known)
             or None (it has no such field); None: not known (every field BTF_ANY)
    string   a value of the type may be a str, so ``:string`` fits (else
             BAD_TYPE4STR)
    """

    __slots__ = ("name", "kind", "members", "string")

    def __init__(self, name: str, kind: str,
                 members: "Mapping[str, BtfType] | Callable[[str], BtfType | None] | None" = None,
                 *, string: bool = False):
        self.name = name
        self.kind = kind
        self.members = members
        self.string = string

    def member(self, name: str) -> "BtfType | None":
        """The type of field ``name`` (BTF_ANY if not known); None if there is none."""
        m = self.members
        if m is None:
            return BTF_ANY
        if callable(m):
            return m(name)
        return m.get(name)

    def __repr__(self) -> str:
        return f"BtfType({self.name!r}, {self.kind!r})"


BTF_ANY = BtfType("?", "any", string=True)
BTF_VOID = BtfType("void", "void", {})


@dataclass(frozen=True)
class FuncProto:
    """A function as a resolver knows it: BTF's ``func_proto``.

    params  parameter names in signature order: positional, the *args name,
            keyword-only, the **kwargs name ($argN counts in this order)
    types   parameter name -> BtfType, for the parameters whose type is known
    retval  the return type: BTF_VOID for a function that returns None (its
            $retval is NO_RETVAL), BTF_ANY when not known
    """
    params: tuple[str, ...]
    types: Mapping[str, BtfType] = field(default_factory=dict)
    retval: BtfType = BTF_ANY


# What parse_probe_command asks about SYM: a FuncProto, or only its parameter names
# (nothing is known of their types), None if there is no such function
# (BAD_PROBE_ADDR), UNRESOLVED if it may appear later (its module is not imported
# yet): then names and $argN are accepted unchecked.  A resolver must not run the
# traced program's code to answer.
Resolver = Callable[[str], FuncProto | Sequence[str] | None | _Unresolved]


class ProbeError(FntraceError):
    """A bad dynamic_events command.  .kind is the kernel's TP_ERR_ name (None for a
    command the kernel rejects without an error_log entry), .msg its text, .pos the
    caret's 0-based offset in .command."""

    errno = _errno.EINVAL

    def __init__(self, msg: str, *, pos: int | None = None, command: str | None = None,
                 kind: str | None = None):
        super().__init__(msg, pos=pos, command=command)
        self.kind = kind


@dataclass
class FetchArg:
    """One fetch argument.

    name      the event field's name
    expr      what to fetch, a tuple tree:
                ("arg", n)  ("param", name)  ("retval",)  ("comm",)  ("stack", n)
                ("stackdepth",)  ("imm", value)  ("attr", base, name)
                ("item", base, key)  ("varargs",) ($arg* of a symbol not imported yet)
    type      the :TYPE, or None
    text      the FETCHARG as written, without NAME= and :TYPE (the kernel's
              parg->comm); an unnamed $argN is written as its parameter's name
    at_entry  a parameter or $argN on a %return probe: fetched at entry
    """
    name: str
    expr: tuple
    type: str | None
    text: str
    at_entry: bool = False

    def definition(self) -> str:
        """``NAME=FETCHARG[:TYPE]`` as dynamic_events lists it."""
        if self.expr == ("varargs",):
            return "$arg*"
        return f"{self.name}={self.text}" + (f":{self.type}" if self.type else "")


@dataclass
class ProbeSpec:
    """A parsed ``f`` command.  resolved is False when SYM's module was not imported:
    parameter names and $argN were not checked and $arg* was kept as ("varargs",);
    parse the command again once the function exists."""
    group: str
    event: str
    symbol: str
    is_return: bool
    args: list[FetchArg]
    command: str
    resolved: bool = True

    def normalized(self) -> str:
        """The line ``cat dynamic_events`` shows."""
        head = f"f:{self.group}/{self.event} {self.symbol}" + ("%return" if self.is_return else "")
        return " ".join([head] + [a.definition() for a in self.args])


@dataclass
class RemoveSpec:
    """A ``-:[GRP/]EVENT [ARGS...]`` command; args, if any, must match the probe's."""
    group: str | None
    event: str
    args: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------
# Lexical helpers (kernel semantics: ASCII ctype, kstrto* base 0)

_C_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_IDENT = re.compile(r"[^\W\d]\w*")          # a Python identifier (Unicode)
_VAR = re.compile(r"\$([A-Za-z0-9_*]*)")
_ARGN = re.compile(r"\$arg([0-9]+)")
_INDEX = re.compile(r"-?(?:0[xX][0-9a-fA-F]+|[0-9]+)\Z")
_DIGITS = {8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}


def _good_name(s: str) -> bool:
    """is_good_name(): the rules of C identifiers."""
    return _C_NAME.match(s) is not None


def _isdigit(c: str) -> bool:
    return "0" <= c <= "9" and len(c) == 1


def _kstrtoll(s: str) -> int | None:
    """kstrtoll(s, 0, ...)."""
    if s[:1] == "-":
        v = _kstrtoull(s[1:])
        return -v if v is not None and v <= 1 << 63 else None
    v = _kstrtoull(s)
    return v if v is not None and v < 1 << 63 else None


def _simple_strtoul(s: str) -> tuple[int, int]:
    """simple_strtoul(s, &end, 0): (value, characters used); reads a prefix."""
    i, base = 0, 10
    if s[:1] == "0":
        if s[1:2] in ("x", "X") and s[2:3] and s[2] in _DIGITS[16]:
            base, i = 16, 2
        else:
            base = 8
    j = i
    while j < len(s) and s[j] in _DIGITS[base]:
        j += 1
    return (int(s[i:j], base) if j > i else 0), j


def _event_name_default(symbol: str, is_return: bool) -> str:
    """snprintf("%s__%s") into a MAX_EVENT_NAME_LEN buffer, then sanitized."""
    name = f"{symbol}__{'exit' if is_return else 'entry'}"[:MAX_EVENT_NAME_LEN - 1]
    return "".join(c if (c.isascii() and (c.isalnum() or c == "_")) else "_" for c in name)


def _valid_symbol(sym: str) -> bool:
    """module.qualname: identifiers and <locals>-style parts joined by dots."""
    if not sym:
        return False
    for part in sym.split("."):
        if part.startswith("<") and part.endswith(">"):
            part = part[1:-1]
        if not part.isidentifier():
            return False
    return True


def _type_colon(body: str) -> int:
    """Where :TYPE starts.  The kernel takes the first ':'; we skip those inside an
    immediate string or a quoted ['key']."""
    if body.startswith('\\"'):
        q = body.rfind('"')
        return body.find(":", q + 1 if q >= 2 else 2)
    quote = ""
    for i, ch in enumerate(body):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == ":":
            return i
    return -1


# --------------------------------------------------------------------------------------
# The argument parser (trace_probe.c parse_probe_arg and friends)

@dataclass
class _Ctx:
    """traceprobe_parse_context, for one argument."""
    is_return: bool
    params: list[str] | None          # None: not known (UNRESOLVED)
    proto: FuncProto | None = None    # the types, when the resolver knows them
    rewrite_argn: bool = False        # an unnamed $argN is the parameter's name
    offset: int = 0                   # ctx->offset: where most errors are logged
    insn: int = 0                     # index of the last fetch instruction
    deref: bool = False               # ... which is a FETCH_OP_DEREF
    last_type: BtfType | None = None  # ctx->last_type: the BTF type of the value fetched
    type_pos: int = 0                 # where BAD_TYPE4STR is logged
    memory: _Fail | None = None       # the first memory fetch: refused once all is parsed

    def next_insn(self, pos: int) -> None:
        """``if (++code == end)``: one more fetch instruction, TOO_MANY_OPS at pos when
        only FETCH_OP_END is left."""
        self.insn += 1
        if self.insn >= FETCH_INSN_MAX - 1:
            raise _Fail("TOO_MANY_OPS", pos)

    def fetch_memory(self, kind: str, pos: int) -> None:
        """The kernel reads memory here; Python has none to read.  The first such fetch
        of the argument is refused (kind at pos) after every check the kernel makes."""
        self.deref, self.last_type = True, None
        if self.memory is None:
            self.memory = _Fail(kind, pos)

    def param_type(self, name: str) -> BtfType:
        return self.proto.types.get(name, BTF_ANY) if self.proto is not None else BTF_ANY


def _parse_expr(s: str, pos: int, ctx: _Ctx) -> tuple:
    """parse_probe_arg(): the expr tree of one FETCHARG without its type; pos is where
    s starts in the command."""
    c = s[:1]
    if c == "$":
        return _parse_var(s, pos, ctx)
    if c == "%":                              # fprobes do not handle registers
        raise _Fail("BAD_VAR", pos)
    if c == "@":
        return _parse_mem(s, pos, ctx)
    if c in ("+", "-"):
        return _parse_deref(s, pos, ctx)
    if c == "\\":
        return _parse_imm(s, pos)
    if c and (c.isalpha() or c == "_"):
        return _parse_param(s, pos, ctx)
    raise _Fail("BAD_FETCH_ARG", pos)


def _parse_var(s: str, pos: int, ctx: _Ctx) -> tuple:
    """parse_probe_vars(): $retval $stack $stackN $comm $argN, then a chain."""
    m = _VAR.match(s)
    assert m is not None
    name, end = m.group(1), m.end()
    typ: BtfType | None = None                # BTF types: $retval and parameters only
    if name.startswith("retval"):
        if not ctx.is_return:
            raise _Fail("RETVAL_ON_PROBE", pos)
        if name != "retval":
            raise _Fail("BAD_VAR", pos)
        typ = ctx.proto.retval if ctx.proto is not None else BTF_ANY
        if typ.kind == "void":                # parse_btf_arg: proto->type == 0
            raise _Fail("NO_RETVAL", pos)
        base: tuple = ("retval",)
    elif name.startswith("stack"):
        tail = name[5:]
        if not tail:
            base = ("stackdepth",)
        elif all(_isdigit(ch) for ch in tail):
            n = int(tail)
            if n >= MAX_STACK_NUM:
                raise _Fail("BAD_STACK_NUM", pos)
            base = ("stack", n)
        else:
            raise _Fail("BAD_VAR", pos)
    elif name in ("comm", "COMM"):
        base = ("comm",)
    elif name.startswith("arg"):
        tail = name[3:]
        if tail.startswith("*"):
            raise _Fail("BAD_VAR_ARGS", pos)
        if not tail or not all(_isdigit(ch) for ch in tail):
            raise _Fail("BAD_VAR", pos)
        n = int(tail)
        if n == 0 or n > MAX_TRACE_ARGS:
            raise _Fail("BAD_ARG_NUM", pos)
        if ctx.params is not None and n > len(ctx.params):
            raise _Fail("NO_BTFARG", pos)
        if ctx.rewrite_argn and ctx.params is not None:
            pname = ctx.params[n - 1]
            base, typ = ("param", pname), ctx.param_type(pname)
        else:                                 # FETCH_OP_ARG: a register, no BTF type
            base = ("arg", n)
    else:
        raise _Fail("BAD_VAR", pos)
    return _parse_chain(s, end, pos, base, "BAD_VAR", ctx, typ)


def _parse_param(s: str, pos: int, ctx: _Ctx) -> tuple:
    """A parameter by name (parse_btf_arg), then a chain."""
    m = _IDENT.match(s)
    if m is None:
        raise _Fail("BAD_FETCH_ARG", pos)
    name = m.group()
    if ctx.params is not None and name not in ctx.params:
        raise _Fail("NO_BTFARG", pos)
    return _parse_chain(s, m.end(), pos, ("param", name), "NO_BTFARG", ctx,
                        ctx.param_type(name))


def _parse_chain(s: str, i: int, pos: int, expr: tuple, base_kind: str, ctx: _Ctx,
                 typ: BtfType | None) -> tuple:
    """.attr ->attr [int] ['key'] ["key"] after a base.  base_kind is the error for
    junk straight after the base's name (the kernel sees one unknown name).

    typ is the base's BTF type (None: the base has none, nothing is checked).  As in
    parse_btf_field, a field is looked up once the separator after it is known to be
    good, on the type of what it is a field of: a value without it is NO_PTR_STRCT, a
    class without it NO_BTF_FIELD, both at the field's name.  Each '->' starts a
    group of fields read with one FETCH_OP_DEREF; '.' and [...] add no instruction.
    """
    n = len(s)
    seg_start, seg_kind = pos, base_kind
    pending: tuple[str, int] | None = None    # a field split off, not looked up yet
    group = False                              # in a '->' group
    last = pos                                 # where the last field's name stands

    def settle() -> None:
        nonlocal pending, typ
        if pending is None:
            return
        fname, fpos = pending
        pending = None
        ctx.type_pos = fpos
        if typ is None:
            return
        ftyp = typ.member(fname)
        if ftyp is None:
            raise _Fail("NO_BTF_FIELD" if typ.kind == "struct" else "NO_PTR_STRCT", fpos)
        typ = ftyp

    ctx.type_pos = pos
    while i < n:
        c = s[i]
        if c == "[":
            settle()
            j = i + 1
            q = s[j:j + 1]
            if q in ("'", '"'):
                k = s.find(q, j + 1)
                if k < 0:
                    raise _Fail("ARRAY_NO_CLOSE", pos + n)
                key: int | str = s[j + 1:k]
                if k + 1 >= n:
                    raise _Fail("ARRAY_NO_CLOSE", pos + n)
                if s[k + 1] != "]":
                    raise _Fail("BAD_ARRAY_NUM", pos + j)
                i = k + 2
            else:
                k = s.find("]", j)
                if k < 0:
                    raise _Fail("ARRAY_NO_CLOSE", pos + n)
                idx = s[j:k]
                if not _INDEX.match(idx):
                    raise _Fail("BAD_ARRAY_NUM", pos + j)
                key = int(idx, 0) if "x" in idx.lower() else int(idx)
                i = k + 1
            expr = ("item", expr, key)
            if typ is not None:                # an item's type is not known
                typ = BTF_ANY
            if i < n and s[i] not in ".-[":
                raise _Fail("BAD_ARRAY_SUFFIX", pos + i)
            seg_kind = ""
            continue
        if c == ".":
            j, arrow = i + 1, False
        elif c == "-":
            if s[i + 1:i + 2] != ">":
                raise _Fail("BAD_HYPHEN", pos + i)
            j, arrow = i + 2, True
        else:
            # junk right after a name: the kernel would look up "name+junk"
            raise _Fail(seg_kind or "BAD_FETCH_ARG", seg_start)
        settle()
        if arrow:
            if group:                          # the group before ends: its DEREF
                ctx.offset = pos + j
                ctx.next_insn(pos + j)
            group = True
        m = _IDENT.match(s, j)
        if m is None:
            raise _Fail("NO_BTF_FIELD", pos + j)
        expr = ("attr", expr, m.group())
        pending = (m.group(), pos + j)
        last = seg_start = pos + j
        seg_kind = "NO_BTF_FIELD"
        i = m.end()
    settle()
    if group:
        ctx.offset = last
        ctx.next_insn(last)
        ctx.deref = True
    ctx.last_type = typ
    return expr


def _parse_mem(s: str, pos: int, ctx: _Ctx) -> tuple:
    """@ADDR or @SYM[+|-offs]: memory, as the kernel parses it (the symbol is looked
    up only at registration)."""
    if _isdigit(s[1:2]):
        if _kstrtoull(s[1:]) is None:
            raise _Fail("BAD_MEM_ADDR", pos)
        # FETCH_OP_IMM: the address
    elif s[1:2] == "+":
        raise _Fail("FILE_ON_KPROBE", pos)
    else:
        ctx.next_insn(pos)                    # FETCH_NOP_SYMBOL, then FETCH_OP_IMM
    ctx.next_insn(pos)                        # FETCH_OP_DEREF
    ctx.fetch_memory("BAD_MEM_ADDR", pos)
    return ("memory", s)


def _parse_deref(s: str, pos: int, ctx: _Ctx) -> tuple:
    """+|-[u]OFFS(FETCHARG): a dereference, as the kernel parses it."""
    a, skip = s, 0
    if a[1:2] == "u":                         # +u / -u: user-space dereference
        a, skip = a[0] + a[2:], 1
    if a[0] == "+":
        a, skip = a[1:], skip + 1
    lp = a.find("(")
    if lp < 0:
        raise _Fail("DEREF_NEED_BRACE", pos)
    if _kstrtoll(a[:lp]) is None:
        raise _Fail("BAD_DEREF_OFFS", pos)
    inner_pos = pos + skip + lp + 1
    inner = a[lp + 1:]
    rp = inner.rfind(")")
    if rp < 0:
        raise _Fail("DEREF_OPEN_BRACE", inner_pos + len(inner))
    inner = inner[:rp]                        # what follows the last ')' is dropped
    if not inner:
        raise _Fail("BAD_FETCH_ARG", inner_pos)
    expr = _parse_expr(inner, inner_pos, ctx)
    ctx.offset = inner_pos                    # ctx->offset = cur_offs
    if expr == ("comm",) or (expr[0] == "imm" and isinstance(expr[1], str)):
        raise _Fail("COMM_CANT_DEREF", inner_pos)
    ctx.next_insn(inner_pos)
    ctx.fetch_memory("BAD_FETCH_ARG", pos)
    return ("memory", s)


def _parse_imm(s: str, pos: int) -> tuple:
    """\\IMM: \\"string" or a number (str_to_immediate)."""
    if s[1:2] == '"':
        rest = s[2:]
        if not rest or rest[-1] != '"':
            raise _Fail("IMMSTR_NO_CLOSE", pos + len(s))
        return ("imm", rest[:-1])
    num = s[1:]
    if num[:1] == "-":
        v = _kstrtoll(num)
    elif num[:1] == "+":
        v = _kstrtoll(num[1:])
    elif _isdigit(num[:1]):
        v = _kstrtoull(num)
    else:
        v = None
    if v is None:
        raise _Fail("BAD_IMM", pos + 1)
    return ("imm", v)


def _check_bitfield(t: str) -> bool:
    """__parse_bitfield_probe_arg(): b<width>@<offset>/<container>, all fitting."""
    bw, used = _simple_strtoul(t[1:])
    tail = t[1 + used:]
    if bw == 0 or tail[:1] != "@":
        return False
    bo, used = _simple_strtoul(tail[1:])
    rest = tail[1 + used:]
    if used == 0 or rest[:1] != "/":
        return False
    return bw + bo <= (_kstrtoull(rest[1:]) or 0)


def _known_type(t: str) -> bool:
    """find_fetch_type(): a listed type, or a bitfield in an 8/16/32/64-bit container."""
    if t in FETCH_TYPES:
        return True
    if t[:1] == "b":
        slash = t.find("/")
        return slash >= 0 and _kstrtoull(t[slash + 1:]) in (8, 16, 32, 64)
    return False


def _parse_body(body: str, bpos: int, ctx: _Ctx, length: int | None = None
                ) -> tuple[tuple, str | None, str]:
    """traceprobe_parse_probe_arg_body(): (expr, type, FETCHARG as written without
    its type).  length: of the word the kernel parses, if not body's own (an unnamed
    $argN is rewritten to its parameter's name before it is parsed)."""
    if (len(body) if length is None else length) > MAX_ARGSTR_LEN:
        raise _Fail("ARG_TOO_LONG", bpos)
    if not body:
        raise _Fail("NO_ARG_BODY", bpos)
    # parse_probe_arg_type()
    colon = _type_colon(body)
    typ: str | None = None
    count = 0
    if colon >= 0:
        typ = body[colon + 1:]
        toff = colon + 1                      # where the type starts in body
        lb = typ.find("[")
        if lb >= 0:
            rb = typ.find("]", lb + 1)
            if rb < 0:
                raise _Fail("ARRAY_NO_CLOSE", bpos + len(body))
            if rb + 1 != len(typ):
                raise _Fail("BAD_ARRAY_SUFFIX", bpos + toff + rb + 1)
            n = _kstrtoull(typ[lb + 1:rb])
            if not n or n >= 1 << 32:
                raise _Fail("BAD_ARRAY_NUM", bpos + toff + lb + 1)
            if n > MAX_ARRAY_LEN:
                raise _Fail("ARRAY_TOO_BIG", bpos + toff + lb + 1)
            count, typ = n, typ[:lb]
        text = body[:colon]
    else:
        toff, text = 0, body
    if text in ("$comm", "$COMM") or text.startswith('\\"'):
        if count or (typ is not None and typ != "string"):
            raise _Fail("NEED_STRING_TYPE", bpos + toff)
    elif typ is not None and not _known_type(typ):
        raise _Fail("BAD_TYPE", bpos + toff)
    if not text:
        raise _Fail("BAD_FETCH_ARG", bpos)
    ctx.offset = bpos
    expr = _parse_expr(text, bpos, ctx)
    # check_prepare_btf_string_fetch(): a string is read only from what may be one
    if typ == "string" and ctx.last_type is not None and not ctx.last_type.string:
        raise _Fail("BAD_TYPE4STR", ctx.type_pos)
    _finalize_fetch_insn(expr, typ, count, bpos + toff, ctx)
    return expr, typ, text


def _finalize_fetch_insn(expr: tuple, typ: str | None, count: int, tpos: int,
                         ctx: _Ctx) -> None:
    """finalize_fetch_insn(): the store instruction, a bitfield's, an array's, each
    needing room before FETCH_OP_END.  tpos is where the type is written."""
    code = ctx.insn
    end = FETCH_INSN_MAX - 1
    if typ == "string":
        if expr[0] in ("stack", "stackdepth"):
            raise _Fail("BAD_STRING", tpos)
        if count or expr == ("comm",) or expr[0] == "imm":
            code += 1                         # IMM, DATA and COMM are kept: one more
            if code >= end:
                raise _Fail("TOO_MANY_OPS", ctx.offset)
    elif not ctx.deref:                       # a dereference becomes the store itself
        code += 1                             # FETCH_OP_ST_RAW
        if code >= end:
            raise _Fail("TOO_MANY_OPS", ctx.offset)
    if typ is not None and typ not in FETCH_TYPES:    # a bitfield: FETCH_OP_MOD_BF
        code += 1
        if code >= end or not _check_bitfield(typ):
            raise _Fail("BAD_BITFIELD", tpos)
    if count:                                 # FETCH_OP_LP_ARRAY over ST_MEM/ST_STRING
        if typ != "string" and not ctx.deref:
            raise _Fail("BAD_STRING", tpos)
        code += 1
        if code >= end:
            raise _Fail("TOO_MANY_OPS", ctx.offset)
        if ctx.memory is None:                # arrays are of memory; Python has none
            raise _Fail("BAD_STRING", tpos)


def _root(expr: tuple) -> tuple:
    while expr[0] in ("attr", "item"):
        expr = expr[1]
    return expr


# --------------------------------------------------------------------------------------
# Commands

def _tokens(cmd: str) -> list[tuple[str, int]]:
    """argv_split(): whitespace-separated words with their offsets."""
    return [(m.group(), m.start()) for m in re.finditer(r"\S+", cmd)]


def _parse_event_name(s: str, pos: int) -> tuple[str | None, str | None]:
    """traceprobe_parse_event_name(): [GROUP/][EVENT] or GROUP.EVENT."""
    slash = s.find("/")
    if slash < 0:
        slash = s.find(".")
    group = None
    if slash >= 0:
        if slash == 0:
            raise _Fail("NO_GROUP_NAME", pos)
        if slash + 1 > MAX_EVENT_NAME_LEN:
            raise _Fail("GROUP_TOO_LONG", pos)
        group = s[:slash]
        if not _good_name(group):
            raise _Fail("BAD_GROUP_NAME", pos)
        pos += slash + 1
        s = s[slash + 1:]
    if not s:
        if slash >= 0:
            return group, None
        raise _Fail("NO_EVENT_NAME", pos)
    if len(s) >= MAX_EVENT_NAME_LEN:
        raise _Fail("EVENT_TOO_LONG", pos)
    if not _good_name(s):
        raise _Fail("BAD_EVENT_NAME", pos)
    return group, s


def _parse_remove(toks: list[tuple[str, int]], cmd: str) -> RemoveSpec:
    head, hpos = toks[0]
    if head[1:2] != ":":
        raise ProbeError("Removal is '-:[GRP/]EVENT'", pos=hpos + 1, command=cmd)
    name = head[2:]
    group: str | None = None
    slash = name.find("/")
    epos = hpos + 2
    if slash >= 0:
        if slash == 0:
            raise _Fail("NO_GROUP_NAME", epos)
        group, name, epos = name[:slash], name[slash + 1:], epos + slash + 1
    if not name:
        raise _Fail("NO_EVENT_NAME", epos)
    return RemoveSpec(group, name, tuple(t for t, _ in toks[1:]))


def parse_probe_command(cmd: str, resolve: Resolver) -> ProbeSpec | RemoveSpec:
    """Parse one dynamic_events command.

    resolve(symbol) tells what is known of the function (see Resolver): a FuncProto
    (its parameters, and the types known), or just its parameter names in order
    (positional, the *args name, keyword-only, the **kwargs name), None if there is
    no such function (BAD_PROBE_ADDR), or UNRESOLVED if it may appear later (its
    module is not imported): names and $argN are then accepted unchecked.
    """
    try:
        return _parse(cmd, resolve)
    except _Fail as f:
        raise ProbeError(ERRORS[f.kind], pos=f.pos, command=cmd, kind=f.kind) from None


def _parse(cmd: str, resolve: Resolver) -> ProbeSpec | RemoveSpec:
    toks = _tokens(cmd)
    if not toks:
        raise ProbeError("Empty dynamic event command", pos=0, command=cmd)
    head, hpos = toks[0]
    if head[0] == "-":
        return _parse_remove(toks, cmd)
    if head[0] != "f":
        raise ProbeError(f"Unknown dynamic event type '{head[0]}' (only 'f' fprobes)",
                         pos=hpos, command=cmd)
    if len(toks) < 2:
        raise ProbeError("No function to probe", pos=len(cmd.rstrip()), command=cmd)

    # f[N][:[GRP/][EVENT]]
    rest = head[1:]
    colon = rest.find(":")
    maxact_s = rest if colon < 0 else rest[:colon]
    maxact = 0
    if maxact_s:                              # kstrtouint(), and not 0
        maxact = (_kstrtoull(maxact_s) or 0) if _isdigit(maxact_s[0]) else 0
        if not 0 < maxact < 1 << 32:
            raise _Fail("BAD_MAXACT", hpos + 1)

    # SYM[%return]
    sym_tok, spos = toks[1]
    pct = sym_tok.find("%")
    is_return = False
    symbol = sym_tok
    if pct >= 0:
        if sym_tok[pct:] != "%return":
            raise _Fail("BAD_ADDR_SUFFIX", spos + pct)
        is_return, symbol = True, sym_tok[:pct]
    if maxact and not is_return:              # MAXACTIVE is vestigial: exit probes only
        raise _Fail("BAD_MAXACT", hpos + 1)

    group: str | None = None
    event: str | None = None
    if colon >= 0:
        group, event = _parse_event_name(rest[colon + 1:], hpos + 1 + colon + 1)
    if event is None:
        event = _event_name_default(symbol, is_return)
    group = group or FPROBE_EVENT_SYSTEM

    # SYM: a dotted Python name the resolver knows ("+offset" etc. never are)
    if not _valid_symbol(symbol):
        raise _Fail("BAD_PROBE_ADDR", spos)
    found = resolve(symbol)
    if found is None:
        raise _Fail("BAD_PROBE_ADDR", spos)
    proto: FuncProto | None = None
    if isinstance(found, _Unresolved):  # UNRESOLVED, the only one
        params = None
    elif isinstance(found, FuncProto):
        proto, params = found, [str(p) for p in found.params]
    else:
        params = [str(p) for p in found]

    argtoks = toks[2:]
    items = _expand_meta_args(argtoks, params)
    if len(items) > MAX_TRACE_ARGS:
        raise _Fail("TOO_MANY_ARGS", argtoks[0][1])

    args: list[FetchArg] = []
    used: set[str] = set()
    memory: _Fail | None = None
    for k, (raw, p, generated) in enumerate(items):
        if raw is None:                       # $arg* of a symbol not imported yet
            args.append(FetchArg("", ("varargs",), None, "$arg*"))
            continue
        arg, mem = _parse_arg(raw, p, k, generated, params, proto, is_return, used)
        args.append(arg)
        memory = memory or mem
    if memory is not None:
        # The kernel would take the command; memory has no Python meaning.
        raise memory
    return ProbeSpec(group, event, symbol, is_return, args, cmd, resolved=params is not None)


def _expand_meta_args(argtoks: list[tuple[str, int]], params: list[str] | None
                      ) -> list[tuple[str | None, int, bool]]:
    """traceprobe_expand_meta_args(): check every $arg-prefixed word, then expand
    $arg* into the parameters.  Items are (word, offset, generated-by-$arg*)."""
    star = -1
    for k, (t, p) in enumerate(argtoks):      # argv_has_var_arg()
        if not t.startswith("$arg"):
            continue
        c = t[4:5]
        if _isdigit(c):
            continue
        if c != "*":
            raise _Fail("BAD_VAR", p)
        if star >= 0:
            raise _Fail("DOUBLE_ARGS", p)
        star = k
    items: list[tuple[str | None, int, bool]] = []
    for k, (t, p) in enumerate(argtoks):
        if k == star:
            if t != "$arg*":
                raise _Fail("BAD_VAR_ARGS", p)
            if params is None:
                items.append((None, p, True))
            else:
                items.extend((name, p, True) for name in params)
            continue
        m = _ARGN.match(t)
        if m is not None:                     # an unnamed $argN: check N now
            n = int(m.group(1))
            if n == 0 or n > MAX_TRACE_ARGS:
                raise _Fail("BAD_ARG_NUM", p)
            if params is not None and n > len(params):
                raise _Fail("NO_BTFARG", p)
        items.append((t, p, False))
    return items


def _parse_arg(raw: str, p: int, k: int, generated: bool, params: list[str] | None,
               proto: FuncProto | None, is_return: bool, used: set[str]
               ) -> tuple[FetchArg, _Fail | None]:
    """traceprobe_parse_probe_arg(): the k-th (0-based) fetch argument at offset p, and
    the refusal of its memory fetch if it has one (raised once all arguments passed).
    A generated word (from $arg*) reports every error at the $arg* word."""
    eq = -1 if generated else raw.find("=")
    rewrite = False
    argn = 0                                  # length of an unnamed "$argN" prefix
    if eq >= 0:
        if eq > MAX_ARG_NAME_LEN:
            raise _Fail("ARG_NAME_TOO_LONG", p)
        if eq == 0:
            raise _Fail("NO_ARG_NAME", p)
        name, body, boff = raw[:eq], raw[eq + 1:], eq + 1
        src = body
    else:
        body, boff = raw, 0
        src = raw
        m = _ARGN.match(raw)
        if m is not None and params is not None:
            # an unnamed $argN is the parameter's name (expand_meta_args)
            rewrite, argn = True, m.end()
            src = params[int(m.group(1)) - 1] + raw[m.end():]
        cand = src.split(":", 1)[0]
        name = cand if _good_name(cand) else f"arg{k + 1}"
    if not _good_name(name):
        raise _Fail("BAD_ARG_NAME", p)
    if name in RESERVED_FIELD_NAMES or name in used:
        raise _Fail("USED_ARG_NAME", p)
    ctx = _Ctx(is_return, params, proto, rewrite)
    try:
        expr, typ, text = _parse_body(body, p + boff, ctx, len(src))
    except _Fail as f:
        if generated:
            f.pos = p
        raise
    if rewrite and params is not None:        # listed as the kernel parsed it
        text = src[:len(src) - len(raw) + len(text)] if argn else text
    used.add(name)
    at_entry = is_return and _root(expr)[0] in ("arg", "param")
    return FetchArg(name, expr, typ, text, at_entry), ctx.memory


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
