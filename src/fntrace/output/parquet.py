"""Parquet: ``fntrace export FILE --format parquet`` (pyarrow), the table ``fntrace sql``
queries.

One row per call or event, written in row groups of ``ROW_GROUP`` rows as the trace is
read, so a trace larger than memory exports in the memory of one row group and the
open stacks (output/calls.py).  The columns, in order:

    kind      'call'    a function_graph call, whole (its return read, or closed where
                        its thread's trace ends: complete false)
              'hit'     a function tracer hit (no duration)
              'event'   a dynamic event (fprobe, ...): function is the event's name,
                        args its fields as printed
              'marker'  a trace_marker write: args is its text
              'stack'   a stack trace (stacktrace command/trigger): args is the frames,
                        innermost first, newline-joined
    pid       int64     the traced process's id (each process's, of a trace of several)
    tid       int64     the thread's native id (TASK-PID's PID)
    thread    string    the thread's name (TASK-PID's TASK)
    cpu       int32     the thread slot (the CPU column)
    ts        int64     ns on the trace's clock: a call's entry, an event's time
    dur       int64     a call's duration, ns (null for the other kinds)
    self_dur  int64     a call's duration less its callees', ns (null for the others)
    depth     int32     a call's depth, 0 = outermost on its thread (null for others)
    function  string    module.qualname (an event's name for 'event')
    module    string    the module the function is in, from its file's name (null when
                        the name and the file do not tell: a code object made by exec)
    file      string    the function's source file, as recorded
    line      int32     its first line
    parent    string    the caller: the call above it on its thread's stack ('call'),
                        the recorded caller ('hit'); null at the bottom
    stack     string    'call': the names from the outermost call down to this one,
                        joined by ';' (folded-stack form)
    args      string    the arguments as the text report prints them (``a=1, b='x'``),
                        null when not recorded; an event's fields; a marker's text
    retval    string    the return value as the text report prints it; null when not
                        recorded
    complete  bool      'call': its return is in the trace; true for the other kinds
    task      string    the asyncio Task the row ran in (a call: the one its entry ran
                        in), by name; null outside any Task or without asyncio

The same files are read by DuckDB (``fntrace sql``), Spark, pandas and polars.
"""
from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Collection, Iterator, Mapping

from .calls import Call, CallBuilder
from .entry import (
    TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_PRINT, TRACE_STACK,
    LostEvents,
)
from .ftrace_text import function_args_text
from .registry import Exporter, name_of, register_exporter
from .task_view import EVENT as TASK_EVENT, SwitchPoints, task_of_text
from ..errors import TraceFileError
from ..ring_buffer import text_parts
from ..tracefile.blocks import dec_text

__all__ = ["ParquetExporter", "COLUMNS", "ROW_GROUP", "module_of", "write_parquet",
           "record_batches", "native_walkable", "column_stream", "table_schema",
           "use_returning_pool"]

ROW_GROUP = 65_536

# name -> pyarrow type name (pa.<name>()), the table's schema in order
COLUMNS: tuple[tuple[str, str], ...] = (
    ("kind", "string"), ("pid", "int64"), ("tid", "int64"), ("thread", "string"),
    ("cpu", "int32"), ("ts", "int64"), ("dur", "int64"), ("self_dur", "int64"),
    ("depth", "int32"), ("function", "string"), ("module", "string"),
    ("file", "string"), ("line", "int32"), ("parent", "string"), ("stack", "string"),
    ("args", "string"), ("retval", "string"), ("complete", "bool_"), ("task", "string"),
)


def module_of(name: str, file: str) -> str | None:
    """The module of ``module.qualname`` ``name`` defined in ``file``: the longest
    dotted prefix of the name whose last part is the file's module name (``pkg`` for
    ``pkg/__init__.py``).  ``__main__`` for the program's own functions."""
    if name.startswith("__main__."):
        return "__main__"
    stem = os.path.splitext(os.path.basename(file))[0] if file else ""
    if stem == "__init__":
        stem = os.path.basename(os.path.dirname(file))
    if not stem:
        return None
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if parts[i - 1] == stem:
            return ".".join(parts[:i])
    return None


