"""Multi-user function graph: fgraph_ops, per-thread shadow stacks (kernel/trace/fgraph.c).

Up to 16 users (``FgraphOps``) share one manager ops, ``graph_ops``: its filter is the
union of theirs, so a site is patched (with return events) if any user wants it, and each
user is tested against its own filter when a function is entered.  On entry every user
whose filter matches gets ``entryfunc(trace, gops, fregs)``; those returning true get
``retfunc(trace, gops, fregs)`` when that call returns, yields or unwinds.

The kernel hooks a return by replacing the return address and keeps the real one on a
per-task shadow stack.  Python reports returns per code object instead, so the shadow
stack here keeps, per thread, one frame per traced call still running — which frame it
was, who wants its return, and the data its users reserved:

    ShadowStack.frames (grows up)         one FgraphFrame
    +-----------------------------+      +-------------------------------------+
    | frame for depth N (top)     | ---> | frame    the Python frame object    |
    +-----------------------------+      | rec      the function's record      |
    | ...                         |      | depth    0 = outermost traced call  |
    +-----------------------------+      | bitmap   bit i: user i wants retfunc |
    | frame for depth 0           |      | data     {i: bytearray} reserved by  |
    +-----------------------------+      |          user i (<= 32 words)        |
    task_vars[16]  per-user word         | calltime ns                          |
    overrun        pushes refused, full  +-------------------------------------+

A return is matched by frame identity: the top frame if it is the returning one; a deeper
one if the frames above it never saw their return (tracing began or a site was turned off
mid-call) — those are dropped; none if the entry was never pushed (filtered out).  A
generator or coroutine frame is pushed at each start or resume and popped at each yield,
return or unwind, so every resume…yield is a call of its own and the stack stays balanced.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from time import monotonic_ns
# typing is not imported at run time (it is a fifth of fntrace's import cost);
# the annotations are strings (from __future__ import annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from .core import dispatch
from .core.dispatch import contain
from .core.hash import EMPTY_HASH, FtraceHash
from .core.ops import (FTRACE_OPS_FL, OFL, Ops, _move_hash, ftrace_lock, register_ftrace_function,
                       unregister_ftrace_function)
from .core.records import record_table
from .core.regs import FtraceRegs
from .errors import BusyError, FntraceError, NoSpaceError

__all__ = [
    "FgraphOps", "FtraceGraphEnt", "FtraceGraphRet", "register_ftrace_graph",
    "unregister_ftrace_graph", "fgraph_reserve_data", "fgraph_retrieve_data",
    "fgraph_retrieve_parent_data", "fgraph_get_task_var", "fgraph_switch_ops", "FGRAPH_ARRAY_SIZE",
    "FGRAPH_MAX_DATA_SIZE", "SHADOW_STACK_MAX_DEPTH", "graph_ops", "shadow_stack",
]

FGRAPH_ARRAY_SIZE = 16
FGRAPH_MAX_DATA_WORDS = 32
FGRAPH_MAX_DATA_SIZE = 8 * FGRAPH_MAX_DATA_WORDS      # bytes: sizeof(long) * 32
SHADOW_STACK_MAX_DEPTH = 1024


class FtraceGraphEnt:
    """struct ftrace_graph_ent: the function entered and its depth."""
    __slots__ = ("func", "depth")

    def __init__(self, func, depth: int):
        self.func = func
        self.depth = depth

    def __repr__(self) -> str:
        return f"<FtraceGraphEnt {self.func.name} depth={self.depth}>"


class FtraceGraphRet:
    """struct ftrace_graph_ret: the function, its depth, return value, times, overrun.

    ``unwind`` is true when the call ended by an exception (``retval`` is the exception);
    ``resumed``/``yielded`` mark a generator slice.
    """
    __slots__ = ("func", "depth", "retval", "calltime", "rettime", "overrun", "unwind")

    def __init__(self, func, depth, retval, calltime, rettime, overrun, unwind):
        self.func = func
        self.depth = depth
        self.retval = retval
        self.calltime = calltime
        self.rettime = rettime
        self.overrun = overrun
        self.unwind = unwind

    def __repr__(self) -> str:
        return f"<FtraceGraphRet {self.func.name} depth={self.depth} retval={self.retval!r}>"


def _no_return(trace, gops, fregs) -> bool:
    """The entryfunc of a user that gave none: it wants no return."""
    return False


def _nop(trace, gops, fregs) -> None:
    pass


class FgraphOps:
    """struct fgraph_ops.

    entryfunc  ``entryfunc(trace, gops, fregs) -> bool``: true to get retfunc for this call
    retfunc    ``retfunc(trace, gops, fregs)``
    ops        an Ops for the user's own filter (``ftrace_set_filter(gops.ops, ...)``)
    private    anything
    idx        the slot in the 16-entry array while registered
    lane       optional ``lane(gops) -> (pair, data) | None``: the user's native fast
               lane, asked after every change of users.  ``pair`` is a native entry/return
               pair exported by fntrace._native (a capsule), ``data`` what it is called
               with.  While this user is the only one and ``lane`` gives a pair, calls are
               pushed on a native shadow stack and handed to the pair instead of
               entryfunc/retfunc (docs/internals.md, "fgraph's fast lane"); the user
               decides when it qualifies, fgraph knows nothing else of it.
    """

    error_label = "fgraph user"          # what dispatch.contain() calls it

    def __init__(self, entryfunc: Callable | None = None, retfunc: Callable | None = None,
                 private: Any = None, *, ops: Ops | None = None, name: str | None = None,
                 lane: Callable | None = None):
        self.entryfunc = entryfunc if entryfunc is not None else _no_return
        self.retfunc = retfunc if retfunc is not None else _nop
        self.private = private
        self.ops = ops if ops is not None else Ops(None, 0, self, name=name or "fgraph_ops")
        self.idx = -1
        self.nerrors = 0
        self.missed: Callable | None = None     # told when a call could not be pushed
        self.lane = lane
        self.name = name or getattr(entryfunc, "__qualname__", None) or "fgraph_ops"

    def __repr__(self) -> str:
        return f"<FgraphOps {self.name} idx={self.idx}>"


# Free slots hold the stub: a frame pushed for a user that has since gone finds it on
# return and calls nothing ("The array must always have real data on it").
fgraph_stub = FgraphOps(_no_return, _nop, name="fgraph_stub")
fgraph_array: list[FgraphOps] = [fgraph_stub] * FGRAPH_ARRAY_SIZE
# Free indexes, least recently freed first (fgraph_lru_alloc_index): a user that takes
# a slot just freed could otherwise be handed returns of frames pushed for the old one.
_lru: list[int] = list(range(FGRAPH_ARRAY_SIZE))


class FgraphFrame:
    __slots__ = ("frame", "rec", "depth", "bitmap", "data", "calltime")

    def __init__(self, frame, rec, depth: int, calltime: int):
        self.frame = frame
        self.rec = rec
        self.depth = depth
        self.bitmap = 0
        # each user's reserved data (fgraph_reserve_data: a bytearray; fprobe: its headers)
        self.data: dict[int, Any] | None = None
        self.calltime = calltime


class TaskVar:
    """One user's per-thread word (fgraph_get_task_var); ``value`` starts at 0."""
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: Any = 0


