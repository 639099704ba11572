"""Event filters, event triggers and the enable files, on fprobe events
(kernel/trace/trace_events.c, trace_events_filter.c, trace_events_trigger.c).

Ports of tools/testing/selftests/ftrace/test.d/:

  ftrace/tracing-error-log.tc      a bad filter: ``event filter parse error`` with the caret
  trigger/trigger-eventonoff.tc    enable_event / disable_event read ``1*`` / ``0*``; unknown
                                   event, bad syntax and a second trigger for the same
                                   event are rejected
  ftrace/func_event_triggers.tc    counted enable/disable_event re-arm exactly N times
                                   (here as event triggers)
  trigger/trigger-filter.tc        ``traceoff if ...``
  event/event-enable.tc, subsystem-enable.tc, toplevel-enable.tc
                                   set_event, events/<grp>/enable, events/enable (``X``)

and events.rst / README: filter grammar (``&&``, ``||``, parentheses, hex, negatives,
globs), ``0`` clears, the trigger file's read format, ``!trigger`` removal, traceon,
traceoff (a count only decrements when the trigger did work), stacktrace, snapshot; the
``fntrace`` command's ``-e ... -f FILTER -T TRIGGER``.  Also: one trigger per trigger
type (traceon and traceoff are both ETT_TRACE_ONOFF: -EEXIST, and ``!traceoff``
removes a traceon), a <stack trace> that ends at the program's __main__ module,
filters nested as deep as a page holds, and writes of a page or more (-EINVAL).
"""
from __future__ import annotations

import errno
import re
import textwrap
import threading

import pytest

from fntrace.errors import FntraceError
from fntrace.tracefs import Tracefs

from support import EVENT_LINE, entry_texts, errlog_check, run_python, trace_texts

MOD = """
    def work(a, name='x'):
        return a

    def caller(a):
        return work(a)

    def target(v):
        return v

    def tick(n):
        return n

    def signal_generate(sig):
        return sig
"""

AVAILABLE = ("# Available triggers:\n"
             "# traceon traceoff snapshot stacktrace enable_event disable_event enable_hist "
             "disable_hist hist\n")


# ---------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------

pytestmark = pytest.mark.usefixtures("new_fs")


@pytest.fixture
def fs(new_fs):
    return new_fs()


@pytest.fixture
def m(write_module):
    return write_module(MOD, hint="trgmod")


@pytest.fixture
def ev(fs, m):
    """fprobes/ev on work(a, name), fprobes/tgt on target(v), fprobes/tk on tick(n)."""
    n = m.__name__
    fs.write("dynamic_events", f"f:ev {n}.work a name\nf:tgt {n}.target v\nf:tk {n}.tick n\n",
             append=True)
    return m


def recorded_a(fs: Tracefs) -> list[int]:
    return [int(re.search(r" a=(-?\d+)", t).group(1)) for t in trace_texts(fs)
            if t.startswith("ev: ")]


def enable_of(fs: Tracefs, event: str) -> str:
    return fs.read(f"events/fprobes/{event}/enable").rstrip("\n")


def trigger_of(fs: Tracefs, event: str = "ev") -> str:
    return fs.read(f"events/fprobes/{event}/trigger")


def tracing_on(fs: Tracefs) -> str:
    return fs.read("tracing_on").strip()


# ---------------------------------------------------------------------------------
# Filters
# ---------------------------------------------------------------------------------

CALLS = [(1, "xa"), (3, "xb"), (5, "yy"), (-1, "xz"), (0x10, "xq"), (-5, "zz"), (4, "x4")]

FILTERS = [
    ('a > 2 && name ~ "x*"', [3, 16, 4]),
    ("a > 2 && name ~ 'x*'", [3, 16, 4]),
    ("(a == 1 || a == 3) && name != \"xb\"", [1]),
    ("a == 1 || a == 5 || a == -5", [1, 5, -5]),
    ("((a >= 3 && a < 5) || a == 16) && name ~ \"x?\"", [3, 16, 4]),
    ("a == 0x10", [16]),
    ("a > 0xf", [16]),
    ("a < 0", [-1, -5]),
    ("a == -5", [-5]),
    ("a >= -1 && a <= 1", [1, -1]),
    ("a & 4", [5, -1, 4]),
    ("!(a > 2)", [1, -1, -5]),
    ('name ~ "*z"', [-1, -5]),
    ('name ~ "[xy]?"', [1, 3, 5, -1, 16, 4]),
    ('name == "yy"', [5]),
    ("name == yy", [5]),
    ('name != "yy" && a != 1', [3, -1, 16, -5, 4]),
]


@pytest.mark.parametrize("flt,want", FILTERS, ids=[f for f, _ in FILTERS])
def test_filter_selects_events(fs, ev, flt, want):
    fs.write("events/fprobes/ev/filter", flt)
    fs.write("events/fprobes/ev/enable", "1")
    for a, name in CALLS:
        assert ev.work(a, name) == a
    assert recorded_a(fs) == want


