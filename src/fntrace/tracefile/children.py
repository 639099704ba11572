"""The names of a followed process's trace files: beside the first process's file,
``BASE.PID`` (``BASE.PID.N`` for its N-th exec'd image).  Apart from the reader: the
recorder names its children's files with these, and reads no trace.
"""
from __future__ import annotations

import os
import re

__all__ = ["child_files", "child_path"]


def child_path(base: str, pid: int, image: int = 0) -> str:
    """The file of process ``pid`` (its ``image``-th exec'd image after the first)."""
    return f"{base}.{pid}" + (f".{image}" if image else "")


def child_files(base: str) -> list[str]:
    """The files beside ``base`` named as children's files are (any run's)."""
    d, name = os.path.split(os.path.abspath(base))
    pat = re.compile(re.escape(name) + r"\.(\d+)(?:\.(\d+))?\Z")
    try:
        names = os.listdir(d)
    except OSError:
        return []
    found = []
    prefix = name + "."
    for n in names:
        # (the prefix first: the directory may hold many files, /tmp does)
        m = pat.match(n) if n.startswith(prefix) else None
        if m:
            found.append((int(m.group(1)), int(m.group(2) or 0), os.path.join(d, n)))
    return [p for _, _, p in sorted(found)]


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
