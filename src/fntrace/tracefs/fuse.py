"""tracefs as a FUSE file system: the shell's own tools on a program's control files.

    mount(fs, "/mnt/trace")         # fs: anything with the tracefs file API

``fs`` is a Tracefs of this process or a client of another program's control endpoint:
only the file API is used (read, write(append=), ls, kind, mode, mkdir, rmdir,
open_pipe), so every write ends in the same tracefs write handlers whatever door it
came through.  The binding is mfusepy over libfuse3 (``pip install fntrace[mount]``,
Debian package ``fuse3``).

How the kernel's tracefs semantics map onto FUSE:

- Files have size 0, as in tracefs; ``direct_io`` makes the kernel ask for every read
  instead of believing the size.  A regular file's text is made once, at open, and
  served by offset, so one ``cat`` sees one consistent snapshot.
- ``trace_pipe`` is consuming and blocking: each open has its own reader
  (``open_pipe``); a read waits until there is something to show, returns what fits
  and keeps the rest for the next read of that open.  A read waiting when the reader
  is interrupted (^C on ``cat``) ends with EINTR: the kernel waits for the answer of a
  request it has sent, so not answering would leave ``cat`` unkillable.  O_NONBLOCK
  gives EAGAIN, as tracing_wait_pipe does.  When the program exits (or stops
  serving) a waiting read ends with EOF, as a pipe whose writer is gone.
- Each write() is applied as the kernel applies it: the first write of an open
  truncates (``>``) unless the file was opened with O_APPEND (``>>``); later writes of
  the same open add.  A refused write returns the error's errno, which the shell
  prints (``echo: write error: Invalid argument``) and the state is left as it was.
  An open with O_TRUNC and no write (``: > set_ftrace_filter``) clears the files the
  kernel clears at such an open (trace, the filter lists, set_event ...).
- mkdir/rmdir make and remove ``instances/NAME``; creating a file is refused
  (EACCES), as tracefs has no create.
- Mount options as tracefs has them: ``uid=`` and ``gid=`` own every entry, ``mode=``
  is the top directory's mode (default 0700, tracefs's TRACEFS_DEFAULT_MODE); the
  kernel checks the bits (``default_permissions``).  Other users get in only with
  ``allow_other``, and only if asked.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat
import subprocess
import threading
import time
from collections.abc import Callable
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

import mfusepy

from ..core.task import fntrace_thread, own_threads
from ..errors import FntraceError

__all__ = ["TracefsOperations", "mount", "unmount", "CLEAR_ON_TRUNC"]

# Files an open with O_TRUNC clears in the kernel (tracing_open, ftrace_regex_open,
# ftrace_graph_open, ftrace_event_set_open, ftrace_event_set_pid_open, dyn_event_open,
# tracing_err_log_open, ...): ": > FILE" empties them even with nothing written.
CLEAR_ON_TRUNC = frozenset({
    "trace", "set_ftrace_filter", "set_ftrace_notrace", "set_graph_function",
    "set_graph_notrace", "set_event", "set_event_pid", "set_event_notrace_pid",
    "set_ftrace_pid", "set_ftrace_notrace_pid", "dynamic_events", "kprobe_events",
    "uprobe_events", "error_log", "stack_trace_filter",
})

# Files whose writes the kernel parses word by word with trace_parser, which keeps a
# word cut at the end of one write() for the next.  A write of at least CARRY_MIN
# bytes not ending in white space is taken to be cut by the writer; a smaller one
# (echo -n NAME) is a whole command, applied (or refused) at once.
PARSER_FILES = frozenset({
    "set_ftrace_filter", "set_ftrace_notrace", "set_graph_function", "set_graph_notrace",
    "set_event", "set_ftrace_pid", "set_ftrace_notrace_pid", "set_event_pid",
    "set_event_notrace_pid", "stack_trace_filter",
})
CARRY_MIN = 4096
_SPACE = (b" ", b"\n", b"\t")

# How long a blocked trace_pipe read waits between looks at "was I interrupted?".
PIPE_POLL = 0.05


def _rel(path: str | None) -> str:
    return (path or "").strip("/")


def _error(e: BaseException) -> mfusepy.FuseOSError:
    """The errno a failure gives the reader: the kernel's for an FntraceError (its
    .errno), the OSError's own, EIO for anything else (a lost endpoint)."""
    if isinstance(e, FntraceError):
        return mfusepy.FuseOSError(e.errno or errno.EINVAL)
    if isinstance(e, OSError) and isinstance(e.errno, int) and e.errno > 0:
        return mfusepy.FuseOSError(e.errno)
    return mfusepy.FuseOSError(errno.EIO)


