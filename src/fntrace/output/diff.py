"""Two profiles compared: ``fntrace diff BASE NEW`` (uftrace's ``report --diff``).

Each side is a function profile as ``fntrace stat`` makes it (output/stat.py's rows,
walked with ``dist``: each function's calls as a distribution, and the calls of each
caller -> callee edge).  A function is compared by name; one that is on one side only
has zeros on the other (it appeared, or it vanished).  Each metric is read three ways:

    value      NEW's                          total > 1ms
    change     NEW's less BASE's              hits > +0         avg < -50us
    percent    the change in % of BASE's      p99 > +20%        (from 0 to more: +inf)

``--fail-if`` takes conditions of those, joined by ``and``/``or``/``not`` and
parentheses; a function for which the expression holds is a violation, and the
command's exit status is 1.  The expression is parsed before a trace is read; a bad one
is refused with the place it went wrong, the kernel's ``error_log`` caret::

    fntrace: --fail-if: a time needs a unit (ns, us, ms, s)
      p99 > +20 and total > 1ms
               ^
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..errors import UsageError
from .stat import FunctionStat

__all__ = ["METRICS", "TIME_METRICS", "FuncDiff", "diff_rows", "edge_changes",
           "parse_fail_if", "FailIf", "metric_value"]

# the metrics a diff compares, by the name --fail-if, --sort and -c take; the values
# are read from a FunctionStat
METRICS: dict[str, Callable[[FunctionStat], int]] = {
    "hits": lambda r: r.hit,
    "total": lambda r: r.time,
    "self": lambda r: r.self_ns,
    "avg": lambda r: r.avg,
    "min": lambda r: r.min,
    "p50": lambda r: r.percentile(50),
    "p90": lambda r: r.percentile(90),
    "p99": lambda r: r.percentile(99),
    "max": lambda r: r.max,
    "stdev": lambda r: r.stdev,
}
# other spellings of the same metrics (stat's column names, uftrace's words)
_ALIASES = {"hit": "hits", "calls": "hits", "time": "total"}
TIME_METRICS = frozenset(METRICS) - {"hits"}

_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def metric_name(word: str) -> str | None:
    """The metric ``word`` names (an alias made the name), or None."""
    w = _ALIASES.get(word, word)
    return w if w in METRICS else None


def metric_value(r: FunctionStat | None, metric: str) -> int:
    """A side's value of ``metric`` (0 for a function not on that side)."""
    return 0 if r is None else METRICS[metric](r)


@dataclass
class FuncDiff:
    """One function on both sides (``base``/``new``: its row, None when it is not on
    that side)."""
    func: str
    base: FunctionStat | None
    new: FunctionStat | None

    def values(self, metric: str) -> tuple[int, int]:
        return metric_value(self.base, metric), metric_value(self.new, metric)

    def change(self, metric: str) -> int:
        b, n = self.values(metric)
        return n - b

    def percent(self, metric: str) -> float:
        """The change in % of BASE's value; +inf from 0 to more, 0 from 0 to 0."""
        b, n = self.values(metric)
        if b == 0:
            return 0.0 if n == 0 else math.inf
        return (n - b) * 100.0 / b


def diff_rows(base: Iterable[FunctionStat], new: Iterable[FunctionStat]) -> list[FuncDiff]:
    """The functions of both profiles (rows of all threads: one per function), NEW's
    first in its order, then those only in BASE."""
    b = {r.func: r for r in base}
    out = [FuncDiff(r.func, b.pop(r.func, None), r) for r in new]
    out += [FuncDiff(f, r, None) for f, r in b.items()]
    return out


def edge_changes(base: Mapping[tuple[str, str], int], new: Mapping[tuple[str, str], int]
                 ) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """The caller -> callee edges only NEW has (with its calls), and those only BASE
    has, most calls first."""
    appeared = sorted(((c, f, n) for (c, f), n in new.items() if (c, f) not in base),
                      key=lambda t: (-t[2], t[0], t[1]))
    vanished = sorted(((c, f, n) for (c, f), n in base.items() if (c, f) not in new),
                      key=lambda t: (-t[2], t[0], t[1]))
    return appeared, vanished


# -- --fail-if ------------------------------------------------------------------------
#
#   expr   := term ("or" term)*
#   term   := factor ("and" factor)*
#   factor := "not" factor | "(" expr ")" | cond
#   cond   := METRIC OP VALUE              OP: > >= < <= == !=
#   VALUE  := [+|-] NUMBER [UNIT | %]      signed: the change; %: the change in percent

_TOKEN = re.compile(r"\s*(?:(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[a-z]+|%)?)"
                    r"|(?P<op>>=|<=|==|!=|>|<)|(?P<paren>[()])|(?P<word>[A-Za-z_][A-Za-z_0-9]*)"
                    r"|(?P<bad>\S))")

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


@dataclass(frozen=True)
class Cond:
    """One comparison: ``metric`` read as ``how`` (value, change or percent)."""
    metric: str
    op: str
    how: str
    bound: float
    text: str

    def holds(self, d: FuncDiff) -> bool:
        if self.how == "percent":
            v: float = d.percent(self.metric)
        elif self.how == "change":
            v = d.change(self.metric)
        else:
            v = metric_value(d.new, self.metric)
        return _OPS[self.op](v, self.bound)


