"""One self-contained HTML report: ``fntrace export FILE --format html``, ``fntrace view
FILE`` and ``fntrace diff A B --format html``.

A page that opens in any browser with no network: its script and styles are inline,
the trace's summary is a JSON island in it, and its Content-Security-Policy forbids
fetching anything at all.  It shows:

- a flame graph (an icicle: the outermost calls on top) of the whole run and of each
  thread -- click to zoom, search to highlight, hover for the calls, total, self,
  average and p99 of a frame and its ``file:line``;
- a timeline, one lane per thread, of the calls themselves: wheel to zoom, drag to
  pan;
- the function table (``fntrace stat``'s columns, sortable);
- with ``diff``: the NEW run's flame graph coloured by change (slower red, faster
  blue, new purple) and the table of the functions' changes.

What the file carries, and its bounds::

    flame graph   one node per distinct (thread, call path): calls, total ns, self ns
    timeline      the BAR_LIMIT longest calls of the trace, exact (a call's caller is
                  at least as long, so every kept call's callers are kept too); a
                  trace of fewer calls has every one.  Shorter calls are inside their
                  callers' bars, and the page says how many are not drawn.
    functions     one row per function (the stat walk's, with its distribution)

so the file grows with the program's distinct call paths and functions, not with its
calls: at BAR_LIMIT bars of about 40 bytes, the timeline stays under 10 MB however
long the trace, and the page parses and draws it in a second or two.

The walk is one pass over the calls: natively (_native_read.c's CallRows, the Parquet
table's walk) where the twin is built, else output/calls.py's CallBuilder.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources

from ..errors import FntraceError
from .calls import Call, CallBuilder
from .registry import Exporter, name_of, register_exporter

__all__ = ["HtmlExporter", "BAR_LIMIT", "report_data", "diff_data", "write_page",
           "thread_flames"]

# The timeline's bars: the longest calls, at most this many in a file.
BAR_LIMIT = 200_000
# Rows of the function table kept in the page (the rest are counted).
FUNCTION_LIMIT = 20_000


class _Profile:
    """What the walks make: the call paths, each thread's flame graph nodes and the
    timeline's calls."""

    def __init__(self, bar_limit: int = BAR_LIMIT, floor: int = 0) -> None:
        self.names: list[str] = []
        self.name_ids: dict[str, int] = {}
        # stack k: (parent stack, name id); stack 0 is the root (no call)
        self.stacks: list[tuple[int, int]] = [(0, -1)]
        self.by_names: dict[tuple[str, ...], int] = {(): 0}
        # (slot, stack) -> [calls, total ns, self ns]
        self.nodes: dict[tuple[int, int], list[int]] = {}
        self.bar_limit = bar_limit
        # the calls of at least ``floor`` ns: (dur, slot, start, depth, stack, complete,
        # task: 0 none, else tasks[task - 1])
        self.floor = floor
        self.bars: list[tuple[int, int, int, int, int, int, int]] = []
        self.incomplete = 0
        # the asyncio Tasks by name, and (task, stack) -> [calls, total ns, self ns] of
        # the calls each ran (a call's Task is the one its entry ran in)
        self.tasks: list[str] = []
        self.task_ids: dict[str, int] = {}
        self.task_nodes: dict[tuple[int, int], list[int]] = {}

    def task_id(self, name: str | None) -> int:
        if name is None:
            return 0
        i = self.task_ids.get(name)
        if i is None:
            self.tasks.append(name)
            i = self.task_ids[name] = len(self.tasks)
        return i

    def task_call(self, task: int, stack: int, dur: int, self_ns: int) -> None:
        node = self.task_nodes.get((task, stack))
        if node is None:
            self.task_nodes[task, stack] = [1, dur, self_ns]
        else:
            node[0] += 1
            node[1] += dur
            node[2] += self_ns

    def name_id(self, name: str) -> int:
        i = self.name_ids.get(name)
        if i is None:
            i = self.name_ids[name] = len(self.names)
            self.names.append(name)
        return i

    def stack_of(self, names: tuple[str, ...]) -> int:
        k = self.by_names.get(names)
        if k is None:
            parent = self.stack_of(names[:-1])
            k = self.by_names[names] = len(self.stacks)
            self.stacks.append((parent, self.name_id(names[-1])))
        return k

    def longest(self) -> None:
        """Keep the ``bar_limit`` longest calls (ties: the earlier, then the thread's
        and the depth's order, so that every walk keeps the same ones)."""
        if len(self.bars) > self.bar_limit:
            self.bars.sort(key=lambda b: (-b[0], b[2], b[1], b[3]))
            del self.bars[self.bar_limit:]

    @property
    def calls(self) -> int:
        return sum(n[0] for n in self.nodes.values())

    def span(self) -> tuple[int, int]:
        """The time the kept calls cover (the outermost calls are the longest: kept)."""
        if not self.bars:
            return 0, 0
        return (min(b[2] for b in self.bars), max(b[2] + b[0] for b in self.bars))


