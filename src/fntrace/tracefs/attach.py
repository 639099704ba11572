"""Attach: make a Python program that was started without fntrace controllable.

The kernel's tracefs is there on every running system; a Python program has no
fntrace in it until something puts it there.  ``attach(pid)`` does that from outside:

1. it checks the target (``inspect_target``): the process exists, belongs to our user,
   runs Python, the same Python version (major.minor, and the free-threaded build or
   not) as the fntrace doing the attaching -- fntrace's native module is built for one
   version, and the target imports fntrace from *our* install location -- (a program
   that already serves is controllable whatever its version); it would serve where
   ``fntrace ctl`` looks (``check_runtime_dir``); ptrace is allowed
   (``check_ptrace``: ``kernel.yama.ptrace_scope``, CAP_SYS_PTRACE); it is neither
   stopped nor held by a debugger;
2. it runs a small snippet inside the target (``attach_snippet``) that starts a thread
   and returns; the thread imports fntrace from our install location (which then
   stays appended to the target's ``sys.path``) and calls ``fntrace.serve()``.  The
   snippet runs in a dictionary of its own (nothing is added to ``__main__``), catches
   everything (nothing is raised into the program) and leaves a failure in a file in
   the runtime directory, where ``attach`` reads it;
3. it waits for the control endpoint to appear.

The snippet is run by a maintained injector, not by hand-written ptrace: ``hypno``
(over ``pyinjector``: ptrace, then the target calls ``dlopen`` on a small library whose
constructor takes the GIL and runs the code on the thread it interrupted).  Python
3.14 has the standard way, ``sys.remote_exec(pid, path)`` (PEP 768), which runs a
script file in the target at its next safe point; that path is written for 3.14 but
not exercised by the tests, which run on 3.11-3.13.

``detach(pid)`` asks the endpoint to turn everything off (each instance's tracer to
nop, events off, the ``sys.monitoring`` tool id released) and stop; the program runs
on.  ``fntrace`` stays imported in it, as a module a program imported itself would.
"""
from __future__ import annotations

import errno as _errno
import os
import re
import socket
import sys
import sysconfig
import time
from dataclasses import dataclass

from ..errors import FntraceError
from . import endpoint

__all__ = ["AttachError", "Target", "inspect_target", "python_version_of", "check_ptrace",
           "attach_snippet", "install_location", "attach", "detach", "check_runtime_dir",
           "YAMA_PTRACE_SCOPE"]

YAMA_PTRACE_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"
_CAP_SYS_PTRACE = 19
# pyinjector's error code for a refused ptrace (injector.h: INJERR_PERMISSION).
_INJERR_PERMISSION = -8


class AttachError(FntraceError):
    """attach/detach refused or failed; .errno is the errno the same refusal gives."""

    def __init__(self, msg: str, err: int = _errno.EINVAL):
        super().__init__(msg)
        self.errno = err


@dataclass
class Target:
    pid: int
    exe: str                    # /proc/PID/exe, or "" when it cannot be read
    version: tuple[int, int]    # Python major, minor
    free_threaded: bool         # a 3.13t-style build
    cmdline: str

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}{'t' if self.free_threaded else ''}"


def _ours() -> tuple[tuple[int, int], bool]:
    return sys.version_info[:2], bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _version_text(v: tuple[int, int], ft: bool) -> str:
    return f"{v[0]}.{v[1]}{'t' if ft else ''}"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


# A libpython, a python3.X executable, a lib/python3.X directory, an extension module
# built for cpython-3XX: each names the version of the interpreter that mapped it.
_LIBPYTHON = re.compile(r"/libpython(\d+)\.(\d+)(t?)[^/]*\.so")
_PYEXE = re.compile(r"^python(\d+)\.(\d+)(t?)$")
_PYDIR = re.compile(r"/lib/python(\d+)\.(\d+)(t?)/")
_EXTMOD = re.compile(r"\.cpython-(\d)(\d+)(t?)-[^/]*\.so$")


