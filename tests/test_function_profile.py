"""The function profiler through tracefs (ftrace.c's profiler, trace_stat.c):
function_profile_enabled, trace_stat/functionN, options/graph-time, options/sleep-time.

Ports of the kernel's selftests (tools/testing/selftests/ftrace/test.d):
  ftrace/func_profile_stat.tc   trace_stat/function0 changes while the profiler is on
                                and stops changing after ``echo 0``
  ftrace/func_profiler.tc       the function tracer and the profiler together; the
                                tracer's filter still applies, and clearing it works
  ftrace/fgraph-profiler.tc     function_graph and the profiler together
and the rest of ftrace.c's behaviour: hits and times of a known call tree, graph-time 0
subtracting the children, the s^2 arithmetic, per-thread files, the reset on enabling,
the global filter, the kstrtoul grammar of the writes, hits only without fgraph.

The call tree: main() calls a() 3 times; a() calls b() twice, then spins A_NS of CPU
time; b() spins B_NS.  Spinning on the thread's CPU clock makes each call at least that
long in either clock, whatever else runs on the machine.
"""
from __future__ import annotations

import errno
import os
import re
import threading

import pytest

from fntrace import fgraph
from fntrace.core import ops as core_ops
from fntrace.core.task import thread_cpu
from fntrace.errors import FntraceError
from fntrace.output.function_stat import (function_stat_headers, function_stat_show,
                                          function_stat_variance)
from fntrace.tracefs import Tracefs
from fntrace.tracers import function_profile

from support import Recorder, run_python, unregister_leftover_graph_users

A_NS = 1_000_000
B_NS = 3_000_000

TREE_SRC = f"""
import time

def spin(ns):
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass

def b():
    spin({B_NS})

def a():
    b()
    b()
    spin({A_NS})

def main():
    for _ in range(3):
        a()

def other():
    return 1

def gen(n):
    for i in range(n):
        yield i

def consume(n):
    total = 0
    for v in gen(n):
        spin({B_NS})
        total += v
    return total

def sleeper():
    time.sleep(0.05)
"""

GRAPH_HEADER = function_stat_headers(True)
HITS_HEADER = function_stat_headers(False)

_ROW = re.compile(r"^  (?P<name>.{30})  (?P<hits>[ \d]{10})(?P<rest>.*)$")


@pytest.fixture
def fs():
    t = Tracefs()
    yield t
    try:
        t.write("function_profile_enabled", "0")
        t.write("current_tracer", "nop")
    finally:
        unregister_leftover_graph_users()
        core_ops.reset_for_tests()


@pytest.fixture
def tree(write_module):
    return write_module(TREE_SRC, hint="proftree")


def my_file() -> str:
    return f"trace_stat/function{thread_cpu()}"


def rows(text: str) -> list[tuple[str, int]]:
    """(name, hits) of each row of a trace_stat/functionN text, in order."""
    out = []
    for line in text.splitlines()[2:]:
        m = _ROW.match(line)
        assert m, f"not a stat row: {line!r}"
        out.append((m.group("name").rstrip(), int(m.group("hits"))))
    return out


def raw(fs, mod) -> dict[str, tuple[int, int, int]]:
    """This thread's table: short name -> (hits, time ns, time_squared)."""
    out = {}
    for name, hits, t, t2 in fs.profiler.rows(thread_cpu()):
        if name.startswith(mod.__name__ + "."):
            out[name[len(mod.__name__) + 1:]] = (hits, t, t2)
    return out


def profile(fs, mod, run, *, filt="a b main") -> str:
    fs.write("set_ftrace_filter", " ".join(f"{mod.__name__}.{f}" for f in filt.split()))
    fs.write("function_profile_enabled", "1")
    run()
    fs.write("function_profile_enabled", "0")
    return fs.read(my_file())


# ---------------------------------------------------------------------------------
# The files
# ---------------------------------------------------------------------------------