def _args_text(args) -> str | None:
    return None if args is None else function_args_text(args)


def _retval_text(has: bool, v: object) -> str | None:
    return str(v) if has else None


class _Columns:
    """Rows gathered column by column, written a row group at a time."""

    def __init__(self, schema, pid_of, symbols_by_name: dict[str, tuple],
                 batch_rows: int = ROW_GROUP) -> None:
        self.ready: list = []           # record batches made, not yet taken
        self.batch_rows = batch_rows
        self.schema = schema
        self.pid_of = pid_of            # thread slot -> its process (several followed)
        self.where = symbols_by_name
        self.cols: list[list] = [[] for _ in COLUMNS]
        self.n = 0
        self.rows = 0
        self._modules: dict[str, str | None] = {}
        # the asyncio Task of each thread slot over time (output/task_view.py)
        self.tasks = SwitchPoints()

    def _place(self, func: str) -> tuple[str | None, str | None, int | None]:
        w = self.where.get(func)
        if w is None:
            return None, None, None
        file, line = w
        mod = self._modules.get(func, 0)
        if mod == 0:
            mod = self._modules[func] = module_of(func, file)
        # (0 stands for "not looked up yet", which a checker does not see go)
        return mod, file, line      # type: ignore[return-value]

    def add(self, kind: str, tid: int, thread: str, cpu: int, ts: int, dur, self_dur,
            depth, function: str, parent, stack, args, retval, complete: bool) -> None:
        module, file, line = self._place(function) if kind in ("call", "hit") else \
            (None, None, None)
        row = (kind, self.pid_of(cpu), tid, thread, cpu, ts, dur, self_dur, depth, function,
               module, file, line, parent, stack, args, retval, complete,
               self.tasks.at(cpu, ts) if self.tasks.points else None)
        for col, v in zip(self.cols, row):
            col.append(v)
        self.n += 1
        if self.n >= self.batch_rows:
            self.flush()

    def call(self, c: Call) -> None:
        self.add("call", c.pid, c.comm, c.cpu, c.start, c.end - c.start, c.self_ns,
                 c.depth, c.func, c.stack[-2] if len(c.stack) > 1 else None,
                 ";".join(c.stack), _args_text(c.args), _retval_text(c.has_retval, c.retval),
                 c.complete)

    def flush(self) -> None:
        if not self.n:
            return
        import pyarrow as pa
        import pyarrow.compute as pc
        # the strings encoded as the native walk hands them (as a writer would)
        arrays = [pc.dictionary_encode(pa.array(col, pa.string()))
                  if pa.types.is_dictionary(field.type) else pa.array(col, field.type)
                  for col, field in zip(self.cols, self.schema)]
        self.ready.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self.rows += self.n
        self.cols = [[] for _ in COLUMNS]
        self.n = 0


def use_returning_pool() -> None:
    """For fntrace's own commands (export, sql), not for a program using the API: make
    Arrow allocate with the system's malloc (or jemalloc), which give freed row groups
    back, where its default (mimalloc) keeps them.  Called before pyarrow is loaded, it
    names the pool in ARROW_DEFAULT_MEMORY_POOL, Arrow's from its first allocation
    (switching later keeps mimalloc's first arenas: 14 MB more at the peak); a pool the
    user named there is kept."""
    if sys.modules.get("pyarrow") is None:         # not loaded (or not there at all)
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
        return
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa
    for make in (pa.system_memory_pool, pa.jemalloc_memory_pool):
        try:
            pa.set_memory_pool(make())
            return
        except (NotImplementedError, AttributeError, pa.ArrowException):
            continue


