"""The control endpoint's address and wire format: where a served program's socket is,
who may use it, and how requests and replies travel.

One Unix stream socket per served process, ``PID.sock`` in a per-user runtime
directory: ``$XDG_RUNTIME_DIR/fntrace`` when that variable names a directory of ours,
else ``/tmp/fntrace-UID-XXXXXXXX``, made with a random name (mkdtemp) and found again by
listing /tmp for the ones the user owns: a fixed name could be made first by another
user, who would then decide whether our program can be controlled.  The directory is
0700 and the socket 0600; an XDG directory owned by someone else, or that others may
write to, is refused (someone could put a socket of theirs there), and /tmp ones that
are not ours and closed are not looked at.  The server also checks the peer's uid
(SO_PEERCRED).

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON.

    request   {"op": "read"|"write"|"ls"|"kind"|"mode"|"stat"|"mkdir"|"rmdir"|"pipe"|"detach"
                     |"info",
               "path": str, "data": str, "append": bool}
    reply     {"ok": true, "data": ...}
              {"ok": false, "errno": int, "msg": str, "error_log": str}

``pipe`` answers with one reply frame per chunk of trace_pipe text until the client
closes its end.  JSON carries only strings, numbers and lists: nothing received is
ever evaluated.
"""
from __future__ import annotations

import errno
import json
import os
import select
import socket
import stat
import struct

from ..errors import FntraceError

__all__ = ["runtime_dir", "runtime_dirs_of", "xdg_dir", "tmp_dirs", "TMP", "socket_path", "send_frame", "recv_frame", "FrameReader", "readable", "peer_cred",
           "list_endpoints", "process_cmdline", "pid_alive", "is_stale", "remove_stale", "remove_if_stale",
           "EndpointError", "MAX_FRAME", "OPS"]

# A request is a path and a short value; a reply may be a whole trace.
MAX_FRAME = 256 << 20
MAX_REQUEST = 16 << 20

OPS = ("read", "write", "ls", "kind", "mode", "stat", "mkdir", "rmdir", "pipe", "detach",
       "info")

_LEN = struct.Struct(">I")
_UCRED = struct.Struct("3i")     # struct ucred: pid, uid, gid


class EndpointError(FntraceError):
    """The endpoint cannot be used: its directory is unsafe, or a frame is malformed."""


def _check_dir(path: str, uid: int) -> None:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise EndpointError(f"{path} is not a directory (a symlink or a file): refusing "
                            "to use it for control sockets")
    if st.st_uid != uid:
        e = EndpointError(f"{path} belongs to uid {st.st_uid}, not to you (uid {uid}): "
                          "refusing to use it for control sockets")
        e.errno = errno.EPERM
        raise e
    if st.st_mode & 0o022:
        e = EndpointError(f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):04o}): "
                          "refusing to use it for control sockets; chmod 700 it")
        e.errno = errno.EPERM
        raise e


# Where the per-user directories go without XDG_RUNTIME_DIR.  Always /tmp, not
# $TMPDIR: a program and the ``fntrace`` command looking for it may have different ones.
TMP = "/tmp"


def xdg_dir(uid: int, xdg: str | None) -> str | None:
    """``XDG/fntrace`` if ``xdg`` names a directory of ``uid``'s, else None."""
    if xdg and os.path.isabs(xdg):
        try:
            st = os.stat(xdg)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
                return os.path.join(xdg, "fntrace")
        except OSError:
            pass
    return None


def tmp_dirs(uid: int) -> list[str]:
    """The user's own ``/tmp/fntrace-UID-XXXXXXXX`` directories, by name: only those that
    are directories (not links) owned by ``uid`` and closed to others.  Their names are
    random, so nobody can make one first and squat it; one another user made with such
    a name is not theirs to offer, and is passed over."""
    prefix = f"fntrace-{uid}-"
    try:
        names = sorted(n for n in os.listdir(TMP) if n.startswith(prefix))
    except OSError:
        return []
    out = []
    for n in names:
        path = os.path.join(TMP, n)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o077:
            out.append(path)
    return out


def runtime_dir(create: bool = True) -> str:
    """The per-user directory of control sockets: ``$XDG_RUNTIME_DIR/fntrace`` when that
    variable names a directory of ours (made 0700 if missing: ``create``), else the
    first of the user's ``/tmp/fntrace-UID-*`` directories (one made with a random name
    if there is none and ``create``; without one, a name nobody has, for messages)."""
    uid = os.getuid()
    base = xdg_dir(uid, os.environ.get("XDG_RUNTIME_DIR"))
    if base is None:
        mine = tmp_dirs(uid)
        if mine:
            return mine[0]
        if not create:
            return os.path.join(TMP, f"fntrace-{uid}-*")
        import tempfile
        return tempfile.mkdtemp(prefix=f"fntrace-{uid}-", dir=TMP)    # 0700
    if create:
        try:
            os.mkdir(base, 0o700)
        except FileExistsError:
            pass
    if os.path.lexists(base):
        _check_dir(base, uid)
    return base


def runtime_dirs_of(uid: int, xdg: str | None = None) -> list[str]:
    """Every directory where a process of ``uid`` may have put its control socket (the
    XDG one named, or the usual /run/user/UID, then the /tmp ones)."""
    first = xdg_dir(uid, xdg or f"/run/user/{uid}")
    return ([first] if first else []) + tmp_dirs(uid)


