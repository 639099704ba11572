"""The function_graph tracer on fgraph (kernel/trace/trace_functions_graph.c).

    graph_entry(trace, gops, fregs)    -> TRACE_GRAPH_ENT(ts=calltime, a=func, b=depth)
    graph_return(trace, gops, fregs)   -> TRACE_GRAPH_RET(ts=rettime, a=func, b=depth,
                                                          c=overrun, d=calltime)

Its fgraph user shares the instance's ops, so set_ftrace_filter/set_ftrace_notrace still
decide which functions are hooked; set_graph_function, set_graph_notrace, max_graph_depth
and tracing_thresh are applied here, per thread, through the user's task variable.

options/sleep-time 0 (the kernel's fgraph_sleep_time, which shifts a sleeping task's
calltimes by the time it slept): the thread's CPU clock is kept on the shadow stack at
entry (fgraph_reserve_data) and the return record's calltime is its rettime less the CPU
time the thread spent in the call.  The entry's timestamp stays the wall clock's, so a
trace holds both: report prints rettime - calltime (CPU time, as the kernel's does), the
timelines and ``stat`` the wall time from the entry, ``stat --cpu-time`` the CPU time.
On fgraph's fast lane the native pair does the same (native/function_graph.c.h); the
general path's native callbacks hand such calls to these.

The task variable's bits:

    task var bits   FL       inside a set_graph_function function (its depth kept)
                    NOTRACE  inside a set_graph_notrace function (its depth kept)
"""
from __future__ import annotations

import struct
from time import monotonic_ns, thread_time_ns
# typing is not imported at run time (it is a fifth of fntrace's import cost);
# the annotations are strings (from __future__ import annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from ..core.fetch import int_payload, value_repr
from ..fgraph import (FgraphOps, _tls, fgraph_reserve_data, fgraph_retrieve_data,
                      fgraph_switch_ops, register_ftrace_graph, shadow_stack,
                      unregister_ftrace_graph)
from .. import _env
from ..ring_buffer import PAYLOAD_SEP as _NUL, TRACE_GRAPH_ENT, TRACE_GRAPH_RET

__all__ = ["FunctionGraphTracer", "safe_repr", "retval_payload"]

TRACE_GRAPH_FL = 1
TRACE_GRAPH_NOTRACE = 2
_DEPTH_SHIFT = 2
_DEPTH_MASK = (1 << 20) - 1
# sleep-time 0: the thread's CPU clock at entry, reserved on the shadow stack
_CPU0 = struct.Struct("=q")


def safe_repr(v: Any) -> str:
    """A short repr that runs none of the program's code (core/fetch.py)."""
    return value_repr(v)


def retval_payload(v: Any, unwind: bool) -> Any:
    """What is recorded for a return value: an int that fits 64 bits as itself (printed
    as the user asks, decimal or hex), anything else as a short safe repr; an exception
    leaving the call as ``raised X``."""
    if unwind:
        # 3.11's setprofile does not say which exception is leaving.
        return "raised" if v is None else "raised " + value_repr(v)
    return int_payload(v)


def _graph_vars(gops):
    try:
        st = _tls.st
    except AttributeError:
        st = shadow_stack()
    return st.task_vars[gops.idx]


def graph_entry(trace, gops, fregs) -> bool:
    tr = gops.private
    # The thread filters first: an ignored thread's calls are not pushed
    # (fgraph_pid_func / ftrace_graph_ignore_func's pid test).
    try:
        buf = tr.local.buf
    except AttributeError:
        buf = tr.cpu_buffer()
    if buf is None:
        return False
    tv = _graph_vars(gops)
    v = tv.value
    if v & TRACE_GRAPH_NOTRACE:
        return False
    depth = trace.depth
    func = trace.func
    if func in tr.graph_notrace_fops.filter_hash:
        # Skip this function and everything it calls; its return clears the bit.
        tv.value = v | TRACE_GRAPH_NOTRACE | ((depth & _DEPTH_MASK) << (_DEPTH_SHIFT + 20))
        return True
    gf = tr.graph_fops
    if (gf.filter_hash or gf.filter_cached) and not v & TRACE_GRAPH_FL:
        if func not in gf.filter_hash:
            return False
        if gops.ops is gf:
            # Lazy start: only the graph functions were patched.  One is running now:
            # patch what set_ftrace_filter selects, so what it calls is seen.
            if not tr.ops.traces(func):
                return False
            if fgraph_switch_ops(gops, tr.ops, blocking=False):
                # patching took time the function did not spend
                cur = _tls.st.cur
                if cur is not None:
                    cur.calltime = monotonic_ns()
        v = v | TRACE_GRAPH_FL | ((depth & _DEPTH_MASK) << _DEPTH_SHIFT)
        tv.value = v
    if tr.max_graph_depth and depth >= tr.max_graph_depth:
        return False
    if tr.tracing_thresh or not tr.tracing_on:
        # only returns are written (graph_entry: thresh); with sleep-time 0 they need
        # the CPU clock at entry too (the threshold is on the CPU time then)
        if not tr.sleep_time:
            data = fgraph_reserve_data(gops.idx, _CPU0.size)
            if data is not None:
                _CPU0.pack_into(data, 0, thread_time_ns())
        return True
    # One str, names and values between NULs (ring_buffer.args_text): not a container
    # the cyclic GC tracks, so what waits in the buffer is not in gc.get_objects().
    payload = (_NUL.join([s for n, x in fregs.args for s in (n, safe_repr(x))])
               if tr.graph_args else None)
    # One reading, after the set-up above (a thread's first buffer, the arguments): the
    # entry's timestamp and the call's start, so neither counts in its duration.
    ts = monotonic_ns()
    if not tr.sleep_time:
        data = fgraph_reserve_data(gops.idx, _CPU0.size)
        if data is not None:
            _CPU0.pack_into(data, 0, thread_time_ns())
    cur = _tls.st.cur
    if cur is not None:
        cur.calltime = ts
    if payload is not None:
        buf.write_payload(ts, TRACE_GRAPH_ENT, func.ip, depth, 0, 0, payload)
    else:
        buf.write(ts, TRACE_GRAPH_ENT, 0, func.ip, depth, 0, 0)
    return True


