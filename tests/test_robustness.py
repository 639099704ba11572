"""The hot path under exotic frames: generators, coroutines, exceptions, threads,
fork and interpreter shutdown — through the command line, on the native twin and on
the pure-Python path, which must agree line for line.
"""
from __future__ import annotations

import os
import re
import textwrap

import pytest

from fntrace import _env as fntrace_env

from support import fntrace_cli, run_python

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
    return fntrace_cli(*args, cwd=cwd, env=env, check=True)


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
    p = run_python("prog.py", cwd=tmp_path, env=env)
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


# -- At the recursion limit (issue 25 items 8 and 10) --------------------------------

NEAR_THE_LIMIT = """
import sys

def leaf(i):
    return i

def loop():
    t = 0
    for i in range(100000):
        t += leaf(i)
    return t

def deep(n):
    return loop() if n == 0 else deep(n - 1)

def depth():
    f, d = sys._getframe(), 0
    while f:
        d, f = d + 1, f.f_back
    return d

# loop()'s calls of leaf() run 2 frames below the limit: leaf is seen there first
print(deep(sys.getrecursionlimit() - depth() - 2))
"""

ENDLESS = """
import sys

calls = 0

def down(n):
    global calls
    calls += 1
    return down(n + 1)

sys.setrecursionlimit(200)
for _ in range(50):
    try:
        down(0)
    except RecursionError:
        pass
print("calls", calls)
"""


def _hits(run_fntrace, name: str) -> int:
    st = run_fntrace("stat", "t.dat")
    assert st.returncode == 0, st.stderr
    m = re.search(rf"^\s+{re.escape(name)}\s+(\d+)", st.stdout, re.M)
    return int(m.group(1)) if m else 0


@pytest.mark.parametrize("tracer", ["function", "function_graph"])
@pytest.mark.parametrize("prog,name", [(NEAR_THE_LIMIT, "__main__.leaf"),
                                       (ENDLESS, "__main__.down")],
                         ids=["near-the-limit", "endless"])
def test_calls_at_the_recursion_limit_are_traced_or_said(tmp_path, run_fntrace, tracer,
                                                         prog, name):
    """A function first seen within a few frames of the limit lost all its calls on
    3.11 (the native callback's call into Python failed there, and so did the error's
    counting and its notice); an endless recursion the program catches lost the notice
    of the errors it counted.  The native callbacks borrow frames for their own Python
    calls: every call is traced, and the program still meets its limit where it would.
    The pure hook runs on the program's stack: what it cannot trace there is counted in
    the header and said on stderr."""
    (tmp_path / "p.py").write_text(prog)
    want = run_python("p.py", cwd=tmp_path)
    r = run_fntrace("record", "-p", tracer, "-o", "t.dat", "p.py")
    assert r.returncode == want.returncode == 0, r.stderr
    expected = (100000 if prog is NEAR_THE_LIMIT
                else int(want.stdout.split()[-1]))
    hits = _hits(run_fntrace, name)
    rep = run_fntrace("report", "t.dat")
    errors = re.search(r"# callback errors: (\d+)", rep.stdout)
    if fntrace_env.native() is not None:
        assert r.stdout == want.stdout          # the same depth reached
        assert hits == expected and errors is None, (hits, r.stderr)
    else:
        assert hits == expected or (errors and "fntrace:" in r.stderr), (hits, r.stderr)
