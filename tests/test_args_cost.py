"""Arguments and return values (-A/-R): the native value text is the Python twin's, no
program code runs for it, and a program's own __repr__ (asked for with --repr) that
raises, recurses, is slow or returns a huge text does not break or stall the program.
"""
from __future__ import annotations

import enum
import math
import os
import re
import sys
import textwrap
import time

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from support import fntrace_cli, run_python
from fntrace import _env
from fntrace.core import fetch

NATIVE = _env.native_module()


def native_text(v):
    if NATIVE is None or not hasattr(NATIVE, "value_text"):
        pytest.skip("the native module is not built")
    return NATIVE.value_text(v)


# ---------------------------------------------------------------------------------
# Native text == Python text
# ---------------------------------------------------------------------------------

@hsettings(max_examples=3000, deadline=None)
@given(st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    # the decimals programs pass most: the native text's short path (no dtoa)
    st.builds(lambda n, k, neg: (-1 if neg else 1) * n / 10 ** k,
              st.integers(0, 10 ** 16), st.integers(0, 9), st.booleans()),
    st.sampled_from([1e-4, 9.999999999999999e-05, 1e15, 1e15 - 0.125, 999999999999999.9,
                     4503599627370496.0, 0.1, 0.7, 2.675, 1 / 3, -0.0, 5e-324])))
def test_native_float_text_is_repr(x):
    assert native_text(x) == repr(x)


class _Outer:
    class Inner(Exception):
        pass


class _Bad(Exception):
    def __repr__(self):             # never called without --repr
        raise AssertionError("a program's __repr__ ran")


_Bad.__qualname__ = "Bäd"           # not ASCII: the Python twin writes it


VALUES = [
    None, True, False, ..., NotImplemented,
    0, 1, -1, 7, -(2 ** 63), 2 ** 63 - 1, 2 ** 63, 2 ** 64, -(2 ** 64) - 1, 10 ** 39, 10 ** 40,
    2 ** 200, -(2 ** 256) + 1, 2 ** 256, 2 ** 257, -(2 ** 1000),
    0.0, -0.0, 1.5, 1e16, 1e-300, 1e300, math.inf, -math.inf, math.nan, 0.1 + 0.2,
    1j, complex(-1.5, 2), complex(math.nan, math.inf),
    "", "a", "it's", 'say "hi"', "both ' and \"", "back\\slash", "tab\tnew\nline\r",
    "\x00\x1f\x7f\x80\xa0\xad\xff", "é ü 中文 \u200b \ud800 \U0001f600 \U000e0001", "x" * 40,
    "x" * 41, "'" * 50, "\n" * 45, "é" * 100, "a'" * 30 + '"',
    b"", b"abc", b"it's", b"\x00\xff\n", b"x" * 40, b"y" * 41, bytearray(b"ab"),
    bytearray(b"z" * 60), bytearray(),
    (), (1,), (1, 2), ((),), (None, (True, (1.5, ("deep",)))), tuple(range(6)),
    tuple(range(7)), [], [1], [[[[[]]]]], list(range(100)), ["s" * 30] * 3,
    {}, {"a": 1}, {1: [2, {3: (4,)}]}, {i: str(i) for i in range(20)}, {(1, 2): None},
    set(), {1}, {"a"}, set(range(10)), frozenset(), frozenset({1}), frozenset(range(8)),
    [set(), frozenset(), {frozenset({1})}],
    range(0), range(5), range(1, 100, 7), [range(3)],
    [1.5, "x", None, b"y", (2,), {3: 4}, {5}],
    # exceptions: "raised X" of a call an exception leaves (-R), made in C
    RecursionError("maximum recursion depth exceeded"), ValueError(), KeyError("k"),
    OSError(2, "No such file or directory"), ValueError((1, [2, {3: (4,)}]), b"x"),
    RuntimeError("x" * 100), (ValueError(ValueError(ValueError(1))),),
    _Outer.Inner("nested class"),
]


@pytest.mark.parametrize("v", VALUES, ids=lambda v: type(v).__name__)
def test_native_text_is_the_python_text(v):
    assert native_text(v) == fetch.value_repr(v)


