"""One trace of several processes: a recording's file and its children's, read as one.

``fntrace record`` follows the processes of the program it runs (cli/follow.py): each
one writes a trace file of its own, next to the first, named after its pid, with the
run's id in its header:

    fntrace.dat              the process fntrace started        header: run, pid
    fntrace.dat.4711         a child (fork, spawn, a Python     header: run, pid, ppid,
    fntrace.dat.4712.1         subprocess); .N: the Nth image     follow
                               of that pid (os.exec* again)

A file of its own per process is what keeps a child's trace whole when the child is
killed (it holds what it wrote, as any cut trace file does) and its writing free of
the others' (no lock between processes).  Readers open the first file and get the
others with it (``open_traces``): TraceSet gives TraceFile's interface over all of
them, records merged by timestamp (every process stamps CLOCK_MONOTONIC, the same
clock), each process's thread slots (the CPU column) and symbol ids moved past the
previous process's so that nothing collides:

    process      slots      symbol ids          in the merged trace
    first        0..2       1..310              0..2, 1..310 (unchanged)
    child 4711   3..4       1..295              3..4, 311..605
    child 4712   0          1..280              5, 606..885

A file of another run (its id differs) is never read with this one; a child's file
that cannot be read is left out and named (``bad``), the others are read.
"""
from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from operator import itemgetter
# typing is not imported at run time (the recorder's start-up); annotations are strings
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    # TraceFile.records()' tuple: cpu, ts, type, flags, a, b, c, d, payload
    _Record = tuple[int, int, int, int, int, int, int, int, Any]

from ..errors import TraceFileError
from ..record_format import TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET
from .children import child_files, child_path
from .reader import TraceFile

__all__ = ["TraceSet", "open_traces", "child_files", "child_path"]

_NAMED_BY_IP = (TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_EVENT)


class TraceSet:
    """Several processes' trace files with TraceFile's interface (records, symbols,
    threads, stats, lost, losses, ...), the first file's header; ``files`` the
    TraceFiles, ``pid_of_cpu`` a merged slot's process, ``bad`` one line per child
    file left out."""

    def __init__(self, files: list[TraceFile], bad: list[str] | None = None) -> None:
        self.files = files
        self.bad = list(bad or ())
        first = files[0]
        self.name = first.name
        self.header: dict[str, Any] = dict(first.header)
        self.header["processes"] = [
            {"pid": tf.header.get("pid"), "ppid": tf.header.get("ppid"),
             "argv": tf.header.get("argv"), "file": tf.name} for tf in files]
        self.symbols: dict[int, tuple[str, str, int]] = {}
        self.threads: dict[int, tuple[int, str]] = {}
        self.pid_of_cpu: dict[int, int] = {}
        # (TraceFile, slot base, symbol base) of each process
        self._parts: list[tuple[TraceFile, int, int]] = []
        nxt = ibase = 0
        for tf in files:
            cpus = tf.cpus
            # a forked child's slots start after its parent's (it inherits their
            # numbering): its first slot goes to the next free one
            cbase = nxt - min(cpus, default=0)
            self._parts.append((tf, cbase, ibase))
            for ip, sym in tf.symbols.items():
                self.symbols[ip + ibase] = sym
            pid = int(tf.header.get("pid") or 0)
            for c, t in tf.threads.items():
                self.threads[c + cbase] = t
            for c in cpus:
                self.pid_of_cpu[c + cbase] = pid
            nxt = max(cpus, default=-1) + cbase + 1 if cpus else nxt
            ibase += max(tf.symbols, default=0) + 1
        self.truncated = any(tf.truncated for tf in files)
        self.complete = all(tf.complete for tf in files)
        self.stats = self._merged_stats()

    def _merged_stats(self) -> dict[str, Any] | None:
        """The first process's stats with every process's counts added: per-slot
        written/overrun/dropped under the merged slot numbers, errors summed."""
        first = self.files[0].stats
        if first is None and all(tf.stats is None for tf in self.files):
            return None
        out = dict(first or {})
        cpus: dict[str, Any] = {}
        formats: dict[str, Any] = {}
        sums = dict.fromkeys(("callback_errors", "repr_faults", "lost_in_writer"), 0)
        for tf, cbase, _ in self._parts:
            st = tf.stats or {}
            for c, v in (st.get("cpus") or {}).items():
                try:
                    cpus[str(int(c) + cbase)] = v
                except ValueError:
                    pass
            for k in sums:
                sums[k] += int(st.get(k) or 0)
            formats.update(st.get("event_formats") or {})
            if st.get("write_error") and "write_error" not in out:
                out["write_error"] = f"{tf.name}: {st['write_error']}"
        out["cpus"] = cpus
        out["event_formats"] = formats
        out.update({k: v for k, v in sums.items() if v or k in out})
        return out

    @property
    def cpus(self) -> list[int]:
        return sorted(c + cb for tf, cb, _ in self._parts for c in tf.cpus)

    @property
    def pids(self) -> list[int]:
        return [int(tf.header.get("pid") or 0) for tf in self.files]

    def _where(self, cpu: int) -> tuple[TraceFile, int, int] | None:
        pid = self.pid_of_cpu.get(cpu)
        for tf, cb, ib in self._parts:
            if cpu - cb in tf.cpus and int(tf.header.get("pid") or 0) == pid:
                return tf, cb, ib
        return None

    def records(self, cpu: int | None = None) -> Iterator[_Record]:
        """TraceFile.records() of every process, merged by timestamp (one process's
        records keep their order; a tie goes to the earlier process)."""
        if cpu is not None:
            w = self._where(cpu)
            return iter(()) if w is None else _moved(w[0].records(cpu - w[1]), w[1], w[2])
        streams = [_moved(tf.records(), cb, ib) for tf, cb, ib in self._parts]
        if len(streams) == 1:
            return streams[0]
        return heapq.merge(*streams, key=itemgetter(1))

    def record_blocks(self, cpu: int | None = None, payloads: bool = False,
                      since: int | None = None, until: int | None = None
                      ) -> Iterator[tuple[Any, ...]]:
        """TraceFile.record_blocks() of every process (``cpu``: of that merged slot),
        under the merged slot numbers, with the process's symbol id base (what
        ``records`` adds to its ids)."""
        if cpu is None:
            for part in range(len(self._parts)):
                yield from self.part_record_blocks(part, payloads, since, until)
            return
        w = self._where(cpu)
        if w is not None:
            tf, cb, ib = w
            for block in tf.record_blocks(cpu - cb, payloads, since, until):
                yield (block[0] + cb, block[1], block[2], ib, *block[4:])

    def part_record_blocks(self, part: int, payloads: bool = False,
                           since: int | None = None, until: int | None = None
                           ) -> Iterator[tuple[Any, ...]]:
        """record_blocks() of the ``part``-th process only (``files[part]``), as the
        whole set numbers its slots and ids: a walk that adds up what it reads may
        read the processes apart (tracefile/parallel.py)."""
        tf, cb, ib = self._parts[part]
        for block in tf.record_blocks(None, payloads, since, until):
            yield (block[0] + cb, block[1], block[2], ib, *block[4:])

    def first_time(self) -> int | None:
        """The first record's time, from the files' indexes: None if one has none."""
        times = [tf.first_time() for tf in self.files]
        # (the checker does not narrow the list by ``None in times``)
        return None if None in times else min(times, default=0)  # type: ignore[type-var]

    def lost(self, cpu: int | None = None) -> int:
        if cpu is not None:
            w = self._where(cpu)
            return 0 if w is None else w[0].lost(cpu - w[1])
        return sum(tf.lost() for tf in self.files)

    def nr_records(self, cpu: int | None = None) -> int:
        if cpu is not None:
            w = self._where(cpu)
            return 0 if w is None else w[0].nr_records(cpu - w[1])
        return sum(tf.nr_records() for tf in self.files)

    def losses(self, cpu: int) -> list[tuple[int, int]]:
        w = self._where(cpu)
        return [] if w is None else w[0].losses(cpu - w[1])

    def __repr__(self) -> str:
        return f"<TraceSet {self.name!r} processes={self.pids} records={self.nr_records()}>"


