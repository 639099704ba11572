"""The multi-user function graph API (kernel/trace/fgraph.c, include/linux/ftrace.h).

What fgraph.c promises a user of ``register_ftrace_graph``: at most 16 users at once
(-ENOSPC for the 17th, -EBUSY for one registered twice), each filtered by its own
``gops.ops`` and called only for its own functions; ``entryfunc`` returning false means
no ``retfunc`` for that call and drops what it reserved; ``fgraph_reserve_data`` (up to
32 words, once per entry, only in an entryfunc) and ``fgraph_retrieve_data`` /
``fgraph_retrieve_parent_data`` for the same call and its caller; per-task, per-user
task variables; a user that goes away while its frames are on the shadow stack is
skipped when they return; callbacks that raise are contained.  Then the shadow stack
itself: every way a Python frame can end (return, exception, yield, close, throw, await,
``return`` in ``finally``, deep recursion, other threads, tracing switched off and on
mid-call) leaves it empty.  Last, the manager ops (ftrace.c add_first_hash /
add_next_hash, selftest fgraph-multi-filter.tc): it enables the union of the users'
filters and skips only what every unfiltered user's notrace skips.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import sys
import textwrap
import threading

import pytest

import fntrace
from fntrace import _env, fgraph
from fntrace.errors import BusyError, FntraceError, NoSpaceError
from fntrace.fgraph import (
    FGRAPH_ARRAY_SIZE, FGRAPH_MAX_DATA_SIZE, FgraphOps, fgraph_get_task_var,
    fgraph_reserve_data, fgraph_retrieve_data, fgraph_retrieve_parent_data,
    register_ftrace_graph, shadow_stack, unregister_ftrace_graph,
)

from support import Recorder, run_python

# The exception object leaving a frame is known to sys.monitoring's PY_UNWIND; the
# setprofile back end only sees a 'return' of None.
HAS_EXC_OBJECT = _env.PYBEHAVIOR.has_monitoring and _env.BACKEND == "monitoring"


# Every test here ends with no graph user and no ops registered.
pytestmark = pytest.mark.usefixtures("fgraph_clean")


MOD = """
    hook = None

    def leaf(x):
        return x + 1

    def mid(x):
        return leaf(x) * 2

    def top():
        return mid(1) + leaf(2)

    def other():
        return 7

    def call_hook_between():
        a = leaf(1)
        hook()
        b = leaf(2)
        return a + b

    def call_hook_inside():
        hook()
        return leaf(0)