def test_exception_with_a_non_ascii_name_is_left_to_the_python_twin():
    e = _Bad("ascii only?")
    assert native_text(e) is None
    assert fetch.value_repr(e) == "Bäd('ascii only?')"


scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-2 ** 300,
                                                                    max_value=2 ** 300)
           | st.floats(allow_nan=True) | st.text(max_size=60) | st.binary(max_size=60)
           | st.complex_numbers())
hashables = st.recursive(scalars, lambda inner: st.tuples(inner, inner) | st.frozensets(
    st.integers() | st.text(max_size=5), max_size=9), max_leaves=12)
values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=9) | st.tuples(inner) | st.tuples(inner, inner, inner)
                   | st.dictionaries(hashables, inner, max_size=9)
                   | st.sets(hashables, max_size=9) | st.frozensets(hashables, max_size=9)),
    max_leaves=40)


@hsettings(max_examples=300, deadline=None)
@given(values)
def test_native_text_is_the_python_text_for_any_builtin_value(v):
    t = native_text(v)
    assert t == fetch.value_repr(v)
    assert len(t) <= fetch.MAX_REPR


class MyInt(int):
    def __repr__(self):
        raise AssertionError("program code ran")

    def __format__(self, spec):
        raise AssertionError("program code ran")


class MyStr(str):
    def __str__(self):
        raise AssertionError("program code ran")


class Plain:
    def method(self):
        pass


class _Meta(type):
    def __repr__(cls):
        raise AssertionError("program code ran")


class WithMeta(metaclass=_Meta):
    pass


class Color(enum.IntEnum):
    RED = 1


def _function():
    pass


_Pair = __import__("collections").namedtuple("_Pair", "x y")


# The values shown by name, not by a repr of theirs (functions, classes, modules...),
# and subclasses of int, str and tuple by their base's value: natively too, the same
# text, without a method of theirs run.
NAMED = [MyInt(3), [MyInt(3)], MyStr("text"), MyStr("long " * 20), Color.RED, re.IGNORECASE,
         _Pair(1, 2), _Pair((1, 2), [3, MyInt(4)]), (_Pair(1, 2),), print, len, [].append,
         Plain, WithMeta, _Meta, enum.Enum, int, type, re.Pattern, sys, re, math,
         _function, lambda: 0, Plain().method, _function.__code__, (print, Plain, sys),
         {"k": Color.RED, "f": _function}, _Outer.Inner]


@pytest.mark.parametrize("v", NAMED, ids=lambda v: type(v).__name__)
def test_named_values_and_value_subclasses_natively_are_the_python_text(v):
    t = native_text(v)
    assert t is not None
    assert t == fetch.value_repr(v)


class _OddModule:
    pass


_OddModule.__module__ = 5         # not a str: the Python twin decides what it shows


class _NonAscii:
    pass


_NonAscii.__module__ = "mod\u00e9"


# Objects of the program's classes (and C types with no text of their own) are shown by
# type and address, at any depth: natively too, while no program code may run (the
# default; with --repr the callers take only a scalar's text from the walk).
PLAIN = [Plain(), [Plain()], {"k": (1, Plain())}, (Plain(),) * 8, [[[[Plain()]]]],
         object.__init__, [object.__init__], _NonAscii(), (1, _NonAscii()),
         (Color.RED, (0, MyInt(7), Plain()))]


@pytest.mark.parametrize("v", PLAIN, ids=lambda v: type(v).__name__)
def test_plain_objects_at_any_depth_natively_are_the_python_text(v):
    t = native_text(v)
    assert t is not None
    assert t == fetch.value_repr(v)


@pytest.mark.parametrize("v", [_OddModule(), [_OddModule()], {"k": (1, _OddModule())}],
                         ids=lambda v: type(v).__name__)
def test_what_the_native_text_does_not_show_goes_to_the_python_twin(v):
    # a class whose __module__ is not a str: the walk leaves the whole value to the
    # Python twin, which still shows it
    assert native_text(v) is None
    assert fetch.value_repr(v) != fetch.FAULT


# ---------------------------------------------------------------------------------
# Subclasses of built-ins: their base's value, no method of theirs called
# ---------------------------------------------------------------------------------

class _Trap:
    calls: list[str] = []


