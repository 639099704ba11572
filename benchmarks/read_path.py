"""Reading against writing: the CPU seconds of each view of one function_graph trace,
beside what ``fntrace record`` took to write it and what ``trace-cmd report`` takes on
the trace-cmd export of the same trace.

A trace of CALLS calls (2 x CALLS events, three small functions, nothing lost) is
recorded once; then each command runs in its own process, as a user types it, and its
CPU time (user + system, ``os.wait4``) and peak RSS are taken.  Each view runs with the
native twin and with FNTRACE_PURE=1 (the pure reading path), so the table shows both
and what the native reading path buys.  A view whose exporter or library is missing is
left out with a note; trace-cmd's row needs the ``trace-cmd`` program.

    python benchmarks/read_path.py [--calls 1000000] [--python EXE] [--only report ...]
                                   [--args]

``--args`` records with ``-A -R`` (every call's arguments and return value), the
trace a user looking at values reads.  ``--tracer function`` records with the default
tracer (hits, no durations: each call one event).  ``--tasks N`` runs the calls in N
asyncio Tasks that take turns every hundred iterations: the trace of an asyncio
program, its task switches among the calls.  ``--procs N`` runs them in N processes
(os.fork): a run of N+1 trace files, one a process, read as one trace; stat and the
folded export walk each file in a child process of their own (tracefile/parallel.py),
and are measured again with FNTRACE_JOBS=1 (every file walked in one process).  The
wall column is each command's elapsed time (a view reading on more than one core
shows it below its CPU time).

The ratios are what count on a shared machine: every row of one run shares its load.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import child_env, fmt_int, python_label  # noqa: E402
from views import GROUP_BY, PROG, formats_here  # noqa: E402

EXPORTS = ("perfetto", "chrome", "folded", "trace-cmd", "parquet", "otlp", "otlp-proto")


ASYNC_PROG = """\
import asyncio
import sys

def leaf(x):
    return x + 1

def mid(x):
    return leaf(x) * 2

async def task(n):
    s = 0
    for i in range(n):
        s += mid(i)
        s += leaf(i)
        if i % 100 == 99:
            await asyncio.sleep(0)
    return s

