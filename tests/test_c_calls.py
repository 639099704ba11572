"""C calls: ``record --c-calls`` (the trace option func-c-calls) traces the C functions
traced Python functions call -- builtins, methods of C types, a C-accelerated parser --
named where they are defined and filtered by the same globs, as leaves of function_graph
with their durations, in stat and in the exports; without it nothing of them is traced."""
from __future__ import annotations

import json
import re

import pytest

from support import fntrace_cli, run_python

PROG = """\
import time
from xml.etree import ElementTree as ET

def key(s):
    return len(s)

def parse(doc):
    return ET.fromstring(doc)

def fail():
    try:
        {}.pop("missing")
    except KeyError:
        return "caught"

def work(items):
    n = 0
    for s in items:
        n += len(s)
    time.sleep(0.02)
    append = items.append
    append("zz")
    order = sorted(items, key=key)
    root = parse("<a><b/><b/><b/></a>")
    return n, order, len(root), fail()

print(work(["ccc", "a", "bb"]))
"""


def graph_lines(text: str) -> list[tuple[str, str, str]]:
    """(duration column, indent, call text) of each call line of a function_graph
    report."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*\d+\)\s*(.*?)\s*\|(\s*)(\S.*)$", line)
        if m:
            out.append((m.group(1), m.group(2), m.group(3)))
    return out


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    d = tmp_path_factory.mktemp("ccalls")
    (d / "prog.py").write_text(PROG)
    p = fntrace_cli("record", "-p", "function_graph", "--c-calls", "-F", "__main__.*",
                    "-F", "builtins.*", "-F", "time.sleep", "-F", "xml.etree.*",
                    "-o", "c.dat", "prog.py", cwd=d, check=True)
    return d, p


def test_the_program_runs_as_untraced(traced):
    d, p = traced
    plain = run_python("prog.py", cwd=d)
    assert p.stdout == plain.stdout
    assert "('ccc', 'a', 'bb', 'zz')" not in p.stdout       # (sorted by length)
    assert "(6, ['a', 'bb', 'zz', 'ccc'], 3, 'caught')" in p.stdout


def test_c_functions_are_leaves_of_their_callers_with_durations(traced):
    d, _ = traced
    rep = fntrace_cli("report", "c.dat", cwd=d, check=True).stdout
    calls = graph_lines(rep)
    names = [c for _, _, c in calls]
    i = names.index("__main__.work() {")
    depth = len(calls[i][1])
    body = []
    for dur, ind, text in calls[i + 1:]:
        if len(ind) <= depth:
            break
        if len(ind) == depth + 2:
            body.append((dur, text))
    texts = [t for _, t in body]
    # three len() in the loop, one sleep, list.append through a bound method, sorted()
    # (which calls back into key(), traced under it), then parse and fail
    assert texts[:3] == ["builtins.len();"] * 3, texts
    assert texts[3] == "time.sleep();"
    assert texts[4] == "builtins.list.append();"
    assert texts[5] == "builtins.sorted() {"
    sleep_us = float(re.sub(r"[^\d.]", "", body[3][0]))
    assert sleep_us >= 20000
    # the Python key function runs inside the C function and nests under it
    j = names.index("builtins.sorted() {")
    assert names[j + 1] == "__main__.key() {"
    assert names[j + 2] == "builtins.len();"
    # a C-accelerated parser: its C methods under the Python function that calls them
    assert "xml.etree.ElementTree.XMLParser.feed();" in names
    assert "xml.etree.ElementTree.XMLParser.close();" in names
    # a C function that raises ends there too (its caller goes on)
    k = names.index("__main__.fail() {")
    assert names[k + 1] == "builtins.dict.pop();"


def test_stat_counts_each_c_function_exactly(traced):
    d, _ = traced
    out = fntrace_cli("stat", "c.dat", "-c", "hit,where", "--wide", cwd=d, check=True).stdout
    hits = {}
    where = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1].isdigit():
            hits[parts[0]] = int(parts[1])
            where[parts[0]] = parts[2]
    # 3 in work's loop, 4 in key() (sorted calls it for each of the four items), and
    # len(root)
    assert hits["builtins.len"] == 8
    assert hits["time.sleep"] == 1
    assert hits["builtins.sorted"] == 1
    assert hits["builtins.dict.pop"] == 1
    assert hits["__main__.key"] == 4
    assert where["builtins.len"] == "<built-in>"


def test_filters_name_c_functions_as_python_ones(tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    fntrace_cli("record", "-p", "function_graph", "--c-calls", "-F", "__main__.*",
                "-F", "time.*", "-F", "builtins.*", "-N", "builtins.len", "-o", "n.dat",
                "prog.py", cwd=tmp_path, check=True)
    out = fntrace_cli("report", "n.dat", cwd=tmp_path, check=True).stdout
    assert "time.sleep();" in out and "builtins.sorted() {" in out
    assert "builtins.len" not in out
    # only what the filter names: xml's C methods are not traced here
    assert "XMLParser" not in out


def test_without_c_calls_no_c_function_is_traced(tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    fntrace_cli("record", "-p", "function_graph", "-F", "__main__.*", "-F", "builtins.*",
                "-o", "p.dat", "prog.py", cwd=tmp_path, check=True)
    out = fntrace_cli("report", "p.dat", cwd=tmp_path, check=True).stdout
    assert "__main__.work() {" in out
    assert "builtins." not in out and "time.sleep" not in out


def test_function_tracer_and_exports_name_them(traced, tmp_path):
    (tmp_path / "prog.py").write_text(PROG)
    fntrace_cli("record", "--c-calls", "-F", "__main__.*", "-F", "time.sleep", "-o", "f.dat",
                "prog.py", cwd=tmp_path, check=True)
    out = fntrace_cli("report", "f.dat", cwd=tmp_path, check=True).stdout
    assert re.search(r"time\.sleep <-__main__\.work$", out, re.M), out
    d, _ = traced
    fntrace_cli("export", "-f", "chrome", "-o", "c.json", "c.dat", cwd=d, check=True)
    events = json.loads((d / "c.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e.get("name") for e in events}
    assert {"builtins.len", "time.sleep", "xml.etree.ElementTree.XMLParser.feed"} <= names
    # (by calls: weighed by self time, a stack under half a microsecond -- len's in
    # key's -- is left out, and a loaded machine decides which side of it len falls)
    fntrace_cli("export", "-f", "folded", "--weight", "calls", "-o", "c.folded", "c.dat",
                cwd=d, check=True)
    folded = (d / "c.folded").read_text()
    assert re.search(r"__main__\.work;builtins\.sorted;__main__\.key;builtins\.len \d+", folded)


def test_the_trace_option_and_the_api(tmp_path):
    code = """\
