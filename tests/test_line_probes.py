"""Line probes, the kprobe of Python: ``p SYM+N``/``p FILE:LINE``, ``r SYM``, through
``dynamic_events``, ``kprobe_events`` and the ``fntrace`` command's ``-e``
(kprobetrace.rst: grammar, default names, the line text, ``-:`` removal; the kernel's
error_log caret for a probe point that is not an instruction boundary)."""
from __future__ import annotations

import errno
import os
import sys
import textwrap

import pytest

from fntrace.errors import FntraceError

from support import entry_texts, errlog_check, run_python, trace_texts

MOD = """
    def work(n):
        \"\"\"Sum below n.\"\"\"
        total = 0
        # a comment

        for i in range(n):
            total += i
        return total


    def other(x):
        y = x + 1
        return y


    def outer(v):
        def inner(q):
            return q * 3
        w = inner(v)
        return w
"""
# line offsets in work: +2 total = 0, +3 comment, +4 blank, +5 for, +6 total += i, +7 return

pytestmark = pytest.mark.usefixtures("new_fs")


@pytest.fixture
def fs(new_fs):
    return new_fs()


@pytest.fixture
def m(write_module):
    return write_module(MOD, hint="lineprobe")


def listing(fs, path="dynamic_events"):
    return fs.read(path).splitlines()


def test_sym_plus_lines_with_a_local_fires_once_per_iteration(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"p {n}.work+6 i total", append=True)
    ev = f"p_{n}_work_6"
    assert listing(fs) == [f"p:kprobes/{ev} {n}.work+6 i=i total=total"]
    assert listing(fs, "kprobe_events") == listing(fs)
    assert set(fs.ls(f"events/kprobes/{ev}")) >= {"enable", "filter", "trigger", "format", "id"}
    fmt = fs.read(f"events/kprobes/{ev}/format")
    assert f"name: {ev}\n" in fmt
    assert "field:unsigned long __probe_ip;" in fmt
    assert " i;" in fmt and " total;" in fmt
    assert 'print fmt: "(%lx) i=%s total=%s", REC->__probe_ip, REC->i, REC->total' in fmt
    fs.write(f"events/kprobes/{ev}/enable", "1")
    assert m.work(3) == 3
    assert m.other(1) == 2
    fs.write(f"events/kprobes/{ev}/enable", "0")
    assert trace_texts(fs) == [f"{ev}: ({n}.work+6) i=0 total=0",
                               f"{ev}: ({n}.work+6) i=1 total=0",
                               f"{ev}: ({n}.work+6) i=2 total=1"]


def test_named_event_group_and_a_local_not_assigned_yet(fs, m):
    n = m.__name__
    fs.write("kprobe_events", f"p:app/start {n}.work+2 n total", append=True)
    assert listing(fs, "kprobe_events") == [f"p:app/start {n}.work+2 n=n total=total"]
    fs.write("events/app/start/enable", "1")
    m.work(2)
    assert trace_texts(fs) == [f"start: ({n}.work+2) n=2 total=(fault)"]


def test_file_line_is_listed_as_sym_plus_lines(fs, m):
    n = m.__name__
    base = os.path.basename(m.__file__)
    # the "y = x + 1" line of other()
    line = m.other.__code__.co_firstlineno + 1
    fs.write("dynamic_events", f"p:kprobes/fl {base}:{line} x", append=True)
    assert listing(fs) == [f"p:kprobes/fl {n}.other+1 x=x"]
    fs.write("events/kprobes/fl/enable", "1")
    m.other(41)
    m.work(2)
    assert trace_texts(fs) == [f"fl: ({n}.other+1) x=41"]


def test_file_line_by_path(fs, m):
    n = m.__name__
    line = m.outer.__code__.co_firstlineno + 3          # "w = inner(v)"
    fs.write("dynamic_events", f"p:kprobes/byp {m.__file__}:{line} v", append=True)
    assert listing(fs) == [f"p:kprobes/byp {n}.outer+3 v=v"]


def test_return_probe_with_retval(fs, m):
    n = m.__name__
    fs.write("kprobe_events", f"r:myret {n}.work n r=$retval", append=True)
    fs.write("dynamic_events", f"r {n}.other $retval", append=True)
    assert listing(fs) == [f"r:kprobes/myret {n}.work n=n r=$retval",
                           f"r:kprobes/r_{n}_other_0 {n}.other arg1=$retval"]
    fs.write("events/kprobes/enable", "1")
    m.work(4)
    m.other(1)
    fs.write("events/kprobes/enable", "0")
    texts = trace_texts(fs)
    assert len(texts) == 2
    assert texts[0].startswith("myret: (") and texts[0].endswith(f" <- {n}.work) n=4 r=6")
    assert texts[1].endswith(f" <- {n}.other) arg1=2")


