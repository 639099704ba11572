"""tracefs files of every instance and of the top level, in process, against the
kernel's strings (kernel/trace/trace.c):

  trace_clock            tracing_clock_show / tracing_set_clock; 00basic/basic3.tc (every
                         clock can be selected and then shows in brackets)
  per_thread/<tid>/      the kernel's per_cpu/cpuN/: trace, trace_pipe, stats
                         (tracing_stats_read)
  saved_cmdlines(_size)  saved_cmdlines_show: "<pid> <comm>"
  buffer_total_size_kb   tracing_total_entries_read
  README                 the mini-HOWTO names every file the top level has
"""
from __future__ import annotations

import errno
import re
import threading
import time

import pytest

import fntrace
from fntrace import ring_buffer
from fntrace.core import ops as core_ops
from fntrace.errors import FntraceError
from fntrace.ring_buffer import RECORD_SIZE, TRACE_CLOCKS
from fntrace.core.task import thread_cpu
from fntrace.tracefs import Tracefs

from support import errno_of, reset_tracefs_instance

MOD_SRC = """
    def outer():
        return inner() + 1

    def inner():
        return 1
"""

CLOCKS_LINE = "local global counter uptime perf mono mono_raw boot"
# trace_print_context() with a nanosecond clock, and with counter/uptime (" %12llu: ")
NS_LINE = re.compile(r"^ *\S.*-\d+ +\[\d{3}\]  +(\d+)\.(\d{6}): (.*)$")
RAW_LINE = re.compile(r"^ *\S.*-\d+ +\[\d{3}\]  ( *\d+): (.*)$")


@pytest.fixture
def mod(write_module):
    return write_module(MOD_SRC, hint="tffmod")


@pytest.fixture
def fs():
    t = Tracefs()
    yield t
    try:
        reset_tracefs_instance(t)
    finally:
        core_ops.reset_for_tests()


def body(text: str) -> list[str]:
    return [l for l in text.splitlines() if l and not l.startswith("#")]


def on_thread(fn, name: str = "worker") -> int:
    """Run fn on a new thread named ``name``; its native id."""
    tid = []

    def run():
        tid.append(threading.get_native_id())
        fn()
    t = threading.Thread(target=run, name=name)
    t.start()
    t.join()
    return tid[0]


# ---------------------------------------------------------------------------------
# trace_clock
# ---------------------------------------------------------------------------------

def test_trace_clock_reads_as_the_kernel_prints_it(fs):
    assert fs.read("trace_clock") == "[local] " + CLOCKS_LINE.split(" ", 1)[1] + "\n"
    assert tuple(CLOCKS_LINE.split()) == TRACE_CLOCKS


@pytest.mark.parametrize("clock", CLOCKS_LINE.split())
def test_basic3_every_clock_can_be_selected(fs, clock):
    fs.write("trace_clock", clock)
    line = fs.read("trace_clock")
    assert f"[{clock}]" in line
    assert line.count("[") == 1 and line.endswith("\n")
    assert line.replace("[", "").replace("]", "") == CLOCKS_LINE + "\n"
    fs.write("trace_marker", f"on {clock}")
    text = fs.read("trace")
    (line,) = body(text)
    if clock in ("counter", "uptime"):
        m = RAW_LINE.match(line)
        assert m, line
        assert m.group(2) == f"tracing_mark_write: on {clock}"
    else:
        m = NS_LINE.match(line)
        assert m, line
        assert m.group(3) == f"tracing_mark_write: on {clock}"


def test_unknown_clock_is_einval_and_changes_nothing(fs):
    fs.write("trace_clock", "mono")
    fs.write("trace_marker", "kept")
    assert errno_of(fs.write, "trace_clock", "x86-tsc") == errno.EINVAL
    assert errno_of(fs.write, "trace_clock", "") == errno.EINVAL
    assert "[mono]" in fs.read("trace_clock")
    assert "kept" in fs.read("trace")


def test_setting_a_clock_clears_the_buffers_and_the_snapshot(fs):
    fs.write("trace_marker", "before")
    fs.write("snapshot", "1")
    assert "before" in fs.read("snapshot")
    fs.write("trace_clock", "global")
    assert body(fs.read("trace")) == []
    assert "before" not in fs.read("snapshot")
    fs.write("trace_marker", "after")
    assert [l.split(": ", 1)[1] for l in body(fs.read("trace"))] == ["tracing_mark_write: after"]


