"""ftrace_ops and the one update path (kernel/trace/ftrace.c).

    register / unregister / filter change
        -> __ftrace_hash_rec_update(ops, inc)     per-record ref count and request bits
        -> ftrace_check_record(rec)                IGNORE / MAKE_CALL / MODIFY_CALL / MAKE_NOP
        -> ftrace_replace_code()                   the site's slot, then the back end:
                                                   make_call / modify_call / make_nop

Nothing else patches a site.  The hot path (core/dispatch.py) only reads what this
module writes: the ``sites`` table, each record's ``func``/``ops`` slot, and the global
``ftrace_trace_function`` used when CALL_OPS is configured off.
"""
from __future__ import annotations

import enum
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
# typing is not imported at run time (it is a fifth of fntrace's import cost);
# the annotations are strings (from __future__ import annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Literal

    from .regs import FtraceRegs

from .._env import fork_safe
from ..arch import Backend, make_backend
from ..errors import BusyError, FilterError, FntraceError, NotFoundError
from . import dispatch
from . import stub as _stub
from .stub import sync_stub
from .hash import (EMPTY_HASH, FtraceHash, ModCacheEntry, PendingPattern, apply_mod_cache,
                   apply_pending, ftrace_process_regex, module_scope)
from .records import (FL, FTRACE_NOCLEAR_FLAGS, FTRACE_REF_MAX, DynFtrace, _Ints,
                      record_table)

__all__ = [
    "FTRACE_OPS_FL", "Ops", "register_ftrace_function", "unregister_ftrace_function",
    "ftrace_set_filter", "ftrace_set_notrace", "ftrace_set_filter_ip", "ftrace_set_filter_ips",
    "ftrace_free_filter", "ftrace_ops_test", "ftrace_lock", "ftrace_config", "ftrace_enabled",
    "set_ftrace_enabled", "enabled_functions", "touched_functions", "ftrace_ops_list",
    "backend", "synchronize", "sync_discovery", "FTRACE_OPS_CMD",
    "ftrace_ops_set_global_filter", "ftrace_ops_clear_global_filter", "set_c_calls",
    "c_calls_on",
]


class FTRACE_OPS_FL(enum.IntFlag):
    """ftrace_ops flags (include/linux/ftrace.h).

    SAVE_REGS, SAVE_REGS_IF_SUPPORTED, RECURSION, STUB and IPMODIFY are attributes set
    before registering; the others are state kept by the core.
    """
    ENABLED = 1 << 0                # registered
    DYNAMIC = 1 << 1                # allocated at run time (every Python ops is)
    SAVE_REGS = 1 << 2              # wants the full frame: ftrace_get_regs() non-None
    SAVE_REGS_IF_SUPPORTED = 1 << 3  # same; the frame is always available here
    RECURSION = 1 << 4              # wants recursion protection (given for free: _env)
    STUB = dispatch.OPS_FL_STUB     # placeholder: the list func skips it
    INITIALIZED = 1 << 6            # hashes set up (first filter or first register)
    DELETED = 1 << 7                # being deleted; may not be registered again
    ADDING = 1 << 8
    REMOVING = 1 << 9
    MODIFYING = 1 << 10             # filter being changed
    ALLOC_TRAMP = 1 << 11           # the core made the trampoline
    IPMODIFY = 1 << 12              # replaces the function (live patching); one per function
    PID = 1 << 13                   # honours set_ftrace_pid
    RCU = 1 << 14
    TRACE_ARRAY = 1 << 15           # private is a trace array
    PERMANENT = 1 << 16             # ignores ftrace_enabled=0 and blocks setting it
    DIRECT = 1 << 17                # the direct-call helper ops
    SUBOP = 1 << 18                 # managed by another ops
    GRAPH = 1 << 19                 # part of an fgraph_ops
    # Python: the ops needs return events at its sites (fgraph's manager ops).
    RETURNS = 1 << 24


OFL = _Ints(FTRACE_OPS_FL)
_SAVE_REGS = int(FTRACE_OPS_FL.SAVE_REGS)     # read per call by Ops.test

_ATTRIBUTE_FLAGS = (OFL.SAVE_REGS | OFL.SAVE_REGS_IF_SUPPORTED
                    | OFL.RECURSION | OFL.STUB | OFL.IPMODIFY
                    | OFL.PID | OFL.PERMANENT | OFL.DIRECT
                    | OFL.RCU | OFL.TRACE_ARRAY | OFL.RETURNS
                    | OFL.GRAPH | OFL.SUBOP)

if TYPE_CHECKING:
    Callback = Callable[[DynFtrace, DynFtrace, "Ops", Any], None]



class FTRACE_OPS_CMD(enum.IntEnum):
    """ops_func commands (include/linux/ftrace.h enum ftrace_ops_cmd)."""
    ENABLE_SHARE_IPMODIFY_SELF = 0
    ENABLE_SHARE_IPMODIFY_PEER = 1
    DISABLE_SHARE_IPMODIFY_PEER = 2


