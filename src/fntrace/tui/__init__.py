"""``fntrace tui``: a terminal browser of a trace file (textual).

``TraceBrowser(open_trace(path)).run()``; the call index it browses is
``fntrace.tui.index.TraceIndex``.  textual is imported with TraceBrowser (app.py), not
with this package: the index can be made, and its trace checked, before the import.
"""
from __future__ import annotations

__all__ = ["TraceBrowser"]


def __getattr__(name: str) -> object:
    if name == "TraceBrowser":
        from .app import TraceBrowser
        return TraceBrowser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(__all__) | {n for n in globals() if n[:2] == "__" == n[-2:]})
