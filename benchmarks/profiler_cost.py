#!/usr/bin/env python3
"""The function profiler's cost per call, beside the function_graph tracer's.

The workload is fib(N) in this file (calls(N) calls of one small function).  Each
configuration is one process, in process through tracefs, counted by callgrind:

  untraced        python profiler_cost.py --child untraced N
  graph           current_tracer = function_graph (the ring buffer, nothing printed)
  profile         function_profile_enabled = 1 (fgraph's fast lane when native: the
                  profiler is fgraph's only user)
  profile-self    the same with options/graph-time = 0 (children's time subtracted)
  profile-cpu     the same with options/sleep-time = 0 (the thread's CPU clock)
  profile+graph   function_graph and the profiler together (fgraph's general path: two
                  users)

*Added per call* = ((Ir(config, N) - Ir(config, 0)) - (Ir(untraced, N) - Ir(untraced, 0)))
/ calls: start-up, set-up and tear-down are taken out.  Both hot paths are measured
(--variants native,pure).  Options: --python EXE (repeatable), --n N (default 20),
--variants, --only CONFIG (repeatable), --runs R, --json.
"""
# This file is also the traced program: the driver's imports are made inside main().
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def calls_of(n):
    a, b = 1, 1                # calls(n) = calls(n-1) + calls(n-2) + 1
    for _ in range(n):
        a, b = b, a + b + 1
    return a


CONFIGS = ("untraced", "graph", "profile", "profile-self", "profile-cpu", "profile+graph")


def _child(config, n):
    if config == "untraced":
        if n:
            fib(n)
        return
    sys.path.insert(0, HERE)
    import _common
    _common.import_fntrace()
    from fntrace.tracefs import Tracefs
    fs = Tracefs()
    fs.write("set_ftrace_filter", "__main__.fib")
    if config in ("graph", "profile+graph"):
        fs.write("current_tracer", "function_graph")
    if config.startswith("profile"):
        if config == "profile-self":
            fs.write("options/graph-time", "0")
        if config == "profile-cpu":
            fs.write("options/sleep-time", "0")
        fs.write("function_profile_enabled", "1")
    if n:
        fib(n)
    fs.write("function_profile_enabled", "0")
    fs.write("current_tracer", "nop")
    # read with N = 0 too: its cost is set-up, not per call
    text = fs.read("trace_stat/function0")
    if n and config.startswith("profile"):
        assert f"{calls_of(n):10d}" in text, text


def main(argv=None):
    import argparse
    import json
    sys.path.insert(0, HERE)
    from _common import callgrind_ir, fmt_int, have_valgrind, variants

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", action="append", help="interpreter to measure (repeatable)")
    ap.add_argument("--n", type=int, default=20, help="fib(N) (default 20)")
    ap.add_argument("--variants", default="native,pure")
    ap.add_argument("--only", action="append", choices=CONFIGS)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not have_valgrind():
        raise SystemExit("valgrind is needed (apt-get install valgrind)")
    pythons = args.python or [sys.executable]
    configs = [c for c in CONFIGS if not args.only or c in args.only or c == "untraced"]
    calls = calls_of(args.n)
    results = []
    for py in pythons:
        for vname, env, label in variants(py, args.variants):
            ir = {}
            for c in configs:
                for n in (args.n, 0):
                    ir[c, n] = callgrind_ir([py, os.path.abspath(__file__), "--child", c, str(n)],
                                            env, runs=args.runs)
            base = ir["untraced", args.n] - ir["untraced", 0]
            print(f"\n{label}: fib({args.n}), {calls:,} calls; instructions added per call")
            print(f"| configuration | per call | vs graph |")
            print(f"|---|---|---|")
            per = {}
            for c in configs:
                if c == "untraced":
                    continue
                per[c] = ((ir[c, args.n] - ir[c, 0]) - base) / calls
            for c, v in per.items():
                ratio = f"{v / per['graph']:.2f}x" if per.get("graph") else "-"
                print(f"| {c} | {fmt_int(v)} | {ratio} |")
            results.append({"python": py, "variant": vname, "label": label, "n": args.n,
                            "calls": calls, "per_call": per,
                            "ir": {f"{c}/{n}": v for (c, n), v in ir.items()}})
    if args.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