def test_kprobe_profile_counts_hits_and_misses(fs, m, monkeypatch):
    """probes_profile_seq_show: "  %-44s %15lu %15lu" per p:/r: event (name, hits,
    misses); f: events are not kprobes.  A handler that fails is a miss, not the
    program's exception."""
    n = m.__name__
    fs.write("kprobe_events", f"p:loop {n}.work+6 i\nr:ret {n}.other $retval", append=True)
    fs.write("dynamic_events", f"f:fent {n}.other", append=True)
    assert fs.read("kprobe_profile") == (f"  {'loop':<44} {0:15d} {0:15d}\n"
                                         f"  {'ret':<44} {0:15d} {0:15d}\n")
    fs.write("events/kprobes/enable", "1")
    m.work(3)
    m.other(1)
    from fntrace.events import dynevent
    loop = next(ev for ev in dynevent.events.values() if ev.call.name == "loop")

    def broken(*a, **k):
        raise RuntimeError("a failing handler")
    monkeypatch.setattr(loop.call, "fire", broken)
    assert m.work(2) == 1                    # the program runs on
    fs.write("events/kprobes/enable", "0")
    assert fs.read("kprobe_profile").splitlines() == [
        f"  {'loop':<44} {5:15d} {2:15d}", f"  {'ret':<44} {1:15d} {0:15d}"]


def test_entry_probe_plus_zero(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"p {n}.other+0 x", append=True)
    assert listing(fs) == [f"p:kprobes/p_{n}_other_0 {n}.other+0 x=x"]
    fs.write("events/kprobes/enable", "1")
    m.other(7)
    assert trace_texts(fs) == [f"p_{n}_other_0: ({n}.other+0) x=7"]


@pytest.mark.parametrize("off,near", [
    (1, "+0 (line {f}), +2 (line {f2})"),          # the docstring
    (3, "+2 (line {f2}), +5 (line {f5})"),         # a comment
    (4, "+2 (line {f2}), +5 (line {f5})"),         # a blank line
    (40, "+7 (line {f7})"),                        # beyond the function
])
def test_a_line_without_code_is_refused_with_the_nearest_lines(fs, m, off, near):
    n = m.__name__
    fs.write("dynamic_events", f"p:keep {n}.other+1", append=True)
    before = listing(fs)
    f = m.work.__code__.co_firstlineno
    sym = f"{n}.work"
    log = errlog_check(fs, "trace_kprobe", f"p {sym}^+{off} i", "dynamic_events", append=True)
    assert "Probe point is not an instruction boundary" in log
    assert near.format(f=f, f2=f + 2, f5=f + 5, f7=f + 7) in log, log
    assert f"line {f + off}" in log
    assert listing(fs) == before


def test_file_line_without_code_caret_at_line(fs, m):
    base = os.path.basename(m.__file__)
    line = m.work.__code__.co_firstlineno + 4
    log = errlog_check(fs, "trace_kprobe", f"p {base}:^{line}", "kprobe_events", append=True)
    assert "nearest lines with code" in log


def test_a_line_of_a_nested_function_is_not_the_outer_ones(fs, m):
    n = m.__name__
    f = m.outer.__code__.co_firstlineno
    log = errlog_check(fs, "trace_kprobe", f"p {n}.outer^+2", "dynamic_events", append=True)
    assert f"+1 (line {f + 1}), +3 (line {f + 3})" in log
    # the nested function itself
    fs.write("dynamic_events", f"p:nest {n}.outer.<locals>.inner+1 q", append=True)
    fs.write("events/kprobes/nest/enable", "1")
    m.outer(2)
    assert trace_texts(fs) == [f"nest: ({n}.outer.<locals>.inner+1) q=2"]


@pytest.mark.parametrize("cmd,kind", [
    ("p {n}.work+2 ^nope", "This variable is not found at this probe point"),
    ("p {n}.work+2 ^$retval", "$retval is not available on probe"),
    ("r ^{n}.work+2", "Retprobe address must be an function entry"),
    ("p ^{n}.nothere+2", "Invalid probed address or symbol"),
    ("p:bad.^1 {n}.work+2", "Event name must follow the same rules as C identifiers"),
    ("p {n}.work^%hoge", "Invalid probed address suffix"),
    ("p^5:x {n}.work+2", "Maxactive is only for function exit"),
])
def test_grammar_errors(fs, m, cmd, kind):
    log = errlog_check(fs, "trace_kprobe", cmd.format(n=m.__name__), "dynamic_events",
                       append=True)
    assert kind in log
    assert fs.read("dynamic_events") == ""


