"""trace_pipe through the FUSE mount: does ``cat DIR/trace_pipe`` keep up?

A program that calls ``fntrace.serve()`` calls one small function at a paced rate (default 100,000 calls a second, in batches each millisecond) for a few
seconds.  Through the mount (``fntrace mount PID DIR``): the function tracer on that
function, ``options/overwrite`` 0 (stop mode: a full buffer drops new events instead
of overwriting old ones, so a slow reader shows up as lost events), and ``cat
DIR/trace_pipe`` reading into a file.  After the load, when the reader has drained the
buffers, ``trace``'s header gives entries-written; the figure is entries-written
against the lines the reader got (target: equal, nothing lost).

    python benchmarks/pipe_throughput.py [--rate 100000] [--seconds 3] [-b KB]

Needs FUSE (libfuse3, /dev/fuse, mfusepy), as ``fntrace mount`` does.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

from _common import child_env, python_label

PROGRAM = textwrap.dedent("""
    import os, sys, threading, time
    import fntrace

    if sys.argv[5] == "serve":
        fntrace.serve()                    # controllable: fntrace mount PID DIR

    def tick(i):
        return i

    rate, seconds, go, done = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
    while not os.path.exists(go):          # wait for the reader
        time.sleep(0.01)
    def load():
        batch = max(1, int(rate / 1000))   # calls each millisecond
        calls = 0
        t0 = time.monotonic()
        end = t0 + seconds
        next_t = t0
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if now < next_t:
                time.sleep(next_t - now)
                continue
            for i in range(batch):
                tick(i)
            calls += batch
            next_t += 0.001
        took = time.monotonic() - t0
        with open(done, "w") as f:
            f.write(f"{calls} {took}\\n")
        # The thread stays: under record --serve an ended thread's buffer goes to the
        # file, and trace's header would no longer count what it wrote.
        time.sleep(3600)

    # on a thread started now: the 3.11 back end sees only threads started after
    # tracing is switched on
    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join()                               # stays served until the benchmark ends it
""")


def _sh(cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)


def _wait(pred, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise SystemExit(f"pipe_throughput: timed out waiting for {what}")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _mount_server(mnt: str) -> int | None:
    """The background process serving the mount at ``mnt``."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"mount" in argv and mnt.encode() in argv:
            return int(name)
    return None


