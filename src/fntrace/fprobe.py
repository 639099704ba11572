"""fprobe: function entry/exit probes on fgraph (kernel/trace/fprobe.c, seed 004).

All fprobes with an exit handler share ONE fgraph user, ``fprobe_graph_ops``: its filter
is the union of their functions.  Fprobes without an exit handler run on a plain ops,
``fprobe_ftrace_ops``, and cost no shadow-stack frame.  Two tables:

    fprobe_ip_table   record -> [fprobe, ...]    who probes this function (entry path)
    fprobe_table      {fprobe}                   who is still registered (exit path)

On entry, the fprobes of the function are run; each one that has an exit handler (and
whose entry handler did not return true) gets a header ``(fp, entry_data)`` in the data
reserved on the shadow stack for that call.  On return the headers are read back and
``exit_handler`` runs only for fprobes still in ``fprobe_table`` — an fprobe unregistered
while calls are in flight is never called for them.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
# typing is not imported at run time (it is a fifth of fntrace's import cost);
# the annotations are strings (from __future__ import annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .fgraph import FgraphFrame

from ._env import fork_safe
from .core.dispatch import caller_frame, contain
from .core.hash import FtraceHash, glob_match
from .core.ops import (OFL, Ops, _move_hash, ftrace_lock, register_ftrace_function,
                       unregister_ftrace_function)
from .core.records import DynFtrace, record_table
from .errors import FilterError, FntraceError, NoSpaceError, NotFoundError
from .fgraph import (FgraphOps, register_ftrace_graph, shadow_stack, unregister_ftrace_graph)

__all__ = [
    "Fprobe", "register_fprobe", "register_fprobe_ips", "register_fprobe_syms",
    "unregister_fprobe", "enable_fprobe", "disable_fprobe", "fprobe_is_registered",
    "fprobe_count_ips_from_filter", "FPROBE_FL_DISABLED", "MAX_FPROBE_DATA_SIZE",
]

FPROBE_FL_DISABLED = 1
MAX_FPROBE_DATA_SIZE_WORD = 15
MAX_FPROBE_DATA_SIZE = MAX_FPROBE_DATA_SIZE_WORD * 8

if TYPE_CHECKING:
    EntryHandler = Callable[["Fprobe", DynFtrace, Any, Any, Any], Any]
    ExitHandler = Callable[["Fprobe", DynFtrace, Any, Any, Any], None]


class Fprobe:
    """struct fprobe.

    entry_handler    ``entry_handler(fp, entry_ip, ret_ip, fregs, entry_data)``; a true
                     return cancels this call's exit handler
    exit_handler     ``exit_handler(fp, entry_ip, ret_ip, fregs, entry_data)``
    entry_data_size  bytes of per-call data (a bytearray, rounded up to words, at most
                     15 words) shared by the two handlers of one call
    nmissed          calls whose handlers could not run (recursion, no shadow-stack room)
    """

    error_label = "fprobe handler of"    # what dispatch.contain() calls it

    def __init__(self, entry_handler: EntryHandler | None = None,
                 exit_handler: ExitHandler | None = None, entry_data_size: int = 0, *,
                 name: str | None = None, entry_data_type: Callable[[int], Any] = bytearray):
        # entry_data_type: what holds the per-call data; bytearray like the kernel's
        # memory, or e.g. ``lambda n: [None] * n`` to keep Python objects.
        self.entry_data_type = entry_data_type
        self.entry_handler = entry_handler
        self.exit_handler = exit_handler
        self.entry_data_size = entry_data_size
        self.nmissed = 0
        self.flags = 0
        self.nerrors = 0
        self.ips: list[DynFtrace] = []
        self.name = name or getattr(entry_handler, "__qualname__", None) or "fprobe"

    def __repr__(self) -> str:
        return f"<Fprobe {self.name} ips={len(self.ips)} nmissed={self.nmissed}>"


class _Tables:
    def __init__(self) -> None:
        self.ip_table: dict[DynFtrace, tuple[Fprobe, ...]] = {}
        self.fprobes: set[int] = set()          # id() of registered fprobes
        self.graph_refs = 0
        self.ftrace_refs = 0


_T = _Tables()
_lock = fork_safe(threading.RLock())


def _ret_ip(fregs) -> DynFtrace | None:
    back = caller_frame(fregs.frame)
    if back is None:
        return None
    return record_table.by_code.get(id(back.f_code)) or record_table.sym(back.f_code)


# ---------------------------------------------------------------------------------
# The two back ends
# ---------------------------------------------------------------------------------

def fprobe_ftrace_entry(ip, parent_ip, op, fregs) -> None:
    """Entry-only fprobes (no exit handler): a plain ops callback."""
    for fp in _T.ip_table.get(ip, ()):
        if fp.exit_handler is not None or fp.flags & FPROBE_FL_DISABLED or fp.entry_handler is None:
            continue
        try:
            fp.entry_handler(fp, ip, parent_ip, fregs, None)
        except (Exception, SystemExit) as exc:
            if contain(fp, exc):
                raise


def fprobe_fgraph_entry(trace, gops, fregs) -> bool:
    """fgraph entry: run the entry handlers and keep {fp, data} for the exits."""
    fps = _T.ip_table.get(trace.func, ())
    pending: list | None = None
    ret_ip = None
    for fp in fps:
        if fp.exit_handler is None:
            continue                 # served by fprobe_ftrace_ops
        if fp.flags & FPROBE_FL_DISABLED:
            continue
        data = fp.entry_data_type(fp.entry_data_size) if fp.entry_data_size else None
        cancel = False
        if fp.entry_handler is not None:
            if ret_ip is None:
                ret_ip = _ret_ip(fregs)
            try:
                cancel = bool(fp.entry_handler(fp, trace.func, ret_ip, fregs, data))
            except (Exception, SystemExit) as exc:
                if contain(fp, exc):
                    raise
        if not cancel:
            if pending is None:
                pending = []
            pending.append((fp, data))
    if not pending:
        return False
    st = shadow_stack()
    fr: FgraphFrame = st.cur  # type: ignore[assignment]  # the frame whose entry this runs for
    if fr.data is None:
        fr.data = {}
    # The headers ride in the user's reserved slot (fgraph_reserve_data's place).
    fr.data[gops.idx] = pending
    return True


def fprobe_fgraph_return(trace, gops, fregs) -> None:
    st = shadow_stack()
    fr = st.ret
    pending = fr.data.get(gops.idx) if fr is not None and fr.data else None
    if not pending:
        return
    ret_ip = None
    live = _T.fprobes
    for fp, data in pending:
        # An fprobe unregistered (or disabled) since the entry is not called.
        if id(fp) not in live or fp.flags & FPROBE_FL_DISABLED:
            continue
        if ret_ip is None:
            ret_ip = _ret_ip(fregs)
        try:
            fp.exit_handler(fp, trace.func, ret_ip, fregs, data)
        except (Exception, SystemExit) as exc:
            if contain(fp, exc):
                raise


def fprobe_fgraph_missed(rec) -> None:
    """No room on the shadow stack for this call: every enabled fprobe with an exit
    handler on it misses it (fprobe.c: reserve failure)."""
    for fp in _T.ip_table.get(rec, ()):
        if fp.exit_handler is not None and not fp.flags & FPROBE_FL_DISABLED:
            fp.nmissed += 1


fprobe_graph_ops = FgraphOps(fprobe_fgraph_entry, fprobe_fgraph_return, name="fprobe_graph_ops")
fprobe_graph_ops.missed = fprobe_fgraph_missed
fprobe_ftrace_ops = Ops(fprobe_ftrace_entry, 0,
                        name="fprobe_ftrace_ops")


def _sync_backends() -> None:
    """Point the two back ends' filters at the union of their fprobes' functions, and
    register or unregister them as their users come and go."""
    graph_ips: set[DynFtrace] = set()
    ftrace_ips: set[DynFtrace] = set()
    for rec, fps in _T.ip_table.items():
        for fp in fps:
            (graph_ips if fp.exit_handler is not None else ftrace_ips).add(rec)
    for ops_, ips, is_graph in ((fprobe_graph_ops.ops, graph_ips, True),
                                (fprobe_ftrace_ops, ftrace_ips, False)):
        registered = (fprobe_graph_ops.idx >= 0) if is_graph else bool(
            ops_.flags & OFL.ENABLED)
        if ips:
            _move_hash(ops_, FtraceHash(ips), None, False)
            if not registered:
                if is_graph:
                    register_ftrace_graph(fprobe_graph_ops)
                else:
                    register_ftrace_function(ops_)
        elif registered:
            if is_graph:
                unregister_ftrace_graph(fprobe_graph_ops)
            else:
                unregister_ftrace_function(ops_)


# ---------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------

def _fprobe_init(fp: Fprobe) -> None:
    if fp.entry_handler is None and fp.exit_handler is None:
        raise FntraceError(f"{fp.name}: an fprobe needs an entry or an exit handler")
    if fp.entry_data_size < 0 or fp.entry_data_size > MAX_FPROBE_DATA_SIZE:
        err = NoSpaceError(f"{fp.name}: entry_data_size {fp.entry_data_size} is more than "
                           f"{MAX_FPROBE_DATA_SIZE} bytes (15 words)")
        err.errno = 7   # E2BIG
        raise err
    if fp.entry_data_size and fp.entry_data_type is bytearray:
        fp.entry_data_size = (fp.entry_data_size + 7) // 8 * 8
    fp.nmissed = 0


def _register(fp: Fprobe, recs: list[DynFtrace]) -> None:
    with ftrace_lock, _lock:
        if id(fp) in _T.fprobes:
            raise FntraceError(f"{fp.name} is already registered")
        _fprobe_init(fp)
        if not recs:
            raise NotFoundError(f"{fp.name}: no function to probe")
        fp.ips = list(dict.fromkeys(recs))
        _T.fprobes.add(id(fp))
        for rec in fp.ips:
            _T.ip_table[rec] = _T.ip_table.get(rec, ()) + (fp,)
        try:
            _sync_backends()
        except BaseException:
            _remove(fp)
            raise


def _remove(fp: Fprobe) -> None:
    _T.fprobes.discard(id(fp))
    for rec in fp.ips:
        rest = tuple(x for x in _T.ip_table.get(rec, ()) if x is not fp)
        if rest:
            _T.ip_table[rec] = rest
        else:
            _T.ip_table.pop(rec, None)
    _sync_backends()


def _match_filter(filter: str, notfilter: str | None) -> list[DynFtrace]:
    record_table.refresh()
    out = []
    nots = notfilter.split() if notfilter else []
    pats = filter.split()
    for rec in record_table.records:
        if not any(glob_match(p, rec.name) for p in pats):
            continue
        if any(glob_match(p, rec.name) for p in nots):
            continue
        out.append(rec)
    return out


def fprobe_count_ips_from_filter(filter: str, notfilter: str | None = None) -> int:
    return len(_match_filter(filter, notfilter))


def register_fprobe(fp: Fprobe, filter: str, notfilter: str | None = None) -> None:
    """Probe every function whose name matches the glob ``filter`` and not ``notfilter``
    (NotFoundError, ENOENT, if none does)."""
    recs = _match_filter(filter, notfilter)
    if not recs:
        raise NotFoundError(f"{fp.name}: no function matches {filter!r}")
    _register(fp, recs)


def register_fprobe_ips(fp: Fprobe, addrs: Iterable[Any]) -> None:
    """Probe these functions (function objects, methods, code objects or records)."""
    recs = []
    for a in addrs:
        rec = record_table.lookup(a)
        if rec is None:
            raise NotFoundError(f"{a!r} is not a traceable function")
        recs.append(rec)
    _register(fp, recs)


def register_fprobe_syms(fp: Fprobe, syms: Iterable[str]) -> None:
    """Probe functions by exact ``module.qualname``."""
    record_table.refresh()
    by_name: dict[str, list[DynFtrace]] = {}
    for r in record_table.records:
        by_name.setdefault(r.name, []).append(r)
    recs = []
    for s in sorted(syms):
        found = by_name.get(s)
        if not found:
            raise NotFoundError(f"{fp.name}: no function named {s!r}")
        recs.extend(found)
    _register(fp, recs)


def unregister_fprobe(fp: Fprobe) -> None:
    """After this returns neither handler runs again, even for calls in flight."""
    with ftrace_lock, _lock:
        if id(fp) not in _T.fprobes:
            raise FilterError(f"{fp.name} is not registered")
        _remove(fp)
        fp.ips = []
    from .core.ops import synchronize
    synchronize()


def fprobe_is_registered(fp: Fprobe) -> bool:
    return id(fp) in _T.fprobes


def disable_fprobe(fp: Fprobe) -> None:
    """Soft-disable: the hooks stay, the handlers are skipped."""
    fp.flags |= FPROBE_FL_DISABLED


def enable_fprobe(fp: Fprobe) -> None:
    fp.flags &= ~FPROBE_FL_DISABLED


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