"""


@contextlib.contextmanager
def registered(*gops: FgraphOps):
    """Register every user given; on the way out unregister those still registered."""
    done = []
    try:
        for g in gops:
            register_ftrace_graph(g)
            done.append(g)
        yield gops
    finally:
        for g in done:
            if g.idx >= 0:
                unregister_ftrace_graph(g)


def balanced(log: list[tuple]) -> None:
    """Every return matches the innermost open entry (same function, same depth), and
    nothing is left open."""
    stack: list[tuple[str, int]] = []
    for ev in log:
        if ev[0] == "ent":
            stack.append((ev[1], ev[2]))
        else:
            assert stack, f"return without entry: {ev}\n{log}"
            assert stack.pop() == (ev[1], ev[2]), f"unbalanced at {ev}\n{log}"
    assert stack == [], f"entries left open: {stack}\n{log}"


def assert_stack_empty() -> None:
    assert shadow_stack().frames == []


# ---------------------------------------------------------------------------------
# Registration: 16 users, -ENOSPC, -EBUSY
# ---------------------------------------------------------------------------------

SIXTEEN = "\n".join(f"def f{i}():\n    return {i}\n" for i in range(FGRAPH_ARRAY_SIZE))


def test_array_size_is_sixteen():
    assert FGRAPH_ARRAY_SIZE == 16
    assert FGRAPH_MAX_DATA_SIZE == 256


def test_sixteen_users_each_called_only_for_its_own_functions(make_module):
    m = make_module(SIXTEEN)
    users = [Recorder(f"u{i}") for i in range(16)]
    for i, u in enumerate(users):
        fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.f{i}")
    with registered(*(u.gops for u in users)):
        assert sorted(u.gops.idx for u in users) == list(range(16))
        results = [getattr(m, f"f{i}")() for i in range(16)]
        results += [getattr(m, f"f{i}")() for i in reversed(range(16))]
        assert_stack_empty()
    assert results == list(range(16)) + list(reversed(range(16)))
    for i, u in enumerate(users):
        name = f"{m.__name__}.f{i}"
        assert u.log == [("ent", name, 0), ("ret", name, 0, i, False)] * 2, u.log
        assert u.gops.nerrors == 0
        assert u.gops.idx == -1


def test_seventeenth_user_is_refused_with_enospc_and_others_keep_working(make_module):
    m = make_module(SIXTEEN)
    users = [Recorder(f"u{i}") for i in range(16)]
    for i, u in enumerate(users):
        fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.f{i}")
    extra = Recorder("u16")
    fntrace.ftrace_set_filter(extra.gops.ops, f"{m.__name__}.*")
    with registered(*(u.gops for u in users)):
        with pytest.raises(NoSpaceError) as ei:
            register_ftrace_graph(extra.gops)
        assert ei.value.errno == errno.ENOSPC
        assert extra.gops.idx == -1
        for i in range(16):
            assert getattr(m, f"f{i}")() == i
        assert extra.log == []
        for i, u in enumerate(users):
            name = f"{m.__name__}.f{i}"
            assert u.log == [("ent", name, 0), ("ret", name, 0, i, False)]
        # A slot freed: the 17th fits now, and sees every function of its filter.
        unregister_ftrace_graph(users[3].gops)
        register_ftrace_graph(extra.gops)
        try:
            m.f3()
            m.f4()
        finally:
            unregister_ftrace_graph(extra.gops)
        assert extra.names("ret") == [f"{m.__name__}.f3", f"{m.__name__}.f4"]
        assert users[3].log == [("ent", f"{m.__name__}.f3", 0),
                                ("ret", f"{m.__name__}.f3", 0, 3, False)]
        assert_stack_empty()


def test_registering_twice_is_busy(make_module):
    m = make_module(MOD)
    u = Recorder()
    fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.leaf")
    with registered(u.gops):
        idx = u.gops.idx
        with pytest.raises(BusyError) as ei:
            register_ftrace_graph(u.gops)
        assert ei.value.errno == errno.EBUSY
        assert u.gops.idx == idx
        m.leaf(1)
        # Still registered exactly once: one entry, one return.
        assert u.log == [("ent", f"{m.__name__}.leaf", 0),
                         ("ret", f"{m.__name__}.leaf", 0, 2, False)]
    with pytest.raises(FntraceError):
        unregister_ftrace_graph(u.gops)


def test_plain_ops_registered_as_graph_user_is_busy(make_module):
    m = make_module(MOD)
    ops = fntrace.Ops(lambda *a: None)
    fntrace.ftrace_set_filter(ops, f"{m.__name__}.leaf")
    fntrace.register_ftrace_function(ops)
    try:
        gops = FgraphOps(lambda *a: True, None, ops=ops, name="shared")
        with pytest.raises(BusyError):
            register_ftrace_graph(gops)
        assert gops.idx == -1
    finally:
        fntrace.unregister_ftrace_function(ops)


def test_unregister_stops_callbacks(make_module):
    m = make_module(MOD)
    u = Recorder()
    fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.*")
    with registered(u.gops):
        m.top()
    n = len(u.log)
    assert n == 8
    m.top()
    assert len(u.log) == n


# ---------------------------------------------------------------------------------
# entryfunc's answer and reserved data
# ---------------------------------------------------------------------------------

def test_entry_returning_false_means_no_retfunc(make_module):
    m = make_module(MOD)
    u = Recorder(want=lambda t: not t.func.name.endswith(".mid"))
    fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.*")
    with registered(u.gops):
        assert m.top() == 7
        assert_stack_empty()
    n = m.__name__
    # mid refused: its frame is not kept, so leaf (called by mid) is one level up.
    assert u.log == [
        ("ent", f"{n}.top", 0),
        ("ent", f"{n}.mid", 1),
        ("ent", f"{n}.leaf", 1),
        ("ret", f"{n}.leaf", 1, 2, False),
        ("ent", f"{n}.leaf", 1),
        ("ret", f"{n}.leaf", 1, 3, False),
        ("ret", f"{n}.top", 0, 7, False),
    ]


def test_refused_entry_drops_its_reserved_data_single_user(make_module):
    m = make_module(MOD)
    seen = []

    def entry(trace, gops, fregs):
        name = trace.func.qualname
        data = fgraph_reserve_data(gops.idx, 8)
        data[:4] = name.encode().ljust(4, b"\0")[:4]
        if name == "leaf":
            seen.append(bytes(fgraph_retrieve_parent_data(gops.idx, 1) or b"").rstrip(b"\0"))
        return name != "mid"

    def ret(trace, gops, fregs):
        seen.append((trace.func.qualname, bytes(fgraph_retrieve_data(gops.idx)).rstrip(b"\0")))

    g = FgraphOps(entry, ret, name="dropper")
    fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.*")
    with registered(g):
        m.top()
    # leaf called by mid sees top's data as its parent's: mid's reservation went with
    # its refused entry.
    assert seen == [b"top", ("leaf", b"leaf"), b"top", ("leaf", b"leaf"), ("top", b"top")]
    assert g.nerrors == 0


def test_refused_entry_drops_its_reserved_data_with_other_users(make_module):
    m = make_module(MOD)
    got = {}

    def a_entry(trace, gops, fregs):
        fgraph_reserve_data(gops.idx, 16)[:4] = b"AAAA"
        return False                   # reserved, then refused

    a = FgraphOps(a_entry, None, name="refuser")

    def b_entry(trace, gops, fregs):
        fgraph_reserve_data(gops.idx, 8)[:4] = b"BBBB"
        return True

    def b_ret(trace, gops, fregs):
        got["a"] = fgraph_retrieve_data(a.idx)
        got["b"] = bytes(fgraph_retrieve_data(gops.idx))

    b = FgraphOps(b_entry, b_ret, name="keeper")
    for g in (a, b):
        fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.other")
    with registered(a, b):
        assert m.other() == 7
        assert_stack_empty()
    assert got == {"a": None, "b": b"BBBB\0\0\0\0"}
    assert a.nerrors == b.nerrors == 0


def test_reserve_data_limits(make_module):
    m = make_module(MOD)
    results = {}

    def entry(trace, gops, fregs):
        name = trace.func.qualname
        if name == "leaf":
            d = fgraph_reserve_data(gops.idx, FGRAPH_MAX_DATA_SIZE)
            results["256"] = (type(d), len(d))
            try:
                fgraph_reserve_data(gops.idx, 8)
            except BaseException as e:
                results["twice"] = e
        elif name == "mid":
            try:
                fgraph_reserve_data(gops.idx, FGRAPH_MAX_DATA_SIZE + 1)
            except BaseException as e:
                results["257"] = e
            # The refused size did not count as the one reservation of this entry.
            results["after257"] = len(fgraph_reserve_data(gops.idx, 1))
        return True

    def ret(trace, gops, fregs):
        if trace.func.qualname == "top":
            try:
                fgraph_reserve_data(gops.idx, 8)
            except BaseException as e:
                results["in_retfunc"] = e

    g = FgraphOps(entry, ret, name="reserver")
    fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.*")
    with registered(g):
        assert m.top() == 7
        with pytest.raises(FntraceError) as outside:
            fgraph_reserve_data(g.idx, 8)
        assert not isinstance(outside.value, (BusyError, NoSpaceError))
        assert outside.value.errno == errno.EINVAL
    assert results["256"] == (bytearray, 256)
    assert isinstance(results["twice"], BusyError)
    assert results["twice"].errno == errno.EBUSY
    assert isinstance(results["257"], NoSpaceError)
    assert results["257"].errno == errno.ENOSPC
    assert results["after257"] == 1
    assert isinstance(results["in_retfunc"], FntraceError)
    assert not isinstance(results["in_retfunc"], (BusyError, NoSpaceError))
    assert g.nerrors == 0


RECURSE = """
    def fact(n):
        if n <= 1:
            return 1
        return n * fact(n - 1)

    def deep(n):
        if n == 0:
            return 0
        return deep(n - 1) + 1
