"""trace.c's own files: the tracer, the switch, the buffer's views and the clock.

    available_tracers, current_tracer   which tracers there are; which one runs
    tracing_on                          the buffers' write switch (tracer_tracing_on())
    trace                               the buffer, read without consuming; ``>`` clears it
    trace_pipe                          one consuming read (tracefs/trace_pipe.py keeps
                                        a reader open across reads)
    trace_marker                        a line written into the buffer as ftrace:print
    trace_clock                         the clocks, the current one in brackets
    saved_cmdlines(_size)               the threads seen, by id and name (top level)

A read of trace, trace_pipe, per_thread/*/trace or snapshot is the renderer registry's
view for the current tracer (``render``), as the report and the API print it.
"""
from __future__ import annotations

import errno
import time

from ..errors import FntraceError
from ..trace_array import TRACE_CLOCKS
from ..tracers import available_tracers
from .values import errno_error, parse_bool, short, ulong

__all__ = ["register_trace_files", "tracer_class", "render",
           "SAVED_CMDLINES_DEFAULT", "PID_MAX_DEFAULT"]

# trace.c SAVED_CMDLINES_DEFAULT; saved_cmdlines_size accepts 1 .. PID_MAX_DEFAULT
SAVED_CMDLINES_DEFAULT = 128
PID_MAX_DEFAULT = 0x8000


def register_trace_files(fs) -> None:
    """Add the files to ``fs`` (a Tracefs: its ``tr`` and ``error_log``; the
    saved_cmdlines files at the top level only, with ``fs.saved_cmdlines_size``)."""
    tr = fs.tr
    fs._files.update({
        "available_tracers": (lambda: " ".join(sorted(available_tracers())) + "\n", None),
        # TraceArray.tracer is set (a NopTracer at first) before this runs
        "current_tracer": (lambda: tr.tracer.name + "\n", lambda d, a: _w_current_tracer(fs, d)),
        "tracing_on": (lambda: f"{int(tr.tracing_on)}\n",
                       lambda d, a: setattr(tr, "tracing_on", parse_bool(d, "tracing_on"))),
        "trace": (lambda: render(fs), lambda d, a: None if a else tr.clear()),
        "trace_pipe": (lambda: _r_trace_pipe(fs), None),
        "trace_marker": (None, lambda d, a: _w_trace_marker(fs, d)),
        "trace_clock": (lambda: _r_trace_clock(fs), lambda d, a: _w_trace_clock(fs, d)),
    })
    if fs.top:
        fs.saved_cmdlines_size = SAVED_CMDLINES_DEFAULT
        fs._files.update({
            "saved_cmdlines": (lambda: _r_saved_cmdlines(fs), None),
            "saved_cmdlines_size": (lambda: f"{fs.saved_cmdlines_size}\n",
                                    lambda d, a: _w_saved_cmdlines_size(fs, d)),
        })


def tracer_class(fs, data: str) -> type:
    """The tracer ``echo DATA > current_tracer`` selects; an unknown name fails as
    that write does (error_log entry, EINVAL), so a caller can check a name before
    the write (fntrace record, before the program runs)."""
    name = data.strip()
    tracers = available_tracers()
    if name not in tracers:
        fs.error_log.add("current_tracer", "No such tracer", data.rstrip("\n"), 0)
        raise FntraceError(f"no such tracer {name!r} (available: "
                           f"{' '.join(sorted(tracers))})", command=data)
    return tracers[name]


def _w_current_tracer(fs, data: str) -> None:
    cls = tracer_class(fs, data)
    if fs.tr.tracer is not None and fs.tr.tracer.name == data.strip():
        return
    fs.tr.set_tracer(cls())


def render(fs, **kw) -> str:
    """A read of trace, trace_pipe or snapshot: the renderer registry's view for
    the current tracer (output/registry.py), as the report and the API print it."""
    from ..output.render import trace_array_lines
    return "".join(line + "\n" for line in trace_array_lines(fs.tr, **kw))


def _r_trace_pipe(fs) -> str:
    """One consuming read that does not wait (an open, read, close)."""
    from .trace_pipe import PipeReader
    r = PipeReader(fs, "trace_pipe")
    try:
        return r.read(timeout=0)
    finally:
        r.close()


def _w_trace_marker(fs, data: str) -> None:
    tr = fs.tr
    if not tr.options.get("markers", True):
        raise FntraceError("markers are disabled (options/markers is 0)")
    from ..ring_buffer import PAYLOAD_SEP, TRACE_PRINT
    if not tr.tracing_on:
        return
    # not filtered by thread: a marker is the writer's own (trace_marker has no
    # pid filter in the kernel either)
    text = data if data.endswith("\n") else data + "\n"
    from ..events.static_events import marker_passes
    if not marker_passes(tr, text):
        return              # events/ftrace/print/filter
    buf = tr.thread_buffer()
    if buf is None:
        return              # the thread is handing its buffer over: dropped, counted
    buf.write_payload(time.monotonic_ns(), TRACE_PRINT, 0, 0, 0, 0, PAYLOAD_SEP + text)


def _r_trace_clock(fs) -> str:
    """tracing_clock_show(): every clock, the current one in brackets."""
    cur = fs.tr.clock_id
    return " ".join(f"[{n}]" if i == cur else n for i, n in enumerate(TRACE_CLOCKS)) + "\n"


def _w_trace_clock(fs, data: str) -> None:
    """tracing_set_clock(): the buffers (and the snapshot) are cleared."""
    name = data.strip()
    if name not in TRACE_CLOCKS:
        raise errno_error(errno.EINVAL, f"trace_clock: no such clock {name!r} (available: "
                          f"{' '.join(TRACE_CLOCKS)})", data)
    fs.tr.set_clock(name)


def _r_saved_cmdlines(fs) -> str:
    """saved_cmdlines_show(): ``<pid> <comm>`` of the threads seen, here the native
    thread id and the thread's name; the newest saved_cmdlines_size of them."""
    from ..core.task import thread_info
    seen: dict[int, str] = {}
    for _cpu, (tid, comm) in sorted(list(thread_info.items())):   # one C-level copy
        seen.pop(tid, None)          # an id used again: the newest thread's name
        seen[tid] = comm
    items = list(seen.items())[-fs.saved_cmdlines_size:]
    return "".join(f"{tid} {comm}\n" for tid, comm in items)


def _w_saved_cmdlines_size(fs, data: str) -> None:
    s = data.strip()
    if ulong(s) is None or not 1 <= int(s) <= PID_MAX_DEFAULT:
        raise errno_error(errno.EINVAL, f"saved_cmdlines_size: {short(s)!r} is not a size "
                          f"(1 to {PID_MAX_DEFAULT})", data)
    fs.saved_cmdlines_size = int(s)
