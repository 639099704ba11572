"""The kernel's trace text formats (kernel/trace/trace_output.c, trace.c,
trace_functions_graph.c): decoded entries in, lines out.

    entry.py           TraceEntry, LostEvents: what every renderer reads
    reader.py          ring-buffer records (live buffers or a trace file) -> entries
    ftrace_text.py     the default format: the function tracer, prints, stacks, events
    function_graph.py  the function_graph tracer's printer (GraphPrinter)
    registry.py        the renderer registry: Renderer, register_renderer,
                       renderer_for (the one choice of view), name_of
    render.py          render_trace(), trace_array_lines(): a trace read through it
    source.py          TraceSource, open_trace: a trace file as every view reads it
    trace_events.py    typed events (FunctionHit, GraphReturn, ...): the public reader
    calls.py           whole calls out of a function_graph stream

The names below are also reachable from here; the renderers are imported when first
used, so importing fntrace does not load them.
"""
from __future__ import annotations

__all__ = ["TRACE_OPTIONS", "render_trace", "trace_array_lines", "Renderer",
           "RenderContext", "register_renderer", "get_renderer", "renderer_for",
           "renderers", "name_of"]

_RENDER = ("render_trace", "trace_array_lines")


def __getattr__(name: str) -> object:
    """PEP 562: load render.py / registry.py on first use of their names."""
    if name in _RENDER:
        from . import render
        return getattr(render, name)
    if name in __all__:
        from . import registry
        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