def schema(dictionary: bool = False):
    """The table's Arrow schema; ``dictionary``: its string columns dictionary-encoded
    (int32 indices), as ``record_batches`` makes them."""
    import pyarrow as pa
    return pa.schema([(name, pa.dictionary(pa.int32(), pa.string())
                       if dictionary and typ == "string" else getattr(pa, typ)())
                      for name, typ in COLUMNS])


# the string columns given min/max statistics in the file
_STATISTICS = ("kind", "thread", "function", "module")


def write_parquet(source, out) -> dict:
    """Write ``source`` (a TraceSource) as Parquet to ``out`` (a path or a binary file);
    returns {"rows": N, "lost": M, "incomplete": K}."""
    import pyarrow.parquet as pq
    counts: dict[str, int] = {}
    # Dictionary pages for the string columns only: on ts, dur and the other numbers
    # (nearly all distinct) the writer builds a dictionary per row group only to give
    # it up, a fifth of its time; zstd does better there (the files come out smaller).
    #
    # The batches' string columns come dictionary-encoded (each batch's values in the
    # order they first come, as the writer would have made them): it takes dictionary
    # and indices as they are, and the native walk makes no row's string.  No Arrow
    # schema goes in the file (it would say the columns came encoded): its readers see
    # the Parquet strings as strings.
    #
    # Min/max statistics on the numbers and on the names a query picks rows by; not on
    # file, parent and stack: a fifth of the writer's time (the stacks are long), and a
    # row group holds most of a program's paths anyway, so no reader skips one by them.
    opts = dict(compression="zstd", store_schema=False,
                use_dictionary=[n for n, typ in COLUMNS if typ == "string"],
                write_statistics=[n for n, typ in COLUMNS
                                  if typ != "string" or n in _STATISTICS],
                # a thread's entries come in time order: their differences pack in a
                # few bits (a fifth smaller a file, and less for zstd to do)
                column_encoding={"ts": "DELTA_BINARY_PACKED"})
    writer = pq.ParquetWriter(out, schema(dictionary=True), **opts)
    try:
        for batch in record_batches(source, counts):
            writer.write_batch(batch)
    finally:
        writer.close()
    return counts


def record_batches(source, counts: dict | None = None, batch_rows: int = ROW_GROUP,
                   columns: Collection[str] | None = None) -> Iterator:
    """The table of ``source`` (a TraceSource) as pyarrow record batches of ``batch_rows``
    rows (the last one shorter), made as the trace is read: what write_parquet writes,
    and what ``fntrace sql`` scans.  At the end ``counts`` holds {"rows", "lost",
    "incomplete"}.  The string columns come dictionary-encoded, each batch with its
    own dictionaries, values in the order they first come in it (as a Parquet writer
    would encode them), in ``schema(dictionary=True)``; ``columns``: those columns
    only, in ``table_schema(columns)``."""
    counts = {} if counts is None else counts
    if columns is not None:
        keep = _keep(columns)
        names = [COLUMNS[i][0] for i in keep]
        for batch in record_batches(source, counts, batch_rows):
            yield batch.select(names)
        return
    sch = schema(dictionary=True)
    pid_of = getattr(source, "process_of", lambda cpu: source.pid)
    where = source.places()
    walked = _native_columns(source, pid_of, where, counts, batch_rows)
    if walked is not None:
        yield from _arrow_batches(walked, sch)
        return
    yield from _python_batches(source, counts, batch_rows, pid_of, where)


