"""Reading a trace file: :class:`TraceFile`.

A file cut off at any byte (the recorder crashed or was killed) still reads up
to its last whole block; damage inside the file is reported as
:class:`TraceFileError` naming the file, the byte offset and what is wrong.
"""

from __future__ import annotations

import heapq
import json
import mmap
import os
from collections import namedtuple
from collections.abc import Iterator
from operator import itemgetter
# typing is not imported at run time; annotations are strings
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from ..errors import TraceFileError
from .blocks import (BLOCK_HEAD, BLOCK_OVERHEAD, CRC, FILE_HEAD, MAGIC, MAX_BLOCK_LEN,
                    PAY_INT, PAY_JSON, PAY_STR, RECORD, TAG_CHUNK, TAG_CHUNK_Z, TAG_END,
                    TAG_HEADER, TAG_INDEX, TAG_STATS, TAG_SYMBOLS, TAG_THREAD,
                    TF_HAS_PAYLOAD, VERSION, crc32, dec_text, zstd_module)
from .codec import CodecError, decode as _decode, get_uvarint

__all__ = ["TraceFile", "TraceFileError"]

_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
# A page fault on a file mapping maps the cached pages around it too ("fault-around":
# the aligned 64 KB around the fault, by default): reading a block maps the end of the
# one before it back, already read and given back, and it would stay mapped (resident)
# to the end.  So what is given back reaches this far behind a block.  Not ahead: the
# next block is read next, and its pages dropped now would be faulted in again.
_FAULT_AROUND = 1 << 16



# One CHNK/CHKZ block, found by the first pass: where its encoded records and payloads
# are in the file (start..end: varint body length, body, payloads; for CHKZ the zstd
# frame of those, raw_size bytes once decompressed); they are read when the records
# are (see TraceFile).
_Chunk = namedtuple("_Chunk", "first_seq nrecords lost start end raw_size")


