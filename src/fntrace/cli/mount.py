"""``fntrace mount PID DIR``: a running program's tracefs as a FUSE file system.

    fntrace mount 4242 /tmp/t                 # returns once mounted
    echo function > /tmp/t/current_tracer     # the shell's own tools from here on
    cat /tmp/t/trace_pipe
    fusermount3 -u /tmp/t                     # or: the program exits

The mount goes through the program's control endpoint (tracefs/client.py), so every
write ends in its tracefs write handlers.  By default a background process keeps
serving and the command returns once the kernel has the mount; ``--foreground`` serves
from this process until unmounted.  The mount goes away by ``fusermount3 -u DIR``, or
by itself when the program exits or stops serving (its endpoint closes the connection
the mount keeps open).
"""
from __future__ import annotations

import os
import select
import shutil

from ..errors import FntraceError, UsageError
from .ctl import parse_pid

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket

__all__ = ["EPILOG", "add_arguments", "parse_mount_options", "run"]

EPILOG = """\
mount options (-o, comma separated, as tracefs has them):
  uid=N,gid=N   owner and group of every file (default: yours)
  mode=OCTAL    mode of the top directory (default: 0700, as tracefs)
  allow_other   let other users in (needs user_allow_other in /etc/fuse.conf)

needs libfuse3 (Debian: apt-get install fuse3) and mfusepy (pip install fntrace[mount])

examples:
  fntrace record --serve -p nop app.py &            # a program to control
  fntrace mount $! /tmp/t
  echo 'json.*' > /tmp/t/set_ftrace_filter
  echo '!json.loads' >> /tmp/t/set_ftrace_filter
  echo function > /tmp/t/current_tracer
  cat /tmp/t/trace_pipe                             # streams until ^C
  fntrace mount 4242 /tmp/t -o uid=1000,gid=1000,mode=0750
  fusermount3 -u /tmp/t                             # unmount"""

INSTALL_MFUSEPY = "fntrace mount needs mfusepy: install fntrace[mount] (pip install 'fntrace[mount]')"
INSTALL_LIBFUSE = ("fntrace mount needs libfuse3: install it (Debian/Ubuntu: apt-get install "
                   "fuse3; Fedora: dnf install fuse3)")


def add_arguments(p) -> None:
    p.add_argument("pid", metavar="PID",
                   help="the program (started with --serve, calling fntrace.serve(), or "
                        "attached)")
    p.add_argument("dir", metavar="DIR", help="an empty directory to mount its tracefs on")
    p.add_argument("-o", dest="options", action="append", default=[], metavar="OPTIONS",
                   help="mount options: uid=N, gid=N, mode=OCTAL, allow_other")
    p.add_argument("--foreground", action="store_true",
                   help="serve from this process until unmounted (default: return once "
                        "mounted, a background process serving)")


def parse_mount_options(texts: list[str]) -> dict:
    """``-o uid=N,gid=N,mode=OCTAL,allow_other`` -> keyword arguments of mount(); the
    values are checked as tracefs's parser does (numbers; mode octal, at most 07777)."""
    out: dict = {}
    for text in texts:
        for word in text.split(","):
            word = word.strip()
            if not word:
                continue
            name, eq, value = word.partition("=")
            if name in ("uid", "gid"):
                try:
                    n = int(value)
                except ValueError:
                    raise UsageError(f"-o {word}: {name} must be a number") from None
                if n < 0 or n >= 1 << 32:
                    raise UsageError(f"-o {word}: {name} is out of range")
                out[name] = n
            elif name == "mode":
                try:
                    n = int(value, 8)
                except ValueError:
                    raise UsageError(f"-o {word}: mode must be octal (e.g. 0750)") from None
                if n < 0 or n > 0o7777:
                    raise UsageError(f"-o {word}: mode is out of range (0 to 07777)")
                out["mode"] = n
            elif name == "allow_other" and not eq:
                out["allow_other"] = True
            else:
                raise UsageError(f"-o {word}: unknown mount option (known: uid=, gid=, "
                                 "mode=, allow_other)")
    return out


def _load_fuse():
    """The FUSE adapter, or a UsageError saying what to install."""
    try:
        from ..tracefs import fuse
    except ImportError as e:
        if getattr(e, "name", None) == "mfusepy" or "mfusepy" in str(e):
            raise FntraceError(INSTALL_MFUSEPY) from None
        raise
    except OSError:
        # mfusepy found no libfuse
        raise FntraceError(INSTALL_LIBFUSE) from None
    return fuse


def _check_dir(path: str) -> str:
    if not os.path.isdir(path):
        raise UsageError(f"{path}: no such directory")
    if os.path.ismount(path):
        raise FntraceError(f"{path}: something is mounted there already")
    return os.path.abspath(path)


def _until_gone(pid: int) -> None:
    """Block until PID's endpoint closes (the program exits, is detached or stops
    serving): a connection of its own, which the endpoint closes when it stops, and the
    process's pidfd, readable when it exits."""
    from ..tracefs.client import connect
    waits: list[socket.socket | int] = []
    try:
        waits.append(connect(pid))
    except FntraceError:
        return
    try:
        waits.append(os.pidfd_open(pid))
    except (AttributeError, OSError):
        pass
    select.select(waits, [], [])


def _serve(pid: int, mountpoint: str, opts: dict, on_ready=None) -> None:
    fuse = _load_fuse()
    from ..tracefs.client import Client
    client = Client(pid)
    try:
        fuse.mount(client, mountpoint, on_ready=on_ready, stop_when=lambda: _until_gone(pid),
                   **opts)
    finally:
        client.close()


def _background(pid: int, mountpoint: str, opts: dict) -> int:
    """Fork a process that serves the mount; return once it says the kernel has it."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:                                      # pragma: no cover - the server
        status = 1
        try:
            os.close(r)
            os.setsid()
            os.chdir("/")            # holds no directory of the caller busy
            # The server outlives the command: it holds none of the caller's streams
            # (a `$(fntrace mount ...)` or a test's pipe would wait for it).
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.close(null)

            def ready() -> None:
                os.write(w, b"ok\n")

            _serve(pid, mountpoint, opts, on_ready=ready)
            status = 0
        except BaseException as e:
            msg = e.msg if isinstance(e, FntraceError) else f"{type(e).__name__}: {e}"
            try:
                os.write(w, ("error " + msg + "\n").encode())
            except OSError:
                pass
        finally:
            os._exit(status)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        chunks.append(b)
        if b"\n" in b:
            break
    os.close(r)
    reply = b"".join(chunks).decode(errors="replace").strip()
    if reply == "ok":
        return 0
    try:
        os.waitpid(child, 0)
    except ChildProcessError:
        pass
    msg = reply[len("error "):] if reply.startswith("error ") else "the mount failed"
    raise FntraceError(msg)


def run(args, at_exit: bool) -> int:
    pid = parse_pid(args.pid)
    opts = parse_mount_options(args.options)
    mountpoint = _check_dir(args.dir)
    _load_fuse()                    # say what to install before anything else
    if shutil.which("fusermount3") is None and os.getuid() != 0:
        raise FntraceError(INSTALL_LIBFUSE + " (fusermount3 is missing)")
    # A clear error now (no such process, not serving, another user's) rather than
    # from the background process.
    from ..tracefs.client import connect
    connect(pid).close()
    if args.foreground:
        _serve(pid, mountpoint, opts)
        return 0
    return _background(pid, mountpoint, opts)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
