"""Event filter expressions (kernel/trace/trace_events_filter.c).

    ((sig >= 10 && sig < 15) || sig == 17) && comm != bash

Predicates ``field op value`` joined by ``&&`` (binds tighter) and ``||``, grouped by
parentheses; ``!`` negates the predicate or group after it.  Numeric ops
``== != < <= > >= &`` take an integer (decimal, 0x hex, 0 octal, negative); string ops
``== != ~`` take a quoted string ('...' or "..."), or a bare word (fntrace, as
events.rst shows).  ``~`` is a glob (``*``, ``?``, ``[...]``, ``\\``); a leading ``!`` in
the pattern negates it.  The text ``0`` alone clears the filter.

Errors carry the kernel's message and the position its error_log shows.  Inside a
predicate the kernel's position is one past the offending character (parse_pred()
gets ``ptr - str`` with ptr already advanced), so ``dsig ^== 17`` marks the '=' after
an unknown field, as tracing-error-log.tc expects; we keep that.

A parsed filter compiles to one Python function: a predicate on a field the record
lacks, an integer op on a non-integer, and any exception all give False.

Depth.  The kernel's parser has no nesting limit of its own: calc_stack() sizes its
stacks from the text, and the text is less than a page (event_filter_write,
PAGE_SIZE; the filter file refuses longer writes with EINVAL, see EventFile.set_filter).
So the parser here is a loop with an explicit stack, and a filter nested deeper than
MAX_NESTED_DEPTH compiles to predicate_parse's flat program (each predicate with its
true and false branch targets) rather than to one nested Python expression: any depth
parses, compiles and evaluates, and a bad one is a FilterParseError like any other.
"""
from __future__ import annotations

import errno as _errno
from collections.abc import Callable, Mapping
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from fntrace.core.hash import (MATCH_END_ONLY, MATCH_FRONT_ONLY, MATCH_FULL, MATCH_MIDDLE_ONLY,
                               glob_match, regex_type)
from fntrace.errors import FntraceError

from .parsing import ParseFail as _Fail, kstrtoull as _kstrtoull

__all__ = [
    "ERRORS",
    "COMMON_FIELDS",
    "PAGE_SIZE",
    "MAX_NESTED_DEPTH",
    "FilterParseError",
    "EventFilter",
    "parse_filter",
]

# trace_events_filter.c ERRORS, verbatim.
ERRORS: dict[str, str] = {
    "NONE": "No error",
    "INVALID_OP": "Invalid operator",
    "TOO_MANY_OPEN": "Too many '('",
    "TOO_MANY_CLOSE": "Too few '('",
    "MISSING_QUOTE": "Missing matching quote",
    "MISSING_BRACE_OPEN": "Missing '{'",
    "MISSING_BRACE_CLOSE": "Missing '}'",
    "OPERAND_TOO_LONG": "Operand too long",
    "EXPECT_STRING": "Expecting string field",
    "EXPECT_DIGIT": "Expecting numeric field",
    "ILLEGAL_FIELD_OP": "Illegal operation for field type",
    "FIELD_NOT_FOUND": "Field not found",
    "ILLEGAL_INTVAL": "Illegal integer value",
    "BAD_SUBSYS_FILTER": "Couldn't find or set field in one of a subsystem's events",
    "TOO_MANY_PREDS": "Too many terms in predicate expression",
    "INVALID_FILTER": "Meaningless filter expression",
    "INVALID_CPULIST": "Invalid cpulist",
    "IP_FIELD_ONLY": "Only 'ip' field is supported for function trace",
    "INVALID_VALUE": "Invalid value (did you forget quotes)?",
    "NO_FUNCTION": "Function not found",
    "ERRNO": "Error",
    "NO_FILTER": "No filter found",
}

# Fields every event has (the kernel's common and generic fields we record).
COMMON_FIELDS: dict[str, str] = {"common_pid": "int", "common_cpu": "int", "comm": "str"}