def _floor(rows: Iterable, limit: int) -> int:
    """The shortest duration the timeline needs, from the function rows' duration
    histograms: the calls of that many ns or more are the ``limit`` longest and those
    of one bucket (1/32 of a power of two wide) more; 0 when all fit."""
    from ..log_hist import hist_low
    hist: dict[int, int] = {}
    n = 0
    for r in rows:
        for i, k in (r.hist or {}).items():
            hist[i] = hist.get(i, 0) + k
            n += k
    if n <= limit:
        return 0
    seen = 0
    for i in sorted(hist, reverse=True):
        seen += hist[i]
        if seen >= limit:
            return hist_low(i)
    return 0


def _python_pass(source, prof: _Profile) -> None:
    """The calls by output/calls.py (the pure twin of the native walks); the asyncio
    Tasks by their switch events (output/task_view.py)."""
    from .entry import TRACE_EVENT, LostEvents
    from .task_view import EVENT as TASK_EVENT, SwitchPoints, task_of_text
    stack_of, nodes, bars, floor = prof.stack_of, prof.nodes, prof.bars, prof.floor
    switches = SwitchPoints()
    builder = CallBuilder()
    feed = builder.feed

    def take(c: Call) -> None:
        k = stack_of(c.stack)
        dur = c.end - c.start
        node = nodes.get((c.cpu, k))
        if node is None:
            nodes[c.cpu, k] = [1, dur, c.self_ns]
        else:
            node[0] += 1
            node[1] += dur
            node[2] += c.self_ns
        prof.incomplete += not c.complete
        task = switches.at(c.cpu, c.start) or 0 if switches.points else 0
        if task:
            prof.task_call(task, k, dur, c.self_ns)
        if dur >= floor:
            bars.append((dur, c.cpu, c.start, c.depth, k, int(c.complete), task))
            if len(bars) > 4 * prof.bar_limit:
                prof.longest()

    for e in source.entries():
        if type(e) is not LostEvents and e.type == TRACE_EVENT and e.func == TASK_EVENT:
            switches.add(e.cpu, e.ts, prof.task_id(task_of_text(e.text or "")))
        for c in feed(e):
            take(c)
    for c in builder.finish():
        take(c)


class _Paths(list):
    """A native walk's call paths (its trie: path k's parent and function id) as the
    profile's stacks: ``self[k]`` is path k's stack, -1 for the paths that are not a
    call's (a hit's, an event's, a marker's)."""

    def __init__(self, prof: _Profile, syms) -> None:
        super().__init__([0])
        self.prof, self.syms = prof, syms
        self.names: list[tuple[str, ...]] = [()]

    def grow(self, new: Iterable[tuple[int, int]]) -> None:
        """Paths len(self), len(self) + 1 ... given as (parent, function id)."""
        names, stack_of, syms = self.names, self.prof.stack_of, self.syms
        for parent, ip in new:
            up = self[parent]
            if up < 0 or (parent == 0 and ip in _NOT_CALLS):
                self.append(-1)
                names.append(())
                continue
            names.append(names[parent] + (name_of(ip, syms),))
            self.append(stack_of(names[-1]))


