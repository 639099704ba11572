"""``fntrace report`` filters applied when reading (output/filters.py, cli/filters.py):
-F/-N, --tid/--thread/--cpu, --from/--to, with -D/--thresh.

The reference for -F/-N is the recording-time filter of the same name: a whole
recording filtered at report time must print what the filtered recording prints
(timestamps and durations aside, since they are two runs):

    report -F GLOB   function trace       record -F GLOB        (set_ftrace_filter)
    report -F GLOB   function_graph       record -g GLOB        (set_graph_function)
    report -N GLOB   function_graph       record --graph-notrace GLOB (set_graph_notrace)
"""
from __future__ import annotations

import re
from decimal import Decimal

import pytest

from support import fn_lines

PROG = """
import threading

def leaf(x):
    return x * 2

def mid(n):
    s = 0
    for i in range(n):
        s += leaf(i)
    return s

def other():
    return mid(2)

def main():
    for k in range(3):
        mid(k + 2)
    other()
    t = threading.Thread(target=other, name="worker")
    t.start()
    t.join()

main()
"""


@pytest.fixture
def rec(tmp_script, run_fntrace, tmp_path):
    """rec(name, *record options): record PROG into NAME, return its path."""
    prog = tmp_script(PROG)

    def run(name: str, *opts: str):
        r = run_fntrace("record", *opts, "-o", name, prog)
        assert r.returncode == 0, r.stderr
        return tmp_path / name
    return run


def report(run_fntrace, *args) -> str:
    r = run_fntrace("report", *map(str, args))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return r.stdout