def _trap(name):
    def method(self, *a, **k):
        _Trap.calls.append(name)
        raise AssertionError(f"{name} of the program ran")
    return method


class TrapTuple(tuple):
    __iter__ = _trap("__iter__")
    __len__ = _trap("__len__")
    __getitem__ = _trap("__getitem__")


class TrapList(list):
    __iter__ = _trap("__iter__")
    __len__ = _trap("__len__")


class TrapSet(set):
    __iter__ = _trap("__iter__")
    __len__ = _trap("__len__")


class TrapFrozen(frozenset):
    __iter__ = _trap("__iter__")


class TrapDict(dict):
    __iter__ = _trap("__iter__")
    keys = _trap("keys")
    items = _trap("items")
    __len__ = _trap("__len__")


class TrapStr(str):
    __len__ = _trap("__len__")
    __getitem__ = _trap("__getitem__")


class TrapBytes(bytes):
    __len__ = _trap("__len__")


class TrapInt(int):
    bit_length = _trap("bit_length")


class TrapFloat(float):
    __repr__ = _trap("__repr__")


@pytest.mark.parametrize("v, text", [
    (TrapTuple((1, 2)), "TrapTuple((1, 2))"),
    (TrapList([1]), "TrapList([1])"),
    (TrapSet({3}), "TrapSet({3})"),
    (TrapFrozen({4}), "TrapFrozen(frozenset({4}))"),
    (TrapDict(a=1), "TrapDict({'a': 1})"),
    (TrapStr("s" * 50), "TrapStr('ssssssssssssssssss...ssssssssssssssssss')"),
    (TrapBytes(b"b"), "TrapBytes(b'b')"),
    (TrapInt(5), "TrapInt(5)"),
    (TrapFloat(2.5), "TrapFloat(2.5)"),
], ids=lambda v: type(v).__name__)
def test_a_subclass_of_a_builtin_is_read_by_its_bases_methods(v, text):
    _Trap.calls.clear()
    assert fetch.value_repr(v) == text
    assert _Trap.calls == []


# ---------------------------------------------------------------------------------
# The program's own __repr__ (--repr): raising, recursing, slow, huge
# ---------------------------------------------------------------------------------

def run_both(tmp_path, source, *fntrace_args):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(source))
    plain = run_python("prog.py", cwd=tmp_path)
    t0 = time.monotonic()
    traced = fntrace_cli("live", *fntrace_args, "prog.py", cwd=tmp_path)
    return plain, traced, time.monotonic() - t0


BAD_REPRS = """\
import sys, time

class Raising:
    def __repr__(self):
        raise RuntimeError("no repr for you")

class Recursing:
    def __repr__(self):
        return repr(self)

class Slow:
    calls = 0
    def __repr__(self):
        Slow.calls += 1
        time.sleep(0.4)
        return "Slow!"

class Huge:
    # far over the bound, yet quick to make: a repr that took over REPR_SLOW_NS on a
    # loaded machine (5 MB did) is rightly shown by its safe text from then on
    def __repr__(self):
        return "H" * 500_000

def take(x):
    return x

for cls in (Raising, Recursing, Slow, Huge):
    for i in range(8):
        take(cls())
print("done")
sys.exit(3)
"""


@pytest.mark.parametrize("variant", ["args", "retval"])
def test_bad_reprs_asked_for_do_not_break_or_stall_the_program(tmp_path, variant):
    flag = "-A" if variant == "args" else "-R"
    plain, r, _ = run_both(tmp_path, BAD_REPRS, "--repr", flag, "-F", "__main__.take")
    assert plain.returncode == 3 and plain.stdout == "done\n"
    assert r.returncode == 3, r.stderr[-2000:]
    assert r.stdout.startswith("done\n"), r.stdout[:300]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    trace = r.stdout
    key = "x=" if variant == "args" else "ret="
    shown = re.findall(re.escape(key) + r"(\(fault\)|Slow!|<__main__\.Slow object at 0x[0-9a-f]+>|H+\.\.\.)",
                       trace)
    # raising and recursing: (fault), each of their 16 calls
    assert shown.count("(fault)") == 16, trace[-3000:]
    # slow: asked once (0.4 s), then shown by its safe text: the run is not 8 x 0.4 s
    assert shown.count("Slow!") == 1, trace[-3000:]
    assert sum(s.startswith("<__main__.Slow") for s in shown) == 7, trace[-3000:]
    # huge: cut to the bound
    huge = [s for s in shown if s.startswith("H")]
    assert len(huge) == 8 and all(len(s) == fetch.MAX_REPR for s in huge), huge[:2]
    # counted and shown: 8 raising, 8 recursing, the one slow call
    assert "# --repr: 17 calls of the program's __repr__ raised or were slow" in trace, \
        trace[:2000]