class ShadowStack:
    __slots__ = ("frames", "task_vars", "overrun", "epoch", "cur", "ret", "__weakref__")

    def __init__(self, epoch: int) -> None:
        self.frames: list[FgraphFrame] = []
        self.task_vars = [TaskVar() for _ in range(FGRAPH_ARRAY_SIZE)]
        self.overrun = 0
        self.epoch = epoch
        self.cur: FgraphFrame | None = None      # the frame whose entryfuncs are running
        self.ret: FgraphFrame | None = None      # the frame whose retfuncs are running


class _State:
    __slots__ = ("users", "epoch", "stacks")

    def __init__(self) -> None:
        self.users: tuple[tuple[int, FgraphOps], ...] = ()
        self.epoch = 0
        self.stacks: "weakref.WeakSet[ShadowStack]" = weakref.WeakSet()


_S = _State()
_tls = threading.local()


def shadow_stack() -> ShadowStack:
    """The calling thread's shadow stack (made on first use)."""
    try:
        st = _tls.st
    except AttributeError:
        st = ShadowStack(_S.epoch)
        _tls.st = st
        _S.stacks.add(st)
    if st.epoch != _S.epoch:
        st.frames.clear()
        st.epoch = _S.epoch
    return st


# ---------------------------------------------------------------------------------
# The hot path: entry (manager ops func) and return
# ---------------------------------------------------------------------------------