class Ops:
    """struct ftrace_ops.

    func         ``func(ip, parent_ip, ops, fregs)``: ip is the traced function's record,
                 parent_ip the caller's, fregs an FtraceRegs
    flags        FTRACE_OPS_FL attributes (SAVE_REGS, IPMODIFY, PID, PERMANENT, ...)
    private      anything the owner wants back in the callback (``ops.private``)
    trampoline   optional: what a site whose only ops is this one calls instead of func
    """
    __slots__ = ("func", "flags", "private", "filter_hash", "notrace_hash", "mod_cache",
                 "notrace_mod_cache", "pending", "notrace_pending", "filter_cached",
                 "trampoline", "ops_func", "direct_call", "name", "nerrors", "saved_func",
                 "managed", "__weakref__")

    def __init__(self, func: Callback | None = None, flags: int = 0, private: Any = None, *,
                 name: str | None = None, trampoline: Callable[..., object] | None = None):
        self.func = func if func is not None else dispatch.ftrace_stub
        self.flags = int(flags) | int(OFL.DYNAMIC)
        self.private = private
        self.filter_hash: FtraceHash = EMPTY_HASH
        self.notrace_hash: FtraceHash = EMPTY_HASH
        self.mod_cache: list[ModCacheEntry] = []
        self.notrace_mod_cache: list[ModCacheEntry] = []
        self.pending: list[PendingPattern] = []
        self.notrace_pending: list[PendingPattern] = []
        # A filter was asked for even if it matches nothing yet (patterns kept for
        # modules not loaded): then an empty filter hash means "none", not "all".
        self.filter_cached = False
        self.trampoline = trampoline
        self.ops_func = None
        self.direct_call = None
        self.saved_func = self.func
        # the manager's rebuild, called when the ops changes (fgraph's, for its users)
        self.managed: Callable[[Ops | None], None] | None = None
        self.nerrors = 0
        self.name = name or getattr(func, "__qualname__", None) or "ops"

    def traces(self, rec: DynFtrace) -> bool:
        """hash_contains_ip(): in the filter (empty = all) and not in notrace."""
        f = self.filter_hash
        if (f or self.filter_cached) and rec not in f:
            return False
        return rec not in self.notrace_hash

    def test(self, rec: DynFtrace, fregs: FtraceRegs | None = None) -> bool:
        """ftrace_ops_test(): as traces(), and a SAVE_REGS ops is never called without
        the full frame (the race the kernel guards against when adding such an ops)."""
        if self.flags & _SAVE_REGS and fregs is not None and not fregs.regs:
            return False
        f = self.filter_hash
        if (f or self.filter_cached) and rec not in f:
            return False
        return rec not in self.notrace_hash

    @property
    def enabled(self) -> bool:
        return bool(self.flags & OFL.ENABLED)

    def __repr__(self) -> str:
        return f"<Ops {self.name} flags={FTRACE_OPS_FL(self.flags & 0xffffff)!r}>"


def ftrace_ops_test(ops: Ops, rec: DynFtrace, fregs: FtraceRegs | None = None) -> bool:
    return ops.test(rec, fregs)


# The stubs a site's slot holds when it is shared or off (ftrace.c ftrace_list_ops,
# ftrace_nop_ops).
list_ops = Ops(dispatch.ftrace_ops_list_func, OFL.STUB, name="ftrace_list_ops")
nop_ops = Ops(dispatch.ftrace_stub, OFL.STUB, name="ftrace_nop_ops")


class _Config:
    """Build-time choices of the kernel, switchable here for measurement."""
    # DYNAMIC_FTRACE_WITH_CALL_OPS: a site with one ops calls it through its own slot.
    # Off, every site goes through the global ftrace_trace_function, which becomes the
    # list func as soon as two ops are registered anywhere (seed 003's "without" table).
    call_ops = True


ftrace_config = _Config()
# (_env is outside the strict modules: its functions are not annotated)
ftrace_lock = fork_safe(threading.RLock())  # type: ignore[no-untyped-call, unused-ignore]
ftrace_ops_list: list[Ops] = []           # most recently registered first
# Ops with cached (:mod: or pending) patterns.  id -> weakref, not a WeakSet: iterating
# a WeakSet runs library code the tracer would trace.
_all_ops_with_caches: dict[int, "weakref.ref[Ops]"] = {}
_state = {"enabled": True}


def ftrace_enabled() -> bool:
    return _state["enabled"]


backend: Backend = make_backend()
# a record's code object changed under a stub: its patched site moves with it
_stub.resite = backend.modify_call

_REF_MASK = FTRACE_REF_MAX
_FL = FL


# ---------------------------------------------------------------------------------
# The update path
# ---------------------------------------------------------------------------------

def _candidates(ops: Ops) -> Iterable[DynFtrace]:
    # With a filter, only its records can match (the kernel stops after hash->count).
    if ops.filter_hash or ops.filter_cached:
        return list(ops.filter_hash)
    return list(record_table.records)


def _rec_wants(others: Iterable[Ops]) -> tuple[bool, bool]:
    """(regs, ret): does any of the ops tracing a record want the full frame, returns."""
    regs = ret = False
    for op in others:
        if op.flags & (OFL.SAVE_REGS | OFL.SAVE_REGS_IF_SUPPORTED):
            regs = True
        if op.flags & OFL.RETURNS:
            ret = True
    return regs, ret


def _find_unique_ops(rec: DynFtrace) -> Ops | None:
    """ftrace_find_unique_ops(): the one registered ops tracing rec, else None."""
    found = None
    for op in ftrace_ops_list:
        if op.traces(rec):
            if found is not None:
                return None
            found = op
    return found


