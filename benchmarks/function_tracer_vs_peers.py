#!/usr/bin/env python3
"""The function tracer on every function, against cProfile and viztracer.

The same call-heavy workload (benchmarks/_workload.py) runs in five children:

  untraced    the workload alone
  fntrace     a TraceArray with the function tracer and no filter (every function
              fntrace lists: ``fntrace record -p function`` without ``-F``), set up in
              process around the workload, ring buffer in overwrite mode
  cprofile    cProfile.Profile().enable() / disable() around the workload (no stats printed)
  viztracer   VizTracer(verbose=0).start() / stop() around the workload (default options:
              1 000 000-entry circular buffer, C functions logged; nothing saved)
  count       sys.setprofile counting 'call' events (and 'c_call') once: the number of
              Python calls the workload makes, the denominator for every tool

Each tool child runs under callgrind with the workload repeated N times and with N = 0,
so that imports and set-up cancel out:

    instructions per traced call
        = ((tool(N) - tool(0)) - (untraced(N) - untraced(0))) / calls(N)

A peer that is not installed in the interpreter is skipped with a note.  viztracer is not
a dependency of fntrace; put it in a separate environment, e.g.

    python3.12 -m venv .venvs/bench-3.12
    .venvs/bench-3.12/bin/pip install -e . viztracer
    .venvs/bench-3.12/bin/python benchmarks/function_tracer_vs_peers.py

Options: --python EXE (repeatable), --n N (default 2), --variants native,pure, --json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

TOOLS = ("fntrace", "cprofile", "viztracer")
_INSTALL_HINT = {
    "viztracer": "pip install viztracer into a separate environment (see --help)",
    "cprofile": "cProfile is in the standard library; this interpreter lacks it",
    "fntrace": "pip install -e . (or put src/ on PYTHONPATH)",
}


def child(mode: str, n: int, report: bool) -> int:
    import _workload
    if mode == "untraced":
        _workload.run(n)
    elif mode == "count":
        counts = {"call": 0, "c_call": 0}

        def prof(frame, event, arg):
            if event == "call" or event == "c_call":
                counts[event] += 1

        sys.setprofile(prof)
        _workload.run(n)
        sys.setprofile(None)
        # The harness's own calls: run() itself and sys.setprofile(None).
        counts["call"] -= 1
        counts["c_call"] -= 1
        print(json.dumps(counts))
    elif mode == "fntrace":
        _common.import_fntrace()
        from fntrace.core.records import record_table
        from fntrace.trace_array import TraceArray
        from fntrace.tracers.function import FunctionTracer
        from fntrace.tracers.nop import NopTracer
        # Every function of every module loaded so far gets its record, as `fntrace
        # record` does before the target starts; then the function tracer, no filter.
        record_table.install_import_hook()
        record_table.refresh()
        tr = TraceArray(name="bench")
        tr.set_tracer(FunctionTracer())
        _workload.run(n)
        written = tr.entries()[1]
        tr.set_tracer(NopTracer())
        if report:
            print(json.dumps({"written": written}))
    elif mode == "cprofile":
        import cProfile
        pr = cProfile.Profile()
        pr.enable()
        _workload.run(n)
        pr.disable()
    elif mode == "viztracer":
        from viztracer import VizTracer
        t = VizTracer(verbose=0)
        t.start()
        _workload.run(n)
        t.stop()
        if report:
            print(json.dumps({"version": __import__("viztracer").__version__}))
    return 0


def _available(py: str, tool: str) -> bool:
    mod = {"fntrace": "fntrace", "cprofile": "cProfile", "viztracer": "viztracer"}[tool]
    p = subprocess.run([py, "-c", f"import {mod}"], env=_common.child_env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p.returncode == 0


def _json_child(py: str, args: list[str], env: dict | None = None) -> dict:
    me = os.path.abspath(__file__)
    p = subprocess.run([py, me, *args], env=env or _common.child_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def driver(pythons: list[str], n: int, as_json: bool, spec: str, runs: int = 2) -> int:
    if not _common.have_valgrind():
        print("valgrind not found: this benchmark counts instructions with callgrind",
              file=sys.stderr)
        return 1
    me = os.path.abspath(__file__)
    results = []
    for py in pythons:
        info = _common.probe(py)
        label = f"{info['version']} ({info['backend']})"
        calls = _json_child(py, ["--child", "count", "--n", str(n)])
        res = {"python": label, "n": n, "calls": calls["call"], "c_calls": calls["c_call"],
               "tools": {}, "skipped": {}}

        def ir(mode: str, k: int, env: dict | None = None) -> int:
            v = _common.callgrind_ir([py, me, "--child", mode, "--n", str(k)], env, runs=runs)
            print(f"  [{label} {mode} n={k}] {v:,} instructions", file=sys.stderr)
            return v

        u_n, u_0 = ir("untraced", n), ir("untraced", 0)
        res["untraced"] = {"ir_n": u_n, "ir_0": u_0}
        jobs = []                                   # (key, child mode, env)
        if _available(py, "fntrace"):
            for vname, venv, _ in _common.variants(py, spec):
                jobs.append((f"fntrace-{vname}", "fntrace", venv))
        else:
            res["skipped"]["fntrace"] = f"not installed: {_INSTALL_HINT['fntrace']}"
        for tool in ("cprofile", "viztracer"):
            if _available(py, tool):
                jobs.append((tool, tool, None))
            else:
                res["skipped"][tool] = f"not installed in this interpreter: {_INSTALL_HINT[tool]}"
        for key, mode, env in jobs:
            t_n, t_0 = ir(mode, n, env), ir(mode, 0, env)
            extra = {}
            if mode == "fntrace":
                # Entries written by the workload alone, and by set-up/tear-down.
                w_n = _json_child(py, ["--child", "fntrace", "--n", str(n), "--report"], env)
                w_0 = _json_child(py, ["--child", "fntrace", "--n", "0", "--report"], env)
                extra = {"written": w_n["written"] - w_0["written"],
                         "written_setup": w_0["written"]}
            if mode == "viztracer":
                extra = _json_child(py, ["--child", "viztracer", "--n", "0", "--report"])
            res["tools"][key] = {"ir_n": t_n, "ir_0": t_0,
                                 "per_call": ((t_n - t_0) - (u_n - u_0)) / res["calls"],
                                 **extra}
        for fkey in [k for k in res["tools"] if k.startswith("fntrace")]:
            for peer in ("cprofile", "viztracer"):
                if peer in res["tools"]:
                    res[f"{fkey}_over_{peer}"] = (res["tools"][fkey]["per_call"]
                                                  / res["tools"][peer]["per_call"])
        results.append(res)
    if as_json:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        print(f"Python {r['python']}: workload x{r['n']}, {r['calls']:,} Python calls "
              f"(+{r['c_calls']:,} C calls); instructions per traced call (callgrind)")
        print()
        print("| tool | instructions, N | instructions, N=0 | per traced call | vs untraced |")
        print("|---|---:|---:|---:|---:|")
        u = r["untraced"]
        print(f"| untraced | {u['ir_n']:,} | {u['ir_0']:,} | - | 1.00x |")
        for tool, t in r["tools"].items():
            name = tool
            if tool.startswith("fntrace"):
                name = (f"fntrace function tracer, {tool.split('-')[1]} ({t['written']:,} "
                        f"entries by the workload, {t['written_setup']:,} by set-up/tear-down)")
            elif tool == "viztracer":
                name = f"viztracer {t.get('version', '')}".strip()
            work = (t["ir_n"] - t["ir_0"]) / (u["ir_n"] - u["ir_0"])
            print(f"| {name} | {t['ir_n']:,} | {t['ir_0']:,} | {t['per_call']:,.0f} | {work:.2f}x |")
        for tool, why in r["skipped"].items():
            print(f"| {tool} | skipped: {why} | | | |")
        print()
        for k, v in r.items():
            if "_over_" in k:
                a, b = k.split("_over_")
                print(f"{a} / {b} (instructions per traced call): {v:.2f}")
        print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2, help="workload repetitions (default 2)")
    p.add_argument("--python", action="append", default=[], metavar="EXE",
                   help="interpreter(s) to measure (default: this one)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--runs", type=int, default=2,
                   help="callgrind runs per measurement, minimum kept (default 2)")
    p.add_argument("--variants", default="native,pure", metavar="LIST",
                   help="fntrace hot paths to measure: native twin and/or pure Python "
                        "(default native,pure)")
    p.add_argument("--child", choices=("untraced", "count", *TOOLS), help=argparse.SUPPRESS)
    p.add_argument("--report", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(a.child, a.n, a.report)
    return driver(a.python or [sys.executable], a.n, a.json, a.variants, a.runs)


if __name__ == "__main__":
    sys.exit(main())
