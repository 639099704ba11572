"""The control endpoint's client: another process's tracefs, with the methods of
``Tracefs`` (tracefs/fs.py), over its socket (tracefs/endpoint.py).

    c = Client(pid)
    c.write("current_tracer", "function")
    c.write("set_ftrace_filter", "json.*")
    print(c.read("trace"))
    p = c.open_pipe()            # trace_pipe, consumed as it comes
    text = p.read(timeout=1.0)
    p.close()
    c.detach()                   # everything of fntrace off in the target

A failed request raises FntraceError with the target's errno and message, and
``.error_log``: the entry the failed write left (message, command and caret), or "".
"""
from __future__ import annotations

import errno
import os
import socket
import threading
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from ..errors import FntraceError
from . import endpoint
from .endpoint import FrameReader, send_frame

__all__ = ["Client", "ClientPipe", "not_controllable_msg"]


def not_controllable_msg(pid: int) -> str:
    return (f"{pid} is not controllable: start it with `fntrace record --serve`, call "
            f"fntrace.serve() in it, or `fntrace attach {pid}`")


def _error(msg: str, err: int, error_log: str = "") -> FntraceError:
    e = FntraceError(msg)
    e.errno = err
    e.error_log = error_log     # type: ignore[attr-defined]  # only a client's errors carry it
    return e


def _proc_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def connect(pid: int) -> socket.socket:
    """A connection to PID's endpoint, or a clear FntraceError: no such process, not
    serving, another user's."""
    if not isinstance(pid, int) or pid <= 0:
        raise _error(f"{pid!r} is not a process id", errno.EINVAL)
    if not endpoint.pid_alive(pid):
        raise _error(f"no process {pid}", errno.ESRCH)
    owner = _proc_uid(pid)
    me = os.getuid()
    if owner is not None and owner != me and me != 0:
        raise _error(f"process {pid} belongs to another user (uid {owner}): only its owner "
                     "can control it", errno.EPERM)
    try:
        path = endpoint.socket_path(pid)
    except FntraceError as e:
        raise _error(e.msg, e.errno) from None
    if owner is not None and owner != me and not os.path.lexists(path):
        # root controlling another user's program: its socket is in that user's
        # directory (the program's XDG_RUNTIME_DIR is not known here: the usual one)
        for d in endpoint.runtime_dirs_of(owner):
            cand = os.path.join(d, f"{pid}.sock")
            if os.path.lexists(cand):
                path = cand
                break
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        s.close()
        endpoint.remove_if_stale(path, pid)
        raise _error(not_controllable_msg(pid), errno.ENOENT) from None
    except PermissionError:
        s.close()
        raise _error(f"process {pid}'s control socket is not yours: only its owner can "
                     "control it", errno.EACCES) from None
    except OSError as e:
        s.close()
        raise _error(f"{path}: {e.strerror}", e.errno or errno.EIO) from None
    return s


def _check(reply) -> Any:          # the reply's data: its type is the op's
    if not isinstance(reply, dict):
        raise _error("malformed reply from the target", errno.EIO)
    if reply.get("ok"):
        return reply.get("data")
    raise _error(str(reply.get("msg", "")), int(reply.get("errno") or errno.EIO),
                 str(reply.get("error_log") or ""))


class Client:
    """PID's tracefs (``Tracefs`` methods) plus ``detach()`` and ``info()``.  One
    connection, kept open, used by one request at a time; ``open_pipe`` opens its own."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._sock = connect(pid)
        self._frames = FrameReader(self._sock)

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.close()
                except OSError:
                    pass
                self._sock = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, op: str, path: str = "", data: str = "", append: bool = False):
        with self._lock:
            if self._sock is None:
                self._sock = connect(self.pid)
                self._frames = FrameReader(self._sock)
            try:
                send_frame(self._sock, {"op": op, "path": path, "data": data, "append": append})
                reply = self._frames.read()
            except OSError as e:
                self._sock.close()
                self._sock = None
                if not endpoint.pid_alive(self.pid):
                    raise _error(f"no process {self.pid} (it has exited)", errno.ESRCH) from None
                raise _error(f"process {self.pid}: connection lost ({e.strerror or e})",
                             errno.EIO) from None
            if reply is None:
                self._sock.close()
                self._sock = None
                if not endpoint.pid_alive(self.pid):
                    raise _error(f"no process {self.pid} (it has exited)", errno.ESRCH)
                raise _error(f"process {self.pid} closed the connection", errno.EIO)
        return _check(reply)

    # -- the Tracefs methods -----------------------------------------------------------
    def read(self, path: str) -> str:
        return self._call("read", path)

    def write(self, path: str, data: str, append: bool = False) -> None:
        self._call("write", path, data, append)

    def ls(self, path: str = "") -> list[str]:
        return self._call("ls", path)

    def kind(self, path: str) -> str | None:
        return self._call("kind", path)

    def mode(self, path: str) -> int:
        return self._call("mode", path)

    def stat(self, path: str) -> tuple[str | None, int]:
        kind, mode = self._call("stat", path)
        return kind, mode

    def mkdir(self, path: str) -> None:
        self._call("mkdir", path)

    def rmdir(self, path: str) -> None:
        self._call("rmdir", path)

    def open_pipe(self, path: str = "trace_pipe") -> "ClientPipe":
        return ClientPipe(self.pid, path)

    # -- the endpoint's own -------------------------------------------------------------
    def info(self) -> dict:
        """{"pid", "python", "argv", "executable"} of the target."""
        return self._call("info")

    def detach(self) -> str:
        """Everything of fntrace off in the target, and the endpoint gone."""
        try:
            return self._call("detach")
        finally:
            self.close()


class ClientPipe:
    """An open trace_pipe of another process: ``read(timeout)`` returns the next text
    ("" when ``timeout`` seconds pass with nothing; None waits), ``close()`` ends it."""

    def __init__(self, pid: int, path: str = "trace_pipe") -> None:
        self.pid = pid
        self._sock = connect(pid)
        self._frames = FrameReader(self._sock)
        self.closed = False
        try:
            send_frame(self._sock, {"op": "pipe", "path": path, "data": "", "append": False})
            reply = self._frames.read()
        except OSError as e:
            self.close()
            raise _error(f"process {pid}: connection lost ({e.strerror or e})", errno.EIO) from None
        if reply is None:
            self.close()
            raise _error(f"process {pid} closed the connection", errno.EIO)
        try:
            _check(reply)
        except FntraceError:
            self.close()
            raise

    def fileno(self) -> int:
        return self._sock.fileno()

    def read(self, timeout: float | None = None) -> str:
        """Ask for the next text and wait for the answer: the server reads (consumes)
        only for a read waited on, so what this pipe took it also shows."""
        if self.closed:
            return ""
        try:
            send_frame(self._sock, {"op": "read", "timeout": timeout})
            reply = self._frames.read()
        except OSError:
            reply = None
        if reply is None:
            self.close()
            if not endpoint.pid_alive(self.pid):
                raise _error(f"no process {self.pid} (it has exited)", errno.ESRCH)
            raise _error(f"process {self.pid} closed trace_pipe", errno.EIO)
        return _check(reply) or ""

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._sock.close()
            except OSError:
                pass


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