def _python_batches(source, counts: dict, batch_rows: int, pid_of, where: dict
                    ) -> Iterator:
    """record_batches' loop over the entries: the Python twin of CallRows, and the
    reference."""
    sch = schema(dictionary=True)
    cols = _Columns(sch, pid_of, where, batch_rows)
    ready = cols.ready
    builder = CallBuilder()
    lost = incomplete = 0
    for e in source.entries():
        if ready:
            yield from ready
            ready.clear()
        if isinstance(e, LostEvents):
            lost += e.lost if e.lost > 0 else 0
            # the calls a loss closes are rows too (they were dropped: a call open
            # across a loss was missing from the table, not split)
            for c in builder.feed(e):
                incomplete += not c.complete
                cols.call(c)
            continue
        typ = e.type
        if typ == TRACE_GRAPH_ENT or typ == TRACE_GRAPH_RET:
            for c in builder.feed(e):
                incomplete += not c.complete
                cols.call(c)
        elif typ == TRACE_FN:
            cols.add("hit", e.pid, e.comm, e.cpu, e.ts, None, None, None, e.func,
                     e.parent or None, None, _args_text(e.args), None, True)
        elif typ == TRACE_EVENT:
            if e.func == TASK_EVENT:
                cols.tasks.add(e.cpu, e.ts, task_of_text(e.text or ""))
            cols.add("event", e.pid, e.comm, e.cpu, e.ts, None, None, None, e.func,
                     None, None, e.text, None, True)
        elif typ == TRACE_PRINT:
            cols.add("marker", e.pid, e.comm, e.cpu, e.ts, None, None, None,
                     e.func or "print", None, None, e.text, None, True)
        elif typ == TRACE_STACK:
            cols.add("stack", e.pid, e.comm, e.cpu, e.ts, None, None, None,
                     e.func or "stack", None, None, e.text, None, True)
    for c in builder.finish():
        incomplete += not c.complete
        cols.call(c)
    cols.flush()
    yield from ready
    ready.clear()
    counts.update(rows=cols.rows, lost=lost, incomplete=incomplete)


def column_stream(source, counts: dict | None = None, batch_rows: int = ROW_GROUP,
                  walkable: tuple | None = None, columns: Collection[str] | None = None):
    """record_batches' table as an Arrow C stream (a PyCapsule, what
    ``__arrow_c_stream__`` returns), made natively with no pyarrow loaded (``fntrace
    sql``: DuckDB takes it as it is); None when no native walk reads ``source``.
    ``walkable``: what native_walkable said of this source before.  ``columns``: the
    table's columns to make (a query's; in the table's order), None for all: a column
    left out costs nothing, the walk makes neither its buffers nor its strings."""
    counts = {} if counts is None else counts
    pid_of = getattr(source, "process_of", lambda cpu: source.pid)
    keep = _keep(columns)
    walked = _native_columns(source, pid_of, source.places(), counts, batch_rows, walkable,
                             keep)
    if walked is None:
        return None
    from .. import _env
    kinds = "".join(_KINDS[i] for i in keep)

    def next_batch():
        item = next(walked, None)
        # (the Python twin's pyarrow batch, once the walk declined a record)
        return item if item is None or isinstance(item, tuple) else _buffers_of(item, kinds)
    return _env.native().arrow_stream(tuple(COLUMNS[i][0] for i in keep), kinds,
                                      next_batch)


def _buffers_of(batch, kinds: str) -> tuple[int, tuple]:
    """A pyarrow RecordBatch as arrow_stream's (n, columns): its arrays' own buffers
    (whole batches, never slices: their arrays start at 0)."""
    cols: list[tuple] = []
    for kind, arr in zip(kinds, batch.columns):
        if arr.offset:
            raise ValueError("a slice of a batch, where whole batches are made")
        if kind == "d":
            valid, idx = arr.indices.buffers()
            _, offsets, data = arr.dictionary.buffers()
            cols.append((valid, idx, offsets[:4 * (len(arr.dictionary) + 1)],
                         b"" if data is None else data))
        else:
            cols.append(tuple(arr.buffers()))
    return batch.num_rows, tuple(cols)


def _keep(columns: Collection[str] | None) -> tuple[int, ...]:
    """The indices in COLUMNS of ``columns`` (None: all), in the table's order."""
    if columns is None:
        return tuple(range(len(COLUMNS)))
    wanted = set(columns)
    unknown = wanted - {n for n, _ in COLUMNS}
    if unknown:
        raise ValueError(f"no such column: {', '.join(sorted(unknown))}")
    return tuple(i for i, (n, _) in enumerate(COLUMNS) if n in wanted)


