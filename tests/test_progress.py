"""Progress bars (cli/progress.py): on stderr when it is a terminal, none when piped,
none when the command's own output goes to a screen or a pipe, none with
FNTRACE_PROGRESS=0 or TERM=dumb; and the output is the same byte for byte either way.

The terminal is a real pseudo-terminal (``pty.openpty``) given to the command as its
stderr; what the command draws on it is read from the other side.
"""
from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from support import SUBPROCESS_TIMEOUT, fntrace_argv, fntrace_cli

PROG = """\
def leaf(x):
    return x + 1

def top(n):
    s = 0
    for i in range(n):
        s += leaf(i)
    return s

import sys
print(top(int(sys.argv[1])))
"""

# The same exporter as tests/test_export_errors.py: one line per entry.
DRIVER = """\
import sys
from fntrace.output.registry import Exporter, register_exporter

class Lines(Exporter):
    name = "lines"
    suffix = ".lines"

    def write(self, source, out, options):
        for e in source.entries():
            out.write(f"{type(e).__name__} {getattr(e, 'func', '')} {getattr(e, 'ts', '')}\\n")

register_exporter(Lines())
from fntrace.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

# The bar's own words: its label and the records column.
BAR_WORD = "records"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("FNTRACE_PROGRESS", None)
    env.setdefault("TERM", "xterm")
    if env["TERM"] == "dumb":
        env["TERM"] = "xterm"
    env.update(extra)
    return env


def _run(args, cwd: Path, *, stderr_tty: bool, stdout=None, driver: bool = False,
         **env: str) -> tuple[int, str]:
    """Run fntrace; stderr on a pseudo-terminal (or a pipe); returns (status, what
    stderr got)."""
    return _run_cmd(fntrace_argv(*args, code=DRIVER if driver else None), cwd,
                    stderr_tty=stderr_tty, stdout=stdout, **env)


def _run_cmd(cmd: list[str], cwd: Path, *, stderr_tty: bool, stdout=None,
             **env: str) -> tuple[int, str]:
    if not stderr_tty:
        r = subprocess.run(cmd, cwd=str(cwd), stdout=stdout, stderr=subprocess.PIPE,
                           env=_env(**env), timeout=SUBPROCESS_TIMEOUT)
        return r.returncode, r.stderr.decode(errors="replace")
    master, slave = pty.openpty()
    got = bytearray()

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:           # EIO: the other side is closed
                return
            if not data:
                return
            got.extend(data)

    try:
        p = subprocess.Popen(cmd, cwd=str(cwd), stdout=stdout, stderr=slave,
                             stdin=subprocess.DEVNULL, env=_env(**env))
        os.close(slave)
        slave = -1
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        p.communicate(timeout=SUBPROCESS_TIMEOUT)     # reads stdout if it is a pipe
        status = p.returncode
        reader.join(timeout=30)
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    return status, got.decode(errors="replace")


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """A graph trace of 200,000 entries (100,000 calls): long enough to read for a bar to be drawn."""
    d = tmp_path_factory.mktemp("progress")
    (d / "prog.py").write_text(PROG)
    r = fntrace_cli("record", "-p", "function_graph", "-b", "16384", "-F", "__main__.leaf",
                    "-o", "big.dat", "prog.py", "100000", cwd=d)
    assert r.returncode == 0, r.stderr
    return d


def test_report_to_a_file_draws_a_bar_on_a_terminal(big):
    with open(big / "tty.txt", "wb") as out:
        status, err = _run(["report", "big.dat"], big, stderr_tty=True, stdout=out)
    assert status == 0, err
    assert "report" in err and BAR_WORD in err and "/200000" in err, err[:500]
    with open(big / "piped.txt", "wb") as out:
        status, err = _run(["report", "big.dat"], big, stderr_tty=False, stdout=out)
    assert status == 0 and err == ""
    assert (big / "tty.txt").read_bytes() == (big / "piped.txt").read_bytes()
    assert b"__main__.leaf" in (big / "tty.txt").read_bytes()


def test_report_into_a_pipe_draws_no_bar(big):
    """The pipe's reader may be a pager that owns the terminal: no bar over it."""
    status, err = _run(["report", "big.dat"], big, stderr_tty=True, stdout=subprocess.PIPE)
    assert status == 0
    assert BAR_WORD not in err, err[:500]


@pytest.mark.parametrize("env", [{"FNTRACE_PROGRESS": "0"}, {"TERM": "dumb"}])
def test_no_bar_when_turned_off(big, env):
    with open(big / "off.txt", "wb") as out:
        status, err = _run(["report", "big.dat"], big, stderr_tty=True, stdout=out, **env)
    assert status == 0
    assert BAR_WORD not in err, err[:500]


def test_export_draws_a_bar_and_writes_the_same_file(big):
    status, err = _run(["export", "big.dat", "--format", "lines", "-o", "tty.lines"], big,
                       stderr_tty=True, driver=True)
    assert status == 0, err
    assert "export" in err and BAR_WORD in err, err[:500]
    status, err = _run(["export", "big.dat", "--format", "lines", "-o", "piped.lines"], big,
                       stderr_tty=False, driver=True)
    assert status == 0 and err == ""
    tty = (big / "tty.lines").read_bytes()
    assert tty == (big / "piped.lines").read_bytes()
    assert tty.count(b"\n") == 200000


