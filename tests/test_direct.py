"""Direct calls and live patching (ftrace.c register_ftrace_direct, IPMODIFY; seed 000).

A function's ``__code__`` is swapped for a signature-identical stub that hands the call
to the site's DirectSite: the direct trampoline ``tramp(original, *args, **kwargs)`` or,
for IPMODIFY ops, the function the ops' callback chose with
ftrace_regs_set_instruction_pointer().  These tests check:

- what the trampoline gets and what it can do (wrap, replace, short-circuit), for every
  way a program can hold the function, with the function looking unchanged from outside;
- the kernel's preconditions and errnos (EINVAL, EBUSY), and that a refused call changes
  nothing;
- modify_ftrace_direct switching atomically under concurrent callers;
- exact restoration by unregister_ftrace_direct;
- co-existence with the function tracer, function_graph and fprobes, including the four
  orders of selftests/ftrace/test.d/direct/ftrace-direct.tc;
- generators, coroutines, methods, closures and every parameter kind;
- IPMODIFY: one owner per function, the ops_func sharing protocol with direct ops;
- the enabled_functions / touched_functions flag columns (' I', ' D', ' M ', direct-->).
"""
from __future__ import annotations

import asyncio
import errno
import inspect
import re
import sys
import threading

import pytest

import fntrace
from fntrace import FTRACE_OPS_FL, BusyError, FilterError, Ops, UsageError
from fntrace.core.direct import (FTRACE_OPS_CMD, ftrace_find_rec_direct,
                                 ftrace_regs_set_instruction_pointer, modify_ftrace_direct,
                                 register_ftrace_direct, unregister_ftrace_direct)
from fntrace.fprobe import Fprobe, register_fprobe_ips, unregister_fprobe
from fntrace.tracefs import Tracefs

from support import run_python

# ---------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------


# After each test: every graph user and ops left behind is unregistered.
pytestmark = pytest.mark.usefixtures("fgraph_clean")


# The functions most tests patch.  Each test imports its own copy under a fresh module
# name: records are never forgotten in a process, so names must not be reused.
TARGETS = '''
import asyncio

CALLS = []


def target(x):
    """doc of target"""
    CALLS.append(("target", x))
    return x + 1


def caller(x):
    return target(x) * 10


def boom(x):
    raise ValueError(f"boom {x}")


def sig(a, b=2, /, c=3, *args, d, e=5, **kw):
    return (a, b, c, args, d, e, kw)


def posonly(a, /, **kw):
    return (a, kw)


def kwonly(*, key, flag=False):
    return (key, flag)


def star(*args, **kwargs):
    return (args, kwargs)


def kwself(**fields):
    return fields


class C:
    """a class"""

    def __init__(self, base=0):
        self.base = base

    def meth(self, x):
        """doc of meth"""
        return self.base + x

    @staticmethod
    def sm(x):
        return x + 100

    @classmethod
    def cm(cls, x):
        return (cls.__name__, x)


class D(C):
    def meth(self, x):
        return ("D", super().meth(x))


def gen(n):
    total = 0
    for i in range(n):
        try:
            got = yield i
        except KeyError as exc:
            got = ("caught", exc.args[0])
        total += 1
        if got is not None:
            yield ("got", got)
    return ("done", total)


def delegate(n):
    r = yield from gen(n)
    return ("delegate", r)


async def coro(x):
    await asyncio.sleep(0)
    return x * 2


async def coro_caller(x):
    return ("caller", await coro(x))


async def agen():
    yield 1


def make_adder(k):
    def add(x):
        return x + k
    return add


def make_late():
    if 0:
        later = None

    def inner(x):
        return x + later

    def set_later(v):
        nonlocal later
        later = v
    return inner, set_later


def dflt(x, y=10, *, k=5):
    """doc of dflt"""
    return (x, y, k)


def serve(vals):
    for v in vals:
        def handle(x):
            return (x, v)
        yield handle


def outer(a):
    def mid(b):
        def leaf(c):
            return a + b + c
        return leaf
    return mid


square = lambda x: x * x  # noqa: E731

CALLBACKS = [target]
'''


@pytest.fixture
def m(write_module):
    """A fresh copy of TARGETS."""
    return write_module(TARGETS, hint="dirmod")


def direct_ops(*funcs, name: str = "direct") -> Ops:
    ops = Ops(name=name)
    for f in funcs:
        fntrace.ftrace_set_filter_ip(ops, f)
    return ops


def tagger(tag):
    """A wrapping trampoline: ``(tag, original(...))``."""
    def tramp(original, /, *args, **kwargs):
        return (tag, original(*args, **kwargs))
    tramp.__qualname__ = f"tramp_{tag}"
    return tramp


def passthrough(original, /, *args, **kwargs):
    return original(*args, **kwargs)


def safe_unregister(ops, tramp):
    if ops.flags & FTRACE_OPS_FL.ENABLED and ops.direct_call is not None:
        unregister_ftrace_direct(ops, tramp)


_LINE = re.compile(r"^(?P<name>\S+) \((?P<count>\d+)\)(?P<flags>.{11})(?P<rest>.*)$", re.S)


def func_line(lines, name):
    """The enabled/touched_functions line of ``name`` parsed into its fields, or None."""
    for line in lines:
        mm = _LINE.match(line)
        if mm and mm.group("name") == name:
            fl = mm.group("flags")
            return {"count": int(mm.group("count")), "R": fl[0:2], "I": fl[2:4],
                    "D": fl[4:6], "O": fl[6:8], "M": fl[8:11], "rest": mm.group("rest"),
                    "line": line}
    return None


def rec_name(mod, qualname):
    return f"{mod.__name__}.{qualname}"


def trace_fn_count(text, name):
    """Function-tracer lines (``func <-parent``) for ``name``."""
    n = 0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        mm = re.search(r"\d+\.\d{6}: (\S+)", line)
        if mm and mm.group(1) == name:
            n += 1
    return n


