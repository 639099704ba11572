#!/usr/bin/env python3
"""Nanoseconds per call, the figure users compare: an empty function called in a loop,
timed inside the program (time.perf_counter_ns around the loop, so start-up and the
write-out at exit are left out), minus the same loop untraced.

    untraced      python prog.py N
    traced        fntrace record -p function_graph -F __main__.f   (each call recorded)
    function      fntrace record -p function -F __main__.f   (each call's entry recorded)
    untraced, tracing on   fntrace record -p function_graph -F __main__.g   (g is never
                  called: f runs while the tracer is on, not selected)
    cProfile      python -m cProfile -o FILE prog.py N
    floor         sys.monitoring PY_START and PY_RETURN calling C functions that do
                  nothing (operator.is_, str.format): what any sys.monitoring tool pays
                  (3.12+)
    floor, PY_START only   the same without PY_RETURN: the function tracer's floor

Wall time on a shared machine is noisy: each configuration runs --runs times,
interleaved, and the fastest run is kept (the one least disturbed).  Instruction counts
(callgrind) of the same are in graph_vs_peers.py and startup.py.

    python benchmarks/ns_per_call.py [--python EXE]... [--n 2000000] [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

PROG = """\
import sys, time

def f():
    pass

def g():
    pass

def main(n):
    t = time.perf_counter_ns()
    for _ in range(n):
        f()
    return time.perf_counter_ns() - t

""" + _common.FLOOR + """\
print("loop_ns", main(int(sys.argv[1])), file=sys.stderr)
"""

CONFIGS = ("untraced", "traced", "tracing on, f not selected", "cProfile", "floor",
           "function", "floor, PY_START only")


def command(python: str, config: str, prog: str, n: int, out: str) -> list[str]:
    rec = [python, "-m", "fntrace", "record", "-p", "function_graph", "-o", out]
    return {
        "untraced": [python, prog, str(n)],
        "traced": [*rec, "-F", "__main__.f", prog, str(n)],
        "tracing on, f not selected": [*rec, "-F", "__main__.g", prog, str(n)],
        "cProfile": [python, "-m", "cProfile", "-o", out, prog, str(n)],
        "floor": [python, prog, str(n), "floor"],
        "function": [python, "-m", "fntrace", "record", "-p", "function", "-o", out,
                     "-F", "__main__.f", prog, str(n)],
        "floor, PY_START only": [python, prog, str(n), "floor1"],
    }[config]


def loop_ns(cmd: list[str], env: dict) -> int:
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    for line in p.stderr.splitlines():
        if line.startswith("loop_ns "):
            return int(line.split()[1])
    raise RuntimeError(f"{' '.join(cmd)}: no loop time (status {p.returncode}):\n"
                       + p.stderr[-2000:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", default=[])
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    rows = []
    for python in a.python or [sys.executable]:
        env = _common.child_env({"FNTRACE_PURE": "0"})
        info = _common.probe(python, env)
        if not info["native"]:
            raise SystemExit(f"{python}: fntrace's native twin is not built for it")
        configs = [c for c in CONFIGS
                   if not c.startswith("floor") or tuple(map(int, info["version"].split(".")[:2])) >= (3, 12)]
        best: dict[str, int] = {}
        with tempfile.TemporaryDirectory() as d:
            prog = os.path.join(d, "prog.py")
            with open(prog, "w") as f:
                f.write(PROG)
            out = os.path.join(d, "out")
            for _ in range(a.runs):
                for c in configs:           # interleaved: a slow moment hits them all
                    t = loop_ns(command(python, c, prog, a.n, out), env)
                    best[c] = min(best.get(c, t), t)
        base = best["untraced"] / a.n
        label = f"{info['version']} ({info['backend']})"
        rows.append((label, base, {c: best[c] / a.n - base for c in configs if c != "untraced"}))
    print(f"ns per call of an empty function, added to its untraced cost; the fastest of "
          f"{a.runs} runs of {a.n:,} calls")
    print()
    print("| Python | untraced call | " + " | ".join(c for c in CONFIGS[1:]) + " |")
    print("|---|---:|" + "---:|" * (len(CONFIGS) - 1))
    for label, base, added in rows:
        cells = [f"{added[c]:+.0f}" if c in added else "—" for c in CONFIGS[1:]]
        print(f"| {label} | {base:.0f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