"""


def test_data_comes_back_for_the_same_call_at_every_recursion_level(make_module):
    m = make_module(RECURSE)
    out = []

    def entry(trace, gops, fregs):
        d = fgraph_reserve_data(gops.idx, 16)
        d[0] = trace.depth
        d[1] = fregs.get_argument(0)
        parent = fgraph_retrieve_parent_data(gops.idx, 1)
        out.append(("ent", trace.depth, None if parent is None else (parent[0], parent[1])))
        return True

    def ret(trace, gops, fregs):
        d = fgraph_retrieve_data(gops.idx)
        parent = fgraph_retrieve_parent_data(gops.idx, 1)
        out.append(("ret", trace.depth, (d[0], d[1]),
                    None if parent is None else (parent[0], parent[1])))

    g = FgraphOps(entry, ret, name="levels")
    fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.fact")
    with registered(g):
        assert m.fact(5) == 120
        assert_stack_empty()
    # fact(5) at depth 0 ... fact(1) at depth 4; each level sees its own data and its
    # caller's (depth 1 up); the outermost has no caller of its own.
    ents = [("ent", d, None if d == 0 else (d - 1, 5 - d + 1)) for d in range(5)]
    rets = [("ret", d, (d, 5 - d), None if d == 0 else (d - 1, 5 - d + 1))
            for d in reversed(range(5))]
    assert out == ents + rets


def test_parent_data_of_caller_in_another_function(make_module):
    m = make_module(MOD)
    out = []

    def entry(trace, gops, fregs):
        fgraph_reserve_data(gops.idx, 8)[:3] = trace.func.qualname.encode()[:3]
        return True

    def ret(trace, gops, fregs):
        mine = bytes(fgraph_retrieve_data(gops.idx)[:3])
        up = fgraph_retrieve_parent_data(gops.idx, 1)
        up2 = fgraph_retrieve_parent_data(gops.idx, 2)
        out.append((trace.func.qualname, mine, up and bytes(up[:3]), up2 and bytes(up2[:3])))

    g = FgraphOps(entry, ret, name="parents")
    fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.*")
    with registered(g):
        m.top()
    assert out == [("leaf", b"lea", b"mid", b"top"), ("mid", b"mid", b"top", None),
                   ("leaf", b"lea", b"top", None), ("top", b"top", None, None)]


def test_data_of_one_user_is_not_seen_by_another(make_module):
    m = make_module(MOD)
    seen = []

    def a_entry(trace, gops, fregs):
        fgraph_reserve_data(gops.idx, 8)[0] = 0xAA
        return True

    def b_ret(trace, gops, fregs):
        seen.append((fgraph_retrieve_data(gops.idx), bytes(fgraph_retrieve_data(a.idx)[:1])))

    a = FgraphOps(a_entry, None, name="a")
    b = FgraphOps(None, b_ret, name="b")
    b.entryfunc = lambda t, g, r: True
    for g in (a, b):
        fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.other")
    with registered(a, b):
        m.other()
    assert seen == [(None, b"\xaa")]


# ---------------------------------------------------------------------------------
# Task variables
# ---------------------------------------------------------------------------------

def test_task_vars_start_at_zero_per_thread_and_per_user(make_module):
    m = make_module(MOD)
    seen: dict[tuple[str, str], list[int]] = {}

    def counter(label):
        def entry(trace, gops, fregs):
            tv = fgraph_get_task_var(gops)
            seen.setdefault((label, threading.current_thread().name), []).append(tv.value)
            tv.value += 1 if label == "a" else 10
            return False
        return FgraphOps(entry, None, name=label)

    a, b = counter("a"), counter("b")
    for g in (a, b):
        fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.other")
    with registered(a, b):
        m.other()
        m.other()
        m.other()
        t = threading.Thread(target=lambda: (m.other(), m.other()), name="tv-thread")
        t.start()
        t.join()
        m.other()
        assert fgraph_get_task_var(a).value == 4
        assert fgraph_get_task_var(b).value == 40
    assert seen[("a", "MainThread")] == [0, 1, 2, 3]
    assert seen[("b", "MainThread")] == [0, 10, 20, 30]
    assert seen[("a", "tv-thread")] == [0, 1]
    assert seen[("b", "tv-thread")] == [0, 10]


def test_task_var_is_zeroed_when_the_user_registers_again(make_module):
    m = make_module(MOD)

    def entry(trace, gops, fregs):
        fgraph_get_task_var(gops).value += 1
        return False

    g = FgraphOps(entry, None, name="tv")
    fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.other")
    with registered(g):
        m.other()
        m.other()
        assert fgraph_get_task_var(g).value == 2
    with pytest.raises(FntraceError):
        fgraph_get_task_var(g)
    with registered(g):
        assert fgraph_get_task_var(g).value == 0


# ---------------------------------------------------------------------------------
# Users that go away while their frames are on the stack
# ---------------------------------------------------------------------------------

def test_user_unregistered_inside_a_traced_function_gets_no_retfunc(make_module):
    m = make_module(MOD)
    u = Recorder("leaving")
    stay = Recorder("staying")
    for r in (u, stay):
        fntrace.ftrace_set_filter(r.gops.ops, f"{m.__name__}.*")
    m.hook = lambda: unregister_ftrace_graph(u.gops)
    n = m.__name__
    with registered(u.gops, stay.gops):
        assert m.call_hook_between() == 5
        assert_stack_empty()
    assert u.log == [("ent", f"{n}.call_hook_between", 0), ("ent", f"{n}.leaf", 1),
                     ("ret", f"{n}.leaf", 1, 2, False)]
    assert stay.log == [("ent", f"{n}.call_hook_between", 0), ("ent", f"{n}.leaf", 1),
                        ("ret", f"{n}.leaf", 1, 2, False), ("ent", f"{n}.leaf", 1),
                        ("ret", f"{n}.leaf", 1, 3, False),
                        ("ret", f"{n}.call_hook_between", 0, 5, False)]


def test_last_user_unregistered_inside_a_traced_function(make_module):
    m = make_module(MOD)
    u = Recorder("only")
    fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.*")
    m.hook = lambda: unregister_ftrace_graph(u.gops)
    with registered(u.gops):
        assert m.call_hook_between() == 5
    n = m.__name__
    assert u.log == [("ent", f"{n}.call_hook_between", 0), ("ent", f"{n}.leaf", 1),
                     ("ret", f"{n}.leaf", 1, 2, False)]
    assert_stack_empty()


def test_user_registered_mid_call_gets_no_retfunc_for_older_frames(make_module):
    """A user registered while another's frames are on the stack never gets retfunc
    for calls whose entry it did not see, even if it takes the slot just freed (the
    kernel hands out indexes least recently used first: fgraph_lru_alloc_index)."""
    m = make_module(MOD)
    old = Recorder("old")
    keeper = Recorder("keeper")
    new = Recorder("new")
    fntrace.ftrace_set_filter(old.gops.ops, f"{m.__name__}.*")
    fntrace.ftrace_set_filter(keeper.gops.ops, f"{m.__name__}.other")
    fntrace.ftrace_set_filter(new.gops.ops, f"{m.__name__}.*")

    def swap():
        unregister_ftrace_graph(old.gops)
        register_ftrace_graph(new.gops)

    m.hook = swap
    n = m.__name__
    with registered(old.gops, keeper.gops):
        try:
            assert m.call_hook_inside() == 1
        finally:
            if new.gops.idx >= 0:
                unregister_ftrace_graph(new.gops)
        assert_stack_empty()
    assert old.log == [("ent", f"{n}.call_hook_inside", 0)]
    # new saw leaf's entry and return, and nothing of call_hook_inside.
    assert new.log == [("ent", f"{n}.leaf", 1), ("ret", f"{n}.leaf", 1, 1, False)]


def test_tracing_off_and_on_in_the_middle_of_a_call(make_module):
    m = make_module(MOD)
    u = Recorder("offon")
    fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.*")

    def off_on():
        unregister_ftrace_graph(u.gops)
        m.leaf(10)                    # not traced
        register_ftrace_graph(u.gops)

    m.hook = off_on
    n = m.__name__
    with registered(u.gops):
        assert m.call_hook_between() == 5
        assert_stack_empty()
        before = list(u.log)
        # Tracing works normally afterwards.
        u.log.clear()
        assert m.top() == 7
        balanced(u.log)
        assert len(u.log) == 8
        assert_stack_empty()
    pairs = [(e[0], e[1]) for e in before]
    # Off: nothing of leaf(10).  Back on: the second leaf's entry and return; the
    # caller entered before is not returned to a user that did not keep its frame
    # (whether the re-registered user is told of it is not specified here).
    assert pairs[:5] == [("ent", f"{n}.call_hook_between"), ("ent", f"{n}.leaf"),
                         ("ret", f"{n}.leaf"), ("ent", f"{n}.leaf"), ("ret", f"{n}.leaf")]
    assert [e[3] for e in before if e[0] == "ret" and e[1] == f"{n}.leaf"] == [2, 3]
    assert pairs[5:] in ([], [("ret", f"{n}.call_hook_between")])


# ---------------------------------------------------------------------------------
# Callbacks that raise
# ---------------------------------------------------------------------------------

def test_raising_callbacks_are_contained(make_module, capfd):
    m = make_module(MOD)

    def entry(trace, gops, fregs):
        if trace.func.qualname == "leaf":
            raise RuntimeError("entry boom")
        return True

    def ret(trace, gops, fregs):
        if trace.func.qualname == "mid":
            raise KeyError("ret boom")

    g = FgraphOps(entry, ret, name="raiser")
    fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.*")
    with registered(g):
        results = [m.top() for _ in range(3)]
        assert_stack_empty()
    assert results == [7, 7, 7]
    # Per top(): two leaf entries raise, mid's return raises.
    assert g.nerrors == 9
    err = capfd.readouterr().err
    assert err.count("raiser") == 1           # reported once, then only counted


def test_raising_callback_of_one_user_does_not_disturb_another(make_module, capfd):
    m = make_module(MOD)

    def bad_entry(trace, gops, fregs):
        raise ValueError("nope")

    bad = FgraphOps(bad_entry, None, name="bad")
    good = Recorder("good")
    for g in (bad, good.gops):
        fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.*")
    with registered(bad, good.gops):
        assert m.top() == 7
        assert_stack_empty()
    assert bad.nerrors == 4
    balanced(good.log)
    assert len(good.log) == 8
    capfd.readouterr()


def test_callback_raising_systemexit_is_contained(make_module, capfd):
    m = make_module(MOD)

    def ret(trace, gops, fregs):
        raise SystemExit(3)

    g = FgraphOps(lambda t, gops, r: True, ret, name="exiter")
    fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.other")
    with registered(g):
        assert m.other() == 7
    assert g.nerrors == 1
    capfd.readouterr()


# ---------------------------------------------------------------------------------
# What retfunc is told
# ---------------------------------------------------------------------------------

def test_retfunc_trace_fields(make_module):
    m = make_module(MOD)
    u = Recorder("fields")
    fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.*")
    with registered(u.gops):
        assert m.top() == 7
    n = m.__name__
    assert u.log == [
        ("ent", f"{n}.top", 0), ("ent", f"{n}.mid", 1), ("ent", f"{n}.leaf", 2),
        ("ret", f"{n}.leaf", 2, 2, False), ("ret", f"{n}.mid", 1, 4, False),
        ("ent", f"{n}.leaf", 1), ("ret", f"{n}.leaf", 1, 3, False),
        ("ret", f"{n}.top", 0, 7, False),
    ]
    leaf_rec = fntrace.record_table.lookup(m.leaf)
    assert u.rets[0].func is leaf_rec
    for t in u.rets:
        assert t.calltime <= t.rettime
        assert t.overrun == 0
    # Nested calls lie inside their caller's time.
    top, mid, leaf = u.rets[3], u.rets[1], u.rets[0]
    assert top.calltime <= mid.calltime <= leaf.calltime <= leaf.rettime <= mid.rettime <= top.rettime


def test_retfunc_fregs_has_return_value(make_module):
    m = make_module(MOD)
    vals = []

    def ret(trace, gops, fregs):
        vals.append((fregs.has_retval, fregs.get_return_value(), fregs.get_argument(0)))

    g = FgraphOps(lambda t, gops, r: True, ret, name="fregs")
    fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.leaf")
    with registered(g):
        m.leaf(41)
    assert vals == [(True, 42, 41)]


EXC = """
    class Boom(Exception):
        pass

    def inner():
        raise Boom("deep")

    def middle():
        return inner() + 1

    def upper():
        try:
            return middle()
        except Boom:
            return -1

    def outermost():
        return upper() * 2

    def leaky():
        return middle()
