"""The kernel's ftrace selftests (tools/testing/selftests/ftrace/test.d), ported, run
against the FUSE mount of a served program.

tests/ftracetest/ holds the runner (ftracetest), the helpers (test.d/functions) and
the ported test cases; the program they control is tests/ftracetest/workload.py, a
"kernel" whose functions have the kernel's names (ksym.schedule, ksym._do_fork ...).
Each test case is one pytest test: the runner's [PASS]/[FAIL]/[UNSUPPORTED] line and,
on failure, the case's `set -x` log are in the assertion message.  Which test.d files
were ported and which do not apply is in tests/ftracetest/README.md.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import fntrace_cli

HERE = Path(__file__).parent / "ftracetest"
CASES = sorted((HERE / "test.d").rglob("*.tc"))


def _fuse_unusable() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "FUSE: /dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "FUSE: fusermount3 is not installed (Debian: apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except Exception:
        return "FUSE: the mfusepy package is missing (pip install fntrace[mount])"
    return None


@pytest.fixture(scope="module")
def mounted(tmp_path_factory):
    why = _fuse_unusable()
    if why:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("ftracetest")
    state, mnt = base / "state", base / "tracing"
    state.mkdir()
    mnt.mkdir()
    # stderr to a file: a pipe nobody reads while the cases run could fill and stop it
    err = open(base / "workload.err", "w+")
    prog = subprocess.Popen([sys.executable, str(HERE / "workload.py"), str(state)],
                            stdout=subprocess.DEVNULL, stderr=err, text=True)
    prog.err_path = base / "workload.err"
    try:
        for _ in range(200):
            if (state / "ready").exists() or prog.poll() is not None:
                break
            time.sleep(0.05)
        assert (state / "ready").exists(), \
            f"the workload did not start: {prog.err_path.read_text()}"
        pid, main_tid = (state / "ready").read_text().split()
        r = fntrace_cli("mount", pid, mnt, timeout=60)
        assert r.returncode == 0, r.stderr
        yield mnt, {"KST_MAIN_TID": main_tid, "KST_STATE": str(state)}, prog
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        prog.send_signal(signal.SIGKILL)
        prog.wait()
        err.close()


def _default_signals() -> None:
    """The cases stop their background loops with `kill -1` (instance.tc,
    instance-event.tc): a suite started under nohup, or in the background of a shell
    without job control, would hand the case SIGHUP (or SIGINT, SIGQUIT) ignored, which
    a shell cannot undo, and the loops would never end."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


# One workload runs every case, in the order of the files, on one pytest-xdist worker
# (scripts/test-all runs with --dist loadgroup): the cases were written for one kernel
# taking them in turn, and two workloads at once would each take a CPU for the whole run.
@pytest.mark.xdist_group("ftracetest")
@pytest.mark.parametrize("case", CASES, ids=[str(c.relative_to(HERE / "test.d")) for c in CASES])
def test_selftest(mounted, case):
    if ("# fntrace-needs: running-threads" in case.read_text()
            and os.environ.get("FNTRACE_PURE") == "1" and sys.version_info < (3, 12)):
        pytest.skip("LOUD SKIP: this case needs events of threads running before tracing "
                    "was switched on; the pure 3.11 hook (sys.setprofile, a Python "
                    "function) cannot be set on them from fntrace's thread")
    mnt, env, prog = mounted
    r = subprocess.run(["bash", str(HERE / "ftracetest"), str(mnt), str(case)],
                       capture_output=True, text=True, timeout=180,
                       env={**os.environ, **env}, preexec_fn=_default_signals)
    if prog.poll() is not None:         # the served workload ended: say how
        pytest.fail(f"the workload ended (exit status {prog.returncode}) during or before "
                    f"this case; its stderr:\n{prog.err_path.read_text()}\n"
                    + r.stdout + r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[PASS]" in r.stdout, r.stdout
