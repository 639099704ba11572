"""The per-thread ring buffer (kernel/trace/ring_buffer.c semantics).

What the kernel's ring buffer promises its readers and that ftrace.rst documents:
overwrite mode drops the oldest events (counted as overrun, shown as the difference of
entries-in-buffer/entries-written and as ``[LOST N EVENTS]`` by the consuming reader),
stop mode (``options/overwrite`` = 0) drops the new ones; ``trace_pipe`` consumes;
a payload never outlives its record; a buffer handed to a sink (trace-cmd record's
splice) loses nothing and keeps order; resizing empties the buffer.  A stateful
property test checks the counters against a model for random write/consume runs.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, precondition, rule,
)

from fntrace.ring_buffer import (
    HAS_PAYLOAD, RECORD, RECORD_SIZE, TRACE_FN, ChunkQueue, RingBuffer, payloads_by_seq,
)

KB = 1                          # smallest buffer: 1 KB
NREC = KB * 1024 // RECORD_SIZE  # 32 records


def put(buf: RingBuffer, i: int) -> int:
    """Write record number i (every field derived from i, so it can be recognised)."""
    return buf.write(1000 + i, TRACE_FN, 0, i, i + 1, i + 2, i * 7)


def put_payload(buf: RingBuffer, i: int) -> int:
    return buf.write_payload(1000 + i, TRACE_FN, i, i + 1, i + 2, i * 7, f"payload-{i}")


def held_ids(buf: RingBuffer) -> list[int]:
    """The ``a`` field (record number) of every record the buffer holds, oldest first."""
    return [r[4] for r in buf.records()]


# ---------------------------------------------------------------------------------
# Overwrite and stop modes
# ---------------------------------------------------------------------------------

def test_capacity_is_size_kb_over_record_size():
    assert RingBuffer(0, KB).nrec == NREC
    assert RingBuffer(0, 4).nrec == 4 * 1024 // RECORD_SIZE


def test_overwrite_mode_keeps_the_newest_and_counts_overrun():
    buf = RingBuffer(0, KB, overwrite=True)
    seqs = [put(buf, i) for i in range(100)]
    assert seqs == list(range(100))
    assert buf.entries == NREC
    assert buf.written == 100
    assert buf.overrun == 100 - NREC
    assert buf.dropped == 0
    assert held_ids(buf) == list(range(100 - NREC, 100))
    assert [r[0] for r in buf.records()] == list(range(100 - NREC, 100))


def test_records_round_trip_every_field():
    buf = RingBuffer(3, KB)
    put(buf, 5)
    (seq, ts, typ, flags, a, b, c, d, payload), = buf.records()
    assert (seq, ts, typ, flags, a, b, c, d, payload) == (0, 1005, TRACE_FN, 0, 5, 6, 7, 35, None)


def test_stop_mode_keeps_the_oldest_and_counts_dropped():
    buf = RingBuffer(0, KB, overwrite=False)
    results = [put(buf, i) for i in range(100)]
    assert results[:NREC] == list(range(NREC))
    assert results[NREC:] == [-1] * (100 - NREC)
    assert buf.entries == NREC
    assert buf.written == 100
    assert buf.dropped == 100 - NREC
    assert buf.overrun == 0
    assert held_ids(buf) == list(range(NREC))


def test_stop_mode_accepts_again_after_a_consume():
    buf = RingBuffer(0, KB, overwrite=False)
    for i in range(NREC + 5):
        put(buf, i)
    lost, recs = buf.consume()
    assert [r[4] for r in recs] == list(range(NREC))
    assert put(buf, 1000) == NREC
    assert held_ids(buf) == [1000]
    assert buf.written == NREC + 6


def test_switching_to_stop_mode_on_a_full_buffer():
    buf = RingBuffer(0, KB, overwrite=True)
    for i in range(NREC):
        put(buf, i)
    buf.overwrite = False
    assert put(buf, 999) == -1
    assert held_ids(buf) == list(range(NREC))
    buf.overwrite = True
    assert put(buf, 1000) == NREC
    assert held_ids(buf) == list(range(1, NREC)) + [1000]


# ---------------------------------------------------------------------------------
# Consuming reads (trace_pipe)
# ---------------------------------------------------------------------------------

def test_consume_reports_lost_events_once():
    buf = RingBuffer(0, KB)
    for i in range(100):
        put(buf, i)
    lost, recs = buf.consume()
    assert lost == 100 - NREC
    assert [r[4] for r in recs] == list(range(100 - NREC, 100))
    assert buf.entries == 0
    assert buf.consume() == (0, [])

    for i in range(10):
        put(buf, 100 + i)
    lost, recs = buf.consume()
    assert (lost, [r[4] for r in recs]) == (0, list(range(100, 110)))

    for i in range(NREC + 8):
        put(buf, 200 + i)
    lost, recs = buf.consume()
    assert lost == 8
    assert [r[4] for r in recs] == list(range(208, 200 + NREC + 8))
    assert buf.written == 100 + 10 + NREC + 8


def test_consume_after_partial_fill_loses_nothing():
    buf = RingBuffer(0, KB)
    for i in range(NREC):
        put(buf, i)
    lost, recs = buf.consume()
    assert lost == 0 and len(recs) == NREC
    # The slots are free again: no overrun while refilling them.
    for i in range(NREC):
        put(buf, i)
    assert buf.overrun == 0


def test_entries_written_difference_is_lost_events():
    buf = RingBuffer(0, KB)
    for i in range(77):
        put(buf, i)
    assert buf.written - buf.entries == buf.overrun == 77 - NREC


# ---------------------------------------------------------------------------------
# Payloads
# ---------------------------------------------------------------------------------

def test_payload_is_attached_to_its_record():
    buf = RingBuffer(0, KB)
    put(buf, 0)
    put_payload(buf, 1)
    recs = list(buf.records())
    assert recs[0][3] == 0 and recs[0][8] is None
    assert recs[1][3] & HAS_PAYLOAD and recs[1][8] == "payload-1"


def test_overwritten_records_drop_their_payloads():
    buf = RingBuffer(0, KB)
    for i in range(NREC + 8):
        put_payload(buf, i)
    assert sorted(buf.payloads) == list(range(8, NREC + 8))
    assert [r[8] for r in buf.records()] == [f"payload-{i}" for i in range(8, NREC + 8)]


def test_consumed_records_drop_their_payloads():
    buf = RingBuffer(0, KB)
    for i in range(5):
        put_payload(buf, i)
    lost, recs = buf.consume()
    assert [r[8] for r in recs] == [f"payload-{i}" for i in range(5)]
    assert buf.payloads == {}


def test_stop_mode_keeps_no_payload_of_a_dropped_record():
    buf = RingBuffer(0, KB, overwrite=False)
    for i in range(NREC):
        put_payload(buf, i)
    assert put_payload(buf, 999) == -1
    assert "payload-999" not in buf.payloads.values()
    assert len(buf.payloads) == NREC


# ---------------------------------------------------------------------------------
# Sink (record mode) and resize
# ---------------------------------------------------------------------------------

class Sink(ChunkQueue):
    """The queue a record-mode buffer hands its chunks to, read back as the trace
    writer's thread reads it."""
    __slots__ = ()

    @property
    def chunks(self) -> list[tuple[int, list[tuple], dict]]:
        out = []
        for cpu, data, first_seq, payloads in self.items:
            assert cpu == 0
            # bytes, or (native) a full buffer's own page, handed over uncopied
            assert isinstance(data, (bytes, bytearray)) and len(data) % RECORD_SIZE == 0
            recs = [RECORD.unpack_from(data, o) for o in range(0, len(data), RECORD_SIZE)]
            # a dict, or (native) a list in the flagged records' order
            out.append((first_seq, recs, dict(payloads_by_seq(data, first_seq, payloads))))
        return out

    def ids(self) -> list[int]:
        return [r[3] for _, recs, _ in self.chunks for r in recs]


