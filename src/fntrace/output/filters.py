"""Report-time filters: which part of a recorded trace a view shows (trace-cmd report
and uftrace replay's options, applied when reading, not when recording).

    -F GLOB      functions (set_ftrace_filter's globs on module.qualname; several are ORed)
    -N GLOB      functions to leave out (-N wins over -F)
    --tid TID    threads by native id         --thread NAME  threads by name (glob)
    --cpu N      thread slots (the CPU column)
    --from T / --to T   a time window: seconds as the report prints them
                 (``44774.715935``), or ``+0.5``: seconds after the trace's first event
    -D N         function_graph: N levels    --thresh US  function_graph: calls of US or more

One function, ``filter_entries``, runs over an entry stream and yields what passes, so
``fntrace report``, ``fntrace stat``, the browser and the exports filter alike.  It keeps
one small state per thread slot, never the trace.

What -F and -N mean depends on what the trace holds:

- a function trace (one entry per call): -F keeps the hits of the matching functions,
  -N drops them, as set_ftrace_filter/set_ftrace_notrace do when recording.  Events,
  markers and stacks are not functions: they are kept.
- a function_graph trace: -F keeps a matching call *and everything under it*, as
  uftrace replay -F does and as set_graph_function (``fntrace record -g``) does when
  recording: the matching call is shown at depth 0, its callees below it.  A match
  inside a match is part of the outer one.  -N hides a call and everything under it
  (uftrace replay -N, set_graph_notrace); its caller's duration still includes it.
  Events, markers and stacks follow the call they happen in: shown when it is.

The time window cuts entries by their own time, after -F/-N have seen the whole stream
(so a call entered before ``--from`` still counts as a match for what runs under it in
the window); a graph call cut by the window shows as the kernel shows a call whose
entry or return is not in the buffer.  A time given as the report prints it stands for
every entry printed with it: ``--from T --to T`` keeps the entries the function format
prints at T (it rounds to the microsecond, as the kernel's ns2usecs) or function_graph's
abstime column prints at T (it cuts).  A relative time (``+0.5``) is exact, and --to
includes it.  -D counts levels from what -F shows (depth 0 is the matched call).
--thresh keeps only the returns of calls that took at least that long, and no entries,
as the kernel's tracing_thresh prints them.
"""
from __future__ import annotations

import fnmatch
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation

from ..core.glob import glob_match
from ..errors import UsageError
from ..record_format import FORMAT, RECORD_SIZE
from .entry import TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, LostEvents, TraceEntry

__all__ = ["TimeBound", "TraceFilter", "parse_time", "check_glob", "filter_entries",
           "function_matcher", "kept_slots", "thread_slots", "native_filter", "native_split",
           "NativeFilter"]

_NS_PER_SEC = 1_000_000_000
_NS_PER_US = 1_000


@dataclass(frozen=True, slots=True)
class TimeBound:
    """A --from/--to time: ``value`` in the report's unit (seconds for the clocks
    that count nanoseconds, raw counts for counter/uptime), ``relative``: after the
    trace's first event; ``digits``: decimals given (how precise the bound is)."""
    value: Decimal
    relative: bool
    digits: int

    def ns(self, first_ts: int, time_in_ns: bool = True) -> int:
        """The bound as a timestamp of the trace's clock."""
        v = int(self.value * _NS_PER_SEC) if time_in_ns else int(self.value)
        return first_ts + v if self.relative else v

    def __str__(self) -> str:
        return ("+" if self.relative else "") + str(self.value)


def parse_time(text: str, what: str = "time") -> TimeBound:
    """``44774.715935`` (a time as the report prints it) or ``+0.5`` (seconds after
    the first event).  UsageError (one line) for anything else."""
    s = text.strip()
    relative = s.startswith("+")
    body = s[1:] if relative else s
    bad = UsageError(f"{what} {text!r}: not a time (seconds as the report prints them, "
                     "e.g. 44774.715935, or +SECONDS after the first event, e.g. +0.5)")
    if not body or not all(c.isdigit() or c == "." for c in body) or body.count(".") > 1 \
            or not body.isascii():
        raise bad
    try:
        value = Decimal(body)
    except InvalidOperation:
        raise bad from None
    digits = len(body.partition(".")[2])
    return TimeBound(value, relative, digits)


