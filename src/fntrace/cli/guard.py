"""The trace outlives the program's end, however it ends.

A program under ``fntrace record``/``live`` may end normally, by ``sys.exit``, by an
uncaught exception, by ``os._exit`` (which skips everything: atexit, finally, the
interpreter's shutdown), or by a signal whose default action kills the process
(SIGTERM from ``timeout``, SIGHUP from a closed terminal).  Each way must leave the
trace written and, for ``live``, reported — and then end exactly as the program would
have: the same status, or death by the same signal.

    normal end, sys.exit, exception   record.py finishes after the program's own end
    os._exit(n)                        os._exit is wrapped: finish, then the real _exit
    os.exec*(...)                      os.execv/execve are wrapped the same way
    SIGTERM SIGHUP SIGINT* SIGALRM ... a C handler (cli/_launch.c) tells the trace
    SIGUSR1 SIGUSR2                    writer's thread, which stops the main thread at
                                       its next bytecode (as the signal would have),
                                       finishes and re-raises the signal with its
                                       default action; a signal that comes while
                                       another thread is finishing ends the process
                                       once that is done
    (* SIGINT only when its disposition is SIG_DFL; Python's own KeyboardInterrupt
       handler is left alone and the uncaught KeyboardInterrupt ends in SIGINT.)
    os.fork(), os.forkpty()            wrapped in C: the writer thread steps aside
                                       while the process forks (tracefile/sink.py)

Handlers go only where the disposition is SIG_DFL, and Python's table of handlers is
not touched: ``signal.getsignal()`` still answers SIG_DFL, and a handler the program
installs replaces fntrace's as it would replace the default.  A second delivery of the
same signal kills at once.  A forked child inherits none of it (its signals do what
they would; its ``os._exit`` is the real one) unless it goes on recording a trace of its
own (following processes: ``adopt``).

The report goes to the standard output and error the program started with (file
descriptors saved before it runs), whatever it did to ``sys.stdout``: json.tool closes
it, pytest replaces it.
"""
from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time

from ..printk import pr_warn, set_console
from .target import _native_launch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Callable, NoReturn

__all__ = ["Guard", "FATAL_SIGNALS", "fd_ok"]

# Signals whose default action ends the process and that a user or a supervisor sends
# to stop a program (SIGINT only while nobody handles it: see the module docstring).
FATAL_SIGNALS = tuple(getattr(signal, n) for n in
                      ("SIGTERM", "SIGHUP", "SIGINT", "SIGALRM", "SIGUSR1", "SIGUSR2")
                      if hasattr(signal, n))


# How long the program's main thread stays stopped while the trace is written after a
# fatal signal.  The writer ends the process well before; should it wait for something
# the stopped thread holds (a lock of the program's that fntrace's write-out takes: its
# sys.stdout's, say), the program goes on after this, as it did before it was stopped.
_STOP_WAIT = 10
# Code the main thread is not stopped in: fntrace's own, and the import system's.
_NOT_HERE = ("fntrace.", "importlib._bootstrap", "_frozen_importlib")


# os's capability sets, which list os functions themselves: a function fntrace puts in
# os's place must stand in them where the real one does (CPython's test_posix skips
# test_fexecve unless ``os.execve in os.supports_fd``).
_SUPPORTS = ("supports_fd", "supports_dir_fd", "supports_follow_symlinks",
             "supports_effective_ids")


def _put_os(name: str, new) -> None:
    """os.NAME = new, in the capability sets too (in place of what was there)."""
    old = getattr(os, name)
    setattr(os, name, new)
    for attr in _SUPPORTS:
        funcs = getattr(os, attr, None)
        if isinstance(funcs, set) and old in funcs:
            funcs.discard(old)
            funcs.add(new)


