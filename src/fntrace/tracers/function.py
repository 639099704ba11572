"""The function tracer (kernel/trace/trace_functions.c): at every traced function's
entry, record timestamp, thread, function and caller.

    function_trace_call(ip, parent_ip, op, fregs)
        -> the thread's ring buffer: TRACE_FN(ts, a=ip, b=parent_ip)
"""
from __future__ import annotations

from time import monotonic_ns

from ..core.ops import register_ftrace_function, unregister_ftrace_function
from ..ring_buffer import TRACE_FN

__all__ = ["FunctionTracer", "function_trace_call"]


def function_trace_call(ip, parent_ip, op, fregs) -> None:
    tr = op.private
    if not tr.tracing_on:
        return
    try:
        buf = tr.local.buf
    except AttributeError:
        buf = tr.cpu_buffer()
    if buf is None:
        return                  # an ignored thread (set_ftrace_pid, ...): one check
    buf.write(monotonic_ns(), TRACE_FN, 0, ip.ip, parent_ip.ip, 0, 0)


from .. import _env  # noqa: E402

_native = _env.native()
if _native is not None:
    function_trace_call = _native.function_trace_call   # noqa: F811 - the native twin


class FunctionTracer:
    name = "function"

    def init(self, tr) -> None:
        tr.ops.func = tr.ops.saved_func = function_trace_call
        register_ftrace_function(tr.ops)

    def reset(self, tr) -> None:
        if tr.ops.enabled:
            unregister_ftrace_function(tr.ops)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
