"""The binary trace file written by ``fntrace record`` and read by ``fntrace report``.

The byte layout is described in ``docs/tracefile-format.md``.  In short: an
8-byte magic and a u32 version, then a sequence of self-checking blocks
(4-byte tag, u32 length, payload, u32 CRC-32).  Ring-buffer records travel in
CHNK blocks in a compact encoding (record_codec.py: delta timestamps, varints, a
leaf call's entry and return as one record; a few bytes a call), each block
decodable on its own; with ``compress=True`` each block is zstd-compressed (CHKZ).
Encoding is the native twin's, so a chunk costs no Python object per record.

A file cut off at any byte (the recorder crashed or was killed) still reads up
to its last whole block; damage inside the file is reported as
:class:`TraceFileError` naming the file, the byte offset and what is wrong.
"""

from __future__ import annotations

import heapq
import json
import mmap
import os
import struct
import threading
import zlib
from collections import namedtuple
from collections.abc import Iterable, Iterator, Mapping
from operator import itemgetter
# typing is not imported at run time (the recorder's import cost); annotations are strings
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO

from . import _env
from .errors import TraceFileError
from .outfile import create as create_output
from .record_codec import CodecError, decode as _decode, encode as _encode, get_uvarint, put_uvarint
from .record_format import FORMAT, HAS_PAYLOAD, OFFSETS, RECORD_SIZE

# zlib.crc32, or the native twin's (same values; folded with carry-less multiply where
# the CPU has it, several times faster on the megabytes of records a trace holds)
_native = _env.native()
_crc32 = _native.crc32 if _native is not None and hasattr(_native, "crc32") else zlib.crc32
_pack_native = getattr(_native, "pack_payloads", None) if _native is not None else None

__all__ = [
    "RECORD",
    "RECORD_SIZE",
    "TF_HAS_PAYLOAD",
    "MAGIC",
    "VERSION",
    "COMPRESS_HINT",
    "compress_available",
    "TraceFileWriter",
    "TraceFile",
    "TraceFileError",
]

#: One ring-buffer record: ts, type, flags, a, b, c, d (record_format.py).
RECORD = struct.Struct(FORMAT)
assert RECORD.size == RECORD_SIZE

#: Record flag: a payload object is attached to the record.
TF_HAS_PAYLOAD = HAS_PAYLOAD

MAGIC = b"FNTRACE\0"
#: 2: compact records (record_codec), varint tables, CHKZ.  1 held the raw 32-byte
#: records; it is refused (record the program again).
VERSION = 2

#: What to do when the zstandard package is missing.
COMPRESS_HINT = "zstd compression needs the zstandard package: pip install fntrace[compress]"

# Block tags are four ASCII bytes so that a hex dump of a trace file is legible
# and a damaged tag is unlikely to spell another valid one.
TAG_HEADER = b"HEAD"
TAG_SYMBOLS = b"SYMS"
TAG_THREAD = b"THRD"
TAG_CHUNK = b"CHNK"
TAG_CHUNK_Z = b"CHKZ"      # a CHNK whose encoded records and payloads are zstd-compressed
TAG_STATS = b"STAT"
TAG_INDEX = b"INDX"        # each chunk's records and first and last times, before STAT
TAG_END = b"END\0"

# A length above this cannot have been written by TraceFileWriter; reading it
# as "the file was cut short" would silently hide a damaged length field.
MAX_BLOCK_LEN = 1 << 30

_FILE_HEAD = struct.Struct("<8sI")  # magic, version
_BLOCK_HEAD = struct.Struct("<4sI")  # tag, payload length
_CRC = struct.Struct("<I")
_FLAGS = struct.Struct("<H")
_FLAGS_OFFSET = OFFSETS["flags"]
_ZSTD_LEVEL = 3


def _zstd():
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard


def compress_available() -> bool:
    """Can a file be written with ``compress=True`` (is zstandard installed)?"""
    return _zstd() is not None


# A payload in a CHNK block: varint index gap, a kind byte, the value.  Argument text
# and return values (str, int) are the bulk of a -A -R trace; anything else is JSON.
_PAY_STR, _PAY_INT, _PAY_JSON = 0, 1, 2
_I64 = 1 << 63


