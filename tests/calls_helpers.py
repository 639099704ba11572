"""A program with nested calls, an exception, json and a second thread, and the calls
``fntrace report`` prints for a function_graph trace of it: what the exports of whole
calls (Parquet, OTLP) are compared with."""
from __future__ import annotations

import re
from decimal import Decimal

import pytest

PROG = """
import json
import threading

def leaf(x):
    return x * 2

def mid(n):
    s = 0
    for i in range(n):
        s += leaf(i)
    return s

def fails():
    raise ValueError("no")

def main():
    for k in range(4):
        mid(k + 1)
    try:
        fails()
    except ValueError:
        pass
    json.dumps({"a": [1, 2]})
    t = threading.Thread(target=mid, args=(3,), name="worker")
    t.start()
    t.join()

main()
"""

# a graph line of `fntrace report`: " 0)   1.234 us   |    __main__.leaf();"
GRAPH_LINE = re.compile(r"^\s*(\d+)\)\s+(?:[+!#*@$]\s*)?(?:([\d.]+) us\s+)?\|(\s*)([^\s(}]+)\(")
GRAPH_CLOSE = re.compile(r"^\s*(\d+)\)\s+(?:[+!#*@$]\s*)?([\d.]+) us\s+\|\s*\}")


def report_calls(run_fntrace, dat) -> list[tuple[int, str, int, Decimal]]:
    """(cpu, function, depth, duration in us) of every call the text report prints,
    a leaf at its line, a call with children at its closing brace."""
    r = run_fntrace("report", dat)
    assert r.returncode == 0, r.stderr
    out, open_ = [], {}
    for line in r.stdout.splitlines():
        m = GRAPH_LINE.match(line)
        if m:
            cpu, dur, indent, func = m.groups()
            depth = (len(indent) - 2) // 2
            if not line.endswith(") {"):            # a leaf: "f(args); /* ret=... */"
                out.append((int(cpu), func, depth, Decimal(dur)))
            else:
                open_.setdefault(int(cpu), []).append((func, depth))
            continue
        m = GRAPH_CLOSE.match(line)
        if m:
            cpu = int(m.group(1))
            func, depth = open_[cpu].pop()
            out.append((cpu, func, depth, Decimal(m.group(2))))
    assert out, r.stdout[:2000]
    return out


@pytest.fixture
def recorded(tmp_script, run_fntrace, tmp_path):
    """PROG recorded with function_graph -A -R (json's functions too): t.dat's path."""
    prog = tmp_script(PROG)
    r = run_fntrace("record", "-p", "function_graph", "-A", "-R", "-F", "__main__.*",
                    "-F", "json.*", "-o", "t.dat", prog)
    assert r.returncode == 0, r.stderr
    return tmp_path / "t.dat"


def export_as(fmt: str, run_fntrace, dat, out, *more):
    """``fntrace export DAT --format FMT -o OUT``, which must succeed."""
    r = run_fntrace("export", dat, "--format", fmt, "-o", out, *more)
    assert r.returncode == 0, r.stderr
    return r