import fntrace, time

def nap():
    time.sleep(0)
    return len("abc")

with fntrace.trace("*nap builtins.len time.sleep", tracer="function_graph") as s:
    print(s.fs.read("options/func-c-calls").strip())
    nap()
    s.fs.write("options/func-c-calls", "1")
    nap()
    s.fs.write("options/func-c-calls", "0")
    nap()
print("".join(l + "\\n" for l in s.lines(header=False)))
"""
    (tmp_path / "api.py").write_text(code)
    p = run_python("api.py", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = [t for _, _, t in graph_lines(p.stdout)]
    assert p.stdout.startswith("0\n")
    # the first and last calls leaves, the middle one with its C calls
    assert lines == ["__main__.nap();", "__main__.nap() {", "time.sleep();",
                     "builtins.len();", "}", "__main__.nap();"], p.stdout


def test_function_profiler_and_the_listings(tmp_path):
    code = """\
import time
from fntrace.tracefs import Tracefs

def nap():
    time.sleep(0)
    return len("abc")

fs = Tracefs()
fs.write("options/func-c-calls", "1")
fs.write("set_ftrace_filter", "*nap builtins.len")
fs.write("function_profile_enabled", "1")
for _ in range(5):
    nap()
fs.write("function_profile_enabled", "0")
print(fs.read("trace_stat/function0"))
print("listed:", [l for l in fs.read("available_filter_functions").splitlines()
                  if l in ("builtins.len", "time.sleep")])
print("filter:", fs.read("set_ftrace_filter").split())
"""
    (tmp_path / "prof.py").write_text(code)
    p = run_python("prof.py", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            rows[parts[0]] = int(parts[1])
    assert rows == {"__main__.nap": 5, "builtins.len": 5}, p.stdout
    # listed once met (time.sleep too, though no filter takes it), and in the filter
    # file as any function
    assert "listed: ['builtins.len', 'time.sleep']" in p.stdout
    assert "filter: ['__main__.nap', 'builtins.len']" in p.stdout
