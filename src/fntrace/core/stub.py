"""The code-patching stub behind direct calls and IPMODIFY (seed 000).

The kernel turns a function's call into a call to a direct trampoline, or (IPMODIFY)
changes where the function continues.  A Python function's behaviour lives in its code
object, and every reference to the function — module attribute, ``from x import f``
copies, bound methods, callbacks stored in registries — goes through the one function
object.  So the function's ``__code__`` is swapped for a *stub*: a code object with the
same name, file, line, parameters, defaults and flags (so ``inspect`` sees the same
function), whose body hands the call to the site's dispatcher:

    f.__code__ = stub            f(a, b=2, *rest, k, **kw)
                                   └─> direct_site(a, b, *rest, k=k, **kw)
                                         ├─ IPMODIFY: an ops asked (from its callback) to
                                         │  continue in another function: call that
                                         └─ direct trampoline: tramp(original, *args, **kw)
                                            decides whether, how and what to return

The site's other ops still run first: the stub is the patched site (its PY_START is where
callbacks run, its return is what function_graph times), and ``original`` runs the
function's real code without a second entry event.  With only the direct ops on the
site, no event is enabled at all (DIRECT_EN: the stub calls the trampoline directly).
Unpatching puts the original code object back: same code, no wrapper left anywhere.

    f:  (seed 000's diagram)
    f --- stub (site) --- ops list: function tracer, fgraph, fprobes ...
    |                \\
    |                 `-- direct_site: tramp(original, ...) / IPMODIFY target

This module sits below the update path (core/ops.py calls sync_stub() for every record
it updates); the API that registers direct ops is core/direct.py.
"""
from __future__ import annotations

import threading
import types
import warnings
from collections.abc import Callable
from types import CodeType, FunctionType
# typing is not imported at run time (it is a fifth of fntrace's import cost);
# the annotations are strings (from __future__ import annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import CellType
    from typing import Any, Protocol

    from .regs import FtraceRegs

    class _DirectOps(Protocol):
        # what sync_stub reads of an ops (core/ops.py's Ops, above this module)
        @property
        def direct_call(self) -> Callable[..., object] | None: ...
        @property
        def flags(self) -> int: ...
        def traces(self, rec: DynFtrace) -> bool: ...

from ..errors import UsageError
from .dispatch import forget
from .fetch import caller_frame
from .records import FL, FTRACE_FL, DynFtrace, record_table

__all__ = ["DirectSite", "install_stub", "remove_stub", "prepatch_tree", "sync_stub", "site_of",
           "ftrace_regs_set_instruction_pointer", "check_patchable", "functions_of"]


_CO_GENERATOR = 0x20
_CO_COROUTINE = 0x80
_CO_ITERABLE_COROUTINE = 0x100
_CO_ASYNC_GENERATOR = 0x200
_CO_VARARGS = 0x04
_CO_VARKEYWORDS = 0x08
_PLACEHOLDER = "__fntrace_direct_site__"

class _TLS(threading.local):
    # A class default: a thread that never had a redirect finds None without the
    # AttributeError a plain threading.local miss costs on every call.
    redirect: tuple[Any, Callable[..., Any]] | None = None       # (frame, target)


_tls = _TLS()


def ftrace_regs_set_instruction_pointer(fregs: FtraceRegs, target: Callable[..., Any]) -> None:
    """From an IPMODIFY ops' callback: this call continues in ``target`` (called with
    the same arguments) instead of the function's own code — how a live patch takes over
    a function (klp_ftrace_handler)."""
    if not callable(target):
        raise UsageError(f"{target!r} is not callable")
    # Keyed by the frame of the call being patched: a callback may itself call other
    # patched functions (or this one) before this call's body starts.
    _tls.redirect = (fregs.frame, target)


def functions_of(rec: DynFtrace) -> list[FunctionType]:
    """Every function object running rec's code (all closures made from it so far)."""
    import gc
    code = rec.code
    return [obj for obj in gc.get_referrers(code)
            if isinstance(obj, FunctionType) and obj.__code__ is code]


def function_of(rec: DynFtrace) -> FunctionType | None:
    funcs = functions_of(rec)
    return funcs[0] if funcs else None


