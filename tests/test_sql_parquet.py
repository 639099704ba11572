"""``fntrace export --format parquet`` and ``fntrace sql`` (output/parquet.py, cli/sql.py).

The Parquet file is read back with pyarrow and with DuckDB (the tools that read it),
and its rows are compared with the text report of the same trace: every call the
report prints is one row, with the same function, thread, depth and duration.
"""
from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from decimal import Decimal

import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow (the sql extra) is not installed")
pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb", reason="duckdb (the sql extra) is not installed")

from support import (  # noqa: E402
    CALLS_PROG, export_as, fntrace_cli, report_calls, run_python,
)
from fntrace.output.parquet import COLUMNS, module_of  # noqa: E402


def export(run_fntrace, dat, out, *more):
    return export_as("parquet", run_fntrace, dat, out, *more)


def test_every_call_of_the_report_is_one_row(calls_dat, run_fntrace, tmp_path):
    export(run_fntrace, calls_dat, tmp_path / "t.parquet")
    table = pq.read_table(tmp_path / "t.parquet")
    assert table.schema.names == [name for name, _ in COLUMNS]
    rows = table.to_pylist()
    assert {r["kind"] for r in rows} == {"call"}
    want = report_calls(run_fntrace, calls_dat)
    got = [(r["cpu"], r["function"], r["depth"], r["dur"]) for r in rows]
    assert len(got) == len(want)
    assert Counter((c, f, d) for c, f, d, _ in got) == Counter((c, f, d) for c, f, d, _ in want)
    # the report prints durations in us, cut (not rounded) to the kernel's width: 3
    # decimals, fewer once the whole part has 5 digits or more (11250.575 prints as
    # 11250.57).  Each of its calls has a row of that function, thread and depth whose
    # duration cuts to what it printed.
    by_key: dict = {}
    for c, f, d, ns in got:
        by_key.setdefault((c, f, d), []).append(Decimal(ns) / 1000)
    for c, f, d, us in want:
        durations = by_key[(c, f, d)]
        unit = Decimal(1).scaleb(us.as_tuple().exponent)
        assert any(Decimal(0) <= x - us < unit for x in durations), (f, us, durations)


def test_rows_nest_and_carry_what_was_recorded(calls_dat, run_fntrace, tmp_path):
    export(run_fntrace, calls_dat, tmp_path / "t.parquet")
    rows = pq.read_table(tmp_path / "t.parquet").to_pylist()
    for r in rows:
        stack = r["stack"].split(";")
        assert stack[-1] == r["function"] and len(stack) - 1 == r["depth"]
        assert r["parent"] == (stack[-2] if len(stack) > 1 else None)
        assert 0 <= r["self_dur"] <= r["dur"]
        assert r["complete"] is True
        assert r["pid"] > 0 and r["tid"] > 0
    # a parent's duration holds its children's
    by_thread = {}
    for r in rows:
        by_thread.setdefault(r["tid"], []).append(r)
    for calls in by_thread.values():
        for r in calls:
            kids = [k for k in calls if k["depth"] == r["depth"] + 1
                    and r["ts"] <= k["ts"] and k["ts"] + k["dur"] <= r["ts"] + r["dur"]]
            assert r["self_dur"] == r["dur"] - sum(k["dur"] for k in kids) or \
                r["self_dur"] == 0
    mids = [r for r in rows if r["function"] == "__main__.mid"]
    assert sorted(r["args"] for r in mids) == ["n=1", "n=2", "n=3", "n=3", "n=4"]
    assert {r["thread"] for r in mids} == {"MainThread", "worker"}
    assert sorted(int(r["retval"]) for r in mids) == [0, 2, 6, 6, 12]
    fails = [r for r in rows if r["function"] == "__main__.fails"]
    # (3.11's setprofile hook sees that an exception left the call, not which one)
    assert len(fails) == 1 and fails[0]["retval"] in ("raised ValueError('no')", "raised")
    leaf = next(r for r in rows if r["function"] == "__main__.leaf")
    assert leaf["module"] == "__main__" and leaf["file"].endswith("prog.py") and \
        leaf["line"] == 5
    dumps = next(r for r in rows if r["function"] == "json.dumps")
    assert dumps["module"] == "json" and dumps["file"].endswith("__init__.py")
    enc = next(r for r in rows if r["function"].startswith("json.encoder.JSONEncoder."))
    assert enc["module"] == "json.encoder" and enc["parent"].startswith("json.")