def _hash_rec_update(ops: Ops, inc: bool, recs: Iterable[DynFtrace] | None = None) -> list[DynFtrace]:
    """__ftrace_hash_rec_update(): add or remove ops from the count and request bits of
    every record it traces.  Returns the records whose site may need patching."""
    touched: list[DynFtrace] = []
    for rec in (recs if recs is not None else _candidates(ops)):
        if not rec.index or rec.flags & _FL.DISABLED or not ops.traces(rec):
            continue
        if inc:
            if rec.count == FTRACE_REF_MAX:
                continue
            rec.flags += 1
            if ops.flags & OFL.DIRECT:
                rec.flags |= _FL.DIRECT
            if ops.flags & OFL.IPMODIFY:
                rec.flags |= _FL.IPMODIFY
        else:
            if rec.count == 0:
                continue
            rec.flags -= 1
            if ops.flags & OFL.DIRECT:
                rec.flags &= ~_FL.DIRECT
            if ops.flags & OFL.IPMODIFY:
                rec.flags &= ~_FL.IPMODIFY
        touched.append(rec)
    return touched


def _recompute_request_bits(rec: DynFtrace, others: list[Ops]) -> None:
    """REGS, RET, TRAMP and CALL_OPS request bits from the ops now tracing rec
    (``others``: every registered ops that traces it, in list order)."""
    count = rec.count
    regs, ret = _rec_wants(others) if count else (False, False)
    f = rec.flags & ~(_FL.REGS | _FL.RET | _FL.TRAMP | _FL.CALL_OPS)
    if regs:
        f |= _FL.REGS
    if ret:
        f |= _FL.RET
    if count == 1:
        only = others[0] if len(others) == 1 else None      # _find_unique_ops(rec)
        if only is not None and only.trampoline is not None:
            f |= _FL.TRAMP
        elif only is not None and ftrace_config.call_ops:
            f |= _FL.CALL_OPS
    rec.flags = f


FTRACE_UPDATE_IGNORE, FTRACE_UPDATE_MAKE_CALL, FTRACE_UPDATE_MODIFY_CALL, FTRACE_UPDATE_MAKE_NOP = range(4)


def ftrace_check_record(rec: DynFtrace, enable: bool, update: bool) -> int:
    """What the site must do to match its record (ftrace.c ftrace_check_record)."""
    flag = 0
    count = rec.count
    if enable and count:
        flag = int(_FL.ENABLED)
        if bool(rec.flags & _FL.REGS) != bool(rec.flags & _FL.REGS_EN):
            flag |= _FL.REGS
        if bool(rec.flags & _FL.TRAMP) != bool(rec.flags & _FL.TRAMP_EN):
            flag |= _FL.TRAMP
        if bool(rec.flags & _FL.RET) != bool(rec.flags & _FL.RET_EN):
            flag |= _FL.RET
        # Direct calls and ops calls are special: count matters, they are only enabled
        # when exactly one ops is on the site; otherwise the list func handles them.
        want_direct = bool(rec.flags & _FL.DIRECT) and count == 1
        if want_direct != bool(rec.flags & _FL.DIRECT_EN):
            flag |= _FL.DIRECT
        want_call_ops = bool(rec.flags & _FL.CALL_OPS) and count == 1
        if want_call_ops != bool(rec.flags & _FL.CALL_OPS_EN):
            flag |= _FL.CALL_OPS
    # Nothing changes (the slot may still need rewriting: see _site_target).
    if (rec.flags & _FL.ENABLED) == (flag & _FL.ENABLED) and not (flag & ~_FL.ENABLED):
        return FTRACE_UPDATE_IGNORE if not flag else FTRACE_UPDATE_MODIFY_CALL

    if flag:
        if update:
            for req, en in ((_FL.REGS, _FL.REGS_EN), (_FL.TRAMP, _FL.TRAMP_EN),
                            (_FL.RET, _FL.RET_EN)):
                if flag & req:
                    if rec.flags & req:
                        rec.flags |= en
                    else:
                        rec.flags &= ~en
            if flag & _FL.DIRECT:
                if rec.flags & _FL.DIRECT and count == 1:
                    rec.flags |= _FL.DIRECT_EN
                else:
                    rec.flags &= ~_FL.DIRECT_EN
            if flag & _FL.CALL_OPS:
                if rec.flags & _FL.CALL_OPS and count == 1:
                    rec.flags |= _FL.CALL_OPS_EN
                else:
                    rec.flags &= ~_FL.CALL_OPS_EN
        if not (rec.flags & _FL.ENABLED):
            if update:
                rec.flags |= _FL.ENABLED | _FL.TOUCHED
                if rec.flags & (_FL.DIRECT | _FL.IPMODIFY):
                    rec.flags |= _FL.MODIFIED
            return FTRACE_UPDATE_MAKE_CALL
        if update and rec.flags & (_FL.DIRECT | _FL.IPMODIFY):
            rec.flags |= _FL.MODIFIED
        return FTRACE_UPDATE_MODIFY_CALL

    if update:
        if count:
            # turned off (ftrace_enabled=0) with ops still on it: keep the count
            rec.flags &= ~(_FL.ENABLED | _FL.REGS_EN | _FL.TRAMP_EN | _FL.DIRECT_EN
                           | _FL.CALL_OPS_EN | _FL.RET_EN)
        else:
            # count 0: clear everything but the flags that record history
            rec.flags &= FTRACE_NOCLEAR_FLAGS
    return FTRACE_UPDATE_MAKE_NOP


