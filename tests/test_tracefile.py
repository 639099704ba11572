"""Tests for the binary trace file (fntrace.tracefile)."""

from __future__ import annotations

import array
import io
import os
import re
import struct
import threading
import zlib

import pytest

from fntrace import _env
from fntrace.tracefile import blocks, writer
from fntrace.errors import FntraceError, TraceFileError
from fntrace.tracefile.codec import put_uvarint
from fntrace.tracefile import (
    MAGIC,
    RECORD,
    RECORD_SIZE,
    TF_HAS_PAYLOAD,
    VERSION,
    TraceFile,
    TraceFileWriter,
)

TRACE_FN, GRAPH_ENT, GRAPH_RET, PRINT = 1, 2, 3, 4


def varints(*vals):
    out = bytearray()
    for v in vals:
        put_uvarint(out, v)
    return bytes(out)


def pack(recs):
    """Records as the ring buffer holds them: 32 bytes each, back to back."""
    return b"".join(RECORD.pack(*r) for r in recs)


def make_chunk(cpu, first_ts, n, step=10, payload_every=0):
    """n records for one cpu; every payload_every-th record carries a payload."""
    recs = []
    for i in range(n):
        flags = TF_HAS_PAYLOAD if payload_every and i % payload_every == 0 else 0
        recs.append((first_ts + i * step, TRACE_FN, flags, 100 + i % 3, cpu, i, cpu * 1000 + i))
    return recs


class Recorder:
    """Writes a small trace into memory and remembers what went in, and where."""

    def __init__(self, header=None, compress=False):
        self.buf = io.BytesIO()
        self.w = TraceFileWriter(self.buf, header if header is not None else {"tracer": "function"},
                                 compress=compress)
        self.header_end = len(self.buf.getvalue())
        # (end offset of the chunk block, cpu, expected read-back tuples)
        self.chunks = []
        self.seq = {}

    def chunk(self, cpu, recs, lost=0, payload_fn=lambda seq: ["p", seq]):
        first = self.seq.get(cpu, 0)
        self.seq[cpu] = first + len(recs)
        payloads = {
            first + i: payload_fn(first + i) for i, r in enumerate(recs) if r[2] & TF_HAS_PAYLOAD
        }
        self.w.write_chunk(cpu, pack(recs), first, lost=lost, payloads=payloads or None)
        expected = [(cpu, *r, payloads.get(first + i)) for i, r in enumerate(recs)]
        self.chunks.append((len(self.buf.getvalue()), cpu, expected))

    def data(self):
        return self.buf.getvalue()


def graph_chunk(first_ts):
    """function_graph records: a call with two leaf calls inside, one with a return value."""
    t = first_ts
    return [(t, GRAPH_ENT, 0, 100, 0, 0, 0), (t + 3, GRAPH_ENT, 0, 101, 1, 0, 0),
            (t + 9, GRAPH_RET, 0, 101, 1, 0, t + 3), (t + 12, GRAPH_ENT, 0, 102, 1, 0, 0),
            (t + 20, GRAPH_RET, TF_HAS_PAYLOAD, 102, 1, 0, t + 12),
            (t + 25, GRAPH_RET, 0, 100, 0, 0, t)]


def small_trace(compress=False):
    r = Recorder({"tracer": "function_graph", "argv": ["prog", "-x"]}, compress=compress)
    r.w.add_symbols([(100, "f", "mod.py", 3), (101, "g", "mod.py", 9), (102, "h", "other.py", 1)])
    r.w.add_thread(0, 4242, "MainThread")
    r.w.add_thread(1, 4243, "worker")
    r.chunk(0, make_chunk(0, 1000, 4, payload_every=2))
    r.chunk(1, make_chunk(1, 1005, 3), lost=2)
    r.w.add_symbols([(103, "k", "mod.py", 20)])
    r.chunk(0, make_chunk(0, 1040, 3, payload_every=3))
    r.chunk(1, make_chunk(1, 1035, 2, payload_every=1), lost=1)
    r.chunk(0, graph_chunk(1100))
    r.w.close({"entries": 18, "overrun": 3})
    return r


# -- round trip -------------------------------------------------------------


def test_constants():
    assert RECORD.format == "<QHHIIIQ"
    assert RECORD_SIZE == RECORD.size == 32
    assert TF_HAS_PAYLOAD == 1
    assert issubclass(TraceFileError, FntraceError)


