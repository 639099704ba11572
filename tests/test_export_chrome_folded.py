"""Chrome trace JSON and folded stacks (output/chrome_json.py, output/folded.py).

Round trips: a known program is recorded with ``fntrace record``, exported with
``fntrace export``, and the export is read back and compared with the recorded trace
-- every call (name, thread, start, duration to the nanosecond, arguments, return
value), the nesting, the events, the folded weights (self-time sums and call counts).
The recorded calls are paired here from the raw entries, not with the exporters' own
code (output/calls.py).

Then the real reader: both exports are loaded in speedscope (the npm package, served
from a local http.server) in headless Chromium, and the function names and weights its
sandwich table shows are compared with the recorded trace.  Those tests skip loudly
without chromium or the speedscope package (``scripts/test-all`` installs both; the
package is looked for in ``.cache/speedscope`` of the repository, or SPEEDSCOPE_DIR).
"""
from __future__ import annotations

import functools
import html.parser
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import tracemalloc
from collections import Counter, defaultdict
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from fntrace.output.entry import (
    LOST_EVENTS_UNKNOWN, TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET,
    TRACE_PRINT, TRACE_STACK, LostEvents, TraceEntry,
)
from fntrace.output.registry import get_exporter
from fntrace.output.source import open_trace

from support import REPO_ROOT, SUBPROCESS_TIMEOUT, fntrace_cli

KNOWN = '''\
import threading


def leaf(x):
    return x * 2


def middle(n):
    total = 0
    for i in range(n):
        total += leaf(i)
    return total


def recurse(k):
    if k == 0:
        return leaf(1)
    return recurse(k - 1) + 1


def fails():
    raise ValueError("no")


def gen(n):
    for i in range(n):
        yield leaf(i)


def worker():
    middle(2)


def main():
    middle(3)
    recurse(2)
    try:
        fails()
    except ValueError:
        pass
    sum(gen(2))
    t = threading.Thread(target=worker, name="helper")
    t.start()
    t.join()
    return 7


main()
'''


def fntrace(*args, cwd) -> subprocess.CompletedProcess:
    return fntrace_cli(*args, cwd=cwd)


def ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return r


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The known program recorded three ways: function_graph with arguments, return
    values and a dynamic event (graph.dat); function_graph alone (plain.dat); the
    function tracer (function.dat)."""
    d = tmp_path_factory.mktemp("known")
    (d / "known.py").write_text(KNOWN)
    ok(fntrace("record", "-p", "function_graph", "-A", "-R", "-F", "__main__.*",
               "-e", "f __main__.leaf x", "-o", "graph.dat", "known.py", cwd=d))
    ok(fntrace("record", "-p", "function_graph", "-F", "__main__.*", "-o", "plain.dat",
               "known.py", cwd=d))
    ok(fntrace("record", "-p", "function", "-F", "__main__.*", "-o", "function.dat",
               "known.py", cwd=d))
    return d


# ---------------------------------------------------------------------------------
# The recorded trace, paired here from the raw entries
# ---------------------------------------------------------------------------------

@dataclass
class Ref:
    tid: int
    comm: str
    func: str
    depth: int
    stack: tuple[str, ...]
    start: int
    end: int
    self_ns: int
    args: list | None
    retval: object
    has_retval: bool


def reference(path: Path) -> tuple[list[Ref], list[TraceEntry]]:
    """Every call of a function_graph trace (from its entry and return records, which
    must pair up: the known program's trace is whole) and every other entry."""
    stacks: dict[int, list[list]] = defaultdict(list)
    calls, others = [], []
    for e in open_trace(path).entries():
        assert isinstance(e, TraceEntry), e
        if e.type == TRACE_GRAPH_ENT:
            stacks[e.cpu].append([e, 0])
        elif e.type == TRACE_GRAPH_RET:
            st = stacks[e.cpu]
            ent, children = st.pop()
            assert (ent.func, ent.depth, ent.ts) == (e.func, e.depth, e.calltime)
            dur = e.rettime - e.calltime
            if st:
                st[-1][1] += dur
            stack = tuple(f.func for f, _ in st) + (e.func,)
            calls.append(Ref(e.pid, e.comm, e.func, e.depth, stack, e.calltime, e.rettime,
                             dur - children, ent.args, e.retval, e.has_retval))
        else:
            others.append(e)
    assert not any(stacks.values())
    return calls, others


def load_chrome(path: Path) -> dict:
    # Decimal keeps the microseconds' three decimals exact: ns = ts * 1000.
    return json.loads(path.read_text(), parse_float=Decimal)


def ns(v) -> int:
    n = Decimal(v) * 1000
    assert n == n.to_integral_value(), v
    return int(n)


def parse_folded(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        assert stack and n.isdigit(), line
        assert stack not in out, f"stack written twice: {stack}"
        out[stack] = int(n)
    return out


def folded_expected(calls: list[Ref], weight: str) -> dict[str, int]:
    sums: Counter = Counter()
    for c in calls:
        sums[";".join(c.stack)] += c.self_ns if weight == "time" else 1
    if weight == "time":
        sums = Counter({k: (v + 500) // 1000 for k, v in sums.items()})
        sums = Counter({k: v for k, v in sums.items() if v > 0})
    return dict(sums)


# ---------------------------------------------------------------------------------
# Chrome JSON round trip
# ---------------------------------------------------------------------------------

def test_chrome_json_holds_every_call_of_the_recorded_trace(recorded):
    ok(fntrace("export", "graph.dat", "--format", "chrome", "-o", "graph.json", cwd=recorded))
    doc = load_chrome(recorded / "graph.json")
    calls, others = reference(recorded / "graph.dat")
    src = open_trace(recorded / "graph.dat")
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"]["tracer"] == "function_graph"
    assert doc["otherData"]["calls"] == len(calls)
    events = doc["traceEvents"]
    assert all(ev["pid"] == src.pid for ev in events)

    meta = [ev for ev in events if ev["ph"] == "M"]
    assert {"name": "process_name", "args": {"name": "known.py"}} in [
        {"name": ev["name"], "args": ev["args"]} for ev in meta]
    names = {ev["tid"]: ev["args"]["name"] for ev in meta if ev["name"] == "thread_name"}
    assert names == {tid: comm for tid, comm in src.threads.values()}
    assert sorted(names.values()) == ["MainThread", "helper"]
    order = {ev["tid"]: ev["args"]["sort_index"] for ev in meta
             if ev["name"] == "thread_sort_index"}
    assert order == {tid: slot for slot, (tid, _) in src.threads.items()}

    def want(c: Ref):
        args = {}
        if c.args:
            args["args"] = dict(c.args)
        if c.has_retval:
            args["retval"] = c.retval if isinstance(c.retval, int) else str(c.retval)
        return (c.tid, c.func, c.start, c.end - c.start, json.dumps(args, sort_keys=True))

    def got(ev):
        assert ev["cat"] == "function"
        return (ev["tid"], ev["name"], ns(ev["ts"]), ns(ev["dur"]),
                json.dumps(ev.get("args", {}), sort_keys=True, default=str))

    slices = [ev for ev in events if ev["ph"] == "X"]
    assert Counter(map(got, slices)) == Counter(map(want, calls))
    # the known program's shape, as recorded
    assert Counter(c.func for c in calls) == {
        "__main__.main": 1, "__main__.middle": 2, "__main__.leaf": 8, "__main__.recurse": 3,
        "__main__.fails": 1, "__main__.gen": 3, "__main__.worker": 1}
    main = next(ev for ev in slices if ev["name"] == "__main__.main")
    assert main["args"]["retval"] == 7
    fails = next(ev for ev in slices if ev["name"] == "__main__.fails")
    assert fails["args"]["retval"].startswith("raised")
    assert next(ev for ev in slices if ev["name"] == "__main__.middle")["args"]["args"] \
        in ({"n": "3"}, {"n": "2"})

    # Nesting: each slice's enclosing slice on its thread is the recorded caller.
    parent_of = nesting(slices)
    assert Counter((ev["tid"], ev["name"], parent, depth)
                   for ev, (parent, depth) in parent_of) == Counter(
        (c.tid, c.func, c.stack[-2] if len(c.stack) > 1 else None, c.depth) for c in calls)

    # The dynamic event: one thread-scoped instant per hit, inside a call of leaf.
    instants = [ev for ev in events if ev["ph"] == "i"]
    recorded_events = [e for e in others if e.type == TRACE_EVENT]
    assert len(recorded_events) == 8
    assert Counter((ev["tid"], ev["name"], ns(ev["ts"]), ev["args"]["fields"], ev["s"],
                    ev["cat"]) for ev in instants) == Counter(
        (e.pid, e.func, e.ts, e.text, "t", "event") for e in recorded_events)
    for ev in instants:
        t = ns(ev["ts"])
        assert any(s["name"] == "__main__.leaf" and s["tid"] == ev["tid"]
                   and ns(s["ts"]) <= t <= ns(s["ts"]) + ns(s["dur"]) for s in slices)


def nesting(slices: list[dict]) -> list[tuple[dict, tuple[str | None, int]]]:
    """Each slice with the name of the innermost slice enclosing it on its thread and
    its depth, from the times alone (as a timeline viewer nests them)."""
    out = []
    by_tid = defaultdict(list)
    for ev in slices:
        by_tid[ev["tid"]].append(ev)
    for evs in by_tid.values():
        evs.sort(key=lambda ev: (ns(ev["ts"]), -ns(ev["dur"])))
        open_: list[dict] = []
        for ev in evs:
            start = ns(ev["ts"])
            end = start + ns(ev["dur"])
            while open_ and ns(open_[-1]["ts"]) + ns(open_[-1]["dur"]) < end:
                open_.pop()
            out.append((ev, (open_[-1]["name"] if open_ else None, len(open_))))
            assert not open_ or ns(open_[-1]["ts"]) <= start
            open_.append(ev)
    return out


def test_chrome_json_of_a_function_trace_is_one_instant_per_hit(recorded):
    ok(fntrace("export", "function.dat", "--format", "chrome", "-o", "function.json",
               cwd=recorded))
    doc = load_chrome(recorded / "function.json")
    hits = [e for e in open_trace(recorded / "function.dat").entries()
            if isinstance(e, TraceEntry) and e.type == TRACE_FN]
    assert len(hits) == 17          # a generator is one hit (its first resume)
    assert not [ev for ev in doc["traceEvents"] if ev["ph"] == "X"]
    instants = [ev for ev in doc["traceEvents"] if ev["ph"] == "i"]
    assert Counter((ev["tid"], ev["name"], ns(ev["ts"]), ev["args"].get("parent"))
                   for ev in instants) == Counter(
        (e.pid, e.func, e.ts, e.parent or None) for e in hits)
    assert ("__main__.leaf", "__main__.middle") in {
        (ev["name"], ev["args"].get("parent")) for ev in instants}


# ---------------------------------------------------------------------------------
# Folded stacks round trip
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("weight", ["time", "calls"])
def test_folded_weights_are_the_recorded_self_times_and_calls(recorded, weight):
    out = f"graph-{weight}.folded"
    r = ok(fntrace("export", "graph.dat", "--format", "folded", "--weight", weight,
                   "-o", out, cwd=recorded))
    calls, _ = reference(recorded / "graph.dat")
    got = parse_folded((recorded / out).read_text())
    assert got == folded_expected(calls, weight)
    lines = (recorded / out).read_text().splitlines()
    assert lines == sorted(lines)
    if weight == "calls":
        assert got["__main__.main;__main__.recurse;__main__.recurse;__main__.recurse;"
                   "__main__.leaf"] == 1
        assert got["__main__.main;__main__.middle;__main__.leaf"] == 3
        assert got["__main__.worker;__main__.middle;__main__.leaf"] == 2
        assert sum(got.values()) == len(calls)
    else:
        # what rounding left out, the command says
        all_stacks = {";".join(c.stack) for c in calls}
        dropped = len(all_stacks) - len(got)
        assert (f"{dropped} of {len(all_stacks)} stack(s)" in r.stderr) == bool(dropped)


def test_folded_to_stdout_and_default_weight(recorded):
    r = ok(fntrace("export", "graph.dat", "--format", "folded", "-o", "-", cwd=recorded))
    calls, _ = reference(recorded / "graph.dat")
    assert parse_folded(r.stdout) == folded_expected(calls, "time")


def test_folded_of_a_function_trace_is_parent_and_function_by_calls(recorded):
    r = ok(fntrace("export", "function.dat", "--format", "folded", "-o", "-", cwd=recorded))
    hits = [e for e in open_trace(recorded / "function.dat").entries()
            if isinstance(e, TraceEntry) and e.type == TRACE_FN]
    want = Counter(f"{e.parent};{e.func}" if e.parent else e.func for e in hits)
    assert parse_folded(r.stdout) == dict(want)
    assert parse_folded(r.stdout)["__main__.middle;__main__.leaf"] == 5
    assert "no duration: weighted by calls" in r.stderr


# ---------------------------------------------------------------------------------
# What a real trace can hold besides whole calls (a source made here)
# ---------------------------------------------------------------------------------

class FakeSource:
    """A TraceSource's reading side, over entries made here."""

    def __init__(self, entries, threads=None, tracer="function_graph", pid=100):
        self._entries = entries
        self.threads = threads if threads is not None else {0: (100, "MainThread")}
        self.tracer = tracer
        self.header = {"tracer": tracer, "pid": pid, "argv": ["prog.py", "x"]}
        self.pid = pid
        self.name = "fake.dat"
        self.truncated = False
        self.trace_clock = "local"

    def entries(self, cpu=None):
        return iter(self._entries() if callable(self._entries) else self._entries)

    symbols: dict = {}

    def record_blocks(self, cpu=None, payloads=False, since=None, until=None):
        return None             # entries made here, not read from records

    def part_sizes(self):
        return None             # one process (TraceSource.part_sizes)


def ent(ts, func, depth, cpu=0, args=None):
    return TraceEntry(ts, cpu, "T%d" % cpu, 100 + cpu, TRACE_GRAPH_ENT, func, depth=depth,
                      args=args)


def ret(ts, func, depth, calltime, cpu=0, retval=None):
    return TraceEntry(ts, cpu, "T%d" % cpu, 100 + cpu, TRACE_GRAPH_RET, func, depth=depth,
                      calltime=calltime, rettime=ts, retval=retval,
                      has_retval=retval is not None)


def export(name: str, source, **options) -> tuple[str, dict | None]:
    import io
    buf = io.StringIO()
    result = get_exporter(name).write(source, buf, options)
    return buf.getvalue(), result


def test_chrome_json_shows_markers_stacks_lost_events_and_cut_calls():
    entries = [
        ent(1000, "m.main", 0),
        ent(2000, "m.a", 1),
        TraceEntry(2500, 0, "T0", 100, TRACE_PRINT, "", text="half way\n"),
        ret(3000, "m.a", 1, 2000, retval=12345678901234567890),
        LostEvents(0, 5),
        TraceEntry(3500, 0, "T0", 100, TRACE_STACK, "", text="m.a\nm.main"),
        ret(4000, "m.b", 1, 3600),                      # its entry was lost
        LostEvents(1, LOST_EVENTS_UNKNOWN),
        ent(4100, "m.w", 0, cpu=1),                     # never returns
        ent(5000, "m.c", 1),                            # never returns
    ]
    text, result = export("chrome", FakeSource(entries, {0: (100, "T0")}))
    doc = json.loads(text, parse_float=Decimal)
    evs = doc["traceEvents"]
    by = {(ev["ph"], ev["name"]): ev for ev in evs}
    assert by["M", "process_name"]["args"] == {"name": "prog.py"}
    # a thread the header does not list is named from its entries
    assert {(ev["tid"], ev["args"]["name"]) for ev in evs if ev["name"] == "thread_name"} \
        == {(100, "T0"), (101, "T1")}
    a = by["X", "m.a"]
    assert (ns(a["ts"]), ns(a["dur"])) == (2000, 1000)
    assert a["args"] == {"retval": "12345678901234567890"}   # beyond a JS number: text
    marker = by["i", "half way"]
    assert (marker["cat"], ns(marker["ts"]), marker["s"]) == ("marker", 2500, "t")
    assert by["i", "stack trace"]["args"] == {"stack": ["m.a", "m.main"]}
    lost = [ev for ev in evs if ev["name"] == "lost events"]
    assert sorted((ev["tid"], ns(ev["ts"]), ev["args"]["lost"],
                   ev["args"].get("at_least", False)) for ev in lost) == [
        (100, 3500, 5, False), (101, 4100, 0, True)]
    b = by["X", "m.b"]
    assert (ns(b["ts"]), ns(b["dur"]), b["args"]) == (3600, 400, {"entry_lost": True})
    c = by["X", "m.c"]
    assert (ns(c["ts"]), ns(c["dur"]), c["args"]) == (5000, 0, {"incomplete": True})
    main = by["X", "m.main"]
    assert (ns(main["ts"]), ns(main["dur"]), main["args"]) == (1000, 4000, {"incomplete": True})
    assert by["X", "m.w"]["args"] == {"incomplete": True}
    assert doc["otherData"]["lost_events"] == 5
    assert doc["otherData"]["lost_events_all_counted"] is False
    assert doc["otherData"]["incomplete_calls"] == 3
    notes = " ".join(result["notes"])
    assert "3 call(s) had no return" in notes and "at least 5 event(s) were lost" in notes


def test_timestamps_are_exact_microseconds():
    from fntrace.output.chrome_json import format_us
    assert [format_us(n) for n in (0, 1, 999, 1000, 1001, 123456789012345678)] == [
        "0", "0.001", "0.999", "1", "1.001", "123456789012345.678"]
    big = 98765432101234567          # past a double's exact integers, in ns
    text, _ = export("chrome", FakeSource([ent(big, "m.f", 0), ret(big + 7, "m.f", 0, big)]))
    x = next(ev for ev in json.loads(text, parse_float=Decimal)["traceEvents"]
             if ev["ph"] == "X")
    assert (ns(x["ts"]), ns(x["dur"])) == (big, 7)


def test_folded_of_cut_calls_and_unsafe_names():
    entries = [
        ent(0, "m.main", 0),
        ent(1000, "m.a;b", 1),
        ret(3000, "m.a;b", 1, 1000),
        ret(9000, "m.lost", 1, 4000),     # entry not in the trace
        ent(10000, "m.open", 1),          # never returns: runs to the end (12 us)
        TraceEntry(22000, 0, "T0", 100, TRACE_PRINT, "", text="end\n"),
        ent(22000, "m.x", 1),
        ret(22000, "m.x", 1, 22000),      # 0 ns: left out by time, counted by calls
    ]
    text, result = export("folded", FakeSource(entries), weight="time")
    assert parse_folded(text) == {"m.main": 3, "m.main;m.a:b": 2, "m.main;m.lost": 5,
                                  "m.main;m.open": 12}
    assert "1 of 5 stack(s) had under 0.5 us" in " ".join(result["notes"])
    assert "2 call(s) had no return" in " ".join(result["notes"])
    text, result = export("folded", FakeSource(entries), weight="calls")
    assert parse_folded(text) == {"m.main": 1, "m.main;m.a:b": 1, "m.main;m.lost": 1,
                                  "m.main;m.open": 1, "m.main;m.x": 1}


def test_empty_trace_exports_valid_empty_files():
    text, result = export("chrome", FakeSource([], {}))
    doc = json.loads(text)
    assert [ev["name"] for ev in doc["traceEvents"]] == ["process_name"]
    assert result is None
    text, result = export("folded", FakeSource([], {}), weight="time")
    assert text == "" and result is None


# ---------------------------------------------------------------------------------
# Streaming: memory does not grow with the trace
# ---------------------------------------------------------------------------------

class _Sink:
    def __init__(self):
        self.size = 0

    def write(self, s):
        self.size += len(s)


def _loop_trace(n: int):
    """A trace of n iterations of main -> work -> (marker, event, leaf, leaf), made as it
    is read."""
    def entries():
        t = 0
        yield ent(t, "m.main", 0)
        for _ in range(n):
            t0 = t + 10
            yield ent(t0, "m.work", 1)
            yield TraceEntry(t0 + 1, 0, "T0", 100, TRACE_PRINT, "", text=f"iteration {t0}\n")
            yield TraceEntry(t0 + 2, 0, "T0", 100, TRACE_EVENT, "ev", text=f"i={t0}")
            for k in range(2):
                yield ent(t0 + 100 + k * 300, "m.leaf", 2, args=[("x", "1")])
                yield ret(t0 + 300 + k * 300, "m.leaf", 2, t0 + 100 + k * 300, retval=2)
            yield ret(t0 + 900, "m.work", 1, t0)
            t = t0 + 1000
        yield ret(t + 10, "m.main", 0, 0, retval=0)
    return FakeSource(entries)


@pytest.mark.parametrize("fmt", ["chrome", "folded"])
def test_export_memory_does_not_grow_with_the_trace(fmt):
    peaks = []
    for n in (1_000, 15_000):
        sink = _Sink()
        tracemalloc.start()
        try:
            get_exporter(fmt).write(_loop_trace(n), sink, {"weight": "time"})
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert sink.size > 0
    # 15 times the calls, the same memory (give or take an allocator's slack)
    assert peaks[1] < peaks[0] * 1.5 + 64 * 1024, peaks


# ---------------------------------------------------------------------------------
# Bad input, through the command
# ---------------------------------------------------------------------------------

LOOP = """\
def leaf(x):
    return x + 1


def main():
    for i in range(20000):
        leaf(i)


main()
"""


def test_export_of_a_cut_trace_writes_what_is_whole(tmp_path):
    (tmp_path / "loop.py").write_text(LOOP)
    # small buffers: the file is written in small chunks, so half of it holds some
    ok(fntrace("record", "-p", "function_graph", "-b", "4", "-F", "__main__.*", "-o",
               "loop.dat", "loop.py", cwd=tmp_path))
    data = (tmp_path / "loop.dat").read_bytes()
    (tmp_path / "cut.dat").write_bytes(data[: len(data) // 2])
    ok(fntrace("export", "loop.dat", "--format", "chrome", "-o", "whole.json", cwd=tmp_path))
    whole = {(ev["name"], ev["ts"], ev["dur"]) for ev in
             load_chrome(tmp_path / "whole.json")["traceEvents"] if ev["ph"] == "X"}
    assert len(whole) == 20001

    r = ok(fntrace("export", "cut.dat", "--format", "chrome", "-o", "cut.json", cwd=tmp_path))
    assert "cut.dat: trace file is cut short" in r.stderr
    doc = load_chrome(tmp_path / "cut.json")
    assert doc["otherData"]["truncated"] is True
    xs = [ev for ev in doc["traceEvents"] if ev["ph"] == "X"]
    cut = [ev for ev in xs if ev.get("args") == {"incomplete": True}]
    # main, and a leaf if the cut fell between its entry and its return
    assert {ev["name"] for ev in cut} <= {"__main__.main", "__main__.leaf"}
    assert sum(ev["name"] == "__main__.main" for ev in cut) == 1 and len(cut) <= 2
    assert f"{len(cut)} call(s) had no return" in r.stderr
    leaves = {(ev["name"], ev["ts"], ev["dur"]) for ev in xs
              if ev["name"] == "__main__.leaf" and "args" not in ev}
    assert 1000 < len(leaves) < 20000 and leaves <= whole      # what is whole, as it was
    n_leaves = sum(ev["name"] == "__main__.leaf" for ev in xs)

    r = ok(fntrace("export", "cut.dat", "--format", "folded", "--weight", "calls", "-o", "-",
                   cwd=tmp_path))
    assert "cut short" in r.stderr
    assert parse_folded(r.stdout) == {"__main__.main": 1, "__main__.main;__main__.leaf":
                                      n_leaves}


def test_export_to_an_unwritable_place_is_one_line(recorded, tmp_path):
    for fmt in ("chrome", "folded"):
        r = fntrace("export", recorded / "plain.dat", "--format", fmt, "-o",
                    tmp_path / "no" / "such" / "dir" / "out", cwd=tmp_path)
        assert r.returncode != 0
        assert r.stderr.startswith("fntrace: ") and len(r.stderr.splitlines()) == 1, r.stderr


# ---------------------------------------------------------------------------------
# speedscope in headless Chromium
# ---------------------------------------------------------------------------------

def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    return None


def _speedscope() -> Path | None:
    """speedscope's built app (dist/release/index.html) of the npm package."""
    roots = [os.environ.get("SPEEDSCOPE_DIR"), REPO_ROOT / ".cache" / "speedscope"]
    for root in filter(None, roots):
        for d in (Path(root), Path(root) / "node_modules" / "speedscope"):
            if (d / "dist" / "release" / "index.html").is_file():
                return d / "dist" / "release"
    return None


@pytest.fixture(scope="module")
def speedscope_site(tmp_path_factory):
    """An http server with speedscope under /speedscope/ and the files to load at /."""
    chromium = _chromium()
    if chromium is None:
        pytest.skip("LOUD SKIP: no chromium on PATH: speedscope was NOT checked "
                    "(apt-get install chromium; scripts/test-all does it as root)")
    app = _speedscope()
    if app is None:
        pytest.skip("LOUD SKIP: the speedscope npm package is not installed: speedscope "
                    "was NOT checked (npm install --prefix .cache/speedscope speedscope; "
                    "scripts/test-all does it)")
    site = tmp_path_factory.mktemp("site")
    (site / "speedscope").symlink_to(app, target_is_directory=True)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield chromium, site, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Rows(html.parser.HTMLParser):
    """The text of every table row of a page (speedscope's sandwich table)."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def speedscope_dom(speedscope_site, name: str, view: str, tmp_path) -> str:
    """The DOM speedscope shows once it has loaded /NAME in ``view``."""
    chromium, site, url = speedscope_site
    page = f"{url}/speedscope/index.html#profileURL=/{name}&view={view}"
    for _ in range(3):      # a loaded machine may need longer than the first budget
        profile = tmp_path / f"chromium-{os.urandom(4).hex()}"
        r = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
             "--window-size=1400,4000", "--virtual-time-budget=20000", "--dump-dom", page],
            capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
        shutil.rmtree(profile, ignore_errors=True)
        # the table's header can be drawn before its rows: a page is loaded when both are
        if "Symbol Name" in r.stdout and _has_rows(r.stdout):
            return r.stdout
    pytest.fail(f"speedscope showed no table for {name}: {r.stdout[-2000:]}{r.stderr[-2000:]}")


def _has_rows(dom: str) -> bool:
    try:
        return bool(sandwich(dom))
    except (AssertionError, ValueError):
        return False


def sandwich(dom: str) -> dict[str, tuple[str, str]]:
    """Symbol name -> (total, self) as speedscope's sandwich table prints them."""
    p = _Rows()
    p.feed(dom)
    out = {}
    heads = [i for i, row in enumerate(p.rows) if row == ["Total", "Self", "Symbol Name"]]
    assert len(heads) == 1, p.rows
    for row in p.rows[heads[0] + 1:]:   # (the profile list above has rows too)
        total, self_, sym = row
        assert sym not in out, sym
        out[sym] = (total, self_)
    return out


def _count(cell: str) -> int:
    return int(cell.split(" ")[0].replace(",", ""))


_UNITS = {"ns": 1, "µs": 1000, "ms": 1_000_000, "s": 1_000_000_000}


def _time_ns(cell: str) -> tuple[float, float]:
    """A time speedscope printed ("83.31µs (5.2%)") in ns, and half its last digit."""
    m = re.match(r"([\d.,]+)(ns|µs|ms|s)\b", cell)
    assert m, cell
    digits, unit = m.group(1).replace(",", ""), _UNITS[m.group(2)]
    decimals = len(digits.partition(".")[2])
    return float(digits) * unit, 0.5 * 10 ** -decimals * unit


@pytest.mark.once
@pytest.mark.parametrize("weight", ["time", "calls"])
def test_speedscope_draws_the_folded_stacks(recorded, speedscope_site, weight, tmp_path):
    _, site, _ = speedscope_site
    name = f"known-{weight}.folded"
    ok(fntrace("export", "graph.dat", "--format", "folded", "--weight", weight, "-o",
               site / name, cwd=recorded))
    table = sandwich(speedscope_dom(speedscope_site, name, "sandwich", tmp_path))
    calls, _ = reference(recorded / "graph.dat")
    stacks = folded_expected(calls, weight)
    want_self, want_total = Counter(), Counter()
    for stack, n in stacks.items():
        frames = stack.split(";")
        want_self[frames[-1]] += n
        for f in set(frames):
            want_total[f] += n
    assert set(table) == set(want_total), table
    assert {f: (_count(t), _count(s)) for f, (t, s) in table.items()} == {
        f: (want_total[f], want_self[f]) for f in want_total}
    if weight == "calls":
        assert {f: _count(s) for f, (_, s) in table.items()} == Counter(c.func for c in calls)


@pytest.mark.once
def test_speedscope_draws_the_chrome_json(recorded, speedscope_site, tmp_path):
    # Recorded without arguments: speedscope names a frame by its name and args.
    _, site, _ = speedscope_site
    ok(fntrace("export", "plain.dat", "--format", "chrome", "-o", site / "known.json",
               cwd=recorded))
    dom = speedscope_dom(speedscope_site, "known.json", "sandwich", tmp_path)
    src = open_trace(recorded / "plain.dat")
    # one profile per thread, named by the process and thread names
    for tid, comm in src.threads.values():
        assert f"known.py (pid {src.pid}), {comm} (tid {tid})" in dom
    # the first thread's functions, with the recorded times
    table = sandwich(dom)
    calls, _ = reference(recorded / "plain.dat")
    main_tid = min(tid for tid, _ in src.threads.values())    # speedscope's first
    mine = [c for c in calls if c.tid == main_tid]
    want_self = Counter()
    want_total = Counter()
    for c in mine:
        want_self[c.func] += c.self_ns
        if c.func not in c.stack[:-1]:        # a recursive call is inside its own total
            want_total[c.func] += c.end - c.start
    assert set(table) == set(want_self), table
    assert "__main__.worker" not in table
    for func, (total, self_) in table.items():
        for cell, want in ((total, want_total[func]), (self_, want_self[func])):
            got, tol = _time_ns(cell)
            assert abs(got - want) <= tol + 1, (func, cell, want)


# ---------------------------------------------------------------------------------
# --min-duration: the short calls left out (chrome), or refused where they cannot be
# ---------------------------------------------------------------------------------

SLEEPY = '''\
import time


def quick(i):
    return i + 1


def slow():
    time.sleep(0.02)
    return [quick(i) for i in range(5)]


def main():
    for _ in range(3):
        slow()
    return [quick(i) for i in range(20)]


main()
'''


def test_min_duration_leaves_the_short_calls_out_of_the_chrome_json(tmp_path):
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    trace = tmp_path / "s.dat"
    fntrace_cli("record", "-p", "function_graph", "-F", "__main__.*", "-o", trace,
                "sleepy.py", cwd=tmp_path, check=True)
    env = {k: v for k, v in os.environ.items() if k != "FNTRACE_PURE"}
    docs = []
    for pure in ("0", "1"):
        out = tmp_path / f"s{pure}.json"
        # (10 ms: no quick() call lasts that long, even preempted on a loaded machine)
        r = fntrace_cli("export", trace, "--format", "chrome", "--min-duration", "10000",
                        "-o", out, env=dict(env, FNTRACE_PURE=pure))
        assert r.returncode == 0, r.stderr
        assert "35 call(s) shorter than 10000 us left out (--min-duration)" in r.stderr
        docs.append(out.read_bytes())
    assert docs[0] == docs[1]           # the native walk and the pure loop agree
    doc = json.loads(docs[0])
    kept = sorted(e["name"] for e in doc["traceEvents"] if e["ph"] == "X")
    assert kept == ["__main__.main"] + ["__main__.slow"] * 3
    assert all(Decimal(e["dur"]) >= 10000 for e in doc["traceEvents"] if e["ph"] == "X")
    # quick's 3 * 5 + 20 calls, each well under 10 ms
    assert doc["otherData"]["calls_left_out"] == 35 and doc["otherData"]["calls"] == 4
    assert doc["otherData"]["min_duration_ns"] == 10_000_000
    # the formats that write every call refuse it, in one line, writing nothing
    for fmt in ("folded", "trace-cmd", "parquet", "html"):
        out = tmp_path / f"x.{fmt}"
        r = fntrace_cli("export", trace, "--format", fmt, "--min-duration", "10", "-o", out)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
        assert f"--format {fmt} writes every call" in r.stderr and not out.exists()
