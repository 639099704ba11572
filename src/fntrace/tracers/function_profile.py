"""The function profiler (kernel/trace/ftrace.c, CONFIG_FUNCTION_PROFILER).

    echo 1 > function_profile_enabled    FunctionProfiler.set_enabled(True): every
                                         thread's table reset, the profiler registered
    echo 0 > function_profile_enabled    unregistered; the tables stay readable
    cat trace_stat/functionN             thread N's table (tracefs/trace_stat.py prints it
                                         with output/function_stat.py)

It profiles the functions the top level's set_ftrace_filter/set_ftrace_notrace select
(the kernel's ftrace_ops_set_global_filter), whatever tracer runs beside it.  Like the
kernel built with the graph tracer, it is an fgraph user (fprofiler_ops), one more beside
the function_graph tracer and fprobes:

    profile_graph_entry   function_profile_call(): one more hit of the function in the
                          thread's table; reserve {sub = 0, cpu0} on the shadow stack
    profile_graph_return  calltime = rettime - calltime; with options/sleep-time 0 the
                          thread's CPU time instead; with options/graph-time 0 the call's
                          whole time is added to its parent's sub and its own sub taken
                          off (its time without its children); then time += calltime,
                          time_squared += calltime^2.  (The kernel's reserved-data version
                          takes a sub of 0 to mean "no time": a leaf's time would be 0;
                          this keeps its ret_stack version's "sub < calltime".)

Per thread as the kernel is per CPU: one ProfileStat per thread index (the CPU column),
kept when the thread ends.  When all 16 fgraph slots are taken the profiler falls back to
a plain ops that counts hits only (the kernel without the graph tracer), and the files
show hits only.

options/profile-dist (fntrace's; 0 by default): each function's record also keeps its
calls' times as a distribution -- the shortest, the longest, and fntrace's log-linear
histogram (log_hist.py) -- and its self time (the calls' time less their callees', the
children's sums of graph-time 0 kept for it), and trace_stat/functionN shows Min, p50,
p90, p99, Max and Self after s^2.  Calls that return while it is 1 are counted; function_profile_enabled
starts every table anew, as it does the sums.

options/sleep-time: the kernel's excludes the time a task was scheduled out.  Here, with
sleep-time 0, a call's time is the CPU time its thread spent in it (the thread CPU
clock, time.thread_time_ns), so time blocked in sleep, I/O, a lock or waiting for the GIL
is left out.  A generator or coroutine suspended at a yield/await is left out either way:
fgraph makes each resume...yield a call of its own, so the time between is never in one.

The hot path has a native twin (native/function_profile.c.h): the entry and return
functions for fgraph's general path and, while the profiler is fgraph's only user, a
pair for fgraph's fast lane, which keeps sub and cpu0 per depth instead of in reserved
data (it has none); the behaviour is the same.
"""
from __future__ import annotations

import itertools
import struct
import threading
from time import thread_time_ns
# typing is not imported at run time (fntrace's import cost); annotations are strings
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from .. import _env
from ..core.ops import (FTRACE_OPS_FL, Ops, ftrace_ops_set_global_filter,
                        register_ftrace_function, unregister_ftrace_function)
from ..core.records import record_table
from ..core.task import thread_cpu
from ..errors import NoSpaceError
from ..log_hist import hist_index
from ..fgraph import (FgraphOps, fgraph_reserve_data, fgraph_retrieve_data,
                      fgraph_retrieve_parent_data, register_ftrace_graph, unregister_ftrace_graph)

__all__ = ["FunctionProfiler", "ProfileStat", "profile_graph_entry", "profile_graph_return"]

_serials = itertools.count(1)

# What profile_graph_entry reserves on the shadow stack (ftrace.c struct
# profile_fgraph_data): the children's time to subtract, and the thread's CPU clock at
# entry when sleep-time is off (-1: not taken).
_PDATA = struct.Struct("=qq")