def test_round_trip(tmp_path):
    path = tmp_path / "trace.dat"
    w = TraceFileWriter(path, {"tracer": "function", "clock": "mono"})
    w.add_symbols([(1, "main", "app/main.py", 10), (2, "Cls.meth", "app/main.py", 20)])
    w.add_symbols([(3, "helper", "app/lib.py", 5), (1, "main", "app/main.py", 10)])
    w.add_thread(0, 111, "MainThread")
    w.add_thread(1, 222, "worker-1")
    c0a = [(10, TRACE_FN, 0, 1, 0, 0, 0), (30, PRINT, TF_HAS_PAYLOAD, 2, 1, 0, 0)]
    c1a = [(20, GRAPH_ENT, 0, 3, 0, 0, 0), (25, GRAPH_RET, TF_HAS_PAYLOAD, 3, 0, 7, 5)]
    c0b = [(40, TRACE_FN, TF_HAS_PAYLOAD, 2, 1, 0, 0)]
    c1b = [(35, TRACE_FN, 0, 3, 2, 0, 0)]
    w.write_chunk(0, pack(c0a), 0, payloads={1: ("hello", 1, 2.5, True, None)})
    w.write_chunk(1, bytearray(pack(c1a)), 0, lost=3, payloads={1: [1, [2, 3]]})
    w.write_chunk(0, memoryview(pack(c0b)), 2, lost=1, payloads={2: "x" * 1000})
    w.write_chunk(1, pack(c1b), 2)
    w.close({"entries": 6, "overrun": 4})
    assert w.closed

    tf = TraceFile.open(path)
    assert tf.complete and not tf.truncated
    assert tf.name == str(path)
    assert tf.header == {"tracer": "function", "clock": "mono"}
    assert tf.symbols == {
        1: ("main", "app/main.py", 10),
        2: ("Cls.meth", "app/main.py", 20),
        3: ("helper", "app/lib.py", 5),
    }
    assert tf.threads == {0: (111, "MainThread"), 1: (222, "worker-1")}
    assert tf.stats == {"entries": 6, "overrun": 4}
    assert tf.cpus == [0, 1]
    # tuples come back as lists (JSON)
    assert list(tf.records(0)) == [
        (0, *c0a[0], None),
        (0, *c0a[1], ["hello", 1, 2.5, True, None]),
        (0, *c0b[0], "x" * 1000),
    ]
    assert list(tf.records(1)) == [
        (1, *c1a[0], None),
        (1, *c1a[1], [1, [2, 3]]),
        (1, *c1b[0], None),
    ]
    assert [r[1] for r in tf.records()] == [10, 20, 25, 30, 35, 40]
    assert tf.nr_records() == 6 and tf.nr_records(0) == 3 and tf.nr_records(1) == 3
    assert tf.lost() == 4 and tf.lost(0) == 1 and tf.lost(1) == 3
    assert list(tf.records(7)) == [] and tf.nr_records(7) == 0 and tf.lost(7) == 0


def test_symbols_written_once_and_file_names_shared():
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {})
    long_file = "/a/very/long/path/to/a/module/" + "x" * 200 + ".py"
    w.add_symbols([(i, f"f{i}", long_file, i) for i in range(50)])
    w.add_symbols([(i, f"f{i}", long_file, i) for i in range(50)])  # nothing new
    w.write_chunk(0, b"", 0)
    w.add_symbols([(i, f"f{i}", long_file, i) for i in range(60)])  # 10 new
    w.close()
    data = buf.getvalue()
    assert data.count(b"SYMS") == 2
    assert data.count(long_file.encode()) == 1
    tf = TraceFile.frombytes(data)
    assert tf.symbols == {i: (f"f{i}", long_file, i) for i in range(60)}


def test_symbols_precede_the_chunk_that_follows():
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {})
    w.add_symbols([(5, "f", "m.py", 1)])
    assert b"SYMS" not in buf.getvalue()  # queued, not yet written
    w.write_chunk(0, pack([(1, TRACE_FN, 0, 5, 0, 0, 0)]), 0)
    data = buf.getvalue()
    assert 0 < data.index(b"SYMS") < data.index(b"CHNK")
    w.close()


def test_odd_strings_round_trip():
    name = "caf\u00e9.\u00fcber<lambda>\U0001f600"
    fname = "pkg/bad\udcff\udc80name.py"  # os.fsdecode of undecodable bytes
    w_buf = io.BytesIO()
    w = TraceFileWriter(w_buf, {"x": "\ud800 lone", "path": "\u00e9"})
    w.add_symbols([(0xFFFFFFFF, name, fname, 0)])
    w.add_thread(3, 2**64 - 1, "th\u00e9\udcff")
    w.write_chunk(3, pack([(1, PRINT, TF_HAS_PAYLOAD, 0, 0, 0, 0)]), 7, payloads={7: "\ud800\x00\u00e9"})
    w.close()
    tf = TraceFile.frombytes(w_buf.getvalue())
    assert tf.header == {"x": "\ud800 lone", "path": "\u00e9"}
    assert tf.symbols == {0xFFFFFFFF: (name, fname, 0)}
    assert tf.threads == {3: (2**64 - 1, "th\u00e9\udcff")}
    assert [r[-1] for r in tf.records()] == ["\ud800\x00\u00e9"]


def test_unjsonable_payload_is_named_without_running_its_repr():
    # The writer runs on its own thread while the program runs: it must not run the
    # program's code (a __repr__), only name the object.
    calls = []

    class Obj:
        def __repr__(self):
            calls.append(1)
            return "<Obj>"

    buf = io.BytesIO()
    w = TraceFileWriter(buf, {})
    w.write_chunk(0, pack([(1, PRINT, TF_HAS_PAYLOAD, 0, 0, 0, 0)]), 0, payloads={0: [Obj(), {"k": (1, 2)}]})
    w.close()
    got = list(TraceFile.frombytes(buf.getvalue()).records())[0][-1]
    assert calls == []
    assert re.fullmatch(r"<test_tracefile\.\S*Obj object at 0x[0-9a-f]+>", got[0]), got
    assert got[1] == {"k": [1, 2]}


