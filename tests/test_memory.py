"""Memory stays flat as a traced run gets longer (the ring buffer is the only store).

Peak RSS of a child (os.wait4) is compared between a run and one ten times as long:
the traced growth may not exceed the untraced growth by more than a few MiB, while ten
times the events (12 MiB of records and more) pass through.  RSS, not time: it does
not depend on how busy the machine is.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from support import fntrace_argv

SLACK_KIB = 4096

PROGRAM = textwrap.dedent("""\
    import sys

    def leaf(i):
        return i + 1

    def mid(i):
        return leaf(i) + leaf(i)

    def gen(n):
        for i in range(n):
            yield mid(i)

    def main(n):
        return sum(gen(n))

    if __name__ == "__main__":
        main(int(sys.argv[1]))
""")

IN_PROCESS = textwrap.dedent("""\
    import sys
    import fntrace
    import work
    t = fntrace.tracefs()
    t.write("buffer_size_kb", "64")
    t.write("set_ftrace_filter", "work.*")
    t.write("current_tracer", sys.argv[2])
    work.main(int(sys.argv[1]))
    assert int(t.read("trace").count("\\n")) > 10
    t.write("current_tracer", "nop")
""")


def _peak_kib(argv, cwd, env=None) -> int:
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, err
    return ru.ru_maxrss


@pytest.fixture
def prog(tmp_path):
    (tmp_path / "work.py").write_text(PROGRAM)
    (tmp_path / "inproc.py").write_text(IN_PROCESS)
    return tmp_path


def _growth(argv_for, cwd, env=None):
    small = _peak_kib(argv_for(10_000), cwd, env)
    big = _peak_kib(argv_for(100_000), cwd, env)
    return big - small


@pytest.mark.parametrize("tracer,extra", [("function_graph", []), ("function", []),
                                          ("function_graph", ["-R"])])
def test_record_peak_rss_does_not_grow_with_run_length(prog, tracer, extra):
    out = str(prog / "t.dat")
    untraced = _growth(lambda n: [sys.executable, "work.py", str(n)], prog)
    traced = _growth(lambda n: fntrace_argv("record", "-p", tracer, *extra, "-b", "64", "-o",
                                            out, "work.py", str(n)), prog)
    assert os.path.getsize(out) > 100_000 * 3 * 2        # the events did pass through
    assert traced <= untraced + SLACK_KIB, (traced, untraced)


@pytest.mark.parametrize("tracer", ["function_graph", "function"])
def test_tracefs_overwrite_peak_rss_does_not_grow_with_run_length(prog, tracer):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(prog) + os.pathsep + env.get("PYTHONPATH", "")
    untraced = _growth(lambda n: [sys.executable, "work.py", str(n)], prog)
    traced = _growth(lambda n: [sys.executable, "inproc.py", str(n), tracer], prog, env)
    assert traced <= untraced + SLACK_KIB, (traced, untraced)
