"""trace_pipe read throughput in process, overwrite off (stop mode: a full buffer drops
new events, counted).

1. drain: a buffer pre-filled with N events (the function tracer's, then
   function_graph's entry/return pairs) read through one open trace_pipe until empty:
   events printed per second.
2. keep up: a traced thread calls a traced function at a paced RATE (default 100,000
   calls/s) for SECONDS while a reader thread reads trace_pipe; does the reader keep
   up?  entries-written (what the writer produced, lost ones included) against the
   lines the reader got and the events dropped.

    python benchmarks/trace_pipe_throughput.py [--rate 100000] [--seconds 3]
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import textwrap
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from fntrace.tracefs import Tracefs  # noqa: E402

MOD = """
def leaf(x):
    return x

def pace(n, rate, seconds, stop):
    # calls leaf() n at a time so that `rate` calls a second are made on average
    t0 = time.perf_counter()
    done = 0
    while not stop.is_set():
        for i in range(n):
            leaf(i)
        done += n
        ahead = done / rate - (time.perf_counter() - t0)
        if ahead > 0:
            time.sleep(ahead)
        if time.perf_counter() - t0 >= seconds:
            break
    return done

def burst(n):
    for i in range(n):
        leaf(i)
"""


def _module():
    d = tempfile.mkdtemp(prefix="tpbench")
    with open(os.path.join(d, "tpbench_mod.py"), "w") as f:
        f.write("import time\n" + textwrap.dedent(MOD))
    sys.path.insert(0, d)
    return importlib.import_module("tpbench_mod")


def drain(fs: Tracefs, m, tracer: str, n: int) -> tuple[int, float]:
    fs.write("current_tracer", "nop")
    fs.write("set_ftrace_filter", "tpbench_mod.leaf")
    fs.write("current_tracer", tracer)
    r = fs.open_pipe()
    m.burst(n)
    fs.write("tracing_on", "0")
    written = fs.tr.entries()[1]
    t0 = time.perf_counter()
    lines = 0
    while True:
        text = r.read(timeout=0)
        if not text:
            break
        lines += text.count("\n")
    dt = time.perf_counter() - t0
    r.close()
    fs.write("tracing_on", "1")
    fs.write("trace", "")
    return written, dt if lines else 0.0


def keep_up(fs: Tracefs, m, rate: int, seconds: float) -> dict:
    fs.write("current_tracer", "nop")
    fs.write("trace", "")
    fs.write("set_ftrace_filter", "tpbench_mod.leaf")
    fs.write("current_tracer", "function")
    r = fs.open_pipe()
    stop = threading.Event()
    got = [0]

    def reader():
        while not stop.is_set():
            got[0] += r.read(timeout=0.05).count("tpbench_mod.leaf")

    t = threading.Thread(target=reader)
    t.start()
    calls = [0]
    w = threading.Thread(target=lambda: calls.__setitem__(0, m.pace(100, rate, seconds,
                                                                       threading.Event())))
    t0 = time.perf_counter()
    w.start()
    w.join()
    elapsed = time.perf_counter() - t0
    time.sleep(0.3)
    stop.set()
    t.join()
    got[0] += r.read(timeout=0).count("tpbench_mod.leaf")
    r.close()
    bufs = list(fs.tr.buffers.values())
    written = sum(b.written for b in bufs)
    dropped = sum(b.dropped for b in bufs)
    fs.write("current_tracer", "nop")
    return {"calls": calls[0], "rate": calls[0] / elapsed, "written": written,
            "read": got[0], "dropped": dropped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--n", type=int, default=200_000)
    a = ap.parse_args()
    from fntrace import _env
    print(f"Python {sys.version.split()[0]}, {_env.BACKEND}, "
          f"{'native' if _env.native() is not None else 'pure'} hot path")
    m = _module()
    fs = Tracefs()
    fs.write("trace_options", "nooverwrite")
    fs.write("buffer_size_kb", str(max(1408, a.n * 32 * 2 // 1024 + 1)))
    for tracer in ("function", "function_graph"):
        n, dt = drain(fs, m, tracer, a.n)
        print(f"drain {tracer:15s}: {n} events in {dt:.3f} s = {n / dt:,.0f} events/s")
    fs.write("buffer_size_kb", "1408")
    k = keep_up(fs, m, a.rate, a.seconds)
    print(f"keep up at {a.rate:,} calls/s for {a.seconds} s: made {k['calls']:,} calls "
          f"({k['rate']:,.0f}/s), entries-written {k['written']:,}, read {k['read']:,}, "
          f"dropped {k['dropped']:,}")


if __name__ == "__main__":
    main()