def test_payload_values_of_every_kind_round_trip():
    class S(str):
        pass
    values = ["", "n\x00-3\x00s\x00'abc'", "\udcff\u00e9", S("sub"), 0, 1, -1, 63, -64,
              2**63 - 1, -2**63, 2**63, -2**63 - 1, 10**40, True, False, None, 2.5,
              float("inf"), [1, "x", None], {"k": [1, 2]}, (3, 4)]
    recs = [(i, PRINT, TF_HAS_PAYLOAD, 0, 0, 0, 0) for i in range(len(values) + 3)]
    # payloads on every even record and the first odd ones: the later odd ones have none
    payloads = {100 + 2 * i: v for i, v in enumerate(values[: (len(recs) + 1) // 2])}
    payloads.update({101 + 2 * i: v for i, v in enumerate(values[(len(recs) + 1) // 2:])})
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {})
    w.write_chunk(0, pack(recs), 100, payloads=payloads)
    w.close()
    got = {100 + i: r[-1] for i, r in enumerate(TraceFile.frombytes(buf.getvalue()).records())}
    for seq, v in payloads.items():
        want = list(v) if isinstance(v, tuple) else v
        assert got[seq] == want and type(got[seq]) is type(want if type(want) is not S else ""), (seq, v)
    assert all(got[seq] is None for seq in got if seq not in payloads)


def test_huge_int_payload_is_kept_by_size():
    # str() of an int over 4300 digits raises; the writer must not.
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {})
    w.write_chunk(0, pack([(1, PRINT, TF_HAS_PAYLOAD, 0, 0, 0, 0)]), 0, payloads={0: 10 ** 5000})
    w.close()
    got = list(TraceFile.frombytes(buf.getvalue()).records())[0][-1]
    assert got == f"<int of {(10 ** 5000).bit_length()} bits>"


def test_records_from_typed_memoryview():
    recs = make_chunk(0, 0, 5)
    arr = array.array("Q", pack(recs))  # a view whose items are 8 bytes
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {})
    w.write_chunk(0, memoryview(arr), 0)
    w.close()
    assert [r[1:8] for r in TraceFile.frombytes(buf.getvalue()).records()] == recs


def test_large_chunk_is_split():
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {})
    w.max_chunk_records = 4
    recs = make_chunk(2, 0, 10, payload_every=3)
    payloads = {50 + i: i for i, r in enumerate(recs) if r[2] & TF_HAS_PAYLOAD}
    w.write_chunk(2, pack(recs), 50, lost=5, payloads=payloads)
    w.close()
    data = buf.getvalue()
    assert data.count(b"CHNK") == 3
    tf = TraceFile.frombytes(data)
    assert list(tf.records()) == [(2, *r, payloads.get(50 + i)) for i, r in enumerate(recs)]
    assert tf.lost() == 5


def test_empty_trace():
    buf = io.BytesIO()
    TraceFileWriter(buf, {"a": 1}).close()
    tf = TraceFile.frombytes(buf.getvalue())
    assert tf.complete and not tf.truncated
    assert tf.header == {"a": 1} and tf.stats is None
    assert list(tf.records()) == [] and tf.nr_records() == 0 and tf.cpus == []


# -- writer contract ----------------------------------------------------------


def test_writer_rejects_bad_input():
    buf = io.BytesIO()
    with pytest.raises(TypeError):
        TraceFileWriter(buf, ["not", "a", "dict"])  # type: ignore[arg-type]
    w = TraceFileWriter(buf, {})
    with pytest.raises(ValueError, match="multiple of 32"):
        w.write_chunk(0, b"x" * 33, 0)
    recs = pack([(1, PRINT, TF_HAS_PAYLOAD, 0, 0, 0, 0), (2, PRINT, 0, 0, 0, 0, 0)])
    with pytest.raises(ValueError, match="outside the chunk"):
        w.write_chunk(0, recs, 10, payloads={12: "x"})
    with pytest.raises(ValueError, match="TF_HAS_PAYLOAD"):
        w.write_chunk(0, recs, 10, payloads={11: "x"})
    with pytest.raises(ValueError):
        w.add_symbols([(-1, "f", "m.py", 1)])
    # nothing half-written: the file is still good
    w.write_chunk(0, recs, 10, payloads={10: "ok"})
    w.close()
    tf = TraceFile.frombytes(buf.getvalue())
    assert [r[-1] for r in tf.records()] == ["ok", None]


def test_writer_close_semantics(tmp_path):
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {})
    w.close({"a": 1})
    w.close({"b": 2})  # second close does nothing
    assert not buf.closed  # a file object handed in stays open
    with pytest.raises(ValueError, match="closed"):
        w.write_chunk(0, b"", 0)
    with pytest.raises(ValueError, match="closed"):
        w.add_thread(0, 1, "t")
    assert TraceFile.frombytes(buf.getvalue()).stats == {"a": 1}

    with TraceFileWriter(tmp_path / "t.dat", {"ctx": True}) as w2:
        w2.write_chunk(0, pack(make_chunk(0, 0, 2)), 0)
    assert w2.closed and w2._file.closed
    tf = TraceFile.open(tmp_path / "t.dat")
    assert tf.complete and tf.nr_records() == 2


def test_writer_broken_after_failed_write():
    class Flaky(io.BytesIO):
        fail = False

        def write(self, b):
            if self.fail:
                raise OSError(28, "No space left on device")
            return super().write(b)

    f = Flaky()
    w = TraceFileWriter(f, {})
    w.write_chunk(0, pack(make_chunk(0, 0, 2)), 0)
    f.fail = True
    with pytest.raises(OSError):
        w.write_chunk(0, pack(make_chunk(0, 100, 2)), 2)
    f.fail = False
    with pytest.raises(ValueError, match="failed earlier"):
        w.write_chunk(0, pack(make_chunk(0, 200, 2)), 4)
    w.close()  # writes nothing more after the failure
    tf = TraceFile.frombytes(f.getvalue())
    assert tf.truncated and tf.nr_records() == 2


def test_writer_handles_short_writes():
    class Dribble(io.RawIOBase):
        """A raw file that accepts at most 7 bytes per write() call."""

        def __init__(self):
            self.data = bytearray()

        def writable(self):
            return True

        def write(self, b):
            chunk = bytes(memoryview(b)[:7])
            self.data += chunk
            return len(chunk)

    f = Dribble()
    w = TraceFileWriter(f, {"k": "v"})
    recs = make_chunk(0, 0, 5, payload_every=2)
    w.write_chunk(0, pack(recs), 0, payloads={0: "a", 2: "b", 4: "c"})
    w.close()
    tf = TraceFile.frombytes(bytes(f.data))
    assert tf.complete and [r[-1] for r in tf.records()] == ["a", None, "b", None, "c"]


def test_writer_thread_safety():
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {"threads": 4})
    nchunks, per_chunk = 50, 20

    def worker(cpu):
        w.add_thread(cpu, 1000 + cpu, f"t{cpu}")
        for k in range(nchunks):
            w.add_symbols([(cpu * 10_000 + k, f"f{cpu}_{k}", f"m{cpu}.py", k)])
            recs = [
                (k * per_chunk + i, TRACE_FN, TF_HAS_PAYLOAD if i == 0 else 0, cpu * 10_000 + k, cpu, k, i)
                for i in range(per_chunk)
            ]
            first = k * per_chunk
            w.write_chunk(cpu, pack(recs), first, lost=1, payloads={first: [cpu, k]})

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close({"done": True})

    tf = TraceFile.frombytes(buf.getvalue())
    assert tf.complete
    assert tf.nr_records() == 4 * nchunks * per_chunk
    assert tf.lost() == 4 * nchunks
    assert tf.threads == {c: (1000 + c, f"t{c}") for c in range(4)}
    assert len(tf.symbols) == 4 * nchunks
    for cpu in range(4):
        recs = list(tf.records(cpu))
        assert [r[1] for r in recs] == list(range(nchunks * per_chunk))
        assert all(r[4] in tf.symbols for r in recs)
        assert [r[-1] for r in recs if r[-1] is not None] == [[cpu, k] for k in range(nchunks)]


# -- merge order --------------------------------------------------------------


def test_merge_order_is_by_timestamp_and_stable():
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {})
    # cpu 2 is written first but ties must still come out in ascending cpu order;
    # equal timestamps inside one cpu keep their order.
    w.write_chunk(2, pack([(5, 1, 0, 20, 0, 0, 0), (5, 1, 0, 21, 0, 0, 0), (9, 1, 0, 22, 0, 0, 0)]), 0)
    w.write_chunk(0, pack([(1, 1, 0, 0, 0, 0, 0), (5, 1, 0, 1, 0, 0, 0), (5, 1, 0, 2, 0, 0, 0)]), 0)
    w.write_chunk(1, pack([(5, 1, 0, 10, 0, 0, 0), (7, 1, 0, 11, 0, 0, 0)]), 0)
    w.write_chunk(0, pack([(9, 1, 0, 3, 0, 0, 0), (12, 1, 0, 4, 0, 0, 0)]), 3)
    w.close()
    tf = TraceFile.frombytes(buf.getvalue())
    got = [(r[0], r[1], r[4]) for r in tf.records()]
    assert got == [
        (0, 1, 0),
        (0, 5, 1),
        (0, 5, 2),
        (1, 5, 10),
        (2, 5, 20),
        (2, 5, 21),
        (1, 7, 11),
        (0, 9, 3),
        (2, 9, 22),
        (0, 12, 4),
    ]