def _interrupted() -> bool:
    """Whether the request this FUSE thread is answering has been interrupted (the
    reader got a signal): libfuse's fuse_interrupted(), which needs no ``intr``."""
    try:
        return bool(mfusepy._libfuse.fuse_interrupted())
    except (AttributeError, OSError):      # pragma: no cover - a libfuse without it
        return False


class _Handle:
    """One open file: its text made at open, or its trace_pipe reader."""

    __slots__ = ("path", "flags", "content", "error", "reader", "pending", "wrote",
                 "carry", "lock", "closed")

    def __init__(self, path: str, flags: int) -> None:
        self.path = path
        self.flags = flags
        self.content: bytes = b""
        self.error: BaseException | None = None
        self.reader: Any = None
        self.pending = b""
        self.wrote = False
        self.carry = b""
        self.lock = threading.Lock()
        self.closed = False


class TracefsOperations(mfusepy.Operations):
    """mfusepy operations over the tracefs file API of ``fs``."""

    use_ns = True

    def __init__(self, fs: Any, *, uid: int | None = None, gid: int | None = None,
                 mode: int = 0o700, on_ready: Callable[[], None] | None = None) -> None:
        self.fs = fs
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.root_mode = mode & 0o7777
        self.on_ready = on_ready
        self.stopping = threading.Event()
        self.time_ns = time.time_ns()
        self._handles: dict[int, _Handle] = {}
        self._event_dirs: set[str] = set()      # event directories looked up (cached)
        self._next_fh = 1
        self._handles_lock = threading.Lock()
        # The file API of an in-process Tracefs (and a client's one connection) is
        # used by one request at a time; only trace_pipe readers wait outside it.
        self._fs_lock = threading.RLock()

    # -- plumbing --------------------------------------------------------------------
    @staticmethod
    def _own_thread() -> None:
        # libfuse's worker threads run the tracefs code: never trace them.
        if threading.get_native_id() not in own_threads:
            fntrace_thread()

    def _call(self, fn: Callable, *args, **kwargs):
        self._own_thread()
        try:
            with self._fs_lock:
                return fn(*args, **kwargs)
        except mfusepy.FuseOSError:
            raise
        except Exception as e:
            raise _error(e) from None

    def _handle(self, fh: int) -> _Handle:
        h = self._handles.get(fh)
        if h is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        return h

    @staticmethod
    def _is_pipe(path: str) -> bool:
        return path.rsplit("/", 1)[-1] == "trace_pipe"

    # -- attributes and directories --------------------------------------------------
    def init(self, path: str) -> None:
        self._own_thread()
        if self.on_ready is not None:
            self.on_ready()

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        rel = _rel(path)
        # (kind, mode) in one question where the file API has it (Tracefs, Client: one
        # round trip to a served program a lookup, not two)
        both = getattr(self.fs, "stat", None)
        if both is not None:
            kind, mode = self._call(both, rel)
        else:
            kind = self._call(self.fs.kind, rel)
            mode = None
        if kind is None:
            raise mfusepy.FuseOSError(errno.ENOENT)
        if mode is None and rel:
            mode = self._call(self.fs.mode, rel)
        if kind == "dir":
            if rel.startswith(("events/", "instances/")):
                with self._handles_lock:
                    self._event_dirs.add(rel)
            st_mode, nlink = stat.S_IFDIR | (self.root_mode if not rel else mode), 2
        else:
            st_mode, nlink = stat.S_IFREG | mode, 1
        t = self.time_ns
        return {"st_mode": st_mode, "st_nlink": nlink, "st_uid": self.uid,
                "st_gid": self.gid, "st_size": 0, "st_atime": t, "st_mtime": t,
                "st_ctime": t}

    def readdir(self, path: str, fh: int) -> list[str]:
        rel = _rel(path)
        names = self._call(self.fs.ls, rel)
        # (a directory lists something; only an empty answer needs the kind asked:
        # one request a listing, not two)
        if not names and self._call(self.fs.kind, rel) != "dir":
            raise mfusepy.FuseOSError(errno.ENOTDIR)
        return [".", "..", *names]

    def mkdir(self, path: str, mode: int) -> int:
        mk = getattr(self.fs, "mkdir", None)
        if mk is None:
            raise mfusepy.FuseOSError(errno.EPERM)
        self._call(mk, _rel(path))
        return 0

    def rmdir(self, path: str) -> int:
        rm = getattr(self.fs, "rmdir", None)
        if rm is None:
            raise mfusepy.FuseOSError(errno.EPERM)
        self._call(rm, _rel(path))
        return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        # tracefs directories have no create: a new name is refused.
        raise mfusepy.FuseOSError(errno.EACCES)

    def unlink(self, path: str) -> int:
        raise mfusepy.FuseOSError(errno.EPERM)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        # tracefs files take truncation silently (O_TRUNC is handled at open).
        return 0

    def chmod(self, path: str, mode: int) -> int:
        raise mfusepy.FuseOSError(errno.EPERM)

    def chown(self, path: str, uid: int, gid: int) -> int:
        raise mfusepy.FuseOSError(errno.EPERM)

    def utimens(self, path: str, times: Any = None) -> int:
        return 0

    # -- files -----------------------------------------------------------------------
    def open(self, path: str, flags: int) -> int:
        rel = _rel(path)
        kind = self._call(self.fs.kind, rel)
        if kind is None:
            raise mfusepy.FuseOSError(errno.ENOENT)
        if kind == "dir":
            raise mfusepy.FuseOSError(errno.EISDIR)
        h = _Handle(rel, flags)
        readable = flags & os.O_ACCMODE in (os.O_RDONLY, os.O_RDWR)
        if readable:
            if self._is_pipe(rel):
                h.reader = self._call(self.fs.open_pipe, rel)
            else:
                try:
                    h.content = self._call(self.fs.read, rel).encode("utf-8", "surrogateescape")
                except mfusepy.FuseOSError as e:
                    # tracefs refuses the read, not the open (trace_marker as root).
                    h.error = e
        with self._handles_lock:
            fh = self._next_fh
            self._next_fh += 1
            self._handles[fh] = h
        return fh

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        h = self._handle(fh)
        if h.error is not None:
            raise h.error
        if h.reader is None:
            return h.content[offset:offset + size]
        return self._read_pipe(h, size)

    def _read_pipe(self, h: _Handle, size: int) -> bytes:
        self._own_thread()
        with h.lock:
            while not h.pending:
                if h.closed or self.stopping.is_set():
                    return b""
                if _interrupted():
                    raise mfusepy.FuseOSError(errno.EINTR)
                try:
                    text = h.reader.read(PIPE_POLL)
                except FntraceError as e:
                    if e.errno in (errno.ESRCH, errno.EIO):
                        # The program exited or stopped serving: the end of the
                        # stream, as a pipe whose writer is gone.
                        h.closed = True
                        return b""
                    raise _error(e) from None
                except Exception as e:
                    raise _error(e) from None
                if text:
                    h.pending = text.encode("utf-8", "surrogateescape")
                elif h.flags & os.O_NONBLOCK:
                    raise mfusepy.FuseOSError(errno.EAGAIN)
            out, h.pending = h.pending[:size], h.pending[size:]
            return out

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        h = self._handle(fh)
        text = h.carry + data
        h.carry = b""
        if (len(data) >= CARRY_MIN and text[-1:] not in _SPACE
                and h.path.rsplit("/", 1)[-1] in PARSER_FILES):
            # A big write cut by the writer (cat FILE > set_ftrace_filter): the last
            # word may go on in the next write, as trace_parser keeps it.
            cut = max(text.rfind(b) for b in _SPACE)
            h.carry, text = text[cut + 1:], text[:cut + 1]
            if not text:
                return len(data)
        self._apply(h, text)
        return len(data)

    def _apply(self, h: _Handle, text: bytes) -> None:
        append = h.wrote or bool(h.flags & os.O_APPEND)
        try:
            self._call(self.fs.write, h.path, text.decode("utf-8", "surrogateescape"),
                       append=append)
        finally:
            if h.path.rsplit("/", 1)[-1] in EVENT_DEFINING:
                self._forget_events()
        h.wrote = True

    def _forget_events(self) -> None:
        """A write that can remove events: the kernel forgets the event directories it
        has looked up (fuse_invalidate_path), so a removed one is gone at once."""
        with self._handles_lock:
            seen, self._event_dirs = self._event_dirs, set()
        try:
            fuse = ctypes.c_void_p(mfusepy._libfuse.fuse_get_context().contents.fuse)
            for p in seen:
                mfusepy._libfuse.fuse_invalidate_path(fuse, ("/" + p).encode())
        except Exception:
            pass        # the name then goes when its second is up

    def flush(self, path: str, fh: int) -> int:
        h = self._handles.get(fh)
        if h is None:
            return 0
        if h.carry:
            text, h.carry = h.carry, b""
            self._apply(h, text)        # its error is close()'s
        if (not h.wrote and h.flags & os.O_TRUNC
                and h.flags & os.O_ACCMODE != os.O_RDONLY
                and h.path.rsplit("/", 1)[-1] in CLEAR_ON_TRUNC):
            h.wrote = True
            try:
                self._call(self.fs.write, h.path, "", append=False)
            except mfusepy.FuseOSError:
                pass
        return 0

    def release(self, path: str, fh: int) -> int:
        with self._handles_lock:
            h = self._handles.pop(fh, None)
        if h is not None:
            h.closed = True
            if h.reader is not None:
                try:
                    with h.lock:
                        h.reader.close()
                except Exception:
                    pass
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_namemax": 255}

    def destroy(self, path: str) -> None:
        self.stopping.set()


