"""The stack tracer (kernel/trace/trace_stack.c): the deepest Python stack seen.

    stack_tracer_enabled   0/1 (the kernel's /proc/sys/kernel/stack_tracer_enabled)
    stack_max_size         the largest stack seen, in bytes; ``echo 0 >`` resets it
    stack_trace            that stack, innermost first, in trace_stack.c's table
    stack_trace_filter     which functions' entries are checked (set_ftrace_filter grammar)

At the entry of every function the filter lets through (all when it is empty), the
calling thread's stack is measured; when it is larger than the largest seen so far it
becomes the new maximum and its frames are kept.  It is an ops of its own, registered
only while enabled: nothing is hooked, and nothing costs, while it is off.

Sizes are bytes of CPython's evaluation stack: each Python frame occupies
``(co_nlocalsplus + co_stacksize + FRAME_SPECIALS) * sizeof(PyObject *)`` bytes of the
thread's data stack (``_PyInterpreterFrame``, 3.11+), which is what a kernel stack
frame's size is to the kernel's table.  ``Depth`` is the bytes used from that frame down
to the bottom of the thread's stack, ``Size`` the frame's own bytes, and "(N entries)"
the number of Python frames (what ``sys.getrecursionlimit()`` limits).  C frames
(built-in functions, the interpreter's own recursion) are not seen; a generator's or
coroutine's frame, which lives in its object rather than on the data stack, is counted
like any other while it runs.  fntrace's own frames are left out.
"""
from __future__ import annotations

import sys
import threading
# typing is not imported at run time (fntrace's import cost); annotations are strings
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

from .._env import fork_safe
from ..core.ops import (Ops, ftrace_set_filter, register_ftrace_function,
                        unregister_ftrace_function)
from ..core.records import record_table
from ..core.task import own_threads as _own_threads

__all__ = ["StackTracer", "stack_trace_call", "frame_size", "stack_tracer", "walk_py"]

# FRAME_SPECIALS_SIZE, (sizeof(_PyInterpreterFrame) - 1) / sizeof(PyObject *): the
# frame's fixed part in words (the code, previous frame, function, globals, builtins,
# locals, frame object, instruction pointer, stacktop and the small fields); 9 in
# CPython 3.11, 3.12 and 3.13 (internal/pycore_frame.h).
FRAME_SPECIALS = 9
_PTR = 8 if sys.maxsize > 2 ** 32 else 4


def frame_size(code) -> int:
    """The bytes a frame of ``code`` takes on the thread's data stack (co_framesize)."""
    cells = code.co_cellvars
    nlocalsplus = len(code.co_varnames) + len(cells) + len(code.co_freevars)
    if cells:
        # an argument that is also a cell has one slot (CO_FAST_LOCAL | CO_FAST_CELL)
        nlocalsplus -= len(set(cells).intersection(code.co_varnames))
    return (nlocalsplus + code.co_stacksize + FRAME_SPECIALS) * _PTR


def _name(frame) -> str:
    code = frame.f_code
    rec = record_table.by_code.get(id(code))
    if rec is not None:
        return rec.name
    glb = frame.f_globals
    mod = glb.get("__name__", "") if isinstance(glb, dict) else ""
    return f"{mod}.{code.co_qualname}" if mod else code.co_qualname


def _ours(frame) -> bool:
    glb = frame.f_globals
    mod = glb.get("__name__", "") if isinstance(glb, dict) else ""
    return isinstance(mod, str) and (mod == "fntrace" or mod.startswith("fntrace."))


# rec.ip -> the frame's bytes, 0 for fntrace's own frames: a record's ip is never
# reused, and keying by it keeps no code object alive.
_rec_sizes: dict[int, int] = {}