def test_merge_matches_sorted_reference():
    r = small_trace()
    tf = TraceFile.frombytes(r.data())
    everything = [rec for _, _, exp in r.chunks for rec in exp]
    # the reference: a stable sort by (ts, cpu) of the per-cpu streams
    assert list(tf.records()) == sorted(everything, key=lambda rec: (rec[1], rec[0]))


# -- truncation ---------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_truncation_at_every_byte(compress):
    r = small_trace(compress)
    data = r.data()
    full = TraceFile.frombytes(data)
    assert full.complete and not full.truncated
    prev_count = -1
    for cut in range(len(data) + 1):
        prefix = data[:cut]
        if cut < r.header_end:
            with pytest.raises(TraceFileError) as ei:
                TraceFile.frombytes(prefix, "cut.dat")
            assert str(ei.value).startswith("cut.dat: offset ")
            assert "\n" not in str(ei.value)
            continue
        tf = TraceFile.frombytes(prefix, "cut.dat")
        if cut == len(data):
            assert tf.complete and not tf.truncated
        else:
            assert tf.truncated and not tf.complete, cut
            assert tf.end_offset <= cut
        assert tf.header == full.header
        whole = [c for c in r.chunks if c[0] <= cut]
        for cpu in (0, 1):
            expected = [rec for _, c, exp in whole if c == cpu for rec in exp]
            assert list(tf.records(cpu)) == expected, cut
            # the same records as the whole file's, up to the last whole block
            assert expected == list(full.records(cpu))[:len(expected)]
        merged = list(tf.records())
        assert len(merged) == tf.nr_records() == sum(len(c[2]) for c in whole)
        # a longer prefix never yields fewer records
        assert len(merged) >= prev_count
        prev_count = len(merged)
        # symbols referred to by the records that were read are known
        assert all(rec[4] in tf.symbols for rec in merged)


