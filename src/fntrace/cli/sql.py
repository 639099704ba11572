"""``fntrace sql FILE|DIR 'SELECT ...'``: SQL over traces, on DuckDB embedded (the sql extra).

Each trace file given (a directory: every ``*.dat`` and ``*.parquet`` in it, sorted) is
read as the Parquet table of ``fntrace export --format parquet`` (output/parquet.py,
where the columns are described); a ``.dat`` is exported to a temporary Parquet file
first, a ``.parquet`` is read as it is.  The query sees three views:

    trace    every row: calls, hits, events, markers, stacks
    calls    kind = 'call' or 'hit': one row per function call (or hit)
    events   the other kinds

Nothing is started: DuckDB runs in this process, and the temporary files go when the
command ends.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

from ..errors import FntraceError, UsageError

__all__ = ["EPILOG", "add_arguments", "run_sql", "VIEWS"]

EPILOG = """\
views:
  trace    every row (kind: call, hit, event, marker, stack)
  calls    one row per function call: function, module, ts, dur, self_dur, depth,
           parent, stack, args, retval, pid, tid, thread, task, ...
  events   dynamic events, markers and stack traces

examples:
  fntrace sql run.dat 'SELECT function, count(*) AS calls, sum(dur)/1e6 AS ms
                       FROM calls GROUP BY function ORDER BY ms DESC LIMIT 10'
  fntrace sql traces/ 'SELECT thread, max(depth) FROM calls GROUP BY thread' --csv
  fntrace sql run.dat "SELECT * FROM calls WHERE function LIKE 'json.%' AND dur > 1e6\""""

VIEWS = {
    "calls": "SELECT * FROM trace WHERE kind IN ('call', 'hit')",
    "events": "SELECT * FROM trace WHERE kind NOT IN ('call', 'hit')",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="FILE|DIR",
                   help="a trace file, a Parquet export, or a directory of them")
    p.add_argument("query", metavar="QUERY", help="the SQL query (DuckDB's dialect)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="print the result as CSV")
    out.add_argument("--json", action="store_true",
                     help="print the result as JSON lines, one object a row")
    p.add_argument("--max-rows", type=int, default=40, metavar="N",
                   help="rows shown in the table (default: 40; 0: all); --csv and "
                        "--json print every row")


def _inputs(path: str) -> list[str]:
    if os.path.isdir(path):
        found = sorted(os.path.join(path, n) for n in os.listdir(path)
                       if n.endswith((".dat", ".parquet"))
                       and os.path.isfile(os.path.join(path, n)))
        if not found:
            raise FntraceError(f"{path}: no trace files (*.dat, *.parquet) in it")
        return found
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    return [path]


def _parquet_of(path: str, tmp: str, n: int) -> str:
    if path.endswith(".parquet"):
        return path
    from ..output.parquet import write_parquet
    from ..output.source import open_trace
    source = open_trace(path)
    target = os.path.join(tmp, f"{n}.parquet")
    write_parquet(source, target)
    if source.truncated:
        sys.stderr.write(f"fntrace: {path}: trace file is cut short; read up to the last "
                         "whole chunk\n")
    return target


def _sql_string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def run_sql(args) -> int:
    if args.max_rows < 0:
        raise UsageError(f"--max-rows must be 0 or more, not {args.max_rows}")
    try:
        import duckdb
        import pyarrow  # noqa: F401
    except ImportError as e:
        raise FntraceError(f"sql: needs the {e.name or 'duckdb'} package: "
                           "pip install 'fntrace[sql]'") from None
    inputs = _inputs(args.path)
    with tempfile.TemporaryDirectory(prefix="fntrace-sql-") as tmp:
        files = [_parquet_of(p, tmp, i) for i, p in enumerate(inputs)]
        con = duckdb.connect()
        try:
            try:
                listing = ", ".join(_sql_string(f) for f in files)
                con.execute(f"CREATE VIEW trace AS SELECT * FROM read_parquet([{listing}], "
                            "union_by_name = true)")
                for name, body in VIEWS.items():
                    con.execute(f"CREATE VIEW {name} AS {body}")
            except duckdb.Error as e:
                raise FntraceError(f"sql: cannot read {args.path}: {e}") from None
            try:
                if args.csv or args.json:
                    # DB-API rows, fetched a batch at a time: any size of result
                    cur = con.execute(args.query)
                    _print_rows(cur, args)
                else:
                    rel = con.sql(args.query)
                    if rel is not None:     # (None: a statement with no result)
                        _show(rel, args)
            except duckdb.Error as e:
                raise UsageError(f"sql: {e}") from None
        finally:
            con.close()
    return 0


def _print_rows(cur, args) -> None:
    import csv
    import json
    out = sys.stdout
    cols = [d[0] for d in cur.description or ()]
    if args.csv:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(cols)
    while True:
        rows = cur.fetchmany(10_000)
        if not rows:
            break
        for row in rows:
            if args.csv:
                w.writerow(["" if v is None else v for v in row])
            else:
                out.write(json.dumps(dict(zip(cols, row)), default=str) + "\n")


def _show(rel, args) -> None:
    import contextlib
    import io
    text = io.StringIO()
    # show() prints through Python's stdout: caught so that it goes where ours goes
    with contextlib.redirect_stdout(text):
        rel.show(max_width=10_000, max_rows=args.max_rows or 2**62, null_value="NULL")
    sys.stdout.write(text.getvalue())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
