"""The function profiler's rows as ftrace.c prints them (function_stat_headers,
function_stat_show, function_stat_cmp): the text of ``trace_stat/functionN``.

With fgraph (always, unless every fgraph slot is taken: tracers/function_profile.py)::

      Function                               Hit    Time            Avg             s^2
      --------                               ---    ----            ---             ---
      mymod.parse                              200    104.253 us      0.521 us        0.011 us

``"  %-30.30s  %10lu"`` (the name cut to 30 characters, as the kernel cuts symbols), then
``"    "`` and three durations as trace_print_graph_duration() prints them, 4 spaces
apart: the total time, the average (integer ns division) and the variance s^2, in the
kernel's integer arithmetic::

    s^2 = (n * sum(x^2) - sum(x)^2) / (n * (n - 1) * 1000)     (0 when n < 2)

Dividing by 1000 only once turns ns^2 into "us^2 times 1000", which the duration
printer divides by 1000 again; so the s^2 column is microseconds squared (ftrace.c:
"Divide only by 1000 for ns^2 -> us^2 conversion").  The kernel's sums are 64-bit and
wrap for calls over ~4.3 s; fntrace's are exact.  A row whose average is below
``tracing_thresh`` is not shown.  Without fgraph only hits are kept: the two-column
header and ``"  %-30.30s  %10lu"`` rows.
"""
from __future__ import annotations

from ..log_hist import hist_percentile

__all__ = ["function_stat_headers", "function_stat_show", "function_stat_key",
           "function_stat_variance", "DIST_COLUMNS", "NAME_WIDTH"]

_HEADERS_GRAPH = ("  Function                               "
                  "Hit    Time            Avg             s^2\n"
                  "  --------                               "
                  "---    ----            ---             ---\n")
_HEADERS_HITS = ("  Function                               Hit\n"
                 "  --------                               ---\n")


# "%-30.30s": the kernel cuts a symbol to 30 characters (options/profile-wide: not cut)
NAME_WIDTH = 30

# options/profile-dist: the distribution's columns after s^2, and the calls' time less
# their callees' (fntrace's, not the kernel's)
DIST_COLUMNS = ("Min", "p50", "p90", "p99", "Max", "Self")


def function_stat_headers(graph: bool = True, dist: bool = False,
                          name_width: int = NAME_WIDTH) -> str:
    """function_stat_headers(): the header lines, with or without the time columns;
    ``dist``: with the distribution's (DIST_COLUMNS) after them; ``name_width``: the
    Function column's (options/profile-wide)."""
    if name_width == NAME_WIDTH and not dist:
        return _HEADERS_GRAPH if graph else _HEADERS_HITS
    w = name_width
    if not graph:
        return f"  {'Function':<{w}}  {'Hit':>10}\n  {'--------':<{w}}  {'---':>10}\n"
    top = f"  {'Function':<{w}}  {'Hit':>10}    {'Time':<12}    {'Avg':<12}    s^2"
    dash = f"  {'--------':<{w}}  {'---':>10}    {'----':<12}    {'---':<12}    ---"
    if dist:
        # (a row's first four columns: the name, the hits and three durations)
        top = f"{top:<{62 + w}}" + "".join(f"    {c:<12}" for c in DIST_COLUMNS)
        dash = f"{dash:<{62 + w}}" + "".join("    " + f"{'-' * len(c):<12}"
                                              for c in DIST_COLUMNS)
    return top.rstrip() + "\n" + dash.rstrip() + "\n"


def function_stat_key(graph: bool = True):
    """function_stat_cmp() as a sort key of an (ip, hits, time, time_squared) row: total
    time with fgraph, hits without."""
    return (lambda r: r[2]) if graph else (lambda r: r[1])


def function_stat_variance(counter: int, time: int, time_squared: int) -> int:
    """The s^2 column's value before the duration printer (ns^2 / 1000)."""
    denom = counter * (counter - 1) * 1000
    if not denom:
        return 0
    return (counter * time_squared - time * time) // denom


def function_stat_show(name: str, counter: int, time: int, time_squared: int, *,
                       graph: bool = True, tracing_thresh: int = 0,
                       dist: tuple[int, int, dict[int, int], int] | None = None,
                       name_width: int = NAME_WIDTH) -> str:
    """function_stat_show(): one row with its newline; "" for a row not shown (no hits:
    reset while it was read; or its average below tracing_thresh, in ns).  ``dist``:
    the calls' (shortest, longest, histogram, self time), shown after s^2
    (options/profile-dist).  ``name_width``: the Function column's, the name cut to it."""
    if counter == 0:
        return ""
    line = f"  {name[:name_width]:<{name_width}}  {counter:10d}"
    if not graph:
        return line + "\n"
    avg = time // counter
    if tracing_thresh and avg < tracing_thresh:
        return ""
    stddev = function_stat_variance(counter, time, time_squared)
    # the graph renderer loads when a table is first read, not with tracefs (which
    # every recording makes)
    from .function_graph import trace_print_graph_duration
    line += ("    " + trace_print_graph_duration(time) + "    "
             + trace_print_graph_duration(avg) + "    "
             + trace_print_graph_duration(stddev))
    if dist is not None:
        least, most, hist, self_ns = dist
        calls = sum(hist.values())
        for v in (least if calls else 0, hist_percentile(hist, calls, least, most, 50),
                  hist_percentile(hist, calls, least, most, 90),
                  hist_percentile(hist, calls, least, most, 99), most if calls else 0,
                  self_ns):
            line += "    " + trace_print_graph_duration(v)
    return line + "\n"


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
