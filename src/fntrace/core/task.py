"""Thread identity: the CPU column and the comm (the kernel's per-CPU index and
``task_struct.comm``).

Threads get a small index the first time anything of theirs is recorded: it is the CPU
column of every output format and the key of their ring buffer in each instance.
"""
from __future__ import annotations

import os
import threading
import time
import weakref

from .._env import fork_safe, forked_check
from .fetch import caller_frame

# (bound once: a thread's first event asks for both)
from _thread import get_ident as _get_ident, get_native_id as _get_native_id

TYPE_CHECKING = False
if TYPE_CHECKING:                   # typing is costly to import; only checkers need this
    from collections.abc import Callable
    from types import FrameType
    from typing import Any

__all__ = ["wait_thread_gone", "TASK_COMM_LEN", "thread_cpu", "thread_info", "forget_threads", "new_thread_hooks",
           "thread_ended", "own_threads", "fntrace_thread", "thread_name", "thread_parent",
           "follow_forks", "start_thread", "own_thread_hooks"]

TASK_COMM_LEN = 16

# Reentrant: while a thread holds it (thread_ended at its end), CPython may run program
# code on that thread -- a pending call, a finalizer -- whose first traced event asks
# for the thread's index (a plain lock deadlocked there: CPython's test_capi).
# (_env is outside the strict modules: its functions are not annotated)
_cpu_lock = fork_safe(threading.RLock())  # type: ignore[no-untyped-call, unused-ignore]
_cpu_of: dict[tuple[int, int], int] = {}   # (get_ident(), get_native_id()) -> cpu
thread_info: dict[int, tuple[int, str]] = {}   # cpu -> (native id, comm)


def _thread_object(ident: int) -> threading.Thread | None:
    """The Thread object of a thread, found without side effects.

    threading.current_thread() would make a _DummyThread (and change the program's
    thread numbering) for a thread still starting up; a thread's first traced calls
    happen in Thread._bootstrap before it is in threading._active, so look there, then
    in the starting threads, then for the Thread object on the stack.
    """
    # threading's private tables: not in the stubs
    t: threading.Thread | None = threading._active.get(ident)   # type: ignore[attr-defined]
    if t is None:
        for cand in list(threading._limbo.values()):    # type: ignore[attr-defined]
            if getattr(cand, "_ident", None) == ident:
                t = cand
                break
    if t is None:
        f: FrameType | None = caller_frame(1)
        while f is not None:
            if f.f_code.co_name in ("_bootstrap", "_bootstrap_inner") and "self" in f.f_locals:
                cand = f.f_locals["self"]
                if isinstance(cand, threading.Thread):
                    t = cand
            f = f.f_back
    return t


def _thread_name(ident: int) -> str:
    t = _thread_object(ident)
    name = getattr(t, "_name", None) if t is not None else None
    return name if isinstance(name, str) else "<...>"


def thread_name() -> str:
    """The calling thread's full name (the comm is its first 15 characters)."""
    return _thread_name(threading.get_ident())


def thread_cpu() -> int:
    """The calling thread's CPU index (assigned on first use, never reused)."""
    # An ident (and a native id) can be reused by a later thread: the pair names one.
    key = (_get_ident(), _get_native_id())
    cpu = _cpu_of.get(key)
    if cpu is None:
        cpu = _new_cpu(key)
    return cpu


def _new_cpu(key: tuple[int, int]) -> int:
    forked_check()
    with _cpu_lock:
        cpu = _cpu_of.get(key)
        if cpu is None:
            cpu = len(thread_info)
            # A started thread is in threading's table (asked first, without the calls
            # _thread_name makes); comm is TASK_COMM_LEN-1 characters in the kernel.
            t = threading._active.get(key[0])      # type: ignore[attr-defined]
            name = getattr(t, "_name", None) if t is not None else None
            if not isinstance(name, str):
                name = _thread_name(key[0])
            thread_info[cpu] = (key[1], name[:TASK_COMM_LEN - 1])
            _cpu_of[key] = cpu
            for hook in new_thread_hooks:
                hook(cpu)
    return cpu


# Native ids of fntrace's own threads (the control endpoint's, a FUSE mount's): never
# traced, whatever the filters say (the hot path asks on a thread's first event).
own_threads: set[int] = set()


# Run on a thread as it becomes fntrace's own (trace_array.py: it drops the verdicts the
# thread's earlier events left in each instance's cache).
own_thread_hooks: list[Callable[[], object]] = []


def fntrace_thread() -> None:
    """Called first thing on a thread fntrace starts for itself: nothing it runs is
    ever traced, by any instance."""
    own_threads.add(threading.get_native_id())
    for hook in own_thread_hooks:
        hook()