def graph_body(text: str) -> list[str]:
    """The graph lines with the duration column masked (two runs differ there)."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        cpu, _, rest = line.partition(")")
        _, bar, body = rest.partition("|")
        assert bar, line
        out.append(f"{cpu.strip()}) |{body.rstrip()}")
    return out


def fn_body(text: str) -> list[tuple[str, int, str]]:
    """(thread, slot, function line) of a function trace, times and ids masked."""
    return [(f.comm, f.cpu, f"{f.func} <-{f.parent}" if f.parent is not None else f.func)
            for f in fn_lines(text)]


def test_F_on_a_function_trace_is_record_F(rec, run_fntrace):
    full = rec("f.dat", "-p", "function", "-F", "__main__.*")
    only = rec("leaf.dat", "-p", "function", "-F", "__main__.leaf", "-F", "__main__.other")
    got = fn_body(report(run_fntrace, full, "-F", "__main__.leaf", "-F", "*.other"))
    assert got == fn_body(report(run_fntrace, only))
    assert len(got) == 2 + 4 + 5 + 2 + 2       # other twice, leaf 2+3+4+2+2 times
    assert {r for _, _, r in got} == {"__main__.leaf <-__main__.mid",
                                      "__main__.other <-__main__.main",
                                      "__main__.other <-threading.Thread.run"}
    # -N wins over -F
    got = fn_body(report(run_fntrace, full, "-F", "__main__.*", "-N", "*.leaf", "-N", "*.main"))
    assert got and not any("leaf <-" in r or "main <-" in r for _, _, r in got)
    # globs are set_ftrace_filter's: ?, [..], a*b
    assert fn_body(report(run_fntrace, full, "-F", "__main__.[lm]*[fd]")) == \
        fn_body(report(run_fntrace, full, "-F", "*.leaf", "-F", "*.mid"))
    assert fn_body(report(run_fntrace, full, "-F", "__main__.?id")) == \
        fn_body(report(run_fntrace, full, "-F", "__main__.mid"))


def test_F_on_a_graph_trace_is_set_graph_function(rec, run_fntrace):
    """-F keeps the call and everything under it, from depth 0: what -g records."""
    full = rec("g.dat", "-p", "function_graph", "-F", "__main__.*")
    g = rec("gf.dat", "-p", "function_graph", "-F", "__main__.*", "-g", "__main__.mid")
    got = graph_body(report(run_fntrace, full, "-F", "__main__.mid"))
    assert got == graph_body(report(run_fntrace, g))
    # five calls of mid (three from main, one under each other), each with its leaves
    assert sum(1 for line in got if line.endswith("|  __main__.mid() {")) == 5
    assert not any("main()" in line or "other()" in line for line in got)
    # a match inside a match belongs to the outer one
    got = graph_body(report(run_fntrace, full, "-F", "*.other", "-F", "*.leaf"))
    assert "0) |  __main__.other() {" in got and "0) |    __main__.mid() {" in got
    assert got.count("0) |      __main__.leaf();") == 2     # under other, at depth 2
    assert "0) |  __main__.leaf();" in got                   # main's mids' leaves, at 0


def test_N_on_a_graph_trace_is_set_graph_notrace(rec, run_fntrace):
    full = rec("g.dat", "-p", "function_graph", "-F", "__main__.*")
    n = rec("gn.dat", "-p", "function_graph", "-F", "__main__.*", "--graph-notrace",
            "__main__.mid")
    got = graph_body(report(run_fntrace, full, "-N", "__main__.mid"))
    assert got == graph_body(report(run_fntrace, n))
    assert not any("mid" in line or "leaf" in line for line in got)
    assert "0) |    __main__.other();" in got                  # now a leaf
    # -N wins over -F: other() without mid
    got = graph_body(report(run_fntrace, full, "-F", "*.other", "-N", "*.mid"))
    assert got == ["0) |  __main__.other();", "1) |  __main__.other();"]


def test_depth_and_threshold_count_from_the_match(rec, run_fntrace):
    full = rec("g.dat", "-p", "function_graph", "-F", "__main__.*")
    got = graph_body(report(run_fntrace, full, "-F", "*.other", "-D", "1"))
    assert got == ["0) |  __main__.other();", "1) |  __main__.other();"]
    got = graph_body(report(run_fntrace, full, "-F", "*.other", "-D", "2"))
    assert got.count("0) |    __main__.mid();") == 1
    # --thresh: returns only, as the kernel's tracing_thresh
    got = graph_body(report(run_fntrace, full, "-F", "*.other", "--thresh", "0", "-D", "1"))
    assert len(got) == 2
    assert graph_body(report(run_fntrace, full, "--thresh", "100000000")) == []


def test_threads(rec, run_fntrace):
    f = rec("f.dat", "-p", "function", "-F", "__main__.*")
    text = report(run_fntrace, f)
    tids = {comm.strip(): int(pid) for comm, pid in
            re.findall(r"^ *(\S+)-(\d+) +\[", text, re.M)}
    worker = fn_body(report(run_fntrace, f, "--tid", tids["worker"]))
    assert worker and {c for c, _, _ in worker} == {"worker"}
    assert fn_body(report(run_fntrace, f, "--thread", "work*")) == worker
    assert fn_body(report(run_fntrace, f, "--cpu", "1")) == worker
    # several are ORed; different kinds must all hold
    both = fn_body(report(run_fntrace, f, "--tid", tids["worker"], "--tid", tids["MainThread"]))
    assert both == fn_body(text)
    assert fn_body(report(run_fntrace, f, "--thread", "Main*", "--cpu", "1")) == []
    g = rec("g.dat", "-p", "function_graph", "-F", "__main__.*")
    lines = graph_body(report(run_fntrace, g, "--thread", "MainThread"))
    assert lines and all(line.startswith("0)") for line in lines)


def stamps(text: str) -> list[Decimal]:
    return [Decimal(t) for t in re.findall(r"\]\s+(\d+\.\d{6}):", text)]


def test_time_window(rec, run_fntrace):
    f = rec("f.dat", "-p", "function", "-F", "__main__.*")
    text = report(run_fntrace, f)
    ts = stamps(text)
    all_lines = fn_body(text)
    assert len(ts) == len(all_lines) > 10
    lo, hi = ts[3], ts[-4]
    got = report(run_fntrace, f, "--from", lo, "--to", hi)
    want = [line for t, line in zip(ts, all_lines) if lo <= t <= hi]
    assert fn_body(got) == want and all(lo <= t <= hi for t in stamps(got))
    # --to keeps every entry printed with that microsecond
    got = report(run_fntrace, f, "--to", ts[0])
    assert fn_body(got) == [line for t, line in zip(ts, all_lines) if t == ts[0]]
    # relative to the first event
    assert fn_body(report(run_fntrace, f, "--from", "+0")) == all_lines
    a, b = ts[2] - ts[0] + Decimal("0.000001"), ts[-3] - ts[0]
    got = report(run_fntrace, f, "--from", f"+{a}", "--to", f"+{b}")
    sub = fn_body(got)
    assert sub and len(sub) < len(all_lines)
    assert any(all_lines[i:i + len(sub)] == sub               # a contiguous stretch
               for i in range(len(all_lines) - len(sub) + 1))
    one_us = Decimal("0.000001")
    assert all(ts[0] + a - one_us <= t <= ts[0] + b + one_us for t in stamps(got))
    # a graph trace cut by the window: the calls it cuts print as the kernel prints a
    # call whose entry or return is not in the buffer
    g = rec("g.dat", "-p", "function_graph", "-F", "__main__.*")
    gl = graph_body(report(run_fntrace, g, "--from", "+0", "--to", "+0.000001"))
    assert gl[0] == "0) |  __main__.main() {" and len(gl) < 10


EVENTS_PROG = """
def leaf(x):
    return x * 2