def _walk_py(frame) -> int:
    """The bytes of the stack from ``frame`` down, fntrace's frames left out."""
    by_code = record_table.by_code
    sizes = _rec_sizes
    total = 0
    f = frame
    while f is not None:
        code = f.f_code
        rec = by_code.get(id(code))
        if rec is not None:
            size = sizes.get(rec.ip)
            if size is None:
                size = sizes[rec.ip] = 0 if _ours(f) else frame_size(code)
            total += size
        elif not _ours(f):
            total += frame_size(code)
        f = f.f_back
    return total


_walk = _walk_py

from .. import _env  # noqa: E402

_native = _env.native()
if _native is not None:
    # the twin reads the interpreter frames, making no frame object per level
    _walk = _native.stack_bytes     # noqa: F811

walk_py = _walk_py


_get_native_id = threading.get_native_id


def stack_trace_call(ip, parent_ip, op, fregs) -> None:
    """stack_trace_call() -> check_stack(): measure; keep the stack if it is the deepest."""
    st = op.private
    frame = sys._getframe(1)
    total = _walk(frame)
    if total <= st.max_size:
        return
    if _get_native_id() in _own_threads:
        return          # fntrace's own threads (the endpoint importing as it serves)
    with st.lock:
        if total <= st.max_size:
            return
        # check_stack(): walk again under the lock, keeping the frames this time
        sizes = []
        f: FrameType | None = frame
        while f is not None:
            if not _ours(f):
                sizes.append((frame_size(f.f_code), _name(f)))
            f = f.f_back
        rows: list[tuple[int, str]] = []
        depth = total
        for size, name in sizes:
            rows.append((depth, name))
            depth -= size
        st.max_size = total
        st.entries = rows


class StackTracer:
    """The process's stack tracer (top level only, as the kernel's is global)."""

    def __init__(self) -> None:
        self.ops = Ops(stack_trace_call, 0, self, name="stack_trace_ops")
        self.lock = threading.Lock()
        self.max_size = 0
        self.entries: list[tuple[int, str]] = []      # (depth in bytes, location)

    @property
    def enabled(self) -> bool:
        return self.ops.enabled

    def set_enabled(self, on: bool) -> None:
        """stack_trace_sysctl(): register or unregister the ops."""
        if on and not self.ops.enabled:
            register_ftrace_function(self.ops)
        elif not on and self.ops.enabled:
            unregister_ftrace_function(self.ops)

    def set_max_size(self, value: int) -> None:
        """stack_max_size_write(): only the maximum changes; the table stays until a
        deeper stack replaces it."""
        with self.lock:
            self.max_size = value

    def set_filter(self, buf: str | None, reset: bool, keep_unmatched: bool = False) -> None:
        """stack_trace_filter: the set_ftrace_filter grammar on the stack tracer's ops."""
        ftrace_set_filter(self.ops, buf, reset, keep_unmatched=keep_unmatched)

    def table(self) -> str:
        """trace_stack.c t_show()."""
        with self.lock:
            entries = list(self.entries)
            max_size = self.max_size
        out = [f"        Depth    Size   Location    ({len(entries)} entries)\n"
               "        -----    ----   --------\n"]
        if not self.enabled and not max_size:
            out.append("#\n"
                       "#  Stack tracer disabled\n"
                       "#\n"
                       "# To enable the stack tracer, write 1 to\n"
                       "# stack_tracer_enabled (the kernel's\n"
                       "# /proc/sys/kernel/stack_tracer_enabled)\n"
                       "#\n")
        for i, (depth, name) in enumerate(entries):
            size = depth - entries[i + 1][0] if i + 1 < len(entries) else depth
            out.append(f"{i:3d}) {depth:8d}   {size:5d}   {name}\n")
        return "".join(out)


_tracer: StackTracer | None = None
_tracer_lock = fork_safe(threading.Lock())


def stack_tracer() -> StackTracer:
    """The process's stack tracer (made on first use)."""
    global _tracer
    with _tracer_lock:
        if _tracer is None:
            _tracer = StackTracer()
        return _tracer


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