def check_glob(pattern: str, what: str = "-F") -> str:
    """A function glob as the report filters take it: set_ftrace_filter's globs on
    module.qualname.  The control file's commands and module forms
    (``func:mod:MOD``, ``!``, an index) select records of a live process, not names in
    a file: refused with a one-line reason."""
    if not pattern.strip():
        raise UsageError(f"{what} {pattern!r}: empty glob")
    if ":" in pattern:
        raise UsageError(f"{what} {pattern!r}: report filters are globs on "
                         "module.qualname (e.g. 'json.decoder.*'); ':mod:' and other "
                         "commands apply when recording")
    if pattern.startswith("!"):
        raise UsageError(f"{what} {pattern!r}: use -N GLOB to leave functions out")
    return pattern.strip()


def function_matcher(globs: Iterable[str]):
    """A name -> bool test, true when any glob matches (memoised per name: a trace
    has few names and many entries)."""
    pats = tuple(globs)
    cache: dict[str, bool] = {}

    def match(name: str) -> bool:
        r = cache.get(name)
        if r is None:
            r = cache[name] = any(glob_match(p, name) for p in pats)
        return r
    return match


@dataclass(frozen=True)
class TraceFilter:
    """What a view shows of a trace (the module's docstring says how each applies).

    functions / notrace   -F / -N globs
    tids                  native thread ids (--tid)
    threads               thread-name globs (--thread; fnmatch, as record's --thread)
    cpus                  thread slots (--cpu)
    time_from / time_to   the time window
    max_depth             function_graph levels shown (0: all)
    thresh_ns             function_graph: only returns of calls this long or longer
    tasks                 asyncio Task name globs (--task; applied by task_view.py)
    """
    functions: tuple[str, ...] = ()
    notrace: tuple[str, ...] = ()
    tids: frozenset[int] = field(default_factory=frozenset)
    threads: tuple[str, ...] = ()
    cpus: frozenset[int] = field(default_factory=frozenset)
    time_from: TimeBound | None = None
    time_to: TimeBound | None = None
    max_depth: int = 0
    thresh_ns: int = 0
    tasks: tuple[str, ...] = ()          # asyncio Task name globs (--task: task_view.py)

    def __post_init__(self) -> None:
        f, t = self.time_from, self.time_to
        if f is not None and t is not None and f.relative == t.relative and f.value > t.value:
            raise UsageError(f"--from {f} is after --to {t}")

    @property
    def threads_filtered(self) -> bool:
        return bool(self.tids or self.threads or self.cpus)

    @property
    def empty(self) -> bool:
        """Nothing to filter: the stream passes as it is."""
        return not (self.functions or self.notrace or self.threads_filtered
                    or self.time_from or self.time_to or self.max_depth or self.thresh_ns)

    def thread_ok(self, cpu: int, pid: int, comm: str) -> bool:
        """Does a thread pass --tid/--thread/--cpu (each given one must)."""
        if self.cpus and cpu not in self.cpus:
            return False
        if self.tids and pid not in self.tids:
            return False
        if self.threads and not any(fnmatch.fnmatchcase(comm, g) for g in self.threads):
            return False
        return True


def kept_slots(flt: TraceFilter | None, threads: Mapping[int, tuple[int, str]],
               cpus: Iterable[int]) -> frozenset[int] | None:
    """The thread slots a filter keeps, when whole slots are all it keeps or drops
    (--tid, --thread, --cpu and nothing else): what filter_entries lets through is
    then those slots' entries as they are, which a native walk reads by feeding those
    slots only.  None when the filter does more (or nothing: no filter)."""
    if flt is None or not flt.threads_filtered or not _without_threads(flt).empty:
        return None
    return thread_slots(flt, threads, cpus)