class Guard:
    """Saved standard streams, the fatal-signal handlers and the os._exit wrapper of one
    recording.  ``finish(how)`` is called at most once for the whole process, from
    whichever thread the end reaches first; later callers wait for it to be done.

    how   ("exit", status) for os._exit, ("signal", signum) for a fatal signal; the
          normal end calls ``finish`` with ("end", outcome) from record.py.
    """

    def __init__(self, finish, fork_hooks=None) -> None:
        self.pid = os.getpid()
        # (before, after) around the program's os.fork()/forkpty() (wrap_fork)
        self.fork_hooks = fork_hooks
        self._real_fork: dict = {}
        self._finish = finish
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.how: tuple[str, Any] | None = None
        self.out_fd = os.dup(1) if fd_ok(1) else -1
        self.err_fd = os.dup(2) if fd_ok(2) else -1
        if self.err_fd >= 0:
            set_console(self.err_fd)      # fntrace's messages, whatever the program does
        self.signals: list[int] = []
        self._py_handlers: dict[int, object] = {}
        # the real os._exit while it is wrapped ("...": it takes status= by keyword too,
        # and goes back into os as the function it was)
        self._real_exit: Callable[..., NoReturn] | None = None
        self._signal_fd = -1
        self._die_with: int | None = None
        self._stop_queued = False
        self._main_stopped = False

    # -- where reports go ---------------------------------------------------------------
    def mine(self) -> bool:
        return os.getpid() == self.pid

    def stdout(self):
        """A text stream on the program's original standard output (for the report)."""
        return _text_stream(self.out_fd, sys.__stdout__)

    def stderr(self):
        return _text_stream(self.err_fd, sys.__stderr__)

    def notice(self, msg: str) -> None:
        """``fntrace: msg`` on the original standard error."""
        pr_warn(msg)

    # -- the ways a program ends --------------------------------------------------------
    def install(self, signal_fd: int) -> None:
        """Take over os._exit and the fatal signals still at their default action;
        ``signal_fd`` is the write end the trace writer's thread reads signal numbers
        from (cli/_launch.c writes the number from the handler)."""
        real = os._exit
        self._real_exit = real
        self._signal_fd = signal_fd
        guard = self

        def _exit(status):
            # The wrapper must not change what the program sees: the same argument
            # checking (the real one raises the same TypeError), then the same end.
            if guard.mine():
                guard.finish(("exit", status))
            real(status)

        _exit.__name__ = real.__name__
        _exit.__qualname__ = real.__qualname__
        _exit.__doc__ = real.__doc__
        _exit.__module__ = real.__module__
        os._exit = _exit
        # os.exec*: the process becomes another program; what it recorded is written
        # first (a Python it becomes is followed with a file of its own: cli/follow.py).
        # os.execl/execlp/execvp/... all end in execv or execve.
        self._real_exec = {}
        for name in ("execv", "execve"):
            real_exec = getattr(os, name, None)
            if real_exec is not None:
                self._real_exec[name] = real_exec
                _put_os(name, self._exec_wrapper(real_exec))
        # os.fork/forkpty: the trace writer steps aside while the process forks (see
        # tracefile/sink.py); a C wrapper, so that nothing else the program sees changes.
        wrap = getattr(_native_launch, "wrap_fork", None)
        self._real_fork = {}
        if self.fork_hooks is not None and wrap is not None:
            for name in ("fork", "forkpty"):
                real_fork = getattr(os, name, None)
                if real_fork is not None:
                    self._real_fork[name] = real_fork
                    setattr(os, name, wrap(real_fork, *self.fork_hooks))
        wanted = [s for s in FATAL_SIGNALS
                  if s != signal.SIGINT or signal.getsignal(signal.SIGINT) == signal.SIG_DFL]
        if _native_launch is not None:
            self.signals = list(_native_launch.fatal_signals_install(signal_fd, wanted))
        else:
            for s in wanted:
                if signal.getsignal(s) == signal.SIG_DFL:
                    self._py_handlers[s] = signal.signal(s, self._py_signal)
                    self.signals.append(s)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._in_child)

    def adopt(self, signal_fd: int) -> None:
        """In a forked child that goes on recording (cli/follow.py): this process's
        own end to guard, with its own writer (after ``_in_child`` gave the child the
        real os._exit and signals back)."""
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.how = None
        self._die_with = None
        self.signals = []
        self._py_handlers = {}
        self.install(signal_fd)

    def _exec_wrapper(self, real):
        guard = self

        def wrapper(*args, **kwargs):
            if guard.mine():
                guard.finish(("exec", None))
            try:
                return real(*args, **kwargs)
            except BaseException as e:
                guard.exec_failed(real.__name__, e)
                raise
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(wrapper, attr, getattr(real, attr))
        return wrapper

    def take_back_signals(self) -> None:
        """The program is over (its threads joined, its atexit functions run): its
        signal handlers must not run inside fntrace's write-out.  From now on a fatal
        signal finishes the trace and ends the process, and ^C stops the report."""
        if threading.current_thread() is not threading.main_thread():
            return
        for s in FATAL_SIGNALS:
            try:
                h = signal.getsignal(s)
                if s == signal.SIGINT:
                    if h not in (signal.SIG_IGN, signal.default_int_handler):
                        signal.signal(s, signal.default_int_handler)
                elif h not in (signal.SIG_DFL, signal.SIG_IGN, self._py_signal):
                    signal.signal(s, signal.SIG_DFL)
            except (ValueError, OSError, TypeError):
                pass
        if self._signal_fd >= 0:
            wanted = [s for s in FATAL_SIGNALS if s != signal.SIGINT]
            if _native_launch is not None:
                self.signals = list(_native_launch.fatal_signals_install(self._signal_fd,
                                                                         wanted))

    def uninstall(self) -> None:
        self._put_back()
        if _native_launch is None:
            for s in list(self._py_handlers):
                if signal.getsignal(s) == self._py_signal:
                    signal.signal(s, signal.SIG_DFL)
            self._py_handlers.clear()

    def _in_child(self) -> None:
        # The trace is the parent's: the child's signals and os._exit are its own.
        self._put_back()

    def _put_back(self) -> None:
        """os's exit, exec and fork functions and the native fatal-signal handlers as
        they were before install()."""
        if self._real_exit is not None:
            os._exit = self._real_exit
        for name, real in getattr(self, "_real_exec", {}).items():
            _put_os(name, real)
        for name, real in self._real_fork.items():
            setattr(os, name, real)
        if _native_launch is not None:
            _native_launch.fatal_signals_restore()

    def _py_signal(self, signum, frame) -> None:
        # Fallback without the native launcher: a Python-level handler (visible to
        # signal.getsignal, unlike the native one).
        self.finish(("signal", signum))
        self.die(signum)

    def finish(self, how, wait: bool = True, on_claim=None) -> bool:
        """Run the finish callback once; True for the caller that ran it.  A later
        caller waits for it to be done, unless ``wait`` is False (the trace writer's
        thread, which the first caller may be waiting for)."""
        with self._lock:
            first = self.how is None
            if first:
                self.how = how
        if not first:
            if wait:
                self._done.wait()
            return False
        try:
            if on_claim is not None:
                on_claim()
            self._finish(how)
        finally:
            self._done.set()
        signum = self._die_with
        if signum is not None and how[0] != "signal":
            # a fatal signal came while this thread was finishing: the process dies of
            # it, as it would have without fntrace
            self.die(signum)
        return True

    def exec_failed(self, name: str, exc: BaseException) -> None:
        """An exec the trace was written out for did not happen (a bad argument, a
        program that is not there: CPython's test_os): the program goes on, untraced,
        and ends as it would (record() must not wait for an end that came)."""
        if not self.mine() or self.how != ("exec", None):
            return
        self.how = ("exec failed", None)
        try:
            self.notice(f"os.{name} failed ({type(exc).__name__}: {exc}); the trace was "
                        "written out before it: what the program does from here is not "
                        "in it")
        except Exception:
            pass

    def die_after_finish(self, signum: int) -> None:
        """A fatal signal came while another thread is finishing (the program's normal
        end, os._exit): once the trace is written, the process dies of it."""
        self._die_with = signum

    def stop_program(self, settle: float = 0.0) -> None:
        """A fatal signal came (on the writer thread, which writes the trace out now):
        the program's main thread stops at its next bytecode, as it would have died
        there, instead of running on while the trace is written."""
        call = getattr(_native_launch, "call_in_main", None)
        if call is None or threading.current_thread() is threading.main_thread():
            return
        deadline = time.monotonic() + settle
        while not self._main_stopped:
            if not self._stop_queued:
                self._stop_queued = True
                call(self._stop_here)
            if time.monotonic() >= deadline:
                return
            # the main thread is in fntrace's code (a pure callback waiting for room
            # that the write-out is making): it leaves it in a moment
            time.sleep(0.001)

    def _stop_here(self) -> None:
        # On the main thread, between two of the program's bytecodes.  Only while the
        # signal's end is the one under way (not the program's own end, which this
        # thread is running), and not inside fntrace's own code (a pure callback
        # holding a lock the writer needs): later.
        # (Not stopped now: the writer asks again between two chunks it writes.  Asking
        # again from here would run this before the thread's every next bytecode, and
        # it would never get out of the code it cannot be stopped in.)
        self._stop_queued = False
        how = self.how
        if not self.mine() or how is None or how[0] != "signal":
            return
        # Nor inside an import: the thread holds the module's import lock, which the
        # writer may need (a module fntrace imports on its way out).
        f: FrameType | None = sys._getframe(1)
        while f is not None:
            if f.f_globals.get("__name__", "").startswith(_NOT_HERE):
                return
            f = f.f_back
        lock = _thread.allocate_lock()
        lock.acquire()
        self._main_stopped = True
        lock.acquire(timeout=_STOP_WAIT)     # the writer ends the process meanwhile
        self._main_stopped = False

    def die(self, signum: int) -> None:
        """End the process the way the signal's default action would."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        self.uninstall()
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (ValueError, OSError):      # not the main thread: sigaction directly
            pass
        if _native_launch is not None:
            _native_launch.fatal_signals_restore()
        os.kill(os.getpid(), signum)
        # SIGINT may be blocked in this thread; the process still gets it.  Never go
        # back into the program.
        threading.Event().wait(5)
        (self._real_exit or os._exit)(128 + signum)


def fd_ok(fd: int) -> bool:
    """Is ``fd`` an open file descriptor (a program may start with 1 or 2 closed)?"""
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _text_stream(fd: int, fallback):
    if fd < 0:
        return fallback
    enc = getattr(fallback, "encoding", None) or "utf-8"
    return open(os.dup(fd), "w", encoding=enc, errors="backslashreplace", closefd=True)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
