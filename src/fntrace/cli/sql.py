"""``fntrace sql FILE|DIR 'SELECT ...'``: SQL over traces, on DuckDB embedded (the sql extra).

Each trace file given (a directory: every ``*.dat`` and ``*.parquet`` in it, sorted) is
the table of ``fntrace export --format parquet`` (output/parquet.py, where the columns
are described).  A ``.dat`` is not exported first: DuckDB scans it as a stream of Arrow
record batches made as the file is read, a new stream for each scan of a query, so
memory stays that of a batch however long the trace.  A trace of calls is streamed by
the native walk as an Arrow C stream (output/parquet.py's column_stream), pyarrow not
even loaded; any other (events, markers, the pure twin) as pyarrow record batches
(record_batches).  Either stream has only the columns the query names (query_columns,
from DuckDB's own parse of it), as a Parquet scan reads only those.  A ``.parquet`` is
scanned by DuckDB's Parquet reader.  The query sees three views:

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

__all__ = ["EPILOG", "add_arguments", "run", "VIEWS"]

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
    of calls and events) gets it twice and nothing is held between batches.
    ``columns``: the table's columns the query names (query_columns), None: all."""

    def __init__(self, path: str, source, columns: frozenset[str] | None = None) -> None:
        self.path = path
        # the file opened (its blocks checked) once: DuckDB asks for a stream to read
        # the schema, then again for each scan
        self.source = source
        self.columns = columns
        self.cut_short = bool(source.truncated)
        self._walkable: tuple | None = None     # parquet.native_walkable's, once

    def __arrow_c_stream__(self, requested_schema=None):
        # A trace of calls is streamed by the native walk with no pyarrow loaded (its
        # schema is the table's: DuckDB asks for none).  Anything else (events,
        # markers, the pure twin) goes through pyarrow's reader of the Python rows.
        from ..output.parquet import column_stream, record_batches, table_schema
        if requested_schema is None and self._walkable != ():
            if self._walkable is None:
                from ..output.parquet import native_walkable
                self._walkable = native_walkable(self.source) or ()
            stream = column_stream(self.source, None, STREAM_BATCH, self._walkable,
                                   self.columns) if self._walkable else None
            if stream is not None:
                return stream
        import pyarrow as pa

        def batches():
            # the strings dictionary-encoded: no row's string is made, DuckDB takes
            # the dictionaries as they are
            yield from record_batches(self.source, columns=self.columns)
        reader = pa.RecordBatchReader.from_batches(table_schema(self.columns), batches())
        return reader.__arrow_c_stream__(requested_schema)


# Rows a batch of a trace's stream: a few of DuckDB's 2,048-row vectors.  Its scan
# holds a few batches; 65,536 (a Parquet row group) made it 36 MB more.
STREAM_BATCH = 16_384


class _ParquetFile(str):
    """A Parquet file given: DuckDB's own reader scans it (``read_parquet``: only the
    columns and row groups the query needs, on every thread), the file named in
    ``allowed_paths`` so that a query may read it with the rest of the file system
    closed."""


def _table_of(path: str, columns: frozenset[str] | None, own_parquet: bool):
    """What DuckDB scans for ``path``: a _TraceTable, a _ParquetFile or (``own_parquet``
    false: a DuckDB without ``allowed_paths``) a pyarrow dataset of a Parquet file; a
    trace file that is neither is refused here, before the query runs."""
    if path.endswith(".parquet"):
        if own_parquet:
            return _ParquetFile(os.path.abspath(path))
        import pyarrow.dataset as ds
        try:
            return ds.dataset(path, format="parquet")
        except (OSError, ValueError) as e:
            raise FntraceError(f"sql: cannot read {path}: {e}") from None
    from ..output.source import open_trace
    # (not a trace file: its error now, not from inside a scan)
    return _TraceTable(path, open_trace(path), columns)


# What a query may name and still be given only the columns it names: the tables
# fntrace defines.  Any other table (DuckDB's catalog functions, information_schema,
# a user's file) may look at the columns themselves.
_OWN_TABLES = frozenset(("trace", *VIEWS))
# the table references whose columns follow from the column references
_PLAIN_REFS = frozenset(("BASE_TABLE", "JOIN", "SUBQUERY", "EXPRESSION_LIST", "EMPTY_FROM",
                         "EMPTY"))


