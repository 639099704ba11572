#!/usr/bin/env python3
"""What a recording costs before and beside the program's calls: start-up, and a new
thread's set-up.

Callgrind, whole-process instructions, one run per row (PYTHONHASHSEED=0, byte code
cached by a first run):

    start-up     `fntrace record -o F empty.py` against `python empty.py`: everything
                 the command does for a program that does nothing (imports, the parser,
                 tracefs, the writer thread, the trace file).  Target: <= 2x python.
    thread       a program that starts and joins THREADS threads one after another,
                 each calling one traced function, recorded with `-F '__main__.work'`,
                 minus the same program untraced; the difference between THREADS=T and
                 2T, divided by T: one more thread's cost (its first event's buffer and
                 index, its end, its chunk written), the one-time costs cancelled.
                 Target: <= 100 k instructions.

    python benchmarks/startup.py [--python EXE]... [--threads 64] [--variants native,pure]
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

THREADS = """\
import sys, threading

def work():
    return 1

for _ in range(int(sys.argv[1])):
    t = threading.Thread(target=work)
    t.start()
    t.join()
"""


def main() -> int:
    ap = _common.callgrind_parser(__doc__, 0)
    ap.add_argument("--threads", type=int, default=64)
    a = ap.parse_args()
    t = a.threads
    rows = []
    for python, env, label, d, prog in _common.each_run(a, THREADS, "threads.py"):
        out = os.path.join(d, "t.dat")
        empty = os.path.join(d, "empty.py")
        with open(empty, "w"):
            pass

        def ir(*cmd: str) -> int:
            return _common.callgrind_ir([python, *cmd], env, runs=2)

        py = ir(empty)
        rec = ir("-m", "fntrace", "record", "-o", out, empty)
        plain = [ir(prog, str(n)) for n in (t, 2 * t)]
        traced = [ir("-m", "fntrace", "record", "-F", "__main__.work", "-o", out, prog, str(n))
                  for n in (t, 2 * t)]
        per_plain = (plain[1] - plain[0]) / t
        per_traced = (traced[1] - traced[0]) / t
        rows.append((label, py, rec, per_plain, per_traced))
    print("| Python | `python empty.py` | `fntrace record` of it | ratio (target <= 2) "
          "| a thread, untraced | a thread, recorded | added (target <= 100 k) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, py, rec, pp, pt in rows:
        print(f"| {label} | {_common.fmt_int(py)} | {_common.fmt_int(rec)} | {rec / py:.2f} "
              f"| {_common.fmt_int(pp)} | {_common.fmt_int(pt)} | {_common.fmt_int(pt - pp)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