def table_schema(columns: Collection[str] | None = None):
    """schema(dictionary=True) of ``columns`` only (None: all), in the table's order."""
    import pyarrow as pa
    sch = schema(dictionary=True)
    return pa.schema([sch.field(i) for i in _keep(columns)])


# the columns as arrow_stream and _arrow_batches take them: l int64, i int32, b bool,
# d dictionary-encoded strings
_KINDS = "".join({"string": "d", "int64": "l", "int32": "i", "bool_": "b"}[typ]
                 for _, typ in COLUMNS)


def _arrow_batches(walked: Iterator, sch) -> Iterator:
    """pyarrow record batches of the native walk's (n, columns) buffers (or, after
    it declined a record, the Python twin's batches)."""
    import pyarrow as pa
    types = [sch.field(i).type for i in range(len(COLUMNS))]
    string = pa.string()
    for item in walked:
        if isinstance(item, pa.RecordBatch):
            yield item
            continue
        n, cols = item
        arrays = []
        for kind, typ, col in zip(_KINDS, types, cols):
            valid = None if col[0] is None else pa.py_buffer(col[0])
            if kind == "d":
                arrays.append(pa.DictionaryArray.from_arrays(
                    pa.Array.from_buffers(typ.index_type, n, [valid, pa.py_buffer(col[1])]),
                    pa.Array.from_buffers(string, len(col[2]) // 4 - 1,
                                          [None, pa.py_buffer(col[2]), pa.py_buffer(col[3])])))
            else:
                arrays.append(pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(col[1])]))
        yield pa.RecordBatch.from_arrays(arrays, schema=sch)


def native_walkable(source) -> tuple | None:
    """(the native module, the thread slots) when CallRows may walk ``source``: the
    twin is built and the source's entries are read from a file's blocks; else None.
    Nothing is read to say so: CallRows looks at each record as it reads it (what
    walk.native_for_calls would say of its block: calls with their values, hits,
    markers and events) and declines one that is more (a stack trace, a value kept as
    JSON); the Python twin then makes the rest of the table (_or_python)."""
    from .. import _env
    native = _env.native()
    if native is None:
        return None
    blocks = source.record_blocks()
    if blocks is None:
        return None
    blocks.close()
    return native, set(source.cpus)