MAX_FILTER_STR_VAL = 256      # a string operand is shorter than this
PAGE_SIZE = 4096              # a write to a filter or trigger file is shorter than this
NUM_BUF_LEN = 24              # "0xfeedfacedeadbeef is 18 chars max"

# Due to token parsing '<=' must be before '<' and '>=' must be before '>'.
OPS = ("~", "!=", "==", "<=", "<", ">=", ">", "&")
STRING_OPS = ("==", "!=", "~")



class FilterParseError(FntraceError):
    """A filter the kernel would reject.  .kind is the FILT_ERR_ name, .msg its text,
    .pos the caret's 0-based offset in .command (the filter text)."""

    errno = _errno.EINVAL

    def __init__(self, msg: str, *, pos: int | None = None, command: str | None = None,
                 kind: str | None = None):
        super().__init__(msg, pos=pos, command=command)
        self.kind = kind

    def annotated(self) -> str:
        """What the filter file reads back after the failed write (append_filter_err)."""
        text = self.command or ""
        pos = min(self.pos or 0, len(text))
        return f"{text}\n{' ' * pos}^\nparse_error: {self.msg}"


# --------------------------------------------------------------------------------------
# The tree.  Nodes are tuples:
#   ("or", [node, ...])  ("and", [node, ...])  ("not", node)
#   ("int", field, op, value)            op in OPS but "~"
#   ("str", field, op, value)            op "==" or "!="
#   ("glob", field, pattern, negate)     op "~"

class EventFilter:
    """A parsed filter.  Call it with a record (a mapping of field values); .match is
    the same function without the method call.  .text is what the filter file shows."""

    __slots__ = ("text", "tree", "match")

    def __init__(self, text: str, tree: tuple, match: Callable[[Mapping[str, Any]], bool]):
        self.text = text
        self.tree = tree
        self.match = match

    def __call__(self, record: Mapping[str, Any]) -> bool:
        return self.match(record)

    def __repr__(self) -> str:
        return f"EventFilter({self.text!r})"


# --------------------------------------------------------------------------------------
# Parsing

def _int_value(s: str) -> int | None:
    """kstrtoll for a negative number, kstrtoull otherwise: a Python int field is
    neither signed nor unsigned, so take the whole u64 range and the s64 negatives."""
    if s[:1] == "-":
        v = _kstrtoull(s[1:])
        return -v if v is not None and v <= 1 << 63 else None
    return _kstrtoull(s)


def _isalnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


def _calc_stack(s: str) -> int:
    """calc_stack(): quotes and parentheses balance; returns the predicate count."""
    is_pred = False
    nr_preds = 0
    depth = 1                                  # the expression counts as "(E)"
    quote = ""
    last_quote = 0
    n = len(s)
    for i, ch in enumerate(s):
        if ch.isspace():
            continue
        if quote:
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote, last_quote = ch, i
        elif ch in "|&" and i + 1 < n and s[i + 1] == ch:
            is_pred = False
            continue
        elif ch == "(":
            is_pred = False
            depth += 1
            continue
        elif ch == ")":
            is_pred = False
            if depth == 1:
                raise _Fail("TOO_MANY_CLOSE", i)
            depth -= 1
            continue
        if not is_pred:
            nr_preds += 1
            is_pred = True
    if quote:
        raise _Fail("MISSING_QUOTE", last_quote)
    if depth != 1:
        # find the bad open, scanning back (the kernel stops before index 0)
        level = depth
        for i in range(n - 1, 0, -1):
            ch = s[i]
            if quote:
                if ch == quote:
                    quote = ""
                continue
            if ch == "(":
                if level == depth:
                    raise _Fail("TOO_MANY_OPEN", i)
                level -= 1
            elif ch == ")":
                level += 1
            elif ch in "'\"":
                quote = ch
        raise _Fail("TOO_MANY_OPEN", 0)
    return nr_preds


