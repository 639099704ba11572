"""What ``fntrace top`` shows: the function profiler's tables of a running program,
read each interval, as a table of rates.

The profiler (tracers/function_profile.py) counts from the moment it is enabled:
``trace_stat/functionN`` holds thread N's hits, time and, with ``options/profile-dist``,
the distribution and self time of each function, cumulative.  ``top`` reads every
table each interval and shows, per function, how many calls returned per second since
the last read beside the cumulative figures::

    read at t0          read at t1            shown at t1
    f: 100 hits         f: 160 hits           f: 60 / (t1 - t0) calls/s, 160 hits

With ``options/profile-wide`` the tables hold whole names (the kernel cuts a symbol to
30 characters), so two functions that share a long prefix stay apart.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal

__all__ = ["TopRow", "TopTable", "parse_function_stat", "format_ns", "TOP_SORT_KEYS",
           "top_lines"]

# a row of trace_stat/functionN with profile-dist: the name, the hits, then Time, Avg,
# s^2, Min, p50, p90, p99, Max and Self, each "N.NNN us" (trace_print_graph_duration)
_ROW = re.compile(r"^  (\S+)\s+(\d+)((?:\s+[\d.]+ us)*)\s*$")
_DUR = re.compile(r"([\d.]+) us")


def parse_function_stat(text: str) -> dict[str, tuple[int, ...]]:
    """A trace_stat/functionN table: name -> (hits, and the durations in ns in the
    order they print: time, avg, s^2 [, min, p50, p90, p99, max, self])."""
    out: dict[str, tuple[int, ...]] = {}
    for line in text.splitlines()[2:]:
        m = _ROW.match(line)
        if m is None:
            continue
        durs = [int(Decimal(d) * 1000) for d in _DUR.findall(m.group(3))]
        out[m.group(1)] = (int(m.group(2)), *durs)
    return out


@dataclass(slots=True)
class TopRow:
    """One function over the threads shown.

    rate   calls per second since the previous read
    hit    calls since top started
    time   ns in its calls (that returned)
    self   ns of that time not in the functions it called
    p99    ns, the 99th percentile of its calls' durations (of the busiest thread's
           table when several threads run it: percentiles do not add up)
    max    ns, its longest call
    """
    func: str
    rate: float = 0.0
    hit: int = 0
    time: int = 0
    self: int = 0
    p99: int = 0
    max: int = 0

    @property
    def avg(self) -> int:
        return self.time // self.hit if self.hit else 0


TOP_SORT_KEYS = ("rate", "hit", "time", "self", "avg", "p99", "max", "function")


class TopTable:
    """The tables read so far: ``update(tables, now)`` with each read, ``rows(threads)``
    for the functions of the threads asked for (None: all)."""

    def __init__(self) -> None:
        # thread slot -> name -> the row as last read; and as read the time before
        self.last: dict[int, dict[str, tuple[int, ...]]] = {}
        self.prev: dict[int, dict[str, tuple[int, ...]]] = {}
        self.at = self.prev_at = 0.0

    def update(self, tables: Mapping[int, str], now: float) -> None:
        self.prev, self.prev_at = self.last, self.at
        self.last = {cpu: parse_function_stat(text) for cpu, text in tables.items()}
        self.at = now

    def rows(self, threads: Iterable[int] | None = None) -> list[TopRow]:
        dt = self.at - self.prev_at if self.prev_at else 0.0
        keep = None if threads is None else set(threads)
        out: dict[str, TopRow] = {}
        busiest: dict[str, int] = {}
        for cpu, table in self.last.items():
            if keep is not None and cpu not in keep:
                continue
            before = self.prev.get(cpu, {})
            for func, v in table.items():
                r = out.get(func)
                if r is None:
                    r = out[func] = TopRow(func)
                hits = v[0]
                r.hit += hits
                if dt > 0:
                    r.rate += max(0, hits - before.get(func, (0,))[0]) / dt
                if len(v) >= 2:
                    r.time += v[1]
                if len(v) >= 10:
                    r.self += v[9]
                    r.max = max(r.max, v[8])
                    if hits > busiest.get(func, -1):
                        busiest[func] = hits
                        r.p99 = v[7]
        return list(out.values())


def sort_rows(rows: list[TopRow], key: str) -> list[TopRow]:
    if key == "function":
        return sorted(rows, key=lambda r: r.func)
    return sorted(rows, key=lambda r: (-getattr(r, key), r.func))


def format_ns(ns: int) -> str:
    if ns < 1000:
        return f"{ns} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f} us"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.2f} s"


_HEAD = f"{'CALLS/S':>10} {'HITS':>10} {'TOTAL':>10} {'SELF':>10} {'AVG':>10} {'P99':>10} {'MAX':>10}  FUNCTION"


def top_lines(rows: list[TopRow], *, sort: str = "rate", limit: int = 0) -> Iterator[str]:
    """The table as text (``fntrace top --batch``)."""
    rows = sort_rows(rows, sort)
    if limit:
        rows = rows[:limit]
    yield _HEAD
    for r in rows:
        yield (f"{r.rate:>10.1f} {r.hit:>10} {format_ns(r.time):>10} {format_ns(r.self):>10} "
               f"{format_ns(r.avg):>10} {format_ns(r.p99):>10} {format_ns(r.max):>10}  {r.func}")


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
