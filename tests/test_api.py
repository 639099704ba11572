"""The in-kernel function-tracing API, ported to Python (Documentation/trace/ftrace-uses.rst,
include/linux/ftrace.h, kernel/trace/ftrace.c).

Covers what ftrace-uses.rst promises a user of ``register_ftrace_function``:
the callback's arguments (ip, parent_ip, ops, fregs), filter and notrace hashes
(notrace wins, an empty filter means every function, reset vs append, -EINVAL on a
pattern that matches nothing with the old filter kept), the registration checks of
``__register_ftrace_function`` (-EBUSY, IPMODIFY/DIRECT need a filter, PERMANENT vs
ftrace_enabled), ``ftrace_set_filter_ip(s)`` (-EINVAL, -ENOENT), filters changed while
registered, "after unregister returns the callback is never called again", recursion
and error containment, ``ftrace_regs`` vs ``pt_regs`` (``ftrace_get_regs``), and the
CALL_OPS bookkeeping shown by ``enabled_functions`` / ``touched_functions``
(ftrace.c t_show).
"""
from __future__ import annotations

import asyncio
import errno
import importlib
import re
import sys
import textwrap
import threading
import time

import pytest

import fntrace
from fntrace import (
    FTRACE_OPS_FL, BusyError, FilterError, FntraceError, FtraceRegs, NotFoundError, Ops,
    enabled_functions, ftrace_free_filter, ftrace_get_regs, ftrace_set_filter,
    ftrace_set_filter_ip, ftrace_set_filter_ips, ftrace_set_notrace, register_ftrace_function,
    set_ftrace_enabled, touched_functions, unregister_ftrace_function,
)

from support import run_python

MOD_SRC = """
    def foo(x, y=2, *rest, k=3, **kw):
        return bar(x) + 1

    def bar(x):
        return x * 2

    def baz():
        return 0

    class Widget:
        def method(self, v):
            return v

        @staticmethod
        def static(v):
            return v

        @classmethod
        def klass(cls, v):
            return v

        @property
        def prop(self):
            return 5

    def outer():
        def inner():
            return 1
        f = lambda: 2
        return inner() + f()

    def gen(n):
        for i in range(n):
            yield i

    async def coro(n):
        import asyncio
        for _ in range(n):
            await asyncio.sleep(0)
        return n

    def spin():
        return 1
"""