def test_slow_repr_is_not_called_without_repr_option(tmp_path):
    source = BAD_REPRS.replace('print("done")', 'print("done", Slow.calls)')
    plain, r, _ = run_both(tmp_path, source, "-A", "-R", "-F", "__main__.take")
    assert plain.stdout == "done 0\n"
    assert r.returncode == 3, r.stderr[-2000:]
    assert r.stdout.startswith("done 0\n"), r.stdout[:300]
    assert "(fault)" not in r.stdout
    assert re.search(r"x=<__main__\.Raising object at 0x[0-9a-f]+>", r.stdout)
    assert "HHHH" not in r.stdout
    # (the program's own count says the slow __repr__ never ran: "done 0" above; the
    # run's wall time on a shared machine would say less)


def test_repr_faults_are_counted():
    class Raising:
        def __repr__(self):
            raise RuntimeError

    before = fetch.settings.repr_faults
    fetch.settings.allow_program_code = True
    try:
        assert fetch.value_repr(Raising()) == fetch.FAULT
        assert fetch.value_repr([1, 2]) == "[1, 2]"
    finally:
        fetch.settings.allow_program_code = False
    assert fetch.settings.repr_faults == before + 1


# ---------------------------------------------------------------------------------
# -A -R on every kind of call (the fast lane of function_graph carries them)
# ---------------------------------------------------------------------------------

KINDS = """\
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def gen(x, *rest, key=(1, [2, {"a": 3}]), **kw):
    yield x
    return [x, rest]

def boom(v):
    raise ValueError(v)

fib(2)
list(gen(1.5, "s", None, flag=True))
try:
    boom({1, 2})
except ValueError:
    pass
print("ok")
"""


def test_args_and_retvals_of_calls_generators_and_exceptions(tmp_path):
    plain, r, _ = run_both(tmp_path, KINDS, "-p", "function_graph", "-A", "-R",
                           "-F", "*:mod:__main__")
    assert r.returncode == 0 and plain.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert out.startswith("ok\n")
    assert re.search(r"__main__\.fib\(n=2\) \{", out), out
    assert re.search(r"__main__\.fib\(n=1\); /\* ret=1 \*/", out), out
    assert re.search(r"__main__\.fib\(n=0\); /\* ret=0 \*/", out), out
    assert re.search(r"\} /\* __main__\.fib ret=1 \*/", out), out
    gen_line = (r"__main__\.gen\(x=1\.5, rest=\('s', None\), key=\(1, \[2, \{'a': 3\}\]\), "
                r"kw=\{'flag': True\}\); /\* ret=")
    assert re.search(gen_line + r"1\.5 \*/", out), out          # its yield
    assert re.search(gen_line + r"\[1\.5, \('s', None\)\] \*/", out), out   # its return
    assert re.search(r"__main__\.boom\(v=\{1, 2\}\); /\* ret=raised", out), out


RECURSION = """\
import sys

def f(n, data):
    return f(n + 1, data)

sys.setrecursionlimit(300)
try:
    f(0, [1, 2, (3, "x")])
except RecursionError:
    print("caught")
"""


