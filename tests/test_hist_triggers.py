"""Hist triggers and synthetic events (events/hist.py, events/synth.py), black-box
through the tracefs files and the command line, against Documentation/trace/
histogram.rst's grammar and the text trace_events_hist.c prints.

The kernel's own selftests for these (trigger/trigger-hist*.tc, trigger/inter-event/)
run as ports in tests/ftracetest; these tests pin the details: each line's exact
layout, every modifier, size and drops, named histograms, pause/cont/clear,
variables read once, onmatch/onmax/onchange with trace/save/snapshot, the
synthetic_events grammar, error_log with the caret, and that no code of the program
runs when a key is made.
"""
from __future__ import annotations

import errno
import re
import textwrap

import pytest

from fntrace.errors import FntraceError

from support import errlog_check, trace_texts

MOD = """
    def work(n, name='x'):
        return n

    def start(rid, v):
        return rid

    def end(rid, v):
        return rid

    def other(n):
        return n

    class Sneaky:
        def __hash__(self):
            raise RuntimeError("hash ran")
        def __eq__(self, other):
            raise RuntimeError("eq ran")
        def __repr__(self):
            raise RuntimeError("repr ran")
"""

pytestmark = pytest.mark.usefixtures("new_fs")

HEAD = re.compile(r"^# event histogram\n#\n# trigger info: (?P<info>.*)\n#\n\n", re.M)
TOTALS = re.compile(r"\nTotals:\n    Hits: (\d+)\n    Entries: (\d+)\n    Dropped: (\d+)\n$")


@pytest.fixture
def fs(new_fs):
    return new_fs()


@pytest.fixture
def m(fs, write_module):
    m = write_module(MOD, hint="histmod")
    n = m.__name__
    fs.write("dynamic_events", f"f:w {n}.work n name\nf:st {n}.start rid v\n"
                               f"f:en {n}.end rid v\nf:o {n}.other n\n", append=True)
    return m


def trig(fs, ev: str, cmd: str, append: bool = True) -> None:
    sysname = "synthetic" if ev in SYNTHS else "fprobes"
    fs.write(f"events/{sysname}/{ev}/trigger", cmd, append=append)


SYNTHS = ("lat", "wakeup", "big")


def hist(fs, ev: str = "w") -> str:
    sysname = "synthetic" if ev in SYNTHS else "fprobes"
    return fs.read(f"events/{sysname}/{ev}/hist")


def rows(text: str) -> list[str]:
    return [l for l in text.splitlines() if l.startswith("{ ")]


def totals(text: str) -> tuple[int, int, int]:
    mt = TOTALS.search(text)
    assert mt, text
    return tuple(int(x) for x in mt.groups())


# -- the table -------------------------------------------------------------------------

def test_hist_file_reads_as_the_kernel_prints_it(fs, m):
    trig(fs, "w", "hist:keys=name:vals=n")
    for i in range(10):
        m.work(i, "even" if i % 2 == 0 else "odd")
    text = hist(fs)
    want = ("# event histogram\n#\n"
            "# trigger info: hist:keys=name:vals=hitcount,n:sort=hitcount:size=2048 [active]\n"
            "#\n\n"
            "{ name: " + "even".ljust(50) + " } hitcount:          5  n:         20\n"
            "{ name: " + "odd".ljust(50) + " } hitcount:          5  n:         25\n"
            "\nTotals:\n    Hits: 10\n    Entries: 2\n    Dropped: 0\n")
    assert text == want
    # the trigger file lists it as the trigger info reads
    assert fs.read("events/fprobes/w/trigger") == \
        "hist:keys=name:vals=hitcount,n:sort=hitcount:size=2048 [active]\n"


def test_a_string_key_with_a_newline_stays_on_its_line(fs, m):
    trig(fs, "w", "hist:keys=name")
    m.work(1, "two\nlines\tand\x01")
    assert rows(hist(fs)) == ["{ name: " + "two\\nlines\\tand\\x01".ljust(50)
                              + " } hitcount:          1"]

def test_an_event_without_a_hist_trigger_has_an_empty_hist_file(fs, m):
    assert hist(fs) == ""
    assert "hist" in fs.ls("events/fprobes/w")