def check_patchable(obj: Any) -> FunctionType:
    """The Python function behind ``obj``, or UsageError saying why it cannot be patched."""
    f = obj
    if isinstance(f, (staticmethod, classmethod)):
        f = f.__func__
    if isinstance(f, types.MethodType):
        f = f.__func__
    if not isinstance(f, FunctionType):
        raise UsageError(f"{obj!r} is not a Python function (builtins and C functions "
                         "cannot be patched)")
    if f.__code__.co_flags & _CO_ASYNC_GENERATOR:
        raise UsageError(f"{f.__qualname__} is an async generator: patching one is not "
                         "supported (its asend/athrow could not be passed through)")
    return f


def _param_source(code: CodeType) -> tuple[str, str]:
    """(parameter list, call argument list) reproducing the code's signature."""
    names = code.co_varnames
    npos = code.co_argcount
    nposonly = code.co_posonlyargcount
    nkw = code.co_kwonlyargcount
    i = npos + nkw
    varargs = names[i] if code.co_flags & _CO_VARARGS else None
    if varargs:
        i += 1
    varkw = names[i] if code.co_flags & _CO_VARKEYWORDS else None
    params: list[str] = []
    call: list[str] = []
    for j, n in enumerate(names[:npos]):
        params.append(n)
        call.append(n)
        if nposonly and j == nposonly - 1:
            params.append("/")
    if varargs:
        params.append("*" + varargs)
        call.append("*" + varargs)
    elif nkw:
        params.append("*")
    for n in names[npos:npos + nkw]:
        params.append(n)
        call.append(f"{n}={n}")
    if varkw:
        params.append("**" + varkw)
        call.append("**" + varkw)
    return ", ".join(params), ", ".join(call)


def make_stub(code: CodeType, site: "DirectSite") -> CodeType:
    """A code object that looks like ``code`` from outside and calls ``site``.

    One stub serves every function object of the code.  A closure's stub hands the
    site its own cells — ``(lambda: (free, vars)).__closure__`` is a tuple of the very
    cell objects of the running function — so the original code runs with the closure
    of whichever function was called.
    """
    params, call = _param_source(code)
    flags = code.co_flags
    fv = code.co_freevars
    cells = f"(lambda: ({', '.join(fv)},)).__closure__, " if fv else ""
    body_call = f"{_PLACEHOLDER!r}({cells}{call})"
    name = "__fntrace_stub__"          # the real name (maybe '<lambda>') is set below
    if flags & _CO_COROUTINE:
        inner = f"async def {name}({params}):"
        body = f"return await {body_call}"
    elif flags & _CO_GENERATOR:
        inner = f"def {name}({params}):"
        body = f"return (yield from {body_call})"
    else:
        inner = f"def {name}({params}):"
        body = f"return {body_call}"
    lines = ["def __fntrace_outer__():"]
    if fv:
        # The stub must have the same free variables (each function keeps its closure).
        lines.append("    " + " = ".join(fv) + " = None")
    lines.append("    " + inner)
    lines.append("        " + body)
    lines.append(f"    return {name}")
    src = "\n".join(lines) + "\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)   # "'str' object is not callable"
        outer = compile(src, code.co_filename, "exec")
    fcode = next(c for c in outer.co_consts if isinstance(c, CodeType))
    stub = next(c for c in fcode.co_consts if isinstance(c, CodeType))
    consts = tuple(site if c == _PLACEHOLDER else c for c in stub.co_consts)
    stub = stub.replace(co_consts=consts, co_name=code.co_name, co_qualname=code.co_qualname,
                        co_firstlineno=code.co_firstlineno, co_filename=code.co_filename)
    if stub.co_freevars != fv:
        raise UsageError(f"{code.co_qualname}: cannot build a stub with the same closure")
    return stub


