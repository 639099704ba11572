"""Reading and showing the traced program's values without running its code.

A callback runs in the middle of the program: a ``__repr__`` that takes a lock the
caller holds deadlocks it, one with side effects changes it, a property or
``__getattr__`` runs code it did not expect to run there, and a signal handler may run
inside any Python code a callback executes.  So, by default (the kernel's fetchargs
read memory, they do not call functions):

    value_repr(v)       values of built-in types by value, bounded (reprlib's limits);
                        a subclass of one by its base's value, ``Name(value)``;
                        functions, classes, modules by name; anything else as
                        ``<module.Class object at 0x...>`` — no __repr__ is called
    static_getattr(o, n) what ``inspect.getattr_static`` finds: the instance __dict__,
                        slots and other C-level members; never a property, another
                        Python-level descriptor or ``__getattr__`` (a fault)
    static_getitem(o, k) items of the built-in containers only
    frame_var(f, n)     a local of a running frame without the ``f_locals`` snapshot,
                        which would keep every local alive as long as the frame (3.11,
                        3.12) — through the native twin; the pure path must use
                        ``f_locals`` there

``allow_program_code`` turns on the program's own ``__repr__``, properties, ``__getattr__``
and ``__getitem__`` (``fntrace record --repr``, tracefs ``options/object-repr``): more
readable, at the price above.  A KeyboardInterrupt or SystemExit raised inside is never
swallowed: it goes to the program.  A ``__repr__`` that raises (or recurses without end)
is shown as ``(fault)``; one that returns a huge text is cut to MAX_REPR characters; one
that takes longer than REPR_SLOW_NS is not asked again for values of its type (the safe
text instead), so a slow one stalls the program once, not at every traced call.  Those
are counted in ``settings.repr_faults``.
"""
from __future__ import annotations

from time import perf_counter_ns as _clock
from types import BuiltinFunctionType, CodeType, FunctionType, MethodType, ModuleType

from .. import _env

TYPE_CHECKING = False
if TYPE_CHECKING:                   # typing is costly to import; only checkers need this
    from collections.abc import Iterable
    from types import FrameType
    from typing import Any

__all__ = ["value_repr", "int_payload", "static_getattr", "static_getitem", "frame_var",
           "caller_frame",
           "FAULT", "MAX_REPR", "Fault", "settings"]

FAULT = "(fault)"
MAX_REPR = 64           # the whole text
MAX_STRING = 40         # a str or bytes inside it (reprlib.maxstring)
MAX_ITEMS = 6           # items of a container shown (reprlib.maxlist)
MAX_LEVEL = 3           # nesting shown (reprlib.maxlevel)
MAX_INT_BITS = 256      # a larger int is shown by its size: its digits cost time
REPR_SLOW_NS = 50_000_000   # an allowed __repr__ slower than this is not asked again


class _Settings:
    """allow_program_code: the opt-in described in the module docstring; repr_faults:
    the program's __repr__ calls that raised or were too slow."""
    __slots__ = ("allow_program_code", "repr_faults")

    def __init__(self) -> None:
        self.allow_program_code = False
        self.repr_faults = 0


settings = _Settings()


class Fault(LookupError):
    """A value that cannot be read without running the program's code (or at all)."""


