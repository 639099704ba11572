"""``fntrace tui``: the call index against output/calls.py, the browser driven headlessly
(textual's pilot: keys in, app state and drawn lines out), three screens as SVG
snapshots, the command's errors, and once in a real terminal under tmux.

The snapshots and most pilot tests read tests/gold/tui/browse.dat, recorded once from
tests/gold/tui/browse.py (``fntrace record -p function_graph -A -R -F '__main__.*'
-e 'f __main__.leaf x'``), so what they draw does not change from run to run:
MainThread runs main() -> work(5), the thread "worker" work(3); each work calls mid(i)
which calls leaf twice; the dynamic event fires at every leaf entry.
"""
from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from support import GOLD, run_python

textual = pytest.importorskip("textual", reason="LOUD SKIP: textual is not installed (the tui extra)")

from fntrace.output.calls import iter_calls  # noqa: E402
from fntrace.output.source import open_trace  # noqa: E402
from fntrace.tui import TraceBrowser  # noqa: E402
from fntrace.tui.flame import flame_lines  # noqa: E402
from fntrace.tui.index import OPEN, TraceIndex, format_ns, function_rows  # noqa: E402

BROWSE = GOLD / "tui" / "browse.dat"
SIZE = (120, 36)


def _sync(test):
    """Run an async test (the pilot is async; no asyncio plugin is needed)."""
    @functools.wraps(test)
    def run(*args, **kw):
        return asyncio.run(test(*args, **kw))
    return run


def _built(path) -> TraceIndex:
    ix = TraceIndex(open_trace(path))
    ix.build()
    assert ix.done and ix.error is None
    return ix


def _lines(app, n: int | None = None) -> list[str]:
    g = app.graph
    h = g.size.height if n is None else n
    return ["".join(s.text for s in g.render_line(y)).rstrip() for y in range(h)]


def _name(app, r: int | None = None) -> str:
    v = app.graph.view
    r = v.row() if r is None else r
    return app.index.names[v.t.func[r]]


async def _indexed(pilot) -> None:
    app = pilot.app
    for _ in range(400):
        if app.index.done:
            break
        await pilot.pause(0.05)
    assert app.index.done
    # the poll that takes the last rows in: the next tick's, which a loaded machine may
    # run late (CI: a view still short of 5,000 rows three ticks after the index ended)
    for _ in range(400):
        await pilot.pause(app.tick)
        v = app.graph.view
        if v is None or v.seen == v.t.n:
            break
    await pilot.pause()


# ---------------------------------------------------------------------------------
# The index
# ---------------------------------------------------------------------------------