def test_hitcount_only_and_numeric_key_width(fs, m):
    trig(fs, "w", "hist:keys=n")
    for i in (3, 3, 3, 12345):
        m.work(i)
    assert rows(hist(fs)) == ["{ n:      12345 } hitcount:          1",
                              "{ n:          3 } hitcount:          3"]


def test_sort_descending_and_two_sort_keys(fs, m):
    trig(fs, "w", "hist:keys=name,n:sort=name,n.descending")
    for name, n in (("b", 1), ("a", 1), ("a", 2), ("b", 3), ("a", 2)):
        m.work(n, name)
    keys = [re.sub(r"\s+", " ", r.split("}")[0]) for r in rows(hist(fs))]
    assert keys == ["{ name: a , n: 2 ", "{ name: a , n: 1 ", "{ name: b , n: 3 ",
                    "{ name: b , n: 1 "]
    assert ":sort=name,n.descending:" in fs.read("events/fprobes/w/trigger")


@pytest.mark.parametrize("mod, values, want", [
    ("hex", [255, 255, 16], ["{ n: 10 } hitcount:          1", "{ n: ff } hitcount:          2"]),
    ("log2", [1, 2, 3, 4, 900], ["{ n: ~ 2^10 } hitcount:          1",
                                 "{ n: ~ 2^0  } hitcount:          1",
                                 "{ n: ~ 2^1  } hitcount:          1",
                                 "{ n: ~ 2^2  } hitcount:          2"]),
    ("buckets=10", [1, 9, 10, 25], ["{ n: ~ 10-19 } hitcount:          1",
                                    "{ n: ~ 20-29 } hitcount:          1",
                                    "{ n: ~ 0-9 } hitcount:          2"]),
])
def test_key_modifiers(fs, m, mod, values, want):
    trig(fs, "w", f"hist:keys=n.{mod}")
    for v in values:
        m.work(v)
    got = rows(hist(fs))
    # ties are unordered (the kernel's sort is not stable either): compare as sets
    # where the hitcounts tie, in order otherwise
    assert sorted(got) == sorted(want)
    counts = [int(r.rsplit(":", 1)[1]) for r in got]
    assert counts == sorted(counts)
    assert f"keys=n.{mod}:" in fs.read("events/fprobes/w/trigger")


def test_execname_sym_and_stacktrace_keys(fs, m):
    trig(fs, "w", "hist:keys=common_pid.execname")
    trig(fs, "o", "hist:keys=n.sym")
    trig(fs, "st", "hist:keys=common_stacktrace")
    import threading
    t = threading.Thread(target=m.work, args=(1,), name="worker-th")
    t.start()
    t.join()
    m.work(2)
    r = rows(hist(fs))
    assert any(re.fullmatch(r"\{ common_pid: worker-th {7}\[ *\d+\] \} hitcount: +1", x)
               for x in r), r
    m.other(m.work)                     # a function object: keyed by its address
    (line,) = rows(hist(fs, "o"))
    assert re.fullmatch(r"\{ n: \[[0-9a-f]+\] " + re.escape(f"{m.__name__}.work")
                        + r" +\} hitcount: +1", line), line
    m.start(1, 2)
    text = hist(fs, "st")
    assert "{ common_stacktrace:\n         " in text and "} hitcount:          1" in text
    assert "test_hist_triggers.test_execname_sym_and_stacktrace_keys" in text


def test_percent_and_graph_values(fs, m):
    trig(fs, "w", "hist:keys=name:vals=hitcount.percent,n.graph:sort=name")
    for n, name in ((1, "a"), (3, "b"), (3, "b"), (4, "b")):
        m.work(n, name)
    assert rows(hist(fs)) == [
        "{ name: " + "a".ljust(50) + " } hitcount:          1  hitcount (%):  25.00  n: " + " " * 18 + "##",
        "{ name: " + "b".ljust(50) + " } hitcount:          3  hitcount (%):  75.00  n: " + "#" * 20,
    ]