def graph_entries(text, name):
    """function_graph lines where ``name`` is entered (leaf ``name();`` or ``name() {``)."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        body = line.split("|  ", 1)[-1].strip()
        if body.startswith(name + "();") or body.startswith(name + "() {"):
            out.append(body)
    return out


# ---------------------------------------------------------------------------------
# What the trampoline gets and what it can do
# ---------------------------------------------------------------------------------


def test_trampoline_receives_original_and_arguments(m):
    seen = []

    def tramp(original, *args, **kwargs):
        seen.append((original, args, kwargs))
        return original(*args, **kwargs)

    ops = direct_ops(m.target)
    register_ftrace_direct(ops, tramp)
    try:
        assert m.target(41) == 42
        assert m.target(x=1) == 2
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert len(seen) == 2
    original, args, kwargs = seen[0]
    # The original is a separate callable running the function's own code, not the
    # patched function (calling it does not come back to the trampoline).
    assert callable(original)
    assert original is not m.target
    assert original.__code__ is m.target.__code__
    assert original.__name__ == "target"
    # Arguments arrive as the signature binds them: positional parameters by position.
    assert args == (41,) and kwargs == {}
    assert seen[1][1] == (1,) and seen[1][2] == {}
    assert m.CALLS == [("target", 41), ("target", 1)]


def test_trampoline_keyword_only_parameters_arrive_as_keywords(m):
    seen = []

    def tramp(original, *args, **kwargs):
        seen.append((args, kwargs))
        return original(*args, **kwargs)

    ops = direct_ops(m.sig)
    register_ftrace_direct(ops, tramp)
    try:
        assert m.sig(1, d=4) == (1, 2, 3, (), 4, 5, {})
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert seen == [((1, 2, 3), {"d": 4, "e": 5})]


def test_trampoline_wraps_and_changes_the_result(m):
    def tramp(original, x):
        return original(x) * 100

    ops = direct_ops(m.target)
    register_ftrace_direct(ops, tramp)
    try:
        assert m.target(1) == 200
        assert m.caller(1) == 2000
        assert m.CALLS == [("target", 1), ("target", 1)]
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert m.target(1) == 2


def test_trampoline_replaces_without_calling_original(m):
    def tramp(original, x):
        return -x

    ops = direct_ops(m.target)
    register_ftrace_direct(ops, tramp)
    try:
        assert [m.target(i) for i in range(3)] == [0, -1, -2]
        assert m.CALLS == []            # the original body never ran
    finally:
        unregister_ftrace_direct(ops, tramp)


def test_trampoline_short_circuits(m):
    def tramp(original, x):
        if x < 0:
            return "short"
        return original(x)

    ops = direct_ops(m.target)
    register_ftrace_direct(ops, tramp)
    try:
        assert m.target(-5) == "short"
        assert m.target(5) == 6
        assert m.CALLS == [("target", 5)]
    finally:
        unregister_ftrace_direct(ops, tramp)


def test_every_reference_sees_the_trampoline(m, write_module):
    # A module that copied the function with `from m import target` before patching.
    user = write_module(f"""
        from {m.__name__} import target

        def use(x):
            return target(x)
        """, "diruser")
    from_copy = m.target                  # `from m import target` in this module
    stored = list(m.CALLBACKS)            # a callback stored before registration
    ops = direct_ops(m.target)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        assert m.target(1) == ("T", 2)
        assert from_copy(1) == ("T", 2)
        assert user.use(1) == ("T", 2)
        assert user.target(1) == ("T", 2)
        assert stored[0](1) == ("T", 2)
        assert m.CALLBACKS[0](1) == ("T", 2)
        assert list(map(m.target, [1, 2])) == [("T", 2), ("T", 3)]
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert user.use(1) == 2 and stored[0](1) == 2


def test_methods_bound_and_unbound_see_the_trampoline(m):
    obj = m.C(10)
    bound = obj.meth                       # bound method made before registration
    unbound = m.C.meth
    ops = direct_ops(m.C.meth)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        assert bound(1) == ("T", 11)
        assert obj.meth(2) == ("T", 12)
        assert unbound(obj, 3) == ("T", 13)
        assert m.C.meth(obj, 4) == ("T", 14)
        assert m.C.__dict__["meth"](obj, 5) == ("T", 15)
        # A subclass calling it through super() goes through the trampoline too.
        assert m.D(1).meth(1) == ("D", ("T", 2))
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert bound(1) == 11


def test_method_using_zero_argument_super(m):
    ops = direct_ops(m.D.meth)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        assert m.D(1).meth(1) == ("T", ("D", 2))
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert m.D(1).meth(1) == ("D", 2)


def test_staticmethod_sees_the_trampoline(m):
    obj = m.C()
    ops = direct_ops(m.C.sm)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        assert m.C.sm(1) == ("T", 101)
        assert obj.sm(2) == ("T", 102)
        assert m.C.__dict__["sm"].__func__(3) == ("T", 103)
        assert isinstance(m.C.__dict__["sm"], staticmethod)
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert m.C.sm(1) == 101


def test_classmethod_sees_the_trampoline(m):
    """The function behind a classmethod is patched (not the bound method the class
    attribute gives), for calls through the class, an instance and a subclass."""
    obj = m.C()
    ops = direct_ops(m.C.cm)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        assert m.C.cm(1) == ("T", ("C", 1))
        assert obj.cm(2) == ("T", ("C", 2))
        assert m.D.cm(3) == ("T", ("D", 3))
    finally:
        safe_unregister(ops, tramp)
    assert m.C.cm(1) == ("C", 1)


def test_function_looks_unchanged_while_patched(m):
    funcs = {"target": m.target, "gen": m.gen, "coro": m.coro, "sig": m.sig,
             "meth": m.C.meth}
    before = {}
    for key, f in funcs.items():
        before[key] = dict(
            id=id(f), name=f.__name__, qualname=f.__qualname__, doc=f.__doc__,
            module=f.__module__, defaults=f.__defaults__, kwdefaults=f.__kwdefaults__,
            signature=inspect.signature(f), source=inspect.getsource(f),
            isgen=inspect.isgeneratorfunction(f), iscoro=inspect.iscoroutinefunction(f),
            code_name=f.__code__.co_name, filename=f.__code__.co_filename,
            firstlineno=f.__code__.co_firstlineno, argcount=f.__code__.co_argcount,
            freevars=f.__code__.co_freevars)
    ops = direct_ops(*funcs.values())
    register_ftrace_direct(ops, passthrough)
    try:
        for key, f in funcs.items():
            b = before[key]
            assert getattr(m, key, None) is f or key == "meth"
            assert id(f) == b["id"]
            assert f.__name__ == b["name"]
            assert f.__qualname__ == b["qualname"]
            assert f.__doc__ == b["doc"]
            assert f.__module__ == b["module"]
            assert f.__defaults__ == b["defaults"]
            assert f.__kwdefaults__ == b["kwdefaults"]
            assert inspect.signature(f) == b["signature"], key
            assert inspect.getsource(f) == b["source"], key
            assert inspect.isgeneratorfunction(f) == b["isgen"], key
            assert inspect.iscoroutinefunction(f) == b["iscoro"], key
            assert f.__code__.co_name == b["code_name"]
            assert f.__code__.co_filename == b["filename"]
            assert f.__code__.co_firstlineno == b["firstlineno"]
            assert f.__code__.co_argcount == b["argcount"]
            assert f.__code__.co_freevars == b["freevars"]
        assert m.C.meth is funcs["meth"]
        assert inspect.isgeneratorfunction(m.gen) and inspect.iscoroutinefunction(m.coro)
        assert not inspect.isgeneratorfunction(m.target)
    finally:
        unregister_ftrace_direct(ops, passthrough)


# ---------------------------------------------------------------------------------
# Kernel preconditions (register_ftrace_direct kerneldoc)
# ---------------------------------------------------------------------------------


def test_empty_filter_is_einval(m):
    ops = Ops()
    with pytest.raises(FilterError) as ei:
        register_ftrace_direct(ops, passthrough)
    assert ei.value.errno == errno.EINVAL
    assert not ops.flags & FTRACE_OPS_FL.ENABLED
    assert ops.direct_call is None


def test_registering_the_same_ops_twice_is_einval(m):
    ops = direct_ops(m.target)
    t1 = tagger("one")
    register_ftrace_direct(ops, t1)
    try:
        with pytest.raises(FilterError) as ei:
            register_ftrace_direct(ops, tagger("two"))
        assert ei.value.errno == errno.EINVAL
        assert m.target(1) == ("one", 2)
        assert ftrace_find_rec_direct(m.target) is t1
    finally:
        unregister_ftrace_direct(ops, t1)


def test_second_direct_on_the_same_function_is_ebusy(m):
    first, second = direct_ops(m.target, name="first"), direct_ops(m.target, name="second")
    t1, t2 = tagger("one"), tagger("two")
    register_ftrace_direct(first, t1)
    try:
        with pytest.raises(BusyError) as ei:
            register_ftrace_direct(second, t2)
        assert ei.value.errno == errno.EBUSY
        assert not second.flags & FTRACE_OPS_FL.ENABLED
        assert second.direct_call is None
        assert m.target(1) == ("one", 2)
        assert ftrace_find_rec_direct(m.target) is t1
        # A refused ops left nothing behind: the first unregisters cleanly.
        unregister_ftrace_direct(first, t1)
        assert m.target(1) == 2
        # ... and the second can take the function now.
        register_ftrace_direct(second, t2)
        assert m.target(1) == ("two", 2)
        unregister_ftrace_direct(second, t2)
    finally:
        safe_unregister(first, t1)
        safe_unregister(second, t2)


def test_second_direct_via_filter_change_is_ebusy(m):
    """Only one direct per function, also when a registered direct ops' filter grows
    onto a function that already has a trampoline; the first trampoline stays."""
    a, b = direct_ops(m.target, name="a"), direct_ops(m.caller, name="b")
    ta, tb = tagger("A"), tagger("B")
    register_ftrace_direct(a, ta)
    register_ftrace_direct(b, tb)
    try:
        with pytest.raises(BusyError):
            fntrace.ftrace_set_filter_ip(b, m.target)
        assert m.target(1) == ("A", 2)
        unregister_ftrace_direct(b, tb)
        assert m.target(1) == ("A", 2)
        assert ftrace_find_rec_direct(m.target) is ta
    finally:
        safe_unregister(b, tb)
        safe_unregister(a, ta)


def test_builtin_cannot_be_put_in_the_filter():
    ops = Ops()
    with pytest.raises(FilterError) as ei:
        fntrace.ftrace_set_filter_ip(ops, len)
    assert ei.value.errno == errno.EINVAL
    assert not ops.filter_hash
    with pytest.raises(FilterError):
        register_ftrace_direct(ops, passthrough)


def test_non_callable_trampoline_is_refused_and_nothing_changes(m):
    code = m.target.__code__
    ops = direct_ops(m.target)
    with pytest.raises(UsageError):
        register_ftrace_direct(ops, 42)
    assert m.target.__code__ is code
    assert not ops.flags & FTRACE_OPS_FL.ENABLED and ops.direct_call is None
    assert func_line(fntrace.enabled_functions(), rec_name(m, "target")) is None
    assert ftrace_find_rec_direct(m.target) is None
    assert m.target(1) == 2
    # The ops is still usable.
    register_ftrace_direct(ops, passthrough)
    unregister_ftrace_direct(ops, passthrough)


def test_async_generator_is_refused_and_nothing_changes(m):
    code_a, code_t = m.agen.__code__, m.target.__code__
    ops = direct_ops(m.target, m.agen)
    with pytest.raises(UsageError):
        register_ftrace_direct(ops, passthrough)
    assert m.agen.__code__ is code_a
    assert m.target.__code__ is code_t        # no function of the filter was touched
    assert not ops.flags & FTRACE_OPS_FL.ENABLED and ops.direct_call is None
    assert fntrace.enabled_functions() == []
    assert m.target(1) == 2


def test_lambda_can_be_patched(m):
    """A lambda's code name is not an identifier: the stub must still be built."""
    ops = direct_ops(m.square)
    tramp = tagger("T")
    try:
        register_ftrace_direct(ops, tramp)
        assert m.square(3) == ("T", 9)
    finally:
        safe_unregister(ops, tramp)
    assert m.square(3) == 9