def _mount_options(uid: int | None, gid: int | None, allow_other: bool) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "fsname": "fntrace", "subtype": "fntrace",
        "direct_io": True,              # size 0 files: ask for every read
        "default_permissions": True,    # the kernel checks uid/gid/mode
        # A name and its attributes are kept for a second: a glob over every event
        # (events/*/*/trigger, 160 events and more) looked each path up afresh on
        # every pass, a request to the program each.  A name new through another door
        # (an instance, a probe) shows at once (no negative caching); an event removed
        # through this mount is forgotten at once (_forget_events); one removed
        # through another door may show for up to that second, and then reads as gone.
        "entry_timeout": 1.0, "attr_timeout": 1.0, "negative_timeout": 0,
        # Blocked trace_pipe readers each hold a worker thread; a bound keeps a
        # runaway number of readers from exhausting the process.  (Left unset,
        # libfuse 3.14 also complains of mfusepy's idle-thread default.)
        "max_threads": 64, "max_idle_threads": 8,
    }
    if allow_other:
        opts["allow_other"] = True
    return opts


# the files whose writes define and remove events
EVENT_DEFINING = ("dynamic_events", "kprobe_events", "synthetic_events", "uprobe_events")


# fuse_main_real()'s return codes (libfuse3 helper.c)
_FUSE_MAIN_ERRORS: dict[int | None, str] = {      # None: no code given
    1: "invalid mount options",
    2: "no mount point",
    3: "FUSE setup failed (is /dev/fuse there and usable?)",
    4: "mounting failed (is it an empty directory you may mount on? fusermount3 installed?)",
    5: "could not go to the background",
    6: "could not set up signal handlers",
    7: "the file system failed while it ran",
    8: "the file system loop ended with an error",
}


