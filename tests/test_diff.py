"""``fntrace diff BASE NEW`` through the command line: two recorded runs of
examples/diff_demo.py, a program that got slower in one function, calls another more
often, gained a function and lost one; the numbers checked against ``fntrace stat`` of each run, ``--fail-if`` as a CI
step would use it, and what it refuses."""
from __future__ import annotations

import json
import math
import shutil

import pytest

from support import REPO_ROOT, fntrace_cli
from fntrace.output.diff import FuncDiff, parse_fail_if
from fntrace.output.function_graph import trace_print_graph_duration
from fntrace.output.stat import FunctionStat



@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("diff")
    shutil.copy(REPO_ROOT / "examples" / "diff_demo.py", d / "prog.py")
    for side in ("base", "new"):
        fntrace_cli("record", "-p", "function_graph", "-F", "__main__.*", "-o",
                    f"{side}.dat", "prog.py", side, cwd=d, check=True)
    fntrace_cli("record", "-p", "function", "-F", "__main__.*", "-o", "hits.dat",
                "prog.py", "new", cwd=d, check=True)
    return d


def table(stdout: str) -> dict[str, list[str]]:
    """The rows of the text table: function -> its cells."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  ===")) + 1
    rows = {}
    for line in lines[start:]:
        if not line.strip():
            break
        cells = line.split()
        rows[cells[-1]] = cells[:-1]
    return rows


def test_diff_shows_each_change_largest_self_time_first(runs):
    p = fntrace_cli("diff", "base.dat", "new.dat", cwd=runs)
    assert p.returncode == 0, p.stderr
    rows = table(p.stdout)
    assert set(rows) == {"__main__.main", "__main__.slow", "__main__.query",
                         "__main__.audit", "__main__.legacy"}
    # sorted by the size of the change in self time: slow grew by ~140 ms
    assert next(iter(rows)) == "__main__.slow"
    # the Hits group is the last of the default columns (self, total, hits)
    assert rows["__main__.query"][-4:] == ["50", "150", "+100", "+200.0%"]
    assert rows["__main__.slow"][-4:] == ["50", "50", "+0", "+0.0%"]
    assert rows["__main__.audit"][0] == "-" and rows["__main__.audit"][-4:] == [
        "-", "50", "+50", "new"]
    assert rows["__main__.legacy"][-4:] == ["50", "-", "-50", "gone"]
    out = p.stdout
    only_new = out[out.index("# call paths only in new.dat"):out.index("# call paths only in base.dat")]
    only_base = out[out.index("# call paths only in base.dat"):]
    assert "#   __main__.main -> __main__.audit: 50" in only_new
    assert "#   __main__.main -> __main__.legacy: 50" in only_base
    assert "query" not in only_new + only_base     # the edge is on both sides
    assert "# base: base.dat  function_graph, 151 calls of 4 functions" in out
    assert "# new:  new.dat  function_graph, 251 calls of 4 functions" in out


def test_diff_json_numbers_are_stats_of_each_run(runs):
    p = fntrace_cli("diff", "base.dat", "new.dat", "--format", "json", cwd=runs)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    cols = ("hit", "time", "avg", "stdev", "min", "p50", "p90", "p99", "max", "self")
    keys = ("hits", "total", "avg", "stdev", "min", "p50", "p90", "p99", "max", "self")
    for side in ("base", "new"):
        s = fntrace_cli("stat", f"{side}.dat", "-c", ",".join(cols), cwd=runs, check=True)
        stat = {}
        for line in s.stdout.splitlines()[2:]:
            f, hit, *rest = line.split()
            stat[f] = [hit] + [" ".join(rest[i:i + 2]) for i in range(0, len(rest), 2)]
        for fn in doc["functions"]:
            vals = fn[side]
            if vals is None:
                assert fn["function"] not in stat
                continue
            want = stat[fn["function"]]
            got = [str(vals["hits"])] + [trace_print_graph_duration(vals[k]).strip()
                                         for k in keys[1:]]
            assert got == want, fn["function"]
    by = {fn["function"]: fn for fn in doc["functions"]}
    q = by["__main__.query"]
    assert (q["base"]["hits"], q["new"]["hits"], q["change"]["hits"],
            q["percent"]["hits"]) == (50, 150, 100, 200.0)
    assert by["__main__.audit"]["base"] is None and by["__main__.audit"]["percent"]["hits"] is None
    assert by["__main__.legacy"]["new"] is None
    assert {"caller": "__main__.main", "callee": "__main__.audit", "calls": 50} in doc["edges_appeared"]
    assert {"caller": "__main__.main", "callee": "__main__.legacy", "calls": 50} in doc["edges_vanished"]
    assert doc["violations"] == []


def test_fail_if_catches_an_n_plus_one_query_and_a_slower_tail(runs):
    p = fntrace_cli("diff", "base.dat", "new.dat", "-F", "__main__.query",
                    "--fail-if", "hits > +0", cwd=runs)
    assert p.returncode == 1
    assert p.stderr.splitlines() == [
        "fntrace diff: __main__.query: hits 50 -> 150 (+100, +200.0%) [hits > +0]"]
    # -F applied to both sides: only query's row
    assert set(table(p.stdout)) == {"__main__.query"}
    # (p50, not p99: of 50 calls the p99 is the slowest, which one late wake-up of a
    # loaded machine can make as slow in BASE as in NEW.  The total's bar, 50 ms, sits
    # far from both: slow's 150 ms in NEW, query's ~0.2 ms, which preemption on a
    # loaded machine has taken past 1 ms)
    p = fntrace_cli("diff", "base.dat", "new.dat",
                    "--fail-if", "p50 > +20% and total > 50ms", cwd=runs)
    assert p.returncode == 1
    failed = [line.split(":")[0] + ":" + line.split(":")[1] for line in p.stderr.splitlines()]
    assert "fntrace diff: __main__.slow" in failed
    assert "fntrace diff: __main__.query" not in failed
    # nothing holds: status 0, nothing on stderr
    p = fntrace_cli("diff", "base.dat", "new.dat", "--fail-if", "hits > +1000",
                    "--fail-if", "self < -1s", cwd=runs)
    assert (p.returncode, p.stderr) == (0, "")
    # the other way round, the changes change sign: a speed-up is caught by < -X%
    p = fntrace_cli("diff", "new.dat", "base.dat", "-F", "__main__.slow",
                    "--fail-if", "avg < -50%", cwd=runs)
    assert p.returncode == 1 and "__main__.slow: avg " in p.stderr


@pytest.mark.parametrize("expr, why, col", [
    ("p99 > +20 and total > 1ms", "a time needs a unit (ns, us, ms, s)", 9),
    ("p99 > +20% andd total > 1ms", "expected 'and', 'or' or the end, not 'andd'", 11),
    ("hits > 5ms", "hits are a count: no unit 'ms'", 8),
    ("latency > 1ms", "expected a metric", 0),
    ("p99 > 20%", "a change in percent has its sign", 6),
    ("(hits > +0 or self > 1ms", "expected ')'", 24),
    ("p99 >", "expected a number", 5),
    ("p99 1ms", "expected a comparison", 4),
    ("total > 1 h", "a time needs a unit", 9),
    ("hits > +0 ; rm", "unexpected ';'", 10),
])
def test_a_bad_fail_if_is_refused_with_a_caret_before_any_trace_is_read(tmp_path, expr,
                                                                        why, col):
    p = fntrace_cli("diff", "no-base.dat", "no-new.dat", "--fail-if", expr, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert lines[0].startswith("fntrace: --fail-if: " + why), p.stderr
    assert lines[1] == "  " + expr
    assert lines[2] == "  " + " " * col + "^"
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_traces_that_cannot_be_compared_get_one_line(runs):
    p = fntrace_cli("diff", "base.dat", "hits.dat", cwd=runs)
    assert p.returncode == 1
    assert p.stderr == ("fntrace: base.dat is a function_graph trace and hits.dat a "
                        "function trace: diff compares traces of one tracer\n")
    p = fntrace_cli("diff", "base.dat", "prog.py", cwd=runs)
    assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, p.stderr
    assert "prog.py" in p.stderr and "not an fntrace trace file" in p.stderr
    p = fntrace_cli("diff", "base.dat", "nosuch.dat", cwd=runs)
    assert (p.returncode, p.stderr) == (2, "fntrace: nosuch.dat: no such file\n")
    p = fntrace_cli("diff", "base.dat", "new.dat", "-F", "nosuch.*", cwd=runs)
    assert p.returncode == 2
    assert p.stderr.startswith("fntrace: -F 'nosuch.*': no function in base.dat or "
                               "new.dat matches"), p.stderr


def test_function_traces_compare_hits_only(runs):
    p = fntrace_cli("diff", "hits.dat", "hits.dat", cwd=runs)
    assert p.returncode == 0, p.stderr
    rows = table(p.stdout)
    assert rows["__main__.query"] == ["150", "150", "+0", "+0.0%"]
    p = fntrace_cli("diff", "hits.dat", "hits.dat", "--fail-if", "p99 > +1%", cwd=runs)
    assert p.returncode == 2
    assert p.stderr.startswith("fntrace: --fail-if: p99: the traces have no durations")


def _diff(base: dict | None, new: dict | None) -> FuncDiff:
    def row(d):
        return None if d is None else FunctionStat("f", None, d.get("hit", 1),
                                                   d.get("time", 0), 0, d.get("self", 0), 1)
    return FuncDiff("f", row(base), row(new))


def test_fail_if_reads_values_changes_and_percents_with_and_or_not():
    d = _diff({"hit": 10, "time": 2_000_000}, {"hit": 12, "time": 3_000_000})
    holds = {e: parse_fail_if(e).holds(d) for e in (
        "hits > +1", "hits > +2", "hits >= +2", "hits == 12", "hits > +19%",
        "hits > +20%", "total > 2.5ms", "total > +1ms", "total >= +50%",
        "not hits > +2", "hits > +2 or total > 2ms", "hits > +2 and total > 2ms",
        "not (hits > +2 or total > 4ms)", "hits > +5 or hits > +1 and total < 1ms",
        "(hits > +5 or hits > +1) and total > 1ms", "avg > +49us", "time > 2999999ns",
        "calls != 12")
    }
    assert holds == {
        "hits > +1": True, "hits > +2": False, "hits >= +2": True, "hits == 12": True,
        "hits > +19%": True, "hits > +20%": False, "total > 2.5ms": True,
        "total > +1ms": False, "total >= +50%": True, "not hits > +2": True,
        "hits > +2 or total > 2ms": True, "hits > +2 and total > 2ms": False,
        "not (hits > +2 or total > 4ms)": True,
        # and binds tighter than or
        "hits > +5 or hits > +1 and total < 1ms": False,
        "(hits > +5 or hits > +1) and total > 1ms": True,
        "avg > +49us": True, "time > 2999999ns": True, "calls != 12": False,
    }
    # a function that appeared: from 0, every increase is +inf%
    appeared = _diff(None, {"hit": 3, "time": 10})
    assert parse_fail_if("hits > +1000%").holds(appeared)
    assert math.isinf(appeared.percent("total"))
    vanished = _diff({"hit": 3, "time": 10}, None)
    assert parse_fail_if("hits < -99%").holds(vanished)
    assert parse_fail_if("total == 0").holds(vanished)