def test_expression_value_and_usecs(fs, m):
    trig(fs, "w", "hist:keys=name:t=common_timestamp.usecs:d=n*2+1")
    m.work(5, "k")
    text = hist(fs)
    # variables are kept, not shown as values
    assert rows(text) == ["{ name: " + "k".ljust(50) + " } hitcount:          1"]
    assert "t=common_timestamp.usecs,d=n*2+1" in text


def test_size_rounds_up_and_entries_beyond_it_are_dropped(fs, m):
    trig(fs, "w", "hist:keys=n:size=100")
    for i in range(200):
        m.work(i)
    text = hist(fs)
    assert ":size=128 " in text
    assert totals(text) == (200, 128, 72)


def test_filter_on_the_trigger(fs, m):
    trig(fs, "w", 'hist:keys=n if name == "yes"')
    m.work(1, "yes")
    m.work(2, "no")
    text = hist(fs)
    assert totals(text) == (1, 1, 0)
    assert ' if name == "yes" [active]' in fs.read("events/fprobes/w/trigger")


def test_several_hist_triggers_on_one_event(fs, m):
    trig(fs, "w", "hist:keys=n")
    trig(fs, "w", "hist:keys=name")
    m.work(1)
    text = hist(fs)
    assert text.count("# event histogram") == 2
    assert "Dropped: 0\n\n\n# event histogram" in text


def test_pause_continue_clear_and_remove(fs, m):
    trig(fs, "w", "hist:keys=n")
    m.work(1)
    trig(fs, "w", "hist:keys=n:pause")
    assert fs.read("events/fprobes/w/trigger").endswith("[paused]\n")
    m.work(1)
    assert totals(hist(fs))[0] == 1
    trig(fs, "w", "hist:keys=n:cont")
    m.work(1)
    assert totals(hist(fs))[0] == 2
    trig(fs, "w", "hist:keys=n:clear")
    assert totals(hist(fs)) == (0, 0, 0)
    trig(fs, "w", "!hist:keys=n")
    assert hist(fs) == ""
    assert fs.read("events/fprobes/w/trigger").startswith("# Available triggers:")


def test_a_new_trigger_written_paused_starts_paused(fs, m):
    trig(fs, "w", "hist:keys=n:pause")
    m.work(1)
    assert totals(hist(fs))[0] == 0


def test_cont_or_clear_of_nothing_and_a_second_same_trigger_fail(fs, m):
    with pytest.raises(FntraceError) as ei:
        trig(fs, "w", "hist:keys=n:cont")
    assert ei.value.errno == errno.ENOENT
    assert "Can't clear or continue a nonexistent hist trigger" in fs.read("error_log")
    trig(fs, "w", "hist:keys=n")
    with pytest.raises(FntraceError) as ei:
        trig(fs, "w", "hist:keys=n")
    assert ei.value.errno == errno.EEXIST
    assert "Hist trigger already exists" in fs.read("error_log")
    assert fs.read("events/fprobes/w/trigger").count("hist:") == 1


def test_named_hist_is_shared_by_two_events(fs, m):
    trig(fs, "w", "hist:name=both:keys=n")
    trig(fs, "o", "hist:name=both:keys=n")
    m.work(1)
    m.other(1)
    m.other(2)
    for ev in ("w", "o"):
        text = hist(fs, ev)
        assert "trigger info: hist:both:keys=n:" in text
        assert totals(text) == (3, 2, 0)
    with pytest.raises(FntraceError):
        trig(fs, "st", "hist:name=both:keys=rid,v")
    assert "Named hist trigger doesn't match existing named trigger" in fs.read("error_log")


def test_enable_hist_and_disable_hist(fs, m):
    trig(fs, "w", "hist:keys=n")
    trig(fs, "o", "disable_hist:fprobes:w")
    trig(fs, "st", "enable_hist:fprobes:w")
    m.other(0)
    m.work(1)                            # paused: not counted
    assert totals(hist(fs))[0] == 0
    m.start(1, 1)
    m.work(1)
    assert totals(hist(fs))[0] == 1
    assert fs.read("events/fprobes/o/trigger") == "disable_hist:fprobes:w:unlimited\n"


