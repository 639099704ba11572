"""Static events: the interpreter's own tracepoints (events/static_events.py).

audit:<name> (PEP 578 audit events), exceptions:raise/handled/unwind, gc:gc_start/gc_end,
threads:thread_start/thread_exit and ftrace:print (trace_marker), driven through the
tracefs files (enable, filter, trigger, format, id, set_event, available_events) and
the command line (``fntrace record -e SYSTEM:EVENT ... prog.py``, ``fntrace report``).
"""
from __future__ import annotations

import gc
import re
import sys
import threading

import pytest

from support import entry_texts, run_python, trace_texts

MOD = """
    def fail(msg):
        raise ValueError(msg)

    def catch(msg):
        try:
            fail(msg)
        except ValueError:
            return "caught"

    def opener(path):
        with open(path) as f:
            return f.read()
"""

pytestmark = pytest.mark.usefixtures("new_fs")


@pytest.fixture
def fs(new_fs):
    return new_fs()


@pytest.fixture
def m(write_module):
    return write_module(MOD, hint="statmod")


def test_static_events_are_listed_with_their_files(fs):
    avail = fs.read("available_events").splitlines()
    for ev in ("audit:open", "audit:socket_connect", "audit:subprocess_Popen", "audit:import",
               "audit:builtins_input_result", "exceptions:raise", "exceptions:handled",
               "exceptions:unwind", "gc:gc_start", "gc:gc_end", "threads:thread_start",
               "threads:thread_exit", "asyncio:task_create", "futures:submit",
               "futures:run", "ftrace:print"):
        assert ev in avail
        sysname, name = ev.split(":")
        d = f"events/{sysname}/{name}"
        assert {"enable", "filter", "trigger", "format", "id"} <= set(fs.ls(d))
        assert fs.read(d + "/enable") == "0\n"          # off by default
        assert int(fs.read(d + "/id")) > 0
    assert fs.read("set_event") == ""


def test_format_lists_typed_fields(fs):
    fmt = fs.read("events/audit/open/format")
    assert fmt.startswith("name: open\n")
    assert "\tfield:object path;" in fmt
    assert "\tfield:object mode;" in fmt
    assert "\tfield:s64 flags;" in fmt
    fmt = fs.read("events/gc/gc_end/format")
    for f in ("generation", "collected", "uncollectable"):
        assert f"\tfield:s64 {f};" in fmt
    assert 'print fmt: "generation=%d collected=%d uncollectable=%d"' in fmt
    fmt = fs.read("events/exceptions/raise/format")
    for f in ("function", "type", "message"):
        assert f"\tfield:__data_loc char[] {f};" in fmt
    fmt = fs.read("events/threads/thread_start/format")
    assert "\tfield:__data_loc char[] name;" in fmt and "\tfield:s64 tid;" in fmt
    assert "\tfield:s64 parent;" in fmt
    fmt = fs.read("events/ftrace/print/format")
    assert "\tfield:__data_loc char[] buf;" in fmt


def test_gc_events_and_a_filter(fs):
    fs.write("events/gc/gc_start/filter", "generation == 2")
    fs.write("events/gc/gc_start/enable", "1")
    fs.write("events/gc/gc_end/enable", "1")
    gc.collect(0)
    gc.collect(2)
    fs.write("events/gc/enable", "0")
    texts = trace_texts(fs)
    starts = [t for t in texts if t.startswith("gc_start:")]
    assert starts and set(starts) == {"gc_start: generation=2"}
    ends = [t for t in texts if t.startswith("gc_end:")]
    assert any(t.startswith("gc_end: generation=0 collected=") for t in ends)
    assert any(t.startswith("gc_end: generation=2 collected=") and "uncollectable=" in t
               for t in ends)


def test_gc_callback_only_while_enabled(fs):
    before = list(gc.callbacks)
    fs.write("events/gc/gc_start/enable", "1")
    assert len(gc.callbacks) == len(before) + 1
    fs.write("events/gc/gc_end/enable", "1")
    assert len(gc.callbacks) == len(before) + 1
    fs.write("events/gc/gc_start/enable", "0")
    assert len(gc.callbacks) == len(before) + 1
    fs.write("events/gc/gc_end/enable", "0")
    assert gc.callbacks == before


def _mine(texts, mod):
    return [t for t in texts if f"function={mod}." in t]


def test_exception_events(fs, m):
    n = m.__name__
    fs.write("set_event", "exceptions:*")
    assert m.catch("bad thing") == "caught"
    fs.write("set_event", "")
    got = _mine(trace_texts(fs), n)
    assert got == [
        f'raise: function={n}.fail type=ValueError message="bad thing"',
        f'unwind: function={n}.fail type=ValueError message="bad thing"',
        f'raise: function={n}.catch type=ValueError message="bad thing"',
        f'handled: function={n}.catch type=ValueError message="bad thing"',
    ]