"""


def test_exception_exit_sets_unwind(make_module):
    m = make_module(EXC)
    u = Recorder("exc")
    fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.*")
    with registered(u.gops):
        assert m.outermost() == -2
        assert_stack_empty()
    n = m.__name__
    got = [(e[0], e[1], e[2]) + ((e[4],) if e[0] == "ret" else ()) for e in u.log]
    assert got == [
        ("ent", f"{n}.outermost", 0), ("ent", f"{n}.upper", 1), ("ent", f"{n}.middle", 2),
        ("ent", f"{n}.inner", 3), ("ret", f"{n}.inner", 3, True),
        ("ret", f"{n}.middle", 2, True), ("ret", f"{n}.upper", 1, False),
        ("ret", f"{n}.outermost", 0, False),
    ]
    assert u.rets[2].retval == -1 and u.rets[3].retval == -2
    if HAS_EXC_OBJECT:
        exc0, exc1 = u.rets[0].retval, u.rets[1].retval
        assert isinstance(exc0, m.Boom) and exc0.args == ("deep",)
        assert exc1 is exc0


def test_exception_escaping_every_traced_frame(make_module):
    m = make_module(EXC)
    u = Recorder("escape")
    fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.*")
    with registered(u.gops):
        with pytest.raises(m.Boom):
            m.leaky()
        assert_stack_empty()
        # The stack is usable afterwards.
        assert m.outermost() == -2
        assert_stack_empty()
    balanced(u.log)
    rets = [e for e in u.log if e[0] == "ret"][:3]
    assert [(e[1].rsplit(".", 1)[1], e[4]) for e in rets] == [
        ("inner", True), ("middle", True), ("leaky", True)]


# ---------------------------------------------------------------------------------
# The shadow stack stays balanced
# ---------------------------------------------------------------------------------

GEN = """
    import asyncio

    def gen(n):
        for i in range(n):
            yield i

    def guarded(n):
        try:
            for i in range(n):
                yield i
        finally:
            pass

    def consume(n):
        total = 0
        for v in gen(n):
            total += v
        return total

    def close_early():
        g = guarded(5)
        first = next(g)
        g.close()
        return first

    def throw_into():
        g = gen(5)
        next(g)
        try:
            g.throw(KeyError("k"))
        except KeyError:
            return "caught"
        return "not caught"

    def throw_caught():
        g = catcher()
        next(g)
        v = g.throw(KeyError("k"))
        g.close()
        return v

    def catcher():
        while True:
            try:
                yield 1
            except KeyError:
                yield "handled"

    def delegate():
        yield from gen(2)
        return "done"

    def run_delegate():
        return list(delegate())

    async def step(x):
        await asyncio.sleep(0)
        return x

    async def amain():
        a = await step(1)
        b = await step(2)
        return a + b

    def finally_return():
        try:
            return raiser()
        finally:
            return 5

    def finally_override():
        try:
            return 1
        finally:
            return 2

    def raiser():
        raise ValueError("x")
