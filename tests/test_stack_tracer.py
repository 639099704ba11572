"""The stack tracer (kernel/trace/trace_stack.c) through the tracefs files.

Ports ftrace/func_stack_tracer.tc (enable, reset with 'echo 0 > stack_max_size', the
maximum is not 0 after running) and checks the table trace_stack.c prints: its header,
one row per Python frame innermost first, Depth the bytes from that frame down, Size the
frame's own bytes (Depth[i] - Depth[i+1], the last row's Depth), stack_max_size equal to
the first row's Depth.
"""
from __future__ import annotations

import errno
import os
import re
import sys
import textwrap
import threading

import pytest

import fntrace
from fntrace.errors import FntraceError
from fntrace.tracefs import Tracefs

from support import errlog_check, run_python

MOD = """
    def rec(n):
        if n:
            return rec(n - 1)
        return leaf()

    def leaf():
        return 0

    def start(n):
        return rec(n)

    def shallow():
        return leaf()
"""

ROW = re.compile(r"^ *(\d+)\) +(\d+) +(\d+)   (.*)$")


@pytest.fixture
def fs():
    t = fntrace.tracefs()
    t.write("stack_tracer_enabled", "0")
    t.write("stack_trace_filter", "")
    t.write("stack_max_size", "0")
    yield t
    t.write("stack_tracer_enabled", "0")
    t.write("stack_trace_filter", "")
    t.write("stack_max_size", "0")


@pytest.fixture
def m(write_module):
    return write_module(MOD, hint="stkmod")


def table(fs: Tracefs) -> tuple[int, list[tuple[int, int, int, str]]]:
    lines = fs.read("stack_trace").splitlines()
    head = re.fullmatch(r"        Depth    Size   Location    \((\d+) entries\)", lines[0])
    assert head, lines[0]
    assert lines[1] == "        -----    ----   --------"
    rows = [ROW.match(l) for l in lines[2:] if not l.startswith("#")]
    assert all(rows), lines
    return int(head.group(1)), [(int(r[1]), int(r[2]), int(r[3]), r[4]) for r in rows]


def test_disabled_by_default(fs):
    assert fs.read("stack_tracer_enabled") == "0\n"
    assert fs.read("stack_max_size") == "0\n"
    text = fs.read("stack_trace")
    assert "#  Stack tracer disabled" in text
    assert not [l for l in fs.read("enabled_functions").splitlines() if "stack_trace_ops" in l]


def test_func_stack_tracer(fs, m):
    """func_stack_tracer.tc: enable, reset, run; the maximum is no longer 0."""
    fs.write("stack_tracer_enabled", "1")
    fs.write("stack_max_size", "0")
    m.start(5)
    assert int(fs.read("stack_max_size")) != 0
    fs.write("stack_tracer_enabled", "0")


def test_deep_recursion_is_the_table(fs, m):
    n = m.__name__
    fs.write("stack_trace_filter", f"{n}.*")
    fs.write("stack_tracer_enabled", "1")
    m.start(3)
    m.start(40)
    fs.write("stack_tracer_enabled", "0")
    nr, rows = table(fs)
    assert nr == len(rows)
    names = [r[3] for r in rows]
    # innermost first: leaf, 41 frames of rec (40 .. 0), start, then this test
    assert names[0] == f"{n}.leaf"
    assert names[1:42] == [f"{n}.rec"] * 41
    assert names[42] == f"{n}.start"
    assert names[43] == f"{__name__}.test_deep_recursion_is_the_table"
    assert not any(x.startswith("fntrace.") for x in names)
    assert [r[0] for r in rows] == list(range(len(rows)))
    depths = [r[1] for r in rows]
    sizes = [r[2] for r in rows]
    assert all(d > 0 for d in sizes)
    for i in range(len(rows) - 1):
        assert depths[i] - depths[i + 1] == sizes[i]
    assert depths[-1] == sizes[-1]
    assert int(fs.read("stack_max_size")) == depths[0]
    # every frame of the same function has the same size
    assert len({sizes[i] for i in range(1, 42)}) == 1
    assert "Stack tracer disabled" not in fs.read("stack_trace")   # a maximum is kept


def test_only_a_deeper_stack_replaces_the_maximum(fs, m):
    n = m.__name__
    fs.write("stack_trace_filter", f"{n}.*")   # not the test's own functions
    fs.write("stack_tracer_enabled", "1")
    m.start(30)
    deep = int(fs.read("stack_max_size"))
    m.start(5)
    assert int(fs.read("stack_max_size")) == deep
    assert table(fs)[0] >= 32
    fs.write("stack_max_size", "0")            # reset: the next stack is the maximum
    m.shallow()
    shallow = int(fs.read("stack_max_size"))
    assert 0 < shallow < deep
    names = [r[3] for r in table(fs)[1]]
    assert names[:2] == [f"{n}.leaf", f"{n}.shallow"]