def _pack_payloads(pairs: list[list[Any]]) -> bytes:
    """[index, value] pairs, sorted by index, in the block's payload encoding."""
    out = bytearray()
    put = put_uvarint
    prev = -1
    for i, obj in pairs:
        put(out, i - prev - 1)
        prev = i
        t = type(obj)
        if t is str:
            b = _enc(obj)
            out.append(_PAY_STR)
            put(out, len(b))
            out += b
        elif t is int and -_I64 <= obj < _I64:
            out.append(_PAY_INT)
            put(out, (obj << 1) if obj >= 0 else ((-obj) << 1) - 1)
        else:
            b = _dumps(obj)
            out.append(_PAY_JSON)
            put(out, len(b))
            out += b
    return bytes(out)


def _py_payload_tails(mv: memoryview, first_seq: int, payloads: Mapping[int, Any],
                      step: int) -> list[bytes]:
    """The payload bytes of each ``step`` records of a chunk (b"" for a piece without).

    Every payload is checked first: its record is in the chunk and flagged
    TF_HAS_PAYLOAD.  The native twin (``_native.pack_payloads``) gives the same bytes
    and raises the same errors.
    """
    n = mv.nbytes // RECORD_SIZE
    per_piece: list[list[list[Any]]] = [[] for _ in range(max(1, -(-n // step)))]
    for seq, obj in payloads.items():
        i = seq - first_seq
        if not 0 <= i < n:
            raise ValueError(
                f"payload for seq {seq} is outside the chunk "
                f"(seqs {first_seq}..{first_seq + n - 1})"
            )
        (flags,) = _FLAGS.unpack_from(mv, i * RECORD_SIZE + _FLAGS_OFFSET)
        if not flags & TF_HAS_PAYLOAD:
            raise ValueError(f"payload for seq {seq} but the record has no TF_HAS_PAYLOAD flag")
        per_piece[i // step].append([i % step, obj])
    tails = []
    for pairs in per_piece:
        if pairs:
            pairs.sort(key=itemgetter(0))  # deterministic files for identical input
            tails.append(_pack_payloads(pairs))
        else:
            tails.append(b"")
    return tails


def _payload_tails(mv: memoryview, first_seq: int, payloads: Mapping[int, Any],
                   step: int) -> list[bytes]:
    # The writer thread packs every -A/-R payload of the trace: in C when it is built
    # (str and int there, anything else through _dumps).  None back means a key the C
    # code does not take (not an int): the Python twin says what it means.
    if _pack_native is not None and type(payloads) is dict:
        tails = _pack_native(mv, first_seq, payloads, step, _dumps)
        if tails is not None:
            return tails
    return _py_payload_tails(mv, first_seq, payloads, step)


def _varints(*vals: int) -> bytes:
    out = bytearray()
    for v in vals:
        put_uvarint(out, v)
    return bytes(out)


def _zigzag(v: int) -> int:
    return (v << 1) if v >= 0 else ((-v) << 1) - 1


# a record's time: its first field
_TS = struct.Struct("<Q")

_BLOCK_OVERHEAD = _BLOCK_HEAD.size + _CRC.size
_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
# A page fault on a file mapping maps the cached pages around it too ("fault-around":
# the aligned 64 KB around the fault, by default): reading a block maps the end of the
# one before it back, already read and given back, and it would stay mapped (resident)
# to the end.  So what is given back reaches this far behind a block.  Not ahead: the
# next block is read next, and its pages dropped now would be faulted in again.
_FAULT_AROUND = 1 << 16


# The writer runs on its own thread while the program is traced: it must not call
# library code a filter could select (json.dumps is json.encoder's Python code), nor the
# program's (a payload's __repr__).  So JSON is made here, from C building blocks only:
# fntrace's own code is never traced.
_enc_json_str = json.encoder.encode_basestring_ascii
_int_repr = int.__repr__
_float_repr = float.__repr__


def _big_int(v: int) -> str:
    # str() refuses ints over sys.get_int_max_str_digits(); a trace keeps their size.
    return f"<int of {v.bit_length()} bits>"


def _json_parts(obj: Any, out: list[str]) -> None:
    t = type(obj)
    if t is str:
        out.append(_enc_json_str(obj))
    elif obj is None:
        out.append("null")
    elif t is bool:
        out.append("true" if obj else "false")
    elif t is int:
        try:
            out.append(_int_repr(obj))
        except ValueError:
            out.append(_enc_json_str(_big_int(obj)))
    elif t is float:
        out.append(_float_repr(obj) if obj == obj and obj not in (_INF, -_INF)
                   else ("NaN" if obj != obj else ("Infinity" if obj > 0 else "-Infinity")))
    elif t is list or t is tuple:
        out.append("[")
        first = True
        for x in obj:
            if not first:
                out.append(",")
            first = False
            _json_parts(x, out)
        out.append("]")
    elif t is dict:
        out.append("{")
        first = True
        for k, v in obj.items():
            if not first:
                out.append(",")
            first = False
            out.append(_enc_json_str(k if type(k) is str else _safe_text(k)))
            out.append(":")
            _json_parts(v, out)
        out.append("}")
    elif isinstance(obj, os.PathLike):
        out.append(_enc_json_str(_safe_text(os.fspath(obj))))
    else:
        # A subclass of str or int is read at the C level; anything else is named, not
        # asked for its repr (that would be the program's code).
        if isinstance(obj, str):
            out.append(_enc_json_str(obj))
        elif isinstance(obj, int):
            _json_parts(int(_int_repr(obj)) if obj.bit_length() < 1000 else 0, out)
        else:
            out.append(_enc_json_str(_safe_text(obj)))


def _safe_text(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "surrogateescape")
    return f"<{type(obj).__module__}.{type(obj).__qualname__} object at {id(obj):#x}>"


_INF = float("inf")


def _default(obj: Any) -> Any:
    if isinstance(obj, os.PathLike):
        return _safe_text(os.fspath(obj))
    return _safe_text(obj)


try:
    # json's C encoder, called directly: json.dumps would go through json.encoder's
    # Python methods.
    from _json import make_encoder as _c_make_encoder
    _c_encode = _c_make_encoder(None, _default, _enc_json_str, None, ":", ",", False,
                                False, True)
except (ImportError, TypeError):        # pragma: no cover - CPython always has _json
    _c_encode = None


def _dumps(obj: Any) -> bytes:
    if _c_encode is not None:
        try:
            return "".join(_c_encode(obj, 0)).encode("ascii")
        except (ValueError, TypeError, RecursionError):
            pass                        # an int too long for str(), say
    out: list[str] = []
    _json_parts(obj, out)
    return "".join(out).encode("ascii")


def _enc(s: str) -> bytes:
    # surrogatepass: file names decoded with surrogateescape must round-trip.
    return s.encode("utf-8", "surrogatepass")


def _dec(b: bytes | memoryview) -> str:
    return bytes(b).decode("utf-8", "surrogatepass")


def _as_bytes_view(records: bytes | bytearray | memoryview) -> memoryview:
    mv = memoryview(records)
    if mv.format != "B" or mv.ndim != 1:
        # e.g. an array('Q') or a typed view of a ring buffer: length must
        # be counted in bytes.
        mv = mv.cast("B")
    return mv


class TraceFileWriter:
    """Write a trace file block by block.

    Every public method writes whole blocks under one lock, so several threads
    (e.g. one consumer per ring buffer) may share a writer.  Symbols handed to
    :meth:`add_symbols` are buffered and written in one SYMS block just before
    the next block of any other kind, which keeps them ahead of the first chunk
    that refers to them.
    """

    #: Chunks with more records are split into several CHNK blocks, which
    #: keeps blocks far below MAX_BLOCK_LEN and limits what a cut can lose.
    max_chunk_records: int = 1 << 16

    def __init__(self, file: str | os.PathLike[str] | BinaryIO, header: dict[str, Any],
                 compress: bool = False) -> None:
        if not isinstance(header, dict):
            raise TypeError(f"header must be a dict, not {type(header).__name__}")
        self._zc = None
        if compress:
            zstandard = _zstd()
            if zstandard is None:
                raise TraceFileError(COMPRESS_HINT)
            self._zc = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
        self._lock = threading.Lock()
        if isinstance(file, (str, bytes, os.PathLike)):
            self._file: BinaryIO = create_output(os.fspath(file))   # 0600 (outfile.py)
            self._owns_file = True
        else:
            self._file = file
            self._owns_file = False
        self._closed = False
        # Set when a write failed part-way: the file then ends in a partial
        # block and anything appended after it would read as damage.
        self._broken: BaseException | None = None
        self._known_ips: set[int] = set()
        self._files: dict[str, int] = {}  # file name -> index in the file table
        # each chunk block written: cpu, records, first and last time (INDX)
        self._index: list[tuple[int, int, int, int]] = []
        self._pending_syms: list[tuple[int, str, str, int]] = []
        try:
            with self._lock:
                self._write(_FILE_HEAD.pack(MAGIC, VERSION))
                self._write_block(TAG_HEADER, _dumps(header))
                self._file.flush()
        except BaseException:
            if self._owns_file:
                self._file.close()
            raise

    # -- public API -------------------------------------------------------

    def add_symbols(self, syms: Iterable[tuple[int, str, str, int]]) -> None:
        """Queue symbols ``(ip, name, filename, line)``; ips already written are skipped."""
        new = []
        for ip, name, filename, line in syms:
            if not 0 <= ip <= 0xFFFFFFFF:
                raise ValueError(f"symbol ip {ip} does not fit in u32")
            if not 0 <= line <= 0xFFFFFFFF:
                raise ValueError(f"symbol line {line} does not fit in u32")
            new.append((ip, str(name), str(filename), line))
        with self._lock:
            self._check_open()
            for sym in new:
                if sym[0] not in self._known_ips:
                    self._known_ips.add(sym[0])
                    self._pending_syms.append(sym)

    def add_thread(self, cpu: int, native_id: int, name: str) -> None:
        """Describe the thread behind ring buffer ``cpu``; a later call for the same cpu wins."""
        name_b = _enc(name)
        payload = _varints(cpu, native_id, len(name_b)) + name_b
        with self._lock:
            self._check_open()
            self._flush_symbols()
            self._write_block(TAG_THREAD, payload)

    def write_chunk(
        self,
        cpu: int,
        records: bytes | bytearray | memoryview,
        first_seq: int,
        lost: int = 0,
        payloads: Mapping[int, Any] | None = None,
    ) -> None:
        """Write 32-byte records of ring buffer ``cpu`` (compactly encoded).

        ``first_seq`` is the sequence number of the first record; ``payloads``
        maps the sequence number of each record flagged TF_HAS_PAYLOAD to its
        payload object.  ``lost`` counts records the buffer dropped before
        this chunk.
        """
        mv = _as_bytes_view(records)
        if mv.nbytes % RECORD_SIZE:
            raise ValueError(f"records length {mv.nbytes} is not a multiple of {RECORD_SIZE}")
        n = mv.nbytes // RECORD_SIZE
        step = max(1, int(self.max_chunk_records))
        npieces = max(1, -(-n // step))
        # Encode records and payloads before taking the lock: they are the slow part.
        tails = _payload_tails(mv, first_seq, payloads, step) if payloads else None
        blocks = []
        for k in range(npieces):
            start = k * step
            count = min(step, n - start)
            tail = tails[k] if tails else b""
            head = _varints(cpu, count, first_seq + start, lost if k == 0 else 0)
            body = _encode(mv[start * RECORD_SIZE : (start + count) * RECORD_SIZE])
            times = (_TS.unpack_from(mv, start * RECORD_SIZE)[0],
                     _TS.unpack_from(mv, (start + count - 1) * RECORD_SIZE)[0]) if count else (0, 0)
            blocks.append((head, _varints(len(body)), body, tail, (cpu, count, *times)))
            if len(head) + len(body) + len(tail) + 10 > MAX_BLOCK_LEN:
                raise ValueError("chunk payloads too large for one block")
        with self._lock:
            self._check_open()
            self._flush_symbols()
            for head, blen, body, tail, entry in blocks:
                self._index.append(entry)
                if self._zc is None:
                    self._write_block(TAG_CHUNK, head, blen, body, tail)
                else:
                    inner = b"".join((blen, body, tail))
                    self._write_block(TAG_CHUNK_Z, head, _varints(len(inner)),
                                      self._zc.compress(inner))
            # A killed recorder should leave every written chunk in the file.
            self._file.flush()

    def flush(self) -> None:
        """Write queued symbols and flush the file."""
        with self._lock:
            self._check_open()
            self._flush_symbols()
            self._file.flush()

    def close(self, stats: dict[str, Any] | None = None) -> None:
        """Write queued symbols, the STAT block (if ``stats``) and END; flush.

        Closes the file if the writer opened it.  Calling close() again does nothing.
        """
        stats_b = None if stats is None else _dumps(stats)
        with self._lock:
            if self._closed:
                return
            try:
                if self._broken is None:
                    self._flush_symbols()
                    self._write_index()
                    if stats_b is not None:
                        self._write_block(TAG_STATS, stats_b)
                    self._write_block(TAG_END)
                    self._file.flush()
            finally:
                self._closed = True
                if self._owns_file:
                    self._file.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> TraceFileWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals (called with the lock held) -----------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("trace file writer is closed")
        if self._broken is not None:
            raise ValueError(f"trace file writer failed earlier: {self._broken}") from self._broken

    def _write(self, data: bytes | memoryview) -> None:
        try:
            n = self._file.write(data)
            # Raw (unbuffered) files may write less than asked for.
            if n is not None and n < len(data):
                view = memoryview(data)
                while n < len(view):
                    w = self._file.write(view[n:])
                    if not w:
                        raise OSError("short write to trace file")
                    n += w
        except BaseException as e:
            self._broken = e
            raise

    def _write_block(self, tag: bytes, *parts: bytes | memoryview) -> None:
        length = sum(memoryview(p).nbytes for p in parts)
        head = _BLOCK_HEAD.pack(tag, length)
        crc = _crc32(head)
        for p in parts:
            crc = _crc32(p, crc)
        # one write a block: each write lets the GIL go, and a busy thread of the
        # program may keep it a switch interval before the writer has it again
        self._write(b"".join((head, *parts, _CRC.pack(crc))))

    def _write_index(self) -> None:
        """INDX: each chunk block's cpu, records, first and last time, in the order
        the blocks are in the file; a reader skips the blocks a time window leaves
        out without decoding them (a file cut short has none, and is scanned)."""
        parts = [_varints(len(self._index))]
        prev = 0
        for cpu, n, first, last in self._index:
            # times as differences: first from the previous block's first, last from
            # this one's first (a slot's blocks are in time order, the slots not)
            parts.append(_varints(cpu, n, _zigzag(first - prev), last - first
                                  if last >= first else 0))
            prev = first
        self._write_block(TAG_INDEX, b"".join(parts))

    def _flush_symbols(self) -> None:
        syms = self._pending_syms
        if not syms:
            return
        new_files = []
        out = []
        for ip, name, filename, line in syms:
            idx = self._files.get(filename)
            if idx is None:
                idx = self._files[filename] = len(self._files)
                new_files.append(filename)
            name_b = _enc(name)
            out.append(_varints(ip, line, idx, len(name_b)))
            out.append(name_b)
        parts = [_varints(len(new_files))]
        for f in new_files:
            f_b = _enc(f)
            parts.append(_varints(len(f_b)))
            parts.append(f_b)
        parts.append(_varints(len(syms)))
        payload = b"".join(parts) + b"".join(out)
        try:
            self._write_block(TAG_SYMBOLS, payload)
        except BaseException:
            # The writer is broken now anyway; keep the tables consistent.
            for f in new_files:
                del self._files[f]
            raise
        self._pending_syms = []


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

    def __init__(self, data: bytes, name: str = "<memory>") -> None:
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
                      since: int | None = None, until: int | None = None) -> Iterator[tuple]:
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
        window = self.times is not None and (since is not None or until is not None)
        for cpu in (sorted(self._chunks) if cpu is None else [cpu]):
            if cpu not in self._chunks:
                continue
            times = self.times.get(cpu, ()) if window else ()
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
        zstandard = _zstd()
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
                if kind == _PAY_INT:
                    v, p = get_uvarint(tail, p)
                    pl[idx] = (v >> 1) ^ -(v & 1)
                    continue
                if kind != _PAY_STR and kind != _PAY_JSON:
                    raise self._error(at, f"{what}: bad payload kind {kind} (record {idx})")
                ln, p = get_uvarint(tail, p)
                if p + ln > size:
                    raise self._error(at, f"{what}: payload of record {idx} runs past the "
                                          "end of the block")
                raw = tail[p:p + ln]
                p += ln
                if kind == _PAY_STR:
                    pl[idx] = _dec(raw)
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
        if size < _FILE_HEAD.size:
            raise self._error(size, "file ends inside the version number")
        _, version = _FILE_HEAD.unpack_from(mv)
        if version != VERSION:
            why = (" (written by an older fntrace: record the program again)"
                   if version < VERSION else "")
            raise self._error(len(MAGIC), f"unsupported trace file version {version}{why}; "
                                          f"this fntrace reads version {VERSION}")

        pos = _FILE_HEAD.size
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
            body = pos + _BLOCK_HEAD.size  # file offset of the payload, for messages
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
        if pos + _BLOCK_HEAD.size > size:
            return None
        tag, length = _BLOCK_HEAD.unpack_from(mv, pos)
        if tag == b"\0\0\0\0" and not bytes(mv[pos:]).strip(b"\0"):
            # Tag 0 is never written: a zero-filled tail is what some file
            # systems leave after a crash, so it reads as a cut, not damage.
            return None
        if tag == TAG_END and length != 0:
            raise self._error(pos + 4, f"END block with length {length} (must be 0)")
        if length > MAX_BLOCK_LEN:
            raise self._error(pos + 4, f"impossible block length {length} (limit {MAX_BLOCK_LEN})")
        end = pos + _BLOCK_OVERHEAD + length
        if end > size:
            if self._ends_with_end_block(mv):
                raise self._error(
                    pos + 4,
                    f"{bytes(tag)!r} block length {length} runs past the end of a complete file",
                )
            return None
        (stored,) = _CRC.unpack_from(mv, end - _CRC.size)
        computed = _crc32(mv[pos : end - _CRC.size])
        if stored != computed:
            raise self._error(
                pos,
                f"{tag!r} block: checksum mismatch (stored {stored:#010x}, computed {computed:#010x})",
            )
        return bytes(tag), mv[pos + _BLOCK_HEAD.size : end - _CRC.size], end

    @staticmethod
    def _ends_with_end_block(mv: memoryview) -> bool:
        # A cut file cannot end in a valid END block; if one is there, a block
        # that runs past the end of the file has a damaged length instead.
        n = _BLOCK_OVERHEAD
        if len(mv) < _FILE_HEAD.size + n:
            return False
        tail = mv[len(mv) - n :]
        tag, length = _BLOCK_HEAD.unpack_from(tail)
        (crc,) = _CRC.unpack_from(tail, _BLOCK_HEAD.size)
        return tag == TAG_END and length == 0 and crc == _crc32(tail[: _BLOCK_HEAD.size])

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
            if _zstd() is None:
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
        self.threads[cpu] = (native_id, _dec(payload[p:]))

    def _parse_symbols(self, payload: memoryview, offset: int) -> None:
        size = len(payload)
        what = "SYMS block: runs past the end of the block"
        (nfiles,), p = self._varints(payload, 0, 1, offset, what)
        for _ in range(nfiles):
            (flen,), p = self._varints(payload, p, 1, offset, what)
            if p + flen > size:
                raise self._error(offset + p, "SYMS block: file name runs past the end of the block")
            self._files.append(_dec(payload[p : p + flen]))
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
            self.symbols[ip] = (_dec(payload[p : p + nlen]), files[fidx], line)
            p += nlen
        if p != size:
            raise self._error(offset + p, f"SYMS block: {size - p} stray bytes after the last symbol")


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