def _missed(ip, fregs) -> None:
    """No room on the shadow stack: tell the users that keep count (fprobe's nmissed)."""
    for _, gops in _S.users:
        if gops.missed is not None and gops.ops.test(ip, fregs):
            gops.missed(ip)


def function_graph_enter(ip, parent_ip, op, fregs) -> None:
    """graph_ops.func: push a frame and run every matching user's entryfunc
    (fgraph.c function_graph_enter_regs)."""
    try:
        st = _tls.st
    except AttributeError:
        st = shadow_stack()
    if st.epoch != _S.epoch:
        st = shadow_stack()
    frames = st.frames
    depth = len(frames)
    if depth >= SHADOW_STACK_MAX_DEPTH:
        st.overrun += 1
        _missed(ip, fregs)
        return
    fr = FgraphFrame(fregs.frame, ip, depth, monotonic_ns())
    frames.append(fr)
    st.cur = fr
    trace = FtraceGraphEnt(ip, depth)
    bitmap = 0
    users = _S.users
    if len(users) == 1:
        # One user: its filter is the manager's, no per-user test (the static call).
        idx, gops = users[0]
        try:
            if gops.entryfunc(trace, gops, fregs):
                bitmap = 1 << idx
        except (Exception, SystemExit) as exc:
            if contain(gops, exc):
                raise
    else:
        for idx, gops in users:
            if not gops.ops.test(ip, fregs):
                continue
            try:
                ok = gops.entryfunc(trace, gops, fregs)
            except (Exception, SystemExit) as exc:
                if contain(gops, exc):
                    raise
                ok = False
            if ok:
                bitmap |= 1 << idx
            elif fr.data is not None:
                fr.data.pop(idx, None)       # discarded with the refused entry
    st.cur = None
    if bitmap:
        fr.bitmap = bitmap
    else:
        frames.pop()


def fgraph_resume(rec, frame, regs: bool) -> None:
    """A generator or coroutine resumed (PY_RESUME, PY_THROW): a call of its own."""
    back = frame.f_back
    parent = record_table.by_code.get(id(back.f_code)) if back is not None else None
    function_graph_enter(rec, parent, graph_ops, FtraceRegs(frame, rec, regs))


def fgraph_return(rec, frame, retval, unwind: bool) -> None:
    """A patched site returned, yielded or unwound: pop its frame and run the retfuncs
    of the users that asked (fgraph.c __ftrace_return_to_handler)."""
    try:
        st = _tls.st
    except AttributeError:
        return
    frames = st.frames
    if not frames or st.epoch != _S.epoch:
        return
    fr = frames[-1]
    if fr.frame is not frame:
        i = len(frames) - 2
        while i >= 0 and frames[i].frame is not frame:
            i -= 1
        if i < 0:
            return                           # its entry was never pushed
        del frames[i + 1:]                   # their returns were never seen
        fr = frames[-1]
    frames.pop()
    rettime = monotonic_ns()
    trace = FtraceGraphRet(rec, fr.depth, retval, fr.calltime, rettime, st.overrun, unwind)
    fregs = FtraceRegs(frame, rec, bool(rec.flags & _REGS_EN), retval)
    bitmap = fr.bitmap
    prev, st.ret = st.ret, fr
    arr = fgraph_array
    while bitmap:
        low = bitmap & -bitmap
        bitmap ^= low
        gops = arr[low.bit_length() - 1]
        try:
            gops.retfunc(trace, gops, fregs)
        except (Exception, SystemExit) as exc:
            if contain(gops, exc):
                raise
    st.ret = prev


from .core.records import FTRACE_FL as _FL  # noqa: E402

_REGS_EN = int(_FL.REGS_EN)


# ---------------------------------------------------------------------------------
# Reserved data and task variables
# ---------------------------------------------------------------------------------

def fgraph_reserve_data(idx: int, size_bytes: int) -> bytearray:
    """Reserve up to 32 words on the shadow stack for user ``idx``, during its entryfunc.

    The data comes back in retfunc through fgraph_retrieve_data(); it is discarded if the
    entryfunc returns false.  Raises NoSpaceError for more than 256 bytes, BusyError for a
    second reservation in the same entry, FntraceError outside an entryfunc.
    """
    st = shadow_stack()
    fr = st.cur
    if fr is None:
        raise FntraceError("fgraph_reserve_data() is only valid inside an entryfunc")
    if not 0 < size_bytes <= FGRAPH_MAX_DATA_SIZE:
        raise NoSpaceError(f"fgraph_reserve_data(): {size_bytes} bytes; at most "
                           f"{FGRAPH_MAX_DATA_SIZE} ({FGRAPH_MAX_DATA_WORDS} words)")
    if fr.data is None:
        fr.data = {}
    elif idx in fr.data:
        raise BusyError("fgraph_reserve_data() may be called once per entry")
    b = bytearray(size_bytes)
    fr.data[idx] = b
    return b