def test_module_of():
    assert module_of("json.encoder.JSONEncoder.encode", "/x/json/encoder.py") == "json.encoder"
    assert module_of("json.dumps", "/x/json/__init__.py") == "json"
    assert module_of("__main__.A.f", "prog.py") == "__main__"
    assert module_of("a.b.b.c", "/x/a/b/b.py") == "a.b.b"
    assert module_of("f", "<string>") is None
    assert module_of("m.f", "") is None


def test_function_tracer_hits_and_events(tmp_script, run_fntrace, tmp_path):
    prog = tmp_script(CALLS_PROG)
    r = run_fntrace("record", "-p", "function", "-F", "__main__.*", "-e",
                    "f __main__.leaf x", "-o", "f.dat", prog)
    assert r.returncode == 0, r.stderr
    export(run_fntrace, "f.dat", "f.parquet")
    rows = pq.read_table(tmp_path / "f.parquet").to_pylist()
    kinds = Counter(r["kind"] for r in rows)
    # leaf runs 1+2+3+4 + 3 times: a hit and an fprobe event each
    assert kinds["event"] == 13
    hits = [r for r in rows if r["kind"] == "hit"]
    assert Counter(r["function"] for r in hits)["__main__.leaf"] == 13
    assert all(r["dur"] is None and r["depth"] is None for r in hits)
    assert {r["parent"] for r in hits if r["function"] == "__main__.leaf"} == {"__main__.mid"}
    ev = [r for r in rows if r["kind"] == "event"]
    assert sorted({r["args"] for r in ev}) == [f"(__main__.leaf+0) x={i}" for i in range(4)]


