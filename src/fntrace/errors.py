"""Errors fntrace raises. Each carries the errno the kernel gives for the same failure,
and, for parse errors, where in the command it went wrong (for error_log's caret)."""
from __future__ import annotations

__all__ = ["FntraceError", "FilterError", "BusyError", "NoSpaceError", "NotFoundError",
           "UsageError", "TraceFileError"]

import errno as _errno


class FntraceError(Exception):
    """Base of every error fntrace raises. .errno is the kernel errno the same failure gives."""

    errno: int = _errno.EINVAL

    def __init__(self, msg: str, *, pos: int | None = None, command: str | None = None):
        super().__init__(msg)
        self.msg = msg
        self.pos = pos
        self.command = command


class FilterError(FntraceError):
    """A bad filter, or one that matches nothing (-EINVAL)."""
    errno = _errno.EINVAL


class BusyError(FntraceError):
    """Already registered, or the function is owned by someone else (-EBUSY)."""
    errno = _errno.EBUSY


class NoSpaceError(FntraceError):
    """A fixed table is full (-ENOSPC)."""
    errno = _errno.ENOSPC


class NotFoundError(FntraceError):
    """No such function or entry (-ENOENT)."""
    errno = _errno.ENOENT


class UsageError(FntraceError):
    """Bad command-line or API arguments."""
    errno = _errno.EINVAL


class TraceFileError(FntraceError):
    """A trace file that cannot be read: bad magic, version, checksum or length."""
    errno = _errno.EINVAL


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