def _site_target(rec: DynFtrace, others: list[Ops]) -> None:
    """Write the site's slot: what it calls and with which ops (ftrace_rec_update_ops);
    ``others`` as for _recompute_request_bits."""
    if rec.flags & _FL.TRAMP_EN:
        op = others[0] if len(others) == 1 else None
        if op is not None:
            rec.ops, rec.func = op, op.trampoline
            return
    if rec.flags & _FL.CALL_OPS_EN:
        op = others[0] if len(others) == 1 else None
        if op is not None:
            rec.ops, rec.func = op, op.func
            return
    rec.ops, rec.func = list_ops, dispatch.ftrace_ops_list_func


def ftrace_replace_code(recs: Iterable[DynFtrace]) -> None:
    """Apply the records' state to their sites, through the back end."""
    enable = _state["enabled"]
    seen: set[int] = set()
    # A back end whose hook sees every call (sys.setprofile) is installed after the
    # loop: installed at the first site, it would run the rest of this loop through the
    # hook and its discovery trap, call by call (3.11: 14 s native, 51 s pure to enable
    # the function profiler over 14,000 functions; 0.3 s so).
    late = getattr(backend, "start_after_patching", False)
    start = False
    for rec in recs:
        if rec.ip in seen:
            continue
        seen.add(rec.ip)
        others = [op for op in ftrace_ops_list if op.traces(rec)] if rec.count else []
        _recompute_request_bits(rec, others)
        stub_changed = False
        if rec.stub is not None or rec.flags & (_FL.DIRECT | _FL.IPMODIFY):
            stub_changed = sync_stub(rec, others)
        action = ftrace_check_record(rec, enable, True)
        if stub_changed and action == FTRACE_UPDATE_IGNORE and rec.flags & _FL.ENABLED:
            action = FTRACE_UPDATE_MODIFY_CALL
        if action == FTRACE_UPDATE_MAKE_CALL:
            _site_target(rec, others)
            if late:
                start = True
            else:
                _backend_start()
            backend.make_call(rec)
        elif action == FTRACE_UPDATE_MODIFY_CALL:
            # Rewrite the slot even when the call itself is unchanged: with CALL_OPS the
            # associated ops changes without the target changing (ftrace.h).
            _site_target(rec, others)
            backend.modify_call(rec)
        elif action == FTRACE_UPDATE_MAKE_NOP and rec.ops is not None:
            rec.ops, rec.func = nop_ops, dispatch.ftrace_stub
            backend.make_nop(rec)
            rec.ops = rec.func = None
    if start:
        _backend_start()


def _backend_start() -> None:
    if not backend.active:
        backend.start(ftrace_config.call_ops)


def update_ftrace_function() -> None:
    """The global target for sites without CALL_OPS (ftrace.c update_ftrace_function)."""
    live = [op for op in ftrace_ops_list if not op.flags & OFL.STUB]
    dispatch.G.ops_list = tuple(ftrace_ops_list)
    if not live:
        dispatch.G.trace_function, dispatch.G.trace_op = dispatch.ftrace_stub, nop_ops
    elif len(live) == 1:
        dispatch.G.trace_function, dispatch.G.trace_op = live[0].func, live[0]
    else:
        dispatch.G.trace_function, dispatch.G.trace_op = dispatch.ftrace_ops_list_func, list_ops
    backend.set_unwind(any(op.flags & OFL.RETURNS for op in ftrace_ops_list))


def synchronize(timeout: float = 5.0) -> None:
    """Wait until no other thread is inside a callback (the RCU grace period that makes
    "after unregister returns, the callback is never called again" true)."""
    me = threading.get_ident()
    deadline = time.monotonic() + timeout
    codes = dispatch.DISPATCH_CODES
    native = dispatch._native
    if native is not None:
        # The native dispatcher has no frame: each thread counts its callbacks; wait
        # until every thread busy now has left the callback it was in.
        pending = dict(native.busy_threads())
        while pending and time.monotonic() <= deadline:
            for ident, count in list(pending.items()):
                st = native.thread_count(ident)
                if st is None or st[0] == 0 or st[1] != count:
                    del pending[ident]
            if pending:
                time.sleep(0.0002)
    while True:
        busy = False
        for tid, frame in sys._current_frames().items():
            if tid == me:
                continue
            f: FrameType | None = frame
            while f is not None:
                if f.f_code in codes:
                    busy = True
                    break
                f = f.f_back
            if busy:
                break
        if not busy or time.monotonic() > deadline:
            return
        time.sleep(0.0002)


# ---------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------

def _direct_ops_of(rec: DynFtrace) -> Ops | None:
    for op in ftrace_ops_list:
        if op.flags & OFL.DIRECT and op.traces(rec):
            return op
    return None


