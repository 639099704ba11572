"""The index's columns: the rows being added in memory, the rest in a file.

A trace of 10^8 calls makes an index of 10^8 rows of about 50 bytes: kept in memory
it would need gigabytes, so the browser could only open traces a tenth of what
``record`` writes.  Each column is cut in chunks of ``1 << shift`` rows:

    rows  0          C          2C         3C              n
          [ chunk 0  ][ chunk 1  ][ chunk 2  ][ tail ...    )
               |           |           |          array: rows are added here
               v           v           v
          the spill file  the cache (every column of the index shares it,
          (pread/pwrite)  least recently used out first, at most `budget` bytes)

A full tail becomes a chunk in the cache; a chunk is written to the index's temporary
file only when the cache has no room for it, so an index that fits in the budget never
touches the disk, and one that does not keeps the budget (a chunk read back comes
through the page cache, which is not this process's memory).  A chunk that holds only
the column's ``fill`` value (the argument texts of a trace without arguments) is
neither cached nor written.  A value set in a chunk (a call that closes long after it
was entered) goes to the chunk in the cache, read back first if it is not there; a
chunk changed since it was written is written again when it leaves the cache.

The index is added to by its builder thread and read by the browser's: a column's
tail and its first row are one tuple, replaced whole when the tail is full, so a
reader always sees rows where they are.
"""
from __future__ import annotations

import os
import tempfile
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

__all__ = ["CACHE_BYTES", "CHUNK_SHIFT", "Column", "Spill"]

#: Rows of a chunk (as a shift): 16,384 rows, 64 KB of an int column.
CHUNK_SHIFT = 14
#: Bytes of chunks an index keeps in memory.
CACHE_BYTES = 32 << 20

# where a chunk is: a file offset (>= 0), or one of these
_CACHED = -1        # only in the cache (not written yet)
_FILL = None        # every value is the column's fill: nothing kept


class Spill:
    """The cache and the file an index's columns share."""

    def __init__(self, budget: int = CACHE_BYTES, shift: int = CHUNK_SHIFT) -> None:
        self.budget = budget
        self.shift = shift
        self.rows = 1 << shift
        self._lock = threading.RLock()
        self._cache: OrderedDict[tuple[Column, int], array] = OrderedDict()
        self._dirty: set[tuple[Column, int]] = set()
        self._bytes = 0
        self._file: IO[bytes] | None = None
        self._end = 0
        self.written = 0        # bytes written to the file (chunks evicted)

    def close(self) -> None:
        with self._lock:
            self._cache.clear()
            self._dirty.clear()
            self._bytes = 0
            if self._file is not None:
                self._file.close()
                self._file = None

    def add(self, col: Column, k: int, chunk: array) -> None:
        """A column's new full chunk ``k`` (not on disk yet)."""
        with self._lock:
            key = (col, k)
            self._cache[key] = chunk
            self._dirty.add(key)
            self._bytes += len(chunk) * chunk.itemsize
            self._shrink(key)

    def get(self, col: Column, k: int) -> array:
        """Chunk ``k`` of ``col`` (read back if it is not in the cache)."""
        with self._lock:
            key = (col, k)
            chunk = self._cache.get(key)
            if chunk is not None:
                self._cache.move_to_end(key)
                return chunk
            where = col.where[k]
            if where is _FILL:
                return col.fill_chunk()
            chunk = array(col.code)
            size = self.rows * chunk.itemsize
            f = self._file
            assert f is not None                # an offset: the file is made (_alloc)
            data = os.pread(f.fileno(), size, where)
            if len(data) != size:
                raise OSError(f"the index's spill file is short at {where}")
            chunk.frombytes(data)
            self._cache[key] = chunk
            self._bytes += size
            self._shrink(key)
            return chunk

    def set(self, col: Column, k: int, i: int, value: int) -> None:
        with self._lock:
            key = (col, k)
            chunk = self._cache.get(key)
            if chunk is None:
                if col.where[k] is _FILL:
                    chunk = col.fill_chunk()[:]
                    col.where[k] = _CACHED
                    self._cache[key] = chunk
                    self._bytes += len(chunk) * chunk.itemsize
                else:
                    chunk = self.get(col, k)
            chunk[i] = value
            self._dirty.add(key)
            self._shrink(key)

    def _shrink(self, keep: tuple[Column, int]) -> None:
        cache = self._cache
        while self._bytes > self.budget and len(cache) > 1:
            key, chunk = next(iter(cache.items()))
            if key == keep:
                cache.move_to_end(key)
                continue
            del cache[key]
            size = len(chunk) * chunk.itemsize
            if key in self._dirty:
                col, k = key
                where = col.where[k]
                if where is _FILL or where < 0:
                    where = self._alloc(size)
                f = self._file
                assert f is not None            # an offset: the file is made (_alloc)
                os.pwrite(f.fileno(), chunk.tobytes(), where)
                self.written += size
                col.where[k] = where
                self._dirty.discard(key)
            self._bytes -= size

    def _alloc(self, size: int) -> int:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="fntrace-index-")
        where = self._end
        self._end += size
        return where


