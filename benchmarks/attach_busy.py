#!/usr/bin/env python3
"""``fntrace attach`` to a busy program: time to the first event, and the pause it causes.

A program that knows nothing of fntrace runs a hot loop (``work(i)`` with no sleep) and
keeps the largest gap between two consecutive iterations, and when it happened.  The
driver then does what a user does, each step a ``fntrace`` command in a subprocess:

    fntrace attach PID
    fntrace ctl PID set_ftrace_filter __main__.work
    fntrace ctl PID buffer_size_kb N   (with --buffer-kb N)
    fntrace ctl PID trace_pipe     (started here, read until a line of work() comes)
    fntrace ctl PID current_tracer function
    fntrace detach PID

and reports, per run: the wall time of ``attach`` alone; the time from the start of
``attach`` to the first event read through ``ctl`` (the whole workflow, with the start-up
of four ``fntrace`` processes in it); and the program's longest pause while attach ran
(the largest gap between iterations between attach's start and its end) beside the
largest gap over the same stretch of a run nobody attached to (the machine's noise).

    python benchmarks/attach_busy.py                       # this interpreter, 5 runs
    python benchmarks/attach_busy.py --runs 10 --json
    python benchmarks/attach_busy.py --buffer-kb 4         # trace_pipe's first read short

Wall-clock figures: they depend on the machine's load.  The clocks of the two processes
are the same (time.monotonic_ns, CLOCK_MONOTONIC).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

PROGRAM = r'''
import signal, sys, time
from time import monotonic_ns

def work(i):
    return i * 2

stop = []
signal.signal(signal.SIGUSR1, lambda s, f: stop.append(s))
gaps = []          # (gap ns, end of the gap ns): the largest per 10 ms window
print("ready", flush=True)
last = monotonic_ns()
win_start, win_max, win_at = last, 0, last
while not stop:
    work(1)
    now = monotonic_ns()
    g = now - last
    last = now
    if g > win_max:
        win_max, win_at = g, now
    if now - win_start > 10_000_000:
        gaps.append((win_max, win_at))
        win_start, win_max = now, 0
gaps.append((win_max, win_at))
import json
print(json.dumps(gaps))
'''


def _fntrace(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fntrace", *args], capture_output=True,
                          text=True, env=_common.child_env(), timeout=120)


def _start(tmp: str) -> subprocess.Popen:
    path = os.path.join(tmp, "busy.py")
    with open(path, "w") as f:
        f.write(PROGRAM)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    p = subprocess.Popen([sys.executable, "-I", path], stdout=subprocess.PIPE, text=True,
                         env=env)
    assert p.stdout.readline() == "ready\n"
    return p


def _finish(p: subprocess.Popen) -> list[tuple[int, int]]:
    p.send_signal(signal.SIGUSR1)
    out, _ = p.communicate(timeout=60)
    return [tuple(g) for g in json.loads(out.strip().splitlines()[-1])]


def _max_gap(gaps, t0: int, t1: int) -> int:
    # A gap ending in [t0, t1 + 10 ms] (a pause ends after the injected code returns).
    return max((g for g, at in gaps if t0 <= at <= t1 + 10_000_000), default=0)


BUFFER_KB: int | None = None


def one_run(tmp: str) -> dict:
    # the reference: the same program, the same stretch of time, nobody attaching
    ref = _start(tmp)
    time.sleep(0.3)
    r0 = time.monotonic_ns()
    time.sleep(0.25)
    r1 = time.monotonic_ns()
    ref_gap = _max_gap(_finish(ref), r0, r1)

    p = _start(tmp)
    time.sleep(0.3)
    pid = str(p.pid)
    t0 = time.monotonic_ns()
    r = _fntrace("attach", pid)
    t_attached = time.monotonic_ns()
    if r.returncode != 0:
        p.kill()
        raise SystemExit(f"attach failed: {r.stderr.strip()}")
    steps = []
    w = _fntrace("ctl", pid, "set_ftrace_filter", "__main__.work")
    if w.returncode == 0 and BUFFER_KB is not None:
        w = _fntrace("ctl", pid, "buffer_size_kb", str(BUFFER_KB))
    steps.append(time.monotonic_ns())
    # trace_pipe, streamed by `fntrace ctl`, opened before the tracer is switched on (as
    # a user does in another shell): the first line of work() is the first event.
    pipe = subprocess.Popen([sys.executable, "-m", "fntrace", "ctl", pid, "trace_pipe"],
                            stdout=subprocess.PIPE, text=True, env=_common.child_env())
    w2 = _fntrace("ctl", pid, "current_tracer", "function")
    steps.append(time.monotonic_ns())
    for c, what in ((w, "set_ftrace_filter"), (w2, "current_tracer")):
        if c.returncode != 0:
            p.kill()
            pipe.kill()
            raise SystemExit(f"ctl {what} failed: {c.stderr.strip()}")
    first = None
    for line in pipe.stdout:
        if "__main__.work" in line:
            first = time.monotonic_ns()
            break
    pipe.kill()
    pipe.wait()
    d = _fntrace("detach", pid)
    gaps = _finish(p)
    if first is None:
        raise SystemExit("trace_pipe ended with no event")
    if d.returncode != 0:
        raise SystemExit(f"detach failed: {d.stderr.strip()}")
    return {"attach_ms": (t_attached - t0) / 1e6,
            "filter_ms": (steps[0] - t_attached) / 1e6,
            "tracer_ms": (steps[1] - steps[0]) / 1e6,
            "pipe_ms": (first - steps[1]) / 1e6,
            "first_event_ms": (first - t0) / 1e6,
            "pause_ms": _max_gap(gaps, t0, t_attached) / 1e6,
            "noise_ms": ref_gap / 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--buffer-kb", type=int, default=None,
                    help="write buffer_size_kb before the tracer: a small buffer makes "
                         "trace_pipe's first read short (it returns all that is there)")
    a = ap.parse_args()
    global BUFFER_KB
    BUFFER_KB = a.buffer_kb
    import tempfile
    rows = []
    with tempfile.TemporaryDirectory(prefix="fntrace-attach-") as tmp:
        for _ in range(a.runs):
            rows.append(one_run(tmp))
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    t = time.monotonic_ns()
    _fntrace("--version")
    startup = (time.monotonic_ns() - t) / 1e6
    buf = f", buffer_size_kb {a.buffer_kb}" if a.buffer_kb else ""
    print(f"Python {sys.version.split()[0]}{buf}, {a.runs} runs (median, max); a `fntrace "
          f"--version` takes {startup:.0f} ms here:")
    for key, what in (("attach_ms", "`fntrace attach` (check, inject, endpoint up)"),
                      ("filter_ms", "  then `ctl set_ftrace_filter` (+ buffer_size_kb)"),
                      ("tracer_ms", "  then `ctl current_tracer function` (pipe open)"),
                      ("pipe_ms", "  then to the first line of `ctl trace_pipe`"),
                      ("first_event_ms", "attach start -> first event read through ctl"),
                      ("pause_ms", "the program's longest pause during attach"),
                      ("noise_ms", "longest gap, same stretch, nobody attaching")):
        vals = [r[key] for r in rows]
        print(f"  {what:48s} {statistics.median(vals):8.1f} ms  {max(vals):8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
