"""``fntrace top PID``: a running program's functions, live (cli/top.py, tui/top.py,
output/top_table.py), and the profiler files it reads (trace_stat/threads,
options/profile-wide, profile-dist's Self).

The programs are started plainly, as a user's are; top attaches, reads, and on quit
leaves them as they were: detached, or, for a program that served its tracefs already,
every file top wrote put back.  The live screen runs in a real terminal under tmux.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time

import pytest

from fntrace.output.top_table import TopTable, parse_function_stat
from fntrace.tracefs import Tracefs

import test_attach
from test_attach import PROGRAM, _env, _running_threads_unreached, fntrace

# the fixture: the programs a test starts, killed after it
program = test_attach.program

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="top attaches through /proc and ptrace: Linux only")


def _tables(out: str) -> list[dict[str, list[str]]]:
    """--batch's tables: function -> its cells."""
    tables: list[dict[str, list[str]]] = []
    for line in out.splitlines():
        if line.startswith("# "):
            tables.append({})
        elif line.strip() and not line.lstrip().startswith("CALLS/S") and tables:
            cells = line.split()
            tables[-1][cells[-1]] = cells[:-1]
    return tables


def _controllable(pid: int) -> bool:
    return re.search(rf"^\s*{pid}\b", fntrace("ctl").stdout, re.M) is not None


def test_batch_counts_every_call_and_leaves_the_program_as_it_was(program, tmp_path):
    untraced = program()
    ref = untraced.finish()
    p = program()
    r = fntrace("top", p.pid, "--batch", "-n", "2", "-d", "0.5")
    assert r.returncode == 0, r.stderr
    tables = _tables(r.stdout)
    assert len(tables) == 2, r.stdout
    unreached = _running_threads_unreached()
    if unreached:
        # the program's one thread cannot be reached here: top says so, and counts nothing
        assert "its main thread among them, are not counted" in r.stderr, r.stderr
        assert tables == [{}, {}]
        tables = None
    if tables is not None:
        # the program's own functions only (its __main__: nothing beside the script)
        assert set(tables[-1]) == {"__main__.work"}, r.stdout
        rate, hits = float(tables[-1]["__main__.work"][0]), int(tables[-1]["__main__.work"][1])
        assert rate > 10 and hits > int(tables[0]["__main__.work"][1]) > 0
        assert r.stderr == ""
    assert r.stdout.startswith("# ") and f"process {p.pid}: *:mod:__main__" in r.stdout
    # detached: the program is not controllable, and runs on exactly as untraced
    assert not _controllable(p.pid)
    status, out, err = p.finish()
    assert (status, err) == (ref[0], ref[2])
    assert out == ref[1]


def test_a_served_program_gets_back_every_file_top_wrote(program, tmp_path):
    served = "import fntrace\nfntrace.serve()\n" + PROGRAM
    p = program(served, env=_env())
    fntrace("ctl", p.pid, "set_ftrace_filter", "__main__.work")
    before = {f: fntrace("ctl", p.pid, f).stdout
              for f in ("set_ftrace_filter", "function_profile_enabled", "options/profile-dist",
                        "options/profile-wide", "options/graph-time")}
    r = fntrace("top", p.pid, "--batch", "-n", "1", "-d", "0.3", "-F", "__main__.*",
                "--sort", "hit")
    assert r.returncode == 0, r.stderr
    if _running_threads_unreached():
        assert "are not counted" in r.stderr and _tables(r.stdout) == [{}]
    else:
        assert "__main__.work" in _tables(r.stdout)[-1]
    after = {f: fntrace("ctl", p.pid, f).stdout for f in before}
    assert after == before
    assert before["set_ftrace_filter"].strip() == "__main__.work"
    assert _controllable(p.pid)             # it served before top: it still does
    status, out, _ = p.finish()
    assert status == 3 and "sum ok True" in out


def test_a_filter_that_matches_nothing_is_refused_and_the_program_runs_on(program):
    p = program()
    r = fntrace("top", p.pid, "--batch", "-n", "1", "-F", "nomodule.*")
    assert r.returncode == 1 and r.stderr.startswith("fntrace: "), r.stderr
    assert "nomodule.*" in r.stderr and "Traceback" not in r.stderr
    assert not _controllable(p.pid)
    status, out, _ = p.finish()
    assert status == 3 and "sum ok True" in out
    for bad in (["--sort", "speed"], ["--delay", "0"]):
        r = fntrace("top", p.pid if p.proc.poll() is None else 1, "--batch", *bad)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr


