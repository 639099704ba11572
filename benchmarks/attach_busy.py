#!/usr/bin/env python3
"""``fntrace attach`` to a busy program: time to the first event, and the pause it causes.

A program that knows nothing of fntrace runs a hot loop (``work(i)`` with no sleep) and
keeps the largest gap between two consecutive iterations, and when it happened.  The
driver then does what a user does, each step a ``fntrace`` command in a subprocess:

    fntrace attach PID
    fntrace ctl PID set_ftrace_filter __main__.work
    fntrace ctl PID current_tracer function
    fntrace ctl PID trace          (repeated until a line of work() is there)
    fntrace detach PID

and reports, per run: the wall time of ``attach`` alone; the time from the start of
``attach`` to the first event read through ``ctl`` (the whole workflow, with the start-up
of four ``fntrace`` processes in it); and the program's longest pause while attach ran
(the largest gap between iterations between attach's start and its end) beside the
largest gap over the same stretch of a run nobody attached to (the machine's noise).

    python benchmarks/attach_busy.py                       # this interpreter, 5 runs
    python benchmarks/attach_busy.py --runs 10 --json

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
    for args in (("set_ftrace_filter", "__main__.work"), ("current_tracer", "function")):
        w = _fntrace("ctl", pid, *args)
        if w.returncode != 0:
            p.kill()
            raise SystemExit(f"ctl {' '.join(args)} failed: {w.stderr.strip()}")
    first = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = _fntrace("ctl", pid, "trace").stdout
        if any("__main__.work" in ln for ln in text.splitlines() if not ln.startswith("#")):
            first = time.monotonic_ns()
            break
    d = _fntrace("detach", pid)
    gaps = _finish(p)
    if first is None:
        raise SystemExit("no event within 30 s")
    if d.returncode != 0:
        raise SystemExit(f"detach failed: {d.stderr.strip()}")
    return {"attach_ms": (t_attached - t0) / 1e6,
            "first_event_ms": (first - t0) / 1e6,
            "pause_ms": _max_gap(gaps, t0, t_attached) / 1e6,
            "noise_ms": ref_gap / 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import tempfile
    rows = []
    with tempfile.TemporaryDirectory(prefix="fntrace-attach-") as tmp:
        for _ in range(a.runs):
            rows.append(one_run(tmp))
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"Python {sys.version.split()[0]}, {a.runs} runs (median, max):")
    for key, what in (("attach_ms", "`fntrace attach` (check, inject, endpoint up)"),
                      ("first_event_ms", "attach start -> first event read through ctl"),
                      ("pause_ms", "the program's longest pause during attach"),
                      ("noise_ms", "longest gap, same stretch, nobody attaching")):
        vals = [r[key] for r in rows]
        print(f"  {what:48s} {statistics.median(vals):8.1f} ms  {max(vals):8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
