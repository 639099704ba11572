"""The views over a big trace: wall time and peak RSS of ``fntrace report``, ``fntrace
stat`` and ``fntrace export --format F`` for every format whose exporter is there, at
two trace sizes, and the output sizes.

A function_graph trace of EVENTS events (EVENTS/2 calls of three small functions, no
``-A -R``, a buffer big enough to lose nothing) is recorded once per size; then each
command runs in its own process, as a user types it, and its peak RSS is that child's
``ru_maxrss`` (``os.wait4``).  The streamed views (stat, trace-cmd, chrome, folded, and
report) must not grow with the trace: the last table sets their RSS at the big size
beside the small one.  A format whose exporter module is missing, or whose library is
not installed, is left out with a note.

    python benchmarks/views.py [--events 2000000] [--small 500000] [--python EXE]

``fntrace tui`` runs in a real terminal (a tmux session, 120x40, when tmux is there),
as a person opens it: the time from the command's start to the first screen that shows
the trace's first call, and to the screen that no longer says it is indexing; its RSS
is not taken (tmux owns the process).

    python benchmarks/views.py --only tui --only stat   # a subset of the views
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import child_env, fmt_int, import_fntrace, python_label  # noqa: E402

PROG = """\
import sys

def leaf(x):
    return x + 1

def mid(x):
    return leaf(x) * 2

def top(n):
    s = 0
    for i in range(n):
        s += mid(i)
        s += leaf(i)
    return s

