"""``fntrace diff BASE NEW``: two traces of a program compared function by function
(output/diff.py), uftrace's ``report --diff``; ``--fail-if`` makes it a CI check."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Iterator

from ..errors import FntraceError, UsageError
from .filters import add_filter_arguments

__all__ = ["EPILOG", "add_arguments", "run"]

EPILOG = """\
each function is compared by name: its value in BASE, in NEW, the change and the
change in percent.  The metrics: hits, total (the calls' total time), self (total
less the callees'), avg, min, p50, p90, p99, max, stdev (percentiles as fntrace stat
--dist gives them: within 1.6%%).  A function on one side only has zeros on the other
(+inf%%).  Call paths (caller -> callee) that appear or vanish are listed below the
table.  The filters apply to both traces.

--fail-if EXPR, for CI: the exit status is 1, with one line on stderr per function
for which EXPR holds (0 when none does).  EXPR compares metrics, joined by and, or,
not and parentheses:
  total > 1ms        NEW's value (units: ns, us, ms, s)
  hits > +0          the change (NEW less BASE): signed
  p99 > +20%%         the change in percent of BASE's value

examples:
  fntrace diff base.dat new.dat                        # largest change in self time first
  fntrace diff base.dat new.dat -c total,p50,p99 --sort p99 --limit 20
  fntrace diff base.dat new.dat --fail-if 'p99 > +20%% and total > 1ms'
  fntrace diff base.dat new.dat -F 'db.*' --fail-if 'hits > +0'   # an N+1 query
  fntrace diff base.dat new.dat --format json
  fntrace diff base.dat new.dat --format html -o changes.html   # open in a browser"""

_DEFAULT_COLUMNS = ("self", "total", "hits")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..output.diff import METRICS
    p.add_argument("base", help="the trace to compare against")
    p.add_argument("new", help="the trace compared")
    p.add_argument("-c", "--columns", default=None, metavar="LIST",
                   help="the metrics shown, comma-separated, in order: "
                        + ",".join(METRICS) + " (default: " + ",".join(_DEFAULT_COLUMNS)
                        + ")")
    p.add_argument("-s", "--sort", default="self", metavar="METRIC",
                   help="sort by the size of the change of METRIC, largest first, or by "
                        "function (A to Z) (default: self)")
    p.add_argument("-l", "--limit", default="0", metavar="N",
                   help="show the first N functions (default: all); --fail-if looks at all")
    p.add_argument("--fail-if", action="append", default=[], metavar="EXPR",
                   help="exit status 1 if EXPR holds for any function (repeatable: any of "
                        "them)")
    p.add_argument("--cpu-time", action="store_true",
                   help="compare the calls' CPU time (both traces recorded with --cpu-time)")
    p.add_argument("--format", choices=("text", "json", "html"), default="text",
                   help="text (a table), json (every metric of every function) or html "
                        "(NEW's flame graph coloured by change, and the table of changes: "
                        "a file, -o)")
    p.add_argument("-o", "--output", default=None, metavar="OUT",
                   help="--format html: the report to write (default: NEW with .diff.html)")
    add_filter_arguments(p, graph_display=False)


def _metrics(text: str | None, graph: bool) -> list[str]:
    from ..output.diff import metric_name
    if text is None:
        return list(_DEFAULT_COLUMNS) if graph else ["hits"]
    out = []
    for w in text.split(","):
        m = metric_name(w.strip().lower())
        if m is None:
            from ..output.diff import METRICS
            raise UsageError(f"--columns {text!r}: no metric {w.strip()!r} (known: "
                             f"{', '.join(METRICS)})")
        if not graph and m != "hits":
            raise UsageError(f"--columns {text!r}: the traces have no durations (record "
                             "with -p function_graph); only hits compare")
        out.append(m)
    return out


def _dur(ns: float, signed: bool = False) -> str:
    """A duration as uftrace prints one: ns, us, ms or s, three decimals."""
    sign = ("+" if ns > 0 else "-" if ns < 0 else "") if signed else ("-" if ns < 0 else "")
    a = abs(ns)
    if a < 1_000:
        return f"{sign}{a:.0f} ns"
    for unit, scale in (("us", 1e3), ("ms", 1e6)):
        if a < scale * 1000:
            return f"{sign}{a / scale:.3f} {unit}"
    return f"{sign}{a / 1e9:.3f}  s"


def _pct(p: float) -> str:
    if math.isinf(p):
        return "new"
    return f"{p:+.1f}%"


def _cell(metric: str, v: int, signed: bool = False) -> str:
    if metric == "hits":
        return f"{v:+d}" if signed else str(v)
    return _dur(v, signed)


