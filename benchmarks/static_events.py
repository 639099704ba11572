#!/usr/bin/env python3
"""What the static events cost when none is enabled: instructions per iteration of a
workload that opens a file, raises and catches an exception and collects garbage,
beside the same workload untraced.

A static event that is not enabled installs nothing (events/static_events.py): no
gc.callbacks entry, no sys.monitoring event, no trace function, no audit hook.  An
audit hook cannot be removed, so after an audit event was enabled and disabled the
hook stays and returns on its first test (one Python call and one dict look-up per
audit event: here the ``open`` of each iteration).  Target: within 0.5% of untraced.

    python benchmarks/static_events.py                      # this interpreter
    python benchmarks/static_events.py --python .venvs/py3.11/bin/python \\
        --python .venvs/py3.12/bin/python --n 2000

Each child runs ``work`` N times with one of:
  untraced     fntrace not imported
  c_hook       fntrace not imported, a C function ({}.get) as audit hook: what CPython
               itself spends on each audit event once any hook is installed
  available    fntrace imported, a Tracefs made (every static event registered), none
               enabled
  audit_off    the same after ``audit:*``, ``gc:*``, ``exceptions:*`` and ``threads:*``
               were enabled and disabled again (the audit hook stays installed)
  enabled      audit:open, exceptions:* and gc:* enabled, written to the buffer (for
               scale, not a target)
and with N = 0; per iteration = (count(N) - count(0)) / N, whole-process instructions
(callgrind).  ``--child`` is what the driver runs.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

MODES = ("untraced", "c_hook", "available", "audit_off", "enabled")


def work(path: str, i: int) -> int:
    with open(path, "rb") as f:
        n = len(f.read())
    try:
        raise ValueError(i)
    except ValueError:
        n += 1
    if i % 10 == 0:
        gc.collect(0)
    return n


def loop(n: int) -> None:
    path = os.path.abspath(__file__)
    w = work
    for i in range(n):
        w(path, i)


def measured_loop(n: int) -> None:
    # Everything made so far out of the collector's way: automatic collections of the
    # older generations would otherwise cost less the more the setup left in memory.
    gc.collect()
    gc.freeze()
    loop(n)


def child(mode: str, n: int) -> int:
    if mode == "untraced":
        measured_loop(n)
        return 0
    if mode == "c_hook":
        # CPython's own cost of any audit hook, the cheapest there is (a C function)
        sys.addaudithook({}.get)
        measured_loop(n)
        return 0
    _common.import_fntrace()
    from fntrace.tracefs import Tracefs
    fs = Tracefs()
    fs.write("buffer_size_kb", "64")
    if mode == "audit_off":
        fs.write("set_event", "audit:* gc:* exceptions:* threads:*")
        fs.write("set_event", "")
    elif mode == "enabled":
        fs.write("set_event", "audit:open gc:* exceptions:*")
    before = fs.tr.entries()[1]        # (a collection while enabling: gc events)
    measured_loop(n)
    written = fs.tr.entries()[1] - before
    fs.write("set_event", "")
    if (mode == "enabled") != bool(written) and (n > 0 or mode != "enabled"):
        print(f"static_events: {mode}: {written} entries written", file=sys.stderr)
        return 1
    return 0


def driver(pythons: list[str], n: int, as_json: bool, runs: int) -> int:
    if not _common.have_valgrind():
        print("valgrind not found", file=sys.stderr)
        return 1
    me = os.path.abspath(__file__)
    rows = []
    for py in pythons:
        row = {"python": _common.python_label(py), "n": n}
        for mode in MODES:
            c = {k: _common.callgrind_ir([py, me, "--child", mode, "--n", str(k)], runs=runs)
                 for k in (n, 0)}
            row[mode] = (c[n] - c[0]) / n
        rows.append(row)
        print(f"  {row}", file=sys.stderr)
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"Instructions per iteration (open + raise/catch + gc.collect(0) every 10th), "
          f"x{n} (callgrind, whole process)")
    print()
    print("| Python | untraced | any audit hook (C) | available, none enabled "
          "| audit hook left, none enabled | enabled |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        u = r["untraced"]

        def rel(v: float) -> str:
            return f"{v:,.0f} ({(v - u) / u * 100:+.2f}%)"
        print(f"| {r['python']} | {u:,.0f} | {rel(r['c_hook'])} | {rel(r['available'])} "
              f"| {rel(r['audit_off'])} | {rel(r['enabled'])} |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", choices=MODES)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--python", action="append", default=[])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child, a.n)
    return driver(a.python or [sys.executable], a.n, a.json, a.runs)


if __name__ == "__main__":
    sys.exit(main())