def test_remove_and_clear(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:fp {n}.other\np:a {n}.work+6 i\np:b {n}.work+7 total\n",
             append=True)
    fs.write("events/kprobes/enable", "1")
    with pytest.raises(FntraceError) as ei:
        fs.write("dynamic_events", "-:a", append=True)
    assert ei.value.errno == errno.EBUSY
    fs.write("events/kprobes/a/enable", "0")
    fs.write("dynamic_events", "-:a", append=True)
    assert listing(fs) == [f"f:fprobes/fp {n}.other", f"p:kprobes/b {n}.work+7 total=total"]
    assert "a" not in fs.ls("events/kprobes")
    m.work(2)
    assert trace_texts(fs) == [f"b: ({n}.work+7) total=1"]
    fs.write("events/kprobes/b/enable", "0")
    fs.write("kprobe_events", f"p:c {n}.work+2", append=True)
    fs.write("kprobe_events", "-:kprobes/c", append=True)
    with pytest.raises(FntraceError):
        fs.write("kprobe_events", "-:fp", append=True)      # not a kprobe event
    with pytest.raises(FntraceError):
        fs.write("kprobe_events", f"f:nope {n}.work", append=True)
    fs.write("kprobe_events", "")                            # clears p:/r: only
    assert listing(fs) == [f"f:fprobes/fp {n}.other"]
    assert listing(fs, "kprobe_events") == []


def test_removed_probe_costs_nothing_and_others_stay(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"p:a {n}.work+6 i\np:b {n}.work+2 n\n", append=True)
    fs.write("events/kprobes/a/enable", "1")
    m.work(2)                       # line +2 is not probed yet: turned off by DISABLE
    fs.write("events/kprobes/b/enable", "1")
    m.work(1)                       # both fire: +2 is turned on again
    fs.write("events/kprobes/a/enable", "0")
    m.work(1)
    fs.write("events/kprobes/b/enable", "0")
    m.work(1)
    assert trace_texts(fs) == [f"a: ({n}.work+6) i=0", f"a: ({n}.work+6) i=1",
                               f"b: ({n}.work+2) n=1", f"a: ({n}.work+6) i=0",
                               f"b: ({n}.work+2) n=1"]
    if hasattr(sys, "monitoring"):
        # no LINE events are left on the code object, none were put on others
        for f in (m.work, m.other, m.outer):
            ev = sys.monitoring.get_local_events(4, f.__code__) if sys.monitoring.get_tool(4) \
                else 0
            assert not ev & sys.monitoring.events.LINE


def test_other_functions_get_no_line_events(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"p:a {n}.work+6 i", append=True)
    fs.write("events/kprobes/a/enable", "1")
    if hasattr(sys, "monitoring"):
        LINE = sys.monitoring.events.LINE
        assert sys.monitoring.get_local_events(4, m.work.__code__) & LINE
        assert not sys.monitoring.get_local_events(4, m.other.__code__) & LINE
        assert not sys.monitoring.get_events(4) & LINE
    else:
        assert sys.gettrace() is None           # 3.11: only while work() runs
    assert m.other(1) == 2
    assert m.work(2) == 1
    if not hasattr(sys, "monitoring"):
        assert sys.gettrace() is None
    assert trace_texts(fs) == [f"a: ({n}.work+6) i=0", f"a: ({n}.work+6) i=1"]


def test_filter_and_trigger_work_on_a_line_probe(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"p:a {n}.work+6 i total", append=True)
    fs.write("events/kprobes/a/filter", "total > 0")
    fs.write("events/kprobes/a/trigger", "traceoff if i == 3")
    fs.write("events/kprobes/a/enable", "1")
    m.work(6)
    assert trace_texts(fs) == [f"a: ({n}.work+6) i=2 total=1"]
    assert fs.read("tracing_on") == "0\n"


def test_a_probe_on_a_module_imported_later(fs, write_module):
    from fntrace.core.records import record_table
    record_table.install_import_hook()
    name = write_module("def g(z):\n    k = z * 2\n    return k + 1\n", hint="latelp",
                        import_it=False)
    fs.write("dynamic_events", f"p:lateline {name}.g+2 z k\nr:lateret {name}.g $retval\n",
             append=True)
    assert listing(fs) == [f"p:kprobes/lateline {name}.g+2 z=z k=k",
                           f"r:kprobes/lateret {name}.g arg1=$retval"]
    fs.write("events/kprobes/enable", "1")
    import importlib
    mod = importlib.import_module(name)
    assert mod.g(5) == 11
    texts = trace_texts(fs)
    assert texts[0] == f"lateline: ({name}.g+2) z=5 k=10"
    assert texts[1].endswith(f" <- {name}.g) arg1=11")


