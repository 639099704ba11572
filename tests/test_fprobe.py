"""The fprobe API (include/linux/fprobe.h, kernel/trace/fprobe.c, Documentation/trace/fprobe.rst).

What fprobe.c promises its users, checked through the Python API:

- both handlers get ``(fp, entry_ip, ret_ip, fregs, entry_data)``: the traced function's
  record, the caller's record, the arguments (and on exit the return value), and the
  same per-call ``entry_data`` object in the entry and the exit handler of one call
  (each recursion level its own); ``entry_data_size`` is rounded up to words and limited
  to 15 words (-E2BIG);
- an entry handler returning true cancels that call's exit handler, without counting
  ``nmissed``;
- fprobes without an exit handler run on ``fprobe_ftrace_ops`` and cost no shadow-stack
  frame; every fprobe with an exit handler shares the one fgraph user ``fprobe_graph_ops``;
- after ``unregister_fprobe`` returns neither handler runs again, even for calls that were
  in flight (unregistered from inside the call, or from another thread);
- ``disable_fprobe`` is soft (the hooks stay), ``register_fprobe`` takes a glob and a
  notfilter, ``register_fprobe_syms`` needs every name (-ENOENT), registering twice and
  unregistering an unregistered fprobe fail (-EINVAL);
- ``nmissed`` counts calls that found no room on the shadow stack;
- a handler that raises is contained; generators and coroutines are seen too.
"""
from __future__ import annotations

import asyncio
import errno
import sys
import threading

import pytest

import fntrace
from fntrace import fgraph
from fntrace.core import ops as core_ops
from fntrace.core.records import record_table
from fntrace.core.regs import ftrace_regs_get_argument, ftrace_regs_get_return_value
from fntrace.errors import FntraceError, NoSpaceError, NotFoundError
from fntrace.fprobe import (
    FPROBE_FL_DISABLED, MAX_FPROBE_DATA_SIZE, Fprobe, disable_fprobe, enable_fprobe,
    fprobe_count_ips_from_filter, fprobe_graph_ops, fprobe_is_registered, register_fprobe,
    register_fprobe_ips, register_fprobe_syms, unregister_fprobe,
)

MOD = """
    import asyncio

    hook = None

    def work(a, b=2):
        if hook is not None:
            hook()
        return a * b

    def caller(a=3):
        x = a
        return work(x)

    def rec(n):
        if n:
            rec(n - 1)
        return n

    def deep(n):
        if n:
            return deep(n - 1)
        return 0

    def fa_one():
        return 1

    def fa_two():
        return 2

    def fb():
        return 3

    def comp():
        return [work(i) for i in range(2)]

    def sleeper(go, started):
        started.set()
        go.wait()
        return "woke"

    def gen(n):
        for i in range(n):
            yield i

    async def coro(x):
        await asyncio.sleep(0)
        return x + 1
"""

_made: list[Fprobe] = []


def make_fp(*args, **kwargs) -> Fprobe:
    """An Fprobe the cleanup fixture unregisters if a test left it registered."""
    fp = Fprobe(*args, **kwargs)
    _made.append(fp)
    return fp


@pytest.fixture(autouse=True)
def _fprobe_clean():
    yield
    try:
        for fp in _made:
            if fprobe_is_registered(fp):
                try:
                    unregister_fprobe(fp)
                except Exception:
                    pass
        _made.clear()
    finally:
        core_ops.reset_for_tests()


@pytest.fixture
def m(write_module):
    mod = write_module(MOD, hint="fpmod")
    yield mod
    mod.hook = None


class Log:
    """Handlers that record what they were given."""

    def __init__(self, ret=None):
        self.calls: list[tuple] = []
        self.ret = ret

    def entry(self, fp, ip, ret_ip, fregs, data):
        self.calls.append(("entry", fp, ip, ret_ip, fregs.args, data))
        return self.ret(fregs) if callable(self.ret) else self.ret

    def exit(self, fp, ip, ret_ip, fregs, data):
        self.calls.append(("exit", fp, ip, ret_ip, ftrace_regs_get_return_value(fregs), data))

    def kinds(self) -> list[str]:
        return [c[0] for c in self.calls]


