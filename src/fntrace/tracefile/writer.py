"""Writing a trace file: :class:`TraceFileWriter`.

Blocks are framed as blocks.py says; a chunk of ring-buffer records becomes one
CHNK (or CHKZ) block in codec.py's encoding, its -A/-R payloads packed after it.
Encoding is the native twin's, so a chunk costs no Python object per record.  The
writer runs on its own thread while the program is traced (sink.py): nothing here
may call code a filter could select.
"""

from __future__ import annotations

import io
from array import array
import os
import struct
import threading
from collections.abc import Iterable, Mapping
from operator import itemgetter
# typing is not imported at run time (the recorder's import cost); annotations are strings
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import IO, Any, BinaryIO

from .. import _env
from ..outfile import create as create_output
from ..errors import TraceFileError
from ..record_format import OFFSETS
from ..ring_buffer import payloads_by_seq
from .blocks import (BLOCK_HEAD, COMPRESS_HINT, CRC, FILE_HEAD, MAGIC, MAX_BLOCK_LEN,
                    PAY_INT, PAY_JSON, PAY_STR, RECORD_SIZE, RECORD_TIME, TAG_CHUNK,
                    TAG_CHUNK_Z, TAG_END, TAG_HEADER, TAG_INDEX, TAG_STATS, TAG_SYMBOLS,
                    TAG_THREAD, TF_HAS_PAYLOAD, VERSION, ZSTD_LEVEL, crc32, enc_text,
                    zstd_module)
from .codec import encode as _encode, put_uvarint

__all__ = ["TraceFileWriter", "json_text"]

_native = _env.native()  # type: ignore[no-untyped-call]  # _env's is not annotated
_pack_native = getattr(_native, "pack_payloads", None) if _native is not None else None
_FLAGS = struct.Struct("<H")
_FLAGS_OFFSET = OFFSETS["flags"]
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
            b = enc_text(obj)
            out.append(PAY_STR)
            put(out, len(b))
            out += b
        elif t is int and -_I64 <= obj < _I64:
            out.append(PAY_INT)
            put(out, (obj << 1) if obj >= 0 else ((-obj) << 1) - 1)
        else:
            b = _dumps(obj)
            out.append(PAY_JSON)
            put(out, len(b))
            out += b
    return bytes(out)