def test_sink_gets_every_record_in_order_with_first_seq():
    sink = Sink()
    buf = RingBuffer(0, KB, sink=sink)
    for i in range(100):
        assert put(buf, i) == i
    buf.flush()
    assert sink.ids() == list(range(100))
    expected_first = 0
    for first_seq, recs, _ in sink.chunks:
        assert first_seq == expected_first
        expected_first += len(recs)
    assert buf.overrun == 0 and buf.dropped == 0
    assert buf.written == 100
    buf.flush()                                 # nothing new: no empty chunk
    assert sum(len(c[1]) for c in sink.chunks) == 100


def test_the_reader_takes_small_chunks_together_and_a_big_one_alone():
    """take_some: the first chunk whatever its size, then more while fewer than the
    bytes asked for are taken; `pending` loses what they counted, which it returns."""
    from fntrace.ring_buffer import PAYLOAD_COST
    q = ChunkQueue()
    for cpu, n, pay in [(0, 2, {}), (1, 3, {5: "x"}), (2, 100, {}), (3, 1, [])]:
        q.items.append((cpu, bytes(n * RECORD_SIZE), 0, pay))
        q.pending += n * RECORD_SIZE + PAYLOAD_COST * len(pay)
    total = q.pending
    items: list = []                # (the reader's own list, used again: emptied here)
    cost = q.take_some(4 * RECORD_SIZE, items)
    assert [i[0] for i in items] == [0, 1]
    assert cost == 5 * RECORD_SIZE + PAYLOAD_COST and q.pending == total - cost
    items.clear()
    cost = q.take_some(4 * RECORD_SIZE, items)
    assert [i[0] for i in items] == [2]             # alone, though over the size
    items.clear()
    cost = q.take_some(1 << 20, items)
    assert [i[0] for i in items] == [3] and q.pending == 0
    items.clear()
    assert q.take_some(1 << 20, items) == 0 and items == []


