"""The kernel's trace text formats (kernel/trace/trace_output.c, trace.c,
trace_functions_graph.c): decoded entries in, lines out.

    entry.py           TraceEntry, LostEvents: what every renderer reads
    reader.py          ring-buffer records (live buffers or a trace file) -> entries
    ftrace_text.py     the default format: the function tracer, prints, stacks, events
    function_graph.py  the function_graph tracer's printer (GraphPrinter)
    render.py          render_trace(): which of the two a trace read uses

``render_trace`` and ``TRACE_OPTIONS`` are also reachable from here; the renderers are
imported when first used, so importing fntrace does not load them.
"""
from __future__ import annotations

__all__ = ["TRACE_OPTIONS", "render_trace"]


def __getattr__(name: str) -> object:
    """PEP 562: load render.py on first use of its names."""
    if name in __all__:
        from . import render
        return getattr(render, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