def test_keyword_argument_named_self(m):
    """A keyword argument named ``self`` (here a **kwargs key) reaches the function:
    the dispatcher's own parameters must not collide with the function's."""
    ops = direct_ops(m.kwself)
    register_ftrace_direct(ops, passthrough)
    try:
        assert m.kwself(self=1, other=2) == {"self": 1, "other": 2}
    finally:
        unregister_ftrace_direct(ops, passthrough)


def test_modify_and_unregister_preconditions(m):
    ops = direct_ops(m.target)
    with pytest.raises(FilterError):
        modify_ftrace_direct(ops, passthrough)            # not registered
    with pytest.raises(FilterError):
        unregister_ftrace_direct(ops, passthrough)        # not registered
    register_ftrace_direct(ops, passthrough)
    try:
        with pytest.raises(UsageError):
            modify_ftrace_direct(ops, "not callable")
        assert ftrace_find_rec_direct(m.target) is passthrough
        # A plain function-tracer ops is not a direct ops.
        plain = direct_ops(m.target)
        plain.func = lambda *a: None
        fntrace.register_ftrace_function(plain)
        try:
            with pytest.raises(FilterError):
                modify_ftrace_direct(plain, passthrough)
        finally:
            fntrace.unregister_ftrace_function(plain)
    finally:
        unregister_ftrace_direct(ops, passthrough)


# ---------------------------------------------------------------------------------
# modify_ftrace_direct: atomic switch under concurrent callers
# ---------------------------------------------------------------------------------


def test_modify_switches_atomically_under_concurrent_callers(m):
    ta, tb = tagger("A"), tagger("B")
    ops = direct_ops(m.target)
    register_ftrace_direct(ops, ta)
    stop = threading.Event()
    results: list[list] = [[], []]
    errors: list[BaseException] = []
    started = [threading.Event(), threading.Event()]
    f = m.target

    def worker(i):
        out = results[i]
        try:
            while True:
                out.append(f(1))
                started[i].set()
                if stop.is_set():
                    break
        except BaseException as exc:        # noqa: BLE001 - reported below
            errors.append(exc)
            started[i].set()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for ev in started:
            assert ev.wait(60)
        for _ in range(200):
            modify_ftrace_direct(ops, tb)
            modify_ftrace_direct(ops, ta)
        modify_ftrace_direct(ops, tb)
        assert f(1) == ("B", 2)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        m.CALLS.clear()
        unregister_ftrace_direct(ops, ops.direct_call)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads)
    for out in results:
        assert out, "a worker made no call"
        bad = [r for r in out if r not in (("A", 2), ("B", 2))]
        assert not bad, bad[:5]


def test_modify_updates_find_rec_direct_and_enabled_functions(m):
    ta, tb = tagger("A"), tagger("B")
    ops = direct_ops(m.target)
    register_ftrace_direct(ops, ta)
    try:
        modify_ftrace_direct(ops, tb)
        assert ftrace_find_rec_direct(m.target) is tb
        assert m.target(1) == ("B", 2)
        line = func_line(fntrace.enabled_functions(), rec_name(m, "target"))
        assert line["rest"].endswith("\n\tdirect-->" + __name__ + ".tramp_B")
        # Unregister wants the current trampoline, not the first one.
        with pytest.raises(FilterError):
            unregister_ftrace_direct(ops, ta)
    finally:
        unregister_ftrace_direct(ops, tb)


# ---------------------------------------------------------------------------------
# unregister_ftrace_direct restores exactly
# ---------------------------------------------------------------------------------


def test_unregister_restores_exactly(m):
    funcs = [m.target, m.boom]
    codes = [f.__code__ for f in funcs]
    ops = direct_ops(*funcs)
    register_ftrace_direct(ops, passthrough)
    assert all(f.__code__ is not c for f, c in zip(funcs, codes))
    assert ftrace_find_rec_direct(m.target) is passthrough
    unregister_ftrace_direct(ops, passthrough)
    assert all(f.__code__ is c for f, c in zip(funcs, codes))
    assert ftrace_find_rec_direct(m.target) is None
    assert m.target(1) == 2 and m.caller(1) == 20

    # No stub, site or trampoline frame is left in a traceback.
    try:
        m.boom(3)
    except ValueError as exc:
        tb = exc.__traceback__
    else:
        pytest.fail("boom did not raise")
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    me = sys._getframe().f_code
    assert frames == [me, codes[1]]

    for name in ("target", "boom"):
        assert func_line(fntrace.enabled_functions(), rec_name(m, name)) is None
        t = func_line(fntrace.touched_functions(), rec_name(m, name))
        assert t is not None and t["count"] == 0 and t["M"] == " M "
        assert t["D"] == "  " and "direct-->" not in t["rest"]


def test_unregister_with_the_wrong_trampoline_is_einval(m):
    ops = direct_ops(m.target)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        with pytest.raises(FilterError) as ei:
            unregister_ftrace_direct(ops, tagger("T"))
        assert ei.value.errno == errno.EINVAL
        assert m.target(1) == ("T", 2)            # still attached
        assert ops.flags & FTRACE_OPS_FL.ENABLED
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert m.target(1) == 2


def test_unregister_free_filters(m):
    ops = direct_ops(m.target)
    register_ftrace_direct(ops, passthrough)
    unregister_ftrace_direct(ops, passthrough, free_filters=False)
    assert ops.filter_hash                           # kept: can register again
    tramp = tagger("again")
    register_ftrace_direct(ops, tramp)
    try:
        assert m.target(1) == ("again", 2)
    finally:
        unregister_ftrace_direct(ops, tramp, free_filters=True)
    assert not ops.filter_hash
    with pytest.raises(FilterError):
        register_ftrace_direct(ops, tramp)           # empty filter again


