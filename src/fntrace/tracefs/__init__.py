"""tracefs: the control and output files, in process (fs.py), and the one control
path the command line and the Python API write their options through (control.py).

The package is callable: ``fntrace.tracefs()`` is the process's top-level directory,
``fntrace.tracefs.Tracefs()`` a new instance.
"""
import sys as _sys
import types as _types

from .fs import ErrorLog, Tracefs, tracefs as _top

__all__ = ["ErrorLog", "Tracefs", "top"]


def top() -> Tracefs:
    """The process's top-level tracefs directory."""
    return _top()


class _CallableModule(_types.ModuleType):
    def __call__(self) -> Tracefs:
        return _top()


_sys.modules[__name__].__class__ = _CallableModule


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
