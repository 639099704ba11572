"""The browser: call graph, function table, detail pane, search, thread selector.

The trace is indexed in a background thread (textual's thread worker) from the start
of the file; a timer takes the new rows into the view a few times a second, so the
first screen shows at once and the status line's bar says how far the index has got.

Keys (uftrace tui's where it has one): j/k or arrows move, enter/space folds, h/l
fold/unfold or go to the parent, [ and ] the previous/next call of the same function,
/ search (n/N next/previous match), t/T next/previous thread, f the function table
(enter on a function goes to its first call; f again comes back), F the thread's flame
graph zoomed on the call under the cursor (z zooms out; F or escape comes back), q
quits.  The table
opens on the function of the call the graph's cursor was put on, at its top when the
cursor has not moved; Home/End go to its first/last row.

The function table's distribution columns (Min, p50, p90, p99, Max, Stdev: fntrace stat
--dist's) come from one walk of the trace made in another thread once the index is
whole; they show ``…`` until then.
"""
from __future__ import annotations

import os

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import ContentSwitcher, DataTable, Footer, Input, ProgressBar, Static

from ..output.source import TraceSource
from ..output.walk import Verdict
from .flame import FlameGraph
from .graph import CallGraph
from .index import (COMPLETE, ENTRY_SEEN, HAS_RETVAL, OPEN, Distributions, FunctionRow,
                    TraceIndex, format_ns, function_distributions, function_rows)

__all__ = ["TraceBrowser", "SORT_KEYS"]

#: Function table columns and how each sorts (largest first; names A-Z).
SORT_KEYS = {
    "function": (lambda r: r.func, False),
    "hit": (lambda r: r.hit, True),
    "time": (lambda r: r.time, True),
    "avg": (lambda r: r.avg, True),
    "self": (lambda r: r.self_ns, True),
    "min": (lambda r: r.dist.min if r.dist else -1, True),
    "p50": (lambda r: r.pct(50), True),
    "p90": (lambda r: r.pct(90), True),
    "p99": (lambda r: r.pct(99), True),
    "max": (lambda r: r.dist.max if r.dist else -1, True),
    "stdev": (lambda r: r.dist.stdev if r.dist else -1, True),
}
# the columns' titles (the others: the key capitalised)
_TITLES = {"p50": "p50", "p90": "p90", "p99": "p99"}

_MAX_EVENTS_SHOWN = 3
#: Entries indexed before the first screen (a few milliseconds' work).
_FIRST_ENTRIES = 2000


def _markup(template: str, **values: object) -> Content:
    """Content of textual markup with each ``$name`` of the template put in as plain
    text: names, thread names, arguments and event texts come from the traced program
    and may hold a ``[`` that markup would take for a tag (a lone one fails the whole
    pane: MarkupError), which no escaping of the values covers in every case."""
    # Content(...).plain: without the control codes textual strips from the whole text
    # afterwards (which would shift the styles after them)
    return Content.from_markup(template,
                               **{k: Content(str(v)).plain for k, v in values.items()})


class FunctionTable(DataTable):
    """The function table: Home and End go to its first and last row (DataTable's own
    go to the first and last column, which a row cursor does not have)."""

    BINDINGS = [
        Binding("home", "scroll_top", "first row", show=False),
        Binding("end", "scroll_bottom", "last row", show=False),
    ]