def fgraph_retrieve_data(idx: int) -> bytearray | None:
    """In retfunc: the data user ``idx`` reserved at this call's entry, or None."""
    return fgraph_retrieve_parent_data(idx, 0)


def fgraph_retrieve_parent_data(idx: int, depth: int) -> bytearray | None:
    """The data user ``idx`` reserved ``depth`` calls up (0: this call, 1: its caller)."""
    st = shadow_stack()
    if st.ret is not None:
        fr = st.ret if depth == 0 else (st.frames[-depth] if depth <= len(st.frames) else None)
    elif st.cur is not None:
        n = len(st.frames) - 1 - depth
        fr = st.frames[n] if n >= 0 else None
    else:
        n = len(st.frames) - 1 - depth
        fr = st.frames[n] if n >= 0 else None
    if fr is None or not fr.data:
        return None
    return fr.data.get(idx)


def fgraph_get_task_var(gops: FgraphOps) -> TaskVar:
    """The calling thread's word for this user (zeroed when the user registers)."""
    if gops.idx < 0:
        raise FntraceError(f"{gops.name} is not registered")
    return shadow_stack().task_vars[gops.idx]


# ---------------------------------------------------------------------------------
# The manager ops and registration
# ---------------------------------------------------------------------------------

graph_ops = Ops(function_graph_enter, FTRACE_OPS_FL.RETURNS | FTRACE_OPS_FL.GRAPH,
                name="graph_ops")


def _rebuild_manager(_changed: Ops | None = None) -> None:
    """The manager's hashes from its users' (ftrace.c add_first_hash/add_next_hash):
    it must patch every function some user traces, and may skip only what all skip."""
    users = [g.ops for _, g in _S.users]
    if not users:
        return
    all_users = [o for o in users if not o.filter_hash and not o.filter_cached]
    if all_users:
        notrace = set(all_users[0].notrace_hash)
        for o in all_users[1:]:
            notrace = notrace & set(o.notrace_hash)
        for o in users:
            if o.filter_hash or o.filter_cached:
                notrace -= {r for r in o.filter_hash if r not in o.notrace_hash}
        _move_hash(graph_ops, FtraceHash(), FtraceHash(notrace or ()), False)
    else:
        union: set = set()
        for o in users:
            union |= {r for r in o.filter_hash if r not in o.notrace_hash}
        _move_hash(graph_ops, FtraceHash(union), FtraceHash(), not union)


def register_ftrace_graph(gops: FgraphOps) -> None:
    """Add a graph user.  BusyError if already registered, NoSpaceError when the 16
    slots are taken."""
    with ftrace_lock:
        if gops.ops.flags & OFL.GRAPH or gops.idx >= 0:
            raise BusyError(f"{gops.name} is already registered")
        if gops.ops.flags & OFL.ENABLED:
            raise BusyError(f"{gops.ops.name} is registered as a plain ops")
        if not _lru:
            raise NoSpaceError(f"no space for {gops.name}: all {FGRAPH_ARRAY_SIZE} "
                               "function graph users are registered")
        idx = _lru.pop(0)
        gops.idx = idx
        fgraph_array[idx] = gops
        gops.ops.flags |= OFL.GRAPH | OFL.SUBOP | OFL.INITIALIZED
        gops.ops.managed = _rebuild_manager
        for st in list(_S.stacks):
            st.task_vars[idx].value = 0
        first = not _S.users
        _S.users = tuple(sorted(_S.users + ((idx, gops),)))
        try:
            if first:
                _S.epoch += 1                # stacks left by an earlier session are stale
                dispatch.G.ret_handler = fgraph_return
                dispatch.G.resume_handler = fgraph_resume
            _rebuild_manager()
            if first:
                register_ftrace_function(graph_ops)
            _sync_native()
        except BaseException:
            _S.users = tuple(u for u in _S.users if u[1] is not gops)
            fgraph_array[idx] = fgraph_stub
            _lru.insert(0, idx)
            gops.idx = -1
            gops.ops.flags &= ~(OFL.GRAPH | OFL.SUBOP)
            gops.ops.managed = None
            if not _S.users:
                dispatch.G.ret_handler = None
                dispatch.G.resume_handler = None
            _sync_native()
            raise