"""


def _pairs(u: Recorder):
    return [(e[0], e[1].rsplit(".", 1)[1]) for e in u.log]


@pytest.fixture
def genmod(make_module):
    return make_module(GEN, hint="fggen")


@pytest.fixture
def genrec(genmod):
    u = Recorder("gen")
    fntrace.ftrace_set_filter(u.gops.ops, f"{genmod.__name__}.*")
    register_ftrace_graph(u.gops)
    try:
        yield u
    finally:
        if u.gops.idx >= 0:
            unregister_ftrace_graph(u.gops)


def test_generator_resumes_are_calls(genmod, genrec):
    assert genmod.consume(3) == 3
    assert_stack_empty()
    u = genrec
    balanced(u.log)
    assert _pairs(u) == [("ent", "consume")] + [("ent", "gen"), ("ret", "gen")] * 4 + [
        ("ret", "consume")]
    gen_rets = [(e[2], e[3], e[4]) for e in u.log if e[0] == "ret" and e[1].endswith(".gen")]
    assert gen_rets == [(1, 0, False), (1, 1, False), (1, 2, False), (1, None, False)]


def test_generator_closed_early(genmod, genrec):
    assert genmod.close_early() == 0
    assert_stack_empty()
    balanced(genrec.log)
    assert _pairs(genrec) == [("ent", "close_early"), ("ent", "guarded"), ("ret", "guarded"),
                              ("ent", "guarded"), ("ret", "guarded"), ("ret", "close_early")]
    closing = genrec.rets[1]
    assert closing.unwind is True
    if HAS_EXC_OBJECT:
        assert isinstance(closing.retval, GeneratorExit)


def test_generator_dropped_without_close(genmod, genrec):
    g = genmod.guarded(5)
    assert next(g) == 0
    del g                      # finalised: close() runs the finally block
    assert_stack_empty()
    balanced(genrec.log)


def test_generator_throw_not_caught(genmod, genrec):
    assert genmod.throw_into() == "caught"
    assert_stack_empty()
    balanced(genrec.log)
    assert _pairs(genrec) == [("ent", "throw_into"), ("ent", "gen"), ("ret", "gen"),
                              ("ent", "gen"), ("ret", "gen"), ("ret", "throw_into")]
    thrown = genrec.rets[1]
    # The generator ends by the exception thrown into it: an unwind, on every back end.
    assert thrown.unwind is True, (thrown.retval, thrown.unwind)
    if HAS_EXC_OBJECT:
        assert isinstance(thrown.retval, KeyError)


def test_generator_throw_caught_inside(genmod, genrec):
    assert genmod.throw_caught() == "handled"
    assert_stack_empty()
    balanced(genrec.log)
    cat = [e for e in genrec.log if e[1].endswith(".catcher")]
    # start..yield 1, throw..yield "handled", close..GeneratorExit
    rets = [(e[3], e[4]) for e in cat if e[0] == "ret"]
    assert rets[:2] == [(1, False), ("handled", False)]
    assert len(rets) == 3 and rets[2][1] is True


def test_yield_from(genmod, genrec):
    assert genmod.run_delegate() == [0, 1]
    assert_stack_empty()
    balanced(genrec.log)
    assert _pairs(genrec) == (
        [("ent", "run_delegate")]
        + [("ent", "delegate"), ("ent", "gen"), ("ret", "gen"), ("ret", "delegate")] * 3
        + [("ret", "run_delegate")])
    assert genrec.rets[-2].retval == "done"


def test_async_functions(genmod, genrec):
    assert asyncio.run(genmod.amain()) == 3
    assert_stack_empty()
    balanced(genrec.log)
    assert _pairs(genrec) == [
        ("ent", "amain"), ("ent", "step"), ("ret", "step"), ("ret", "amain"),
        ("ent", "amain"), ("ent", "step"), ("ret", "step"), ("ent", "step"),
        ("ret", "step"), ("ret", "amain"),
        ("ent", "amain"), ("ent", "step"), ("ret", "step"), ("ret", "amain"),
    ]
    last = genrec.rets[-1]
    assert (last.retval, last.unwind) == (3, False)


def test_async_task_cancelled(genmod, genrec):
    async def go():
        t = asyncio.ensure_future(genmod.amain())
        await asyncio.sleep(0)
        t.cancel()
        try:
            await t
        except asyncio.CancelledError:
            return "cancelled"
        return "finished"

    assert asyncio.run(go()) in ("cancelled", "finished")
    assert_stack_empty()
    balanced(genrec.log)


def test_return_inside_finally(genmod, genrec):
    assert genmod.finally_return() == 5
    assert genmod.finally_override() == 2
    assert_stack_empty()
    balanced(genrec.log)
    got = [(e[1].rsplit(".", 1)[1], e[3] if not e[4] else "unwind", e[4])
           for e in genrec.log if e[0] == "ret"]
    assert got == [("raiser", "unwind", True), ("finally_return", 5, False),
                   ("finally_override", 2, False)]


def test_recursion_fifty_deep(make_module):
    m = make_module(RECURSE)
    u = Recorder("deep")
    fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.deep")
    with registered(u.gops):
        assert m.deep(49) == 49
        assert_stack_empty()
    balanced(u.log)
    assert [e[2] for e in u.log if e[0] == "ent"] == list(range(50))
    assert [(e[2], e[3]) for e in u.log if e[0] == "ret"] == [(d, 49 - d) for d in reversed(range(50))]


def test_shadow_stack_overrun(make_module):
    """Calls deeper than the shadow stack are not pushed: counted as overruns
    (trace.overrun), no entry or return for them, and the stack still ends empty."""
    m = make_module(RECURSE)
    u = Recorder("overrun")
    fntrace.ftrace_set_filter(u.gops.ops, f"{m.__name__}.deep")
    limit = fgraph.SHADOW_STACK_MAX_DEPTH
    extra = 20
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 4 * (limit + extra)))
    try:
        before = shadow_stack().overrun
        with registered(u.gops):
            assert m.deep(limit + extra - 1) == limit + extra - 1
            assert_stack_empty()
    finally:
        sys.setrecursionlimit(old)
    assert shadow_stack().overrun - before == extra
    balanced(u.log)
    assert [e[2] for e in u.log if e[0] == "ent"] == list(range(limit))
    assert all(t.overrun - before == extra for t in u.rets)
    # The deepest traced call returns what its (untraced) callees computed.
    assert u.rets[0].depth == limit - 1 and u.rets[0].retval == extra


def test_thread_started_mid_trace(make_module):
    m = make_module(MOD)
    logs: dict[str, list] = {}
    leftover = {}

    def entry(trace, gops, fregs):
        logs.setdefault(threading.current_thread().name, []).append(
            ("ent", trace.func.name, trace.depth))
        return True

    def ret(trace, gops, fregs):
        logs.setdefault(threading.current_thread().name, []).append(
            ("ret", trace.func.name, trace.depth))

    g = FgraphOps(entry, ret, name="threads")
    fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.*")

    def body():
        m.top()
        leftover["frames"] = list(shadow_stack().frames)

    with registered(g):
        m.leaf(0)
        t = threading.Thread(target=body, name="late")
        t.start()
        m.top()
        t.join()
        assert_stack_empty()
    assert leftover["frames"] == []
    assert set(logs) == {"MainThread", "late"}
    for name, log in logs.items():
        stack = []
        for ev in log:
            if ev[0] == "ent":
                stack.append(ev[1:])
            else:
                assert stack.pop() == ev[1:], (name, log)
        assert stack == []
    assert len(logs["late"]) == 8
    assert len(logs["MainThread"]) == 10


def test_shadow_stack_is_per_thread(make_module):
    m = make_module(MOD)
    inside = {}
    g = FgraphOps(lambda t, gops, r: True, None, name="perthread")
    fntrace.ftrace_set_filter(g.ops, f"{m.__name__}.call_hook_inside")

    def in_main():
        # While main is inside a traced call, another thread sees an empty stack.
        def other():
            inside["other"] = len(shadow_stack().frames)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        inside["main"] = len(shadow_stack().frames)

    m.hook = in_main
    with registered(g):
        m.call_hook_inside()
        assert_stack_empty()
    assert inside == {"other": 0, "main": 1}


# ---------------------------------------------------------------------------------
# The manager ops: union of filters, intersection of notrace
# ---------------------------------------------------------------------------------

MANAGED = """
    def a1():
        return 1

    def a2():
        return 2

    def b1():
        return 3

    def x1():
        return 4

    def y1():
        return 5

    def c1():
        return 6