def test_the_profilers_files_top_reads(tmp_path):
    """trace_stat/threads names each table's thread; options/profile-wide keeps whole
    names; profile-dist's Self is the time less the callees'."""
    fs = Tracefs()

    def a_function_with_a_name_longer_than_thirty_characters():
        return inner()

    def inner():
        return sum(range(50))

    name = f"{__name__}.test_the_profilers_files_top_reads.<locals>." \
           "a_function_with_a_name_longer_than_thirty_characters"
    try:
        fs.write("set_ftrace_filter", f"{__name__}.*")
        fs.write("options/profile-dist", "1")
        fs.write("function_profile_enabled", "1")
        for _ in range(5):
            a_function_with_a_name_longer_than_thirty_characters()
        t = threading.Thread(target=inner, name="helper")
        t.start()
        t.join()
        fs.write("function_profile_enabled", "0")
        threads = dict(line.split(" ", 1) for line in fs.read("trace_stat/threads").splitlines())
        assert sorted(n.split(" ", 1)[1] for n in threads.values()) == ["MainThread", "helper"]
        cut = fs.read("trace_stat/function" + next(
            c for c, n in threads.items() if n.endswith("MainThread")))
        assert name not in cut and name[:30] in cut
        fs.write("options/profile-wide", "1")
        main = next(c for c, n in threads.items() if n.endswith("MainThread"))
        rows = parse_function_stat(fs.read(f"trace_stat/function{main}"))
        outer = rows[name]
        inner_row = rows[f"{__name__}.test_the_profilers_files_top_reads.<locals>.inner"]
        assert outer[0] == inner_row[0] == 5
        # (hits, time, avg, s^2, min, p50, p90, p99, max, self)
        assert len(outer) == 10
        assert outer[9] == outer[1] - inner_row[1]      # self: less inner's time
        assert inner_row[9] == inner_row[1]             # a leaf's self is its time
        assert outer[4] <= outer[7] <= outer[8]          # min <= p99 <= max
        table = TopTable()
        table.update({int(c): fs.read(f"trace_stat/function{c}") for c in threads}, 1.0)
        row = {r.func: r for r in table.rows()}[inner_row and
                                                 f"{__name__}.test_the_profilers_files_top_reads.<locals>.inner"]
        assert row.hit == 6                     # both threads' tables
    finally:
        fs.write("function_profile_enabled", "0")
        fs.write("set_ftrace_filter", "")


# ---------------------------------------------------------------------------------
# The live screen in a real terminal
# ---------------------------------------------------------------------------------

_SOCK = f"fntrace-top-{os.getpid()}"


def _tmux(*args: str) -> str:
    r = subprocess.run(["tmux", "-L", _SOCK, *args], capture_output=True, text=True,
                       timeout=30)
    return r.stdout + r.stderr


def _screen_with(text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux("capture-pane", "-p", "-t", "top")
        if text in screen:
            return screen
        time.sleep(0.2)
    pytest.fail(f"{text!r} never showed:\n{screen}")


def test_the_live_screen_under_tmux(program, tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("LOUD SKIP: tmux is not installed (apt-get install tmux)")
    pytest.importorskip("textual", reason="LOUD SKIP: textual (the tui extra) is not installed")
    p = program()
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in _env().items()
                   if k in ("PYTHONPATH", "FNTRACE_PURE"))
    # (pytest sets COLUMNS and LINES: the screen would take them for the terminal's size)
    cmd = (f"env -u COLUMNS -u LINES {env} TERM=xterm-256color {sys.executable} "
           f"-m fntrace.cli.main top {p.pid}"
           "; echo EXIT=$?; sleep 60")
    subprocess.run(["tmux", "-L", _SOCK, "new-session", "-d", "-s", "top", "-x", "120",
                    "-y", "20", cmd], check=True, timeout=30)
    unreached = _running_threads_unreached()
    try:
        if unreached:
            # nothing to count here: the screen says why, and quits as it should
            _screen_with("are not counted")
            _tmux("send-keys", "-t", "top", "q")
            _screen_with("EXIT=0")
        else:
            _keys_and_quit()
    finally:
        _tmux("kill-server")
    assert not _controllable(p.pid)
    status, out, _ = p.finish()
    assert status == 3 and "sum ok True" in out and "profile: None" in out


def _keys_and_quit() -> None:
    """Sort, filter, clear the filter and quit, as a person would."""
    screen = _screen_with("__main__.work")
    assert "CALLS/S" in screen and "all threads" in screen
    _tmux("send-keys", "-t", "top", "s")
    _screen_with("sort: hit")
    _tmux("send-keys", "-t", "top", "/")
    # (typed once the box is there, as a person would: keys sent before it has the
    # focus are the table's — t shows another thread)
    _screen_with("function name contains")
    _tmux("send-keys", "-t", "top", "-l", "nothing")
    screen = _screen_with("filter: nothing")
    assert "__main__.work" not in screen and "0 functions" in screen
    _tmux("send-keys", "-t", "top", "Escape")
    _screen_with("__main__.work")
    _tmux("send-keys", "-t", "top", "q")
    _screen_with("EXIT=0")

