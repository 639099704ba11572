"""A trace of several processes read on all cores: each process's file walked in a
forked child, the results handed back to the parent in file order.

A recording that followed processes has one file per process (trace_set.py); a walk
that adds up what it reads (stat's rows, folded's stacks) gets the same answer from
the files walked one by one and added in file order, so the files can be walked at
the same time:

    parent                          child 1                 child 2
    ------                          -------                 -------
    fork, fork                      walk file 0, file 2     walk file 1
    read the pipes: "P" records  <- every few blocks        ...
    (the progress bar), "R" result  pickled results        pickled results
    results in file order           _exit                   _exit
    add them up (the view's own merge)

The trace is mmap'ed (reader.py): the children read the parent's pages, nothing is
copied but what they hand back.  A child never returns into the parent's code: it
ends with ``os._exit`` whatever happens, so no ``atexit`` handler, no buffered output
of the parent's runs twice.

Forking a process that runs other threads can deadlock the child (a lock held by a
thread that is not there), and 3.12+ warns of it: with other threads running, or one
core, or ``FNTRACE_JOBS=1``, the walk is the caller's (``workers`` says 0).  A child
that fails (an exception, a signal) makes the whole answer None: the caller walks the
trace itself, and what failed in the child (a damaged block) fails there the way it
always does.
"""
from __future__ import annotations

import os
import pickle
import select
import struct
import threading
from collections.abc import Callable, Sequence

from ..errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["jobs_setting", "workers", "map_forked", "map_parts"]

# A trace smaller than this is walked by the caller unless FNTRACE_JOBS asks: a fork
# and a pickled answer cost about a millisecond, a million records about a tenth of a
# second.
MIN_RECORDS = 200_000

_HEAD = struct.Struct("<cQ")        # message kind, payload length
_PROGRESS_EVERY = 1 << 16           # records between two progress messages


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def jobs_setting() -> int:
    """``FNTRACE_JOBS``: the most processes to read a trace of several processes with
    (0: unset, one per core); anything but a whole number is refused (UsageError),
    which the commands that read this way (stat, export) ask first, before they read:
    native or not, the setting is wrong either way."""
    env = os.environ.get("FNTRACE_JOBS", "").strip()
    try:
        jobs = int(env) if env else 0
    except ValueError:
        jobs = -1
    if jobs < 0:
        raise UsageError(f"FNTRACE_JOBS={env}: give the most processes to read a trace "
                         "of several processes with, a whole number (1: this one alone; "
                         "0 or unset: one per core)")
    return jobs


def workers(nparts: int, nrecords: int) -> int:
    """How many children to walk ``nparts`` files of ``nrecords`` records in all with:
    0 to walk them in this process.  ``FNTRACE_JOBS=N`` sets the most (1: never fork;
    given, it forks for a trace of any size; 0: as unset); anything else is refused
    (UsageError)."""
    jobs = jobs_setting()
    if nparts < 2 or not hasattr(os, "fork"):
        return 0
    if jobs == 0:
        if nrecords < MIN_RECORDS:
            return 0
        jobs = _cores()
    if jobs < 2 or _threads() > 1:
        return 0
    return min(jobs, nparts)


def _threads() -> int:
    """The process's threads, as the kernel counts them: a thread started outside
    ``threading`` (an extension's, ``_thread``'s) holds locks a fork can copy too."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _shares(sizes: Sequence[int], n: int) -> list[list[int]]:
    """The parts each of ``n`` children walks: the largest first, each to the child
    with the least so far (the longest child is what the parent waits for)."""
    load = [0] * n
    shares: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        k = load.index(min(load))
        shares[k].append(i)
        load[k] += sizes[i]
    return [sorted(s) for s in shares if s]


def map_forked(work: Callable[[int, Callable[[int], None]], Any], sizes: Sequence[int],
               nworkers: int, on_records: Callable[[int], None] | None = None
               ) -> list[Any] | None:
    """``[work(i, progress) for i in range(len(sizes))]`` computed in ``nworkers``
    forked children (``sizes``: each part's records, to share them out), each result
    pickled back; ``progress(n)``: the child read n more records (``on_records(n)`` is
    called in the parent).  None when a child failed: the caller does the work."""
    children: dict[int, tuple[int, list[int]]] = {}     # read fd -> (pid, parts)
    results: dict[int, Any] = {}
    failed = False
    try:
        for share in _shares(sizes, nworkers):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:                                # the child
                os.close(r)
                _child(work, share, w)                  # never returns
            os.close(w)
            children[r] = (pid, share)
        bufs = {r: bytearray() for r in children}
        open_fds = set(children)
        while open_fds:
            ready, _, _ = select.select(list(open_fds), [], [])
            for r in ready:
                data = os.read(r, 1 << 20)
                if not data:
                    open_fds.discard(r)
                    continue
                buf = bufs[r]
                buf += data
                while len(buf) >= _HEAD.size:
                    kind, n = _HEAD.unpack_from(buf)
                    if len(buf) < _HEAD.size + n:
                        break
                    body = bytes(buf[_HEAD.size:_HEAD.size + n])
                    del buf[:_HEAD.size + n]
                    if kind == b"P":
                        if on_records is not None:
                            on_records(int.from_bytes(body, "little"))
                    elif kind == b"R":
                        results.update(zip(children[r][1], pickle.loads(body)))
                    else:
                        failed = True
    finally:
        for r, (pid, _) in children.items():
            if len(results) < len(sizes) or failed:
                try:
                    os.kill(pid, 9)                     # (a KeyboardInterrupt here)
                except OSError:
                    pass
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                status = 1
            failed = failed or status != 0
            os.close(r)
    if failed or len(results) != len(sizes):
        return None
    return [results[i] for i in range(len(sizes))]


def map_parts(sizes: Sequence[int] | None,
              work: Callable[[int, Callable[[int], None]], Any],
              on_records: Callable[[int], None] | None = None) -> list[Any] | None:
    """``map_forked`` of the parts of ``sizes`` records (a trace's files, its
    ``part_sizes()``) when forking is worth it (``workers``), with every part's answer;
    None when it is not (one file, a small trace, other threads running), or a child
    failed or answered None: the caller walks the trace itself."""
    if not sizes:
        return None
    n = workers(len(sizes), sum(sizes))
    if not n:
        return None
    out = map_forked(work, sizes, n, on_records)
    return None if out is None or None in out else out


def _child(work: Callable[[int, Callable[[int], None]], Any], share: list[int],
           w: int) -> None:
    """A child's life: its parts walked, the answer written, ``_exit``."""
    status = 1
    try:
        pending = 0

        def send(kind: bytes, body: bytes) -> None:
            view = memoryview(_HEAD.pack(kind, len(body)) + body)
            while view:
                view = view[os.write(w, view):]

        def progress(n: int) -> None:
            nonlocal pending
            pending += n
            if pending >= _PROGRESS_EVERY:
                send(b"P", pending.to_bytes(8, "little"))
                pending = 0

        try:
            out = [work(i, progress) for i in share]
            if pending:
                send(b"P", pending.to_bytes(8, "little"))
            send(b"R", pickle.dumps(out, pickle.HIGHEST_PROTOCOL))
            status = 0
        except BaseException as e:                      # (the parent walks it again)
            send(b"E", repr(e).encode("utf-8", "replace"))
    except BaseException:
        pass
    finally:
        os._exit(status)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