def fgraph_switch_ops(gops: FgraphOps, ops: Ops, *, blocking: bool = True) -> bool:
    """Give a registered user another filter ops (the manager follows).  With
    blocking=False (from inside a callback) gives up instead of waiting for the lock."""
    if not ftrace_lock.acquire(blocking=blocking):
        return False
    try:
        if gops.idx < 0 or gops.ops is ops:
            return gops.ops is ops
        old = gops.ops
        old.flags &= ~(OFL.GRAPH | OFL.SUBOP)
        old.managed = None
        ops.flags |= OFL.GRAPH | OFL.SUBOP | OFL.INITIALIZED
        ops.managed = _rebuild_manager
        gops.ops = ops
        _rebuild_manager()
        _sync_native()
        return True
    finally:
        ftrace_lock.release()


def unregister_ftrace_graph(gops: FgraphOps) -> None:
    """Remove a graph user; frames it asked returns for are skipped from now on."""
    with ftrace_lock:
        if gops.idx < 0 or fgraph_array[gops.idx] is not gops:
            raise FntraceError(f"{gops.name} is not registered")
        idx = gops.idx
        fgraph_array[idx] = fgraph_stub
        _lru.append(idx)
        _S.users = tuple(u for u in _S.users if u[1] is not gops)
        _sync_native()                       # the lane closes before anything else
        gops.idx = -1
        gops.ops.flags &= ~(OFL.GRAPH | OFL.SUBOP)
        gops.ops.managed = None
        if _S.users:
            _rebuild_manager()
            from .core.ops import synchronize
            synchronize()
        else:
            unregister_ftrace_function(graph_ops)
            graph_ops.filter_hash = graph_ops.notrace_hash = EMPTY_HASH
            graph_ops.filter_cached = False
            dispatch.G.ret_handler = None
            dispatch.G.resume_handler = None
            _S.epoch += 1
        _sync_native()


# -- the native twin -------------------------------------------------------------------
# (user, (pair, data)): whose native pair the fast lane holds
_lane: tuple | None = None


def _sync_native() -> None:
    """Tell the native side who owns fgraph's fast lane (see _native.c): the lane is open
    while one user is registered and its ``lane`` gives a native pair; calls already on
    the lane keep being handed to that pair while its user stays registered."""
    global _lane
    native = dispatch._native
    if native is None or not hasattr(native, "fg_sync"):
        return
    users = _S.users
    pair = None
    if len(users) == 1:
        gops = users[0][1]
        if gops.lane is not None:
            pair = gops.lane(gops)
            if pair is not None:
                _lane = (gops, pair)
    if pair is None and _lane is not None and not any(g is _lane[0] for _, g in users):
        _lane = None
    lane, data = _lane[1] if _lane is not None else (None, None)
    native.fg_sync(lane, data, pair is not None, _S.epoch)

# function_graph_enter, fgraph_return and the function_graph tracer's callbacks run in
# fntrace._native when it is built; they use the same ShadowStack and frame objects, so
# reserve/retrieve, task vars and shadow_stack() work unchanged.
def _attach_native() -> None:
    native = dispatch._native
    if native is None:
        return
    global function_graph_enter, fgraph_return
    native.init_fgraph({
        "S": _S, "tls": _tls, "shadow_stack": shadow_stack, "fgraph_array": fgraph_array,
        "contain": contain, "missed": _missed, "State": _State, "ShadowStack": ShadowStack,
        "FgraphFrame": FgraphFrame, "FtraceGraphEnt": FtraceGraphEnt,
        "FtraceGraphRet": FtraceGraphRet, "Ops": Ops, "FtraceHash": FtraceHash,
        "TaskVar": TaskVar, "MAX_DEPTH": SHADOW_STACK_MAX_DEPTH,
        "resume": fgraph_resume, "graph_ops": graph_ops,
    })
    function_graph_enter = native.function_graph_enter
    fgraph_return = native.fgraph_return
    graph_ops.func = graph_ops.saved_func = function_graph_enter


_attach_native()


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
