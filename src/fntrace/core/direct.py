"""Direct calls (ftrace.c register_ftrace_direct; seed 000): the API.

A direct ops routes every call of the functions in its filter to a trampoline
``addr(original, *args, **kwargs)``.  The update path installs the code-patching stub
(core/stub.py) while a DIRECT or IPMODIFY ops owns a function and removes it after; an
IPMODIFY ops' callback redirects a call with ftrace_regs_set_instruction_pointer().
"""
from __future__ import annotations

from collections.abc import Callable
# typing is not imported at run time (it is a fifth of fntrace's import cost);
# the annotations are strings (from __future__ import annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .ops import Ops

from ..errors import BusyError, FilterError, UsageError
from .dispatch import ftrace_stub
from .ops import (FTRACE_OPS_CMD, OFL, ftrace_free_filter, ftrace_lock, register_ftrace_function,
                  unregister_ftrace_function)
from .records import FL, record_table
from .stub import check_patchable, ftrace_regs_set_instruction_pointer, functions_of, site_of

__all__ = ["FTRACE_OPS_CMD", "ftrace_find_rec_direct", "ftrace_regs_set_instruction_pointer",
           "register_ftrace_direct", "modify_ftrace_direct", "unregister_ftrace_direct"]


def ftrace_find_rec_direct(ip: Any) -> Callable[..., object] | None:
    """The direct trampoline attached to a function, or None."""
    rec = record_table.lookup(ip)
    return rec.direct if rec is not None else None


def register_ftrace_direct(ops: Ops, addr: Callable[..., Any]) -> None:
    """Route every call of the functions in ``ops``'s filter to ``addr``, a trampoline
    ``addr(original, *args, **kwargs)`` that decides whether and how to call the
    original and what to return.

    FilterError (EINVAL): ops already registered, or no function in its filter;
    BusyError (EBUSY): a function already has a direct trampoline, or is owned by an
    IPMODIFY ops whose sharing this ops' ops_func does not accept.
    """
    if not callable(addr):
        raise UsageError(f"direct trampoline {addr!r} is not callable")
    with ftrace_lock:
        if ops.flags & OFL.ENABLED or ops.direct_call is not None:
            raise FilterError(f"{ops.name} is already registered")
        if not ops.filter_hash:
            raise FilterError(f"{ops.name}: no function in the filter (set it with "
                              "ftrace_set_filter_ip first)")
        if ops.func is not ftrace_stub or ops.trampoline is not None:
            raise FilterError(f"{ops.name}: a direct ops must not have func or trampoline")
        recs = list(ops.filter_hash)
        for rec in recs:
            if rec.flags & FL.DIRECT:
                raise BusyError(f"{rec.name} already has a direct trampoline")
            if rec.stub is None:
                funcs = functions_of(rec)
                if not funcs:
                    raise UsageError(f"{rec.name}: no function object uses this code (yet)")
                for fn in funcs:
                    check_patchable(fn)
        for rec in recs:
            if rec.flags & FL.IPMODIFY:
                ok = ops.ops_func is not None and not ops.ops_func(
                    ops, FTRACE_OPS_CMD.ENABLE_SHARE_IPMODIFY_SELF)
                if not ok:
                    raise BusyError(f"{rec.name} is modified by an IPMODIFY ops and "
                                    f"{ops.name} does not accept sharing it")
        # Ops.direct_call has no declared type in core/ops.py yet (inferred None)
        ops.direct_call = addr      # type: ignore[assignment, unused-ignore]
        ops.flags |= OFL.DIRECT
        try:
            register_ftrace_function(ops)
        except BaseException:
            ops.direct_call = None
            ops.flags &= ~OFL.DIRECT
            raise


def modify_ftrace_direct(ops: Ops, addr: Callable[..., Any]) -> None:
    """Switch a registered direct ops to a new trampoline; every call goes to the old or
    the new one, never neither."""
    if not callable(addr):
        raise UsageError(f"direct trampoline {addr!r} is not callable")
    with ftrace_lock:
        if not ops.flags & OFL.ENABLED or ops.direct_call is None:
            raise FilterError(f"{ops.name} is not a registered direct ops")
        ops.direct_call = addr
        for rec in ops.filter_hash:
            site = site_of(rec)
            if site is not None:
                site.tramp = addr          # one store: atomic for callers
            rec.direct = addr


def unregister_ftrace_direct(ops: Ops, addr: Callable[..., Any],
                             free_filters: bool = True) -> None:
    """Detach the trampoline; the functions run their own code again (same code object)."""
    with ftrace_lock:
        if not ops.flags & OFL.ENABLED or ops.direct_call is None:
            raise FilterError(f"{ops.name} is not a registered direct ops")
        if ops.direct_call is not addr:
            raise FilterError(f"{ops.name} is attached to {ops.direct_call!r}, not {addr!r}")
        unregister_ftrace_function(ops)
        ops.direct_call = None
        ops.flags &= ~OFL.DIRECT
        if free_filters:
            ftrace_free_filter(ops)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