def test_a_full_buffer_hands_over_its_page_and_writes_on_in_a_new_one():
    """The kernel's reader-page swap: the native buffer gives a full page to the sink
    as it is, not a copy, and what it writes next never reaches that page."""
    sink = Sink()
    buf = RingBuffer(0, KB, sink=sink)
    for i in range(NREC):
        put(buf, i)
    page = buf.data
    put(buf, NREC)                              # no room: the full page goes first
    assert len(sink.items) == 1
    chunk = sink.items[0][1]
    if isinstance(chunk, bytearray):            # (the pure twin copies: its writer
        assert chunk is page                    # runs bytecode between two stores)
        assert buf.data is not page and len(buf.data) == len(page)
    for i in range(NREC + 1, 3 * NREC + 7):
        put(buf, i)
    assert [r[3] for r in sink.chunks[0][1]] == list(range(NREC))
    buf.flush()
    assert sink.ids() == list(range(3 * NREC + 7))
    assert [c[0] for c in sink.chunks] == [0, NREC, 2 * NREC, 3 * NREC]


def test_sink_chunks_across_the_wrap_point_stay_in_order():
    sink = Sink()
    buf = RingBuffer(0, KB, sink=sink)
    for i in range(10):
        put(buf, i)
    buf.flush()                                 # next chunk starts at slot 10 and wraps
    for i in range(10, 10 + 3 * NREC + 5):
        put(buf, i)
    buf.flush()
    assert sink.ids() == list(range(10 + 3 * NREC + 5))
    firsts = [c[0] for c in sink.chunks]
    sizes = [len(c[1]) for c in sink.chunks]
    assert firsts == [sum(sizes[:k]) for k in range(len(sizes))]


def test_sink_chunks_carry_their_payloads():
    sink = Sink()
    buf = RingBuffer(0, KB, sink=sink)
    for i in range(NREC * 2 + 3):
        if i % 3 == 0:
            put_payload(buf, i)
        else:
            put(buf, i)
    buf.flush()
    for first_seq, recs, payloads in sink.chunks:
        want = {first_seq + k: f"payload-{r[3]}" for k, r in enumerate(recs) if r[3] % 3 == 0}
        assert payloads == want
    assert buf.payloads == {}