def python_version_of(exe: str, maps: str) -> tuple[tuple[int, int], bool] | None:
    """The Python version a process runs, from its executable's name and the files it
    has mapped, or None when nothing there is Python's."""
    paths = []
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            paths.append(parts[5].removesuffix(" (deleted)"))
    for p in paths:
        m = _LIBPYTHON.search(p)
        if m:
            return (int(m[1]), int(m[2])), m[3] == "t"
    m = _PYEXE.match(os.path.basename(exe))
    if m:
        return (int(m[1]), int(m[2])), m[3] == "t"
    # A statically linked interpreter under another name (python3, a frozen app): look
    # for its standard library and extension modules.
    exe_dir = os.path.dirname(exe)
    for p in paths:
        m = _EXTMOD.search(p) or _PYDIR.search(p)
        if m and (m.re is _EXTMOD or p.startswith(os.path.dirname(exe_dir))):
            return (int(m[1]), int(m[2])), m[3] == "t"
    return None


def _status(pid: int) -> dict[str, str]:
    text = _read(f"/proc/{pid}/status")
    if text is None:
        raise AttachError(f"no process {pid}", _errno.ESRCH)
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def inspect_target(pid: int, *, same_version: bool = True) -> Target:
    """Check that ``pid`` is a live Python process of ours, of our Python version
    (any 3.11+ with ``same_version=False``)."""
    if pid <= 0:
        raise AttachError(f"no process {pid}", _errno.ESRCH)
    st = _status(pid)
    if st.get("State", "").startswith(("Z", "X")):
        raise AttachError(f"no process {pid} (it has exited)", _errno.ESRCH)
    uids = [int(u) for u in st.get("Uid", "").split()[:3]]
    me = os.getuid()
    if any(u != me for u in uids):
        # Compared by uid, whoever we are: root can ptrace anything, but fntrace does
        # not attach to another user's program (its endpoint would belong to them).
        owner = uids[0] if uids else "?"
        raise AttachError(f"process {pid} belongs to another user (uid {owner}, "
                          f"you are uid {me}): fntrace attaches only to your own "
                          "processes; run fntrace as that user", _errno.EPERM)
    if st.get("Tgid") and st["Tgid"] != str(pid):
        raise AttachError(f"{pid} is a thread of process {st['Tgid']}: attach to "
                          f"{st['Tgid']}", _errno.ESRCH)
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    maps = _read(f"/proc/{pid}/maps")
    if maps is None:
        raise AttachError(f"no process {pid}", _errno.ESRCH)
    found = python_version_of(exe, maps)
    name = os.path.basename(exe) or st.get("Name", "?")
    if found is None:
        raise AttachError(f"process {pid} ({name}) is not a Python process", _errno.EINVAL)
    version, ft = found
    if version < (3, 11):
        raise AttachError(f"process {pid} runs Python {version[0]}.{version[1]}: "
                          "fntrace needs 3.11 or later", _errno.EINVAL)
    ours, our_ft = _ours()
    if same_version and (version, ft) != (ours, our_ft):
        theirs = _version_text(version, ft)
        raise AttachError(
            f"process {pid} runs Python {theirs}, this fntrace runs on Python "
            f"{_version_text(ours, our_ft)}: run `python{theirs} -m fntrace attach {pid}` "
            f"with fntrace installed for Python {theirs}", _errno.EINVAL)
    raw = _read(f"/proc/{pid}/cmdline") or ""
    cmdline = " ".join(a for a in raw.split("\0") if a)
    return Target(pid, exe, version, ft, cmdline)


def _have_cap_sys_ptrace(status: str | None = None) -> bool:
    text = status if status is not None else _read("/proc/self/status") or ""
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> _CAP_SYS_PTRACE & 1)
    return False


def _is_descendant(pid: int) -> bool:
    me = os.getpid()
    seen = 0
    while pid > 1 and seen < 4096:
        if pid == me:
            return True
        st = _read(f"/proc/{pid}/stat")
        if st is None:
            return False
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        pid = int(st[st.rindex(")") + 2:].split()[1])
        seen += 1
    return False