class _Parser:
    """predicate_parse(): the same tokens, precedence and errors, without recursion —
    the kernel's parser has no depth limit of its own (its stacks are sized by
    calc_stack), so neither does this one."""

    def __init__(self, s: str, fields: Mapping[str, str]):
        self.s = s
        self.n = len(s)
        self.fields = fields

    def skip(self, i: int) -> int:
        while i < self.n and self.s[i].isspace():
            i += 1
        return i

    def parse(self) -> tuple:
        """``or := and ('||' and)*``, ``and := term ('&&' term)*``,
        ``term := '!'* ('(' or ')' | pred)``, with an explicit stack of open
        parentheses: (the or-terms, the and-terms, the '!' before the '(')."""
        s, n = self.s, self.n
        stack: list[tuple[list, list, bool]] = []
        ors: list = []
        ands: list = []
        i = 0
        while True:
            # a term: its '!'s, then a '(' (a new level) or a predicate
            i = self.skip(i)
            invert = False
            # '!' is a not, unless it starts "!=" or "!~" (is_not())
            while i < n and s[i] == "!" and s[i + 1:i + 2] not in ("=", "~"):
                invert = not invert
                i = self.skip(i + 1)
            if i < n and s[i] == "(":
                stack.append((ors, ands, invert))
                ors, ands = [], []
                i += 1
                continue
            node, i = self.pred(i)
            if invert:
                node = ("not", node)
            # after a term: only ')', '&&', '||' or the end (#5)
            while True:
                j = self.skip(i)
                if j < n and s[j] != ")" and not s.startswith("&&", j) \
                        and not s.startswith("||", j):
                    raise _Fail("TOO_MANY_PREDS", j)
                ands.append(node)
                if s.startswith("&&", j):
                    i = j + 2
                    break
                ors.append(ands[0] if len(ands) == 1 else ("and", ands))
                ands = []
                if s.startswith("||", j):
                    i = j + 2
                    break
                group = ors[0] if len(ors) == 1 else ("or", ors)
                if j >= n:
                    if stack:                   # calc_stack makes this unreachable
                        raise _Fail("TOO_MANY_OPEN", j)
                    return group
                if not stack:                   # a ')' with no '(' (calc_stack saw it)
                    raise _Fail("TOO_MANY_CLOSE", j + 1)
                ors, ands, invert = stack.pop()
                node = ("not", group) if invert else group
                i = j + 1
            # an operator was read: the next term

    def kind_of(self, name: str) -> str | None:
        kind = self.fields.get(name)
        if kind is None:
            kind = COMMON_FIELDS.get(name)
        return kind

    def pred(self, start: int) -> tuple[tuple, int]:
        """parse_pred(): one ``field op value``.  Errors at start + 1 + i, like the
        kernel's pos + i."""
        s, n = self.s, self.n
        base = start + 1
        i = start
        while i < n and (_isalnum(s[i]) or s[i] == "_"):
            i += 1
        name = s[start:i]
        if not name:                            # the kernel: -1, no message
            raise _Fail("FIELD_NOT_FOUND", base)
        kind = self.kind_of(name)
        if kind is None:
            raise _Fail("FIELD_NOT_FOUND", base + i - start)
        i = self.skip(i)
        for op in OPS:
            if s.startswith(op, i):
                break
        else:
            raise _Fail("INVALID_OP", base + i - start)
        i = self.skip(i + len(op))
        vstart = i
        c = s[i] if i < n else ""
        at = base + i - start
        if c in ("'", '"'):
            if op not in STRING_OPS:
                raise _Fail("ILLEGAL_FIELD_OP", at)
            if kind == "int":
                raise _Fail("EXPECT_DIGIT", at)
            end = s.find(c, i + 1)
            if end < 0:
                raise _Fail("MISSING_QUOTE", base + n - start)
            value = s[i + 1:end]
            if len(value) >= MAX_FILTER_STR_VAL:
                raise _Fail("OPERAND_TOO_LONG", base + end - start)
            return _string_pred(name, op, value), end + 1
        if ("0" <= c <= "9") or c == "-":
            if kind == "str":
                raise _Fail("EXPECT_STRING", at)
            if op == "~":
                raise _Fail("ILLEGAL_FIELD_OP", at)
            if c == "-":
                i += 1
            while i < n and _isalnum(s[i]):     # "We allow 0xDEADBEEF"
                i += 1
            num = s[vstart:i]
            if len(num) >= NUM_BUF_LEN:
                raise _Fail("OPERAND_TOO_LONG", base + i - start)
            ival = _int_value(num)
            if ival is None:
                raise _Fail("ILLEGAL_INTVAL", base + vstart - start)
            return ("int", name, op, ival), i
        # a bare word: a string operand (not the kernel's; events.rst writes one)
        if kind == "int":
            raise _Fail("INVALID_VALUE", at)
        while i < n and not s[i].isspace() and s[i] not in "()&|":
            i += 1
        word = s[vstart:i]
        if not word or self.kind_of(word) is not None:
            # nothing there, or another field: field-vs-field has no meaning
            raise _Fail("INVALID_VALUE", at)
        if op not in STRING_OPS:
            raise _Fail("ILLEGAL_FIELD_OP", at)
        if len(word) >= MAX_FILTER_STR_VAL:
            raise _Fail("OPERAND_TOO_LONG", base + i - start)
        return _string_pred(name, op, word), i