def rec_of(func):
    r = record_table.lookup(func)
    assert r is not None
    return r


def enabled_names() -> list[str]:
    return [line.split(" ", 1)[0] for line in fntrace.enabled_functions()]


def enabled_line(name: str) -> str:
    lines = [line for line in fntrace.enabled_functions() if line.split(" ", 1)[0] == name]
    assert len(lines) == 1, fntrace.enabled_functions()
    return lines[0]


def graph_users() -> int:
    return sum(1 for g in fgraph.fgraph_array if g is not fgraph.fgraph_stub)


# ---------------------------------------------------------------------------------
# Handler arguments and entry data
# ---------------------------------------------------------------------------------

def test_handlers_get_entry_ip_caller_ret_ip_fregs_and_the_same_entry_data(m):
    log = Log()
    fp = make_fp(log.entry, log.exit, 16)
    register_fprobe_ips(fp, [m.work])
    try:
        assert m.caller(5) == 10
    finally:
        unregister_fprobe(fp)
    assert log.kinds() == ["entry", "exit"]
    (_, efp, eip, eret, eargs, edata), (_, xfp, xip, xret, retval, xdata) = log.calls
    assert efp is fp and xfp is fp
    assert eip is rec_of(m.work) and xip is rec_of(m.work)
    assert eret is rec_of(m.caller) and xret is rec_of(m.caller)
    assert eargs == [("a", 5), ("b", 2)]
    assert retval == 10
    assert isinstance(edata, bytearray) and len(edata) == 16
    assert xdata is edata


def test_entry_data_written_at_entry_is_read_at_exit(m):
    seen = []

    def entry(fp, ip, ret_ip, fregs, data):
        data[0] = ftrace_regs_get_argument(fregs, 0)

    def exit_(fp, ip, ret_ip, fregs, data):
        seen.append((data[0], ftrace_regs_get_return_value(fregs)))

    fp = make_fp(entry, exit_, 3)
    register_fprobe_ips(fp, [m.work])
    try:
        m.work(7)
        m.work(9, 3)
    finally:
        unregister_fprobe(fp)
    assert seen == [(7, 14), (9, 27)]
    # rounded up to whole words (fprobe_init: ALIGN(entry_data_size, sizeof(long)))
    assert fp.entry_data_size == 8


def test_no_entry_data_without_a_size(m):
    log = Log()
    fp = make_fp(log.entry, log.exit)
    register_fprobe_ips(fp, [m.work])
    try:
        m.work(1)
    finally:
        unregister_fprobe(fp)
    assert [c[5] for c in log.calls] == [None, None]


def test_each_recursion_level_has_its_own_entry_data(m):
    seen = []

    def entry(fp, ip, ret_ip, fregs, data):
        data[0] = fregs.arg("n")
        seen.append(("entry", data[0], id(data)))

    def exit_(fp, ip, ret_ip, fregs, data):
        seen.append(("exit", data[0], id(data), ftrace_regs_get_return_value(fregs)))

    fp = make_fp(entry, exit_, 1, entry_data_type=lambda n: [None] * n)
    register_fprobe_ips(fp, [m.rec])
    try:
        m.rec(3)
    finally:
        unregister_fprobe(fp)
    entries = [s for s in seen if s[0] == "entry"]
    exits = [s for s in seen if s[0] == "exit"]
    assert [e[1] for e in entries] == [3, 2, 1, 0]
    assert [x[1] for x in exits] == [0, 1, 2, 3]
    # each level's exit got the object its own entry filled, and no two levels share one
    ids = {e[1]: e[2] for e in entries}
    assert len(set(ids.values())) == 4
    for _, n, data_id, retval in exits:
        assert data_id == ids[n]
        assert retval == n