def test_sql_counts_equal_the_report(calls_dat, run_fntrace):
    want = Counter(f for _, f, _, _ in report_calls(run_fntrace, calls_dat))
    r = run_fntrace("sql", calls_dat, "SELECT function, count(*) AS n, sum(dur) AS total "
                    "FROM calls GROUP BY function ORDER BY function", "--csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert {row["function"]: int(row["n"]) for row in rows} == dict(want)
    # the table form names the columns and the values
    r = run_fntrace("sql", calls_dat, "SELECT count(*) AS n FROM calls WHERE "
                    "function = '__main__.leaf'")
    assert r.returncode == 0, r.stderr
    assert " n " in r.stdout and f" {want['__main__.leaf']} " in r.stdout


def test_sql_over_a_directory_and_a_parquet_file(calls_dat, run_fntrace, tmp_path, tmp_script):
    d = tmp_path / "runs"
    d.mkdir()
    export(run_fntrace, calls_dat, d / "a.parquet")
    prog = tmp_script(CALLS_PROG)
    r = run_fntrace("record", "-p", "function_graph", "-F", "__main__.*", "-o", d / "b.dat",
                    prog)
    assert r.returncode == 0, r.stderr
    (d / "notes.txt").write_text("not a trace")
    r = run_fntrace("sql", d, "SELECT count(*) AS n, count(DISTINCT pid) AS p FROM calls "
                    "WHERE function = '__main__.mid'", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"n": 10, "p": 2}
    r = run_fntrace("sql", d / "a.parquet", "SELECT count(*) AS n FROM events", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"n": 0}, r.stderr


def test_duckdb_reads_the_export_directly(calls_dat, run_fntrace, tmp_path):
    export(run_fntrace, calls_dat, tmp_path / "t.parquet")
    con = duckdb.connect()
    n, threads, deepest = con.execute(
        f"SELECT count(*), count(DISTINCT thread), max(depth) FROM "
        f"read_parquet('{tmp_path / 't.parquet'}')").fetchone()
    assert n == len(pq.read_table(tmp_path / "t.parquet")) and threads == 2 and deepest >= 3


def test_arguments_and_return_values_are_columns(tmp_script, run_fntrace, tmp_path):
    """A trace recorded with -A -R: each call's args and retval as the report prints
    them, the native export the same file as the pure one."""
    prog = tmp_script("def f(a, b='x'):\n    return a * 2\n\n"
                      "def g():\n    return 'é' * 2\n\n"
                      "for i in range(3):\n    f(i)\n    g()\n")
    r = run_fntrace("record", "-p", "function_graph", "-A", "-R", "-F", "__main__.*",
                    "-o", "v.dat", prog)
    assert r.returncode == 0, r.stderr
    export(run_fntrace, "v.dat", "v.parquet")
    rows = pq.read_table(tmp_path / "v.parquet").to_pylist()
    assert [(r["function"], r["args"], r["retval"]) for r in rows] == [
        ("__main__.f", f"a={i}, b='x'", str(2 * i)) if k == 0 else ("__main__.g", "", "'éé'")
        for i in range(3) for k in range(2)]
    pure = fntrace_cli("export", "v.dat", "--format", "parquet", "-o", "p.parquet",
                       cwd=tmp_path, env={**os.environ, "FNTRACE_PURE": "1"})
    assert pure.returncode == 0, pure.stderr
    assert (tmp_path / "p.parquet").read_bytes() == (tmp_path / "v.parquet").read_bytes()


def test_sql_bad_input(calls_dat, run_fntrace, tmp_path):
    r = run_fntrace("sql", calls_dat, "SELEC 1")
    assert r.returncode == 2 and r.stderr.startswith("fntrace: sql: Parser Error")
    assert "^" in r.stderr and "Traceback" not in r.stderr
    r = run_fntrace("sql", calls_dat, "SELECT nosuch FROM calls")
    assert r.returncode == 2 and "nosuch" in r.stderr and "Traceback" not in r.stderr
    r = run_fntrace("sql", tmp_path / "none.dat", "SELECT 1")
    assert r.returncode == 2 and r.stderr == f"fntrace: {tmp_path / 'none.dat'}: no such file\n"
    (tmp_path / "empty").mkdir()
    r = run_fntrace("sql", tmp_path / "empty", "SELECT 1")
    assert r.returncode == 1 and "no trace files" in r.stderr
    (tmp_path / "bad.dat").write_bytes(b"not a trace file at all")
    r = run_fntrace("sql", tmp_path / "bad.dat", "SELECT 1")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = run_fntrace("sql", calls_dat, "SELECT 1", "--max-rows", "-2")
    assert r.returncode == 2 and "--max-rows" in r.stderr
    for q in ("", "  \n"):
        for more in ((), ("--csv",)):
            r = run_fntrace("sql", calls_dat, q, *more)
            assert r.returncode == 2 and "the query is empty" in r.stderr, r.stderr
            assert "Traceback" not in r.stderr and r.stdout == ""


def test_sql_scans_a_trace_as_often_as_the_query_does(calls_dat, run_fntrace, tmp_path):
    """A .dat is scanned as a stream made as the file is read, not exported first: a
    query that scans it twice (a self-join, calls and trace together) reads it twice,
    with the same rows as the Parquet export."""
    n = run_fntrace("sql", calls_dat, "SELECT count(*) AS n FROM calls", "--json")
    assert n.returncode == 0, n.stderr
    n = json.loads(n.stdout)["n"]
    r = run_fntrace("sql", calls_dat, "SELECT (SELECT count(*) FROM calls) AS a, "
                    "(SELECT count(*) FROM trace) AS b, count(*) AS pairs FROM calls c "
                    "JOIN calls p ON c.parent = p.function AND c.tid = p.tid AND "
                    "c.ts >= p.ts AND c.ts < p.ts + p.dur AND c.depth = p.depth + 1", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["a"] == got["b"] == n and got["pairs"] == n - 2   # two threads' tops
    export(run_fntrace, calls_dat, tmp_path / "t.parquet")
    q = "SELECT * FROM calls ORDER BY ts, tid, depth"
    a = run_fntrace("sql", calls_dat, q, "--csv")
    b = run_fntrace("sql", tmp_path / "t.parquet", q, "--csv")
    assert a.returncode == b.returncode == 0 and a.stdout == b.stdout and a.stdout.count("\n") == n + 1


def test_sql_reaches_only_the_traces_unless_allowed(calls_dat, run_fntrace, tmp_path):
    """The query reads the traces given and nothing else: DuckDB's file access is off
    (a query is data: it may come from someone else), and --allow-files turns it on."""
    (tmp_path / "users.csv").write_text("function,owner\n__main__.leaf,ana\n")
    q = (f"SELECT u.owner, count(*) AS n FROM calls c JOIN read_csv('{tmp_path / 'users.csv'}') u "
         "USING (function) GROUP BY u.owner")
    r = run_fntrace("sql", calls_dat, q, "--json")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("fntrace: sql: Permission Error") and "^" in r.stderr
    assert r.stderr.endswith("fntrace: sql: the query may read the traces given only; "
                             "--allow-files lets it reach other files\n"), r.stderr
    r = run_fntrace("sql", calls_dat, f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'")
    assert r.returncode == 2 and not (tmp_path / "out.csv").exists()
    r = run_fntrace("sql", calls_dat, q, "--json", "--allow-files")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["owner"] == "ana"


def test_sql_of_a_trace_cut_short(calls_dat, run_fntrace, tmp_path):
    data = calls_dat.read_bytes()
    cut = tmp_path / "cut.dat"
    cut.write_bytes(data[: len(data) * 2 // 3])
    r = run_fntrace("sql", cut, "SELECT count(*) AS n FROM calls", "--json")
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"fntrace: {cut}: trace file is cut short; read up to the last whole chunk\n"
    assert json.loads(r.stdout)["n"] >= 0


def test_missing_extra_is_named(calls_dat, run_fntrace):
    code = ("import sys; sys.modules['duckdb'] = None; sys.modules['pyarrow'] = None\n"
            "from fntrace.cli.main import main\n"
            f"sys.exit(main(['sql', {str(calls_dat)!r}, 'SELECT 1']))\n")
    r = run_fntrace_code(code, calls_dat.parent)
    assert r.returncode == 1 and "pip install 'fntrace[sql]'" in r.stderr, r.stderr
    code = code.replace("'sql', ", "'export', ").replace(", 'SELECT 1'", ", '--format', "
                                                          "'parquet', '-o', 'x.parquet'")
    r = run_fntrace_code(code, calls_dat.parent)
    assert r.returncode == 1 and "pip install 'fntrace[sql]'" in r.stderr, r.stderr
    assert not (calls_dat.parent / "x.parquet").exists()


def run_fntrace_code(code: str, cwd):
    return run_python("-c", code, cwd=cwd, timeout=120)


def test_a_big_export_is_written_in_row_groups(tmp_script, run_fntrace, tmp_path):
    prog = tmp_script("def f(i):\n    return i\n\nfor i in range(150_000):\n    f(i)\n")
    r = run_fntrace("record", "-p", "function_graph", "-b", "20000", "-F", "__main__.f",
                    "-o", "big.dat", prog)
    assert r.returncode == 0, r.stderr
    export(run_fntrace, "big.dat", "big.parquet")
    meta = pq.ParquetFile(tmp_path / "big.parquet").metadata
    assert meta.num_rows == 150_000 and meta.num_row_groups == 3
    # the strings go in as dictionary pages, and read back as plain strings
    table = pq.read_table(tmp_path / "big.parquet")
    assert [str(t) for t in table.schema.types] == [
        {"bool_": "bool"}.get(typ, typ) for _, typ in COLUMNS]
    col = meta.row_group(0).column(COLUMNS.index(("function", "string")))
    assert "RLE_DICTIONARY" in col.encodings and col.statistics.min == "__main__.f"
    assert table.column("stack").to_pylist()[:2] == ["__main__.f", "__main__.f"]


SPARK = """
import csv, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("fntrace-test")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.host", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.read.parquet(sys.argv[1]).createOrReplaceTempView("trace")
spark.sql("CREATE OR REPLACE TEMP VIEW calls AS SELECT * FROM trace WHERE kind IN ('call', 'hit')")
df = spark.sql(sys.argv[2])
w = csv.writer(sys.stdout, lineterminator="\\n")
w.writerow(df.columns)
for row in df.collect():
    w.writerow(["" if v is None else v for v in row])
spark.stop()
"""

# the README's query, run on both engines
AGREE = ("SELECT function, count(*) AS calls, sum(dur) AS total, max(depth) AS deepest, "
         "count(DISTINCT thread) AS threads FROM calls GROUP BY function ORDER BY function")


@pytest.mark.once
def test_duckdb_and_spark_agree(calls_dat, run_fntrace, tmp_path):
    """The same query on the same Parquet file: fntrace sql (DuckDB) and Spark local."""
    import shutil
    try:
        import pyspark  # noqa: F401
    except ImportError:
        pytest.skip("LOUD SKIP: pyspark is not installed here (the test extra installs it "
                    "on Python 3.13 and later): DuckDB and Spark are not compared")
    if shutil.which("java") is None:
        pytest.skip("LOUD SKIP: no Java runtime (apt-get install default-jre-headless): "
                    "Spark cannot start")
    export(run_fntrace, calls_dat, tmp_path / "t.parquet")
    duck = run_fntrace("sql", "t.parquet", AGREE, "--csv")
    assert duck.returncode == 0, duck.stderr
    spark = run_python("-c", SPARK, str(tmp_path / "t.parquet"), AGREE, cwd=tmp_path,
                       timeout=600)
    assert spark.returncode == 0, spark.stderr[-3000:]
    duck_rows = list(csv.reader(io.StringIO(duck.stdout)))
    spark_rows = list(csv.reader(io.StringIO(spark.stdout)))
    assert duck_rows[0] == spark_rows[0] == ["function", "calls", "total", "deepest", "threads"]
    assert len(duck_rows) > 5 and duck_rows == spark_rows


# -- the native column kernels (native/read_columns.c.h) against pyarrow.compute ------

from array import array  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fntrace import _env  # noqa: E402

_nat = _env.native_module()
needs_native = pytest.mark.skipif(_nat is None, reason="the native module is not built")


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**31, 2**31 - 1) | st.integers(0, 5), max_size=300))
def test_dict_encode_i32_is_pyarrows(values):
    import pyarrow.compute as pc
    rows, keys = _nat.dict_encode_i32(array("i", values))
    want = pc.dictionary_encode(pa.array(values, pa.int32()))
    assert list(memoryview(rows).cast("i")) == want.indices.to_pylist()
    assert list(memoryview(keys).cast("i")) == want.dictionary.to_pylist()


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | st.sampled_from(["", "a", "b", "é", "ab", "a\x00"])
                | st.text(max_size=8), max_size=300))
