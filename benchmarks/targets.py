#!/usr/bin/env python3
"""The record path's targets, each beside what it is measured against, in one run.

Callgrind, whole-process instructions (PYTHONHASHSEED=0, byte code cached by a first
run), for each interpreter asked for (native hot path):

  function_graph    `fntrace record -p function_graph -o F fib.py N`, per call: the
                    difference of N = 20 and 22 (35,422 calls), the same difference of
                    the untraced program taken out.  Against cProfile (`python -m
                    cProfile -o F fib.py N`, the same way) and the floor any
                    sys.monitoring tool pays: PY_START calling operator.is_ and PY_RETURN
                    calling "".format, C functions that do nothing (the program
                    registers them itself).
                    Targets: <= 0.85x cProfile, <= 1.3x the floor.
  function          `fntrace record -p function`, the same way, against cProfile and the
                    floor of PY_START alone.  Targets: <= 0.6x cProfile, <= 3x the floor.
  -A -R             args_cost.py's fib (fib(24): several chunks) and stdlib workloads:
                    function_graph with -A -R against plain function_graph.
                    Targets: <= 3x on ints, <= 5x on the stdlib mix.
  cold filter       cold_filter.py: the function tracer registered for one function
                    nobody calls, the workload-only ratio to untraced.  Target: <= 1.02x.
  start-up          `fntrace record -o F empty.py` against `python empty.py`.
                    Target: <= 2x.
  thread            startup.py's: one more recorded thread, less the same untraced.
                    Target: <= 100 k instructions.

3.11 has no sys.monitoring: its floors are not measured (its setprofile back end is
not the targets' subject; its figures are shown all the same).

    python benchmarks/targets.py --python .venvs/py3.12/bin/python \\
        --python .venvs/py3.13/bin/python

It prints a Markdown table for each interpreter (the progress goes to stderr).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402
from startup import THREADS  # noqa: E402

FIB = """\
import sys

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

""" + _common.FLOOR + """\
fib(int(sys.argv[1]))
"""


def fib_calls(n: int) -> int:
    a, b = 0, 1                 # fib(n) makes 2 * F(n + 1) - 1 calls
    for _ in range(n + 1):
        a, b = b, a + b
    return 2 * a - 1


def measure(python: str, threads: int) -> dict:
    env = _common.child_env({"FNTRACE_PURE": "0"})
    info = _common.probe(python, env)
    if not info["native"]:
        raise SystemExit(f"{python}: the native hot path is not built (pip install -e .)")
    monitoring = info["backend"] == "monitoring"
    out: dict = {"python": f"{info['version']} ({info['backend']}, native)"}

    def ir(*cmd: str) -> int:
        return _common.callgrind_ir([python, *cmd], env, runs=2)

    with tempfile.TemporaryDirectory(prefix="fntrace-targets-") as d:
        fib = os.path.join(d, "fib.py")
        with open(fib, "w") as f:
            f.write(FIB)
        dat = os.path.join(d, "t.dat")
        configs = {
            "untraced": [fib],
            "function_graph": ["-m", "fntrace", "record", "-p", "function_graph", "-o", dat, fib],
            "function": ["-m", "fntrace", "record", "-p", "function", "-o", dat, fib],
            "cProfile": ["-m", "cProfile", "-o", os.path.join(d, "t.prof"), fib],
        }
        calls = fib_calls(22) - fib_calls(20)
        per = {}
        diff = {}
        for name, cmd in configs.items():
            diff[name] = ir(*cmd, "22") - ir(*cmd, "20")
        if monitoring:
            for name in ("floor", "floor1"):
                diff[name] = ir(fib, "22", name) - ir(fib, "20", name)
        for name, v in diff.items():
            if name != "untraced":
                per[name] = (v - diff["untraced"]) / calls
            print(f"  [{out['python']} fib {name}] {v:,} (N=22 less N=20)", file=sys.stderr)
        out["per_call"] = per

        import args_cost
        a = args_cost.measure(python, ["fib", "stdlib"], ["graph", "graph-args"],
                              {"fib": 24, "stdlib": 100})
        out["args"] = {w: r["added_per_call"] for w, r in a["workloads"].items()}

        cold = os.path.join(HERE, "cold_filter.py")
        c = {(mode, n): ir(cold, "--child", mode, "--n", str(n))
             for mode in ("untraced", "traced") for n in (0, 10)}
        out["cold"] = ((c[("traced", 10)] - c[("traced", 0)])
                       / (c[("untraced", 10)] - c[("untraced", 0)]))

        empty = os.path.join(d, "empty.py")
        with open(empty, "w"):
            pass
        out["startup"] = (ir(empty), ir("-m", "fntrace", "record", "-o", dat, empty))
        prog = os.path.join(d, "threads.py")
        with open(prog, "w") as f:
            f.write(THREADS)
        plain = [ir(prog, str(n)) for n in (threads, 2 * threads)]
        traced = [ir("-m", "fntrace", "record", "-F", "__main__.work", "-o", dat, prog, str(n))
                  for n in (threads, 2 * threads)]
        out["thread"] = ((traced[1] - traced[0]) - (plain[1] - plain[0])) / threads
    return out


def rows(m: dict) -> list[tuple[str, str, str, str, str]]:
    """(target, measured, against, ratio, bound) for one interpreter."""
    p, r = m["per_call"], []

    def ratio(a: float, b: float | None) -> str:
        return f"{a / b:.2f}x" if b else "-"

    def n(v: float | None) -> str:
        return _common.fmt_int(v) if v is not None else "-"

    floor, floor1 = p.get("floor"), p.get("floor1")
    r.append(("function_graph to a file, fib, per call", n(p["function_graph"]),
              f"cProfile {n(p['cProfile'])}", ratio(p["function_graph"], p["cProfile"]),
              "<= 0.85x"))
    r.append(("", "", f"floor (PY_START + PY_RETURN) {n(floor)}",
              ratio(p["function_graph"], floor), "<= 1.3x"))
    r.append(("function tracer to a file, fib, per call", n(p["function"]),
              f"cProfile {n(p['cProfile'])}", ratio(p["function"], p["cProfile"]), "<= 0.6x"))
    r.append(("", "", f"floor (PY_START) {n(floor1)}", ratio(p["function"], floor1), "<= 3x"))
    for w, bound, what in (("fib", "<= 3x", "ints (fib(24))"),
                           ("stdlib", "<= 5x", "the stdlib mix")):
        a = m["args"][w]
        r.append((f"-A -R on {what}, per call", n(a["graph-args"]),
                  f"plain function_graph {n(a['graph'])}", ratio(a["graph-args"], a["graph"]),
                  bound))
    r.append(("cold filter, workload", "", "untraced", f"{m['cold']:.4f}x", "<= 1.02x"))
    py, rec = m["startup"]
    r.append(("`fntrace record` of an empty program", n(rec), f"`python` {n(py)}",
              ratio(rec, py), "<= 2x"))
    r.append(("a recorded thread's set-up", n(m["thread"]), "", "", "<= 100 k"))
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", default=[])
    ap.add_argument("--threads", type=int, default=32)
    a = ap.parse_args()
    if not _common.have_valgrind():
        raise SystemExit("needs valgrind (callgrind)")
    for python in a.python or [sys.executable]:
        m = measure(python, a.threads)
        print(f"\nPython {m['python']}\n")
        print("| target | measured | against | ratio | bound |")
        print("|---|---:|---|---:|---|")
        for row in rows(m):
            print("| " + " | ".join(row) + " |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