def _string_pred(name: str, op: str, value: str) -> tuple:
    if op == "~":
        negate = value[:1] == "!"
        return ("glob", name, value[1:] if negate else value, negate)
    return ("str", name, op, value)


# --------------------------------------------------------------------------------------
# Compiling: one generated function, the predicates inlined.

class _Missing:
    __slots__ = ()


_MISSING = _Missing()


def _to_str(v: Any) -> str | None:
    """The string a string op compares: str(v); None if absent or str() fails."""
    if v.__class__ is str:
        return v
    if v is _MISSING:
        return None
    try:
        return str(v)
    except Exception:
        return None


def _glob(pattern: str, s: str) -> bool:
    """lib/glob.c glob_match() as fixed upstream ("if (c == '\\0') return false;" for a
    class): core.hash.glob_match lets '[!a]' match the end of the string.  A sentinel
    at the end of both sides gives the fixed answer from the unfixed matcher."""
    if "\0" in pattern or "\0" in s:
        return glob_match(pattern, s)
    return glob_match(pattern + "\0", s + "\0")


_PY_OPS = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _gen(node: tuple) -> str:
    k = node[0]
    if k == "or":
        return "(" + " or ".join(_gen(x) for x in node[1]) + ")"
    if k == "and":
        return "(" + " and ".join(_gen(x) for x in node[1]) + ")"
    if k == "not":
        return f"(not {_gen(node[1])})"
    if k == "int":
        _, name, op, value = node
        get = f"isinstance(_v := _get({name!r}, _M), int)"
        if op == "&":
            return f"({get} and (_v & {value!r}) != 0)"
        return f"({get} and _v {_PY_OPS[op]} {value!r})"
    if k == "str":
        _, name, op, value = node
        if op == "==":
            return f"(_str(_get({name!r}, _M)) == {value!r})"
        return f"((_s := _str(_get({name!r}, _M))) is not None and _s != {value!r})"
    if k == "glob":
        _, name, pattern, negate = node
        mtype, search = regex_type(pattern)
        if mtype == MATCH_FULL:
            test = f"_s == {search!r}"
        elif mtype == MATCH_FRONT_ONLY:
            test = f"_s.startswith({search!r})"
        elif mtype == MATCH_END_ONLY:
            test = f"_s.endswith({search!r})"
        elif mtype == MATCH_MIDDLE_ONLY:
            test = f"{search!r} in _s"
        else:
            test = f"_glob({search!r}, _s)"
        if negate:
            test = f"not ({test})"
        return f"((_s := _str(_get({name!r}, _M))) is not None and {test})"
    raise AssertionError(node)