def _lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def run(rate: float, seconds: float, buffer_kb: int, served_by: str = "serve") -> dict:
    env = child_env()
    d = tempfile.mkdtemp(prefix="fntrace-pipe-")
    prog, mnt, out = (os.path.join(d, n) for n in ("prog.py", "mnt", "pipe.txt"))
    go, done = os.path.join(d, "go"), os.path.join(d, "done")
    os.mkdir(mnt)
    with open(prog, "w") as f:
        f.write(PROGRAM)
    fntrace = [sys.executable, "-m", "fntrace"]
    if served_by == "record":
        cmd = fntrace + ["record", "--serve", "-p", "nop", "-o", os.path.join(d, "x.dat"), prog]
    else:
        cmd = [sys.executable, prog]
    p = subprocess.Popen(cmd + [str(rate), str(seconds), go, done, served_by],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cat = None
    try:
        _wait(lambda: subprocess.run(fntrace + ["ctl", str(p.pid), "current_tracer"], env=env,
                                     capture_output=True).returncode == 0, 30, "the endpoint")
        r = subprocess.run(fntrace + ["mount", str(p.pid), mnt], env=env, capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise SystemExit(f"pipe_throughput: fntrace mount failed: {r.stderr.strip()}")
        r = _sh(f"cd {mnt} && echo {buffer_kb} > buffer_size_kb && echo 0 > options/overwrite && "
                f"echo '__main__.tick' > set_ftrace_filter && echo function > current_tracer")
        if r.returncode != 0:
            raise SystemExit(f"pipe_throughput: setting up through the mount failed: {r.stderr}")
        with open(out, "wb") as f:
            cat = subprocess.Popen(["cat", os.path.join(mnt, "trace_pipe")], stdout=f)
        time.sleep(0.3)
        server = _mount_server(mnt)
        cpu0 = {"program": _cpu_s(p.pid), "mount": _cpu_s(server) if server else float("nan"),
                "cat": _cpu_s(cat.pid)}
        t_go = time.monotonic()
        open(go, "w").close()
        _wait(lambda: os.path.exists(done) and os.path.getsize(done) > 0, seconds * 5 + 30,
              "the load")
        calls, took = open(done).read().split()
        # drained: nothing new for a second
        last, since = -1, time.monotonic()
        while time.monotonic() - since < 1.0:
            n = os.path.getsize(out)
            if n != last:
                last, since = n, time.monotonic()
            time.sleep(0.1)
        drain_s = since - t_go
        cpu = {"program": _cpu_s(p.pid) - cpu0["program"],
               "mount": (_cpu_s(server) if server else float("nan")) - cpu0["mount"],
               "cat": _cpu_s(cat.pid) - cpu0["cat"]}
        header = _sh(f"echo 0 > {mnt}/tracing_on; head -4 {mnt}/trace").stdout
        m = re.search(r"entries-in-buffer/entries-written: (\d+)/(\d+)", header)
        in_buf, written = (int(m.group(1)), int(m.group(2))) if m else (-1, -1)
        cat.send_signal(signal.SIGINT)
        cat.wait(timeout=10)
        got = _lines(out)
        with open(out, "rb") as f:
            text = f.read()
        events = text.count(b"__main__.tick <-")
        lost = sum(int(x) for x in re.findall(rb"\[LOST (\d+) EVENTS\]", text))
        return {"calls": int(calls), "seconds": float(took), "written": written,
                "in_buffer": in_buf, "lines": got, "events": events, "lost_marked": lost,
                "drain_s": drain_s, "cpu": cpu, "load": os.getloadavg()[0]}
    finally:
        if cat is not None and cat.poll() is None:
            cat.kill()
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        p.kill()
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=100_000, help="calls a second (default 100000)")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of the load (default 3)")
    ap.add_argument("-b", "--buffer-size-kb", type=int, default=1408,
                    help="buffer_size_kb (default 1408, record's default)")
    ap.add_argument("--served-by", choices=("serve", "record"), default="serve",
                    help="the program calls fntrace.serve() (default), or runs under "
                         "fntrace record --serve -p nop (its buffers also feed the file)")
    args = ap.parse_args()
    r = run(args.rate, args.seconds, args.buffer_size_kb, args.served_by)
    rate = r["calls"] / r["seconds"]
    print(f"{python_label(sys.executable, child_env())}: {r['calls']:,} calls in {r['seconds']:.2f} s ({rate:,.0f}/s), "
          f"buffer_size_kb {args.buffer_size_kb}, stop mode, served by {args.served_by}")
    print(f"  entries-written {r['written']:,}  (left in buffer {r['in_buffer']:,})")
    print(f"  reader got      {r['events']:,} events in {r['lines']:,} lines"
          f"{'' if not r['lost_marked'] else ', LOST markers: %d' % r['lost_marked']}")
    missing = r["written"] - r["events"]
    print(f"  not read        {missing:,} ({100 * missing / max(1, r['written']):.1f}%: dropped "
          f"in stop mode while the reader was behind); the reader averaged "
          f"{r['events'] / r['drain_s']:,.0f} lines/s")
    c = r["cpu"]
    per = 1e6 / max(1, r["events"])
    print(f"  CPU while it ran: program {c['program']:.2f} s (its calls, tracing, rendering "
          f"trace_pipe), mount {c['mount']:.2f} s ({c['mount'] * per:.1f} us a line), cat "
          f"{c['cat']:.2f} s; load average {r['load']:.1f} on {os.cpu_count()} CPUs")
    verdict = "equal" if r["events"] == r["written"] == r["calls"] else "NOT equal"
    print(f"  calls = entries-written = events read: {verdict}")


if __name__ == "__main__":
    main()
