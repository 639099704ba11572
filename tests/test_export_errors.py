"""Bad input for ``fntrace export``, ``fntrace report`` and ``fntrace stat``: a clear
one-line error and a non-zero exit, or a valid output (an empty trace, a trace cut
short: what is whole, and a note saying what was cut); never a traceback, and never a
half-written output file.

The generic paths are checked with a small exporter registered by a driver script
(``lines``: one line per entry), so they do not depend on any one format; the real
formats (folded, chrome) are checked the same way where their exporters exist.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support import fntrace_cli

from fntrace.output.registry import EXPORT_MODULES

PROG = """\
def leaf(x):
    return x + 1

def mid(x):
    return leaf(x) * 2

def unused():
    pass

def top(n):
    s = 0
    for i in range(n):
        s += mid(i)
    return s

import sys
print(top(int(sys.argv[1])))
"""

# A format that writes one line per entry it reads: what reached the exporter, with no
# format of its own to get wrong.
DRIVER = """\
import sys
from fntrace.output.registry import Exporter, register_exporter

class Lines(Exporter):
    name = "lines"
    summary = "one line per entry (test)"
    suffix = ".lines"

    def write(self, source, out, options):
        n = 0
        for e in source.entries():
            out.write(f"{type(e).__name__} {getattr(e, 'func', '')}\\n")
            n += 1
        return {"notes": [f"lines: {n} entries"]}

register_exporter(Lines())
from fntrace.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def assert_one_line_error(r: subprocess.CompletedProcess, code: int | tuple = 1) -> str:
    assert r.returncode in ((code,) if isinstance(code, int) else code), r
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fntrace: "), r.stderr
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    return lines[0]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    """A directory with a graph trace of 3000 calls (trace.dat), one with no records
    (empty.dat), and the program."""
    d = tmp_path_factory.mktemp("traces")
    (d / "prog.py").write_text(PROG)
    # a small buffer: the records go to the file in many chunks, so a cut keeps some
    r = fntrace_cli("record", "-p", "function_graph", "-b", "8", "-F", "__main__.*", "-o",
                    "trace.dat", "prog.py", "1000", cwd=d)
    assert r.returncode == 0, r.stderr
    r = fntrace_cli("record", "-p", "function_graph", "-F", "__main__.unused", "-o",
                    "empty.dat", "prog.py", "10", cwd=d)
    assert r.returncode == 0, r.stderr
    return d


# ---------------------------------------------------------------------------------
# the format
# ---------------------------------------------------------------------------------

def test_unknown_format_lists_the_known(traces):
    r = fntrace_cli("export", "trace.dat", "--format", "nosuch", "-o", "x.out", cwd=traces)
    line = assert_one_line_error(r, 2)
    assert "unknown format" in line
    for name in EXPORT_MODULES:
        assert name in line
    assert not (traces / "x.out").exists()


def test_no_format_is_a_usage_error(traces):
    r = fntrace_cli("export", "trace.dat", cwd=traces)
    assert r.returncode == 2 and "--format" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------------------------
# the input
# ---------------------------------------------------------------------------------

def _bad_inputs(d: Path) -> dict[str, Path]:
    (d / "garbage.dat").write_bytes(bytes(range(256)) * 8)
    (d / "zero.dat").write_bytes(b"")
    (d / "adir.dat").mkdir(exist_ok=True)
    data = (d / "trace.dat").read_bytes()
    (d / "head_cut.dat").write_bytes(data[:20])       # inside the header block
    return {"missing": d / "no_such.dat", "garbage": d / "garbage.dat",
            "zero-byte": d / "zero.dat", "directory": d / "adir.dat",
            "header cut": d / "head_cut.dat"}


BAD_INPUTS = ["missing", "garbage", "zero-byte", "directory", "header cut"]


@pytest.mark.parametrize("kind", BAD_INPUTS)
def test_export_of_a_bad_input(traces, kind):
    path = _bad_inputs(traces)[kind]
    r = fntrace_cli("export", path.name, "--format", "lines", "-o", "x.lines", cwd=traces,
                    code=DRIVER)
    line = assert_one_line_error(r)
    assert path.name in line
    assert not (traces / "x.lines").exists()
    assert not [p for p in os.listdir(traces) if p.endswith(".tmp")]


@pytest.mark.parametrize("kind", BAD_INPUTS)
@pytest.mark.parametrize("command", ["report", "stat"])
def test_report_and_stat_of_a_bad_input(traces, command, kind):
    path = _bad_inputs(traces)[kind]
    # a missing file may be a usage error (2)
    line = assert_one_line_error(fntrace_cli(command, path.name, cwd=traces),
                                 (1, 2) if kind == "missing" else 1)
    assert path.name in line


