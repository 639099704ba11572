#!/usr/bin/env python3
"""CALL_OPS vs the list func: the benchmark table of samples/ftrace/ftrace-ops.c, for fntrace.

A trivial function (the tracee) is called N times (default 100 000) while R *relevant*
ops (each filtering the tracee) and I *irrelevant* ops (each filtering a different
function, never called) are registered.  With CALL_OPS the tracee's site holds its one
ops and calls it directly, whatever else is registered: the cost of (1, I) must not
grow with I.  With CALL_OPS off (``ftrace_config.call_ops = False``, the kernel without
DYNAMIC_FTRACE_WITH_CALL_OPS) every site calls the global ftrace_trace_function, which
is the list func as soon as two ops are registered: (1, I) grows linearly with I.

    python benchmarks/ops_scaling.py                 # both tables, CPU time
    python benchmarks/ops_scaling.py --repeat 7 --clock wall --json
    python benchmarks/ops_scaling.py --callgrind     # instructions per call (valgrind)

Times are the process's CPU time by default (a busy machine deschedules the process;
CPU time does not count that), ``--clock wall`` for perf_counter.  They measure the hot
path the interpreter loads: the native twin when built, pure Python with FNTRACE_PURE=1.

``--callgrind`` runs this script under callgrind once per (hot path, mode, row): rows
(0,0), (1,0), (1,200), CALL_OPS on and off.  The child makes its N calls from C
(itertools.starmap) and callgrind counts only inside that C function
(``--toggle-collect=starmap_next``), callbacks included, so start-up and the
registration of 200 ops (whose cost varies a little from run to run) are not counted:
instructions/call = Ir / N.  The overhead of a row is that minus the (0,0) row's.
``--row R I`` is the child it runs.
"""
from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

fntrace = _common.import_fntrace()
from fntrace import _env  # noqa: E402

# (relevant, irrelevant), in the order of the kernel sample's table (three groups).
ROWS = [
    [(0, 0), (0, 1), (0, 2), (0, 10), (0, 100), (0, 200)],
    [(1, 0), (1, 1), (1, 2), (1, 10), (1, 100), (1, 200)],
    [(1, 0), (2, 0), (10, 0), (100, 0), (200, 0)],
]
POOL = 200

# The tracee and the pool of irrelevant functions live in a module of their own, each
# with its own code object (a site of its own), compiled from generated source.
_MODNAME = "_fntrace_bench_targets"


def _make_targets() -> types.ModuleType:
    src = ["def tracee():\n    pass\n"]
    src += [f"def irrelevant_{i:03d}():\n    pass\n" for i in range(POOL)]
    mod = types.ModuleType(_MODNAME)
    sys.modules[_MODNAME] = mod
    exec(compile("".join(src), f"<{_MODNAME}>", "exec"), mod.__dict__)
    return mod


targets = _make_targets()
tracee = targets.tracee
irrelevant = [getattr(targets, f"irrelevant_{i:03d}") for i in range(POOL)]


def ops_func_nop(ip, parent_ip, ops, fregs):
    pass


def ops_func_count(ip, parent_ip, ops, fregs):
    ops.private[0] += 1


def run_calls(f, n):
    for _ in range(n):
        f()


class Row:
    """Register the ops of one row; ``close()`` unregisters them all."""

    def __init__(self, relevant: int, irrelevant_n: int, call_ops: bool, func) -> None:
        if fntrace.core.ops.ftrace_ops_list:
            raise RuntimeError("ops still registered: call_ops is read when the back end starts")
        fntrace.ftrace_config.call_ops = call_ops
        self.relevant: list = []
        self.irrelevant: list = []
        try:
            for i in range(irrelevant_n):
                op = fntrace.Ops(func, 0, [0], name=f"irrelevant{i}")
                fntrace.ftrace_set_filter_ip(op, irrelevant[i % POOL])
                fntrace.register_ftrace_function(op)
                self.irrelevant.append(op)
            for i in range(relevant):
                op = fntrace.Ops(func, 0, [0], name=f"relevant{i}")
                fntrace.ftrace_set_filter_ip(op, tracee)
                fntrace.register_ftrace_function(op)
                self.relevant.append(op)
        except BaseException:
            self.close()
            raise

    def site(self) -> str:
        """The tracee's line of enabled_functions ('' when its site is off)."""
        for line in fntrace.enabled_functions():
            if line.startswith(f"{_MODNAME}.tracee "):
                return line
        return ""

    def close(self) -> None:
        for op in self.relevant + self.irrelevant:
            if op.enabled:
                fntrace.unregister_ftrace_function(op)
        self.relevant, self.irrelevant = [], []