def _check_ipmodify(ops: Ops, recs: Iterable[DynFtrace]) -> None:
    """One IPMODIFY owner per function; an IPMODIFY ops landing on a function with a
    direct trampoline must be accepted by the direct ops' ops_func
    (__ftrace_hash_update_ipmodify, prepare_direct_functions_for_ipmodify)."""
    if not ops.flags & OFL.IPMODIFY:
        return
    for rec in recs:
        if not ops.traces(rec):
            continue
        if rec.flags & _FL.IPMODIFY:
            raise BusyError(f"{rec.name} is already modified by another IPMODIFY ops")
        if rec.flags & _FL.DIRECT:
            d = _direct_ops_of(rec)
            if d is None or d.ops_func is None or d.ops_func(
                    d, FTRACE_OPS_CMD.ENABLE_SHARE_IPMODIFY_PEER):
                raise BusyError(f"{rec.name} has a direct trampoline that does not share "
                                "the function with an IPMODIFY ops")


def _traces_everything(op: Ops) -> bool:
    return not (op.filter_hash or op.filter_cached)


def _ops_scope() -> Callable[[str], bool] | None | Literal[False]:
    """Which modules registered ops may still select functions from as they load: None
    for all (an ops that traces every function, or a pattern that can match anywhere),
    False for none, else a predicate on module names (core/hash.py module_scope)."""
    preds = []
    op: Ops | None
    for op in ftrace_ops_list:
        if _traces_everything(op) and not op.flags & OFL.STUB:
            return None
    for ref in list(_all_ops_with_caches.values()):
        op = ref()
        if op is None or not (op.flags & OFL.ENABLED or op.managed is not None
                               or _active_followers(op)):
            continue
        words = [p.pattern for p in op.pending + op.notrace_pending]
        words += [str(e) for e in op.mod_cache + op.notrace_mod_cache]
        for w in words:
            pred = module_scope(w)
            if pred is None:
                return None
            preds.append(pred)
    if not preds:
        return False
    return lambda name: any(p(name) for p in preds)


def sync_discovery() -> None:
    """Turn the back end's discovery trap on while anything needs the functions of
    modules loaded from now on (core/records.py discover), off otherwise."""
    record_table.set_scope("ops", _ops_scope())
    want = _state["enabled"] and bool(record_table.scopes)
    if want:
        _backend_start()
    backend.set_trap(want)


_sync_trap = sync_discovery


def register_ftrace_function(ops: Ops) -> None:
    """Start calling ``ops.func`` for every function its filter selects.

    Raises FilterError (EINVAL) for a deleted ops or an IPMODIFY/DIRECT ops without a
    filter, BusyError (EBUSY) if already registered, if PERMANENT while ftrace_enabled
    is off, or if an IPMODIFY ops collides with another.
    """
    with ftrace_lock:
        if ops.flags & OFL.DELETED:
            raise FilterError("ops is being deleted and may not be registered again")
        if ops.flags & OFL.ENABLED:
            raise BusyError(f"{ops.name} is already registered")
        if ops.flags & OFL.PERMANENT and not _state["enabled"]:
            raise BusyError("ftrace_enabled is off: a PERMANENT ops cannot be registered")
        if _state.get("killed"):
            raise FntraceError("ftrace was killed (the process is exiting)")
        if ops.flags & (OFL.IPMODIFY | OFL.DIRECT):
            if not ops.filter_hash:
                raise FilterError("IPMODIFY and DIRECT ops need a non-empty filter")
            if ops.flags & OFL.IPMODIFY and ops.notrace_hash:
                raise FilterError("an IPMODIFY ops may not have a notrace hash")
        # The records a filter selects were listed when it was set; an ops without one
        # traces every function: see _sync_trap (after the ops is on the list).
        _install_module_listener()
        _check_ipmodify(ops, _candidates(ops))
        ops.flags |= OFL.ENABLED | OFL.INITIALIZED | OFL.ADDING
        ftrace_ops_list.insert(0, ops)
        try:
            touched = _hash_rec_update(ops, True)
            update_ftrace_function()
            ftrace_replace_code(touched)
            _sync_trap()
        except BaseException:
            _hash_rec_update(ops, False)
            ftrace_ops_list.remove(ops)
            ops.flags &= ~OFL.ENABLED
            update_ftrace_function()
            ftrace_replace_code(touched if 'touched' in locals() else [])
            _sync_trap()
            raise
        finally:
            ops.flags &= ~OFL.ADDING
        _install_module_listener()


def unregister_ftrace_function(ops: Ops) -> None:
    """Stop calling ``ops.func``.  When this returns the callback is running nowhere and
    will not be called again."""
    with ftrace_lock:
        if not ops.flags & OFL.ENABLED:
            raise FilterError(f"{ops.name} is not registered")
        ops.flags |= OFL.REMOVING
        if ops.flags & OFL.IPMODIFY:
            for rec in list(ops.filter_hash):
                d = _direct_ops_of(rec) if rec.flags & _FL.DIRECT else None
                if d is not None and d.ops_func is not None:
                    d.ops_func(d, FTRACE_OPS_CMD.DISABLE_SHARE_IPMODIFY_PEER)
        touched = _hash_rec_update(ops, False)
        ftrace_ops_list.remove(ops)
        ops.flags &= ~OFL.ENABLED
        update_ftrace_function()
        ftrace_replace_code(touched)
        ops.flags &= ~OFL.REMOVING
        _sync_trap()
        if not ftrace_ops_list and backend.active:
            backend.stop()
    synchronize()


# ---------------------------------------------------------------------------------
# Filters
# ---------------------------------------------------------------------------------

