"""Chrome trace JSON (the Trace Event Format): ``fntrace export FILE --format chrome``.

The format chrome://tracing, Perfetto's UI and speedscope read::

    {"displayTimeUnit":"ns","traceEvents":[
    {"ph":"M","name":"process_name","pid":P,"tid":P,"args":{"name":"shop_demo.py"}},
    {"ph":"M","name":"thread_name","pid":P,"tid":T,"args":{"name":"MainThread"}},
    {"ph":"X","name":"shop.cart.Cart.add_item","cat":"function","ts":45195.251,"dur":0.982,
     "pid":P,"tid":T,"args":{"args":{"quantity":"3"},"retval":"None"}},
    {"ph":"i","s":"t","name":"leaf","cat":"event","ts":...,"pid":P,"tid":T,"args":{...}},
    ...
    ],
    "otherData":{"tracer":"function_graph",...}}

- a function_graph call is a complete event (``ph: "X"``): ``ts`` and ``dur`` in
  microseconds with the nanoseconds as three decimals (written exactly, not through a
  float), the arguments (``args.args``) and return value (``args.retval``) when they
  were recorded; a call the trace does not hold whole says so (``args.incomplete``:
  no return was read, the slice ends where its thread's trace ends;
  ``args.entry_lost``: made from its return alone);
- ``--min-duration USEC`` leaves out the calls shorter than that (``otherData`` counts
  them: ``calls_left_out``), for a file a browser opens at once; a call's callers are
  at least as long, so what is kept still nests;
- a function tracer hit (no duration to show) is a thread-scoped instant (``ph: "i"``)
  named after the function, its caller in ``args.parent``;
- dynamic and static events, trace markers, stack traces and lost-event notices are
  instants too (``cat`` event, marker, stack, lost);
- the traced process is one ``pid`` (its process id) and each thread one ``tid`` (its
  native thread id), named by ``process_name`` / ``thread_name`` metadata events and
  ordered by ``thread_sort_index`` (the thread slot, fntrace's CPU column).

Timestamps are the trace's own clock (``fntrace report`` prints the same values as
seconds), so an instant in this file and a line of the report can be matched.

The export streams: calls are written as they end (output/calls.py keeps each
thread's open stack, nothing more), every other entry as it is read, so a trace of any
size goes through in the memory of its deepest stack.  The events are therefore in
the order calls end, not sorted by ``ts``; every reader of the format sorts them.

speedscope names a frame by its event name *and* its ``args`` (speedscope issue
#201), so a trace recorded with arguments (``-A``/``-R``) shows one frame per distinct
argument list there; its folded-stack export (``--format folded``) is the one to open
in speedscope for such a trace.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from .calls import Call, CallBuilder
from .entry import (
    LOST_EVENTS_UNKNOWN, TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET,
    TRACE_PRINT, TRACE_STACK, LostEvents,
)
from .registry import Exporter, register_exporter

__all__ = ["ChromeJsonExporter", "format_us"]

# Integers beyond this lose precision in a JavaScript number: written as strings.
_JS_SAFE_INT = (1 << 53) - 1


def format_us(ns: int) -> str:
    """``ns`` nanoseconds as a JSON number of microseconds, exactly (``1234`` ->
    ``1.234``): a float would round the nanoseconds of a large monotonic time."""
    if ns < 0:
        return "-" + format_us(-ns)
    us, rest = divmod(ns, 1000)
    return f"{us}.{rest:03d}" if rest else str(us)


def _dumps(obj: object) -> str:
    # ASCII: a name or repr that cannot be encoded (a lone surrogate) cannot fail the write.
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":"))


def _retval(v: object) -> object:
    """A recorded return value as a JSON value: an int as a number when JavaScript
    holds it exactly, anything else as the text the report prints."""
    if isinstance(v, bool) or not isinstance(v, int):
        return str(v)
    return v if -_JS_SAFE_INT <= v <= _JS_SAFE_INT else str(v)


def _process_name(header: Mapping[str, object], pid: int) -> str:
    argv = header.get("argv")
    if isinstance(argv, (list, tuple)) and argv:
        words = [str(a) for a in argv]
        if words[0] == "-m" and len(words) > 1:
            return f"python -m {words[1]}"
        if words[0] == "-c":
            return "python -c"          # (the code itself is in otherData.argv)
        return os.path.basename(words[0]) or words[0]
    return f"python ({pid})" if pid else "python"


class _Writer:
    """Writes events one by one between the fixed opening and closing of the file."""

    __slots__ = ("out", "first", "names", "pid", "pids")

    def __init__(self, out, pid: int, pids: dict[int, int] | None = None) -> None:
        self.out = out
        self.first = True
        # function name -> its JSON string: one per function (not for markers' texts,
        # which are as many as the markers)
        self.names: dict[str, str] = {}
        self.pid = pid
        # thread id -> its process, where a trace followed several processes
        self.pids = pids or {}

    def raw(self, text: str) -> None:
        self.out.write(text if self.first else ",\n" + text)
        self.first = False

    def name(self, s: str) -> str:
        j = self.names.get(s)
        if j is None:
            j = self.names[s] = _dumps(s)
        return j

    def metadata(self, what: str, tid: int, args: Mapping[str, object],
                 pid: int | None = None) -> None:
        if pid is None:
            pid = self.pids.get(tid, self.pid)
        self.raw(f'{{"ph":"M","name":"{what}","pid":{pid},"tid":{tid},'
                 f'"args":{_dumps(args)}}}')

    def instant(self, name: str, cat: str, ts: int, tid: int,
                args: Mapping[str, object] | None) -> None:
        tail = f',"args":{_dumps(args)}}}' if args else "}"
        jname = self.name(name) if cat == "function" or cat == "event" else _dumps(name)
        self.raw(f'{{"ph":"i","s":"t","name":{jname},"cat":"{cat}",'
                 f'"ts":{format_us(ts)},"pid":{self.pids.get(tid, self.pid)},"tid":{tid}{tail}')

    def call(self, c: Call) -> None:
        if c.args or c.has_retval or not c.complete or not c.entry_seen:
            args: dict[str, object] = {}
            if c.args:
                args["args"] = dict(c.args)
            if c.has_retval:
                args["retval"] = _retval(c.retval)
            if not c.complete:
                args["incomplete"] = True
            if not c.entry_seen:
                args["entry_lost"] = True
            tail = f',"args":{_dumps(args)}}}'
        else:
            tail = "}"
        ts, dur = c.start, c.end - c.start
        if ts >= 0 and dur >= 0:        # format_us, inline: once per call
            s1, s2 = divmod(ts, 1000)
            d1, d2 = divmod(dur, 1000)
            times = f'"ts":{s1}.{s2:03d},"dur":{d1}.{d2:03d}'
        else:
            times = f'"ts":{format_us(ts)},"dur":{format_us(dur)}'
        text = (f'{{"ph":"X","name":{self.name(c.func)},"cat":"function",{times},'
                f'"pid":{self.pids.get(c.pid, self.pid) if self.pids else self.pid},'
                f'"tid":{c.pid}{tail}')
        if self.first:
            self.first = False
            self.out.write(text)
        else:
            self.out.write(",\n" + text)


class ChromeJsonExporter(Exporter):
    name = "chrome"
    summary = "Chrome trace JSON: chrome://tracing, Perfetto, speedscope"
    binary = False
    suffix = ".json"
    options: Mapping[str, object] = {"min_duration": 0.0}

    # options: the command's values (min_duration a number), converted as read
    def write(self, source, out, options: Mapping[str, Any]) -> dict | None:
        min_ns = int(float(options.get("min_duration") or 0) * 1000)
        if min_ns < 0:
            raise ValueError("min_duration must be 0 or more")
        header = source.header or {}
        pid = int(source.pid or 0)
        procs = getattr(source, "processes", None) or [{"pid": pid,
                                                        "argv": header.get("argv")}]
        pids = ({tid: source.process_of(slot) for slot, (tid, _) in source.threads.items()}
                if len(procs) > 1 else None)
        w = _Writer(out, pid, pids)
        out.write('{"displayTimeUnit":"ns","traceEvents":[\n')

        for pr in procs:
            ppid = int(pr.get("pid") or 0)
            w.metadata("process_name", ppid,
                       {"name": _process_name({"argv": pr.get("argv")}, ppid)}, ppid)
        named: set[int] = set()

        def name_thread(tid: int, tname: str, slot: int) -> None:
            named.add(tid)
            w.metadata("thread_name", tid, {"name": tname})
            w.metadata("thread_sort_index", tid, {"sort_index": slot})

        for slot, (tid, tname) in sorted(source.threads.items()):
            if tid not in named:
                name_thread(tid, tname, slot)

        builder = CallBuilder()
        feed = builder.feed
        last = {slot: (0, tid) for slot, (tid, _) in source.threads.items()}  # slot -> ts, tid
        pending_lost: dict[int, int] = {}   # slot -> events lost before its next entry
        uncounted: set[int] = set()         # slots with a loss of unknown size pending
        n_calls = n_incomplete = n_instants = lost_total = n_short = 0
        lost_any_uncounted = False

        def lost_instant(slot: int, ts: int, tid: int) -> None:
            args: dict[str, object] = {"lost": pending_lost.pop(slot)}
            if slot in uncounted:
                uncounted.discard(slot)
                args["at_least"] = True     # the buffer only knew that it dropped some
            w.instant("lost events", "lost", ts, tid, args)

        def put_calls(calls: Iterable[Call]) -> None:
            nonlocal n_calls, n_incomplete, n_short
            for c in calls:
                if c.end - c.start < min_ns:
                    n_short += 1
                    continue
                n_calls += 1
                n_incomplete += not c.complete
                w.call(c)

        walked = _native_calls(source, out, pid, pids, min_ns)
        for e in (source.entries() if walked is None else ()):
            if isinstance(e, LostEvents):
                # Shown at the next entry of that thread: the kernel reports a CPU's
                # lost events with the next event read from it.
                pending_lost[e.cpu] = pending_lost.get(e.cpu, 0) + max(e.lost, 0)
                if e.lost == LOST_EVENTS_UNKNOWN:
                    uncounted.add(e.cpu)
                    lost_any_uncounted = True
                else:
                    lost_total += e.lost
                continue
            tid, ts, typ = e.pid, e.ts, e.type
            if tid not in named:        # a thread the header does not list
                name_thread(tid, e.comm, e.cpu)
            last[e.cpu] = (ts, tid)
            if pending_lost and e.cpu in pending_lost:
                lost_instant(e.cpu, ts, tid)
                n_instants += 1
            if typ == TRACE_GRAPH_ENT or typ == TRACE_GRAPH_RET:
                put_calls(feed(e))
                continue
            n_instants += 1
            if typ == TRACE_FN:
                args: dict[str, object] = {}
                if e.parent:
                    args["parent"] = e.parent
                if e.args:
                    args["args"] = dict(e.args)
                w.instant(e.func, "function", ts, tid, args)
            elif typ == TRACE_EVENT:
                w.instant(e.func, "event", ts, tid, {"fields": e.text} if e.text else None)
            elif typ == TRACE_PRINT:
                w.instant(e.text.rstrip("\n") or "trace_marker", "marker", ts, tid,
                          {"writer": e.func} if e.func else None)
            elif typ == TRACE_STACK:
                w.instant("stack trace", "stack", ts, tid,
                          {"stack": e.text.split("\n") if e.text else []})
            else:
                w.instant(e.func or f"entry type {typ}", "other", ts, tid,
                          {"text": e.text} if e.text else None)
        put_calls(builder.finish())
        for slot in sorted(pending_lost):
            # Lost at the very end of a thread's buffer: no entry follows to carry it.
            ts, tid = last.get(slot, (0, 0))
            lost_instant(slot, ts, tid)
            n_instants += 1

        if walked is not None:
            n_calls, n_incomplete, n_instants, lost_total, n_short = walked

        other = {
            "source": "fntrace",
            "trace_file": os.path.basename(str(source.name or "")),
            "tracer": source.tracer,
            "trace_clock": source.trace_clock,
            "pid": pid,
            "argv": [str(a) for a in header.get("argv") or []],
            "start_wall": header.get("start_wall"),
            "calls": n_calls,
            "calls_left_out": n_short,
            "min_duration_ns": min_ns,
            "incomplete_calls": n_incomplete,
            "instants": n_instants,
            "lost_events": lost_total,
            "lost_events_all_counted": not lost_any_uncounted,
            "truncated": bool(source.truncated),
        }
        out.write(f'\n],\n"otherData":{_dumps(other)}}}\n')

        notes = []
        if n_short:
            notes.append(f"{n_short} call(s) shorter than {min_ns / 1000:g} us left out "
                         "(--min-duration)")
        if n_incomplete:
            notes.append(f"{n_incomplete} call(s) had no return in the trace: their "
                         "slices end where the thread's trace ends (args.incomplete)")
        if lost_total or lost_any_uncounted:
            how = f"at least {lost_total}" if lost_any_uncounted else str(lost_total)
            notes.append(f"{how} event(s) were lost while recording: see the "
                         "'lost events' instants")
        return {"notes": notes} if notes else None


def _native_calls(source, out, pid: int, pids: dict[int, int] | None, min_ns: int = 0
                  ) -> tuple[int, int, int, int, int] | None:
    """The loop above for a trace of calls (graph entries and returns, with their
    arguments and return values as text or 64-bit ints, markers and events with their
    text) or of function tracer hits (with their arguments' text), made natively
    (_native_read.c's ChromeCalls) and written to ``out``: (calls, incomplete calls,
    instants, lost events, calls shorter than ``min_ns`` left out).  None, with nothing written, when there is no native twin or
    the trace holds more than that (stack traces, values kept as JSON, a thread the
    header does not name): the loop above writes it."""
    from .walk import canon_ids, drive, native_for_calls
    walkable = native_for_calls(source, values=True, hits=True, events=True)
    if walkable is None:
        return None
    native, slots = walkable
    threads = source.threads
    if not slots.issubset(threads):
        return None         # a thread named at its first entry: the loop above does it
    nslots = max(slots | set(threads), default=-1) + 1
    tails = {}
    for slot in range(nslots):
        tid = threads.get(slot, (0, ""))[0]
        tails[slot] = f'"pid":{(pids or {}).get(tid, pid)},"tid":{tid}'
    syms = source.symbols
    names = {ip: _dumps(sym[0]) for ip, sym in syms.items()}
    calls = native.ChromeCalls(nslots, names, canon_ids(syms), tails, True, min_ns)
    write = out.write
    for text in drive(calls, source, nslots, payloads=True):
        write(text)
    return calls.counts()


register_exporter(ChromeJsonExporter())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
