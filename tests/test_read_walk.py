"""The native reading walks against their Python twins (issue: read as fast as we write).

``fntrace stat`` of a whole trace is walked natively (_native_read.c's StatWalk) when the
native twin is built; the Python walk (output/calls.py's CallBuilder feeding
output/stat.py's StatCollector, over decoded TraceEntry objects) is the reference.  Two
ways of checking they agree:

- record streams made at random -- calls with and without their returns, returns
  without their entries, depths that jump, function hits, markers, buffers that lost
  records, names shared by several ids, ids with no symbol -- written as trace files,
  walked both ways: the same rows, in the same order, and the same counts;
- real programs recorded by the CLI (threads, recursion, exceptions, a forked child,
  a buffer that overwrote), ``fntrace stat`` run natively and with FNTRACE_PURE=1:
  the same bytes.
"""
from __future__ import annotations

import io
import json
import os
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fntrace import _env
from fntrace.output.entry import (
    TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_PRINT, TRACE_STACK,
)
from fntrace.output.reader import entries_from_file
from fntrace.cli.report import report_pieces, report_text
from fntrace.output.stat import function_stats, walked_stats
from fntrace.tracefile import open_traces
from fntrace.tracefile import RECORD, TF_HAS_PAYLOAD, TraceFile, TraceFileWriter

from support import fntrace_cli, run_python

NATIVE = _env.native_module()
if _env.PURE:
    # FNTRACE_PURE=1: this run is the pure twin's; the native runs compare the two
    needs_native = pytest.mark.skipif(True, reason="the pure run (FNTRACE_PURE=1): the "
                                      "native runs compare the twins")
else:
    needs_native = pytest.mark.skipif(
        NATIVE is None, reason="LOUD SKIP: the native module is not built: its walks "
                               "cannot be compared with the Python ones")

# the examples a property tries (WALK_EXAMPLES: more, for a long search)
EXAMPLES = int(os.environ.get("WALK_EXAMPLES", "120"))
WALK = settings(max_examples=EXAMPLES, deadline=None)

# ids 1..6; 5 and 6 share names with 1 and 2 (a function defined again); 9 has no symbol
SYMBOLS = [(1, "m.a", "m.py", 1), (2, "m.b", "m.py", 5), (3, "m.c", "m.py", 9),
           (4, "m.d", "m.py", 13), (5, "m.a", "m.py", 20), (6, "m.b", "m.py", 24)]
IDS = [1, 2, 3, 4, 5, 6, 9]


# The strategies a stream draws from, made once: a strategy made anew for every draw
# costs hypothesis its validation each time, most of a walk test's time.
_LENGTH, _START, _STEP = st.integers(0, 60), st.integers(1, 1000), st.integers(0, 50)
_DEPTH3, _DEPTH4, _DEPTH5 = st.integers(0, 3), st.integers(0, 4), st.integers(0, 5)
_BACK500, _BACK90 = st.integers(0, 500), st.integers(0, 90)
_FN_DEPTH, _LOST = st.sampled_from([0, 1, 2]), st.sampled_from([0, 0, 3])


@st.composite
def slot_stream(draw, kinds="EEERRRRJFPX", ids=tuple(IDS)):
    """One thread slot's records, in time order, cut into chunks with losses."""
    kind_of, ip_of = st.sampled_from(kinds), st.sampled_from(ids)
    n = draw(_LENGTH)
    ts = draw(_START)
    depth = 0
    open_: list[tuple[int, int, int]] = []        # (id, depth, calltime)
    recs = []
    for _ in range(n):
        ts += draw(_STEP)                            # ties included
        kind = draw(kind_of)
        ip = draw(ip_of)
        if kind == "E":
            recs.append((ts, TRACE_GRAPH_ENT, 0, ip, depth, 0, 0))
            open_.append((ip, depth, ts))
            depth += 1
        elif kind == "R" and open_:
            ip, d, t0 = open_.pop()
            depth = d
            recs.append((ts, TRACE_GRAPH_RET, 0, ip, d, 0, t0))
        elif kind == "R":
            # a return whose entry is not in the trace (calltime before the trace)
            d = draw(_DEPTH3)
            recs.append((ts, TRACE_GRAPH_RET, 0, ip, d, 0, max(0, ts - draw(_BACK500))))
        elif kind == "J":
            # a return at another depth or of another function (its entry was lost)
            d = draw(_DEPTH4)
            recs.append((ts, TRACE_GRAPH_RET, 0, ip, d, 0, max(0, ts - draw(_BACK90))))
            depth = d
            while open_ and open_[-1][1] >= d:
                open_.pop()
        elif kind == "F":
            recs.append((ts, TRACE_FN, 0, ip, draw(_FN_DEPTH), 0, 0))
        elif kind == "P":
            recs.append((ts, TRACE_PRINT, TF_HAS_PAYLOAD, 0, 0, 0, 0))
        else:
            recs.append((ts, TRACE_GRAPH_ENT, 0, ip, draw(_DEPTH5), 0, 0))
    cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=3))))
    chunks, last = [], 0
    for c in cuts + [n]:
        chunks.append((draw(_LOST), recs[last:c]))
        last = c
    return chunks


def write(path, slots: dict[int, list], clock: str | None = None,
          tracer: str = "function_graph") -> None:
    w = TraceFileWriter(str(path), {"tracer": tracer, "pid": 1})
    w.add_symbols(SYMBOLS)
    for cpu in slots:
        w.add_thread(cpu, 100 + cpu, f"t{cpu}")
    for cpu, chunks in slots.items():
        seq = 0
        for lost, recs in chunks:
            # a record's payload is its eighth field, "text" when it has none
            payloads = {seq + i: r[7] if len(r) > 7 else "text"
                        for i, r in enumerate(recs) if r[2] & TF_HAS_PAYLOAD}
            w.write_chunk(cpu, b"".join(RECORD.pack(*r[:7]) for r in recs), seq, lost=lost,
                          payloads=payloads or None)
            seq += len(recs)
    w.close({"trace_clock": clock} if clock else {})


_MARKER_TEXT = st.sampled_from([
    "asyncio:task_switch\0next=Task-1 id=7f00",
    "asyncio:task_switch\0prev=Task-1 next=Task-2",
    "asyncio:task_switch\0prev=Task-2 next=-",
    "asyncio:task_switch\0next=Tâche-3\tid=1", "asyncio:task_switch\0",
    "ev\0two\nlines\n", "plain", "", "mark\n", "é\0ü 😀"])
_MARKER_TYPE = st.sampled_from([TRACE_PRINT, TRACE_EVENT, TRACE_EVENT])


@st.composite
def task_switches(draw, kinds: str):
    """A slot of ``kinds`` whose markers (P) become markers, events and an asyncio
    program's task switches (Tasks entered and left, outside any Task, texts with no
    next=, names beyond ASCII), their texts as the file keeps them: "name\\0text" or
    the text alone, trailing newlines, lines, text beyond ASCII."""
    chunks = draw(slot_stream(kinds))
    out = []
    for lost, recs in chunks:
        recs2 = []
        for r in recs:
            if r[1] == TRACE_PRINT:
                text = draw(_MARKER_TEXT)
                typ = draw(_MARKER_TYPE)
                r = (r[0], typ, TF_HAS_PAYLOAD, 0, 0, 0, 0, text)
            recs2.append(r)
        out.append((lost, recs2))
    return out


def graph_with_events():
    """A function_graph slot with markers and events among its calls."""
    return task_switches("EEERRRRJPPX")


def event_traces():
    """Traces whose threads have markers, events and task switches among calls, or
    among function tracer hits."""
    return st.one_of(
        st.dictionaries(st.integers(0, 5), task_switches("EEERRRRJPPX"), min_size=1,
                        max_size=3),
        st.dictionaries(st.integers(0, 3), task_switches("FFFPP"), min_size=1, max_size=3))


_ARG_PIECES = st.lists(st.sampled_from(["x", "1", "'é'", "", "[1, 2]", "\x01\"", "😀"]),
                       max_size=5)


@st.composite
def function_hits(draw):
    """A function tracer's slot: hits (callers known or not), some with their
    arguments' text (names and values joined by NULs, an odd last piece included)."""
    chunks = draw(slot_stream("F", ids=tuple(IDS) + (0,)))
    out = []
    for lost, recs in chunks:
        recs2 = []
        for r in recs:
            if draw(_DEPTH3) == 0:
                text = "\0".join(draw(_ARG_PIECES))
                r = (r[0], r[1], TF_HAS_PAYLOAD, *r[3:7], text)
            recs2.append(r)
        out.append((lost, recs2))
    return out


