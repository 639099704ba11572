"""The ring buffers' files (kernel/trace/trace.c): their sizes, each thread's own
directory (the kernel's per_cpu/cpuN/), and the snapshot buffer.

    buffer_size_kb              each thread's buffer ("X" when per_thread writes made
                                them differ); a write resizes them all
    buffer_total_size_kb        all of them added up
    per_thread/<tid>/{buffer_size_kb,stats,trace,trace_pipe}
    snapshot                    0 frees, 1 takes, 2 clears; a read shows it
"""
from __future__ import annotations

import errno
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

from ..core.task import thread_info
from ..errors import FntraceError
from ..ring_buffer import RECORD_SIZE, RingBuffer
from .trace_files import render

__all__ = ["PER_THREAD_FILES", "register_buffer_files", "thread_buffers", "per_thread_path"]

# per_thread/<tid>/: the kernel's per_cpu/cpuN/ files that apply to a thread's buffer
PER_THREAD_FILES = ("buffer_size_kb", "stats", "trace", "trace_pipe")


def register_buffer_files(fs) -> None:
    """Add buffer_size_kb, buffer_total_size_kb and snapshot to ``fs`` (a Tracefs: its
    its ``tr``), and what they keep: ``fs._thread_kb``, thread slot -> the
    KB a per_thread/<tid>/buffer_size_kb write gave that thread's buffer."""
    fs._thread_kb = {}
    fs._files.update({
        # tracing_entries_read(): "%lu\n", the size of each (per-thread) buffer
        "buffer_size_kb": (lambda: _r_buffer_size_kb(fs), lambda d, a: _w_buffer_size_kb(fs, d)),
        "buffer_total_size_kb": (lambda: _r_buffer_total_size_kb(fs), None),
        "snapshot": (lambda: _r_snapshot(fs), lambda d, a: _w_snapshot(fs, d)),
    })


def _buffer_kb(data: str) -> int:
    s = data.strip()
    try:
        kb = int(s)
    except ValueError:
        raise FntraceError(f"buffer_size_kb: {s!r} is not a number") from None
    if kb < 1 or kb > (1 << 20):
        err = FntraceError(f"buffer_size_kb: {kb} is out of range (1 to {1 << 20} KB)")
        err.errno = errno.ENOMEM if kb > 0 else errno.EINVAL
        raise err
    return kb


def _r_buffer_size_kb(fs) -> str:
    """tracing_entries_read(): the size of each thread's buffer, or "X" when a
    per_thread/<tid>/buffer_size_kb write has made them differ."""
    kb = fs.tr.buffer_size_kb
    with fs.tr.lock:
        live = set(fs.tr.buffers)
    differ = any(c in live and v != kb for c, v in fs._thread_kb.items())
    return "X\n" if differ else f"{kb}\n"


def _w_buffer_size_kb(fs, data: str) -> None:
    fs.tr.set_buffer_size_kb(_buffer_kb(data))
    fs._thread_kb.clear()


def _r_buffer_total_size_kb(fs) -> str:
    """tracing_total_entries_read(): the KB of every thread's buffer, added up."""
    with fs.tr.lock:
        bufs = list(fs.tr.buffers.values())
    return f"{sum((b.nrec * RECORD_SIZE) >> 10 for b in bufs)}\n"


# -- per_thread/<tid>/ (the kernel's per_cpu/cpuN/) -------------------------------------
def thread_buffers(tr) -> dict[int, RingBuffer]:
    """native thread id -> the TraceArray ``tr``'s buffer of that thread (the newest
    thread, if an id was used again)."""
    with tr.lock:
        bufs = sorted(tr.buffers.items())
    out = {}
    for cpu, buf in bufs:
        info = thread_info.get(cpu)
        if info is not None:
            out[info[0]] = buf
    return out


def per_thread_path(fs, path: str):
    """The (read, write) pair of a file under per_thread/ of ``fs``, or None."""
    parts = path.split("/")
    if len(parts) != 3 or not parts[1].isdigit() or parts[2] not in PER_THREAD_FILES:
        return None
    buf = thread_buffers(fs.tr).get(int(parts[1]))
    if buf is None:
        return None
    leaf = parts[2]
    if leaf == "buffer_size_kb":
        def w_size(data: str, append: bool) -> None:
            kb = _buffer_kb(data)
            buf.resize(kb)
            fs._thread_kb[buf.cpu] = kb
        return (lambda: f"{(buf.nrec * RECORD_SIZE) >> 10}\n", w_size)
    if leaf == "trace":
        def w_trace(data: str, append: bool) -> None:
            if not append:
                buf.reset()          # echo > per_cpu/cpuN/trace clears that CPU only
        return (lambda: render(fs, buffers=[buf]), w_trace)
    if leaf == "trace_pipe":
        return (lambda: render(fs, buffers=[buf], consume=True), None)
    return (lambda: _per_thread_stats(fs.tr, buf), None)


def _per_thread_stats(tr, buf) -> str:
    """tracing_stats_read(): the kernel's per_cpu/cpuN/stats, line for line."""
    entries = buf.entries
    oldest = next(buf.records(), None)
    oldest_ts = oldest[1] if oldest is not None else 0
    now = tr.clock_now()
    ts: Callable[[int], str]
    if tr.clock_in_ns:
        def ts(ns: int) -> str:
            secs, usecs = divmod((ns + 500) // 1000, 1_000_000)   # ns2usecs()
            return f"{secs:5d}.{usecs:06d}"
    else:
        ts = str
    return (f"entries: {entries}\n"
            f"overrun: {buf.overrun}\n"
            f"commit overrun: 0\n"
            f"bytes: {entries * RECORD_SIZE}\n"
            f"oldest event ts: {ts(oldest_ts)}\n"
            f"now ts: {ts(now)}\n"
            f"dropped events: {buf.dropped}\n"
            f"read events: {getattr(buf, 'read_events', 0)}\n")


# -- snapshot -------------------------------------------------------------------------
def _r_snapshot(fs) -> str:
    """s_show() on the snapshot buffer: what ``trace`` prints of its own buffer,
    in the current tracer's format; print_snapshot_help() instead when there is no
    snapshot buffer or it is empty."""
    tr = fs.tr
    snap = tr.snapshot
    if snap is None or not any(b.entries for b in snap):
        state = "allocated" if snap is not None else "freed"
        return (f"# tracer: {tr.tracer.name}\n#\n"
                f"#\n# * Snapshot is {state} *\n#\n"
                "# Snapshot commands:\n"
                "# echo 0 > snapshot : Clears and frees snapshot buffer\n"
                "# echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.\n"
                "#                      Takes a snapshot of the main buffer.\n"
                "# echo 2 > snapshot : Clears snapshot buffer (but does not allocate or free)\n"
                "#                      (Doesn't have to be '2' works with any number that\n"
                "#                       is not a '0' or '1')\n")
    return render(fs, buffers=snap)


def _w_snapshot(fs, data: str) -> None:
    v = data.strip()
    if v == "0":
        fs.tr.snapshot = None
    elif v == "1":
        fs.tr.take_snapshot()
    elif fs.tr.snapshot is not None:
        for b in fs.tr.snapshot:
            b.reset()
