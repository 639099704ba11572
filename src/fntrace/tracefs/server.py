"""The control endpoint's server: a process's tracefs, reachable from other processes
of the same user (``fntrace ctl``, a FUSE mount, ``fntrace attach``).

    import fntrace
    fntrace.serve()          # the process's top-level tracefs, at RUNDIR/PID.sock

The server runs on a thread of its own and one thread per connection, each marked as
fntrace's own first thing (core/task.fntrace_thread), so nothing they run is traced.
Every request ends in a method of the served ``Tracefs`` — the same write handlers as
in the process, with the same grammar, errors and error_log — and nothing received
is evaluated.  Idle, the server costs the program nothing: its thread sleeps in
poll(), and with the nop tracer no function is patched.

The program must not see the accepting thread, as it does not see the trace writer's
(tracefile/sink.py): it is a ``_thread`` thread with no Python frame while it waits (its
loop is a pipeline of C iterators, below), and it is not there while the process
forks — ``pause_serving()``/``resume_serving()``, run by the fork hooks, let it leave
and come back; the listening socket stays, so a client connecting meanwhile waits in
its backlog instead of being refused.  A connection's thread lives as long as the
client stays connected (a ``ctl`` command: one request).

The socket is removed when the program exits (atexit, and the end of ``fntrace
record``), when ``detach`` is asked for, and is not the child's after a fork (the
child does not serve: its copy of the listening socket is closed).
"""
from __future__ import annotations

import _thread
import atexit
import errno
import os
import select
import socket
import sys
import threading
import time
from collections import deque
from itertools import takewhile

from .. import _env
from ..core import ops as core_ops
from ..core import task
from ..errors import BusyError, FntraceError
from . import endpoint
from .endpoint import MAX_REQUEST, OPS, FrameReader, peer_cred, send_frame
from .fs import Tracefs
from .fs import tracefs as _top_tracefs

__all__ = ["Server", "serve", "current_server", "pause_serving", "resume_serving"]

_lock = threading.Lock()
_server: "Server | None" = None

# How long stop() and a fork wait for the accepting thread to leave (it is in poll() or
# between two accepts).
_LEAVE_WAIT = 2.0
# How often a trace_pipe stream looks for the client having gone away while there is
# nothing to send (seconds).
PIPE_POLL = 0.1
# How often it looks at the buffers for something to send.
PIPE_WAIT = 0.02


def _error_log_path(path: str) -> str:
    parts = path.strip("/").split("/")
    if len(parts) >= 3 and parts[0] == "instances":
        return f"instances/{parts[1]}/error_log"
    return "error_log"


