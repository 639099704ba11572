"""The HTML report (output/html_report.py): ``fntrace export --format html``, ``fntrace
view`` and ``fntrace diff --format html``.

A known program is recorded and its report's data (the page's JSON island) compared
with ``fntrace stat`` and with the calls paired here from the trace; then the page
itself is opened in headless Chromium with every request refused, and what it shows
(the function table's cells, the search's match, the zoomed frame, the timeline's bars)
is read from its DOM.  The browser tests skip loudly without chromium
(``scripts/test-all`` installs it); they save screenshots beside the test's files.
"""
from __future__ import annotations

import html.parser
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from fntrace.output.calls import CallBuilder
from fntrace.output.source import open_trace

from support import SUBPROCESS_TIMEOUT, fntrace_cli

PROGRAM = '''\
import sys
import threading
import time


def leaf(i):
    return sum(range(i % 7))


def mid(n):
    return [leaf(i) for i in range(n)]


def slow():
    time.sleep(SLEEP)


def work(n):
    for _ in range(3):
        mid(n)
    slow()


def main():
    t = threading.Thread(target=work, args=(20,), name="worker")
    t.start()
    work(30)
    t.join()


SLEEP = float(sys.argv[1]) if len(sys.argv) > 1 else 0.002
main()
'''

_ISLAND = re.compile(r'<script id="data" type="application/json">(.*?)</script>', re.S)


def page_data(path: Path) -> dict:
    return json.loads(_ISLAND.search(path.read_text()).group(1))


def record(tmp_path: Path, name: str = "run.dat", *argv: str) -> Path:
    prog = tmp_path / "prog.py"
    if not prog.exists():
        prog.write_text(PROGRAM)
    out = tmp_path / name
    fntrace_cli("record", "-p", "function_graph", "-F", "__main__.*", "-o", out, prog,
                *argv, cwd=tmp_path, check=True)
    return out


def stat_rows(trace: Path) -> dict[str, tuple[int, int, int]]:
    """fntrace stat's Hit and Time in ns, and the Time's resolution (the kernel's
    column prints fewer decimals of a larger number)."""
    r = fntrace_cli("stat", trace, "-c", "hit,time", check=True)
    rows = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\S+)\s+(\d+)\s+([\d.]+) us\s*$", line)
        if m:
            decimals = len(m.group(3).partition(".")[2])
            rows[m.group(1)] = (int(m.group(2)), int(Decimal(m.group(3)) * 1000),
                                10 ** (3 - decimals))
    assert rows, r.stdout
    return rows


def same_as_stat(table: dict[str, tuple[int, int]], trace: Path) -> None:
    stat = stat_rows(trace)
    assert table.keys() == stat.keys()
    for name, (hit, ns) in table.items():
        s_hit, s_ns, res = stat[name]
        assert hit == s_hit and s_ns <= ns < s_ns + res, (name, table[name], stat[name])


def page_total(data: dict, func: str) -> int:
    """The summed total of the call paths that end in ``func`` (none recurses)."""
    paths = stacks_of(data)
    return sum(flat[i + 2] for flat in data["nodes"].values()
               for i in range(0, len(flat), 4) if paths[flat[i]][-1] == func)


