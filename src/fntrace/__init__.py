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

from .core.hash import EMPTY_HASH as EMPTY_HASH
from .core.hash import FtraceHash as FtraceHash
from .core.ops import FTRACE_OPS_FL as FTRACE_OPS_FL
from .core.ops import Ops as Ops
from .core.ops import enabled_functions as enabled_functions
from .core.ops import ftrace_config as ftrace_config
from .core.ops import ftrace_enabled as ftrace_enabled
from .core.ops import ftrace_free_filter as ftrace_free_filter
from .core.ops import ftrace_ops_test as ftrace_ops_test
from .core.ops import ftrace_set_filter as ftrace_set_filter
from .core.ops import ftrace_set_filter_ip as ftrace_set_filter_ip
from .core.ops import ftrace_set_filter_ips as ftrace_set_filter_ips
from .core.ops import ftrace_set_notrace as ftrace_set_notrace
from .core.ops import register_ftrace_function as register_ftrace_function
from .core.ops import set_ftrace_enabled as set_ftrace_enabled
from .core.ops import touched_functions as touched_functions
from .core.ops import unregister_ftrace_function as unregister_ftrace_function
from .core.records import FTRACE_FL as FTRACE_FL
from .core.records import DynFtrace as DynFtrace
from .core.records import record_table as record_table
from .core.regs import FtraceRegs as FtraceRegs
from .core.regs import ftrace_get_regs as ftrace_get_regs
from .core.regs import ftrace_regs_get_argument as ftrace_regs_get_argument
from .core.regs import ftrace_regs_get_instruction_pointer as ftrace_regs_get_instruction_pointer
from .core.regs import ftrace_regs_get_return_value as ftrace_regs_get_return_value
from .core.regs import ftrace_regs_has_args as ftrace_regs_has_args
from .errors import BusyError as BusyError
from .errors import FilterError as FilterError
from .errors import FntraceError as FntraceError
from .errors import NoSpaceError as NoSpaceError
from .errors import NotFoundError as NotFoundError
from .errors import TraceFileError as TraceFileError
from .errors import UsageError as UsageError
from .output.trace_events import DynamicEvent as DynamicEvent
from .output.trace_events import FunctionHit as FunctionHit
from .output.trace_events import GraphEntry as GraphEntry
from .output.trace_events import GraphReturn as GraphReturn
from .output.trace_events import Lost as Lost
from .output.trace_events import Marker as Marker
from .output.trace_events import StackTrace as StackTrace
from .session import TraceSession as TraceSession
from .session import trace as trace
from .session import traced as traced
from .trace import TraceArray as TraceArray
from . import tracefs as tracefs

__version__ = "0.1.0"


def serve(fs: "tracefs.Tracefs | None" = None):
    """Serve this process's tracefs (``fs``, default the top level) on a control socket
    of its own user: ``fntrace ctl PID FILE [VALUE]`` reads and writes its files from
    another shell.  Returns the Server (``.path``, ``.stop()``); see tracefs/server.py."""
    from .tracefs.server import serve as _serve     # sockets are loaded by the first use
    return _serve(fs)

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