def test_counter_clock_counts_each_event(fs, mod):
    m = mod.__name__
    fs.write("trace_clock", "counter")
    fs.write("set_ftrace_filter", f"{m}.outer {m}.inner")
    fs.write("current_tracer", "function")
    for _ in range(3):
        mod.outer()
    fs.write("tracing_on", "0")
    lines = body(fs.read("trace"))
    assert len(lines) == 6
    counts = [int(RAW_LINE.match(l).group(1)) for l in lines]
    # one count per event, in order, printed as " %12llu"
    assert counts == list(range(counts[0], counts[0] + 6))
    assert all(RAW_LINE.match(l).group(1) == f"{c:12d}" for l, c in zip(lines, counts))
    # the stats file shows the raw count too
    tid = threading.get_native_id()
    stats = fs.read(f"per_thread/{tid}/stats")
    assert re.search(rf"^oldest event ts: {counts[0]}$", stats, re.M), stats


def test_function_graph_durations_under_every_clock(fs, mod):
    """The record's timestamp is the trace clock's, the duration the one measured."""
    m = mod.__name__
    fs.write("set_ftrace_filter", f"{m}.outer {m}.inner")
    fs.write("current_tracer", "function_graph")
    for clock in ("counter", "uptime", "mono_raw", "boot"):
        fs.write("trace_clock", clock)
        mod.outer()
        lines = body(fs.read("trace"))
        assert any(re.search(r"\d+\.\d+ us +\| +\S*" + re.escape(f"{m}.inner();"), l)
                   for l in lines), (clock, lines)
        closing = [l for l in lines if l.rstrip().endswith("}")]
        assert closing and re.search(r" (\d+)\.\d+ us +\|", closing[0]), (clock, lines)
        us = int(re.search(r" (\d+)\.\d+ us +\|", closing[0]).group(1))
        assert 0 <= us < 5_000_000, (clock, lines)


def test_boot_and_mono_raw_read_their_clocks(fs):
    for clock, cid in (("boot", time.CLOCK_BOOTTIME), ("mono_raw", time.CLOCK_MONOTONIC_RAW)):
        fs.write("trace_clock", clock)
        before = time.clock_gettime_ns(cid) // 1000
        fs.write("trace_marker", "x")
        after = time.clock_gettime_ns(cid) // 1000 + 1
        m = NS_LINE.match(body(fs.read("trace"))[0])
        usecs = int(m.group(1)) * 1_000_000 + int(m.group(2))
        assert before <= usecs <= after, (clock, before, usecs, after)


def test_uptime_counts_hundredths_since_boot(fs):
    fs.write("trace_clock", "uptime")
    fs.write("trace_marker", "x")
    ticks = int(RAW_LINE.match(body(fs.read("trace"))[0]).group(1))
    assert abs(ticks - time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 10_000_000) <= 2


def test_instances_have_clocks_of_their_own(fs):
    fs.mkdir("instances/c")
    try:
        fs.write("instances/c/trace_clock", "counter")
        assert "[local]" in fs.read("trace_clock")
        assert "[counter]" in fs.read("instances/c/trace_clock")
        fs.write("trace_marker", "top")
        fs.write("instances/c/trace_marker", "inst")
        assert NS_LINE.match(body(fs.read("trace"))[0])
        assert RAW_LINE.match(body(fs.read("instances/c/trace"))[0])
    finally:
        fs.rmdir("instances/c")


def test_clock_twins_agree():
    """The native and Python readings of each clock (FNTRACE_PURE=1 uses the latter)."""
    py = ring_buffer._py_trace_clock_now
    nat = ring_buffer.trace_clock_now
    for cid, name in enumerate(TRACE_CLOCKS):
        if name == "counter":
            a, b = py(cid), py(cid)
            assert b == a + 1
            a, b = nat(cid), nat(cid)
            assert b == a + 1
            continue
        a = py(cid)
        b = nat(cid)
        c = py(cid)
        assert a <= b <= c, name


# ---------------------------------------------------------------------------------
# per_thread/<tid>/
# ---------------------------------------------------------------------------------

STATS = re.compile(r"""\Aentries: (\d+)
overrun: (\d+)
commit overrun: 0
bytes: (\d+)
oldest event ts: +(\d+)\.(\d{6})
now ts: +(\d+)\.(\d{6})
dropped events: (\d+)
read events: (\d+)
\Z""")