def test_dict_encode_str_is_pyarrows(values):
    import pyarrow.compute as pc
    col = pa.array(values, pa.string())
    validity, offsets, data = col.buffers()
    idx, valid, doff, ddata = _nat.dict_encode_str(
        len(values), None if validity is None else validity.to_pybytes(),
        offsets.to_pybytes(), b"" if data is None else data.to_pybytes())
    got = pa.DictionaryArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), len(values),
                              [None if valid is None else pa.py_buffer(valid),
                               pa.py_buffer(idx)]),
        pa.Array.from_buffers(pa.string(), len(doff) // 4 - 1,
                              [None, pa.py_buffer(doff), pa.py_buffer(ddata)]))
    want = pc.dictionary_encode(col)
    assert got.dictionary.to_pylist() == want.dictionary.to_pylist()
    assert got.indices.to_pylist() == want.indices.to_pylist()
    assert got.to_pylist() == values


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 2**31 - 1), min_size=1, max_size=50).flatmap(
    lambda table: st.tuples(st.just(table),
                            st.lists(st.integers(0, len(table) - 1), max_size=200))))
def test_gathers_are_pyarrows_take(case):
    import pyarrow.compute as pc
    table, idx = case
    vals, valid = _nat.gather_i32(array("i", table), array("i", idx))
    got = pa.Array.from_buffers(pa.int32(), len(idx),
                                [None if valid is None else pa.py_buffer(valid),
                                 pa.py_buffer(vals)])
    nullable = pa.array([None if v < 0 else v for v in table], pa.int32())
    assert got.to_pylist() == pc.take(nullable, pa.array(idx, pa.int32())).to_pylist()
    assert (valid is None) == all(table[i] >= 0 for i in idx)
    wide = [v * 2**31 for v in table]
    got64 = _nat.gather_i64(array("q", wide), array("i", idx))
    assert list(memoryview(got64).cast("q")) == [wide[i] for i in idx]


