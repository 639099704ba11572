"""The trace file's framing: what the writer and the reader both know.

    file   = MAGIC (8 bytes) · VERSION (u32) · block*
    block  = tag (4 ASCII bytes) · length (u32) · payload · CRC-32 (u32, of tag..payload)

    HEAD  JSON header            SYMS  new symbols (varints)    THRD  a thread's name
    CHNK  one ring buffer's records (codec.py), then their payloads
    CHKZ  a CHNK whose records and payloads are one zstd frame
    INDX  each chunk's records and first and last times      STAT  JSON end stats
    END   nothing (a file without it was cut short)

The full layout is docs/tracefile-format.md; the record encoding inside CHNK is
codec.py's.  Nothing outside this package knows any of it.
"""

from __future__ import annotations

import struct
import zlib

from .. import _env
from ..record_format import FORMAT, HAS_PAYLOAD, RECORD_SIZE

# for the checker only (annotations are strings)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "RECORD", "RECORD_SIZE", "TF_HAS_PAYLOAD", "MAGIC", "VERSION", "COMPRESS_HINT",
    "TAG_HEADER", "TAG_SYMBOLS", "TAG_THREAD", "TAG_CHUNK", "TAG_CHUNK_Z", "TAG_STATS",
    "TAG_INDEX", "TAG_END", "MAX_BLOCK_LEN", "FILE_HEAD", "BLOCK_HEAD", "CRC",
    "BLOCK_OVERHEAD", "RECORD_TIME", "ZSTD_LEVEL", "PAY_STR", "PAY_INT", "PAY_JSON", "crc32",
    "zstd_module", "compress_available", "enc_text", "dec_text",
]

# zlib.crc32, or the native twin's (same values; folded with carry-less multiply where
# the CPU has it, several times faster on the megabytes of records a trace holds)
_native = _env.native()  # type: ignore[no-untyped-call]  # _env's is not annotated
crc32 = _native.crc32 if _native is not None and hasattr(_native, "crc32") else zlib.crc32


#: One ring-buffer record: ts, type, flags, a, b, c, d (record_format.py).
RECORD = struct.Struct(FORMAT)
assert RECORD.size == RECORD_SIZE

#: Record flag: a payload object is attached to the record.
TF_HAS_PAYLOAD = HAS_PAYLOAD

MAGIC = b"FNTRACE\0"
#: 2: compact records (tracefile/codec.py), varint tables, CHKZ.  1 held the raw 32-byte
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

FILE_HEAD = struct.Struct("<8sI")  # magic, version
BLOCK_HEAD = struct.Struct("<4sI")  # tag, payload length
CRC = struct.Struct("<I")
ZSTD_LEVEL = 3


def zstd_module() -> ModuleType | None:
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard


def compress_available() -> bool:
    """Can a file be written with ``compress=True`` (is zstandard installed)?"""
    return zstd_module() is not None


# A payload in a CHNK block: varint index gap, a kind byte, the value.  Argument text
# and return values (str, int) are the bulk of a -A -R trace; anything else is JSON.
PAY_STR, PAY_INT, PAY_JSON = 0, 1, 2
BLOCK_OVERHEAD = BLOCK_HEAD.size + CRC.size
# a record's time: its first field
RECORD_TIME = struct.Struct("<Q")


def enc_text(s: str) -> bytes:
    # surrogatepass: file names decoded with surrogateescape must round-trip.
    return s.encode("utf-8", "surrogatepass")


def dec_text(b: bytes | memoryview) -> str:
    return bytes(b).decode("utf-8", "surrogatepass")


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