def _move_hash(ops: Ops, new_filter: FtraceHash | None, new_notrace: FtraceHash | None,
               filter_cached: bool | None = None) -> None:
    """ftrace_hash_move_and_update_ops(): swap an ops' hashes; for a registered ops,
    remove it from every record, publish the new hashes, add it back, patch."""
    registered = bool(ops.flags & OFL.ENABLED)
    if registered:
        ops.flags |= OFL.MODIFYING
        old = _hash_rec_update(ops, False)
    else:
        old = []
    if new_filter is not None:
        ops.filter_hash = new_filter if new_filter else EMPTY_HASH
    if new_notrace is not None:
        ops.notrace_hash = new_notrace if new_notrace else EMPTY_HASH
    if filter_cached is not None:
        ops.filter_cached = filter_cached
    if registered:
        new = _hash_rec_update(ops, True)
        ftrace_replace_code(old + new)
        ops.flags &= ~OFL.MODIFYING
    if ops.managed is not None:
        # A subop (an fgraph user's filter): its manager's hashes follow
        # (ftrace_hash_move_and_update_subops).
        ops.managed(ops)
    for f in _followers(ops):
        _move_hash(f, ops.filter_hash, ops.notrace_hash, ops.filter_cached)
    _sync_trap()


# Ops sharing another's filter (ftrace_ops_set_global_filter): the kernel points their
# func_hash at the global ops' hash; here a change of the source's hashes is copied to
# each follower through _move_hash, so a registered follower is re-counted and patched.
# id(source) -> (weakref to the source, [weakrefs to followers]); the source's weakref
# tells a reused id apart (and its callback drops the entry).
_hash_followers: dict[int, tuple["weakref.ref[Ops]", list["weakref.ref[Ops]"]]] = {}


def _followers(ops: Ops) -> list[Ops]:
    entry = _hash_followers.get(id(ops))
    if entry is None or entry[0]() is not ops:
        return []
    return [f for f in (r() for r in entry[1]) if f is not None]


def _active_followers(ops: Ops) -> bool:
    """A follower is registered (or an fgraph user's filter): the source's cached
    patterns still select functions of modules loaded later (_ops_scope)."""
    return any(f.flags & OFL.ENABLED or f.managed is not None for f in _followers(ops))


def ftrace_ops_set_global_filter(ops: Ops, global_ops: Ops) -> None:
    """``ops`` traces what ``global_ops``' filter and notrace hashes select, now and after
    every change of them (ftrace.c ftrace_ops_set_global_filter, where the global ops is
    the top level's: the function profiler follows set_ftrace_filter this way)."""
    with ftrace_lock:
        key = id(global_ops)
        entry = _hash_followers.get(key)
        if entry is None or entry[0]() is not global_ops:
            def drop(r: weakref.ref[Ops], k: int = key) -> None:
                _drop_followers(k, r)
            entry = (weakref.ref(global_ops, drop), [])
            _hash_followers[key] = entry
        refs = entry[1]
        refs[:] = [r for r in refs if r() is not None and r() is not ops]
        refs.append(weakref.ref(ops))
        _move_hash(ops, global_ops.filter_hash, global_ops.notrace_hash,
                   global_ops.filter_cached)
        ops.flags |= OFL.INITIALIZED


def ftrace_ops_clear_global_filter(ops: Ops, global_ops: Ops) -> None:
    """``ops`` stops following ``global_ops`` (its hashes stay as they are)."""
    with ftrace_lock:
        entry = _hash_followers.get(id(global_ops))
        if entry is not None and entry[0]() is global_ops:
            entry[1][:] = [r for r in entry[1] if r() is not None and r() is not ops]


def _drop_followers(key: int, ref: "weakref.ref[Ops]") -> None:
    entry = _hash_followers.get(key)
    if entry is not None and entry[0] is ref:
        del _hash_followers[key]



def _set_regex(ops: Ops, buf: str | None, reset: bool, enable: bool, keep_unmatched: bool) -> None:
    with ftrace_lock:
        if buf:
            # only the modules the words can reach are listed (module_scope)
            record_table.refresh(module_scope(buf))
            _name_c_functions(buf)
        if enable:
            cur, mod_cache, pending = ops.filter_hash, ops.mod_cache, ops.pending
        else:
            cur, mod_cache, pending = ops.notrace_hash, ops.notrace_mod_cache, ops.notrace_pending
        new = FtraceHash() if reset else cur.copy()
        new_cache = [] if reset else list(mod_cache)
        new_pending = [] if reset else list(pending)
        if buf:
            ftrace_process_regex(new, buf, record_table.records, mod_cache=new_cache,
                                 pending=new_pending if keep_unmatched else None,
                                 allow_commands=False,
                                 loaded_modules=record_table.loaded_modules())
        if not enable and ops.flags & OFL.IPMODIFY and new:
            raise FilterError("an IPMODIFY ops may not have a notrace hash")
        if enable:
            _check_owned_filter(ops, new)
        if new_cache or new_pending:
            _all_ops_with_caches[id(ops)] = weakref.ref(ops)
            _install_module_listener()
        if enable:
            ops.mod_cache[:] = new_cache
            ops.pending[:] = new_pending
            cached = bool(new_cache or new_pending)
            _move_hash(ops, new, None, cached)
        else:
            ops.notrace_mod_cache[:] = new_cache
            ops.notrace_pending[:] = new_pending
            _move_hash(ops, None, new)
        ops.flags |= OFL.INITIALIZED