def test_entry_handler_returning_true_cancels_that_exit_and_is_not_a_miss(m):
    log = Log(ret=lambda fregs: fregs.arg("n") == 2)
    fp = make_fp(log.entry, log.exit)
    register_fprobe_ips(fp, [m.rec])
    try:
        m.rec(3)
    finally:
        unregister_fprobe(fp)
    entries = [c[4][0][1] for c in log.calls if c[0] == "entry"]
    exits = [c[4] for c in log.calls if c[0] == "exit"]
    assert entries == [3, 2, 1, 0]
    assert exits == [0, 1, 3]          # the n == 2 call's exit was cancelled
    assert fp.nmissed == 0


@pytest.mark.parametrize("size", [MAX_FPROBE_DATA_SIZE + 1, 16 * 8, 1000])
def test_entry_data_larger_than_fifteen_words_is_e2big(m, size):
    fp = make_fp(lambda *a: None, lambda *a: None, size)
    with pytest.raises(FntraceError) as ei:
        register_fprobe_ips(fp, [m.work])
    assert ei.value.errno == errno.E2BIG or isinstance(ei.value, NoSpaceError)
    assert not fprobe_is_registered(fp)
    assert m.__name__ + ".work" not in enabled_names()


def test_entry_data_of_exactly_fifteen_words_is_accepted(m):
    sizes = []
    fp = make_fp(lambda fp, ip, r, fregs, data: sizes.append(len(data)),
                 lambda *a: None, MAX_FPROBE_DATA_SIZE)
    register_fprobe_ips(fp, [m.work])
    try:
        m.work(1)
    finally:
        unregister_fprobe(fp)
    assert MAX_FPROBE_DATA_SIZE == 15 * 8
    assert sizes == [MAX_FPROBE_DATA_SIZE]


# ---------------------------------------------------------------------------------
# The two back ends
# ---------------------------------------------------------------------------------

def test_fprobe_without_exit_handler_takes_no_shadow_stack_frame(m):
    depth_inside = []
    m.hook = lambda: depth_inside.append(len(fgraph.shadow_stack().frames))
    log = Log()
    fp = make_fp(log.entry)
    register_fprobe_ips(fp, [m.work])
    try:
        line = enabled_line(f"{m.__name__}.work")
        m.caller(2)
    finally:
        unregister_fprobe(fp)
    assert depth_inside == [0]
    assert "fprobe_ftrace_ops" in line
    assert log.kinds() == ["entry"]
    # the entry handler still gets the caller as ret_ip, and no entry data
    assert log.calls[0][3] is rec_of(m.caller)
    assert log.calls[0][5] is None


def test_fprobe_with_exit_handler_takes_one_frame(m):
    # the contrast to the test above: the exit needs the shadow stack
    depth_inside = []
    m.hook = lambda: depth_inside.append(len(fgraph.shadow_stack().frames))
    fp = make_fp(lambda *a: None, lambda *a: None)
    register_fprobe_ips(fp, [m.work])
    try:
        m.caller(2)
    finally:
        unregister_fprobe(fp)
    assert depth_inside == [1]
    assert fgraph.shadow_stack().frames == []


def test_ret_ip_of_a_call_made_in_a_list_comprehension_is_the_enclosing_function(m):
    # A comprehension is a frame of its own on 3.11 and inlined on 3.12+ (PEP 709);
    # records treat it as part of its function on every version, and so must ret_ip,
    # for both back ends (dispatch.py _parent_slow does it for the entry-only one).
    seen = []
    only = make_fp(lambda fp, ip, r, fregs, d: seen.append(("entry-only", r)))
    both = make_fp(lambda fp, ip, r, fregs, d: seen.append(("entry", r)),
                   lambda fp, ip, r, fregs, d: seen.append(("exit", r)))
    register_fprobe_ips(only, [m.work])
    register_fprobe_ips(both, [m.work])
    try:
        assert m.comp() == [0, 2]
    finally:
        unregister_fprobe(only)
        unregister_fprobe(both)
    assert sorted(k for k, _ in seen) == sorted(["entry-only", "entry", "exit"] * 2)
    assert {r.name for _, r in seen} == {f"{m.__name__}.comp"}


