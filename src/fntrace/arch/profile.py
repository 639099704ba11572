"""sys.setprofile back end (3.11, or FNTRACE_BACKEND=profile): the kernel without
DYNAMIC_FTRACE.  Every call of every function reaches the hook, which looks the code
object up among the patched sites; "patching" a site is adding it to that table.

The discovery trap (as in arch/monitoring.py): while some ops traces every function, a
call that finds no site asks ``_trap``, which lists the code's module if that was not
done yet; a code object still not a site goes in ``dispatch.no_site``, looked up first
next time (there is no DISABLE here).

Threads already running when the hook is installed get it too with the native hook
(``install_all``: what 3.12's PyEval_SetProfileAllThreads does, so a tracer switched on
from a control thread reaches the program's threads), except fntrace's own and those
with a profile function of their own; the pure hook reaches only the installing thread
and threads started afterwards (CPython has no setprofile for all threads before 3.12).
"""
from __future__ import annotations

import _thread
import sys
import threading

from .. import _env
from ..core import dispatch
from ..core.task import own_threads
from ..core.records import FTRACE_FL, DynFtrace, record_table
from ..errors import BusyError

TYPE_CHECKING = False
if TYPE_CHECKING:                       # typing is costly to import; only checkers need this
    from collections.abc import Callable
    from types import CodeType
    from typing import Any

    # a profile function, as sys.setprofile takes it (or the hook's C shell)
    _Profile = Callable[..., Any]

__all__ = ["ProfileBackend"]

_DIRECT_EN = int(FTRACE_FL.DIRECT_EN)
_RET = int(FTRACE_FL.RET)
no_site = dispatch.no_site


class _PyShim:
    """The Python fallback of _native.ProfileShim (see there): the same decisions,
    but as Python functions, whose own call and return a program's profiler sees."""

    def __init__(self, real_set: Callable[[_Profile | None], None],
                 real_get: Callable[[], _Profile | None], hook: _Profile | None,
                 chained: _Profile, chain: dict[int, _Profile], pure: bool) -> None:
        self.real_set, self.real_get = real_set, real_get
        self.hook, self.chained, self.chain, self.pure = hook, chained, chain, pure
        self.threads: _Profile | None = None
        self.active = 1
        self.installing = 0

    def setprofile(self, function: _Profile | None) -> None:
        ident = _thread.get_ident()
        if function is self.hook or function is self.chained:
            self.real_set(function)
            if self.threads is not None:
                self.chain[ident] = self.threads
                self.real_set(self.chained if self.pure else self.hook)
            return
        if self.installing == ident:
            # as 3.11's sys.setprofile, called from the old function's __del__
            raise RuntimeError("Cannot install a profile function while another "
                               "profile function is being installed")
        old = self.chain.get(ident)
        if function is None:
            self.chain.pop(ident, None)
        else:
            if old is None:
                dispatch.profile_chain_skip.add(ident)
            self.chain[ident] = function
        if old is not None:
            outer, self.installing = self.installing, ident
            old = None                      # its __del__ may run here
            self.installing = outer
        if not self.active:
            self.real_set(function)
            return
        cur = self.real_get()
        if cur is not None and cur is not self.hook and cur is not self.chained:
            return                          # taken by a C-level profiler: leave it
        self.real_set(self.chained if self.pure and function is not None else self.hook)

    def getprofile(self) -> _Profile | None:
        cur = self.real_get()
        if cur is not None and cur is not self.hook and cur is not self.chained:
            return cur                      # installed through the C API (cProfile)
        return self.chain.get(_thread.get_ident())


