"""``fntrace live`` streams (cli/live.py), black box: the command in a subprocess with
pipes, the hold at its default (the other live tests pin it: conftest.py).

A program that prints a marker and then waits on its standard input: live's output
shows the calls made before the wait while the program still waits.  function_graph
prints ``func() {`` for a call still running and ``}`` when it returns.  Every event
appears exactly once, and the end says how many there were; nothing is written to a
temporary file.
"""
from __future__ import annotations

import os
import queue
import re
import subprocess
import textwrap
import threading
import time

import pytest


from support import SUBPROCESS_TIMEOUT, fn_lines, fntrace_argv, fntrace_cli, header_counts

# How long the test waits for a streamed line: the stream's own delay is about
# 0.1 s (hold) + 0.025 s (tick) + 0.05 s (graph grace); the rest is a loaded machine.
WAIT = 20.0

WAITER = """
    import sys

    def leaf(x):
        return x + 1

    def before():
        for i in range(3):
            leaf(i)

    def after():
        leaf(99)

    def main():
        before()
        print("marker", flush=True)
        sys.stdin.readline()
        after()

    main()
"""


class Live:
    """``fntrace live ARGS prog.py`` with its stdout read line by line on a thread."""

    def __init__(self, tmp_path, source: str, *args: str, env: dict | None = None) -> None:
        prog = tmp_path / "prog.py"
        prog.write_text(textwrap.dedent(source))
        e = dict(os.environ)
        e["FNTRACE_LIVE_HOLD"] = "0.1"          # the default
        e.update(env or {})
        self.p = subprocess.Popen(
            fntrace_argv("live", *args, "prog.py"),
            cwd=str(tmp_path), env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pred, what: str) -> list[str]:
        """Lines until one satisfies pred (all of them, that one last)."""
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            if line is None:
                break
            self.seen.append(line)
            if pred(line):
                return self.seen
        self.p.kill()
        raise AssertionError(f"no {what} within {WAIT}s; got:\n" + "\n".join(self.seen))

    def finish(self, stdin: str = "\n") -> tuple[int, str, str]:
        self.p.stdin.write(stdin)
        self.p.stdin.close()
        rc = self.p.wait(SUBPROCESS_TIMEOUT)
        while True:
            line = self.lines.get(timeout=SUBPROCESS_TIMEOUT)
            if line is None:
                break
            self.seen.append(line)
        return rc, "\n".join(self.seen) + "\n", self.p.stderr.read()


def test_calls_show_before_the_program_is_released(tmp_path):
    live = Live(tmp_path, WAITER, "-F", "*:mod:__main__")
    live.wait_for(lambda l: len([x for x in live.seen if "__main__.leaf <-" in x]) == 3,
                  "the three leaf calls made before the wait")
    # the program is still waiting on its stdin: nothing after the wait is shown
    assert live.p.poll() is None
    assert not any("__main__.after" in l for l in live.seen)
    rc, out, err = live.finish()
    assert rc == 0, err
    calls = [(f.func, f.parent) for f in fn_lines(out)]
    assert calls == [("__main__.main", "__main__.<module>"),
                     ("__main__.before", "__main__.main")] + \
        [("__main__.leaf", "__main__.before")] * 3 + \
        [("__main__.after", "__main__.main"), ("__main__.leaf", "__main__.after")]
    # streamed: the header first, the counts at the end, the program's output between
    lines = out.splitlines()
    assert "marker" in lines
    assert [l for l in lines if l != "marker"][0] == "# tracer: function"
    assert lines[-1].startswith("# entries-in-buffer/entries-written: 7/7 ")
    assert header_counts(out)[:2] == (7, 7)
    assert err == ""


def test_graph_open_block_then_its_return(tmp_path):
    live = Live(tmp_path, WAITER, "-p", "function_graph", "-F", "*:mod:__main__")
    live.wait_for(lambda l: l.endswith("|  __main__.main() {"), "main's open block")
    live.wait_for(lambda l: l.endswith("|    }"), "before's return")
    assert live.p.poll() is None
    rc, out, err = live.finish()
    assert rc == 0, err
    body = [re.sub(r"^ *[ +!#*@$] +[\d.]+ us +\|", " X |", l.split(")", 1)[1])
            for l in out.splitlines() if re.match(r"^ *\d+\) ", l)]
    assert body == [
        "               |  __main__.main() {",
        "               |    __main__.before() {",
        " X |      __main__.leaf();",
        " X |      __main__.leaf();",
        " X |      __main__.leaf();",
        " X |    }",
        "               |    __main__.after() {",
        " X |      __main__.leaf();",
        " X |    }",
        " X |  }",
    ], out
    assert [l for l in out.splitlines() if l != "marker"][0] == "# tracer: function_graph"