def test_payloads_read_between_hand_overs_stay_with_their_records():
    """A native buffer with a sink lists its payloads; asking for ``payloads`` (a
    snapshot, a view) gives them by sequence number, and the chunks still pair every
    payload with its record, before, across and after the look."""
    sink = Sink()
    buf = RingBuffer(0, KB, sink=sink)
    for i in range(NREC + 5):
        if i % 2 == 0:
            put_payload(buf, i)
        else:
            put(buf, i)
    held = buf.payloads                          # the 5 not handed over yet
    assert held == {i: f"payload-{i}" for i in range(NREC, NREC + 5) if i % 2 == 0}
    for i in range(NREC + 5, 3 * NREC):
        put_payload(buf, i)
    buf.flush()
    got = {}
    for first_seq, recs, payloads in sink.chunks:
        assert set(payloads) == {first_seq + k for k, r in enumerate(recs) if r[2] & HAS_PAYLOAD}
        got.update(payloads)
    assert got == {i: f"payload-{i}" for i in range(3 * NREC) if i % 2 == 0 or i >= NREC + 5}
    assert buf.payloads == {}


def test_a_flagged_record_without_payload_does_not_shift_the_others():
    """write() with the payload flag and no payload (a payload never stored): the
    records after it keep their own payloads."""
    sink = Sink()
    buf = RingBuffer(0, KB, sink=sink)
    put_payload(buf, 0)
    buf.write(1001, TRACE_FN, HAS_PAYLOAD, 1, 2, 3, 7)
    for i in range(2, NREC + 3):
        put_payload(buf, i)
    buf.flush()
    got = {}
    for _, _, payloads in sink.chunks:
        got.update(payloads)
    assert got == {i: f"payload-{i}" for i in range(NREC + 3) if i != 1}


def test_a_payload_of_no_record_in_the_chunk_stays_in_the_buffer():
    sink = Sink()
    buf = RingBuffer(0, KB, sink=sink)
    for i in range(5):
        put_payload(buf, i)
    buf.payloads[NREC * 9] = "not yet written"
    buf.flush()
    (first_seq, recs, payloads), = sink.chunks
    assert payloads == {i: f"payload-{i}" for i in range(5)}
    assert buf.payloads == {NREC * 9: "not yet written"}
    put_payload(buf, 5)
    buf.flush()
    assert sink.chunks[1][2] == {5: "payload-5"}
    assert sink.chunks[0][2] == {i: f"payload-{i}" for i in range(5)}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(min_value=1, max_value=80), st.just(0)), max_size=12))
def test_sink_property_nothing_lost_any_flush_points(steps):
    # Each step writes that many records; 0 is an explicit flush.
    sink = Sink()
    buf = RingBuffer(0, KB, sink=sink)
    n = 0
    for k in steps:
        if k == 0:
            buf.flush()
        for _ in range(k):
            put(buf, n)
            n += 1
    buf.flush()
    assert sink.ids() == list(range(n))
    sizes = [len(c[1]) for c in sink.chunks]
    assert [c[0] for c in sink.chunks] == [sum(sizes[:j]) for j in range(len(sizes))]
    assert all(s > 0 for s in sizes)


def test_resize_empties_and_changes_capacity():
    buf = RingBuffer(0, KB)
    for i in range(50):
        put_payload(buf, i)
    buf.resize(2)
    assert buf.nrec == 2 * NREC
    assert (buf.entries, buf.written, buf.overrun, buf.dropped) == (0, 0, 0, 0)
    assert buf.payloads == {}
    for i in range(2 * NREC):
        put(buf, i)
    assert buf.overrun == 0
    put(buf, 2 * NREC)
    assert buf.overrun == 1
    assert held_ids(buf) == list(range(1, 2 * NREC + 1))


def test_reset_empties_and_restarts_counters():
    buf = RingBuffer(0, KB)
    for i in range(50):
        put_payload(buf, i)
    buf.reset()
    assert (buf.entries, buf.written, buf.overrun, buf.dropped) == (0, 0, 0, 0)
    assert list(buf.records()) == [] and buf.payloads == {}
    assert put(buf, 7) == 0
    assert held_ids(buf) == [7]


# ---------------------------------------------------------------------------------
# Stateful property test: the buffer against a model
# ---------------------------------------------------------------------------------