def _moved(records: Iterator[_Record], cbase: int, ibase: int) -> Iterator[_Record]:
    """One process's records with its slots and symbol ids moved to the merged ones."""
    if not cbase and not ibase:
        yield from records
        return
    for (c, ts, typ, fl, a, b, cc, d, p) in records:
        if typ == TRACE_FN:
            yield (c + cbase, ts, typ, fl, a + ibase, b + ibase if b else 0, cc, d, p)
        elif typ in _NAMED_BY_IP and a:
            yield (c + cbase, ts, typ, fl, a + ibase, b, cc, d, p)
        else:
            yield (c + cbase, ts, typ, fl, a, b, cc, d, p)


def open_traces(path: str | os.PathLike[str], pids: frozenset[int] | set[int] | None = None
                ) -> TraceFile | TraceSet:
    """The trace at ``path`` with the files of the processes it followed (a TraceFile
    when there are none); ``pids``: only those processes.  Raises TraceFileError for
    a first file that cannot be read, or no process of ``pids``."""
    name = os.fsdecode(path)
    try:
        first = TraceFile.open(name)
    except OSError as e:
        raise TraceFileError(f"{name}: {e.strerror or e}") from None
    run = first.header.get("run")
    files = [first]
    bad = []
    if run:
        for p in child_files(name):
            try:
                tf = TraceFile.open(p)
            except TraceFileError as e:
                bad.append(f"{p}: left out: {e}")
                continue
            except OSError as e:
                bad.append(f"{p}: left out: {e.strerror or e}")
                continue
            if tf.header.get("run") == run:
                files.append(tf)
    if pids:
        chosen = [tf for tf in files if int(tf.header.get("pid") or 0) in pids]
        if not chosen:
            have = ", ".join(str(tf.header.get("pid")) for tf in files)
            raise TraceFileError(f"{name}: no process {', '.join(map(str, sorted(pids)))} "
                                 f"in this trace (its processes: {have})")
        files = chosen
    if len(files) == 1 and not bad:
        return files[0]
    return TraceSet(files, bad)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