def _without_threads(flt: TraceFilter) -> TraceFilter:
    """``flt`` less --tid/--thread/--cpu (which a native walk applies by the slots it
    is fed)."""
    return replace(flt, tids=frozenset(), threads=(), cpus=frozenset())


def native_split(flt: TraceFilter, source, *, graph: bool, time_in_ns: bool = True
                 ) -> tuple[frozenset[int] | None, NativeFilter | None] | None:
    """How a native walk of ``source`` applies ``flt``: (the thread slots it is fed,
    None for all; the NativeFilter of the rest, None when nothing is left), or None
    when the rest is filter_entries' to do (native_filter)."""
    keep = thread_slots(flt, source.threads, source.cpus)
    rest = _without_threads(flt)
    if rest.empty:
        return keep, None
    filt = native_filter(rest, source, max(source.cpus, default=-1) + 1, graph=graph,
                         time_in_ns=time_in_ns)
    return None if filt is None else (keep, filt)


def thread_slots(flt: TraceFilter, threads: Mapping[int, tuple[int, str]],
                 cpus: Iterable[int]) -> frozenset[int] | None:
    """The thread slots --tid/--thread/--cpu keep (None: they are not given)."""
    if not flt.threads_filtered:
        return None
    return frozenset(c for c in set(cpus) | set(threads)
                     if flt.thread_ok(c, *threads.get(c, (0, "<...>"))))


# a symbol's answers in NativeFilter's table
_MATCH, _NOTRACE = 1, 2
_U64 = (1 << 64) - 1


class NativeFilter:
    """filter_entries' native twin on a walk's record blocks (_native_read.c's
    RecordFilter): ``f(slot, records, id base)`` gives the records that pass,
    ``f(slot, records, id base, payloads)`` them and their payloads (as the file
    encodes them), the filter keeping its per-slot state between calls as
    filter_entries does.  ``since``/``until``: the window a walk may leave the blocks
    outside of unread (TraceFile.record_blocks): not what comes before it when -F/-N
    are given, whose matches in it depend on the calls open when it starts."""

    def __init__(self, native, flt: TraceFilter, symbols: Mapping[int, tuple], nslots: int,
                 graph: bool, lo: int | None, hi: int | None) -> None:
        self._functions = function_matcher(flt.functions) if flt.functions else None
        self._notrace = function_matcher(flt.notrace) if flt.notrace else None
        self._symbols = symbols
        self._flags = self._table(max(symbols, default=0) + 1)
        # the window as record times (u64): a bound past them keeps all or none
        none = (hi is not None and hi < 0) or (lo is not None and lo > _U64)
        self._rf = native.RecordFilter(
            nslots, self._flags, self._functions is not None, self._notrace is not None,
            graph, min(max(lo or 0, 0), _U64), hi if hi is None or 0 <= hi <= _U64 else
            (None if hi > _U64 else 0), none, flt.max_depth if graph else 0,
            flt.thresh_ns if graph else 0)
        self.since = lo if self._functions is None and self._notrace is None else None
        self.until = hi

    def _table(self, n: int) -> bytearray:
        """Each symbol id's -F/-N answers (ids with no symbol named 0x.., as the
        entries name them)."""
        from .registry import name_of
        t = bytearray(n)
        functions, notrace = self._functions, self._notrace
        if functions is None and notrace is None:
            return t
        for ip in range(n):
            name = name_of(ip, self._symbols)
            t[ip] = ((_MATCH if functions is not None and functions(name) else 0)
                     | (_NOTRACE if notrace is not None and notrace(name) else 0))
        return t

    def __call__(self, slot: int, records: bytes, base: int, *payloads: bytes):
        out = self._rf.filter(slot, records, base, *payloads)
        while isinstance(out, int):
            # an id past the table: a longer one, and the block again
            self._flags = self._table(max(out + 1, 2 * len(self._flags)))
            self._rf.grow(self._flags)
            out = self._rf.filter(slot, records, base, *payloads)
        return out


