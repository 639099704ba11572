"""Tests for events/filter.py: event filter expressions (trace_events_filter.c).

Error cases follow test.d/ftrace/tracing-error-log.tc (a '^' marks where the
kernel's error_log puts the caret) and test.d/trigger/trigger-filter.tc; the
grammar and the example follow Documentation/trace/events.rst.  Nesting has no limit
but the text's length, as in the kernel: deep filters parse, compile and evaluate.
"""
from __future__ import annotations

import errno
import fnmatch
import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fntrace.errors import FntraceError
from fntrace.events.filter import ERRORS, EventFilter, FilterParseError, parse_filter

SIGNAL_FIELDS = {"sig": "int", "errno": "int", "code": "int", "comm": "str", "pid": "int",
                 "group": "int", "result": "int"}
FORK_FIELDS = {"parent_comm": "str", "parent_pid": "int", "child_comm": "str", "child_pid": "int"}


def check_error(text_with_caret: str, kind: str, fields=SIGNAL_FIELDS) -> FilterParseError:
    pos = text_with_caret.index("^")
    text = text_with_caret[:pos] + text_with_caret[pos + 1:]
    with pytest.raises(FilterParseError) as ei:
        parse_filter(text, fields)
    e = ei.value
    assert (e.kind, e.pos) == (kind, pos), f"{text!r}: got {e.kind} at {e.pos}"
    assert e.msg == ERRORS[kind]
    assert e.command == text.rstrip()
    assert e.errno == errno.EINVAL
    assert isinstance(e, FntraceError)
    return e


# --------------------------------------------------------------------------------------
# Evaluation

EXAMPLE = "((sig >= 10 && sig < 15) || sig == 17) && comm != bash"


@pytest.mark.parametrize("sig,comm,want", [
    (10, "sh", True), (14, "sh", True), (15, "sh", False), (9, "sh", False),
    (17, "sh", True), (17, "bash", False), (12, "bash", False), (16, "python", False),
])
def test_events_rst_example(sig, comm, want):
    f = parse_filter(EXAMPLE, SIGNAL_FIELDS)
    assert isinstance(f, EventFilter)
    assert f.text == EXAMPLE
    assert f({"sig": sig, "comm": comm}) is want
    assert f.match({"sig": sig, "comm": comm}) is want


def test_clearing():
    for text in ("0", " 0 \n", "", "   ", "\n"):
        assert parse_filter(text, SIGNAL_FIELDS) is None


def test_text_reads_back_as_written():
    assert parse_filter("  sig==1   &&comm~'b*'\n", SIGNAL_FIELDS).text == "  sig==1   &&comm~'b*'"


@pytest.mark.parametrize("text,true,false", [
    ("sig == 0x11", [17], [16]),
    ("sig == 021", [17], [21]),            # kstrtoll base 0: a leading 0 is octal
    ("sig == -3", [-3], [3]),
    ("sig > -0x10", [-15, 0], [-16, -17]),
    ("sig != 5", [4, 6], [5]),
    ("sig <= 5", [5, -1], [6]),
    ("sig >= 5", [5, 99], [4]),
    ("sig < 5", [4], [5]),
    ("sig & 4", [4, 5, 12], [0, 3, 8]),
    ("sig & 0x3", [1, 2, 7], [4, 8]),
    ("sig == 18446744073709551615", [2**64 - 1], [-1]),
    ("sig == -9223372036854775808", [-2**63], [2**63]),
])
def test_numeric_ops(text, true, false):
    f = parse_filter(text, SIGNAL_FIELDS)
    assert all(f({"sig": v}) for v in true)
    assert not any(f({"sig": v}) for v in false)