# Trees up to this deep compile to one nested expression (CPython's parser takes 200
# nested parentheses at most, and each level costs it stack); deeper ones to the
# kernel's own form, a flat program of predicates with forward branches.
MAX_NESTED_DEPTH = 48


def _depth(tree: tuple) -> int:
    depth, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        depth = max(depth, d)
        if node[0] in ("and", "or"):
            stack.extend((c, d + 1) for c in node[1])
        elif node[0] == "not":
            stack.append((node[1], d + 1))
    return depth


class _Label:
    """A branch target: the index of the next predicate once placed."""
    __slots__ = ("index",)

    def __init__(self, index: int | None = None):
        self.index = index


def _program(tree: tuple) -> list[tuple[tuple, _Label, _Label]]:
    """The filter as predicate_parse's program: each predicate with where to go when
    it is true and when it is false, always forward (short-circuit: a && b is a,
    then b if a was true, else FALSE).  Built with an explicit stack."""
    prog: list[tuple[tuple, _Label, _Label]] = []
    true, false = _Label(), _Label()
    work: list = [("gen", tree, true, false)]
    while work:
        item = work.pop()
        if item[0] == "place":
            item[1].index = len(prog)
            continue
        _, node, t, f = item
        k = node[0]
        if k == "not":
            work.append(("gen", node[1], f, t))
        elif k in ("and", "or"):
            kids = node[1]
            later: list = []
            for c in kids[:-1]:
                nxt = _Label()
                later.append(("gen", c, nxt, f) if k == "and" else ("gen", c, t, nxt))
                later.append(("place", nxt))
            later.append(("gen", kids[-1], t, f))
            work.extend(reversed(later))
        else:
            prog.append((node, t, f))
    true.index, false.index = len(prog), len(prog) + 1
    return prog


def _compile(tree: tuple) -> Callable[[Mapping[str, Any]], bool]:
    if _depth(tree) <= MAX_NESTED_DEPTH:
        body = f"        return {_gen(tree)}\n"
    else:
        lines = ["        _t = 0\n"]
        for i, (node, t, f) in enumerate(_program(tree)):
            lines.append(f"        if _t == {i}:\n"
                         f"            _t = {t.index} if {_gen(node)} else {f.index}\n")
        lines.append(f"        return _t == {len(lines) - 1}\n")
        body = "".join(lines)
    src = (
        "def _event_filter(r):\n"
        "    try:\n"
        "        _get = r.get\n"
        f"{body}"
        "    except Exception:\n"
        "        return False\n"
    )
    ns: dict[str, Any] = {"_M": _MISSING, "_str": _to_str, "_glob": _glob}
    exec(compile(src, "<event filter>", "exec"), ns)
    return ns["_event_filter"]


def parse_filter(text: str, fields: Mapping[str, str]) -> EventFilter | None:
    """Parse a write to an event's filter file.

    fields maps each field name to 'int', 'str' or 'any' (either kind of operand);
    common_pid, common_cpu and comm are always there (a field of the same name in
    fields wins).  Returns None for "0" or an empty text (the filter is cleared).
    """
    s = text.rstrip()                           # strstrip(); leading blanks stay
    if not s.strip() or s.strip() == "0":
        return None
    try:
        if not _calc_stack(s):
            raise _Fail("INVALID_FILTER", 0)
        tree = _Parser(s, fields).parse()
    except _Fail as f:
        raise FilterParseError(ERRORS[f.kind], pos=min(f.pos, len(s)), command=s,
                               kind=f.kind) from None
    return EventFilter(s, tree, _compile(tree))


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