# CPU time of the process by default: on a shared machine a descheduled process does not
# count time it did not run.  --clock wall gives perf_counter_ns (the kernel sample's ktime).
CLOCKS = {"cpu": time.process_time_ns, "wall": time.perf_counter_ns}
clock = CLOCKS["cpu"]


def measure_row(relevant: int, irrelevant_n: int, call_ops: bool, calls: int, repeat: int,
                callback: str) -> dict:
    func = ops_func_count if callback == "count" else ops_func_nop
    row = Row(relevant, irrelevant_n, call_ops, func)
    try:
        site = row.site()
        run_calls(tracee, min(calls, 1000))            # warm up (specialisation, caches)
        for op in row.relevant + row.irrelevant:
            op.private[0] = 0
        best = None
        for _ in range(repeat):
            t0 = clock()
            run_calls(tracee, calls)
            dt = clock() - t0
            best = dt if best is None else min(best, dt)
        if callback == "count":
            bad = [op.name for op in row.relevant if op.private[0] != calls * repeat]
            bad += [op.name for op in row.irrelevant if op.private[0] != 0]
            if bad:
                raise AssertionError(f"row ({relevant},{irrelevant_n}): wrong call counts on "
                                     f"{', '.join(bad[:5])}")
    finally:
        row.close()
    return {"relevant": relevant, "irrelevant": irrelevant_n, "total_ns": best,
            "per_call_ns": best / calls, "site": site}


def run_table(call_ops: bool, calls: int, repeat: int, callback: str) -> list[list[dict]]:
    groups = []
    for group in ROWS:
        out = []
        for r, i in group:
            out.append(measure_row(r, i, call_ops, calls, repeat, callback))
        groups.append(out)
    base = groups[0][0]["per_call_ns"]
    for g in groups:
        for row in g:
            row["overhead_ns"] = None if (row["relevant"], row["irrelevant"]) == (0, 0) \
                else row["per_call_ns"] - base
    return groups


def print_table(title: str, groups: list[list[dict]], calls: int) -> None:
    print(title)
    print()
    print("+-----------------------+-----------------+----------------------------+")
    print("|  Number of tracers    | Total time (ns) | Per-call average time      |")
    print("|-----------------------+-----------------+----------------------------|")
    print(f"| Relevant | Irrelevant | {calls:>9} calls | Total (ns) | Overhead (ns) |")
    for g in groups:
        print("|----------+------------+-----------------+------------+---------------|")
        for row in g:
            ov = "-" if row["overhead_ns"] is None else f"{row['overhead_ns']:.0f}"
            print(f"| {row['relevant']:>8} | {row['irrelevant']:>10} | {row['total_ns']:>15} "
                  f"| {row['per_call_ns']:>10.0f} | {ov:>13} |")
    print("+----------+------------+-----------------+------------+---------------+")
    print()


def _summary(groups: list[list[dict]]) -> dict:
    # (1,0) of the second group: the one the (1,I) rows are read against.
    by = {(r["relevant"], r["irrelevant"]): r for r in groups[1]}
    o10, o1200 = by[(1, 0)]["overhead_ns"], by[(1, 200)]["overhead_ns"]
    return {"overhead_1_0_ns": o10, "overhead_1_200_ns": o1200,
            "ratio_1_200_over_1_0": (o1200 / o10) if o10 else None}


# ---------------------------------------------------------------------------------
# callgrind
# ---------------------------------------------------------------------------------

def child_row(relevant: int, irrelevant_n: int, call_ops: bool, calls: int) -> None:
    """One row, in process, no timing: what the callgrind driver measures.

    The calls are made from C (itertools.starmap), so that callgrind can count them
    alone: ``--toggle-collect=starmap_next`` collects from entry to exit of that C
    function, everything it calls included, and nothing else in the process does.
    """
    row = Row(relevant, irrelevant_n, call_ops, ops_func_nop)
    try:
        run_calls(tracee, 10)          # first-call costs (the caller's record) stay out
        collections.deque(itertools.starmap(tracee, itertools.repeat((), calls)), maxlen=0)
    finally:
        row.close()


CG_ROWS = [(0, 0), (1, 0), (1, 200)]
CG_ARGS = ("--collect-atstart=no", "--toggle-collect=starmap_next")