def _last_entry(text: str) -> str:
    """The last error_log entry: its three lines (message, command, caret)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, l in enumerate(lines) if l.startswith("[")]
    return "".join(lines[starts[-1]:]) if starts else ""


class Server:
    """A served tracefs: ``path`` is the socket, ``stop()`` ends serving."""

    def __init__(self, fs: Tracefs) -> None:
        self.fs = fs
        self.pid = os.getpid()
        self.path = endpoint.socket_path(self.pid, create=True)
        self.running = False
        self.errors = 0                 # requests that failed inside fntrace (contained)
        self.refused = 0                # connections from another user
        self._ops_lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._sock = self._bind()
        self._sock.setblocking(False)
        # a byte here makes the accepting thread leave (pause or stop)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._poller = select.poll()
        self._poller.register(self._sock.fileno(), select.POLLIN)
        self._poller.register(self._wake_r, select.POLLIN)
        self._timeouts: deque = deque()
        self._native_id = self._last_native = 0
        self._accepting = False
        self._exited = _thread.allocate_lock()
        # Asked to leave (a fork coming); under _state with _accepting, so that the
        # thread leaving and a resume never both think the other one will accept
        self._want_leave = False
        self._state = _thread.allocate_lock()
        self.running = True
        self._start()

    # -- the socket ------------------------------------------------------------------
    def _bind(self) -> socket.socket:
        path = self.path
        if os.path.lexists(path):
            # Ours from a process that was killed, or from an earlier process that had
            # this pid: nobody answers there (a live server of this pid would be us).
            if not endpoint.remove_if_stale(path, self.pid) and os.path.lexists(path):
                raise BusyError(f"{path}: this process already serves a control endpoint")
        # Bound and listening under a name no reader takes for an endpoint, then moved
        # into place: a socket that is there but not yet listening refuses connections,
        # and a reader that lists endpoints then (``ctl --list``, attach) would remove
        # it as stale, leaving this process serving from nowhere.
        tmp = path + "~"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)          # ours, left by a process of this pid killed here
            s.bind(tmp)
            # The directory is 0700: nobody else can reach the socket in between.
            os.chmod(tmp, 0o600)
            s.listen(16)
            os.rename(tmp, path)
        except OSError as e:
            s.close()
            try:
                os.unlink(tmp)
            except OSError:
                pass
            err = FntraceError(f"{path}: cannot serve there: {e.strerror or e}"
                               + (" (a Unix socket path is at most 107 bytes: set "
                                  "XDG_RUNTIME_DIR to a shorter directory)"
                                  if len(tmp.encode()) > 107 else ""))
            err.errno = e.errno or errno.EIO
            raise err from None
        except BaseException:
            s.close()
            raise
        return s

    def _unlink(self) -> None:
        if os.getpid() != self.pid:
            return
        try:
            st_ok = os.path.lexists(self.path)
            if st_ok:
                os.unlink(self.path)
        except OSError:
            pass

    def stop(self) -> None:
        """Stop serving: no new connection, open ones closed, the socket removed."""
        global _server
        with _lock:
            if not self.running:
                return
            self.running = False
            if _server is self:
                _server = None
        if os.getpid() != self.pid:
            self._close_quietly(self._sock)
            return
        self._unlink()
        self._leave()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._close_quietly(self._sock)
        self._close_wake()
        for c in list(self._conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _forked(self) -> None:
        """In a child after fork: the socket is the parent's; the child does not serve."""
        global _server
        self.running = False
        _server = None
        self._close_quietly(self._sock)
        for c in list(self._conns):
            self._close_quietly(c)
        self._conns.clear()
        self._accepting = False
        self._close_wake()

    @staticmethod
    def _close_quietly(s: socket.socket) -> None:
        try:
            s.close()
        except OSError:
            pass

    def _close_wake(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    # -- the accepting thread -----------------------------------------------------------
    #
    # Its loop holds no Python frame while it waits (sys._current_frames() is the
    # program's), the trace writer's pipeline:
    #
    #     deque(takewhile(bool, map(_step, map(poll, iter(timeouts.popleft, None)))), 0)
    #           ends when _step   one round   waits here,     _step appends -1 (for
    #           returns False     of it       no frame held   ever) to go on
    def _start(self) -> None:
        self._exited.acquire(blocking=False)
        self._want_leave = False
        self._accepting = True
        self._timeouts.append(-1)
        rounds = takewhile(bool, map(self._step, map(self._poller.poll,
                                                     iter(self._timeouts.popleft, None))))
        _thread.start_new_thread(deque, (rounds, 0))

    def _leave(self) -> None:
        """Make the accepting thread leave and wait for it (it is in poll(), or
        between two accepts: microseconds)."""
        with self._state:
            if not self._accepting:
                return
            self._want_leave = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        # On a machine so busy that the thread has not left in time, the fork goes
        # ahead with it; it leaves later, or stays if resume() comes first.
        if self._exited.acquire(timeout=_LEAVE_WAIT):
            task.wait_thread_gone(self._last_native, _LEAVE_WAIT)

    def pause(self) -> None:
        if self.running and self._accepting and os.getpid() == self.pid:
            self._leave()

    def resume(self) -> None:
        if not self.running or os.getpid() != self.pid:
            return
        with self._state:
            # a thread that has not left yet stays; one that has is started again
            self._want_leave = False
            if not self._accepting:
                self._start()

    def _step(self, ready: list) -> bool:
        """One round: what poll() said, done; False ends the thread."""
        if not self._native_id:
            task.fntrace_thread()
            self._native_id = threading.get_native_id()
        # (a fork coming: no connection taken now, whose thread would be forked)
        go = self.running and not self._want_leave
        try:
            for fd, _events in ready:
                if fd == self._wake_r:
                    try:
                        os.read(self._wake_r, 64)
                    except OSError:
                        pass
            if go:
                go = self._accept_all()
        except BaseException:       # fntrace's own failure: counted, the loop ends
            self.errors += 1
            go = False
        with self._state:
            if go and self.running and not self._want_leave:
                self._timeouts.append(-1)
                return True
            # the thread ends: its native id may be a program thread's next
            task.own_threads.discard(self._native_id)
            self._last_native, self._native_id = self._native_id, 0
            self._accepting = False
            self._exited.release()
        return False

    def _accept_all(self) -> bool:
        """Every connection waiting in the backlog, each on a thread of its own;
        False when the socket is gone."""
        while self.running:
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            conn.setblocking(True)
            _thread.start_new_thread(self._serve_conn, (conn,))
        return False

    def _serve_conn(self, conn: socket.socket) -> None:
        task.fntrace_thread()
        self._conns.add(conn)
        try:
            _pid, uid, _gid = peer_cred(conn)
            me = os.getuid()
            if uid != me and uid != 0:
                self.refused += 1
                send_frame(conn, {"ok": False, "errno": errno.EACCES,
                                  "msg": f"uid {uid} may not control this process "
                                         f"(it belongs to uid {me})", "error_log": ""})
                return
            frames = FrameReader(conn)
            while self.running:
                try:
                    req = frames.read(MAX_REQUEST)
                except (OSError, FntraceError):
                    return
                if req is None:
                    return
                if isinstance(req, dict) and req.get("op") == "pipe":
                    self._pipe(conn, req, frames)
                    return
                reply = self.handle(req)
                send_frame(conn, reply)
                if isinstance(req, dict) and req.get("op") == "detach" and reply.get("ok"):
                    self.stop()
                    return
        except OSError:
            pass
        except BaseException:
            self.errors += 1
        finally:
            self._conns.discard(conn)
            self._close_quietly(conn)
            # the thread ends: its native id may be a program thread's next
            task.own_threads.discard(threading.get_native_id())

    # -- requests --------------------------------------------------------------------
    def handle(self, req) -> dict:
        """One request -> its reply (never raises)."""
        if not isinstance(req, dict) or req.get("op") not in OPS:
            return {"ok": False, "errno": errno.EINVAL,
                    "msg": f"unknown request (ops: {', '.join(OPS)})", "error_log": ""}
        op = req["op"]
        path = req.get("path", "")
        data = req.get("data", "")
        append = req.get("append", False)
        if not isinstance(path, str) or not isinstance(data, str) or not isinstance(append, bool):
            return {"ok": False, "errno": errno.EINVAL,
                    "msg": "path and data must be strings, append a boolean", "error_log": ""}
        fs = self.fs
        log_path = _error_log_path(path)
        before = None
        try:
            with self._ops_lock:
                if op == "read":
                    return {"ok": True, "data": fs.read(path)}
                if op == "ls":
                    return {"ok": True, "data": fs.ls(path)}
                if op == "kind":
                    return {"ok": True, "data": fs.kind(path)}
                if op == "mode":
                    return {"ok": True, "data": fs.mode(path)}
                if op == "stat":
                    return {"ok": True, "data": list(fs.stat(path))}
                if op == "info":
                    return {"ok": True, "data": {
                        "pid": os.getpid(), "python": sys.version.split()[0],
                        "argv": list(sys.argv), "executable": sys.executable,
                        "backend": _env.BACKEND,
                        "hot_path": "pure" if _env.native() is None else "native"}}
                if op == "detach":
                    return {"ok": True, "data": self._detach()}
                before = self._log(log_path)
                if op == "write":
                    fs.write(path, data, append)
                    return {"ok": True, "data": None}
                if op in ("mkdir", "rmdir"):
                    fn = getattr(fs, op, None)
                    if fn is None:
                        raise _perm(f"{op} {path}: this tracefs has no instances")
                    fn(path)
                    return {"ok": True, "data": None}
        except FntraceError as e:
            after = self._log(log_path) if before is not None else None
            entry = _last_entry(after) if after is not None and after != before else ""
            return {"ok": False, "errno": int(getattr(e, "errno", errno.EINVAL) or errno.EINVAL),
                    "msg": str(e.msg), "error_log": entry}
        except Exception as e:      # fntrace's own fault: contained, counted, reported
            self.errors += 1
            return {"ok": False, "errno": errno.EIO,
                    "msg": f"internal error: {type(e).__name__}: {e}", "error_log": ""}
        return {"ok": False, "errno": errno.EINVAL, "msg": f"{op}: not handled", "error_log": ""}

    def _log(self, path: str) -> str | None:
        try:
            return self.fs.read(path)
        except Exception:
            return None

    def _pipe(self, conn: socket.socket, req: dict, frames: FrameReader) -> None:
        """A trace_pipe of the client's: each ``{"op": "read", "timeout": T}`` it sends
        is answered by one frame, the text read (consumed) then, or "" after T seconds
        (T None: when there is some).  Nothing is read but for a request the client
        waits on, so a client that closes leaves nothing read and unshown: the next
        reader gets it."""
        path = req.get("path") or "trace_pipe"
        try:
            if not isinstance(path, str):
                raise FntraceError("path must be a string")
            reader = self.fs.open_pipe(path)
        except FntraceError as e:
            send_frame(conn, {"ok": False, "errno": int(e.errno), "msg": e.msg, "error_log": ""})
            return
        send_frame(conn, {"ok": True, "data": ""})      # open: the reads follow
        # The top level's buffers say whether there is something to read without
        # consuming it: wait on them (any other path: a blocking read in slices).
        tr = getattr(self.fs, "tr", None) if path.strip("/") == "trace_pipe" else None
        try:
            while self.running:
                try:
                    ask = frames.read(MAX_REQUEST)
                except (OSError, FntraceError):
                    return
                if not isinstance(ask, dict) or ask.get("op") != "read":
                    return              # EOF, or anything else: the stream ends
                timeout = ask.get("timeout")
                try:
                    text = self._pipe_read(conn, reader, tr, timeout)
                except FntraceError as e:
                    send_frame(conn, {"ok": False, "errno": int(e.errno), "msg": e.msg,
                                      "error_log": ""})
                    return
                if text is None:
                    return              # the client went away meanwhile
                send_frame(conn, {"ok": True, "data": text})
        finally:
            reader.close()

    def _pipe_read(self, conn, reader, tr, timeout) -> str | None:
        """One read for the client: text, "" at the timeout, None if the client left."""
        end = None if not isinstance(timeout, (int, float)) else time.monotonic() + max(0, timeout)
        while self.running:
            left = None if end is None else end - time.monotonic()
            if tr is not None:
                if tr.entries()[0]:
                    text = reader.read(0)
                    if text:
                        return text
                step = PIPE_WAIT if left is None else max(0.0, min(PIPE_WAIT, left))
            else:
                step = PIPE_POLL if left is None else max(0.0, min(PIPE_POLL, left))
                text = reader.read(step)
                if text:
                    return text
                step = 0
            # the client only closes while it waits: its socket readable is its end
            if endpoint.readable(conn, step):
                return None
            if left is not None and left <= 0:
                return ""
        return None

    def _detach(self) -> str:
        """Everything of fntrace off: tracers nop, events off, dynamic events gone,
        filters empty, instances removed; then the back end stops (the sys.monitoring
        tool id is free again) if nothing else of the program's own is registered."""
        fs = self.fs
        dirs = [""]
        instances: list[str] = []
        try:
            if fs.kind("instances") == "dir":
                instances = list(fs.ls("instances"))
                dirs += [f"instances/{n}/" for n in instances]
        except FntraceError:
            pass
        resets = (("current_tracer", "nop"), ("set_event", ""), ("set_ftrace_filter", ""),
                  ("set_ftrace_notrace", ""), ("set_graph_function", ""),
                  ("set_graph_notrace", ""), ("set_ftrace_pid", ""),
                  ("set_ftrace_notrace_pid", ""), ("set_event_pid", ""),
                  ("set_event_notrace_pid", ""))
        for d in dirs:
            for name, data in resets:
                try:
                    fs.write(d + name, data)
                except FntraceError:
                    pass
        # the top level's own users of the ops: the profiler, the stack tracer
        for name, data in (("function_profile_enabled", "0"), ("stack_tracer_enabled", "0"),
                           ("stack_trace_filter", "")):
            try:
                fs.write(name, data)
            except FntraceError:
                pass
        # what rmdir's teardown removes, at the top level too: function commands (an
        # empty set_ftrace_filter keeps them, as the kernel's does), event triggers
        teardown = getattr(fs, "_teardown", None)
        if teardown is not None:
            try:
                teardown()
            except Exception:
                pass
            finally:
                fs.tr.tracing_on = True
        try:
            fs.write("dynamic_events", "")
        except FntraceError:
            pass
        rmdir = getattr(fs, "rmdir", None)
        if rmdir is not None:
            for n in instances:
                try:
                    rmdir(f"instances/{n}")
                except FntraceError:
                    pass
        with core_ops.ftrace_lock:
            left = list(core_ops.ftrace_ops_list)
            if not left and core_ops.backend.active:
                core_ops.backend.stop()
        if left:
            return (f"{len(left)} ops registered by the program itself stay: "
                    + ", ".join(o.name for o in left))
        return "detached"


def _perm(msg: str) -> FntraceError:
    e = FntraceError(msg)
    e.errno = errno.EPERM
    return e


def _at_exit() -> None:
    s = _server
    if s is not None and s.pid == os.getpid():
        s.stop()


def _after_fork_in_child() -> None:
    global _pause_lock
    _pause_lock = _thread.allocate_lock()
    _paused[0] = 0
    s = _server
    if s is not None:
        s._forked()


# The accepting thread is not there while the process forks: CPython warns that a
# multi-threaded process forks by counting its threads (3.12+), and a child must not
# inherit a thread's state.  Forks may nest (threads forking at once, and `fntrace
# record` pausing around its os.fork wrapper as well as in the hooks, since 3.13
# counts after the hooks): the thread comes back when the last of them is done.
_pause_lock = _thread.allocate_lock()
_paused = [0]


def pause_serving() -> None:
    """Before a fork: the accepting thread leaves (nested calls count)."""
    with _pause_lock:
        _paused[0] += 1
        s = _server
        if _paused[0] == 1 and s is not None:
            s.pause()


def resume_serving() -> None:
    """After a fork, in the parent: the accepting thread comes back when the last
    pause is undone."""
    with _pause_lock:
        if _paused[0] > 0:
            _paused[0] -= 1
        s = _server
        if _paused[0] == 0 and s is not None:
            s.resume()


_hooks_installed = False


def _alias_main() -> None:
    """A program run as ``python -m MOD`` (``python -m http.server``): its functions
    are named for MOD, as under ``fntrace record -m MOD``, so ``MOD.*`` filters find
    them.  Only before ``__main__``'s functions have records (names are given once)."""
    from ..core.records import record_table
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if (isinstance(name, str) and name != "__main__" and record_table.main_alias is None
            and "__main__" not in record_table.scanned):
        record_table.main_alias = name


def serve(fs: Tracefs | None = None) -> Server:
    """Serve ``fs`` (default: the process's top-level tracefs) on this process's
    control socket; returns the Server (``.path``, ``.stop()``).  A process serves
    one tracefs: asking again (without ``fs``, or with the same one) returns the
    running server."""
    global _server, _hooks_installed
    with _lock:
        s = _server
        if s is not None and s.running and s.pid == os.getpid():
            # fntrace.serve() in a program `fntrace record --serve` runs: the process
            # is controllable already, through the recording's tracefs
            if fs is not None and s.fs is not fs:
                raise BusyError(f"this process already serves another tracefs at {s.path}")
            return s
        if fs is None:
            fs = _top_tracefs()
            _alias_main()
        s = Server(fs)
        _server = s
        if not _hooks_installed:
            _hooks_installed = True
            atexit.register(_at_exit)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(before=pause_serving, after_in_parent=resume_serving,
                                    after_in_child=_after_fork_in_child)
    return s


def current_server() -> Server | None:
    """The server of this process, if it serves."""
    s = _server
    return s if s is not None and s.running and s.pid == os.getpid() else None


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