def test_files_exist_with_kernel_defaults(fs):
    assert fs.read("function_profile_enabled") == "0\n"
    assert fs.read("options/graph-time") == "1\n"
    assert fs.read("options/sleep-time") == "1\n"
    assert "function_profile_enabled" in fs.ls()
    assert "trace_stat" in fs.ls()
    assert "function0" in fs.ls("trace_stat")
    assert fs.kind("trace_stat") == "dir"
    assert fs.mode("function_profile_enabled") == 0o644
    assert fs.mode("trace_stat/function0") == 0o444
    # never enabled: the header only
    assert fs.read("trace_stat/function0") == GRAPH_HEADER


def test_instances_have_no_profiler_files():
    inst = Tracefs(top=False)
    assert "function_profile_enabled" not in inst.ls()
    assert "trace_stat" not in inst.ls()
    with pytest.raises(FntraceError):
        inst.read("function_profile_enabled")


def test_enabled_write_grammar(fs):
    """ftrace_profile_write: kstrtoul, then val = !!val."""
    fs.write("function_profile_enabled", "2\n")
    assert fs.read("function_profile_enabled") == "1\n"
    fs.write("function_profile_enabled", "+0")
    assert fs.read("function_profile_enabled") == "0\n"
    for bad in ("abc", "-1", "1 2", "0x1", "", " 1", "1.0"):
        with pytest.raises(FntraceError) as e:
            fs.write("function_profile_enabled", bad)
        assert e.value.errno == errno.EINVAL, bad
        assert fs.read("function_profile_enabled") == "0\n"
    with pytest.raises(FntraceError) as e:
        fs.write("function_profile_enabled", str(1 << 64))
    assert e.value.errno == errno.ERANGE
    with pytest.raises(FntraceError) as e:
        fs.write("trace_stat/function0", "1")
    assert e.value.errno == errno.EACCES


def test_option_write_grammar(fs):
    for name in ("graph-time", "sleep-time"):
        fs.write(f"options/{name}", "0\n")
        assert fs.read(f"options/{name}") == "0\n"
        for bad in ("2", "yes", "-1", ""):
            with pytest.raises(FntraceError) as e:
                fs.write(f"options/{name}", bad)
            assert e.value.errno == errno.EINVAL
            assert fs.read(f"options/{name}") == "0\n"
        fs.write(f"options/{name}", "1")
        assert fs.read(f"options/{name}") == "1\n"


# ---------------------------------------------------------------------------------
# The stat text: ftrace.c's format strings and arithmetic
# ---------------------------------------------------------------------------------

def test_headers_are_the_kernels():
    assert GRAPH_HEADER == (
        "  Function                               Hit    Time            Avg             s^2\n"
        "  --------                               ---    ----            ---             ---\n")
    assert HITS_HEADER == ("  Function                               Hit\n"
                           "  --------                               ---\n")


def test_row_format_and_variance():
    # calls of 1, 2 and 6 us: total 9 us, average 3 us,
    # s^2 = (3 * 41e6 - 81e6) / (3 * 2 * 1000) = 7000 -> "7.000 us" (us^2)
    t = [1000, 2000, 6000]
    row = function_stat_show("mod.f", 3, sum(t), sum(x * x for x in t))
    assert row == ("  mod.f                                    3    9.000 us        "
                   "3.000 us        7.000 us    \n")
    assert function_stat_variance(3, 9000, 41_000_000) == 7000
    # integer division truncates, as div64_ul does: 2 calls of 1 and 2 ns
    assert function_stat_variance(2, 3, 5) == 0          # (10 - 9) // 2000
    # one call: no variance (the denominator is 0)
    assert function_stat_variance(1, 5000, 25_000_000) == 0
    # the average is ns truncated too
    assert " 0.001 us" in function_stat_show("f", 3, 5, 9)
    # names cut to 30 characters ("%-30.30s")
    long = "package.module.Class.a_rather_long_method_name"
    assert function_stat_show(long, 1, 0, 0).startswith("  " + long[:30] + "           1")
    # the hits-only row
    assert function_stat_show("mod.f", 12, 0, 0, graph=False) == (
        "  mod.f                                   12\n")
    # rows with an average below tracing_thresh (ns) are not shown; none without hits
    assert function_stat_show("f", 2, 4000, 8_000_000, tracing_thresh=3000) == ""
    assert function_stat_show("f", 2, 6000, 18_000_000, tracing_thresh=3000) != ""
    assert function_stat_show("f", 0, 0, 0) == ""