@pytest.mark.parametrize("text,true,false", [
    ("comm == bash", ["bash"], ["bas", "bashx", "Bash"]),
    ("comm == 'ba sh'", ["ba sh"], ["bash"]),
    ('comm == "it\'s"', ["it's"], ["its"]),
    ("comm != bash", ["sh", ""], ["bash"]),
    ("comm ~ ba*", ["bash", "ba"], ["abash", "b"]),
    ("comm ~ '*sh'", ["bash", "sh"], ["shell"]),
    ("comm ~ '*as*'", ["bash", "as", "ash"], ["sah", "a"]),
    ("comm ~ 'b*h'", ["bash", "bh"], ["bas"]),
    ("comm ~ 'b?sh'", ["bash", "bosh"], ["bsh", "baash"]),
    ("comm ~ '[bc]ash'", ["bash", "cash"], ["dash"]),
    ("comm ~ '[!bc]ash'", ["dash"], ["bash"]),
    ("comm ~ '[a-c]*'", ["bash", "a"], ["dash", ""]),
    ("comm ~ 'a\\*b'", ["a*b"], ["axb"]),
    ("comm ~ '!ba*'", ["sh", "abash"], ["bash"]),      # a leading '!' negates the glob
    ("comm ~ bash", ["bash"], ["bashx"]),
])
def test_string_ops_and_globs(text, true, false):
    f = parse_filter(text, SIGNAL_FIELDS)
    assert all(f({"comm": v}) for v in true), text
    assert not any(f({"comm": v}) for v in false), text


def test_a_class_never_matches_the_end_of_the_string():
    # lib/glob.c: "if (c == '\\0') return false;" before a character class
    f = parse_filter("comm ~ '?[!a]'", {})
    assert not f({"comm": "b"})
    assert f({"comm": "bb"})
    assert not parse_filter("comm ~ '*[!a]'", {})({"comm": ""})


def test_glob_agrees_with_fnmatch_on_plain_patterns():
    pats = ["*", "a*", "*a", "*a*", "a?c", "[ab]*", "[!a]?", "a*b*c"]
    words = ["", "a", "abc", "ab", "cab", "acc", "bbc", "aXbYc"]
    for p in pats:
        f = parse_filter(f"comm ~ '{p}'", {})
        for w in words:
            assert f({"comm": w}) == fnmatch.fnmatchcase(w, p), (p, w)


def test_negation_and_precedence():
    f = parse_filter("sig == 1 || sig == 2 && comm == x", SIGNAL_FIELDS)   # && binds tighter
    assert f({"sig": 1, "comm": "y"})
    assert not f({"sig": 2, "comm": "y"})
    assert f({"sig": 2, "comm": "x"})
    g = parse_filter("!(sig == 1 || sig == 2) && !comm == x", SIGNAL_FIELDS)
    assert g({"sig": 3, "comm": "y"})
    assert not g({"sig": 1, "comm": "y"})
    assert not g({"sig": 3, "comm": "x"})
    h = parse_filter("!!(sig == 1)", SIGNAL_FIELDS)
    assert h({"sig": 1}) and not h({"sig": 2})


def test_common_fields():
    f = parse_filter("common_pid == 42 && common_cpu < 4 && comm ~ py*", {})
    assert f({"common_pid": 42, "common_cpu": 0, "comm": "python3"})
    assert not f({"common_pid": 41, "common_cpu": 0, "comm": "python3"})
    # an event field of the same name wins
    g = parse_filter("comm == 5", {"comm": "int"})
    assert g({"comm": 5})


class _Unprintable:
    def __str__(self):
        raise RuntimeError("no str")

    def __eq__(self, other):
        raise RuntimeError("no eq")

    __hash__ = object.__hash__


class _BadMapping(dict):
    def get(self, *a):
        raise KeyError("boom")


def test_evaluation_never_raises():
    f = parse_filter("x == 5 || x & 1 || x > 2 || x ~ 'a*' || x != 'b' || x == c", {"x": "any"})
    for v in [None, "5", 5.0, [5], object(), _Unprintable(), b"a", True]:
        assert f({"x": v}) in (True, False)
    assert f({}) is False
    assert f(_BadMapping(x=5)) is False
    assert f(None) is False
    # an int op on a non-int is false, != included; a missing field is false for every op
    ne = parse_filter("x != 5", {"x": "any"})
    assert ne({"x": "6"}) is False and ne({}) is False and ne({"x": 6}) is True
    sne = parse_filter("x != 'b'", {"x": "any"})
    assert sne({}) is False and sne({"x": _Unprintable()}) is False and sne({"x": 3}) is True
    # string ops compare str(value)
    assert parse_filter("x == '5'", {"x": "any"})({"x": 5})
    assert parse_filter("x ~ '<*>'", {"x": "any"})({"x": object()})