def test_the_index_gives_each_chunks_first_and_last_time():
    """INDX, written at close: each chunk block's first and last record time, so a
    reader can leave the blocks outside a time window undecoded; a file cut before it
    has none (and is read by scanning)."""
    r = small_trace()
    data = r.data()
    tf = TraceFile.frombytes(data)
    for cpu in (0, 1):
        want = [(exp[0][1], exp[-1][1]) for _, c, exp in r.chunks if c == cpu]
        assert tf.times[cpu] == want
    assert tf.first_time() == min(exp[0][1] for _, _, exp in r.chunks)
    cut = TraceFile.frombytes(data[:r.chunks[-1][0]])
    assert cut.truncated and cut.times is None and cut.first_time() is None
    # the blocks of a window only, as the index says; all of them without one
    assert [(t0, t1) for t0, t1 in tf.times[0] if t1 >= 1041 and t0 <= 1101] == \
        tf.times[0][1:]
    blocks = list(tf.record_blocks(0, since=1041, until=1101))
    assert [len(b[2]) // 32 for b in blocks] == [3, 6]
    assert [len(b[2]) // 32 for b in tf.record_blocks(0, since=1090)] == [6]
    assert len(list(tf.record_blocks(0, until=999))) == 0
    assert len(list(cut.record_blocks(0, since=1041, until=1101))) == 3


def test_truncated_file_on_disk(tmp_path):
    r = small_trace()
    data = r.data()
    cut = r.chunks[1][0] + 5  # a few bytes into the block after the 2nd chunk
    p = tmp_path / "crashed.dat"
    p.write_bytes(data[:cut])
    tf = TraceFile.open(p)
    assert tf.truncated and not tf.complete and tf.stats is None
    assert tf.nr_records() == len(r.chunks[0][2]) + len(r.chunks[1][2])
    assert tf.end_offset == r.chunks[1][0]


def test_zero_filled_tail_reads_as_truncated():
    r = small_trace()
    data = r.data()
    cut = r.chunks[2][0]
    tf = TraceFile.frombytes(data[:cut] + b"\0" * 4096)
    assert tf.truncated and tf.end_offset == cut
    assert tf.nr_records() == sum(len(c[2]) for c in r.chunks[:3])


def test_writer_without_close_reads_as_truncated():
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {})
    w.write_chunk(0, pack(make_chunk(0, 0, 3)), 0)
    tf = TraceFile.frombytes(buf.getvalue())
    assert tf.truncated and not tf.complete and tf.nr_records() == 3


# -- corruption ---------------------------------------------------------------


def block_offsets(data):
    """(offset, tag, length) of each block, walking the framing."""
    pos, out = 12, []
    while pos < len(data):
        tag, length = struct.unpack_from("<4sI", data, pos)
        out.append((pos, tag, length))
        pos += 12 + length
    return out


def test_flipped_byte_in_chunk_reports_offset():
    r = small_trace()
    data = r.data()
    chunk_pos, _, length = next(b for b in block_offsets(data) if b[1] == b"CHNK")
    bad = bytearray(data)
    bad[chunk_pos + 8 + 24 + 5] ^= 0x40  # inside the first record
    with pytest.raises(TraceFileError) as ei:
        TraceFile.frombytes(bytes(bad), "trace.dat")
    msg = str(ei.value)
    assert msg.startswith(f"trace.dat: offset {chunk_pos}: ")
    assert "checksum mismatch" in msg and "CHNK" in msg
    assert "\n" not in msg


def test_flipped_byte_anywhere_is_detected():
    data = small_trace().data()
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x10
        with pytest.raises(TraceFileError, match=r"^f: offset \d+: "):
            TraceFile.frombytes(bytes(bad), "f")


def test_bad_magic(tmp_path):
    p = tmp_path / "notatrace.txt"
    p.write_bytes(b"hello world, this is not a trace file")
    with pytest.raises(TraceFileError, match=r"notatrace\.txt: offset 0: bad magic"):
        TraceFile.open(p)
    with pytest.raises(TraceFileError, match="bad magic"):
        TraceFile.frombytes(b"FNX")
    with pytest.raises(TraceFileError, match="empty file"):
        TraceFile.frombytes(b"")


def test_unsupported_version():
    data = bytearray(small_trace().data())
    struct.pack_into("<I", data, 8, VERSION + 1)
    with pytest.raises(TraceFileError, match=rf"offset 8: unsupported trace file version "
                                             rf"{VERSION + 1}; this fntrace reads version {VERSION}$"):
        TraceFile.frombytes(bytes(data))


def test_version_1_file_is_refused_by_name():
    # the 32-byte-record format fntrace wrote before the compact one: magic, version 1,
    # a HEAD block, a CHNK block of one raw record
    chunk = struct.pack("<IIQQ", 0, 1, 0, 0) + RECORD.pack(5, TRACE_FN, 0, 1, 0, 0, 0)
    data = MAGIC + struct.pack("<I", 1) + block(b"HEAD", b"{}") + block(b"CHNK", chunk)
    with pytest.raises(TraceFileError) as ei:
        TraceFile.frombytes(data, "old.dat")
    assert str(ei.value) == ("old.dat: offset 8: unsupported trace file version 1 (written by "
                             "an older fntrace: record the program again); this fntrace reads "
                             f"version {VERSION}")


def block(tag, payload):
    head = struct.pack("<4sI", tag, len(payload))
    return head + payload + struct.pack("<I", zlib.crc32(head + payload))


FILE_HEAD = MAGIC + struct.pack("<I", VERSION)
ONE = varints(0, 0) + bytes([TRACE_FN]) + varints(0, 1, 0)   # one encoded FN record
HEAD = block(b"HEAD", b"{}")
END = block(b"END\0", b"")


def test_impossible_length():
    data = FILE_HEAD + HEAD + struct.pack("<4sI", b"CHNK", 0xFFFFFFF0) + b"\0" * 64
    with pytest.raises(TraceFileError, match=rf"offset {len(FILE_HEAD + HEAD) + 4}: impossible block length"):
        TraceFile.frombytes(data)


def test_length_past_end_of_complete_file():
    data = bytearray(small_trace().data())
    pos, tag, length = block_offsets(bytes(data))[2]
    struct.pack_into("<I", data, pos + 4, length + 1000)
    with pytest.raises(TraceFileError, match=rf"offset {pos + 4}: .*runs past the end of a complete file"):
        TraceFile.frombytes(bytes(data))


def test_impossible_record_count_with_valid_crc():
    body = varints(0, 0) + bytes([TRACE_FN]) + varints(0, 1, 0)     # one record
    chunk = varints(0, 50, 0, 0, len(body)) + body                  # says 50 records
    data = FILE_HEAD + HEAD + block(b"CHNK", chunk) + END
    with pytest.raises(TraceFileError, match="impossible record count 50 for 6 bytes"):
        TraceFile.frombytes(data)


def test_bad_records_with_valid_crc_are_reported_with_the_offset():
    body = varints(0, 0) + bytes([TRACE_FN]) + varints(0, 1, 0) + bytes([0x80])
    head = varints(0, 2, 0, 0)
    chunk = head + varints(len(body)) + body                        # a bad second tag
    data = FILE_HEAD + HEAD + block(b"CHNK", chunk) + END
    tf = TraceFile.frombytes(data, "bad.dat")
    at = len(FILE_HEAD + HEAD) + 8 + len(head)                      # where the records are
    with pytest.raises(TraceFileError, match=rf"^bad.dat: offset {at}: "
                                             r"CHNK block: bad records \(record 1: bad tag 0x80\)$"):
        list(tf.records())


def test_bad_inner_structures_with_valid_crc():
    cases = [
        (b"THRD", varints(0, 1, 50) + b"abc", "impossible name length"),
        (b"THRD", b"\x80", "THRD block: varint runs past the end"),
        (b"SYMS", varints(1, 99) + b"x", "runs past the end"),
        (b"SYMS", varints(0, 1, 1, 1, 3, 1) + b"f", "unknown file"),
        (b"SYMS", varints(0, 0) + b"zz", "stray bytes"),
        (b"STAT", b"[1, 2]", "expected a JSON object"),
        (b"STAT", b"{nope", "bad JSON"),
        (b"CHNK", varints(0, 1, 0, 0, len(ONE)) + ONE + varints(5, 1, 2), "bad payload entry"),
        (b"CHNK", varints(0, 1, 0, 0, len(ONE)) + ONE + varints(0, 2, 1) + b"{", "bad payload JSON"),
        (b"CHNK", varints(0, 1, 0, 0, len(ONE)) + ONE + varints(0, 0, 9) + b"ab", "runs past the end"),
        (b"CHNK", varints(0, 1, 0, 0, len(ONE)) + ONE + varints(0, 7), "bad payload kind 7"),
        (b"CHNK", varints(0, 1, 0, 0, len(ONE)) + ONE + varints(0, 1) + b"\x80", "bad payload entry"),
        (b"CHNK", varints(0, 1, 0, 0, 50) + ONE, "records length 50 runs past the end"),
        (b"CHNK", b"\0\0", "too short"),
        (b"CHKZ", varints(0, 1, 0, 0, 10) + b"not zstd", "CHKZ block: cannot decompress"),
        (b"HEAD", b"{}", "second HEAD"),
        (b"INDX", varints(1, 0, 5, 0, 0), "INDX block: does not list the chunks"),
        (b"INDX", varints(1, 0), "INDX block: runs past the end"),
    ]
    for tag, payload, what in cases:
        # a chunk's payloads are parsed when its records are read (the file is not
        # held in memory): the damage is reported then, with its offset
        with pytest.raises(TraceFileError, match=what):
            list(TraceFile.frombytes(FILE_HEAD + HEAD + block(tag, payload) + END).records())


def test_first_block_must_be_header():
    with pytest.raises(TraceFileError, match="expected HEAD"):
        TraceFile.frombytes(FILE_HEAD + block(b"THRD", struct.pack("<IQI", 0, 1, 0)) + END)


def test_end_block_with_length():
    with pytest.raises(TraceFileError, match="END block with length 4"):
        TraceFile.frombytes(FILE_HEAD + HEAD + block(b"END\0", b"abcd"))


def test_data_after_end():
    data = small_trace().data()
    with pytest.raises(TraceFileError, match=rf"offset {len(data)}: 3 bytes of data after the END block"):
        TraceFile.frombytes(data + b"xyz")


def test_unknown_block_is_skipped():
    data = FILE_HEAD + HEAD + block(b"XTRA", b"future stuff") + END
    tf = TraceFile.frombytes(data)
    assert tf.complete and tf.nr_records() == 0


# The block checksum: the native twin's crc32 must give zlib.crc32's value for any
# data, length and starting value (it folds 64-byte blocks with carry-less multiply).
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402



@settings(max_examples=300, deadline=None)
@given(data=st.binary(min_size=0, max_size=700), start=st.integers(0, 2**32 - 1),
       offset=st.integers(0, 15))
def test_block_crc_is_zlib_crc32(data, start, offset):
    buf = bytes(offset) + data
    view = memoryview(buf)[offset:]         # unaligned starts too
    assert blocks.crc32(view, start) == zlib.crc32(data, start)
    assert blocks.crc32(data) == zlib.crc32(data)


def test_block_crc_is_zlib_crc32_on_a_large_buffer():
    data = bytes(range(256)) * 4099 + b"tail"
    assert blocks.crc32(data) == zlib.crc32(data)
    assert blocks.crc32(data[:1 << 16], 7) == zlib.crc32(data[:1 << 16], 7)


# -- the payload packing's twins: the native pack_payloads gives the Python twin's bytes

# The native module whether or not FNTRACE_PURE=1 (which only keeps it off the writer's
# path): the twins are compared in both runs of the suite.
_NATIVE_PACK = getattr(_env.native_module(), "pack_payloads", None)

_payload_value = st.recursive(
    st.one_of(
        st.text(max_size=12),
        st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3),
        st.integers(-(2**63), 2**63 - 1),
        st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 0, -1, 127, 128, 10**30]),
        st.booleans(), st.none(), st.floats(allow_nan=True),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=3), inner, max_size=2)),
    max_leaves=6,
)


