"""The record format's one definition (record_format) and the compact file encoding
(tracefile/codec.py): the native encoder gives the pure one's bytes, decoding gives the
records back bit for bit, and damage is refused, never misread."""
from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fntrace import _env, record_format as rf
from fntrace.tracefile.codec import CodecError, py_decode, py_encode

R = struct.Struct(rf.FORMAT)
ENT, RET, FN = rf.TRACE_GRAPH_ENT, rf.TRACE_GRAPH_RET, rf.TRACE_FN
NATIVE = _env.native_module()
ROOT = Path(__file__).resolve().parent.parent


def pack(recs):
    return b"".join(R.pack(*r) for r in recs)


def codecs():
    out = [("pure", py_encode, py_decode)]
    if NATIVE is not None:
        out.append(("native", NATIVE.encode_records, NATIVE.decode_records))
    return out


def graph_run(rnd, n, depth0=0, t0=10_000):
    """Records as a function_graph run writes them: nested entries and returns, leaf
    calls, payload flags, overruns, the odd function hit and marker."""
    out, stack, ts, depth = [], [], t0, depth0
    for _ in range(n):
        ts += rnd.choice((0, 1, 40, 300, 7000))
        k = rnd.random()
        if k < 0.45:
            ip = rnd.randint(1, 400)
            out.append((ts, ENT, rnd.choice((0, 0, 1)), ip, depth, 0, 0))
            stack.append((ip, depth, ts))
            depth += 1
        elif k < 0.9 and stack:
            ip, d, ct = stack.pop()
            depth = d
            out.append((ts, RET, rnd.choice((0, 0, 1)), ip, d, rnd.choice((0, 0, 0, 3)), ct))
        elif k < 0.95:
            out.append((ts, FN, rnd.choice((0, 1)), rnd.randint(1, 400), rnd.randint(0, 400), 0, 0))
        else:
            out.append((ts, rf.TRACE_PRINT, 1, 0, 0, 0, 0))
    return out


record = st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 8), st.integers(0, 3),
                   st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                   st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))


# -- the one definition ------------------------------------------------------------

def test_layout_is_the_ring_buffers_and_the_files():
    from fntrace import ring_buffer, tracefile
    from fntrace.output import entry
    assert rf.RECORD_SIZE == 32 and R.size == 32
    assert rf.OFFSETS == {"ts": 0, "type": 8, "flags": 10, "a": 12, "b": 16, "c": 20, "d": 24}
    for mod in (ring_buffer, entry):
        for name in ("TRACE_FN", "TRACE_GRAPH_ENT", "TRACE_GRAPH_RET", "TRACE_PRINT",
                     "TRACE_STACK", "TRACE_EVENT"):
            assert getattr(mod, name) == getattr(rf, name)
    assert ring_buffer.RECORD.format == tracefile.RECORD.format == rf.FORMAT
    assert ring_buffer.HAS_PAYLOAD == tracefile.TF_HAS_PAYLOAD == rf.HAS_PAYLOAD


def test_generated_c_header_matches_the_module():
    text = rf.c_header()
    assert "typedef struct {" in text and "} record_t;" in text
    for name in ("TRACE_FN", "TRACE_GRAPH_RET", "HAS_PAYLOAD", "FILE_LEAF", "FILE_EXPLICIT"):
        assert f"#define FNT_{name} {getattr(rf, name)}\n" in text
    header = ROOT / "build" / "fntrace-gen" / "fntrace_record_format.h"
    if NATIVE is not None and header.exists():
        assert header.read_text() == text