def test_bool_is_an_int():
    f = parse_filter("sig == 1", SIGNAL_FIELDS)
    assert f({"sig": True})


# --------------------------------------------------------------------------------------
# Errors, with the kernel's positions

def test_tracing_error_log_caret():
    """tracing-error-log.tc: an unknown field; the caret is one past it (the kernel's
    parse_pred() position)."""
    e = check_error("((sig >= 10 && sig < 15) || dsig ^== 17) && comm != bash", "FIELD_NOT_FOUND")
    assert e.annotated() == (
        "((sig >= 10 && sig < 15) || dsig == 17) && comm != bash\n"
        "                                 ^\n"
        "parse_error: Field not found")


@pytest.mark.parametrize("text,kind", [
    # trigger-filter.tc: "traceoff if a", "if common_pid=0", "if common_pid==b",
    # and a field compared with a field
    ("a^", "FIELD_NOT_FOUND"),
    ("common_pid=^0", "INVALID_OP"),
    ("common_pid==b^", "INVALID_VALUE"),
    ("common_pid == c^hild_pid", "INVALID_VALUE"),
    ("child_comm == p^arent_comm", "INVALID_VALUE"),
    ("=^=b", "FIELD_NOT_FOUND"),
])
def test_trigger_filter_errors(text, kind):
    check_error(text, kind, FORK_FIELDS)


def test_trigger_filter_accepts():
    for text in ["child_pid == 0", "common_pid <= 0", "common_pid >= 0",
                 "parent_pid >= 0 && child_pid >= 0", "parent_pid >= 0 || child_pid >= 0"]:
        assert parse_filter(text, FORK_FIELDS) is not None


def test_a_field_without_operator():
    check_error("sig^", "INVALID_OP")          # the kernel's pos + i is past the end
    check_error("sig =^ = 1", "INVALID_OP")
    check_error("sig !^~ 1", "INVALID_OP")


@pytest.mark.parametrize("text,kind", [
    ("^(sig == 1", "TOO_MANY_OPEN"),
    ("(sig == 1) && ^(comm == x", "TOO_MANY_OPEN"),
    ("sig == 1^)", "TOO_MANY_CLOSE"),
    ("(sig == 1)^) && (comm == x)", "TOO_MANY_CLOSE"),
    ("comm == ^'bash", "MISSING_QUOTE"),
    ("comm == 'a' || comm == ^\"b", "MISSING_QUOTE"),
    ("sig == 1 ^sig == 2", "TOO_MANY_PREDS"),
    ("sig == 1 ^& sig == 2", "TOO_MANY_PREDS"),
    ("(sig == 1) ^!(sig == 2)", "TOO_MANY_PREDS"),
    ("comm == x^(y)", "TOO_MANY_PREDS"),
    ("sig ~ 1^", "ILLEGAL_FIELD_OP"),
    ("comm < '^a'", "ILLEGAL_FIELD_OP"),
    ("comm & b^", "ILLEGAL_FIELD_OP"),
    ("comm == 5^", "EXPECT_STRING"),
    ("comm == -^5", "EXPECT_STRING"),
    ("sig == '^x'", "EXPECT_DIGIT"),
    ("sig == 0^8", "ILLEGAL_INTVAL"),
    ("sig == 1^x", "ILLEGAL_INTVAL"),
    ("sig == -^", "ILLEGAL_INTVAL"),
    ("sig == 1^8446744073709551616", "ILLEGAL_INTVAL"),
    ("sig == 1234567890123456789012345^", "OPERAND_TOO_LONG"),
    ("comm == '" + "x" * 256 + "'^", "OPERAND_TOO_LONG"),
    ("sig == b^ash", "INVALID_VALUE"),
    ("sig ==^ ", "INVALID_VALUE"),
    ("comm ==^ ", "INVALID_VALUE"),
    ("nosuch ^== 1", "FIELD_NOT_FOUND"),
    ("sig == 1 &&^ ", "FIELD_NOT_FOUND"),
    ("sig == 1 && ()^", "FIELD_NOT_FOUND"),
    ("!^= 1", "FIELD_NOT_FOUND"),
    ("^()", "INVALID_FILTER"),
])
def test_parse_errors(text, kind):
    check_error(text, kind)