def _native_nodes(native, source, prof: _Profile) -> bool:
    """Each thread's nodes by the stat walk of its records with stacks (the folded
    export's walk: self time and calls per call path); a node's total is its self
    time and its callees' totals.  False when a walk declines."""
    from .walk import canon_ids
    syms = source.symbols
    canon = canon_ids(syms)
    for slot in source.cpus:
        walk = native.StatWalk(False, canon, True)
        blocks = source.record_blocks(slot)
        try:
            for cpu, lost, records, ibase in blocks:
                if not walk.feed(cpu, records, lost, ibase):
                    return False
        finally:
            blocks.close()
        out = walk.finish()
        if out is None:
            return False
        made, incomplete = out
        prof.incomplete += incomplete
        ours = _Paths(prof, syms)
        ours.grow((parent, ip) for parent, ip, _, _ in made)
        total = [0] * (len(made) + 1)
        for i in range(len(made), 0, -1):       # callees come after their callers
            parent, _, self_ns, _ = made[i - 1]
            total[i] += self_ns
            total[parent] += total[i]
        for i, (_, _, self_ns, calls) in enumerate(made, 1):
            if ours[i] > 0 and calls:
                node = prof.nodes.setdefault((slot, ours[i]), [0, 0, 0])
                node[0] += calls
                node[1] += total[i]
                node[2] += self_ns
    return True


def _native_bars(native, source, prof: _Profile) -> bool:
    """The calls of at least prof.floor ns by the native walk of calls (CallRows, the
    Parquet table's); False when it declines the trace."""
    from .walk import Declined, canon_ids, drive
    syms = source.symbols
    nslots = max(set(source.cpus) | set(source.threads), default=-1) + 1
    from ..ring_buffer import text_parts
    from ..tracefile.blocks import dec_text
    from .task_view import EVENT as TASK_EVENT, task_of_text

    def on_event(marker: int, payload: bytes) -> tuple[int, int]:
        # (an event's name id is not needed: its rows are not calls)
        name, text = text_parts(dec_text(payload))
        if marker or name != TASK_EVENT:
            return 0, -1
        return 0, prof.task_id(task_of_text(text))
    rows = native.CallRows(nslots, canon_ids(syms), 65536, False, on_event)
    ours = _Paths(prof, syms)
    floor, bars, limit = prof.floor, prof.bars, 4 * prof.bar_limit
    try:
        for batch in drive(rows, source, nslots, payloads=True):
            n, b_slot, b_ts, b_dur, b_self, b_depth, b_path, b_complete = batch[:8]
            b_task = batch[10]
            ours.grow(rows.paths(len(ours)))
            dur = memoryview(b_dur).cast("q")
            task = memoryview(b_task).cast("i")
            path = memoryview(b_path).cast("i")
            if b_task.count(0) != len(b_task):     # calls run in asyncio Tasks
                self_ns = memoryview(b_self).cast("q")
                for i in range(n):
                    k = ours[path[i]]
                    if task[i] > 0 and k > 0:
                        prof.task_call(task[i], k, dur[i], self_ns[i])
            picked = range(n) if not floor else [i for i in range(n) if dur[i] >= floor]
            if not picked:
                continue
            slot = memoryview(b_slot).cast("i")
            ts = memoryview(b_ts).cast("q")
            depth = memoryview(b_depth).cast("i")
            for i in picked:
                k = ours[path[i]]
                if k > 0:
                    bars.append((dur[i], slot[i], ts[i], depth[i], k, b_complete[i],
                                 max(task[i], 0)))
            if len(bars) > limit:
                prof.longest()
    except Declined:
        return False
    return True


# the first id of a hit's, an event's and a marker's path (read_stat.c.h's HIT_PATH,
# read_call_rows.c.h's EVENT_PATH and MARKER_PATH)
_NOT_CALLS = frozenset((0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD))


def _profile(source, rows: list, bar_limit: int = BAR_LIMIT) -> _Profile:
    from .. import _env
    floor = _floor(rows, bar_limit)
    native = _env.native()
    if native is not None and source.record_blocks() is not None:
        prof = _Profile(bar_limit, floor)
        if _native_nodes(native, source, prof) and _native_bars(native, source, prof):
            prof.longest()
            return prof
    prof = _Profile(bar_limit, floor)
    _python_pass(source, prof)
    prof.longest()
    return prof


def thread_flames(source) -> tuple[list[tuple[str, ...]], dict[tuple[int, int], list[int]]]:
    """Each thread's flame graph: (the call paths, each a tuple of names from the
    outermost call, path 0 the root; (thread slot, path) -> [calls, total ns, self ns]),
    by the native stat walk per thread where it can, else by the calls."""
    from .. import _env
    native = _env.native()
    prof = _Profile(0, 1 << 62)         # (no timeline: no call is that long)
    if native is None or source.record_blocks() is None or \
            not _native_nodes(native, source, prof):
        prof = _Profile(0, 1 << 62)
        _python_pass(source, prof)
    paths: list[tuple[str, ...]] = [()]
    for parent, nid in prof.stacks[1:]:
        paths.append(paths[parent] + (prof.names[nid],))
    return paths, prof.nodes