_type_dict = type.__dict__["__dict__"].__get__
_type_mro = type.__dict__["__mro__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_type_module = type.__dict__["__module__"].__get__
_exc_args = BaseException.__dict__["args"].__get__
_MemberDescriptor = type(FunctionType.__dict__["__globals__"])     # member_descriptor
_GetSetDescriptor = type(FunctionType.__dict__["__name__"])        # getset_descriptor
_MISSING = object()

_SCALARS = {int: int.__repr__, float: float.__repr__, complex: complex.__repr__,
            bool: bool.__repr__, type(None): repr, type(Ellipsis): repr,
            type(NotImplemented): repr}


def _type_name(t: type) -> str:
    try:
        mod = _type_module(t)
        qn = _type_qualname(t)
    except (TypeError, AttributeError):
        return "?"
    if not isinstance(mod, str) or mod == "builtins":
        return qn if isinstance(qn, str) else "?"
    return f"{mod}.{qn}"


def _cut(s: str, limit: int) -> str:
    if len(s) <= limit:
        return s
    head = (limit - 3) // 2
    return s[:head] + "..." + s[len(s) - (limit - 3 - head):]


_VALUE_BASES = (int, float, str, bytes, tuple, list, dict, set, frozenset)


def _int_text(v: int) -> str:
    bits = int.bit_length(v)
    if bits > MAX_INT_BITS:
        return f"<int of {bits} bits>"
    return _cut(int.__repr__(v), MAX_STRING)


def _str_text(v: str) -> str:
    # str.__repr__ of at most MAX_STRING characters (a slice of the data, no copy of
    # a huge string's repr); str.__len__: a subclass's own __len__ is its code
    n = str.__len__(v)
    if n > MAX_STRING:
        head = (MAX_STRING - 3) // 2
        return (str.__repr__(str.__getitem__(v, slice(0, head)))[:-1] + "..."
                + str.__repr__(str.__getitem__(v, slice(n - head, None)))[1:])
    return str.__repr__(v)


def _bytes_text(v: Any, base: type[bytes] | type[bytearray]) -> str:
    n = base.__len__(v)
    if n > MAX_STRING:
        head = (MAX_STRING - 3) // 2
        return (base.__repr__(base.__getitem__(v, slice(0, head)))[:-1] + "..."
                + base.__repr__(base.__getitem__(v, slice(n - head, None)))[
                    (2 if base is bytes else 11):])
    return base.__repr__(v)


def _seq_text(items: Iterable[Any], n: int, open_: str, close: str, level: int,
              single: bool = False) -> str:
    if level >= MAX_LEVEL:
        return open_ + "..." + close
    parts = []
    for i, x in enumerate(items):
        if i >= MAX_ITEMS:
            parts.append("...")
            break
        parts.append(_repr(x, level + 1))
    text = ", ".join(parts)
    if single and n == 1:
        text += ","
    return open_ + text + close


def _repr(v: Any, level: int) -> str:
    t = type(v)
    f = _SCALARS.get(t)
    if f is not None:
        return _int_text(v) if t is int else f(v)
    if t is str:
        return _str_text(v)
    if t is bytes or t is bytearray:
        return _bytes_text(v, t)
    if t is tuple:
        return _seq_text(v, len(v), "(", ")", level, single=True)
    if t is list:
        return _seq_text(v, len(v), "[", "]", level)
    if t is set or t is frozenset:
        if not v:
            return f"{t.__name__}()"
        inner = _seq_text(v, len(v), "{", "}", level)
        return inner if t is set else f"frozenset({inner})"
    if t is dict:
        if level >= MAX_LEVEL:
            return "{...}"
        parts = []
        for i, (k, x) in enumerate(dict.items(v)):
            if i >= MAX_ITEMS:
                parts.append("...")
                break
            parts.append(f"{_repr(k, level + 1)}: {_repr(x, level + 1)}")
        return "{" + ", ".join(parts) + "}"
    if t is range:
        return range.__repr__(v)
    if t is FunctionType:
        return f"<function {v.__qualname__}>"
    if t is BuiltinFunctionType:
        return f"<built-in function {v.__name__}>"
    if t is MethodType:
        return f"<bound method {_type_name(type(v.__self__))}.{v.__func__.__name__}>"
    if t is ModuleType:
        name = v.__dict__.get("__name__")
        return f"<module {name!s}>" if type(name) is str else "<module>"
    if t is CodeType:
        return f"<code {v.co_qualname}>"
    if issubclass(t, type):
        return f"<class '{_type_name(v)}'>"
    if issubclass(t, BaseException):
        # BaseException.__repr__'s form, its arguments shown the same safe way
        args = _exc_args(v)
        if level >= MAX_LEVEL:
            return f"{_type_qualname(t)}(...)"
        return f"{_type_qualname(t)}({', '.join(_repr(a, level + 1) for a in args)})"
    # A subclass of a built-in value type: its base's value, read by the base's own
    # methods (no method of the subclass is called: not __iter__, __len__, keys...).
    # IntEnum members, str enums, NamedTuples.
    for base in _VALUE_BASES:
        if issubclass(t, base):
            if base is int:
                inner = _int_text(v)
            elif base is float:
                inner = float.__repr__(v)
            elif base is str:
                inner = _str_text(v)
            elif base is bytes:
                inner = _bytes_text(v, bytes)
            elif base is tuple:
                inner = _repr(tuple.__getitem__(v, slice(None)), level)
            elif base is list:
                inner = _repr(list.copy(v), level)
            elif base is dict:
                inner = _repr(dict(dict.items(v)), level)
            else:                   # set, frozenset: their copy is of the base type
                # (the `is` tests above do not narrow base for the checker)
                inner = _repr(base.copy(v), level)  # type: ignore[union-attr]
            return f"{_type_qualname(t)}({inner})"
    return f"<{_type_name(t)} object at {id(v):#x}>"


def int_payload(v: Any) -> object:
    """What a recorded int value is kept as: the int itself while it fits a 64-bit
    register (printed in decimal, or in hex with funcgraph-retval-hex), else its text."""
    if type(v) is int and -(1 << 63) <= v < (1 << 64):
        return v
    return value_repr(v)


_slow_repr: dict[int, type] = {}


def value_repr(v: Any) -> str:
    """The text a value is shown as: see the module docstring.  Never raises an
    Exception; a KeyboardInterrupt or SystemExit from the program's own __repr__
    (allowed with allow_program_code) goes to the program."""
    # by id: hashing the type could run its metaclass's __hash__
    if settings.allow_program_code and id(type(v)) not in _slow_repr:
        t0 = _clock()
        try:
            s = repr(v)
            if type(s) is not str:
                s = _repr(v, 0)
        except Exception:
            settings.repr_faults += 1
            return FAULT
        finally:
            if _clock() - t0 > REPR_SLOW_NS:
                # kept alive (their ids must stay theirs): only ever a few types
                _slow_repr[id(type(v))] = type(v)
                settings.repr_faults += 1
    else:
        try:
            s = _repr(v, 0)
        except Exception:
            return FAULT
    return s[:MAX_REPR - 3] + "..." if len(s) > MAX_REPR else s


def static_getattr(obj: Any, name: str) -> Any:
    """``obj.name`` as inspect.getattr_static finds it, without running a Python-level
    descriptor or __getattr__ (Fault for those, and for a missing attribute)."""
    if settings.allow_program_code:
        try:
            return getattr(obj, name)
        except Exception as e:
            raise Fault(name) from e
    t = type(obj)
    found: Any = _MISSING           # a value of a class's namespace: anything
    for klass in _type_mro(t):
        d = _type_dict(klass)
        if name in d:
            found = d[name]
            break
    if found is not _MISSING:
        kind = type(found)
        if kind is _MemberDescriptor or kind is _GetSetDescriptor:
            try:
                return found.__get__(obj, t)       # slots, C-level members
            except AttributeError:
                raise Fault(name) from None
        data = any("__set__" in _type_dict(k) or "__delete__" in _type_dict(k)
                   for k in _type_mro(kind))
        if data:
            raise Fault(name)                       # a property: the program's code
    d = _instance_dict(obj, t)
    if d is not None and name in d:
        return d[name]
    if found is _MISSING:
        if issubclass(t, type):
            # a class attribute of a class: look in its own MRO
            for klass in _type_mro(obj):
                cd = _type_dict(klass)
                if name in cd:
                    v = cd[name]
                    return v.__func__ if type(v) in (staticmethod, classmethod) else v
        raise Fault(name)
    kind = type(found)
    if kind is FunctionType or kind is staticmethod or kind is classmethod:
        return found.__func__ if kind is not FunctionType else found
    if any("__get__" in _type_dict(k) for k in _type_mro(kind)) and kind not in (
            BuiltinFunctionType,):
        raise Fault(name)                           # a non-data descriptor of its own
    return found


def _instance_dict(obj: Any, t: type) -> dict[str, Any] | None:
    for klass in _type_mro(t):
        dd = _type_dict(klass).get("__dict__")
        if dd is not None:
            if type(dd) is _GetSetDescriptor:
                try:
                    d = dd.__get__(obj, t)
                except (AttributeError, TypeError):
                    return None
                return d if type(d) is dict else None
            return None
    return None


def static_getitem(obj: Any, key: Any) -> Any:
    """``obj[key]`` for the built-in containers (exact types) and their plain
    subclasses' base behaviour; Fault otherwise."""
    if settings.allow_program_code:
        try:
            return obj[key]
        except Exception as e:
            raise Fault(repr(key)) from e
    t = type(obj)
    try:
        if t is dict:
            return dict.__getitem__(obj, key)
        for base in (list, tuple, str, bytes, bytearray, range):
            if t is base:
                return base.__getitem__(obj, key)
    except (LookupError, TypeError):
        raise Fault(repr(key)) from None
    raise Fault(repr(key))


def _py_frame_var(frame: FrameType, name: str) -> Any:
    # The only way without the native twin: on 3.11 and 3.12 this makes (or updates)
    # the frame's f_locals snapshot.
    return frame.f_locals[name]


class _FrameProbe(Exception):
    pass


def caller_frame(depth: int = 0) -> FrameType:
    """sys._getframe(depth + 1) without its audit event.

    sys._getframe raises the "sys._getframe" audit event, and a program's audit hooks
    (regrtest installs one) are its own Python code: called from a callback they would
    run inside it, see events the program never caused, and a slow hook slows every
    traced call.  A traceback reaches the frame without an audit event.  Inside a
    sys.monitoring callback the raise is not an event for any tool or sys.settrace.
    """
    try:
        raise _FrameProbe
    except _FrameProbe as e:
        # this function's frame; e goes at the end.  (A caught exception has its
        # traceback: never None here.)
        f = e.__traceback__.tb_frame        # type: ignore[union-attr]
    for _ in range(depth + 1):
        f = f.f_back
    return f


_native = _env.native_module()    # type: ignore[no-untyped-call]  # _env is not annotated
frame_var = _native.frame_var if _native is not None and hasattr(_native, "frame_var") \
    else _py_frame_var


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