def test_large_times_do_not_wrap():
    """The kernel's 64-bit sum of squares wraps for calls over ~4.3 s: here it does not."""
    t = [5_000_000_000, 7_000_000_000]
    s2 = function_stat_variance(2, sum(t), sum(x * x for x in t))
    # sample variance (ns^2) = 2e18; over 1000 -> 2e15
    assert s2 == 2 * 10 ** 15
    for cls in {function_profile.ProfileStat, function_profile._Stat}:
        st = cls(0)
        for x in t:
            st.hit(42)
            st.add_time(42, x)
        assert st.items() == [(42, 2, sum(t), sum(x * x for x in t))]


def test_tracer_twins_keep_the_same_table():
    """The native ProfileStat and the Python one agree on any sequence of hits and
    times (order first hit, unknown ip ignored by add_time, reset)."""
    if function_profile._Stat is function_profile.ProfileStat:
        pytest.skip("the native module is not built or FNTRACE_PURE=1: one table only")
    import random
    rnd = random.Random(14)
    tables = [function_profile.ProfileStat(3), function_profile._Stat(3)]
    for step in range(5000):
        ip = rnd.randrange(1, 400)
        op = rnd.random()
        ns = rnd.randrange(0, 10 ** 10)
        for t in tables:
            if op < 0.6:
                t.hit(ip)
            elif op < 0.999:
                t.add_time(ip, ns)
            else:
                t.reset()
        if step % 97 == 0:
            assert tables[0].items() == tables[1].items()
    assert tables[0].items() == tables[1].items()
    assert len(tables[0]) == len(tables[1]) and tables[1].cpu == 3


# ---------------------------------------------------------------------------------
# A known call tree
# ---------------------------------------------------------------------------------

def test_hits_exact_and_time_ordering(fs, tree):
    text = profile(fs, tree, tree.main)
    assert text.startswith(GRAPH_HEADER)
    names = [f"{tree.__name__}.{f}" for f in ("main", "a", "b")]
    # graph-time 1: a function's time includes its children: main >= a >= b
    assert rows(text) == [(names[0][:30], 1), (names[1][:30], 3), (names[2][:30], 6)]
    r = raw(fs, tree)
    assert r["main"][1] >= r["a"][1] >= r["b"][1] >= 6 * B_NS
    assert r["a"][1] >= 3 * (2 * B_NS + A_NS)
    # the row shows what the table holds
    line = text.splitlines()[2]
    h, t, t2 = r["main"]
    assert line + "\n" == function_stat_show(names[0], h, t, t2)


def test_graph_time_0_subtracts_children(fs, tree):
    fs.write("options/graph-time", "0")
    fs.write("options/sleep-time", "0")     # thread CPU time: tight bounds
    text = profile(fs, tree, tree.main)
    # each function's own time: b (6 x 3 ms), a (3 x 1 ms), main (nothing of its own)
    assert [n for n, _ in rows(text)] == [f"{tree.__name__}.{f}"[:30] for f in ("b", "a", "main")]
    r = raw(fs, tree)
    assert (r["main"][0], r["a"][0], r["b"][0]) == (1, 3, 6)
    assert 6 * B_NS <= r["b"][1] < 6 * B_NS * 1.5
    assert 3 * A_NS <= r["a"][1] < 3 * A_NS + B_NS, r
    assert r["main"][1] < A_NS, r


def test_graph_time_0_wall_clock(fs, tree):
    fs.write("options/graph-time", "0")
    profile(fs, tree, tree.main)
    r = raw(fs, tree)
    assert r["b"][1] >= 6 * B_NS
    assert r["a"][1] >= 3 * A_NS
    # a's own time is its spins, not its children's 18 ms
    assert r["main"][1] < r["a"][1] < r["b"][1], r


