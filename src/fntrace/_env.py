"""Facts about the running interpreter, one named flag per behaviour (coverage.py's env.py).

Code tests these names, never ``sys.version_info`` directly.
"""
from __future__ import annotations

import os
import sys
import weakref

__all__ = ["PYVERSION", "PYBEHAVIOR", "BACKEND", "PURE", "native", "native_module", "public_dir",
           "fork_safe", "fork_safe_attr", "forked_check"]

PYVERSION = sys.version_info


class PYBEHAVIOR:
    # PEP 669 sys.monitoring exists (3.12+): per-code-object local events, so sites with
    # no ops attached run with no callback at all.  3.11 only has sys.setprofile, which
    # sees every call: the kernel without DYNAMIC_FTRACE.
    has_monitoring = PYVERSION >= (3, 12)

    # PY_UNWIND cannot be a local event (python/cpython#142186), so an exception leaving
    # a traced function is only seen with PY_UNWIND enabled globally.
    unwind_is_local = False

    # Inside a sys.monitoring callback or a setprofile hook the interpreter reports no
    # events (tstate->tracing is raised around the call), so a callback calling a traced
    # function never recurses into tracing.  This is what FTRACE_OPS_FL_RECURSION asks
    # for; it costs nothing here.
    callbacks_are_not_traced = True

    # 3.11's setprofile trampoline (Python/sysmodule.c call_trampoline) copies fast
    # locals to f_locals before every hook call and back after it: reading arguments
    # through frame.f_locals is free there, writing them is not supported.
    profile_syncs_locals = PYVERSION < (3, 12)


# Back end: "monitoring" on 3.12+, "profile" otherwise; FNTRACE_BACKEND=profile forces
# the setprofile back end on 3.12+ (both are tested).
BACKEND = os.environ.get("FNTRACE_BACKEND") or ("monitoring" if PYBEHAVIOR.has_monitoring else "profile")
if BACKEND not in ("monitoring", "profile") or (BACKEND == "monitoring" and not PYBEHAVIOR.has_monitoring):
    BACKEND = "monitoring" if PYBEHAVIOR.has_monitoring else "profile"

# FNTRACE_PURE=1: run the pure-Python hot path even when the native twin is built.
PURE = os.environ.get("FNTRACE_PURE", "") not in ("", "0")


def public_dir(g: dict):
    """A module's ``__dir__`` (PEP 562): its ``__all__`` and its dunders, so that
    ``dir(module)`` shows the API, not what the module happens to import.  Use as
    ``__dir__ = public_dir(globals())`` after ``__all__``."""
    def __dir__() -> list[str]:
        return sorted(set(g["__all__"]) | {n for n in g if n[:2] == "__" == n[-2:]})
    return __dir__


def native_module():
    """The native module whether or not FNTRACE_PURE is set: for what is not the hot
    path and has no behaviour of its own to test (reading a frame's locals without a
    snapshot), or None when it was not built."""
    try:
        from . import _native
    except ImportError:
        return None
    return _native


def native():
    """The native twin (fntrace._native), or None: missing, or FNTRACE_PURE=1."""
    if PURE:
        return None
    try:
        from . import _native
    except ImportError:
        return None
    return _native


# -- locks across fork ------------------------------------------------------------------
# A lock another thread held when a thread forked stays held in the child, where that
# thread does not exist: the child's first traced call that needs it waits for ever
# (a thread's CPU index, a miss in the record table, a hist hit).  As CPython does for
# its own (threading, logging), the child gets each lock back new.  A lock with a
# long-lived owner is registered once; a short-lived owner's by a weak reference.
#
# All of them are made new by one at-fork hook, registered when this module is imported:
# before threading is (nothing here imports it), so it runs in the child before
# threading's own _after_fork — Python code, traced, that must not find a lock of
# fntrace's held by a thread that is gone (CPython's at-fork hooks run in the order
# they were registered).  Each lock's own hook, registered by its module after that
# module imported threading, ran too late.  ``forked_check`` is the same for a
# program that imported threading before fntrace: a slow path calls it before it
# takes a lock.

_locks: list = []
_owners: list = []      # (weak reference to the owner, attribute of its lock)
_pid = [os.getpid()]    # the process whose locks these are


def fork_safe(lock):
    """``lock``, made new in a forked child (a module's lock)."""
    _locks.append(lock)
    return lock


def fork_safe_attr(owner, attr: str = "lock") -> None:
    """``owner.attr`` (a lock) made new in a forked child, for as long as ``owner``
    lives."""
    _owners[:] = [(r, a) for r, a in _owners if r() is not None]
    _owners.append((weakref.ref(owner), attr))


def _reinit_locks() -> None:
    if _pid[0] == os.getpid():
        return          # done already in this child (forked_check)
    _pid[0] = os.getpid()
    for lock in _locks:
        lock._at_fork_reinit()
    for r, attr in _owners:
        o = r()
        lock = getattr(o, attr, None) if o is not None else None
        if lock is not None:
            lock._at_fork_reinit()


def forked_check() -> None:
    """In a forked child whose at-fork hooks have not reached fntrace's yet (another
    module's hook, registered first, runs traced code): its locks made new now."""
    if _pid[0] != os.getpid():
        _reinit_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_locks)