class DirectSite:
    """The callable a stub calls: the direct trampoline or the IPMODIFY target, with the
    original function.  ``tramp`` is read once per call, so a modify switches atomically:
    every call goes to the old or the new trampoline, never neither."""

    __slots__ = ("rec", "orig_code", "globals", "proto", "original", "closed", "tramp",
                 "__weakref__")

    def __init__(self, rec: DynFtrace, code: CodeType, globals_: dict[str, Any],
                 proto: FunctionType | None = None) -> None:
        self.rec = rec
        self.orig_code = code
        self.globals = globals_
        self.proto = proto              # a function object to copy names from, if any
        self.tramp: Callable[..., Any] | None = None
        self.closed = bool(code.co_freevars)
        # The original behaviour: the same code object, run as a separate function
        # object so calling it does not come back here.  The stub is the patched site
        # now, so the original code runs without a second entry event.  A closure's
        # original is made per call, with the cells of the function that was called;
        # otherwise it is made once, on first use (a function patched before its module
        # ran has no function object yet).
        self.original: FunctionType | None = None

    def _find_proto(self) -> FunctionType | None:
        if self.proto is None and self.rec.stub is not None:
            stub = self.rec.stub
            # The module's namespace first (a function or a method of a class there):
            # searching every object the collector knows takes a millisecond, which
            # would count in the first call's duration.
            for v in list(self.globals.values()):
                for f in ([v] if type(v) is FunctionType else
                          list(type.__dict__["__dict__"].__get__(v).values())
                          if issubclass(type(v), type) else ()):
                    if type(f) is FunctionType and f.__code__ is stub:
                        self.proto = f
                        return f
            import gc
            for f in gc.get_referrers(stub):
                if isinstance(f, FunctionType) and f.__code__ is stub:
                    self.proto = f
                    break
        return self.proto

    def _make_original(self, closure: tuple[CellType, ...] | None) -> FunctionType:
        """A function object like the patched one (name, defaults, signature, doc) that
        runs the original code."""
        code = self.orig_code
        p = self._find_proto()
        orig = FunctionType(code, self.globals, code.co_name,
                            p.__defaults__ if p is not None else None, closure)
        if p is not None:
            orig.__kwdefaults__ = p.__kwdefaults__
            orig.__qualname__ = p.__qualname__
            orig.__module__ = p.__module__
            orig.__doc__ = p.__doc__
            orig.__annotations__ = p.__annotations__
        else:
            orig.__qualname__ = code.co_qualname
        return orig

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        target: Callable[..., Any] | None       # (a declaration alone: no code)
        if self.closed:
            target = self._make_original(args[0])
            args = args[1:]
        else:
            target = self.original
            if target is None:
                target = self.original = self._make_original(None)
        r = _tls.redirect
        if r is not None and r[0] is caller_frame(1):
            # This call's IPMODIFY target, set by a callback at the stub's entry.
            _tls.redirect = None
            target = r[1]
        tramp = self.tramp
        if tramp is not None:
            return tramp(target, *args, **kwargs)
        return target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<DirectSite {self.rec.name}>"


def install_stub(rec: DynFtrace) -> DirectSite:
    """Swap the code of every function object of rec (once) for a stub."""
    if rec.stub is not None:
        return _sites[rec.ip]
    code = rec.code
    funcs = functions_of(rec)
    if code is None or not funcs:       # (None: a C function's record, with no funcs either)
        raise UsageError(f"{rec.name}: no function object uses this code (yet)")
    for f in funcs:
        check_patchable(f)
    site = DirectSite(rec, code, funcs[0].__globals__, funcs[0])
    stub = make_stub(code, site)
    for f in funcs:
        f.__code__ = stub
    _install(rec, site, stub)
    # Closures not made yet come from the enclosing function's code: give it the stub.
    _lifted[rec.ip] = _lift(code, stub)
    return site


_CO_OPTIMIZED = 0x0001
# rec.ip -> [(old enclosing code, new), ...]
_lifted: dict[int, list[tuple[CodeType, CodeType]]] = {}


def _parent_code(code: CodeType) -> CodeType | None:
    """The function body whose constants hold ``code`` (None at module or class level,
    whose bodies have already run)."""
    for r in list(record_table.by_code.values()):
        c = r.code
        if c is not None and c is not code and any(k is code for k in c.co_consts):
            return c if c.co_flags & _CO_OPTIMIZED else None
    return None


def _move_code(old: CodeType, new: CodeType) -> None:
    """Every function object and record running ``old`` now runs ``new``."""
    import gc
    for f in gc.get_referrers(old):
        if isinstance(f, FunctionType) and f.__code__ is old:
            f.__code__ = new
    rec = record_table.by_code.get(id(old))
    if rec is not None and rec.code is old:
        rec.code = new
        record_table.by_code[id(new)] = rec
        site = _sites.get(rec.ip)
        if site is not None:
            site.orig_code = new
            site.original = None
        _resite(rec)


def _forget_code(key: int) -> None:
    forget(record_table.by_code, key)


# What moves a patched site to a record's new code object: the back end's modify_call,
# set by core/ops.py (the update path sits above this module and owns the back end).
resite: Callable[[DynFtrace], None] | None = None


def _resite(rec: DynFtrace) -> None:
    """A record's code object changed: move its patched site along."""
    if rec.flags & FL.ENABLED and resite is not None:
        resite(rec)