def test_a_line_without_code_in_a_module_not_imported_yet_is_refused(fs, write_module):
    name = write_module("def g(z):\n\n    return z\n", hint="latelp2", import_it=False)
    log = errlog_check(fs, "trace_kprobe", f"p {name}.g^+1", "dynamic_events", append=True)
    assert "+2 (line 3)" in log


# ---------------------------------------------------------------------------------
# The fntrace command
# ---------------------------------------------------------------------------------

PROG = """
    import sys

    def work(a):
        acc = []
        for i in range(a):
            acc.append(i * i)
        return len(acc)

    def untouched(v):
        return v * 2

    def main():
        total = 0
        for k in range(3):
            total += work(k)
        print("total", total, untouched(total))
        print("program ran", file=sys.stderr)

    main()
"""


def test_cli_record_then_report(run_fntrace, tmp_script, tmp_path):
    script = tmp_script(PROG)
    out = tmp_path / "lp.dat"
    p = run_fntrace("record", "-o", out, "-e", "p __main__.work+3 i acc", "-e",
                    "r:done __main__.work a r=$retval", script)
    assert p.returncode == 0, p.stderr
    plain = run_python(script, cwd=tmp_path)
    assert p.stdout == plain.stdout                   # the program's output unchanged
    assert "program ran" in p.stderr
    r = run_fntrace("report", out)
    assert r.returncode == 0, r.stderr
    texts = entry_texts(r.stdout)
    lines = [t for t in texts if t.startswith("p___main___work_3:")]
    assert lines == ["p___main___work_3: (__main__.work+3) i=0 acc=[]",
                     "p___main___work_3: (__main__.work+3) i=0 acc=[]",
                     "p___main___work_3: (__main__.work+3) i=1 acc=[0]"]
    done = [t for t in texts if t.startswith("done:")]
    assert [d.split(" <- ")[1] for d in done] == [
        "__main__.work) a=0 r=0", "__main__.work) a=1 r=1", "__main__.work) a=2 r=2"]
    assert not any("untouched" in t for t in texts)


def test_cli_file_line(run_fntrace, tmp_script):
    script = tmp_script(PROG)
    src = textwrap.dedent(PROG).splitlines()
    line = next(i for i, l in enumerate(src, 1) if "total += work(k)" in l)
    p = run_fntrace("live", "-e", f"p:kprobes/loop prog.py:{line} k total", script)
    assert p.returncode == 0, p.stderr
    assert entry_texts(p.stdout) == ["loop: (__main__.main+3) k=0 total=0",
                                     "loop: (__main__.main+3) k=1 total=0",
                                     "loop: (__main__.main+3) k=2 total=1"]


def test_cli_refuses_a_blank_line(run_fntrace, tmp_script):
    script = tmp_script(PROG.replace("        acc = []\n", "        acc = []\n\n"))
    bad = "p __main__.work+2"
    p = run_fntrace("live", "-e", bad, script)
    assert p.returncode == 2
    assert "program ran" not in p.stderr
    assert "Probe point is not an instruction boundary" in p.stderr
    assert "+1 (line 5), +3 (line 7)" in p.stderr
    lines = p.stderr.splitlines()
    i = next(k for k, l in enumerate(lines) if l.strip() == bad)
    col = lines[i].index(bad)
    assert lines[i + 1].rstrip() == " " * (col + bad.index("+")) + "^"


# ---------------------------------------------------------------------------------
# Event probes (e:) on an existing event
# ---------------------------------------------------------------------------------