def hits_traces():
    """Traces of function tracer hits, or of hits among calls."""
    return st.one_of(
        st.dictionaries(st.integers(0, 5), function_hits(), min_size=1, max_size=3),
        st.dictionaries(st.integers(0, 3), slot_stream("EEERRRRJFFX"), min_size=1,
                        max_size=3))


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 3), slot_stream(), min_size=1, max_size=3),
       per_thread=st.booleans(), dist=st.booleans(), cpu=st.booleans())
def test_native_walk_is_the_python_walk(tmp_path_factory, slots, per_thread, dist, cpu):
    """The rows, and with ``dist`` each row's min, max and histogram and the calls of
    each caller -> callee edge; with ``cpu`` the durations from the returns' calltimes
    (stat --cpu-time)."""
    if cpu:
        # a CPU-time trace: each return's calltime later than its call's start, by
        # some of the time the call took (the time its thread did not run)
        slots = {c: [(lost, [r if r[1] != TRACE_GRAPH_RET or r[6] >= r[0] else
                             r[:6] + (r[6] + (r[0] - r[6]) * ((r[0] + r[3]) % 4) // 4,)
                             + r[7:] for r in recs]) for lost, recs in chunks]
                 for c, chunks in slots.items()}
    path = tmp_path_factory.mktemp("walk") / "t.dat"
    write(path, slots)
    tf = TraceFile.open(path)
    from fntrace.output.stat import StatCollector
    col = StatCollector(True, per_thread, dist, dist, cpu)
    for e in entries_from_file(tf):
        col.feed(e)
    want = col.finish()
    got = walked_stats(tf, per_thread=per_thread, dist=dist, edges=dist, cpu=cpu)
    if got is None:
        # the walk may decline, never differ; these streams are in time order with
        # calltimes before their returns, so it has no reason to
        pytest.fail("the native walk declined a trace it can walk")
    rows, no_return, no_entry, edges = got
    assert rows == want
    assert (no_return, no_entry) == (col.no_return, col.no_entry)
    assert edges == (col.edges if dist else None)
    if dist:
        assert all(r.hist is not None and sum(r.hist.values()) == r.timed for r in rows)


@needs_native
@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(slots=hits_traces())
def test_native_walk_of_function_hits_counts_the_python_edges(tmp_path_factory, slots):
    """A function tracer's hits name their callers: the walk's caller -> callee edges
    are the Python walk's, hits among calls included."""
    path = tmp_path_factory.mktemp("walkhits") / "t.dat"
    write(path, slots, tracer="function")
    tf = TraceFile.open(path)
    from fntrace.output.stat import StatCollector
    col = StatCollector(None, False, True, True)
    for e in entries_from_file(tf):
        col.feed(e)
    want = col.finish()
    got = walked_stats(tf, dist=True, edges=True)
    assert got is not None
    assert got.rows == want
    assert got.edges == col.edges


@needs_native
def test_the_walk_declines_what_it_cannot_do_exactly(tmp_path):
    # records of one slot out of time order: the merge's order is not (time, slot,
    # index) then, and the walk says so instead of guessing
    path = tmp_path / "t.dat"
    write(path, {0: [(0, [(50, TRACE_GRAPH_ENT, 0, 1, 0, 0, 0),
                          (40, TRACE_GRAPH_RET, 0, 1, 0, 0, 30)])]})
    assert walked_stats(TraceFile.open(path)) is None
    # a calltime after its return (a wrapped counter clock)
    write(path, {0: [(0, [(50, TRACE_GRAPH_RET, 0, 1, 0, 0, 90)])]})
    assert walked_stats(TraceFile.open(path)) is None
    # the Python walk still reads both (the CLI falls back to it)
    assert function_stats(entries_from_file(TraceFile.open(path)), graph=True)


# Reads a trace of several processes as ``fntrace stat`` and the folded export do, in a
# process of its own (forking the test's, which runs other threads, would warn):
# walked in this process, then each process's file in a forked child.
_FORKED_DRIVER = """
import json, os, sys
from fntrace.output import folded
from fntrace.output.source import open_trace
from fntrace.output.stat import forked_stats, walked_stats
from fntrace.tracefile import parallel
src = open_trace(sys.argv[1])
sizes = src.part_sizes()
out = {"sizes": sizes, "workers": parallel.workers(len(sizes), sum(sizes))}
forked = []
def spy(*args, **kwargs):
    got = real(*args, **kwargs)
    forked.append(got is not None)
    return got
real, parallel.map_forked = parallel.map_forked, spy
one = [walked_stats(src.tf, per_thread=p) for p in (False, True)]
fone = folded._walked_stacks(src)
os.environ["FNTRACE_JOBS"] = "3"        # (forks for a trace of any size)
out["jobs"] = parallel.workers(len(sizes), sum(sizes))
for per_thread in (False, True):
    apart = forked_stats(src, src.part_record_blocks, per_thread=per_thread)
    out[f"stat{per_thread}"] = [repr(one[per_thread]), repr(apart)]
# with the distributions: the histograms and edges added up (dicts: compared as such)
out["dist"] = (forked_stats(src, src.part_record_blocks, dist=True, edges=True)
               == walked_stats(src.tf, dist=True, edges=True))
out["folded"] = [repr(fone), repr(folded._walked_stacks(src)), forked]
print(json.dumps(out))
"""


@needs_native
@settings(max_examples=EXAMPLES // 8 or 1, deadline=None)
@given(procs=st.lists(st.dictionaries(st.integers(0, 2), slot_stream("EEERRRRJPX"),
                                      min_size=1, max_size=2), min_size=2, max_size=4))
def test_processes_walked_in_forked_children_add_up_to_one_walk(tmp_path_factory, procs):
    """tracefile/parallel.py: a trace of several processes' files, each file walked
    in a child of its own and the rows added up in file order, is the walk of them all
    (stat's rows and their order, per thread too; folded's stacks; the counts of calls
    without a return or an entry), names shared across processes (ids 5, 6) included."""
    d = tmp_path_factory.mktemp("procs")
    for k, slots in enumerate(procs):
        path = d / ("t.dat" if k == 0 else f"t.dat.{1000 + k}")
        w = TraceFileWriter(str(path), {"tracer": "function_graph", "pid": 1000 + k,
                                        "run": "r1"})
        w.add_symbols(SYMBOLS)
        for cpu, chunks in slots.items():
            w.add_thread(cpu, 100 * k + cpu, f"t{cpu}")
            for seq, (lost, recs) in enumerate(chunks):
                w.write_chunk(cpu, b"".join(RECORD.pack(*r[:7]) for r in recs), seq,
                              lost=lost)
        w.close({})
    env = {k: v for k, v in os.environ.items() if k != "FNTRACE_JOBS"}
    r = run_python("-c", _FORKED_DRIVER, str(d / "t.dat"), env=env, timeout=120)
    assert r.returncode == 0 and not r.stderr, r.stderr
    out = json.loads(r.stdout)
    assert len(out["sizes"]) == len(procs)
    assert out["workers"] == 0          # a trace this small is walked in one process
    for per_thread in (False, True):
        one, apart = out[f"stat{per_thread}"]
        assert one != "None", "the walk declined a trace it can walk"
        assert apart == one
    assert out["jobs"] == min(3, len(procs))
    assert out["dist"] is True
    one, apart, forked = out["folded"]
    assert one != "None" and apart == one
    # (a small trace: forked only with FNTRACE_JOBS; stat twice, then folded)
    assert forked == [True] * 4, "the walks were not made in forked children"


def test_forked_walks_hand_back_their_results_in_order(tmp_path):
    """map_forked: results in the parts' order whichever child walked them, each part
    walked outside the parent, progress summed in the parent, every child reaped; a
    child that raises or dies makes the answer None (the caller walks it itself)."""
    prog = tmp_path / "p.py"
    prog.write_text(textwrap.dedent("""\
        import json, os, signal, sys
        from fntrace.tracefile.parallel import map_forked
        parent = os.getpid()
        seen = []
        def work(i, progress):
            progress(70000)
            progress(5)
            if sys.argv[1] == "raise" and i == 3:
                raise ValueError("a damaged block")
            if sys.argv[1] == "kill" and i == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            # (an answer larger than a pipe holds: read while the others write)
            return i, os.getpid() != parent, "x" * (i * 300000)
        out = map_forked(work, [5, 50, 1, 20, 7], 2, seen.append)
        try:
            os.waitpid(-1, os.WNOHANG)
            left = True             # a child not reaped
        except ChildProcessError:
            left = False
        if out is not None:
            out = [(i, apart, len(x)) for i, apart, x in out]
        print(json.dumps([out, sum(seen), left]))
        """))
    ok = run_python(prog, "ok", timeout=120)
    assert ok.returncode == 0 and not ok.stderr, ok.stderr
    out, progress, left = json.loads(ok.stdout)
    assert out == [[i, True, i * 300000] for i in range(5)]
    assert progress == 5 * 70005
    assert not left
    for how in ("raise", "kill"):
        bad = run_python(prog, how, timeout=120)
        assert bad.returncode == 0 and not bad.stderr, bad.stderr
        out, _, left = json.loads(bad.stdout)
        assert out is None and not left


def export_both(path, fmt: str, options: dict) -> list:
    """``fmt``'s export of the trace at ``path``, natively and the Python way."""
    import io

    from fntrace.output.registry import get_exporter
    from fntrace.output.source import TraceSource
    exp = get_exporter(fmt)
    outs = []
    for native in (True, False):
        out = io.BytesIO() if exp.binary else io.StringIO()
        with pytest.MonkeyPatch.context() as mp:
            if not native:
                mp.setattr(_env, "native", lambda: None)
            result = exp.write(TraceSource(TraceFile.open(path)), out, options)
        outs.append((out.getvalue(), result))
    return outs


def perfetto_both(path) -> list:
    """The Perfetto export of the trace at ``path``, natively and the Python way (the
    same bytes), the native one written by the native walk and parsed back by the
    protos as it was written (every field known to them, in their order)."""
    pytest.importorskip("perfetto", reason="LOUD SKIP: the perfetto package (fntrace[perfetto]) "
                                           "is not installed")
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from fntrace.output import perfetto
    used = []
    real = perfetto._Writer._native_calls

    def spy(self, first_ts):
        used.append(real(self, first_ts))
        return used[-1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(perfetto._Writer, "_native_calls", spy)
        native, python = export_both(path, "perfetto", {})
    assert native == python
    assert used[0] is True          # the native walk wrote the first (native) export
    trace = pb.Trace()
    trace.ParseFromString(native[0])
    assert trace.packet and trace.SerializeToString() == native[0]
    return [native, python]


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 3), slot_stream("EEERRRRJPX"), min_size=1,
                             max_size=3),
       weight=st.sampled_from(["time", "calls"]))