@needs_native
@given(st.binary(max_size=100))
def test_bits_of_bytes_is_not_equal_zero(data):
    import pyarrow.compute as pc
    got = pa.Array.from_buffers(pa.bool_(), len(data),
                                [None, pa.py_buffer(_nat.bits_of_bytes(data))])
    assert got.to_pylist() == pc.not_equal(pa.array(list(data), pa.uint8()), 0).to_pylist()


@needs_native
def test_column_kernels_refuse_what_is_out_of_range():
    with pytest.raises(IndexError, match="index 3 out of a table of 2"):
        _nat.gather_i32(array("i", [1, 2]), array("i", [0, 3]))
    with pytest.raises(IndexError, match="index -1"):
        _nat.gather_i64(array("q", [1]), array("i", [-1]))
    with pytest.raises(ValueError, match="whole number"):
        _nat.dict_encode_i32(b"abc")
    with pytest.raises(ValueError, match="offsets out of the data"):
        _nat.dict_encode_str(1, None, array("i", [0, 9]), b"ab")
    with pytest.raises(ValueError, match="shorter than n rows"):
        _nat.dict_encode_str(4, None, array("i", [0, 1]), b"ab")


def test_the_native_export_loads_no_compute_kernels(calls_dat, tmp_path):
    """pyarrow.compute is 10 MB of the export's memory: the native walk's columns are
    made without it (the pure path uses it)."""
    code = ("import sys; from fntrace.cli.main import main; "
            f"rc = main(['export', '--format', 'parquet', '-o', {str(tmp_path / 'x.pq')!r}, "
            f"{str(calls_dat)!r}]); "
            "print(rc, 'pyarrow.compute' in sys.modules)")
    env = dict(os.environ)
    p = run_python("-c", code, env=env)
    native = _nat is not None and env.get("FNTRACE_PURE", "") in ("", "0")
    assert p.stdout.split() == ["0", "False" if native else "True"], p.stderr


