"""The Python conveniences (fntrace.trace, fntrace.traced, TraceSession), black box:
the text of a session is what the tracefs ``trace`` file of an instance with the same
tracer shows with its default options, function_graph included; its entries are the
decoded records, graph entries included; the module shows only its public names.
"""
from __future__ import annotations

import re

import pytest

from support import DUR, GRAPH_HEADER, NESTED_MODULE, masked

import fntrace
import fntrace.session
from fntrace.output.entry import TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET
from fntrace.tracefs import Tracefs


pytestmark = pytest.mark.usefixtures("fgraph_clean")


NONE = " " * 14         # the duration cell of a call with children, at its entry


def test_function_graph_session_text_is_the_graph_trace(write_module):
    m = write_module(NESTED_MODULE, hint="sessg")
    n = m.__name__
    with fntrace.trace(f"{n}.*", tracer="function_graph") as t:
        assert m.outer() == 10
    assert masked(t.text()) == GRAPH_HEADER + [
        f" N) {NONE}|  {n}.outer() {{",
        f" N) {NONE}|    {n}.middle() {{",
        f" N) {DUR}|      {n}.inner();",
        f" N) {DUR}|    }}",
        f" N) {DUR}|    {n}.inner();",
        f" N) {DUR}|  }}",
    ]
    assert t.text(header=False).splitlines() == t.lines()[len(GRAPH_HEADER):]


def test_function_graph_session_prints_what_a_tracefs_instance_prints(write_module):
    m = write_module(NESTED_MODULE, hint="sessfs")
    n = m.__name__
    with fntrace.trace(f"{n}.*", tracer="function_graph") as t:
        m.outer()
    fs = Tracefs()
    try:
        fs.write("set_ftrace_filter", f"{n}.*")
        fs.write("current_tracer", "function_graph")
        m.outer()
        want = masked(fs.read("trace"))
    finally:
        fs.write("current_tracer", "nop")
    assert masked(t.text()) == want


def test_function_graph_session_entries_are_the_graph_records(write_module):
    m = write_module(NESTED_MODULE, hint="sesse")
    n = m.__name__
    with fntrace.trace(f"{n}.*", tracer="function_graph") as t:
        m.outer()
    got = [(e.type, e.func, e.depth) for e in t.entries()]
    assert got == [
        (TRACE_GRAPH_ENT, f"{n}.outer", 0),
        (TRACE_GRAPH_ENT, f"{n}.middle", 1),
        (TRACE_GRAPH_ENT, f"{n}.inner", 2),
        (TRACE_GRAPH_RET, f"{n}.inner", 2),
        (TRACE_GRAPH_RET, f"{n}.middle", 1),
        (TRACE_GRAPH_ENT, f"{n}.inner", 1),
        (TRACE_GRAPH_RET, f"{n}.inner", 1),
        (TRACE_GRAPH_RET, f"{n}.outer", 0),
    ]
    for e in t.entries():
        if e.type == TRACE_GRAPH_RET:
            assert e.calltime <= e.rettime == e.ts


def test_function_session_text_is_the_function_trace(write_module):
    m = write_module(NESTED_MODULE, hint="sessf")
    n = m.__name__
    with fntrace.trace(f"{n}.*") as t:
        m.outer()
    lines = t.lines()
    assert lines[:2] == ["# tracer: function", "#"]
    assert re.match(r"^# entries-in-buffer/entries-written: 4/4   #P:\d+$", lines[2])
    body = [l.split(": ", 1)[1] for l in lines if not l.startswith("#")]
    assert body == [f"{n}.outer <-{__name__}.test_function_session_text_is_the_function_trace",
                    f"{n}.middle <-{n}.outer", f"{n}.inner <-{n}.middle",
                    f"{n}.inner <-{n}.outer"]
    assert [e.type for e in t.entries()] == [TRACE_FN] * 4


def test_traced_decorator_with_function_graph(write_module):
    m = write_module(NESTED_MODULE, hint="sessd")
    n = m.__name__
    seen: list[str] = []
    run = fntrace.traced(f"{n}.*", tracer="function_graph",
                         sink=lambda s: seen.append(s.text()))(m.outer)
    assert run() == 10
    assert len(seen) == 1
    assert masked(seen[0])[:len(GRAPH_HEADER)] == GRAPH_HEADER
    assert masked(seen[0])[-1] == f" N) {DUR}|  }}"


def test_session_module_shows_only_its_public_names():
    mod = fntrace.session
    assert mod.__all__ == ["TraceSession", "trace", "traced"]
    assert [n for n in dir(mod) if not n.startswith("__")] == sorted(mod.__all__)
    for name in mod.__all__:
        assert getattr(mod, name) is getattr(fntrace, name)
