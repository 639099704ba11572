"""The browser's flame graph pane (``F``): an icicle of one thread's calls in text.

The outermost calls on the top row, each call path as wide as its share of the
thread's time, its callees under it (output/html_report.py's thread_flames: the same
nodes as the HTML report's).  It opens on the call under the graph's cursor: that
call's callers fill the width above it, its callees share it below::

    all: 12.4 ms ...................................................... (a caller)
    __main__.main ..................................................... (a caller)
    __main__.work (the call chosen) ...................................
    __main__.mid .............................. __main__.leaf ..........
    __main__.leaf ...........

``z`` zooms out one caller, ``F`` (or escape) goes back to the call graph.
"""
from __future__ import annotations

from collections.abc import Mapping

from rich.style import Style
from rich.text import Text
from textual.widgets import Static

from .index import format_ns

__all__ = ["FlameGraph", "flame_lines"]


def _colour(name: str) -> Style:
    h = 2166136261              # FNV-1a, as the HTML report's: one colour per name
    for ch in name:
        h = ((h ^ ord(ch)) * 16777619) & 0xFFFFFFFF
    r, g, b = 205 + (h >> 16 & 0xFF) * 50 // 255, 60 + (h & 0xFF) * 170 // 255, \
        (h >> 8 & 0xFF) * 60 // 255
    return Style(color="black", bgcolor=f"rgb({r},{g},{b})")


_ROOT = Style(color="black", bgcolor="rgb(200,200,200)")


def flame_lines(paths: list[tuple[str, ...]], nodes: Mapping[int, list[int]],
                focus: tuple[str, ...], width: int) -> tuple[list[Text], tuple[str, ...]]:
    """The icicle's rows, ``width`` characters each, zoomed on ``focus`` (the deepest
    of its prefixes the thread has), and the focus used.  ``nodes``: path index ->
    [calls, total ns, self ns]."""
    kids: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    total: dict[tuple[str, ...], int] = {(): 0}
    for k, node in nodes.items():
        p = paths[k]
        total[p] = total.get(p, 0) + node[1]
    for p in list(total):
        if p:
            for i in range(len(p)):
                if p[:i + 1] not in total:
                    total[p[:i + 1]] = 0
    for p in total:
        if p:
            kids.setdefault(p[:-1], []).append(p)
    total[()] = sum(total[p] for p in kids.get((), ()))
    while focus and focus not in total:
        focus = focus[:-1]
    rows: list[Text] = []

    def label(p: tuple[str, ...]) -> str:
        return p[-1] if p else f"all: {format_ns(total[()])}"

    def span(line: Text, p: tuple[str, ...], x0: int, x1: int) -> None:
        w = x1 - x0
        if w <= 0:
            return
        text = label(p)
        if len(text) > w - 1:
            text = text[:max(w - 2, 0)] + "…" if w > 2 else ""
        line.append(text.ljust(w), _ROOT if not p else _colour(p[-1]))

    for i in range(len(focus)):         # the callers, each the whole width
        line = Text()
        span(line, focus[:i], 0, width)
        rows.append(line)
    level = [(focus, 0, width)]
    while level:
        line = Text()
        at = 0
        nxt = []
        for p, x0, x1 in level:
            if x0 > at:
                line.append(" " * (x0 - at))
            span(line, p, x0, x1)
            at = x1
            children = sorted(kids.get(p, ()))
            whole = max(total[p], sum(total[c] for c in children), 1)
            done = 0
            for c in children:
                a = x0 + (x1 - x0) * done // whole
                done += total[c]
                b = x0 + (x1 - x0) * done // whole
                if b > a:
                    nxt.append((c, a, b))
        rows.append(line)
        level = nxt
    return rows, focus


class FlameGraph(Static):
    """The pane: ``show(paths, nodes, focus, title)`` draws it at its width."""

    DEFAULT_CSS = "FlameGraph { height: auto; }"

    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.paths: list[tuple[str, ...]] = []
        self.nodes: Mapping[int, list[int]] = {}
        # the zoomed-to path; it hides Widget.focus(), never called: a Static takes no focus
        self.focus: tuple[str, ...] = ()    # type: ignore[assignment]
        self.title = ""

    def show(self, paths: list[tuple[str, ...]], nodes: Mapping[int, list[int]],
             focus: tuple[str, ...], title: str) -> None:
        self.paths, self.nodes, self.title = paths, nodes, title
        self.focus = focus
        self.redraw()

    def zoom_out(self) -> None:
        if self.focus:
            self.focus = self.focus[:-1]
            self.redraw()

    def redraw(self) -> None:
        width = max((self.size.width or 100) - 1, 20)
        rows, self.focus = flame_lines(self.paths, self.nodes, self.focus, width)
        head = Text(f"{self.title}: "
                    + (f"zoomed to {self.focus[-1]}" if self.focus else "the whole thread")
                    + "  (z: zoom out, F: back)", style="bold")
        self.update(Text("\n").join([head, *rows]))

    def on_resize(self) -> None:
        if self.paths:
            self.redraw()