def _function_rows(source) -> list:
    """The stat walk's rows with their distribution (as ``fntrace stat`` counts them):
    natively where it can (the processes of a trace walked in forked children)."""
    from .stat import forked_stats, function_stats, walked_stats
    walked = None
    if source.record_blocks() is not None:
        if source.part_sizes() is not None:
            walked = forked_stats(source, lambda part: source.part_record_blocks(part),
                                  dist=True)
        if walked is None:
            walked = walked_stats(source.tf, dist=True)
    if walked is not None:
        return walked.rows
    return function_stats(source.entries(), graph=source.tracer == "function_graph",
                          dist=True)


def report_data(source, *, bar_limit: int = BAR_LIMIT) -> dict:
    """The page's data for one trace (the JSON island of the report)."""
    from .chrome_json import _process_name
    rows = _function_rows(source)
    prof = _profile(source, rows, bar_limit)
    places = source.places()
    t0, t1 = prof.span()
    rows.sort(key=lambda r: (-r.time, -r.hit, r.func))
    functions = []
    for r in rows[:FUNCTION_LIMIT]:
        file, line = places.get(r.func, ("", 0))
        functions.append([prof.name_id(r.func), r.hit, r.time, r.self_ns, r.avg,
                          r.percentile(50), r.percentile(99), r.max,
                          f"{file}:{line}" if file and file != "<built-in>" else file])
    # names and call paths in one order (A to Z), whichever walk made them: the same
    # trace always gives the same file
    paths: list[tuple[str, ...]] = [()]
    for parent, nid in prof.stacks[1:]:
        paths.append(paths[parent] + (prof.names[nid],))
    names = sorted(prof.names)
    name_at = {n: i for i, n in enumerate(names)}
    order = sorted(range(len(paths)), key=paths.__getitem__)     # () first, then A to Z
    path_at = [0] * len(paths)
    for i, k in enumerate(order):
        path_at[k] = i
    flat_stacks: list[int] = []
    for k in order:
        flat_stacks.extend((path_at[prof.stacks[k][0]], name_at[paths[k][-1]])
                           if k else (0, -1))
    for f in functions:
        f[0] = name_at[prof.names[f[0]]]
    threads = []
    slots = sorted({s for s, _ in prof.nodes} | set(source.threads))
    for s in slots:
        tid, tname = source.threads.get(s, (0, "<...>"))
        threads.append({"slot": s, "tid": tid, "name": tname, "pid": source.process_of(s)})
    nodes: dict[str, list[int]] = {}
    for (s, k), (calls, total, self_ns) in sorted(prof.nodes.items(),
                                                   key=lambda kv: (kv[0][0], path_at[kv[0][1]])):
        nodes.setdefault(str(s), []).extend((path_at[k], calls, total, self_ns))
    bars: dict[str, list[int]] = {}
    bar_tasks: dict[str, list[int]] = {}
    # the Tasks A to Z (a name may be met on several threads: one Task)
    task_order = sorted(range(len(prof.tasks)), key=prof.tasks.__getitem__)
    task_at = [0] * (len(prof.tasks) + 1)
    for i, t in enumerate(task_order, 1):
        task_at[t + 1] = i
    for dur, s, start, depth, k, complete, task in sorted(
            prof.bars, key=lambda b: (b[1], b[2], b[3], path_at[b[4]])):
        bars.setdefault(str(s), []).extend((start - t0, dur, depth, path_at[k], int(complete)))
        bar_tasks.setdefault(str(s), []).append(task_at[task])
    task_nodes: list[list[int]] = [[] for _ in task_order]
    for (task, k), (calls, total, self_ns) in sorted(
            prof.task_nodes.items(), key=lambda kv: (task_at[kv[0][0]], path_at[kv[0][1]])):
        task_nodes[task_at[task] - 1].extend((path_at[k], calls, total, self_ns))
    tasks = [{"name": prof.tasks[t], "nodes": task_nodes[i]} for i, t in enumerate(task_order)]
    header = source.header
    calls = prof.calls
    return {
        "version": 1,
        "title": _process_name(header, source.pid),
        "file": os.path.basename(source.name),
        "tracer": source.tracer,
        "argv": [str(a) for a in header.get("argv") or ()],
        "calls": calls,
        "incomplete": prof.incomplete,
        "lost": source.lost(),
        "functions_total": len(rows),
        "t0": t0,
        "span": t1 - t0,
        "threads": threads,
        "names": names,
        "stacks": flat_stacks,
        "nodes": nodes,
        "bars": bars,
        # per slot, each bar's Task (0: none, else tasks[n - 1]); only with Tasks
        "bar_tasks": bar_tasks if tasks else {},
        "tasks": tasks,
        "bars_dropped": calls - len(prof.bars),
        "bar_floor": min(b[0] for b in prof.bars) if calls > len(prof.bars) else 0,
        "functions": functions,
        "diff": None,
    }