def test_export_to_standard_output_on_a_pipe_draws_no_bar(big):
    status, err = _run(["export", "big.dat", "--format", "lines", "-o", "-"], big,
                       stderr_tty=True, stdout=subprocess.PIPE, driver=True)
    assert status == 0
    assert BAR_WORD not in err, err[:500]


def test_a_second_pass_draws_its_own_bar(big):
    """entries() read twice (a two-pass exporter): each pass advances its own bar."""
    code = ("import sys\n"
            "from fntrace.output.source import open_trace\n"
            "from fntrace.cli.progress import track_source\n"
            "s = track_source(open_trace('big.dat'), 'twice')\n"
            "a = sum(1 for _ in s.entries()); b = sum(1 for _ in s.entries())\n"
            "print(a, b, s.nr_records(), s.tracer, file=open('n.txt', 'w'))\n")
    status, err = _run_cmd([sys.executable, "-c", code], big, stderr_tty=True)
    assert status == 0, err
    assert "twice" in err and "twice (pass 2)" in err, err[:500]
    assert (big / "n.txt").read_text().split() == ["200000", "200000", "200000",
                                                  "function_graph"]



def test_export_to_a_file_with_standard_output_piped_draws_no_bar(big):
    """``fntrace export ... | less``: the pager may have the screen."""
    status, err = _run(["export", "big.dat", "--format", "lines", "-o", "p.lines"], big,
                       stderr_tty=True, stdout=subprocess.PIPE, driver=True)
    assert status == 0
    assert BAR_WORD not in err, err[:500]
    assert (big / "p.lines").read_bytes().count(b"\n") == 200000


def test_stat_draws_a_bar_before_its_table(big):
    r = fntrace_cli("stat", "big.dat", cwd=big)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with open(big / "stat_tty.txt", "wb") as out:
        status, err = _run(["stat", "big.dat"], big, stderr_tty=True, stdout=out)
    assert status == 0, err
    assert "stat" in err and BAR_WORD in err and "/200000" in err, err[:500]
    assert (big / "stat_tty.txt").read_text() == r.stdout
    assert "__main__.leaf" in r.stdout
    status, err = _run(["stat", "big.dat"], big, stderr_tty=True, stdout=subprocess.PIPE)
    assert status == 0 and BAR_WORD not in err, err[:500]


def test_passes_side_by_side_share_one_display(big):
    """Two passes read at once (zip): rich has one live display at a time; both bars
    show on it and the reading is unchanged."""
    code = ("from fntrace.output.source import open_trace\n"
            "from fntrace.cli.progress import track_source\n"
            "s = track_source(open_trace('big.dat'), 'zipped')\n"
            "n = sum(1 for a, b in zip(s.entries(), s.entries()) if a.ts == b.ts)\n"
            "m = sum(1 for _ in s.entries(0))\n"
            "print(n, m, file=open('z.txt', 'w'))\n")
    status, err = _run_cmd([sys.executable, "-c", code], big, stderr_tty=True)
    assert status == 0, err
    assert "zipped (pass 2)" in err and "zipped (thread slot 0)" in err, err[:800]
    assert (big / "z.txt").read_text().split() == ["200000", "200000"]


FORKING = """\
import os, sys

def leaf(i):
    return i

def run(n):
    for i in range(n):
        leaf(i)

pid = os.fork()
run(int(sys.argv[1]))
if pid:
    os.waitpid(pid, 0)
"""


def test_stat_and_folded_of_processes_read_at_the_same_time_draw_one_bar(tmp_path):
    """stat of a trace of two processes' files walks them in two children
    (tracefile/parallel.py): the bar is the parent's, drawn from what the children
    say they read, over every record; one pass, named once; no fork warning."""
    (tmp_path / "fork.py").write_text(FORKING)
    r = fntrace_cli("record", "-p", "function_graph", "-F", "__main__.leaf", "-o", "f.dat",
                    "fork.py", "60000", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    plain = fntrace_cli("stat", "f.dat", cwd=tmp_path, env=_env(FNTRACE_JOBS="1"))
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    assert "120000" in plain.stdout                 # both processes' calls
    with open(tmp_path / "stat_tty.txt", "wb") as out:
        status, err = _run(["stat", "f.dat"], tmp_path, stderr_tty=True, stdout=out,
                           FNTRACE_JOBS="2")
    assert status == 0, err
    assert BAR_WORD in err and "/240000" in err, err[:500]
    assert "pass 2" not in err and "arning" not in err, err[:500]
    assert (tmp_path / "stat_tty.txt").read_text() == plain.stdout
    # the folded export of the same files, walked the same way, draws the same bar
    plain = fntrace_cli("export", "f.dat", "--format", "folded", "-o", "-", cwd=tmp_path,
                        env=_env(FNTRACE_JOBS="1"))
    assert plain.returncode == 0 and plain.stderr == "" and "leaf" in plain.stdout, plain.stderr
    status, err = _run(["export", "f.dat", "--format", "folded", "-o", "f.folded"], tmp_path,
                       stderr_tty=True, FNTRACE_JOBS="2")
    assert status == 0, err
    assert BAR_WORD in err and "/240000" in err, err[:500]
    assert "pass 2" not in err and "arning" not in err, err[:500]
    assert (tmp_path / "f.folded").read_text() == plain.stdout