def test_per_thread_files(fs):
    fs.write("trace_marker", "main 1")
    fs.write("trace_marker", "main 2")
    wtid = on_thread(lambda: fs.write("trace_marker", "worker 1"), name="pt-worker")
    me = threading.get_native_id()
    assert fs.kind("per_thread") == "dir"
    assert set(fs.ls("per_thread")) == {str(me), str(wtid)}
    assert fs.ls(f"per_thread/{me}") == ["buffer_size_kb", "stats", "trace", "trace_pipe"]
    assert fs.mode(f"per_thread/{me}/stats") == 0o444
    assert fs.kind("per_thread/1/trace") is None
    mine = body(fs.read(f"per_thread/{me}/trace"))
    assert [l.split(": ", 1)[1] for l in mine] == ["tracing_mark_write: main 1",
                                                   "tracing_mark_write: main 2"]
    theirs = body(fs.read(f"per_thread/{wtid}/trace"))
    assert [l.split(": ", 1)[1] for l in theirs] == ["tracing_mark_write: worker 1"]
    assert theirs[0].lstrip().startswith(f"pt-worker-{wtid} ")
    # stats, line for line
    st = STATS.match(fs.read(f"per_thread/{me}/stats"))
    assert st, fs.read(f"per_thread/{me}/stats")
    assert int(st.group(1)) == 2 and int(st.group(3)) == 2 * RECORD_SIZE
    assert st.group(8) == "0" and st.group(9) == "0"
    oldest = int(st.group(4)) * 10**6 + int(st.group(5))
    now = int(st.group(6)) * 10**6 + int(st.group(7))
    assert 0 < oldest <= now <= time.monotonic_ns() // 1000 + 1
    # a consuming read of one thread's pipe leaves the other's records
    piped = fs.read(f"per_thread/{me}/trace_pipe")
    assert "main 1" in piped and "main 2" in piped and "worker" not in piped
    st = STATS.match(fs.read(f"per_thread/{me}/stats"))
    assert st.group(1) == "0" and st.group(9) == "2"
    assert "worker 1" in fs.read("trace")
    assert "main 1" not in fs.read("trace")
    # echo > per_thread/TID/trace clears that thread's buffer only
    fs.write(f"per_thread/{wtid}/trace", "")
    assert body(fs.read(f"per_thread/{wtid}/trace")) == []


def test_per_thread_stats_counts_overruns_and_drops(fs):
    fs.write("buffer_size_kb", "1")          # 32 records
    for i in range(40):
        fs.write("trace_marker", f"m{i}")
    me = threading.get_native_id()
    st = STATS.match(fs.read(f"per_thread/{me}/stats"))
    assert (st.group(1), st.group(2), st.group(8)) == ("32", "8", "0")
    fs.write("trace", "")
    fs.write("options/overwrite", "0")
    for i in range(40):
        fs.write("trace_marker", f"m{i}")
    st = STATS.match(fs.read(f"per_thread/{me}/stats"))
    assert (st.group(1), st.group(2), st.group(8)) == ("32", "0", "8")


# ---------------------------------------------------------------------------------
# saved_cmdlines, buffer_total_size_kb
# ---------------------------------------------------------------------------------

def test_saved_cmdlines_lists_threads_as_pid_comm(fs):
    wtid = on_thread(lambda: fs.write("trace_marker", "hi"), name="cmdline-thread")
    lines = fs.read("saved_cmdlines").splitlines()
    assert f"{wtid} cmdline-thread" in lines
    assert all(re.fullmatch(r"\d+ \S.*", l) for l in lines), lines
    assert fs.read("saved_cmdlines_size") == "128\n"
    fs.write("saved_cmdlines_size", "1")
    assert fs.read("saved_cmdlines_size") == "1\n"
    assert fs.read("saved_cmdlines").splitlines() == [lines[-1]]
    for bad in ("0", "abc", "-1", "32769"):
        assert errno_of(fs.write, "saved_cmdlines_size", bad) == errno.EINVAL
    assert fs.read("saved_cmdlines_size") == "1\n"
    fs.write("saved_cmdlines_size", "128")


def test_buffer_total_size_kb_sums_the_thread_buffers(fs):
    assert fs.read("buffer_total_size_kb") == "0\n"
    fs.write("buffer_size_kb", "4")
    fs.write("trace_marker", "a")
    assert fs.read("buffer_total_size_kb") == "4\n"
    on_thread(lambda: fs.write("trace_marker", "b"))
    # the ended thread's buffer shrank to the record it holds
    total = int(fs.read("buffer_total_size_kb"))
    assert total == 4 + sum((b.nrec * RECORD_SIZE) >> 10 for b in fs.tr.buffers.values()
                            if b.cpu != thread_cpu())
    fs.write("buffer_size_kb", "8")
    assert int(fs.read("buffer_total_size_kb")) == 8 * len(fs.tr.buffers)