class Recorder:
    """A callback that remembers (function, caller) names of every call it gets."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.args: list[tuple] = []

    def __call__(self, ip, parent_ip, ops, fregs) -> None:
        self.calls.append((ip.name, parent_ip.name))
        self.args.append((ip, parent_ip, ops, fregs))

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


@pytest.fixture
def mod(write_module):
    return write_module(MOD_SRC)


def make_ops(flags: int = 0, name: str = "testops") -> tuple[Ops, Recorder]:
    rec = Recorder()
    return Ops(rec, flags, name=name), rec


def filter_names(ops: Ops) -> set[str]:
    return {r.name for r in ops.filter_hash}


def notrace_names(ops: Ops) -> set[str]:
    return {r.name for r in ops.notrace_hash}


# ---------------------------------------------------------------------------------
# The callback
# ---------------------------------------------------------------------------------

def test_callback_gets_function_and_caller_records(mod):
    m = mod.__name__
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{m}.bar")
    register_ftrace_function(ops)
    assert mod.foo(1) == 3
    unregister_ftrace_function(ops)

    assert rec.calls == [(f"{m}.bar", f"{m}.foo")]
    ip, parent_ip, op, fregs = rec.args[0]
    assert isinstance(ip, fntrace.DynFtrace)
    assert (ip.module, ip.qualname) == (m, "bar")
    assert parent_ip.qualname == "foo"
    assert op is ops
    assert isinstance(fregs, FtraceRegs)


def test_private_is_passed_back_through_ops(mod):
    seen = []
    ops = Ops(lambda ip, parent, op, fregs: seen.append(op.private), private={"k": 1})
    ftrace_set_filter(ops, f"{mod.__name__}.baz")
    register_ftrace_function(ops)
    mod.baz()
    unregister_ftrace_function(ops)
    assert seen == [{"k": 1}]


def test_caller_of_a_test_function_is_named_module_qualname(mod):
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{mod.__name__}.baz")
    register_ftrace_function(ops)
    mod.baz()
    unregister_ftrace_function(ops)
    assert rec.calls == [(f"{mod.__name__}.baz",
                          f"{__name__}.test_caller_of_a_test_function_is_named_module_qualname")]


# ---------------------------------------------------------------------------------
# Filter and notrace hashes
# ---------------------------------------------------------------------------------

def test_filter_selects_only_matching_functions(mod):
    m = mod.__name__
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{m}.foo")
    register_ftrace_function(ops)
    mod.foo(1)
    mod.baz()
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{m}.foo"]


def test_notrace_wins_over_filter(mod):
    m = mod.__name__
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{m}.*")
    ftrace_set_notrace(ops, f"{m}.bar")
    register_ftrace_function(ops)
    mod.foo(1)
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{m}.foo"]


def run_snippet(code: str, cwd) -> str:
    """Run ``code`` in a fresh interpreter (cwd on sys.path); return its stdout.

    Tests that trace *every* function run there: a fresh process has a few thousand
    functions, the test process many more."""
    r = run_python("-c", "import sys; sys.path.insert(0, '.')\n" + textwrap.dedent(code),
                   cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_empty_filter_traces_every_function_except_notrace(tmp_path):
    (tmp_path / "allmod.py").write_text(textwrap.dedent(MOD_SRC))
    out = run_snippet("""
        import fntrace, allmod
        seen = []
        ops = fntrace.Ops(lambda ip, parent, op, fregs: seen.append(ip.name))
        fntrace.ftrace_set_notrace(ops, "allmod.bar")
        fntrace.register_ftrace_function(ops)
        allmod.foo(1)
        allmod.baz()
        fntrace.unregister_ftrace_function(ops)
        print("allmod.foo" in seen, "allmod.baz" in seen, "allmod.bar" in seen)
    """, tmp_path)
    assert out.split() == ["True", "True", "False"]


def test_empty_filter_traces_every_function_in_a_fresh_process(tmp_path):
    # "If @buf is NULL and reset is set, all functions will be enabled for tracing":
    # an ops registered with no filter at all traces functions of modules that were
    # imported before it, also when it is the first thing fntrace is asked to do.
    out = run_snippet("""
        import json
        import fntrace
        seen = set()
        ops = fntrace.Ops(lambda ip, parent, op, fregs: seen.add(ip.name))
        fntrace.register_ftrace_function(ops)
        json.dumps([1])
        fntrace.unregister_ftrace_function(ops)
        print("json.dumps" in seen)
    """, tmp_path)
    assert out.strip() == "True"


def test_empty_filter_ops_traces_modules_imported_later(tmp_path):
    (tmp_path / "latermod.py").write_text("def late():\n    return 1\n")
    out = run_snippet("""
        import fntrace
        seen = []
        ops = fntrace.Ops(lambda ip, parent, op, fregs: seen.append((ip.name, parent.name)))
        fntrace.register_ftrace_function(ops)
        import latermod
        latermod.late()
        fntrace.unregister_ftrace_function(ops)
        print(("latermod.late", "__main__.<module>") in seen)
    """, tmp_path)
    assert out.strip() == "True"


def test_filter_reset_replaces_and_append_adds(mod):
    m = mod.__name__
    ops, _ = make_ops()
    ftrace_set_filter(ops, f"{m}.foo")
    assert filter_names(ops) == {f"{m}.foo"}
    ftrace_set_filter(ops, f"{m}.bar", reset=False)
    assert filter_names(ops) == {f"{m}.foo", f"{m}.bar"}
    ftrace_set_filter(ops, f"{m}.baz", reset=True)
    assert filter_names(ops) == {f"{m}.baz"}
    ftrace_set_filter(ops, f"!{m}.baz {m}.foo", reset=False)
    assert filter_names(ops) == {f"{m}.foo"}
    ftrace_set_filter(ops, None, reset=True)
    assert filter_names(ops) == set()


def test_notrace_reset_replaces_and_append_adds(mod):
    m = mod.__name__
    ops, _ = make_ops()
    ftrace_set_notrace(ops, f"{m}.foo")
    ftrace_set_notrace(ops, f"{m}.bar", reset=False)
    assert notrace_names(ops) == {f"{m}.foo", f"{m}.bar"}
    ftrace_set_notrace(ops, f"{m}.baz")
    assert notrace_names(ops) == {f"{m}.baz"}


@pytest.mark.parametrize("reset", [True, False])
def test_pattern_matching_nothing_is_einval_and_changes_nothing(mod, reset):
    m = mod.__name__
    ops, _ = make_ops()
    ftrace_set_filter(ops, f"{m}.foo")
    with pytest.raises(FilterError) as ei:
        ftrace_set_filter(ops, f"{m}.bar {m}.no_such_function*", reset=reset)
    assert ei.value.errno == errno.EINVAL
    assert filter_names(ops) == {f"{m}.foo"}

    ftrace_set_notrace(ops, f"{m}.baz")
    with pytest.raises(FilterError) as ei:
        ftrace_set_notrace(ops, f"{m}.bar {m}.no_such_function", reset=reset)
    assert ei.value.errno == errno.EINVAL
    assert notrace_names(ops) == {f"{m}.baz"}


def test_einval_on_registered_ops_keeps_tracing_the_old_filter(mod):
    m = mod.__name__
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{m}.baz")
    register_ftrace_function(ops)
    with pytest.raises(FilterError):
        ftrace_set_filter(ops, f"{m}.no_such_function")
    mod.baz()
    mod.foo(1)
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{m}.baz"]


def test_filters_changed_while_registered_apply_immediately(mod):
    m = mod.__name__
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{m}.baz")
    register_ftrace_function(ops)
    mod.baz()
    mod.Widget().method(1)
    ftrace_set_filter(ops, f"{m}.Widget.method")             # reset: baz out
    mod.baz()
    mod.Widget().method(2)
    ftrace_set_filter(ops, f"{m}.baz", reset=False)          # append: both
    mod.baz()
    mod.Widget().method(3)
    ftrace_set_notrace(ops, f"{m}.baz")                      # notrace wins at once
    mod.baz()
    mod.Widget().method(4)
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{m}.baz",
                           f"{m}.Widget.method",
                           f"{m}.baz", f"{m}.Widget.method",
                           f"{m}.Widget.method"]


def test_free_filter_drops_both_hashes(mod):
    m = mod.__name__
    ops, _ = make_ops()
    ftrace_set_filter(ops, f"{m}.foo")
    ftrace_set_notrace(ops, f"{m}.bar")
    ftrace_free_filter(ops)
    assert filter_names(ops) == set() and notrace_names(ops) == set()


def test_free_filter_leaves_a_registered_ops_alone(mod):
    m = mod.__name__
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{m}.baz")
    register_ftrace_function(ops)
    ftrace_free_filter(ops)
    assert filter_names(ops) == {f"{m}.baz"}
    mod.foo(1)
    mod.baz()
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{m}.baz"]


# ---------------------------------------------------------------------------------
# ftrace_set_filter_ip(s)
# ---------------------------------------------------------------------------------

def test_set_filter_ip_by_function_objects(mod):
    m = mod.__name__
    ops, rec = make_ops()
    ftrace_set_filter_ip(ops, mod.baz)
    ftrace_set_filter_ips(ops, [mod.Widget.method, mod.Widget.static])
    assert filter_names(ops) == {f"{m}.baz", f"{m}.Widget.method", f"{m}.Widget.static"}
    ftrace_set_filter_ip(ops, mod.Widget.static, remove=True)
    register_ftrace_function(ops)
    mod.baz()
    mod.Widget().method(1)
    mod.Widget.static(1)
    mod.foo(1)
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{m}.baz", f"{m}.Widget.method"]


def test_set_filter_ip_reset_replaces(mod):
    m = mod.__name__
    ops, _ = make_ops()
    ftrace_set_filter_ip(ops, mod.baz)
    ftrace_set_filter_ip(ops, mod.bar, reset=True)
    assert filter_names(ops) == {f"{m}.bar"}


def test_set_filter_ip_of_a_builtin_is_einval(mod):
    ops, _ = make_ops()
    ftrace_set_filter_ip(ops, mod.baz)
    with pytest.raises(FilterError) as ei:
        ftrace_set_filter_ip(ops, len)
    assert ei.value.errno == errno.EINVAL
    assert filter_names(ops) == {f"{mod.__name__}.baz"}


def test_set_filter_ip_remove_of_absent_is_enoent(mod):
    ops, _ = make_ops()
    ftrace_set_filter_ip(ops, mod.baz)
    with pytest.raises(NotFoundError) as ei:
        ftrace_set_filter_ip(ops, mod.bar, remove=True)
    assert ei.value.errno == errno.ENOENT
    assert filter_names(ops) == {f"{mod.__name__}.baz"}


# ---------------------------------------------------------------------------------
# Registration checks (__register_ftrace_function)
# ---------------------------------------------------------------------------------

def test_double_register_is_ebusy(mod):
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{mod.__name__}.baz")
    register_ftrace_function(ops)
    with pytest.raises(BusyError) as ei:
        register_ftrace_function(ops)
    assert ei.value.errno == errno.EBUSY
    mod.baz()
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{mod.__name__}.baz"]       # still registered exactly once


def test_unregister_of_unregistered_ops_is_an_error(mod):
    ops, _ = make_ops()
    with pytest.raises(FntraceError):
        unregister_ftrace_function(ops)
    ftrace_set_filter(ops, f"{mod.__name__}.baz")
    register_ftrace_function(ops)
    unregister_ftrace_function(ops)
    with pytest.raises(FntraceError):
        unregister_ftrace_function(ops)


def test_enabled_flag_follows_registration(mod):
    ops, _ = make_ops()
    ftrace_set_filter(ops, f"{mod.__name__}.baz")
    assert not ops.flags & FTRACE_OPS_FL.ENABLED
    register_ftrace_function(ops)
    assert ops.flags & FTRACE_OPS_FL.ENABLED
    unregister_ftrace_function(ops)
    assert not ops.flags & FTRACE_OPS_FL.ENABLED


@pytest.mark.parametrize("flag", [FTRACE_OPS_FL.IPMODIFY, FTRACE_OPS_FL.DIRECT])
def test_ipmodify_and_direct_need_a_filter(mod, flag):
    ops, _ = make_ops(flag)
    with pytest.raises(FilterError) as ei:
        register_ftrace_function(ops)
    assert ei.value.errno == errno.EINVAL
    assert not ops.enabled
    assert enabled_functions() == []


def test_ipmodify_refuses_a_notrace_hash(mod):
    ops, _ = make_ops(FTRACE_OPS_FL.IPMODIFY)
    with pytest.raises(FilterError):
        ftrace_set_notrace(ops, f"{mod.__name__}.bar")
    assert notrace_names(ops) == set()


def test_two_ipmodify_ops_on_one_function_is_ebusy(mod):
    m = mod.__name__
    first, _ = make_ops(FTRACE_OPS_FL.IPMODIFY, "first")
    ftrace_set_filter(first, f"{m}.foo")
    register_ftrace_function(first)
    second, _ = make_ops(FTRACE_OPS_FL.IPMODIFY, "second")
    with pytest.raises(BusyError) as ei:
        ftrace_set_filter(second, f"{m}.foo")
        register_ftrace_function(second)
    assert ei.value.errno == errno.EBUSY
    assert not second.enabled
    # Another function is free; and once the owner is gone, foo is too.
    third, _ = make_ops(FTRACE_OPS_FL.IPMODIFY, "third")
    ftrace_set_filter(third, f"{m}.bar")
    register_ftrace_function(third)
    unregister_ftrace_function(first)
    ftrace_set_filter(second, f"{m}.foo")
    register_ftrace_function(second)
    assert second.enabled


def test_permanent_ops_blocks_disabling_ftrace(mod):
    ops, _ = make_ops(FTRACE_OPS_FL.PERMANENT)
    ftrace_set_filter(ops, f"{mod.__name__}.baz")
    register_ftrace_function(ops)
    with pytest.raises(BusyError) as ei:
        set_ftrace_enabled(False)
    assert ei.value.errno == errno.EBUSY
    assert fntrace.ftrace_enabled()
    unregister_ftrace_function(ops)

    set_ftrace_enabled(False)
    try:
        with pytest.raises(BusyError):
            register_ftrace_function(ops)
        assert not ops.enabled
    finally:
        set_ftrace_enabled(True)
    register_ftrace_function(ops)
    unregister_ftrace_function(ops)


def test_ftrace_enabled_off_silences_ordinary_ops(mod):
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{mod.__name__}.baz")
    register_ftrace_function(ops)
    set_ftrace_enabled(False)
    try:
        mod.baz()
    finally:
        set_ftrace_enabled(True)
    mod.baz()
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{mod.__name__}.baz"]


# ---------------------------------------------------------------------------------
# Unregister, recursion, errors
# ---------------------------------------------------------------------------------

def test_callback_never_called_after_unregister(mod):
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{mod.__name__}.baz")
    register_ftrace_function(ops)
    mod.baz()
    unregister_ftrace_function(ops)
    for _ in range(10):
        mod.baz()
    assert len(rec.calls) == 1


def test_callback_never_called_after_unregister_with_a_busy_thread(mod):
    calls = []
    first_call = threading.Event()
    stop = threading.Event()
    loops = [0]
    errors = []

    def cb(ip, parent_ip, ops, fregs):
        calls.append(ip.name)
        first_call.set()

    def worker():
        try:
            while not stop.is_set():
                mod.spin()
                loops[0] += 1
        except BaseException as e:           # pragma: no cover - reported below
            errors.append(e)

    ops = Ops(cb, name="spinops")
    ftrace_set_filter(ops, f"{mod.__name__}.spin")
    register_ftrace_function(ops)
    # Started after register: the setprofile back end only sees threads started
    # after its hook is installed.
    t = threading.Thread(target=worker, name="spinner")
    t.start()
    try:
        assert first_call.wait(60), "the worker's calls were never traced"
        unregister_ftrace_function(ops)
        after = len(calls)
        start = loops[0]
        deadline = time.monotonic() + 60
        while loops[0] < start + 2000 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert loops[0] >= start + 2000, "worker made no progress"
    finally:
        stop.set()
        t.join()
    assert not errors
    assert len(calls) == after


def test_callback_calling_a_traced_function_does_not_recurse(mod):
    calls = []

    def cb(ip, parent_ip, ops, fregs):
        calls.append(ip.name)
        mod.bar(1)                       # itself traced by this ops

    ops = Ops(cb, name="recursive")
    ftrace_set_filter(ops, f"{mod.__name__}.bar")
    register_ftrace_function(ops)
    assert mod.bar(3) == 6
    unregister_ftrace_function(ops)
    assert calls == [f"{mod.__name__}.bar"]


def test_raising_callback_is_contained(mod, capfd):
    def cb(ip, parent_ip, ops, fregs):
        raise RuntimeError("boom")

    ops = Ops(cb, name="raiser")
    ftrace_set_filter(ops, f"{mod.__name__}.bar")
    capfd.readouterr()
    register_ftrace_function(ops)
    results = [mod.foo(2), mod.foo(3), mod.bar(4)]
    unregister_ftrace_function(ops)
    assert results == [5, 7, 8]
    assert ops.nerrors == 3
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "raiser" in lines[0] and "RuntimeError" in lines[0]


def test_callback_raising_systemexit_does_not_end_the_program(mod, capfd):
    def cb(ip, parent_ip, ops, fregs):
        sys.exit(5)

    ops = Ops(cb, name="exiter")
    ftrace_set_filter(ops, f"{mod.__name__}.baz")
    register_ftrace_function(ops)
    assert mod.baz() == 0
    unregister_ftrace_function(ops)
    assert ops.nerrors == 1


def test_update_path_itself_is_not_traced(mod):
    # The tracer's own code is `notrace`: registering and unregistering an ops must
    # not make its callback fire for calls fntrace makes while patching sites (here
    # the enum flag arithmetic of the update path).
    seen = []
    ops = Ops(lambda ip, parent, op, fregs: seen.append((ip.name, parent.name)), name="enumops")
    ftrace_set_filter(ops, "enum.*")
    register_ftrace_function(ops)
    unregister_ftrace_function(ops)
    assert seen == [], f"{len(seen)} calls, first: {seen[:3]}"


# ---------------------------------------------------------------------------------
# What kinds of functions are traced
# ---------------------------------------------------------------------------------

def test_methods_static_class_methods_and_properties(mod):
    m = mod.__name__
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{m}.Widget.*")
    register_ftrace_function(ops)
    w = mod.Widget()
    w.method(1)
    mod.Widget.static(2)
    mod.Widget.klass(3)
    assert w.prop == 5
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{m}.Widget.method", f"{m}.Widget.static",
                           f"{m}.Widget.klass", f"{m}.Widget.prop"]


def test_nested_functions_and_lambdas(mod):
    m = mod.__name__
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{m}.outer*")
    register_ftrace_function(ops)
    assert mod.outer() == 3
    unregister_ftrace_function(ops)
    assert rec.calls == [(f"{m}.outer", f"{__name__}.test_nested_functions_and_lambdas"),
                         (f"{m}.outer.<locals>.inner", f"{m}.outer"),
                         (f"{m}.outer.<locals>.<lambda>", f"{m}.outer")]


def test_generator_is_one_call_per_run_not_per_resume(mod):
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{mod.__name__}.gen")
    register_ftrace_function(ops)
    assert list(mod.gen(5)) == [0, 1, 2, 3, 4]
    g = mod.gen(3)
    next(g)
    next(g)
    next(g)
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{mod.__name__}.gen"] * 2


def test_async_function_is_one_call_per_run(mod):
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{mod.__name__}.coro")
    register_ftrace_function(ops)
    assert asyncio.run(mod.coro(4)) == 4
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{mod.__name__}.coro"]


def test_module_imported_after_register_with_keep_unmatched(write_module):
    name = write_module("def late(a, b):\n    return a + b\n", hint="latemod", import_it=False)
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"{name}.*", keep_unmatched=True)
    register_ftrace_function(ops)
    late = importlib.import_module(name)
    assert late.late(1, 2) == 3
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{name}.late"]


def test_module_imported_after_register_with_mod_command(write_module):
    src = """
        def late(a, b):
            return helper(a) + b

        def helper(a):
            return a
    """
    name = write_module(src, hint="modcmd", import_it=False)
    ops, rec = make_ops()
    ftrace_set_filter(ops, f"*:mod:{name}")         # cached: the module is not loaded
    register_ftrace_function(ops)
    late = importlib.import_module(name)
    late.late(1, 2)
    unregister_ftrace_function(ops)
    assert rec.calls[0][0] == f"{name}.late"
    assert rec.calls[1] == (f"{name}.helper", f"{name}.late")
    assert len(rec.calls) == 2


def test_plain_pattern_for_a_module_not_imported_is_einval(write_module):
    name = write_module("def late():\n    return 1\n", hint="notyet", import_it=False)
    ops, _ = make_ops()
    with pytest.raises(FilterError):
        ftrace_set_filter(ops, f"{name}.*")


# ---------------------------------------------------------------------------------
# ftrace_regs
# ---------------------------------------------------------------------------------

def _capture_regs(flags: int, mod, call):
    out = {}

    def cb(ip, parent_ip, ops, fregs):
        out["args"] = list(fregs.args)
        out["arg0"] = fregs.get_argument(0)
        out["arg1"] = fregs.get_argument(1)
        out["x"] = fregs["x"]
        out["y"] = fregs["y"]
        out["idx"] = fregs[0]
        out["has_args"] = fntrace.ftrace_regs_has_args(fregs)
        out["ip"] = fntrace.ftrace_regs_get_instruction_pointer(fregs)
        try:
            fregs["no_such_parameter"]
        except KeyError:
            out["keyerror"] = True
        try:
            fregs.get_argument(99)
        except IndexError:
            out["indexerror"] = True
        regs = ftrace_get_regs(fregs)
        out["regs"] = regs
        if regs is not None:
            out["regs_code"] = regs.f_code.co_name
            out["regs_x"] = regs.f_locals["x"]

    ops = Ops(cb, flags, name="regs")
    ftrace_set_filter(ops, f"{mod.__name__}.foo")
    register_ftrace_function(ops)
    call()
    unregister_ftrace_function(ops)
    return out


def test_fregs_gives_arguments_by_index_and_name(mod):
    out = _capture_regs(0, mod, lambda: mod.foo(5, 6, 7, 8, k=9, z=1))
    args = dict(out["args"])
    assert args == {"x": 5, "y": 6, "k": 9, "rest": (7, 8), "kw": {"z": 1}}
    assert (out["arg0"], out["arg1"], out["x"], out["y"], out["idx"]) == (5, 6, 5, 6, 5)
    assert out["keyerror"] and out["indexerror"]
    assert out["has_args"]
    assert out["ip"].name == f"{mod.__name__}.foo"


def test_fregs_defaults_are_visible(mod):
    out = _capture_regs(0, mod, lambda: mod.foo(5))
    assert dict(out["args"]) == {"x": 5, "y": 2, "k": 3, "rest": (), "kw": {}}


def test_get_regs_is_none_without_save_regs(mod):
    out = _capture_regs(0, mod, lambda: mod.foo(5))
    assert out["regs"] is None


@pytest.mark.parametrize("flag", [FTRACE_OPS_FL.SAVE_REGS, FTRACE_OPS_FL.SAVE_REGS_IF_SUPPORTED])
def test_get_regs_is_the_frame_with_save_regs(mod, flag):
    out = _capture_regs(flag, mod, lambda: mod.foo(7))
    assert out["regs"] is not None
    assert out["regs_code"] == "foo"
    assert out["regs_x"] == 7


# ---------------------------------------------------------------------------------
# CALL_OPS, the list func, enabled_functions / touched_functions
# ---------------------------------------------------------------------------------

_T_SHOW = re.compile(r"^(?P<name>\S+) \((?P<count>\d+)\)(?P<R>  | R)(?P<I>  | I)(?P<D>  | D)"
                     r"(?P<O>  | O)(?P<M>   | M )(?P<rest>.*)$")


def site_line(lines: list[str], name: str) -> re.Match:
    found = [m for m in map(_T_SHOW.match, lines) if m and m.group("name") == name]
    assert len(found) == 1, f"{name} in {lines!r}"
    return found[0]


def test_enabled_functions_single_ops_site_uses_call_ops(mod):
    m = mod.__name__
    ops, _ = make_ops(name="solo")
    ftrace_set_filter(ops, f"{m}.foo")
    register_ftrace_function(ops)
    lines = enabled_functions()
    unregister_ftrace_function(ops)
    s = site_line(lines, f"{m}.foo")
    assert s.group("count") == "1"
    assert s.group("O") == " O"
    assert s.group("R") == "  "
    assert s.group("rest").startswith("\tops: solo ")
    assert not any(line.startswith(f"{m}.bar ") for line in lines)


def test_enabled_functions_shared_site_has_count_and_no_call_ops(mod):
    m = mod.__name__
    a, _ = make_ops(name="opsA")
    b, _ = make_ops(name="opsB")
    ftrace_set_filter(a, f"{m}.foo {m}.bar")
    ftrace_set_filter(b, f"{m}.foo")
    register_ftrace_function(a)
    register_ftrace_function(b)
    lines = enabled_functions()
    shared = site_line(lines, f"{m}.foo")
    alone = site_line(lines, f"{m}.bar")
    assert shared.group("count") == "2"
    assert shared.group("O") == "  "
    assert "ops:" not in shared.group("rest")
    assert alone.group("count") == "1" and alone.group("O") == " O"
    assert "ops: opsA " in alone.group("rest")

    unregister_ftrace_function(a)
    lines = enabled_functions()
    now_alone = site_line(lines, f"{m}.foo")
    assert now_alone.group("count") == "1" and now_alone.group("O") == " O"
    assert "ops: opsB " in now_alone.group("rest")
    assert not any(line.startswith(f"{m}.bar ") for line in lines)


def test_enabled_functions_shows_save_regs(mod):
    m = mod.__name__
    ops, _ = make_ops(FTRACE_OPS_FL.SAVE_REGS, name="withregs")
    ftrace_set_filter(ops, f"{m}.baz")
    register_ftrace_function(ops)
    s = site_line(enabled_functions(), f"{m}.baz")
    assert s.group("R") == " R"


def test_enabled_functions_shows_ipmodify_and_touched_shows_modified(mod):
    m = mod.__name__
    ops, _ = make_ops(FTRACE_OPS_FL.IPMODIFY, name="patcher")
    ftrace_set_filter(ops, f"{m}.baz")
    register_ftrace_function(ops)
    s = site_line(enabled_functions(), f"{m}.baz")
    assert s.group("I") == " I"
    unregister_ftrace_function(ops)
    t = site_line(touched_functions(), f"{m}.baz")
    assert t.group("count") == "0"
    assert t.group("M") == " M "


def test_touched_functions_keeps_sites_after_unregister(mod):
    m = mod.__name__
    ops, _ = make_ops()
    ftrace_set_filter(ops, f"{m}.foo {m}.bar")
    register_ftrace_function(ops)
    unregister_ftrace_function(ops)
    assert not any(line.startswith(f"{m}.") for line in enabled_functions())
    touched = touched_functions()
    for fn in ("foo", "bar"):
        s = site_line(touched, f"{m}.{fn}")
        assert s.group("count") == "0"
        assert s.group("O") == "  "
    assert not any(line.startswith(f"{m}.baz ") for line in touched)


@pytest.mark.parametrize("call_ops", [True, False], ids=["call_ops", "list_func"])
def test_several_ops_each_called_once_for_matching_functions(mod, call_ops):
    m = mod.__name__
    fntrace.ftrace_config.call_ops = call_ops     # restored by the clean_ftrace fixture
    a, ra = make_ops(name="A")
    b, rb = make_ops(name="B")
    c, rc = make_ops(name="C")
    ftrace_set_filter(a, f"{m}.foo {m}.bar")
    ftrace_set_filter(b, f"{m}.bar")
    ftrace_set_filter(c, f"{m}.baz")
    for o in (a, b, c):
        register_ftrace_function(o)
    mod.foo(1)          # foo -> bar
    mod.baz()
    for o in (a, b, c):
        unregister_ftrace_function(o)
    assert ra.calls == [(f"{m}.foo", f"{__name__}.{test_several_ops_each_called_once_for_matching_functions.__name__}"),
                        (f"{m}.bar", f"{m}.foo")]
    assert rb.calls == [(f"{m}.bar", f"{m}.foo")]
    assert rc.names() == [f"{m}.baz"]


@pytest.mark.parametrize("call_ops", [True, False], ids=["call_ops", "list_func"])
def test_single_ops_same_callbacks_with_or_without_call_ops(mod, call_ops):
    m = mod.__name__
    fntrace.ftrace_config.call_ops = call_ops
    ops, rec = make_ops(name="single")
    ftrace_set_filter(ops, f"{m}.foo {m}.bar {m}.Widget.*")
    register_ftrace_function(ops)
    mod.foo(1)
    mod.Widget().method(1)
    mod.baz()
    lines = enabled_functions()
    unregister_ftrace_function(ops)
    assert rec.names() == [f"{m}.foo", f"{m}.bar", f"{m}.Widget.method"]
    expected_o = " O" if call_ops else "  "
    assert site_line(lines, f"{m}.foo").group("O") == expected_o


# -- the discovery trap (sys.monitoring): functions listed as they first run ------------

def test_code_turned_away_by_the_discovery_trap_is_traced_once_selected():
    # A filter waiting for a module that is not imported keeps the discovery trap on;
    # h's module is outside what the filter can select, so h's first start is turned
    # away (DISABLE on 3.12+).  Selected later, it must be reported: CPython keeps a
    # DISABLEd location off until the events are restarted.
    ns = {"__name__": "fntrace_test_dynamic"}
    exec("def h():\n    return 3\n", ns)
    h = ns["h"]
    waiting, chosen = [], []
    ops_wait = fntrace.Ops(lambda ip, parent, op, fregs: waiting.append(ip.name))
    fntrace.ftrace_set_filter(ops_wait, "*:mod:fntrace_test_never_imported")
    fntrace.register_ftrace_function(ops_wait)
    try:
        assert h() == 3
        ops_h = fntrace.Ops(lambda ip, parent, op, fregs: chosen.append(ip.name))
        fntrace.ftrace_set_filter_ip(ops_h, h)
        fntrace.register_ftrace_function(ops_h)
        try:
            assert h() == 3
            assert chosen == ["fntrace_test_dynamic.h"]
            assert waiting == []
        finally:
            fntrace.unregister_ftrace_function(ops_h)
    finally:
        fntrace.unregister_ftrace_function(ops_wait)


def test_functions_made_by_exec_are_traced_with_everything():
    # Code run with exec in a namespace of its own is a module as far as tracing goes:
    # an ops on every function sees its functions from their first call.
    ns = {"__name__": "fntrace_test_exec_everything"}
    exec("def h():\n    return 4\n", ns)
    seen = []
    ops_all = fntrace.Ops(lambda ip, parent, op, fregs: seen.append(ip.name))
    fntrace.register_ftrace_function(ops_all)
    try:
        assert ns["h"]() == 4
    finally:
        fntrace.unregister_ftrace_function(ops_all)
    assert "fntrace_test_exec_everything.h" in seen


def test_modules_loaded_before_fntrace_are_traced_when_first_called(tmp_script, run_fntrace):
    # posixpath is imported by the interpreter at start-up, before fntrace is: with the
    # function tracer on everything, its functions are found when they first run.
    prog = tmp_script("""
        import posixpath

        def main():
            return posixpath.join("a", "b")

        print(main())
    """)
    r = run_fntrace("record", "-p", "function", "-o", "t.dat", prog)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "a/b\n"
    rep = run_fntrace("report", "t.dat")
    assert re.search(r"posixpath\.join <-__main__\.main$", rep.stdout, re.M), rep.stdout[-2000:]