def _name_c_functions(buf: str) -> None:
    """A C function a word names in full (``builtins.len``) gets its record now: C
    functions are listed at their first call (--c-calls), and a filter may come first."""
    for word in buf.split():
        w = word[1:] if word[:1] == "!" else word
        if "." in w and not any(c in w for c in "*?[\\:") and not w[:1].isdigit():
            record_table.c_sym_named(w)


def _check_owned_filter(ops: Ops, new: FtraceHash) -> None:
    """A registered DIRECT or IPMODIFY ops may not trace every function, nor take a
    function another such ops owns (__ftrace_hash_update_ipmodify, direct's -EBUSY)."""
    if not ops.flags & OFL.ENABLED or not ops.flags & (OFL.IPMODIFY | OFL.DIRECT):
        return
    if not new:
        raise FilterError("IPMODIFY and DIRECT ops cannot trace every function")
    for rec in new:
        if ops.traces(rec):
            continue
        if ops.flags & OFL.IPMODIFY and rec.flags & _FL.IPMODIFY:
            raise BusyError(f"{rec.name} is already modified by another IPMODIFY ops")
        if ops.flags & OFL.DIRECT and rec.flags & _FL.DIRECT:
            raise BusyError(f"{rec.name} already has a direct trampoline")


def ftrace_set_filter(ops: Ops, buf: str | None, reset: bool = True, *,
                      keep_unmatched: bool = False) -> None:
    """Set (reset=True) or add to the functions ``ops`` traces.

    ``buf`` uses the set_ftrace_filter grammar (globs, ``!``, indexes, ``FUNC:mod:MOD``);
    ``None`` with reset traces everything again.  A pattern that matches nothing raises
    FilterError (EINVAL) and nothing changes, unless ``keep_unmatched`` (the CLI's
    ``-F``), which keeps it and applies it to modules imported later.
    """
    _set_regex(ops, buf, reset, True, keep_unmatched)


def ftrace_set_notrace(ops: Ops, buf: str | None, reset: bool = True, *,
                       keep_unmatched: bool = False) -> None:
    """Set or add to the functions ``ops`` never traces (notrace wins over filter)."""
    _set_regex(ops, buf, reset, False, keep_unmatched)


def _rec_of(ip: Any) -> DynFtrace:
    rec = record_table.lookup(ip)
    if rec is None:
        raise FilterError(f"{ip!r} is not a traceable function")
    return rec


def ftrace_set_filter_ips(ops: Ops, ips: Iterable[Any], remove: bool = False,
                          reset: bool = False) -> None:
    """Add (or remove) functions by object: functions, methods, code objects or records.
    A non-traceable object raises FilterError (EINVAL); removing one that is not in the
    filter raises NotFoundError (ENOENT)."""
    with ftrace_lock:
        recs = [_rec_of(ip) for ip in ips]
        new = FtraceHash() if reset else ops.filter_hash.copy()
        for rec in recs:
            if remove:
                if rec not in new:
                    raise NotFoundError(f"{rec.name} is not in the filter")
                new.discard(rec)
            else:
                new.add(rec)
        _check_owned_filter(ops, new)
        if reset:
            ops.mod_cache.clear()
            ops.pending.clear()
        _move_hash(ops, new, None, bool(ops.mod_cache or ops.pending))
        ops.flags |= OFL.INITIALIZED


def ftrace_set_filter_ip(ops: Ops, ip: Any, remove: bool = False, reset: bool = False) -> None:
    ftrace_set_filter_ips(ops, [ip], remove, reset)


def ftrace_free_filter(ops: Ops) -> None:
    """Drop both hashes of an unregistered ops (a registered one is left alone)."""
    with ftrace_lock:
        if ops.flags & OFL.ENABLED:
            return
        ops.filter_hash = ops.notrace_hash = EMPTY_HASH
        ops.mod_cache.clear()
        ops.notrace_mod_cache.clear()
        ops.pending.clear()
        ops.notrace_pending.clear()
        ops.filter_cached = False


# ---------------------------------------------------------------------------------
# Module load (ftrace_module_enable)
# ---------------------------------------------------------------------------------

def _on_module_load(module: str, new: list[DynFtrace]) -> None:
    """New records (a module was imported): apply cached filters, then enable the
    records and add every registered ops that traces them (ftrace_module_enable)."""
    with ftrace_lock:
        new = [r for r in new if r.flags & _FL.DISABLED]
        if not new:
            return
        for key, ref in list(_all_ops_with_caches.items()):
            ops = ref()
            if ops is None:
                del _all_ops_with_caches[key]
                continue
            changed = False
            if ops.mod_cache or ops.pending:
                nf = ops.filter_hash.copy()
                if apply_mod_cache(nf, ops.mod_cache, new) + apply_pending(nf, ops.pending, new):
                    ops.filter_hash = nf
                    changed = True
            if ops.notrace_mod_cache or ops.notrace_pending:
                nn = ops.notrace_hash.copy()
                if (apply_mod_cache(nn, ops.notrace_mod_cache, new)
                        + apply_pending(nn, ops.notrace_pending, new)):
                    ops.notrace_hash = nn
                    changed = True
            if changed and ops.managed is not None:
                ops.managed(ops)
            if changed:
                for f in _followers(ops):
                    f.filter_hash, f.notrace_hash = ops.filter_hash, ops.notrace_hash
                    if f.managed is not None:
                        f.managed(f)
        for rec in new:
            rec.flags &= ~_FL.DISABLED
        touched: list[DynFtrace] = []
        for ops in ftrace_ops_list:
            touched.extend(_hash_rec_update(ops, True, new))
        if touched:
            ftrace_replace_code(touched)


