#!/usr/bin/env python3
"""A live instance's ``trace`` read: what a ``cat trace`` costs the traced program.

A served program renders every read of its tracefs files itself, so the read is paid for
in the program's own CPU time.  fib(N) is traced in process (a Tracefs, a buffer large
enough to lose nothing, ``set_ftrace_filter`` = fib) with the function tracer and with
function_graph; ``trace`` is then read with the native text walk (the ring buffers fed to
the printer ``fntrace report`` uses) and with the Python printer (the native twin hidden,
as FNTRACE_PURE=1 would), and the two texts compared.  CPU time of the read
(``time.process_time``), the fastest of --runs.

    python benchmarks/live_read.py [--python EXE]... [--n 22] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

CHILD = """\
import sys, time
from fntrace import _env
from fntrace.tracefs import Tracefs

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

n, runs = int(sys.argv[1]), int(sys.argv[2])
fs = Tracefs()
fs.write("buffer_size_kb", "16384")
fs.write("set_ftrace_filter", "__main__.fib")
native = _env.native

def timed():
    best, text = None, None
    for _ in range(runs):
        t0 = time.process_time()
        text = fs.read("trace")
        dt = time.process_time() - t0
        best = dt if best is None else min(best, dt)
    return best, text

for tracer in ("function", "function_graph"):
    fs.write("current_tracer", tracer)
    fib(n)
    fs.write("tracing_on", "0")
    t_native, a = timed()
    _env.native = lambda: None
    t_python, b = timed()
    _env.native = native
    print(tracer, a.count("\\n"), t_native, t_python, int(a == b))
    fs.write("current_tracer", "nop")
    fs.write("trace", "")
    fs.write("tracing_on", "1")
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", action="append", default=None)
    ap.add_argument("--n", type=int, default=22)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    rows = []
    for python in a.python or [sys.executable]:
        label = _common.python_label(python)
        out = subprocess.run([python, "-c", CHILD, str(a.n), str(a.runs)],
                             capture_output=True, text=True, env=_common.child_env())
        if out.returncode != 0:
            print(f"{label}: failed\n{out.stderr}", file=sys.stderr)
            return 1
        for line in out.stdout.splitlines():
            tracer, lines, tn, tp, same = line.split()
            rows.append((label, tracer, int(lines), float(tn), float(tp), same == "1"))
    print("| Python | tracer | lines | native walk | Python printer | ratio | same text |")
    print("|---|---|---:|---:|---:|---:|---|")
    for label, tracer, lines, tn, tp, same in rows:
        print(f"| {label} | {tracer} | {_common.fmt_int(lines)} | {tn * 1000:.1f} ms "
              f"| {tp * 1000:.1f} ms | {tp / tn:.1f}x | {'yes' if same else 'NO'} |")
    return 0 if all(r[5] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