class ProfileBackend:
    name = "profile"
    # make_call only fills the table the hook reads: the hook can come last
    # (core/ops.ftrace_replace_code)
    start_after_patching = True
    # made when first needed (getattr(self, name, None) until then)
    _real: tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any],
                 Callable[..., Any] | None] | None
    _patched: dict[int, CodeType]       # ip -> code object patched

    def __init__(self) -> None:
        self.active = False
        self.call_ops = True
        self._hook: _Profile | None = None
        self._bare: _Profile | None = None  # _hook outside its shell
        # hook -> the same hook in the pure path's C shell (dispatch.as_registered), made
        # once: the hook is told from the program's profile functions by identity
        self._shells: dict[_Profile, _Profile] = {}

    def _registered(self, hook: _Profile) -> _Profile:
        if dispatch.callback_shell is None:
            return hook
        sh = self._shells.get(hook)
        if sh is None:
            sh = self._shells[hook] = dispatch.as_registered(hook)
        return sh

    def start(self, call_ops: bool = True) -> None:
        if self.active:
            return
        cur = sys.getprofile()
        if cur is not None and cur not in (dispatch.profile_hook, dispatch.profile_hook_global,
                                           getattr(self, "_chained", None),
                                           *self._shells.values()):
            # (fntrace's own hook is a leftover: stop() ran on another thread, a
            # control thread, and could only take the hook off its own)
            raise BusyError(f"a profiler is already installed with sys.setprofile: {cur!r}")
        self.call_ops = call_ops
        self._bare = dispatch.profile_hook if call_ops else dispatch.profile_hook_global
        self._hook = self._registered(self._bare)
        self._start_ident = _thread.get_ident()
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)
        install_all = getattr(self._hook, "install_all", None)
        if install_all is not None:
            install_all(own_threads)
        self._share_profile_api()
        self.active = True

    # -- the program's own profile function --------------------------------------------
    # A thread has one profile function.  While fntrace's is installed, the program's
    # own sys.setprofile/threading.setprofile are kept beside it: fntrace's hook stays,
    # calls the program's function after each event (dispatch.profile_chain), and
    # sys.getprofile() answers the program's function (None when it set none).  A
    # profiler that installs itself through the C API (cProfile) replaces fntrace's
    # hook on its thread: tracing stops there, and profile_taken() says so.

    def _share_profile_api(self) -> None:
        if getattr(self, "_real", None) is not None:
            return
        real_set, real_get = sys.setprofile, sys.getprofile
        real_thr_set = threading.setprofile
        real_thr_get = getattr(threading, "getprofile", None)
        self._real = (real_set, real_get, real_thr_set, real_thr_get)
        chain = dispatch.profile_chain
        pure = dispatch._native is None
        native = _env.native_module()   # type: ignore[no-untyped-call]  # _env is not annotated
        if native is not None and hasattr(native, "ProfileShim"):
            # C functions, as the real ones are: a program's profiler sees the same
            # events for them and no frame of fntrace's.
            # (to the checker the _PyShim it is the twin of: the same attributes)
            shim: _PyShim = native.ProfileShim(real_set, real_get, self._hook,
                                               self._chained_hook(), chain,
                                               dispatch.profile_chain_skip, pure)
            setprofile, getprofile = shim.setprofile, shim.getprofile
        else:
            shim = _PyShim(real_set, real_get, self._hook, self._chained_hook(), chain, pure)
            setprofile, getprofile = shim.setprofile, shim.getprofile
            # bound methods, to the checker plain callables (no __func__)
            for fake, real in ((setprofile, real_set), (getprofile, real_get)):
                fake.__func__.__name__ = real.__name__              # type: ignore[union-attr]
                fake.__func__.__qualname__ = real.__qualname__      # type: ignore[union-attr]
                fake.__func__.__doc__ = real.__doc__                # type: ignore[union-attr]
        self._shim = shim

        def thr_setprofile(func: _Profile | None) -> None:
            shim.threads = func

        def thr_getprofile() -> _Profile | None:
            return shim.threads

        for thr_fake, thr_real in ((thr_setprofile, real_thr_set), (thr_getprofile, real_thr_get)):
            if thr_real is not None:
                # as the program's own introspection (check__all__, inspect) finds them
                thr_fake.__name__, thr_fake.__qualname__ = thr_real.__name__, thr_real.__qualname__
                thr_fake.__doc__, thr_fake.__module__ = thr_real.__doc__, thr_real.__module__
        sys.setprofile, sys.getprofile = setprofile, getprofile
        threading.setprofile = thr_setprofile
        if real_thr_get is not None:
            threading.getprofile = thr_getprofile

    def _chained_hook(self) -> _Profile:
        h: _Profile | None = getattr(self, "_chained", None)
        if h is None or getattr(self, "_chained_for", None) is not self._hook:
            # (the chain is the callback CPython calls: in the shell, the hook bare in it)
            # (start() set _bare: the chain is made once tracing is on)
            h = self._chained = self._registered(
                dispatch.chained(self._bare))  # type: ignore[arg-type]
            self._chained_for = self._hook
        return h

    def _restore_profile_api(self) -> None:
        real = getattr(self, "_real", None)
        if real is None:
            return
        self._real = None
        self._shim.active = 0
        real_set, real_get, real_thr_set, real_thr_get = real
        sys.setprofile, sys.getprofile = real_set, real_get
        threading.setprofile = real_thr_set
        if real_thr_get is not None:
            threading.getprofile = real_thr_get

    def profile_taken(self) -> str | None:
        """The profile function that replaced fntrace's on this thread (set through the
        C API, as cProfile does), or None."""
        real = getattr(self, "_real", None)
        if real is None or not self.active:
            return None
        if _thread.get_ident() != getattr(self, "_start_ident", None):
            # Asked from another thread (the trace writer's, finishing on a fatal
            # signal): that thread never had fntrace's hook.
            return None
        cur = real[1]()
        if cur is self._hook or cur is getattr(self, "_chained", None):
            return None
        # replaced, or removed (a profiler's disable() sets none through the C API)
        return repr(cur) if cur is not None else "since removed"

    def set_unwind(self, on: bool) -> None:
        # setprofile reports an exception leaving a frame as a 'return' with None.
        pass

    # -- the discovery trap ---------------------------------------------------------
    def set_trap(self, on: bool) -> None:
        if not on:
            dispatch.G.trap = None
            dispatch.forget(dispatch.no_site)
        elif self.active:
            dispatch.G.trap = self._trap

    def _trap(self, code: CodeType, glb: dict[str, Any]) -> bool:
        """A call of a code object that is not a site: list its module if that was not
        done yet; True if it is a site now."""
        record_table.discover(code, glb)
        if id(code) in dispatch.sites:
            return True
        dispatch.no_site[id(code)] = code
        return False

    def stop(self) -> None:
        if not self.active:
            return
        self._restore_profile_api()
        mine = dispatch.profile_chain.pop(_thread.get_ident(), None)
        if sys.getprofile() in (self._hook, getattr(self, "_chained", None)):
            sys.setprofile(mine)
        threading.setprofile(None)
        uninstall_all = getattr(self._hook, "uninstall_all", None)
        if uninstall_all is not None:
            # threads that chain a profile function of the program's keep the hook
            uninstall_all(set(dispatch.profile_chain))
        dispatch.G.trap = None
        dispatch.forget(dispatch.no_site)
        dispatch.forget(dispatch.sites)
        self.__init_patched().clear()
        self.active = False

    def kill(self) -> None:
        """ftrace_kill: nothing traced from now on; the threads that hold the hook,
        this one included, find no sites (and still call the program's own profile
        functions).  It is not taken off this thread: sys.setprofile raises an audit
        event ("sys.setprofile") the program's hooks would see after its last line
        (CPython's test_audit), and kill is the end of a recording."""
        self._restore_profile_api()
        threading.setprofile(None)
        dispatch.G.trap = None
        dispatch.forget(dispatch.sites)

    def __init_patched(self) -> dict[int, CodeType]:
        p: dict[int, CodeType] | None = getattr(self, "_patched", None)
        if p is None:
            p = self._patched = {}
        return p

    def set_c_calls(self, on: bool) -> None:
        """The hook sees every C call anyway (c_call, c_return, c_exception): it acts on
        them while dispatch.G.c_calls is set."""

    def make_call(self, rec: DynFtrace) -> None:
        if rec.site_code is None:
            return      # a C function (--c-calls): the hook's c_call finds it
        patched = self.__init_patched()
        old = patched.get(rec.ip)
        if old is not None and old is not rec.site_code:
            dispatch.forget(dispatch.sites, id(old))
        code = rec.site_code
        patched[rec.ip] = code
        if no_site and id(code) in no_site:
            dispatch.forget(no_site, id(code))          # the trap turned it away before
        if rec.flags & _DIRECT_EN:
            dispatch.forget(dispatch.sites, id(code))   # only the direct trampoline: no hook work
        else:
            if rec.flags & _RET:
                # Where the code returns and yields: worked out now, not at its first
                # return, where the time would count in the call's duration.
                dispatch.return_offsets(code)
                if rec.gen_start >= 0:
                    dispatch.yield_offsets(code)
            dispatch.sites[id(code)] = rec

    def modify_call(self, rec: DynFtrace) -> None:
        self.make_call(rec)

    def make_nop(self, rec: DynFtrace) -> None:
        if rec.site_code is None:
            return
        code = self.__init_patched().pop(rec.ip, rec.site_code)
        dispatch.forget(dispatch.sites, id(code))


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