class TraceBrowser(App):
    """``fntrace tui FILE``."""

    TITLE = "fntrace tui"
    CSS = """
    Screen { layout: vertical; overflow: hidden; }
    #views { height: 1fr; }
    #flame { height: 1fr; }
    #calls { height: 1fr; }
    #ghead { height: 1; text-style: bold; color: $text-muted; }
    #top { height: 1; background: $primary-background; }
    #status { width: 1fr; }
    #progress { width: 30; }
    #progress.done { display: none; }
    #detail { height: 10; border-top: solid $primary; padding: 0 1; }
    #search { dock: bottom; display: none; }
    #search.shown { display: block; }
    DataTable { height: 1fr; }
    """

    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("f", "table", "functions"),
        Binding("F", "flame", "flame graph"),
        Binding("z", "zoom_out", "zoom out", show=False),
        Binding("t", "thread(1)", "thread"),
        Binding("T", "thread(-1)", "prev thread", show=False),
        Binding("slash", "search", "search"),
        Binding("n", "search_next(1)", "next match", show=False),
        Binding("N", "search_next(-1)", "prev match", show=False),
        Binding("s", "sort", "sort", show=False),
        Binding("a", "all_threads", "all threads", show=False),
        Binding("escape", "back", "back", show=False),
    ]

    def __init__(self, source: TraceSource, fold_depth: int = 2, tick: float = 0.2,
                 verdict: Verdict | None = None) -> None:
        super().__init__()
        self.source = source
        self.index = TraceIndex(source, verdict=verdict)
        self.fold_depth = fold_depth
        self.tick = tick
        self.cpus = sorted(self.index.threads)
        self.cpu = self.cpus[0] if self.cpus else 0
        self.sort_key = "time"
        self.table_all = False
        self.table_rows: list[FunctionRow] = []
        self.pattern = ""
        self._match_ids: set[int] = set()
        self._came_from_func: str | None = None
        # the distributions, once walked (function_distributions)
        self.dists: Distributions | None = None
        # each thread's flame graph, once walked (the g pane: html_report.thread_flames)
        self.flames: tuple | None = None

    # -- layout -----------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="top"):
            yield Static(id="status")
            yield ProgressBar(total=100, show_eta=False, id="progress")
        with ContentSwitcher(initial="calls", id="views"):
            with Vertical(id="calls"):
                yield Static(f"{'TOTAL TIME':>12} {'SELF TIME':>12} │ FUNCTION", id="ghead")
                yield CallGraph(self.index, self.fold_depth, id="graph")
            yield FunctionTable(id="table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="flame"):
                yield FlameGraph(id="flamegraph")
        yield Static(id="detail")
        yield Input(placeholder="search: part of a function name", id="search")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#table", DataTable)
        for key in SORT_KEYS:
            table.add_column(_TITLES.get(key, key.capitalize()), key=key)
        # The first screenful is indexed here, the rest in a thread once it shows (a
        # thread started now would slow the first screen down: one GIL for both).
        self.index.build(_FIRST_ENTRIES)
        if self.cpus:
            self.graph.show_thread(self.cpu)
        self.graph.focus()
        self._timer = self.set_interval(self.tick, self._poll)
        self._poll()
        self.call_after_refresh(self._start_indexing)

    def _start_indexing(self) -> None:
        if not self.index.done:
            self.run_worker(self.index.build, thread=True, exit_on_error=False, name="index")

    def on_unmount(self) -> None:
        self.index.stop.set()

    @property
    def graph(self) -> CallGraph:
        return self.query_one("#graph", CallGraph)

    # -- the index growing ------------------------------------------------------

    def _poll(self) -> None:
        ix = self.index
        # read before the rows are taken in: the index may end between the two, and
        # the poll that stops must have seen its last rows
        done = ix.done
        if self.graph.view is None and ix.threads:
            # threads the file's table did not name appeared in the records
            self.cpus = sorted(ix.threads)
            self.cpu = self.cpus[0]
            self.graph.show_thread(self.cpu)
        self.graph.catch_up()
        bar = self.query_one("#progress", ProgressBar)
        bar.update(progress=round(ix.progress() * 100))
        if done:
            bar.add_class("done")
            self._timer.stop()
            if self.dists is None and self.source.tracer == "function_graph":
                self.run_worker(self._walk_distributions, thread=True, exit_on_error=False,
                                name="distributions")
            if ix.error:
                self.notify(f"the trace is damaged: {ix.error}; showing what was read",
                            severity="error", timeout=10, markup=False)
            if self.query_one("#views", ContentSwitcher).current == "table":
                self._refill_table()
        self._status()
        self._detail()

    def _walk_distributions(self) -> None:
        try:
            dists = function_distributions(self.source)
        except Exception as e:          # a damaged trace: the columns stay "…"
            self.call_from_thread(self.notify, f"no distributions: {e}", severity="warning",
                                  markup=False)
            return
        self.call_from_thread(self._distributions_in, dists)

    def _distributions_in(self, dists: Distributions) -> None:
        self.dists = dists
        if self.query_one("#views", ContentSwitcher).current == "table":
            self._refill_table()
            self._detail()

    def _status(self) -> None:
        ix = self.index
        parts: list[Content | str] = [
            _markup("[b]$name[/b]  $tracer", name=os.path.basename(self.source.name),
                    tracer=self.source.tracer)]
        if not ix.done:
            parts.append(f"indexing… {ix.progress():.0%}")
        if self.cpus:
            t = ix.threads[self.cpu]
            parts.append(_markup(f"thread [b]{self.cpu}: $label[/b] "
                                 f"({self.cpus.index(self.cpu) + 1}/{len(self.cpus)})",
                                 label=t.label))
            parts.append(f"{t.n:,} calls")
        else:
            parts.append("no threads in this trace")
        if ix.done and self.source.truncated:
            parts.append(_markup("[red]file cut short[/red]"))
        if self.pattern:
            parts.append(_markup("search: $pattern", pattern=self.pattern))
        self.query_one("#status", Static).update(Content("  │  ").join(parts))

    # -- detail pane --------------------------------------------------------------

    @on(CallGraph.Moved)
    def _detail(self) -> None:
        pane = self.query_one("#detail", Static)
        if self.query_one("#views", ContentSwitcher).current == "table":
            pane.update(self._table_detail())
            return
        v = self.graph.view
        r = v.row() if v else -1
        if not v or r < 0:
            pane.update("[dim]no call here[/dim]")
            return
        ix = self.index
        t = v.t
        first = ix.first_ts or 0
        flags = t.flags[r]
        lines: list[Content | str] = [_markup(f"[b]$func[/b]   thread $label   "
                                              f"start {(t.start[r] - first) / 1e9:.6f} s",
                                              func=ix.names[t.func[r]], label=t.label)]
        if t.caller[r] >= 0:
            lines.append(_markup("called from $func", func=ix.names[t.caller[r]]))
        elif flags & OPEN:
            lines.append("still running where the index has got to")
        else:
            note = "" if flags & COMPLETE else ("   (no return in the trace)" if flags & ENTRY_SEEN
                                                 else "   (entry not in the trace)")
            lines.append(f"duration {format_ns(t.end[r] - t.start[r])}   "
                         f"self {format_ns(t.self_ns[r])}{note}")
        if t.args[r] >= 0:
            lines.append(_markup("args: $args", args=ix.texts[t.args[r]] or "(none)"))
        if flags & HAS_RETVAL and t.ret[r] >= 0:
            lines.append(_markup("retval: $ret", ret=ix.texts[t.ret[r]]))
        end = t.start[r] if t.caller[r] >= 0 else (t.end[r] if t.end[r] >= 0 else 1 << 62)
        with ix.lock:
            lo, hi = t.events_between(t.start[r], end)
            shown = [(t.ev_ts[i], t.ev_text[i]) for i in range(lo, min(hi, lo + _MAX_EVENTS_SHOWN))]
        if hi > lo:
            lines.append(f"events in this call: {hi - lo}")
            for ts, text in shown:
                lines.append(_markup(f"  {(ts - first) / 1e9:.6f}  $text",
                                     text=text.splitlines()[0] if text else ""))
            if hi - lo > len(shown):
                lines.append(f"  … {hi - lo - len(shown)} more")
        pane.update(Content("\n").join(lines))

    def _table_detail(self) -> Content | str:
        row = self._table_row()
        if row is None:
            return "[dim]no function[/dim]"
        t = self.index.threads.get(self.cpu)
        scope = "all threads" if self.table_all or t is None else f"thread {t.label}"
        d = row.dist
        spread = (f"min {format_ns(d.min)}   p50 {format_ns(row.pct(50))}   "
                  f"p90 {format_ns(row.pct(90))}   p99 {format_ns(row.pct(99))}   "
                  f"max {format_ns(d.max)}   stdev {format_ns(d.stdev)}\n") if d else ""
        return _markup("[b]$func[/b]   $scope\n"
                       f"hit {row.hit:,}   time {format_ns(row.time)}   "
                       f"avg {format_ns(row.avg)}   self {format_ns(row.self_ns)}\n" + spread +
                       "[dim]enter: its first call in the graph (then ] and \\[ for the "
                       "next and previous)   s: sort by the next column   a: all threads / "
                       "this one[/dim]",
                       func=row.func, scope=scope)

    # -- threads ------------------------------------------------------------------

    def action_thread(self, d: int) -> None:
        self.cpus = sorted(self.index.threads)
        if not self.cpus:
            return
        if self.cpu not in self.cpus:
            self.cpu = self.cpus[0]
        self.cpu = self.cpus[(self.cpus.index(self.cpu) + d) % len(self.cpus)]
        self.graph.show_thread(self.cpu)
        if self.query_one("#views", ContentSwitcher).current == "table":
            self._fill_table()
        if self.query_one("#views", ContentSwitcher).current == "flame" and self.flames:
            self._draw_flame(())
        self._status()
        self._detail()

    # -- flame graph ----------------------------------------------------------------

    def action_flame(self) -> None:
        sw = self.query_one("#views", ContentSwitcher)
        if sw.current == "flame":
            self._to_graph()
            return
        sw.current = "flame"
        if self.flames is None:
            self.query_one("#flamegraph", FlameGraph).update("walking the trace…")
            self.run_worker(self._walk_flames, thread=True, exit_on_error=False,
                            name="flames")
        else:
            self._draw_flame(self._chosen_stack())

    def _walk_flames(self) -> None:
        from ..output.html_report import thread_flames
        flames = thread_flames(self.source)
        self.call_from_thread(self._flames_walked, flames)

    def _flames_walked(self, flames: tuple) -> None:
        self.flames = flames
        if self.query_one("#views", ContentSwitcher).current == "flame":
            self._draw_flame(self._chosen_stack())

    def _chosen_stack(self) -> tuple[str, ...]:
        """The names from the outermost call down to the one under the graph's cursor
        (none: the cursor was not put on a call)."""
        v = self.graph.view
        if not v or not v.chosen:
            return ()
        r = v.row()
        out: list[str] = []
        while r >= 0:
            out.append(self.index.names[v.t.func[r]])
            r = v.t.parent[r]
        return tuple(reversed(out))

    def _draw_flame(self, focus: tuple[str, ...]) -> None:
        flames = self.flames
        if flames is None:      # (drawn only once walked)
            return
        paths, nodes = flames
        mine = {k: n for (slot, k), n in nodes.items() if slot == self.cpu}
        t = self.index.threads.get(self.cpu)
        title = t.label if t is not None else f"thread {self.cpu}"
        self.query_one("#flamegraph", FlameGraph).show(paths, mine, focus, title)

    def action_zoom_out(self) -> None:
        if self.query_one("#views", ContentSwitcher).current == "flame":
            self.query_one("#flamegraph", FlameGraph).zoom_out()

    # -- function table -------------------------------------------------------------

    def action_table(self) -> None:
        sw = self.query_one("#views", ContentSwitcher)
        if sw.current == "table":
            self._to_graph()
            return
        # on the function of the call the graph's cursor was put on; at the top when the
        # cursor is where the view started (the thread's first call: not a choice, and
        # its function may be anywhere in the list)
        v = self.graph.view
        r = v.row() if v and v.chosen else -1
        self._came_from_func = self.index.names[v.t.func[r]] if v and r >= 0 else None
        sw.current = "table"
        self._fill_table()
        table = self.query_one("#table", DataTable)
        table.focus()
        self._detail()

    # App.action_back is a coroutine; an action may be either, and this one need not wait
    def action_back(self) -> None:  # type: ignore[override]
        inp = self.query_one("#search", Input)
        if inp.has_class("shown"):
            inp.remove_class("shown")
            self.graph.focus()
            return
        if self.query_one("#views", ContentSwitcher).current in ("table", "flame"):
            self._to_graph()

    def _to_graph(self) -> None:
        self.query_one("#views", ContentSwitcher).current = "calls"
        self.graph.focus()
        self._detail()

    def _fill_table(self) -> None:
        with self.index.lock:
            whole = self.table_all or self.cpu not in self.index.threads
            rows = function_rows(self.index, None if whole else self.cpu, self.dists)
        key, rev = SORT_KEYS[self.sort_key]
        rows.sort(key=key, reverse=rev)
        self.table_rows = rows
        table = self.query_one("#table", DataTable)
        table.clear()
        timed = self.source.tracer != "function"

        def dist(v: int) -> str:
            return "" if not timed else ("…" if v < 0 else format_ns(v))
        for r in rows:
            d = r.dist
            table.add_row(r.func, f"{r.hit:,}",
                          format_ns(r.time) if timed else "", format_ns(r.avg) if timed else "",
                          format_ns(r.self_ns) if timed else "",
                          dist(d.min if d else -1), dist(r.pct(50)), dist(r.pct(90)),
                          dist(r.pct(99)), dist(d.max if d else -1),
                          dist(d.stdev if d else -1), key=r.func)
        for col in table.columns.values():
            label = str(col.label).rstrip(" ▼▲")
            # (a str label: the header formats it as a cell, and it holds no markup)
            mark = " ▼" if col.key.value == self.sort_key else ""
            col.label = label + mark    # type: ignore[assignment]
        if self._came_from_func is not None:
            names = [r.func for r in rows]
            if self._came_from_func in names:
                table.move_cursor(row=names.index(self._came_from_func))
        table.refresh()

    def _refill_table(self) -> None:
        """The table again, with what the index or the distributions' walk added: the
        cursor stays on the function it was on, or on the first row if it was there (the
        rows coming in reorder the list: the function first before may go anywhere)."""
        table = self.query_one("#table", DataTable)
        row = self._table_row()
        self._came_from_func = row.func if row is not None and table.cursor_row > 0 else None
        self._fill_table()

    def _table_row(self) -> FunctionRow | None:
        table = self.query_one("#table", DataTable)
        if not self.table_rows or table.cursor_row is None:
            return None
        i = table.cursor_row
        return self.table_rows[i] if 0 <= i < len(self.table_rows) else None

    def action_sort(self) -> None:
        if self.query_one("#views", ContentSwitcher).current != "table":
            return
        keys = list(SORT_KEYS)
        self.sort_by(keys[(keys.index(self.sort_key) + 1) % len(keys)])

    def sort_by(self, key: str) -> None:
        row = self._table_row()
        self._came_from_func = row.func if row else None
        self.sort_key = key
        self._fill_table()

    def action_all_threads(self) -> None:
        if self.query_one("#views", ContentSwitcher).current != "table":
            return
        self.table_all = not self.table_all
        row = self._table_row()
        self._came_from_func = row.func if row else None
        self._fill_table()
        self._detail()

    @on(DataTable.HeaderSelected)
    def _header(self, ev: DataTable.HeaderSelected) -> None:
        self.sort_by(str(ev.column_key.value))

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self) -> None:
        self._detail()

    @on(DataTable.RowSelected)
    def _row_selected(self) -> None:
        row = self._table_row()
        if row is None:
            return
        self._came_from_func = row.func
        fid = self.index._name_ids.get(row.func, -1)
        if self.cpu not in self.cpus:
            return
        # this thread first, then the others (the table may count all threads)
        order = self.cpus[self.cpus.index(self.cpu):] + self.cpus[:self.cpus.index(self.cpu)]
        for cpu in order:
            t = self.index.threads[cpu]
            r = t.find(fid, 0)
            if r >= 0:
                if cpu != self.cpu:
                    self.cpu = cpu
                    self.graph.show_thread(cpu)
                self._to_graph()
                self.graph.goto_row(r)
                self._status()
                return
        self.notify(f"no call of {row.func} indexed yet", markup=False)

    # -- search -----------------------------------------------------------------------

    def action_search(self) -> None:
        inp = self.query_one("#search", Input)
        inp.add_class("shown")
        inp.value = self.pattern
        inp.focus()

    @on(Input.Submitted, "#search")
    def _search_submitted(self, ev: Input.Submitted) -> None:
        ev.input.remove_class("shown")
        self.pattern = ev.value.strip()
        if self.query_one("#views", ContentSwitcher).current == "table":
            self._to_graph()
        self.graph.focus()
        self.action_search_next(1, from_here=True)

    def action_search_next(self, d: int, from_here: bool = False) -> None:
        if not self.pattern:
            return
        self._match_ids = self.index.ids_matching(self.pattern)
        v = self.graph.view
        if v is None:
            return
        t = v.t
        here = v.row()
        n = v.seen
        ids = self._match_ids
        found = -1
        if ids:
            if d > 0:
                start = here if from_here and here >= 0 else here + 1
                for a, b in [(start, n), (0, start)]:
                    found = t.func.find_any(ids, a, b)
                    if found >= 0:
                        break
            else:
                for a, b in [(0, max(here, 0)), (here, n)]:
                    found = t.func.find_any(ids, a, b, reverse=True)
                    if found >= 0:
                        break
        self._status()
        if found < 0:
            self.notify(f"no call matching {self.pattern!r} on this thread", markup=False)
            return
        self.graph.goto_row(found)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