def test_sleep_time_0_leaves_out_blocked_time(fs, tree):
    profile(fs, tree, tree.sleeper, filt="sleeper")
    slept = raw(fs, tree)["sleeper"]
    assert slept[0] == 1 and slept[1] >= 50_000_000
    fs.write("options/sleep-time", "0")
    profile(fs, tree, tree.sleeper, filt="sleeper")
    cpu = raw(fs, tree)["sleeper"]
    assert cpu[0] == 1 and cpu[1] < 10_000_000, cpu


def test_generator_suspension_is_not_counted(fs, tree):
    """Every resume of a generator is a call of its own (fgraph): the consumer's 3 ms
    spins between the yields are in consume's time, not gen's."""
    profile(fs, tree, lambda: tree.consume(4), filt="gen consume")
    r = raw(fs, tree)
    assert r["gen"][0] == 5            # 4 values and the last resume
    assert r["consume"][0] == 1
    assert r["consume"][1] >= 4 * B_NS
    assert r["gen"][1] < B_NS, r


def test_lane_and_general_path_agree(fs, tree):
    """Alone, the profiler takes fgraph's fast lane (when native); with function_graph
    beside it, the general path: the same hits."""
    fs.write("options/graph-time", "0")
    alone = profile(fs, tree, tree.main)
    fs.write("current_tracer", "function_graph")
    both = profile(fs, tree, tree.main)
    assert dict(rows(alone)) == dict(rows(both)), (alone, both)
    assert "b();" in fs.read("trace")


def test_native_lane_is_taken_when_alone(fs, tree):
    if function_profile._profile_lane is None:
        pytest.skip("the native module is not built or FNTRACE_PURE=1")
    fs.write("function_profile_enabled", "1")
    try:
        assert fgraph._lane is not None and fgraph._lane[0] is fs.profiler.gops
    finally:
        fs.write("function_profile_enabled", "0")


# ---------------------------------------------------------------------------------
# func_profile_stat.tc, the reset, per-thread files
# ---------------------------------------------------------------------------------

def test_func_profile_stat(fs, tree):
    """func_profile_stat.tc: the profile is updated while enabled, not after echo 0."""
    fs.write("function_profile_enabled", "1")
    before = fs.read(my_file())
    tree.other()
    after = fs.read(my_file())
    assert before != after
    fs.write("function_profile_enabled", "0")
    before = fs.read(my_file())
    tree.other()
    tree.main()
    assert fs.read(my_file()) == before


def test_enabling_resets(fs, tree):
    profile(fs, tree, tree.main)
    assert raw(fs, tree)["a"][0] == 3
    fs.write("function_profile_enabled", "1")      # 0 -> 1: every table reset
    assert raw(fs, tree) == {}
    tree.a()
    fs.write("function_profile_enabled", "1")      # 1 -> 1 changes nothing
    tree.a()
    fs.write("function_profile_enabled", "0")
    assert raw(fs, tree)["a"][0] == 2
    assert raw(fs, tree)["b"][0] == 4


def test_per_thread_files(fs, tree):
    fs.write("set_ftrace_filter", f"{tree.__name__}.a {tree.__name__}.b")
    fs.write("function_profile_enabled", "1")
    cpus = {}

    def worker():
        cpus["worker"] = thread_cpu()
        tree.a()

    tree.b()
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    fs.write("function_profile_enabled", "0")
    mine, theirs = thread_cpu(), cpus["worker"]
    assert mine != theirs
    assert f"function{theirs}" in fs.ls("trace_stat")
    b, a = f"{tree.__name__}.b"[:30], f"{tree.__name__}.a"[:30]
    assert rows(fs.read(f"trace_stat/function{mine}")) == [(b, 1)]
    assert rows(fs.read(f"trace_stat/function{theirs}")) == [(a, 1), (b, 2)]
    # the ended thread's table stays
    assert rows(fs.read(f"trace_stat/function{theirs}")) == [(a, 1), (b, 2)]