class TraceFile:
    """A trace file, read in two passes that never hold it whole in memory.

    The first pass (at open) checks every block and reads the small ones (header,
    symbols, threads, stats); chunks are only located.  ``records()`` then reads the
    chunks of each ring buffer in order, one at a time, merging buffers by timestamp.
    A file opened with ``open`` is mapped, and what has been read is handed back to
    the system as the passes go (a 13 GB trace is reported in constant memory).

    ``truncated`` is True when the file ends inside a block or without an END
    block (the recorder did not finish); everything up to the last whole block
    is available.  ``complete`` is True when the END block was read.
    """

    header: dict[str, Any]
    symbols: dict[int, tuple[str, str, int]]
    threads: dict[int, tuple[int, str]]
    stats: dict[str, Any] | None
    truncated: bool
    complete: bool
    #: Byte offset just past the last whole block that was read.
    end_offset: int
    name: str

    def __init__(self, data: bytes | mmap.mmap, name: str = "<memory>") -> None:
        self.name = name
        self.header = {}
        self.symbols = {}
        self.threads = {}
        self.stats = None
        self.truncated = False
        self.complete = False
        self.end_offset = 0
        # cpu -> each chunk's (first, last) record time, from the INDX block (None:
        # the file has none, cut short or older)
        self.times: dict[int, list[tuple[int, int]]] | None = None
        self._data = data
        self._chunks: dict[int, list[_Chunk]] = {}
        self._files: list[str] = []
        self._parse(memoryview(data))

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> TraceFile:
        """Check the whole file and index its chunks; raise TraceFileError if it is
        damaged.  The file is mapped, not read into memory."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return cls(b"", os.fsdecode(path))
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return cls(data, os.fsdecode(path))

    def _release(self, start: int, end: int) -> None:
        """The pages of [start, end) of a mapped file are read: give them back (they
        are the file's, the system reads them again if needed)."""
        data = self._data
        if isinstance(data, mmap.mmap) and _MADV_DONTNEED is not None:
            start = max(0, start - _FAULT_AROUND)
            start -= start % mmap.PAGESIZE
            if end < len(data):
                end -= end % mmap.PAGESIZE      # its last page is the next block's too
            if end - start >= mmap.PAGESIZE:
                try:
                    data.madvise(_MADV_DONTNEED, start, end - start)
                except (OSError, ValueError):
                    pass

    @classmethod
    def frombytes(cls, data: bytes | bytearray | memoryview, name: str = "<memory>") -> TraceFile:
        """Parse a trace file held in memory (``name`` is used in error messages)."""
        return cls(bytes(data), name)

    # -- queries ----------------------------------------------------------

    @property
    def cpus(self) -> list[int]:
        """Ring buffers that have chunks or a thread entry, in ascending order."""
        return sorted(set(self._chunks) | set(self.threads))

    def records(self, cpu: int | None = None) -> Iterator[tuple[int, int, int, int, int, int, int, int, Any]]:
        """Yield ``(cpu, ts, type, flags, a, b, c, d, payload)``.

        With ``cpu=None`` all buffers are merged by timestamp; the merge is
        stable: records of one buffer keep their order, and equal timestamps
        of different buffers come out in ascending cpu order.
        """
        if cpu is not None:
            return self._cpu_records(cpu)
        cpus = sorted(self._chunks)
        if len(cpus) == 1:
            return self._cpu_records(cpus[0])
        return heapq.merge(*(self._cpu_records(c) for c in cpus), key=itemgetter(1))

    def lost(self, cpu: int | None = None) -> int:
        """Records dropped by the ring buffer(s), as reported in the chunks."""
        return sum(ch.lost for ch in self._iter_chunks(cpu))

    def nr_records(self, cpu: int | None = None) -> int:
        return sum(ch.nrecords for ch in self._iter_chunks(cpu))

    def first_time(self) -> int | None:
        """The first record's time, from the index (INDX): None without one."""
        if self.times is None:
            return None
        return min((first for cpu, times in self.times.items()
                    for (first, _), ch in zip(times, self._chunks[cpu]) if ch.nrecords),
                   default=0)

    def losses(self, cpu: int) -> list[tuple[int, int]]:
        """Where ring buffer ``cpu`` dropped records: (index, in ``records(cpu)``, of
        the first record after the drop, records dropped) for each chunk that says
        so, in order."""
        out = []
        n = 0
        for ch in self._chunks.get(cpu, ()):
            if ch.lost:
                out.append((n, ch.lost))
            n += ch.nrecords
        return out

    def __repr__(self) -> str:
        state = "complete" if self.complete else "truncated"
        return (
            f"<TraceFile {self.name!r} {state} cpus={self.cpus} "
            f"records={self.nr_records()} symbols={len(self.symbols)}>"
        )

    def _iter_chunks(self, cpu: int | None) -> Iterator[_Chunk]:
        if cpu is not None:
            yield from self._chunks.get(cpu, ())
        else:
            for chunks in self._chunks.values():
                yield from chunks

    def _cpu_records(self, cpu: int) -> Iterator[tuple[int, int, int, int, int, int, int, int, Any]]:
        unpack = RECORD.iter_unpack
        mv = memoryview(self._data)
        for ch in self._chunks.get(cpu, ()):
            inner = self._inner(mv, ch)
            blen, p = get_uvarint(inner, 0)      # checked by the first pass / _inner
            try:
                records = _decode(inner[p:p + blen], ch.nrecords)
            except CodecError as e:
                what = "CHKZ" if ch.raw_size else "CHNK"
                raise self._error(ch.start, f"{what} block: bad records ({e})") from None
            pl = self._payloads(inner[p + blen:], ch) if p + blen < len(inner) else None
            if pl is None:
                # The common case: no per-record work beyond building the tuple.
                for ts, ty, fl, a, b, c, d in unpack(records):
                    yield (cpu, ts, ty, fl, a, b, c, d, None)
            else:
                get = pl.get
                for i, (ts, ty, fl, a, b, c, d) in enumerate(unpack(records)):
                    yield (cpu, ts, ty, fl, a, b, c, d, get(i) if fl & TF_HAS_PAYLOAD else None)
            del records, inner
            self._release(ch.start, ch.end)

    def record_blocks(self, cpu: int | None = None, payloads: bool = False,
                      since: int | None = None, until: int | None = None
                      ) -> Iterator[tuple[Any, ...]]:
        """Every chunk's records, decoded, one thread slot after another (not merged
        by time; ``cpu``: that slot's only): ``(cpu, lost, records, 0)``, ``lost``
        being the records the buffer dropped before these and ``records`` the 32-byte
        records (RECORD) without their payloads; with ``payloads``, a fifth field: the
        chunk's payloads as the file encodes them (b"" for none).  The native walks
        read this (TraceSet's fourth field is its symbol id base).  ``since`` and
        ``until``: blocks the file's index (INDX) says hold no record of that window
        are left out, undecoded (all are read from a file without one), unless they
        say records were lost before them."""
        mv = memoryview(self._data)
        # the index's times when a window is asked for (else None: every block is read)
        indexed = self.times if since is not None or until is not None else None
        for cpu in (sorted(self._chunks) if cpu is None else [cpu]):
            if cpu not in self._chunks:
                continue
            times = indexed.get(cpu, ()) if indexed is not None else ()
            for k, ch in enumerate(self._chunks[cpu]):
                if times:
                    first, last = times[k]
                    if until is not None and first > until:
                        break               # a slot's blocks are in time order
                    if since is not None and last < since and not ch.lost:
                        continue
                inner = self._inner(mv, ch)
                blen, p = get_uvarint(inner, 0)
                try:
                    records = _decode(inner[p:p + blen], ch.nrecords)
                except CodecError as e:
                    what = "CHKZ" if ch.raw_size else "CHNK"
                    raise self._error(ch.start, f"{what} block: bad records ({e})") from None
                if payloads:
                    yield cpu, ch.lost, records, 0, bytes(inner[p + blen:])
                else:
                    yield cpu, ch.lost, records, 0
                del inner
                self._release(ch.start, ch.end)

    def _inner(self, mv: memoryview, ch: _Chunk) -> memoryview:
        """A chunk's varint body length, encoded records and payloads."""
        if not ch.raw_size:
            return mv[ch.start:ch.end]
        zstandard = zstd_module()
        if zstandard is None:
            raise TraceFileError(f"{self.name}: the file is compressed; reading it needs the "
                                 "zstandard package: pip install fntrace[compress]")
        try:
            raw = zstandard.ZstdDecompressor().decompress(
                bytes(mv[ch.start:ch.end]), max_output_size=ch.raw_size)
        except zstandard.ZstdError as e:
            raise self._error(ch.start, f"CHKZ block: cannot decompress ({e})") from None
        if len(raw) != ch.raw_size:
            raise self._error(ch.start, f"CHKZ block: {len(raw)} bytes decompressed, "
                                        f"{ch.raw_size} announced")
        inner = memoryview(raw)
        self._check_body(inner, ch.nrecords, ch.start, "CHKZ block")
        return inner

    def _check_body(self, inner: memoryview, n: int, offset: int, what: str) -> None:
        try:
            blen, p = get_uvarint(inner, 0)
        except CodecError as e:
            raise self._error(offset, f"{what}: bad records length ({e})") from None
        if p + blen > len(inner):
            raise self._error(offset, f"{what}: records length {blen} runs past the end "
                                      "of the block")
        # a file record is at least 2 bytes and stands for at most 2 ring-buffer records
        if n > blen:
            raise self._error(offset, f"{what}: impossible record count {n} for "
                                      f"{blen} bytes of records")

    def _payloads(self, tail: memoryview, ch: _Chunk) -> dict[int, Any]:
        """A chunk's payloads, parsed when its records are read."""
        at = ch.start
        what = "CHKZ block" if ch.raw_size else "CHNK block"
        pl: dict[int, Any] = {}
        n, size = ch.nrecords, len(tail)
        p, idx = 0, -1
        try:
            while p < size:
                gap, p = get_uvarint(tail, p)
                idx += gap + 1
                if idx >= n or p >= size:
                    raise self._error(at, f"{what}: bad payload entry (record {idx} of {n})")
                kind = tail[p]
                p += 1
                if kind == PAY_INT:
                    v, p = get_uvarint(tail, p)
                    pl[idx] = (v >> 1) ^ -(v & 1)
                    continue
                if kind != PAY_STR and kind != PAY_JSON:
                    raise self._error(at, f"{what}: bad payload kind {kind} (record {idx})")
                ln, p = get_uvarint(tail, p)
                if p + ln > size:
                    raise self._error(at, f"{what}: payload of record {idx} runs past the "
                                          "end of the block")
                raw = tail[p:p + ln]
                p += ln
                if kind == PAY_STR:
                    pl[idx] = dec_text(raw)
                else:
                    try:
                        pl[idx] = json.loads(bytes(raw))
                    except ValueError as e:
                        raise self._error(at, f"{what}: bad payload JSON ({e})") from None
        except CodecError as e:
            raise self._error(at, f"{what}: bad payload entry ({e})") from None
        except UnicodeDecodeError as e:
            raise self._error(at, f"{what}: bad payload text ({e})") from None
        return pl

    # -- parsing ----------------------------------------------------------

    def _error(self, offset: int, what: str) -> TraceFileError:
        return TraceFileError(f"{self.name}: offset {offset}: {what}")

    def _parse(self, mv: memoryview) -> None:
        size = len(mv)
        if size < len(MAGIC):
            if bytes(mv) == MAGIC[:size]:
                raise self._error(size, "file ends inside the magic number" if size else "empty file")
            raise self._error(0, "bad magic: not an fntrace trace file")
        if bytes(mv[: len(MAGIC)]) != MAGIC:
            raise self._error(0, f"bad magic {bytes(mv[:len(MAGIC)])!r}: not an fntrace trace file")
        if size < FILE_HEAD.size:
            raise self._error(size, "file ends inside the version number")
        _, version = FILE_HEAD.unpack_from(mv)
        if version != VERSION:
            why = (" (written by an older fntrace: record the program again)"
                   if version < VERSION else "")
            raise self._error(len(MAGIC), f"unsupported trace file version {version}{why}; "
                                          f"this fntrace reads version {VERSION}")

        pos = FILE_HEAD.size
        self.end_offset = pos
        first = True
        while True:
            block = self._next_block(mv, pos)
            if block is None:
                if first:
                    raise self._error(pos, "file ends inside the HEAD block")
                self.truncated = True
                return
            tag, payload, end = block
            if first and tag != TAG_HEADER:
                raise self._error(pos, f"first block is {tag!r}, expected HEAD")
            if not first and tag == TAG_HEADER:
                raise self._error(pos, "second HEAD block")
            first = False
            body = pos + BLOCK_HEAD.size  # file offset of the payload, for messages
            if tag == TAG_CHUNK or tag == TAG_CHUNK_Z:
                self._parse_chunk(payload, body, tag == TAG_CHUNK_Z)
            elif tag == TAG_SYMBOLS:
                self._parse_symbols(payload, body)
            elif tag == TAG_THREAD:
                self._parse_thread(payload, body)
            elif tag == TAG_HEADER:
                self.header = self._parse_json_dict(payload, body, "HEAD")
            elif tag == TAG_STATS:
                self.stats = self._parse_json_dict(payload, body, "STAT")
            elif tag == TAG_INDEX:
                self._parse_index(payload, body)
            elif tag == TAG_END:
                if end != size:
                    raise self._error(end, f"{size - end} bytes of data after the END block")
                self.end_offset = end
                self.complete = True
                return
            del payload
            self._release(pos, end)        # checked, and what it holds is kept
            # Unknown tags with a good checksum are skipped: later writers may
            # add optional blocks without breaking older readers.
            self.end_offset = pos = end

    def _next_block(self, mv: memoryview, pos: int) -> tuple[bytes, memoryview, int] | None:
        """Return (tag, payload, end offset) of the block at pos, None if the file ends inside it."""
        size = len(mv)
        if pos + BLOCK_HEAD.size > size:
            return None
        tag, length = BLOCK_HEAD.unpack_from(mv, pos)
        if tag == b"\0\0\0\0" and not bytes(mv[pos:]).strip(b"\0"):
            # Tag 0 is never written: a zero-filled tail is what some file
            # systems leave after a crash, so it reads as a cut, not damage.
            return None
        if tag == TAG_END and length != 0:
            raise self._error(pos + 4, f"END block with length {length} (must be 0)")
        if length > MAX_BLOCK_LEN:
            raise self._error(pos + 4, f"impossible block length {length} (limit {MAX_BLOCK_LEN})")
        end = pos + BLOCK_OVERHEAD + length
        if end > size:
            if self._ends_with_end_block(mv):
                raise self._error(
                    pos + 4,
                    f"{bytes(tag)!r} block length {length} runs past the end of a complete file",
                )
            return None
        (stored,) = CRC.unpack_from(mv, end - CRC.size)
        computed = crc32(mv[pos : end - CRC.size])
        if stored != computed:
            raise self._error(
                pos,
                f"{tag!r} block: checksum mismatch (stored {stored:#010x}, computed {computed:#010x})",
            )
        return bytes(tag), mv[pos + BLOCK_HEAD.size : end - CRC.size], end

    @staticmethod
    def _ends_with_end_block(mv: memoryview) -> bool:
        # A cut file cannot end in a valid END block; if one is there, a block
        # that runs past the end of the file has a damaged length instead.
        n = BLOCK_OVERHEAD
        if len(mv) < FILE_HEAD.size + n:
            return False
        tail = mv[len(mv) - n :]
        # (struct's values are Any to the checker)
        tag: bytes
        length: int
        crc: int
        tag, length = BLOCK_HEAD.unpack_from(tail)
        (crc,) = CRC.unpack_from(tail, BLOCK_HEAD.size)
        return tag == TAG_END and length == 0 and crc == crc32(tail[: BLOCK_HEAD.size])

    def _parse_json_dict(self, payload: memoryview, offset: int, what: str) -> dict[str, Any]:
        try:
            obj = json.loads(bytes(payload))
        except ValueError as e:
            raise self._error(offset, f"{what} block: bad JSON ({e})") from None
        if not isinstance(obj, dict):
            raise self._error(offset, f"{what} block: expected a JSON object, got {type(obj).__name__}")
        return obj

    def _varints(self, payload: memoryview, p: int, n: int, offset: int,
                 what: str) -> tuple[list[int], int]:
        out = []
        try:
            for _ in range(n):
                v, p = get_uvarint(payload, p)
                out.append(v)
        except CodecError as e:
            raise self._error(offset + p, f"{what}: {e}") from None
        return out, p

    def _parse_chunk(self, payload: memoryview, offset: int, compressed: bool) -> None:
        what = "CHKZ block" if compressed else "CHNK block"
        (cpu, n, first_seq, lost), p = self._varints(
            payload, 0, 4, offset, f"{what} header too short")
        size = 0
        if compressed:
            if zstd_module() is None:
                raise TraceFileError(f"{self.name}: the file is compressed; reading it needs "
                                     "the zstandard package: pip install fntrace[compress]")
            (size,), p = self._varints(payload, p, 1, offset, f"{what} header too short")
            if not 0 < size <= MAX_BLOCK_LEN:
                raise self._error(offset, f"{what}: impossible raw size {size}")
        else:
            self._check_body(payload[p:], n, offset, what)
        self._chunks.setdefault(cpu, []).append(
            _Chunk(first_seq, n, lost, offset + p, offset + len(payload),
                   size if compressed else 0))

    def _parse_index(self, payload: memoryview, offset: int) -> None:
        """INDX: each chunk's first and last time, as ``times[cpu]``, beside
        ``_chunks[cpu]``; an index that does not list the chunks read is damage."""
        what = "INDX block: runs past the end of the block"
        (count,), p = self._varints(payload, 0, 1, offset, what)
        times: dict[int, list[tuple[int, int]]] = {}
        prev = 0
        seen: dict[int, int] = {}
        for _ in range(count):
            (cpu, n, first, span), p = self._varints(payload, p, 4, offset, what)
            first = prev + ((first >> 1) ^ -(first & 1))
            prev = first
            k = seen.get(cpu, 0)
            chunks = self._chunks.get(cpu, ())
            if k >= len(chunks) or chunks[k].nrecords != n:
                raise self._error(offset, f"INDX block: does not list the chunks of "
                                          f"thread slot {cpu} as they are")
            seen[cpu] = k + 1
            times.setdefault(cpu, []).append((first, first + span))
        if p != len(payload) or any(seen.get(c, 0) != len(v) for c, v in self._chunks.items()):
            raise self._error(offset, "INDX block: does not list the chunks as they are")
        self.times = times

    def _parse_thread(self, payload: memoryview, offset: int) -> None:
        (cpu, native_id, nlen), p = self._varints(payload, 0, 3, offset, "THRD block")
        if p + nlen != len(payload):
            raise self._error(offset, f"THRD block: impossible name length {nlen}")
        self.threads[cpu] = (native_id, dec_text(payload[p:]))

    def _parse_symbols(self, payload: memoryview, offset: int) -> None:
        size = len(payload)
        what = "SYMS block: runs past the end of the block"
        (nfiles,), p = self._varints(payload, 0, 1, offset, what)
        for _ in range(nfiles):
            (flen,), p = self._varints(payload, p, 1, offset, what)
            if p + flen > size:
                raise self._error(offset + p, "SYMS block: file name runs past the end of the block")
            self._files.append(dec_text(payload[p : p + flen]))
            p += flen
        (nsyms,), p = self._varints(payload, p, 1, offset, what)
        files = self._files
        for _ in range(nsyms):
            (ip, line, fidx, nlen), q = self._varints(payload, p, 4, offset, what)
            if fidx >= len(files):
                raise self._error(offset + p, f"SYMS block: symbol {ip} refers to unknown file #{fidx}")
            p = q
            if p + nlen > size:
                raise self._error(offset + p, "SYMS block: symbol name runs past the end of the block")
            self.symbols[ip] = (dec_text(payload[p : p + nlen]), files[fidx], line)
            p += nlen
        if p != size:
            raise self._error(offset + p, f"SYMS block: {size - p} stray bytes after the last symbol")


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