def socket_path(pid: int, create: bool = False) -> str:
    """Where process ``pid`` of this user serves (``create``: where this process is to
    serve).  Without XDG_RUNTIME_DIR, any of the user's /tmp directories may hold it."""
    base = runtime_dir(create)
    path = os.path.join(base, f"{pid}.sock")
    if not create and not os.path.lexists(path):
        for d in tmp_dirs(os.getuid()):
            cand = os.path.join(d, f"{pid}.sock")
            if os.path.lexists(cand):
                return cand
    return path


# one encoder for every frame (json.dumps with options makes a new one a call: a served
# program pays it for each request of a FUSE mount)
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def send_frame(sock: socket.socket, obj) -> None:
    body = _encode(obj).encode("utf-8", "surrogatepass")
    # MSG_NOSIGNAL: a peer gone away is an error here, never a SIGPIPE for the program
    # (which may have set SIGPIPE to its default action, and would die of it).
    sock.sendall(_LEN.pack(len(body)) + body, socket.MSG_NOSIGNAL)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    parts = []
    while n:
        b = sock.recv(min(n, 1 << 20))
        if not b:
            return None
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def recv_frame(sock: socket.socket, limit: int = MAX_FRAME):
    """The next frame's object, or None when the peer closed between frames."""
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (n,) = _LEN.unpack(head)
    if n > limit:
        raise EndpointError(f"frame of {n} bytes is larger than the limit ({limit})")
    body = _recv_exact(sock, n)
    if body is None:
        raise EndpointError("connection closed in the middle of a frame")
    try:
        return json.loads(body.decode("utf-8", "surrogatepass"))
    except ValueError as e:
        raise EndpointError(f"malformed frame: {e}") from None


class FrameReader:
    """recv_frame with a buffer: a whole request usually comes in one recv().  Each
    system call gives the GIL away, and a program busy in Python takes a switch
    interval (5 ms) to give it back: fewer calls, faster control writes."""

    __slots__ = ("sock", "buf")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            b = self.sock.recv(max(65536, n - len(self.buf)))
            if not b:
                return False
            self.buf += b
        return True

    def read(self, limit: int = MAX_FRAME):
        """The next frame's object, or None when the peer closed between frames."""
        if not self._fill(4):
            if self.buf:
                raise EndpointError("connection closed in the middle of a frame")
            return None
        (n,) = _LEN.unpack_from(self.buf)
        if n > limit:
            raise EndpointError(f"frame of {n} bytes is larger than the limit ({limit})")
        if not self._fill(4 + n):
            raise EndpointError("connection closed in the middle of a frame")
        body = bytes(self.buf[4:4 + n])
        del self.buf[:4 + n]
        try:
            return json.loads(body.decode("utf-8", "surrogatepass"))
        except ValueError as e:
            raise EndpointError(f"malformed frame: {e}") from None


def readable(sock: socket.socket, timeout: float | None) -> bool:
    """Whether ``sock`` has something to read (or was closed) within ``timeout``
    seconds (None: wait).  poll(), not select(): a program may have more than
    FD_SETSIZE files open."""
    p = select.poll()
    p.register(sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
    ms = None if timeout is None else max(0, int(timeout * 1000))
    while True:
        try:
            return bool(p.poll(ms))
        except InterruptedError:
            continue


def peer_cred(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return _UCRED.unpack(raw)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    return " ".join(a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0"))


def is_stale(path: str, pid: int) -> bool:
    """A socket left by a process that is gone (killed: nobody removed it), or whose
    pid now belongs to a process that does not listen on it."""
    if not pid_alive(pid):
        return True
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except OSError:
        return False
    finally:
        s.close()
    return False


def remove_stale(path: str, seen: os.stat_result | None = None) -> bool:
    """Remove a stale socket; with ``seen`` (its lstat from before it was found stale),
    only if the file there is still that one: a process given the dead one's pid (pids
    are reused) may have just put its live socket in its place, and removing that would
    leave it serving from nowhere.  True if a file was removed."""
    try:
        if seen is not None:
            now = os.lstat(path)
            # the inode number alone may be given again at once (not on tmpfs, but
            # on ext4): a socket put there since has a later ctime
            if ((now.st_dev, now.st_ino, now.st_ctime_ns)
                    != (seen.st_dev, seen.st_ino, seen.st_ctime_ns)):
                return False
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def remove_if_stale(path: str, pid: int) -> bool:
    """``is_stale`` then ``remove_stale`` of that same file: True if the socket was stale
    (and is gone, unless a live one replaced it meanwhile)."""
    try:
        seen = os.lstat(path)
    except OSError:
        return False
    if not is_stale(path, pid):
        return False
    remove_stale(path, seen)
    return True


def list_endpoints() -> list[tuple[int, str]]:
    """[(pid, command line)] of this user's served programs; stale sockets found on
    the way are removed."""
    try:
        dirs = [runtime_dir(create=False)]
    except EndpointError:
        dirs = []
    dirs += [d for d in tmp_dirs(os.getuid()) if d not in dirs]
    out = {}
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            stem, dot, ext = name.partition(".")
            if ext != "sock" or not stem.isdigit():
                continue
            pid = int(stem)
            path = os.path.join(d, name)
            if remove_if_stale(path, pid):
                continue
            out[pid] = process_cmdline(pid)
    return sorted(out.items())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