def _ptrace_fix(scope: int) -> str:
    how = ("run fntrace as root or with CAP_SYS_PTRACE" if scope == 2 else
           "`sudo sysctl kernel.yama.ptrace_scope=0`, or run fntrace as root / with "
           "CAP_SYS_PTRACE")
    if scope == 3:
        how = ("it can only be lowered by a reboot (3 is sticky); start the program "
               "with `fntrace record --serve` or call fntrace.serve() in it instead")
    return how


def check_ptrace(pid: int, *, scope_path: str = YAMA_PTRACE_SCOPE,
                 cap: bool | None = None) -> int | None:
    """Refuse up front what Yama will refuse: scope 3 (no ptrace at all), scope 2
    without CAP_SYS_PTRACE, scope 1 for a process that is not our descendant, without
    the capability (a program can still allow us with prctl(PR_SET_PTRACER), which is
    not visible from outside: then the injection itself tells).  Returns the scope
    (None: no Yama)."""
    text = _read(scope_path)
    if text is None:
        return None
    try:
        scope = int(text.strip())
    except ValueError:
        return None
    if cap is None:
        cap = _have_cap_sys_ptrace()
    refused = (scope >= 3 or (scope == 2 and not cap)
               or (scope == 1 and not cap and not _is_descendant(pid)))
    if refused:
        raise AttachError(f"ptrace of process {pid} is not allowed: kernel.yama.ptrace_scope "
                          f"is {scope}; to attach: {_ptrace_fix(scope)}", _errno.EPERM)
    return scope


def install_location() -> str:
    """The directory holding the running fntrace's package (what the target appends to
    its sys.path to import the same fntrace)."""
    # This file is fntrace/tracefs/attach.py.
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def attach_snippet(location: str | None, error_path: str) -> str:
    """The code run inside the target.

    It starts a thread and returns: the import of fntrace and ``serve()`` run there,
    so the program's thread is held only for the injection itself (the import takes
    the GIL in turns with the program, as any thread does).

    The fntrace imported is the one at ``location`` (it speaks the attaching
    fntrace's protocol), even if the program's path has another fntrace: it is loaded
    by the path finder from ``location`` alone, without ``sys.path`` being changed
    meanwhile (the program's imports go on while it loads); then ``location`` is
    appended to ``sys.path`` if missing (fntrace imports some modules on first use).
    A program that has imported fntrace itself keeps its own.

    ``threading`` takes the thread that first imports it for the program's main
    thread (``threading.main_thread()``, the name ``MainThread``).  The injector runs
    this code on the program's main thread, so a program that has not imported
    threading yet gets it imported here, on the right thread, rather than by fntrace's
    own thread a moment later.

    The code runs in a fresh dictionary (``exec(..., {})``) so that nothing is bound in
    ``__main__``, and uses only modules every interpreter has loaded (``sys``,
    ``_thread``, importlib's bootstrap).  Everything is caught: a failure is written to
    ``error_path`` as one line.  Only the literals below are ours to put in; they are
    written with repr.
    """
    body = (
        "import sys, _thread\n"
        "def fntrace_attach():\n"
        "    try:\n"
        f"        loc = {location!r}\n"
        "        if loc is not None and 'fntrace' not in sys.modules:\n"
        "            boot = sys.modules['_frozen_importlib']\n"
        "            spec = sys.modules['_frozen_importlib_external'].PathFinder.find_spec(\n"
        "                'fntrace', [loc])\n"
        "            if spec is None:\n"
        "                raise ImportError('no fntrace package in ' + loc)\n"
        "            mod = boot.module_from_spec(spec)\n"
        "            sys.modules['fntrace'] = mod\n"
        "            try:\n"
        "                spec.loader.exec_module(mod)\n"
        "            except BaseException:\n"
        "                for name in [n for n in sys.modules if n == 'fntrace'\n"
        "                             or n.startswith('fntrace.')]:\n"
        "                    del sys.modules[name]\n"
        "                raise\n"
        "        if loc is not None and loc not in sys.path:\n"
        "            sys.path.append(loc)\n"
        "        import fntrace\n"
        "        fntrace.serve()\n"
        "    except BaseException as e:\n"
        "        try:\n"
        f"            with open({error_path!r}, 'w') as f:\n"
        "                f.write(type(e).__name__ + ': ' + str(e))\n"
        "        except BaseException:\n"
        "            pass\n"
        "if 'threading' not in sys.modules:\n"
        "    try:\n"
        "        import threading\n"
        "    except BaseException:\n"
        "        pass\n"
        "_thread.start_new_thread(fntrace_attach, ())\n"
    )
    return f"exec({body!r}, {{}})\n"


