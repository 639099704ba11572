#!/usr/bin/env python3
"""What switching a tracer on over every function costs: `function_profile_enabled`
and `current_tracer function_graph` with no filter, after a program has imported a
few dozen stdlib modules and their functions are listed (about 8,000).

On 3.11 the sys.setprofile back end's hook sees every call: installed at the first
site, it ran the rest of the patching loop through itself, and each site's return
offsets came from dis.get_instructions.  The hook now goes in after the loop and the
offsets are read from co_code: switching the profiler on over 8,159 functions took
6.98 s native and 28.01 s pure, now 0.13 s and 0.15 s (3.11.7, 2026-11-28).

Usage: benchmarks/enable_all.py [--python PY ...]   (default: .venvs/py3.*/bin/python)
Prints, per interpreter and hot path, the functions listed and the seconds to switch
each tracer on and off.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

from _common import ROOT, child_env, python_label

CHILD = r"""
import json, time
import argparse, asyncio, email.mime.text, http.server, unittest, xml.dom.minidom, pydoc
import decimal, json as _j, typing, inspect, tarfile, zipfile, sqlite3, logging.handlers
import multiprocessing.pool, concurrent.futures, urllib.request, xml.etree.ElementTree, csv
import difflib, pdb, doctest, ssl, smtplib, imaplib, ftplib, mailbox, configparser, shutil
import pickletools, optparse, gettext, locale, calendar, statistics, fractions, ipaddress
import dataclasses, enum, functools, collections, re, textwrap, string, pprint, trace
from fntrace.tracefs import Tracefs
from fntrace.core.records import record_table
record_table.refresh()
fs = Tracefs()
out = {"functions": len(record_table)}
for name, on, off in (("function_profile", ("function_profile_enabled", "1"),
                       ("function_profile_enabled", "0")),
                      ("function_graph", ("current_tracer", "function_graph"),
                       ("current_tracer", "nop"))):
    t0 = time.perf_counter(); fs.write(*on); t1 = time.perf_counter()
    fs.write(*off); t2 = time.perf_counter()
    out[name] = (t1 - t0, t2 - t1)
print(json.dumps(out))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", action="append", default=[])
    a = p.parse_args()
    pythons = a.python or sorted(glob.glob(os.path.join(ROOT, ".venvs", "py3.*", "bin",
                                                        "python")))
    print(f"{'python':<28} {'functions':>9}  {'profile on/off':>15}  "
          f"{'graph on/off':>15}")
    for py in pythons:
        for path, extra in (("native", {}), ("pure", {"FNTRACE_PURE": "1"})):
            env = child_env(extra)
            r = subprocess.run([py, "-c", CHILD], capture_output=True, text=True,
                               env=env, timeout=600)
            if r.returncode:
                print(f"{python_label(py, env):<28} failed: {r.stderr[-300:]}")
                continue
            d = json.loads(r.stdout)
            print(f"{python_label(py, env):<28} {d['functions']:>9}  "
                  f"{d['function_profile'][0]:7.2f}/{d['function_profile'][1]:<6.2f}s "
                  f"{d['function_graph'][0]:7.2f}/{d['function_graph'][1]:<6.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
