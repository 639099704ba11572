"""The Python reader: fntrace.open_trace() and its typed events, TraceSource.calls(), and
trace(output=...)/traced(output=...) writing trace files.

Programs are recorded with the ``fntrace`` command; what the reader gives back is
compared with what ``fntrace report`` prints for the same file.
"""
from __future__ import annotations

import re
from collections import Counter

import pytest

import fntrace
from fntrace.output.entry import LostEvents
from fntrace.output.trace_events import parse_event_fields, typed_events

from support import run_python

PROG = """
import threading

def leaf(x, s="a b"):
    return x * 2

def mid(n):
    t = 0
    for i in range(n):
        t += leaf(i)
    return t

def boom():
    raise ValueError("no")

def main():
    mid(3)
    try:
        boom()
    except ValueError:
        pass
    th = threading.Thread(target=mid, args=(2,), name="worker")
    th.start()
    th.join()

main()
"""


def record(run_fntrace, tmp_script, *opts: str, source: str = PROG) -> str:
    prog = tmp_script(source)
    out = str(prog.parent / "t.dat")
    p = run_fntrace("record", *opts, "-o", out, str(prog))
    assert p.returncode == 0, p.stderr
    return out


def report(run_fntrace, path: str) -> str:
    p = run_fntrace("report", path)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_function_graph_events_match_the_report(run_fntrace, tmp_script):
    path = record(run_fntrace, tmp_script, "-p", "function_graph", "-A", "-R",
                  "-F", "__main__.*")
    text = report(run_fntrace, path)
    src = fntrace.open_trace(path)
    events = list(src)
    assert events == list(src.events()), "a second pass gives the same events"
    kinds = Counter(type(e).__name__ for e in events)
    assert set(kinds) == {"GraphEntry", "GraphReturn"}
    # one report line names each call: 'f(...) {' or the leaf 'f(...);'
    for func in ("__main__.main", "__main__.mid", "__main__.leaf", "__main__.boom"):
        in_report = len(re.findall(re.escape(func) + r"\(", text))
        entries = [e for e in events if isinstance(e, fntrace.GraphEntry) and e.func == func]
        returns = [e for e in events if isinstance(e, fntrace.GraphReturn) and e.func == func]
        assert len(entries) == len(returns) == in_report, func
    assert in_report == 1
    leaves = [e for e in events if isinstance(e, fntrace.GraphEntry) and e.func == "__main__.leaf"]
    assert [e.args for e in leaves] == [{"x": str(i), "s": "'a b'"} for i in (0, 1, 2, 0, 1)]
    rets = [e for e in events if isinstance(e, fntrace.GraphReturn) and e.func == "__main__.leaf"]
    assert [e.retval for e in rets] == [0, 2, 4, 0, 2] and all(e.has_retval for e in rets)
    # the leaf durations the report prints, to the nanosecond it rounds to
    shown = [float(m) for m in re.findall(r"([\d.]+) us +\|\s+__main__\.leaf\(", text)]
    assert shown == [round(e.duration / 1000, 3) for e in rets]
    for e in rets:
        assert e.duration == e.ts - e.calltime > 0
    (boom,) = [e for e in events if isinstance(e, fntrace.GraphReturn) and e.func == "__main__.boom"]
    assert boom.raised and not rets[0].raised
    # threads: the worker's calls carry its name and native id, on their own slot
    worker = [e for e in events if e.thread == "worker"]
    assert {e.func for e in worker} == {"__main__.mid", "__main__.leaf"}
    assert len({e.tid for e in worker}) == 1 and len({e.cpu for e in worker}) == 1
    assert {e.tid for e in events} == {tid for tid, _ in src.threads.values()}
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    main_depths = {e.func: e.depth for e in events
                   if isinstance(e, fntrace.GraphEntry) and e.thread == "MainThread"}
    assert main_depths == {"__main__.main": 0, "__main__.mid": 1, "__main__.leaf": 2,
                           "__main__.boom": 1}


def test_calls_are_whole_calls(run_fntrace, tmp_script):
    path = record(run_fntrace, tmp_script, "-p", "function_graph", "-F", "__main__.*")
    src = fntrace.open_trace(path)
    calls = list(src.calls())
    assert Counter(c.func for c in calls) == {"__main__.main": 1, "__main__.mid": 2,
                                              "__main__.leaf": 5, "__main__.boom": 1}
    assert all(c.complete and c.entry_seen for c in calls)
    (main,) = [c for c in calls if c.func == "__main__.main"]
    mid = [c for c in calls if c.func == "__main__.mid" and c.comm == "MainThread"][0]
    kids = [c for c in calls if c.stack[:-1] == mid.stack]
    assert [c.func for c in kids] == ["__main__.leaf"] * 3
    assert mid.self_ns == mid.duration - sum(c.duration for c in kids)
    assert main.stack == ("__main__.main",) and mid.stack == ("__main__.main", "__main__.mid")
    worker_mid = [c for c in calls if c.func == "__main__.mid" and c.comm == "worker"][0]
    assert worker_mid.stack == ("__main__.mid",)