BUSY = """
    import threading, time

    def leaf(x):
        return x

    def spin(n):
        for i in range(n):
            leaf(i)
            if i % 1000 == 0:
                time.sleep(0.01)

    t = threading.Thread(target=spin, args=(30000,), name="spinner")
    t.start()
    spin(20000)
    t.join()
"""


def test_every_event_exactly_once_while_streaming(tmp_path):
    live = Live(tmp_path, BUSY, "-F", "*:mod:__main__", "-b", "16")
    rc, out, err = live.finish("")
    assert rc == 0, err
    leaves = [f for f in fn_lines(out) if f.func == "__main__.leaf"]
    assert len(leaves) == 50000
    spins = [f for f in fn_lines(out) if f.func == "__main__.spin"]
    assert len(spins) == 2
    n = len(fn_lines(out))
    assert header_counts(out)[:2] == (n, n)
    # it streamed: the header has no counts, they come at the end
    assert not out.splitlines()[2].startswith("# entries-in-buffer/")
    assert out.splitlines()[-1].startswith("# entries-in-buffer/entries-written:")


def test_quick_program_prints_the_whole_trace_as_before(tmp_path):
    live = Live(tmp_path, """
        def f():
            return 1
        f()
        print("out")
    """, "-F", "*:mod:__main__", env={"FNTRACE_LIVE_HOLD": "600"})
    rc, out, err = live.finish("")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "out"
    assert lines[1:5] == ["# tracer: function", "#",
                          "# entries-in-buffer/entries-written: 1/1   #P:1", "#"]


def test_no_temporary_trace_file(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    live = Live(tmp_path, WAITER, "-F", "*:mod:__main__",
                env={"TMPDIR": str(tmp), "TEMP": str(tmp), "TMP": str(tmp)})
    live.wait_for(lambda l: "__main__.before <-" in l, "a streamed line")
    assert list(tmp.iterdir()) == []
    rc, out, err = live.finish()
    assert rc == 0, err
    assert list(tmp.iterdir()) == []


BUSY_FOREVER = """
    import sys, time

    def g(i):
        return i * 2

    def f(i):
        return g(i) + 1

    n = 0
    with open(sys.argv[1], "w") as out:
        while True:
            for i in range(1000):
                f(i)
            out.write(f"{time.monotonic()}\\n")
            out.flush()
"""


@pytest.mark.parametrize("cmd", [("live", "-p", "function_graph"), ("live", "-p", "function"),
                                 ("record", "-o", "t.dat")])
def test_sigterm_stops_the_program_where_it_is(tmp_path, cmd):
    """Issue 25 item 6: ``live -p function_graph`` ran the program on for seconds after
    SIGTERM (it went on writing its file) while the backlog printed, and the output
    ended mid-call with nothing after it.  The program stops at once, as untraced; the
    trace up to there is written, with its counts and what ended it."""
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(BUSY_FOREVER))
    progress = tmp_path / "progress.txt"
    p = subprocess.Popen(fntrace_argv(*cmd, "prog.py", str(progress)), cwd=str(tmp_path),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = []
    threading.Thread(target=lambda: out.append(p.stdout.read()), daemon=True).start()
    end = time.monotonic() + WAIT
    while time.monotonic() < end and (not progress.exists()
                                      or len(progress.read_text().split()) < 20):
        time.sleep(0.05)
    killed = time.monotonic()
    p.send_signal(15)
    rc = p.wait(SUBPROCESS_TIMEOUT)
    err = p.stderr.read().decode()
    assert rc == -15, err
    # Untraced, the signal ends the program where it is.  Traced, the writer thread
    # reads the signal number once it has the GIL (a switch interval, 5 ms) and stops
    # the main thread at its next bytecode; it ran on for seconds before.
    last = float(progress.read_text().split()[-1])
    assert last - killed < 0.5, last - killed
    if cmd[0] == "live":
        deadline = time.monotonic() + WAIT
        while not out and time.monotonic() < deadline:
            time.sleep(0.05)
        text = out[0].decode()
        tail = text.splitlines()[-3:]
        assert tail[-1] == ("# the program was ended by SIGTERM: calls still open then "
                            "have no end"), tail
        # streamed, the counts come last; held (a slow printer), in trace's header
        counts = re.findall(r"^# entries-in-buffer/entries-written: (\d+)/(\d+) ", text,
                            re.M)
        assert counts, text[-2000:]
        for a, b in counts:
            if a != b:
                # a record written after the last chunk was taken (a pure callback
                # the stop cannot interrupt): counted, and said
                assert f"# LOST EVENTS: {int(b) - int(a)}" in text, text[-2000:]
    else:
        rep = fntrace_cli("stat", "t.dat", cwd=tmp_path)
        assert rep.returncode == 0 and "__main__.f" in rep.stdout, rep.stderr
