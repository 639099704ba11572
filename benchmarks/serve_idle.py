#!/usr/bin/env python3
"""What serving costs a program, and how fast a control write takes effect.

Idle cost (callgrind, whole-process instructions): the call-heavy workload of
benchmarks/_workload.py run

    untraced       plain python
    record-serve   fntrace record --serve -p nop (no filter: nothing is patched)
    serve          fntrace.serve() called by the program itself

each with the workload repeated N times and with N = 0 (start-up only).  Target: the
served runs within 1% of untraced on the workload (the server thread sleeps in
accept(); the nop tracer patches nothing).

Filter change (wall clock, no valgrind): a program serving its tracefs runs a hot loop
that calls ``hot()`` and keeps each iteration's CLOCK_MONOTONIC time.  The driver, in
another process, writes through the control socket

    tracer-on      set_ftrace_filter=hot is set first (nop: nothing happens), then
                   current_tracer=function
    filter-change  current_tracer=function with a filter on a function never called,
                   then set_ftrace_filter=hot

and, after the program's one-second window, reads ``trace`` (stop mode, so the buffer
keeps the first events): the latency is the first ``hot`` event's timestamp minus the
time the write was sent (target < 50 ms).  The program reports the
longest gap between consecutive iterations in the second after the write, beside the
longest before it (the pause the write caused the program).

    python benchmarks/serve_idle.py                   # both parts, this interpreter
    python benchmarks/serve_idle.py --only idle --python .venvs/py3.12/bin/python
    python benchmarks/serve_idle.py --only filter --repeat 5
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402


# ---------------------------------------------------------------------------------
# children
# ---------------------------------------------------------------------------------

def child_idle(mode: str, n: int) -> int:
    import _workload
    if mode == "serve":
        fntrace = _common.import_fntrace()
        fntrace.serve()
    _workload.run(n)
    return 0


def hot(i: int) -> int:
    return i + 1


def never_called() -> None:
    return None


def child_loop(seconds: float) -> int:
    """The hot loop: serve, say ready, then call hot() for ``seconds`` keeping every
    iteration's time; at the end print the times of the iterations (as gaps) on
    request: the driver sends the write time on stdin when done."""
    fntrace = _common.import_fntrace()
    fntrace.serve()
    mono = time.monotonic_ns
    stamps = []
    append = stamps.append
    print("ready", flush=True)
    end = mono() + int(seconds * 1e9)
    i = 0
    t = mono()
    while t < end:
        hot(i)
        i += 1
        t = mono()
        append(t)
    never_called()
    line = sys.stdin.readline()
    t_write = int(line)
    before = [b - a for a, b in zip(stamps, stamps[1:]) if b <= t_write]
    after = [b - a for a, b in zip(stamps, stamps[1:]) if t_write < b <= t_write + 1_000_000_000]
    print(json.dumps({"iterations": len(stamps), "max_gap_before_ns": max(before or [0]),
                      "max_gap_after_ns": max(after or [0]),
                      "median_gap_ns": sorted(before)[len(before) // 2] if before else 0}),
          flush=True)
    return 0


# ---------------------------------------------------------------------------------
# drivers
# ---------------------------------------------------------------------------------

def idle(pythons: list[str], n: int, runs: int) -> list[dict]:
    me = os.path.abspath(__file__)
    out = []
    for py in pythons:
        env = _common.child_env()
        label = _common.python_label(py, env)
        ir = {}
        with tempfile.TemporaryDirectory() as d:
            dat = os.path.join(d, "idle.dat")
            for k in (n, 0):
                ir[("untraced", k)] = _common.callgrind_ir(
                    [py, me, "--child", "untraced", "--n", str(k)], env, runs=runs)
                ir[("serve", k)] = _common.callgrind_ir(
                    [py, me, "--child", "serve", "--n", str(k)], env, runs=runs)
                ir[("record-serve", k)] = _common.callgrind_ir(
                    [py, "-m", "fntrace", "record", "--serve", "-p", "nop", "-o", dat,
                     me, "--child", "untraced", "--n", str(k)], env, runs=runs)
        u_n, u_0 = ir[("untraced", n)], ir[("untraced", 0)]
        for mode in ("serve", "record-serve"):
            t_n, t_0 = ir[(mode, n)], ir[(mode, 0)]
            out.append({"python": label, "mode": mode, "n": n, "untraced_n": u_n,
                        "untraced_0": u_0, "served_n": t_n, "served_0": t_0,
                        "raw_ratio": t_n / u_n, "workload_ratio": (t_n - t_0) / (u_n - u_0)})
    return out


def _first_hot_ts(text: str) -> float | None:
    for line in text.splitlines():
        if ".hot <-" in line or "hot <-" in line:
            # "   MainThread-123   [000]  32975.546628: __main__.hot <-..."
            head = line.split(": ", 1)[0]
            return float(head.split()[-1])
    return None


def filter_change(python: str, case: str, seconds: float = 3.0) -> dict:
    sys.path.insert(0, os.path.join(_common.ROOT, "src"))
    from fntrace.tracefs.client import Client
    me = os.path.abspath(__file__)
    p = subprocess.Popen([python, me, "--child-loop", str(seconds)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=_common.child_env())
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        with Client(p.pid) as c:
            # stop mode: the buffer keeps the first events (overwrite would roll the
            # first ones out within milliseconds at this rate)
            c.write("options/overwrite", "0")
            if case == "tracer-on":
                c.write("set_ftrace_filter", "*.hot")
            else:
                c.write("set_ftrace_filter", "*.never_called")
                c.write("current_tracer", "function")
            time.sleep(0.3)
            t_write = time.monotonic_ns()
            if case == "tracer-on":
                c.write("current_tracer", "function")
            else:
                c.write("set_ftrace_filter", "*.hot")
            t_done = time.monotonic_ns()
            # read once, after the program's one-second window: a read renders the
            # buffer on the program's side, which would be a pause of its own
            time.sleep(1.2)
            first = _first_hot_ts(c.read("trace"))
            c.write("current_tracer", "nop")
        p.stdin.write(f"{t_write}\n")
        p.stdin.flush()
        res = json.loads(p.stdout.readline())
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    res.update({"case": case, "write_ms": (t_done - t_write) / 1e6,
                "latency_ms": None if first is None else (first * 1e9 - t_write) / 1e6})
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", action="append", default=[], metavar="EXE")
    p.add_argument("--n", type=int, default=3, help="workload repetitions (default 3)")
    p.add_argument("--runs", type=int, default=1, help="callgrind runs, minimum kept")
    p.add_argument("--repeat", type=int, default=3, help="filter-change runs per case")
    p.add_argument("--only", choices=("idle", "filter"))
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", choices=("untraced", "serve"), help=argparse.SUPPRESS)
    p.add_argument("--child-loop", type=float, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child_idle(a.child, a.n)
    if a.child_loop is not None:
        return child_loop(a.child_loop)
    pythons = a.python or [sys.executable]
    results: dict = {}
    if a.only in (None, "idle"):
        if not _common.have_valgrind():
            print("valgrind not found: the idle part needs it", file=sys.stderr)
            return 1
        results["idle"] = idle(pythons, a.n, a.runs)
    if a.only in (None, "filter"):
        results["filter"] = []
        for py in pythons:
            label = _common.python_label(py)
            for case in ("tracer-on", "filter-change"):
                for _ in range(a.repeat):
                    r = filter_change(py, case)
                    r["python"] = label
                    results["filter"].append(r)
    if a.json:
        print(json.dumps(results, indent=2))
        return 0
    if "idle" in results:
        print(f"Served but idle, workload x{a.n}: whole-process instructions (callgrind)\n")
        print("| Python | mode | untraced | served | raw ratio | start-up added (N=0) "
              "| workload-only ratio |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for r in results["idle"]:
            print(f"| {r['python']} | {r['mode']} | {r['untraced_n']:,} | {r['served_n']:,} "
                  f"| {r['raw_ratio']:.4f} | {r['served_0'] - r['untraced_0']:,} "
                  f"| {r['workload_ratio']:.5f} |")
        print()
    if "filter" in results:
        print("Control write to first traced event (hot loop; wall clock)\n")
        print("| Python | case | write returned (ms) | first event (ms) | longest gap after "
              "(ms) | longest gap before (ms) | median gap (us) |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for r in results["filter"]:
            lat = "none" if r["latency_ms"] is None else f"{r['latency_ms']:.2f}"
            print(f"| {r['python']} | {r['case']} | {r['write_ms']:.2f} | {lat} "
                  f"| {r['max_gap_after_ns'] / 1e6:.2f} | {r['max_gap_before_ns'] / 1e6:.2f} "
                  f"| {r['median_gap_ns'] / 1e3:.2f} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