def _native_columns(source, pid_of, where: dict[str, tuple], counts: dict,
                    batch_rows: int, walkable: tuple | None = None,
                    keep: tuple[int, ...] | None = None) -> Iterator | None:
    """record_batches' batches for a trace of calls (graph entries and returns, with
    their arguments and return values as text or 64-bit ints), of function tracer
    hits, markers and events (an asyncio program's task switches give the task
    column), made natively (_native_read.c's CallRows: the same rows, in the same
    batches), each as its columns' buffers (_KINDS); None when there is no native twin
    (the loop above makes them).  From a record CallRows declines (a stack trace, a
    value kept as JSON) on, the batches are the Python twin's pyarrow RecordBatches
    (_or_python).  Strings are made once per call path (a hit's path: [_HIT_PATH,
    caller, function]; an event's [_EVENT_PATH or _MARKER_PATH, its name's id]), and
    a batch's dictionaries are taken from them by the paths in it (no Python object,
    no string per row).  ``keep``: the columns made (their indices in COLUMNS; None:
    all)."""
    from .walk import canon_ids
    if walkable is None:
        walkable = native_walkable(source)
    if not walkable:
        return None
    native, slots = walkable
    threads = source.threads
    nslots = max(slots | set(threads), default=-1) + 1
    syms = source.symbols
    who = [threads.get(k, (0, "<...>")) for k in range(nslots)]
    slot_pid = array("q", [pid_of(k) for k in range(nslots)]).tobytes()
    slot_tid = array("q", [t for t, _ in who]).tobytes()
    slot_name = _Strings([n for _, n in who])
    # per call path (index 0: the empty path, never a row's): its function, module,
    # file, parent, stack and kind (strings), its line, and what it is (_CALL, _HIT;
    # _HIT_ROOT and _CALLER: the paths above hits', never a row's)
    names: list = [None]
    by_path = [_Strings([None]) for _ in _BY_PATH]
    lines: list = [None]
    what: list = [_CALL]
    module_cache: dict[str, str | None] = {}

    def grow(new: list) -> None:
        for parent, ip in new:
            up = what[parent]
            if up == _HIT_ROOT:             # a hit's caller (0: none known)
                names.append(name_of(ip, syms) if ip else None)
                what.append(_CALLER)
            elif parent == 0 and ip in _ROOTS:
                names.append(None)
                what.append(_ROOTS[ip])
            elif up in (_EVENT_ROOT, _MARKER_ROOT):
                name = ev_names[ip]
                names.append(name)
                what.append(_EVENT)
                for col, v in zip(by_path, (
                        name if up == _EVENT_ROOT else name or "print", None, None, None,
                        None, "event" if up == _EVENT_ROOT else "marker")):
                    col.add(v)
                lines.append(None)
                continue
            else:
                name = name_of(ip, syms)
                names.append(name)
                what.append(_HIT if up == _CALLER else _CALL)
            if what[-1] in (_HIT_ROOT, _CALLER, _EVENT_ROOT, _MARKER_ROOT):
                for col in by_path:
                    col.add(None)
                lines.append(None)
                continue
            w = where.get(name)
            if w is None:
                mod = file = line = None
            else:
                mod = module_cache.get(name, 0)
                if mod == 0:
                    mod = module_cache[name] = module_of(name, w[0])
                file, line = w
            stacks = by_path[4]
            if up == _CALLER:
                row = (name, mod, file, names[parent], None, "hit")
            else:
                row = (name, mod, file, None if parent == 0 else names[parent],
                       name if parent == 0 else stacks.values[stacks.ids[parent]] + ";" + name,
                       "call")
            for col, v in zip(by_path, row):
                col.add(v)
            lines.append(line)
        # a function's line, by call path (-1: none, a null); a call's 0 where a hit's
        # or an event's is -1 (they have no duration, self time or depth: nulls)
        line_of[0] = array("i", [-1 if v is None else v for v in lines]).tobytes()
        timed_of[0] = array("i", [0 if w == _CALL else -1 for w in what]).tobytes() \
            if _HIT in what or _EVENT in what else None

    line_of = [b""]
    timed_of: list = [None]
    # the names of markers and events by id (their paths' last ids), the asyncio Tasks
    # the switches name (id 0: outside any Task)
    ev_names: list = [None]
    ev_ids: dict[str, int] = {}
    task_ids: dict[str | None, int] = {None: 0}
    tasks = _Strings([None])

    def on_event(marker: int, payload: bytes) -> tuple[int, int]:
        name, text = text_parts(dec_text(payload))
        nid = ev_ids.get(name)
        if nid is None:
            nid = ev_ids[name] = len(ev_names)
            ev_names.append(name)
        if marker or name != TASK_EVENT:
            return nid, -1
        task = task_of_text(text)
        tid = task_ids.get(task)
        if tid is None:
            tid = task_ids[task] = len(task_ids)
            tasks.add(task)
        return nid, tid
    keep = tuple(range(len(COLUMNS))) if keep is None else keep
    # the arguments' and return values' text (an event's text is its args) made only
    # when a column shows it
    values = any(COLUMNS[i][0] in ("args", "retval") for i in keep)
    rows = native.CallRows(nslots, canon_ids(syms), batch_rows, values, on_event)
    made = _native_batches(native, rows, source, nslots, slot_pid, slot_tid, slot_name,
                           names, grow, by_path, line_of, timed_of, tasks, counts, keep)
    return _or_python(made, source, counts, batch_rows, pid_of, where, keep)