def test_entry_only_and_exit_fprobes_on_one_function(m):
    a, b = Log(), Log()
    fa = make_fp(a.entry)
    fb = make_fp(b.entry, b.exit)
    register_fprobe_ips(fa, [m.work])
    register_fprobe_ips(fb, [m.work])
    try:
        assert m.caller(4) == 8
    finally:
        unregister_fprobe(fa)
        unregister_fprobe(fb)
    assert a.kinds() == ["entry"]
    assert b.kinds() == ["entry", "exit"]
    assert m.__name__ + ".work" not in enabled_names()


def test_all_exit_fprobes_share_one_fgraph_user(m):
    before = graph_users()
    assert fprobe_graph_ops.idx == -1
    fps = [make_fp(lambda *a: None, lambda *a: None) for _ in range(5)]
    idxs = []
    try:
        for fp, fn in zip(fps, (m.work, m.fa_one, m.fa_two, m.fb, m.work)):
            register_fprobe_ips(fp, [fn])
            idxs.append(fprobe_graph_ops.idx)
            assert graph_users() == before + 1
        # entry-only fprobes do not need it either
        e = make_fp(lambda *a: None)
        register_fprobe_ips(e, [m.rec])
        assert graph_users() == before + 1
        unregister_fprobe(e)
    finally:
        for fp in fps:
            if fprobe_is_registered(fp):
                unregister_fprobe(fp)
    assert len(set(idxs)) == 1 and idxs[0] >= 0
    assert fprobe_graph_ops.idx == -1
    assert graph_users() == before


