"""``fntrace export --format trace-cmd``: the trace.dat file read by the real reader.

Every check runs Debian's ``trace-cmd report`` on the exported file and compares what
it prints with the recorded trace: each event with its thread, time, function and
parent; function_graph's plugin drawing the same graph as ``fntrace report`` (the same
calls per thread, nested alike, the same durations); markers, stack traces, dynamic
events with their fields, dropped events.  Without trace-cmd the tests skip loudly
(scripts/test-all installs it when it can).
"""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from support import SUBPROCESS_TIMEOUT, fntrace_cli, run_python
from fntrace.output.entry import (LostEvents, TraceEntry, TRACE_EVENT, TRACE_FN,
                                  TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_PRINT, TRACE_STACK)
from fntrace.output.source import open_trace

TRACE_CMD = shutil.which("trace-cmd")
needs_trace_cmd = pytest.mark.skipif(
    TRACE_CMD is None,
    reason="LOUD SKIP: trace-cmd is not installed (apt-get install trace-cmd): the "
           "trace.dat export is not checked with the real reader")


def fntrace(*args, cwd, check=True):
    return fntrace_cli(*args, cwd=cwd, check=check)


def report(path, *options) -> list[str]:
    p = subprocess.run([TRACE_CMD, "report", *options, str(path)], capture_output=True,
                       text=True, timeout=SUBPROCESS_TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert "failed" not in p.stderr.lower() and "error" not in p.stderr.lower(), p.stderr
    return p.stdout.splitlines()


def record_and_export(tmp_path, source: str, *record_args):
    (tmp_path / "prog.py").write_text(source)
    fntrace("record", *record_args, "-o", "run.dat", "prog.py", cwd=tmp_path)
    fntrace("export", "run.dat", "--format", "trace-cmd", "-o", "trace.dat", cwd=tmp_path)
    return open_trace(tmp_path / "run.dat"), tmp_path / "trace.dat"


# "comm-pid [cpu] secs.usecs: event: rest" (trace-cmd's default line)
TC_LINE = re.compile(r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+"
                     r"(?P<ts>\d+\.\d+):\s+(?P<event>[\w.]+):\s(?P<rest>.*)$")

THREADS = """\
import threading, time
def leaf(x):
    return x * 2
def mid(n):
    s = 0
    for i in range(n):
        s += leaf(i)
    return s
def deep(k):
    if k:
        return deep(k - 1)
    return mid(2)
def worker():
    for _ in range(3):
        mid(4)
    deep(3)
def main():
    t = threading.Thread(target=worker, name="worker-1")
    t.start()
    mid(3)
    t.join()
    deep(2)
main()
"""


# -- function_graph: the same graph as fntrace report ------------------------------------

GRAPH_BODY = re.compile(r"^(?:[+!#*@$]\s*)?(?:(?P<dur>\d+(?:\.\d+)?) us\s+)?\|\s(?P<fn>.*)$")
FNT_GRAPH = re.compile(r"^\s*(?P<cpu>\d+)\)\s+(?P<body>.*\|.*)$")


def graph_calls(lines) -> dict[int, list[tuple[int, str, float]]]:
    """Per thread slot, every call in entry order: (depth, name, duration in us), from
    lines (cpu, "[overhead] [DUR us] |  <indent>name() {" / "name();" / "}")."""
    calls: dict[int, list] = {}
    stacks: dict[int, list[int]] = {}
    for cpu, body in lines:
        m = GRAPH_BODY.match(body.strip())
        assert m, body
        fn = m.group("fn")
        text = fn.strip()
        depth = (len(fn) - len(fn.lstrip(" ")) - 1) // 2
        out = calls.setdefault(cpu, [])
        st = stacks.setdefault(cpu, [])
        if text.startswith("}"):
            i = st.pop()
            d, name, _ = out[i]
            out[i] = (d, name, float(m.group("dur")))
        elif text.endswith("{"):
            st.append(len(out))
            out.append((depth, text[:-1].strip().removesuffix("()"), -1.0))
        elif text.endswith(";"):
            out.append((depth, text[:-1].removesuffix("()"), float(m.group("dur"))))
        else:
            continue        # a comment line (an event inside the graph)
    return calls


def fntrace_graph(cwd) -> dict[int, list]:
    text = fntrace("report", "run.dat", cwd=cwd).stdout
    lines = []
    for line in text.splitlines():
        m = FNT_GRAPH.match(line)
        if m and "/*" not in m.group("body").split("|", 1)[1][:3]:
            body = m.group("body")
            lines.append((int(m.group("cpu")), re.sub(r" /\*.*\*/$", "", body)))
    return graph_calls(lines)


def trace_cmd_graph(path) -> dict[int, list]:
    lines = []
    for line in report(path):
        m = TC_LINE.match(line)
        if m and m.group("event") in ("funcgraph_entry", "funcgraph_exit"):
            lines.append((int(m.group("cpu")), m.group("rest")))
    return graph_calls(lines)


def same_duration(a: float, b: float) -> bool:
    # Both print at most 7 digits: a long call loses its last decimals (10059.59 us
    # in one, 10059.594 us in the other), and the nanoseconds round or truncate.
    return abs(a - b) <= max(0.0015, 2e-6 * max(a, b))


@needs_trace_cmd
def test_function_graph_same_graph_as_fntrace_report(tmp_path):
    src, dat = record_and_export(tmp_path, THREADS, "-p", "function_graph", "-F", "__main__.*")
    ours = fntrace_graph(tmp_path)
    theirs = trace_cmd_graph(dat)
    assert set(ours) == set(theirs) == {0, 1}
    for cpu in ours:
        a, b = ours[cpu], theirs[cpu]
        assert [(d, n) for d, n, _ in a] == [(d, n) for d, n, _ in b], cpu
        for (d, n, x), (_, _, y) in zip(a, b):
            assert x >= 0 and same_duration(x, y), (n, x, y)
    # and the graph is the recorded one: every call, with its duration
    entries = [e for e in src.entries() if isinstance(e, TraceEntry)]
    rets = [e for e in entries if e.type == TRACE_GRAPH_RET]
    assert sum(len(c) for c in theirs.values()) == len(rets) == \
        sum(e.type == TRACE_GRAPH_ENT for e in entries)
    for cpu, calls in theirs.items():
        mine = sorted(((e.calltime, e.depth, e.func, (e.rettime - e.calltime) / 1000)
                       for e in rets if e.cpu == cpu))
        assert [(d, n) for _, d, n, _ in mine] == [(d, n) for d, n, _ in calls]
        assert all(same_duration(x, y) for (*_, x), (*_, y) in zip(mine, calls))
    assert calls and max(d for d, _, _ in calls) >= 3


@needs_trace_cmd
def test_every_event_with_thread_time_and_names(tmp_path):
    """The function tracer: every hit, in order, with its thread (pid = native thread
    id, comm = thread name), its time, and ``func <-- parent``."""
    src, dat = record_and_export(tmp_path, THREADS, "-p", "function", "-F", "__main__.*")
    lines = [m for m in map(TC_LINE.match, report(dat, "-O", "parent", "-O", "indent=0"))
             if m]
    entries = [e for e in src.entries() if isinstance(e, TraceEntry)]
    assert len(lines) == len(entries) > 20
    assert {m.group("event") for m in lines} == {"function"}
    names = {tid: name for tid, name in src.threads.values()}
    assert set(names.values()) == {"MainThread", "worker-1"}
    for m, e in zip(lines, entries):
        assert (int(m.group("pid")), m.group("comm"), int(m.group("cpu"))) == \
               (e.pid, names[e.pid], e.cpu)
        assert abs(float(m.group("ts")) * 1e6 - e.ts / 1000) <= 1.0
        func, parent = m.group("rest").strip().split(" <-- ")
        assert (func, parent) == (e.func, e.parent)
    assert ("__main__.leaf", "__main__.mid") in {tuple(m.group("rest").strip().split(" <-- "))
                                                 for m in lines}


MARKERS = """\
import time
from fntrace.tracefs.server import current_server
def mark(s):
    current_server().fs.write("trace_marker", s)
def leaf(x):
    return x
def mid(n):
    for i in range(n):
        leaf(i)
def main():
    mark("start here")
    mid(3)
    time.sleep(0.3)         # more than 2^27 ns: a time extend
    mid(400)                # more than a page
    mark("end")
main()
"""


@needs_trace_cmd
def test_markers_stacks_dynamic_events_and_time(tmp_path):
    src, dat = record_and_export(tmp_path, MARKERS, "--serve", "-p", "function_graph",
                                 "-F", "__main__.*", "-e", "f __main__.leaf x",
                                 "-T", "stacktrace if x == 1")
    out = report(dat)
    entries = [e for e in src.entries() if isinstance(e, TraceEntry)]
    lines = [m for m in map(TC_LINE.match, out) if m]
    assert len(lines) == len(entries)
    # every event at its time (the 0.3 s gap crossed by a time extend), of its type
    kinds = {TRACE_GRAPH_ENT: "funcgraph_entry", TRACE_GRAPH_RET: "funcgraph_exit",
             TRACE_PRINT: "print", TRACE_STACK: "kernel_stack"}
    for m, e in zip(lines, entries):
        assert abs(float(m.group("ts")) * 1e6 - e.ts / 1000) <= 1.0, (m.group(0), e)
        assert m.group("event") == kinds.get(e.type, e.func)
        if e.type == TRACE_PRINT:
            assert m.group("rest").strip() == f"tracing_mark_write: {e.text.rstrip()}"
        if e.type == TRACE_EVENT:
            assert m.group("rest").strip() == e.text
    assert [m.group("rest").strip() for m in lines if m.group("event") == "print"] == \
        ["tracing_mark_write: start here", "tracing_mark_write: end"]
    assert sum(m.group("event") == "__main___leaf__entry" for m in lines) == 403
    # the stack traces: each frame named, innermost first
    stacks = [e for e in entries if e.type == TRACE_STACK]
    assert len(stacks) == 2
    frames = [line[3:].split(" (")[0] for line in out if line.startswith("=> ")]
    assert frames == [f for e in stacks for f in e.text.split("\n")]
    assert frames[:3] == ["__main__.leaf", "__main__.mid", "__main__.main"]
    # the dynamic event's own format, under its group, its fields by name
    p = subprocess.run([TRACE_CMD, "report", "--events", str(dat)], capture_output=True,
                       text=True, timeout=SUBPROCESS_TIMEOUT)
    assert "system: fprobes" in p.stdout
    assert "field:__data_loc char[] x;" in p.stdout
    p = subprocess.run([TRACE_CMD, "dump", "--ftrace-events", "--clock", str(dat)],
                       capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert "name: funcgraph_entry" in p.stdout and "name: kernel_stack" in p.stdout
    assert "[local] global counter" in p.stdout
    p = subprocess.run([TRACE_CMD, "dump", "-v", str(dat)], capture_output=True, text=True,
                       timeout=SUBPROCESS_TIMEOUT)
    assert p.returncode == 0 and "is a valid trace-cmd file" in p.stdout + p.stderr
    # several pages, and the time extend really written (a record of type_len 30)
    assert dat.stat().st_size > 3 * 4096
    assert has_time_extend(dat)


def _flyrecord(path):
    """(offset, size) of each CPU's data, read from the v6 header."""
    data = path.read_bytes()
    i = data.index(b"flyrecord\0") + 10
    ncpu = struct.unpack_from("<I", data, data.index(b"options  \0") - 4)[0]
    return data, [struct.unpack_from("<QQ", data, i + 16 * c) for c in range(ncpu)]


def _events(page: bytes):
    commit = struct.unpack_from("<Q", page, 8)[0] & ((1 << 30) - 1)
    pos = 16
    while pos < 16 + commit:
        word = struct.unpack_from("<I", page, pos)[0]
        tl = word & 31
        if tl == 0:
            size = 4 + struct.unpack_from("<I", page, pos + 4)[0]
        elif tl <= 28:
            size = 4 + 4 * tl
        else:
            size = 8
        yield tl, size
        pos += size


def has_time_extend(path) -> bool:
    data, cpus = _flyrecord(path)
    for off, size in cpus:
        for p in range(off, off + size, 4096):
            if any(tl == 30 for tl, _ in _events(data[p:p + 4096])):
                return True
    return False


@needs_trace_cmd
def test_event_sizes_are_the_kernels(tmp_path):
    """funcgraph_entry 24 bytes, funcgraph_exit 44, function 28 (header included), as
    the kernel's own ring buffer stores them; pages are full before the next."""
    src, dat = record_and_export(tmp_path, THREADS, "-p", "function_graph", "-F", "__main__.*")
    data, cpus = _flyrecord(dat)
    sizes: dict[int, int] = {}
    used = 0
    for off, size in cpus:
        assert off % 4096 == 0 and size % 4096 == 0
        for p in range(off, off + size, 4096):
            for tl, n in _events(data[p:p + 4096]):
                sizes[n] = sizes.get(n, 0) + 1
                used += n
    entries = [e for e in src.entries() if isinstance(e, TraceEntry)]
    nent = sum(e.type == TRACE_GRAPH_ENT for e in entries)
    nret = sum(e.type == TRACE_GRAPH_RET for e in entries)
    assert sizes.get(24) == nent and sizes.get(44) == nret
    assert used == 24 * nent + 44 * nret + 8 * sizes.get(8, 0)
    header_end = min(off for off, size in cpus if size)
    assert dat.stat().st_size == header_end + sum(size for _, size in cpus)


class FakeSource:
    """A TraceSource with what the exporter reads, for what a recording cannot be made
    to produce on demand (dropped events)."""
    symbols = {1: ("mod.f", "mod.py", 1), 2: ("mod.g", "mod.py", 5)}
    header = {"tracer": "function"}
    threads = {0: (100, "t0"), 1: (101, "t1")}
    trace_clock = "local"

    def __init__(self, items):
        self.items = items

    def entries(self, cpu=None):
        return iter(self.items)

    def record_blocks(self, cpu=None, payloads=False, since=None, until=None):
        return None             # entries made here, not read from records


@needs_trace_cmd
def test_dropped_events_are_reported(tmp_path):
    from fntrace.output.trace_dat import TraceDatExporter
    items = [TraceEntry(1_000, 0, "t0", 100, TRACE_FN, "mod.f", "mod.g"),
             LostEvents(0, 7),
             TraceEntry(2_000, 0, "t0", 100, TRACE_FN, "mod.g", "mod.f"),
             TraceEntry(2_500, 1, "t1", 101, TRACE_FN, "mod.g", ""),
             LostEvents(1, -1),
             TraceEntry(3_000, 1, "t1", 101, TRACE_FN, "mod.f", "mod.g")]
    path = tmp_path / "lost.dat"
    with open(path, "wb") as f:
        TraceDatExporter().write(FakeSource(items), f, {})
    out = report(path, "-O", "parent", "-O", "indent=0")
    assert "CPU:0 [7 EVENTS DROPPED]" in out
    assert "CPU:1 [EVENTS DROPPED]" in out
    body = [line for line in out if "function:" in line]
    assert [line.split("function:")[1].strip() for line in body] == \
        ["mod.f <-- mod.g", "mod.g <-- mod.f", "mod.g <-- 0x0", "mod.f <-- mod.g"]
    assert out.index("CPU:0 [7 EVENTS DROPPED]") == out.index(body[1]) - 1


@needs_trace_cmd
def test_empty_trace_and_stdout(tmp_path):
    (tmp_path / "prog.py").write_text("print('hi')\n")
    fntrace("record", "-p", "function", "-F", "__main__.nothing*", "-o", "run.dat",
            "prog.py", cwd=tmp_path, check=False)
    assert open_trace(tmp_path / "run.dat").nr_records() == 0
    fntrace("export", "run.dat", "--format", "trace-cmd", cwd=tmp_path)
    out = report(tmp_path / "run.trace.dat")             # the default -o
    assert not [m for m in map(TC_LINE.match, out) if m]
    # -o -: the same bytes on standard output
    p = fntrace_cli("export", "run.dat", "--format", "trace-cmd", "-o", "-", cwd=tmp_path,
                    text=False)
    assert p.returncode == 0
    assert p.stdout == (tmp_path / "run.trace.dat").read_bytes()


def test_bad_output_path_is_one_line(tmp_path):
    (tmp_path / "prog.py").write_text("def f():\n    pass\nf()\n")
    fntrace("record", "-p", "function", "-F", "__main__.*", "-o", "run.dat", "prog.py",
            cwd=tmp_path)
    p = fntrace("export", "run.dat", "--format", "trace-cmd", "-o", "no/such/dir/t.dat",
                cwd=tmp_path, check=False)
    assert p.returncode != 0
    assert p.stderr.startswith("fntrace: ") and len(p.stderr.splitlines()) == 1
    assert "Traceback" not in p.stderr
    assert not list((tmp_path).glob("**/*.tmp"))


LOOP = """\
import sys
from pathlib import Path
def leaf(x):
    return x
def mid(n):
    for i in range(n):
        leaf(i)
for _ in range(int(sys.argv[1]) // 100):
    mid(99)
"""

MEASURE = """\
import resource, runpy, sys
sys.argv = ["fntrace", "export", sys.argv[1], "--format", "trace-cmd", "-o", sys.argv[2]]
try:
    runpy.run_module("fntrace", run_name="__main__")
except SystemExit as e:
    assert not e.code, e.code
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_memory_does_not_grow_with_the_trace(tmp_path):
    """The export streams: ten times the events, the same peak RSS (within a few MB,
    where the output grows by 12 MB)."""
    (tmp_path / "loop.py").write_text(LOOP)
    peaks = []
    for n in (20_000, 200_000):
        fntrace("record", "-p", "function_graph", "-F", "__main__.*", "-o", f"{n}.dat",
                "loop.py", str(n), cwd=tmp_path)
        p = run_python("-c", MEASURE, f"{n}.dat", f"{n}.trace.dat", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        peaks.append(int(p.stdout.split()[-1]))
    small, big = (tmp_path / "20000.trace.dat").stat().st_size, \
        (tmp_path / "200000.trace.dat").stat().st_size
    assert big - small > 10_000_000
    assert peaks[1] - peaks[0] < 4096, peaks         # KB


@pytest.mark.once
@pytest.mark.skipif(not all(shutil.which(t) for t in ("kernelshark", "Xvfb", "import")),
                    reason="LOUD SKIP: kernelshark, Xvfb or ImageMagick's import is not "
                           "installed: KernelShark is not started on an exported trace")
def test_kernelshark_opens_the_file(tmp_path):
    """KernelShark loads the exported file on a virtual display (the README picture's
    script): it says it loads it, reports no error, and draws more than a dialog."""
    record_and_export(tmp_path, THREADS, "-p", "function_graph", "-F", "__main__.*")
    script = Path(__file__).resolve().parent.parent / "scripts" / "kernelshark-screenshot"
    p = subprocess.run([str(script), "trace.dat", "shot.png", "8"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert "Loading" in p.stderr and "trace.dat" in p.stderr, p.stderr
    bad = [line for line in p.stderr.splitlines()
           if re.search(r"error|cannot|unable|segmentation", line, re.I)]
    assert not bad, bad
    # a window full of rows and plots, not a bare dialog on a black screen (~15 kB)
    assert (tmp_path / "shot.png").stat().st_size > 50_000


PROBES = """\
def greet(name, n):
    return f"hi {name}" * n
def main():
    greet("a b=c", 2)
    greet("x", 1)
main()
"""


@needs_trace_cmd
def test_dynamic_events_have_their_own_format_and_group(tmp_path):
    """Each dynamic event under its group, one field per fetcharg named as the
    definition names it (a value holding " b=" stays whole), printed as fntrace
    prints it."""
    src, dat = record_and_export(tmp_path, PROBES, "-p", "nop",
                                 "-e", "f:mine/greet_in __main__.greet name n",
                                 "-e", "f __main__.greet%return $retval")
    events = [e for e in src.entries() if isinstance(e, TraceEntry)]
    lines = [m for m in map(TC_LINE.match, report(dat)) if m]
    assert [(m.group("event"), m.group("rest").strip()) for m in lines] == \
        [(e.func, e.text) for e in events]
    assert len(events) == 4 and "name='a b=c' n=2" in events[0].text
    p = subprocess.run([TRACE_CMD, "report", "--events", str(dat)], capture_output=True,
                       text=True, timeout=SUBPROCESS_TIMEOUT)
    formats = p.stdout.split("system: ")
    mine = next(f for f in formats if f.startswith("mine\n"))
    assert "name: greet_in" in mine and "char[] name;" in mine and "char[] n;" in mine
    fprobes = next(f for f in formats if f.startswith("fprobes\n"))
    assert "name: __main___greet__exit" in fprobes and "char[] arg1;" in fprobes
    assert "unsigned long __probe_ip;" in fprobes


ASYNC = """\
import asyncio

async def worker(n):
    for _ in range(n):
        await asyncio.sleep(0)

async def main():
    await asyncio.gather(asyncio.create_task(worker(2), name="alpha"),
                         asyncio.create_task(worker(2), name="beta"))

asyncio.run(main())
"""


@needs_trace_cmd
def test_an_asyncio_programs_task_switches_are_events_of_their_group(tmp_path):
    """An asyncio program's task switches (asyncio:task_switch) are trace-cmd events of
    the asyncio system named task_switch, their fields split (not UNKNOWN EVENTs)."""
    src, dat = record_and_export(tmp_path, ASYNC, "-p", "function_graph",
                                 "-F", "__main__.*")
    switches = [e for e in src.entries()
                if isinstance(e, TraceEntry) and e.func == "asyncio:task_switch"]
    assert switches
    out = report(dat)
    assert not any("UNKNOWN" in line for line in out)
    lines = [m for m in map(TC_LINE.match, out) if m and m.group("event") == "task_switch"]
    rests = [m.group("rest").strip() for m in lines]
    # the format's fields are the first switch's (next, id); one that leaves every Task
    # ("next=-") prints its id empty
    assert [r if r != "next=- id=" else "next=-" for r in rests] == [e.text for e in switches]
    assert any(r.startswith("next=alpha id=") for r in rests)
    p = subprocess.run([TRACE_CMD, "report", "--events", str(dat)], capture_output=True,
                       text=True, timeout=SUBPROCESS_TIMEOUT)
    fmt = next(f for f in p.stdout.split("system: ") if f.startswith("asyncio\n"))
    assert "name: task_switch" in fmt and "char[] next;" in fmt


@needs_trace_cmd
def test_a_trace_cut_short_exports_what_is_whole(tmp_path):
    (tmp_path / "loop.py").write_text(LOOP)
    fntrace("record", "-p", "function_graph", "-F", "__main__.*", "-o", "run.dat",
            "loop.py", "100000", cwd=tmp_path)
    data = (tmp_path / "run.dat").read_bytes()
    (tmp_path / "cut.dat").write_bytes(data[:len(data) // 2])
    whole = open_trace(tmp_path / "cut.dat").nr_records()
    assert 0 < whole < 200_000
    p = fntrace("export", "cut.dat", "--format", "trace-cmd", "-o", "cut.trace.dat",
                cwd=tmp_path)
    assert "cut short" in p.stderr and "Traceback" not in p.stderr
    raw = [m for m in map(TC_LINE.match, report(tmp_path / "cut.trace.dat", "-R")) if m]
    assert len(raw) == whole
    assert raw[0].group("rest").split() == ["func=__main__.mid", "depth=0"]
