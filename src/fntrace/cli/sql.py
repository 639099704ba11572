"""``fntrace sql FILE|DIR 'SELECT ...'``: SQL over traces, on DuckDB embedded (the sql extra).

Each trace file given (a directory: every ``*.dat`` and ``*.parquet`` in it, sorted) is
the table of ``fntrace export --format parquet`` (output/parquet.py, where the columns
are described).  A ``.dat`` is not exported first: DuckDB scans it as a stream of Arrow
record batches made as the file is read, a new stream for each scan of a query, so
memory stays that of a batch however long the trace.  A trace of calls is streamed by
the native walk as an Arrow C stream (output/parquet.py's column_stream), pyarrow not
even loaded; any other (events, markers, the pure twin) as pyarrow record batches
(record_batches).  A ``.parquet`` is scanned as a pyarrow dataset (only the columns and
row groups the query needs).  The query sees three views:

    trace    every row: calls, hits, events, markers, stacks
    calls    kind = 'call' or 'hit': one row per function call (or hit)
    events   the other kinds

Nothing is started: DuckDB runs in this process.  The query reaches the traces given
and nothing else: DuckDB's file access (read_csv, COPY ... TO, ATTACH, extensions) is
off unless ``--allow-files`` turns it on, for a join with the user's own files.
"""
from __future__ import annotations

import argparse
import os
import sys

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
    p.add_argument("--allow-files", action="store_true",
                   help="let the query reach files other than the traces given "
                        "(read_csv, read_parquet, COPY ... TO, ATTACH): off by default")
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


class _TraceTable:
    """A trace file as a table DuckDB scans (the Arrow PyCapsule stream interface): each
    scan reads the file again, batch by batch, so a query that scans it twice (a join
    of calls and events) gets it twice and nothing is held between batches."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.cut_short = False
        # the native walk's verdict on the trace (parquet.native_walkable), taken once:
        # DuckDB asks for the stream to read its schema, then again for each scan
        self._walkable: tuple | None = None

    def __arrow_c_stream__(self, requested_schema=None):
        # A trace of calls is streamed by the native walk with no pyarrow loaded (its
        # schema is the table's: DuckDB asks for none).  Anything else (events,
        # markers, the pure twin) goes through pyarrow's reader of the Python rows.
        from ..output.parquet import column_stream, record_batches, schema
        from ..output.source import open_trace
        if requested_schema is None and self._walkable != ():
            source = open_trace(self.path)
            if self._walkable is None:
                from ..output.parquet import native_walkable
                self._walkable = native_walkable(source) or ()
            stream = column_stream(source, None, STREAM_BATCH, self._walkable) \
                if self._walkable else None
            if stream is not None:
                self.cut_short = self.cut_short or bool(source.truncated)
                return stream
        import pyarrow as pa

        def batches():
            from ..output.source import open_trace
            source = open_trace(self.path)
            # the strings dictionary-encoded: no row's string is made, DuckDB takes
            # the dictionaries as they are
            yield from record_batches(source)
            self.cut_short = self.cut_short or bool(source.truncated)
        reader = pa.RecordBatchReader.from_batches(schema(dictionary=True), batches())
        return reader.__arrow_c_stream__(requested_schema)


# Rows a batch of a trace's stream: a few of DuckDB's 2,048-row vectors.  Its scan
# holds a few batches; 65,536 (a Parquet row group) made it 36 MB more.
STREAM_BATCH = 16_384


def _table_of(path: str):
    """What DuckDB scans for ``path``: a _TraceTable, or a pyarrow dataset of a Parquet
    file; a file that is neither is refused here, before the query runs."""
    if path.endswith(".parquet"):
        import pyarrow.dataset as ds
        try:
            return ds.dataset(path, format="parquet")
        except (OSError, ValueError) as e:
            raise FntraceError(f"sql: cannot read {path}: {e}") from None
    from ..output.source import open_trace
    open_trace(path)        # not a trace file: its error now, not from inside a scan
    return _TraceTable(path)


def run_sql(args) -> int:
    if args.max_rows < 0:
        raise UsageError(f"--max-rows must be 0 or more, not {args.max_rows}")
    if not args.query.strip():
        raise UsageError("sql: the query is empty: give one, such as "
                         "\"SELECT function, count(*) FROM calls GROUP BY function\"")
    from ..output.parquet import use_returning_pool
    use_returning_pool()                # before pyarrow loads (if it does)
    try:
        import duckdb
    except ImportError as e:
        raise FntraceError(f"sql: needs the {e.name or 'duckdb'} package: "
                           "pip install 'fntrace[sql]'") from None
    # pyarrow is loaded only where a trace needs it (28 MB): found, not imported, here
    from importlib.util import find_spec
    if find_spec("pyarrow") is None:
        raise FntraceError("sql: needs the pyarrow package: pip install 'fntrace[sql]'")
    inputs = _inputs(args.path)
    tables = [_table_of(p) for p in inputs]
    config: dict = {"enable_external_access": bool(args.allow_files)}
    if not any(p.endswith(".parquet") for p in inputs):
        # A trace's stream is made on one thread (the reader's, with the GIL): more
        # DuckDB threads only read batches ahead of it, 10 MB more and no sooner done.
        config["threads"] = 1
    con = duckdb.connect(config=config)
    try:
        try:
            for i, t in enumerate(tables):
                con.register(f"_fntrace_input_{i}", t)
            union = " UNION ALL BY NAME ".join(f"SELECT * FROM _fntrace_input_{i}"
                                               for i in range(len(tables)))
            con.execute(f"CREATE VIEW trace AS {union}")
            for name, body in VIEWS.items():
                con.execute(f"CREATE VIEW {name} AS {body}")
        except duckdb.Error as e:
            raise FntraceError(f"sql: cannot read {args.path}: {e}") from None
        try:
            if args.csv or args.json:
                # DB-API rows, fetched a batch at a time: any size of result
                cur = con.execute(args.query)
                if cur is not None:     # (None: nothing to run, only a comment)
                    _print_rows(cur, args)
            else:
                rel = con.sql(args.query)
                if rel is not None:     # (None: a statement with no result)
                    _show(rel, args)
        except duckdb.PermissionException as e:
            raise UsageError(f"sql: {str(e).rstrip()}\nfntrace: sql: the query may read "
                             "the traces given only; --allow-files lets it reach other "
                             "files") from None
        except duckdb.Error as e:
            raise UsageError(f"sql: {e}") from None
    finally:
        con.close()
    for p, t in zip(inputs, tables):
        if getattr(t, "cut_short", False):
            sys.stderr.write(f"fntrace: {p}: trace file is cut short; read up to the last "
                             "whole chunk\n")
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