def _or_python(made: Iterator, source, counts: dict, batch_rows: int, pid_of,
               where: dict, keep: tuple[int, ...]) -> Iterator:
    """The native walk's batches, and when it declines a record (or meets a damaged
    block) the Python twin's from there: the twins make the same rows in the same
    batches, and the walk has handed out whole batches only (the last, shorter one
    comes at the end), so the twin's first batches, those already made, are left out.
    ``counts["declined"]``: the rows the walk made before it declined."""
    from .walk import Declined
    done = 0
    try:
        for item in made:
            yield item
            done += 1
    except (Declined, TraceFileError):
        counts["declined"] = done * batch_rows
        names = [COLUMNS[i][0] for i in keep]
        for k, batch in enumerate(_python_batches(source, counts, batch_rows, pid_of,
                                                  where)):
            if k >= done:
                yield batch if len(names) == len(COLUMNS) else batch.select(names)


# the string columns that follow from a row's call path, in _Strings of by_path
_BY_PATH = ("function", "module", "file", "parent", "stack", "kind")
# what a path is (see _native_columns' grow)
_CALL, _HIT, _HIT_ROOT, _CALLER, _EVENT, _EVENT_ROOT, _MARKER_ROOT = range(7)
# the first id of a hit's, an event's and a marker's path (read_stat.c.h's HIT_PATH,
# read_call_rows.c.h's EVENT_PATH and MARKER_PATH)
_HIT_PATH, _EVENT_PATH, _MARKER_PATH = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD
_ROOTS = {_HIT_PATH: _HIT_ROOT, _EVENT_PATH: _EVENT_ROOT, _MARKER_PATH: _MARKER_ROOT}


class _Strings:
    """A column's strings by a key (a call path, a thread slot): each distinct string
    once (``values``), and the key's index into them (``ids``; None for null)."""

    def __init__(self, first: list) -> None:
        self.values: list = []
        self.encoded: list = []        # values in UTF-8, made as batches use them
        self._index: dict[str, int] = {}
        self.ids: list = []
        for v in first:
            self.add(v)

    def add(self, v: str | None) -> None:
        if v is None:
            self.ids.append(None)
            return
        i = self._index.get(v)
        if i is None:
            i = self._index[v] = len(self.values)
            self.values.append(v)
        self.ids.append(i)

    def column(self, native, rows: bytes, keys: bytes) -> tuple:
        """The dictionary-encoded column (validity, indices, dictionary offsets and
        data) of the rows whose keys are dictionary-encoded as ``rows`` (each row's
        index into ``keys``, the batch's distinct keys in the order they first come):
        the strings the rows use, in the order they first come, and each row's index
        into them.  Only the distinct keys are looked at here: a string's first row is
        the first row of the first key that has it, so their order is the rows'."""
        ids = self.ids
        first: dict[int, int] = {}
        per_key = array("i")
        for k in memoryview(keys).cast("i"):
            sid = ids[k]
            if sid is None:
                per_key.append(-1)
                continue
            j = first.get(sid)
            if j is None:
                j = first[sid] = len(first)
            per_key.append(j)
        vals, valid = native.gather_i32(per_key, rows)
        encoded = self.encoded
        while len(encoded) < len(self.values):
            # (a name that is not valid Unicode, a lone surrogate, is shown with ?)
            encoded.append(self.values[len(encoded)].encode("utf-8", "replace"))
        data = b"".join([encoded[sid] for sid in first])
        offsets = array("i", [0])
        at = 0
        for sid in first:
            at += len(encoded[sid])
            offsets.append(at)
        return valid, vals, offsets.tobytes(), data