async def main(calls, tasks):
    # three calls an iteration, as PROG's
    per = max(1, (calls - 1) // 3 // tasks)
    return sum(await asyncio.gather(*(task(per) for _ in range(tasks))))

print(asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]))))
"""

# PROG's functions, the calls shared among ``procs`` forked processes
PROCS_PROG = PROG[:PROG.index("calls = int")].replace("import sys", "import os\nimport sys") + """\
calls, procs = int(sys.argv[1]), int(sys.argv[2])
pids = []
for _ in range(procs):
    pid = os.fork()
    if pid == 0:
        top(max(1, (calls - 1) // 3 // procs))
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
"""

RECORDS = """\
import sys
from fntrace.output.source import open_trace
print(open_trace(sys.argv[1]).nr_records())
"""

TUI_INDEX = """\
import sys
from fntrace.output.source import open_trace
from fntrace.tui.index import TraceIndex, function_rows
ix = TraceIndex(open_trace(sys.argv[1]))
ix.build()
assert ix.done and ix.error is None, ix.error
print(len(function_rows(ix)), ix.nr_rows())
"""


WALL: dict[str, float] = {}     # command -> wall seconds of its last run


def run_cpu(cmd: list[str], cwd: str, env: dict) -> tuple[int, float, int, str]:
    """(exit status, CPU seconds, peak RSS bytes, stderr's end) of one child (its
    wall time in WALL)."""
    err_path = os.path.join(cwd, ".stderr")
    with open(err_path, "wb") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err,
                             stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        WALL[" ".join(cmd)] = time.perf_counter() - t0
    with open(err_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return (os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime,
            ru.ru_maxrss * 1024, text.strip()[-300:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--only", action="append", metavar="VIEW",
                    help="report, report-filtered, report-window, stat, stat-filtered, "
                         "stat-dist, diff, sql, "
                         "sql-parquet, "
                         "tui-index, trace-cmd-report, or an export format")
    ap.add_argument("--args", action="store_true",
                    help="record arguments and return values (-A -R)")
    ap.add_argument("--tracer", choices=("function_graph", "function"),
                    default="function_graph", help="the tracer recording the trace")
    ap.add_argument("--tasks", type=int, default=0, metavar="N",
                    help="run the calls in N asyncio Tasks (task switches in the trace)")
    ap.add_argument("--procs", type=int, default=0, metavar="N",
                    help="run the calls in N forked processes (a trace file each)")
    ap.add_argument("--no-pure", action="store_true", help="leave out the pure column")
    opts = ap.parse_args(argv)
    if opts.args and opts.tracer != "function_graph":
        ap.error("--args needs --tracer function_graph")
    if opts.tasks and opts.procs:
        ap.error("--tasks and --procs are one or the other")
    env = child_env()
    env["FNTRACE_PROGRESS"] = "0"
    pure_env = dict(env, FNTRACE_PURE="1")
    events = 2 * opts.calls

    def wanted(view: str) -> bool:
        return not opts.only or view in opts.only

    rows: list[tuple[str, float | None, float | None, int, str, float | None]] = []
    with tempfile.TemporaryDirectory(prefix="fntrace-read-") as d:
        with open(os.path.join(d, "prog.py"), "w") as f:
            f.write(ASYNC_PROG if opts.tasks else PROCS_PROG if opts.procs else PROG)
        buffer_kb = max(4096, events * 48 // 1024)
        fn = [opts.python, "-m", "fntrace"]
        status, rec_cpu, rss, err = run_cpu(
            [*fn, "record", "-p", opts.tracer, *(["-A", "-R"] if opts.args else []),
             "-b", str(buffer_kb), "-F", "__main__.*",
             "-o", "t.dat", "prog.py", str(opts.calls),
             *([str(opts.tasks or opts.procs)] if opts.tasks or opts.procs else [])],
            d, env)
        if status != 0:
            raise SystemExit(f"record failed: {err}")
        # the events the trace holds (hits are one a call; task switches add some)
        events = int(subprocess.run([opts.python, "-c", RECORDS, "t.dat"], cwd=d, env=env,
                                    capture_output=True, text=True, check=True).stdout)
        rows.append(("record (writing the trace)", rec_cpu, None, rss, "", None))
        views: list[tuple[str, list[str]]] = []
        twinless: set[str] = set()
        # the views that walk a trace of several processes' files in a child per file
        # (tracefile/parallel.py), also walked in one process
        one_by_one: list[tuple[str, list[str]]] = []
        if wanted("report"):
            views.append(("report", [*fn, "report", "t.dat"]))
        if wanted("report-filtered"):
            # -F keeps mid and the leaf under it: two thirds of the calls
            views.append(("report -F __main__.mid", [*fn, "report", "t.dat", "-F", "__main__.mid"]))
        if wanted("report-window"):
            # a tenth of a second of the run, through the file's index
            views.append(("report --from +0.5 --to +0.6",
                          [*fn, "report", "t.dat", "--from", "+0.5", "--to", "+0.6"]))
        if wanted("stat"):
            views.append(("stat", [*fn, "stat", "t.dat"]))
            one_by_one.append(views[-1])
        if wanted("stat-filtered"):
            views.append(("stat -N __main__.leaf", [*fn, "stat", "t.dat", "-N", "__main__.leaf"]))
        if wanted("stat-dist"):
            # each function's distribution too (a histogram bucket a call) and Where
            views.append(("stat --dist --where", [*fn, "stat", "t.dat", "--dist", "--where"]))
        if wanted("diff"):
            # both sides walked with their distributions and edges (the trace against
            # itself: twice stat --dist's reading)
            views.append(("diff t.dat t.dat", [*fn, "diff", "t.dat", "t.dat"]))
        if wanted("sql"):
            views.append(("sql (GROUP BY over the .dat)", [*fn, "sql", "t.dat", GROUP_BY, "--csv"]))
        if wanted("sql-parquet") and "parquet" in formats_here(opts.python, env):
            # the same query over the Parquet export of the trace (made first, not
            # timed): through fntrace sql (DuckDB's Parquet reader), and DuckDB alone
            status, _, _, err = run_cpu([*fn, "export", "t.dat", "--format", "parquet",
                                         "-o", "q.parquet"], d, env)
            if status != 0:
                raise SystemExit(f"export parquet failed: {err}")
            views.append(("sql (the same GROUP BY over the Parquet export)",
                          [*fn, "sql", "q.parquet", GROUP_BY, "--csv"]))
            alone = GROUP_BY.replace("FROM calls", "FROM read_parquet('q.parquet') "
                                     "WHERE kind IN ('call', 'hit')")
            views.append(("DuckDB alone over the Parquet export (python -c)",
                          [opts.python, "-c", f"import duckdb; duckdb.sql({alone!r}).fetchall()"]))
            # (no pure twin reads a Parquet file)
            twinless.update(name for name, _ in views[-2:])
        if wanted("tui-index"):
            # what `fntrace tui` does before its function table is complete: the index
            # of every call, then the table (no terminal: the index alone)
            views.append(("tui index and function table", [opts.python, "-c", TUI_INDEX,
                                                           "t.dat"]))
        here = formats_here(opts.python, env)
        for fmt in EXPORTS:
            if not wanted(fmt):
                continue
            if fmt not in here:
                rows.append((f"export {fmt}", None, None, 0, "exporter or library missing",
                             None))
                continue
            views.append((f"export {fmt}", [*fn, "export", "t.dat", "--format", fmt, "-o",
                                            f"out.{fmt}"]))
            if fmt == "folded":
                one_by_one.append(views[-1])
        jobs_of = {name: None for name, _ in views}
        if opts.procs > 1:
            for name, cmd in one_by_one:
                views.append((f"{name} (FNTRACE_JOBS=1: in one process)", cmd))
                jobs_of[views[-1][0]] = "1"
        for name, cmd in views:
            jobs = jobs_of[name]
            status, cpu, rss, err = run_cpu(cmd, d, env if jobs is None else
                                            dict(env, FNTRACE_JOBS=jobs))
            wall = WALL[" ".join(cmd)]
            pcpu = None
            if not opts.no_pure and jobs is None and name not in twinless:
                pstatus, pcpu, _, perr = run_cpu(cmd, d, pure_env)
                if pstatus != 0:
                    pcpu, err = None, err or perr
            rows.append((name, cpu if status == 0 else None, pcpu, rss,
                         "" if status == 0 else err, wall if status == 0 else None))
        if wanted("trace-cmd-report"):
            if shutil.which("trace-cmd") is None:
                rows.append(("trace-cmd report (on the trace-cmd export)", None, None, 0,
                             "trace-cmd is not installed", None))
            else:
                status, _, _, err = run_cpu([*fn, "export", "t.dat", "--format", "trace-cmd",
                                             "-o", "tc.dat"], d, env)
                if status == 0:
                    status, cpu, rss, err = run_cpu(["trace-cmd", "report", "-i", "tc.dat"],
                                                    d, env)
                rows.append(("trace-cmd report (on the trace-cmd export)",
                             cpu if status == 0 else None, None, rss,
                             "" if status == 0 else err, None))

    print(f"# {python_label(opts.python)}: a {opts.tracer} trace of {fmt_int(opts.calls)} "
          f"calls ({fmt_int(events)} events"
          f"{', arguments and return values recorded' if opts.args else ''}"
          f"{f', in {opts.tasks} asyncio Tasks' if opts.tasks else ''}"
          f"{f', in {opts.procs} processes' if opts.procs else ''}); CPU seconds "
          "(user + system)")
    print()
    print("| view | CPU s | wall s | events per CPU s | ÷ record's CPU | pure CPU s "
          "| native speed-up | peak RSS MB | note |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, cpu, pcpu, rss, note, wall in rows:
        c = f"{cpu:.2f}" if cpu is not None else "—"
        rate = fmt_int(int(events / cpu)) if cpu else "—"
        ratio = f"{cpu / rec_cpu:.2f}" if cpu is not None and rec_cpu else "—"
        p = f"{pcpu:.2f}" if pcpu is not None else "—"
        up = f"{pcpu / cpu:.0f}×" if pcpu and cpu else "—"
        w = f"{wall:.2f}" if wall is not None else "—"
        print(f"| {name} | {c} | {w} | {rate} | {ratio} | {p} | {up} | {rss / 2**20:.0f} "
              f"| {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