def test_exception_message_runs_no_program_code(fs, write_module):
    mod = write_module("""
        calls = []
        class Loud(Exception):
            def __str__(self):
                calls.append("str")
                return "loud"
        class Arg:
            def __repr__(self):
                calls.append("repr")
                return "arg"
            __str__ = __repr__
        def go():
            for exc in (Loud("x"), ValueError(Arg()), KeyError("k")):
                try:
                    raise exc
                except Exception:
                    pass
    """, hint="loudmod")
    n = mod.__name__
    fs.write("events/exceptions/raise/enable", "1")
    mod.go()
    fs.write("events/exceptions/raise/enable", "0")
    assert mod.calls == []
    assert _mine(trace_texts(fs), n) == [
        f"raise: function={n}.go type={n}.Loud message={n}.Loud",
        f"raise: function={n}.go type=ValueError message=ValueError",
        f"raise: function={n}.go type=KeyError message=KeyError",
    ]


def test_exception_event_filter(fs, m):
    n = m.__name__
    fs.write("events/exceptions/raise/filter", 'function ~ "*.fail"')
    fs.write("events/exceptions/raise/enable", "1")
    m.catch("one")
    fs.write("events/exceptions/raise/enable", "0")
    assert _mine(trace_texts(fs), n) == [f'raise: function={n}.fail type=ValueError message=one']


def test_exception_hooks_only_while_enabled(fs):
    if sys.version_info < (3, 12):
        # 3.11: a trace function, only while enabled
        assert sys.gettrace() is None
        fs.write("events/exceptions/handled/enable", "1")
        assert sys.gettrace() is not None
        fs.write("events/exceptions/handled/enable", "0")
        assert sys.gettrace() is None and threading._trace_hook is None
        return
    from fntrace.arch.monitoring import TOOL_ID, extra_callbacks
    E = sys.monitoring.events
    fs.write("events/exceptions/handled/enable", "1")
    assert sys.monitoring.get_events(TOOL_ID) & E.EXCEPTION_HANDLED
    assert not sys.monitoring.get_events(TOOL_ID) & E.RAISE
    fs.write("events/exceptions/handled/enable", "0")
    assert not extra_callbacks
    assert sys.monitoring.get_tool(TOOL_ID) is None or not (
        sys.monitoring.get_events(TOOL_ID) & (E.RAISE | E.EXCEPTION_HANDLED))


def test_exception_events_beside_the_graph_tracer(fs, m):
    """PY_UNWIND shared with function_graph: both see it, and the tracer's own global
    events stay when the exception events go."""
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.*")
    fs.write("current_tracer", "function_graph")
    fs.write("events/exceptions/unwind/enable", "1")
    m.catch("x")
    fs.write("events/exceptions/unwind/enable", "0")
    m.catch("y")
    text = fs.read("trace")
    fs.write("current_tracer", "nop")
    assert text.count(f"unwind: function={n}.fail") == 1
    assert text.count(f"{n}.fail") >= 3      # graph lines of both calls, and the event


def test_audit_open_with_filter_and_values(fs, m, tmp_path):
    a = tmp_path / "a.txt"
    b = tmp_path / "b.log"
    a.write_text("A")
    b.write_text("B")
    fs.write("events/audit/open/filter", 'path ~ "*.txt"')
    fs.write("events/audit/open/enable", "1")
    assert m.opener(str(a)) == "A"
    assert m.opener(str(b)) == "B"
    fs.write("events/audit/open/enable", "0")
    assert m.opener(str(a)) == "A"
    texts = [t for t in trace_texts(fs) if t.startswith("open:")]
    assert len(texts) == 1
    assert texts[0].startswith(f"open: path='") and "a.txt" in texts[0]
    assert " mode='r' flags=" in texts[0]


def test_audit_glob_and_set_event(fs):
    fs.write("set_event", "audit:socket_*")
    on = fs.read("set_event").splitlines()
    assert "audit:socket_connect" in on and "audit:open" not in on
    fs.write("set_event", "")
    assert fs.read("set_event") == ""