def _lift(child_old: CodeType, child_new: CodeType) -> list[tuple[CodeType, CodeType]]:
    changes: list[tuple[CodeType, CodeType]] = []
    while True:
        parent = _parent_code(child_old)
        if parent is None:
            return changes
        new_parent = parent.replace(co_consts=tuple(
            child_new if k is child_old else k for k in parent.co_consts))
        _move_code(parent, new_parent)
        changes.append((parent, new_parent))
        child_old, child_new = parent, new_parent


def _unlift(ip: int) -> None:
    for old, new in reversed(_lifted.pop(ip, [])):
        _move_code(new, old)
        _forget_code(id(new))


def _install(rec: DynFtrace, site: DirectSite, stub: CodeType) -> None:
    rec.stub = stub
    record_table.by_code[id(stub)] = rec
    _sites[rec.ip] = site
    _stubs_keep[rec.ip] = stub


def remove_stub(rec: DynFtrace) -> None:
    """Put the original code back in every function object running the stub (exact
    restoration)."""
    import gc
    site = _sites.pop(rec.ip, None)
    if site is None:
        return
    stub = rec.stub
    for f in gc.get_referrers(stub):
        if isinstance(f, FunctionType) and f.__code__ is stub:
            f.__code__ = site.orig_code
    _forget_code(id(stub))
    _stubs_keep.pop(rec.ip, None)
    rec.stub = None
    _unlift(rec.ip)


def prepatch_tree(module_code: CodeType, recs: list[DynFtrace],
                  globals_: dict[str, Any]) -> CodeType:
    """Before a module body runs: put stubs in place of these functions' code in its
    code tree, so every function object made from it — while the module is imported,
    and closures made later — is born patched.  Enclosing code objects are rebuilt
    with the new constants; their records follow (the rebuilt code is what runs)."""
    mapping: dict[int, CodeType] = {}
    for rec in recs:
        if rec.stub is not None:
            continue
        code = rec.code
        if code is None:
            continue        # a C function's record: never in a module's code tree
        if code.co_flags & _CO_ASYNC_GENERATOR:
            raise UsageError(f"{rec.name} is an async generator: patching one is not supported")
        site = DirectSite(rec, code, globals_)
        stub = make_stub(code, site)
        _install(rec, site, stub)
        mapping[id(code)] = stub
    if not mapping:
        return module_code
    return _rewrite(module_code, mapping)


def _rewrite(code: CodeType, mapping: dict[int, CodeType]) -> CodeType:
    consts = []
    changed = False
    for c in code.co_consts:
        if isinstance(c, CodeType):
            new = mapping.get(id(c))
            if new is None:
                new = _rewrite(c, mapping)
                if new is not c:
                    rec = record_table.by_code.get(id(c))
                    if rec is not None and rec.code is c:
                        rec.code = new
                        record_table.by_code[id(new)] = rec
                        _rebuilt.append((c, new))
                        _resite(rec)
            if new is not c:
                changed = True
            consts.append(new)
        else:
            consts.append(c)
    return code.replace(co_consts=tuple(consts)) if changed else code


_rebuilt: list[tuple[CodeType, CodeType]] = []   # (old, new) enclosing code objects, kept alive


_sites: dict[int, DirectSite] = {}
_stubs_keep: dict[int, CodeType] = {}      # keep ids of stubs unique while in use


def site_of(rec: DynFtrace) -> DirectSite | None:
    return _sites.get(rec.ip)


# ---------------------------------------------------------------------------------
# The update path's stub step
# ---------------------------------------------------------------------------------

_WANT_STUB = int(FTRACE_FL.DIRECT | FTRACE_FL.IPMODIFY)
_OPS_FL_DIRECT = 1 << 17     # FTRACE_OPS_FL.DIRECT (core/ops.py, above this module)


def sync_stub(rec: DynFtrace, ops_list: Iterable[_DirectOps]) -> bool:
    """Called by ftrace_replace_code for every record it updates: install the stub while
    a DIRECT or IPMODIFY ops owns the function, remove it after; point the site at the
    current direct trampoline.  Returns whether the patched code changed."""
    want = bool(rec.flags & _WANT_STUB) and rec.count > 0
    changed = False
    if want and rec.stub is None:
        install_stub(rec)
        changed = True
    elif not want and rec.stub is not None:
        remove_stub(rec)
        changed = True
    site = _sites.get(rec.ip)
    tramp = None
    if site is not None or rec.direct is not None:
        for op in ops_list:
            if op.direct_call is not None and op.flags & _OPS_FL_DIRECT and op.traces(rec):
                tramp = op.direct_call
                break
    if site is not None:
        site.tramp = tramp
    rec.direct = tramp
    return changed


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