def _error_path(pid: int) -> str:
    return os.path.join(endpoint.runtime_dir(), f"{pid}.attach-error")


def _inject(pid: int, code: str) -> None:
    if sys.version_info >= (3, 14):
        # PEP 768: the interpreter runs the file at its next safe point (not tested
        # here: the test machines run 3.11-3.13).  The file must outlive the call; it
        # is removed once the endpoint is up or attach gives up.
        path = os.path.join(endpoint.runtime_dir(), f"{pid}.attach.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
        try:
            sys.remote_exec(pid, path)      # type: ignore[attr-defined]
        except PermissionError as e:
            raise _ptrace_error(pid, str(e)) from None
        except OSError as e:
            raise AttachError(f"cannot run code in process {pid}: {e}",
                              e.errno or _errno.EIO) from None
        except (RuntimeError, ValueError) as e:
            # e.g. a program run with -X disable_remote_debug or
            # PYTHON_DISABLE_REMOTE_DEBUG set refuses it
            raise AttachError(f"cannot run code in process {pid}: {e}", _errno.EPERM) from None
        return
    try:
        import hypno
        from pyinjector import InjectorError
    except ImportError:
        raise AttachError("fntrace attach needs the injector: pip install 'fntrace[attach]'",
                          _errno.ENOSYS) from None
    try:
        hypno.inject_py(pid, code)
    except InjectorError as e:
        detail = e.error_str or f"error {e.ret_val}"
        if e.ret_val == _INJERR_PERMISSION or "ermission" in detail:
            raise _ptrace_error(pid, detail) from None
        raise AttachError(f"cannot inject into process {pid}: {detail}", _errno.EIO) from None
    except Exception as e:     # the injector's other failures (library not found ...)
        raise AttachError(f"cannot inject into process {pid}: {e}", _errno.EIO) from None


def _ptrace_error(pid: int, detail: str) -> AttachError:
    text = _read(YAMA_PTRACE_SCOPE)
    scope = text.strip() if text is not None else None
    if scope is not None and scope.isdigit():
        how = (f"kernel.yama.ptrace_scope is {scope}; to attach: {_ptrace_fix(int(scope))}")
    else:
        how = "run fntrace as root or with CAP_SYS_PTRACE"
    return AttachError(f"ptrace of process {pid} is not allowed ({detail}): {how}", _errno.EPERM)


def _serving(pid: int) -> bool:
    """Whether ``pid``'s control endpoint answers (a socket left by a killed program,
    or by an earlier process with the same pid, does not)."""
    try:
        path = endpoint.socket_path(pid)
    except FntraceError:
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
    except OSError:
        return False
    finally:
        s.close()
    return True


def _alive(pid: int) -> bool:
    st = _read(f"/proc/{pid}/stat")
    return bool(st and st[st.rindex(")") + 2:][:1] not in ("Z", "X"))


def _runtime_dir_for(xdg: str | None) -> str:
    # endpoint.runtime_dir()'s choice for a process whose XDG_RUNTIME_DIR is ``xdg``
    # (without one, whichever of the user's /tmp ones: the same for both)
    uid = os.getuid()
    return endpoint.xdg_dir(uid, xdg) or os.path.join(endpoint.TMP, f"fntrace-{uid}-*")


def check_runtime_dir(pid: int) -> None:
    """The program puts its control socket in the runtime directory its environment
    names; ``fntrace ctl`` looks in ours.  A program started with another
    XDG_RUNTIME_DIR (cron, ``sudo -u``, a service) would serve where nobody looks."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return
    env = dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)
    theirs_raw = env.get(b"XDG_RUNTIME_DIR")
    theirs_val = theirs_raw.decode("utf-8", "surrogateescape") if theirs_raw is not None else None
    ours_val = os.environ.get("XDG_RUNTIME_DIR")
    theirs, ours = _runtime_dir_for(theirs_val), _runtime_dir_for(ours_val)
    if theirs != ours:
        fix = (f"XDG_RUNTIME_DIR={theirs_val} fntrace ..." if theirs_val
               else "env -u XDG_RUNTIME_DIR fntrace ...")
        raise AttachError(f"process {pid} would put its control socket in {theirs} (its "
                          f"XDG_RUNTIME_DIR is {theirs_val or 'unset'}), where fntrace here "
                          f"does not look ({ours}): run `{fix}` for attach and every "
                          "command after it", _errno.EINVAL)


def _check_running(pid: int) -> None:
    """A stopped program would run the injected code only once continued, and one
    that a debugger traces cannot be ptraced again: say so instead of waiting."""
    st = _status(pid)
    state = st.get("State", "")
    tracer = st.get("TracerPid", "0")
    if tracer not in ("", "0"):
        name = (_read(f"/proc/{tracer}/comm") or "?").strip()
        raise AttachError(f"process {pid} is being traced by process {tracer} ({name}), a "
                          "debugger or profiler: only one tracer at a time can ptrace it; "
                          "detach that one first", _errno.EBUSY)
    if state.startswith("T"):
        raise AttachError(f"process {pid} is stopped ({state}): continue it first "
                          f"(`kill -CONT {pid}`)", _errno.EAGAIN)


def attach(pid: int, timeout: float = 10.0) -> tuple[Target, bool]:
    """Make ``pid`` controllable; (target, True) if it already was (then whatever
    Python version it runs: the endpoint is the same)."""
    target = inspect_target(pid, same_version=False)
    if _serving(pid):
        return target, True
    target = inspect_target(pid)
    if pid == os.getpid():
        raise AttachError(f"process {pid} is this one: call fntrace.serve() instead",
                          _errno.EINVAL)
    check_runtime_dir(pid)
    check_ptrace(pid)
    _check_running(pid)
    err_path = _error_path(pid)
    try:
        os.unlink(err_path)
    except FileNotFoundError:
        pass
    code = attach_snippet(install_location(), err_path)
    try:
        _inject(pid, code)
        deadline = time.monotonic() + timeout
        while True:
            if _serving(pid):
                return target, False
            failure = _read(err_path)
            if failure:
                raise AttachError(f"fntrace could not start in process {pid}: "
                                  f"{failure.strip()}", _errno.EIO)
            if not _alive(pid):
                raise AttachError(f"process {pid} exited while fntrace was attaching",
                                  _errno.ESRCH)
            if time.monotonic() > deadline:
                raise AttachError(f"process {pid} did not start its control endpoint "
                                  f"within {timeout:g} s (a C call holding the GIL? it may "
                                  "still start: try `fntrace ctl` later, or attach with a "
                                  "longer --timeout)", _errno.ETIMEDOUT)
            time.sleep(0.01)
    finally:
        for p in (err_path, os.path.join(endpoint.runtime_dir(), f"{pid}.attach.py")):
            try:
                os.unlink(p)
            except OSError:
                pass


def detach(pid: int, timeout: float = 10.0) -> None:
    """Turn everything of fntrace off in ``pid`` and stop its endpoint."""
    if pid <= 0 or not _alive(pid):
        raise AttachError(f"no process {pid}", _errno.ESRCH)
    from .client import Client
    Client(pid).detach()
    deadline = time.monotonic() + timeout
    while _serving(pid):
        if time.monotonic() > deadline:
            raise AttachError(f"process {pid} still serves its endpoint {timeout:g} s "
                              "after detach", _errno.ETIMEDOUT)
        time.sleep(0.01)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