def test_native_folded_is_the_python_walk(tmp_path_factory, slots, weight):
    path = tmp_path_factory.mktemp("folded") / "t.dat"
    write(path, slots)
    native, python = export_both(path, "folded", {"weight": weight})
    assert native == python


@needs_native
@WALK
@given(slots=hits_traces(),
       weight=st.sampled_from(["time", "calls"]))
def test_native_folded_of_function_hits_is_the_python_walk(tmp_path_factory, slots, weight):
    """Hits (alone, and among calls) fold to [caller;]function, counted: StatWalk's hit
    paths are the loop's."""
    from fntrace.output import folded
    from fntrace.output.source import TraceSource
    path = tmp_path_factory.mktemp("foldedhits") / "t.dat"
    write(path, slots, tracer="function")
    native, python = export_both(path, "folded", {"weight": weight})
    assert native == python
    walked = folded._walked_stacks(TraceSource(TraceFile.open(path)))
    assert walked is not None
    assert walked[3] == sum(r[1] == TRACE_FN for chunks in slots.values()
                            for _, recs in chunks for r in recs)


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 5), graph_with_events(), min_size=1, max_size=3))
def test_native_chrome_with_events_is_the_python_loop(tmp_path_factory, slots):
    """Markers and events among the calls: instants named and annotated as the loop
    names them (an event by its name, a marker by its text)."""
    from fntrace.output import chrome_json
    from fntrace.output.source import TraceSource
    path = tmp_path_factory.mktemp("chromeev") / "t.dat"
    write(path, slots)
    native, python = export_both(path, "chrome", {})
    assert native == python
    assert chrome_json._native_calls(TraceSource(TraceFile.open(path)), io.StringIO(), 1,
                                     None) is not None


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 5), function_hits(), min_size=1, max_size=3))
def test_native_chrome_of_function_hits_is_the_python_loop(tmp_path_factory, slots):
    """The default tracer's hits: instants with their caller and arguments, losses
    between them, written by ChromeCalls as the loop writes them."""
    path = tmp_path_factory.mktemp("chromehits") / "t.dat"
    write(path, slots, tracer="function")
    native, python = export_both(path, "chrome", {})
    assert native == python
    from fntrace.output import chrome_json
    from fntrace.output.source import TraceSource
    assert chrome_json._native_calls(TraceSource(TraceFile.open(path)), io.StringIO(), 1,
                                     None) is not None


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 5), slot_stream("EEEERRRRJX"), min_size=1,
                             max_size=3))
def test_native_chrome_is_the_python_loop(tmp_path_factory, slots):
    path = tmp_path_factory.mktemp("chrome") / "t.dat"
    write(path, slots)
    native, python = export_both(path, "chrome", {})
    assert native == python
    json.loads(native[0])


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 5), slot_stream("EEEERRRRJX"), min_size=1,
                             max_size=3),
       clock=st.sampled_from(["local", "local", "counter", "mono_raw"]))
def test_native_perfetto_is_the_python_loop(tmp_path_factory, slots, clock):
    pytest.importorskip("perfetto", reason="LOUD SKIP: the perfetto package (fntrace[perfetto]) "
                                           "is not installed")
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    path = tmp_path_factory.mktemp("perfetto") / "t.dat"
    write(path, slots, clock)
    native, python = export_both(path, "perfetto", {})
    # the same packets, as the protobuf runtime serializes them: the same file
    assert native == python
    trace = pb.Trace()
    trace.ParseFromString(native[0])
    # every field known to the protos, in their order (an unknown one moves to the end)
    assert trace.packet and trace.SerializeToString() == native[0]


def check_otlp(fmt: str, text) -> None:
    """Each OTLP/JSON line is JSON; each OTLP protobuf request (after its 4-byte length)
    parses, with every field known to the protos and in their order."""
    if fmt == "otlp":
        # (lines end at "\n" only: a value may hold U+0085 or U+2028, JSON text as it is)
        for line in text.split("\n")[:-1]:
            json.loads(line)
        return
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    at = 0
    while at < len(text):
        n = int.from_bytes(text[at:at + 4], "big")
        body = text[at + 4:at + 4 + n]
        assert len(body) == n
        req = ExportTraceServiceRequest.FromString(body)
        assert req.resource_spans[0].scope_spans[0].spans
        assert req.SerializeToString() == body
        at += 4 + n


_OTLP_FORMATS = st.sampled_from(["otlp", "otlp-proto"])


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 5), slot_stream("EEEERRRRJX"), min_size=1,
                             max_size=3),
       min_duration=st.sampled_from([0.0, 0.0, 0.02, 0.1]), batch=st.sampled_from([5000, 3]),
       fmt=_OTLP_FORMATS)
def test_native_otlp_is_the_python_loop(tmp_path_factory, slots, min_duration, batch, fmt):
    pytest.importorskip("opentelemetry.proto", reason="LOUD SKIP: the opentelemetry-proto "
                                                      "package (fntrace[otlp]) is not installed")
    from fntrace.output import otlp
    path = tmp_path_factory.mktemp("otlp") / "t.dat"
    write(path, slots)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(otlp, "BATCH", batch)        # lines of a few spans: their seams
        native, python = export_both(path, fmt, {"min_duration": min_duration})
    assert native == python
    check_otlp(fmt, native[0])


@needs_native
@WALK
@given(slots=st.one_of(event_traces(), hits_traces()), otel=st.booleans(),
       tracer=st.sampled_from(["function_graph", "function"]), fmt=_OTLP_FORMATS)
