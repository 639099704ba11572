"""``fntrace export --format perfetto``: known programs recorded, exported, and the
export decoded with Perfetto's own protos (perfetto_trace_pb2.Trace) and compared,
slice by slice and instant by instant, with the recorded trace.

The decoder below reads the packets as Perfetto's trace processor does: interned
data per sequence (valid only after SEQ_INCREMENTAL_STATE_CLEARED, used only by
packets that say SEQ_NEEDS_INCREMENTAL_STATE), track descriptors before their
events, events sorted by timestamp (file order among equal ones), and a thread
track's BEGIN/END events nesting as a stack.  The trace processor itself is run
too when the ``perfetto`` package can start it (it downloads its shell binary).
"""
from __future__ import annotations

import io
import os
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support import fntrace_cli

try:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
except ImportError:                                     # pragma: no cover
    pytest.skip("LOUD SKIP: the 'perfetto' package is not installed (pip install "
                "'fntrace[perfetto]'): the Perfetto export cannot be checked",
                allow_module_level=True)

from fntrace.output.calls import iter_calls
from fntrace.output.entry import (
    TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_PRINT, TRACE_STACK,
    LostEvents,
)
from fntrace.output.source import open_trace

TE = pb.TrackEvent
CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


def record(tmp_path: Path, source: str, *opts: str, name: str = "prog.py") -> Path:
    (tmp_path / name).write_text(textwrap.dedent(source))
    out = tmp_path / (Path(name).stem + ".dat")
    r = fntrace_cli("record", *opts, "-o", out, name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return out


def export(tmp_path: Path, dat: Path, out: str = "out.perfetto-trace") -> tuple[Path, str]:
    r = fntrace_cli("export", dat, "--format", "perfetto", "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return tmp_path / out, r.stderr


# ---------------------------------------------------------------------------------
# Reading the export as the trace processor does
# ---------------------------------------------------------------------------------

@dataclass
class Slice:
    tid: int
    name: str
    depth: int
    start: int
    end: int = -1
    args: dict = field(default_factory=dict)


@dataclass
class Instant:
    tid: int
    ts: int
    name: str
    args: dict


@dataclass
class Decoded:
    process: object = None                  # the ProcessDescriptor
    threads: dict = field(default_factory=dict)     # tid -> ThreadDescriptor
    slices: list = field(default_factory=list)
    instants: list = field(default_factory=list)
    primary_clock: int | None = None
    default_clock: int | None = None
    names_in_file: dict = field(default_factory=dict)   # interned name -> times defined
    absolute: int = 0                       # events timed on the trace's clock itself
    counters: dict = field(default_factory=dict)    # counter track name -> [(ts, value)]


def _value(a, strings, ann):
    which = [f.name for f, _ in a.ListFields() if f.name not in ("name_iid", "name")]
    assert len(which) == 1, a
    w = which[0]
    if w == "dict_entries":
        return {ann[d.name_iid]: _value(d, strings, ann) for d in a.dict_entries}
    if w == "string_value_iid":
        return strings[a.string_value_iid]
    return getattr(a, w)


def decode(path: Path) -> Decoded:
    data = path.read_bytes()
    trace = pb.Trace.FromString(data)
    d = Decoded()
    names: dict[int, str] = {}
    ann: dict[int, str] = {}
    strings: dict[int, str] = {}
    tracks: dict[int, object] = {}
    functions: dict[int, str] = {}          # interned function names, frames, callstacks
    frames: dict[int, int] = {}
    callstacks: dict[int, list[int]] = {}
    process_uuid = None
    cleared = False
    seen_timestamp = False
    events = []
    incremental: dict[int, int] = {}        # clock id -> its last reading
    for i, p in enumerate(trace.packet):
        seq = p.trusted_packet_sequence_id
        assert seq != 0
        if p.sequence_flags & CLEARED:
            cleared = True
            names.clear(), ann.clear(), strings.clear()
            functions.clear(), frames.clear(), callstacks.clear()
            if p.HasField("trace_packet_defaults"):
                d.default_clock = p.trace_packet_defaults.timestamp_clock_id
        if p.HasField("clock_snapshot"):
            # the trace processor reads the sequence state, then the snapshot, and
            # nothing else of this packet
            assert not seen_timestamp, "the clock snapshot must come before any timestamp"
            assert not p.HasField("track_descriptor") and not p.HasField("track_event")
            snap = p.clock_snapshot
            d.primary_clock = snap.primary_trace_clock
            readings = {c.clock_id: c for c in snap.clocks}
            assert readings[d.primary_clock].is_incremental is False
            for c in snap.clocks:
                if c.is_incremental:
                    assert 64 <= c.clock_id < 128      # sequence-scoped clocks only
                    assert c.timestamp == readings[d.primary_clock].timestamp
                    incremental[c.clock_id] = c.timestamp
                assert c.unit_multiplier_ns in (0, 1)
            continue
        if p.HasField("interned_data"):
            assert cleared, "interned data before the incremental state was cleared"
            idata = p.interned_data
            for e in idata.event_names:
                assert e.iid not in names and e.iid
                names[e.iid] = e.name
                d.names_in_file[e.name] = d.names_in_file.get(e.name, 0) + 1
            for e in idata.debug_annotation_names:
                assert e.iid not in ann and e.iid
                ann[e.iid] = e.name
            for e in idata.debug_annotation_string_values:
                assert e.iid not in strings and e.iid
                strings[e.iid] = e.str.decode()
            for e in idata.function_names:
                assert e.iid not in functions and e.iid
                functions[e.iid] = e.str.decode()
            for e in idata.frames:
                assert e.iid not in frames and e.function_name_id in functions
                frames[e.iid] = e.function_name_id
            for e in idata.callstacks:
                assert e.iid not in callstacks and all(f in frames for f in e.frame_ids)
                callstacks[e.iid] = list(e.frame_ids)
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            assert td.uuid not in tracks
            tracks[td.uuid] = td
            if td.HasField("process"):
                assert d.process is None
                d.process, process_uuid = td.process, td.uuid
            elif td.HasField("counter"):
                assert td.parent_uuid == process_uuid and td.name not in d.counters
                d.counters[td.name] = []
            else:
                assert td.HasField("thread") and td.parent_uuid == process_uuid
                assert td.thread.tid not in d.threads
                d.threads[td.thread.tid] = td.thread
        if p.HasField("track_event"):
            te = p.track_event
            seen_timestamp = True
            assert p.HasField("timestamp")
            assert te.track_uuid in tracks, "an event before its track's descriptor"
            interned = bool(te.name_iid) or any(a.name_iid for a in te.debug_annotations)
            if interned:
                assert p.sequence_flags & NEEDS, p
            name = names[te.name_iid] if te.name_iid else (te.name or None)
            args = {ann[a.name_iid]: _value(a, strings, ann) for a in te.debug_annotations}
            if te.callstack_iid:
                assert p.sequence_flags & NEEDS, p
                args["callstack"] = [functions[frames[f]] for f in callstacks[te.callstack_iid]]
            clock = p.timestamp_clock_id or d.default_clock
            if clock in incremental:
                ts = incremental[clock] = incremental[clock] + p.timestamp
            else:
                assert clock in (None, d.primary_clock)
                ts = p.timestamp
                # (the counters written after the rest are on the trace's clock)
                d.absolute += clock is not None and te.type != TE.TYPE_COUNTER
            if te.type == TE.TYPE_COUNTER:
                d.counters[tracks[te.track_uuid].name].append(
                    (ts, te.double_counter_value if te.HasField("double_counter_value")
                     else te.counter_value))
                continue
            events.append((ts, i, tracks[te.track_uuid].thread.tid, te.type, name, args))
    # the trace processor's sorter: by timestamp, file order among equal ones
    events.sort(key=lambda e: (e[0], e[1]))
    stacks: dict[int, list[Slice]] = {}
    for ts, _, tid, typ, name, args in events:
        st = stacks.setdefault(tid, [])
        if typ == TE.TYPE_SLICE_BEGIN:
            assert name
            s = Slice(tid, name, len(st), ts, args=dict(args))
            st.append(s)
            d.slices.append(s)
        elif typ == TE.TYPE_SLICE_END:
            assert st, f"an END with no open slice on thread {tid} at {ts}"
            assert name is None, "END events carry no name"
            s = st.pop()
            assert ts >= s.start
            s.end = ts
            s.args.update(args)
        else:
            assert typ == TE.TYPE_INSTANT
            d.instants.append(Instant(tid, ts, name, args))
    for tid, st in stacks.items():
        assert not st, f"slices left open on thread {tid}: {st}"
    return d


def recorded_slices(dat: Path) -> list[Slice]:
    """The calls of a well-formed function_graph trace, paired by hand (an entry, its
    return at the same depth on the same thread)."""
    stacks: dict[int, list] = {}
    out = []
    for e in open_trace(dat).entries():
        assert not isinstance(e, LostEvents)
        st = stacks.setdefault(e.pid, [])
        if e.type == TRACE_GRAPH_ENT:
            st.append(e)
        elif e.type == TRACE_GRAPH_RET:
            ent = st.pop()
            assert (ent.func, ent.depth) == (e.func, e.depth)
            assert e.calltime == ent.ts
            args = {}
            if ent.args:
                args["args"] = dict(ent.args)
            if e.has_retval:
                args["retval"] = e.retval
            out.append(Slice(e.pid, e.func, e.depth, ent.ts, e.ts, args))
    assert all(not st for st in stacks.values())
    return out


def by_time(slices):
    return sorted(slices, key=lambda s: (s.tid, s.start, s.depth))


# ---------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------

GRAPH_PROGRAM = """\
    import threading

    def leaf(x):
        return x * 2

    def mid(n):
        s = 0
        for i in range(n):
            s += leaf(i)
        return s

    def worker(n):
        return mid(n)

    def boom():
        raise ValueError("no")

    def main():
        t = threading.Thread(target=worker, args=(3,), name="wk")
        t.start()
        t.join()
        mid(2)
        try:
            boom()
        except ValueError:
            pass
        return "done"

    main()
"""


def test_every_call_is_a_slice_on_its_thread_with_args_and_retval(tmp_path):
    dat = record(tmp_path, GRAPH_PROGRAM, "-p", "function_graph", "-A", "-R",
                 "-F", "__main__.*", "-e", "f __main__.leaf x")
    out, err = export(tmp_path, dat)
    assert err == ""
    d = decode(out)
    src = open_trace(dat)

    # tracks: one process, a thread track per thread, grouped under it
    assert d.process.pid == src.pid
    assert list(d.process.cmdline) == ["prog.py"] and d.process.process_name == "prog.py"
    assert {tid: t.thread_name for tid, t in d.threads.items()} == \
        {tid: name for tid, name in src.threads.values()}
    assert all(t.pid == src.pid for t in d.threads.values())
    assert d.primary_clock == pb.BUILTIN_CLOCK_MONOTONIC and d.default_clock == 64

    # every slice as recorded: name, thread, depth, begin and end times, args, retval
    assert d.absolute == 0                  # every timestamp a delta from the one before
    assert by_time(d.slices) == by_time(recorded_slices(dat))

    # and the program's known shape
    names = {tid: t.thread_name for tid, t in d.threads.items()}
    shape = sorted((names[s.tid], s.depth, s.name) for s in d.slices)
    assert shape == sorted(
        [("MainThread", 0, "__main__.main"), ("MainThread", 1, "__main__.mid"),
         ("MainThread", 2, "__main__.leaf"), ("MainThread", 2, "__main__.leaf"),
         ("MainThread", 1, "__main__.boom"),
         ("wk", 0, "__main__.worker"), ("wk", 1, "__main__.mid")]
        + [("wk", 2, "__main__.leaf")] * 3)
    main = next(s for s in d.slices if s.name == "__main__.main")
    assert main.args == {"retval": "'done'"}
    boom = next(s for s in d.slices if s.name == "__main__.boom")
    assert boom.args["retval"].startswith("raised")
    worker = next(s for s in d.slices if s.name == "__main__.worker")
    assert worker.args == {"args": {"n": "3"}, "retval": 6}
    for s in d.slices:
        if s.depth:
            parent = next(p for p in d.slices if p.tid == s.tid and p.depth == s.depth - 1
                          and p.start <= s.start and s.end <= p.end)
            assert parent.name in ("__main__.main", "__main__.mid", "__main__.worker")

    # the dynamic event: an instant where and when it was recorded, with its fields
    want = [(e.pid, e.ts, e.func, e.text) for e in src.entries() if e.type == TRACE_EVENT]
    assert len(want) == 5
    assert [(i.tid, i.ts, i.name, i.args["fields"]) for i in d.instants] == want
    # names are interned: each defined once, however many calls use it
    assert d.names_in_file["__main__.leaf"] == 1
    assert out.read_bytes().count(b"__main__.leaf") == 1 + 5   # the name; 5 event texts


def test_function_tracer_hits_are_instants_with_their_parent(tmp_path):
    dat = record(tmp_path, GRAPH_PROGRAM, "-p", "function", "-F", "__main__.*")
    out, _ = export(tmp_path, dat)
    d = decode(out)
    assert d.slices == []
    want = [(e.pid, e.ts, e.func, e.parent) for e in open_trace(dat).entries()
            if e.type == TRACE_FN]
    assert len(want) == 10                  # main, worker, 2 mid, 5 leaf, boom
    assert [(i.tid, i.ts, i.name, i.args.get("parent", "")) for i in d.instants] == want
    assert {i.args["parent"] for i in d.instants if i.name == "__main__.leaf"} == \
        {"__main__.mid"}


def test_markers_and_stack_traces_are_instants(tmp_path):
    dat = record(tmp_path, """\
        import os
        from fntrace.tracefs.client import Client

        def leaf(x):
            return x

        def main():
            leaf(1)
            with Client(os.getpid()) as c:
                c.write("trace_marker", "hello from the program")
            leaf(2)

        main()
    """, "--serve", "-p", "function_graph", "-F", "__main__.*",
        "-e", "f __main__.leaf x", "-T", "stacktrace")
    out, _ = export(tmp_path, dat)
    d = decode(out)
    src = open_trace(dat)
    # the marker's text is the instant's name (the newline the write got is not)
    marks = [(e.pid, e.ts, e.text.rstrip("\n")) for e in src.entries()
             if e.type == TRACE_PRINT]
    assert [m[2] for m in marks] == ["hello from the program"]
    assert [(i.tid, i.ts, i.name) for i in d.instants if i.name == marks[0][2]] == marks
    stacks = [(e.pid, e.ts, e.text) for e in src.entries() if e.type == TRACE_STACK]
    assert len(stacks) == 2
    # each stack trace an interned callstack: its frames' functions, the outermost first
    assert [(i.tid, i.ts, "\n".join(reversed(i.args["callstack"]))) for i in d.instants
            if i.name == "<stack trace>"] == stacks
    assert not any("stack" in i.args for i in d.instants)
    assert all(s[2].split("\n")[:2] == ["__main__.leaf", "__main__.main"] for s in stacks)
    # the marker's writer (the control socket's server thread) has a track of its own
    assert marks[0][0] in d.threads


def _rewrite_with_losses(src_path: Path, dst_path: Path) -> tuple[int, int]:
    """The recorded trace as an overwriting ring buffer would have left it: the first
    records of one thread and a stretch in the middle of another gone, the chunks
    after them saying how many."""
    from fntrace.tracefile import RECORD, TraceFile, TraceFileWriter
    tf = TraceFile.open(src_path)
    w = TraceFileWriter(str(dst_path), tf.header)
    w.add_symbols((ip, *sym[:3]) for ip, sym in tf.symbols.items())
    for cpu, (tid, name) in tf.threads.items():
        w.add_thread(cpu, tid, name)
    cpus = sorted(tf.threads)
    assert len(cpus) == 2
    dropped = 0
    for cpu in cpus:
        recs = list(tf.records(cpu))
        n = len(recs)
        cut = (0, n // 5) if cpu == cpus[1] else (n // 3, n // 3 + 777)
        keep = [(0, recs[:cut[0]], 0), (cut[1], recs[cut[1]:], cut[1] - cut[0])]
        for first, part, lost in keep:
            if not part:
                continue
            body = b"".join(RECORD.pack(*r[1:8]) for r in part)
            payloads = {first + i: r[8] for i, r in enumerate(part) if r[8] is not None}
            w.write_chunk(cpu, body, first, lost=lost, payloads=payloads or None)
            dropped += lost
    w.close(tf.stats)
    return dropped, len(cpus)


LOOP_PROGRAM = """\
    import threading

    def leaf(i):
        return i

    def mid(n):
        for i in range(n):
            leaf(i)

    def run(k):
        for _ in range(k):
            mid(20)

    t = threading.Thread(target=run, args=(150,), name="second")
    t.start()
    run(150)
    t.join()
"""


def test_lost_events_and_overwritten_entries_keep_the_tracks_well_formed(tmp_path):
    dat = record(tmp_path, LOOP_PROGRAM, "-p", "function_graph", "-F", "__main__.*")
    damaged = tmp_path / "damaged.dat"
    dropped, _ = _rewrite_with_losses(dat, damaged)
    out, err = export(tmp_path, damaged)
    assert f"{dropped} events were lost while recording" in err
    d = decode(out)                     # every END has its BEGIN, nothing left open
    lost = [i for i in d.instants if i.name == "lost events"]
    assert len(lost) == 2 and sum(i.args["lost"] for i in lost) == dropped
    # the counter track of the process: the events lost so far, a step at each loss
    steps = sorted((i.ts, i.args["lost"]) for i in lost)
    assert d.counters["events lost"] == [(steps[0][0], steps[0][1]),
                                         (steps[1][0], steps[0][1] + steps[1][1])]
    # the calls as the call builder makes them of the damaged stream, and no other
    src = open_trace(damaged)
    want = [(c.pid, c.func, c.start, c.end, c.entry_seen, c.complete)
            for c in iter_calls(src.entries())]
    got = [(s.tid, s.name, s.start, s.end, not s.args.get("entry_lost"),
            not s.args.get("unfinished")) for s in d.slices]
    assert sorted(got) == sorted(want)
    assert any(not w[4] for w in want) and any(not w[5] for w in want)
    # the begins of calls whose entries were lost lie before the packets around them
    assert d.absolute > 0
    # a call made from its return alone begins at the calltime the return recorded,
    # or, if that was before a gap on its thread, where the gap began: where the
    # calls open across it were ended
    rets = {(e.pid, e.func, e.ts): e.calltime for e in src.entries()
            if not isinstance(e, LostEvents) and e.type == TRACE_GRAPH_RET}
    gap_ends = {(s.tid, s.end) for s in d.slices if s.args.get("unfinished")}
    pieces = []
    for s in d.slices:
        if s.args.get("entry_lost"):
            calltime = rets[(s.tid, s.name, s.end)]
            assert s.start == calltime or (s.start > calltime and (s.tid, s.start) in gap_ends)
            if s.start != calltime:
                pieces.append(s.name)
    assert pieces == ["__main__.run"]   # the one call open across the gap and after it
    # children inside their parents on every thread
    for s in d.slices:
        if s.depth:
            assert any(p.tid == s.tid and p.depth == s.depth - 1 and p.start <= s.start
                       and s.end <= p.end for p in d.slices)


def test_a_trace_files_losses_reach_the_readers(tmp_path):
    """A chunk that says records were dropped before it gives a LostEvents marker
    just before its first entry (what the exporters, the call builder and the text
    views read), once per gap, with the count the chunk gives."""
    dat = record(tmp_path, LOOP_PROGRAM, "-p", "function_graph", "-F", "__main__.*")
    damaged = tmp_path / "damaged.dat"
    dropped, _ = _rewrite_with_losses(dat, damaged)
    src = open_trace(damaged)
    entries = list(src.entries())
    markers = [(i, e) for i, e in enumerate(entries) if isinstance(e, LostEvents)]
    assert sum(e.lost for _, e in markers) == dropped == src.lost()
    assert len(markers) == 2
    for i, m in markers:
        nxt = next(e for e in entries[i + 1:] if not isinstance(e, LostEvents)
                   and e.cpu == m.cpu)
        before = [e for e in entries[:i] if not isinstance(e, LostEvents)
                  and e.cpu == m.cpu]
        recs = list(src.tf.records(m.cpu))
        # the marker sits between the records either side of the gap
        assert (nxt.ts, nxt.type) == (recs[len(before)][1], recs[len(before)][2])
    assert [e for e in entries if not isinstance(e, LostEvents)] == \
        [e for e in open_trace(damaged).entries() if not isinstance(e, LostEvents)]
    assert sum(1 for e in entries if not isinstance(e, LostEvents)) == src.nr_records()


def test_an_empty_trace_exports_a_valid_file(tmp_path):
    dat = record(tmp_path, "x = 1\n", "-p", "function_graph", "-F", "nomodule.*")
    assert open_trace(dat).nr_records() == 0
    out, err = export(tmp_path, dat)
    d = decode(out)
    assert d.process is not None and d.slices == [] and d.instants == []


def test_a_cut_file_exports_what_is_whole(tmp_path):
    dat = record(tmp_path, LOOP_PROGRAM, "-p", "function_graph", "-F", "__main__.*")
    data = dat.read_bytes()
    cut = tmp_path / "cut.dat"
    cut.write_bytes(data[:len(data) * 2 // 3])
    out, err = export(tmp_path, cut)
    assert "cut short" in err
    d = decode(out)
    src = open_trace(cut)
    assert src.truncated and 0 < len(d.slices)
    assert len(d.slices) == sum(1 for _ in iter_calls(src.entries()))


def test_the_export_streams_in_batches(tmp_path):
    """Packets go out as they are made, a batch at a time: the writes stay small
    however long the trace, and together they are one trace."""
    from fntrace.output import perfetto as mod
    dat = record(tmp_path, LOOP_PROGRAM.replace("150", "600"), "-p", "function_graph",
                 "-F", "__main__.*")
    src = open_trace(dat)
    n = src.nr_records()
    assert n > 5 * mod.BATCH_PACKETS

    class Sink(io.RawIOBase):
        def __init__(self):
            self.sizes, self.data = [], bytearray()

        def writable(self):
            return True

        def write(self, b):
            self.sizes.append(len(b))
            self.data += b
            return len(b)

    sink = Sink()
    mod.PerfettoExporter().write(src, sink, {})
    assert len(sink.sizes) >= n // mod.BATCH_PACKETS
    assert max(sink.sizes) < 64 * mod.BATCH_PACKETS
    (tmp_path / "batched.perfetto-trace").write_bytes(sink.data)
    d = decode(tmp_path / "batched.perfetto-trace")
    assert len(d.slices) == n // 2


def test_memory_does_not_grow_with_the_trace(tmp_path):
    """The exporter keeps one batch, the open calls and the interning tables: a trace
    four times longer needs no more memory to export (tracemalloc's peak).  The file
    is read a chunk at a time (a chunk holds at most a ring buffer's worth of
    records): small buffers make small chunks, so that what is measured is the
    export's own memory."""
    import tracemalloc
    from fntrace.output import perfetto as mod
    peaks = []
    for k in (60, 240):
        sub = tmp_path / str(k)
        sub.mkdir()
        dat = record(sub, LOOP_PROGRAM.replace("150", str(k)), "-p", "function_graph",
                     "-b", "16", "-F", "__main__.*")
        src = open_trace(dat)
        tracemalloc.start()
        try:
            with open(os.devnull, "wb") as f:
                mod.PerfettoExporter().write(src, f, {})
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[1] < peaks[0] * 1.3, peaks


# ---------------------------------------------------------------------------------
# Clocks (a trace source made for the test: the recorder always writes 'local')
# ---------------------------------------------------------------------------------

class _Source:
    def __init__(self, clock, entries):
        self.pid, self.header, self.threads = 7, {"argv": ["p.py"]}, {0: (7, "MainThread")}
        self.trace_clock = clock
        self._entries = entries

    def entries(self):
        return iter(self._entries)

    def record_blocks(self, cpu=None, payloads=False, since=None, until=None):
        return None         # entries made in memory (TraceSource.record_blocks)


def _graph(ts0):
    from fntrace.output.entry import TraceEntry
    return [TraceEntry(ts0, 0, "MainThread", 7, TRACE_GRAPH_ENT, "m.f", depth=0),
            TraceEntry(ts0 + 3, 0, "MainThread", 7, TRACE_GRAPH_RET, "m.f", depth=0,
                       calltime=ts0, rettime=ts0 + 3)]


@pytest.mark.parametrize("clock, builtin, scale", [
    ("local", "BUILTIN_CLOCK_MONOTONIC", 1), ("mono", "BUILTIN_CLOCK_MONOTONIC", 1),
    ("mono_raw", "BUILTIN_CLOCK_MONOTONIC_RAW", 1), ("boot", "BUILTIN_CLOCK_BOOTTIME", 1),
    ("uptime", "BUILTIN_CLOCK_BOOTTIME", 10_000_000)])
def test_clocks(tmp_path, clock, builtin, scale):
    from fntrace.output import perfetto as mod
    path = tmp_path / "c.perfetto-trace"
    with open(path, "wb") as f:
        assert mod.PerfettoExporter().write(_Source(clock, _graph(500)), f, {}) is None
    d = decode(path)
    assert d.primary_clock == getattr(pb, builtin) and d.default_clock == 64
    assert [(s.start, s.end) for s in d.slices] == [(500 * scale, 503 * scale)]


def test_the_counter_clock_is_said_not_to_be_time(tmp_path):
    from fntrace.output import perfetto as mod
    path = tmp_path / "c.perfetto-trace"
    with open(path, "wb") as f:
        res = mod.PerfettoExporter().write(_Source("counter", _graph(5)), f, {})
    assert res["notes"] == ["trace_clock counter counts events, not time: Perfetto shows "
                            "each count as 1 ns"]
    d = decode(path)
    assert d.primary_clock is None and d.default_clock is None
    assert [(s.start, s.end) for s in d.slices] == [(5, 8)]


# ---------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------

def test_without_the_perfetto_package_the_error_says_what_to_install(tmp_path):
    dat = record(tmp_path, GRAPH_PROGRAM, "-p", "function_graph", "-F", "__main__.*")
    hide = tmp_path / "hide"
    (hide / "perfetto").mkdir(parents=True)
    (hide / "perfetto" / "__init__.py").write_text(
        "raise ImportError('No module named perfetto')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(hide), env.get("PYTHONPATH", "")])
    r = fntrace_cli("export", dat, "--format", "perfetto", "-o", "x.perfetto-trace",
                    cwd=tmp_path, env=env)
    assert r.returncode != 0
    assert r.stderr == ("fntrace: --format perfetto needs the 'perfetto' package: "
                        "pip install 'fntrace[perfetto]'\n")
    assert not (tmp_path / "x.perfetto-trace").exists()


def test_the_default_output_name_and_stdout(tmp_path):
    dat = record(tmp_path, GRAPH_PROGRAM, "-p", "function_graph", "-F", "__main__.*")
    r = fntrace_cli("export", dat, "--format", "perfetto", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    whole = (tmp_path / "prog.perfetto-trace").read_bytes()
    r = fntrace_cli("export", dat, "--format", "perfetto", "-o", "-", cwd=tmp_path,
                    text=False)
    assert r.returncode == 0 and r.stdout == whole


# ---------------------------------------------------------------------------------
# Perfetto's trace processor
# ---------------------------------------------------------------------------------

def test_the_trace_processor_reads_the_same_slices(tmp_path):
    """Perfetto's trace processor (what ui.perfetto.dev runs) loads the export and
    finds every recorded call.  The ``perfetto`` package downloads the processor's
    shell on first use (or takes one from $PERFETTO_TRACE_PROCESSOR_SHELL)."""
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    dat = record(tmp_path, GRAPH_PROGRAM, "-p", "function_graph", "-A", "-R",
                 "-F", "__main__.*", "-e", "f __main__.leaf x")
    out, _ = export(tmp_path, dat)
    shell = os.environ.get("PERFETTO_TRACE_PROCESSOR_SHELL")
    config = TraceProcessorConfig(bin_path=shell) if shell else TraceProcessorConfig()
    try:
        tp = TraceProcessor(trace=str(out), config=config)
    except (subprocess.CalledProcessError, OSError) as e:
        pytest.skip("LOUD SKIP: Perfetto's trace processor could not be started (the "
                    "perfetto package downloads its shell binary, and this machine "
                    f"cannot: {e}); the export was checked with the protos only")
    try:
        rows = list(tp.query(
            "select s.name, s.ts, s.dur, s.depth, t.tid from slice s "
            "join thread_track tt on s.track_id = tt.id join thread t using (utid)"))
        calls = sorted((r.tid, r.name, r.depth, r.ts, r.ts + r.dur) for r in rows
                       if r.dur > 0)
        assert calls == sorted((s.tid, s.name, s.depth, s.start, s.end)
                               for s in recorded_slices(dat))
        instants = sorted((r.tid, r.name, r.ts) for r in rows if r.dur == 0)
        assert instants == sorted((e.pid, e.func, e.ts) for e in open_trace(dat).entries()
                                  if e.type == TRACE_EVENT)
    finally:
        tp.close()


def test_text_that_is_not_utf8_is_written_with_replacements(tmp_path):
    """A repr or a marker decoded with surrogateescape (bytes that were not UTF-8)
    is written with '?' for what protobuf strings cannot hold, not refused."""
    from fntrace.output import perfetto as mod
    from fntrace.output.entry import TraceEntry
    entries = [TraceEntry(10, 0, "MainThread", 7, TRACE_GRAPH_ENT, "m.f", depth=0,
                          args=[("b", "'x\udcff'")]),
               TraceEntry(11, 0, "MainThread", 7, TRACE_PRINT, "", text="caf\udce9\n"),
               TraceEntry(12, 0, "MainThread", 7, TRACE_GRAPH_RET, "m.f", depth=0,
                          calltime=10, rettime=12, retval="'\udcff'", has_retval=True)]
    path = tmp_path / "t.perfetto-trace"
    with open(path, "wb") as f:
        mod.PerfettoExporter().write(_Source("local", entries), f, {})
    d = decode(path)
    assert d.slices[0].args == {"args": {"b": "'x?'"}, "retval": "'?'"}
    assert [i.name for i in d.instants] == ["caf?"]


def test_gc_collections_are_counter_tracks(tmp_path):
    """With -e gc:gc_start, each generation's collections so far is a counter track of
    the process; each collection an instant too, on its thread."""
    dat = record(tmp_path, """\
        import gc

        def work():
            gc.collect(0)
            gc.collect(2)
            gc.collect(2)

        gc.disable()        # (no collection but the program's own)
        work()
        """, "-p", "function_graph", "-F", "__main__.*", "-e", "gc:gc_start")
    out, _ = export(tmp_path, dat)
    d = decode(out)
    starts = sorted((i.ts, i.args["fields"]) for i in d.instants if i.name == "gc_start")
    assert [f for _, f in starts] == ["generation=0", "generation=2", "generation=2"]
    assert d.counters["gc collections (generation 0)"] == [(starts[0][0], 1)]
    assert d.counters["gc collections (generation 2)"] == [(starts[1][0], 1),
                                                         (starts[2][0], 2)]
    # (and the writer's "buffer fill (%)"; no loss)
    assert set(d.counters) - {"buffer fill (%)"} == {"gc collections (generation 0)",
                                                     "gc collections (generation 2)"}


def test_a_flow_joins_thread_start_to_the_new_thread(tmp_path):
    """With -e threads:thread_start, each new thread's first instant ends a flow that
    starts on the thread that started it, inside the call that did."""
    dat = record(tmp_path, """\
        import threading

        def job(i):
            return i * 2

        def spawn():
            ts = [threading.Thread(target=job, args=(i,), name=f"w{i}") for i in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        spawn()
        """, "-p", "function_graph", "-F", "__main__.*", "-e", "threads:thread_start")
    out, _ = export(tmp_path, dat)
    trace = pb.Trace.FromString(out.read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet
              if p.HasField("track_descriptor")}
    d = decode(out)
    main = next(tid for tid, t in d.threads.items() if t.thread_name == "MainThread")
    starts, ends = {}, {}
    for p in trace.packet:
        te = p.track_event
        for f in te.flow_ids:
            starts[f] = tracks[te.track_uuid].thread.tid
        for f in te.terminating_flow_ids:
            ends[f] = tracks[te.track_uuid].thread.tid
    assert sorted(starts) == sorted(ends) == [1, 2]
    assert set(starts.values()) == {main}
    workers = {tid for tid, t in d.threads.items() if t.thread_name in ("w0", "w1")}
    assert set(ends.values()) == workers
    # the flow's start lies inside spawn() on the main thread, at the new thread's start
    srcs = [i for i in d.instants if i.name.startswith("start thread ")]
    assert sorted(i.name for i in srcs) == ["start thread w0", "start thread w1"]
    spawn = next(s for s in d.slices if s.name == "__main__.spawn")
    firsts = sorted(i.ts for i in d.instants if i.name == "thread_start")
    assert sorted(i.ts for i in srcs) == firsts
    assert all(spawn.start <= i.ts <= spawn.end and i.tid == main for i in srcs)


def test_a_flow_joins_a_fork_to_the_child(tmp_path):
    """A trace that followed a forked child: a flow from an instant "fork PID" on the
    parent's thread that forked, when it did, to the child's first event."""
    dat = record(tmp_path, """\
        import os

        def child_work():
            return sum(range(10))

        def main():
            pid = os.fork()
            if pid == 0:
                child_work()
                os._exit(0)
            os.waitpid(pid, 0)
            return pid

        main()
        """, "-p", "function_graph", "-F", "__main__.*")
    out, _ = export(tmp_path, dat)
    trace = pb.Trace.FromString(out.read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet
              if p.HasField("track_descriptor")}
    procs = {td.process.pid for td in tracks.values() if td.HasField("process")}
    assert len(procs) == 2
    parent = min(procs, key=lambda pid: pid != int(open_trace(dat).pid))
    child = (procs - {parent}).pop()
    starts, ends = {}, {}
    for p in trace.packet:
        te = p.track_event
        for f in te.flow_ids:
            starts[f] = (tracks[te.track_uuid].thread.tid, te.type)
        for f in te.terminating_flow_ids:
            ends[f] = (tracks[te.track_uuid].thread.tid, te.type)
    assert list(starts) == list(ends) == [1]
    # from the parent's main thread (its id is the pid) to the child's main thread
    assert starts[1] == (parent, TE.TYPE_INSTANT)
    assert ends[1][0] == child
    names = {}
    for p in trace.packet:
        for e in p.interned_data.event_names:
            names[e.iid] = e.name
    src = next(p.track_event for p in trace.packet if 1 in p.track_event.flow_ids)
    assert names[src.name_iid] == f"fork {child}"


def _flows(trace):
    """The flows' starts and ends: flow id -> (tid, event name, its fields' text)."""
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet
              if p.HasField("track_descriptor")}
    names = {}
    for p in trace.packet:
        for e in p.interned_data.event_names:
            names[e.iid] = e.name
    starts, ends = {}, {}
    for p in trace.packet:
        te = p.track_event
        if not (te.flow_ids or te.terminating_flow_ids):
            continue
        fields = next((a.string_value for a in te.debug_annotations if a.string_value), "")
        what = (tracks[te.track_uuid].thread.tid, names.get(te.name_iid, te.name), fields)
        for f in te.flow_ids:
            starts[f] = what
        for f in te.terminating_flow_ids:
            ends[f] = what
    return starts, ends


def test_flows_join_a_task_to_its_first_step_and_a_submit_to_its_run(tmp_path):
    """With -e asyncio:task_create, a flow from each Task's creation to the switch to
    its first step; with -e 'futures:*', from each submit to a thread pool to the
    worker's run of that work item."""
    dat = record(tmp_path, """\
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        def work(x):
            return x * 2

        async def child(i):
            await asyncio.sleep(0)
            return i

        async def main():
            a = asyncio.create_task(child(1), name="kid-a")
            b = asyncio.create_task(child(2), name="kid-b")
            await a
            await b
            with ThreadPoolExecutor(2) as ex:
                return list(ex.map(work, range(3)))

        print(asyncio.run(main()))
        """, "-p", "function_graph", "-F", "__main__.*", "-e", "asyncio:task_create",
                 "-e", "futures:*")
    out, _ = export(tmp_path, dat)
    starts, ends = _flows(pb.Trace.FromString(out.read_bytes()))
    d = decode(out)
    main = next(tid for tid, t in d.threads.items() if t.thread_name == "MainThread")
    ids = lambda text: dict(w.split("=", 1) for w in text.split())["id"]  # noqa: E731
    tasks = {f: s for f, s in starts.items() if s[1] == "task_create"}
    # main() and the two children at least (asyncio.run's own shutdown Tasks too)
    assert len(tasks) >= 3
    for f, (tid, _, fields) in tasks.items():
        assert tid == main
        etid, ename, efields = ends[f]
        assert (etid, ename) == (main, "asyncio:task_switch")
        assert ids(efields) == ids(fields)
    kids = sorted(ends[f][2].split()[0] for f in tasks)
    assert {"next=kid-a", "next=kid-b"} <= set(kids)
    subs = {f: s for f, s in starts.items() if s[1] == "submit"}
    assert len(subs) == 3
    workers = set()
    for f, (tid, _, fields) in subs.items():
        assert tid == main and fields.startswith("fn=__main__.work ")
        etid, ename, efields = ends[f]
        assert ename == "run" and efields == fields and etid != main
        workers.add(etid)
    assert workers <= {tid for tid, t in d.threads.items()
                       if t.thread_name.startswith("ThreadPool")}   # (15 chars: comm)
    # every flow that ends was started, once
    assert set(ends) <= set(starts)


def test_the_writers_backlog_is_a_buffer_fill_counter(tmp_path):
    """A recording to a file keeps the writer's backlog over time (STAT "backlog": the
    bytes handed over and not yet written, one sample per chunk), and the export draws
    it as a counter track of the process in percent of the writer's limit."""
    dat = record(tmp_path, LOOP_PROGRAM, "-p", "function_graph", "-F", "__main__.*",
                 "-b", "4")
    src = open_trace(dat)
    backlog = src.stats["backlog"]
    limit, samples = backlog["limit"], backlog["samples"]
    assert limit >= 4 << 20
    # a 4 KB buffer hands over a chunk every 128 records: many of them
    assert len(samples) > 20
    assert [t for t, _ in samples] == sorted(t for t, _ in samples)
    assert any(b > 0 for _, b in samples) and all(b >= 0 for _, b in samples)
    out, _ = export(tmp_path, dat)
    d = decode(out)
    assert d.counters["buffer fill (%)"] == [(t, round(100 * b / limit, 3))
                                             for t, b in samples]
    # within the recording's time
    first = min(s.start for s in d.slices)
    last = max(s.end for s in d.slices)
    assert first <= samples[0][0] and samples[-1][0] <= last + 10**9


def test_task_creations_are_joined_without_a_function_tracer(tmp_path):
    """-e asyncio:task_create alone (the nop tracer): the switches are recorded with the
    creations, so each creation's flow still ends at its Task's first step."""
    dat = record(tmp_path, """\
        import asyncio

        async def child():
            await asyncio.sleep(0)

        async def main():
            await asyncio.create_task(child(), name="kid")

        asyncio.run(main())
        """, "-e", "asyncio:task_create")
    assert open_trace(dat).tracer == "nop"
    out, _ = export(tmp_path, dat)
    starts, ends = _flows(pb.Trace.FromString(out.read_bytes()))
    made = {f for f, s in starts.items() if s[1] == "task_create"}
    assert len(made) >= 2 and made <= set(ends)
    assert any(ends[f][2].startswith("next=kid ") for f in made)