class RingBufferMachine(RuleBasedStateMachine):
    """Random writes (with and without payloads), consumes, mode switches and resets
    must keep: entries <= capacity; written == accepted + dropped; overrun/dropped as
    counted by the model; records() == the newest ``entries`` accepted records in
    order; payloads only for records still held."""

    @initialize(overwrite=st.booleans())
    def setup(self, overwrite):
        self.buf = RingBuffer(0, KB, overwrite=overwrite)
        self.n = 0                       # record numbers, unique over the run
        self._reset_model()

    def _reset_model(self):
        self.accepted: list[tuple[int, int, str | None]] = []   # (seq, id, payload)
        self.read = 0
        self.dropped = 0
        self.overrun = 0

    def _held(self):
        seq = len(self.accepted)
        lo = max(self.read, seq - NREC, 0)
        return self.accepted[lo:]

    def _write(self, with_payload: bool):
        i = self.n
        self.n += 1
        seq = len(self.accepted)
        full = seq - self.read >= NREC
        got = put_payload(self.buf, i) if with_payload else put(self.buf, i)
        if full and not self.buf.overwrite:
            assert got == -1
            self.dropped += 1
            return
        assert got == seq
        if full:
            self.overrun += 1
        self.accepted.append((seq, i, f"payload-{i}" if with_payload else None))

    @rule(count=st.integers(min_value=1, max_value=45), payload_every=st.integers(0, 3))
    def write(self, count, payload_every):
        for k in range(count):
            self._write(payload_every > 0 and k % payload_every == 0)

    @rule()
    def consume(self):
        seq = len(self.accepted)
        want_lost = max(0, seq - NREC - self.read)
        want = self._held()
        lost, recs = self.buf.consume()
        assert lost == want_lost
        assert [(r[0], r[4], r[8]) for r in recs] == want
        self.read = seq

    @rule(on=st.booleans())
    def set_overwrite(self, on):
        self.buf.overwrite = on

    @precondition(lambda self: self.n > 0)
    @rule()
    def reset(self):
        self.buf.reset()
        self._reset_model()

    @invariant()
    def counters(self):
        held = self._held()
        assert self.buf.entries == len(held) <= NREC
        assert self.buf.written == len(self.accepted) + self.dropped
        assert self.buf.overrun == self.overrun
        assert self.buf.dropped == self.dropped

    @invariant()
    def contents(self):
        held = self._held()
        assert [(r[0], r[4], r[8]) for r in self.buf.records()] == held
        assert set(self.buf.payloads) == {s for s, _, p in held if p is not None}


RingBufferMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_ring_buffer_model = RingBufferMachine.TestCase


@pytest.mark.parametrize("overwrite", [True, False])
def test_written_minus_entries_is_what_was_lost(overwrite):
    buf = RingBuffer(0, KB, overwrite=overwrite)
    for i in range(3 * NREC + 1):
        put(buf, i)
    assert buf.written - buf.entries == buf.overrun + buf.dropped == 2 * NREC + 1


# ---------------------------------------------------------------------------------
# A thread's buffer in a trace array: made at its first event, handed over at its end
# ---------------------------------------------------------------------------------

def test_a_thread_filter_change_does_not_end_the_threads_still_running():
    """A thread's end is told by its storage in tr.local being freed; a thread filter
    change replaces tr.local (every thread takes its verdict again), and must not
    announce the end of the threads that still run: their buffers stay until they
    end, and are handed over then."""
    import gc
    import threading

    from fntrace.trace_array import TraceArray
    q = ChunkQueue()
    tr = TraceArray(buffer_size_kb=KB, sink=q)
    started, go_on = threading.Event(), threading.Event()

    def work() -> None:
        buf = tr.cpu_buffer()
        put(buf, 1)
        started.set()
        go_on.wait(10)
        put(tr.cpu_buffer(), 2)         # the new local: the same buffer again

    t = threading.Thread(target=work)
    t.start()
    assert started.wait(10)
    (cpu,) = tr.buffers
    tr.pids_changed()
    tr.pids_changed()
    gc.collect()
    assert cpu in tr.buffers and not q.items and cpu not in tr.retired
    go_on.set()
    t.join()
    gc.collect()
    assert cpu not in tr.buffers and tr.retired[cpu] == (2, 0, 0)
    (item,) = q.items
    assert item[0] == cpu and [r[3] for r in (RECORD.unpack_from(item[1], o)
                                               for o in (0, RECORD_SIZE))] == [1, 2]