def test_equal_times_in_kernel_order(fs):
    """trace_stat.c: rows that compare equal come out latest-listed first (rbtree)."""
    from fntrace.tracefs.trace_stat import StatTracer, stat_text
    items = [("x", 1), ("y", 2), ("z", 1), ("w", 2)]
    ts = StatTracer("t", lambda: items, lambda r: r[1], lambda r: r[0], lambda: "")
    assert stat_text(ts) == "wyzx"


# ---------------------------------------------------------------------------------
# The global filter; the tracers beside it
# ---------------------------------------------------------------------------------

def test_follows_set_ftrace_filter(fs, tree):
    fs.write("set_ftrace_filter", f"{tree.__name__}.a")
    fs.write("function_profile_enabled", "1")
    tree.main()
    assert set(raw(fs, tree)) == {"a"}
    # a change while enabled applies at once
    fs.write("set_ftrace_filter", f"{tree.__name__}.b", append=True)
    fs.write("set_ftrace_notrace", f"{tree.__name__}.a")
    tree.main()
    r = raw(fs, tree)
    assert r["a"][0] == 3 and r["b"][0] == 6
    fs.write("function_profile_enabled", "0")


def test_func_profiler_with_function_tracer(fs, tree):
    """func_profiler.tc: the function tracer and the profiler together; filtering on
    one function traces only it; clearing the filter traces the others again."""
    fs.write("current_tracer", "function")
    fs.write("function_profile_enabled", "1")
    fs.write("set_ftrace_filter", f"{tree.__name__}.b")
    fs.write("trace", "")
    fs.write("function_profile_enabled", "0")
    tree.main()
    lines = [l for l in fs.read("trace").splitlines() if not l.startswith("#")]
    assert lines and all(f"{tree.__name__}.b" in l for l in lines)
    fs.write("set_ftrace_filter", "")
    fs.write("trace", "")
    tree.main()
    text = fs.read("trace")
    assert f"{tree.__name__}.a" in text and f"{tree.__name__}.main" in text


def test_fgraph_profiler(fs, tree):
    """fgraph-profiler.tc: function_graph and the profiler run together."""
    fs.write("set_ftrace_filter", f"{tree.__name__}.*")
    fs.write("current_tracer", "function_graph")
    fs.write("function_profile_enabled", "1")
    tree.main()
    fs.write("function_profile_enabled", "0")
    assert raw(fs, tree)["b"][0] == 6
    assert raw(fs, tree)["spin"][0] == 9
    assert fs.read("trace").count(f"{tree.__name__}.b() {{") == 6
    fs.write("current_tracer", "nop")


def test_hits_only_without_fgraph(fs, tree):
    """Every fgraph slot taken: a plain ops counts hits (the kernel without the graph
    tracer): the two-column header, rows sorted by hits."""
    users = []
    try:
        while True:
            r = Recorder()
            g = fgraph.FgraphOps(r.entry, r.ret, name="filler")
            core_ops.ftrace_set_filter(g.ops, f"{tree.__name__}.other")
            try:
                fgraph.register_ftrace_graph(g)
            except FntraceError:
                break
            users.append(g)
        text = profile(fs, tree, tree.main)
    finally:
        for g in users:
            fgraph.unregister_ftrace_graph(g)
    assert text.startswith(HITS_HEADER)
    assert rows(text) == [(f"{tree.__name__}.{f}"[:30], n) for f, n in (("b", 6), ("a", 3), ("main", 1))]
    assert all(len(l) == len(l.rstrip()) for l in text.splitlines()[2:])
    # a slot free again: times come back
    assert profile(fs, tree, tree.main).startswith(GRAPH_HEADER)


