"""What the native reading walks (_native_read.c) share on the Python side: the ids a
walk pairs and counts as one, the check that a trace is one of calls, and the loop that
feeds a time-ordered walk the blocks it asks for.

A walk reads ``record_blocks()`` of a trace source (TraceFile, TraceSet, TraceSource):
each chunk's records decoded, with the records its buffer lost before them.  The views
that use one keep their Python loop as the twin and the reference: a walk that is not
there (FNTRACE_PURE=1, no build) or declines a trace leaves the view to it.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol

    class BlockFilter(Protocol):
        """What a walk's blocks may go through: filters.py's NativeFilter (not
        imported: filters.py imports the renderers, which import this module)."""
        since: int | None
        until: int | None

        def __call__(self, slot: int, records: bytes, base: int,
                     *payloads: bytes) -> Any: ...

__all__ = ["canon_ids", "calls_only", "drive", "native_for_calls", "Verdict", "Declined"]


class Declined(Exception):
    """A walk that looks at each record as it reads it (CallRows) read one it does not
    take, or was fed payloads it cannot read: its Python twin makes the rest
    (output/parquet.py)."""


def canon_ids(symbols: Mapping[int, tuple]) -> dict[int, int] | None:
    """id -> the first id of its name, for the ids that share a name with another (a
    function defined again, several processes): the Python views key by name, the walks
    by id.  None when no two ids share a name."""
    first: dict[str, int] = {}
    canon = {}
    for ip, sym in symbols.items():
        ip0 = first.setdefault(sym[0], ip)
        if ip0 != ip:
            canon[ip] = ip0
    return canon or None


def calls_only(source, text_ok: Callable[..., bool], payloads: bool = False
               ) -> set[int] | None:
    """The thread slots of a trace whose every block ``text_ok`` accepts (graph entries
    and returns, no payloads: a trace of calls; ``payloads``: it is given each block's
    payloads too, and says which it takes), read once; None when one is not, the
    source has no blocks (entries made in memory), or a block is damaged (the Python
    loop reads up to it and says so)."""
    from ..errors import TraceFileError
    blocks = source.record_blocks(None, True) if payloads else source.record_blocks()
    if blocks is None:
        return None
    slots: set[int] = set()
    try:
        for block in blocks:
            if not text_ok(block[2], *block[4:]):
                return None
            slots.add(block[0])
    except TraceFileError:
        return None
    finally:
        blocks.close()
    return slots


def native_for_calls(source, values: bool = False, hits: bool = False, events: bool = False):
    """(the native module, the thread slots) when a native walk may read ``source``: the
    twin is built and the trace is one of calls (``calls_only``; ``values``: the walk
    takes the arguments and return values recorded, as text or 64-bit ints, from the
    blocks' payloads; ``events``: and markers and events, with their text; ``hits``:
    and function tracer hits with their arguments' text); else None, and the view's
    Python loop reads it."""
    from .. import _env
    native = _env.native()
    if native is None:
        return None
    if hits and events:
        slots = calls_only(source, native.calls_hits_ok, True)
    elif hits:
        slots = calls_only(source, native.calls_or_hits_ok, True)
    elif events:
        slots = calls_only(source, native.graph_events_ok, True)
    elif values:
        slots = calls_only(source, native.graph_text_ok, True)
    else:
        slots = calls_only(source, native.text_ok)
    return None if slots is None else (native, slots)


class Verdict:
    """``native_for_calls(source, ...)`` worked out in a thread of its own while the
    caller goes on (the blocks' decoding and checks run without the GIL: the browser
    imports textual meanwhile); ``result()`` waits for it and gives it."""

    _out: tuple | None
    _error: BaseException | None

    def __init__(self, source, **kinds: bool) -> None:
        import threading
        self._out = self._error = None
        self._thread = threading.Thread(target=self._run, args=(source, kinds),
                                        name="fntrace-verdict", daemon=True)
        self._thread.start()

    def _run(self, source, kinds: dict) -> None:
        try:
            self._out = native_for_calls(source, **kinds)
        except BaseException as e:      # (the caller's to see, in its own thread)
            self._error = e

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out


def drive(walker, source, nslots: int,
          on_block: Callable[[int], None] | None = None,
          keep: frozenset[int] | None = None,
          filt: BlockFilter | None = None, payloads: bool = False) -> Iterator:
    """What a time-ordered walk (GraphText, ChromeCalls, CallRows) makes, step by step,
    each slot's next block fed when the walk asks for it (``on_block(n)``: a block of
    n records was fed); ``keep``: the slots read (the others are fed as empty: a
    --tid/--thread/--cpu filter); ``filt``: each block's records go through it first
    (output/filters.py's native_filter); ``payloads``: the walk is fed each block's
    payloads too.  Memory: the blocks the walk holds, about one per slot.  A walk
    whose feed says False, or whose step asks for slot -2, declines the trace from
    there on: Declined."""
    # the blocks of the filter's window only, where the file's index says which
    more = (payloads, filt.since, filt.until) if filt is not None else \
        (True,) if payloads else ()
    blocks = {k: source.record_blocks(k, *more) if keep is None or k in keep else iter(())
              for k in range(nslots)}
    step, feed = walker.step, walker.feed
    while True:
        item, need = step()
        if item:
            yield item
        if need == -2:
            raise Declined("a record the walk does not take")
        if need >= 0:
            block = next(blocks[need], None)
            if block is None:
                feed(need)
                continue
            if filt is None:
                took = feed(need, *block[1:])
            elif payloads:
                records, pay = filt(need, block[2], block[3], block[4])
                took = feed(need, block[1], records, block[3], pay)
            else:
                took = feed(need, block[1], filt(need, block[2], block[3]), block[3])
            if took is False:
                raise Declined(f"thread slot {need}: payloads the walk cannot read")
            if on_block is not None:
                on_block(len(block[2]) // 32)
        elif not item:
            return


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
