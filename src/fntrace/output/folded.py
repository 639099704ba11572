"""Folded stacks: ``fntrace export FILE --format folded [--weight time|calls]``.

Brendan Gregg's "collapsed stack" format, one line per distinct stack, the frames
outermost first, joined by ``;``, then a space and a count::

    __main__.main;shop.pricing.price_cart;shop.pricing.price_line 31
    __main__.main;shop.catalog.load_catalog 85

which flamegraph.pl, inferno-flamegraph and speedscope draw as a flame graph.

The count (``--weight``):

- ``time`` (the default): the stack's self time in microseconds -- the time spent in
  the innermost function itself, not in the functions it called -- summed over every
  call with that stack, then rounded to an integer.  A flame graph adds the counts of
  a frame's children to its own width, so the widths are the functions' total times.
  A stack whose self time rounds to 0 µs is left out (a flame graph cannot draw it;
  the command says how many); ``--weight calls`` keeps every stack.
- ``calls``: the number of calls made with that exact stack.

Stacks are not prefixed by the thread: the same code run by two threads (a thread
pool's workers) adds up in one tower, as a profile shows it; the roots still differ
when threads run different code (``__main__.main`` and ``Thread.run``...).  A call
whose return the trace does not hold counts up to where its thread's trace ends.

A function tracer trace (``-p function``) holds hits without durations: each hit is
a two-frame stack ``parent;func`` (``func`` alone when the caller is unknown),
weighted by calls whatever ``--weight`` says.

Memory: the export reads the trace once and keeps one counter per distinct stack
(and one open stack per thread), so it grows with the number of distinct call paths
of the program, not with the number of calls.  The lines are written sorted, so the
same trace always gives the same file.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .calls import CallBuilder
from .entry import TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, LostEvents
from .registry import Exporter, name_of, register_exporter
from .walk import canon_ids

__all__ = ["FoldedExporter", "WEIGHTS", "frame_name"]

WEIGHTS = ("time", "calls")

# The format's own separators cannot appear in a frame: ";" splits frames, and a
# newline ends the line (a space is fine: readers split the count at the last one).
_UNSAFE = str.maketrans({";": ":", "\n": " ", "\r": " "})


def frame_name(func: str) -> str:
    """A function name as a frame of a folded line."""
    return func.translate(_UNSAFE)


class FoldedExporter(Exporter):
    name = "folded"
    summary = "folded stacks (a;b;c N): flamegraph.pl, speedscope, inferno"
    binary = False
    suffix = ".folded"
    options = {"weight": "time"}

    def write(self, source, out, options: Mapping[str, object]) -> dict | None:
        weight = str(options.get("weight") or "time")
        if weight not in WEIGHTS:
            raise ValueError(f"weight {weight!r}: not one of {', '.join(WEIGHTS)}")
        notes: list[str] = []
        # stack (names outermost first) -> summed self ns, or number of calls
        totals: dict[tuple[str, ...], int] = {}
        get = totals.get
        builder = CallBuilder()
        feed = builder.feed
        by_time = weight == "time"
        hits = 0
        incomplete = 0
        walked = _walked_stacks(source)
        if walked is not None:
            totals = walked[0] if by_time else walked[2]
            incomplete, hits = walked[1], walked[3]
        for e in (() if walked is not None else source.entries()):
            if isinstance(e, LostEvents):
                # what was open on the thread ends where its records stop (calls.py)
                for c in feed(e):
                    incomplete += not c.complete
                    totals[c.stack] = get(c.stack, 0) + (c.self_ns if by_time else 1)
                continue
            typ = e.type
            if typ == TRACE_GRAPH_ENT or typ == TRACE_GRAPH_RET:
                for c in feed(e):
                    incomplete += not c.complete
                    totals[c.stack] = get(c.stack, 0) + (c.self_ns if by_time else 1)
            elif typ == TRACE_FN:
                hits += 1
                key = (e.parent, e.func) if e.parent else (e.func,)
                # Hits have no duration: counted as calls, kept apart from timed stacks.
                hit_key = ("\0hit",) + key
                totals[hit_key] = get(hit_key, 0) + 1
        for c in builder.finish():
            incomplete += not c.complete
            totals[c.stack] = get(c.stack, 0) + (c.self_ns if by_time else 1)

        timed = len(totals) - sum(1 for k in totals if k[0] == "\0hit")
        folded: dict[str, int] = {}
        dropped = 0
        for stack, n in totals.items():
            if stack[0] == "\0hit":
                stack = stack[1:]
            elif by_time:
                n = (n + 500) // 1000            # ns -> µs, rounded half up
                if n <= 0:
                    dropped += 1
                    continue
            # Two names may fold to one text (a ";" in a name): their lines add up.
            text = ";".join([frame_name(f) for f in stack])
            folded[text] = folded.get(text, 0) + n
        del totals
        for text in sorted(folded):
            out.write(f"{text} {folded[text]}\n")

        if hits and by_time:
            notes.append(f"{hits} function tracer hit(s) have no duration: weighted "
                         "by calls")
        if dropped:
            notes.append(f"{dropped} of {timed} stack(s) had under 0.5 us of self time "
                         "and are left out (--weight calls keeps them)")
        if incomplete:
            notes.append(f"{incomplete} call(s) had no return in the trace: counted up "
                         "to where their thread's trace ends")
        return {"notes": notes} if notes else None


def _walked_stacks(source) -> tuple[dict, int, dict, int] | None:
    """The walk above made natively (_native_read.c's StatWalk with stacks): (stack ->
    summed self ns, incomplete calls, stack -> calls, function tracer hits), a hit's
    stack ("\0hit", [caller,] function) counted in both; or None when the native twin
    is not there or declines the trace (records out of time order)."""
    from .. import _env
    if _env.native() is None:
        return None
    from ..tracefile.parallel import map_parts

    # a trace of several processes: its files walked at the same time, the stacks
    # added up (a stack is one thread's, and no thread is in two files)
    def work(part: int, progress: Callable[[int], None]):
        blocks = source.part_record_blocks(part)
        try:
            return _stacks_of(source.symbols, blocks, progress)
        finally:
            blocks.close()
    sizes = source.part_sizes()
    parts = None
    if sizes is not None:
        with source.parts_progress() as advance:
            parts = map_parts(sizes, work, advance)
    if parts is not None:
        by_time: dict[tuple[str, ...], int] = {}
        by_calls: dict[tuple[str, ...], int] = {}
        incomplete = hits = 0
        for t, inc, c, h in parts:
            for stack, n in t.items():
                by_time[stack] = by_time.get(stack, 0) + n
            for stack, n in c.items():
                by_calls[stack] = by_calls.get(stack, 0) + n
            incomplete += inc
            hits += h
        return by_time, incomplete, by_calls, hits
    blocks = source.record_blocks()
    if blocks is None:
        return None
    try:
        return _stacks_of(source.symbols, blocks)
    finally:
        blocks.close()


def _stacks_of(syms: Mapping[int, tuple], blocks: Iterable[tuple],
               progress: Callable[[int], None] | None = None
               ) -> tuple[dict, int, dict, int] | None:
    """_walked_stacks' answer from these blocks (``progress(n)``: n records read)."""
    from .. import _env
    native = _env.native()
    walk = native.StatWalk(False, canon_ids(syms), True)
    for cpu, lost, records, ibase in blocks:
        if progress is not None:
            progress(len(records) // 32)
        if not walk.feed(cpu, records, lost, ibase):
            return None
    out = walk.finish()
    if out is None:
        return None
    nodes, incomplete = out
    stacks: list[tuple[str, ...]] = [()]
    by_time: dict[tuple[str, ...], int] = {}
    by_calls: dict[tuple[str, ...], int] = {}
    hits = 0
    for parent, ip, self_ns, calls in nodes:
        stack = stacks[parent] + ("\0hit" if ip == _HIT_PATH else name_of(ip, syms),)
        stacks.append(stack)            # a path's parent is always made before it
        if calls:
            if stack[0] == "\0hit":
                hits += calls
                self_ns = calls         # (hits weigh as calls whatever the weight)
            by_time[stack] = self_ns
            by_calls[stack] = calls
    return by_time, incomplete, by_calls, hits


# the first id of a hit's path in StatWalk's stacks (read_stat.c.h's HIT_PATH)
_HIT_PATH = 0xFFFFFFFF


register_exporter(FoldedExporter())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