def test_filter_change_on_a_registered_direct_ops(m):
    code_t, code_c = m.target.__code__, m.caller.__code__
    ops = direct_ops(m.target)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        fntrace.ftrace_set_filter_ip(ops, m.caller)              # add
        assert m.caller(1) == ("T", ("T", 2) * 10)
        fntrace.ftrace_set_filter_ip(ops, m.target, remove=True)  # remove
        assert m.target.__code__ is code_t
        assert m.target(1) == 2
        assert m.caller(1) == ("T", 20)
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert m.caller.__code__ is code_c and m.caller(1) == 20


REMOVE_LAST = """
import sys
sys.path.insert(0, sys.argv[1])
import fntrace
from fntrace import FTRACE_OPS_FL, FilterError, Ops
from fntrace.core.direct import register_ftrace_direct
import {mod} as m

if sys.argv[2] == "direct":
    ops = Ops(name="d")
    fntrace.ftrace_set_filter_ip(ops, m.target)
    register_ftrace_direct(ops, lambda original, x: ("T", original(x)))
else:
    ops = Ops(lambda ip, p, op, fregs: None, FTRACE_OPS_FL.IPMODIFY, name="ip")
    fntrace.ftrace_set_filter_ip(ops, m.target)
    fntrace.register_ftrace_function(ops)
try:
    fntrace.ftrace_set_filter_ip(ops, m.target, remove=True)
except FilterError:
    print("refused")
except Exception as exc:
    print("other error", type(exc).__name__)
else:
    print("accepted")
print("filter", len(ops.filter_hash))
print("caller", m.caller(1))
print("enabled", len(fntrace.enabled_functions()))
"""


@pytest.mark.parametrize("kind", ["direct", "ipmodify"])
def test_removing_the_last_function_of_a_registered_ops_is_einval(m, tmp_path, kind):
    """An empty filter means every function: a registered DIRECT/IPMODIFY ops may not
    get one by removing its last function (EINVAL), as with ftrace_set_filter('').
    Run in a child process: getting this wrong attaches the ops to every function of
    the process, library code included."""
    script = tmp_path / "remove_last.py"
    script.write_text(REMOVE_LAST.format(mod=m.__name__))
    p = run_python(script, tmp_path, kind)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == [
        "refused", "filter 1", "caller " + (str(("T", 2) * 10) if kind == "direct" else "20"),
        "enabled 1"], p.stdout + p.stderr[-2000:]


# ---------------------------------------------------------------------------------
# A trampoline that raises
# ---------------------------------------------------------------------------------


def test_trampoline_that_raises(m):
    state = {"raise": True}

    def tramp(original, x):
        if state["raise"]:
            raise KeyError(f"from tramp {x}")
        return original(x)

    ops = direct_ops(m.target)
    register_ftrace_direct(ops, tramp)
    try:
        with pytest.raises(KeyError, match="from tramp 1"):
            m.target(1)
        with pytest.raises(KeyError):
            m.caller(1)                       # propagates through the caller too
        try:
            m.caller(2)
        except KeyError as exc:
            names = []
            tb = exc.__traceback__
            while tb is not None:
                names.append(tb.tb_frame.f_code.co_name)
                tb = tb.tb_next
            assert "caller" in names and names[-1] == "tramp"
        state["raise"] = False
        assert m.target(1) == 2
        line = func_line(fntrace.enabled_functions(), rec_name(m, "target"))
        assert line["D"] == " D"
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert m.target(1) == 2
    assert func_line(fntrace.enabled_functions(), rec_name(m, "target")) is None


def test_trampoline_that_raises_under_function_graph(m):
    """The graph keeps its shape after the trampoline raised through a traced call."""
    state = {"raise": True}

    def tramp(original, x):
        if state["raise"]:
            raise KeyError(x)
        return original(x) + 1000

    fs = Tracefs()
    fs.write("set_ftrace_filter", f"{m.__name__}.target {m.__name__}.caller")
    fs.write("options/funcgraph-retval", "1")
    ops = direct_ops(m.target)
    register_ftrace_direct(ops, tramp)
    try:
        fs.write("current_tracer", "function_graph")
        with pytest.raises(KeyError):
            m.caller(1)
        state["raise"] = False
        fs.write("trace", "")
        assert m.caller(1) == 10020
        text = fs.read("trace")
        body = [ln.split("|  ", 1)[1] for ln in text.splitlines()
                if not ln.startswith("#") and "|  " in ln]
        assert body == [
            f"{m.__name__}.caller() {{",
            f"  {m.__name__}.target(); /* ret=1002 */",
            f"}} /* {m.__name__}.caller ret=10020 */",
        ], text
    finally:
        fs.write("current_tracer", "nop")
        unregister_ftrace_direct(ops, tramp)


# ---------------------------------------------------------------------------------
# Co-existence with other ops (seed 000: list func, then the direct caller)
# ---------------------------------------------------------------------------------


def test_plain_ops_runs_once_per_call_then_the_trampoline(m):
    events = []

    def cb(ip, parent_ip, op, fregs):
        events.append(("cb", ip.name, fregs.get_argument(0)))

    def tramp(original, x):
        events.append(("tramp", x))
        return original(x) + 1000

    plain = Ops(cb, name="plain")
    fntrace.ftrace_set_filter_ip(plain, m.target)
    fntrace.register_ftrace_function(plain)
    ops = direct_ops(m.target)
    register_ftrace_direct(ops, tramp)
    name = rec_name(m, "target")
    try:
        assert m.target(1) == 1002
        assert m.caller(2) == 10030
        assert events == [("cb", name, 1), ("tramp", 1), ("cb", name, 2), ("tramp", 2)]
        line = func_line(fntrace.enabled_functions(), name)
        assert line["count"] == 2 and line["D"] == " D"
    finally:
        unregister_ftrace_direct(ops, tramp)
        fntrace.unregister_ftrace_function(plain)


def test_plain_ops_registered_after_the_direct(m):
    events = []
    ops = direct_ops(m.target)
    register_ftrace_direct(ops, lambda original, x: events.append("tramp") or original(x))
    tramp = ops.direct_call
    plain = Ops(lambda *a: events.append("cb"), name="plain")
    fntrace.ftrace_set_filter_ip(plain, m.target)
    fntrace.register_ftrace_function(plain)
    try:
        assert m.target(1) == 2
        assert events == ["cb", "tramp"]
        fntrace.unregister_ftrace_function(plain)
        events.clear()
        assert m.target(1) == 2
        assert events == ["tramp"]
    finally:
        if plain.flags & FTRACE_OPS_FL.ENABLED:
            fntrace.unregister_ftrace_function(plain)
        unregister_ftrace_direct(ops, tramp)


def test_trace_session_sees_the_function_once_per_call(m):
    ops = direct_ops(m.target)
    register_ftrace_direct(ops, tagger("T"))
    tramp = ops.direct_call
    try:
        with fntrace.trace(f"{m.__name__}.*") as t:
            assert m.caller(1) == ("T", 2) * 10
            assert m.target(2) == ("T", 3)
        text = t.text()
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert trace_fn_count(text, rec_name(m, "target")) == 2, text
    assert trace_fn_count(text, rec_name(m, "caller")) == 1, text
    assert f"{rec_name(m, 'target')} <-{rec_name(m, 'caller')}" in text


def test_function_graph_shows_the_function_once_with_the_trampoline_result(m):
    fs = Tracefs()
    fs.write("set_ftrace_filter", f"{m.__name__}.target {m.__name__}.caller")
    fs.write("options/funcgraph-retval", "1")
    ops = direct_ops(m.target)

    def tramp(original, x):
        return original(x) + 1000

    register_ftrace_direct(ops, tramp)
    try:
        fs.write("current_tracer", "function_graph")
        assert fs.read("current_tracer") == "function_graph\n"
        assert m.caller(1) == 10020
        assert m.caller(2) == 10030
        text = fs.read("trace")
    finally:
        fs.write("current_tracer", "nop")
        unregister_ftrace_direct(ops, tramp)
    name = rec_name(m, "target")
    assert graph_entries(text, name) == [
        f"{name}(); /* ret=1002 */", f"{name}(); /* ret=1003 */"], text
    assert len(graph_entries(text, rec_name(m, "caller"))) == 2