class FailIf:
    """A parsed ``--fail-if`` expression: ``holds(FuncDiff)``, the conditions in it
    (``conds``) and its text."""

    def __init__(self, text: str, tree, conds: list[Cond]) -> None:
        self.text = text
        self._tree = tree
        self.conds = conds

    @property
    def metrics(self) -> list[str]:
        """The metrics the expression reads, in the order they are first named."""
        return list(dict.fromkeys(c.metric for c in self.conds))

    def holds(self, d: FuncDiff) -> bool:
        return _eval(self._tree, d)


def _eval(node, d: FuncDiff) -> bool:
    kind = node[0]
    if kind == "cond":
        return node[1].holds(d)
    if kind == "not":
        return not _eval(node[1], d)
    if kind == "and":
        return all(_eval(n, d) for n in node[1])
    return any(_eval(n, d) for n in node[1])


def _refuse(text: str, pos: int, why: str, option: str) -> UsageError:
    return UsageError(f"{option}: {why}\n  {text}\n  {' ' * pos}^", pos=pos, command=text)


def parse_fail_if(text: str, *, graph: bool = True, option: str = "--fail-if") -> FailIf:
    """The expression ``text``, or a UsageError naming where it went wrong (a caret
    under the place).  ``graph``: durations are there to compare (a function_graph
    trace); without, only ``hits`` is."""
    toks = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        assert kind is not None         # every alternative of _TOKEN is a named group
        if kind == "bad":
            raise _refuse(text, m.start(kind), f"unexpected {m.group(kind)!r}", option)
        toks.append((kind, m.group(kind), m.start(kind)))
    toks.append(("end", "", len(text.rstrip())))
    conds: list[Cond] = []
    i = 0

    def peek():
        return toks[i]

    def take():
        nonlocal i
        t = toks[i]
        i += 1
        return t

    def joined(word: str, operand):
        """operand (word operand)*: one node, or (word, [its operands])."""
        parts = [operand()]
        while peek()[0] == "word" and peek()[1] == word:
            take()
            parts.append(operand())
        return parts[0] if len(parts) == 1 else (word, parts)

    def expr():
        return joined("or", term)

    def term():
        return joined("and", factor)

    def factor():
        kind, val, pos = peek()
        if kind == "word" and val == "not":
            take()
            return ("not", factor())
        if kind == "paren" and val == "(":
            take()
            node = expr()
            kind, val, pos = peek()
            if not (kind == "paren" and val == ")"):
                raise _refuse(text, pos, "expected ')'", option)
            take()
            return node
        return cond()

    def cond():
        kind, val, pos = take()
        metric = metric_name(val) if kind == "word" else None
        if metric is None:
            what = "the end" if kind == "end" else repr(val)
            raise _refuse(text, pos, f"expected a metric ({', '.join(METRICS)}), not {what}",
                          option)
        if not graph and metric != "hits":
            raise _refuse(text, pos, f"{metric}: the traces have no durations (record "
                                     "with -p function_graph); only hits compare", option)
        kind, op, opos = take()
        if kind != "op":
            raise _refuse(text, opos, "expected a comparison (>, >=, <, <=, ==, !=)", option)
        kind, num, npos = take()
        if kind != "num":
            raise _refuse(text, npos, "expected a number: 5, +5 (a change), +20% (a change "
                                      "in percent), 1ms (a time)", option)
        how, bound = _bound(text, num, npos, metric, option)
        conds.append(Cond(metric, op, how, bound, text[pos:npos + len(num)]))
        return ("cond", conds[-1])

    tree = expr()
    kind, val, pos = peek()
    if kind != "end":
        raise _refuse(text, pos, f"expected 'and', 'or' or the end, not {val!r}", option)
    return FailIf(text, tree, conds)


def _bound(text: str, num: str, pos: int, metric: str, option: str) -> tuple[str, float]:
    """A VALUE: (how it is compared, the number in ns or calls or percent)."""
    signed = num[0] in "+-"
    m = re.fullmatch(r"([+-]?(?:\d+\.?\d*|\.\d+))([a-z]+|%)?", num)
    assert m is not None
    value, unit = float(m.group(1)), m.group(2)
    if unit == "%":
        if not signed:
            raise _refuse(text, pos, "a change in percent has its sign: +20% or -20%", option)
        return "percent", value
    how = "change" if signed else "value"
    if metric == "hits":
        if unit is not None:
            raise _refuse(text, pos + len(m.group(1)), f"hits are a count: no unit {unit!r}",
                          option)
        return how, value
    if unit is None:
        if value != 0:
            raise _refuse(text, pos + len(num), "a time needs a unit (ns, us, ms, s)", option)
        return how, 0.0
    if unit not in _UNITS:
        raise _refuse(text, pos + len(m.group(1)),
                      f"no time unit {unit!r} (ns, us, ms, s)", option)
    return how, value * _UNITS[unit]


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