def test_record_format_runs_stand_alone():
    # setup.py runs the module before the package is built: it must import nothing
    r = subprocess.run([sys.executable, "-S", "-c",
                        "import runpy, sys; g = runpy.run_path(sys.argv[1]); "
                        "print(g['RECORD_SIZE'], g['c_header']().count('#define'))",
                        str(ROOT / "src" / "fntrace" / "record_format.py")],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "32"


@pytest.mark.skipif(NATIVE is None, reason="the native twin is not built")
def test_native_twin_was_built_from_this_definition():
    assert NATIVE.RECORD_FORMAT_ID == rf.FORMAT_ID


# -- encoding ------------------------------------------------------------------------

@pytest.mark.parametrize("name,enc,dec", codecs())
def test_round_trip_of_graph_runs(name, enc, dec):
    rnd = random.Random(13)
    for k in range(200):
        data = pack(graph_run(rnd, rnd.randint(0, 300), depth0=rnd.choice((0, 0, 5))))
        e = enc(data)
        assert dec(e, len(data) // 32) == data, k


@settings(max_examples=300, deadline=None)
@given(st.lists(record, max_size=40))
def test_any_records_round_trip(recs):
    data = pack(recs)
    e = py_encode(data)
    assert py_decode(e, len(recs)) == data
    if NATIVE is not None:
        assert NATIVE.encode_records(data) == e
        assert NATIVE.decode_records(e, len(recs)) == data


@pytest.mark.skipif(NATIVE is None, reason="the native twin is not built")
def test_native_and_pure_encoders_give_the_same_bytes():
    rnd = random.Random(7)
    for k in range(300):
        data = pack(graph_run(rnd, rnd.randint(1, 400)))
        assert NATIVE.encode_records(data) == py_encode(data), k
    big = pack(graph_run(rnd, 100_000))
    assert NATIVE.encode_records(memoryview(big)) == py_encode(big)


@pytest.mark.skipif(NATIVE is None, reason="the native twin is not built")
@given(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 300), min_size=1, max_size=40))
@settings(max_examples=300, deadline=None)
def test_native_and_pure_block_varints_are_the_same_bytes(vals):
    from fntrace.tracefile.writer import _py_varints
    assert NATIVE.varints(*vals) == _py_varints(*vals)


@pytest.mark.skipif(NATIVE is None, reason="the native twin is not built")
@given(st.sampled_from([b"CHNK", b"THRD", b"END\0"]),
       st.lists(st.binary(max_size=300), max_size=6), st.booleans())
@settings(max_examples=200, deadline=None)
def test_native_and_pure_block_framing_are_the_same_bytes(tag, parts, views):
    from fntrace.tracefile.writer import _py_block
    if views:
        parts = [memoryview(p) for p in parts]
    assert NATIVE.block(tag, *parts) == _py_block(tag, *parts)


@pytest.mark.skipif(NATIVE is None, reason="the native twin is not built")
def test_a_long_block_is_framed_as_the_pure_twin_frames_it():
    # (past 64 KB the CRC lets the GIL go: the same value all the same)
    from fntrace.tracefile.writer import _py_block
    body = random.Random(3).randbytes(200_000)
    assert NATIVE.block(b"CHNK", b"h", memoryview(body)[5:], b"t") == \
        _py_block(b"CHNK", b"h", memoryview(body)[5:], b"t")
    import zlib
    assert NATIVE.crc32(body, 77) == zlib.crc32(body, 77)


@pytest.mark.skipif(NATIVE is None, reason="the native twin is not built")
@given(st.lists(record, min_size=1, max_size=30), st.integers(0, 2**32),
       st.integers(0, 2**63), st.integers(0, 2**40), st.booleans())
@settings(max_examples=300, deadline=None)
def test_native_and_pure_chunk_blocks_are_the_same(recs, cpu, first_seq, lost, view):
    """A chunk's block made in one native call is the pure twin's, times included."""
    from fntrace.tracefile.blocks import MAX_BLOCK_LEN
    from fntrace.tracefile.writer import _py_chunk_block
    data = pack(recs)
    records = memoryview(data) if view else bytearray(data)
    got = NATIVE.chunk_block(b"CHNK", cpu, records, first_seq, lost, MAX_BLOCK_LEN)
    assert got == _py_chunk_block(b"CHNK", cpu, records, first_seq, lost, MAX_BLOCK_LEN)
    assert got[1:] == (recs[0][0], recs[-1][0])


