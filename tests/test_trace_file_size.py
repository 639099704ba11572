"""The trace file written by ``fntrace record``: compact (a few bytes a call, well under
the 16 the format promises), the same report compressed or not, and a clear message
when zstd compression is asked for without the zstandard package."""
from __future__ import annotations

import os
import re

import pytest

from support import fntrace_cli

FIB = """
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

fib(18)
"""
CALLS = 8361            # fib(18) makes this many calls


def calls_and_structure(report: str) -> list[str]:
    """The report without its times: what was called, in order, at what depth."""
    out = []
    for line in report.splitlines():
        if line.startswith("#"):
            continue
        m = re.search(r"\|(\s*)(\S.*)$", line)
        out.append(m.group(1) + m.group(2) if m else re.sub(r"\d+\.\d+", "T", line[16:]))
    return out


@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_at_most_16_bytes_a_call(tmp_script, run_fntrace, tmp_path, tracer):
    prog = tmp_script(FIB)
    r = run_fntrace("record", "-p", tracer, "-F", "__main__.fib", "-o", "f.dat", prog)
    assert r.returncode == 0, r.stderr
    size = (tmp_path / "f.dat").stat().st_size
    rep = run_fntrace("report", "f.dat")
    assert rep.returncode == 0, rep.stderr
    n = sum(1 for line in rep.stdout.splitlines() if "fib" in line and not line.startswith("#"))
    # function: one line a call; function_graph: a leaf is one line, others two
    assert n >= CALLS
    assert size / CALLS <= 16, size


def recompress(src, dst) -> None:
    """The trace file ``src`` written again, zstd-compressed, through the writer API."""
    from fntrace.tracefile import RECORD, TraceFile, TraceFileWriter
    tf = TraceFile.open(src)
    w = TraceFileWriter(dst, tf.header, compress=True)
    w.add_symbols((ip, name, filename, line) for ip, (name, filename, line) in tf.symbols.items())
    for cpu, (native_id, name) in tf.threads.items():
        w.add_thread(cpu, native_id, name)
    for cpu in tf.cpus:
        recs = list(tf.records(cpu))
        payloads = {i: r[8] for i, r in enumerate(recs) if r[8] is not None}
        w.write_chunk(cpu, b"".join(RECORD.pack(*r[1:8]) for r in recs), 0,
                      lost=tf.lost(cpu), payloads=payloads or None)
    w.close(tf.stats)


@pytest.mark.parametrize("extra", [[], ["-A", "-R"]])
def test_compressed_file_reads_the_same(tmp_script, run_fntrace, tmp_path, extra):
    pytest.importorskip("zstandard")
    prog = tmp_script(FIB)
    plain = run_fntrace("record", "-p", "function_graph", *extra, "-F", "__main__.fib",
                        "-o", "p.dat", prog)
    assert plain.returncode == 0, plain.stderr
    recompress(tmp_path / "p.dat", tmp_path / "z.dat")
    # Compressed, and smaller.  How much smaller depends on the timestamps (a busy
    # machine makes the deltas irregular: a third to two thirds of the size was seen),
    # so only that zstd took something off is asserted.
    assert b"CHKZ" in (tmp_path / "z.dat").read_bytes()
    assert (tmp_path / "z.dat").stat().st_size < (tmp_path / "p.dat").stat().st_size * 0.9
    rp, rz = run_fntrace("report", "p.dat"), run_fntrace("report", "z.dat")
    assert rp.returncode == 0 and rz.returncode == 0, rp.stderr + rz.stderr
    assert rz.stdout == rp.stdout
    assert len(rp.stdout.splitlines()) >= CALLS
    # and straight from the recorder
    comp = run_fntrace("record", "-p", "function_graph", *extra, "-F", "__main__.fib",
                       "--compress", "-o", "r.dat", prog)
    assert comp.returncode == 0, comp.stderr
    assert b"CHKZ" in (tmp_path / "r.dat").read_bytes()
    rr = run_fntrace("report", "r.dat")
    assert rr.returncode == 0 and rr.stderr == "", rr.stderr
    assert len(calls_and_structure(rr.stdout)) >= CALLS


def test_compression_without_zstandard_is_a_clear_message(tmp_script, run_fntrace, tmp_path):
    pytest.importorskip("zstandard")
    prog = tmp_script(FIB)
    assert run_fntrace("record", "--compress", "-o", "z.dat", prog).returncode == 0
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "zstandard.py").write_text("raise ImportError('no zstandard here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(hide), *filter(None, [os.environ.get("PYTHONPATH")])])}

    r = fntrace_cli("record", "--compress", "-o", "x.dat", prog, cwd=tmp_path, env=env)
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "pip install fntrace[compress]" in r.stderr
    assert not (tmp_path / "x.dat").exists()
    r = fntrace_cli("report", "z.dat", cwd=tmp_path, env=env)
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "z.dat: the file is compressed" in r.stderr
    assert "pip install fntrace[compress]" in r.stderr
