"""The call graph of one thread: a foldable tree drawn a line at a time.

Only the rows on screen are drawn (textual's Line API: ``render_line``); what is on
screen is ``vis``, the rows not hidden under a folded call, kept as an ``array`` of
row numbers in row order.  Folding a call deletes the slice of ``vis`` between it and
its subtree's end, unfolding inserts its visible descendants: both cost a memmove
and the rows that appear, never a pass over the whole trace.

A call is folded when it sits at ``fold_depth`` or deeper (the default), unless the
user toggled it (``toggled``): no per-row state is stored for folding.
"""
from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .. import _env
from .index import COMPLETE, ENTRY_SEEN, OPEN, ThreadIndex, TraceIndex, format_ns

__all__ = ["CallGraph", "ThreadView", "index_visible"]


def index_visible(parents: bytes | array, depths: bytes | array, r0: int, fold_depth: int,
                  chain: bytes,
                  shows_children: Callable[[int], bool]) -> tuple[bytes, bytes]:
    """Which of the rows r0, r0 + 1, ... (their parents and depths, int32), new rows
    of the index, show (none is toggled yet: folded when at ``fold_depth`` or deeper).

    A row shows when its parent's children show, and those of a row that shows and is
    not folded do.  Rows come in preorder, so a new row's parent is on the chain of
    open calls above it (``chain``: (row, children show) pairs, int32 each, given back
    for the next piece) or a row from before these, asked of ``shows_children`` once
    and put at the chain's foot.  Returns (the rows that show, int32; the chain).  The native
    twin is _native's index_visible."""
    ps = parents if isinstance(parents, array) else array("i", parents)
    ds = depths if isinstance(depths, array) else array("i", depths)
    flat = array("i", chain)
    rows: list[int] = flat[0::2].tolist()
    oks: list[int] = flat[1::2].tolist()
    out = array("i")
    r = r0
    for p, d in zip(ps, ds):
        if p < 0:
            shown = True
            rows.clear()
            oks.clear()
        else:
            while rows and rows[-1] != p:
                rows.pop()
                oks.pop()
            if rows:
                shown = bool(oks[-1])
            else:
                # a parent from before: asked once, then the chain's first link
                shown = shows_children(p)
                rows.append(p)
                oks.append(1 if shown else 0)
        if shown:
            out.append(r)
        rows.append(r)
        oks.append(1 if shown and d < fold_depth else 0)
        r += 1
    back = array("i", [0]) * (2 * len(rows))
    back[0::2] = array("i", rows)
    back[1::2] = array("i", oks)
    return out.tobytes(), back.tobytes()


class ThreadView:
    """What is shown of one thread: the visible rows, fold toggles, the cursor."""

    def __init__(self, t: ThreadIndex, fold_depth: int) -> None:
        self.t = t
        self.fold_depth = fold_depth
        self.vis = array("i")
        self.toggled: set[int] = set()
        self.seen = 0           # rows looked at so far (the index may hold more)
        self.cursor = 0         # position in vis
        self.scroll_y = 0
        # the cursor was put on its call (a key, a jump), not left on the first one
        self.chosen = False

    def folded(self, r: int) -> bool:
        return (self.t.depth[r] >= self.fold_depth) != (r in self.toggled)

    def subend(self, r: int) -> int:
        e = self.t.subend[r]
        return self.seen if e < 0 or e > self.seen else e

    def has_children(self, r: int) -> bool:
        return self.subend(r) > r + 1

    def pos(self, r: int) -> int:
        """Position of row r in vis (-1: hidden)."""
        p = bisect_left(self.vis, r)
        return p if p < len(self.vis) and self.vis[p] == r else -1

    def catch_up(self) -> bool:
        """Look at the rows the index added since the last call; True if any."""
        t = self.t
        n = t.n
        start = self.seen
        if n == start:
            return False
        native = _env.native()
        visible = native.index_visible if native is not None else index_visible
        memo: dict[int, bool] = {}

        def shows_children(p: int) -> bool:
            """An older row's children show: it shows and is not folded."""
            ok = memo.get(p)
            if ok is None:
                ok = memo[p] = self.pos(p) >= 0 and not self.folded(p)
            return ok
        chain = b""
        for (r0, parents), (_, depths) in zip(t.parent.segments(start, n),
                                              t.depth.segments(start, n)):
            rows, chain = visible(parents, depths, r0, self.fold_depth, chain,
                                  shows_children)
            self.vis.frombytes(rows)
        self.seen = n
        return True

    def _expand(self, a: int, b: int) -> array:
        out = array("i")
        r = a
        while r < b:
            out.append(r)
            if self.folded(r):
                r = max(self.subend(r), r + 1)
            else:
                r += 1
        return out

    def toggle(self, r: int) -> None:
        """Fold or unfold row r (which must be visible)."""
        p = self.pos(r)
        if p < 0 or not self.has_children(r):
            return
        if self.folded(r):
            self.toggled ^= {r}
            self.vis[p + 1:p + 1] = self._expand(r + 1, self.subend(r))
        else:
            q = bisect_left(self.vis, self.subend(r), p + 1)
            del self.vis[p + 1:q]
            self.toggled ^= {r}
        if self.cursor >= len(self.vis):
            self.cursor = max(0, len(self.vis) - 1)

    def reveal(self, r: int) -> int:
        """Unfold the calls around row r so it shows; its position in vis."""
        chain = []
        p = self.t.parent[r]
        while p >= 0:
            chain.append(p)
            p = self.t.parent[p]
        for a in reversed(chain):
            if self.folded(a):
                self.toggle(a)
        return self.pos(r)

    def row(self) -> int:
        """The row under the cursor (-1: none)."""
        return self.vis[self.cursor] if self.cursor < len(self.vis) else -1