def test_each_thread_gets_its_own_entry_data(m):
    seen: dict[str, list] = {}
    lock = threading.Lock()

    def entry(fp, ip, ret_ip, fregs, data):
        data[0] = (threading.current_thread().name, fregs.arg("n"))

    def exit_(fp, ip, ret_ip, fregs, data):
        with lock:
            seen.setdefault(threading.current_thread().name, []).append(
                (data[0], ftrace_regs_get_return_value(fregs)))

    fp = make_fp(entry, exit_, 1, entry_data_type=lambda n: [None] * n)
    register_fprobe_ips(fp, [m.rec])
    barrier = threading.Barrier(4)

    def run(k):
        barrier.wait(60)
        for _ in range(20):
            m.rec(k)

    threads = [threading.Thread(target=run, args=(k,), name=f"fpt{k}") for k in range(1, 5)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        unregister_fprobe(fp)
    assert sorted(seen) == ["fpt1", "fpt2", "fpt3", "fpt4"]
    for name, items in seen.items():
        k = int(name[3:])
        assert len(items) == 20 * (k + 1)
        for (tname, n), retval in items:
            assert tname == name and n == retval


# ---------------------------------------------------------------------------------
# Unregister while calls are in flight
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("keep_other", [False, True], ids=["last", "other-stays"])
def test_unregister_from_inside_the_probed_function(m, keep_other):
    log = Log()
    fp = make_fp(log.entry, log.exit)
    other_log = Log()
    other = make_fp(other_log.entry, other_log.exit)
    register_fprobe_ips(fp, [m.work])
    if keep_other:
        register_fprobe_ips(other, [m.work])
    m.hook = lambda: unregister_fprobe(fp)
    try:
        assert m.caller(3) == 6
        m.hook = None
        m.work(1)
    finally:
        m.hook = None
        if keep_other:
            unregister_fprobe(other)
    assert log.kinds() == ["entry"]
    assert not fprobe_is_registered(fp)
    if keep_other:
        assert other_log.kinds() == ["entry", "exit", "entry", "exit"]


@pytest.mark.parametrize("keep_other", [False, True], ids=["last", "other-stays"])
def test_unregister_from_another_thread_while_a_call_sleeps(m, keep_other):
    log = Log()
    fp = make_fp(log.entry, log.exit)
    other = make_fp(lambda *a: None, lambda *a: None)
    register_fprobe_ips(fp, [m.sleeper])
    if keep_other:
        register_fprobe_ips(other, [m.fb])
    go, started = threading.Event(), threading.Event()
    result = []
    t = threading.Thread(target=lambda: result.append(m.sleeper(go, started)))
    t.start()
    try:
        assert started.wait(60)
        unregister_fprobe(fp)
    finally:
        go.set()
        t.join(60)
    try:
        assert result == ["woke"]
        assert log.kinds() == ["entry"]
        m.sleeper(_set_event(), threading.Event())
        assert log.kinds() == ["entry"]
    finally:
        if keep_other:
            unregister_fprobe(other)


def _set_event() -> threading.Event:
    ev = threading.Event()
    ev.set()
    return ev


def test_fprobe_registered_while_a_call_is_in_flight_gets_no_exit_for_it(m):
    old_log, new_log = Log(), Log()
    old = make_fp(old_log.entry, old_log.exit)
    new = make_fp(new_log.entry, new_log.exit)
    register_fprobe_ips(old, [m.sleeper])
    go, started = threading.Event(), threading.Event()
    t = threading.Thread(target=m.sleeper, args=(go, started))
    t.start()
    try:
        assert started.wait(60)
        register_fprobe_ips(new, [m.sleeper])
    finally:
        go.set()
        t.join(60)
    try:
        assert old_log.kinds() == ["entry", "exit"]
        assert new_log.kinds() == []
    finally:
        unregister_fprobe(old)
        unregister_fprobe(new)


def test_unregistered_fprobe_leaves_no_hooks(m):
    fp = make_fp(lambda *a: None, lambda *a: None)
    register_fprobe_ips(fp, [m.work, m.fb])
    assert {f"{m.__name__}.work", f"{m.__name__}.fb"} <= set(enabled_names())
    unregister_fprobe(fp)
    assert not {f"{m.__name__}.work", f"{m.__name__}.fb"} & set(enabled_names())


# ---------------------------------------------------------------------------------
# disable / enable
# ---------------------------------------------------------------------------------

def test_disable_is_soft_and_enable_brings_the_handlers_back(m):
    log = Log()
    fp = make_fp(log.entry, log.exit)
    register_fprobe_ips(fp, [m.work])
    name = f"{m.__name__}.work"
    try:
        line = enabled_line(name)
        disable_fprobe(fp)
        assert fp.flags & FPROBE_FL_DISABLED
        m.work(1)
        assert log.calls == []
        # the hooks stay (fprobe.h: "this doesn't remove the ftrace hooks")
        assert enabled_line(name) == line
        assert fprobe_is_registered(fp)
        enable_fprobe(fp)
        assert not fp.flags & FPROBE_FL_DISABLED
        m.work(2)
    finally:
        unregister_fprobe(fp)
    assert log.kinds() == ["entry", "exit"]
    assert log.calls[1][4] == 4


def test_disable_entry_only_fprobe(m):
    log = Log()
    fp = make_fp(log.entry)
    register_fprobe_ips(fp, [m.work])
    try:
        disable_fprobe(fp)
        m.work(1)
        assert f"{m.__name__}.work" in enabled_names()
        enable_fprobe(fp)
        m.work(1)
    finally:
        unregister_fprobe(fp)
    assert log.kinds() == ["entry"]


def test_disabled_between_entry_and_exit_skips_the_exit(m):
    log = Log()
    fp = make_fp(log.entry, log.exit)
    register_fprobe_ips(fp, [m.work])
    m.hook = lambda: disable_fprobe(fp)
    try:
        m.work(1)
    finally:
        m.hook = None
        unregister_fprobe(fp)
    assert log.kinds() == ["entry"]


# ---------------------------------------------------------------------------------
# Registration variants and their errors
# ---------------------------------------------------------------------------------

def test_register_fprobe_with_glob_and_notfilter(m):
    n = m.__name__
    log = Log()
    fp = make_fp(log.entry)
    assert fprobe_count_ips_from_filter(f"{n}.fa_*", f"{n}.fa_two") == 1
    assert fprobe_count_ips_from_filter(f"{n}.f*", "*two") == 2
    assert fprobe_count_ips_from_filter(f"{n}.fa_*") == 2
    register_fprobe(fp, f"{n}.fa_*", f"{n}.fa_two")
    try:
        m.fa_one()
        m.fa_two()
        m.fb()
        assert f"{n}.fa_one" in enabled_names()
        assert f"{n}.fa_two" not in enabled_names()
    finally:
        unregister_fprobe(fp)
    assert [c[2].name for c in log.calls] == [f"{n}.fa_one"]


def test_register_fprobe_glob_matching_nothing_is_enoent(m):
    fp = make_fp(lambda *a: None)
    with pytest.raises(NotFoundError) as ei:
        register_fprobe(fp, f"{m.__name__}.fa_*", f"{m.__name__}.fa_*")
    assert ei.value.errno == errno.ENOENT
    assert fprobe_count_ips_from_filter(f"{m.__name__}.nothing_*") == 0
    assert not fprobe_is_registered(fp)


def test_register_fprobe_syms(m):
    n = m.__name__
    log = Log()
    fp = make_fp(log.entry, log.exit)
    register_fprobe_syms(fp, [f"{n}.fb", f"{n}.fa_one"])
    try:
        m.fa_one()
        m.fa_two()
        m.fb()
    finally:
        unregister_fprobe(fp)
    assert [(c[0], c[2].name) for c in log.calls] == [
        ("entry", f"{n}.fa_one"), ("exit", f"{n}.fa_one"),
        ("entry", f"{n}.fb"), ("exit", f"{n}.fb")]


def test_register_fprobe_syms_with_an_unknown_name_is_enoent(m):
    n = m.__name__
    fp = make_fp(lambda *a: None)
    with pytest.raises(NotFoundError) as ei:
        register_fprobe_syms(fp, [f"{n}.fa_one", f"{n}.no_such_function"])
    assert ei.value.errno == errno.ENOENT
    assert not fprobe_is_registered(fp)
    assert f"{n}.fa_one" not in enabled_names()


def test_register_fprobe_ips_with_something_not_traceable(m):
    fp = make_fp(lambda *a: None)
    for bad in (len, 42):
        with pytest.raises(NotFoundError):
            register_fprobe_ips(fp, [m.work, bad])
        assert not fprobe_is_registered(fp)


def test_fprobe_needs_a_handler(m):
    fp = make_fp()
    with pytest.raises(FntraceError):
        register_fprobe_ips(fp, [m.work])
    assert not fprobe_is_registered(fp)


def test_registering_twice_fails_and_keeps_the_first_registration(m):
    log = Log()
    fp = make_fp(log.entry, log.exit)
    register_fprobe_ips(fp, [m.work])
    try:
        with pytest.raises(FntraceError):
            register_fprobe_ips(fp, [m.work])
        with pytest.raises(FntraceError):
            register_fprobe(fp, f"{m.__name__}.fb")
        assert fprobe_is_registered(fp)
        m.work(1)
        m.fb()
    finally:
        unregister_fprobe(fp)
    assert log.kinds() == ["entry", "exit"]
    assert not fprobe_is_registered(fp)


def test_unregister_an_unregistered_fprobe_is_einval(m):
    fp = make_fp(lambda *a: None)
    with pytest.raises(FntraceError) as ei:
        unregister_fprobe(fp)
    assert ei.value.errno == errno.EINVAL
    register_fprobe_ips(fp, [m.work])
    unregister_fprobe(fp)
    with pytest.raises(FntraceError) as ei:
        unregister_fprobe(fp)
    assert ei.value.errno == errno.EINVAL


def test_fprobe_can_be_registered_again_after_unregister(m):
    log = Log()
    fp = make_fp(log.entry, log.exit)
    register_fprobe_ips(fp, [m.work])
    unregister_fprobe(fp)
    m.work(1)
    register_fprobe_ips(fp, [m.fb])
    try:
        m.work(1)
        m.fb()
    finally:
        unregister_fprobe(fp)
    assert [(c[0], c[2].name) for c in log.calls] == [
        ("entry", f"{m.__name__}.fb"), ("exit", f"{m.__name__}.fb")]


# ---------------------------------------------------------------------------------
# nmissed and containment
# ---------------------------------------------------------------------------------

def test_nmissed_counts_calls_without_room_on_the_shadow_stack(m):
    extra = 40
    depth = fgraph.SHADOW_STACK_MAX_DEPTH + extra
    counts = {"entry": 0, "exit": 0, "plain": 0}

    def entry(*a):
        counts["entry"] += 1

    def exit_(*a):
        counts["exit"] += 1

    def plain(*a):
        counts["plain"] += 1

    fp = make_fp(entry, exit_)
    entry_only = make_fp(plain)
    register_fprobe_ips(fp, [m.deep])
    register_fprobe_ips(entry_only, [m.deep])
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 2 * depth + 1000))
    try:
        m.deep(depth - 1)          # depth calls in all
    finally:
        sys.setrecursionlimit(old)
        unregister_fprobe(fp)
        unregister_fprobe(entry_only)
    assert fp.nmissed == extra
    assert counts["entry"] == counts["exit"] == fgraph.SHADOW_STACK_MAX_DEPTH
    # the entry-only fprobe needs no frame: it saw every call and missed none
    assert counts["plain"] == depth
    assert entry_only.nmissed == 0
    assert fgraph.shadow_stack().frames == []