def stacks_of(data: dict) -> list[tuple[str, ...]]:
    st, names = data["stacks"], data["names"]
    out: list[tuple[str, ...]] = [()]
    for k in range(1, len(st) // 2):
        out.append(out[st[2 * k]] + (names[st[2 * k + 1]],))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    trace = record(tmp)
    out = tmp / "run.html"
    r = fntrace_cli("export", trace, "--format", "html", "-o", out, check=True)
    assert r.stderr == "", r.stderr
    return tmp, trace, out


def test_the_report_holds_what_stat_and_the_calls_say(run):
    tmp, trace, out = run
    data = page_data(out)
    names = data["names"]
    # the function table: stat's rows, to the nanosecond
    table = {names[r[0]]: (r[1], r[2]) for r in data["functions"]}
    same_as_stat(table, trace)
    assert data["functions_total"] == len(table)
    assert table["__main__.leaf"][0] == 3 * (20 + 30)
    where = {names[r[0]]: r[8] for r in data["functions"]}
    assert where["__main__.mid"].endswith("prog.py:10"), where

    # every call, paired here from the trace, is a bar; the flame graph's nodes add
    # up each thread's calls per call path
    source = open_trace(trace)
    builder = CallBuilder()
    calls = [c for e in source.entries() for c in builder.feed(e)] + list(builder.finish())
    assert data["calls"] == len(calls) and data["bars_dropped"] == 0
    paths = stacks_of(data)
    t0 = min(c.start for c in calls)
    assert data["t0"] == t0
    assert data["span"] == max(c.end for c in calls) - t0
    want_bars = Counter((str(c.cpu), c.start - t0, c.end - c.start, c.depth, c.stack)
                        for c in calls)
    got_bars = Counter()
    for slot, flat in data["bars"].items():
        for i in range(0, len(flat), 5):
            start, dur, depth, path, complete = flat[i:i + 5]
            assert complete == 1
            got_bars[slot, start, dur, depth, paths[path]] += 1
    assert got_bars == want_bars
    want_nodes: Counter = Counter()
    for c in calls:
        want_nodes[str(c.cpu), c.stack, "calls"] += 1
        want_nodes[str(c.cpu), c.stack, "total"] += c.end - c.start
        want_nodes[str(c.cpu), c.stack, "self"] += c.self_ns
    got_nodes: Counter = Counter()
    for slot, flat in data["nodes"].items():
        for i in range(0, len(flat), 4):
            p = paths[flat[i]]
            got_nodes[slot, p, "calls"] += flat[i + 1]
            got_nodes[slot, p, "total"] += flat[i + 2]
            got_nodes[slot, p, "self"] += flat[i + 3]
    assert got_nodes == want_nodes
    # two threads, named
    assert sorted(t["name"] for t in data["threads"]) == ["MainThread", "worker"]
    worker = next(str(t["slot"]) for t in data["threads"] if t["name"] == "worker")
    roots = [paths[data["nodes"][worker][i]] for i in range(0, len(data["nodes"][worker]), 4)]
    assert ("threading.Thread.run",) not in roots       # (only __main__ was traced)
    assert ("__main__.work",) in roots


def test_the_page_fetches_nothing(run):
    _, _, out = run
    page = out.read_text()
    # the policy forbids every fetch; the page names no other file
    assert "default-src 'none'" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page), \
        re.findall(r"""(?:src|href)=\S+""", page)
    assert "fetch(" not in page and "XMLHttpRequest" not in page and "import(" not in page


def test_native_and_pure_walks_write_the_same_report(run, tmp_path):
    tmp, trace, _ = run
    pure, native = tmp_path / "pure.html", tmp_path / "native.html"
    env = {k: v for k, v in os.environ.items() if k != "FNTRACE_PURE"}
    fntrace_cli("export", trace, "--format", "html", "-o", pure,
                env=dict(env, FNTRACE_PURE="1"), check=True)
    fntrace_cli("export", trace, "--format", "html", "-o", native, env=env, check=True)
    assert "native hot path" in fntrace_cli("--version", env=env).stdout
    assert pure.read_bytes() == native.read_bytes()


def test_a_long_trace_keeps_the_longest_calls_and_their_callers(run):
    from fntrace.output.html_report import report_data
    tmp, trace, _ = run
    full = report_data(open_trace(trace))
    few = report_data(open_trace(trace), bar_limit=40)
    bars = []
    for slot, flat in few["bars"].items():
        for i in range(0, len(flat), 5):
            bars.append((slot, *flat[i:i + 4]))
    assert len(bars) == 40
    assert few["bars_dropped"] == full["calls"] - 40 and few["bar_floor"] > 0
    durs = sorted((b[1] for s, flat in full["bars"].items()
                   for b in [flat[i:i + 5] for i in range(0, len(flat), 5)]), reverse=True)
    assert sorted((b[2] for b in bars), reverse=True) == durs[:40]
    assert min(b[2] for b in bars) == few["bar_floor"]
    # a kept call's caller is kept: the bar one level up on its thread that holds it
    for slot, start, dur, depth, _ in bars:
        if depth:
            assert any(s == slot and d == depth - 1 and st <= start and
                       start + dur <= st + du for s, st, du, d, _ in bars), (slot, start)
    # the flame graph and the table are whole whatever the timeline keeps
    assert few["nodes"] == full["nodes"] and few["functions"] == full["functions"]