def _stack_names(data: Mapping) -> list[tuple[str, ...]]:
    st, names = data["stacks"], data["names"]
    out: list[tuple[str, ...]] = [()]
    for k in range(1, len(st) // 2):
        out.append(out[st[2 * k]] + (names[st[2 * k + 1]],))
    return out


def _totals_by_stack(data: Mapping) -> dict[tuple[str, ...], int]:
    """Call path (names) -> total ns over every thread."""
    paths = _stack_names(data)
    out: dict[tuple[str, ...], int] = {}
    for flat in data["nodes"].values():
        for i in range(0, len(flat), 4):
            p = paths[flat[i]]
            out[p] = out.get(p, 0) + flat[i + 2]
    return out


def diff_data(base: dict, new: dict, base_name: str, new_name: str,
              changes: Iterable) -> dict:
    """The NEW run's page data with the BASE run's totals per call path (the flame
    graph's colours) and the functions' changes (output/diff.py's FuncDiff)."""
    base_totals = _totals_by_stack(base)
    paths = _stack_names(new)
    by_stack = [base_totals.get(p, -1) if p else 0 for p in paths]
    rows = []
    for d in changes:
        a, b = d.base, d.new
        rows.append([d.func, a.hit if a else 0, b.hit if b else 0, a.time if a else 0,
                     b.time if b else 0, a.self_ns if a else 0, b.self_ns if b else 0,
                     a.percentile(99) if a else 0, b.percentile(99) if b else 0,
                     0 if a is None else 1, 0 if b is None else 1])
    out = dict(new)
    out["diff"] = {"base": base_name, "new": new_name, "base_calls": base["calls"],
                   "base_span": base["span"], "by_stack": by_stack, "changes": rows}
    return out


def _json_island(data: Mapping) -> str:
    # "</" would end the script element early: escaped as JSON allows
    return json.dumps(data, ensure_ascii=True, separators=(",", ":")).replace("</", "<\\/")


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("html", name).read_text("utf-8")


def write_page(data: Mapping, out) -> None:
    """The page: the template with its script, styles and data inline."""
    page = _asset("report.html")
    title = f"fntrace: {data.get('title') or data.get('file')}"
    from html import escape
    parts = page.split("/*STYLE*/", 1)
    head, rest = parts[0], parts[1]
    js_at = rest.split("/*SCRIPT*/", 1)
    out.write(head.replace("<!--TITLE-->", escape(title)))
    out.write(_asset("report.css"))
    data_at = js_at[0].split("<!--DATA-->", 1)
    out.write(data_at[0])
    out.write(_json_island(data))
    out.write(data_at[1])
    out.write(_asset("report.js"))
    out.write(js_at[1])


class HtmlExporter(Exporter):
    name = "html"
    summary = "one self-contained HTML report: flame graph, timeline, function table"
    binary = False
    suffix = ".html"

    def write(self, source, out, options: Mapping[str, object]) -> dict | None:
        if source.tracer not in ("function_graph", "function"):
            raise FntraceError(f"a {source.tracer} trace has no function calls to show "
                             "(record with -p function_graph)")
        data = report_data(source)
        write_page(data, out)
        notes = list(_notes(data))
        return {"notes": notes} if notes else None


def _notes(data: Mapping) -> Iterator[str]:
    if data["bars_dropped"] and data["bar_floor"]:
        yield (f"timeline: the {BAR_LIMIT:,} longest calls are drawn; "
               f"{data['bars_dropped']:,} shorter ones (under {data['bar_floor']:,} ns) "
               "are inside their callers' bars")
    if data["tracer"] == "function":
        yield "a function tracer trace has no durations: the report shows its hits only"


register_exporter(HtmlExporter())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
