"""Creating the files a trace goes in: private, and never someone else's.

A trace holds the program's values (``-A``/``-R``, fetchargs, ``--repr``), so its files
are made 0600 whatever the umask (``--mode`` widens them on purpose), and an older file
of ours that is written over gets that mode too.

In a directory every user may write to and whose sticky bit keeps them from deleting
each other's files (/tmp), another user can leave a name for us to write to: a symlink
to a file of ours, or a file of theirs that would receive the trace.  As the kernel's
``fs.protected_symlinks`` and ``fs.protected_regular`` do for such directories, a
symlink there is not followed and a file owned by someone else is not opened; the
file is looked at before it is truncated, so a refused file is left as it was.
"""
from __future__ import annotations

import errno
import io
import os
import stat
# typing is not imported at run time (the recorder's start-up); annotations are strings
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

from .errors import FntraceError

__all__ = ["TRACE_MODE", "check_name", "create", "parse_mode", "replace_target",
           "shared_sticky_dir"]

TRACE_MODE = 0o600


def shared_sticky_dir(path: str) -> bool:
    """True if ``path``'s directory is writable by every user and sticky (/tmp)."""
    try:
        st = os.stat(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return bool(st.st_mode & stat.S_ISVTX and st.st_mode & stat.S_IWOTH)


def create(path: str, mode: int = TRACE_MODE, *, binary: bool = True, buffering: int = -1,
           exclusive: bool = False, encoding: str | None = None) -> IO:
    """Open ``path`` for writing from its start, made or kept with ``mode``; raise
    FntraceError (errno set) for a name another user left in a shared sticky directory,
    OSError for the rest."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    if exclusive:
        flags |= os.O_EXCL
    shared = shared_sticky_dir(path)
    if shared and not check_name(path):
        # (a link of our own, or of the directory's owner, is followed, as the kernel
        # does; no one else can replace it there.  Any other name is opened without
        # following: a link made between this look and the open is refused too.)
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, mode)
    except OSError as e:
        if shared and (e.errno == errno.ELOOP or os.path.islink(path)):
            raise _refused(path, "it is another user's symbolic link, in a directory "
                                 "every user can write to", errno.ELOOP) from None
        raise
    raw = None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if shared and st.st_uid != os.geteuid():
                raise _refused(path, f"it belongs to user {st.st_uid}, in a directory every "
                                     "user can write to: the trace would be theirs",
                               errno.EACCES)
            os.ftruncate(fd, 0)
            if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
                os.fchmod(fd, mode)             # an older file keeps no wider mode
        raw = io.FileIO(fd, "w", closefd=True)
        raw.name = path                 # (messages name the file, not its descriptor)
    except BaseException:
        if raw is not None:
            raw.close()
        else:
            os.close(fd)
        raise
    if binary and buffering == 0:
        return raw
    buf = io.BufferedWriter(raw) if buffering in (-1, 1) else io.BufferedWriter(raw, buffering)
    if binary:
        return buf
    return io.TextIOWrapper(buf, encoding=encoding or "utf-8", newline="\n")


def replace_target(path: str) -> str | None:
    """Where a file that is written whole (under a name of its own, then renamed over
    the old one, so a failed write leaves it as it was) goes for ``path``: the file a
    symbolic link names (the link stays a link), else ``path``; None when the name is
    not a file to replace but a device, a pipe or a socket (``-o /dev/null``,
    ``/dev/stdout``, a FIFO), which is written in place: renaming over it would put a
    regular file where /dev/null was."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        return None
    return os.path.realpath(path) if os.path.islink(path) else path


def check_name(path: str) -> bool:
    """For a name in a shared sticky directory: raise FntraceError if another user's
    symlink or file is there (what fs.protected_symlinks and fs.protected_regular
    refuse); True if it is a symlink we may follow (ours, or the directory owner's)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode):
        try:
            owner = os.stat(os.path.dirname(os.path.abspath(path))).st_uid
        except OSError:
            owner = None
        if st.st_uid in (os.geteuid(), owner):
            return True
        raise _refused(path, "it is another user's symbolic link, in a directory every "
                             "user can write to", errno.ELOOP)
    if stat.S_ISREG(st.st_mode) and st.st_uid != os.geteuid():
        raise _refused(path, f"it belongs to user {st.st_uid}, in a directory every user "
                             "can write to: the trace would be theirs", errno.EACCES)
    return False


def _refused(path: str, why: str, code: int) -> FntraceError:
    e = FntraceError(f"{path}: not written: {why}; choose another path")
    e.errno = code
    return e


def parse_mode(text: str) -> int:
    """``--mode``: an octal permission such as 0644 or 640."""
    t = text.strip()
    try:
        mode = int(t, 8)
    except ValueError:
        mode = -1
    if not t or mode < 0 or mode > 0o777:
        raise FntraceError(f"--mode {text!r}: give file permissions in octal, such as 0600 "
                           "or 0644")
    return mode


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