"""


def enabled_in(mod) -> set[str]:
    prefix = mod.__name__ + "."
    out = set()
    for line in fntrace.enabled_functions():
        name = line.split(" (", 1)[0]
        if name.startswith(prefix):
            out.add(name[len(prefix):])
    return out


def ents_in(rec: Recorder, mod) -> list[str]:
    """The entries a user saw in ``mod`` (an unfiltered user sees everything else too)."""
    prefix = mod.__name__ + "."
    return [n[len(prefix):] for n in rec.names("ent") if n.startswith(prefix)]


def call_all(mod) -> None:
    for n in ("a1", "a2", "b1", "x1", "y1", "c1"):
        getattr(mod, n)()


def test_manager_filter_is_the_union(make_module):
    m = make_module(MANAGED)
    a, b = Recorder("a"), Recorder("b")
    fntrace.ftrace_set_filter(a.gops.ops, f"{m.__name__}.a*")
    fntrace.ftrace_set_filter(b.gops.ops, f"{m.__name__}.b*")
    assert enabled_in(m) == set()
    with registered(a.gops):
        assert enabled_in(m) == {"a1", "a2"}
        with registered(b.gops):
            assert enabled_in(m) == {"a1", "a2", "b1"}
            call_all(m)
        assert enabled_in(m) == {"a1", "a2"}
    assert enabled_in(m) == set()
    assert ents_in(a, m) == ["a1", "a2"]
    assert ents_in(b, m) == ["b1"]


UNFILTERED_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import fntrace
from fntrace.fgraph import FgraphOps, register_ftrace_graph
m = __import__(sys.argv[2])
n = m.__name__
logs = {"a": [], "b": [], "c": []}

def user(label):
    def entry(trace, gops, fregs):
        if trace.func.module == n:
            logs[label].append(trace.func.qualname)
        return False
    return FgraphOps(entry, None, name=label)

def enabled_in():
    out = set()
    for line in fntrace.enabled_functions():
        name = line.split(" (", 1)[0]
        if name.startswith(n + "."):
            out.add(name[len(n) + 1:])
    return sorted(out)

def call_all():
    for f in ("a1", "a2", "b1", "x1", "y1", "c1"):
        getattr(m, f)()

a, b, c = user("a"), user("b"), user("c")
fntrace.ftrace_set_notrace(a.ops, n + ".x*")
fntrace.ftrace_set_notrace(b.ops, n + ".x*")
fntrace.ftrace_set_notrace(b.ops, n + ".y*", reset=False)
fntrace.ftrace_set_filter(c.ops, n + ".x1")
out = {}
register_ftrace_graph(a)
register_ftrace_graph(b)
out["two_unfiltered"] = enabled_in()
call_all()
out["logs_ab"] = {k: list(v) for k, v in logs.items()}
for v in logs.values():
    v.clear()
register_ftrace_graph(c)
out["with_filtered"] = enabled_in()
call_all()
out["logs_abc"] = {k: list(v) for k, v in logs.items()}
sys.stdout.write(json.dumps(out) + "\\n")
sys.stdout.flush()
"""


