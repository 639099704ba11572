"""``fntrace tui``: a terminal browser of a trace file (textual).

``TraceBrowser(open_trace(path)).run()``; the call index it browses is
``fntrace.tui.index.TraceIndex``.  textual is imported when this package is.
"""
from .app import TraceBrowser

__all__ = ["TraceBrowser"]

from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