def test_native_otlp_passes_events_over_as_the_python_loop(tmp_path_factory, slots, otel,
                                                           tracer, fmt):
    """An asyncio program's task switches (events, markers) and the default tracer's
    hits are no spans: the native walk passes them over (a trace of hits alone: no
    span at all); a --otel-context event is the loop's to read."""
    pytest.importorskip("opentelemetry.proto", reason="LOUD SKIP: the opentelemetry-proto "
                                                      "package (fntrace[otlp]) is not installed")
    from fntrace.output import otlp
    if otel:
        first = next(iter(slots))
        lost, recs = slots[first][0]
        at = recs[0][0] if recs else 1
        slots[first][0] = (lost, [(at, TRACE_EVENT, TF_HAS_PAYLOAD, 0, 0, 0, 0,
                                   otlp.OTEL_EVENT + "\0trace_id=" + "1" * 32 + " span_id="
                                   + "2" * 16)] + recs)
    path = tmp_path_factory.mktemp("otlpev") / "t.dat"
    write(path, slots, tracer=tracer)
    walked = []
    spans = otlp._native_spans
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(otlp, "_native_spans", lambda *a, **k: walked.append(spans(*a, **k))
                   or walked[-1])
        native, python = export_both(path, fmt, {})
    assert native == python
    assert walked[0] is None if otel else walked[0] is not None
    check_otlp(fmt, native[0])


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 5), slot_stream("EEEERRRRJX"), min_size=1,
                             max_size=3))
def test_native_parquet_is_the_python_loop(tmp_path_factory, slots):
    import pyarrow.parquet as pq
    path = tmp_path_factory.mktemp("parquet") / "t.dat"
    write(path, slots)
    native, python = export_both(path, "parquet", {})
    # the same rows in the same row groups: the same file, byte for byte
    assert native == python
    import io
    assert pq.read_table(io.BytesIO(native[0])).num_rows >= 0


@needs_native
@WALK
@given(slots=event_traces(),
       tracer=st.sampled_from(["function_graph", "function"]))
def test_native_parquet_with_events_is_the_python_loop(tmp_path_factory, slots, tracer):
    """An asyncio program's trace: markers and events a row each (kind, name, text in
    args), and each row's asyncio Task (the task column) from its thread's switches;
    the same file as the Python loop's, made by the native walk."""
    import io

    import pyarrow.parquet as pq

    from fntrace.output import parquet
    from fntrace.output.source import TraceSource
    path = tmp_path_factory.mktemp("pqevents") / "t.dat"
    write(path, slots, tracer=tracer)
    native, python = export_both(path, "parquet", {})
    assert native == python
    src = TraceSource(TraceFile.open(path))
    counts: dict = {}
    assert parquet._native_columns(src, lambda cpu: src.pid, src.places(), counts, 7) \
        is not None
    list(parquet.record_batches(src, counts, 7))
    assert "declined" not in counts
    rows = pq.read_table(io.BytesIO(native[0])).to_pylist()
    switches = sum(1 for chunks in slots.values() for _, recs in chunks for r in recs
                   if r[1] == TRACE_EVENT and r[7].startswith("asyncio:task_switch\0"))
    assert sum(r["kind"] == "event" and r["function"] == "asyncio:task_switch"
               for r in rows) == switches


@needs_native
@WALK
@given(slots=hits_traces())
def test_native_parquet_of_function_hits_is_the_python_loop(tmp_path_factory, slots):
    """The default tracer's hits (and hits among calls): a row each, of kind "hit", its
    caller as the parent, its arguments' text, no duration, self time, depth or stack
    (nulls): the same file as the Python loop's, and what sql is handed (the Arrow
    stream) holds the same rows."""
    import io

    import pyarrow as pa

    from fntrace.output import parquet
    from fntrace.output.source import TraceSource
    path = tmp_path_factory.mktemp("pqhits") / "t.dat"
    write(path, slots, tracer="function")
    native, python = export_both(path, "parquet", {})
    assert native == python
    # the native walk made it
    src = TraceSource(TraceFile.open(path))
    counts: dict = {}
    assert parquet._native_columns(src, lambda cpu: src.pid, src.places(), counts, 7) \
        is not None
    list(parquet.record_batches(src, counts, 7))
    assert "declined" not in counts
    if hasattr(pa.RecordBatchReader, "from_stream"):
        class Stream:
            def __arrow_c_stream__(self, requested_schema=None):
                return parquet.column_stream(TraceSource(TraceFile.open(path)), None, 7)
        got = pa.RecordBatchReader.from_stream(Stream()).read_all()
        import pyarrow.parquet as pq
        assert got.to_pylist() == pq.read_table(io.BytesIO(python[0])).to_pylist()


@st.composite
def stacks_later(draw):
    """A trace of calls whose later chunks hold stack traces (TRACE_STACK, the text in
    its payload): records CallRows declines after it made rows of the earlier ones."""
    slots = draw(st.dictionaries(st.integers(0, 3), slot_stream("EEERRRRJFPX"),
                                 min_size=1, max_size=3))
    out = {}
    for cpu, chunks in slots.items():
        chunks = list(chunks)
        if chunks and draw(st.booleans()):
            lost, recs = chunks[-1]
            at = draw(st.integers(0, len(recs)))
            ts = recs[at - 1][0] if at else 1
            stack = (ts, TRACE_STACK, TF_HAS_PAYLOAD, 0, 0, 0, 0,
                     draw(st.sampled_from(["a\nb", "stack", "f (x.py:1)"])))
            chunks[-1] = (lost, recs[:at] + [stack] + recs[at:])
        out[cpu] = chunks
    return out


@needs_native
@WALK
@given(slots=stacks_later(), batch=st.sampled_from([1, 3, 7, 64]))
def test_parquet_walk_declines_a_record_and_the_python_twin_goes_on(tmp_path_factory, slots,
                                                                     batch):
    """No pass over the trace before the walk: CallRows looks at each record as it
    reads it, and one it does not take (a stack trace) hands the rest of the table to
    the Python loop, whose batches already made are left out.  The batches, and the Arrow
    stream sql reads, are the Python loop's from the first row to the last."""
    import pyarrow as pa

    from fntrace.output import parquet
    from fntrace.output.source import TraceSource
    path = tmp_path_factory.mktemp("decline") / "t.dat"
    write(path, slots)
    src = TraceSource(TraceFile.open(path))
    pid_of = lambda cpu: src.pid  # noqa: E731
    want_counts: dict = {}
    want = list(parquet._python_batches(src, want_counts, batch, pid_of, src.places()))
    got_counts: dict = {}
    got = list(parquet.record_batches(src, got_counts, batch))
    assert [b.num_rows for b in got] == [b.num_rows for b in want]
    assert [b.to_pylist() for b in got] == [b.to_pylist() for b in want]
    has_stack = any(r[1] == TRACE_STACK for chunks in slots.values() for _, recs in chunks
                    for r in recs)
    assert ("declined" in got_counts) == has_stack
    assert {k: v for k, v in got_counts.items() if k != "declined"} == want_counts
    if hasattr(pa.RecordBatchReader, "from_stream"):
        for columns in (None, ("kind", "function", "dur", "args", "stack")):
            class Stream:
                def __arrow_c_stream__(self, requested_schema=None):
                    return parquet.column_stream(src, None, batch, None, columns)
            table = pa.RecordBatchReader.from_stream(Stream()).read_all()
            names = [n for n, _ in parquet.COLUMNS if columns is None or n in columns]
            assert table.column_names == names
            assert table.to_pylist() == [{k: r[k] for k in names}
                                         for b in want for r in b.to_pylist()]


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 5), slot_stream("EEERRRRJFX", ids=(1, 2, 3, 4, 5, 6)),
                             min_size=1, max_size=3))
def test_native_trace_dat_is_the_python_loop(tmp_path_factory, slots):
    path = tmp_path_factory.mktemp("dat") / "t.dat"
    write(path, slots)
    native, python = export_both(path, "trace-cmd", {})
    assert native == python


@needs_native
@WALK
@given(slots=event_traces(),
       tracer=st.sampled_from(["function_graph", "function"]), stack=st.booleans())
def test_native_trace_dat_with_events_is_the_python_loop(tmp_path_factory, slots, tracer,
                                                         stack):
    """Markers, events (their formats numbered as they are first met, their fields
    named by the first one's text) and stack traces in trace-cmd's pages: made by the
    native walk when they are all on one thread (an asyncio program's task switches),
    by the Python loop otherwise; the same file either way."""
    from fntrace.output import trace_dat
    if stack:
        # a stack trace among the markers (its frames' names are new symbols)
        slots = {cpu: [(lost, [(r[0], TRACE_STACK, *r[2:7], "m.a\nm.b+0x10\nnew.f\n")
                               if len(r) > 7 and r[7] == "plain" else r for r in recs])
                       for lost, recs in chunks] for cpu, chunks in slots.items()}
    path = tmp_path_factory.mktemp("datevents") / "t.dat"
    write(path, slots, tracer=tracer)
    used = []
    real = trace_dat._native_pages

    def spy(*args):
        used.append(real(*args))
        return used[-1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trace_dat, "_native_pages", spy)
        native, python = export_both(path, "trace-cmd", {})
    assert native == python
    recs = [(cpu, r) for cpu, chunks in slots.items() for _, rs in chunks for r in rs]
    texts = {cpu for cpu, r in recs if len(r) > 7}
    known = {sym[0] for sym in SYMBOLS}
    named = all(len(r) > 7 or (r[3] in known and (r[1] != TRACE_FN or r[4] in known | {0}))
                for _, r in recs)
    if len(texts) <= 1 and named:
        assert used[0] is not None      # the native walk wrote it