def _open(path: str, args):
    from ..output.source import TraceSource
    from .filters import open_traces_arg
    from .progress import track_source
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    return track_source(TraceSource(open_traces_arg(path, args), path), "diff")


def _profile(source, flt, cpu: bool):
    from .stat import collect_stats
    return collect_stats(source, flt, dist=True, edges=True, cpu=cpu)


def _check_filters(flt, sources) -> None:
    """The filters must match something in one of the traces at least (a function or a
    thread of the other run is not a mistake)."""
    from .filters import check_matches
    first = None
    for s in sources:
        try:
            check_matches(flt, s.symbols, s.name, s.threads, s.cpus)
            return
        except UsageError as e:
            first = first or e
    if first is not None:
        raise UsageError(first.msg.replace(f" in {sources[0].name} ",
                                           f" in {sources[0].name} or {sources[1].name} "))


def _describe(path: str, source, walked) -> str:
    calls = sum(r.hit for r in walked.rows)
    return (f"{path}  {source.tracer}, {calls:,} calls of {len(walked.rows):,} "
            "functions")


def run(args, at_exit: bool) -> int:
    from ..output.diff import METRICS, diff_rows, edge_changes, metric_name, parse_fail_if
    from ..tracefile.parallel import jobs_setting
    from .filters import filter_from_args
    from .stat import _limit
    jobs_setting()
    # everything the command line says is checked before a trace is read
    exprs = [parse_fail_if(e) for e in args.fail_if]
    sort = args.sort if args.sort == "function" else metric_name(args.sort)
    if sort is None:
        raise UsageError(f"--sort {args.sort!r}: not a metric ({', '.join(METRICS)}) "
                         "nor function")
    limit = _limit(args.limit)
    flt = filter_from_args(args, graph_display=False)
    if args.output is not None and args.format != "html":
        raise UsageError("-o: only --format html writes a file (text and json go to "
                         "standard output)")
    if args.format == "html" and not flt.empty:
        raise UsageError("--format html draws the whole runs: -F/-N/--tid/--thread/"
                         "--cpu/--from/--to apply to the text and json tables only")
    if args.columns is not None:
        _metrics(args.columns, True)
    base, new = _open(args.base, args), _open(args.new, args)
    tracers = (base.tracer, new.tracer)
    for path, t in ((args.base, tracers[0]), (args.new, tracers[1])):
        if t not in ("function", "function_graph"):
            raise FntraceError(f"{path}: a {t} trace has no function calls to compare "
                               "(record with -p function_graph)")
    if tracers[0] != tracers[1]:
        raise FntraceError(f"{args.base} is a {tracers[0]} trace and {args.new} a "
                           f"{tracers[1]} trace: diff compares traces of one tracer")
    graph = tracers[0] == "function_graph"
    if not graph:
        # what needs durations is refused before the traces are walked
        exprs = [parse_fail_if(e, graph=False) for e in args.fail_if]
        if sort not in ("function", "hits"):
            if args.sort != "self":
                raise UsageError(f"--sort {args.sort}: the traces have no durations "
                                 "(record with -p function_graph); only hits compare")
            sort = "hits"
    metrics = _metrics(args.columns, graph)
    _check_filters(flt, (base, new))
    if args.cpu_time:
        from .stat import check_cpu_time
        check_cpu_time(base)
        check_cpu_time(new)
    a, b = _profile(base, flt, args.cpu_time), _profile(new, flt, args.cpu_time)
    diffs = diff_rows(a.rows, b.rows)
    if sort == "function":
        diffs.sort(key=lambda d: d.func)
    else:
        # the largest change first, either way; ties: the larger NEW value, then A to Z
        diffs.sort(key=lambda d: (-abs(d.change(sort)), -d.values(sort)[1], d.func))
    appeared, vanished = edge_changes(a.edges or {}, b.edges or {})
    violations = [(d, e) for d in diffs for e in exprs if e.holds(d)]
    out = sys.stdout
    if args.format == "html":
        _html(args, base, new, diffs)
    elif args.format == "json":
        json.dump(_json(args, base, new, a, b, diffs, appeared, vanished, violations,
                        graph), out, indent=1)
        out.write("\n")
    else:
        shown = diffs[:limit] if limit else diffs
        for line in _text(args, base, new, a, b, shown, len(diffs), metrics, sort,
                          appeared, vanished):
            out.write(line + "\n")
    out.flush()
    for d, e in violations:
        sys.stderr.write(f"fntrace diff: {d.func}: " + ", ".join(
            _said(d, m) for m in e.metrics) + f" [{e.text}]\n")
    for s, path in ((base, args.base), (new, args.new)):
        if s.truncated:
            sys.stderr.write(f"fntrace: {path}: trace file is cut short; counted up to "
                             "the last whole chunk\n")
    sys.stderr.flush()
    return 1 if violations else 0


