"""output/calls.py: whole calls from a function_graph entry stream, as the table, flame
graph, timeline and browser views read them — including the streams a real trace
gives when records were lost or the trace was cut."""
from __future__ import annotations

from fntrace.output.calls import CallBuilder, iter_calls
from fntrace.output.entry import TRACE_EVENT, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TraceEntry


def ent(ts, func, depth, cpu=0, args=None):
    return TraceEntry(ts=ts, cpu=cpu, comm=f"t{cpu}", pid=100 + cpu, type=TRACE_GRAPH_ENT,
                      func=func, depth=depth, args=args)


def ret(ts, func, depth, calltime, cpu=0, retval=None):
    return TraceEntry(ts=ts, cpu=cpu, comm=f"t{cpu}", pid=100 + cpu, type=TRACE_GRAPH_RET,
                      func=func, depth=depth, calltime=calltime, rettime=ts, retval=retval,
                      has_retval=retval is not None)


def summary(calls):
    return [(";".join(c.stack), c.start, c.end, c.self_ns, c.complete, c.entry_seen)
            for c in calls]


def test_nested_calls_come_out_at_their_return_with_self_time():
    calls = list(iter_calls([
        ent(0, "main", 0, args=[("n", "2")]),
        ent(10, "a", 1),
        ent(20, "b", 2),
        ret(50, "b", 2, 20, retval=7),
        ret(70, "a", 1, 10),
        ent(80, "a", 1),
        ret(90, "a", 1, 80),
        ret(100, "main", 0, 0),
    ]))
    assert summary(calls) == [
        ("main;a;b", 20, 50, 30, True, True),
        ("main;a", 10, 70, 30, True, True),
        ("main;a", 80, 90, 10, True, True),
        ("main", 0, 100, 100 - 60 - 10, True, True),
    ]
    assert calls[0].retval == 7 and calls[0].has_retval
    assert calls[-1].args == [("n", "2")] and calls[-1].duration == 100


def test_threads_keep_their_own_stacks():
    calls = list(iter_calls([
        ent(0, "main", 0, cpu=0),
        ent(1, "work", 0, cpu=1),
        ent(2, "leaf", 1, cpu=0),
        ent(3, "leaf", 1, cpu=1),
        ret(4, "leaf", 1, 3, cpu=1),
        ret(5, "leaf", 1, 2, cpu=0),
        ret(6, "work", 0, 1, cpu=1),
        ret(7, "main", 0, 0, cpu=0),
    ]))
    assert [(c.comm, c.pid, ";".join(c.stack)) for c in calls] == [
        ("t1", 101, "work;leaf"), ("t0", 100, "main;leaf"),
        ("t1", 101, "work"), ("t0", 100, "main")]


def test_a_return_without_its_entry_is_made_from_the_return():
    # tracing began inside outer(), or its entry was overwritten
    calls = list(iter_calls([
        ent(10, "inner", 1),
        ret(20, "inner", 1, 10),
        ret(30, "outer", 0, 2),
    ]))
    assert summary(calls) == [("inner", 10, 20, 10, True, True),
                              ("outer", 2, 30, 28, True, False)]


def test_entries_without_returns_are_closed_at_the_end_of_the_trace():
    b = CallBuilder()
    out = []
    for e in [ent(0, "main", 0), ent(5, "loop", 1), ent(8, "step", 2),
              ret(9, "step", 2, 8)]:
        out += b.feed(e)
    assert b.open_stack(0) == ("main", "loop")
    out += b.finish()
    assert summary(out) == [("main;loop;step", 8, 9, 1, True, True),
                            ("main;loop", 5, 9, 3, False, True),
                            ("main", 0, 9, 5, False, True)]


def test_a_lost_return_closes_the_call_at_the_next_entry_of_its_depth():
    calls = list(iter_calls([
        ent(0, "main", 0),
        ent(10, "a", 1),            # a's return was lost
        ent(40, "b", 1),
        ret(50, "b", 1, 40),
        ent(60, "c", 1),            # c's return lost, then a return at c's depth
        ret(70, "d", 1, 65),        # ... of another function whose entry was lost
        ret(100, "main", 0, 0),
    ]))
    assert summary(calls) == [
        ("main;a", 10, 40, 30, False, True),
        ("main;b", 40, 50, 10, True, True),
        ("main;c", 60, 70, 10, False, True),
        ("main;d", 65, 70, 5, True, False),
        ("main", 0, 100, 100 - 30 - 10 - 10 - 5, True, True),
    ]


def test_other_entries_are_left_to_the_caller():
    e = TraceEntry(ts=3, cpu=0, comm="t0", pid=100, type=TRACE_EVENT, func="ev", text="x=1")
    calls = list(iter_calls([ent(0, "f", 0), e, ret(5, "f", 0, 0)]))
    assert summary(calls) == [("f", 0, 5, 5, True, True)]