def test_manager_notrace_is_the_intersection_of_unfiltered_users(tmp_path):
    """fgraph-multi-filter.tc's last part: with every filter empty, a function is left
    out only if every user's notrace excludes it; a filtered user's functions stay in.

    Unfiltered users patch every function in the process, so this runs in a small
    process of its own.
    """
    name = "fgmanaged_unfiltered"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MANAGED))
    r = run_python("-c", textwrap.dedent(UNFILTERED_SCRIPT), tmp_path, name)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # a skips x*, b skips x* and y*: only x1 is skipped by both.
    assert out["two_unfiltered"] == ["a1", "a2", "b1", "c1", "y1"]
    assert out["logs_ab"] == {"a": ["a1", "a2", "b1", "y1", "c1"],
                              "b": ["a1", "a2", "b1", "c1"], "c": []}
    # c traces x1: the manager must patch it although a and b skip it.
    assert out["with_filtered"] == ["a1", "a2", "b1", "c1", "x1", "y1"]
    assert out["logs_abc"] == {"a": ["a1", "a2", "b1", "y1", "c1"],
                               "b": ["a1", "a2", "b1", "c1"], "c": ["x1"]}


def test_changing_a_registered_users_filter_updates_the_manager(make_module):
    m = make_module(MANAGED)
    n = m.__name__
    a, b = Recorder("a"), Recorder("b")
    fntrace.ftrace_set_filter(a.gops.ops, f"{n}.a*")
    fntrace.ftrace_set_filter(b.gops.ops, f"{n}.c1")
    with registered(a.gops, b.gops):
        assert enabled_in(m) == {"a1", "a2", "c1"}
        fntrace.ftrace_set_filter(a.gops.ops, f"{n}.b*")
        assert enabled_in(m) == {"b1", "c1"}
        call_all(m)
        fntrace.ftrace_set_filter(a.gops.ops, f"{n}.y1", reset=False)
        assert enabled_in(m) == {"b1", "y1", "c1"}
        fntrace.ftrace_set_notrace(a.gops.ops, f"{n}.b1")
        assert enabled_in(m) == {"y1", "c1"}
    assert ents_in(a, m) == ["b1"]
    assert ents_in(b, m) == ["c1"]
    assert enabled_in(m) == set()