def test_fprobe_entry_and_exit_on_a_patched_function(m):
    log = []

    def entry(fp, ip, ret_ip, fregs, data):
        log.append(("entry", ip.name, fregs.get_argument(0)))

    def exit_(fp, ip, ret_ip, fregs, data):
        log.append(("exit", ip.name, fregs.get_return_value()))

    fp = Fprobe(entry, exit_, name="dfp")
    ops = direct_ops(m.target)

    def tramp(original, x):
        log.append(("tramp", x))
        return original(x) * 7

    register_ftrace_direct(ops, tramp)
    register_fprobe_ips(fp, [m.target])
    name = rec_name(m, "target")
    try:
        assert m.target(2) == 21
        assert m.caller(3) == 280
        assert log == [("entry", name, 2), ("tramp", 2), ("exit", name, 21),
                       ("entry", name, 3), ("tramp", 3), ("exit", name, 28)]
        assert fp.nmissed == 0
    finally:
        unregister_fprobe(fp)
        unregister_ftrace_direct(ops, tramp)
    log.clear()
    assert m.target(2) == 3 and log == []


def test_fprobe_registered_before_the_direct_and_removed_first(m):
    log = []
    fp = Fprobe(lambda fp, ip, r, fregs, d: log.append("entry"),
                lambda fp, ip, r, fregs, d: log.append(("exit", fregs.get_return_value())))
    register_fprobe_ips(fp, [m.target])
    ops = direct_ops(m.target)
    tramp = tagger("T")
    try:
        register_ftrace_direct(ops, tramp)
        assert m.target(1) == ("T", 2)
        assert log == ["entry", ("exit", ("T", 2))]
        unregister_fprobe(fp)
        log.clear()
        assert m.target(1) == ("T", 2) and log == []
    finally:
        safe_unregister(ops, tramp)
    assert m.target(1) == 2


class _DirectTcHarness:
    """selftests/ftrace/test.d/direct/ftrace-direct.tc for one tracer: the tracer and the
    direct trampoline come and go in some order; after each step the function behaves
    as the state says."""

    def __init__(self, mod, tracer):
        self.mod = mod
        self.tracer = tracer
        self.name = rec_name(mod, "target")
        self.code = mod.target.__code__
        self.fs = Tracefs()
        self.fs.write("set_ftrace_filter", self.name)
        if tracer == "function_graph":
            self.fs.write("options/funcgraph-retval", "1")
        self.ops = direct_ops(mod.target, name="my_direct")
        self.tracer_on = False
        self.direct_on = False

    @staticmethod
    def my_tramp(original, x):
        # samples/ftrace/ftrace-direct.c: my_direct_func then back into the function
        return original(x) + 1000

    # -- the four steps ---------------------------------------------------------------
    def set_tracer(self):
        self.fs.write("current_tracer", self.tracer)
        self.tracer_on = True
        self.check()

    def unset_tracer(self):
        self.fs.write("current_tracer", "nop")
        self.tracer_on = False
        self.check()

    def load_direct(self):
        register_ftrace_direct(self.ops, self.my_tramp)
        self.direct_on = True
        self.check()

    def unload_direct(self):
        unregister_ftrace_direct(self.ops, self.my_tramp)
        self.direct_on = False
        self.check()

    def cleanup(self):
        if self.tracer_on:
            self.fs.write("current_tracer", "nop")
        if self.direct_on:
            unregister_ftrace_direct(self.ops, self.my_tramp)

    # -- the check after every step ---------------------------------------------------
    def check(self):
        self.fs.write("trace", "")
        want = 1000 + 6 if self.direct_on else 6
        assert self.mod.target(5) == want
        text = self.fs.read("trace")
        if self.tracer == "function":
            n = trace_fn_count(text, self.name)
            assert n == (1 if self.tracer_on else 0), text
        else:
            ents = graph_entries(text, self.name)
            if self.tracer_on:
                assert ents == [f"{self.name}(); /* ret={want} */"], text
            else:
                assert ents == [], text
        line = func_line(fntrace.enabled_functions(), self.name)
        if not (self.tracer_on or self.direct_on):
            assert line is None
            assert self.mod.target.__code__ is self.code
        else:
            assert line["count"] == int(self.tracer_on) + int(self.direct_on)
            assert line["D"] == (" D" if self.direct_on else "  ")
            assert ("\n\tdirect-->" in line["rest"]) == self.direct_on
            assert (self.mod.target.__code__ is self.code) == (not self.direct_on)
        assert (ftrace_find_rec_direct(self.mod.target) is self.my_tramp) == self.direct_on


ORDERS = {
    "a": ("set_tracer", "load_direct", "unset_tracer", "unload_direct"),
    "b": ("load_direct", "set_tracer", "unload_direct", "unset_tracer"),
    "c": ("set_tracer", "load_direct", "unload_direct", "unset_tracer"),
    "d": ("load_direct", "set_tracer", "unset_tracer", "unload_direct"),
}


@pytest.mark.parametrize("order", sorted(ORDERS))
@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_ftrace_direct_tc_orders(m, tracer, order):
    h = _DirectTcHarness(m, tracer)
    try:
        h.check()
        for step in ORDERS[order]:
            getattr(h, step)()
    finally:
        h.cleanup()
    # Fully restored.
    assert m.target.__code__ is h.code
    assert m.target(5) == 6
    assert func_line(fntrace.enabled_functions(), h.name) is None
    t = func_line(fntrace.touched_functions(), h.name)
    assert t["count"] == 0 and t["M"] == " M "
    assert ftrace_find_rec_direct(m.target) is None


# ---------------------------------------------------------------------------------
# Generators, coroutines, closures, parameter kinds
# ---------------------------------------------------------------------------------


def _drive(gen_obj):
    """A scripted conversation with a generator: next, send, throw, run to the end."""
    out = [next(gen_obj), gen_obj.send("a"), next(gen_obj), gen_obj.throw(KeyError("k"))]
    try:
        while True:
            out.append(next(gen_obj))
    except StopIteration as stop:
        out.append(("stop", stop.value))
    return out


@pytest.mark.parametrize("which", ["gen", "delegate"])
def test_generator_send_throw_pass_through(m, which):
    expected = _drive(getattr(m, which)(3))
    calls = []

    def tramp(original, n):
        calls.append(n)
        return original(n)

    ops = direct_ops(getattr(m, which))
    register_ftrace_direct(ops, tramp)
    try:
        assert _drive(getattr(m, which)(3)) == expected
        # Delegation by yield from into the patched generator keeps send/throw too.
        assert _drive(m.delegate(3)) == _drive_unpatched_reference(expected, which)
        assert inspect.isgeneratorfunction(getattr(m, which))
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert calls == [3, 3]
    assert _drive(getattr(m, which)(3)) == expected


def _drive_unpatched_reference(expected_for_which, which):
    if which == "delegate":
        return expected_for_which
    # delegate(3) wraps gen(3)'s return value
    out = list(expected_for_which)
    out[-1] = ("stop", ("delegate", out[-1][1]))
    return out


def test_generator_close_and_early_exit_pass_through(m):
    ops = direct_ops(m.gen)
    register_ftrace_direct(ops, passthrough)
    try:
        g = m.delegate(5)
        assert next(g) == 0
        g.close()
        with pytest.raises(StopIteration):
            next(g)
        assert list(m.gen(3)) == [0, 1, 2]
    finally:
        unregister_ftrace_direct(ops, passthrough)


def test_generator_replaced_by_another_iterable(m):
    ops = direct_ops(m.gen)

    def tramp(original, n):
        return iter(range(100, 100 + n))

    register_ftrace_direct(ops, tramp)
    try:
        assert list(m.gen(3)) == [100, 101, 102]
        g = m.delegate(2)
        assert list(g) == [100, 101]
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert list(m.gen(3)) == [0, 1, 2]


def test_coroutine(m):
    async def tramp(original, x):
        return (await original(x)) + 1

    ops = direct_ops(m.coro)
    register_ftrace_direct(ops, tramp)
    try:
        assert asyncio.run(m.coro(5)) == 11
        assert asyncio.run(m.coro_caller(5)) == ("caller", 11)
        assert inspect.iscoroutinefunction(m.coro)
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert asyncio.run(m.coro(5)) == 10