@needs_native
def test_trace_dat_events_met_first_on_a_later_thread_are_numbered_first(tmp_path):
    """The loop numbers events as it meets them in time; the native walk goes thread
    by thread: events on two threads are left to the loop (thread 1's event is first
    in time, thread 0's is walked first), and the file is the loop's."""
    slots = {0: [(0, [(5, TRACE_GRAPH_ENT, 0, 1, 0, 0, 0),
                      (6, TRACE_EVENT, TF_HAS_PAYLOAD, 0, 0, 0, 0, "zz\0(m.a) x=1"),
                      (7, TRACE_GRAPH_RET, 0, 1, 0, 0, 5)])],
             1: [(0, [(1, TRACE_EVENT, TF_HAS_PAYLOAD, 0, 0, 0, 0, "ev\0(m.b) y=2"),
                      (2, TRACE_PRINT, TF_HAS_PAYLOAD, 0, 0, 0, 0, "new.writer\0hi")])]}
    path = tmp_path / "t.dat"
    write(path, slots)
    native, python = export_both(path, "trace-cmd", {})
    assert native == python
    assert b"name: ev\nID: 1000\n" in native[0] and b"name: zz\nID: 1001\n" in native[0]


def index_both(path, limit: int | None = None, spill: tuple[int, int] | None = None) -> list:
    """The browser's index of the trace at ``path`` (tui/index.py), natively and the
    Python way: every thread's columns, events and per-function sums.  ``spill``:
    (bytes of memory, rows of a chunk as a shift) for its columns, to have them cut in
    small chunks and written to their file (tui/column.py)."""
    from fntrace.output.source import open_trace
    from fntrace.tui.index import TraceIndex
    outs = []
    for native in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            if not native:
                mp.setattr(_env, "native", lambda: None)
            ix = TraceIndex(open_trace(str(path)), *(spill or ()))
            if limit is not None:
                ix.build(limit)             # the first screen, then the rest
            ix.build()
        assert ix.done and ix.error is None, ix.error
        assert (ix._walk is not False) == native
        names = ix.names
        threads = {}
        for cpu, t in ix.threads.items():
            threads[cpu] = (
                t.tid, t.comm, t.n,
                [names[f] for f in t.func], list(t.depth), list(t.start), list(t.end),
                list(t.self_ns), list(t.parent), list(t.subend), list(t.args), list(t.ret),
                [names[f] if f >= 0 else None for f in t.caller], bytes(t.flags),
                list(t.ev_ts), t.ev_text, t.nev,
                {names[f]: v for f, v in t.hit.items()},
                {names[f]: v for f, v in t.total.items()},
                {names[f]: v for f, v in t.self_total.items()})
        outs.append((threads, ix.first_ts, ix.read, ix.texts))
    return outs


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 5), slot_stream("EEEERRRRJX"), min_size=1,
                             max_size=3),
       limit=st.sampled_from([None, 1, 7]), spill=st.sampled_from([None, (0, 1), (96, 2)]))
def test_native_tui_index_is_the_python_index(tmp_path_factory, slots, limit, spill):
    path = tmp_path_factory.mktemp("index") / "t.dat"
    write(path, slots)
    native, python = index_both(path, limit, spill)
    assert native == python
    if spill is not None:
        # the columns kept in a file are the columns kept in memory
        assert native == index_both(path, limit)[0]


@needs_native
@WALK
@given(data=st.data(), limit=st.sampled_from([None, 1, 7]),
       spill=st.sampled_from([None, (0, 1), (96, 2)]))
def test_native_tui_index_with_values_is_the_python_index(tmp_path_factory, data, limit,
                                                          spill):
    """-A -R traces: each row's arguments and return value are the index's texts, the
    same ids in the same order as the Python index interns them (an entry's arguments
    after the calls it ends, a return value when its call closes)."""
    slots = draw_values(data, 5, "EEEERRRRJX")
    path = tmp_path_factory.mktemp("indexvalues") / "t.dat"
    write(path, slots)
    native, python = index_both(path, limit, spill)
    assert native == python
    if spill is not None:
        assert native == index_both(path, limit)[0]


@needs_native
@WALK
@given(slots=hits_traces(),
       limit=st.sampled_from([None, 1, 7]), spill=st.sampled_from([None, (0, 1)]))
def test_native_tui_index_of_function_hits_is_the_python_index(tmp_path_factory, slots,
                                                               limit, spill):
    """The default tracer's hits (and hits among calls): a closed row each, its caller,
    its arguments' text, a hit with no time in the function's sums."""
    path = tmp_path_factory.mktemp("indexhits") / "t.dat"
    write(path, slots, tracer="function")
    native, python = index_both(path, limit, spill)
    assert native == python


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 5), graph_with_events(), min_size=1, max_size=3),
       limit=st.sampled_from([None, 1, 7]), spill=st.sampled_from([None, (0, 1)]))
def test_native_tui_index_with_events_is_the_python_index(tmp_path_factory, slots, limit,
                                                          spill):
    """An asyncio program's task switches and its markers: each thread's events, in
    time order among its losses, as the Python index keeps them."""
    path = tmp_path_factory.mktemp("indexev") / "t.dat"
    write(path, slots)
    native, python = index_both(path, limit, spill)
    assert native == python


def native_report(tf: TraceFile, **kw) -> tuple[str, list[int]]:
    """The text report the native printer prints (report_pieces), which must be the
    Python printers' (report_text), and the sizes of the blocks of records it read."""
    read: list[int] = []
    got = "".join(report_pieces(tf, on_block=read.append, **kw))
    assert got == "".join(line + "\n" for line in report_text(tf, **kw))
    return got, read


GRAPH_OPTIONS = ("funcgraph-cpu", "funcgraph-overhead", "funcgraph-proc",
                 "funcgraph-duration", "funcgraph-abstime", "funcgraph-tail")


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 11), slot_stream("EEERRRRJX"), min_size=1,
                             max_size=3),
       flags=st.tuples(*[st.booleans()] * len(GRAPH_OPTIONS)))
def test_native_graph_text_is_the_python_printers(tmp_path_factory, slots, flags):
    path = tmp_path_factory.mktemp("text") / "t.dat"
    write(path, slots)
    tf = TraceFile.open(path)
    options = dict(zip(GRAPH_OPTIONS, flags))
    got, read = native_report(tf, options=options)
    # the native printer printed it: it read every record
    assert sum(read) == tf.nr_records()


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 11), function_hits(), min_size=1, max_size=3),
       irq=st.booleans(), parent=st.booleans(), clock=st.sampled_from([None, "counter"]),
       flt=st.sampled_from([None, ("m.a",), ("m.[bc]", "0x9")]),
       keep=st.sampled_from([None, frozenset({0, 1})]))
def test_native_function_text_is_the_python_printer(tmp_path_factory, slots, irq, parent,
                                                    clock, flt, keep):
    """The function tracer's report: the native printer (FunctionText) prints what
    render_function_trace prints, losses, -F and --cpu included."""
    from fntrace.output.filters import TraceFilter
    path = tmp_path_factory.mktemp("fntext") / "t.dat"
    write(path, slots, clock, tracer="function")
    tf = TraceFile.open(path)
    options = {"irq-info": irq, "print-parent": parent}
    filt = TraceFilter(functions=flt or (), cpus=keep or frozenset())
    got, read = native_report(tf, options=options, flt=filt)
    # the native printer printed it (a filter of a trace with losses is filter_entries')
    if not (flt and tf.lost()):
        assert sum(read) == sum(len(recs) for k, chunks in slots.items()
                                if keep is None or k in keep for _, recs in chunks)


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 11), graph_with_events(), min_size=1,
                             max_size=3),
       flags=st.tuples(*[st.booleans()] * len(GRAPH_OPTIONS)))
