"""fntrace: ftrace for Python programs.

The kernel's function-tracing machinery, mechanism by mechanism, for Python functions:
records (one per function), ops with filter hashes, one update path, CALL_OPS dispatch,
ftrace_regs, per-thread ring buffers, the function tracer and its text format, tracefs.

    import fntrace

    def cb(ip, parent_ip, ops, fregs):
        print(ip.name, "called from", parent_ip.name, fregs.args)

    ops = fntrace.Ops(cb)
    fntrace.ftrace_set_filter(ops, "json.encoder.*")
    fntrace.register_ftrace_function(ops)
    ...
    fntrace.unregister_ftrace_function(ops)

A trace file read back, typed (output/trace_events.py):

    for ev in fntrace.open_trace("fntrace.dat"):
        if isinstance(ev, fntrace.GraphReturn) and ev.duration > 1_000_000:
            print(ev.func, ev.duration)

PYTEST_DONT_REWRITE: fntrace's pytest plugin comes with this package, so pytest asks to
rewrite the asserts of the whole package; under ``fntrace record -m pytest`` the
package is imported before pytest starts, and pytest would warn that it cannot (an
error under ``-W error``, where the untraced suite passes).  These words tell it not to.
"""
from __future__ import annotations

from .errors import (BusyError, FilterError, FntraceError, NoSpaceError, NotFoundError,
                     TraceFileError, UsageError)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from . import tracefs       # loaded on first use at run time (_LAZY)

# The API is loaded on first use (PEP 562), not by ``import fntrace``: the traced
# program pays for the mechanisms ``fntrace record`` starts, not for the readers,
# the session API and tracefs (a third of the recorder's start-up, each run).
_LAZY: dict[str, str] = {
    **dict.fromkeys(("EMPTY_HASH", "FtraceHash"), ".core.hash"),
    **dict.fromkeys(("FTRACE_OPS_FL", "Ops", "enabled_functions", "ftrace_config",
                     "ftrace_enabled", "ftrace_free_filter", "ftrace_ops_test",
                     "ftrace_set_filter", "ftrace_set_filter_ip", "ftrace_set_filter_ips",
                     "ftrace_set_notrace", "register_ftrace_function", "set_ftrace_enabled",
                     "touched_functions", "unregister_ftrace_function"), ".core.ops"),
    **dict.fromkeys(("FTRACE_FL", "DynFtrace", "record_table"), ".core.records"),
    **dict.fromkeys(("FtraceRegs", "ftrace_get_regs", "ftrace_regs_get_argument",
                     "ftrace_regs_get_instruction_pointer", "ftrace_regs_get_return_value",
                     "ftrace_regs_has_args"), ".core.regs"),
    **dict.fromkeys(("DynamicEvent", "FunctionHit", "GraphEntry", "GraphReturn", "Lost",
                     "Marker", "StackTrace"), ".output.trace_events"),
    **dict.fromkeys(("TraceSession", "trace", "traced"), ".session"),
    **dict.fromkeys(("record_calls", "TracedCalls", "TracedCall", "Shown"), ".traced_calls"),
    **dict.fromkeys(("flight_recorder", "FlightRecorder"), ".flight"),
    "TraceArray": ".trace_array",
    "tracefs": ".tracefs",
}


def __getattr__(name: str):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    mod = importlib.import_module(where, __name__)
    value = mod if where == "." + name else getattr(mod, name)
    globals()[name] = value
    return value


__version__ = "0.1.0"


def serve(fs: "tracefs.Tracefs | None" = None):
    """Serve this process's tracefs (``fs``, default the top level) on a control socket
    of its own user: ``fntrace ctl PID FILE [VALUE]`` reads and writes its files from
    another shell.  Returns the Server (``.path``, ``.stop()``); see tracefs/server.py."""
    from .flight import register_flight_file
    from .tracefs.server import serve as _serve     # sockets are loaded by the first use
    srv = _serve(fs)
    register_flight_file(srv.fs)        # (a flight recorder started from another shell)
    return srv

def open_trace(path):
    """Open a trace file (``fntrace record -o``, ``trace(output=...)``, ``pytest
    --fntrace``) for reading: a TraceSource (output/source.py) whose ``events()``
    (or plain iteration) gives FunctionHit, GraphEntry, GraphReturn, DynamicEvent,
    Marker, StackTrace and Lost events in time order, and ``calls()`` whole calls.
    A file that is not a trace raises TraceFileError with a one-line reason."""
    from .output.source import open_trace as _open    # the file reader loads on use
    return _open(path)


__all__ = [
    "EMPTY_HASH",
    "FtraceHash",
    "FTRACE_OPS_FL",
    "Ops",
    "enabled_functions",
    "ftrace_config",
    "ftrace_enabled",
    "ftrace_free_filter",
    "ftrace_ops_test",
    "ftrace_set_filter",
    "ftrace_set_filter_ip",
    "ftrace_set_filter_ips",
    "ftrace_set_notrace",
    "register_ftrace_function",
    "set_ftrace_enabled",
    "touched_functions",
    "unregister_ftrace_function",
    "FTRACE_FL",
    "DynFtrace",
    "record_table",
    "FtraceRegs",
    "ftrace_get_regs",
    "ftrace_regs_get_argument",
    "ftrace_regs_get_instruction_pointer",
    "ftrace_regs_get_return_value",
    "ftrace_regs_has_args",
    "BusyError",
    "FilterError",
    "FntraceError",
    "NoSpaceError",
    "NotFoundError",
    "TraceFileError",
    "UsageError",
    "TraceSession",
    "trace",
    "traced",
    "TraceArray",
    "tracefs",
    "serve",
    "open_trace",
    "FunctionHit",
    "GraphEntry",
    "GraphReturn",
    "DynamicEvent",
    "Marker",
    "StackTrace",
    "Lost",
    "__version__",
]

from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