def test_coroutine_pass_through_trampoline(m):
    ops = direct_ops(m.coro)
    register_ftrace_direct(ops, passthrough)
    try:
        assert asyncio.run(m.coro_caller(4)) == ("caller", 8)
    finally:
        unregister_ftrace_direct(ops, passthrough)


def test_closure_with_free_variables(m):
    add3 = m.make_adder(3)
    code = add3.__code__
    ops = direct_ops(add3)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        assert add3(1) == ("T", 4)
        assert add3.__closure__[0].cell_contents == 3
        assert add3.__code__.co_freevars == ("k",)
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert add3.__code__ is code and add3(1) == 4


def test_closure_whose_cell_is_assigned_after_patching(m):
    inner, set_later = m.make_late()
    ops = direct_ops(inner)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        with pytest.raises(NameError):
            inner(1)                               # the cell is still empty
        set_later(10)
        assert inner(1) == ("T", 11)
        set_later(20)
        assert inner(1) == ("T", 21)
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert inner(1) == 21


def test_closure_given_to_the_filter_is_the_one_patched(m):
    """Filtering one closure of a factory patches that closure (and its siblings)."""
    add1, add2 = m.make_adder(1), m.make_adder(2)
    ops = direct_ops(add2)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        assert add2(10) == ("T", 12)
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert add1(10) == 11 and add2(10) == 12


def test_every_existing_closure_of_the_code_is_patched(m):
    """The site is the code object: every function object made from it goes through
    the trampoline, each with its own cells."""
    add1, add2 = m.make_adder(1), m.make_adder(2)
    ops = direct_ops(add1)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        assert (add1(10), add2(10)) == (("T", 11), ("T", 12))
        assert add1.__closure__[0].cell_contents == 1
        assert add2.__closure__[0].cell_contents == 2
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert (add1(10), add2(10)) == (11, 12)
    assert add1.__code__ is add2.__code__


def test_closure_made_after_registration_is_patched(m):
    """The site is the code object, as for the function tracer: a closure the factory
    makes after registration goes through the trampoline too."""
    add1 = m.make_adder(1)
    ops = direct_ops(add1)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        later = m.make_adder(3)
        assert add1(10) == ("T", 11)
        assert later(10) == ("T", 13)
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert add1(10) == 11


def test_closure_made_by_a_running_enclosing_frame_is_a_documented_limit(m):
    """Closures made later get the stub through the enclosing function's code, which is
    replaced by a copy holding the stub.  CPython cannot change the code a frame that is
    already running executes (here a suspended generator), so a closure that frame makes
    after registration runs unpatched — it is still called correctly, and the closures
    that existed at registration are patched.  (docs/internals.md, "Live patching")"""
    g = m.serve([1, 2])
    first = next(g)
    ops = direct_ops(first)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        second = next(g)
        assert first(10) == ("T", (10, 2))          # the cell follows the loop variable
        assert second(10) == (10, 2)                # made by the running frame: unpatched
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert first(10) == (10, 2) and second(10) == (10, 2)


def test_enclosing_functions_are_restored_exactly(m):
    codes = {"make_adder": m.make_adder.__code__, "outer": m.outer.__code__}
    sources = {k: inspect.getsource(getattr(m, k)) for k in codes}
    leaf = m.outer(1)(2)
    add1 = m.make_adder(1)
    ops = direct_ops(leaf, add1)
    tramp = tagger("T")
    register_ftrace_direct(ops, tramp)
    try:
        # Closures made later, two levels down too, go through the trampoline.
        assert m.outer(10)(20)(30) == ("T", 60)
        assert m.make_adder(5)(1) == ("T", 6)
        assert leaf(3) == ("T", 6)
        for k in codes:
            assert inspect.getsource(getattr(m, k)) == sources[k]
    finally:
        unregister_ftrace_direct(ops, tramp)
    for k, code in codes.items():
        assert getattr(m, k).__code__ is code, k
    assert m.outer(10)(20)(30) == 60 and m.make_adder(5)(1) == 6 and leaf(3) == 6
    assert fntrace.enabled_functions() == []


@pytest.mark.parametrize("first", ["inner", "factory"])
def test_direct_on_a_factory_and_on_its_closure(m, first):
    code = m.make_adder.__code__
    add1 = m.make_adder(1)
    fac_ops, add_ops = direct_ops(m.make_adder, name="fac"), direct_ops(add1, name="add")
    tf, ta = tagger("F"), tagger("A")
    register_ftrace_direct(fac_ops, tf)
    register_ftrace_direct(add_ops, ta)
    try:
        tag, add2 = m.make_adder(2)
        assert tag == "F" and add2(1) == ("A", 3) and add1(1) == ("A", 2)
        if first == "inner":
            unregister_ftrace_direct(add_ops, ta)
            tag, add3 = m.make_adder(3)
            assert tag == "F" and add3(1) == 4
        else:
            unregister_ftrace_direct(fac_ops, tf)
            assert m.make_adder(3)(1) == ("A", 4)
    finally:
        safe_unregister(add_ops, ta)
        safe_unregister(fac_ops, tf)
    assert m.make_adder.__code__ is code
    assert m.make_adder(4)(1) == 5 and add1(1) == 2
    assert fntrace.enabled_functions() == []


@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_factory_stays_traced_while_its_closure_is_patched(m, tracer):
    """Patching a closure replaces its enclosing function's code; a tracer on the
    enclosing function must follow it (once per call before, during and after)."""
    fac, add = rec_name(m, "make_adder"), rec_name(m, "make_adder.<locals>.add")
    fs = Tracefs()
    fs.write("set_ftrace_filter", f"{fac} {add}")
    fs.write("options/funcgraph-retval", "1")
    add1 = m.make_adder(1)                 # a live function object of the code
    ops = direct_ops(add1)

    def tramp(original, x):
        return original(x) + 1000

    def calls():
        fs.write("trace", "")
        r = m.make_adder(2)(1)
        text = fs.read("trace")
        if tracer == "function":
            return r, trace_fn_count(text, fac), trace_fn_count(text, add)
        return r, len(graph_entries(text, fac)), [e.split(";")[1].strip()
                                                   for e in graph_entries(text, add)]

    fs.write("current_tracer", tracer)
    try:
        before = calls()
        register_ftrace_direct(ops, tramp)
        during = calls()
        unregister_ftrace_direct(ops, tramp)
        after = calls()
    finally:
        fs.write("current_tracer", "nop")
        safe_unregister(ops, tramp)
    if tracer == "function":
        assert (before, during, after) == ((3, 1, 1), (1003, 1, 1), (3, 1, 1))
    else:
        assert (before, during, after) == (
            (3, 1, ["/* ret=3 */"]), (1003, 1, [f"/* ret=1003 */"]),
            (3, 1, ["/* ret=3 */"]))


def test_original_keeps_the_defaults(m):
    """``original`` behaves like the function: a trampoline may call it relying on
    defaults, and its signature and doc are the function's."""
    want_sig = inspect.signature(m.dflt)
    seen = {}

    def tramp(original, x, y, k):
        seen["sig"] = inspect.signature(original)
        seen["doc"] = original.__doc__
        return original(x)

    ops = direct_ops(m.dflt)
    register_ftrace_direct(ops, tramp)
    try:
        assert m.dflt(1, 2, k=3) == (1, 10, 5)
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert seen == {"sig": want_sig, "doc": "doc of dflt"}


SIG_CALLS = [
    ((1,), {"d": 4}),
    ((1, 20), {"d": 4}),
    ((1, 20, 30), {"d": 4, "e": 50}),
    ((1, 20, 30, 40, 41), {"d": 4, "extra": "x"}),
    ((1,), {"c": 33, "d": 4, "zz": 1}),
]