def test_nmissed_is_reset_when_registered(m):
    fp = make_fp(lambda *a: None, lambda *a: None)
    fp.nmissed = 5
    register_fprobe_ips(fp, [m.work])
    try:
        assert fp.nmissed == 0
    finally:
        unregister_fprobe(fp)


def test_raising_handlers_are_contained(m, capfd):
    def boom(*a):
        raise ValueError("boom")

    good = Log()
    bad = make_fp(boom, boom, name="bad_probe")
    ok = make_fp(good.entry, good.exit)
    register_fprobe_ips(bad, [m.work])
    register_fprobe_ips(ok, [m.work])
    try:
        assert m.caller(2) == 4
        assert m.work(5) == 10
    finally:
        unregister_fprobe(bad)
        unregister_fprobe(ok)
    assert good.kinds() == ["entry", "exit", "entry", "exit"]
    err = capfd.readouterr().err
    assert "bad_probe" in err and "ValueError" in err
    assert err.count("bad_probe") == 1          # reported once, then only counted


def test_raising_entry_only_handler_is_contained(m, capfd):
    def boom(*a):
        raise KeyError("nope")

    fp = make_fp(boom, name="bad_entry_only")
    register_fprobe_ips(fp, [m.work])
    try:
        assert m.work(3) == 6
        assert m.work(4) == 8
    finally:
        unregister_fprobe(fp)
    assert "bad_entry_only" in capfd.readouterr().err


