"""The hot path under exotic frames: generators, coroutines, exceptions, threads,
fork and interpreter shutdown — through the command line, on the native twin and on
the pure-Python path, which must agree line for line.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import SUBPROCESS_TIMEOUT

EXOTIC = textwrap.dedent("""\
    import threading

    def leaf(x):
        return x + 1

    def rec(n):
        return leaf(n) if n == 0 else rec(n - 1) + 1

    def boom(n):
        if n == 0:
            raise ValueError("deep")
        return boom(n - 1)

    def catcher():
        try:
            boom(3)
        except ValueError:
            return leaf(1)

    def gen(n):
        for i in range(n):
            got = yield leaf(i)
            if got:
                leaf(got)

    def drive():
        g = gen(5)
        next(g)
        g.send(7)
        next(g)
        try:
            g.throw(KeyError("k"))
        except KeyError:
            pass
        g.close()

    async def co(n):
        return leaf(n)

    async def co_main():
        return await co(1) + await co(2)

    def run_co():
        c = co_main()
        try:
            c.send(None)
        except StopIteration as e:
            return e.value

    def worker():
        rec(2)
        catcher()

    def main():
        rec(4)
        catcher()
        drive()
        run_co()
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        leaf(0)

    main()
""")


def _env(pure: bool) -> dict:
    env = dict(os.environ)
    env["FNTRACE_PURE"] = "1" if pure else "0"
    return env


def _fntrace(args, cwd, env):
    p = subprocess.run([sys.executable, "-m", "fntrace.cli.main", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert p.returncode == 0, p.stderr
    return p


_DURATION = re.compile(r"^\s*(\d+)\)\s.*?\|(.*)$")


def _graph_lines(text: str) -> list[tuple[str, str]]:
    """(cpu, call column) of each function_graph line: durations differ run to run."""
    out = []
    for line in text.splitlines():
        m = _DURATION.match(line)
        if m:
            out.append((m.group(1), m.group(2).rstrip()))
    return out


@pytest.mark.parametrize("extra", [[], ["-R"], ["-A", "-R"]])
def test_native_and_pure_paths_write_the_same_graph(tmp_path, extra):
    (tmp_path / "prog.py").write_text(EXOTIC)
    texts = []
    for pure in (False, True):
        out = str(tmp_path / f"t{int(pure)}.dat")
        _fntrace(["record", "-p", "function_graph", *extra, "-F", "*:mod:__main__",
                  "-o", out, "prog.py"], tmp_path, _env(pure))
        texts.append(_fntrace(["report", out], tmp_path, _env(pure)).stdout)
    native, pure = (_graph_lines(t) for t in texts)
    assert len(native) > 60
    assert native == pure
    calls = "\n".join(c for _, c in native)
    # generator slices, the thrown-into generator, the coroutines, the thread's calls
    assert calls.count("__main__.gen(") >= 4
    assert "__main__.co(" in calls and "__main__.co_main(" in calls
    assert {cpu for cpu, _ in native} == {"0", "1"}


FORKING = textwrap.dedent("""\
    import os

    def leaf(x):
        return x + 1

    def child_work():
        return sum(leaf(i) for i in range(50))

    def main():
        leaf(1)
        pid = os.fork()
        if pid == 0:
            child_work()
            return "child"          # the child runs on to the end of the program
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        leaf(2)
        return "parent"

    print(main())
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("pure", [False, True])
def test_a_forked_child_leaves_the_parents_trace_file_whole(tmp_path, pure):
    (tmp_path / "prog.py").write_text(FORKING)
    out = str(tmp_path / "t.dat")
    # (--no-follow: the child is not traced; followed, it writes a file of its own,
    # test_processes.py)
    p = _fntrace(["record", "--no-follow", "-p", "function_graph", "-F", "*:mod:__main__",
                  "-o", out, "prog.py"], tmp_path, _env(pure))
    assert sorted(p.stdout.split()) == ["child", "parent"]
    rep = _fntrace(["report", out], tmp_path, _env(pure))
    assert "cut short" not in rep.stderr
    calls = [c.strip() for _, c in _graph_lines(rep.stdout)]
    assert "__main__.leaf(); /* ret=... */" not in calls
    # the parent's calls, each once: the child wrote nothing into the parent's file
    main_lines = [c for c in calls if c.startswith("__main__.main()")]
    assert len(main_lines) == 1
    assert sum(c.startswith("__main__.leaf()") for c in calls) == 2


SHUTDOWN = textwrap.dedent("""\
    import atexit
    import threading
    import time

    import fntrace
    import work

    t = fntrace.tracefs()
    t.write("set_ftrace_filter", "work.*")
    t.write("current_tracer", {tracer!r})

    def spin():
        while True:
            work.rec(3)

    threading.Thread(target=spin, daemon=True).start()
    atexit.register(work.rec, 5)
    work.rec(5)
    time.sleep(0.05)
    print("bye")
    # exits with the tracer on and a daemon thread inside traced calls
""")

WORK = textwrap.dedent("""\
    def leaf(x):
        return x + 1

    def rec(n):
        return leaf(n) if n == 0 else rec(n - 1) + 1
""")


@pytest.mark.parametrize("tracer", ["function_graph", "function"])
@pytest.mark.parametrize("pure", [False, True])
def test_interpreter_shutdown_with_tracing_on(tmp_path, tracer, pure):
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "prog.py").write_text(SHUTDOWN.format(tracer=tracer))
    env = _env(pure)
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "bye\n"
    assert "Traceback" not in p.stderr and "Fatal" not in p.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_live_reports_once_when_the_program_forks(tmp_path):
    (tmp_path / "prog.py").write_text(FORKING)
    p = _fntrace(["live", "-p", "function_graph", "-F", "*:mod:__main__", "prog.py"],
                 tmp_path, dict(os.environ))
    lines = p.stdout.splitlines()
    assert lines.count("child") == 1 and lines.count("parent") == 1
    assert p.stdout.count("# tracer: function_graph") == 1
    assert p.stdout.count("__main__.main()") == 1