def _tails_or_error(fn, *args):
    try:
        return fn(*args)
    except ValueError as e:
        return ("ValueError", str(e))


@pytest.mark.skipif(_NATIVE_PACK is None, reason="the native module is not built")
@settings(max_examples=400, deadline=None)
@given(flags=st.lists(st.booleans(), max_size=40), first_seq=st.integers(0, 2**40),
       step=st.integers(1, 12), data=st.data())
def test_native_and_python_payload_packing_give_the_same_bytes(flags, first_seq, step, data):
    recs = [(i, PRINT, TF_HAS_PAYLOAD if f else 0, 0, 0, 0, 0) for i, f in enumerate(flags)]
    mv = memoryview(pack(recs))
    flagged = [first_seq + i for i, f in enumerate(flags) if f]
    seqs = data.draw(st.lists(st.sampled_from(flagged), unique=True) if flagged else st.just([]))
    if data.draw(st.integers(0, 9)) == 0:      # now and then a payload the chunk refuses
        seqs.insert(data.draw(st.integers(0, len(seqs))),
                    data.draw(st.sampled_from([first_seq - 1, first_seq + len(flags), -5,
                                               2**70, first_seq + flags.index(False)]
                                              if False in flags else [first_seq - 1, 2**64])))
    payloads = {s: data.draw(_payload_value) for s in seqs}
    py = _tails_or_error(writer._py_payload_tails, mv, first_seq, payloads, step)
    native = _tails_or_error(_NATIVE_PACK, mv, first_seq, payloads, step, writer._dumps)
    assert native == py