# -- the Arrow C stream of a trace (native/read_arrow_stream.c.h): sql without pyarrow --

class _Stream:
    def __init__(self, capsule_maker):
        self.make = capsule_maker

    def __arrow_c_stream__(self, requested_schema=None):
        return self.make()


def test_the_stream_of_a_trace_is_record_batches_table(calls_dat):
    """What DuckDB is handed for a .dat (sql) holds what record_batches makes (export):
    read back through pyarrow, batch by batch, the same schema and values.  The pure
    twin has no stream (sql reads its rows through pyarrow)."""
    from fntrace.output.parquet import column_stream, record_batches
    from fntrace.output.source import open_trace
    if _env.native() is None:
        assert column_stream(open_trace(calls_dat)) is None
        return
    if not hasattr(pa.RecordBatchReader, "from_stream"):
        pytest.skip("LOUD SKIP: this pyarrow cannot import an Arrow C stream")
    want = pa.Table.from_batches(list(record_batches(open_trace(calls_dat), None, 7)))
    got = pa.RecordBatchReader.from_stream(
        _Stream(lambda: column_stream(open_trace(calls_dat), None, 7))).read_all()
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()
    assert got.num_rows == want.num_rows > 7


@needs_native
def test_a_stream_gives_duckdb_dictionaries_nulls_and_every_kind():
    batches = [
        (3, ((None, array("q", [1, 2, 3]).tobytes()),
             (bytes([0b101]), array("i", [7, 0, 9]).tobytes()),
             (None, bytes([0b110])),
             (bytes([0b011]), array("i", [1, 0, 5]).tobytes(),
              array("i", [0, 1, 3]).tobytes(), b"a\xc3\xa9"))),
        (0, ((None, b""), (None, b""), (None, b""), (None, b"", bytes(4), b""))),
        (1, ((None, array("q", [4]).tobytes()), (None, array("i", [1]).tobytes()),
             (None, b"\x01"), (bytes([0]), bytes(4), bytes(4), b""))),
    ]
    it = iter(batches)
    con = duckdb.connect()
    con.register("s", _Stream(lambda: _nat.arrow_stream(("l", "i", "b", "d"), "libd",
                                                        lambda: next(it, None))))
    assert con.execute("SELECT * FROM s").fetchall() == [
        (1, 7, False, "é"), (2, None, True, "a"), (3, 9, True, None), (4, 1, True, None)]


@needs_native
@pytest.mark.parametrize("batch, error", [
    ((1, ((None, bytes(4)), (None, bytes(4)), (None, b"\x01"),
          (None, bytes(4), array("i", [0, 1]).tobytes(), b"x"))),
     "column 0: values of 4 bytes, 8 wanted"),
    ((2, ((None, bytes(16)), (None, bytes(8)), (None, b""), (None, bytes(8), bytes(8), b"x"))),
     "column 2: values of 0 bytes, 1 wanted"),
    ((1, ((None, bytes(8)), (None, bytes(4)), (None, b"\x01"),
          (None, array("i", [1]).tobytes(), array("i", [0, 1]).tobytes(), b"x"))),
     "row 0's index 1 is outside its dictionary of 1"),
    ((1, ((None, bytes(8)), (None, bytes(4)), (None, b"\x01"),
          (None, bytes(4), array("i", [0, 5]).tobytes(), b"x"))),
     "dictionary offsets out of order or past its data"),
    ("not a batch", "next\\(\\) must give"),
])
def test_a_bad_batch_is_the_querys_error_not_a_crash(batch, error):
    con = duckdb.connect()
    con.register("s", _Stream(lambda: _nat.arrow_stream(("l", "i", "b", "d"), "libd",
                                                        iter([batch]).__next__)))
    with pytest.raises(duckdb.Error, match=error):
        con.execute("SELECT * FROM s").fetchall()