def test_event_probe_on_a_line_probe_and_an_fprobe(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:fent {n}.other x\np:loop {n}.work+6 i total\n", append=True)
    fs.write("dynamic_events", "e:my/ev fprobes.fent xv=$x pid=$common_pid:u32\n"
                               "e kprobes.loop $i t=$total:s64\n", append=True)
    assert listing(fs)[2:] == ["e:my/ev fprobes.fent xv=$x pid=$common_pid:u32",
                               "e:eprobes/loop kprobes.loop i=$i t=$total:s64"]
    assert listing(fs, "kprobe_events") == [f"p:kprobes/loop {n}.work+6 i=i total=total"]
    fs.write("events/my/ev/enable", "1")
    fs.write("events/eprobes/loop/enable", "1")
    m.other(5)
    m.work(2)
    texts = trace_texts(fs)
    head, _, pid = texts[0].partition(" pid=")
    assert head == "ev: (fprobes.fent) xv=0x5" and pid.isdigit()
    assert texts[1:] == ["loop: (kprobes.loop) i=0x0 t=0", "loop: (kprobes.loop) i=0x1 t=0"]
    # the attached events were not enabled: only the event probes' lines
    with pytest.raises(FntraceError) as ei:
        fs.write("dynamic_events", "-:fent", append=True)
    assert ei.value.errno == errno.EBUSY
    fs.write("events/my/ev/enable", "0")
    fs.write("events/eprobes/loop/enable", "0")
    fs.write("dynamic_events", "-:my/ev", append=True)
    fs.write("dynamic_events", "-:eprobes/loop", append=True)
    m.work(2)
    assert len(trace_texts(fs)) == 3
    fs.write("dynamic_events", "-:fent", append=True)


def test_event_probe_filter_on_the_attached_events_fields(fs, m):
    """e: ... if FILTER (trace_eprobe_parse_filter): only the attached event's hits that
    pass; the listing ends with the filter."""
    n = m.__name__
    fs.write("dynamic_events", f"f:fent {n}.other x", append=True)
    fs.write("dynamic_events", "e:big fprobes.fent v=$x:s32 if x >  2 && x != 5",
             append=True)
    assert listing(fs)[1] == "e:eprobes/big fprobes.fent v=$x:s32 if x > 2 && x != 5"
    fs.write("events/eprobes/big/enable", "1")
    for i in range(7):
        m.other(i)
    fs.write("events/eprobes/big/enable", "0")
    assert trace_texts(fs) == [f"big: (fprobes.fent) v={i}" for i in (3, 4, 6)]
    fs.write("dynamic_events", "-:big", append=True)


@pytest.mark.parametrize("cmd,kind", [
    ("e:x ^fprobes.nope", "Attached event does not exist"),
    ("e:x fprobes.fent ^$nofield", "Attached event does not have this field"),
    ("e:x ^fent", "This requires both group and event name to attach"),
    ("e:x fprobes.fent a=$x:^hoge", "Unknown type is specified"),
    ("e:x fprobes.fent $x ^if", "No filter rule after 'if'"),
    ("e:x fprobes.fent $x if x > 1 && nofield ^== 2", "event filter parse error"),
])
def test_event_probe_errors(fs, m, cmd, kind):
    fs.write("dynamic_events", f"f:fent {m.__name__}.other x", append=True)
    log = errlog_check(fs, "trace_eprobe", cmd, "dynamic_events", append=True)
    assert kind in log
    assert len(listing(fs)) == 1


# ---------------------------------------------------------------------------------
# Tracepoint probes (t:) on static events
# ---------------------------------------------------------------------------------

def test_tracepoint_probe_on_a_static_event(fs):
    import gc
    fs.write("dynamic_events", "t gc_start $arg1\n"
                               "t:mygc/end gc:gc_end gen=generation collected:x32\n", append=True)
    assert listing(fs) == ["t:tracepoints/gc_start gc_start generation=generation",
                           "t:mygc/end gc_end gen=generation collected=collected:x32"]
    assert listing(fs, "kprobe_events") == []
    fs.write("events/tracepoints/gc_start/enable", "1")
    fs.write("events/mygc/end/enable", "1")
    gc.collect()
    fs.write("events/tracepoints/gc_start/enable", "0")
    fs.write("events/mygc/end/enable", "0")
    texts = trace_texts(fs)
    assert "gc_start: (gc_start) generation=2" in texts
    assert any(t.startswith("end: (gc_end) gen=2 collected=0x") for t in texts), texts
    # gc:gc_start itself was not enabled: only the probes' lines
    assert all(t.startswith(("gc_start: (gc_start)", "end:")) for t in texts)
    fs.write("dynamic_events", "-:tracepoints/gc_start", append=True)
    fs.write("dynamic_events", "-:mygc/end", append=True)
    assert listing(fs) == []


@pytest.mark.parametrize("cmd,kind", [
    ("t ^nope_tp", "Tracepoint is not found"),
    ("t gc_start ^$arg5", "This variable is not found at this probe point"),
    ("t gc_start ^bogus", "This variable is not found at this probe point"),
    ("t gc_start ^$xyz", "Invalid $-valiable specified"),
])
def test_tracepoint_probe_errors(fs, cmd, kind):
    log = errlog_check(fs, "trace_fprobe", cmd, "dynamic_events", append=True)
    assert kind in log
    assert listing(fs) == []