def test_a_program_object_as_a_key_runs_none_of_its_code(fs, m, capsys):
    trig(fs, "w", "hist:keys=n")
    s = m.Sneaky()
    assert m.work(s) is s
    (line,) = rows(hist(fs))
    assert "Sneaky object at 0x" in line
    assert "hash ran" not in capsys.readouterr().err


# -- errors: the kernel's text in error_log, the caret under the place -------------------

@pytest.mark.parametrize("cmd, msg", [
    ("hist:keys=^nope", "Couldn't find field"),
    ("hist:keys=n.^bogus", "Invalid field modifier"),
    ("hist:keys=n:vals=n.^log2", "Invalid field modifier"),
    ("hist:keys=n:sort=^nope", "Sort field must be a key or a val"),
    ("hist:keys=n:^sort=n,hitcount,n", "Too many sort fields (Max = 2)"),
    ("hist:keys=n:sort=n.^bogus", "Invalid sort modifier"),
    ("hist:keys=n:size=^5", "size must be a number from 128 to 131072"),
    ("hist:keys=n:x=n/^0", "Division by zero"),
    ("hist:keys=n:x=^n+n+n+n+n", "Too many subexpressions (3 max)"),
    ("hist:keys=n:^x=", "Empty assignment"),
    ("hist:keys=n:x=^$nosuch", "Couldn't find variable"),
    ("hist:keys=n:vals=^comm", "Couldn't create histogram for field"),
    ("hist:keys=n:x=n,^x=n", "Variable already defined"),
    ("hist:keys=n:x=n:onmax(^x).save(n)", "For onmax(x) or onchange(x), x must be a variable"),
    ("hist:keys=n:onmatch(^nosys).trace(lat,n)", "Missing subsystem"),
    ("hist:keys=n:onmatch(^fprobes.nosuch).trace(lat,n)", "Invalid subsystem or event name"),
    ("hist:keys=n:onmatch(fprobes.o).trace(^nosynth,n)", "Couldn't find synthetic event"),
])
def test_hist_errors_are_logged_with_the_caret(fs, m, cmd, msg):
    log = errlog_check(fs, "hist:fprobes:w", cmd, "events/fprobes/w/trigger", append=True)
    assert f"error: {msg}\n" in log
    assert hist(fs) == ""               # nothing half-applied


# -- variables, synthetic events, actions -------------------------------------------------

def test_synthetic_events_file_grammar(fs, m):
    fs.write("synthetic_events", "wakeup u64 lat; pid_t pid; char comm[16]", append=True)
    fs.write("dynamic_events", "s:big int a; unsigned long b; char[] s", append=True)
    assert fs.read("synthetic_events") == \
        "wakeup\tu64 lat; pid_t pid; char[16] comm\nbig\tint a; unsigned long b; char[] s\n"
    assert "s:synthetic/big\tint a; unsigned long b; char[] s\n" in fs.read("dynamic_events")
    fmt = fs.read("events/synthetic/wakeup/format")
    assert 'print fmt: "lat=%llu, pid=%d, comm=%.*s"' in fmt
    assert "synthetic:wakeup" in fs.read("available_events")
    fs.write("synthetic_events", "!wakeup", append=True)
    fs.write("dynamic_events", "-:synthetic/big", append=True)
    assert fs.read("synthetic_events") == ""


@pytest.mark.parametrize("cmd, msg", [
    ("^9bad u64 x", "Illegal name"),
    ("ok ^u99 x", "Invalid type"),
    # (the kernel's own selftest's positions: a first part of fewer than 3 words is
    # INVALID_CMD at 0, an array spec error points at the field)
    ("^ok u64", "Command must be of the form: <name> field[;field] ..."),
    ("ok u64 x; ^u64", "Invalid field"),
    ("ok char ^x[9999]", "Invalid array specification"),
    ("ok u64 x; u64 ^x", "Invalid field"),
])
def test_synthetic_errors(fs, m, cmd, msg):
    log = errlog_check(fs, "synthetic_events", cmd, "synthetic_events", append=True)
    assert f"error: {msg}\n" in log
    assert fs.read("synthetic_events") == ""