def test_view_writes_the_report_beside_the_trace_and_opens_it(run, tmp_path):
    tmp, trace, _ = run
    local = tmp_path / "t.dat"
    shutil.copy(trace, local)
    opened = tmp_path / "opened"
    browser = tmp_path / "browser.sh"
    browser.write_text(f"#!/bin/sh\necho \"$1\" > {opened}\n")
    browser.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    r = fntrace_cli("view", local, env=dict(env, BROWSER=str(browser)), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "t.html").is_file()
    assert r.stdout.strip() == str(local.with_suffix(".html"))
    assert opened.read_text().strip() == "file://" + str(local.with_suffix(".html"))
    # no browser to show it (a server over ssh): the path is printed to copy
    opened.unlink()
    r = fntrace_cli("view", local, "-o", tmp_path / "x.html", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "(open file://" in r.stdout and not opened.exists()
    assert page_data(tmp_path / "x.html")["calls"] == page_data(tmp_path / "t.html")["calls"]
    r = fntrace_cli("view", tmp_path / "nope.dat", env=env, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("fntrace: ") \
        and len(r.stderr.splitlines()) == 1, r.stderr


def test_diff_html_colours_the_new_run_by_change(tmp_path):
    base = record(tmp_path, "base.dat", "0.001")
    new = record(tmp_path, "new.dat", "0.060")
    out = tmp_path / "changes.html"
    r = fntrace_cli("diff", base, new, "--format", "html", "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out)
    data = page_data(out)
    d = data["diff"]
    assert (d["base"], d["new"]) == ("base.dat", "new.dat")
    paths = stacks_of(data)
    totals: Counter = Counter()
    for flat in data["nodes"].values():
        for i in range(0, len(flat), 4):
            totals[paths[flat[i]]] += flat[i + 2]
    base_data = page_data(_export(base, tmp_path / "b.html"))
    base_totals: Counter = Counter()
    bpaths = stacks_of(base_data)
    for flat in base_data["nodes"].values():
        for i in range(0, len(flat), 4):
            base_totals[bpaths[flat[i]]] += flat[i + 2]
    for k, p in enumerate(paths):
        if p:
            assert d["by_stack"][k] == base_totals.get(p, -1), p
    slow = paths.index(("__main__.work", "__main__.slow"))
    # (60 ms against 1 ms a sleep: a loaded machine oversleeps the short one, not 60 ms)
    assert d["by_stack"][slow] * 4 < totals[paths[slow]]
    changes = {row[0]: row for row in d["changes"]}
    assert changes["__main__.slow"][4] > 4 * changes["__main__.slow"][3]
    assert changes["__main__.leaf"][1] == changes["__main__.leaf"][2] == 150
    # self time: slow's own, not its callers' (whose totals hold it)
    assert changes["__main__.slow"][6] > 4 * changes["__main__.slow"][5]
    assert abs(changes["__main__.work"][6] - changes["__main__.work"][5]) < \
        changes["__main__.slow"][6] - changes["__main__.slow"][5]
    # filters are the tables' only: refused for the drawing, and -o for a table
    for bad in (["--format", "html", "-F", "__main__.slow"], ["-o", str(tmp_path / "x")]):
        r = fntrace_cli("diff", base, new, *bad, cwd=tmp_path)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
        assert not (tmp_path / "x").exists()


def _export(trace: Path, out: Path) -> Path:
    fntrace_cli("export", trace, "--format", "html", "-o", out, check=True)
    return out


def test_a_trace_without_calls_is_refused_in_one_line(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("print('hi')\n")
    trace = tmp_path / "nop.dat"
    fntrace_cli("record", "-p", "nop", "-o", trace, prog, cwd=tmp_path, check=True)
    r = fntrace_cli("export", trace, "--format", "html", "-o", tmp_path / "n.html")
    assert r.returncode == 1 and r.stderr.startswith("fntrace: ") \
        and len(r.stderr.splitlines()) == 1, r.stderr
    assert not (tmp_path / "n.html").exists()


# ---------------------------------------------------------------------------------
# The page in headless Chromium, every request refused
# ---------------------------------------------------------------------------------

def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    pytest.skip("LOUD SKIP: no chromium on PATH: the HTML report was NOT opened in a "
                "browser (apt-get install chromium; scripts/test-all does it as root)")


def browse(page: Path, fragment: str, tmp_path: Path, screenshot: str | None = None) -> str:
    """The DOM of ``page#fragment`` once its script has run (and a screenshot of it)."""
    chromium = _chromium()
    url = page.resolve().as_uri() + "#" + fragment
    for _ in range(3):          # a loaded machine may need longer than the first budget
        profile = tmp_path / f"chromium-{os.urandom(4).hex()}"
        common = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  # no network at all: a name resolves to nothing, a proxy refuses
                  "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
                  f"--user-data-dir={profile}", "--window-size=1400,900",
                  "--virtual-time-budget=10000"]
        r = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True,
                           timeout=SUBPROCESS_TIMEOUT)
        if screenshot and 'data-ready="' in r.stdout:
            subprocess.run(common + [f"--screenshot={tmp_path / screenshot}", url],
                           capture_output=True, timeout=SUBPROCESS_TIMEOUT)
            print(f"screenshot: {tmp_path / screenshot}")
        shutil.rmtree(profile, ignore_errors=True)
        if 'data-ready="' in r.stdout:
            return r.stdout
    pytest.fail(f"the page did not draw: {r.stdout[-2000:]}{r.stderr[-2000:]}")


class _Dom(html.parser.HTMLParser):
    """Table rows (cells' text and data-v) and elements' attributes by id."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[tuple[str, str | None]]]] = {}
        self.by_id: dict[str, dict] = {}
        self.text: dict[str, list[str]] = {}
        self._table = None
        self._cell = None
        self._open: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.by_id[a["id"]] = a
            self.text[a["id"]] = []
        if tag == "table":
            self._table = self.tables.setdefault(a.get("id", ""), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = ([], a.get("data-v"))
        if "id" in a and tag in ("div", "span", "h1"):
            self._open.append(a["id"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table:
            self._table[-1].append(("".join(self._cell[0]).strip(), self._cell[1]))
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag in ("div", "span", "h1") and self._open:
            self._open.pop()

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[0].append(data)
        for i in self._open:
            self.text[i].append(data)


def dom(text: str) -> _Dom:
    d = _Dom()
    d.feed(text)
    return d


@pytest.mark.once
def test_the_page_in_a_browser_shows_the_trace(run, tmp_path):
    tmp, trace, out = run
    # the function table: every function with stat's hits and total
    d = dom(browse(out, "view=functions", tmp_path, "functions.png"))
    rows = d.tables["function-table"]
    head = [c for c, _ in rows[0]]
    assert head[:4] == ["Function", "Hits", "Total", "Self"] and head[-1] == "Where"
    shown = {r[0][0]: (int(r[1][1]), int(r[2][1])) for r in rows[1:]}
    same_as_stat(shown, trace)
    # sorted by total, the largest first
    totals = [int(r[2][1]) for r in rows[1:]]
    assert totals == sorted(totals, reverse=True)
    assert "".join(d.text["summary"]).startswith("run.dat: function_graph, ")

    # the search: the functions it matches highlighted, and their share of the run
    d = dom(browse(out, "view=flame&search=slow", tmp_path, "search.png"))
    matched = d.by_id["matched"]
    assert matched["data-functions"] == "1"
    assert int(matched["data-ns"]) == page_total(page_data(out), "__main__.slow")
    assert "".join(d.text["matched"]).startswith("Matched: ")
    assert int(d.by_id["flame-canvas"]["data-drawn"]) >= 6     # all, work, mid, leaf, slow...

    # a zoomed frame: the widest of that name fills the width
    d = dom(browse(out, "view=flame&zoom=__main__.mid", tmp_path, "zoom.png"))
    assert d.by_id["flame-canvas"]["data-focus"] == "__main__.mid"
    assert "zoomed to __main__.mid" in "".join(d.text["flame-info"])

    # one thread's timeline: its calls as bars
    data = page_data(out)
    worker = next(t for t in data["threads"] if t["name"] == "worker")
    d = dom(browse(out, f"view=timeline&thread={worker['slot']}", tmp_path, "timeline.png"))
    assert int(d.by_id["timeline-canvas"]["data-drawn"]) > 0
    assert f"{len(data['bars'][str(worker['slot'])]) // 5} calls" in "".join(d.text["timeline-info"])


@pytest.mark.once
def test_the_diff_page_in_a_browser_lists_the_changes(tmp_path):
    base = record(tmp_path, "base.dat", "0.001")
    new = record(tmp_path, "new.dat", "0.060")
    out = tmp_path / "changes.html"
    fntrace_cli("diff", base, new, "--format", "html", "-o", out, cwd=tmp_path, check=True)
    d = dom(browse(out, "view=changes", tmp_path, "changes.png"))
    rows = d.tables["change-table"]
    head = [c for c, _ in rows[0]]
    assert head[0] == "Function" and "\u0394 self" in head
    # the largest change in self time first
    assert rows[1][0][0] == "__main__.slow"
    assert rows[1][head.index("\u0394 self")][0].startswith("+")
    d = dom(browse(out, "view=flame", tmp_path, "diff-flame.png"))
    assert "hidden" not in d.by_id["diff-legend"]
    assert "base.dat" in "".join(d.text["title"])


FORKS = '''\
import os


def leaf(i):
    return i * 2


def work(n):
    return [leaf(i) for i in range(n)]


def main():
    pid = os.fork()
    if pid == 0:
        work(7)
        os._exit(0)
    work(5)
    os.waitpid(pid, 0)


main()
'''


def test_a_trace_of_two_processes_has_a_flame_graph_each(tmp_path):
    (tmp_path / "forks.py").write_text(FORKS)
    trace = tmp_path / "f.dat"
    fntrace_cli("record", "-p", "function_graph", "-F", "__main__.*", "-o", trace,
                "forks.py", cwd=tmp_path, check=True)
    out = _export(trace, tmp_path / "f.html")
    data = page_data(out)
    pids = {t["pid"] for t in data["threads"]}
    assert len(pids) == 2, data["threads"]
    table = {data["names"][r[0]]: (r[1], r[2]) for r in data["functions"]}
    same_as_stat(table, trace)
    assert table["__main__.leaf"][0] == 12
    # each process's leaf calls under its own thread
    paths = stacks_of(data)
    leafs = {}
    for t in data["threads"]:
        flat = data["nodes"].get(str(t["slot"]), [])
        leafs[t["pid"]] = sum(flat[i + 1] for i in range(0, len(flat), 4)
                              if paths[flat[i]][-1] == "__main__.leaf")
    assert sorted(leafs.values()) == [5, 7]
    child = next(p for p, n in leafs.items() if n == 7)
    d = dom(browse(out, f"view=flame&thread=p{child}", tmp_path)) if shutil.which(
        "chromium") and os.environ.get("FNTRACE_TEST_ONCE") in (None, "here") else None
    if d is not None:
        info = "".join(d.text["flame-info"])
        # work and its 7 leafs: the child's trace starts after the fork, inside main
        assert info.startswith(f"process {child}: 8 calls"), info


@pytest.mark.once
def test_an_asyncio_task_in_the_browser(tmp_path):
    from test_asyncio_tasks import AIO
    (tmp_path / "aio.py").write_text(AIO)
    trace = tmp_path / "a.dat"
    fntrace_cli("record", "-p", "function_graph", "-F", "__main__.*", "-o", trace, "aio.py",
                cwd=tmp_path, check=True)
    out = _export(trace, tmp_path / "a.html")
    data = page_data(out)
    alpha = [t["name"] for t in data["tasks"]].index("alpha")
    d = dom(browse(out, f"view=flame&thread=t{alpha}", tmp_path, "task-flame.png"))
    info = "".join(d.text["flame-info"])
    calls = sum(data["tasks"][alpha]["nodes"][i + 1]
                for i in range(0, len(data["tasks"][alpha]["nodes"]), 4))
    assert info.startswith(f"task alpha: {calls} calls"), info
    d = dom(browse(out, f"view=timeline&thread=t{alpha}", tmp_path, "task-timeline.png"))
    shown = sum(1 for s in data["bar_tasks"].values() for t in s if t == alpha + 1)
    assert f": {shown} calls." in "".join(d.text["timeline-info"])


def test_a_function_tracer_trace_shows_its_hits(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    trace = tmp_path / "fn.dat"
    fntrace_cli("record", "-F", "__main__.*", "-o", trace, "prog.py", cwd=tmp_path,
                check=True)
    out = tmp_path / "fn.html"
    r = fntrace_cli("export", trace, "--format", "html", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "a function tracer trace has no durations" in r.stderr
    data = page_data(out)
    assert data["tracer"] == "function" and data["calls"] == 0 and data["nodes"] == {}
    hits = {data["names"][row[0]]: row[1] for row in data["functions"]}
    assert hits["__main__.leaf"] == 150 and hits["__main__.work"] == 2