def _py_payload_tails(mv: bytes | bytearray | memoryview, first_seq: int, payloads: Mapping[int, Any] | list[Any],
                      step: int) -> list[bytes]:
    """The payload bytes of each ``step`` records of a chunk (b"" for a piece without).

    Every payload is checked first: its record is in the chunk and flagged
    TF_HAS_PAYLOAD.  The native twin (``_native.pack_payloads``) gives the same bytes
    and raises the same errors.
    """
    mv = memoryview(mv)
    n = mv.nbytes // RECORD_SIZE
    per_piece: list[list[list[Any]]] = [[] for _ in range(max(1, -(-n // step)))]
    for seq, obj in payloads_by_seq(mv, first_seq, payloads).items():
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


def _payload_tails(mv: bytes | bytearray | memoryview, first_seq: int, payloads: Mapping[int, Any] | list[Any],
                   step: int) -> list[bytes]:
    # The writer thread packs every -A/-R payload of the trace: in C when it is built
    # (str and int there, anything else through _dumps).  None back means a key the C
    # code does not take (not an int): the Python twin says what it means.
    if _pack_native is not None and type(payloads) in (dict, list):
        # (the checker sees the native module's functions as Any; this is _native.pyi's type)
        tails: list[bytes] | None = _pack_native(mv, first_seq, payloads, step, _dumps)
        if tails is not None:
            return tails
    return _py_payload_tails(mv, first_seq, payloads, step)


def _py_varints(*vals: int) -> bytes:
    top = max(vals)
    if top < 0x80:
        return bytes(vals)          # (each its own byte: most block heads; < 0: ValueError)
    if top >> 64:
        raise ValueError("varints: a value out of range(0, 2**64)")
    out = bytearray()
    for v in vals:
        put_uvarint(out, v)
    return bytes(out)


# Every block's head is made of these (and a thread's native id, the index's times are
# several bytes each): the native twin when it is built.
_varints: Callable[..., bytes] = getattr(_native, "varints", None) or _py_varints


def _py_block(tag: bytes, *parts: bytes | memoryview) -> bytes:
    """A block framed: its head, the parts joined, the CRC-32 of head and body."""
    body = b"".join(parts)
    head = BLOCK_HEAD.pack(tag, len(body))
    return b"".join((head, body, CRC.pack(crc32(body, crc32(head)))))


_block: Callable[..., bytes] = getattr(_native, "block", None) or _py_block


def _py_chunk_block(tag: bytes, cpu: int, records: bytes | bytearray | memoryview,
                    first_seq: int, lost: int, max_len: int) -> tuple[bytes, int, int]:
    """A CHNK block of records without payloads, framed, and its first and last record's
    times (the index's entry)."""
    mv = memoryview(records)
    nbytes = mv.nbytes
    n = nbytes // RECORD_SIZE
    if nbytes % RECORD_SIZE or not n:
        raise ValueError(f"chunk_block: records length {nbytes} is not a positive "
                         f"multiple of {RECORD_SIZE}")
    body = _encode(mv)
    head = _varints(cpu, n, first_seq, lost)
    if len(head) + len(body) + 10 > max_len:
        raise ValueError("chunk payloads too large for one block")
    return (_block(tag, head, _varints(len(body)), body), RECORD_TIME.unpack_from(mv, 0)[0],
            RECORD_TIME.unpack_from(mv, nbytes - RECORD_SIZE)[0])


# A short-lived thread's records are one such block, made in one call by the native twin.
_chunk_block: Callable[..., tuple[bytes, int, int]] = (getattr(_native, "chunk_block", None)
                                                       or _py_chunk_block)

def _check_symbol(ip: int, line: int) -> None:
    if not 0 <= ip <= 0xFFFFFFFF:
        raise ValueError(f"symbol ip {ip} does not fit in u32")
    if not 0 <= line <= 0xFFFFFFFF:
        raise ValueError(f"symbol line {line} does not fit in u32")


# An INDX entry as the writer keeps it (an array("q")'s four items: cpu, records, first
# and last time).
_INDEX_ENTRY = struct.Struct("=4q")



# The writer runs on its own thread while the program is traced: it must not call
# library code a filter could select (json.dumps is json.encoder's Python code), nor the
# program's (a payload's __repr__).  So JSON is made here, from C building blocks only:
# fntrace's own code is never traced.
try:
    # (the C function json.encoder uses, without loading the json package: a
    # recording's start-up never decodes JSON)
    from _json import encode_basestring_ascii as _enc_json_str
except ImportError:                     # pragma: no cover - CPython always has _json
    from json.encoder import encode_basestring_ascii as _enc_json_str
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


_c_encode: Callable[[Any, int], Any] | None       # (obj, indent level) -> str parts
try:
    # json's C encoder, called directly: json.dumps would go through json.encoder's
    # Python methods.
    from _json import make_encoder as _c_make_encoder
    _c_encode = _c_make_encoder(None, _default, _enc_json_str, None, ":", ",", False,
                                False, True)
except (ImportError, TypeError):        # pragma: no cover - CPython always has _json
    _c_encode = None


def json_text(obj: Any) -> str:
    """``obj`` as compact ASCII JSON, made as the header is (json.loads reads it; a
    value JSON has no form for is its text), without loading the json package."""
    return _dumps(obj).decode("ascii")


def _dumps(obj: Any) -> bytes:
    if _c_encode is not None:
        try:
            return "".join(_c_encode(obj, 0)).encode("ascii")
        except (ValueError, TypeError, RecursionError):
            pass                        # an int too long for str(), say
    out: list[str] = []
    _json_parts(obj, out)
    return "".join(out).encode("ascii")



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
            zstandard = zstd_module()
            if zstandard is None:
                raise TraceFileError(COMPRESS_HINT)
            self._zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self._lock = threading.Lock()
        if isinstance(file, (str, bytes, os.PathLike)):
            self._file: IO[bytes] = create_output(os.fspath(file))   # 0600 (outfile.py)
            self._owns_file = True
        else:
            self._file = file
            self._owns_file = False
        self._raw = type(self._file) is io.FileIO
        self._closed = False
        # Set when a write failed part-way: the file then ends in a partial
        # block and anything appended after it would read as damage.
        self._broken: BaseException | None = None
        self._known_ips: set[int] = set()
        self._files: dict[str, int] = {}  # file name -> index in the file table
        # each chunk block written: cpu, records, first and last time (INDX), four
        # numbers an entry: an array, no object a chunk (the writer thread makes
        # nothing the program's gc.get_objects() could count: sink.py)
        self._index = array("q")
        # Symbols added and not written yet, as the SYMS block's parts: the new files'
        # entries and the symbols' (bytearrays and counts, no tuple a symbol: the
        # writer thread keeps nothing the program's gc.get_objects() could count)
        self._sym_files = bytearray()
        self._sym_nfiles = 0
        self._sym_body = bytearray()
        self._sym_n = 0
        # THRD blocks made and not written yet: they go out in the same write as the
        # next block (a thread's first chunk, most often), each write being one
        # release of the GIL, which the program's threads take for a while
        self._pending_blocks: list[bytes] = []
        try:
            with self._lock:
                self._write(FILE_HEAD.pack(MAGIC, VERSION))
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
            _check_symbol(ip, line)
            new.append((ip, str(name), str(filename), line))
        lock = self._lock
        lock.acquire()
        try:
            self._check_open()
            for sym in new:
                self._add_symbol(*sym)
        finally:
            lock.release()

    def add_symbol(self, ip: int, name: str, filename: str, line: int) -> None:
        """Queue one symbol (add_symbols of one, with no tuple or list made: the
        writer thread's, sink.py)."""
        _check_symbol(ip, line)
        lock = self._lock
        lock.acquire()
        try:
            self._check_open()
            self._add_symbol(ip, str(name), str(filename), line)
        finally:
            lock.release()

    def _add_symbol(self, ip: int, name: str, filename: str, line: int) -> None:
        # (the lock held)
        if ip in self._known_ips:
            return
        self._known_ips.add(ip)
        idx = self._files.get(filename)
        if idx is None:
            idx = self._files[filename] = len(self._files)
            f_b = enc_text(filename)
            self._sym_files += _varints(len(f_b))
            self._sym_files += f_b
            self._sym_nfiles += 1
        name_b = enc_text(name)
        self._sym_body += _varints(ip, line, idx, len(name_b))
        self._sym_body += name_b
        self._sym_n += 1

    def add_thread(self, cpu: int, native_id: int, name: str) -> None:
        """Describe the thread behind ring buffer ``cpu``; a later call for the same cpu wins."""
        name_b = enc_text(name)
        block = _block(TAG_THREAD, _varints(cpu, native_id, len(name_b)), name_b)
        # (every short-lived thread comes here once: the checks inline, not called;
        # the lock without `with`, whose bound __exit__ the program would count)
        lock = self._lock
        lock.acquire()
        try:
            if self._closed or self._broken is not None:
                self._check_open()
            self._pending_blocks.append(block)
        finally:
            lock.release()

    def write_chunk(
        self,
        cpu: int,
        records: bytes | bytearray | memoryview,
        first_seq: int,
        lost: int = 0,
        payloads: Mapping[int, Any] | list[Any] | None = None,
    ) -> None:
        """Write 32-byte records of ring buffer ``cpu`` (compactly encoded).

        ``first_seq`` is the sequence number of the first record; ``payloads``
        maps the sequence number of each record flagged TF_HAS_PAYLOAD to its
        payload object (or lists them in the records' order, as a native ring
        buffer hands them: ring_buffer.payloads_by_seq).  ``lost`` counts records the buffer dropped before
        this chunk.
        """
        # (no memoryview of a bytearray or bytes: it and its managed buffer are two
        # objects the collector tracks; see _write_chunk_pieces)
        t = type(records)
        if t is bytearray or t is bytes:
            nbytes = len(records)
        else:
            records = _as_bytes_view(records)
            nbytes = records.nbytes
        if nbytes % RECORD_SIZE:
            raise ValueError(f"records length {nbytes} is not a multiple of {RECORD_SIZE}")
        n = nbytes // RECORD_SIZE
        if not payloads and 0 < n <= self.max_chunk_records and self._zc is None:
            # One block, no payloads (a short thread's last records, most chunks): the
            # loop below, unrolled, with nothing to split.
            block, first, last = _chunk_block(TAG_CHUNK, cpu, records, first_seq, lost,
                                              MAX_BLOCK_LEN)
            lock = self._lock
            lock.acquire()
            try:
                if self._closed or self._broken is not None:
                    self._check_open()
                ix = self._index
                ix.append(cpu)
                ix.append(n)
                ix.append(first)
                ix.append(last)
                if self._sym_n:
                    self._flush_symbols()
                pending = self._pending_blocks
                if pending:
                    pending.append(block)
                    block = b"".join(pending)
                    pending.clear()
                self._write(block)
                if not self._raw:           # (a raw file has nothing to flush)
                    self._file.flush()
            finally:
                lock.release()
            return
        # Encode records and payloads before taking the lock: they are the slow part.
        # Made in one call, so that its temporaries (lists) are gone before the write
        # lets the program run.
        data, entries = self._chunk_pieces(cpu, records, n, first_seq, lost, payloads)
        lock = self._lock
        lock.acquire()
        try:
            self._check_open()
            self._flush_pending()
            self._index.frombytes(entries)
            self._write(data)
            # A killed recorder should leave every written chunk in the file.
            self._file.flush()
        finally:
            lock.release()

    def _chunk_pieces(self, cpu: int, records: bytes | bytearray | memoryview, n: int,
                      first_seq: int, lost: int,
                      payloads: Mapping[int, Any] | list[Any] | None) -> tuple[bytearray, bytearray]:
        """A chunk's blocks, as the bytes to write, and their index entries (as the
        index array's bytes: an array is an object the collector tracks).

        The records' encoding lets the GIL go (the program runs on meanwhile): it is
        done first, with nothing made yet that the program's gc.get_objects() could
        count; a piece of a chunk split is a copy, not a memoryview (which is two
        such objects)."""
        step = max(1, int(self.max_chunk_records))
        npieces = max(1, -(-n // step))
        bodies: bytes | bytearray
        if npieces == 1:
            bodies = _encode(records)
        else:
            # the pieces' bodies one after another, and where each ends (8 bytes each)
            bodies = bytearray()
            ends = bytearray()
            for k in range(npieces):
                bodies += _encode(records[k * step * RECORD_SIZE:
                                          min(n, (k + 1) * step) * RECORD_SIZE])
                ends += len(bodies).to_bytes(8, "little")
        # (the native pack_payloads' list is untracked: compressing a block lets the GIL go)
        tails = _payload_tails(records, first_seq, payloads, step) if payloads else None
        out = bytearray()
        entries = bytearray()
        zc = self._zc
        prev_end = 0
        for k in range(npieces):
            start = k * step
            count = min(step, n - start)
            tail = tails[k] if tails else b""
            head = _varints(cpu, count, first_seq + start, lost if k == 0 else 0)
            if npieces == 1:
                body = bodies
            else:
                end = int.from_bytes(ends[8 * k: 8 * k + 8], "little")
                body = bytes(bodies[prev_end:end])
                prev_end = end
            if len(head) + len(body) + len(tail) + 10 > MAX_BLOCK_LEN:
                raise ValueError("chunk payloads too large for one block")
            # (the times without unpack_from's tuple)
            t_first = t_last = 0
            if count:
                o = start * RECORD_SIZE
                t_first = int.from_bytes(records[o:o + 8], "little")
                o = (start + count - 1) * RECORD_SIZE
                t_last = int.from_bytes(records[o:o + 8], "little")
            entries += _INDEX_ENTRY.pack(cpu, count, t_first, t_last)
            blen = _varints(len(body))
            if zc is None:
                out += _block(TAG_CHUNK, head, blen, body, tail)
            else:
                inner = b"".join((blen, body, tail))
                out += _block(TAG_CHUNK_Z, head, _varints(len(inner)), zc.compress(inner))
        return out, entries

    def flush(self) -> None:
        """Write the queued symbols and thread blocks, and flush the file."""
        with self._lock:
            self._check_open()
            self._flush_pending()
            self._file.flush()

    def close(self, stats: dict[str, Any] | None = None) -> None:
        """Write the queued symbols and thread blocks, INDX, STAT (if ``stats``) and
        END; flush.

        Closes the file if the writer opened it.  Calling close() again does nothing.
        """
        stats_b = None if stats is None else _dumps(stats)
        with self._lock:
            if self._closed:
                return
            try:
                if self._broken is None:
                    self._flush_pending()
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

    def _write(self, data: bytes | bytearray | memoryview) -> None:
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
        # one write a block: each write lets the GIL go, and a busy thread of the
        # program may keep it a switch interval before the writer has it again
        self._write(_block(tag, *parts))

    def _write_index(self) -> None:
        """INDX: each chunk block's cpu, records, first and last time, in the order
        the blocks are in the file; a reader skips the blocks a time window leaves
        out without decoding them (a file cut short has none, and is scanned)."""
        ix = self._index
        vals = [len(ix) // 4]
        add = vals.extend
        prev = 0
        for i in range(0, len(ix), 4):
            cpu, n, first, last = ix[i], ix[i + 1], ix[i + 2], ix[i + 3]
            # times as differences: first from the previous block's first, last from
            # this one's first (a slot's blocks are in time order, the slots not);
            # the first's zigzagged, inline (a program of many short threads has an
            # entry for each)
            d = first - prev
            add((cpu, n, d << 1 if d >= 0 else ((-d) << 1) - 1,
                 last - first if last >= first else 0))
            prev = first
        # one call for all of them (varints of many values, concatenated, are the
        # values' varints one after another)
        self._write_block(TAG_INDEX, _varints(*vals))

    def _flush_pending(self) -> None:
        """The symbols and the blocks waiting for the next block, written."""
        if self._sym_n:
            self._flush_symbols()
        pending = self._pending_blocks
        if pending:
            data = b"".join(pending)
            pending.clear()
            self._write(data)

    def _flush_symbols(self) -> None:
        """The symbols queued, as a SYMS block that goes out with the next write (made
        here, written there)."""
        if not self._sym_n:
            return
        payload = b"".join((_varints(self._sym_nfiles), self._sym_files,
                            _varints(self._sym_n), self._sym_body))
        # (before the THRD blocks waiting, as the symbols were written before)
        self._pending_blocks.insert(0, _block(TAG_SYMBOLS, payload))
        self._sym_files.clear()
        self._sym_body.clear()
        self._sym_nfiles = self._sym_n = 0


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