def callgrind_driver(pythons: list[str], calls: int, as_json: bool, spec: str,
                     runs: int = 1) -> int:
    if not _common.have_valgrind():
        print("valgrind not found: --callgrind needs it", file=sys.stderr)
        return 1
    results = []
    me = os.path.abspath(__file__)
    for py, (_, env, label) in [(py, v) for py in pythons for v in _common.variants(py, spec)]:
        res = {"python": label, "calls": calls, "modes": {}}
        for mode in ("callops", "list"):
            per = {}
            for r, i in CG_ROWS:
                cmd = [py, me, "--row", str(r), str(i), "--mode", mode, "--calls", str(calls)]
                ir = _common.callgrind_ir(cmd, env, runs=runs, valgrind_args=CG_ARGS)
                per[(r, i)] = {"ir": ir, "per_call": ir / calls}
                print(f"  [{label} {mode} ({r},{i})] {per[(r, i)]['per_call']:.1f} instr/call",
                      file=sys.stderr)
            base = per[(0, 0)]["per_call"]
            for v in per.values():
                v["overhead"] = v["per_call"] - base
            ratio = per[(1, 200)]["overhead"] / per[(1, 0)]["overhead"]
            res["modes"][mode] = {"rows": {f"{r},{i}": v for (r, i), v in per.items()},
                                  "ratio_1_200_over_1_0": ratio}
        results.append(res)
    if as_json:
        print(json.dumps(results, indent=2))
        return 0
    for res in results:
        print(f"Python {res['python']}: instructions per call of the tracee "
              f"(callgrind, {res['calls']} calls, counted inside the calling loop only)")
        print()
        print("| mode     | (R,I)   | instr/call | overhead vs (0,0) |")
        print("|----------|---------|-----------:|------------------:|")
        for mode, m in res["modes"].items():
            name = "CALL_OPS" if mode == "callops" else "list"
            for key, v in m["rows"].items():
                ov = "-" if key == "0,0" else f"{v['overhead']:.0f}"
                print(f"| {name:<8} | ({key:<5}) | {v['per_call']:>10.0f} | {ov:>17} |")
        for mode, m in res["modes"].items():
            name = "CALL_OPS" if mode == "callops" else "list func"
            print(f"{name}: overhead (1,200) / (1,0) = {m['ratio_1_200_over_1_0']:.3f}")
        print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=None,
                   help="calls of the tracee per row (default 100000; 2000 with --callgrind)")
    p.add_argument("--repeat", type=int, default=5, help="runs per row; the minimum is kept")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="cpu",
                   help="cpu: process CPU time (default, robust on a busy machine); "
                        "wall: perf_counter")
    p.add_argument("--callback", choices=("nop", "count"), default="nop",
                   help="ops callback: nop (default) or count (and check the call counts)")
    p.add_argument("--mode", choices=("both", "callops", "list"), default="both",
                   help="CALL_OPS on, off (list func), or both (default)")
    p.add_argument("--callgrind", action="store_true",
                   help="instructions per call under callgrind, rows (0,0) (1,0) (1,200)")
    p.add_argument("--python", action="append", default=[], metavar="EXE",
                   help="with --callgrind: interpreter(s) to measure (default: this one)")
    p.add_argument("--runs", type=int, default=1,
                   help="with --callgrind: runs per row, minimum kept (default 1)")
    p.add_argument("--variants", default="native,pure", metavar="LIST",
                   help="with --callgrind: hot paths to measure, native twin and/or pure "
                        "Python (default native,pure; FNTRACE_PURE=1 selects pure)")
    p.add_argument("--row", nargs=2, type=int, metavar=("R", "I"),
                   help="child mode: run one row in process (used by --callgrind)")
    a = p.parse_args(argv)

    if a.row is not None:
        child_row(a.row[0], a.row[1], a.mode != "list", a.calls if a.calls is not None else 100000)
        return 0
    if a.callgrind:
        return callgrind_driver(a.python or [sys.executable],
                                a.calls if a.calls is not None else 2000, a.json, a.variants, a.runs)

    global clock
    clock = CLOCKS[a.clock]
    calls = a.calls if a.calls is not None else 100000
    modes = ["callops", "list"] if a.mode == "both" else [a.mode]
    hot = "native" if _env.native() is not None else "pure"
    out = {"python": sys.version.split()[0], "backend": _env.BACKEND, "hot_path": hot,
           "clock": a.clock, "calls": calls,
           "repeat": a.repeat, "callback": a.callback, "tables": {}}
    for mode in modes:
        groups = run_table(mode == "callops", calls, a.repeat, a.callback)
        out["tables"][mode] = {"groups": groups, **_summary(groups)}
        if not a.json:
            title = ("With CALL_OPS (ftrace_config.call_ops = True):" if mode == "callops" else
                     "Without CALL_OPS (ftrace_config.call_ops = False: list func):")
            print_table(f"Python {out['python']}, {out['backend']} back end, {hot} hot path, "
                        f"{a.clock} clock, min of {a.repeat}. {title}",
                        groups, calls)
            s = out["tables"][mode]
            print(f"  (1,200) overhead / (1,0) overhead = {s['ratio_1_200_over_1_0']:.3f}")
            print(f"  tracee site with (1,200): {groups[1][-1]['site'] or '(off)'}")
            print()
    fntrace.ftrace_config.call_ops = True
    if a.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
