"""Ring-buffer records <-> the compact encoding of a trace file's CHNK block.

``encode(records)`` turns a run of 32-byte records (record_format) into a
self-contained byte string; ``decode(data, n)`` gives the same 32-byte records back,
bit for bit.  The byte picture is in docs/tracefile-format.md; in short::

    varint ts0, varint depth0, then one file record per ring-buffer record, except a
    function_graph entry immediately followed by its return (a leaf call): one record.
    file record = tag byte (record_format.FILE_*) + varints: the time since the
    previous record (zigzag), then the fields the kind does not imply.

A graph entry's depth is implied (one more than the last entry's, or the last return's),
a return's ip, depth and calltime are implied by the entry it closes when that entry is
in the same block, and a leaf is one record.  Anything the compact kinds cannot say
exactly is a RAW record with every field written: nothing is ever lost.

The writer thread encodes millions of records, so ``encode``/``decode`` are the native
twin's (``_native_encode.c``) when it is built; the functions here are the pure twin,
used with FNTRACE_PURE=1, and both give the same bytes (tests/test_record_codec.py).
"""
from __future__ import annotations

import struct

from .. import _env
from ..record_format import (
    FILE_EXPLICIT, FILE_KIND_MASK, FILE_LEAF, FILE_OVERRUN, FILE_PAY0, FILE_PAY1, FILE_RAW,
    FILE_RESERVED, FORMAT, HAS_PAYLOAD, RECORD_SIZE, TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT,
    TRACE_GRAPH_RET, TRACE_PRINT, TRACE_STACK,
)

# for the checker only (annotations are strings)
TYPE_CHECKING = False
if TYPE_CHECKING:
    _Bytes = bytes | bytearray | memoryview

__all__ = ["CodecError", "encode", "decode", "py_encode", "py_decode", "put_uvarint",
           "get_uvarint"]

_RECORD = struct.Struct(FORMAT)
_M64 = (1 << 64) - 1
_M32 = 0xFFFFFFFF
_TEXT_TYPES = (TRACE_PRINT, TRACE_STACK, TRACE_EVENT)


class CodecError(ValueError):
    """Encoded records that cannot be decoded (the message says why)."""