def test_function_tracer_hits(run_fntrace, tmp_script):
    path = record(run_fntrace, tmp_script, "-p", "function", "-F", "__main__.*")
    text = report(run_fntrace, path)
    events = list(fntrace.open_trace(path))
    assert all(isinstance(e, fntrace.FunctionHit) for e in events)
    lines = [ln for ln in text.splitlines() if not ln.startswith("#") and ln.strip()]
    assert len(events) == len(lines)
    for e, line in zip(events, lines):
        assert line.endswith(f": {e.func} <-{e.parent}"), (line, e)
        assert line.lstrip().startswith(f"{e.thread}-{e.tid}")
        assert f"[{e.cpu:03d}]" in line
    assert Counter(e.func for e in events)["__main__.leaf"] == 5
    assert {e.parent for e in events if e.func == "__main__.leaf"} == {"__main__.mid"}


EVENT_PROG = """
def leaf(x, s="a b", seq=(1, 2)):
    return x

def main():
    leaf(1)
    leaf(2, "it's x=1 y", [3, 4])
    leaf(3, "q'uote", {"k": "v w"})
    return 7

main()
"""


def test_dynamic_events_have_their_fields(run_fntrace, tmp_script):
    path = record(run_fntrace, tmp_script, "-p", "function", "-F", "__main__.main",
                  "-e", "f __main__.leaf x s seq", "-T", "stacktrace",
                  "-e", "f __main__.main%return $retval", source=EVENT_PROG)
    text = report(run_fntrace, path)
    src = fntrace.open_trace(path)
    events = list(src)
    dyn = [e for e in events if isinstance(e, fntrace.DynamicEvent)]
    assert len(dyn) == len(re.findall(r"__main___(leaf__entry|main__exit): ", text)) == 4
    leafs = [e for e in dyn if e.name == "__main___leaf__entry"]
    assert [e.fields for e in leafs] == [
        {"x": "1", "s": "'a b'", "seq": "(1, 2)"},
        {"x": "2", "s": '"it\'s x=1 y"', "seq": "[3, 4]"},
        {"x": "3", "s": '"q\'uote"', "seq": "{'k': 'v w'}"},
    ]
    assert all(e.func == "__main__.leaf" and e.caller == "" for e in leafs)
    for e in leafs:
        assert f"__main___leaf__entry: {e.text}" in text
    (ret,) = [e for e in dyn if e.name == "__main___main__exit"]
    assert ret.func == "__main__.main" and ret.caller.startswith("__main__.<module>+")
    assert ret.fields == {"arg1": "7"}
    stacks = [e for e in events if isinstance(e, fntrace.StackTrace)]
    assert len(stacks) == text.count("<stack trace>") == 3
    assert stacks[0].frames[:3] == ("__main__.leaf", "__main__.main", "__main__.<module>")
    assert src.event_fields == {"__main___leaf__entry": ["x", "s", "seq"],
                                "__main___main__exit": ["arg1"]}


@pytest.mark.parametrize("text, names, want", [
    ("(m.f+0) x=1 y='a b'", ["x", "y"], ("m.f", "", {"x": "1", "y": "'a b'"})),
    ("(m.f+0) x=1 y='a b'", None, ("m.f", "", {"x": "1", "y": "'a b'"})),
    # a value holding ' y=' inside quotes, brackets, or escaped quotes
    ("(m.f+0) x=' y=2' y=3", ["x", "y"], ("m.f", "", {"x": "' y=2'", "y": "3"})),
    ("(m.f+0) x=' y=2' y=3", None, ("m.f", "", {"x": "' y=2'", "y": "3"})),
    ("(m.f+0) x=[1, {'a': ' y=1'}] y=()", ["x", "y"],
     ("m.f", "", {"x": "[1, {'a': ' y=1'}]", "y": "()"})),
    ('(m.f+0) x="a\\" y=b" y=1', ["x", "y"], ("m.f", "", {"x": '"a\\" y=b"', "y": "1"})),
    # a value cut short by the recorder leaves its quote open
    ("(m.f+0) x='abc... y=1", ["x", "y"], ("m.f", "", {"x": "'abc...", "y": "1"})),
    ("(m.main+3 <- m.f) arg1=3", ["arg1"], ("m.f", "m.main+3", {"arg1": "3"})),
    ("(m.f+0)", [], ("m.f", "", {})),
    ("(m.f+0) x=(fault)", ["x"], ("m.f", "", {"x": "(fault)"})),
    # names that do not fit the text: read as it stands
    ("(m.f+0) a=1 b=2", ["x"], ("m.f", "", {"a": "1", "b": "2"})),
])
def test_parse_event_fields(text, names, want):
    assert parse_event_fields(text, names) == want