def _html(args, base, new, diffs) -> None:
    """NEW's report (output/html_report.py) with BASE's totals per call path and the
    table of changes, written whole to -o (as export writes its files)."""
    from ..output.html_report import diff_data, report_data, write_page
    from ..outfile import TRACE_MODE
    from .export import _default_output, _write_whole
    if new.tracer != "function_graph":
        raise FntraceError(f"--format html: {args.new} is a {new.tracer} trace; its "
                           "flame graph needs durations (record with -p function_graph)")
    data = diff_data(report_data(base), report_data(new), os.path.basename(args.base),
                     os.path.basename(args.new), diffs)
    out_path = args.output or _default_output(args.new, ".diff.html")

    class Page:
        binary = False

        def write(self, source, out, options):
            write_page(data, out)

    _write_whole(Page(), None, out_path, {}, TRACE_MODE)
    print(out_path)


def _said(d, metric: str) -> str:
    """``p99 1.200 ms -> 1.800 ms (+600.000 us, +50.0%)`` for a violation's line."""
    b, n = d.values(metric)
    return (f"{metric} {_cell(metric, b)} -> {_cell(metric, n)} "
            f"({_cell(metric, n - b, True)}, {_pct(d.percent(metric))})")


def _text(args, base, new, a, b, diffs, total: int, metrics: list[str], sort: str,
          appeared, vanished) -> Iterator[str]:
    yield f"# base: {_describe(args.base, base, a)}"
    yield f"# new:  {_describe(args.new, new, b)}"
    order = "by function" if sort == "function" else \
        f"by the change in {sort}, largest first"
    more = f" ({len(diffs)} of {total} shown)" if len(diffs) < total else ""
    yield f"# {total} functions, {order}{more}; '-': not on that side"
    yield "#"
    w = {m: (10 if m == "hits" else 11) for m in metrics}
    group = {m: 4 * w[m] + 3 for m in metrics}       # four cells and the spaces between
    yield ("".join(f"  {(m.capitalize() + ': base, new, change, %'):<{group[m]}}"
                   for m in metrics) + "  Function")
    yield "".join("  " + "=" * group[m] for m in metrics) + "  " + "=" * 8
    for d in diffs:
        cells = []
        for m in metrics:
            bv, nv = d.values(m)
            bs = _cell(m, bv) if d.base is not None else "-"
            ns = _cell(m, nv) if d.new is not None else "-"
            pct = "gone" if d.new is None else _pct(d.percent(m))
            cells.append(f"  {bs:>{w[m]}} {ns:>{w[m]}} {_cell(m, nv - bv, True):>{w[m]}} "
                         f"{pct:>{w[m]}}")
        yield "".join(cells) + "  " + d.func
    for label, edges in (("only in " + args.new, appeared), ("only in " + args.base, vanished)):
        yield ""
        yield f"# call paths {label} (caller -> callee: calls): {len(edges)}"
        for caller, callee, n in edges[:50]:
            yield f"#   {caller or '(none)'} -> {callee}: {n}"
        if len(edges) > 50:
            yield f"#   ... and {len(edges) - 50} more (--format json lists them all)"


def _json(args, base, new, a, b, diffs, appeared, vanished, violations, graph) -> dict:
    from ..output.diff import METRICS
    metrics = list(METRICS) if graph else ["hits"]

    def side(r):
        if r is None:
            return None
        return {m: METRICS[m](r) for m in metrics}

    def pct(p: float):
        return None if math.isinf(p) else round(p, 3)

    return {
        "base": {"file": args.base, "tracer": base.tracer, "functions": len(a.rows)},
        "new": {"file": args.new, "tracer": new.tracer, "functions": len(b.rows)},
        "units": {m: "calls" if m == "hits" else "ns" for m in metrics},
        "functions": [
            {"function": d.func, "base": side(d.base), "new": side(d.new),
             "change": {m: d.change(m) for m in metrics},
             "percent": {m: pct(d.percent(m)) for m in metrics}}
            for d in diffs],
        "edges_appeared": [{"caller": c, "callee": f, "calls": n} for c, f, n in appeared],
        "edges_vanished": [{"caller": c, "callee": f, "calls": n} for c, f, n in vanished],
        "violations": [{"function": d.func, "expr": e.text} for d, e in violations],
    }


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