def mid(n):
    s = 0
    for i in range(n):
        s += leaf(i)
    return s

def other():
    return mid(2)

def main():
    mid(3)
    other()

main()
"""


def test_events_follow_their_call(tmp_script, run_fntrace):
    prog = tmp_script(EVENTS_PROG)
    r = run_fntrace("record", "-p", "function_graph", "-F", "__main__.*",
                    "-e", "f __main__.leaf x", "-o", "e.dat", prog)
    assert r.returncode == 0, r.stderr
    ev = "__main___leaf__entry:"
    assert report(run_fntrace, "e.dat").count(ev) == 5
    got = report(run_fntrace, "e.dat", "-F", "*.other")
    assert got.count(ev) == 2 and "x=0" in got and "x=2" not in got
    assert report(run_fntrace, "e.dat", "-N", "*.leaf").count(ev) == 0
    # a trace of events only: -F selects functions; events are kept
    r = run_fntrace("record", "-e", "f __main__.leaf x", "-o", "n.dat", prog)
    assert r.returncode == 0, r.stderr
    assert report(run_fntrace, "n.dat", "-F", "*.mid").count(ev) == 5


def test_another_module_by_glob(run_fntrace, tmp_path):
    """The issue's case: report -F 'MODULE.*' of a trace of a library's functions."""
    r = run_fntrace("record", "-p", "function_graph", "-F", "textwrap.*", "-o", "t.dat",
                    "-c", "import textwrap; textwrap.fill('a b c ' * 30, 20); "
                          "textwrap.dedent('  x')")
    assert r.returncode == 0, r.stderr
    got = graph_body(report(run_fntrace, "t.dat", "-F", "textwrap.dedent"))
    assert got == ["0) |  textwrap.dedent();"]          # it calls nothing of textwrap's
    got = graph_body(report(run_fntrace, "t.dat", "-F", "textwrap.fill"))
    assert got[0] == "0) |  textwrap.fill() {" and got[-1] == "0) |  }"
    assert any("TextWrapper" in line for line in got) and "dedent" not in str(got)
    got = graph_body(report(run_fntrace, "t.dat", "-F", "textwrap.*", "-N", "textwrap.TextWrapper.*"))
    assert "0) |  textwrap.fill();" in got                  # all it calls is TextWrapper's
    assert not any("TextWrapper" in line for line in got)


@pytest.mark.parametrize("args, words", [
    (["-F", "x:mod:y"], "globs on module.qualname"),
    (["-F", ""], "empty glob"),
    (["-F", "!x"], "use -N"),
    (["-N", "  "], "empty glob"),
    (["--from", "abc"], "not a time"),
    (["--to", "1.2.3"], "not a time"),
    (["--from", "-1"], "not a time"),
    (["--from", "5", "--to", "4"], "is after"),
    (["--from", "+0.5", "--to", "+0.25"], "is after"),
    (["--tid", "abc"], "not a thread id"),
    (["--cpu", "-1"], "not a thread slot"),
    (["-D", "x"], "bad max depth"),
    (["--thresh", "-3"], "bad threshold"),
    # a glob that matches no function of the trace: refused as record refuses it,
    # with the closest names of the trace's own symbol table
    (["-F", "__main__.lef"], "f.dat matches (closest: '__main__.leaf'"),
    # a name without its module: the name it would match with one in front
    (["-F", "leaf"], "f.dat matches (closest: '__main__.leaf')"),
    (["-F", "emial.*"], "-F 'emial.*': no function in "),
    (["-F", "__main__.leaf", "-N", "*.nosuch"], "-N '*.nosuch': no function in "),
    # a thread that is not in the trace: refused, naming the trace's threads
    (["--tid", "1"], "--tid 1: no thread in "),
    (["--thread", "nosuch*"], "matches (its threads: "),
    (["--cpu", "7"], "has no thread slot 7 (its slots: 0"),
])
def test_bad_filters_are_one_line_exit_2(rec, run_fntrace, args, words):
    f = rec("f.dat", "-p", "function", "-F", "__main__.leaf")
    for cmd in ("report", "stat"):
        r = run_fntrace(cmd, f, *args)
        assert r.returncode == 2, (cmd, args, r.stderr)
        assert r.stderr.startswith("fntrace: ") and r.stderr.count("\n") == 1, r.stderr
        assert words in r.stderr and r.stdout == "", (cmd, r.stderr)


# ---------------------------------------------------------------------------------
# filter_entries over streams a recording rarely gives: lost returns, lost-event
# markers, a window on the first event
# ---------------------------------------------------------------------------------

def _ent(ts, func, depth, cpu=0):
    from fntrace.output.entry import TRACE_GRAPH_ENT, TraceEntry
    return TraceEntry(ts, cpu, f"t{cpu}", 100 + cpu, TRACE_GRAPH_ENT, func, depth=depth)


def _ret(ts, func, depth, start, cpu=0):
    from fntrace.output.entry import TRACE_GRAPH_RET, TraceEntry
    return TraceEntry(ts, cpu, f"t{cpu}", 100 + cpu, TRACE_GRAPH_RET, func, depth=depth,
                      calltime=start, rettime=ts)


def _shown(stream, **kw):
    from fntrace.output.entry import LostEvents
    from fntrace.output.filters import TraceFilter, filter_entries
    threads = kw.pop("threads", None)
    out = []
    for e in filter_entries(stream, TraceFilter(**kw), graph=True, threads=threads):
        out.append(("lost", e.cpu) if isinstance(e, LostEvents) else
                   (e.type, e.func, e.depth))
    return out


def test_a_lost_return_ends_the_match():
    from fntrace.output.entry import TRACE_GRAPH_ENT as E, TRACE_GRAPH_RET as R
    stream = [_ent(1, "a", 0), _ent(2, "m", 1), _ent(3, "x", 2),
              # m's and x's returns were lost: the next entry at depth 1 is not under m
              _ent(10, "y", 1), _ret(11, "y", 1, 10), _ret(12, "a", 0, 1),
              _ent(13, "m", 0), _ret(14, "m", 0, 13)]
    assert _shown(stream, functions=("m",)) == [
        (E, "m", 0), (E, "x", 1), (E, "m", 0), (R, "m", 0)]
    # -N likewise: y, after the hidden m whose return was lost, is shown
    assert _shown(stream, notrace=("m",)) == [
        (E, "a", 0), (E, "y", 1), (R, "y", 1), (R, "a", 0)]
    # a return of a matching call whose entry is not in the trace: shown at depth 0
    assert _shown([_ret(5, "m", 3, 1)], functions=("m",)) == [(R, "m", 0)]


def test_lost_markers_follow_their_thread():
    from fntrace.output.entry import LostEvents
    stream = [LostEvents(0, 3), LostEvents(1, 4), _ent(1, "a", 0, cpu=1),
              _ret(2, "a", 0, 1, cpu=1), LostEvents(2, 1)]
    threads = {0: (100, "t0"), 1: (101, "t1")}
    # slot 0 is known not to pass; slot 2 is not known at all: its marker is kept
    assert _shown(stream, cpus=frozenset({1}), threads=threads)[:2] == [("lost", 1), (2, "a", 0)]
    assert ("lost", 0) not in _shown(stream, cpus=frozenset({1}), threads=threads)
    assert ("lost", 2) in _shown(stream, cpus=frozenset({1}), threads=threads)


def test_relative_times_count_from_the_traces_first_event():
    from fntrace.output.filters import parse_time
    stream = [_ent(1_000_000_000, "a", 0, cpu=0), _ret(1_000_000_100, "a", 0, 1_000_000_000),
              _ent(1_500_000_000, "b", 0, cpu=1), _ret(1_700_000_000, "b", 0, 1_500_000_000, cpu=1)]
    got = _shown(stream, cpus=frozenset({1}), time_from=parse_time("+0.5"),
                 time_to=parse_time("+0.6"))
    assert [f for _, f, _ in got] == ["b"]            # b's entry only: its return is at +0.7
    assert parse_time("44774.715935").ns(0) == 44774715935000