def _native_batches(nat, rows, source, nslots, slot_pid, slot_tid, slot_name, names,
                    grow, by_path, line_of, timed_of, tasks, counts, keep) -> Iterator:
    # Each batch as its kept columns' buffers (_KINDS), made by the native module's
    # column kernels (native/read_columns.c.h): neither pyarrow nor its compute is
    # needed.
    from .walk import drive
    total = 0
    empty = (bytes(4), b"")
    kept = {COLUMNS[i][0] for i in keep}
    path_cols = [(j, col) for j, (name, col) in enumerate(zip(_BY_PATH, by_path))
                 if name in kept]
    for batch in drive(rows, source, nslots, payloads=True):
        (n, b_slot, b_ts, b_dur, b_self, b_depth, b_path, b_complete, b_args, b_ret,
         b_task) = batch
        new = rows.paths(len(names))
        if new:
            grow(new)
        # the columns that follow from the call path, each from the batch's distinct paths
        by = [None] * len(_BY_PATH)
        if path_cols:
            path_rows, path_keys = nat.dict_encode_i32(b_path)
            for j, col in path_cols:
                by[j] = col.column(nat, path_rows, path_keys)
        function, module, file, parent, stack, kind = by
        # a hit's duration, self time and depth are nulls
        timed = None
        if timed_of[0] is not None and kept & {"dur", "self_dur", "depth"}:
            timed = nat.gather_i32(timed_of[0], b_path)[1]
        made = {
            "kind": lambda: kind,
            "pid": lambda: (None, nat.gather_i64(slot_pid, b_slot)),
            "tid": lambda: (None, nat.gather_i64(slot_tid, b_slot)),
            "thread": lambda: slot_name.column(nat, *nat.dict_encode_i32(b_slot)),
            "cpu": lambda: (None, b_slot), "ts": lambda: (None, b_ts),
            "dur": lambda: (timed, b_dur), "self_dur": lambda: (timed, b_self),
            "depth": lambda: (timed, b_depth),
            "function": lambda: function, "module": lambda: module,
            "file": lambda: file,
            "line": lambda: _valid_first(nat.gather_i32(line_of[0], b_path)),
            "parent": lambda: parent, "stack": lambda: stack,
            "args": lambda: _text(nat, n, b_args), "retval": lambda: _text(nat, n, b_ret),
            "complete": lambda: (None, nat.bits_of_bytes(b_complete)),
            "task": lambda: tasks.column(nat, *nat.dict_encode_i32(b_task))
            if tasks.values else (bytes((n + 7) // 8), bytes(4 * n), *empty),
        }
        total += n
        yield n, tuple(made[COLUMNS[i][0]]() for i in keep)
    lost, incomplete = rows.counts()
    counts.update(rows=total, lost=lost, incomplete=incomplete)


def _valid_first(gathered: tuple) -> tuple:
    """gather_i32's (values, validity) as a column's (validity, values)."""
    vals, valid = gathered
    return valid, vals


def _text(nat, n: int, col: tuple) -> tuple:
    """The walk's (validity bits, offsets, UTF-8 data) of a text column, encoded as the
    table's (validity, indices, dictionary offsets, dictionary data)."""
    idx, valid, offsets, data = nat.dict_encode_str(n, *col)
    return valid, idx, offsets, data


class ParquetExporter(Exporter):
    name = "parquet"
    summary = "Parquet, one row per call or event: DuckDB (fntrace sql), Spark, pandas"
    binary = True
    suffix = ".parquet"
    extra = "sql"
    requires = ("pyarrow",)

    def write(self, source, out, options: Mapping[str, object]) -> dict | None:
        r = write_parquet(source, out)
        notes = []
        if r["lost"]:
            notes.append(f"{r['lost']} record(s) were lost while recording: calls open "
                         "across a loss are split (complete = false)")
        elif r["incomplete"]:
            notes.append(f"{r['incomplete']} call(s) had no return in the trace "
                         "(complete = false)")
        return {"notes": notes} if notes else None


register_exporter(ParquetExporter())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