def test_per_thread_buffer_size_kb_resizes_one_thread(fs):
    """per_cpu/cpuN/buffer_size_kb: one buffer resized; the top-level file then reads
    "X" (tracing_entries_read), until a top-level write sizes them all again."""
    fs.write("trace_marker", "a")
    tid = threading.get_native_id()
    f = f"per_thread/{tid}/buffer_size_kb"
    assert fs.read(f) == fs.read("buffer_size_kb") == "1408\n"
    fs.write(f, "704")
    assert fs.read(f) == "704\n"
    assert fs.read("buffer_size_kb") == "X\n"
    with pytest.raises(FntraceError) as e:
        fs.write(f, "zero")
    assert e.value.errno == errno.EINVAL and fs.read(f) == "704\n"
    fs.write("buffer_size_kb", "64")
    assert fs.read(f) == fs.read("buffer_size_kb") == "64\n"


# ---------------------------------------------------------------------------------
# README
# ---------------------------------------------------------------------------------

def test_readme_names_every_top_level_file():
    fs = fntrace.tracefs()
    readme = fs.read("README")
    assert readme.startswith("tracing mini-HOWTO")
    missing = [n for n in fs.ls() if n != "README" and not re.search(rf"(^|\s){re.escape(n)}(/|\s|\t|$)", readme, re.M)]
    assert not missing, missing
    for name in ("instances", "trace_clock", "per_thread", "set_ftrace_pid",
                 "function_profile_enabled", "stack_trace", "stack_max_size",
                 "stack_trace_filter", "saved_cmdlines_size", "buffer_total_size_kb",
                 "enable_event:<system>:<event>", "cpudump"):
        assert name in readme, name
    # an instance has no README (top level only, as the kernel's)
    fs.mkdir("instances/nor")
    try:
        assert errno_of(fs.read, "instances/nor/README") == errno.ENOENT
    finally:
        fs.rmdir("instances/nor")


@pytest.mark.parametrize("clock,raw", [("counter", True), ("uptime", True), ("boot", False),
                                       (None, False)])
def test_report_prints_a_trace_files_times_in_its_clock(clock, raw):
    """The trace file's closing stats name the clock (fntrace record); the report
    prints counter and uptime timestamps raw, the others as seconds.microseconds."""
    import io

    from fntrace.cli.report import report_text
    from fntrace.ring_buffer import RECORD, TRACE_FN
    from fntrace.tracefile import TraceFile, TraceFileWriter

    buf = io.BytesIO()
    w = TraceFileWriter(buf, {"tracer": "function"})
    w.add_symbols([(100, "mod.f", "mod.py", 1), (101, "mod.g", "mod.py", 5)])
    w.add_thread(0, 4242, "MainThread")
    w.write_chunk(0, b"".join(RECORD.pack(ts, TRACE_FN, 0, 100, 101, 0, 0)
                              for ts in (7, 8, 1_500_000_000)), 0)
    w.close({"trace_clock": clock} if clock else {})
    lines = body("\n".join(report_text(TraceFile(buf.getvalue()))))
    assert len(lines) == 3, lines
    if raw:
        assert [RAW_LINE.match(l).group(1) for l in lines] == [
            f"{7:12d}", f"{8:12d}", f"{1_500_000_000:12d}"]
    else:
        assert [NS_LINE.match(l).group(1, 2) for l in lines] == [
            ("0", "000000"), ("0", "000000"), ("1", "500000")]


# ---------------------------------------------------------------------------------
# Numbers too long for int(), names no file system has: EINVAL, never a traceback
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["set_event_pid", "set_ftrace_pid", "tracing_thresh",
                                  "max_graph_depth", "saved_cmdlines_size"])
def test_a_number_of_thousands_of_digits_is_einval_and_changes_nothing(fs, path):
    # int() refuses strings of more than 4300 digits with ValueError: that was raised
    # through the write (over the control socket: errno 5, "internal error")
    before = fs.read(path)
    for huge in ("9" * 9600, "1" + "0" * 20):          # past 4300 digits; past 2**64
        with pytest.raises(FntraceError) as e:
            fs.write(path, huge + "\n")
        assert e.value.errno == errno.EINVAL and len(str(e.value)) < 200
        assert fs.read(path) == before
    fs.write(path, "00000000000000000000000000000007")  # leading zeros are still 7
    assert fs.read(path).split() == ["7"]
    if path in ("tracing_thresh", "max_graph_depth", "set_event_pid", "set_ftrace_pid"):
        entry = fs.read("error_log").splitlines()
        assert entry[-1].strip() == "^" and "Command: 1000" in entry[-2]


def test_an_instance_name_with_a_lone_surrogate_is_einval(fs):
    with pytest.raises(FntraceError) as e:
        fs.mkdir("instances/a\ud800b")
    assert e.value.errno == errno.EINVAL and "lone surrogate" in str(e.value)
    assert "a\ud800b" not in fs.instances
    str(e.value).encode("utf-8")          # the message itself can be printed
