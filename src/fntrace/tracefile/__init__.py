"""The trace file written by ``fntrace record`` and read by every view.

Everything that knows the file's bytes lives here, and nothing outside does:

    blocks.py     the framing: magic, version, block tags, CRC, the payload kinds
    codec.py      ring-buffer records <-> a CHNK block's compact encoding (pure twin;
                  the native one is _native_encode.c)
    writer.py     TraceFileWriter: header, symbols, threads, chunks, index, stats, end
    sink.py       the writer thread the ring buffers hand their chunks to
    reader.py     TraceFile: the two-pass reader (a cut file reads to its last block)
    trace_set.py  a recording's files (one per process) read as one trace
    parallel.py   those files walked at the same time, in forked children

The byte layout is described in ``docs/tracefile-format.md``.  The names below load
their module on first use: a recording needs the writer, not the reader.
"""

from __future__ import annotations

from importlib import import_module

__all__ = [
    "RECORD", "RECORD_SIZE", "TF_HAS_PAYLOAD", "MAGIC", "VERSION", "COMPRESS_HINT",
    "compress_available", "TraceFileWriter", "TraceFile", "TraceFileError",
    "TraceSet", "open_traces", "child_files", "child_path",
]

_HOME = {
    "RECORD": "blocks", "RECORD_SIZE": "blocks", "TF_HAS_PAYLOAD": "blocks",
    "MAGIC": "blocks", "VERSION": "blocks", "COMPRESS_HINT": "blocks",
    "compress_available": "blocks", "TraceFileWriter": "writer", "TraceFile": "reader",
    "TraceFileError": "reader", "TraceSet": "trace_set", "open_traces": "trace_set",
    "child_files": "trace_set", "child_path": "trace_set",
}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | {n for n in globals() if n[:2] == "__" == n[-2:]})