def unmount(mountpoint: str, *, lazy: bool = True) -> bool:
    """Unmount ``mountpoint`` (``fusermount3 -u``); lazy by default, so a reader still
    inside it does not keep it mounted.  True if it is no longer mounted."""
    args = ["fusermount3", "-u", *(["-z"] if lazy else []), mountpoint]
    try:
        subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        pass
    return not os.path.ismount(mountpoint)


def mount(fs: Any, mountpoint: str, *, uid: int | None = None, gid: int | None = None,
          mode: int = 0o700, allow_other: bool = False,
          on_ready: Callable[[], None] | None = None,
          stop_when: Callable[[], object] | None = None, debug: bool = False) -> None:
    """Serve ``fs`` at ``mountpoint`` until it is unmounted (``fusermount3 -u``), the
    process gets SIGTERM/SIGINT/SIGHUP, or ``stop_when()`` returns (it is called on a
    thread of its own: block in it until the source goes away).

    ``on_ready`` is called once the kernel has the mount."""
    ready = threading.Event()

    def mounted() -> None:
        ready.set()
        if on_ready is not None:
            on_ready()

    ops = TracefsOperations(fs, uid=uid, gid=gid, mode=mode, on_ready=mounted)
    if stop_when is not None:
        def watch() -> None:
            fntrace_thread()
            try:
                stop_when()
            finally:
                # Readers blocked in trace_pipe see EOF, then the mount goes.
                ops.stopping.set()
                unmount(mountpoint)
        threading.Thread(target=watch, name="fntrace-mount-watch", daemon=True).start()
    try:
        mfusepy.FUSE(ops, mountpoint, foreground=True, nothreads=False, debug=debug,
                     **_mount_options(uid, gid, allow_other))
    except RuntimeError as e:
        code = e.args[0] if e.args and isinstance(e.args[0], int) else None
        if ready.is_set() and not os.path.ismount(mountpoint):
            return      # served, then ended by a signal (^C, SIGTERM): unmounted, done
        why = _FUSE_MAIN_ERRORS.get(code, f"libfuse's fuse_main failed ({code})")
        raise FntraceError(f"{mountpoint}: {why}") from None


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