@needs_native
def test_an_exception_of_next_is_the_querys_error():
    def fail():
        raise RuntimeError("the trace went away")
    con = duckdb.connect()
    con.register("s", _Stream(lambda: _nat.arrow_stream(("x",), "l", fail)))
    with pytest.raises(duckdb.Error, match="RuntimeError: the trace went away"):
        con.execute("SELECT * FROM s").fetchall()
    with pytest.raises(ValueError, match="one kind"):
        _nat.arrow_stream(("x",), "q", fail)


ASYNC = """\
import asyncio

async def worker(n):
    for i in range(n):
        await asyncio.sleep(0)

async def main():
    await asyncio.gather(worker(3), worker(2))

asyncio.run(main())
"""


@pytest.mark.parametrize("kind", ["calls", "hits", "asyncio"])
def test_sql_over_a_trace_loads_no_pyarrow(calls_dat, run_fntrace, tmp_path, kind):
    """DuckDB is handed the native walk's columns as an Arrow C stream: pyarrow (28 MB)
    is not loaded (the pure twin's rows go through it): for a trace of calls, of the
    default tracer's hits, and of an asyncio program (task switches, the task column)."""
    path = calls_dat
    if kind != "calls":
        (tmp_path / "prog.py").write_text(ASYNC if kind == "asyncio" else CALLS_PROG)
        tracer = ["-p", "function_graph"] if kind == "asyncio" else []
        r = run_fntrace("record", *tracer, "-F", "__main__.*", "-o", "t.dat", "prog.py",
                        cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        path = tmp_path / "t.dat"
    query = ("SELECT count(*) FROM calls" if kind != "asyncio" else
             "SELECT count(DISTINCT task) FROM calls WHERE task IS NOT NULL")
    code = ("import sys; from fntrace.cli.main import main; "
            f"rc = main(['sql', {str(path)!r}, {query!r}, '--csv']); "
            "print(rc, 'pyarrow' in sys.modules)")
    p = run_python("-c", code)
    native = _env.native() is not None
    out = p.stdout.split()
    assert out[-2:] == ["0", "False" if native else "True"], p.stderr
    if kind == "asyncio":
        assert out[-3] == "3"           # main()'s Task and the two workers'


# Queries as users write them, each answered over the .dat (a stream of the columns the
# query names, cli/sql.py's query_columns) as over its Parquet export (DuckDB's reader,
# every column there): the ones that name no column and still see them all (*,
# COLUMNS(), a table as a value, a NATURAL join, DESCRIBE, the catalog) included.
SAME_QUERIES = [
    "SELECT function, count(*) AS n, sum(dur) AS total FROM calls GROUP BY function "
    "ORDER BY total DESC, function",
    "SELECT * FROM calls ORDER BY ts, tid, depth LIMIT 5",
    "SELECT c FROM calls c ORDER BY c.ts, c.tid, c.depth LIMIT 3",
    "SELECT count(*) AS n FROM (SELECT * FROM calls LIMIT 20) a NATURAL JOIN "
    "(SELECT * FROM calls LIMIT 20) b",
    "DESCRIBE calls",
    "SELECT x.total FROM (SELECT sum(self_dur) AS total FROM calls) x",
    "WITH t(f, d) AS (SELECT function, depth FROM calls) SELECT f, max(d) AS deepest "
    "FROM t GROUP BY f ORDER BY f",
    "SELECT COLUMNS('.*dur') FROM calls ORDER BY ts, tid, depth LIMIT 3",
    "SELECT column_name FROM information_schema.columns WHERE table_name = 'calls' "
    "ORDER BY ordinal_position",
    "SELECT Function, COUNT(*) AS n FROM Calls GROUP BY ALL ORDER BY 1",
    "SELECT c.function, count(*) AS n FROM calls c JOIN calls p USING (tid) "
    "WHERE c.parent = p.function AND c.depth = p.depth + 1 GROUP BY 1 ORDER BY 1",
    "SELECT kind, count(*) AS n, count(DISTINCT thread) AS threads FROM trace "
    "GROUP BY kind ORDER BY kind",
    "SELECT list_sort(list(DISTINCT line)) AS lines FROM calls WHERE file LIKE '%prog%'",
]


@pytest.mark.parametrize("query", SAME_QUERIES)
def test_sql_over_the_dat_answers_as_over_its_parquet(calls_dat, run_fntrace, tmp_path, query):
    export(run_fntrace, calls_dat, tmp_path / "t.parquet")
    a = run_fntrace("sql", calls_dat, query, "--csv")
    b = run_fntrace("sql", tmp_path / "t.parquet", query, "--csv")
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    assert a.stdout == b.stdout and a.stdout.count("\n") >= 2


@pytest.mark.parametrize("query, columns", [
    ("SELECT function, sum(dur) AS total FROM calls GROUP BY function ORDER BY total",
     {"kind", "function", "dur"}),
    ("SELECT c.thread, count(*) FROM calls c WHERE c.depth > 1 GROUP BY ALL",
     {"kind", "thread", "depth"}),
    ("WITH t(f) AS (SELECT function FROM calls) SELECT f FROM t", {"kind", "function"}),
    ("SELECT x.n FROM (SELECT count(*) AS n FROM events) x", {"kind"}),
    ("SELECT a.pid FROM calls a JOIN events b USING (tid)", {"kind", "pid", "tid"}),
    ("SELECT ARGS, RetVal FROM calls", {"kind", "args", "retval"}),
    ("SELECT * FROM calls", None),
    ("SELECT COLUMNS('d.*') FROM calls", None),
    ("SELECT t FROM trace t", None),
    ("SELECT count(*) FROM calls NATURAL JOIN events", None),
    ("DESCRIBE calls", None),
    ("SUMMARIZE calls", None),
    ("SELECT * FROM duckdb_columns()", None),
    ("SELECT column_name FROM information_schema.columns", None),
    ("SELECT list_transform([1], y -> y + 1)", None),
    ("SELECT 1; SELECT 2", {"kind"}),
    ("PIVOT calls ON function USING count(*)", None),
    ("SELEC nonsense", None),
])
def test_query_columns(query, columns):
    from fntrace.cli.sql import query_columns
    got = query_columns(duckdb.connect(), query)
    assert got == (None if columns is None else frozenset(columns))


def test_a_column_the_query_reaches_unseen_is_given_on_a_second_try(calls_dat, monkeypatch,
                                                                   capsys):
    """Should query_columns ever leave out a column the query names (DuckDB's parse
    grows), the binder's error is not the user's: the query runs again over every
    column."""
    from fntrace.cli import sql
    from fntrace.cli.main import main
    asked = []

    def too_few(con, query):
        asked.append(query)
        return frozenset({"kind"})
    monkeypatch.setattr(sql, "query_columns", too_few)
    q = "SELECT function, count(*) AS n FROM calls GROUP BY function ORDER BY function"
    assert main(["sql", str(calls_dat), q, "--csv"]) == 0
    out = capsys.readouterr()
    assert asked == [q] and out.err == ""
    monkeypatch.undo()
    assert main(["sql", str(calls_dat), q, "--csv"]) == 0
    assert capsys.readouterr().out == out.out and "__main__.leaf" in out.out
    # the user's own mistake is still the user's, said once
    assert main(["sql", str(calls_dat), "SELECT functoin FROM calls"]) == 2
    err = capsys.readouterr().err
    assert err.count("fntrace: sql: Binder Error") == 1 and "function" in err, err


def test_sql_over_parquet_reaches_that_file_only(calls_dat, run_fntrace, tmp_path):
    """A Parquet file given is read by DuckDB's own reader, named in allowed_paths: the
    rest of the file system stays closed to the query."""
    export(run_fntrace, calls_dat, tmp_path / "t.parquet")
    export(run_fntrace, calls_dat, tmp_path / "other.parquet")
    r = run_fntrace("sql", tmp_path / "t.parquet", "SELECT count(*) AS n FROM calls", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["n"] > 0, r.stderr
    for q in (f"SELECT count(*) FROM read_parquet('{tmp_path / 'other.parquet'}')",
              "SET enable_external_access = true",
              f"SET allowed_paths = ['{tmp_path / 'other.parquet'}']"):
        r = run_fntrace("sql", tmp_path / "t.parquet", q)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.startswith("fntrace: sql: "), r.stderr