def test_lost_events_are_typed():
    (ev,) = list(typed_events([LostEvents(3, 17)]))
    assert ev == fntrace.Lost(3, 17)


def test_events_are_frozen(run_fntrace, tmp_script):
    path = record(run_fntrace, tmp_script, "-p", "function", "-F", "__main__.leaf")
    ev = next(iter(fntrace.open_trace(path)))
    with pytest.raises(AttributeError):
        ev.func = "x"


def test_open_trace_bad_files(tmp_path):
    bad = tmp_path / "bad.dat"
    bad.write_bytes(b"not a trace file at all")
    with pytest.raises(fntrace.TraceFileError) as ei:
        fntrace.open_trace(bad)
    assert "\n" not in str(ei.value) and "bad magic" in str(ei.value)
    with pytest.raises(fntrace.TraceFileError) as ei:
        fntrace.open_trace(tmp_path / "missing.dat")
    assert "missing.dat" in str(ei.value)


def test_cut_file_reads_what_is_whole(run_fntrace, tmp_script, tmp_path):
    path = record(run_fntrace, tmp_script, "-p", "function_graph", "-F", "__main__.*",
                  "-e", "f __main__.leaf x s")
    whole = list(fntrace.open_trace(path))
    data = open(path, "rb").read()
    cut = tmp_path / "cut.dat"
    cut.write_bytes(data[:-40])     # the STAT and END blocks go
    src = fntrace.open_trace(cut)
    assert src.truncated and src.event_fields == {}
    got = list(src)
    assert len(got) == len(whole)
    # without the event's field names, the text itself is split
    dyn = [e for e in got if isinstance(e, fntrace.DynamicEvent)]
    assert dyn and all(e.fields == {"x": e.fields["x"], "s": "'a b'"} for e in dyn)


def test_import_fntrace_does_not_load_the_file_reader():
    code = ("import sys, fntrace; "
            "print(any(m.startswith('fntrace.tracefile') for m in sys.modules), "
            "'fntrace.output.source' in sys.modules)")
    p = run_python("-c", code)
    assert p.stdout.split() == ["False", "False"], p.stderr


# -- trace(output=...) -------------------------------------------------------------------

def test_session_output_file(write_module, tmp_path, run_fntrace):
    mod = write_module("""
        def leaf(x):
            return x + 1

        def top(n):
            t = 0
            for i in range(n):
                t += leaf(i)
            return t
    """)
    out = tmp_path / "s.dat"
    with fntrace.trace(f"{mod.__name__}.*", tracer="function_graph", output=out,
                       options={"funcgraph-args": True, "funcgraph-retval": True}) as t:
        t.fs.write("trace_marker", "before top\n")
        mod.top(3)
    assert out.exists()
    src = fntrace.open_trace(out)
    assert src.tracer == "function_graph" and not src.truncated
    events = list(src)
    (marker,) = [e for e in events if isinstance(e, fntrace.Marker)]
    assert marker.text == "before top" and marker.writer == ""
    rets = [e for e in events if isinstance(e, fntrace.GraphReturn)]
    assert [(e.func.rsplit(".", 1)[1], e.retval) for e in rets] == [
        ("leaf", 1), ("leaf", 2), ("leaf", 3), ("top", 6)]
    ents = [e for e in events if isinstance(e, fntrace.GraphEntry)]
    assert ents[0].args == {"n": "3"}
    # the file is what the session's own text shows
    assert sum(1 for e in t.entries()) == len(events)
    p = run_fntrace("report", str(out))
    assert p.returncode == 0, p.stderr
    body = [ln for ln in p.stdout.splitlines() if not ln.startswith("#")]
    assert body == [ln for ln in t.text().splitlines() if not ln.startswith("#")]
    assert f"{mod.__name__}.top(n=3) {{" in p.stdout