@pytest.mark.parametrize("records, max_len", [(b"", 1 << 30), (b"x" * 33, 1 << 30),
                                               (b"\0" * 64, 20)])
def test_a_chunk_block_that_cannot_be_made_is_refused(records, max_len):
    from fntrace.tracefile.writer import _py_chunk_block
    makers = [_py_chunk_block] + ([NATIVE.chunk_block] if NATIVE is not None else [])
    for make in makers:
        with pytest.raises(ValueError):
            make(b"CHNK", 0, records, 0, 0, max_len)


@pytest.mark.parametrize("vals", [(-1,), (5, -300), (2**64,), (0, 2**70)])
def test_a_varint_out_of_range_is_refused(vals):
    from fntrace.tracefile.writer import _py_varints
    for varints in [_py_varints] + ([NATIVE.varints] if NATIVE is not None else []):
        with pytest.raises(ValueError):
            varints(*vals)


def test_a_leaf_call_is_one_small_record():
    recs = [(1000, ENT, 0, 5, 3, 0, 0), (1000 + 250, RET, 0, 5, 3, 0, 1000)]
    e = py_encode(pack(recs))
    # ts0, depth0 | tag, ts delta 0, duration 250 (2 bytes), ip 5
    assert e == bytes([0xE8, 0x07, 3, rf.FILE_LEAF, 0, 0xFA, 0x01, 5])
    assert py_decode(e, 2) == pack(recs)


def test_a_calls_return_implies_its_ip_depth_and_calltime():
    recs = [(10, ENT, 0, 9, 0, 0, 0), (20, FN, 0, 1, 9, 0, 0), (30, RET, 0, 9, 0, 0, 10)]
    e = py_encode(pack(recs))
    assert e[-2:] == bytes([RET, 20])           # tag, ts delta 10 (zigzag): nothing else


@pytest.mark.parametrize("name,enc,dec", codecs())
def test_every_cut_and_extension_is_refused(name, enc, dec):
    rnd = random.Random(5)
    for _ in range(20):
        recs = graph_run(rnd, rnd.randint(1, 60))
        e = enc(pack(recs))
        for cut in range(len(e)):
            with pytest.raises(ValueError):
                dec(e[:cut], len(recs))
        with pytest.raises(ValueError, match="stray bytes"):
            dec(e + b"\0", len(recs))


@pytest.mark.parametrize("name,enc,dec", codecs())
def test_damage_is_an_error_not_a_crash(name, enc, dec):
    rnd = random.Random(11)
    recs = graph_run(rnd, 80)
    e = bytearray(enc(pack(recs)))
    for k in range(len(e)):
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(e)
            bad[k] ^= flip
            try:
                out = dec(bytes(bad), len(recs))
            except ValueError:
                continue
            assert len(out) == 32 * len(recs)
    assert issubclass(CodecError, ValueError)
    with pytest.raises(ValueError):
        dec(b"\x00\x00" + bytes([rf.FILE_RESERVED]) + b"\0" * 8, 1)
    with pytest.raises(ValueError, match="no entry to close"):
        dec(b"\x00\x00" + bytes([RET, 0]), 1)
    with pytest.raises(ValueError):
        dec(b"\x00\x00" + bytes([rf.FILE_LEAF, 0, 0, 1]), 1)
    with pytest.raises(ValueError):
        dec(b"\xff" * 11 + b"\x00", 1)


@pytest.mark.parametrize("name,enc,dec", codecs())
def test_bad_input_is_refused(name, enc, dec):
    with pytest.raises(ValueError, match="multiple of 32"):
        enc(b"x" * 33)
    assert enc(b"") == b"" and dec(b"", 0) == b""
    with pytest.raises(ValueError):
        dec(b"abc", 0)