def test_native_graph_text_with_events_is_the_python_printer(tmp_path_factory, slots, flags):
    """Markers and events are comments at the depth of the innermost open call, as
    print_graph_comment prints them; the native printer prints them."""
    path = tmp_path_factory.mktemp("textev") / "t.dat"
    write(path, slots)
    tf = TraceFile.open(path)
    options = dict(zip(GRAPH_OPTIONS, flags))
    got, read = native_report(tf, options=options)
    assert sum(read) == tf.nr_records()


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 5), slot_stream("EEERRRRJX"), min_size=1,
                             max_size=4),
       keep=st.sets(st.integers(0, 6), min_size=1, max_size=3), by=st.sampled_from(["cpus", "tids", "threads"]))
def test_native_walks_of_some_threads_are_the_filtered_python_ones(tmp_path_factory, slots,
                                                                   keep, by):
    """--cpu/--tid/--thread alone keep whole threads: the native text and profile read
    those threads' records only, and give what the Python filter gives."""
    from fntrace.output.filters import TraceFilter, kept_slots
    path = tmp_path_factory.mktemp("keep") / "t.dat"
    write(path, slots)
    tf = TraceFile.open(path)
    value = {"cpus": frozenset(keep), "tids": frozenset(100 + k for k in keep),
             "threads": tuple(f"t{k}" for k in keep)}[by]
    flt = TraceFilter(**{by: value})
    kept = kept_slots(flt, tf.threads, tf.cpus)
    assert kept == frozenset(k for k in keep if k in slots)
    got, read = native_report(tf, flt=flt)
    assert sum(read) == sum(len(recs) for k in kept for _, recs in slots[k])
    blocks = tf.record_blocks()
    assert_walk_is_the_filtered_python_one(tf, flt, True,
                                           (b for b in blocks if b[0] in kept))
    blocks.close()


def assert_walk_is_the_filtered_python_one(tf, flt, graph: bool, blocks) -> None:
    """The native profile of ``blocks`` (a filtered walk's) is StatCollector's of the
    entries filter_entries lets through: its rows with their distributions, and the
    calls of each caller -> callee edge."""
    from fntrace.output.filters import filter_entries
    from fntrace.output.stat import StatCollector
    walked = walked_stats(tf, per_thread=True, blocks=blocks, dist=True, edges=True)
    col = StatCollector(graph, True, True, True)
    for e in filter_entries(entries_from_file(tf), flt, graph=graph, threads=tf.threads):
        col.feed(e)
    assert walked is not None
    assert walked == (col.finish(), col.no_return, col.no_entry, col.edges)


GLOBS = ("m.a", "m.*", "m.[bc]", "*d", "0x*", "nosuch")


@st.composite
def report_filter(draw):
    """A TraceFilter of -F/-N globs, a time window (relative, exact; or absolute as
    the report prints times, to the microsecond), -D and --thresh, maybe with --cpu."""
    from decimal import Decimal

    from fntrace.output.filters import TimeBound, TraceFilter

    def bound():
        if draw(st.integers(0, 3)):
            return None
        if draw(st.booleans()):
            return TimeBound(Decimal(draw(st.integers(0, 3000))).scaleb(-9), True, 9)
        return TimeBound(Decimal(draw(st.integers(0, 4))).scaleb(-6), False, 6)
    lo, hi = bound(), bound()
    if lo is not None and hi is not None and lo.relative == hi.relative and lo.value > hi.value:
        lo, hi = hi, lo
    return TraceFilter(
        functions=tuple(draw(st.lists(st.sampled_from(GLOBS), max_size=2))),
        notrace=tuple(draw(st.lists(st.sampled_from(GLOBS), max_size=1))),
        cpus=frozenset(draw(st.sets(st.integers(0, 3), max_size=2))
                       if not draw(st.integers(0, 3)) else ()),
        time_from=lo, time_to=hi, max_depth=draw(st.sampled_from([0, 0, 0, 1, 2, 3])),
        thresh_ns=draw(st.sampled_from([0, 0, 0, 10, 60])))


@needs_native
@WALK
@given(slots=st.dictionaries(st.integers(0, 3), slot_stream("EEERRRRJFX"), min_size=1,
                             max_size=3),
       flt=report_filter())
def test_native_filters_are_the_python_filters(tmp_path_factory, slots, flt):
    """-F/-N, --from/--to, -D and --thresh applied to the blocks natively (RecordFilter):
    the report's text and the profile are what filter_entries gives the Python printer
    and StatCollector."""
    from dataclasses import replace

    from fntrace.output.filters import native_filter, thread_slots
    # no losses: where a loss marker goes when records after it are left out is the
    # entry stream's to say, and the native filter leaves such traces to it
    slots = {k: [(0, recs) for _, recs in chunks] for k, chunks in slots.items()}
    path = tmp_path_factory.mktemp("filter") / "t.dat"
    write(path, slots)
    tf = TraceFile.open(path)
    for graph in (True, False):
        if graph and any(r[1] == TRACE_FN for chunks in slots.values()
                         for _, recs in chunks for r in recs):
            continue        # a function_graph trace of graph records only
        rest = replace(flt, cpus=frozenset())
        keep = thread_slots(flt, tf.threads, tf.cpus)
        nslots = max(tf.cpus) + 1
        if graph:
            got, read = native_report(tf, flt=flt)
            # the native printer printed it (it was fed the threads kept; a window may
            # leave every block unread)
            assert read or rest.empty or flt.time_from or flt.time_to or not any(
                recs for k, chunks in slots.items() if keep is None or k in keep
                for _, recs in chunks)
        filt = native_filter(rest, tf, nslots, graph=graph) if not rest.empty else None
        assert filt is not None or rest.empty
        blocks = tf.record_blocks()
        assert_walk_is_the_filtered_python_one(
            tf, flt, graph, ((c, lost, filt(c, recs, base) if filt else recs, base)
                             for c, lost, recs, base in blocks if keep is None or c in keep))
        blocks.close()


@needs_native
def test_a_time_window_leaves_the_blocks_outside_it_unread(tmp_path):
    """With the file's index, report and stat of a window decode the blocks that hold
    it (and, with -F, those before it: a match open when the window starts counts),
    and print what the Python filter prints of the whole file."""
    from decimal import Decimal

    from fntrace.output.filters import TimeBound, TraceFilter
    path = tmp_path / "t.dat"
    w = TraceFileWriter(str(path), {"tracer": "function_graph", "pid": 1})
    w.max_chunk_records = 64
    w.add_symbols(SYMBOLS)
    w.add_thread(0, 100, "t0")
    recs = []
    for i in range(2000):           # 1000 calls of m.a, one every 100 ns
        recs += [(1000 + 100 * i, TRACE_GRAPH_ENT, 0, 1, 0, 0, 0),
                 (1050 + 100 * i, TRACE_GRAPH_RET, 0, 1, 0, 0, 1000 + 100 * i)]
    w.write_chunk(0, b"".join(RECORD.pack(*r) for r in recs), 0)
    w.close({})
    tf = TraceFile.open(path)
    ns = Decimal(1).scaleb(-9)
    for flt, most in ((TraceFilter(time_from=TimeBound(50_000 * ns, True, 9),
                                   time_to=TimeBound(60_000 * ns, True, 9)), 2 * 64 + 200),
                      (TraceFilter(functions=("m.*",), time_to=TimeBound(10_000 * ns, True, 9)),
                       2 * 64 + 200)):
        got, read = native_report(tf, flt=flt)
        assert 0 < sum(read) <= most < tf.nr_records()


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
_ARGS_TEXT = st.lists(_TEXT, max_size=5)
_RETURN_VALUE = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), _TEXT,
                          st.sampled_from([0, -1, -22, "None", "raised ValueError"]))


@st.composite
def with_values(draw, chunks):
    """A slot's chunks (no losses), its entries given arguments (names and values
    joined by NULs, as the recorder writes them; an odd piece at the end too) and its
    returns values (text, or an int of 64 bits), some of them."""
    out = []
    for _, recs in chunks:
        new = []
        for r in recs:
            if r[1] == TRACE_GRAPH_ENT and draw(st.booleans()):
                pieces = draw(_ARGS_TEXT)
                r = (r[0], r[1], TF_HAS_PAYLOAD, *r[3:7], "\0".join(pieces))
            elif r[1] == TRACE_GRAPH_RET and draw(st.booleans()):
                v = draw(_RETURN_VALUE)
                r = (r[0], r[1], TF_HAS_PAYLOAD, *r[3:7], v)
            new.append(r)
        out.append((0, new))
    return out


