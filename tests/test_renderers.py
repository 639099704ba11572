"""The renderer registry (output/registry.py), black box: one view per tracer for every
reader — ``fntrace report``, the tracefs ``trace`` file and the Python API print the same
text for the same calls, for each tracer; ``fntrace.trace(tracer="function_graph")``
prints its graph; views are registered and chosen by name; one ``name_of``.
"""
from __future__ import annotations

import subprocess
import textwrap

import pytest

from fntrace.output import registry
from fntrace.output.entry import TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TraceEntry
from fntrace.output.render import render_trace

from support import DUR, masked, run_python

WORK = """
def leaf(x):
    return x + 1

def middle(x):
    return leaf(x) * 2

def main():
    total = 0
    for i in range(3):
        total += middle(i)
    return leaf(total)
"""


def _python(code: str, cwd) -> subprocess.CompletedProcess:
    return run_python("-c", textwrap.dedent(code), cwd=cwd)


def test_trace_session_with_function_graph_prints_the_graph(tmp_path):
    """The program prints what ``fntrace.trace(tracer="function_graph")`` recorded: the
    graph of its calls, not an empty trace."""
    (tmp_path / "work.py").write_text(WORK)
    r = _python("""
        import fntrace, work
        with fntrace.trace("work.*", tracer="function_graph") as t:
            work.main()
        print(t.text(), end="")
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    lines = masked(r.stdout)
    assert lines[0] == "# tracer: function_graph"
    body = [l for l in lines if not l.startswith("#")]
    assert body[0] == f" N) {' ' * 14}|  work.main() {{"
    assert f" N) {' ' * 14}|    work.middle() {{" in body
    assert f" N) {DUR}|      work.leaf();" in body
    assert body[-1] == f" N) {DUR}|  }}"
    assert len([l for l in body if "work.leaf();" in l]) == 4


def test_traced_decorator_with_function_graph_prints_the_graph(tmp_path):
    (tmp_path / "work.py").write_text(WORK)
    r = _python("""
        import fntrace, work
        run = fntrace.traced("work.*", tracer="function_graph")(work.main)
        run()
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "# tracer: function_graph" in r.stderr
    assert "|  work.main() {" in r.stderr
    assert "|      work.leaf();" in r.stderr


@pytest.mark.parametrize("tracer", ["function", "function_graph", "nop"])
def test_report_tracefs_and_api_print_the_same_text(tmp_path, run_fntrace, tracer):
    """The same calls traced three ways — ``fntrace record`` + ``report``, tracefs
    writes and a ``trace`` read, ``fntrace.trace`` — print the same text."""
    (tmp_path / "work.py").write_text(WORK)
    rec = run_fntrace("record", "-o", "t.dat", "-p", tracer, "-F", "work.*",
                      "-c", "import work; work.main()")
    assert rec.returncode == 0, rec.stderr
    rep = run_fntrace("report", "t.dat")
    assert rep.returncode == 0, rep.stderr
    api = _python(f"""
        import fntrace, work
        with fntrace.trace("work.*", tracer={tracer!r}) as t:
            work.main()
        print(t.text(), end="")
    """, tmp_path)
    assert api.returncode == 0, api.stderr
    fs = _python(f"""
        import fntrace, work
        from fntrace.tracefs import Tracefs
        fs = Tracefs()
        fs.write("set_ftrace_filter", "work.*")
        fs.write("current_tracer", {tracer!r})
        work.main()
        fs.write("tracing_on", "0")
        print(fs.read("trace"), end="")
    """, tmp_path)
    assert fs.returncode == 0, fs.stderr
    want = masked(rep.stdout)
    assert want[0] == f"# tracer: {tracer}"
    if tracer != "nop":
        assert any("work.leaf" in line for line in want)
    assert masked(api.stdout) == want
    assert masked(fs.stdout) == want


def _entry(**kw) -> TraceEntry:
    base = dict(ts=1_000_000, cpu=0, comm="MainThread", pid=7, type=TRACE_FN, func="m.f")
    base.update(kw)
    return TraceEntry(**base)


def test_renderer_for_picks_the_tracers_view():
    assert registry.renderer_for("function_graph").name == "function_graph"
    assert registry.renderer_for("function").name == "function"
    # any other tracer prints the default format, as the kernel's s_show does
    assert registry.renderer_for("nop").name == "function"
    assert registry.renderer_for("no_such_tracer").name == "function"
    assert registry.renderer_for("function", view="function_graph").name == "function_graph"
    with pytest.raises(KeyError, match="no renderer 'nosuch'"):
        registry.renderer_for("function", view="nosuch")


def test_a_registered_view_is_chosen_by_name_and_refused_twice():
    class Count(registry.Renderer):
        name = "test-count"
        needs = frozenset()
        streaming = False

        def lines(self, entries, ctx):
            n = sum(1 for e in entries if isinstance(e, TraceEntry))
            yield f"{ctx.tracer}: {n} entries"

    r = registry.register_renderer(Count())
    try:
        with pytest.raises(ValueError, match="already registered"):
            registry.register_renderer(Count())
        assert registry.get_renderer("test-count") is r
        entries = [_entry(), _entry(ts=2_000_000, func="m.g")]
        assert list(render_trace(entries, tracer="function", view="test-count")) == [
            "function: 2 entries"]
        assert list(render_trace(entries, tracer="function",
                                 options={"view": "test-count"})) == ["function: 2 entries"]
    finally:
        registry._renderers.pop("test-count", None)


def test_one_name_of_for_live_records_and_trace_files():
    import fntrace
    from fntrace.core.records import record_table
    fntrace.tracefs().read("available_filter_functions")     # the table is filled
    rec = next(r for r in record_table.records if r.ip)
    assert registry.name_of(rec.ip) == rec.name
    assert registry.name_of(0x7fffffff0) == "0x7fffffff0"
    assert registry.name_of(5, {5: ("mod.func", "mod.py", 3)}) == "mod.func"
    assert registry.name_of(6, {5: ("mod.func", "mod.py", 3)}) == "0x6"


def test_graph_view_streams_an_open_call():
    """A graph view prints as entries come: a call whose return is not read yet is an
    open block (trace_pipe)."""
    entries = [_entry(type=TRACE_GRAPH_ENT, func="m.outer", depth=0),
               _entry(ts=1_000_500, type=TRACE_GRAPH_ENT, func="m.inner", depth=1),
               _entry(ts=1_001_000, type=TRACE_GRAPH_RET, func="m.inner", depth=1,
                      calltime=1_000_500, rettime=1_001_000)]
    assert registry.get_renderer("function_graph").streaming
    lines = list(render_trace(iter(entries), tracer="function_graph", header=False))
    assert lines == [" 0)               |  m.outer() {",
                     " 0)   0.500 us    |    m.inner();"]