def test_tracing_thresh_hides_short_rows(fs, tree):
    fs.write("options/sleep-time", "0")     # CPU time: b's average is B_NS, a's 2 B_NS + A_NS
    fs.write("tracing_thresh", str(B_NS * 3 // 2 // 1000))      # us
    text = profile(fs, tree, tree.main)
    assert [n for n, _ in rows(text)] == [f"{tree.__name__}.{f}"[:30] for f in ("main", "a")]
    fs.write("tracing_thresh", "0")


# ---------------------------------------------------------------------------------
# Both hot paths, in one run each
# ---------------------------------------------------------------------------------

PROG = f"""
import sys
{TREE_SRC}
import fntrace
fs = fntrace.tracefs()
fs.write("set_ftrace_filter", "__main__.a __main__.b __main__.main __main__.gen __main__.consume")
fs.write("options/graph-time", sys.argv[1])
fs.write("options/sleep-time", "0")
fs.write("function_profile_enabled", "1")
main()
consume(3)
fs.write("function_profile_enabled", "0")
from fntrace.core.task import thread_cpu
from fntrace.tracers import function_profile
print("NATIVE", function_profile._profile_lane is not None)
print(fs.read(f"trace_stat/function{{thread_cpu()}}"), end="")
"""


@pytest.mark.parametrize("graph_time", ["1", "0"])
def test_native_and_pure_agree(tmp_path, graph_time):
    prog = tmp_path / "prof.py"
    prog.write_text(PROG)
    out = {}
    for pure in ("0", "1"):
        env = dict(os.environ, FNTRACE_PURE=pure)
        p = run_python(prog, graph_time, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        first, _, text = p.stdout.partition("\n")
        out[pure] = (first, text)
    assert out["1"][0] == "NATIVE False"
    for pure, (_, text) in out.items():
        assert text.startswith(GRAPH_HEADER)
        got = dict(rows(text))
        assert got == {"__main__.main": 1, "__main__.a": 3, "__main__.b": 6,
                       "__main__.consume": 1, "__main__.gen": 4}, (pure, text)
    order = {pure: [n for n, _ in rows(text)] for pure, (_, text) in out.items()}
    assert order["0"][:2] == order["1"][:2]


def test_follows_a_filter_on_a_module_loaded_later(fs, write_module):
    """The global filter's patterns kept for modules not loaded yet select their
    functions for the profiler too when the module is imported."""
    import importlib
    name = write_module(TREE_SRC, hint="proflater", import_it=False)
    fs.keep_unmatched = True
    fs.write("set_ftrace_filter", f"{name}.a {name}.b")
    fs.write("function_profile_enabled", "1")
    mod = importlib.import_module(name)
    mod.main()
    fs.write("function_profile_enabled", "0")
    r = raw(fs, mod)
    assert (r["a"][0], r["b"][0]) == (3, 6) and "main" not in r


def test_global_filter_follower_unit():
    """core.ops.ftrace_ops_set_global_filter: the follower's hashes are the source's,
    now and after each change; clearing stops it."""
    from fntrace.core.ops import (Ops, ftrace_ops_clear_global_filter,
                                  ftrace_ops_set_global_filter, ftrace_set_filter,
                                  ftrace_set_notrace)
    src, fol = Ops(name="src"), Ops(name="fol")
    ftrace_set_filter(src, "json.*")
    ftrace_ops_set_global_filter(fol, src)
    assert fol.filter_hash is src.filter_hash and fol.filter_hash
    ftrace_set_notrace(src, "json.dumps")
    assert fol.notrace_hash is src.notrace_hash and fol.notrace_hash
    ftrace_set_filter(src, None)
    assert not fol.filter_hash
    ftrace_ops_clear_global_filter(fol, src)
    ftrace_set_filter(src, "json.*")
    assert not fol.filter_hash


def test_through_the_process_tracefs(tree):
    """fntrace.tracefs(), the process's top level, has the profiler too."""
    import fntrace
    top = fntrace.tracefs()
    try:
        top.write("set_ftrace_filter", f"{tree.__name__}.a {tree.__name__}.b")
        top.write("function_profile_enabled", "1")
        tree.main()
        top.write("function_profile_enabled", "0")
        assert rows(top.read(my_file())) == [(f"{tree.__name__}.a"[:30], 3),
                                              (f"{tree.__name__}.b"[:30], 6)]
    finally:
        top.write("function_profile_enabled", "0")
        top.write("set_ftrace_filter", "")
        unregister_leftover_graph_users()