def test_filter_file_reads_back_and_zero_clears(fs, ev):
    assert fs.read("events/fprobes/ev/filter") == "none\n"
    fs.write("events/fprobes/ev/filter", "a > 2 && name ~ \"x*\"")
    assert fs.read("events/fprobes/ev/filter") == "a > 2 && name ~ \"x*\"\n"
    fs.write("events/fprobes/ev/enable", "1")
    ev.work(1, "xa")
    ev.work(3, "xb")
    fs.write("events/fprobes/ev/filter", "0")
    assert fs.read("events/fprobes/ev/filter") == "none\n"
    ev.work(1, "xa")
    assert recorded_a(fs) == [3, 1]


def test_filter_on_a_return_event(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:wr {n}.work%return a r=$retval", append=True)
    fs.write("events/fprobes/wr/filter", "r >= 3")
    fs.write("events/fprobes/wr/enable", "1")
    for a in (1, 3, 7):
        m.work(a)
    assert [t.split(") ", 1)[1] for t in trace_texts(fs)] == ["a=3 r=3", "a=7 r=7"]


def test_filters_are_per_instance(fs, ev, new_fs):
    other = new_fs()
    fs.write("events/fprobes/ev/filter", "a == 1")
    assert other.read("events/fprobes/ev/filter") == "none\n"
    fs.write("events/fprobes/ev/enable", "1")
    other.write("events/fprobes/ev/enable", "1")
    ev.work(1)
    ev.work(2)
    assert recorded_a(fs) == [1]
    assert recorded_a(other) == [1, 2]


def test_common_fields_in_filters(fs, ev):
    # events.rst: "comm != bash"; every event has the common fields
    fs.write("events/fprobes/ev/filter", 'comm == "MainThread"')
    fs.write("events/fprobes/ev/enable", "1")
    ev.work(1)
    t = threading.Thread(target=ev.work, args=(2,), name="fltthread")
    t.start()
    t.join(60)
    assert recorded_a(fs) == [1]
    fs.write("events/fprobes/ev/filter", 'comm != "MainThread" && comm ~ "*"')
    ev.work(3)
    t = threading.Thread(target=ev.work, args=(4,), name="fltthread2")
    t.start()
    t.join(60)
    assert recorded_a(fs) == [1, 4]
    fs.write("events/fprobes/ev/filter", "common_pid != 0 && common_cpu >= 0")
    ev.work(5)
    assert recorded_a(fs) == [1, 4, 5]


def test_tracing_error_log(fs, m):
    # ftrace/tracing-error-log.tc, on a signal_generate with a sig parameter
    n = m.__name__
    fs.write("dynamic_events", f"f:signal_generate {n}.signal_generate sig", append=True)
    fs.write("events/fprobes/signal_generate/filter", "sig == 9")
    log = errlog_check(fs, "event filter parse error",
                       "((sig >= 10 && sig < 15) || dsig ^== 17) && comm != bash",
                       "events/fprobes/signal_generate/filter")
    assert "Field not found" in log
    # the old filter is left in place
    assert fs.read("events/fprobes/signal_generate/filter") == "sig == 9\n"
    fs.write("events/fprobes/signal_generate/enable", "1")
    m.signal_generate(9)
    m.signal_generate(12)
    assert [t.rsplit("=", 1)[1] for t in trace_texts(fs)] == ["9"]


@pytest.mark.parametrize("bad", [
    "a >> 2",
    "a > 2 &&",
    "(a > 2",
    "a > 2)",
    'name ~ "x*',
    "nosuchfield == 1",
    "a ==",
    "a ~ 1",
    "a > 2 name == 1",
])
def test_bad_filter_is_rejected_and_logged(fs, ev, bad):
    fs.write("events/fprobes/ev/filter", "a == 1")
    fs.write("error_log", "")
    with pytest.raises(FntraceError) as ei:
        fs.write("events/fprobes/ev/filter", bad)
    assert ei.value.errno == errno.EINVAL
    log = fs.read("error_log")
    assert "event filter parse error: error: " in log
    lines = log.splitlines()
    assert lines[-2] == f"  Command: {bad}"
    assert lines[-1].rstrip().endswith("^")
    assert len(lines[-1]) - 12 <= len(bad)      # the caret is within the command
    assert fs.read("events/fprobes/ev/filter") == "a == 1\n"


# ---------------------------------------------------------------------------------
# traceon / traceoff
# ---------------------------------------------------------------------------------

def test_trigger_file_lists_the_available_triggers_when_empty(fs, ev):
    assert trigger_of(fs) == AVAILABLE


def test_traceoff_trigger(fs, ev):
    fs.write("events/fprobes/tk/enable", "1")
    fs.write("events/fprobes/ev/trigger", "traceoff")
    assert trigger_of(fs) == "traceoff:unlimited\n"
    ev.tick(1)
    assert tracing_on(fs) == "1"
    ev.work(1)
    assert tracing_on(fs) == "0"
    ev.tick(2)
    assert trace_texts(fs) == [f"tk: ({ev.__name__}.tick+0) n=1"]
    # removing the trigger leaves tracing off (func_traceonoff_triggers.tc)
    fs.write("events/fprobes/ev/trigger", "!traceoff")
    assert trigger_of(fs) == AVAILABLE
    assert tracing_on(fs) == "0"


def test_traceon_trigger(fs, ev):
    fs.write("events/fprobes/tk/enable", "1")
    fs.write("events/fprobes/ev/trigger", "traceon")
    fs.write("tracing_on", "0")
    ev.tick(1)
    ev.work(1)
    assert tracing_on(fs) == "1"
    ev.tick(2)
    assert trace_texts(fs) == [f"tk: ({ev.__name__}.tick+0) n=2"]
    assert trigger_of(fs) == "traceon:unlimited\n"


def test_counted_traceoff_only_counts_when_it_did_work(fs, ev):
    fs.write("events/fprobes/ev/trigger", "traceoff:2")
    assert trigger_of(fs) == "traceoff:count=2\n"
    ev.work(1)
    assert tracing_on(fs) == "0"
    assert trigger_of(fs) == "traceoff:count=1\n"
    ev.work(1)                                # already off: no work, no count
    assert trigger_of(fs) == "traceoff:count=1\n"
    fs.write("tracing_on", "1")
    ev.work(1)
    assert tracing_on(fs) == "0"
    assert trigger_of(fs) == "traceoff:count=0\n"
    fs.write("tracing_on", "1")
    ev.work(1)                                # used up
    assert tracing_on(fs) == "1"
    assert trigger_of(fs) == "traceoff:count=0\n"
    fs.write("events/fprobes/ev/trigger", "!traceoff:0")
    assert trigger_of(fs) == AVAILABLE


def test_counted_traceon_only_counts_when_it_did_work(fs, ev):
    fs.write("events/fprobes/ev/trigger", "traceon:1")
    ev.work(1)                                # already on: nothing to do
    assert trigger_of(fs) == "traceon:count=1\n"
    fs.write("tracing_on", "0")
    ev.work(1)
    assert tracing_on(fs) == "1"
    assert trigger_of(fs) == "traceon:count=0\n"
    fs.write("tracing_on", "0")
    ev.work(1)
    assert tracing_on(fs) == "0"


def test_trigger_with_a_filter(fs, ev):
    # trigger/trigger-filter.tc: "traceoff if child_pid == 0"
    fs.write("events/fprobes/ev/trigger", "traceoff if a > 1")
    assert trigger_of(fs) == "traceoff:unlimited if a > 1\n"
    ev.work(0)
    ev.work(1)
    assert tracing_on(fs) == "1"
    ev.work(2)
    assert tracing_on(fs) == "0"


def test_counted_trigger_with_a_filter_reads_back(fs, ev):
    fs.write("events/fprobes/ev/trigger", "traceoff:3 if a > 1")
    assert trigger_of(fs) == "traceoff:count=3 if a > 1\n"
    ev.work(1)
    assert trigger_of(fs) == "traceoff:count=3 if a > 1\n"
    ev.work(5)
    assert trigger_of(fs) == "traceoff:count=2 if a > 1\n"
    # removal ignores the filter
    fs.write("events/fprobes/ev/trigger", "!traceoff if a > 7")
    assert trigger_of(fs) == AVAILABLE


@pytest.mark.parametrize("flt", ["a <= 1", "a >= 2 && name == \"x\"", "a == 1 || a == 3"])
def test_trigger_filter_operators(fs, ev, flt):
    # trigger-filter.tc: <=, >=, &&, || are accepted
    fs.write("events/fprobes/ev/trigger", f"traceoff if {flt}")
    assert trigger_of(fs) == f"traceoff:unlimited if {flt}\n"


def test_filters_nest_as_deep_as_a_page_holds(fs, ev):
    # The kernel's filter parser sizes its stacks from the text (calc_stack); the
    # only bound is the write itself, less than a page (event_filter_write).
    deep = "(" * 2040 + "a == 2" + ")" * 2040                       # 4086 characters
    alt = "a == 2"
    while len(alt) < 4000:
        alt = f"a > 0 && (a == 2 || ({alt}))"
    fs.write("events/fprobes/ev/enable", "1")
    for text in (deep, alt, "!(" * 1361 + "a != 2" + ")" * 1361):
        fs.write("events/fprobes/ev/filter", text)
        assert fs.read("events/fprobes/ev/filter") == text + "\n"
        fs.write("trace", "")
        ev.work(1)
        ev.work(2)
        assert recorded_a(fs) == [2], text[:40]
    fs.write("events/fprobes/ev/filter", "0")
    fs.write("events/fprobes/ev/trigger", "traceoff if " + "(" * 2034 + "a == 2" + ")" * 2034)
    ev.work(1)
    assert tracing_on(fs) == "1"
    ev.work(2)
    assert tracing_on(fs) == "0"


@pytest.mark.parametrize("path,text", [
    ("filter", "(" * 2045 + "a == 2" + ")" * 2045),
    ("filter", "a == 2 " * 600),
    ("trigger", "traceoff if " + "(" * 2040 + "a == 2" + ")" * 2040),
])
def test_a_write_of_a_page_or_more_is_einval(fs, ev, path, text):
    assert len(text) >= 4096
    fs.write("events/fprobes/ev/filter", "a == 1")
    fs.write("error_log", "")
    before = (fs.read("events/fprobes/ev/filter"), trigger_of(fs))
    with pytest.raises(FntraceError) as ei:
        fs.write(f"events/fprobes/ev/{path}", text)
    assert ei.value.errno == errno.EINVAL
    assert (fs.read("events/fprobes/ev/filter"), trigger_of(fs)) == before
    assert fs.read("error_log") == ""          # -EINVAL before any parsing: no entry


@pytest.mark.parametrize("bad", ["traceoff if a", "traceoff if common_pid=0",
                                 "traceoff if ==b", "traceoff if a == name",
                                 "traceoff if nosuch == 1", "traceoff if"])
def test_trigger_with_a_bad_filter_is_rejected(fs, ev, bad):
    with pytest.raises(FntraceError):
        fs.write("events/fprobes/ev/trigger", bad)
    assert trigger_of(fs) == AVAILABLE
    # and the event is not in use
    fs.write("dynamic_events", "-:ev", append=True)


# ---------------------------------------------------------------------------------
# stacktrace and snapshot
# ---------------------------------------------------------------------------------

def test_stacktrace_trigger(fs, ev):
    n = ev.__name__
    fs.write("events/fprobes/ev/trigger", "stacktrace")
    fs.write("events/fprobes/ev/enable", "1")
    ev.caller(4)
    lines = [l for l in fs.read("trace").splitlines() if not l.startswith("#")]
    i = next(k for k, l in enumerate(lines) if l.endswith(": <stack trace>"))
    assert EVENT_LINE.match(lines[i])
    assert lines[i + 1] == f" => {n}.work"
    assert lines[i + 2] == f" => {n}.caller"
    assert all(l.startswith(" => ") for l in lines[i + 1:] if not EVENT_LINE.match(l))
    assert f"ev: ({n}.work+0) a=4 name='x'" in trace_texts(fs)
    assert trigger_of(fs) == "stacktrace:unlimited\n"


STACK_MOD = """
    def func(n):
        return n * 1000
"""

STACK_PROG = """
    import fntrace
    import stackmod

    def main():
        return stackmod.func(5)

    if __name__ == "__main__":
        fs = fntrace.tracefs()
        fs.write("dynamic_events", "f:big stackmod.func%return $retval")
        fs.write("events/fprobes/big/trigger", "stacktrace")
        main()
        print(fs.read("trace"), end="")
"""


def _stack_of(out: str) -> list[str]:
    return [l[4:] for l in out.splitlines() if l.startswith(" => ")]


def test_stack_trace_ends_at_the_programs_main_module(tmp_path):
    # A launcher that runs the program as __main__ on top of its own frames (runpy,
    # or fntrace's launcher without its native part): the stack trace is the
    # program's, from the probed function down to its __main__ module, once.
    (tmp_path / "stackmod.py").write_text(textwrap.dedent(STACK_MOD))
    (tmp_path / "prog.py").write_text(textwrap.dedent(STACK_PROG))
    (tmp_path / "launch.py").write_text(
        "import runpy, sys\nrunpy.run_path(sys.argv[1], run_name='__main__')\n")
    for argv in (["prog.py"], ["launch.py", "prog.py"], ["-m", "prog"]):
        p = run_python(*argv, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        assert _stack_of(p.stdout) == ["stackmod.func", "__main__.main", "__main__.<module>"], (
            argv, p.stdout)


@pytest.mark.parametrize("native", [True, False], ids=["native-launcher", "python-launcher"])
def test_cli_stacktrace_trigger_lists_the_program_frames_once(run_fntrace, tmp_path, native):
    (tmp_path / "stackmod.py").write_text(textwrap.dedent(STACK_MOD))
    (tmp_path / "script.py").write_text(
        "import stackmod\ndef main():\n    return stackmod.func(5)\nmain()\n")
    args = ["live", "-e", "f:big stackmod.func%return $retval", "-T", "stacktrace", "script.py"]
    if native:
        p = run_fntrace(*args)
    else:
        # the launcher's fallback when its C part was not built: exec() on top of
        # fntrace's own frames, with the `fntrace` script's __main__ below them
        code = ("import sys\nimport fntrace.cli.target as t\n"
                "if not hasattr(t, '_native_launch'): sys.exit(77)\n"
                "t._native_launch = None\nfrom fntrace.cli.main import main\n"
                f"sys.argv = ['fntrace', *{args!r}]\nsys.exit(main())\n")
        p = run_python("-c", code, cwd=tmp_path)
        if p.returncode == 77:
            pytest.skip("no native launcher to do without")
    assert p.returncode == 0, p.stderr
    assert _stack_of(p.stdout) == ["stackmod.func", "__main__.main", "__main__.<module>"], p.stdout


def test_counted_stacktrace(fs, ev):
    fs.write("events/fprobes/ev/trigger", "stacktrace:1")
    ev.caller(1)
    ev.caller(2)
    assert fs.read("trace").count("<stack trace>") == 1
    assert trigger_of(fs) == "stacktrace:count=0\n"


def test_snapshot_trigger(fs, ev):
    n = ev.__name__
    assert "Snapshot is freed" in fs.read("snapshot")
    fs.write("events/fprobes/tk/enable", "1")
    fs.write("events/fprobes/ev/trigger", "snapshot:1")
    ev.tick(1)
    ev.work(1)
    ev.tick(2)
    ev.work(2)
    snap = trace_texts(fs, "snapshot")
    assert f"tk: ({n}.tick+0) n=1" in snap
    assert f"tk: ({n}.tick+0) n=2" not in snap
    assert trace_texts(fs) == [f"tk: ({n}.tick+0) n=1", f"tk: ({n}.tick+0) n=2"]
    assert trigger_of(fs) == "snapshot:count=0\n"


# ---------------------------------------------------------------------------------
# enable_event / disable_event (trigger-eventonoff.tc, func_event_triggers.tc)
# ---------------------------------------------------------------------------------

def test_enable_event_trigger(fs, ev):
    n = ev.__name__
    assert enable_of(fs, "tgt") == "0"
    fs.write("events/fprobes/ev/trigger", "enable_event:fprobes:tgt")
    assert trigger_of(fs) == "enable_event:fprobes:tgt:unlimited\n"
    assert enable_of(fs, "tgt") == "0*"
    ev.target(1)                               # soft disabled: not recorded
    ev.work(1)
    assert enable_of(fs, "tgt") == "1*"
    ev.target(2)
    assert trace_texts(fs) == [f"tgt: ({n}.target+0) v=2"]


def test_disable_event_trigger(fs, ev):
    n = ev.__name__
    fs.write("events/fprobes/tgt/enable", "1")
    fs.write("events/fprobes/ev/trigger", "disable_event:fprobes:tgt")
    assert trigger_of(fs) == "disable_event:fprobes:tgt:unlimited\n"
    assert enable_of(fs, "tgt") == "1*"
    ev.target(1)
    ev.work(1)
    assert enable_of(fs, "tgt") == "0*"
    ev.target(2)
    assert trace_texts(fs) == [f"tgt: ({n}.target+0) v=1"]


def test_counted_enable_event_rearms_exactly_n_times(fs, ev):
    fs.write("events/fprobes/ev/trigger", "enable_event:fprobes:tgt:3")
    assert trigger_of(fs) == "enable_event:fprobes:tgt:count=3\n"
    for i in range(3):
        fs.write("events/fprobes/tgt/enable", "0")
        assert enable_of(fs, "tgt") == "0*"
        ev.work(i)
        assert enable_of(fs, "tgt") == "1*"
        ev.work(i)                             # already enabled: no count
    assert trigger_of(fs) == "enable_event:fprobes:tgt:count=0\n"
    fs.write("events/fprobes/tgt/enable", "0")
    ev.work(9)
    assert enable_of(fs, "tgt") == "0*"


def test_writing_zero_to_a_soft_mode_event_leaves_it_armed(fs, ev):
    # func_event_triggers.tc resets the target with "echo 0 > enable" and expects the
    # trigger to turn it back on: in soft mode a 0 only soft-disables the event.
    n = ev.__name__
    fs.write("events/fprobes/ev/trigger", "enable_event:fprobes:tgt")
    ev.work(1)
    assert enable_of(fs, "tgt") == "1*"
    fs.write("events/fprobes/tgt/enable", "0")
    assert enable_of(fs, "tgt") == "0*"
    ev.target(1)
    ev.work(2)
    assert enable_of(fs, "tgt") == "1*"
    ev.target(2)
    assert trace_texts(fs) == [f"tgt: ({n}.target+0) v=2"]


def test_counted_disable_event_rearms_exactly_n_times(fs, ev):
    fs.write("events/fprobes/tgt/enable", "1")
    fs.write("events/fprobes/ev/trigger", "disable_event:fprobes:tgt:2")
    for i in range(2):
        fs.write("events/fprobes/tgt/enable", "1")
        assert enable_of(fs, "tgt") == "1*"
        ev.work(i)
        assert enable_of(fs, "tgt") == "0*"
    assert trigger_of(fs) == "disable_event:fprobes:tgt:count=0\n"
    fs.write("events/fprobes/tgt/enable", "1")
    ev.work(9)
    assert enable_of(fs, "tgt") == "1*"


def test_enable_event_on_an_enabled_event_keeps_it_recording(fs, ev):
    # __ftrace_event_enable_disable(): soft mode keeps an enabled event enabled
    n = ev.__name__
    fs.write("events/fprobes/tgt/enable", "1")
    fs.write("events/fprobes/ev/trigger", "enable_event:fprobes:tgt")
    assert enable_of(fs, "tgt") == "1*"
    ev.target(1)
    assert trace_texts(fs) == [f"tgt: ({n}.target+0) v=1"]


def test_disable_event_on_a_disabled_event_does_not_start_it(fs, ev):
    # ... and keeps a disabled event disabled
    fs.write("events/fprobes/ev/trigger", "disable_event:fprobes:tgt")
    assert enable_of(fs, "tgt") == "0*"
    ev.target(1)
    assert trace_texts(fs) == []


def test_enable_event_with_a_filter(fs, ev):
    fs.write("events/fprobes/ev/trigger", "enable_event:fprobes:tgt if a == 3")
    assert trigger_of(fs) == "enable_event:fprobes:tgt:unlimited if a == 3\n"
    ev.work(1)
    assert enable_of(fs, "tgt") == "0*"
    ev.work(3)
    assert enable_of(fs, "tgt") == "1*"


def test_removing_enable_event_ends_soft_mode(fs, ev):
    fs.write("events/fprobes/ev/trigger", "enable_event:fprobes:tgt")
    assert enable_of(fs, "tgt") == "0*"
    fs.write("events/fprobes/ev/trigger", "!enable_event:fprobes:tgt")
    assert enable_of(fs, "tgt") == "0"
    assert trigger_of(fs) == AVAILABLE
    ev.work(1)
    ev.target(1)
    assert enable_of(fs, "tgt") == "0"
    assert trace_texts(fs) == []
    # nothing holds the events any more
    fs.write("dynamic_events", "")
    assert fs.read("dynamic_events") == ""


def test_a_soft_mode_target_is_busy(fs, ev):
    fs.write("events/fprobes/ev/trigger", "enable_event:fprobes:tgt")
    with pytest.raises(FntraceError) as ei:
        fs.write("dynamic_events", "-:tgt", append=True)
    assert ei.value.errno == errno.EBUSY


def second_trigger_is_eexist(fs, first: str, second: str) -> None:
    """``second`` written after ``first`` is refused with EEXIST, the trigger file is
    as it was, and error_log is empty (register_trigger logs nothing)."""
    fs.write("events/fprobes/ev/trigger", first)
    before = trigger_of(fs)
    fs.write("error_log", "")
    with pytest.raises(FntraceError) as ei:
        fs.write("events/fprobes/ev/trigger", second)
    assert ei.value.errno == errno.EEXIST
    assert trigger_of(fs) == before
    assert fs.read("error_log") == ""


@pytest.mark.parametrize("first,second", [
    ("traceoff", "traceoff"),
    ("traceoff", "traceoff:5"),
    ("traceoff:2", "traceoff if a > 1"),
    ("stacktrace", "stacktrace"),
    ("snapshot", "snapshot"),
    ("enable_event:fprobes:tgt", "enable_event:fprobes:tgt"),
    ("enable_event:fprobes:tgt", "enable_event:fprobes:tgt:3"),
    ("disable_event:fprobes:tgt", "disable_event:fprobes:tgt"),
])
def test_a_second_trigger_of_the_same_kind_is_eexist(fs, ev, first, second):
    second_trigger_is_eexist(fs, first, second)
    assert enable_of(fs, "tgt") == ("0*" if "tgt" in first else "0")


@pytest.mark.parametrize("first,second", [
    ("traceon", "traceoff"),
    ("traceoff", "traceon"),
    ("traceon:3", "traceoff if a > 1"),
    ("traceoff if a == 1", "traceon:1"),
])
def test_traceon_and_traceoff_are_one_trigger_type(fs, ev, first, second):
    # trigger_traceon_cmd and trigger_traceoff_cmd share ETT_TRACE_ONOFF, and
    # register_trigger() refuses a second trigger of a type the event has: -EEXIST,
    # nothing changes, and (no parse error) nothing goes to error_log
    second_trigger_is_eexist(fs, first, second)
    assert tracing_on(fs) == "1"
    ev.work(2)
    assert tracing_on(fs) == ("0" if first.startswith("traceoff") and "a == 1" not in first
                              else "1")


@pytest.mark.parametrize("first,second", [
    ("traceon", "stacktrace"),
    ("traceoff", "snapshot"),
    ("stacktrace", "snapshot"),
    ("traceon", "enable_event:fprobes:tgt"),
    ("enable_event:fprobes:tgt", "disable_event:fprobes:tk"),
])
def test_triggers_of_different_types_coexist(fs, ev, first, second):
    fs.write("events/fprobes/ev/trigger", first)
    fs.write("events/fprobes/ev/trigger", second)
    assert sorted(trigger_of(fs).splitlines()) == sorted(
        [f"{first}:unlimited", f"{second}:unlimited"])


def test_removing_traceoff_removes_the_traceon_trigger(fs, ev):
    # unregister_trigger() finds the trigger by its type, not by its command
    fs.write("events/fprobes/ev/trigger", "traceon:2")
    fs.write("events/fprobes/ev/trigger", "!traceoff")
    assert trigger_of(fs) == AVAILABLE
    fs.write("events/fprobes/ev/trigger", "traceoff")
    assert trigger_of(fs) == "traceoff:unlimited\n"


def test_enable_and_disable_event_for_the_same_target_are_exclusive(fs, ev):
    # trigger-eventonoff.tc: after enable_event:sched:sched_switch, both
    # 'enable_event:sched:sched_switch' and 'disable_event:sched:sched_switch' fail
    fs.write("events/fprobes/ev/trigger", "enable_event:fprobes:tgt")
    with pytest.raises(FntraceError):
        fs.write("events/fprobes/ev/trigger", "disable_event:fprobes:tgt")
    assert trigger_of(fs) == "enable_event:fprobes:tgt:unlimited\n"
    assert enable_of(fs, "tgt") == "0*"


def test_triggers_for_different_targets_coexist(fs, ev):
    fs.write("events/fprobes/ev/trigger", "enable_event:fprobes:tgt")
    fs.write("events/fprobes/ev/trigger", "enable_event:fprobes:tk:1")
    fs.write("events/fprobes/ev/trigger", "traceoff if a == 99")
    assert sorted(trigger_of(fs).splitlines()) == [
        "enable_event:fprobes:tgt:unlimited", "enable_event:fprobes:tk:count=1",
        "traceoff:unlimited if a == 99"]


@pytest.mark.parametrize("bad", [
    "enable_event:nogroup:noevent",
    "disable_event+1",
    "enable_event:fprobes",
    "nosuchtrigger",
    "traceoff:abc",
    "traceoff:1:2",
])
def test_bad_triggers_are_rejected(fs, ev, bad):
    with pytest.raises(FntraceError) as ei:
        fs.write("events/fprobes/ev/trigger", bad)
    assert ei.value.errno == errno.EINVAL
    assert trigger_of(fs) == AVAILABLE
    assert enable_of(fs, "tgt") == "0"


@pytest.mark.parametrize("cmd", [
    "enable_event^",
    "enable_event:^fprobes",
    "disable_event:^nogroup:noevent",
    "!  traceoff:1:^2",
    "traceoff:count=3:^x",
    "  traceoff:^abc",
    "traceoff if   nosuch ^== 1",        # one past the name, as parse_pred() says
    "! ^nosuchtrigger",
])
def test_trigger_errors_point_into_the_command(fs, ev, cmd):
    pos = cmd.index("^")
    text = cmd.replace("^", "", 1)
    with pytest.raises(FntraceError) as ei:
        fs.write("events/fprobes/ev/trigger", text)
    assert (ei.value.pos, ei.value.command) == (pos, text)
    assert trigger_of(fs) == AVAILABLE


def test_removing_a_trigger_that_is_not_there_fails(fs, ev):
    with pytest.raises(FntraceError):
        fs.write("events/fprobes/ev/trigger", "!traceoff")
    assert trigger_of(fs) == AVAILABLE


# ---------------------------------------------------------------------------------
# set_event, events/<grp>/enable, events/enable
# ---------------------------------------------------------------------------------

def test_set_event(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:se1 {n}.work a\nf:se2 {n}.tick n\nf:grp2/se3 {n}.target v\n",
             append=True)
    assert fs.read("set_event") == ""
    fs.write("set_event", "fprobes:se1")
    assert fs.read("set_event") == "fprobes:se1\n"
    assert enable_of(fs, "se1") == "1"
    fs.write("set_event", "grp2:se3", append=True)
    assert sorted(fs.read("set_event").splitlines()) == ["fprobes:se1", "grp2:se3"]
    fs.write("set_event", "!fprobes:se1", append=True)
    assert fs.read("set_event") == "grp2:se3\n"
    m.work(1)
    m.target(2)
    assert trace_texts(fs) == [f"se3: ({n}.target+0) v=2"]
    fs.write("set_event", "se2")                  # an event name alone: any group
    assert fs.read("set_event") == "fprobes:se2\n"
    fs.write("set_event", "fprobes:*")
    assert sorted(fs.read("set_event").splitlines()) == ["fprobes:se1", "fprobes:se2"]
    fs.write("set_event", "")
    assert fs.read("set_event") == ""
    with pytest.raises(FntraceError):
        fs.write("set_event", "nogroup:noevent")
    assert fs.read("set_event") == ""


def test_group_and_top_level_enable_files(fs, m):
    n = m.__name__
    fs.write("dynamic_events", f"f:ga1 {n}.work a\nf:ga2 {n}.tick n\nf:other/gb {n}.target v\n",
             append=True)
    assert fs.read("events/fprobes/enable") == "0\n"
    assert fs.read("events/enable") == "0\n"
    fs.write("events/fprobes/enable", "1")
    assert fs.read("events/fprobes/enable") == "1\n"
    assert enable_of(fs, "ga1") == "1" and enable_of(fs, "ga2") == "1"
    assert fs.read("events/other/enable") == "0\n"
    assert fs.read("events/enable") == "X\n"
    fs.write("events/fprobes/ga2/enable", "0")
    assert fs.read("events/fprobes/enable") == "X\n"
    fs.write("events/enable", "1")
    assert fs.read("events/enable") == "1\n"
    assert fs.read("events/other/enable") == "1\n"
    m.work(1)
    m.tick(2)
    m.target(3)
    assert [t.split(":", 1)[0] for t in trace_texts(fs)] == ["ga1", "ga2", "gb"]
    fs.write("events/enable", "0")
    assert fs.read("events/enable") == "0\n"
    assert fs.read("events/fprobes/enable") == "0\n"
    assert fs.read("set_event") == ""


def test_enable_file_refuses_other_values(fs, ev):
    for bad in ("2", "yes", ""):
        with pytest.raises(FntraceError):
            fs.write("events/fprobes/ev/enable", bad)
    assert enable_of(fs, "ev") == "0"


# ---------------------------------------------------------------------------------
# The fntrace command: -e EVENT -f FILTER -T TRIGGER
# ---------------------------------------------------------------------------------

PROG = """
    import sys

    def work(a):
        return a

    def other(x):
        return x

    def main():
        for i in range(5):
            work(i)
        other(9)
        print("program ran", file=sys.stderr)

    main()
"""


def test_cli_event_filter(run_fntrace, tmp_script):
    script = tmp_script(PROG)
    p = run_fntrace("live", "-e", "f __main__.work a", "-f", "a > 1 && a != 3",
                    "-e", "f:oth __main__.other x", script)
    assert p.returncode == 0, p.stderr
    assert entry_texts(p.stdout) == [
        "__main___work__entry: (__main__.work+0) a=2",
        "__main___work__entry: (__main__.work+0) a=4",
        "oth: (__main__.other+0) x=9",
    ]


def test_cli_traceoff_trigger_with_filter(run_fntrace, tmp_script):
    script = tmp_script(PROG)
    p = run_fntrace("live", "-e", "f __main__.work a", "-T", "traceoff if a == 2",
                    "-e", "f:oth __main__.other x", script)
    assert p.returncode == 0, p.stderr
    texts = entry_texts(p.stdout)
    assert texts[:2] == ["__main___work__entry: (__main__.work+0) a=0",
                         "__main___work__entry: (__main__.work+0) a=1"]
    assert not any(t.endswith(("a=3", "a=4")) or t.startswith("oth:") for t in texts)


def test_cli_stacktrace_and_enable_event_triggers(run_fntrace, tmp_script):
    script = tmp_script(PROG)
    p = run_fntrace("live", "-e", "f:oth __main__.other x",
                    "-e", "f:w __main__.work a", "-f", "a == 3",
                    "-T", "stacktrace:1", "-T", "enable_event:fprobes:oth if a == 4", script)
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    i = next(k for k, l in enumerate(out) if l.endswith(": <stack trace>"))
    assert out[i + 1:i + 3] == [" => __main__.work", " => __main__.main"]
    assert out.count(next(l for l in out if l.endswith(": <stack trace>"))) == 1
    texts = entry_texts(p.stdout)
    assert [t for t in texts if t != "<stack trace>"] == [
        "w: (__main__.work+0) a=3", "oth: (__main__.other+0) x=9"]


@pytest.mark.parametrize("args,caret_text,caret", [
    (["-e", "f __main__.work a", "-f", "a >> 2"], "a >> 2", None),
    (["-e", "f __main__.work a", "-f", "nosuch == 1"], "nosuch == 1", None),
    (["-e", "f __main__.work a", "-T", "nosuchtrigger"], "nosuchtrigger", 0),
    (["-e", "f __main__.work a", "-T", "enable_event:nogroup:noevent"], None, None),
])
def test_cli_bad_filter_or_trigger(run_fntrace, tmp_script, args, caret_text, caret):
    script = tmp_script(PROG)
    p = run_fntrace("live", *args, script)
    assert p.returncode == 2
    assert "program ran" not in p.stderr
    assert p.stdout == ""
    lines = p.stderr.splitlines()
    assert lines[0].startswith("fntrace: ")
    if caret_text is not None:
        i = next(k for k, l in enumerate(lines) if l.strip() == caret_text)
        col = lines[i].index(caret_text)
        assert lines[i + 1].strip() == "^"
        pos = len(lines[i + 1]) - 1 - col
        assert 0 <= pos <= len(caret_text)
        if caret is not None:
            assert pos == caret


def test_cli_filter_without_event_is_a_usage_error(run_fntrace, tmp_script):
    script = tmp_script(PROG)
    p = run_fntrace("live", "-f", "a > 1", script)
    assert p.returncode == 2
    assert "program ran" not in p.stderr