def query_columns(con, query: str) -> frozenset[str] | None:
    """The columns of the trace table that ``query`` can reach, by DuckDB's own parse
    of it (``json_serialize_sql``), or None when that is not sure: ``*`` or COLUMNS(),
    a table used as a value (``SELECT t FROM trace t``), a NATURAL join, DESCRIBE and
    SUMMARIZE, a table other than fntrace's, anything but one or more SELECTs.  A
    trace's stream then makes those columns only: a column nobody reads costs
    nothing (sql over a .dat as cheap as over its Parquet export, which DuckDB reads
    column by column).  ``kind`` is always there: the views select on it."""
    import json
    try:
        parsed = con.execute("SELECT json_serialize_sql(?)", [query]).fetchall()
        tree = json.loads(parsed[0][0])
    except Exception:       # an older DuckDB, or a query it cannot parse: all columns
        return None
    if not isinstance(tree, dict) or tree.get("error") is not False:
        return None
    from ..output.parquet import COLUMNS
    known = {n for n, _ in COLUMNS}
    refs: list[list[str]] = []
    aliases: set[str] = set()           # the query's own names for values
    tables: set[str] = set()            # names of tables: as a column, the whole row
    ctes: set[str] = set()
    named: set[str] = set()             # the tables it reads
    todo: list = [tree.get("statements")]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        cls = node.get("class")
        if cls == "STAR":
            return None
        if cls == "COLUMN_REF":
            refs.append([str(n).lower() for n in node.get("column_names") or ()])
        if cls is not None and node.get("alias"):
            aliases.add(str(node["alias"]).lower())
        if cls is None and "sample" in node and "modifiers" not in node:
            # a table reference
            if node.get("type") not in _PLAIN_REFS or node.get("ref_type") == "NATURAL":
                return None
            if node.get("alias"):
                tables.add(str(node["alias"]).lower())
            aliases.update(str(a).lower() for a in node.get("column_name_alias") or ())
            refs.extend([str(c).lower()] for c in node.get("using_columns") or ())
            if node.get("type") == "BASE_TABLE":
                if node.get("schema_name") or node.get("catalog_name"):
                    return None
                name = str(node.get("table_name", "")).lower()
                tables.add(name)
                named.add(name)
        if "cte_map" in node:
            for entry in (node["cte_map"] or {}).get("map") or ():
                ctes.add(str(entry.get("key", "")).lower())
                aliases.update(str(a).lower() for a in
                               (entry.get("value") or {}).get("aliases") or ())
        todo.extend(v for v in node.values() if isinstance(v, (dict, list)))
    if named - ctes - _OWN_TABLES:
        return None
    columns = {"kind"}
    for ref in refs:
        hit = known.intersection(ref)
        if hit:
            columns |= hit
        elif not ref or (len(ref) == 1 and ref[0] in tables) or ref[-1] not in aliases:
            return None
    return frozenset(columns)


def run(args, at_exit: bool) -> int:
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
    parquets = [os.path.abspath(p) for p in inputs if p.endswith(".parquet")]
    config: dict = {}
    if not parquets:
        # A trace's stream is made on one thread (the reader's, with the GIL): more
        # DuckDB threads only read batches ahead of it, 10 MB more and no sooner done.
        config["threads"] = 1

    def connect():
        """A connection that reaches the Parquet files given and (without
        --allow-files) no other file; and whether DuckDB's reader may read them."""
        con = duckdb.connect(config=config)
        own = True
        if parquets and not args.allow_files:
            try:
                con.execute("SET allowed_paths = ?", [parquets])
            except duckdb.Error:        # (a DuckDB before allowed_paths)
                own = False
        if not args.allow_files:
            con.execute("SET enable_external_access = false")
        return con, own

    con, own = connect()
    tables: list = []
    try:
        columns = query_columns(con, args.query) \
            if len(parquets) < len(inputs) else None
        tables = [_table_of(p, columns, own) for p in inputs]
        try:
            _run(con, tables, args, duckdb)
        except duckdb.BinderException:
            if columns is None:
                raise
            # (a column named where query_columns did not look: the query again, the
            # traces' every column given; its own error, if any, is the user's)
            con.close()
            con, own = connect()
            tables = [_table_of(p, None, own) for p in inputs]
            _run(con, tables, args, duckdb)
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


def _run(con, tables: list, args, duckdb) -> None:
    """The views over ``tables``, then the query, its result printed."""
    try:
        for i, t in enumerate(tables):
            if isinstance(t, _ParquetFile):
                quoted = t.replace("'", "''")
                con.execute(f"CREATE VIEW _fntrace_input_{i} AS "
                            f"SELECT * FROM read_parquet('{quoted}')")
            else:
                con.register(f"_fntrace_input_{i}", t)
        union = " UNION ALL BY NAME ".join(f"SELECT * FROM _fntrace_input_{i}"
                                           for i in range(len(tables)))
        con.execute(f"CREATE VIEW trace AS {union}")
        for name, body in VIEWS.items():
            con.execute(f"CREATE VIEW {name} AS {body}")
    except duckdb.Error as e:
        raise FntraceError(f"sql: cannot read {args.path}: {e}") from None
    if args.csv or args.json:
        # DB-API rows, fetched a batch at a time: any size of result
        cur = con.execute(args.query)
        if cur is not None:     # (None: nothing to run, only a comment)
            _print_rows(cur, args)
    else:
        rel = con.sql(args.query)
        if rel is not None:     # (None: a statement with no result)
            _show(rel, args)


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
