"""``fntrace top PID``'s live screen: the table of output/top_table.py, read again each
interval from the program (cli/top.py's session), in the terminal browser's style.

Keys: s sorts by the next column (S the previous), / filters by name (enter keeps the
filter, escape clears it), t shows the next thread (T the previous; all threads come
first), q quits.
"""
from __future__ import annotations

import time

from rich.markup import escape
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Footer, Input, Static

from ..errors import FntraceError
from ..output.top_table import TOP_SORT_KEYS, TopTable, format_ns, sort_rows

__all__ = ["TopScreen"]

_COLUMNS = (("CALLS/S", "rate"), ("HITS", "hit"), ("TOTAL", "time"), ("SELF", "self"),
            ("AVG", "avg"), ("P99", "p99"), ("MAX", "max"), ("FUNCTION", "function"))


class TopScreen(App):
    """The live table; ``session``: tables() and threads() of the running program."""

    TITLE = "fntrace top"
    CSS = """
    Screen { layout: vertical; }
    /* (auto: why nothing is counted is a sentence longer than a line, and the
       screen must show it whole) */
    #status { height: auto; max-height: 4; background: $primary-background; }
    #filter { dock: bottom; display: none; }
    #filter.shown { display: block; }
    DataTable { height: 1fr; }
    """
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("s", "sort(1)", "sort"),
        Binding("S", "sort(-1)", "previous sort", show=False),
        Binding("t", "thread(1)", "thread"),
        Binding("T", "thread(-1)", "previous thread", show=False),
        Binding("slash", "filter", "filter"),
    ]

    def __init__(self, session, table: TopTable, *, delay: float = 1.0, sort: str = "rate",
                 title: str = "") -> None:
        super().__init__()
        self.session = session
        self.top = table
        self.delay = delay
        self.sort = sort
        self.thread: int | None = None          # None: all threads
        self.names: dict[int, str] = {}
        self.filter_text = ""
        self.ended = ""
        self.sub_title = title

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        yield DataTable(id="table", cursor_type="row", zebra_stripes=True)
        yield Input(id="filter", placeholder="function name contains ... (enter: keep, "
                                             "escape: clear)")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#table", DataTable)
        for title, key in _COLUMNS:
            table.add_column(title, key=key)
        self._read()
        self.set_interval(self.delay, self._read)

    # -- the data ------------------------------------------------------------------------
    def _read(self) -> None:
        if self.ended:
            return
        try:
            self.names = self.session.threads()
            self.top.update(self.session.tables(), time.monotonic())
        except (FntraceError, OSError) as e:
            self.ended = f"the program stopped answering: {e}"
        self._draw()

    def _draw(self) -> None:
        table = self.query_one("#table", DataTable)
        keep = None if self.thread is None else [self.thread]
        rows = [r for r in self.top.rows(keep)
                if self.filter_text.lower() in r.func.lower()]
        rows = sort_rows(rows, self.sort)
        current = None
        if table.row_count and table.cursor_row < table.row_count:
            current = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        table.clear()
        for r in rows:
            cells = (f"{r.rate:.1f}", str(r.hit), format_ns(r.time), format_ns(r.self),
                     format_ns(r.avg), format_ns(r.p99), format_ns(r.max))
            # the numbers right-aligned; the name as text (never markup)
            table.add_row(*(Text(c, justify="right") for c in cells), Text(r.func),
                          key=r.func)
        if current is not None and current in table.rows:
            table.move_cursor(row=table.get_row_index(current))
        who = "all threads" if self.thread is None else \
            self.names.get(self.thread, f"thread {self.thread}")
        status = (f" {escape(who)}  ·  {len(rows)} functions  ·  sort: {self.sort}"
                  + (f"  ·  filter: {escape(self.filter_text)}" if self.filter_text else "")
                  + f"  ·  every {self.delay:g} s")
        if self.ended:
            status += f"  ·  [b]{escape(self.ended)}[/b]"
        elif getattr(self.session, "unreached", "") and not rows:
            status += f"  ·  {escape(self.session.unreached)}"
        self.query_one("#status", Static).update(status)

    # -- keys ------------------------------------------------------------------------------
    def action_sort(self, step: int) -> None:
        i = TOP_SORT_KEYS.index(self.sort) if self.sort in TOP_SORT_KEYS else 0
        self.sort = TOP_SORT_KEYS[(i + step) % len(TOP_SORT_KEYS)]
        self._draw()

    def action_thread(self, step: int) -> None:
        order: list[int | None] = [None, *sorted(self.names)]
        i = order.index(self.thread) if self.thread in order else 0
        self.thread = order[(i + step) % len(order)]
        self._draw()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.value = self.filter_text
        box.focus()

    @on(Input.Changed, "#filter")
    def _typed(self, ev: Input.Changed) -> None:
        self.filter_text = ev.value
        self._draw()

    @on(Input.Submitted, "#filter")
    def _kept(self, ev: Input.Submitted) -> None:
        self.query_one("#filter", Input).remove_class("shown")
        self.query_one("#table", DataTable).focus()

    def key_escape(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_class("shown"):
            self.filter_text = ""
            box.remove_class("shown")
            self.query_one("#table", DataTable).focus()
            self._draw()

    @on(DataTable.HeaderSelected)
    def _header(self, ev: DataTable.HeaderSelected) -> None:
        self.sort = str(ev.column_key.value)
        self._draw()