def test_a_synthetic_event_in_use_cannot_go(fs, m):
    fs.write("synthetic_events", "lat u64 d", append=True)
    fs.write("events/synthetic/lat/enable", "1")
    with pytest.raises(FntraceError) as ei:
        fs.write("synthetic_events", "!lat", append=True)
    assert ei.value.errno == errno.EBUSY
    fs.write("events/synthetic/lat/enable", "0")
    fs.write("synthetic_events", "!lat", append=True)


def test_onmatch_trace_makes_a_latency_from_two_events(fs, m):
    """The histogram.rst wakeup-latency recipe, with deterministic "timestamps": v."""
    fs.write("synthetic_events", "lat u64 d; int rid", append=True)
    trig(fs, "st", "hist:keys=rid:v0=v")
    trig(fs, "en", "hist:keys=rid:d=v-$v0:onmatch(fprobes.st).trace(lat,$d,rid)")
    trig(fs, "lat", "hist:keys=d:sort=d")
    fs.write("events/synthetic/lat/enable", "1")
    for rid, a, b in ((1, 100, 130), (2, 200, 210), (3, 5, 35)):
        m.start(rid, a)
        m.end(rid, b)
    m.end(9, 50)                        # no start for rid 9: no latency
    m.end(1, 500)                       # $v0 was read once: no second latency
    assert rows(hist(fs, "lat")) == ["{ d:         10 } hitcount:          1",
                                     "{ d:         30 } hitcount:          2"]
    lines = [t for t in trace_texts(fs) if t.startswith("lat: ")]
    assert lines == ["lat: d=30 rid=1", "lat: d=10 rid=2", "lat: d=30 rid=3"]
    # the reading trigger counts only hits whose variables were all set
    assert totals(hist(fs, "en"))[0] == 3
    # a trigger whose variable another reads cannot go first
    with pytest.raises(FntraceError) as ei:
        trig(fs, "st", "!hist:keys=rid:v0=v")
    assert ei.value.errno == errno.EBUSY


def test_onmatch_with_the_synthetic_name_as_action(fs, m):
    fs.write("synthetic_events", "lat u64 d", append=True)
    trig(fs, "st", "hist:keys=rid:v0=v")
    trig(fs, "en", "hist:keys=rid:d=v-$v0:onmatch(fprobes.st).lat($d)")
    fs.write("events/synthetic/lat/enable", "1")
    m.start(1, 1)
    m.end(1, 8)
    assert "lat: d=7" in trace_texts(fs)


def test_onmax_save_keeps_the_fields_of_the_max(fs, m):
    trig(fs, "w", "hist:keys=name:x=n:onmax($x).save(n,name)")
    for n in (3, 9, 4):
        m.work(n, "k")
    text = hist(fs)
    assert "{ name: " + "k".ljust(50) + " } hitcount:          3\n\tmax:          9  n:          9"\
        "  name: k" + " " * 31 + "\n" in text
    assert ":onmax($x).save(n,name) [active]" in text


def test_onchange_snapshot(fs, m):
    trig(fs, "w", "hist:keys=name:x=n:onchange($x).snapshot()")
    fs.write("current_tracer", "function")
    fs.write("set_ftrace_filter", f"{m.__name__}.work")
    m.work(1, "k")
    m.work(1, "k")
    m.work(4, "k")
    text = hist(fs)
    assert "\tchanged:          4" in text
    assert ("\nSnapshot taken (see tracing/snapshot).  Details:\n\ttriggering value "
            "{ onchange($x) }:          4\ttriggered by event with key: { name: k") in text
    snap = fs.read("snapshot")
    assert snap.count(f"{m.__name__}.work <-") == 3
    fs.write("current_tracer", "nop")


# -- the command line ----------------------------------------------------------------------

PROG = """
    import time

    def handle(route, n):
        return n * 2

    for i in range(30):
        handle("/a" if i % 3 else "/b", i % 4)
    print("done")
"""