# --------------------------------------------------------------------------------------
# Nesting: the kernel's parser (calc_stack, predicate_parse) has no depth limit of its
# own -- its stacks are sized from the text, which a write keeps under a page -- so
# any depth a page holds parses and evaluates, and deeper ones do not break either.

def _alternating(depth: int) -> tuple[str, object]:
    """sig == 1 && (sig == 0 || (sig == 1 && (... sig == 1 ...))), and its meaning."""
    text, layers = "sig == 1", []
    for i in range(depth):
        op, want = ("&&", 1) if i % 2 == 0 else ("||", 0)
        text = f"sig == {want} {op} ({text})"
        layers.append((op, want))

    def meaning(v) -> bool:
        r = v == 1
        for op, want in layers:
            r = (v == want and r) if op == "&&" else (v == want or r)
        return r
    return text, meaning


@pytest.mark.parametrize("depth", [1, 199, 200, 201, 400, 1000, 2040, 5000])
def test_deep_parentheses(depth):
    f = parse_filter("(" * depth + "sig == 1" + ")" * depth, SIGNAL_FIELDS)
    assert f({"sig": 1}) is True and f({"sig": 2}) is False


@pytest.mark.parametrize("depth", [1, 46, 47, 48, 49, 100, 199, 200, 201, 290, 1000])
def test_deep_alternation(depth):
    text, want = _alternating(depth)
    f = parse_filter(text, SIGNAL_FIELDS)
    for v in (0, 1, 2):
        assert f({"sig": v}) is want(v), (depth, v)
    assert f({}) is False


@pytest.mark.parametrize("depth", [1, 2, 47, 48, 49, 199, 200, 201, 2040, 5001])
def test_deep_negation(depth):
    f = parse_filter("!(" * depth + "sig == 1" + ")" * depth, SIGNAL_FIELDS)
    assert f({"sig": 1}) is (depth % 2 == 0)
    assert f({"sig": 2}) is (depth % 2 == 1)


@pytest.mark.parametrize("text,kind,pos", [
    ("(" * 3000 + "sig == 1", "TOO_MANY_OPEN", 2999),
    ("sig == 1" + ")" * 3000, "TOO_MANY_CLOSE", 8),
    ("(" * 3000 + "sig == 1" + ")" * 2999, "TOO_MANY_OPEN", 0),
    ("(" * 3000 + "sig == " + ")" * 3000, "INVALID_VALUE", 3008),
    ("(" * 3000 + "sig == 1 sig" + ")" * 3000, "TOO_MANY_PREDS", 3009),
    ("!(" * 2000 + "nosuch == 1" + ")" * 2000, "FIELD_NOT_FOUND", 4007),
])
def test_deep_errors_are_parse_errors(text, kind, pos):
    with pytest.raises(FilterParseError) as ei:
        parse_filter(text, SIGNAL_FIELDS)
    assert (ei.value.kind, ei.value.pos) == (kind, pos)


def test_error_positions_in_the_text_as_written():
    # leading blanks are part of the filter (strstrip keeps them); trailing ones are not
    check_error("   dsig ^== 1   ", "FIELD_NOT_FOUND")


# --------------------------------------------------------------------------------------
# Property: parse + eval agrees with the same expression written in Python

INT_FIELDS = ["a", "b", "x"]
STR_FIELDS = ["s", "t", "x"]
TYPES = {"a": "int", "b": "int", "s": "str", "t": "str", "x": "any"}
INT_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
           ">": operator.gt, ">=": operator.ge, "&": lambda v, c: (v & c) != 0}
WORDS = st.text(alphabet="abcAB_", min_size=0, max_size=4)
PATTERNS = st.lists(st.sampled_from(["a", "b", "c", "*", "?", "[ab]", "[!a]", "_"]),
                    max_size=5).map("".join)


def int_leaf():
    return st.tuples(st.just("int"), st.sampled_from(INT_FIELDS), st.sampled_from(list(INT_OPS)),
                     st.integers(-40, 40), st.sampled_from(["dec", "hex"]))