def native_filter(flt: TraceFilter, source, nslots: int, *, graph: bool,
                  time_in_ns: bool = True) -> NativeFilter | None:
    """A NativeFilter of ``flt`` for a walk fed ``source``'s record blocks (a
    TraceFile, TraceSet or TraceSource: ``record_blocks``, ``symbols``, ``lost``,
    ``first_time``).  --tid/--thread/--cpu are not its business (``thread_slots``: the
    walk is fed the slots they keep).  None when filter_entries must do it: no native
    twin, an asyncio --task filter (task_view.py applies it to entries), or a trace
    that lost records (where a loss marker goes when the records after it are left out
    is the entry stream's to say)."""
    from .. import _env
    native = _env.native()
    if native is None or flt.tasks or source.lost():
        return None
    lo = hi = None
    if flt.time_from is not None or flt.time_to is not None:
        # relative times count from the trace's first record, whichever thread's
        first_ts = _first_time(source)
        lo = _bound(flt.time_from, first_ts, time_in_ns, graph, False)
        hi = _bound(flt.time_to, first_ts, time_in_ns, graph, True)
    return NativeFilter(native, flt, source.symbols, nslots, graph, lo, hi)


def _first_time(source) -> int:
    """The time of a trace's first record: from its index, or its blocks' first."""
    t = source.first_time()
    if t is not None:
        return t
    return min((rec[0] for rec in map(_first_record, _slot_blocks(source)) if rec),
               default=0)


def _slot_blocks(source) -> Iterator:
    """Each thread slot's record blocks (one iterator per slot)."""
    for cpu in source.cpus:
        yield source.record_blocks(cpu)


def _first_record(blocks) -> tuple | None:
    """The first record of a slot's blocks (ts, ...), or None."""
    try:
        for _cpu, _lost, records, _base in blocks:
            if len(records) >= RECORD_SIZE:
                return struct.unpack_from(FORMAT, records)
    finally:
        blocks.close()
    return None


def filter_entries(entries: Iterable[TraceEntry | LostEvents], flt: TraceFilter | None, *,
                   graph: bool, time_in_ns: bool = True,
                   threads: Mapping[int, tuple[int, str]] | None = None
                   ) -> Iterator[TraceEntry | LostEvents]:
    """The entries of a time-ordered stream that ``flt`` lets through.

    graph       the trace is a function_graph trace (-F/-N select subtrees; -D and
                --thresh apply); else -F/-N select function hits
    time_in_ns  the trace clock counts ns (the window's seconds); else raw counts
    threads     thread slot -> (native id, name), to place LostEvents markers (which
                carry only a slot) before their thread's first entry is read; a
                marker of a slot not known either way is kept (nothing is lost
                silently)

    Entries whose depth -F changes are copies; the others are passed on as they are.
    """
    if flt is None or flt.empty:
        yield from entries
        return
    thread_keep: dict[int, bool] = {}
    if flt.threads_filtered and threads:
        for cpu, (pid, comm) in threads.items():
            thread_keep[cpu] = flt.thread_ok(cpu, pid, comm)
    check_threads = flt.threads_filtered
    functions = function_matcher(flt.functions) if flt.functions else None
    notrace = function_matcher(flt.notrace) if flt.notrace else None
    by_function = functions is not None or notrace is not None
    # per thread slot: [depth of the outermost open -F match or -1,
    #                   depth of the open -N call or -1]
    state: dict[int, list[int]] = {}
    windowed = flt.time_from is not None or flt.time_to is not None
    lo = hi = None
    first_ts: int | None = None
    max_depth, thresh = flt.max_depth, flt.thresh_ns

    e: TraceEntry | LostEvents | None           # None: -F/-N hid a graph entry
    for e in entries:
        if type(e) is LostEvents:
            if check_threads and not thread_keep.get(e.cpu, True):
                continue
            yield e
            continue
        if first_ts is None:
            # Relative times count from the trace's first event, whatever passes.
            first_ts = e.ts
            if windowed:
                lo = _bound(flt.time_from, first_ts, time_in_ns, graph, False)
                hi = _bound(flt.time_to, first_ts, time_in_ns, graph, True)
        if hi is not None and e.ts > hi:
            break                               # the stream is in time order
        cpu = e.cpu
        if check_threads:
            ok = thread_keep.get(cpu)
            if ok is None:
                ok = thread_keep[cpu] = flt.thread_ok(cpu, e.pid, e.comm)
            if not ok:
                continue
        typ = e.type
        if by_function:
            if typ == TRACE_FN:
                if notrace is not None and notrace(e.func):
                    continue
                if functions is not None and not functions(e.func):
                    continue
            elif graph:
                st = state.get(cpu)
                if st is None:
                    st = state[cpu] = [-1, -1]
                e = _graph_select(e, typ, st, functions, notrace)
                if e is None:
                    continue
        if lo is not None and e.ts < lo:
            continue
        if graph and (typ == TRACE_GRAPH_ENT or typ == TRACE_GRAPH_RET):
            if max_depth and e.depth >= max_depth:
                continue
            if thresh and (typ == TRACE_GRAPH_ENT or e.rettime - e.calltime < thresh):
                continue
        yield e