def draw_values(data, top: int, kinds: str) -> dict:
    """Up to three thread slots (numbered 0..top) of calls of ``kinds``, some entries
    with arguments and some returns with values (with_values)."""
    slots = data.draw(st.dictionaries(st.integers(0, top), slot_stream(kinds),
                                      min_size=1, max_size=3))
    return {k: data.draw(with_values(chunks)) for k, chunks in slots.items()}


@needs_native
@WALK
@given(data=st.data(), flags=st.tuples(*[st.booleans()] * 4), flt=report_filter())
def test_native_graph_text_prints_arguments_and_return_values(tmp_path_factory, data, flags,
                                                              flt):
    """-A/-R traces: the native printer takes the arguments and return values from the
    payloads as the file has them, and prints what the Python printer prints, with
    funcgraph-args/-retval/-retval-hex/-tail and the report's filters."""
    slots = draw_values(data, 3, "EEERRRRJX")
    path = tmp_path_factory.mktemp("values") / "t.dat"
    write(path, slots)
    tf = TraceFile.open(path)
    options = dict(zip(("funcgraph-args", "funcgraph-retval", "funcgraph-retval-hex",
                        "funcgraph-tail"), flags))
    got, read = native_report(tf, flt=flt, options=options)
    keep = None if not flt.cpus else flt.cpus
    # the native printer printed it (a window may leave every block unread)
    assert read or flt.time_from or flt.time_to or not any(
        recs for k, chunks in slots.items() if keep is None or k in keep for _, recs in chunks)


@needs_native
@WALK
@given(data=st.data())
def test_native_parquet_with_values_is_the_python_loop(tmp_path_factory, data):
    """-A -R traces: the Parquet table's args and retval columns made natively from the
    payloads (function_args_text, str()), the same file as the Python loop's."""
    import io

    import pyarrow.parquet as pq
    slots = draw_values(data, 3, "EEERRRRJX")
    path = tmp_path_factory.mktemp("pqvalues") / "t.dat"
    write(path, slots)
    native, python = export_both(path, "parquet", {})
    assert native == python
    rows = pq.read_table(io.BytesIO(native[0])).to_pylist()
    valued = [r for chunks in slots.values() for _, recs in chunks for r in recs if len(r) > 7]
    assert sum(r["args"] is not None or r["retval"] is not None for r in rows) <= len(valued)


@needs_native
@WALK
@given(data=st.data())
def test_native_chrome_with_values_is_the_python_loop(tmp_path_factory, data):
    """-A -R traces: each call's arguments and return value in the Chrome event's args,
    written natively as json.dumps writes the exporter's dict (names given twice, odd
    pieces, control characters, text beyond the BMP, ints beyond 2**53)."""
    import io
    import json

    from fntrace.output import chrome_json
    from fntrace.output.source import TraceSource
    slots = draw_values(data, 3, "EEERRRRJX")
    path = tmp_path_factory.mktemp("chromevalues") / "t.dat"
    write(path, slots)
    native, python = export_both(path, "chrome", {})
    assert native == python
    # and the native walk wrote it
    src = TraceSource(TraceFile.open(path))
    assert chrome_json._native_calls(src, io.StringIO(), 1, None) is not None
    json.loads(native[0])


@needs_native
@WALK
@given(data=st.data(), clock=st.sampled_from(["local", "counter"]))
def test_native_perfetto_with_values_is_the_python_loop(tmp_path_factory, data, clock):
    """-A -R traces: a begin's "args" annotation (a dict entry per pair, names interned
    with the other annotation names) and an end's "retval" (an int or a string), the
    packets as the protobuf runtime serializes them."""
    slots = draw_values(data, 3, "EEERRRRJX")
    path = tmp_path_factory.mktemp("pfvalues") / "t.dat"
    write(path, slots, clock)
    perfetto_both(path)


@needs_native
@WALK
@given(slots=hits_traces(),
       clock=st.sampled_from(["local", "counter"]))
def test_native_perfetto_of_function_hits_is_the_python_loop(tmp_path_factory, slots, clock):
    """The default tracer's hits (and hits among calls): an instant each, its caller an
    interned "parent" value, its arguments "args"; the packets as the protobuf runtime
    serializes them, written by the native walk."""
    path = tmp_path_factory.mktemp("pfhits") / "t.dat"
    write(path, slots, clock, tracer="function")
    perfetto_both(path)


@needs_native
@WALK
@given(slots=event_traces(),
       tracer=st.sampled_from(["function_graph", "function"]),
       clock=st.sampled_from(["local", "counter"]))
def test_native_perfetto_with_events_is_the_python_loop(tmp_path_factory, slots, tracer,
                                                        clock):
    """An asyncio program's trace: an event's instant (its name interned with the
    functions': an event named as a function shares its iid; its text "fields"), a
    marker's (its text as the name, its writer an interned "writer"), written by the
    native walk as the protobuf runtime serializes the Python loop's packets."""
    # an event named as a function (SYMBOLS' names), before or after its calls
    named = {cpu: [(lost, [(r[0], r[1], r[2], *r[3:7],
                            "m.a\0x" if r[7] == "plain" else r[7])
                           if len(r) > 7 and r[1] == TRACE_EVENT else r for r in recs])
                   for lost, recs in chunks] for cpu, chunks in slots.items()}
    path = tmp_path_factory.mktemp("pfevents") / "t.dat"
    write(path, named, clock, tracer=tracer)
    perfetto_both(path)


_RAISED = st.sampled_from(["raised", "raised ", "raised ValueError: \"x\"\n\u00e9",
                           "raisedX", "raise", "Raised Foo"])


@needs_native
@WALK
@given(data=st.data(), min_duration=st.sampled_from([0.0, 0.02]),
       batch=st.sampled_from([5000, 3]), fmt=_OTLP_FORMATS)
