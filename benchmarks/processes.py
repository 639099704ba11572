#!/usr/bin/env python3
"""What following processes costs: instructions per traced call in a multiprocessing
pool of 4 workers beside the same calls in one process, ``record -p function_graph``.

    python benchmarks/processes.py                              # this interpreter
    python benchmarks/processes.py --python .venvs/py3.12/bin/python --n 100000

The program calls ``leaf`` N times, either itself (single) or split over a Pool(4) of
the given start method (fork, spawn).  Each is run untraced (``python prog.py``) and
under ``fntrace record -p function_graph -F '*:mod:__main__'``, with N and with 0;
every process of the run is counted (callgrind --trace-children=yes: the workers, the
resource tracker, fntrace's writer threads).  Added cost per call =
((traced(N) - traced(0)) - (untraced(N) - untraced(0))) / N: what starting the pool, a
worker's bootstrap and its file cost is in the N = 0 runs and cancels out.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

PROG = '''\
import multiprocessing as mp, sys

def leaf(x):
    return x + 1

def work(n):
    s = 0
    for i in range(n):
        s += leaf(i)
    return s

if __name__ == "__main__":
    how, n = sys.argv[1], int(sys.argv[2])
    if how == "single":
        work(n)
    else:
        with mp.get_context(how).Pool(4) as p:
            p.map(work, [n // 4] * 4, chunksize=1)
'''

_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def count(python: str, args: list[str], env: dict, cwd: str) -> int:
    """Instructions of the whole process tree."""
    subprocess.run([python, *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)     # warm the caches
    p = subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes",
                        "--callgrind-out-file=/dev/null", python, *args],
                       env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{args} failed under callgrind:\n{p.stderr[-3000:]}")
    return sum(int(x) for x in _COLLECTED.findall(p.stderr))


def main() -> None:
    ap = _common.callgrind_parser(__doc__, 200_000)
    ap.add_argument("--methods", default="single,fork,spawn")
    a = ap.parse_args()
    for python, env, label, d, _ in _common.each_run(a, PROG, "prog.py"):
        rec = ["-m", "fntrace.cli.main", "record", "-o", "t.dat", "-p",
               "function_graph", "-F", "*:mod:__main__"]
        print(f"{label}: N = {a.n:,} calls of leaf, function_graph")
        print(f"  {'':8} {'untraced/call':>14} {'added/call':>11}  vs single")
        single = None
        for how in a.methods.split(","):
            u = [count(python, ["prog.py", how, str(n)], env, d) for n in (0, a.n)]
            t = [count(python, rec + ["prog.py", how, str(n)], env, d) for n in (0, a.n)]
            base = (u[1] - u[0]) / a.n
            added = ((t[1] - t[0]) - (u[1] - u[0])) / a.n
            if how == "single":
                single = added
            ratio = f"{added / single:.3f}" if single else "-"
            print(f"  {how:8} {base:>14,.0f} {added:>11,.0f}  {ratio}", flush=True)


if __name__ == "__main__":
    main()