def wait_thread_gone(native_id: int, timeout: float) -> None:
    """Wait until the OS thread ``native_id`` is gone from the process.  A thread that
    has left its last Python step still exists a moment longer (its state is cleared
    first), and fork() counts it until then (CPython's multi-threaded fork warning
    reads the process's thread count).  Only C runs here (os.stat, time.sleep), so
    the wait is never traced on the program's thread."""
    if not native_id:
        return
    task_dir = f"/proc/self/task/{native_id}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.stat(task_dir)
        except OSError:
            return
        time.sleep(0.0002)


def _own_bootstrap(fn: Callable[..., object], args: tuple[Any, ...]) -> None:
    fntrace_thread()
    fn(*args)


def start_thread(fn: Callable[..., object], *args: Any) -> int:
    """Start a thread for fntrace itself, marked as its own before it runs anything
    (a threading.Thread would run threading's bootstrap first, traced).  Its ident."""
    import _thread
    return _thread.start_new_thread(_own_bootstrap, (fn, args))


# -- fork following (options/function-fork, options/event-fork) -----------------------
#
# The kernel adds a child to a pid list from the sched_process_fork tracepoint, which
# names the parent.  A Python thread's "fork" is Thread.start(), which hands
# self._bootstrap to threading's module-level _start_new_thread (3.11, 3.12) or
# _start_joinable_thread (3.13+), on the starting thread.  That name is wrapped (not
# Thread.start or any of the program's objects): the wrapper notes which thread started
# which Thread and calls the original.  The audit event "_thread.start_new_thread" would
# do without wrapping, but 3.11 has none and 3.13 renamed it.  Threads started with
# _thread.start_new_thread directly have no Thread object to tie the pair to and are
# not followed.

# Thread -> parent's native id
_parent_of_thread: weakref.WeakKeyDictionary[threading.Thread, int] | None = None
_parent_of: dict[int, int] = {}                          # native id -> parent's native id
_following = False
_START_NAMES = ("_start_joinable_thread", "_start_new_thread")


def _current_parent() -> int | None:
    t = _thread_object(threading.get_ident())
    if t is None or _parent_of_thread is None:
        return None
    try:
        return _parent_of_thread.get(t)
    except TypeError:
        return None


def _note_start(function: object) -> None:
    try:
        t = getattr(function, "__self__", None)
        if isinstance(t, threading.Thread):
            me = threading.get_native_id()
            # the parent's own parent, while the parent is surely running
            if me not in _parent_of:
                p = _current_parent()
                if p is not None:
                    _parent_of[me] = p
            if _parent_of_thread is not None:       # (made before start was wrapped)
                _parent_of_thread[t] = me
    except Exception:
        pass      # never into the program's Thread.start


def _wrap_start(orig: Callable[..., Any]) -> Callable[..., Any]:
    def start(function: Callable[..., object], *args: Any, **kwargs: Any) -> Any:
        _note_start(function)
        return orig(function, *args, **kwargs)
    start.__wrapped__ = orig        # type: ignore[attr-defined]  # functools.wraps' attribute, set by hand
    return start


def follow_forks() -> None:
    """Start recording which thread started which (idempotent)."""
    global _following, _parent_of_thread
    if _following:
        return
    _parent_of_thread = weakref.WeakKeyDictionary()
    for name in _START_NAMES:
        orig = getattr(threading, name, None)
        if orig is not None:
            setattr(threading, name, _wrap_start(orig))
            break
    _following = True


def thread_parent(native_id: int | None = None) -> int | None:
    """The native id of the thread that started the calling thread (native_id: the
    calling thread's, given to save the call), if it was started while forks were
    followed."""
    if native_id is None:
        native_id = threading.get_native_id()
    p = _parent_of.get(native_id)
    if p is None and _following:
        p = _current_parent()
        if p is not None:
            _parent_of[native_id] = p
    return p


# Called once per thread, on the thread, with the index it gets (cli/record.py grants
# the pure hot path's callbacks their stack there).
new_thread_hooks: list[Callable[[int], object]] = []


def thread_ended() -> None:
    """The calling thread is ending: its ident may be reused by a new thread, which is
    another thread (its index stays with the records it wrote)."""
    key = (_get_ident(), _get_native_id())
    # (no lock: each pop is one step, and these keys are this thread's alone)
    _cpu_of.pop(key, None)
    _parent_of.pop(key[1], None)
    if _native is not None:
        _native.thread_exit()


from .. import _env  # noqa: E402

# (_env is outside the strict modules: its functions are not annotated)
_native = _env.native()  # type: ignore[no-untyped-call, unused-ignore]


def forget_threads() -> None:
    """After fork: thread idents of the parent mean nothing in the child."""
    with _cpu_lock:
        _cpu_of.clear()
        thread_info.clear()
        _parent_of.clear()
    # the parent's threads (its own ones too) do not exist in the child
    own_threads.clear()


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
