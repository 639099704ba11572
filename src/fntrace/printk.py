"""fntrace's own messages: the kernel's printk, with ``pr_fmt`` "fntrace: ".

They go to a file descriptor, not to ``sys.stderr``: a program that replaces its
``sys.stderr`` (unittest's ``buffer=True``, pytest's capture, a logging setup) must not
hide a contained callback error or a lost event.  In-process that is descriptor 2;
``fntrace record``/``live`` point it at the standard error saved before the program
started (cli/guard.py), which the program cannot redirect at all.
"""
from __future__ import annotations

import os
import sys

__all__ = ["pr_warn", "set_console"]

_console = [2]


def set_console(fd: int) -> None:
    """Where messages go from now on (a file descriptor)."""
    _console[0] = fd


def pr_warn(msg: str) -> None:
    """``fntrace: msg`` on the console; never raises."""
    data = ("fntrace: " + msg + "\n").encode("utf-8", "backslashreplace")
    try:
        view = memoryview(data)
        while view:
            n = os.write(_console[0], view)
            view = view[n:]
    except OSError:
        try:
            # (None without a stderr: the AttributeError is caught below)
            sys.__stderr__.write(data.decode("utf-8", "replace"))  # type: ignore[union-attr]
        except Exception:
            pass


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