def test_traced_output_writes_and_prints_nothing(write_module, tmp_path, capfd):
    mod = write_module("""
        def leaf(x):
            return x
    """)
    out = tmp_path / "d.dat"

    @fntrace.traced(f"{mod.__name__}.*", output=str(out))
    def work():
        return mod.leaf(5)

    assert work() == 5
    assert capfd.readouterr().err == ""
    (hit,) = list(fntrace.open_trace(out))
    assert isinstance(hit, fntrace.FunctionHit) and hit.func == f"{mod.__name__}.leaf"
    assert hit.parent.endswith("work")
    work()                              # each call writes the file anew
    assert len(list(fntrace.open_trace(out))) == 1


def test_session_output_keeps_the_newest_and_says_what_was_lost(write_module, tmp_path,
                                                                run_fntrace):
    mod = write_module("""
        def leaf(x):
            return x
    """)
    out = tmp_path / "small.dat"
    with fntrace.trace(f"{mod.__name__}.*", buffer_size_kb=1, output=out):
        for i in range(200):
            mod.leaf(i)
    src = fntrace.open_trace(out)
    events = list(src)
    n = len(events) - 1
    assert 0 < n < 200
    # the overwritten records are reported where they were: before the oldest kept,
    # on the thread's slot (0 in a fresh process; a test process that ran threads
    # before this test has given this thread a later one)
    slot = events[1].cpu
    assert events[0] == fntrace.Lost(slot, 200 - n)
    assert all(isinstance(e, fntrace.FunctionHit) and e.cpu == slot for e in events[1:])
    (cpu,) = src.stats["cpus"].values()
    assert cpu["written"] == 200 and cpu["overrun"] == 200 - n
    p = run_fntrace("report", str(out))
    assert f"entries-in-buffer/entries-written: {n}/200" in p.stdout
    assert f"CPU:{slot} [LOST {200 - n} EVENTS]" in p.stdout


def test_lost_events_in_a_file_come_where_they_were_dropped():
    import io
    from fntrace.record_format import TRACE_FN
    from fntrace.ring_buffer import RECORD
    from fntrace.tracefile import TraceFile, TraceFileWriter
    from fntrace.output.source import TraceSource
    buf = io.BytesIO()
    w = TraceFileWriter(buf, {"tracer": "function"})
    w.add_symbols([(1, "m.f", "m.py", 1)])
    w.add_thread(0, 100, "main")
    w.add_thread(1, 101, "other")
    rec = lambda ts: RECORD.pack(ts, TRACE_FN, 0, 1, 0, 0, 0)
    w.write_chunk(0, rec(10) + rec(20), 0)
    w.write_chunk(1, rec(15), 0, lost=3)
    w.write_chunk(0, rec(40), 7, lost=5)
    w.close({})
    src = TraceSource(TraceFile.frombytes(buf.getvalue()))
    got = [(type(e).__name__, getattr(e, "ts", None), e.cpu) for e in src.events()]
    assert got == [("FunctionHit", 10, 0), ("Lost", None, 1), ("FunctionHit", 15, 1),
                   ("FunctionHit", 20, 0), ("Lost", None, 0), ("FunctionHit", 40, 0)]
    assert [e.count for e in src.events() if isinstance(e, fntrace.Lost)] == [3, 5]
    assert [e.count for e in src.events(cpu=0) if isinstance(e, fntrace.Lost)] == [5]


def test_session_output_of_nothing_is_a_valid_empty_trace(tmp_path, monkeypatch,
                                                          run_fntrace):
    monkeypatch.chdir(tmp_path)
    s = fntrace.trace("json.dumps", output="empty.dat")
    with s:
        monkeypatch.chdir(tmp_path.parent)      # the path was taken where it was given
    src = fntrace.open_trace(tmp_path / "empty.dat")
    assert list(src) == [] and list(src.calls()) == [] and not src.truncated
    p = run_fntrace("report", str(tmp_path / "empty.dat"))
    assert p.returncode == 0 and "entries-in-buffer/entries-written: 0/0" in p.stdout


def test_session_output_unwritable_leaves_nothing(write_module, tmp_path):
    mod = write_module("""
        def leaf(x):
            return x
    """)
    where = tmp_path / "no" / "such" / "dir" / "t.dat"
    with pytest.raises(OSError):
        with fntrace.trace(f"{mod.__name__}.*", output=where):
            mod.leaf(1)
    assert not where.parent.exists()
    # the file is made beside its place and renamed: a failure leaves no part behind
    target = tmp_path / "isdir"
    target.mkdir()
    with pytest.raises(OSError):
        with fntrace.trace(f"{mod.__name__}.*", output=target):
            mod.leaf(1)
    assert target.is_dir() and not list(target.iterdir())
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
