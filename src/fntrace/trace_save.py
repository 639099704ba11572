"""A trace instance's buffers saved as a trace file (what ``trace(output=...)`` writes).

``fntrace record`` streams each thread's full buffer to the file as it fills (cli/
record.py); a session in a running program keeps its records in its ring buffers until
it is read, like the tracefs ``trace`` file.  Saving is the kernel's ``trace-cmd
extract``: what the buffers hold now, written in the same file format (tracefile/),
so ``fntrace report``, ``fntrace export`` and ``open_trace`` read it as they read a
recording.  Only the names the records refer to go into the symbol table (the process
may know tens of thousands of functions); the per-thread counters go into the STAT
block, so a reader says what overwriting lost.

The file is written beside its destination and renamed into place: whole or not at all.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from . import _env
from .core import dispatch
from .core.records import record_table
from .core.task import thread_info
from .outfile import TRACE_MODE, replace_target
from .record_format import TRACE_FN
from .ring_buffer import RECORD
from .trace_array import TraceArray
from .tracefile.writer import TraceFileWriter

__all__ = ["write_trace_file"]

# Records per chunk handed to the writer (a chunk is encoded in memory at once).
_CHUNK_RECORDS = 1 << 14


def _header(tr: TraceArray, extra: dict) -> dict:
    header = {
        "tracer": "function",
        "python": sys.version.split()[0],
        "backend": _env.BACKEND,
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "clock": "mono",
        "buffer_size_kb": tr.buffer_size_kb,
        "filters": [], "notrace": [], "graph_functions": [], "graph_notrace": [],
        "max_graph_depth": tr.max_graph_depth,
        "tracing_thresh_us": tr.tracing_thresh // 1000,
        "graph_args": tr.graph_args,
        "graph_retval": tr.graph_retval,
        "events": [],
        "object_repr": False,
        "start_wall": time.time(),
        "start_mono": time.monotonic_ns(),
    }
    header.update(extra)
    return header


def _write_buffers(tr: TraceArray, w: TraceFileWriter) -> dict:
    """Every buffer's held records, a chunk at a time; returns the per-cpu counters."""
    pack = RECORD.pack
    by_ip = record_table.by_ip
    known: set[int] = set()
    cpus = {}
    for cpu, buf in sorted(tr.buffers.items()):
        cpus[str(cpu)] = {"written": buf.written, "overrun": buf.overrun,
                          "dropped": buf.dropped}
        native, comm = thread_info.get(cpu, (0, "<...>"))
        w.add_thread(cpu, native, comm)
        parts: list[bytes] = []
        payloads: dict = {}
        first = None
        # what the buffer dropped (overwritten, or refused when full) before the
        # records it holds: the first chunk says so, and readers mark the place
        lost = buf.written - buf.entries
        for rec in buf.records():
            seq, ts, typ, flags, a, b, c, d, payload = rec
            if first is None:
                first = seq
            for ip in ((a, b) if typ == TRACE_FN else (a,)):
                if ip and ip not in known:
                    known.add(ip)
                    r = by_ip.get(ip)
                    if r is not None:
                        w.add_symbols([(ip, r.name, r.filename or "", r.line or 0)])
            parts.append(pack(ts, typ, flags, a, b, c, d))
            if payload is not None:
                payloads[seq] = payload
            if len(parts) >= _CHUNK_RECORDS:
                w.write_chunk(cpu, b"".join(parts), first, lost, payloads or None)
                parts, payloads, first, lost = [], {}, None, 0
        if parts or lost:
            w.write_chunk(cpu, b"".join(parts), buf.seq if first is None else first, lost,
                          payloads or None)
    for cpu, (written, overrun, dropped) in list(tr.retired.items()):
        cpus.setdefault(str(cpu), {"written": written, "overrun": overrun,
                                   "dropped": dropped})
    return cpus


def _write_whole(tr: TraceArray, f, header: dict) -> None:
    w = TraceFileWriter(f, _header(tr, header))
    with tr.lock:
        cpus = _write_buffers(tr, w)
    w.close({
        "cpus": cpus,
        "callback_errors": dispatch.callback_errors[0],
        "exit_status": None,
        "trace_clock": tr.clock,
        "lost_in_writer": 0,
        "event_formats": tr.event_formats(),
    })


def write_trace_file(tr: TraceArray, path: str | os.PathLike[str], header: dict) -> None:
    """Write what ``tr``'s buffers hold to a trace file at ``path`` (``header``: the
    recording's settings, over the defaults above).  Raises OSError when the file
    cannot be written; ``path`` is then left as it was."""
    path = os.fspath(path)
    target = replace_target(path)
    if target is None:
        # a device or a pipe (/dev/null): written in place
        with open(path, "wb") as f:
            _write_whole(tr, f, header)
        return
    head, tail = os.path.split(target)
    tmp = os.path.join(head, f".{tail}.{os.getpid()}.{threading.get_ident()}.tmp")
    # 0600: a trace holds the program's values (outfile.py); O_EXCL, a name of our own
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_EXCL, TRACE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            _write_whole(tr, f, header)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