@pytest.mark.skipif(_NATIVE_PACK is None, reason="the native module is not built")
@settings(max_examples=300, deadline=None)
@given(flags=st.lists(st.booleans(), max_size=40), first_seq=st.integers(0, 2**40),
       step=st.integers(1, 12), extra=st.integers(-2, 2), data=st.data())
def test_listed_payloads_pack_as_the_same_payloads_by_sequence_number(flags, first_seq, step,
                                                                      extra, data):
    """A native buffer with a sink lists a chunk's payloads in its flagged records'
    order: packed natively and by the Python twin, they give the bytes the dict gives,
    and a list one too short or too long is refused by both, with the same words."""
    recs = [(i, PRINT, TF_HAS_PAYLOAD if f else 0, 0, 0, 0, 0) for i, f in enumerate(flags)]
    mv = memoryview(pack(recs))
    flagged = [first_seq + i for i, f in enumerate(flags) if f]
    values = [data.draw(_payload_value) for _ in range(max(0, len(flagged) + extra))]
    py = _tails_or_error(writer._py_payload_tails, mv, first_seq, values, step)
    native = _tails_or_error(_NATIVE_PACK, mv, first_seq, values, step, writer._dumps)
    assert native == py
    if len(values) == len(flagged):
        assert py == writer._py_payload_tails(mv, first_seq, dict(zip(flagged, values)), step)
    else:
        assert py[0] == "ValueError"