_CURSOR = Style(color="white", bgcolor="dark_blue", bold=True)
_DIM = Style(dim=True)
_NAME = Style(bold=True)
_MARK = Style(color="yellow")
_OPEN_STYLE = Style(color="cyan")


class CallGraph(ScrollView, can_focus=True):
    """The call graph of the current thread (uftrace tui's graph view)."""

    BINDINGS = [
        Binding("j,down", "move(1)", "down", show=False),
        Binding("k,up", "move(-1)", "up", show=False),
        Binding("pagedown", "page(1)", "page down", show=False),
        Binding("pageup", "page(-1)", "page up", show=False),
        Binding("home,g", "edge(0)", "first", show=False),
        Binding("end,G", "edge(1)", "last", show=False),
        Binding("enter,space", "toggle", "fold"),
        Binding("left,h", "collapse", "fold/parent", show=False),
        Binding("right,l", "expand", "unfold", show=False),
        Binding("right_square_bracket", "same_call(1)", "next call"),
        Binding("left_square_bracket", "same_call(-1)", "prev call"),
    ]

    DEFAULT_CSS = """
    CallGraph { height: 1fr; overflow-x: hidden; }
    """

    class Moved(Message):
        """The cursor is on another row."""

    def __init__(self, index: TraceIndex, fold_depth: int, **kw) -> None:
        super().__init__(**kw)
        self.index = index
        self.fold_depth = fold_depth
        self.views: dict[int, ThreadView] = {}
        self.view: ThreadView | None = None

    # -- state ----------------------------------------------------------------

    def show_thread(self, cpu: int) -> None:
        if self.view is not None:
            self.view.scroll_y = int(self.scroll_offset.y)
        v = self.views.get(cpu)
        if v is None:
            v = self.views[cpu] = ThreadView(self.index.threads[cpu], self.fold_depth)
        self.view = v
        self.catch_up()
        self.scroll_to(y=v.scroll_y, animate=False)
        self.refresh()
        self.post_message(self.Moved())

    def catch_up(self) -> None:
        v = self.view
        if v is None:
            return
        with self.index.lock:
            changed = v.catch_up()
        self._resize()
        if changed:
            self.refresh()

    def _resize(self) -> None:
        n = len(self.view.vis) if self.view else 0
        self.virtual_size = Size(0, n)     # long lines are cut, not scrolled

    def goto_row(self, r: int) -> None:
        """Put the cursor on row r of the current thread (unfolding what hides it)."""
        v = self.view
        if v is None:           # (asked only with a thread shown)
            return
        with self.index.lock:
            p = v.reveal(r)
        if p < 0:
            return
        v.cursor = p
        v.chosen = True
        self._resize()
        self._follow(center=True)
        self.refresh()
        self.post_message(self.Moved())

    def _follow(self, center: bool = False) -> None:
        v = self.view
        if v is None:           # (called only with a thread shown)
            return
        h = max(1, self.size.height)
        y = int(self.scroll_offset.y)
        if center and not (y <= v.cursor < y + h):
            self.scroll_to(y=max(0, v.cursor - h // 2), animate=False)
        elif v.cursor < y:
            self.scroll_to(y=v.cursor, animate=False)
        elif v.cursor >= y + h:
            self.scroll_to(y=v.cursor - h + 1, animate=False)

    # -- actions --------------------------------------------------------------

    def action_move(self, d: int) -> None:
        v = self.view
        if not v or not v.vis:
            return
        v.cursor = max(0, min(len(v.vis) - 1, v.cursor + d))
        v.chosen = True
        self._follow()
        self.refresh()
        self.post_message(self.Moved())

    def action_page(self, d: int) -> None:
        self.action_move(d * max(1, self.size.height - 1))

    def action_edge(self, end: int) -> None:
        v = self.view
        if v:
            self.action_move(len(v.vis) if end else -len(v.vis))

    # the "toggle" binding folds a row: DOMNode's action_toggle(attribute) is not used
    def action_toggle(self) -> None:  # type: ignore[override]
        v = self.view
        r = v.row() if v else -1
        if v and r >= 0:
            with self.index.lock:
                v.toggle(r)
            self._resize()
            self.refresh()

    def action_collapse(self) -> None:
        v = self.view
        r = v.row() if v else -1
        if not v or r < 0:
            return
        if v.has_children(r) and not v.folded(r):
            self.action_toggle()
        elif v.t.parent[r] >= 0:
            self.goto_row(v.t.parent[r])

    def action_expand(self) -> None:
        v = self.view
        r = v.row() if v else -1
        if v and r >= 0 and v.has_children(r) and v.folded(r):
            self.action_toggle()

    def action_same_call(self, d: int) -> None:
        """The next (previous) call of the function under the cursor."""
        v = self.view
        r = v.row() if v else -1
        if not v or r < 0:
            return
        fid = v.t.func[r]
        nxt = v.t.find(fid, r + 1, v.seen) if d > 0 else v.t.rfind(fid, r)
        if nxt < 0:
            self.app.notify(f"no {'next' if d > 0 else 'previous'} call of "
                            f"{self.index.names[fid]} on this thread", markup=False)
            return
        self.goto_row(nxt)

    # -- drawing --------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        v = self.view
        width = self.scrollable_content_region.width
        i = int(self.scroll_offset.y) + y
        if v is None or i >= len(v.vis):
            return Strip.blank(width)
        t = v.t
        r = v.vis[i]
        flags = t.flags[r]
        if flags & OPEN:
            dur = "(running)".rjust(12)
            slf = "".rjust(12)
        elif t.caller[r] >= 0:      # a function tracer hit: no duration
            dur = slf = "".rjust(12)
        else:
            dur = format_ns(t.end[r] - t.start[r]).rjust(12)
            slf = format_ns(t.self_ns[r]).rjust(12)
        if v.has_children(r):
            mark = "▶ " if v.folded(r) else "▼ "
        else:
            mark = "  "
        name = self.index.names[t.func[r]]
        a = t.args[r]
        args = f"({self.index.texts[a]})" if a >= 0 else ""
        extra = ""
        if t.caller[r] >= 0:
            extra = f" <-{self.index.names[t.caller[r]]}"
        elif not flags & COMPLETE and not flags & OPEN:
            extra = " (no return)" if flags & ENTRY_SEEN else " (entry not in trace)"
        segs = [
            Segment(f"{dur} {slf} ", _DIM),
            Segment("│ " + "  " * t.depth[r]),
            Segment(mark, _MARK),
            Segment(name, _NAME),
            Segment(args, _DIM),
            Segment(extra, _OPEN_STYLE),
        ]
        if i == v.cursor:
            segs = [Segment(s.text, _CURSOR) for s in segs]
        return Strip(segs).crop(0, width).extend_cell_length(width, _CURSOR if i == v.cursor else None)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
