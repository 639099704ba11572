"""Pythonic conveniences over the kernel-named API: a context manager and a decorator.

    with fntrace.trace("json.*") as t:
        json.dumps(data)
    print(t.text())

    with fntrace.trace("json.*", tracer="function_graph", output="json.dat"):
        json.dumps(data)          # json.dat: read by fntrace report, open_trace

Each session is its own trace instance (its own buffers and ops), so several can run at
once, and with other users of the core.
"""
from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
# typing is not imported at run time (it is a fifth of fntrace's import cost);
# the annotations are strings (from __future__ import annotations).
TYPE_CHECKING = False

from .core.task import thread_info
from .trace_array import TraceArray
from .tracefs.fs import Tracefs

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from .output.entry import TraceEntry

__all__ = ["TraceSession", "trace", "traced"]


def _patterns(p: str | Iterable[str] | None) -> list[str]:
    if not p:
        return []
    return [p] if isinstance(p, str) else list(p)


class TraceSession:
    """A trace instance started by ``__enter__`` and stopped by ``__exit__``.

    Every setting is a write to a control file of the session's own tracefs instance
    (``self.fs``; tracefs/control.py), so it takes the tracefs grammar and fails as the
    write does (FilterError, FntraceError with the kernel's errno), with an entry in
    ``self.fs.read("error_log")``:

        filter          set_ftrace_filter         notrace         set_ftrace_notrace
        tracer          current_tracer (on start) buffer_size_kb  buffer_size_kb
        overwrite       options/overwrite         graph_function  set_graph_function
        graph_notrace   set_graph_notrace         max_graph_depth max_graph_depth
        tracing_thresh  tracing_thresh (us)       options         options/NAME (bool)

    ``filter`` and the other pattern arguments take one string (the whole write) or a
    list of them (the first replaces, the others add, as ``>`` then ``>>``).

    ``pending``: patterns that match no loaded function are kept for modules imported
    later (as ``fntrace record -F``) instead of refused.

    ``output``: a trace file written when the session stops (``save``), which
    ``fntrace report``, ``fntrace export`` and ``fntrace.open_trace`` read.  It holds
    what the buffers hold then: in overwrite mode a thread that wrote more than
    ``buffer_size_kb`` keeps its newest records, and the file says how many were lost.
    """

    def __init__(self, filter: str | Iterable[str] | None = None,
                 notrace: str | Iterable[str] | None = None, *,
                 tracer: str = "function", buffer_size_kb: int = 1408, overwrite: bool = True,
                 graph_function: str | Iterable[str] | None = None,
                 graph_notrace: str | Iterable[str] | None = None,
                 max_graph_depth: int | None = None, tracing_thresh: int | None = None,
                 options: Mapping[str, bool] | None = None,
                 output: str | os.PathLike[str] | None = None, pending: bool = False):
        from .tracefs import control       # loaded by the first session, not by import
        self.tr = TraceArray(name="session")
        self.fs = Tracefs(self.tr, top=False)
        self.fs.tracer_class(tracer)          # an unknown name fails here, not at start
        self.tracer_name = tracer
        opts = {"overwrite": bool(overwrite)}
        opts.update(options or {})
        control.apply_writes(self.fs, control.setting_writes(
            buffer_kb=buffer_size_kb, max_depth=max_graph_depth, thresh_us=tracing_thresh,
            options=opts))
        # pending: a pattern that matches nothing loaded yet is kept for the modules
        # the program imports later (as record's -F), not refused
        self.fs.keep_unmatched = bool(pending)
        try:
            control.apply_writes(self.fs, control.filter_writes(
                filters=_patterns(filter), notrace=_patterns(notrace),
                graph_functions=_patterns(graph_function),
                graph_notrace=_patterns(graph_notrace)))
        finally:
            self.fs.keep_unmatched = False
        self.active = False
        self._stopped = False
        # where the file goes is fixed now: the program may change directory meanwhile
        self.output = None if output is None else os.path.abspath(output)
        self._settings = {"filters": _patterns(filter), "notrace": _patterns(notrace),
                          "graph_functions": _patterns(graph_function),
                          "graph_notrace": _patterns(graph_notrace)}
        self._start_wall = 0.0
        self._start_mono = 0

    def start(self) -> "TraceSession":
        if self._stopped:
            # started again: a fresh tracer on a cleared buffer, as a tracer change does
            self.fs.write("current_tracer", "nop")
        self._start_wall = time.time()
        self._start_mono = time.monotonic_ns()
        self.fs.write("current_tracer", self.tracer_name)
        self.active = True
        return self

    def stop(self) -> None:
        if self.active:
            # The hooks go; the buffers stay readable (a current_tracer write would
            # clear them).
            tracer = self.tr.tracer
            if tracer is not None:          # (always: the array has one from its start)
                tracer.reset(self.tr)
            self.active = False
            self._stopped = True
            if self.output is not None:
                self.save(self.output)

    def save(self, path: str | os.PathLike[str], extra: dict | None = None) -> None:
        """Write the trace the buffers hold to a trace file at ``path`` (the format
        ``fntrace record`` writes: tracefile/), replacing it whole: the file is
        made beside it and renamed into place, so a reader never sees half of one."""
        from .trace_save import write_trace_file
        header = {
            "tracer": self.tracer_name,
            "argv": list(sys.argv),
            "buffer_size_kb": self.tr.buffer_size_kb,
            "max_graph_depth": self.tr.max_graph_depth,
            "tracing_thresh_us": self.tr.tracing_thresh // 1000,
            "graph_args": self.tr.graph_args,
            "graph_retval": self.tr.graph_retval,
            "start_wall": self._start_wall,
            "start_mono": self._start_mono,
            **self._settings,
            **(extra or {}),
        }
        write_trace_file(self.tr, path, header)

    def __enter__(self) -> "TraceSession":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def entries(self) -> Iterator[TraceEntry]:
        """The recorded entries, oldest first, all threads merged.

        What the tracer wrote, decoded: TRACE_FN entries (func, parent) for the function
        tracer; for function_graph a TRACE_GRAPH_ENT per call (func, depth) and a
        TRACE_GRAPH_RET per return (depth, calltime, rettime), whether or not the text
        shows it as a leaf.  Markers of lost events are left out (see lines()).
        """
        # the readers load when a trace is read, not with every traced program
        from .output.entry import TraceEntry
        from .output.reader import entries_from_buffers
        from .output.registry import name_of
        for e in entries_from_buffers(list(self.tr.buffers.values()), name_of, thread_info):
            if isinstance(e, TraceEntry):
                yield e

    def lines(self, *, header: bool = True) -> list[str]:
        """The trace as the tracefs ``trace`` file of an instance with this tracer shows
        it (header=False: the lines only, as ``trace_pipe`` prints them), with that
        file's default options: the function tracer's format, or function_graph's (the
        renderer registry's view for the tracer, output/registry.py)."""
        from .output.render import trace_array_lines
        return list(trace_array_lines(self.tr, tracer=self.tracer_name, header=header))

    def text(self, *, header: bool = True) -> str:
        return "".join(line + "\n" for line in self.lines(header=header))


def trace(filter: str | None = None, notrace: str | None = None, **kw: Any) -> TraceSession:
    """A session for ``with``: ``with fntrace.trace("mymod.*") as t: ...``."""
    return TraceSession(filter, notrace, **kw)


def traced(filter: str | None = None, notrace: str | None = None, *,
           sink: Callable[[TraceSession], None] | None = None, **kw: Any):
    """Decorator: trace every call of the decorated function; ``sink(session)`` gets the
    session after each call (default: print the trace to stderr, unless ``output=``
    names a trace file: then each call writes it anew and nothing is printed)."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            s = TraceSession(filter, notrace, **kw)
            with s:
                result = fn(*a, **k)
            if sink is not None:
                sink(s)
            elif s.output is None:
                import sys
                sys.stderr.write(s.text())
            return result
        return wrapper
    return deco


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