def graph_return(trace, gops, fregs) -> None:
    tr = gops.private
    tv = _graph_vars(gops)
    v = tv.value
    depth = trace.depth
    if v & TRACE_GRAPH_NOTRACE:
        if (v >> (_DEPTH_SHIFT + 20)) & _DEPTH_MASK == depth:
            tv.value = v & ~TRACE_GRAPH_NOTRACE & ~(_DEPTH_MASK << (_DEPTH_SHIFT + 20))
        return
    if v & TRACE_GRAPH_FL and (v >> _DEPTH_SHIFT) & _DEPTH_MASK == depth:
        tv.value = v & ~TRACE_GRAPH_FL & ~(_DEPTH_MASK << _DEPTH_SHIFT)
    calltime = trace.calltime
    if not tr.sleep_time:
        data = fgraph_retrieve_data(gops.idx)
        if data is not None:
            # the return less the CPU time of the call (never before its entry)
            ran = thread_time_ns() - _CPU0.unpack_from(data)[0]
            calltime = max(calltime, trace.rettime - max(0, ran))
    # (the kernel's trace_graph_thresh_return: the threshold is on the duration the
    # return records, the CPU time with sleep-time 0)
    if tr.tracing_thresh and trace.rettime - calltime < tr.tracing_thresh:
        return
    if not tr.tracing_on:
        return
    try:
        buf = tr.local.buf
    except AttributeError:
        buf = tr.cpu_buffer()
    if buf is None:
        return                  # ignored since its entry (a thread filter changed)
    if tr.graph_retval:
        buf.write_payload(trace.rettime, TRACE_GRAPH_RET, trace.func.ip, depth,
                          trace.overrun, calltime, retval_payload(trace.retval, trace.unwind))
    else:
        buf.write(trace.rettime, TRACE_GRAPH_RET, 0, trace.func.ip, depth, trace.overrun,
                  calltime)


# The native twins, when built; the Python ones stay for the rare path (the lazy
# start), which the native ones hand back to them, and give safe_repr/retval_payload
# for the values the native ones do not render themselves.
py_graph_entry = graph_entry
py_graph_return = graph_return
_native = _env.native()
if _native is not None and hasattr(_native, "graph_entry"):
    _native.set_graph_twins(py_graph_entry, safe_repr, retval_payload, py_graph_return)
    graph_entry = _native.graph_entry        # noqa: F811
    graph_return = _native.graph_return      # noqa: F811
# fgraph's fast lane (docs/internals.md): the native pair that writes both records with
# no Python object per call, while nothing per call needs Python.
_graph_lane = getattr(_native, "graph_lane", None) if graph_entry is not py_graph_entry else None


def graph_lane(gops: FgraphOps):
    """This user's fast lane now: the native pair with its trace array, while the user
    runs the native callbacks and traces through its instance's ops (not the lazy start's
    set_graph_function ops); the pair itself turns down a call that needs Python."""
    if _graph_lane is None or gops.entryfunc is not graph_entry or gops.ops is not gops.private.ops:
        return None
    return _graph_lane, gops.private


class FunctionGraphTracer:
    name = "function_graph"

    def __init__(self) -> None:
        self.gops: FgraphOps | None = None

    def init(self, tr) -> None:
        # The user shares the instance's ops: set_ftrace_filter still applies
        # (fgraph_init_ops).  With set_graph_function, nothing outside a graph function
        # is ever written, so at first only the graph functions are patched: a graph
        # function that is never called costs nothing.  The first one entered switches
        # the user to the instance's ops (graph_entry).
        gf = tr.graph_fops
        lazy = bool(gf.filter_hash or gf.filter_cached) and not tr.graph_notrace_fops.filter_hash
        self.gops = FgraphOps(graph_entry, graph_return, tr, ops=gf if lazy else tr.ops,
                              name="function_graph", lane=graph_lane)
        register_ftrace_graph(self.gops)

    def reset(self, tr) -> None:
        if self.gops is not None and self.gops.idx >= 0:
            unregister_ftrace_graph(self.gops)
        self.gops = None


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