def test_traceoff_trigger_on_a_static_event(fs, m, tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("x")
    fs.write("events/audit/open/trigger", "traceoff")
    fs.write("events/audit/open/enable", "1")
    assert fs.read("tracing_on") == "1\n"
    m.opener(str(p))
    assert fs.read("tracing_on") == "0\n"
    fs.write("events/audit/open/enable", "0")
    fs.write("events/audit/open/trigger", "!traceoff")


def test_a_failing_hook_never_reaches_the_program(fs, m, tmp_path, monkeypatch):
    from fntrace.events import audit_events, exception_events, static_events
    from fntrace.events.core import EventCall

    def boom(*a, **k):
        raise RuntimeError("fntrace bug")
    monkeypatch.setattr(EventCall, "fire", boom)
    monkeypatch.setattr(exception_events, "exception_message", boom)
    p = tmp_path / "t.txt"
    p.write_text("x")
    fs.write("set_event", "audit:open gc:* exceptions:* threads:*")
    assert m.opener(str(p)) == "x"
    assert m.catch("z") == "caught"
    gc.collect()
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    monkeypatch.setattr(audit_events, "program_frame", boom)
    assert m.opener(str(p)) == "x"
    monkeypatch.setattr(static_events, "emit", boom)
    assert m.catch("z") == "caught"
    fs.write("set_event", "")


def test_audit_hook_costs_one_test_when_disabled(fs, m, tmp_path):
    from fntrace.events import audit_events
    p = tmp_path / "t.txt"
    p.write_text("x")
    fs.write("events/audit/open/enable", "1")
    assert audit_events._installed and "open" in audit_events._on
    fs.write("events/audit/open/enable", "0")
    assert audit_events._on == {}         # the hook returns on its first test
    m.opener(str(p))
    assert not [t for t in trace_texts(fs) if t.startswith("open:")]


def test_thread_events(fs):
    fs.write("set_event", "threads:*")
    t = threading.Thread(target=lambda: None, name="worker-7")
    t.start()
    t.join()
    fs.write("set_event", "")
    texts = [x for x in trace_texts(fs) if x.startswith("thread_")]
    assert len(texts) == 2
    assert texts[0].startswith("thread_start: name=worker-7 tid=")
    assert texts[1].startswith("thread_exit: name=worker-7 tid=")
    tid, parent = re.fullmatch(r"thread_start: name=worker-7 tid=(\d+) parent=(\d+)",
                               texts[0]).groups()
    assert texts[1] == f"thread_exit: name=worker-7 tid={tid}"
    assert int(parent) == threading.get_native_id() != int(tid)
    # disabled: a thread started now writes nothing (whether the wrapper is still in
    # place depends on who wrapped threading's start function since: core/task.py
    # may have, in a suite)
    t = threading.Thread(target=lambda: None, name="worker-8")
    t.start()
    t.join()
    assert not [x for x in trace_texts(fs) if "worker-8" in x]


def test_handoff_events(fs):
    """asyncio:task_create at a Task's making, with the id asyncio:task_switch names it
    by; futures:submit and futures:run at both ends of a thread pool's work item; no
    probe left once disabled."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from fntrace.fprobe import _T

    def double(x):
        return 2 * x

    async def child():
        await asyncio.sleep(0)

    async def main():
        task = asyncio.get_running_loop().create_task(child(), name="kid-1")
        await task
        return task

    def run_both():
        task = asyncio.run(main())
        with ThreadPoolExecutor(1, thread_name_prefix="pool") as ex:
            assert ex.submit(double, 21).result() == 42
        return task

    probed = len(_T.ip_table)
    for ev in ("asyncio/task_create", "futures/submit", "futures/run"):
        fs.write(f"events/{ev}/enable", "1")
    task = run_both()
    texts = trace_texts(fs)
    made = [t for t in texts if t.startswith("task_create: ")]
    assert f"task_create: name=kid-1 id={id(task):x}" in made
    assert len(made) >= 2               # asyncio.run's main() too
    hand = [t for t in texts if t.startswith(("submit: ", "run: "))]
    name = f"{__name__}.test_handoff_events.<locals>.double"
    assert re.fullmatch(rf"submit: fn={re.escape(name)} id=([0-9a-f]+)", hand[0])
    assert hand == [hand[0], "run" + hand[0][len("submit"):]]
    lines = fs.read("trace").splitlines()
    (sub,) = [x for x in lines if "submit: fn=" in x]
    (run,) = [x for x in lines if "run: fn=" in x]
    assert sub.split("-")[0].strip() != run.split("-")[0].strip()   # two threads
    for ev in ("asyncio/task_create", "futures/submit", "futures/run"):
        fs.write(f"events/{ev}/enable", "0")
    assert len(_T.ip_table) == probed
    fs.write("trace", "")
    run_both()
    assert not [t for t in trace_texts(fs) if t.startswith(("task_create", "submit", "run"))]


def test_trace_marker_is_ftrace_print_with_filter_and_trigger(fs):
    fs.write("trace_marker", "plain")
    fs.write("events/ftrace/print/filter", 'buf ~ "keep*"')
    fs.write("trace_marker", "keep this")
    fs.write("trace_marker", "drop this")
    assert trace_texts(fs) == ["tracing_mark_write: plain", "tracing_mark_write: keep this"]
    fs.write("events/ftrace/print/filter", "0")
    fs.write("events/ftrace/print/trigger", 'traceoff if buf == "stop"')
    fs.write("trace_marker", "stop")
    assert fs.read("tracing_on") == "0\n"
    fs.write("events/ftrace/print/trigger", "!traceoff")


PROG = """
    import gc, sys, threading

    def fail():
        raise ValueError("bad")

    try:
        fail()
    except ValueError:
        print("caught")
    with open(__file__) as f:
        pass
    gc.collect()
    t = threading.Thread(target=lambda: None, name="worker")
    t.start()
    t.join()
    print("done")
    sys.exit(3)
"""


def test_cli_record_and_report(run_fntrace, tmp_script, tmp_path):
    script = tmp_script(PROG)
    ref = run_python(script, cwd=tmp_path)
    p = run_fntrace("record", "-o", "t.dat", "-e", "exceptions:*", "-e", "gc:gc_end",
                    "-f", "generation == 2", "-e", "threads:*", "-e", "audit:open", script)
    assert (p.returncode, p.stdout) == (ref.returncode, ref.stdout) == (3, "caught\ndone\n")
    r = run_fntrace("report", "t.dat")
    assert r.returncode == 0, r.stderr
    texts = entry_texts(r.stdout)
    main = [t for t in texts if "function=__main__." in t]
    assert main[:4] == [
        'raise: function=__main__.fail type=ValueError message=bad',
        'unwind: function=__main__.fail type=ValueError message=bad',
        'raise: function=__main__.<module> type=ValueError message=bad',
        'handled: function=__main__.<module> type=ValueError message=bad',
    ]
    assert any(t.startswith("open: path=") and "prog.py" in t for t in texts)
    gcs = [t for t in texts if t.startswith("gc_")]
    assert gcs and all(t.startswith("gc_end: generation=2 ") for t in gcs)
    assert [t.split(" tid=")[0] for t in texts if t.startswith("thread_")] == [
        "thread_start: name=worker", "thread_exit: name=worker"]


def test_cli_audit_glob(run_fntrace, tmp_script, tmp_path):
    script = tmp_script(PROG)
    p = run_fntrace("record", "-o", "t.dat", "-e", "audit:*", script)
    assert (p.returncode, p.stdout) == (3, "caught\ndone\n"), p.stderr
    texts = entry_texts(run_fntrace("report", "t.dat").stdout)
    assert any(t.startswith("open: ") for t in texts)
    p = run_fntrace("record", "-o", "t.dat", "-e", "nosuch:*", script)
    assert p.returncode != 0 and "no event matches" in p.stderr


def test_audit_hook_quiet_at_interpreter_exit(tmp_path):
    """An audit hook cannot be removed, and finalization sets module globals to None
    while audit events still fire: an event left enabled must not print "Exception
    ignored in audit hook" into the program's stderr at exit."""
    prog = tmp_path / "late.py"
    prog.write_text(
        "from fntrace.tracefs import Tracefs\n"
        "import fntrace.events.audit_events as ae\n"
        "Tracefs().write('events/audit/open/enable', '1')\n"
        "import sys\n"
        "class Late:\n"
        "    def __del__(self, audit=sys.audit):\n"
        "        audit('open', '/dev/null', 'r', 0)\n"
        "ae.late = Late()      # torn down with the module's globals\n")
    r = run_python(prog, cwd=tmp_path)
    assert r.returncode == 0
    assert "audit hook" not in r.stderr, r.stderr


def test_static_events_are_made_when_first_looked_for(tmp_path):
    """A recording that names no event does not build the ~150 static events (a
    twentieth of its start-up); the first look at the event table does, before
    anything else is registered, so they keep the first ids as when they were made
    with tracefs."""
    prog = tmp_path / "lazy.py"
    prog.write_text(
        "import sys\n"
        "from fntrace.cli.main import main\n"
        "rc = main(['record', '-o', 'e.dat', '-c', 'pass'])\n"
        "print(rc, 'fntrace.events.static_events' in sys.modules)\n"
        "from fntrace.tracefs import Tracefs\n"
        "fs = Tracefs()\n"
        "print('fntrace.events.static_events' in sys.modules)\n"
        "fs.write('dynamic_events', 'f:mine json.dumps')\n"
        "print(int(fs.read('events/fprobes/mine/id')) >\n"
        "      max(int(fs.read(f'events/{e.replace(\":\", \"/\")}/id'))\n"
        "          for e in fs.read('available_events').split() if '/' not in e\n"
        "          and not e.startswith('fprobes:')))\n"
        "print('audit:open' in fs.read('available_events').split())\n")
    r = run_python(prog, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:4] == ["0 False", "False", "True", "True"]
