#!/usr/bin/env python3
"""What a line probe (``p SYM+N``, events/line_probe.py) costs: in another function, and
per hit.

A probe ``p:bench/hit __main__.target+4 i`` is defined on the loop body of ``target``;
``other`` is a loop of the same shape with no probe.  Each child runs one of them N
times (loop iterations) with the probe enabled or not:

    other,  probe off / on   the cost in a function without a probe (target: equal:
                             on 3.12+ only target's code object gets LINE events; on
                             3.11 nothing is hooked outside target's calls)
    target, probe off / on   per hit: the extra instructions per iteration with the
                             probe on, over the same loop with it off.  A hit fetches
                             one local, renders it and writes the event to the ring
                             buffer; the other lines of the loop were turned off by
                             DISABLE on their first hit (3.12+) or run in CPython's
                             tracing mode (3.11).

    python benchmarks/line_probe.py                            # this interpreter
    python benchmarks/line_probe.py --python .venvs/py3.11/bin/python \\
        --python .venvs/py3.12/bin/python --python .venvs/py3.13/bin/python

Instructions are whole-process callgrind counts, each for N and for N = 0, so start-up,
imports and the probe's set-up cancel: cost = (count(N) - count(0)) / N.  ``--child`` is
what the driver runs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

PROBE = "p:bench/hit __main__.target+4 i"


def target(n):
    acc = 0
    i = 0
    while i < n:
        acc += i        # +4: the probed line
        i += 1
    return acc


def other(n):
    acc = 0
    i = 0
    while i < n:
        acc += i
        i += 1
    return acc


def child(func: str, probe_on: bool, n: int) -> int:
    _common.import_fntrace()
    from fntrace.tracefs import Tracefs
    fs = Tracefs()
    fs.write("buffer_size_kb", "64")
    fs.write("dynamic_events", PROBE, append=True)
    if probe_on:
        fs.write("events/bench/hit/enable", "1")
    (target if func == "target" else other)(n)
    fs.write("events/bench/hit/enable", "0")
    written = fs.tr.entries()[1]
    want = n if (probe_on and func == "target") else 0
    if written != want:
        print(f"line_probe: {written} events written, expected {want}", file=sys.stderr)
        return 1
    return 0


def driver(pythons: list[str], n: int, as_json: bool, spec: str, runs: int) -> int:
    if not _common.have_valgrind():
        print("valgrind not found", file=sys.stderr)
        return 1
    me = os.path.abspath(__file__)
    results = []
    for py in pythons:
        for _, env, label in _common.variants(py, spec):
            ir = {}
            for func in ("other", "target"):
                for on in (False, True):
                    for k in (n, 0):
                        ir[(func, on, k)] = _common.callgrind_ir(
                            [py, me, "--child", func, "--on", str(int(on)), "--n", str(k)],
                            env, runs=runs)
                        print(f"  [{label} {func} probe={'on' if on else 'off'} n={k}] "
                              f"{ir[(func, on, k)]:,} instructions", file=sys.stderr)

            def per(func, on):
                return (ir[(func, on, n)] - ir[(func, on, 0)]) / n
            results.append({
                "python": label, "n": n,
                "other_off": per("other", False), "other_on": per("other", True),
                "target_off": per("target", False), "target_on": per("target", True),
                "other_ratio": per("other", True) / per("other", False),
                "per_hit": per("target", True) - per("target", False),
            })
    if as_json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"Line probe ({PROBE!r}), {n} loop iterations: instructions per iteration "
          "(callgrind, whole process, N - 0)")
    print()
    print("| Python (back end, hot path) | other, probe off | other, probe on | ratio "
          "| target, probe off | target, probe on | per hit |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['python']} | {r['other_off']:.1f} | {r['other_on']:.1f} | "
              f"{r['other_ratio']:.4f} | {r['target_off']:.1f} | {r['target_on']:.1f} | "
              f"{r['per_hit']:,.0f} |")
    print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20000, help="loop iterations (default 20000)")
    p.add_argument("--python", action="append", default=[], metavar="EXE",
                   help="interpreter(s) to measure (default: this one)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--runs", type=int, default=1,
                   help="callgrind runs per measurement, minimum kept (default 1)")
    p.add_argument("--variants", default="native,pure", metavar="LIST",
                   help="fntrace hot paths to measure (default native,pure)")
    p.add_argument("--child", choices=("other", "target"), help=argparse.SUPPRESS)
    p.add_argument("--on", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(a.child, bool(a.on), a.n)
    return driver(a.python or [sys.executable], a.n, a.json, a.variants, a.runs)


if __name__ == "__main__":
    sys.exit(main())