def test_native_otlp_with_values_is_the_python_loop(tmp_path_factory, data, min_duration,
                                                     batch, fmt):
    """-A -R traces: the spans' fntrace.args and fntrace.retval attributes (in JSON
    escaped as json.dumps(ensure_ascii=False) escapes them), and a "raised ..." return
    value the span's error status (an empty message left out, as json_format and the
    protobuf runtime leave it)."""
    pytest.importorskip("opentelemetry.proto", reason="LOUD SKIP: the opentelemetry-proto "
                                                      "package (fntrace[otlp]) is not installed")
    from fntrace.output import otlp
    slots = draw_values(data, 3, "EEERRRRJX")
    # some return values are the recorder's "raised ..." text
    slots = {k: [(cpu, [r[:7] + (data.draw(_RAISED),)
                        if len(r) > 7 and r[1] == TRACE_GRAPH_RET and data.draw(st.booleans())
                        else r for r in recs])
                 for cpu, recs in chunks] for k, chunks in slots.items()}
    path = tmp_path_factory.mktemp("otlpvalues") / "t.dat"
    write(path, slots)
    used = []
    real = otlp._native_spans

    def spy(*args, **kw):
        used.append(real(*args, **kw))
        return used[-1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(otlp, "BATCH", batch)
        mp.setattr(otlp, "_native_spans", spy)
        native, python = export_both(path, fmt, {"min_duration": min_duration})
    assert native == python
    assert used[0] is not None          # the native walk wrote the first export
    check_otlp(fmt, native[0])


@needs_native
def test_native_graph_text_leaves_values_it_cannot_print_as_python_does(tmp_path):
    """A return value kept as JSON (a value the recorder did not make text of, in an
    older file) or text that is not UTF-8 as Python reads it (a lone surrogate): the
    Python printer prints the trace."""
    for value in (True, [1, 2], "\udcff"):
        path = tmp_path / "t.dat"
        write(path, {0: [(0, [(10, TRACE_GRAPH_ENT, 0, 1, 0, 0, 0),
                              (12, TRACE_GRAPH_RET, TF_HAS_PAYLOAD, 1, 0, 0, 10, value)])]})
        tf = TraceFile.open(path)
        options = {"funcgraph-retval": True}
        got, read = native_report(tf, options=options)
        assert read == [], value


@needs_native
def test_native_graph_text_leaves_what_it_does_not_print(tmp_path):
    from fntrace.output.filters import TraceFilter
    path = tmp_path / "t.dat"
    # a marker among the calls: a comment the native printer prints, but not under a
    # filter (which markers a filter keeps is filter_entries' to say)
    write(path, {0: [(0, [(10, TRACE_GRAPH_ENT, 0, 1, 0, 0, 0),
                          (11, TRACE_PRINT, TF_HAS_PAYLOAD, 0, 0, 0, 0),
                          (12, TRACE_GRAPH_RET, 0, 1, 0, 0, 10)])]})
    tf = TraceFile.open(path)
    got, read = native_report(tf)
    assert "/* text */" in got and read == [3]
    got, read = native_report(tf, flt=TraceFilter(functions=("m.*",)))
    assert "/* text */" in got and read == []
    # a stack trace among the calls: the Python printer prints it all
    write(path, {0: [(0, [(10, TRACE_GRAPH_ENT, 0, 1, 0, 0, 0),
                          (11, TRACE_STACK, TF_HAS_PAYLOAD, 0, 0, 0, 0, "m.a\nm.b"),
                          (12, TRACE_GRAPH_RET, 0, 1, 0, 0, 10)])]})
    tf = TraceFile.open(path)
    got, read = native_report(tf)
    assert "<stack trace>" in got and read == []


PROG = """
import os, sys, threading

def leaf(x):
    return x + 1

def boom(n):
    if n % 7 == 0:
        raise ValueError(n)
    return leaf(n)

def rec(n):
    return 0 if n == 0 else 1 + rec(n - 1)

def work(k):
    s = 0
    for i in range(k):
        try:
            s += boom(i)
        except ValueError:
            s -= 1
        s += rec(i % 9)
    return s

ts = [threading.Thread(target=work, args=(300,)) for _ in range(3)]
for t in ts:
    t.start()
work(500)
for t in ts:
    t.join()
if hasattr(os, "fork"):
    pid = os.fork()
    if pid == 0:
        work(200)
        os._exit(0)
    os.waitpid(pid, 0)
print("done")
"""


def stat_both(dat, *args, command: str = "stat") -> tuple[str, str]:
    out = []
    for pure in ("", "1"):
        env = dict(os.environ)
        env.pop("FNTRACE_PURE", None)
        if pure:
            env["FNTRACE_PURE"] = pure
        r = fntrace_cli(command, dat, *args, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        out.append(r.stdout)
    return out[0], out[1]


def with_loss(src, dst, drop: int) -> None:
    """``src`` as if thread slot 0's buffer had overwritten its first ``drop`` records."""
    tf = TraceFile.open(src)
    w = TraceFileWriter(str(dst), tf.header)
    w.add_symbols((ip, name, f, line) for ip, (name, f, line) in tf.symbols.items())
    for cpu, (native_id, name) in tf.threads.items():
        w.add_thread(cpu, native_id, name)
    for cpu in tf.cpus:
        recs = list(tf.records(cpu))
        lost = drop if cpu == 0 else 0
        recs = recs[lost:]
        payloads = {lost + i: r[8] for i, r in enumerate(recs) if r[8] is not None}
        w.write_chunk(cpu, b"".join(RECORD.pack(*r[1:8]) for r in recs), lost, lost=lost,
                      payloads=payloads or None)
    w.close(tf.stats)


@needs_native
@pytest.mark.parametrize("tracer", ["function_graph", "function", "lossy"])
def test_stat_native_and_pure_give_the_same_bytes(tmp_script, run_fntrace, tmp_path, tracer):
    prog = tmp_script(PROG)
    dat = tmp_path / "t.dat"
    r = run_fntrace("record", "-p", "function" if tracer == "function" else "function_graph",
                    "-o", dat, prog)
    assert r.returncode == 0, r.stderr
    # the forked child's file is read with the parent's (a TraceSet)
    assert len(open_traces(dat).files) == 2
    if tracer == "lossy":
        with_loss(dat, tmp_path / "lossy.dat", 25)
        dat = tmp_path / "lossy.dat"
    for args in ([], ["--per-thread"]) + ((["--sort", "self", "--wide"],)
                                           if tracer == "function_graph" else ()):
        native, pure = stat_both(dat, *args)
        assert native == pure, args
        assert "__main__.leaf" in native
        if tracer == "lossy" and not args:
            assert "calls have no entry in the trace" in native
    for fmt in ("parquet", "trace-cmd", "perfetto", "otlp", "otlp-proto"):
        for pure in ("", "1"):
            env = dict(os.environ, FNTRACE_PURE=pure)
            r = fntrace_cli("export", dat, "--format", fmt, "-o", f"{dat}.{pure or 'n'}.{fmt}",
                            env=env, timeout=120)
            assert r.returncode == 0, r.stderr
        assert open(f"{dat}.n.{fmt}", "rb").read() == open(f"{dat}.1.{fmt}", "rb").read()
    native, pure = stat_both(dat, "--format", "chrome", "-o", "-", command="export")
    assert native == pure
    assert "__main__.leaf" in native and len(json.loads(native)["traceEvents"]) > 100
    for weight in ("time", "calls") if tracer != "function" else ("calls",):
        native, pure = stat_both(dat, "--format", "folded", "--weight", weight, "-o", "-",
                                 command="export")
        assert native == pure, weight
        assert "__main__.leaf" in native
    for args in ([],) + ((["-O", "funcgraph-proc", "-O", "funcgraph-abstime"],
                          ["-O", "nofuncgraph-cpu", "-O", "funcgraph-tail"])
                         if tracer == "function_graph" else ()):
        native, pure = stat_both(dat, *args, command="report")
        assert native == pure, args
        assert "__main__.leaf" in native
    # some threads only (--cpu, --thread): the native walks read those threads' (the
    # lossy trace of two processes; the random streams above try the rest)
    if tracer == "lossy":
        for command, args in (("report", ["--thread", "Main*"]),
                              ("stat", ["--thread", "Thread-*", "--per-thread"])):
            native, pure = stat_both(dat, *args, command=command)
            assert native == pure, (command, args)
            assert "__main__" in native
    if tracer != "function":
        # the browser's index (a trace of two processes, threads, a loss)
        native, pure = index_both(dat, 2000)
        assert native == pure
        assert any("__main__.leaf" in t[3] for t in native[0].values())


# -- a live instance's trace, printed natively ------------------------------------------
def _live_workload() -> None:
    import threading

    def leaf(x):
        return x + 1

    def mid(x):
        return leaf(x) * 2

    def top(n):
        return sum(mid(i) for i in range(n))

    top(40)
    threads = [threading.Thread(target=top, args=(25,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    top(5)


def _read_both(fs, name: str, monkeypatch) -> tuple[str, str, int]:
    """``name`` read with the native printer and with the Python one; how many of the
    reads the native walk printed."""
    from fntrace.output import render
    took = []
    real = render._native_body

    def spy(*a, **kw):
        body = real(*a, **kw)
        took.append(body is not None)
        return body

    monkeypatch.setattr(render, "_native_body", spy)
    native_text = fs.read(name)
    monkeypatch.setattr(_env, "native", lambda: None)
    python_text = fs.read(name)
    monkeypatch.undo()
    return native_text, python_text, sum(took)


@needs_native
@pytest.mark.parametrize("tracer", ["function", "function_graph"])
@pytest.mark.parametrize("kb", [0, 1])
def test_a_live_trace_read_natively_is_the_python_printers(fs, monkeypatch, tracer, kb):
    """``trace`` and ``snapshot`` of a live instance (threads, calls still open, a
    buffer that overwrote its oldest records) are printed by the native walk, byte for
    byte as the Python printer prints them."""
    fs.write("set_ftrace_filter", "*_live_workload* *.leaf *.mid *.top")
    if kb:
        fs.write("buffer_size_kb", str(kb))
    fs.write("current_tracer", tracer)
    _live_workload()
    fs.write("tracing_on", "0")
    fs.write("snapshot", "1")
    for name in ("trace", "snapshot"):
        native_text, python_text, took = _read_both(fs, name, monkeypatch)
        assert took == 1, name
        assert native_text == python_text, name
        assert native_text.count("leaf") >= (20 if kb else 120), native_text[:2000]


@needs_native
def test_a_live_trace_holding_payloads_is_left_to_the_python_printer(fs, monkeypatch):
    fs.write("set_ftrace_filter", "*_live_workload* *.leaf *.mid *.top")
    fs.write("current_tracer", "function")
    _live_workload()
    fs.write("trace_marker", "a marker among the calls")
    fs.write("tracing_on", "0")
    native_text, python_text, took = _read_both(fs, "trace", monkeypatch)
    assert took == 0
    assert native_text == python_text
    assert "a marker among the calls" in native_text
