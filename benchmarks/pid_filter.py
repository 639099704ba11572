#!/usr/bin/env python3
"""What a thread filter costs: instructions per call of a traced function on a thread
set_ftrace_pid leaves out (ignored), beside the same call untraced and traced.

The kernel decides once per task switch (ftrace_filter_pid_sched_switch_probe) whether
the CPU's current task is ignored; fntrace decides once per thread at its first event
in the instance and caches the verdict with the thread's buffer, so an ignored call
costs the dispatch to the tracer and one test.  The figures here say how close that is
to untraced, for the function tracer and function_graph.

    python benchmarks/pid_filter.py                         # this interpreter
    python benchmarks/pid_filter.py --python .venvs/py3.11/bin/python \\
        --python .venvs/py3.12/bin/python --variants native,pure

Each child calls ``target`` N times on the main thread with one of:
  untraced   fntrace not imported
  traced     the tracer on, set_ftrace_filter = target
  ignored    the same with set_ftrace_pid naming another thread (pid 1: never ours)
and with N = 0; per call = (count(N) - count(0)) / N, whole-process instructions
(callgrind).  ``--child`` is what the driver runs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

MODES = ("untraced", "traced", "ignored")


def target(x):
    return x


def loop(n: int) -> None:
    t = target
    for i in range(n):
        t(i)


def child(mode: str, tracer: str, n: int) -> int:
    if mode == "untraced":
        loop(n)
        return 0
    fntrace = _common.import_fntrace()
    from fntrace.tracefs import Tracefs
    fs = Tracefs()
    fs.write("buffer_size_kb", "64")
    fs.write("set_ftrace_filter", f"{__name__}.target")
    if mode == "ignored":
        fs.write("set_ftrace_pid", "1")
    fs.write("current_tracer", tracer)
    loop(n)
    fs.write("tracing_on", "0")
    written = fs.tr.entries()[1]
    fs.write("current_tracer", "nop")
    want_some = mode == "traced" and n > 0
    if bool(written) != want_some:
        print(f"pid_filter: {mode}: {written} entries written", file=sys.stderr)
        return 1
    del fntrace
    return 0


def driver(pythons: list[str], n: int, spec: str, tracers: list[str], as_json: bool,
           runs: int) -> int:
    if not _common.have_valgrind():
        print("valgrind not found", file=sys.stderr)
        return 1
    me = os.path.abspath(__file__)
    rows = []
    for py in pythons:
        base = {}
        for k in (n, 0):
            base[k] = _common.callgrind_ir([py, me, "--child", "untraced", "--n", str(k)],
                                           runs=runs)
        untraced = (base[n] - base[0]) / n
        for _, env, label in _common.variants(py, spec):
            for tracer in tracers:
                row = {"python": label, "tracer": tracer, "n": n, "untraced": untraced}
                for mode in ("traced", "ignored"):
                    c = {k: _common.callgrind_ir([py, me, "--child", mode, "--tracer", tracer,
                                                  "--n", str(k)], env, runs=runs)
                         for k in (n, 0)}
                    row[mode] = (c[n] - c[0]) / n
                rows.append(row)
                print(f"  {label} {tracer}: {row}", file=sys.stderr)
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"Instructions per call of a filtered-in function, x{n} (callgrind, whole process)")
    print()
    print("| Python (back end, hot path) | tracer | untraced | traced | ignored thread "
          "| ignored - untraced |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['python']} | {r['tracer']} | {r['untraced']:,.0f} | {r['traced']:,.0f} "
              f"| {r['ignored']:,.0f} | {r['ignored'] - r['untraced']:,.0f} |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", choices=MODES)
    ap.add_argument("--tracer", default="function")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--python", action="append", default=[])
    ap.add_argument("--variants", default="native,pure")
    ap.add_argument("--tracers", default="function,function_graph")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child, a.tracer, a.n)
    return driver(a.python or [sys.executable], a.n, a.variants,
                  [t for t in a.tracers.split(",") if t], a.json, a.runs)


if __name__ == "__main__":
    sys.exit(main())