def test_manager_single_user_filter_change(make_module):
    m = make_module(MANAGED)
    n = m.__name__
    a = Recorder("solo")
    fntrace.ftrace_set_filter(a.gops.ops, f"{n}.a1")
    with registered(a.gops):
        assert enabled_in(m) == {"a1"}
        fntrace.ftrace_set_filter(a.gops.ops, f"{n}.c1")
        assert enabled_in(m) == {"c1"}
        call_all(m)
    assert ents_in(a, m) == ["c1"]


def test_manager_counts_return_after_off_and_on(make_module):
    """fgraph-multi-filter.tc: turning users off and on gives the same enabled set."""
    m = make_module(MANAGED)
    n = m.__name__
    a, b = Recorder("a"), Recorder("b")
    fntrace.ftrace_set_filter(a.gops.ops, f"{n}.*")
    fntrace.ftrace_set_notrace(a.gops.ops, f"{n}.x*")
    fntrace.ftrace_set_filter(b.gops.ops, f"{n}.x* {n}.y*")
    with registered(a.gops, b.gops):
        first = enabled_in(m)
    assert first == {"a1", "a2", "b1", "x1", "y1", "c1"}
    with registered(b.gops):
        assert enabled_in(m) == {"x1", "y1"}
    with registered(a.gops, b.gops):
        assert enabled_in(m) == first
    with registered(b.gops, a.gops):
        assert enabled_in(m) == first
    assert enabled_in(m) == set()


def test_return_and_yield_offsets_are_dis_s():
    """The 3.11 back end finds where a frame stops (returns, yields, the RESUME after a
    yield) by reading co_code directly; dis.get_instructions is the reference, over
    every function of a few large stdlib modules (EXTENDED_ARG, generators, coroutines)."""
    import dis
    import importlib.util
    import types
    from fntrace.core import dispatch

    codes = {}

    def walk(code):
        codes[id(code)] = code
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                walk(c)

    for name in ("asyncio.tasks", "asyncio.base_events", "email.message", "argparse",
                 "contextlib", "inspect", "typing", "pydoc"):
        walk(importlib.util.find_spec(name).loader.get_code(name))
    big = compile("def f(x):\n" + "".join(f"    y{i} = x + {i}\n" for i in range(300))
                  + "    return y0\n", "<big>", "exec").co_consts[0]
    codes[id(big)] = big                # more than 256 names: EXTENDED_ARG before a store
    assert len(codes) > 1000
    for code in codes.values():
        ins = list(dis.get_instructions(code))
        want_ret = {i.offset for i in ins if i.opname in ("RETURN_VALUE", "RETURN_CONST",
                                                          "YIELD_VALUE")
                    or (i.opname == "RESUME" and i.arg)}
        want_yield = {i.offset for i in ins if i.opname == "YIELD_VALUE"}
        assert dispatch._return_offsets(code) == want_ret, code
        assert dispatch._yield_offsets(code) == want_yield, code