class ProfileStat:
    """One thread's profile (struct ftrace_profile_stat): per function ip, [hits, time,
    time_squared] (and with a distribution: min, max, {bucket: calls}), in the order the
    functions were first hit (the kernel's pages)."""
    __slots__ = ("cpu", "recs")

    def __init__(self, cpu: int = 0) -> None:
        self.cpu = cpu
        # [hits, time, time_squared] ints, then min, max, {bucket: calls}, self time
        self.recs: dict[int, list[Any]] = {}

    def hit(self, ip: int) -> None:
        """function_profile_call(): one more hit (the record made on the first)."""
        r = self.recs.get(ip)
        if r is None:
            self.recs[ip] = [1, 0, 0]
        else:
            r[0] += 1

    def add_time(self, ip: int, ns: int, dist: bool = False, self_ns: int = 0) -> None:
        """One call's time; none if the record went with a reset while the call ran.
        ``dist``: into the record's distribution too (options/profile-dist), and its
        time less its callees' (``self_ns``) into the record's self time."""
        r = self.recs.get(ip)
        if r is not None:
            r[1] += ns
            r[2] += ns * ns
            if dist:
                if len(r) == 3:
                    r += (ns, ns, {}, 0)
                elif ns < r[3]:
                    r[3] = ns
                elif ns > r[4]:
                    r[4] = ns
                h = r[5]
                i = hist_index(ns)
                h[i] = h.get(i, 0) + 1
                r[6] += self_ns

    def items(self, dist: bool = False) -> list[tuple]:
        """[(ip, hits, time, time_squared)], and with ``dist`` (min, max, {bucket:
        calls}, self time) after them (0, 0, {}, 0: no call counted in one)."""
        if not dist:
            return [(ip, r[0], r[1], r[2]) for ip, r in list(self.recs.items())]
        return [(ip, r[0], r[1], r[2], r[3], r[4], dict(r[5]), r[6]) if len(r) > 3
                else (ip, r[0], r[1], r[2], 0, 0, {}, 0) for ip, r in list(self.recs.items())]

    def reset(self) -> None:
        self.recs = {}

    def __len__(self) -> int:
        return len(self.recs)


def _stat_of(prof: "FunctionProfiler") -> ProfileStat:
    try:
        return prof._local.stat
    except AttributeError:
        return prof.thread_stat()


def profile_graph_entry(trace, gops, fregs) -> bool:
    prof = gops.private
    _stat_of(prof).hit(trace.func.ip)
    data = fgraph_reserve_data(gops.idx, _PDATA.size)
    _PDATA.pack_into(data, 0, 0, -1 if prof.sleep_time else thread_time_ns())
    return True


def profile_graph_return(trace, gops, fregs) -> None:
    prof = gops.private
    st = _stat_of(prof)
    calltime = trace.rettime - trace.calltime
    data = fgraph_retrieve_data(gops.idx)
    sub, cpu0 = _PDATA.unpack_from(data) if data is not None else (0, -1)
    if cpu0 >= 0 and not prof.sleep_time:
        calltime = thread_time_ns() - cpu0
    if calltime < 0:
        calltime = 0
    self_ns = calltime
    if not prof.graph_time or prof.dist:
        # Append this call time to the parent time to subtract (ftrace.c); the call's
        # own is its time with graph-time 0, and its Self column with profile-dist
        parent = fgraph_retrieve_parent_data(gops.idx, 1)
        if parent is not None:
            psub, pcpu0 = _PDATA.unpack_from(parent)
            _PDATA.pack_into(parent, 0, psub + calltime, pcpu0)
        self_ns = calltime - sub if sub < calltime else 0
        if not prof.graph_time:
            calltime = self_ns
    st.add_time(trace.func.ip, calltime, prof.dist, self_ns)


