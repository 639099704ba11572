#!/usr/bin/env python3
"""What a hist trigger costs per hit, against writing the same event to the ring
buffer (issue target: no more), whole-process instructions counted by callgrind.

    python benchmarks/hist_trigger.py                       # this interpreter
    python benchmarks/hist_trigger.py --python .venvs/py3.11/bin/python --n 20000

An fprobe event ``f:e __main__.f n name`` on a function called N times, set up through
the tracefs files in the program's own process, in four ways:

    probe      the event defined, nothing enabled (the fprobe's own cost)
    event      the event enabled: each hit written to the ring buffer
    hist       not enabled; a hist trigger ``hist:keys=name:vals=n`` on it
    hist2      the same with a compound key and a log2 key: ``keys=name,n.log2:vals=n``

Per hit = (count(N) - count(0)) / N, minus the untraced call's.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

PROG = '''\
import sys
mode, n = sys.argv[1], int(sys.argv[2])

def f(n, name):
    return n

if mode != "plain":
    from fntrace.tracefs import Tracefs
    fs = Tracefs()
    fs.write("dynamic_events", "f:e __main__.f n name", append=True)
    if mode == "event":
        fs.write("events/fprobes/e/enable", "1")
    elif mode == "hist":
        fs.write("events/fprobes/e/trigger", "hist:keys=name:vals=n")
    elif mode == "hist2":
        fs.write("events/fprobes/e/trigger", "hist:keys=name,n.log2:vals=n")
names = ("a", "b", "c", "d")
for i in range(n):
    f(i, names[i & 3])
if mode.startswith("hist"):
    assert "Hits: %d" % n in fs.read("events/fprobes/e/hist")
'''

MODES = ("probe", "event", "hist", "hist2")


def main() -> None:
    a = _common.callgrind_parser(__doc__, 20_000).parse_args()
    for python, env, label, _, prog in _common.each_run(a, PROG, "h.py"):
        def per_hit(mode: str) -> float:
            c = [_common.callgrind_ir([python, prog, mode, str(n)], env) for n in (0, a.n)]
            return (c[1] - c[0]) / a.n
        base = per_hit("plain")
        cost = {m: per_hit(m) - base for m in MODES}
        probe = cost["probe"]
        parts = ", ".join(f"{m} {cost[m]:,.0f}" for m in MODES)
        ratio = (cost["hist"] - probe) / (cost["event"] - probe)
        ratio2 = (cost["hist2"] - probe) / (cost["event"] - probe)
        print(f"{label}: N = {a.n:,}; instructions added per hit: {parts}; "
              f"beyond the probe, hist/event = {ratio:.2f}, hist2/event = "
              f"{ratio2:.2f}", flush=True)


if __name__ == "__main__":
    main()