calls = int(sys.argv[1])
# three calls an iteration (mid, leaf under it, leaf), plus top itself
print(top(max(1, (calls - 1) // 3)))
"""

# fntrace sql's query (and Spark's, on the Parquet export): a profile by function
GROUP_BY = ("SELECT function, count(*) AS calls, sum(dur) AS total, sum(self_dur) AS self "
            "FROM calls GROUP BY function ORDER BY total DESC")

SPARK = """
import sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[*]").config("spark.ui.enabled", "false")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.host", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.read.parquet(sys.argv[1]).createOrReplaceTempView("trace")
spark.sql("CREATE TEMP VIEW calls AS SELECT * FROM trace WHERE kind IN ('call', 'hit')")
t0 = time.perf_counter()
rows = spark.sql(sys.argv[2]).collect()
print(len(rows), f"{time.perf_counter() - t0:.2f}", file=sys.stderr)
spark.stop()
"""

# The views whose memory must not grow with the trace (read once, streamed).
STREAMED = ("report", "stat", "trace-cmd", "chrome", "folded", "parquet", "otlp")


def run_measured(cmd: list[str], cwd: str, env: dict, stdout=subprocess.DEVNULL
                 ) -> tuple[int, float, int, str]:
    """(exit status, wall seconds, peak RSS in bytes, stderr) of one child."""
    err_path = os.path.join(cwd, ".stderr")
    with open(err_path, "wb") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=err,
                             stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
    with open(err_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return p.returncode, wall, ru.ru_maxrss * 1024, text


def formats_here(python: str, env: dict) -> list[str]:
    """The export formats whose module is present in the interpreter measured."""
    code = ("import importlib.util\n"
            "from fntrace.output.registry import EXPORT_MODULES, export_formats\n"
            "print(' '.join(f for f in export_formats() if f not in EXPORT_MODULES\n"
            "      or importlib.util.find_spec(EXPORT_MODULES[f])))\n")
    r = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True,
                       check=True)
    return r.stdout.split()


def record(python: str, env: dict, d: str, events: int, name: str) -> tuple[float, int]:
    calls = events // 2
    buffer_kb = max(4096, events * 48 // 1024)    # never full: nothing lost
    cmd = [python, "-m", "fntrace", "record", "-p", "function_graph", "-b", str(buffer_kb),
           "-F", "__main__.*", "-o", name, "prog.py", str(calls)]
    status, wall, rss, err = run_measured(cmd, d, env)
    if status != 0:
        raise SystemExit(f"record failed ({status}): {err[-2000:]}")
    return wall, rss


def tui_open(python: str, env: dict, d: str, trace: str, timeout: float = 300.0
             ) -> tuple[float | None, float | None, str]:
    """(seconds to the first screen showing the first call, seconds to the screen that
    is no longer indexing, note) of ``fntrace tui TRACE`` in a tmux terminal."""
    if shutil.which("tmux") is None:
        return None, None, "tmux is not installed"
    sock = f"fntrace-views-{os.getpid()}"
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                    if k in ("PATH", "PYTHONPATH", "HOME", "FNTRACE_PROGRESS"))
    cmd = (f"cd {shlex.quote(d)} && env {envs} TERM=xterm-256color "
           f"{shlex.quote(python)} -m fntrace tui {shlex.quote(trace)}")
    first = done = None
    t0 = time.perf_counter()
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", "tui", "-x", "120", "-y",
                    "40", cmd], check=True, timeout=30)
    try:
        while time.perf_counter() - t0 < timeout:
            screen = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p", "-t", "tui"],
                                    capture_output=True, text=True, timeout=30).stdout
            now = time.perf_counter() - t0
            if first is None and "__main__.top" in screen:
                first = now
            if first is not None and "indexing" not in screen:
                done = now
                break
            time.sleep(0.01)
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=30)
    return first, done, "" if done is not None else f"not indexed after {timeout:.0f} s"


def measure(python: str, env: dict, d: str, trace: str, formats: list[str],
            only: list[str] | None = None) -> dict[str, tuple[float, int, int | None, str]]:
    """view -> (wall, RSS, output bytes or None, note)."""
    out: dict[str, tuple[float, int, int | None, str]] = {}
    fn = [python, "-m", "fntrace"]

    def wanted(view: str) -> bool:
        return not only or view in only

    if wanted("tui"):
        first, done, note = tui_open(python, env, d, trace)
        if first is not None:
            out["tui: first screen"] = (first, 0, None, note)
        if done is not None:
            out["tui: indexed"] = (done, 0, None, note)
        if first is None:
            out["tui: first screen"] = (0.0, 0, None, note or "no first screen")
    if wanted("report"):
        status, wall, rss, err = run_measured([*fn, "report", trace], d, env)
        out["report"] = (wall, rss, None, "" if status == 0 else err.strip()[-200:])
    if wanted("stat"):
        status, wall, rss, err = run_measured([*fn, "stat", trace], d, env)
        out["stat"] = (wall, rss, None, "" if status == 0 else err.strip()[-200:])
    if wanted("sql"):
        status, wall, rss, err = run_measured([*fn, "sql", trace, GROUP_BY, "--csv"], d, env)
        out["sql (GROUP BY over the .dat)"] = (wall, rss, None,
                                               "" if status == 0 else err.strip()[-200:])
    if wanted("spark") or wanted("sql"):
        pq = os.path.join(d, f"{trace}.sql.parquet")
        status, _, _, err = run_measured([*fn, "export", trace, "--format", "parquet", "-o",
                                          pq], d, env)
        if status == 0 and wanted("sql"):
            status, wall, rss, err = run_measured([*fn, "sql", pq, GROUP_BY, "--csv"], d, env)
            out["sql (GROUP BY over the .parquet)"] = (wall, rss, None,
                                                       "" if status == 0 else err.strip()[-200:])
        if status == 0 and wanted("spark"):
            status, wall, rss, err = run_measured([python, "-c", SPARK, pq, GROUP_BY], d, env)
            out["Spark local (the same query)"] = (
                wall, rss, None, "" if status == 0 else err.strip().splitlines()[-1][:200])
        if os.path.exists(pq):
            os.unlink(pq)
    for fmt in formats:
        if not wanted(fmt) and not wanted(f"export {fmt}"):
            continue
        target = os.path.join(d, f"{trace}.{fmt}")
        status, wall, rss, err = run_measured(
            [*fn, "export", trace, "--format", fmt, "-o", target], d, env)
        size = os.path.getsize(target) if status == 0 and os.path.exists(target) else None
        out[f"export {fmt}"] = (wall, rss, size, "" if status == 0 else err.strip()[-200:])
        if os.path.exists(target):
            os.unlink(target)
    return out


def mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n / 1e3:,.1f} KB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000, help="the big trace's events")
    ap.add_argument("--small", type=int, default=500_000, help="the small trace's events")
    ap.add_argument("--python", action="append", default=None,
                    help="interpreter to measure (repeatable; default: this one)")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep the traces")
    ap.add_argument("--only", action="append", metavar="VIEW",
                    help="measure only this view (repeatable): tui, report, stat, sql, "
                         "spark, or an export format (chrome, folded, perfetto, trace-cmd, "
                         "parquet, otlp)")
    args = ap.parse_args()
    import_fntrace()
    for python in args.python or [sys.executable]:
        env = child_env({"FNTRACE_PROGRESS": "0"})
        d = args.keep or tempfile.mkdtemp(prefix="fntrace-views-")
        os.makedirs(d, exist_ok=True)
        try:
            with open(os.path.join(d, "prog.py"), "w") as f:
                f.write(PROG)
            formats = formats_here(python, env)
            print(f"## {python_label(python, env)}: formats here: {', '.join(formats) or 'none'}")
            results = {}
            for events in (args.small, args.events):
                name = f"t{events}.dat"
                rwall, rrss = record(python, env, d, events, name)
                size = os.path.getsize(os.path.join(d, name))
                print(f"\n### {fmt_int(events)} events: record {rwall:.1f} s, "
                      f"{mb(rrss)} peak RSS; trace file {mb(size)} "
                      f"({size / events:.1f} B an event)\n")
                res = measure(python, env, d, name, formats, args.only)
                results[events] = res
                print("| view | wall | peak RSS | output | note |")
                print("|---|---|---|---|---|")
                for view, (wall, rss, osize, note) in res.items():
                    ratio = (f" ({osize / size:.2f}x the trace, {osize / events:.1f} B an "
                             "event)" if osize else "")
                    print(f"| {view} | {wall:.1f} s | {mb(rss) if rss else '-'} | "
                          f"{mb(osize) + ratio if osize else '-'} | {note} |")
            small, big = results[args.small], results[args.events]
            print(f"\n### RSS: {fmt_int(args.small)} events against {fmt_int(args.events)}\n")
            print("| view | small | big | growth | must not grow |")
            print("|---|---|---|---|---|")
            for view in big:
                a, b = small[view][1], big[view][1]
                if not a or not b:
                    continue
                streamed = view.removeprefix("export ") in STREAMED
                print(f"| {view} | {mb(a)} | {mb(b)} | {b / a:.2f}x | "
                      f"{'yes' if streamed else 'no'} |")
        finally:
            if not args.keep:
                shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
