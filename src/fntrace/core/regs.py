"""ftrace_regs vs pt_regs (seed 002; include/linux/ftrace_regs.h).

Every callback gets an ``FtraceRegs``: a cheap, read-only view of what the kernel's
ftrace_regs holds on a WITH_ARGS arch — the arguments (by position and by parameter
name), the function (instruction pointer), the caller, and on return the return value.
The full frame (locals, globals, f_back: the "pt_regs") is handed out by
``ftrace_get_regs()`` only when the site was set up to save regs, i.e. some ops on it
asked for FTRACE_OPS_FL_SAVE_REGS; otherwise it returns ``None``, so a callback never
relies on state it did not ask for.

The view is only valid during the callback, like the kernel's: it holds the frame, and
keeping it alive keeps the frame alive.
"""
from __future__ import annotations

from types import CodeType, FrameType

from .fetch import frame_var as _frame_var
# typing is not imported at run time (it is a fifth of fntrace's import cost);
# the annotations are strings (from __future__ import annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = [
    "FtraceRegs", "ftrace_get_regs", "ftrace_regs_get_argument",
    "ftrace_regs_get_return_value", "ftrace_regs_get_instruction_pointer",
    "ftrace_regs_has_args", "FTRACE_REGS_MAX_ARGS",
]

FTRACE_REGS_MAX_ARGS = 6

# inspect.CO_VARARGS / CO_VARKEYWORDS (stable values; inspect is costly to import)
_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08
_NO_RETVAL = object()


# co_varnames builds a tuple and caches it on the code object: a new object in the
# program's gc.get_objects() at a traced function's first call.  The parameters are the
# first local names, which _varname_from_oparg (dis's, 3.11+) reads without building one.
_varname = getattr(CodeType, "_varname_from_oparg", None)


def _param_names(code: CodeType) -> tuple[str, ...]:
    """Parameter names in signature order: positional, *args, keyword-only, **kwargs."""
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    names: Sequence[str]
    if _varname is None:
        names = code.co_varnames
    else:
        n = npos + nkw + bool(code.co_flags & _CO_VARARGS) + bool(code.co_flags & _CO_VARKEYWORDS)
        names = [_varname(code, i) for i in range(n)]
    i = npos + nkw
    out = list(names[:npos])
    if code.co_flags & _CO_VARARGS:
        out.append(names[i])
        i += 1
    out.extend(names[npos:npos + nkw])
    if code.co_flags & _CO_VARKEYWORDS:
        out.append(names[i])
    return tuple(out)


class FtraceRegs:
    """The arguments and return value of one traced call.

    Slots: ``frame`` the traced function's frame, ``rec`` its record, ``regs`` whether the
    site saves the full frame, ``retval`` the return value (exit callbacks only).  A C
    function's call (--c-calls) has no frame: ``frame`` is the callable, and the call
    shows no parameters (CPython hands a profiler none of a C call's arguments).
    """
    __slots__ = ("frame", "rec", "regs", "retval")

    # rec: a record (core/records.py, beside this module in the layers: not imported);
    # regs: a bool or the site's REGS_EN flag bit, read for its truth only
    def __init__(self, frame: FrameType, rec: Any, regs: int = False, retval: Any = _NO_RETVAL):
        self.frame = frame
        self.rec = rec
        self.regs = regs
        self.retval = retval

    # -- arguments ------------------------------------------------------------------
    @property
    def param_names(self) -> tuple[str, ...]:
        frame = self.frame
        return _param_names(frame.f_code) if type(frame) is FrameType else ()

    def get_argument(self, n: int) -> Any:
        """The n-th parameter's value (0-based, like ftrace_regs_get_argument).

        Parameters are those of the signature, in order: positional, keyword-only, then
        *args and **kwargs.  On a return callback this is the parameter's current value.
        """
        names = self.param_names
        if not 0 <= n < len(names):
            raise IndexError(f"{self.rec.name if self.rec else '?'} has no argument {n}")
        return _frame_var(self.frame, names[n])

    def arg(self, name: str) -> Any:
        """A parameter by name."""
        if name not in self.param_names:
            raise KeyError(name)
        try:
            return _frame_var(self.frame, name)
        except NameError:
            raise KeyError(name) from None

    @property
    def args(self) -> list[tuple[str, Any]]:
        """All parameters as (name, value) pairs (None for one not bound yet).  Read
        without the frame's f_locals snapshot where the native twin can (fetch.py)."""
        frame = self.frame
        out = []
        for n in self.param_names:
            try:
                out.append((n, _frame_var(frame, n)))
            except (NameError, KeyError):
                out.append((n, None))
        return out

    def __getitem__(self, key: int | str) -> Any:
        return self.get_argument(key) if isinstance(key, int) else self.arg(key)

    # -- what the kernel keeps beside the arguments ------------------------------------
    @property
    def instruction_pointer(self) -> Any:
        """The traced function's record (ftrace_regs_get_instruction_pointer)."""
        return self.rec

    @property
    def caller_frame_code(self) -> CodeType | None:
        if type(self.frame) is not FrameType:
            return None
        back = self.frame.f_back
        return back.f_code if back is not None else None

    @property
    def has_retval(self) -> bool:
        return self.retval is not _NO_RETVAL

    def get_return_value(self) -> Any:
        if self.retval is _NO_RETVAL:
            raise LookupError("no return value on a function entry")
        return self.retval

    def __repr__(self) -> str:
        name = self.rec.name if self.rec is not None else "?"
        return f"<FtraceRegs {name} regs={'full' if self.regs else 'args'}>"


def ftrace_get_regs(fregs: FtraceRegs | None) -> FrameType | None:
    """The full frame, or None unless the site saves regs (a SAVE_REGS ops is on it)."""
    if fregs is None or not fregs.regs:
        return None
    return fregs.frame


def ftrace_regs_has_args(fregs: FtraceRegs | None) -> bool:
    # Always true here: every site passes the arguments (HAVE_DYNAMIC_FTRACE_WITH_ARGS).
    return fregs is not None


def ftrace_regs_get_argument(fregs: FtraceRegs, n: int) -> Any:
    return fregs.get_argument(n)


def ftrace_regs_get_return_value(fregs: FtraceRegs) -> Any:
    return fregs.get_return_value()


def ftrace_regs_get_instruction_pointer(fregs: FtraceRegs) -> Any:
    return fregs.rec


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