def put_uvarint(out: bytearray, v: int) -> None:
    """Append ``v`` (0 <= v < 2**64) as LEB128."""
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def get_uvarint(data: _Bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the LEB128 at ``pos``; CodecError if cut or too long."""
    v = shift = 0
    n = len(data)
    while True:
        if pos >= n:
            raise CodecError("varint runs past the end")
        byte = data[pos]
        pos += 1
        v |= (byte & 0x7F) << shift
        if byte < 0x80:
            if v > _M64:
                raise CodecError("varint above 64 bits")
            return v, pos
        shift += 7
        if shift >= 70:
            raise CodecError("varint longer than 10 bytes")


def _zz(delta: int) -> int:
    """A 64-bit wrapping difference as a zigzag varint value (small either way)."""
    delta &= _M64
    if delta >> 63:
        delta -= 1 << 64
    return (delta << 1) if delta >= 0 else ((-delta) << 1) - 1


def _unzz(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


def py_encode(records: _Bytes) -> bytes:
    """The compact encoding of ``records`` (a bytes-like of whole 32-byte records)."""
    mv = memoryview(records).cast("B")
    if mv.nbytes % RECORD_SIZE:
        raise ValueError(f"records length {mv.nbytes} is not a multiple of {RECORD_SIZE}")
    recs = list(_RECORD.iter_unpack(mv))
    n = len(recs)
    out = bytearray()
    if not n:
        return b""
    ts0 = recs[0][0]
    depth = 0
    for r in recs:
        if r[1] == TRACE_GRAPH_ENT:
            depth = r[4]
            break
    put_uvarint(out, ts0)
    put_uvarint(out, depth)
    prev = ts0
    stack: list[tuple[int, int, int]] = []
    put = put_uvarint
    app = out.append
    # Most values are below 128: one append, no call (this loop runs per record in
    # FNTRACE_PURE=1 recordings).
    i = 0
    while i < n:
        ts, ty, fl, a, b, c, d = recs[i]
        i += 1
        pay = FILE_PAY0 if fl & HAS_PAYLOAD else 0
        if fl & ~HAS_PAYLOAD:
            ty = -1                                     # RAW below
        dts = ts - prev
        z = (dts << 1) if 0 <= dts < 0x4000000000000000 else _zz(dts)
        if ty == TRACE_GRAPH_ENT and c == 0 and d == 0:
            if i < n:
                ts2, ty2, fl2, a2, b2, c2, d2 = recs[i]
                if (ty2 == TRACE_GRAPH_RET and not fl2 & ~HAS_PAYLOAD and a2 == a
                        and b2 == b and d2 == ts and ts2 >= ts):
                    tag = FILE_LEAF | pay | (FILE_PAY1 if fl2 else 0)
                    if b != depth:
                        tag |= FILE_EXPLICIT
                    if c2:
                        tag |= FILE_OVERRUN
                    app(tag)
                    app(z) if z < 0x80 else put(out, z)
                    dur = ts2 - ts
                    app(dur) if dur < 0x80 else put(out, dur)
                    app(a) if a < 0x80 else put(out, a)
                    if b != depth:
                        put(out, b)
                    if c2:
                        put(out, c2)
                    prev, depth = ts2, b
                    i += 1
                    continue
            app(TRACE_GRAPH_ENT | pay | (FILE_EXPLICIT if b != depth else 0))
            app(z) if z < 0x80 else put(out, z)
            app(a) if a < 0x80 else put(out, a)
            if b != depth:
                put(out, b)
            stack.append((a, b, ts))
            prev, depth = ts, b + 1
        elif ty == TRACE_GRAPH_RET:
            implied = bool(stack) and stack[-1] == (a, b, d)
            tag = TRACE_GRAPH_RET | pay | (0 if implied else FILE_EXPLICIT)
            if c:
                tag |= FILE_OVERRUN
            app(tag)
            app(z) if z < 0x80 else put(out, z)
            if not implied:
                put(out, a)
                put(out, b)
                put(out, _zz(ts - d))
            if c:
                put(out, c)
            while stack and stack[-1][1] >= b:
                stack.pop()
            prev, depth = ts, b
        elif ty == TRACE_FN and c == 0 and d == 0:
            app(TRACE_FN | pay)
            app(z) if z < 0x80 else put(out, z)
            app(a) if a < 0x80 else put(out, a)
            app(b) if b < 0x80 else put(out, b)
            prev = ts
        elif ty in _TEXT_TYPES and b == 0 and c == 0 and d == 0:
            app(ty | pay)
            put(out, z)
            put(out, a)
            prev = ts
        else:
            ty = recs[i - 1][1]
            app(FILE_RAW)
            put(out, z)
            for v in (ty, fl, a, b, c, d):
                put(out, v)
            prev = ts
    return bytes(out)


def py_decode(data: _Bytes, n: int) -> bytes:
    """The ``n`` 32-byte records ``data`` (py_encode's output) encodes."""
    mv = memoryview(data).cast("B")
    if n == 0:
        if mv.nbytes:
            raise CodecError(f"{mv.nbytes} bytes of records where none were announced")
        return b""
    out = bytearray(n * RECORD_SIZE)
    pack = _RECORD.pack_into
    get = get_uvarint
    size = mv.nbytes
    prev, pos = get(mv, 0)
    depth, pos = get(mv, pos)
    stack: list[tuple[int, int, int]] = []
    i = 0
    while i < n:
        if pos >= size:
            raise CodecError(f"records end after {i} of {n}")
        tag = mv[pos]
        pos += 1
        if tag & FILE_RESERVED:
            raise CodecError(f"record {i}: bad tag {tag:#04x}")
        kind = tag & FILE_KIND_MASK
        v, pos = get(mv, pos)
        ts = (prev + _unzz(v)) & _M64
        fl = 1 if tag & FILE_PAY0 else 0
        if kind == FILE_LEAF:
            if i + 2 > n:
                raise CodecError(f"record {i}: a leaf call where one record is left")
            dur, pos = get(mv, pos)
            a, pos = get(mv, pos)
            b = depth
            if tag & FILE_EXPLICIT:
                b, pos = get(mv, pos)
            c = 0
            if tag & FILE_OVERRUN:
                c, pos = get(mv, pos)
            ts2 = (ts + dur) & _M64
            if a > _M32 or b > _M32 or c > _M32:
                raise CodecError(f"record {i}: field above 32 bits")
            pack(out, i * RECORD_SIZE, ts, TRACE_GRAPH_ENT, fl, a, b, 0, 0)
            pack(out, (i + 1) * RECORD_SIZE, ts2, TRACE_GRAPH_RET,
                 1 if tag & FILE_PAY1 else 0, a, b, c, ts)
            i += 2
            prev, depth = ts2, b
            continue
        if tag & FILE_PAY1:
            raise CodecError(f"record {i}: bad tag {tag:#04x}")
        if kind == TRACE_GRAPH_ENT:
            a, pos = get(mv, pos)
            b = depth
            if tag & FILE_EXPLICIT:
                b, pos = get(mv, pos)
            if tag & FILE_OVERRUN or a > _M32 or b > _M32:
                raise CodecError(f"record {i}: bad entry record")
            pack(out, i * RECORD_SIZE, ts, TRACE_GRAPH_ENT, fl, a, b, 0, 0)
            stack.append((a, b, ts))
            depth = b + 1
        elif kind == TRACE_GRAPH_RET:
            if tag & FILE_EXPLICIT:
                a, pos = get(mv, pos)
                b, pos = get(mv, pos)
                v, pos = get(mv, pos)
                d = (ts - _unzz(v)) & _M64
            elif stack:
                a, b, d = stack[-1]
            else:
                raise CodecError(f"record {i}: a return with no entry to close")
            c = 0
            if tag & FILE_OVERRUN:
                c, pos = get(mv, pos)
            if a > _M32 or b > _M32 or c > _M32:
                raise CodecError(f"record {i}: field above 32 bits")
            pack(out, i * RECORD_SIZE, ts, TRACE_GRAPH_RET, fl, a, b, c, d)
            while stack and stack[-1][1] >= b:
                stack.pop()
            depth = b
        elif kind == TRACE_FN:
            if tag & (FILE_EXPLICIT | FILE_OVERRUN):
                raise CodecError(f"record {i}: bad tag {tag:#04x}")
            a, pos = get(mv, pos)
            b, pos = get(mv, pos)
            if a > _M32 or b > _M32:
                raise CodecError(f"record {i}: field above 32 bits")
            pack(out, i * RECORD_SIZE, ts, TRACE_FN, fl, a, b, 0, 0)
        elif kind == FILE_RAW:
            if tag != FILE_RAW:
                raise CodecError(f"record {i}: bad tag {tag:#04x}")
            f = []
            for _ in range(6):
                v, pos = get(mv, pos)
                f.append(v)
            ty, fl, a, b, c, d = f
            if ty > 0xFFFF or fl > 0xFFFF or a > _M32 or b > _M32 or c > _M32:
                raise CodecError(f"record {i}: field out of range")
            pack(out, i * RECORD_SIZE, ts, ty, fl, a, b, c, d)
        else:                                   # PRINT / STACK / EVENT
            if tag & (FILE_EXPLICIT | FILE_OVERRUN):
                raise CodecError(f"record {i}: bad tag {tag:#04x}")
            a, pos = get(mv, pos)
            if a > _M32:
                raise CodecError(f"record {i}: field above 32 bits")
            pack(out, i * RECORD_SIZE, ts, kind, fl, a, 0, 0, 0)
        prev = ts
        i += 1
    if pos != size:
        raise CodecError(f"{size - pos} stray bytes after the last record")
    return bytes(out)


_native = _env.native()  # type: ignore[no-untyped-call]  # _env's is not annotated
if _native is not None and hasattr(_native, "encode_records"):
    # (the native module's functions are Any to the checker; _native.pyi says bytes)
    def encode(records: _Bytes) -> bytes:
        return _native.encode_records(records)  # type: ignore[no-any-return]

    def decode(data: _Bytes, n: int) -> bytes:
        try:
            return _native.decode_records(data, n)  # type: ignore[no-any-return]
        except ValueError as e:
            raise CodecError(str(e)) from None
else:
    encode = py_encode
    decode = py_decode


def __dir__() -> list[str]:
    return sorted(set(__all__) | {n for n in globals() if n[:2] == "__" == n[-2:]})