def test_record_then_fntrace_hist(tmp_path, run_fntrace):
    (tmp_path / "app.py").write_text(textwrap.dedent(PROG))
    r = run_fntrace("record", "-o", "t.dat", "-e", "f:h __main__.handle route n",
                    "-T", "hist:keys=route:vals=n:sort=route", "app.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done\n"
    h = run_fntrace("hist", "t.dat", cwd=tmp_path)
    assert h.returncode == 0, h.stderr
    assert rows(h.stdout) == [
        "{ route: " + "/a".ljust(50) + " } hitcount:         20  n:         28",
        "{ route: " + "/b".ljust(50) + " } hitcount:         10  n:         15"]
    assert h.stdout.startswith("# event histogram\n")
    none = run_fntrace("hist", "t.dat", "gc:*", cwd=tmp_path)
    assert none.returncode == 1 and "no hist trigger was set for gc:*" in none.stderr


def test_live_prints_a_latency_histogram(tmp_path, run_fntrace):
    (tmp_path / "app.py").write_text(textwrap.dedent(PROG))
    r = run_fntrace(
        "live", "-e", "s:lat u64 us; char[] route",
        "-e", "f:hin __main__.handle route",
        "-T", "hist:keys=common_pid:ts0=common_timestamp.usecs:r=route",
        "-e", "f:hout __main__.handle%return",
        "-T", "hist:keys=common_pid:d=common_timestamp.usecs-$ts0:"
              "onmatch(fprobes.hin).trace(lat,$d,$r)",
        "-e", "synthetic:lat", "-T", "hist:keys=route,us.log2:sort=route,us",
        "app.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "# events/synthetic/lat/hist\n# event histogram\n" in r.stdout
    section = r.stdout.split("# events/synthetic/lat/hist\n", 1)[1].split("\n# events/", 1)[0]
    counts = {}
    for line in rows(section):
        route = line.split("route: ")[1].split()[0]
        counts[route] = counts.get(route, 0) + int(line.rsplit(":", 1)[1])
    assert counts == {"/a": 20, "/b": 10}
    assert totals(section) [0] == 30


def test_bad_hist_on_the_command_line_is_a_usage_error(tmp_path, run_fntrace):
    (tmp_path / "app.py").write_text(textwrap.dedent(PROG))
    r = run_fntrace("record", "-o", "t.dat", "-e", "f:h __main__.handle route n",
                    "-T", "hist:keys=route:vals=nope", "app.py", cwd=tmp_path)
    assert r.returncode != 0
    assert "Couldn't find field" in r.stderr and "^" in r.stderr
    assert "Traceback" not in r.stderr
    assert "done" not in r.stdout              # refused before the program ran


# -- on every kind of event ----------------------------------------------------------------

def test_hist_on_a_static_event(fs, tmp_path):
    trig_path = "events/audit/open/trigger"
    fs.write(trig_path, "hist:keys=mode:sort=mode")
    for i in range(3):
        (tmp_path / f"f{i}").write_text("x")
        with open(tmp_path / f"f{i}") as fh:
            fh.read()
    with open(tmp_path / "f0", "rb") as fh:
        fh.read()
    r = rows(fs.read("events/audit/open/hist"))
    counts = {line.split("mode: ")[1].split()[0]: int(line.rsplit(":", 1)[1]) for line in r}
    # (the audit event names FileIO's mode: "rb" opens as "r")
    assert counts.get("r", 0) >= 4 and counts.get("w", 0) >= 3, r


def test_hist_on_a_line_probe(fs, m):
    # work's body is its line +1: "return n"
    fs.write("dynamic_events", f"p:kprobes/wl {m.__name__}.work+1 n", append=True)
    fs.write("events/kprobes/wl/trigger", "hist:keys=n.buckets=10")
    for i in range(25):
        m.work(i)
    assert sorted(rows(fs.read("events/kprobes/wl/hist"))) == sorted([
            "{ n: ~ 20-29 } hitcount:          5",
            "{ n: ~ 0-9 } hitcount:         10",
            "{ n: ~ 10-19 } hitcount:         10"])
    fs.write("events/kprobes/wl/trigger", "!hist:keys=n.buckets=10")
    fs.write("dynamic_events", "-:kprobes/wl", append=True)


def test_trace_marker_latency_the_kernels_example(fs):
    """histogram.rst section 3: a latency between two trace_marker writes."""
    fs.write("synthetic_events", "latency u64 lat")
    fs.write("events/ftrace/print/trigger",
             'hist:keys=common_pid:ts0=common_timestamp.usecs if buf == "start"')
    fs.write("events/ftrace/print/trigger",
             'hist:keys=common_pid:lat=common_timestamp.usecs-$ts0:'
             'onmatch(ftrace.print).latency($lat) if buf == "end"', append=True)
    fs.write("events/synthetic/latency/trigger", "hist:keys=lat,common_pid:sort=lat")
    for _ in range(3):
        fs.write("trace_marker", "start")
        fs.write("trace_marker", "end")
    text = fs.read("events/synthetic/latency/hist")
    assert totals(text)[0] == 3
    assert all(re.fullmatch(r"\{ lat: +\d+, common_pid: +\d+ \} hitcount: +\d+", r)
               for r in rows(text)), text


def test_a_field_of_the_matching_event_is_a_field_variable(fs, m):
    """onmatch(...).trace(..., SYS.EVENT.FIELD): a trigger on that event keeps the field
    (synthetic_FIELD), listed there, gone with the trigger that made it."""
    fs.write("synthetic_events", "lat u64 d; int started_with", append=True)
    trig(fs, "st", "hist:keys=rid:v0=v")
    cmd = "hist:keys=rid:d=v-$v0:onmatch(fprobes.st).trace(lat,$d,fprobes.st.v)"
    trig(fs, "en", cmd)
    fs.write("events/synthetic/lat/enable", "1")
    assert "hist:keys=rid:vals=hitcount:synthetic_v=v:" in fs.read("events/fprobes/st/trigger")
    m.start(1, 100)
    m.end(1, 130)
    assert "lat: d=30 started_with=100" in trace_texts(fs)
    assert "synthetic_v=v" in hist(fs, "st")
    trig(fs, "en", "!" + cmd)
    assert "synthetic_v" not in fs.read("events/fprobes/st/trigger")
    assert "synthetic_v" not in hist(fs, "st")


def test_a_field_variable_needs_a_hist_trigger_on_its_event(fs, m):
    fs.write("synthetic_events", "lat u64 d", append=True)
    log = errlog_check(fs, "hist:fprobes:en",
                       "hist:keys=rid:onmatch(fprobes.o).trace(lat,^fprobes.o.n)",
                       "events/fprobes/en/trigger", append=True)
    assert "error: Couldn't create field variable\n" in log
    assert hist(fs, "en") == "" and hist(fs, "o") == ""


# -- clock= --------------------------------------------------------------------------------

def test_a_timestamp_trigger_runs_its_instance_on_its_clock(fs, m):
    """hist_register_trigger(): reading common_timestamp switches the instance to the
    trigger's clock (global when clock= is not given), the trigger info names it, and
    common_timestamp is read from that clock."""
    assert "[local]" in fs.read("trace_clock")
    trig(fs, "w", "hist:keys=name:vals=n")             # no timestamp: nothing changes
    assert "[local]" in fs.read("trace_clock")
    assert ":clock=" not in fs.read("events/fprobes/w/trigger")
    trig(fs, "st", "hist:keys=rid:t0=common_timestamp.usecs")
    assert "[global]" in fs.read("trace_clock")
    assert ":size=2048:clock=global [active]" in fs.read("events/fprobes/st/trigger")
    # the counter clock counts events: a timestamp key made from it is a small count,
    # where a nanosecond clock's would be a large number
    trig(fs, "o", "hist:keys=common_timestamp:clock=counter")
    assert "[counter]" in fs.read("trace_clock")
    assert ":clock=counter [active]" in fs.read("events/fprobes/o/trigger")
    for i in range(3):
        m.other(i)
    stamps = [int(r.split(":")[1].split("}")[0]) for r in rows(hist(fs, "o"))]
    assert len(stamps) == 3 and all(s < 10_000_000 for s in stamps), stamps


def test_a_clock_there_is_none_of_fails_and_changes_nothing(fs, m):
    fs.write("trace", "")
    log = errlog_check(fs, "hist:fprobes:w", "hist:keys=n:clock=^x86-tsc",
                       "events/fprobes/w/trigger", append=True)
    assert "error: Couldn't set trace_clock\n" in log
    assert "[local]" in fs.read("trace_clock")
    assert hist(fs) == ""