def test_parameter_kinds_while_patched_and_after(m):
    expected = [m.sig(*a, **k) for a, k in SIG_CALLS]
    exp_other = [m.posonly(1, a=2), m.kwonly(key="k"), m.kwonly(key="k", flag=True),
                 m.star(), m.star(1, 2, x=3)]
    ops = direct_ops(m.sig, m.posonly, m.kwonly, m.star)
    calls = []

    def tramp(original, /, *args, **kwargs):
        calls.append(original.__name__)
        return original(*args, **kwargs)

    register_ftrace_direct(ops, tramp)
    try:
        assert [m.sig(*a, **k) for a, k in SIG_CALLS] == expected
        assert [m.posonly(1, a=2), m.kwonly(key="k"), m.kwonly(key="k", flag=True),
                m.star(), m.star(1, 2, x=3)] == exp_other
        # The signature's rules are enforced by the stub exactly as by the function.
        with pytest.raises(TypeError):
            m.sig(1, 2, 3)                          # missing keyword-only d
        with pytest.raises(TypeError):
            m.sig(a=1, d=4)                         # a is positional-only
        with pytest.raises(TypeError):
            m.kwonly("k")                           # key is keyword-only
        assert m.sig.__defaults__ == (2, 3) and m.sig.__kwdefaults__ == {"e": 5}
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert calls.count("sig") == len(SIG_CALLS)
    assert [m.sig(*a, **k) for a, k in SIG_CALLS] == expected
    assert [m.posonly(1, a=2), m.kwonly(key="k"), m.kwonly(key="k", flag=True),
            m.star(), m.star(1, 2, x=3)] == exp_other


def test_defaults_changed_while_patched_are_honoured(m):
    ops = direct_ops(m.sig)
    register_ftrace_direct(ops, passthrough)
    try:
        m.sig.__defaults__ = (200, 300)
        assert m.sig(1, d=4) == (1, 200, 300, (), 4, 5, {})
    finally:
        unregister_ftrace_direct(ops, passthrough)
    assert m.sig(1, d=4) == (1, 200, 300, (), 4, 5, {})


def test_recursive_function_goes_through_the_trampoline_at_every_level(write_module):
    mod = write_module("""
        def fact(n):
            return 1 if n <= 1 else n * fact(n - 1)
        """, "dirrec")
    seen = []

    def tramp(original, n):
        seen.append(n)
        return original(n)

    ops = direct_ops(mod.fact)
    register_ftrace_direct(ops, tramp)
    try:
        assert mod.fact(5) == 120
    finally:
        unregister_ftrace_direct(ops, tramp)
    assert seen == [5, 4, 3, 2, 1]


# ---------------------------------------------------------------------------------
# IPMODIFY (live patching) and its sharing protocol with direct ops
# ---------------------------------------------------------------------------------


def ipmodify_ops(func, new_func, name="klp"):
    def cb(ip, parent_ip, op, fregs):
        ftrace_regs_set_instruction_pointer(fregs, new_func)
    ops = Ops(cb, FTRACE_OPS_FL.IPMODIFY, name=name)
    fntrace.ftrace_set_filter_ip(ops, func)
    return ops


def test_ipmodify_replaces_the_function_for_every_caller(m, write_module):
    user = write_module(f"""
        from {m.__name__} import target

        def use(x):
            return target(x)
        """, "diripuser")
    stored = list(m.CALLBACKS)
    code = m.target.__code__

    def new_target(x):
        return x + 500

    ops = ipmodify_ops(m.target, new_target)
    fntrace.register_ftrace_function(ops)
    try:
        assert m.target(1) == 501
        assert m.caller(1) == 5010
        assert user.use(1) == 501
        assert stored[0](1) == 501
        assert m.CALLS == []                     # the old body never ran
        line = func_line(fntrace.enabled_functions(), rec_name(m, "target"))
        assert line["I"] == " I" and line["D"] == "  " and line["M"] == " M "
    finally:
        fntrace.unregister_ftrace_function(ops)
    assert m.target.__code__ is code and m.target(1) == 2 and user.use(1) == 2
    t = func_line(fntrace.touched_functions(), rec_name(m, "target"))
    assert t["count"] == 0 and t["I"] == "  " and t["M"] == " M "


def test_ipmodify_callback_may_leave_some_calls_alone(m):
    def new_target(x):
        return "patched"

    def cb(ip, parent_ip, op, fregs):
        if fregs.get_argument(0) > 0:
            ftrace_regs_set_instruction_pointer(fregs, new_target)

    ops = Ops(cb, FTRACE_OPS_FL.IPMODIFY, name="klp-cond")
    fntrace.ftrace_set_filter_ip(ops, m.target)
    fntrace.register_ftrace_function(ops)
    try:
        assert m.target(1) == "patched"
        assert m.target(-1) == 0
        assert m.target(2) == "patched"
    finally:
        fntrace.unregister_ftrace_function(ops)


def test_ipmodify_with_other_ops_on_the_function(m):
    events = []
    plain = Ops(lambda ip, p, op, fregs: events.append("cb"), name="plain")
    fntrace.ftrace_set_filter_ip(plain, m.target)
    fntrace.register_ftrace_function(plain)
    ops = ipmodify_ops(m.target, lambda x: x * 1000)
    fntrace.register_ftrace_function(ops)
    try:
        assert m.target(2) == 2000
        assert events == ["cb"]
    finally:
        fntrace.unregister_ftrace_function(ops)
        fntrace.unregister_ftrace_function(plain)


def test_ipmodify_survives_another_callback_calling_a_patched_function(m):
    """The IPMODIFY target chosen by a callback belongs to that call: another ops'
    callback on the same call (run after the IPMODIFY callback in the ops list) that
    calls some other patched function must not consume it."""
    other = direct_ops(m.caller, name="other-direct")
    register_ftrace_direct(other, tagger("C"))
    other_tramp = other.direct_call
    seen = []
    # Registered first, so it runs after the IPMODIFY ops (the list is newest first).
    plain = Ops(lambda ip, p, op, fregs: seen.append(m.caller(0)), name="plain")
    fntrace.ftrace_set_filter_ip(plain, m.target)
    fntrace.register_ftrace_function(plain)
    ops = ipmodify_ops(m.target, lambda x: "patched")
    fntrace.register_ftrace_function(ops)
    try:
        assert m.target(1) == "patched"
        assert seen and seen[0][0] == "C"
    finally:
        fntrace.unregister_ftrace_function(ops)
        fntrace.unregister_ftrace_function(plain)
        unregister_ftrace_direct(other, other_tramp)


def test_second_ipmodify_on_the_same_function_is_ebusy(m):
    first = ipmodify_ops(m.target, lambda x: "first", name="first")
    second = ipmodify_ops(m.target, lambda x: "second", name="second")
    fntrace.register_ftrace_function(first)
    try:
        with pytest.raises(BusyError) as ei:
            fntrace.register_ftrace_function(second)
        assert ei.value.errno == errno.EBUSY
        assert not second.flags & FTRACE_OPS_FL.ENABLED
        assert m.target(1) == "first"
    finally:
        fntrace.unregister_ftrace_function(first)
    assert m.target(1) == 2


def test_ipmodify_with_empty_filter_is_einval():
    ops = Ops(lambda *a: None, FTRACE_OPS_FL.IPMODIFY)
    with pytest.raises(FilterError) as ei:
        fntrace.register_ftrace_function(ops)
    assert ei.value.errno == errno.EINVAL
    assert not ops.flags & FTRACE_OPS_FL.ENABLED


def test_ipmodify_with_a_notrace_hash_is_einval(m):
    # Set on an IPMODIFY ops: refused at once.
    ops = ipmodify_ops(m.target, lambda x: 0)
    with pytest.raises(FilterError):
        fntrace.ftrace_set_notrace(ops, rec_name(m, "caller"))
    assert not ops.notrace_hash
    # An ops given a notrace hash before it became IPMODIFY: refused at register.
    ops2 = Ops(lambda *a: None)
    fntrace.ftrace_set_filter_ip(ops2, m.target)
    fntrace.ftrace_set_notrace(ops2, rec_name(m, "caller"))
    ops2.flags |= FTRACE_OPS_FL.IPMODIFY
    with pytest.raises(FilterError) as ei:
        fntrace.register_ftrace_function(ops2)
    assert ei.value.errno == errno.EINVAL
    assert not ops2.flags & FTRACE_OPS_FL.ENABLED
    assert m.target(1) == 2