@pytest.mark.skipif(_NATIVE_PACK is None, reason="the native module is not built")
def test_written_file_is_the_same_with_and_without_native_payload_packing(monkeypatch):
    recs = make_chunk(0, 1000, 50, payload_every=2)
    # out of order, every kind, pieces of 8 records
    payloads = {1000 + i: v for i, v in zip(range(48, -1, -2), [
        "a", "\u00e9t\u00e9", "\udcff", 7, -(2**63), 2**63, True, None, 2.5, [1, "x"],
        [1, [2]], {"k": 1}, "", 0, -1, 10**40] * 2)}
    monkeypatch.setattr(TraceFileWriter, "max_chunk_records", 8)
    out = []
    for native in (_NATIVE_PACK, None):
        monkeypatch.setattr(writer, "_pack_native", native)
        buf = io.BytesIO()
        w = TraceFileWriter(buf, {"k": 1})
        w.write_chunk(0, pack(recs), 1000, payloads=payloads)
        w.close()
        out.append(buf.getvalue())
    assert out[0] == out[1]
    got = {1000 + i: rec[-1] for i, rec in enumerate(TraceFile.frombytes(out[0]).records())}
    assert {k: got[k] for k in payloads} == payloads


def _mapped_kib(path) -> int:
    """The resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total = 0
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                inside = len(head) >= 6 and head[5] == str(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps")
def test_a_mapped_file_read_is_given_back(tmp_path):
    """Reading a mapped trace gives its pages back as it goes: those of blocks read, and
    those a page fault maps around the next block (fault-around), which would stay
    resident to the end.  Two threads' chunks interleave in the file, and are read
    one thread after the other, as the native walks read them."""
    import random
    rnd = random.Random(7)
    path = tmp_path / "big.dat"
    w = TraceFileWriter(path, {"tracer": "function"})
    w.add_symbols([(100 + k, f"f{k}", "m.py", k) for k in range(50)])
    seq = {0: 0, 1: 0}
    for k in range(160):
        cpu = k % 2
        recs = [(k * 10_000 + i, TRACE_FN, 0, 100 + rnd.randrange(50), rnd.getrandbits(31),
                 rnd.getrandbits(31), rnd.getrandbits(63)) for i in range(2048)]
        w.write_chunk(cpu, pack(recs), seq[cpu])
        seq[cpu] += len(recs)
    w.close({})
    assert os.path.getsize(path) > 4 << 20
    tf = TraceFile.open(path)
    assert _mapped_kib(path) < 512           # the first pass checked every block
    n = sum(len(b[2]) // RECORD_SIZE for b in tf.record_blocks())
    assert n == 160 * 2048
    assert _mapped_kib(path) < 512
    assert sum(1 for _ in tf.records()) == n        # merged by time: both at once
    assert _mapped_kib(path) < 512


def test_the_writers_backlog_keeps_its_peaks_in_bounded_memory():
    """The writer samples its backlog at each chunk; past BACKLOG_SAMPLES neighbours are
    merged into the larger, so the peaks stay and the list stays short."""
    import io

    from fntrace.tracefile import TraceFileWriter
    from fntrace.tracefile.sink import BACKLOG_SAMPLES, FileSink
    sink = FileSink(TraceFileWriter(io.BytesIO(), {"tracer": "nop"}), 64)
    try:
        values = [(i * 7919) % 1000 for i in range(5 * BACKLOG_SAMPLES)]
        values[12345] = 10**9               # one peak
        for v in values:
            sink._backlog(v)
        b = sink.backlog
        assert BACKLOG_SAMPLES // 2 <= len(b) <= BACKLOG_SAMPLES
        assert max(v for _, v in b) == 10**9
        assert [t for t, _ in b] == sorted(t for t, _ in b)
        # an idle writer's rounds add nothing
        del sink._bl_time[:], sink._bl_pending[:]
        for _ in range(5):
            sink._backlog(0)
        assert len(sink.backlog) == 1
    finally:
        sink.finish({"cpus": {}})
    assert sink.error is None