class FunctionProfiler:
    """The profiler of one top-level trace array (the kernel has one, global).

    The slots are read by the native callbacks: ``graph_time`` (options/graph-time),
    ``sleep_time`` (options/sleep-time), ``dist`` (options/profile-dist), ``serial``
    (unique per profiler).
    """

    __slots__ = ("graph_time", "sleep_time", "dist", "serial", "__dict__", "__weakref__")

    def __init__(self, tr) -> None:
        self.tr = tr
        self.serial = next(_serials)
        self.graph_time = True          # the kernel's defaults
        self.sleep_time = True
        self.dist = False               # fntrace's: the distributions kept and shown
        self.wide = False               # fntrace's: whole names in trace_stat
        self.enabled = False
        # Whether the tables hold times (fgraph) or hits only (a plain ops): decided
        # at each enable.
        self.graph = True
        self.stats: dict[int, ProfileStat] = {}
        self._local = threading.local()
        self._stats_lock = threading.Lock()     # taken inside callbacks: nothing else
        _env.fork_safe_attr(self, "_stats_lock")
        self.lock = threading.Lock()            # function_profile_enabled writes
        # The profiler's own ops, following the top level's filter; PID: it honours
        # set_ftrace_pid as the tracers do.
        self.ops = Ops(None, FTRACE_OPS_FL.PID | FTRACE_OPS_FL.TRACE_ARRAY, tr,
                       name="function_profile")
        ftrace_ops_set_global_filter(self.ops, tr.ops)
        self.gops = FgraphOps(profile_graph_entry, profile_graph_return, self, ops=self.ops,
                              name="function_profiler", lane=profile_lane)

    # -- the per-thread tables ---------------------------------------------------------
    def thread_stat(self) -> ProfileStat:
        """The calling thread's table, made on its first call (the slow path of the
        callbacks: the native ones cache it per thread)."""
        try:
            return self._local.stat
        except AttributeError:
            pass
        cpu = thread_cpu()
        with self._stats_lock:
            st = self.stats.get(cpu)
            if st is None:
                st = self.stats[cpu] = _Stat(cpu)
        self._local.stat = st
        return st

    def rows(self, cpu: int, dist: bool = False) -> list[tuple]:
        """Thread ``cpu``'s table as (function name, hits, time ns, time_squared), in
        the order first hit; with ``dist`` each row ends in its (min, max, {bucket:
        calls}, self time ns)."""
        st = self.stats.get(cpu)
        if st is None:
            return []
        out = []
        for ip, *rest in st.items(dist):
            rec = record_table.by_ip.get(ip)
            out.append((rec.name if rec is not None else f"{ip:#x}", *rest))
        return out

    # -- function_profile_enabled ---------------------------------------------------------
    def set_enabled(self, on: bool) -> None:
        """ftrace_profile_write(): enabling resets every table and registers the profiler;
        disabling unregisters it (the tables stay)."""
        with self.lock:
            if bool(on) == self.enabled:
                return
            if on:
                for st in list(self.stats.values()):
                    st.reset()
                self._register()
                self.enabled = True
            else:
                self.enabled = False
                self._unregister()

    def _register(self) -> None:
        try:
            register_ftrace_graph(self.gops)
            self.graph = True
        except NoSpaceError:
            # Every fgraph slot is taken: count hits with a plain ops, as the kernel
            # without the graph tracer does (function_profile_call).
            self.ops.func = self.ops.saved_func = self._function_profile_call
            register_ftrace_function(self.ops)
            self.graph = False

    def _unregister(self) -> None:
        if self.gops.idx >= 0:
            unregister_ftrace_graph(self.gops)
        elif self.ops.enabled:
            unregister_ftrace_function(self.ops)

    def _function_profile_call(self, ip, parent_ip, op, fregs) -> None:
        _stat_of(self).hit(ip.ip)


# The native twins, when built.
_Stat: type = ProfileStat
_native = _env.native()
_profile_lane = None
if _native is not None and hasattr(_native, "ProfileStat"):
    _native.bind_function_profiler(FunctionProfiler)
    _Stat = _native.ProfileStat
    py_profile_graph_entry = profile_graph_entry
    py_profile_graph_return = profile_graph_return
    profile_graph_entry = _native.profile_graph_entry       # noqa: F811
    profile_graph_return = _native.profile_graph_return     # noqa: F811
    _profile_lane = _native.profile_lane


def profile_lane(gops: FgraphOps):
    """The profiler's pair for fgraph's fast lane, with the profiler as its data, while
    it runs the native callbacks."""
    if _profile_lane is None or gops.entryfunc is not profile_graph_entry:
        return None
    return _profile_lane, gops.private


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
