"""Forked children under ``fntrace record``: each child's calls are all in its own file,
however many it makes and however it ends, and the program cannot tell that a trace
writer runs beside it (threads it sees, fork()'s warning, os.fork itself).

Run natively and with FNTRACE_PURE=1 by the test command (the environment reaches the
recorded program).
"""
from __future__ import annotations

import os
import re
import sys
import textwrap

import pytest

from support import fntrace_cli, run_python

# Children forked one after another; each calls f() N times, then ends HOW: falling off
# the end of the program ("return"), sys.exit, os._exit, or SIGTERM to itself.  The
# parent prints one line per child: pid, N, HOW, exit code.
STRESS = textwrap.dedent("""\
    import os, signal, sys

    def f():
        pass

    def child(n, how):
        for _ in range(n):
            f()
        if how == "exit":
            sys.exit(0)
        if how == "_exit":
            os._exit(0)
        if how == "signal":
            os.kill(os.getpid(), signal.SIGTERM)
            while True:         # untraced, the signal ends it before the next line
                pass

    plan = [(int(n), how) for n, how in (a.split(":") for a in sys.argv[1:])]
    kids = {}
    for n, how in plan:
        pid = os.fork()
        if pid == 0:
            child(n, how)
            break
        kids[pid] = (n, how)
    else:
        for pid, (n, how) in kids.items():
            _, st = os.waitpid(pid, 0)
            print(pid, n, how, os.waitstatus_to_exitcode(st))
    """)

EXPECTED_STATUS = {"return": 0, "exit": 0, "_exit": 0, "signal": -15}


def _plan(forks: int, big: list[int]) -> list[str]:
    counts = [0, 1, 7, 100, 1000, 5000]
    hows = list(EXPECTED_STATUS)
    # every count meets every way to end (6 and 4 are not coprime: shift each round)
    plan = [f"{counts[i % len(counts)]}:{hows[(i + i // len(counts)) % len(hows)]}"
            for i in range(forks)]
    plan += [f"{n}:{hows[i % len(hows)]}" for i, n in enumerate(big)]
    return plan


def _hits_per_process(stat_text: str) -> dict[int, int]:
    """pid -> hits of __main__.f, from ``fntrace stat --per-thread`` (each child has one
    thread: its main one)."""
    hits: dict[int, int] = {}
    pid = None
    for line in stat_text.splitlines():
        m = re.match(r"# trace_stat/function\d+: .*-(\d+)$", line)
        if m:
            pid = int(m.group(1))
            continue
        m = re.match(r"\s+__main__\.f\s+(\d+)", line)
        if m and pid is not None:
            hits[pid] = hits.get(pid, 0) + int(m.group(1))
    return hits


def _check_children(out: str, hits: dict[int, int], plan: list[str]) -> None:
    rows = [line.split() for line in out.splitlines()]
    assert len(rows) == len(plan), out[-2000:]
    for pid, n, how, status in rows:
        assert int(status) == EXPECTED_STATUS[how], (pid, n, how, status)
        if int(n):
            assert hits.get(int(pid)) == int(n), (pid, n, how, hits.get(int(pid)))
        else:
            assert int(pid) not in hits


@pytest.mark.parametrize("tracer,forks,big", [
    ("function", 120, [200_000, 1_000_000]),
    ("function_graph", 30, [200_000]),
])
def test_hundreds_of_forked_children_each_with_every_call(tmp_path, run_fntrace, tracer,
                                                          forks, big):
    """Issue 25 items 1 and 2: a child making many calls used to spin for ever in the
    hand-over to its parent's queue, and one ending by sys.exit lost every event."""
    (tmp_path / "stress.py").write_text(STRESS)
    plan = _plan(forks, big)
    r = run_fntrace("record", "-p", tracer, "-F", "__main__.f", "-o", "t.dat",
                    "stress.py", *plan)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "LOST" not in r.stderr and "lost" not in r.stderr, r.stderr[-3000:]
    st = run_fntrace("stat", "--per-thread", "t.dat")
    assert st.returncode == 0, st.stderr[-3000:]
    assert "cut short" not in st.stderr, st.stderr[-3000:]
    _check_children(r.stdout, _hits_per_process(st.stdout), plan)