def _install_module_listener() -> None:
    if _on_module_load not in record_table.listeners:
        record_table.listeners.append(_on_module_load)


record_table.listeners.append(_on_module_load)


# ---------------------------------------------------------------------------------
# C calls (options/func-c-calls, record --c-calls)
# ---------------------------------------------------------------------------------

# Who wants C calls traced (an instance's option, the API): one switch for the process,
# as the sites it changes are shared; on while anyone wants it.
_c_calls_users: set[object] = set()


def set_c_calls(key: object, on: bool) -> None:
    """Calls of C functions made by traced Python functions are traced too (``key`` says
    who asks; C calls stay on while some key wants them).  Their records are made at
    their first call and filtered as any function (core/records.c_sym)."""
    with ftrace_lock:
        if on:
            _c_calls_users.add(key)
        else:
            _c_calls_users.discard(key)
        want = bool(_c_calls_users)
        if want == dispatch.G.c_calls:
            return
        dispatch.G.c_calls = want
        if not want:
            dispatch.forget(dispatch.c_calls)
        set_c = getattr(backend, "set_c_calls", None)
        if set_c is not None:
            set_c(want)


def c_calls_on() -> bool:
    return dispatch.G.c_calls


# ---------------------------------------------------------------------------------
# ftrace_enabled (the sysctl)
# ---------------------------------------------------------------------------------

def set_ftrace_enabled(on: bool) -> None:
    """/proc/sys/kernel/ftrace_enabled: turn every site off (or back on).  Refused with
    BusyError while a PERMANENT ops is registered."""
    with ftrace_lock:
        on = bool(on)
        if on == _state["enabled"]:
            return
        if not on and any(op.flags & OFL.PERMANENT for op in ftrace_ops_list):
            raise BusyError("a PERMANENT ops is registered")
        _state["enabled"] = on
        ftrace_replace_code([r for r in record_table.records if r.count])
        _sync_trap()


# ---------------------------------------------------------------------------------
# enabled_functions / touched_functions (ftrace.c t_show)
# ---------------------------------------------------------------------------------

def _func_name(f: Any) -> str:
    mod = getattr(f, "__module__", None) or ""
    qn = getattr(f, "__qualname__", None) or repr(f)
    return f"{mod}.{qn}" if mod else qn


def _rec_line(rec: DynFtrace) -> str:
    f = rec.flags
    line = (f"{rec.name} ({rec.count})"
            f"{' R' if f & _FL.REGS else '  '}"
            f"{' I' if f & _FL.IPMODIFY else '  '}"
            f"{' D' if f & _FL.DIRECT else '  '}"
            f"{' O' if f & _FL.CALL_OPS else '  '}"
            f"{' M ' if f & _FL.MODIFIED else '   '}")
    if f & _FL.TRAMP_EN:
        op = _find_unique_ops(rec)
        line += (f"\ttramp: {_func_name(op.trampoline)} ({_func_name(op.func)})"
                 if op is not None else "\ttramp: ERROR!")
    if f & _FL.CALL_OPS_EN:
        op = _find_unique_ops(rec)
        line += f"\tops: {op.name} ({_func_name(op.func)})" if op is not None else "\tops: ERROR!"
    if f & _FL.DIRECT and rec.direct is not None:
        line += f"\n\tdirect-->{_func_name(rec.direct)}"
    return line


def _list_everything() -> None:
    # With the discovery trap on, some loaded modules are not listed yet: listing them
    # patches them, so the file shows what eager listing would have.
    if any(_traces_everything(op) for op in ftrace_ops_list):
        record_table.refresh()


def enabled_functions() -> list[str]:
    with ftrace_lock:
        _list_everything()
        return [_rec_line(r) for r in record_table.records if r.flags & _FL.ENABLED]


def touched_functions() -> list[str]:
    with ftrace_lock:
        _list_everything()
        return [_rec_line(r) for r in record_table.records if r.flags & _FL.TOUCHED]


def ftrace_kill() -> None:
    """Stop every callback at once and leave the sites as they are (ftrace.c ftrace_kill:
    "stops ftrace but in a not so nice way").  For a process about to exit: the per-site
    work of unregistering everything is skipped; the back end stops calling and forgets
    its sites.  Nothing can be registered afterwards."""
    with ftrace_lock:
        _state["killed"] = True
        dispatch.G.trace_function, dispatch.G.trace_op = dispatch.ftrace_stub, nop_ops
        dispatch.G.ret_handler = dispatch.G.resume_handler = None
        backend.kill()


def reset_for_tests() -> None:
    """Unregister everything (used by the test suite between tests)."""
    with ftrace_lock:
        for op in list(ftrace_ops_list):
            unregister_ftrace_function(op)
        _state["enabled"] = True
        for key in list(_c_calls_users):
            set_c_calls(key, False)


# The native twin of the hot path, if built (core/dispatch.py).
dispatch.attach_native(Ops)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
