"""CPU time: the function_graph tracer's sleep-time option (the kernel's
fgraph_sleep_time) through ``record --cpu-time``, ``trace_options``/``options/sleep-time``,
``report`` (the duration printed is rettime - calltime, the CPU time, as the kernel's),
``stat`` (wall time from the entries) and ``stat --cpu-time`` (the CPU time), on a
program with a thread that sleeps, one that computes and one that waits for it."""
from __future__ import annotations

import re

import pytest

from support import fntrace_cli
from fntrace.errors import FntraceError

PROG = """\
import threading
import time

def sleeper():
    time.sleep(0.05)

def spinner():
    t = time.thread_time() + 0.03
    while time.thread_time() < t:
        pass

def waiter(ev):
    ev.wait()

def busy(ev):
    spinner()
    ev.set()

def main():
    for _ in range(3):
        sleeper()
        spinner()
    ev = threading.Event()
    t = threading.Thread(target=busy, args=(ev,), name="busy")
    t.start()
    waiter(ev)
    t.join()

main()
"""

MS = 1_000_000


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpu")
    (d / "prog.py").write_text(PROG)
    fntrace_cli("record", "-p", "function_graph", "-F", "__main__.*", "--cpu-time", "-o",
                "cpu.dat", "prog.py", cwd=d, check=True)
    fntrace_cli("record", "-p", "function_graph", "-F", "__main__.*", "-o", "wall.dat",
                "prog.py", cwd=d, check=True)
    return d


def avg_ns(stdout: str, per_thread: bool = False) -> dict:
    """function (or (thread name, function)) -> its Avg column in ns."""
    out: dict = {}
    thread = None
    for line in stdout.splitlines():
        m = re.match(r"# trace_stat/function\d+: (.*)-\d+$", line)
        if m:
            thread = m.group(1)
            continue
        parts = line.split()
        if len(parts) >= 6 and parts[0].startswith("__main__."):
            us = float(parts[4])        # Avg, in us
            out[(thread, parts[0]) if per_thread else parts[0]] = us * 1000
    return out


def test_stat_gives_wall_time_and_cpu_time_of_one_recording(traces):
    wall = avg_ns(fntrace_cli("stat", "cpu.dat", cwd=traces, check=True).stdout)
    p = fntrace_cli("stat", "cpu.dat", "--cpu-time", cwd=traces, check=True)
    assert p.stdout.startswith("# durations: the threads' CPU time (recorded with "
                               "--cpu-time)\n"), p.stdout
    cpu = avg_ns(p.stdout)
    # sleeping: 50 ms of wall time, next to no CPU time
    assert wall["__main__.sleeper"] >= 45 * MS
    assert cpu["__main__.sleeper"] < 10 * MS
    # computing: its CPU time is its wall time, near enough
    assert cpu["__main__.spinner"] >= 29 * MS
    assert wall["__main__.spinner"] >= cpu["__main__.spinner"]
    # main's CPU time holds its callees' CPU time, not the sleeps
    assert cpu["__main__.main"] < wall["__main__.main"] - 100 * MS
    # per thread: the waiter's thread waited for the busy one's computing
    per = avg_ns(fntrace_cli("stat", "cpu.dat", "--cpu-time", "--per-thread",
                             cwd=traces, check=True).stdout, per_thread=True)
    wper = avg_ns(fntrace_cli("stat", "cpu.dat", "--per-thread", cwd=traces,
                              check=True).stdout, per_thread=True)
    assert per["busy", "__main__.spinner"] >= 29 * MS
    assert per["MainThread", "__main__.waiter"] < 10 * MS
    assert wper["MainThread", "__main__.waiter"] >= 20 * MS


def test_report_prints_the_cpu_time_as_the_kernels_nosleep_time_does(traces):
    p = fntrace_cli("report", "cpu.dat", cwd=traces, check=True)
    durations = {}
    for line in p.stdout.splitlines():
        m = re.search(r"([\d.]+) us\s+\|\s+__main__\.(sleeper|spinner)\(\);", line)
        if m:
            durations.setdefault(m.group(2), []).append(float(m.group(1)) * 1000)
    assert len(durations["sleeper"]) == 3 and len(durations["spinner"]) == 4
    assert max(durations["sleeper"]) < 10 * MS
    assert min(durations["spinner"]) >= 29 * MS
    # without --cpu-time the same program's sleeps are whole
    p = fntrace_cli("report", "wall.dat", cwd=traces, check=True)
    sleeps = [float(m.group(1)) * 1000 for m in
              re.finditer(r"([\d.]+) us\s+\|\s+__main__\.sleeper\(\);", p.stdout)]
    assert len(sleeps) == 3 and min(sleeps) >= 45 * MS


def test_the_threshold_is_on_the_cpu_time(traces):
    # --thresh writes only the returns that took longer: with --cpu-time, longer in CPU
    # time (the kernel's trace_graph_thresh_return after its nosleep-time adjustment):
    # the 50 ms sleeps are under 20 ms of CPU, the 30 ms spins over it
    fntrace_cli("record", "-p", "function_graph", "-F", "__main__.*", "--cpu-time",
                "--thresh", "20000", "-o", "thresh.dat", "prog.py", cwd=traces, check=True)
    out = fntrace_cli("report", "thresh.dat", cwd=traces, check=True).stdout
    assert out.count("__main__.spinner") == 4, out
    assert "__main__.sleeper" not in out


def test_diff_of_cpu_time(traces):
    p = fntrace_cli("diff", "cpu.dat", "cpu.dat", "--cpu-time", "--format", "json",
                    cwd=traces)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count('"function"') >= 5


def test_cpu_time_needs_a_trace_and_a_tracer_that_has_it(traces):
    p = fntrace_cli("stat", "wall.dat", "--cpu-time", cwd=traces)
    assert p.returncode == 2
    assert p.stderr == ("fntrace: --cpu-time: wall.dat holds wall time only (record with "
                        "--cpu-time, the trace option nosleep-time)\n")
    p = fntrace_cli("diff", "wall.dat", "cpu.dat", "--cpu-time", cwd=traces)
    assert p.returncode == 2 and "wall.dat holds wall time only" in p.stderr
    p = fntrace_cli("record", "-p", "function", "--cpu-time", "-o", "f.dat", "prog.py",
                    cwd=traces)
    assert p.returncode == 2
    assert "--cpu-time: only the function_graph tracer has this option" in p.stderr


def test_sleep_time_is_a_trace_option_the_profiler_follows():
    from fntrace.tracefs import Tracefs
    fs = Tracefs()
    assert "sleep-time\n" in fs.read("trace_options")
    assert fs.read("options/sleep-time") == "1\n"
    fs.write("trace_options", "nosleep-time")
    assert "nosleep-time\n" in fs.read("trace_options")
    assert fs.read("options/sleep-time") == "0\n"
    assert fs.tr.sleep_time is False and fs.profiler.sleep_time is False
    fs.write("options/sleep-time", "1")
    assert fs.tr.sleep_time is True and fs.profiler.sleep_time is True
    with pytest.raises(FntraceError):
        fs.write("options/sleep-time", "2")
    assert fs.read("options/sleep-time") == "1\n"
    # an instance has its own
    inst = fs.mkdir("instances/cpu")
    inst.write("options/sleep-time", "0")
    assert inst.tr.sleep_time is False and fs.tr.sleep_time is True
    fs.rmdir("instances/cpu")