def str_leaf():
    return st.one_of(
        st.tuples(st.just("str"), st.sampled_from(STR_FIELDS), st.sampled_from(["==", "!="]),
                  WORDS, st.sampled_from(["'", '"', ""])),
        st.tuples(st.just("glob"), st.sampled_from(STR_FIELDS), st.booleans(),
                  PATTERNS, st.sampled_from(["'", '"', ""])),
    )


TREES = st.recursive(
    st.one_of(int_leaf(), str_leaf()),
    lambda kids: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), st.lists(kids, min_size=2, max_size=3)),
        st.tuples(st.just("not"), kids),
    ),
    max_leaves=8,
)


def render(node, parent: str, draw_space) -> str:
    """The tree as filter text; parentheses only where precedence needs them (and
    sometimes where it does not)."""
    sp = draw_space
    k = node[0]
    if k == "int":
        _, f, op, v, fmt = node
        num = str(v) if fmt == "dec" else ("-" if v < 0 else "") + hex(abs(v))
        return f"{f}{sp()}{op}{sp()}{num}"
    if k in ("str", "glob"):
        if k == "str":
            _, f, op, v, q = node
        else:
            _, f, neg, pat, q = node
            op, v = "~", ("!" if neg else "") + pat
        if q == "" and (not v or not (v[0].isalpha() or v[0] == "_") or v in TYPES):
            q = "'"                      # a bare word must not look like a number or a field
        return f"{f}{sp()}{op}{sp()}{q}{v}{q}"
    if k == "not":
        inner = render(node[1], "not", draw_space)
        if node[1][0] in ("int", "str", "glob") and sp() == "":
            return f"!{inner}"
        return f"!({inner})"
    joiner = f"{sp()}{'&&' if k == 'and' else '||'}{sp()}"
    text = joiner.join(render(c, k, draw_space) for c in node[1])
    if parent == "and" and k == "or" or parent == "not" or (parent and sp() == " "):
        text = f"({text})"
    return text


MISSING = object()


def py_eval(node, rec) -> bool:
    k = node[0]
    if k == "and":
        return all(py_eval(c, rec) for c in node[1])
    if k == "or":
        return any(py_eval(c, rec) for c in node[1])
    if k == "not":
        return not py_eval(node[1], rec)
    v = rec.get(node[1], MISSING)
    if k == "int":
        return isinstance(v, int) and INT_OPS[node[2]](v, node[3])
    if v is MISSING:
        return False
    sv = str(v)
    if k == "str":
        return (sv == node[3]) if node[2] == "==" else (sv != node[3])
    return fnmatch.fnmatchcase(sv, node[3]) != node[2]


VALUES = st.one_of(st.integers(-50, 50), WORDS, st.none(), st.just(MISSING))
RECORDS = st.fixed_dictionaries({f: VALUES for f in TYPES}).map(
    lambda d: {k: v for k, v in d.items() if v is not MISSING})


@settings(max_examples=400, deadline=None)
@given(tree=TREES, records=st.lists(RECORDS, min_size=1, max_size=6),
       spaces=st.lists(st.sampled_from(["", " ", "  "]), min_size=1, max_size=50))
def test_parse_and_eval_agree_with_python(tree, records, spaces):
    it = iter(spaces * 40)
    text = render(tree, "", lambda: next(it, " "))
    flt = parse_filter(text, TYPES)
    assert flt is not None
    for rec in records:
        assert flt(rec) == py_eval(tree, rec), (text, rec)


@settings(max_examples=200, deadline=None)
@given(tree=TREES, records=st.lists(RECORDS, min_size=1, max_size=6))
def test_the_flat_program_agrees_with_python(tree, records):
    """What a filter too deep for one Python expression compiles to (predicate_parse's
    program of branches) means the same as the expression."""
    import fntrace.events.filter as filter_mod
    text = render(tree, "", lambda: " ")
    saved = filter_mod.MAX_NESTED_DEPTH
    filter_mod.MAX_NESTED_DEPTH = 0
    try:
        flt = parse_filter(text, TYPES)
    finally:
        filter_mod.MAX_NESTED_DEPTH = saved
    for rec in records:
        assert flt(rec) == py_eval(tree, rec), (text, rec)