def _at_depth(e: TraceEntry, depth: int) -> TraceEntry:
    """A copy of a graph entry at another depth, made field by field (-F copies most
    entries of a deep trace, and dataclasses.replace was most of -F's cost)."""
    return TraceEntry(e.ts, e.cpu, e.comm, e.pid, e.type, e.func, e.parent, depth,
                      e.calltime, e.rettime, e.overrun, e.retval, e.has_retval, e.args,
                      e.text)


def _bound(b: TimeBound | None, first_ts: int, time_in_ns: bool, graph: bool,
           upper: bool) -> int | None:
    """A window's bound in ns.  A time as the report prints it (absolute, to the
    microsecond) stands for every entry printed with it: the function format rounds
    to the microsecond (ns2usecs), function_graph's abstime column cuts."""
    if b is None:
        return None
    v = b.ns(first_ts, time_in_ns)
    if b.relative or not time_in_ns or b.digits > 6:
        return v
    v -= v % _NS_PER_US
    if graph:
        return v + _NS_PER_US - 1 if upper else v
    return v + _NS_PER_US // 2 - 1 if upper else v - _NS_PER_US // 2


def _graph_select(e: TraceEntry, typ: int, st: list[int], functions, notrace
                  ) -> TraceEntry | None:
    """-F/-N on a function_graph entry, with its thread's state ``st`` ([match depth,
    hidden depth], -1 for none): the entry to show (a copy with its depth counted
    from the match), or None."""
    match_d, hide_d = st
    if typ == TRACE_GRAPH_ENT:
        d = e.depth
        # An entry at or above an open call's depth means that call's return was
        # lost: it is over.
        if hide_d >= 0 and d <= hide_d:
            hide_d = st[1] = -1
        if match_d >= 0 and d <= match_d:
            match_d = st[0] = -1
        if hide_d >= 0:
            return None
        if notrace is not None and notrace(e.func):
            st[1] = d
            return None
        if functions is None:
            return e
        if match_d < 0:
            if not functions(e.func):
                return None
            match_d = st[0] = d
        return _at_depth(e, d - match_d) if match_d else e
    if typ == TRACE_GRAPH_RET:
        d = e.depth
        if hide_d >= 0:
            if d >= hide_d:
                if d == hide_d:
                    st[1] = -1
                return None
            hide_d = st[1] = -1             # the hidden call's return was lost
        if notrace is not None and notrace(e.func):
            return None                     # a hidden call whose entry was not read
        if functions is None:
            return e
        if match_d >= 0 and d < match_d:
            match_d = st[0] = -1            # the matched call's return was lost
        if match_d < 0:
            if not functions(e.func):
                return None
            # the return of a matching call whose entry was not read
            return _at_depth(e, 0) if d else e
        if d == match_d:
            st[0] = -1
        return _at_depth(e, d - match_d) if match_d else e
    # events, markers, stacks: shown when the call they happen in is
    if hide_d >= 0:
        return None
    if functions is not None and match_d < 0:
        return None
    return e


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
