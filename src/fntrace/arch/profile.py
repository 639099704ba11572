"""sys.setprofile back end (3.11, or FNTRACE_BACKEND=profile): the kernel without
DYNAMIC_FTRACE.  Every call of every function reaches the hook, which looks the code
object up among the patched sites; "patching" a site is adding it to that table.

The discovery trap (as in arch/monitoring.py): while some ops traces every function, a
call that finds no site asks ``_trap``, which lists the code's module if that was not
done yet; a code object still not a site goes in ``dispatch.no_site``, looked up first
next time (there is no DISABLE here).

Threads already running when the hook is installed are not seen (CPython has no
setprofile for all threads before 3.12); threads started afterwards are.
"""
from __future__ import annotations

import sys
import threading

from ..core import dispatch
from ..core.records import FTRACE_FL, DynFtrace, record_table
from ..errors import BusyError

__all__ = ["ProfileBackend"]

_DIRECT_EN = int(FTRACE_FL.DIRECT_EN)
_RET = int(FTRACE_FL.RET)
no_site = dispatch.no_site


class ProfileBackend:
    name = "profile"

    def __init__(self) -> None:
        self.active = False
        self.call_ops = True
        self._hook = None

    def start(self, call_ops: bool = True) -> None:
        if self.active:
            return
        cur = sys.getprofile()
        if cur is not None:
            raise BusyError(f"a profiler is already installed with sys.setprofile: {cur!r}")
        self.call_ops = call_ops
        self._hook = dispatch.profile_hook if call_ops else dispatch.profile_hook_global
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)
        self.active = True

    def set_unwind(self, on: bool) -> None:
        # setprofile reports an exception leaving a frame as a 'return' with None.
        pass

    # -- the discovery trap ---------------------------------------------------------
    supports_trap = True

    def set_trap(self, on: bool) -> None:
        if not on:
            dispatch.G.trap = None
            dispatch.forget(dispatch.no_site)
        elif self.active:
            dispatch.G.trap = self._trap

    def _trap(self, code, glb) -> bool:
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
        if sys.getprofile() is self._hook:
            sys.setprofile(None)
        threading.setprofile(None)
        dispatch.G.trap = None
        dispatch.forget(dispatch.no_site)
        dispatch.forget(dispatch.sites)
        self.__init_patched().clear()
        self.active = False

    def kill(self) -> None:
        """ftrace_kill: no hook from now on; threads that still hold it find no sites."""
        if sys.getprofile() is self._hook:
            sys.setprofile(None)
        threading.setprofile(None)
        dispatch.G.trap = None
        dispatch.forget(dispatch.sites)

    def __init_patched(self) -> dict:
        p = getattr(self, "_patched", None)
        if p is None:
            p = self._patched = {}
        return p

    def make_call(self, rec: DynFtrace) -> None:
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
        code = self.__init_patched().pop(rec.ip, rec.site_code)
        dispatch.forget(dispatch.sites, id(code))


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