class Column:
    """One column of a thread's rows: ints of array ``code``, indexed by row."""

    __slots__ = ("code", "fill", "where", "_spill", "_state", "_fill")

    def __init__(self, spill: Spill, code: str, fill: int | None = None) -> None:
        self.code = code
        self.fill = fill
        self.where: list[int | None] = []      # per chunk: file offset, _CACHED or _FILL
        self._spill = spill
        self._state = (0, array(code))          # (first row of the tail, the tail)
        self._fill: array | None = None

    def fill_chunk(self) -> array:
        if self._fill is None:
            fill = self.fill
            assert fill is not None             # only a column with a fill has fill chunks
            self._fill = array(self.code, [fill]) * self._spill.rows
        return self._fill

    def __len__(self) -> int:
        base, tail = self._state
        return base + len(tail)

    def __repr__(self) -> str:
        return f"<Column {self.code!r} of {len(self)} rows>"

    # -- adding ---------------------------------------------------------------

    def append(self, v: int) -> None:
        tail = self._state[1]
        tail.append(v)
        if len(tail) == self._spill.rows:
            self._full()

    def extend(self, values: array | Iterable[int]) -> None:
        if not isinstance(values, array):
            values = array(self.code, values)
        i, m = 0, len(values)
        rows = self._spill.rows
        while i < m:
            tail = self._state[1]
            room = rows - len(tail)
            tail.extend(values if i == 0 and room >= m else values[i:i + room])
            i += room
            if len(tail) == rows:
                self._full()

    def frombytes(self, data: bytes) -> None:
        a = array(self.code)
        a.frombytes(data)
        self.extend(a)

    def extend_fill(self, n: int) -> None:
        """``n`` rows of the fill value."""
        rows = self._spill.rows
        fill = self.fill
        while n > 0:
            assert fill is not None             # asked of a column with a fill only
            room = rows - len(self._state[1])
            take = min(room, n)
            self.extend(array(self.code, [fill]) * take)
            n -= take

    def _full(self) -> None:
        base, tail = self._state
        k = base >> self._spill.shift
        # (arrays of one type compare as memory: a tenth of count()'s time)
        if self.fill is not None and tail == self.fill_chunk():
            self.where.append(_FILL)
        else:
            self.where.append(_CACHED)
            self._spill.add(self, k, tail)
        self._state = (base + len(tail), array(self.code))

    # -- reading and setting ----------------------------------------------------

    def __getitem__(self, r):
        if isinstance(r, slice):
            a, b, step = r.indices(len(self))
            out = array(self.code)
            for _, seg in self.segments(a, b):
                out.extend(seg)
            return out if step == 1 else out[::step]
        base, tail = self._state
        if r >= base:
            return tail[r - base]
        if r < 0:
            r += base + len(tail)
            if r >= base:
                return tail[r - base]
            if r < 0:
                raise IndexError("row out of range")
        sp = self._spill
        return sp.get(self, r >> sp.shift)[r & (sp.rows - 1)]

    def __setitem__(self, r: int, v: int) -> None:
        base, tail = self._state
        if r >= base:
            tail[r - base] = v
            return
        if r < 0:
            raise IndexError("row out of range")
        sp = self._spill
        sp.set(self, r >> sp.shift, r & (sp.rows - 1), v)

    def __iter__(self) -> Iterator[int]:
        for _, seg in self.segments(0, len(self)):
            yield from seg

    def __bytes__(self) -> bytes:
        return self[:].tobytes()

    def segments(self, a: int, b: int) -> Iterator[tuple[int, array]]:
        """Rows a..b-1 as (first row, values) pieces, each a copy, in order."""
        sp = self._spill
        r = a
        while r < b:
            base, tail = self._state
            if r >= base:
                yield r, tail[r - base:b - base]
                return
            k = r >> sp.shift
            lo = k << sp.shift
            hi = min(lo + sp.rows, b)
            yield r, sp.get(self, k)[r - lo:hi - lo]
            r = hi

    def index(self, v: int, start: int = 0, stop: int | None = None) -> int:
        """The first row in start..stop-1 holding ``v`` (ValueError: none)."""
        stop = len(self) if stop is None else stop
        for r0, seg in self.segments(start, stop):
            try:
                return r0 + seg.index(v)
            except ValueError:
                pass
        raise ValueError(f"{v} is not in the column")

    def rindex(self, v: int, stop: int) -> int:
        """The last row before ``stop`` holding ``v`` (-1: none)."""
        step = self._spill.rows
        while stop > 0:
            lo = max(0, stop - step)
            seg = self[lo:stop]
            seg.reverse()
            try:
                return stop - 1 - seg.index(v)
            except ValueError:
                stop = lo
        return -1

    def find_any(self, values: set[int], start: int, stop: int,
                 reverse: bool = False) -> int:
        """The first (last, with ``reverse``) row in start..stop-1 holding one of
        ``values`` (-1: none)."""
        if not values or start >= stop:
            return -1
        if reverse:
            rows = self._spill.rows
            hi = stop
            while hi > start:
                lo = max(start, ((hi - 1) // rows) * rows)
                seg = self[lo:hi]
                seg.reverse()
                at = _first_of(seg, values)
                if at >= 0:
                    return hi - 1 - at
                hi = lo
            return -1
        for r0, seg in self.segments(start, stop):
            at = _first_of(seg, values)
            if at >= 0:
                return r0 + at
        return -1


def _first_of(seg: array, values: set[int]) -> int:
    if len(values) <= 8:
        hits = []
        for v in values:
            try:
                hits.append(seg.index(v))
            except ValueError:
                pass
        return min(hits) if hits else -1
    return next((j for j, f in enumerate(seg) if f in values), -1)