def test_retval_of_calls_left_by_a_recursion_error_is_recorded(tmp_path):
    # Each call the RecursionError leaves gets "raised RecursionError(...)", made in C:
    # at the limit no Python function can be called, so the Python twin would fail.
    plain, r, _ = run_both(tmp_path, RECURSION, "-p", "function_graph", "-R",
                           "-F", "__main__.f")
    assert r.returncode == plain.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(plain.stdout)
    # 3.11's setprofile does not say which exception leaves a call: "raised" alone
    what = "" if sys.version_info < (3, 12) else " RecursionError('maximum recursion depth exceeded')"
    raised = r.stdout.count(f"ret=raised{what} */")
    from fntrace.cli import target
    if _env.BACKEND == "profile" and _env.native() is None and target._native_launch is None:
        # the Python setprofile hook, bare: CPython drops it at the limit, and says so
        assert "profile function of the program's main thread was removed" in r.stderr
    else:
        # (the pure hook in the launcher's C shell: its frames are lent, it never raises)
        assert raised > 200, r.stdout[-2000:]
    if sys.version_info >= (3, 12) and _env.native() is not None:
        # the fast lane runs no Python at entry or return: every call is there
        assert "callback errors" not in r.stdout, r.stdout[:1000]


PLAIN_OBJECTS = '''
from fntrace.core.fetch import value_repr

class Plain:
    pass

class Ünïcode:
    pass

class Outer:
    class Inner:
        pass

class AVeryLongClassNameThatTheTextOfItsObjectsMustBeCutAt64Characters:
    pass

def take(a, b, c, d):
    return None

objs = [Plain(), Ünïcode(), Outer.Inner(),
        AVeryLongClassNameThatTheTextOfItsObjectsMustBeCutAt64Characters()]
for o in objs:
    print(value_repr(o))
take(*objs)
'''


def test_plain_objects_recorded_natively_are_the_python_text(tmp_path):
    # -A shows an object of the program's class by its type and address, made in C
    # (payloads.c.h plain_object_repr): the text the Python twin makes, cut the same
    prog = tmp_path / "plain.py"
    prog.write_text(PLAIN_OBJECTS, encoding="utf-8")
    out = tmp_path / "t.fntrace"
    r = fntrace_cli("record", "-p", "function_graph", "-A", "-F", "__main__.take", "-o",
                    str(out), str(prog), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    expected = r.stdout.splitlines()
    assert len(expected) == 4 and expected[3].endswith("..."), expected
    rep = fntrace_cli("report", str(out), check=True).stdout
    line = next(ln for ln in rep.splitlines() if "take(" in ln)
    assert all(f"{k}={v}" in line for k, v in zip("abcd", expected)), (line, expected)


WIDE_TEXT = """\
import sys

def take(a, é=1, *args, 名前=None, a_rather_long_parameter_name=0,
         très_long_paramètre_à_é=0, 長い名前の引数はここにあります=0, **kw):
    return a

for v in ["abc", "café", "ÿ", "Ā", "名前", "😀x", "a" * 100, "é" * 30, "é" * 100 + "😀",
          "0123456789abcdefg", "Ā" * 20 + "a", 3, 2.5, None, ("é", "😀"), ["ascii" * 5],
          {"kéy": "ü" * 17}]:
    take(v)
    take("x", v, v, 名前=v, ü=v, a_rather_long_parameter_name=v, très_long_paramètre_à_é=v,
         長い名前の引数はここにあります=v)
"""


@pytest.mark.skipif(NATIVE is None, reason="the native module is not built")
def test_a_payloads_characters_of_every_width_natively_are_the_python_text(tmp_path):
    # The payload's str is made from its characters' class (ASCII, Latin-1, the BMP,
    # beyond), sixteen at a time (payloads.c.h, _native_value.c fntrace_ucs4_str): each
    # class in a parameter's name and in a value, long and short, against the twin's.
    (tmp_path / "prog.py").write_text(WIDE_TEXT, encoding="utf-8")
    texts = {}
    for pure in ("0", "1"):
        out = tmp_path / f"t{pure}.dat"
        fntrace_cli("record", "-p", "function_graph", "-A", "-R", "-F", "__main__.take",
                    "-o", str(out), "prog.py", cwd=tmp_path, check=True,
                    env={**os.environ, "FNTRACE_PURE": pure})
        rep = fntrace_cli("report", str(out), check=True).stdout
        texts[pure] = [ln.split("|", 1)[-1] for ln in rep.splitlines() if "take(" in ln]
    assert len(texts["0"]) == 34, texts["0"][:3]
    assert texts["0"] == texts["1"]
    assert any("長い名前の引数はここにあります='Ā" in t for t in texts["0"])
