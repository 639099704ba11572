#!/usr/bin/env python3
"""The HTML report at 10^5, 10^6 and 10^7 calls: how long ``fntrace export --format
html`` takes beside the recording, how big the file is, and how long a browser takes to
open it and draw each view.

A function_graph trace of N calls (three small functions nested, ``-F '__main__.*'``)
is recorded per size; then ``fntrace export --format html`` writes the report (wall
time, beside the recording's), and headless Chromium opens it with every request
refused, once per view: the page writes the milliseconds from the start of navigation
to the drawn view into its DOM (``data-load-ms``), which is read back with
``--dump-dom``.  A browser's own start is not in that figure.

    python benchmarks/html_report.py [--sizes 100000,1000000,10000000] [--python EXE]

Targets (issue 30): the page opens in under 3 s and the file stays under 20 MB at
10^7 calls (the timeline keeps the 200,000 longest calls: output/html_report.py).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import child_env, fmt_int, python_label  # noqa: E402

PROG = """\
import sys

def leaf(i):
    return i

def mid(n):
    for i in range(n):
        leaf(i)

def top(n, k):
    for _ in range(k):
        mid(n)

top(100, int(sys.argv[1]) // 101)
"""


def _timed(cmd: list[str], env: dict, cwd: str) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr}")
    return time.perf_counter() - t


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _load_ms(chromium: str, page: str, view: str, tmp: str) -> int | None:
    profile = tempfile.mkdtemp(dir=tmp)
    r = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}",
         "--window-size=1400,900", "--virtual-time-budget=60000", "--dump-dom",
         f"file://{page}#view={view}"], capture_output=True, text=True, timeout=600)
    shutil.rmtree(profile, ignore_errors=True)
    m = re.search(r'data-load-ms="(\d+)"', r.stdout)
    return int(m.group(1)) if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    env = child_env()
    chromium = _chromium()
    print(f"# {python_label(args.python)}; browser: {chromium or 'none (load times left out)'}")
    print(f"{'calls':>12} {'record s':>9} {'export s':>9} {'trace MB':>9} {'html MB':>8} "
          f"{'flame ms':>9} {'timeline ms':>12} {'table ms':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "prog.py")
        with open(prog, "w") as f:
            f.write(PROG)
        for n in sizes:
            dat, page = os.path.join(tmp, f"t{n}.dat"), os.path.join(tmp, f"t{n}.html")
            rec = _timed([args.python, "-m", "fntrace", "record", "-p", "function_graph",
                          "-F", "__main__.*", "-b", "65536", "-o", dat, prog, str(n)], env, tmp)
            exp = _timed([args.python, "-m", "fntrace", "export", dat, "--format", "html",
                          "-o", page], env, tmp)
            loads = [_load_ms(chromium, page, v, tmp) if chromium else None
                     for v in ("flame", "timeline", "functions")]
            cells = [f"{x:>d}" if x is not None else "-" for x in loads]
            print(f"{fmt_int(n):>12} {rec:>9.2f} {exp:>9.2f} "
                  f"{os.path.getsize(dat) / 1e6:>9.1f} {os.path.getsize(page) / 1e6:>8.1f} "
                  f"{cells[0]:>9} {cells[1]:>12} {cells[2]:>9}", flush=True)
            os.unlink(dat)


if __name__ == "__main__":
    main()