def test_stack_trace_filter_limits_the_functions_checked(fs, m):
    n = m.__name__
    fs.write("stack_trace_filter", f"{n}.shallow")
    assert fs.read("stack_trace_filter") == f"{n}.shallow\n"
    fs.write("stack_tracer_enabled", "1")
    m.start(30)                                 # no function of it is checked
    assert fs.read("stack_max_size") == "0\n"
    m.shallow()
    assert [r[3] for r in table(fs)[1]][0] == f"{n}.shallow"
    hooked = [l.split(" ")[0] for l in fs.read("enabled_functions").splitlines()
              if "stack_trace_ops" in l]
    assert hooked == [f"{n}.shallow"]


def test_bad_filter_changes_nothing(fs, m):
    n = m.__name__
    fs.write("stack_trace_filter", f"{n}.leaf")
    errlog_check(fs, "ftrace", f"{n}.rec ^{n}.nosuchfn", "stack_trace_filter")
    assert fs.read("stack_trace_filter") == f"{n}.leaf\n"
    with pytest.raises(FntraceError) as ei:
        fs.write("stack_tracer_enabled", "2")
    assert ei.value.errno == errno.EINVAL
    with pytest.raises(FntraceError):
        fs.write("stack_max_size", "lots")


def test_no_cost_while_disabled(fs, m):
    fs.write("stack_tracer_enabled", "1")
    assert [l for l in fs.read("enabled_functions").splitlines() if "stack_trace_ops" in l]
    fs.write("stack_tracer_enabled", "0")
    assert not [l for l in fs.read("enabled_functions").splitlines() if "stack_trace_ops" in l]
    fs.write("stack_max_size", "0")
    m.start(50)
    assert fs.read("stack_max_size") == "0\n"


def test_other_threads_are_measured(fs, m):
    n = m.__name__
    fs.write("stack_trace_filter", f"{n}.*")
    fs.write("stack_tracer_enabled", "1")
    t = threading.Thread(target=m.start, args=(25,))
    t.start()
    t.join()
    names = [r[3] for r in table(fs)[1]]
    assert names.count(f"{n}.rec") == 26
    assert names[-1].startswith("threading.")


def test_top_level_only():
    inst = Tracefs(top=False)
    for name in ("stack_trace", "stack_max_size", "stack_trace_filter", "stack_tracer_enabled"):
        assert inst.kind(name) is None
    top = Tracefs()
    assert top.mode("stack_trace") == 0o444
    assert top.mode("stack_max_size") == 0o644


PROG = """
    import fntrace
    def rec(n):
        return rec(n - 1) if n else 0
    fs = fntrace.tracefs()
    fs.write("stack_tracer_enabled", "1")
    rec(60)
    fs.write("stack_tracer_enabled", "0")
    text = fs.read("stack_trace")
    print(text.splitlines()[0].strip())
    print(sum(1 for l in text.splitlines() if l.endswith("   __main__.rec")))
    print(text.splitlines()[-1].split()[-1])
"""


@pytest.mark.parametrize("pure", ["0", "1"])
def test_in_a_program(tmp_path, pure):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(PROG))
    env = dict(os.environ, FNTRACE_PURE=pure)
    r = run_python(script, env=env)
    assert r.returncode == 0, r.stderr
    head, nrec, last = r.stdout.splitlines()
    assert head == "Depth    Size   Location    (62 entries)"
    assert nrec == "61"
    assert last == "__main__.<module>"


def test_frame_size_counts_the_slots_cpython_counts():
    """frame.__sizeof__() is a fixed header plus (co_nlocalsplus + co_stacksize) slots
    (frame_sizeof in Objects/frameobject.c): the sizes the table shows must differ from
    it by the same constant for every kind of frame - plain, an argument that is a cell,
    free variables, a generator, a module body."""
    from fntrace.tracers.stack import frame_size
    out = []

    def note():
        f = sys._getframe(1)
        out.append(f.__sizeof__() - frame_size(f.f_code))

    def plain(a, b):
        x = a + b
        note()
        return x

    def cellarg(a):
        def inner():
            return a
        note()
        return inner

    def outer():
        y = 1

        def free():
            z = y
            note()
            return z
        return free()

    def gen():
        note()
        yield 1

    plain(1, 2)
    cellarg(1)
    outer()
    list(gen())
    exec("note()", {"note": note})
    assert len(out) == 5 and len(set(out)) == 1, out


def test_native_measure_is_the_python_twin():
    """_native.stack_bytes and tracers/stack.py's _walk give the same bytes for the
    same frame: plain recursion, a generator's frame, a frame under an fntrace one."""
    try:
        from fntrace import _native
    except ImportError:
        pytest.skip("the native module is not built")
    import fntrace.tracers.stack as stack
    seen = []

    def both():
        f = sys._getframe(1)
        seen.append((_native.stack_bytes(f), stack.walk_py(f)))

    def rec(n):
        return rec(n - 1) if n else both()

    def gen():
        both()
        yield 1

    rec(12)
    list(gen())
    exec("both()", {"both": both, "__name__": "fntrace.fake"})
    assert len(seen) == 3
    assert all(a == b and a > 0 for a, b in seen), seen
