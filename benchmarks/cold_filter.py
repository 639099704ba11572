#!/usr/bin/env python3
"""What a registered tracer costs the functions it does not trace.

The function tracer is registered with a filter that selects one function nobody calls
(``_workload.never_called``), and a call-heavy workload runs (benchmarks/_workload.py).
On 3.12+ the sys.monitoring back end enables events on that one code object only, so
the workload should run as if untraced (target: at most 1.02x the untraced instruction
count).  On 3.11 the sys.setprofile back end sees every call (and every C call) and
looks the code object up: the kernel without DYNAMIC_FTRACE, where every mcount call
runs.  The ratio there is reported, not targeted.

    python benchmarks/cold_filter.py                          # this interpreter
    python benchmarks/cold_filter.py --python .venvs/py3.11/bin/python \\
        --python .venvs/py3.12/bin/python --python .venvs/py3.13/bin/python
    python benchmarks/cold_filter.py --time                   # no valgrind: CPU time

Each interpreter runs four children under callgrind (whole-process instructions):
untraced and traced, each with the workload repeated N times and with N = 0.  The raw
ratio is traced(N) / untraced(N), start-up, imports and tracer set-up included; the
workload-only ratio is (traced(N) - traced(0)) / (untraced(N) - untraced(0)).
The untraced child does not import fntrace.  ``--child`` is what the driver runs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

FILTER = "_workload.never_called"


def child(mode: str, n: int) -> int:
    import _workload
    if mode == "untraced":
        _workload.run(n)
        return 0
    fntrace = _common.import_fntrace()
    with fntrace.trace(filter=FILTER) as session:
        on = [line for line in fntrace.enabled_functions() if line.split(" ")[0] == FILTER]
        if len(on) != 1 or len(fntrace.enabled_functions()) != 1:
            print(f"cold_filter: expected only {FILTER} enabled, got "
                  f"{fntrace.enabled_functions()[:5]}", file=sys.stderr)
            return 1
        _workload.run(n)
    written = session.tr.entries()[1]
    if written:
        print(f"cold_filter: {written} entries recorded, expected none", file=sys.stderr)
        return 1
    return 0


def timed(n: int, repeat: int, clock_name: str) -> dict:
    """In-process timing, alternating untraced and traced runs; min of ``repeat``.
    ``cpu`` is the process's CPU time (robust on a busy machine), ``wall`` perf_counter."""
    clock = time.process_time_ns if clock_name == "cpu" else time.perf_counter_ns
    import _workload
    fntrace = _common.import_fntrace()
    from fntrace import _env
    _workload.run(1)
    best = {"untraced": None, "traced": None}
    for _ in range(repeat):
        t0 = clock()
        _workload.run(n)
        dt = clock() - t0
        best["untraced"] = dt if best["untraced"] is None else min(best["untraced"], dt)
        with fntrace.trace(filter=FILTER):
            t0 = clock()
            _workload.run(n)
            dt = clock() - t0
        best["traced"] = dt if best["traced"] is None else min(best["traced"], dt)
    hot = "native" if _env.native() is not None else "pure"
    return {"python": f"{sys.version.split()[0]} ({_env.BACKEND}, {hot})", "n": n, "repeat": repeat,
            "clock": clock_name,
            "untraced_ns": best["untraced"], "traced_ns": best["traced"],
            "ratio": best["traced"] / best["untraced"]}


def driver(pythons: list[str], n: int, as_json: bool, spec: str, runs: int = 2) -> int:
    if not _common.have_valgrind():
        print("valgrind not found: use --time for a timed measurement", file=sys.stderr)
        return 1
    me = os.path.abspath(__file__)
    results = []
    for py in pythons:
        ir = {}
        for k in (n, 0):
            ir[("untraced", k)] = _common.callgrind_ir([py, me, "--child", "untraced", "--n", str(k)],
                                                      runs=runs)
        for _, env, label in _common.variants(py, spec):
            for k in (n, 0):
                ir[("traced", k)] = _common.callgrind_ir(
                    [py, me, "--child", "traced", "--n", str(k)], env, runs=runs)
            for (mode, k), v in sorted(ir.items()):
                print(f"  [{label} {mode} n={k}] {v:,} instructions", file=sys.stderr)
            u_n, u_0 = ir[("untraced", n)], ir[("untraced", 0)]
            t_n, t_0 = ir[("traced", n)], ir[("traced", 0)]
            results.append({
                "python": label, "n": n,
                "untraced_n": u_n, "untraced_0": u_0, "traced_n": t_n, "traced_0": t_0,
                "raw_ratio": t_n / u_n,
                "workload_ratio": (t_n - t_0) / (u_n - u_0),
                "setup_instructions": t_0 - u_0,
            })
    if as_json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"Cold filter ({FILTER!r} only), workload x{n}: whole-process instructions (callgrind)")
    print()
    print("| Python (back end, hot path) | untraced | traced | raw ratio | untraced, N=0 | traced, N=0 "
          "| workload-only ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['python']} | {r['untraced_n']:,} | {r['traced_n']:,} | {r['raw_ratio']:.4f} "
              f"| {r['untraced_0']:,} | {r['traced_0']:,} | {r['workload_ratio']:.4f} |")
    print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10, help="workload repetitions (default 10)")
    p.add_argument("--python", action="append", default=[], metavar="EXE",
                   help="interpreter(s) to measure (default: this one)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--time", action="store_true",
                   help="time it in this process instead of counting with callgrind (noisier)")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="with --time: process CPU time (default) or wall clock")
    p.add_argument("--repeat", type=int, default=7, help="with --time: runs, min kept")
    p.add_argument("--runs", type=int, default=2,
                   help="callgrind runs per measurement, minimum kept (default 2)")
    p.add_argument("--variants", default="native,pure", metavar="LIST",
                   help="fntrace hot paths to measure: native twin and/or pure Python "
                        "(default native,pure)")
    p.add_argument("--child", choices=("untraced", "traced"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(a.child, a.n)
    if a.time:
        r = timed(a.n, a.repeat, a.clock)
        if a.json:
            print(json.dumps(r, indent=2))
        else:
            print(f"Python {r['python']}: workload x{r['n']}, {r['clock']} time, min of {r['repeat']}: "
                  f"untraced {r['untraced_ns'] / 1e6:.2f} ms, traced (cold filter) "
                  f"{r['traced_ns'] / 1e6:.2f} ms, ratio {r['ratio']:.3f}")
        return 0
    return driver(a.python or [sys.executable], a.n, a.json, a.variants, a.runs)


if __name__ == "__main__":
    sys.exit(main())
