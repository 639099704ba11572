"""The log-linear histogram of call durations: the one definition of its buckets, for
every Python part that keeps one (output/stat.py's walk, ``fntrace diff``, the function
profiler's ``options/profile-dist``); the native twin is native/log_hist.h.

Exact below 64 ns, then 32 buckets per power of two (uftrace's and HdrHistogram's
idea): a bucket is 1/32 of its lower end wide, so the middle of a bucket is within 1/64
(1.6%) of any duration in it::

    duration (ns)   0 .. 63        64 .. 127     128 .. 255    ...   2^e .. 2^(e+1)-1
    bucket          one per ns     32, 2 ns      32, 4 ns            32, 2^(e-5) ns

A histogram is a dict {bucket: calls} of the buckets used: a function whose calls vary
tenfold uses a few dozen.  The module imports nothing of fntrace's (it sits below
every layer).
"""
from __future__ import annotations

import math

__all__ = ["hist_index", "hist_value", "hist_low", "hist_percentile"]

# hist_index: exact below 2 << _SUB_BITS ns, then 1 << _SUB_BITS buckets per power of two
_SUB_BITS = 5
_SUB = 1 << _SUB_BITS
_SUB_MASK = _SUB - 1
_EXACT = _SUB << 1


def hist_index(d: int) -> int:
    """The histogram bucket of a duration of ``d`` ns (native/log_hist.h's hist_index).

    Below 64 ns a bucket per ns; above, the top six bits of ``d`` (its power of two and
    the next five): 32 buckets per power of two, each 1/32 of its lower end wide."""
    if d < _EXACT:
        return d if d > 0 else 0
    e = d.bit_length() - 1
    return ((e - _SUB_BITS + 1) << _SUB_BITS) | ((d >> (e - _SUB_BITS)) & _SUB_MASK)


def hist_low(i: int) -> int:
    """The shortest duration bucket ``i`` holds."""
    if i < _EXACT:
        return i
    e = (i >> _SUB_BITS) + _SUB_BITS - 1
    return (_SUB | (i & _SUB_MASK)) << (e - _SUB_BITS)


def hist_value(i: int) -> int:
    """The duration bucket ``i`` stands for: the middle of the ones it holds."""
    if i < _EXACT:
        return i
    e = (i >> _SUB_BITS) + _SUB_BITS - 1
    low = (_SUB | (i & _SUB_MASK)) << (e - _SUB_BITS)
    return low + ((1 << (e - _SUB_BITS)) >> 1)


def hist_percentile(hist: dict[int, int] | None, calls: int, least: int, most: int,
                    p: float) -> int:
    """ns: the ``p``-th percentile (0 < p <= 100) of ``calls`` durations kept in
    ``hist`` ({hist_index: calls}; ``least``, ``most``: the shortest and longest): the
    nearest rank's (the least duration at least p% of the calls took no longer than),
    the middle of its bucket, so within 1/64 of the exact one; exact below 64 ns and at
    either end.  0 without calls."""
    if not hist or not calls:
        return 0
    rank = max(1, math.ceil(calls * p / 100))
    if rank >= calls:
        return most
    seen = 0
    for i in sorted(hist):
        seen += hist[i]
        if seen >= rank:
            if i < _EXACT:
                return i
            return min(most, max(least, hist_value(i)))
    return most


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