def _cut(d: Path, name: str = "cut.dat") -> Path:
    """trace.dat cut in the middle of its records: the chunks before the cut are
    whole."""
    data = (d / "trace.dat").read_bytes()
    (d / name).write_bytes(data[: len(data) * 2 // 3])
    return d / name


def test_export_of_a_cut_trace_exports_what_is_whole(traces):
    cut = _cut(traces)
    full = fntrace_cli("export", "trace.dat", "--format", "lines", "-o", "full.lines",
                       cwd=traces, code=DRIVER)
    assert full.returncode == 0, full.stderr
    r = fntrace_cli("export", cut.name, "--format", "lines", "-o", "cut.lines", cwd=traces,
                    code=DRIVER)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "cut short" in r.stderr and cut.name in r.stderr
    whole = (traces / "full.lines").read_text().splitlines()
    part = (traces / "cut.lines").read_text().splitlines()
    assert 0 < len(part) < len(whole)


def test_report_of_a_cut_trace(traces):
    cut = _cut(traces)
    r = fntrace_cli("report", cut.name, cwd=traces)
    assert r.returncode == 0 and "cut short" in r.stderr and "Traceback" not in r.stderr
    assert "__main__.leaf" in r.stdout


def test_export_of_an_empty_trace_is_a_valid_empty_output(traces):
    r = fntrace_cli("export", "empty.dat", "--format", "lines", "-o", "empty.lines",
                    cwd=traces, code=DRIVER)
    assert r.returncode == 0, r.stderr
    assert (traces / "empty.lines").read_text() == ""
    assert "lines: 0 entries" in r.stderr


# ---------------------------------------------------------------------------------
# the output
# ---------------------------------------------------------------------------------

def _unwritable(d: Path) -> dict[str, str]:
    (d / "a_file").write_text("x")
    # a path under a regular file cannot be created, even by root
    return {"under a file": "a_file/out.lines", "missing directory": "no/such/dir/out.lines",
            "a directory": "."}


@pytest.mark.parametrize("kind", ["under a file", "missing directory", "a directory"])
def test_export_to_an_unwritable_path(traces, kind):
    out = _unwritable(traces)[kind]
    r = fntrace_cli("export", "trace.dat", "--format", "lines", "-o", out, cwd=traces,
                    code=DRIVER)
    line = assert_one_line_error(r)
    assert out in line
    assert (traces / "a_file").read_text() == "x"


def test_export_to_standard_output(traces):
    r = fntrace_cli("export", "trace.dat", "--format", "lines", "-o", "-", cwd=traces,
                    code=DRIVER)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("TraceEntry __main__.leaf") == 2000    # an entry and a return


def test_export_replaces_the_output_whole(traces):
    """A failed export leaves the previous file as it was (temporary file + rename)."""
    garbage = _bad_inputs(traces)["garbage"]
    (traces / "keep.lines").write_text("before\n")
    r = fntrace_cli("export", garbage.name, "--format", "lines", "-o", "keep.lines",
                    cwd=traces, code=DRIVER)
    assert r.returncode == 1
    assert (traces / "keep.lines").read_text() == "before\n"


# ---------------------------------------------------------------------------------
# the real formats, where their exporters exist
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["folded", "chrome", "trace-cmd", "perfetto", "parquet",
                                 "otlp"])
def test_real_format_bad_input_and_empty_trace(traces, fmt):
    r = fntrace_cli("export", "trace.dat", "--format", fmt, "-o", "x.out", cwd=traces)
    if r.returncode != 0 and "needs the" in r.stderr:
        pytest.skip(f"LOUD SKIP: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    paths = _bad_inputs(traces)
    for kind in ("garbage", "zero-byte", "directory", "header cut"):
        r = fntrace_cli("export", paths[kind].name, "--format", fmt, "-o", f"bad.{fmt}",
                        cwd=traces)
        assert_one_line_error(r)
        assert not (traces / f"bad.{fmt}").exists()
    r = fntrace_cli("export", "trace.dat", "--format", fmt, "-o", "a_file/out", cwd=traces)
    assert_one_line_error(r)
    # an empty trace: a file, and no error
    r = fntrace_cli("export", "empty.dat", "--format", fmt, "-o", f"empty.{fmt}", cwd=traces)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert (traces / f"empty.{fmt}").exists()
    # a cut trace: what is whole, and a note
    cut = _cut(traces, f"cut_{fmt}.dat")
    r = fntrace_cli("export", cut.name, "--format", fmt, "-o", f"cut.{fmt}", cwd=traces)
    assert r.returncode == 0 and "cut short" in r.stderr and "Traceback" not in r.stderr
    assert (traces / f"cut.{fmt}").stat().st_size > 0