def test_direct_on_ipmodify_function_without_ops_func_is_ebusy(m):
    ip = ipmodify_ops(m.target, lambda x: "klp")
    fntrace.register_ftrace_function(ip)
    d = direct_ops(m.target)
    tramp = tagger("T")
    try:
        with pytest.raises(BusyError) as ei:
            register_ftrace_direct(d, tramp)
        assert ei.value.errno == errno.EBUSY
        assert not d.flags & FTRACE_OPS_FL.ENABLED and d.direct_call is None
        assert m.target(1) == "klp"
        assert ftrace_find_rec_direct(m.target) is None
    finally:
        safe_unregister(d, tramp)
        fntrace.unregister_ftrace_function(ip)


def test_direct_on_ipmodify_function_refused_by_ops_func(m):
    ip = ipmodify_ops(m.target, lambda x: "klp")
    fntrace.register_ftrace_function(ip)
    d = direct_ops(m.target)
    cmds = []
    d.ops_func = lambda ops, cmd: cmds.append((ops, cmd)) or -errno.EBUSY
    tramp = tagger("T")
    try:
        with pytest.raises(BusyError):
            register_ftrace_direct(d, tramp)
        assert cmds == [(d, FTRACE_OPS_CMD.ENABLE_SHARE_IPMODIFY_SELF)]
        assert m.target(1) == "klp"
    finally:
        safe_unregister(d, tramp)
        fntrace.unregister_ftrace_function(ip)


def test_direct_on_ipmodify_function_accepted_gets_the_ipmodify_target(m):
    def new_target(x):
        return x + 500

    code = m.target.__code__
    ip = ipmodify_ops(m.target, new_target)
    fntrace.register_ftrace_function(ip)
    d = direct_ops(m.target)
    cmds = []
    d.ops_func = lambda ops, cmd: cmds.append(cmd) or 0
    got = []

    def tramp(original, x):
        got.append(original)
        return ("T", original(x))

    try:
        register_ftrace_direct(d, tramp)
        assert cmds == [FTRACE_OPS_CMD.ENABLE_SHARE_IPMODIFY_SELF]
        assert m.target(1) == ("T", 501)
        assert got == [new_target]
        line = func_line(fntrace.enabled_functions(), rec_name(m, "target"))
        assert line["count"] == 2 and line["I"] == " I" and line["D"] == " D"
        # The IPMODIFY ops leaves: the direct ops is told, and the trampoline gets the
        # function's own code again.
        fntrace.unregister_ftrace_function(ip)
        assert cmds[-1] == FTRACE_OPS_CMD.DISABLE_SHARE_IPMODIFY_PEER
        assert m.target(1) == ("T", 2)
        assert got[-1] is not new_target and got[-1].__code__ is code
    finally:
        safe_unregister(d, tramp)
        if ip.flags & FTRACE_OPS_FL.ENABLED:
            fntrace.unregister_ftrace_function(ip)
    assert m.target(1) == 2


def test_ipmodify_over_direct_asks_the_direct_ops(m):
    d = direct_ops(m.target)
    cmds = []
    d.ops_func = lambda ops, cmd: cmds.append((ops, cmd)) or 0
    tramp = tagger("T")
    register_ftrace_direct(d, tramp)
    assert cmds == []                 # no IPMODIFY ops on the function: nothing asked
    ip = ipmodify_ops(m.target, lambda x: "klp")
    try:
        fntrace.register_ftrace_function(ip)
        assert cmds == [(d, FTRACE_OPS_CMD.ENABLE_SHARE_IPMODIFY_PEER)]
        assert m.target(1) == ("T", "klp")
        fntrace.unregister_ftrace_function(ip)
        assert cmds == [(d, FTRACE_OPS_CMD.ENABLE_SHARE_IPMODIFY_PEER),
                        (d, FTRACE_OPS_CMD.DISABLE_SHARE_IPMODIFY_PEER)]
        assert m.target(1) == ("T", 2)
    finally:
        if ip.flags & FTRACE_OPS_FL.ENABLED:
            fntrace.unregister_ftrace_function(ip)
        unregister_ftrace_direct(d, tramp)
    assert m.target(1) == 2


def test_ipmodify_over_direct_without_ops_func_is_ebusy(m):
    d = direct_ops(m.target)
    tramp = tagger("T")
    register_ftrace_direct(d, tramp)
    ip = ipmodify_ops(m.target, lambda x: "klp")
    try:
        with pytest.raises(BusyError):
            fntrace.register_ftrace_function(ip)
        assert not ip.flags & FTRACE_OPS_FL.ENABLED
        assert m.target(1) == ("T", 2)
        # Refused by the direct ops' ops_func: also EBUSY.
        d.ops_func = lambda ops, cmd: -errno.EBUSY
        with pytest.raises(BusyError):
            fntrace.register_ftrace_function(ip)
        assert m.target(1) == ("T", 2)
        line = func_line(fntrace.enabled_functions(), rec_name(m, "target"))
        assert line["count"] == 1 and line["I"] == "  "
    finally:
        if ip.flags & FTRACE_OPS_FL.ENABLED:
            fntrace.unregister_ftrace_function(ip)
        unregister_ftrace_direct(d, tramp)


def test_set_instruction_pointer_wants_a_callable(m):
    errors = []

    def cb(ip, parent_ip, op, fregs):
        try:
            ftrace_regs_set_instruction_pointer(fregs, 123)
        except UsageError as exc:
            errors.append(exc)

    ops = Ops(cb, FTRACE_OPS_FL.IPMODIFY)
    fntrace.ftrace_set_filter_ip(ops, m.target)
    fntrace.register_ftrace_function(ops)
    try:
        assert m.target(1) == 2
        assert len(errors) == 1
    finally:
        fntrace.unregister_ftrace_function(ops)


# ---------------------------------------------------------------------------------
# enabled_functions / touched_functions
# ---------------------------------------------------------------------------------


def test_enabled_functions_flags_for_direct_and_ipmodify(m):
    tname, cname = rec_name(m, "target"), rec_name(m, "caller")
    d = direct_ops(m.target)
    tramp = tagger("Z")
    register_ftrace_direct(d, tramp)
    ip = ipmodify_ops(m.caller, lambda x: x)
    fntrace.register_ftrace_function(ip)
    try:
        lines = fntrace.enabled_functions()
        t = func_line(lines, tname)
        assert t["count"] == 1
        assert (t["R"], t["I"], t["D"], t["M"]) == ("  ", "  ", " D", " M ")
        assert t["rest"].endswith(f"\n\tdirect-->{__name__}.tramp_Z")
        c = func_line(lines, cname)
        assert (c["I"], c["D"], c["M"]) == (" I", "  ", " M ")
        assert "direct-->" not in c["rest"]
        # The tracefs file says the same.
        fs = fntrace.tracefs()
        text = fs.read("enabled_functions")
        assert f"\n\tdirect-->{__name__}.tramp_Z\n" in text
    finally:
        fntrace.unregister_ftrace_function(ip)
        unregister_ftrace_direct(d, tramp)
    lines = fntrace.enabled_functions()
    assert func_line(lines, tname) is None and func_line(lines, cname) is None
    touched = fntrace.touched_functions()
    for name in (tname, cname):
        t = func_line(touched, name)
        assert t["count"] == 0 and t["M"] == " M "
        assert t["D"] == "  " and t["I"] == "  "
        assert "direct-->" not in t["rest"]


def test_plain_tracing_never_marks_modified(m):
    ops = Ops(lambda *a: None)
    fntrace.ftrace_set_filter_ip(ops, m.caller)
    fntrace.register_ftrace_function(ops)
    fntrace.unregister_ftrace_function(ops)
    t = func_line(fntrace.touched_functions(), rec_name(m, "caller"))
    assert t["count"] == 0 and t["M"] == "   "