# ---------------------------------------------------------------------------------
# Generators and coroutines
# ---------------------------------------------------------------------------------

def test_handlers_see_generator_calls(m):
    log = Log()
    fp = make_fp(log.entry, log.exit)
    register_fprobe_ips(fp, [m.gen])
    try:
        assert list(m.gen(3)) == [0, 1, 2]
    finally:
        unregister_fprobe(fp)
    entries = [c for c in log.calls if c[0] == "entry"]
    exits = [c for c in log.calls if c[0] == "exit"]
    assert entries and len(entries) == len(exits)
    assert all(c[2] is rec_of(m.gen) for c in log.calls)
    assert all(c[4] == [("n", 3)] for c in entries)
    assert [c[4] for c in exits if c[4] is not None] == [0, 1, 2]
    assert fgraph.shadow_stack().frames == []


def test_handlers_see_async_function_calls(m):
    log = Log()
    fp = make_fp(log.entry, log.exit)
    register_fprobe_ips(fp, [m.coro])
    try:
        assert asyncio.run(m.coro(41)) == 42
    finally:
        unregister_fprobe(fp)
    entries = [c for c in log.calls if c[0] == "entry"]
    exits = [c for c in log.calls if c[0] == "exit"]
    assert entries and len(entries) == len(exits)
    assert all(c[4] == [("x", 41)] for c in entries)
    assert exits[-1][4] == 42
    assert log.kinds()[-1] == "exit"


def test_entry_only_handler_sees_generator_start(m):
    log = Log()
    fp = make_fp(log.entry)
    register_fprobe_ips(fp, [m.gen])
    try:
        assert sum(m.gen(4)) == 6
    finally:
        unregister_fprobe(fp)
    assert log.calls and all(c[2] is rec_of(m.gen) for c in log.calls)
