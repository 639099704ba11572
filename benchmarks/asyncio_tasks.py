#!/usr/bin/env python3
"""What recording an asyncio program costs per event-loop step, the Task-switch probe
(events/task_switch.py) included.

    python benchmarks/asyncio_tasks.py                          # this interpreter
    python benchmarks/asyncio_tasks.py --python .venvs/py3.11/bin/python --n 20000

Four Tasks each ``await asyncio.sleep(0)`` N/4 times: N loop steps, each a Task switch
and a resume of the coroutine ``w``.  Run untraced and under ``fntrace record -p
function_graph -F '*:mod:__main__'`` (which traces ``w``'s resumes and writes an
``asyncio:task_switch`` event at each step), with N and with 0, whole-process
instructions (callgrind).  Per step = (count(N) - count(0)) / N.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

PROG = '''\
import asyncio, sys

async def w(n):
    for _ in range(n):
        await asyncio.sleep(0)

async def main(n):
    await asyncio.gather(*(w(n // 4) for _ in range(4)))

asyncio.run(main(int(sys.argv[1])))
'''


def main() -> None:
    a = _common.callgrind_parser(__doc__, 20_000).parse_args()
    for python, env, label, d, prog in _common.each_run(a, PROG, "aio.py"):
        rec = [python, "-m", "fntrace.cli.main", "record", "-o", os.path.join(d, "t.dat"),
               "-p", "function_graph", "-F", "*:mod:__main__", prog]
        u = [_common.callgrind_ir([python, prog, str(n)], env) for n in (0, a.n)]
        t = [_common.callgrind_ir(rec + [str(n)], env) for n in (0, a.n)]
        base = (u[1] - u[0]) / a.n
        traced = (t[1] - t[0]) / a.n
        print(f"{label}: N = {a.n:,} loop steps; per step: untraced {base:,.0f}, "
              f"recorded {traced:,.0f} (added {traced - base:,.0f})", flush=True)


if __name__ == "__main__":
    main()