CURRENT_FRAMES = textwrap.dedent("""\
    import os, sys, threading, time

    # CPython's test_threading.ThreadJoinOnShutdown.test_clear_threads_states_after_fork
    threads = [threading.Thread(target=lambda: time.sleep(0.3)) for _ in range(int(sys.argv[1]))]
    for t in threads:
        t.start()
    print("before", len(sys._current_frames()), threading.active_count(), flush=True)
    pid = os.fork()
    if pid == 0:
        print("child", len(sys._current_frames()), threading.active_count(), flush=True)
        os._exit(51 if len(sys._current_frames()) == 1 else 52)
    print("status", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    for t in threads:
        t.join()
    """)


@pytest.mark.parametrize("threads", [0, 16])
@pytest.mark.parametrize("follow", [True, False, "serve"])
def test_the_program_sees_its_own_threads_only(tmp_path, run_fntrace, threads, follow):
    """Issue 25 item 3: after fork the child's sys._current_frames() had fntrace's writer
    thread in it.  With --serve the control endpoint's accepting thread was in the
    parent's (a frame waiting in accept())."""
    (tmp_path / "frames.py").write_text(CURRENT_FRAMES)
    want = run_python("frames.py", str(threads), cwd=tmp_path)
    args = ["record", "-o", "t.dat"] + ([] if follow else ["--no-follow"]) + (
        ["--serve"] if follow == "serve" else [])
    r = run_fntrace(*args, "frames.py", str(threads))
    assert r.returncode == 0, r.stderr
    assert want.stdout == r.stdout
    assert "status 51" in r.stdout
    # fork()'s warning (3.12+) where the program has threads of its own, and only there
    assert _program_lines(r.stderr, tmp_path) == _program_lines(want.stderr, tmp_path)


def _program_lines(stderr: str, tmp_path) -> list[str]:
    """The program's own lines of stderr (not fntrace's), pids and paths left out."""
    pid = re.compile(r"pid=\d+")
    return [pid.sub("", ln.replace(str(tmp_path), "")) for ln in stderr.splitlines()
            if not ln.startswith("fntrace:")]


FORK_WARNING = textwrap.dedent("""\
    import inspect, os, sys, threading, time

    f = os.fork
    print(type(f).__name__, f.__name__, f.__qualname__, f.__module__,
          inspect.signature(f), repr(f.__doc__), f.__text_signature__)
    if sys.argv[1] == "threads":
        t = threading.Thread(target=time.sleep, args=(0.2,))
        t.start()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    if sys.argv[1] == "threads":
        t.join()
    """)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="fork() warns from 3.12 on")
@pytest.mark.parametrize("kind", ["alone", "threads"])
@pytest.mark.parametrize("serve", [False, True])
def test_fork_warns_exactly_when_it_does_untraced(tmp_path, kind, serve):
    """Issue 25 item 4: the writer thread made every fork() of a single-threaded program
    print 'DeprecationWarning: This process ... is multi-threaded'.  A program that has
    threads of its own still gets it, naming its own line.  With --serve, the control
    endpoint's accepting thread made it too."""
    (tmp_path / "w.py").write_text(FORK_WARNING)
    want = run_python("-W", "always::DeprecationWarning", "w.py", kind, cwd=tmp_path)
    # (-W for the traced program: through the environment, as python would read it)
    r = fntrace_cli("record", "-o", "t.dat", *(["--serve"] if serve else []), "w.py", kind,
                    cwd=tmp_path,
                    env=dict(os.environ, PYTHONWARNINGS="always::DeprecationWarning"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == want.stdout
    exp = _program_lines(want.stderr, tmp_path)
    assert _program_lines(r.stderr, tmp_path) == exp
    assert bool(exp) == (kind == "threads")