def _record(tmp_path, run_fntrace, source: str, *args: str) -> Path:
    prog = tmp_path / "prog.py"
    prog.write_text(source)
    r = run_fntrace("record", *args, "-o", "t.dat", "prog.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path / "t.dat"


NESTED = """\
import threading
def leaf(x):
    return x + 1
def mid(i):
    return leaf(i) + leaf(i * 2)
def boom():
    raise ValueError("no")
def work(n):
    t = 0
    for i in range(n):
        t += mid(i)
        try:
            boom()
        except ValueError:
            pass
    return t
th = threading.Thread(target=work, args=(30,), name="side")
th.start(); th.join()
work(50)
"""


def test_index_holds_every_call_with_its_times(tmp_path, run_fntrace):
    """Every call output/calls.py makes of the trace is a row, with the same start,
    end, self time, depth, args and retval; rows are in entry order with each call's
    descendants right after it; the function table adds up the same calls."""
    path = _record(tmp_path, run_fntrace, NESTED, "-p", "function_graph", "-A", "-R",
                   "-F", "__main__.*")
    ix = _built(path)
    calls = list(iter_calls(open_trace(path).entries()))
    rows = {}
    for cpu, t in ix.threads.items():
        assert t._stack == []
        for r in range(t.n):
            assert not t.flags[r] & OPEN
            key = (cpu, t.start[r], ix.names[t.func[r]], t.depth[r])
            rows[key] = (t.end[r], t.self_ns[r],
                         ix.texts[t.args[r]] if t.args[r] >= 0 else None,
                         ix.texts[t.ret[r]] if t.ret[r] >= 0 else None)
            # a call's subtree: the rows after it, deeper, up to subend
            e = t.subend[r]
            assert all(t.depth[k] > t.depth[r] for k in range(r + 1, e))
            assert e == t.n or t.depth[e] <= t.depth[r]
            if t.parent[r] >= 0:
                p = t.parent[r]
                assert p < r < t.subend[p] and t.depth[p] == t.depth[r] - 1
    assert len(rows) == len(calls) == ix.nr_rows()
    assert len(calls) == 2 + 80 + 160 + 80      # work, mid, leaf, boom
    for c in calls:
        args = ", ".join(f"{k}={v}" for k, v in c.args) if c.args is not None else None
        ret = str(c.retval) if c.has_retval else None
        assert rows[(c.cpu, c.start, c.func, c.depth)] == (c.end, c.self_ns, args, ret)
    # boom's retval says it raised
    assert any(t.startswith("raised") for t in ix.texts)
    hits = Counter(c.func for c in calls)
    table = {r.func: r for r in function_rows(ix)}
    assert {f: r.hit for f, r in table.items()} == dict(hits)
    for f, r in table.items():
        assert r.time == sum(c.duration for c in calls if c.func == f)
        assert r.self_ns == sum(c.self_ns for c in calls if c.func == f)
    # the same numbers as `fntrace stat`'s table
    from fntrace.output.stat import function_stats
    stat = {s.func: (s.hit, s.time, s.self_ns) for s in function_stats(open_trace(path).entries())}
    assert {f: (r.hit, r.time, r.self_ns) for f, r in table.items()} == stat
    side = next(cpu for cpu, t in ix.threads.items() if t.comm == "side")
    assert {r.func: r.hit for r in function_rows(ix, side)} == {
        "__main__.work": 1, "__main__.mid": 30, "__main__.leaf": 60, "__main__.boom": 30}


def test_index_of_a_function_trace(tmp_path, run_fntrace):
    """A function tracer trace: one row per hit, with its caller; hits only."""
    path = _record(tmp_path, run_fntrace, NESTED, "-p", "function", "-F", "__main__.*")
    ix = _built(path)
    table = {r.func: r.hit for r in function_rows(ix)}
    assert table["__main__.leaf"] == 160 and table["__main__.mid"] == 80
    t = next(t for t in ix.threads.values() if t.comm == "side")
    leaf = ix.names.index("__main__.leaf")
    r = t.find(leaf, 0)
    assert ix.names[t.caller[r]] == "__main__.mid"


def test_index_of_a_cut_file(tmp_path, run_fntrace):
    """A file cut short: what is whole is indexed, calls left open are closed as
    incomplete, the browser is told."""
    path = _record(tmp_path, run_fntrace, NESTED, "-p", "function_graph", "-F", "__main__.*")
    data = path.read_bytes()
    cut = tmp_path / "cut.dat"
    cut.write_bytes(data[: len(data) * 2 // 3])
    src = open_trace(cut)
    ix = TraceIndex(src)
    ix.build()
    assert ix.done
    assert ix.nr_rows() == sum(1 for _ in iter_calls(open_trace(cut).entries()))


def _columns(ix: TraceIndex) -> dict:
    return {cpu: [list(getattr(t, c)[0:t.n]) for c in ("func", "depth", "start", "end",
                                                      "self_ns", "parent", "flags")]
            for cpu, t in ix.threads.items()}


@pytest.mark.parametrize("tracer", ["function_graph", "function"])
def test_an_index_asked_its_verdict_before_is_the_same_index(tmp_path, run_fntrace, tracer):
    """``fntrace tui`` has the trace's blocks checked in a thread while textual is
    imported (TraceIndex.verdict): the index built on that answer is the one built
    without it, calls and function hits, native (both walked by IndexRows) and pure
    (FNTRACE_PURE=1: no native walk either way)."""
    path = _record(tmp_path, run_fntrace, NESTED, "-p", tracer, "-F", "__main__.*")
    src = open_trace(path)
    plain = TraceIndex(src)
    plain.build()
    early = TraceIndex(src, verdict=TraceIndex.verdict(src))
    early.build()
    assert early.done and early.error is None
    assert early.names == plain.names and early.nr_rows() == plain.nr_rows() > 0
    assert _columns(early) == _columns(plain)
    assert (early._walk is False) == (plain._walk is False)


# ---------------------------------------------------------------------------------
# The browser, headless
# ---------------------------------------------------------------------------------

@_sync
async def test_graph_folds_and_unfolds():
    app = TraceBrowser(open_trace(BROWSE))
    async with app.run_test(size=SIZE) as pilot:
        await _indexed(pilot)
        assert app.cpu == 0 and app.index.threads[0].comm == "MainThread"
        lines = _lines(app, 8)
        assert "▼ __main__.main()" in lines[0]
        assert "▼ __main__.work(n=5)" in lines[1]
        # depth 2 and below start folded: five mids, no leaf
        assert [("▶ __main__.mid(i=%d)" % i) in lines[2 + i] for i in range(5)] == [True] * 5
        assert not any("leaf" in ln for ln in _lines(app))
        assert len(app.graph.view.vis) == 7
        await pilot.press("j", "j", "enter")
        lines = _lines(app, 8)
        assert "▼ __main__.mid(i=0)" in lines[2]
        assert "__main__.leaf(x=0)" in lines[3] and "__main__.leaf(x=1)" in lines[4]
        assert "▶ __main__.mid(i=1)" in lines[5]
        assert len(app.graph.view.vis) == 9
        await pilot.press("space")
        assert len(app.graph.view.vis) == 7
        # h on a leaf goes to its parent, on an open call folds it
        await pilot.press("l", "j")
        assert _name(app) == "__main__.leaf"
        await pilot.press("h")
        assert _name(app) == "__main__.mid"
        await pilot.press("h")
        assert len(app.graph.view.vis) == 7
        await pilot.press("k", "enter")     # fold work: only main and work show
        assert len(app.graph.view.vis) == 2
        await pilot.press("enter")
        assert len(app.graph.view.vis) == 7


async def _distributed(pilot) -> None:
    """Wait for the function table's distributions (walked in a thread once the index
    is whole) and for the table showing them."""
    for _ in range(200):
        if pilot.app.dists is not None:
            break
        await pilot.pause(0.05)
    assert pilot.app.dists is not None, "the distributions were not walked"
    await pilot.pause()


@_sync
async def test_function_table_shows_each_functions_distribution():
    """Min, p50, p90, p99, Max and Stdev: fntrace stat --dist's, per thread and for all
    threads, once the walk that makes them is done ("…" before)."""
    from fntrace.output.stat import function_stats
    want = {(r.cpu, r.func): r for r in function_stats(open_trace(BROWSE).entries(),
                                                       per_thread=True, dist=True)}
    app = TraceBrowser(open_trace(BROWSE))
    async with app.run_test(size=SIZE) as pilot:
        await _indexed(pilot)
        await pilot.press("f")
        await _distributed(pilot)
        rows = {r.func: r for r in app.table_rows}
        assert rows and all(r.dist is not None for r in rows.values())
        for f, r in rows.items():
            w = want[app.cpu, f]
            assert (r.dist.min, r.dist.max, r.dist.stdev) == (w.min, w.max, w.stdev)
            assert [r.pct(p) for p in (50, 90, 99)] == [w.percentile(p) for p in (50, 90, 99)]
        table = app.query_one("#table")
        leaf = rows["__main__.leaf"]
        cells = table.get_row("__main__.leaf")
        assert cells[5:] == [format_ns(leaf.dist.min), format_ns(leaf.pct(50)),
                             format_ns(leaf.pct(90)), format_ns(leaf.pct(99)),
                             format_ns(leaf.dist.max), format_ns(leaf.dist.stdev)]
        assert "p99" in str(app.query_one("#detail").render())
        # every thread's: the threads' calls together
        await pilot.press("a")
        leaf_all = {r.func: r for r in app.table_rows}["__main__.leaf"]
        assert leaf_all.dist.timed == sum(w.timed for (c, f), w in want.items()
                                          if f == "__main__.leaf")
        assert leaf_all.dist.max == max(w.max for (c, f), w in want.items()
                                        if f == "__main__.leaf")


@_sync
async def test_detail_pane_shows_args_retval_and_events():
    app = TraceBrowser(open_trace(BROWSE))
    async with app.run_test(size=SIZE) as pilot:
        await _indexed(pilot)
        await pilot.press("j", "j", "j")       # mid(i=1)
        text = str(app.query_one("#detail").render())
        assert "__main__.mid" in text and "thread MainThread" in text
        assert "args: i=1" in text and "retval: 6" in text      # leaf(1) + leaf(2) = 2 + 4
        assert "duration" in text and "self" in text
        # the events of the call: the two leaf entries' dynamic events
        assert "events in this call: 2" in text
        assert "x=1" in text and "x=2" in text


@_sync
async def test_function_table_sorts_and_leads_to_each_call_and_back():
    app = TraceBrowser(open_trace(BROWSE))
    async with app.run_test(size=SIZE) as pilot:
        await _indexed(pilot)
        await pilot.press("j", "j")            # on mid(i=0)
        await pilot.press("f")
        await pilot.pause()
        assert app.query_one("#views").current == "table"
        rows = app.table_rows
        # this thread's table: work(5) once, mid 5 times, leaf 10 times
        assert {r.func: r.hit for r in rows} == {"__main__.main": 1, "__main__.work": 1,
                                                 "__main__.mid": 5, "__main__.leaf": 10}
        assert [r.time for r in rows] == sorted((r.time for r in rows), reverse=True)
        assert app._table_row().func == "__main__.mid"   # the function we came from
        # s: the next column (avg), then self, the distribution's, function, then hit
        for key in ("avg", "self", "min", "p50", "p90", "p99", "max", "stdev", "function",
                    "hit"):
            await pilot.press("s")
            assert app.sort_key == key
        assert [r.func for r in app.table_rows][:2] == ["__main__.leaf", "__main__.mid"]
        assert app._table_row().func == "__main__.mid"
        # a: every thread's calls
        await pilot.press("a")
        assert {r.func: r.hit for r in app.table_rows}["__main__.leaf"] == 16
        await pilot.press("a")
        # enter: the function's first call in the graph, ] and [ the next and previous
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one("#views").current == "calls"
        v = app.graph.view
        mids = [r for r in range(v.t.n) if app.index.names[v.t.func[r]] == "__main__.mid"]
        assert v.row() == mids[0]
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert v.row() == mids[2]
        await pilot.press("left_square_bracket")
        assert v.row() == mids[1]
        # from a leaf (hidden under a folded mid) the next call unfolds what hides it
        await pilot.press("enter", "j")
        assert _name(app) == "__main__.leaf"
        leaves = [r for r in range(v.t.n) if app.index.names[v.t.func[r]] == "__main__.leaf"]
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert v.row() == leaves[4] and v.pos(leaves[4]) >= 0
        assert any("__main__.leaf(x=3)" in ln for ln in _lines(app))
        # and back to the table, on the function of the call
        await pilot.press("f")
        await pilot.pause()
        assert app._table_row().func == "__main__.leaf"
        await pilot.press("escape")
        assert app.query_one("#views").current == "calls"


@_sync
async def test_search_and_threads():
    app = TraceBrowser(open_trace(BROWSE))
    async with app.run_test(size=SIZE) as pilot:
        await _indexed(pilot)
        await pilot.press("slash", *"LEAF", "enter")
        await pilot.pause()
        v = app.graph.view
        assert _name(app) == "__main__.leaf" and app.pattern == "LEAF"
        first = v.row()
        await pilot.press("n")
        assert _name(app) == "__main__.leaf" and v.row() > first
        await pilot.press("N")
        assert v.row() == first
        await pilot.press("N")      # wraps to the last
        assert v.row() == max(r for r in range(v.t.n) if v.t.func[r] == v.t.func[first])
        # a name matching nothing says so and stays put
        here = v.row()
        await pilot.press("slash", *["backspace"] * 4, *"nosuch", "enter")
        await pilot.pause()
        assert v.row() == here
        # t: the other thread, its own graph; T back
        await pilot.press("t")
        await pilot.pause()
        assert app.index.threads[app.cpu].comm == "worker"
        assert "▼ __main__.work(n=3)" in _lines(app, 1)[0]
        # work is the thread's outermost call: mid (depth 1) shows open, leaf folded
        assert sum("▼ __main__.mid" in ln for ln in _lines(app)) == 3
        assert sum("__main__.leaf(x=" in ln for ln in _lines(app)) == 6
        assert "worker" in str(app.query_one("#status").render())
        await pilot.press("T")
        assert app.index.threads[app.cpu].comm == "MainThread"
        assert v.row() == here                 # each thread keeps its place


def _held(app: TraceBrowser) -> threading.Event:
    """Hold the background indexing back until the event is set (the first screenful
    is indexed at once)."""
    gate = threading.Event()
    build = app.index.build

    def held_build(limit=None):
        if limit is None:
            gate.wait(60)
        build(limit)
    app.index.build = held_build
    return gate


BIG = """\
def leaf(x):
    return x
def mid(i):
    return leaf(i) + leaf(i)
def main():
    for i in range(N):
        mid(i)
main()
"""


@_sync
async def test_big_trace_shows_its_start_while_indexing(tmp_path, run_fntrace):
    """The first screen comes from the start of the file while the rest is indexed in
    the background; the graph draws only the lines on screen (no widget per call)."""
    n = 60_000      # 360,000 events
    path = _record(tmp_path, run_fntrace, BIG.replace("N", str(n)), "-p", "function_graph",
                   "-b", "65536", "-F", "__main__.*")
    app = TraceBrowser(open_trace(path), fold_depth=1, tick=0.05)
    # The background indexing is held back until the first screen has been looked at:
    # the native index reads this trace in a blink, and a race against it says nothing.
    gate = _held(app)
    try:
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(500):
                await pilot.pause(0.02)
                lines = _lines(app, 3)
                if "__main__.main" in lines[0]:
                    break
            assert not app.index.done
            assert "▼ __main__.main" in lines[0] and "(running)" in lines[0]
            assert 0 < app.index.read < 3 * n
            gate.set()
            await _indexed(pilot)
            assert "▼ __main__.main" in _lines(app, 1)[0] and "(running)" not in _lines(app, 1)[0]
            v = app.graph.view
            assert v.t.n == 1 + 3 * n and len(v.vis) == 1 + n
            assert app.graph.virtual_size.height == 1 + n
            assert len(app.query("*")) < 40
            await pilot.press("end")
            assert "▶ __main__.mid" in _lines(app)[-1]
    finally:
        gate.set()


@_sync
async def test_the_index_ending_during_a_poll_still_shows_its_last_rows(tmp_path, run_fntrace):
    """The index may end between a poll taking rows in and the poll asking whether it
    has ended: the last rows must still come in (CI once lost a batch of them this way:
    the poll saw the end, stopped polling, and the view kept 54,615 of 60,001 rows)."""
    n = 30_000      # 180,000 events: more than the first screen's batch
    path = _record(tmp_path, run_fntrace, BIG.replace("N", str(n)), "-p", "function_graph",
                   "-b", "65536", "-F", "__main__.*")
    app = TraceBrowser(open_trace(path), fold_depth=1, tick=0.05)
    build = app.index.build
    app.index.build = lambda limit=None: build(limit) if limit is not None else None
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert not app.index.done
        graph = app.graph
        take_in = graph.catch_up

        def then_the_index_ends() -> None:
            take_in()
            graph.catch_up = take_in
            build()             # the rest, while the poll is between the two
        graph.catch_up = then_the_index_ends
        app._poll()
        assert app.index.done and graph.view.seen < graph.view.t.n
        await _indexed(pilot)
        v = graph.view
        assert v.seen == v.t.n == 1 + 3 * n and len(v.vis) == 1 + n


# 300 functions, each called N times by main.  first() is the trace's first call (the
# graph's cursor starts on it) and not the function table's first row: slow(), which
# sleeps, is listed above it (and main, once it has returned).
MANY = """\
import time
FS = []
for i in range(300):
    exec(f"def f{i}(x):\\n    return sum(range(300)) + x")
    FS.append(globals()[f"f{i}"])
def first():
    return 0
def slow():
    time.sleep(0.2)
def main():
    for k in range(N):
        for f in FS:
            f(k)
first()
slow()
main()
"""


def _table_at(app: TraceBrowser) -> tuple[int, int]:
    """The function table's cursor row and the first row it shows."""
    table = app.query_one("#table")
    return table.cursor_row, round(table.scroll_y)


@_sync
async def test_function_table_opens_at_its_top_and_stays_there_while_indexing(tmp_path,
                                                                             run_fntrace):
    """Opened while the trace is indexed, the function table starts on its first row
    (the graph's cursor is still on the trace's first call, which is no choice of the
    user's and may be listed anywhere), and stays there as the index and the
    distributions' walk fill it in; a row the user moved to stays selected instead."""
    path = _record(tmp_path, run_fntrace, MANY.replace("N", "10"), "-p", "function_graph",
                   "-F", "__main__.*")
    for moved in (0, 3):
        app = TraceBrowser(open_trace(path), tick=0.05)
        gate = _held(app)
        try:
            async with app.run_test(size=SIZE) as pilot:
                await pilot.pause()
                assert not app.index.done and _name(app) == "__main__.first"
                await pilot.press("f")
                await pilot.pause()
                names = [r.func for r in app.table_rows]
                # (what makes the test: the function under the graph's cursor is not
                # the table's first)
                assert names[0] == "__main__.slow" and "__main__.first" in names[1:]
                assert _table_at(app) == (0, 0)
                assert app._table_row().func == names[0]
                await pilot.press(*["down"] * moved)
                chosen = app._table_row().func
                gate.set()
                await _indexed(pilot)
                await _distributed(pilot)
                assert len(app.table_rows) == 303
                if moved:
                    assert app._table_row().func == chosen
                else:
                    # slow's or main's: which took longer depends on the machine's load
                    assert _table_at(app) == (0, 0)
                    top = app.table_rows[0].func
                    assert app._table_row().func == top in ("__main__.slow", "__main__.main")
                    assert str(app.query_one("#detail").render()).startswith(top)
        finally:
            gate.set()


@_sync
async def test_home_and_end_in_the_function_table(tmp_path, run_fntrace):
    """Home and End go to the table's first and last row, as in the graph (a DataTable's
    own go to its first and last column, which a row cursor has not)."""
    path = _record(tmp_path, run_fntrace, MANY.replace("N", "2"), "-p", "function_graph",
                   "-F", "__main__.*")
    app = TraceBrowser(open_trace(path))
    async with app.run_test(size=SIZE) as pilot:
        await _indexed(pilot)
        await pilot.press("f")
        await _distributed(pilot)
        table = app.query_one("#table")
        last = table.row_count - 1
        assert last == 302 and table.max_scroll_y > 0
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_row == last and app._table_row() is app.table_rows[-1]
        assert round(table.scroll_y) == table.max_scroll_y      # the last row on screen
        assert str(app.query_one("#detail").render()).startswith(app.table_rows[-1].func)
        await pilot.press("home")
        await pilot.pause()
        assert table.cursor_row == 0 and round(table.scroll_y) == 0
        assert app._table_row() is app.table_rows[0]
        # page down, then Home again; End and Home in the graph as before
        await pilot.press("pagedown", "pagedown", "home")
        await pilot.pause()
        assert table.cursor_row == 0 and round(table.scroll_y) == 0
        await pilot.press("f", "end")
        assert app.graph.view.cursor == len(app.graph.view.vis) - 1
        await pilot.press("home")
        assert app.graph.view.cursor == 0


THREAD_NAMES = """\
import threading
def leaf(s):
    return s + "]"
def work(n):
    return [leaf("[" * i + "/dim") for i in range(n)]
for name in ("pool [2", "job [b]x[/b]", "q [$x] [/]"):
    t = threading.Thread(target=work, args=(2,), name=name)
    t.start(); t.join()
"""


@_sync
async def test_names_and_values_from_the_trace_are_shown_as_they_are(tmp_path, run_fntrace):
    """Thread names, arguments and return values are text, not markup: a "[" in them
    neither styles what follows nor breaks the pane (a lone "[" in a thread's name
    crashed the browser: MarkupError); the function table's key help reads as it is
    written, its "[" included, with no "[/dim]" left over."""
    path = _record(tmp_path, run_fntrace, THREAD_NAMES, "-p", "function_graph", "-A", "-R",
                   "-F", "__main__.*")
    app = TraceBrowser(open_trace(path))
    async with app.run_test(size=SIZE) as pilot:
        await _indexed(pilot)
        seen = []
        for _ in range(len(app.cpus)):
            t = app.index.threads[app.cpu]
            if t.comm != "MainThread":
                seen.append(t.comm)
                assert t.label.startswith(t.comm)
                status = str(app.query_one("#status").render())
                assert f"{app.cpu}: {t.label} (" in status
                await pilot.press("j", "j")        # work's second leaf: leaf(s='[/dim')
                assert _name(app) == "__main__.leaf"
                detail = str(app.query_one("#detail").render())
                assert detail.startswith(f"__main__.leaf   thread {t.label}   start ")
                assert "args: s='[/dim'" in detail and "retval: '[/dim]'" in detail
                await pilot.press("f")
                await _distributed(pilot)
                detail = str(app.query_one("#detail").render())
                assert detail.splitlines()[0] == f"__main__.leaf   thread {t.label}"
                assert detail.splitlines()[-1] == (
                    "enter: its first call in the graph (then ] and [ for the next and "
                    "previous)   s: sort by the next column   a: all threads / this one")
                assert "[/dim]" not in detail and "[/b]" not in detail.splitlines()[-1]
                await pilot.press("f")
            await pilot.press("t")
        assert sorted(seen) == ["job [b]x[/b]", "pool [2", "q [$x] [/]"]


@_sync
async def test_empty_trace(tmp_path, run_fntrace):
    path = _record(tmp_path, run_fntrace, "x = 1\n", "-p", "function_graph", "-F", "nosuch*")
    app = TraceBrowser(open_trace(path))
    async with app.run_test(size=SIZE) as pilot:
        await _indexed(pilot)
        await pilot.press("j", "enter", "f", "enter", "f", "slash", "x", "enter")
        await pilot.pause()
        assert app.index.nr_rows() == 0


# ---------------------------------------------------------------------------------
# Snapshots (SVG under tests/__snapshots__/test_tui/)
# ---------------------------------------------------------------------------------

def test_snapshot_graph(snap_compare):
    async def ready(pilot):
        await _indexed(pilot)
    assert snap_compare(TraceBrowser(open_trace(BROWSE)), terminal_size=SIZE, run_before=ready)


def test_snapshot_unfolded_with_detail(snap_compare):
    async def ready(pilot):
        await _indexed(pilot)
        await pilot.press("j", "j", "enter", "j", "j", "j", "enter", "j")
        await pilot.pause()
    assert snap_compare(TraceBrowser(open_trace(BROWSE)), terminal_size=SIZE, run_before=ready)


def test_snapshot_function_table(snap_compare):
    async def ready(pilot):
        await _indexed(pilot)
        await pilot.press("f", "s")
        await _distributed(pilot)
    assert snap_compare(TraceBrowser(open_trace(BROWSE)), terminal_size=SIZE, run_before=ready)


# ---------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------

def test_cli_errors(tmp_path, run_fntrace):
    r = run_fntrace("tui", "nosuch.dat")
    assert r.returncode == 1 and r.stderr.startswith("fntrace: ") and len(r.stderr.splitlines()) == 1
    assert "Traceback" not in r.stderr
    (tmp_path / "junk.dat").write_bytes(b"not a trace at all")
    r = run_fntrace("tui", "junk.dat")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    r = run_fntrace("tui", "--fold-depth", "-1", str(BROWSE))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    # textual missing: the extra to install
    r = run_python("-c", "import sys; sys.modules['textual'] = None\n"
                   "from fntrace.cli.main import main; sys.exit(main(['tui', sys.argv[1]]))",
                   BROWSE)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == "fntrace: tui: needs the textual package: pip install 'fntrace[tui]'"


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", _SOCK, *args], capture_output=True, text=True,
                          timeout=30).stdout


_SOCK = f"fntrace-tui-test-{os.getpid()}"


def _wait_for(pred, what: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux("capture-pane", "-p", "-t", "tui")
        if pred(screen):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{what}: the screen was\n{screen}")


def test_in_a_terminal_under_tmux(tmp_path):
    """As a person would: the command in a real terminal (tmux), keys sent, screen read."""
    if shutil.which("tmux") is None:
        pytest.skip("LOUD SKIP: tmux is not installed (apt-get install tmux)")
    env = f"PYTHONPATH={os.pathsep.join(sys.path)}"
    cmd = f"env {env} TERM=xterm-256color {sys.executable} -m fntrace tui {BROWSE}"
    subprocess.run(["tmux", "-L", _SOCK, "new-session", "-d", "-s", "tui", "-x", "120",
                    "-y", "40", cmd], check=True, timeout=30)
    try:
        screen = _wait_for(lambda s: "__main__.work(n=5)" in s and "indexing" not in s,
                           "the first screen")
        assert "▼ __main__.main()" in screen and "▶ __main__.mid(i=0)" in screen
        assert "__main__.leaf(x=0)" not in screen
        _tmux("send-keys", "-t", "tui", "j", "j", "Enter")
        screen = _wait_for(lambda s: "__main__.leaf(x=0)" in s, "leaf after unfolding mid(i=0)")
        assert "▼ __main__.mid(i=0)" in screen
        _tmux("send-keys", "-t", "tui", "Enter")
        _wait_for(lambda s: "__main__.leaf(x=0)" not in s and "▶ __main__.mid(i=0)" in s,
                  "mid(i=0) folded again")
        _tmux("send-keys", "-t", "tui", "f")
        screen = _wait_for(lambda s: "Hit" in s and "Self" in s, "the function table")
        _tmux("send-keys", "-t", "tui", "q")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "tui" in _tmux("list-sessions"):
            time.sleep(0.2)
        assert "tui" not in _tmux("list-sessions")
    finally:
        subprocess.run(["tmux", "-L", _SOCK, "kill-server"], capture_output=True, timeout=30)


@_sync
async def test_the_flame_graph_pane_opens_on_the_chosen_call(tmp_path, run_fntrace):
    """F draws the thread's flame graph (the HTML report's nodes) zoomed on the call
    under the cursor: its callers across the top, its callees sharing its width; z
    zooms out, F comes back; t shows the next thread's."""
    path = _record(tmp_path, run_fntrace, NESTED, "-p", "function_graph", "-F", "__main__.*")
    app = TraceBrowser(open_trace(path))
    async with app.run_test(size=SIZE) as pilot:
        await _indexed(pilot)
        # MainThread's: work, then its first mid (the cursor put on it)
        while app.index.threads[app.cpu].comm != "MainThread":
            await pilot.press("t")
        await pilot.press("j")
        assert _name(app) == "__main__.mid"
        await pilot.press("F")
        for _ in range(200):
            if app.flames is not None:
                break
            await pilot.pause(0.05)
        await pilot.pause()
        pane = app.query_one("#flamegraph")
        text = str(pane.render())
        lines = text.splitlines()
        assert lines[0].startswith("MainThread-") and "zoomed to __main__.mid" in lines[0]
        # the callers, each the whole width: all, then work
        assert lines[1].startswith("all: ") and lines[2].startswith("__main__.work ")
        assert lines[3].startswith("__main__.mid ")          # the chosen call's path
        # under it, leaf alone (its name may not fit in its share of mid's width: drawn
        # as wide as a terminal cannot be, it is there), and nothing of boom's
        wide = [str(t) for t in flame_lines(pane.paths, pane.nodes, pane.focus, 2000)[0]]
        assert wide[2].startswith("__main__.mid ") and len(wide) == 4
        assert wide[3].strip().startswith("__main__.leaf") and lines[4].strip()
        assert "__main__.boom" not in text + "\n".join(wide)
        assert pane.focus == ("__main__.work", "__main__.mid")
        await pilot.press("z")
        text = str(pane.render())
        assert "zoomed to __main__.work" in text and pane.focus == ("__main__.work",)
        # work's callees share its width (boom's name may not fit in its share: drawn
        # as wide as a terminal cannot be, it is there)
        wide = "\n".join(str(t) for t in flame_lines(pane.paths, pane.nodes, pane.focus,
                                                     2000)[0])
        assert "__main__.boom" in wide and "__main__.mid" in wide
        await pilot.press("t")
        text = str(pane.render())
        assert text.splitlines()[0].startswith("side-") and "the whole thread" in text
        await pilot.press("F")
        assert app.query_one("#views").current == "calls"
