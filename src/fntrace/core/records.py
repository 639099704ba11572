"""dyn_ftrace records: one per Python function code object (kernel/trace/ftrace.c).

In the kernel every traceable function has a patchable call site, collected at build time
into ``__mcount_loc`` and turned into one ``struct dyn_ftrace`` per site at boot; module
sites are added when the module loads.  Here the "call site" is a function's code object:
records are made for every function, method, lambda and nested function of every imported
module, and for each module imported later, before its body runs (the module-load
notifier).

Every code object fntrace meets also needs a symbol id for the ring buffer (the parent of
a traced call may be a ``<module>`` body, which is not traceable), so the table hands out
``DynFtrace`` objects for those too; only *traceable* ones are listed in
``available_filter_functions`` (``index`` > 0).
"""
from __future__ import annotations

import enum
import sys
import threading
from collections.abc import Callable, Iterator
from types import BuiltinFunctionType, CodeType, FunctionType, ModuleType

from .._env import fork_safe, forked_check

__all__ = [
    "FTRACE_FL", "FTRACE_REF_MAX", "DynFtrace", "RecordTable", "record_table", "ROOT",
    "C_FUNCTION_TYPES", "c_function_name",
]


class FTRACE_FL(enum.IntFlag):
    """The record's flags word, kernel bit for bit (include/linux/ftrace.h).

    The low FTRACE_REF_MAX_SHIFT bits are the number of ops tracing the function; each
    request bit X has an X_EN twin saying whether the site currently does it, so the update
    path can tell what must change (ftrace_check_record).
    """
    ENABLED = 1 << 31       # the function is being traced (site patched)
    REGS = 1 << 30          # an ops wants the full frame (SAVE_REGS)
    REGS_EN = 1 << 29       # the site passes the full frame
    TRAMP = 1 << 28         # the site wants its single ops' own trampoline
    TRAMP_EN = 1 << 27      # the site calls that trampoline
    IPMODIFY = 1 << 26      # an IPMODIFY ops owns the function (live patching)
    DISABLED = 1 << 25      # not ready to be touched (not traceable)
    DIRECT = 1 << 24        # a direct trampoline is attached
    DIRECT_EN = 1 << 23     # the site calls the direct trampoline
    CALL_OPS = 1 << 22      # the site can use its own ops slot (exactly one ops)
    CALL_OPS_EN = 1 << 21   # the site's ops slot holds that ops
    TOUCHED = 1 << 20       # a callback was attached since start-up
    MODIFIED = 1 << 19      # IPMODIFY or DIRECT was ever attached
    # Python has no return address to hijack: a graph user (fgraph) needs the site to
    # report returns, yields and resumes as well.  Kept above the kernel's 32 bits.
    RET = 1 << 32           # an ops covering the site wants return events
    RET_EN = 1 << 33        # the site reports return events


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal


class _Ints:
    """An IntFlag's members as plain ints.  The control path uses these: enum's
    operators are Python code, and the tracer must not run (so trace) library code of
    its own while it updates sites."""

    def __init__(self, flag: type[enum.IntFlag]) -> None:
        for m in flag:
            # a member met iterating its class is a named one (only composites lack names)
            setattr(self, m.name, int(m))   # type: ignore[arg-type]

    if TYPE_CHECKING:               # the members, to a checker
        def __getattr__(self, name: str) -> int: ...


FL = _Ints(FTRACE_FL)

FTRACE_REF_MAX_SHIFT = 19
FTRACE_REF_MAX = (1 << FTRACE_REF_MAX_SHIFT) - 1
# Kept when the count drops to zero (ftrace.c FTRACE_NOCLEAR_FLAGS).
FTRACE_NOCLEAR_FLAGS = FL.DISABLED | FL.TOUCHED | FL.MODIFIED

# Code flags (Include/cpython/code.h).  A function body is "optimized" (fast locals);
# module and class bodies are not, and are not traceable functions.
_CO_OPTIMIZED = 0x0001
# PEP 709 (3.12) inlined list/dict/set comprehensions into their function; on 3.11 they
# are still separate code objects.  They are not listed, so that the same filters and
# the same traces come out on every version.
_INLINED_COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>"})


_CO_GENLIKE = 0x20 | 0x80 | 0x200    # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR


_RESUME: list[int] = []     # RESUME's opcode, looked up at the first site that needs it


def _first_resume(code: CodeType) -> int:
    # Instructions are 2-byte units (3.11+); RESUME comes within the first few.
    if not _RESUME:
        # opcode (dis would load far more) is 2 M instructions to import on 3.12: not
        # a cost of every start-up
        import opcode
        _RESUME.append(opcode.opmap["RESUME"])
    resume = _RESUME[0]
    b = code.co_code
    for i in range(0, len(b), 2):
        if b[i] == resume:
            return i
    return -1


class DynFtrace:
    """One patchable site: a code object, its name, and the kernel's flags word.

    ip        symbol id used in ring-buffer records (unique, never reused)
    index     1-based line in available_filter_functions; 0 when not traceable
    name      ``module.qualname``
    alias     ``__main__`` for the functions of the module ``fntrace -m MOD`` runs
              (named after MOD), else empty
    ops       CALL_OPS slot: the site's unique ops, the list ops, or the nop ops
    func      what the site calls: ``func(rec, parent, ops, fregs)``
    """
    __slots__ = ("ip", "index", "code", "name", "module", "qualname", "filename", "line",
                 "flags", "ops", "func", "direct", "gen_start", "stub", "alias", "__weakref__")
    ip: int
    index: int
    code: CodeType | None
    name: str
    module: str
    qualname: str
    filename: str
    line: int
    flags: int
    ops: object             # core/ops.py's Ops (a layer above this one), or None
    func: Callable[..., object] | None
    direct: Callable[..., object] | None
    gen_start: int
    stub: CodeType | None
    alias: str

    def __init__(self, ip: int, code: CodeType | None, module: str, qualname: str,
                 filename: str = "", line: int = 0, index: int = 0, alias: str = ""):
        self.ip = ip
        self.index = index
        self.code = code
        self.module = module
        self.qualname = qualname
        self.name = f"{module}.{qualname}" if module else qualname
        # The module a -m target runs as: its functions are named after the module
        # ("http.server.test") and answer to "__main__" too (core/hash.py).
        self.alias = alias
        self.filename = filename
        self.line = line
        # Not ready to be touched until the module-load notifier has run
        # (ftrace_module_enable); symbols that are not traceable stay so.
        self.flags = FL.DISABLED
        self.ops = None
        self.func = None
        self.direct = None
        # While a direct trampoline or an IPMODIFY ops owns the function, its calls run
        # this stub code (core/direct.py) and the site is patched there.
        self.stub = None
        # Generators and coroutines: the offset of their first RESUME.  A setprofile
        # 'call' elsewhere is a resume, not a call (3.11 reports both as 'call').
        self.gen_start = _first_resume(code) if code is not None and code.co_flags & _CO_GENLIKE else -1

    @property
    def site_code(self) -> CodeType | None:
        """The code object the back end patches: the function's own, or its stub."""
        return self.stub if self.stub is not None else self.code

    @property
    def count(self) -> int:
        """ftrace_rec_count(): how many ops trace this function."""
        return self.flags & FTRACE_REF_MAX

    def __repr__(self) -> str:
        return f"<DynFtrace {self.name} ip={self.ip} count={self.count}>"


# The caller of a thread's first frame, or of anything fntrace cannot name.
ROOT = DynFtrace(0, None, "", "")


def _is_traceable(code: CodeType) -> bool:
    return bool(code.co_flags & _CO_OPTIMIZED) and code.co_name not in _INLINED_COMPREHENSIONS


def _own_module(name: str) -> bool:
    # The tracer never lists (so never traces) its own code: the kernel's `notrace`.
    return name == "fntrace" or name.startswith("fntrace.")


# Values a namespace walk never needs to look into (exact types: a subclass may be a
# class with methods).  Checked first because they are most of every namespace.
_LEAF_TYPES = frozenset({
    int, float, complex, bool, str, bytes, bytearray, type(None), tuple, list, dict, set,
    frozenset, ModuleType, BuiltinFunctionType, type(str.join), type(str.__add__),
    type(int.real), type(FunctionType.__code__), type(Ellipsis), type(NotImplemented),
    CodeType, range, slice, memoryview,
})


# -- C functions (record/live --c-calls) -------------------------------------------------
# A C function has no code object to patch: its record is made the first time a traced
# Python function calls it, named where it is defined, as a Python function is
# (builtins.len, time.sleep, _socket.socket.recv, xml.etree.ElementTree.XMLParser.feed),
# and handed to the module-load listeners like a new module's functions, so that the
# filters, pending patterns and the ops' hashes treat it as any function.
#
# What counts as a C function is what cProfile counts: builtin functions and methods
# (PyCFunction, PyCMethod) and method descriptors.  Types (a constructor may run
# Python code: not a leaf) and slot wrappers are not.
_BUILTIN = BuiltinFunctionType                  # also PyCMethod's builtin_method
_METHOD_DESCR = type(str.join)
_CLASSMETHOD_DESCR = type(dict.__dict__["fromkeys"])
C_FUNCTION_TYPES = (_BUILTIN, _METHOD_DESCR)
C_FILENAME = "<built-in>"
# Attributes read through type's own descriptors and the C types' getters only: the
# program's metaclass or class cannot run code here (a callback runs this).
_type_module = type.__dict__["__module__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_type_mro: Callable[[type], tuple[type, ...]] = type.__dict__["__mro__"].__get__
_type_dict = type.__dict__["__dict__"].__get__
_b_self = _BUILTIN.__dict__["__self__"].__get__
_b_name = _BUILTIN.__dict__["__name__"].__get__
_b_module = _BUILTIN.__dict__["__module__"].__get__
_d_objclass = _METHOD_DESCR.__dict__["__objclass__"].__get__
_d_name = _METHOD_DESCR.__dict__["__name__"].__get__


def _defining_class(owner: type, name: str) -> type:
    """The class of ``owner``'s MRO whose namespace holds the C method ``name`` (a
    bound builtin method knows its object, not the class that defines it)."""
    for k in _type_mro(owner):
        v = _type_dict(k).get(name)
        if v is not None:
            t = type(v)
            if t is _METHOD_DESCR or t is _CLASSMETHOD_DESCR or t is staticmethod or t is _BUILTIN:
                return k
            break
    return owner


def c_function_name(func: object) -> tuple[str, str] | None:
    """(module, qualname) of a C function, or None for anything else."""
    t = type(func)
    if t is _METHOD_DESCR:
        owner = _d_objclass(func)
        name = _d_name(func)
    elif isinstance(func, _BUILTIN):
        name = _b_name(func)
        obj = _b_self(func)
        if obj is None or isinstance(obj, ModuleType):
            mod = _b_module(func)
            if type(mod) is not str:
                mod = obj.__dict__.get("__name__") if obj is not None else None
            return (mod if type(mod) is str else "builtins"), name
        owner = _defining_class(obj if isinstance(obj, type) else type(obj), name)
    else:
        return None
    mod = _type_module(owner)
    return (mod if type(mod) is str else "builtins"), f"{_type_qualname(owner)}.{name}"


class RecordTable:
    """All records, the ip -> record map and the module-load notifier.

    Control path only: the hot path reads ``by_code`` (keyed by ``id(code)``; the record
    holds the code object, so the id stays valid).
    """

    def __init__(self) -> None:
        self.records: list[DynFtrace] = []          # traceable, in listing order
        self.by_code: dict[int, DynFtrace] = {}     # id(code) -> record (traceable or not)
        self.by_ip: dict[int, DynFtrace] = {0: ROOT}
        self.scanned: set[str] = set()               # module names already walked
        self.module_ids: dict[str, int] = {}         # id() of the module object scanned
        self.listeners: list[Callable[[str, list[DynFtrace]], None]] = []
        self._next_ip = 1
        # (_env is outside the strict modules: its functions are not annotated)
        self.lock = fork_safe(threading.RLock())  # type: ignore[no-untyped-call, unused-ignore]
        self._hook_installed = False
        # True while the CLI's target has not started: "__main__" is then fntrace's
        # launcher, not the program, and counts as not loaded for ':mod:' filters.
        self.main_pending = False
        # rewriter(module_name, module_dict, code) -> code: may replace a module's code
        # before its body runs (live patches of functions not loaded yet).
        self.rewriters: list[Callable[[str, dict[str, Any], CodeType], CodeType]] = []
        # The name of the module that runs as "__main__" (``fntrace -m MOD``: MOD's
        # name), or None for a script: records of "__main__" are named after it.
        self.main_alias: str | None = None
        # The discovery trap's clients (see discover): key -> module-name predicate,
        # or None for every module.
        self.scopes: dict[object, Callable[[str], bool] | None] = {}
        self._scope_cache: dict[str, bool] = {}
        # C functions met (--c-calls): "module.qualname" -> record
        self.by_c_name: dict[str, DynFtrace] = {}

    def _module_name(self, module: str) -> tuple[str, str]:
        """(the name records of ``module`` get, their alias)."""
        if module == "__main__" and self.main_alias:
            return self.main_alias, "__main__"
        if module == "__mp_main__":
            # multiprocessing's name for the parent's main module in a spawned child:
            # its functions are the program's __main__ functions, named as there (after
            # the module ``-m`` ran, which answers to __main__ too)
            if self.main_alias:
                return self.main_alias, "__main__"
            return "__main__", "__mp_main__"
        return module, ""

    # -- symbols -----------------------------------------------------------------
    def _new(self, code: CodeType, module: str, qualname: str | None = None) -> DynFtrace:
        traceable = _is_traceable(code) and not _own_module(module)
        module, alias = self._module_name(module)
        rec = DynFtrace(self._next_ip, code, module, qualname or code.co_qualname,
                        code.co_filename, code.co_firstlineno,
                        index=len(self.records) + 1 if traceable else 0, alias=alias)
        self._next_ip += 1
        self.by_code[id(code)] = rec
        self.by_ip[rec.ip] = rec
        if traceable:
            self.records.append(rec)
        return rec

    def _promote(self, rec: DynFtrace, module: str, qualname: str | None) -> bool:
        """A function first met as the caller of a traced one (a symbol made by sym())
        is listed once its module is: it becomes traceable, under the same ip."""
        code = rec.code
        if code is None or not _is_traceable(code) or _own_module(module):
            return False
        name, alias = self._module_name(module)
        rec.module, rec.alias = name, alias
        rec.qualname = qualname or code.co_qualname
        rec.name = f"{name}.{rec.qualname}" if name else rec.qualname
        rec.index = len(self.records) + 1
        rec.flags = FL.DISABLED
        self.records.append(rec)
        return True

    def sym(self, code: CodeType, module: str | None = None) -> DynFtrace:
        """The record of any code object, made on first sight (slow path of the parent
        lookup).  Code met this way was never listed, so it stays untraceable: the kernel
        does not add sites at run time either."""
        rec = self.by_code.get(id(code))
        if rec is not None:
            return rec
        with self.lock:
            rec = self.by_code.get(id(code))
            if rec is None:
                name, alias = self._module_name(module or "")
                rec = DynFtrace(self._next_ip, code, name, code.co_qualname,
                                code.co_filename, code.co_firstlineno, alias=alias)
                self._next_ip += 1
                self.by_code[id(code)] = rec
                self.by_ip[rec.ip] = rec
            return rec

    def c_sym(self, func: object) -> DynFtrace | None:
        """The record of a C function (see C_FUNCTION_TYPES), made and listed on first
        sight, or None for what is not one.  Not fntrace's own: its C functions are
        named _native/_launch, whose callers are never traced anyway."""
        named = c_function_name(func)
        if named is None:
            return None
        module, qualname = named
        full = f"{module}.{qualname}"
        rec = self.by_c_name.get(full)
        if rec is not None:
            return rec
        with self.lock:
            rec = self.by_c_name.get(full)
            if rec is not None:
                return rec
            traceable = not _own_module(module)
            rec = DynFtrace(self._next_ip, None, module, qualname, C_FILENAME, 0,
                            index=len(self.records) + 1 if traceable else 0)
            self._next_ip += 1
            self.by_ip[rec.ip] = rec
            self.by_c_name[full] = rec
            if traceable:
                self.records.append(rec)
        if traceable:
            self._notify(module, [rec])
        return rec

    def c_sym_named(self, name: str) -> DynFtrace | None:
        """The record of the C function a loaded module's namespace names ``name``
        (``builtins.len``, ``builtins.dict.pop``), made now if it was not met yet, so
        that a filter written before its first call can name it; None if the name is
        not one (looked up in the namespaces' dicts only: no program code runs)."""
        rec = self.by_c_name.get(name)
        if rec is not None:
            return rec
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            mod = sys.modules.get(".".join(parts[:i]))
            if mod is None:
                continue
            ns = getattr(mod, "__dict__", None)
            obj = None
            for attr in parts[i:]:
                if type(ns) is not dict and not isinstance(obj, type):
                    return None
                obj = (ns if type(ns) is dict else _type_dict(obj)).get(attr)
                if obj is None:
                    return None
                ns = None
            if not isinstance(obj, C_FUNCTION_TYPES):
                return None
            named = c_function_name(obj)
            if named is None or f"{named[0]}.{named[1]}" != name:
                return None         # defined elsewhere (os.getpid is posix.getpid)
            return self.c_sym(obj)
        return None

    def lookup(self, obj: object) -> DynFtrace | None:
        """The traceable record for a function, method, code object or record."""
        if isinstance(obj, DynFtrace):
            return obj if obj.index else None
        code = getattr(obj, "__code__", None)
        if code is None:
            func = getattr(obj, "__func__", None)
            code = getattr(func, "__code__", None)
        if code is None and isinstance(obj, CodeType):
            code = obj
        if code is None:
            return None
        rec = self.by_code.get(id(code))
        if rec is None:
            module = getattr(obj, "__module__", None)
            glb = getattr(obj, "__globals__", None)
            if isinstance(glb, dict):
                module = glb.get("__name__", module)
            if module and module not in self.scanned and module in sys.modules:
                self.scan_module(sys.modules[module])
                rec = self.by_code.get(id(code))
            if rec is None and module:
                with self.lock:
                    new = self._add_code_tree(code, module)
                self._notify(module, new)
                rec = self.by_code.get(id(code))
        return rec if rec is not None and rec.index else None

    # -- discovery -----------------------------------------------------------------
    def _add_code_tree(self, code: CodeType, module: str, out: list[DynFtrace] | None = None,
                       qualname: str | None = None, depth: int = -1) -> list[DynFtrace]:
        """Register a code object and every code object nested in it (co_consts);
        ``depth=0``: the code object alone."""
        if out is None:
            out = []
        stack: list[tuple[CodeType, str | None]] = [(code, qualname)]
        while stack:
            c, qn = stack.pop()
            if c.co_name in _INLINED_COMPREHENSIONS:
                pass            # not a frame of its own on 3.12+: see _parent_slow
            else:
                rec = self.by_code.get(id(c))
                if rec is None:
                    rec = self._new(c, module, qn)
                    if rec.index:
                        out.append(rec)
                elif not rec.index and rec.code is c and self._promote(rec, module, qn):
                    out.append(rec)
            if depth == 0:
                break
            for k in reversed(c.co_consts):
                if isinstance(k, CodeType):
                    stack.append((k, None))
        return out

    def _walk_namespace(self, ns: dict[str, Any], module: str, out: list[DynFtrace],
                        seen: set[int]) -> None:
        walk, leaf = self._walk_object, _LEAF_TYPES
        for value in list(ns.values()):
            if type(value) not in leaf:     # most of a namespace: nothing defined inside
                walk(value, module, out, seen)

    # value is Any: the exact-type tests below go through ``t = type(value)``, which
    # the checker does not narrow ``value`` by
    def _walk_object(self, value: Any, module: str, out: list[DynFtrace], seen: set[int]) -> None:
        # Only C-level attribute reads on exact types: a namespace may hold anything
        # (a mock whose __class__ is a property, a class whose metaclass computes
        # attributes), and discovery runs inside callbacks, where no program code may.
        if id(value) in seen:
            return
        seen.add(id(value))
        t = type(value)
        if t is staticmethod or t is classmethod:
            value = value.__func__
            t = type(value)
        elif t is property:
            for f in (value.fget, value.fset, value.fdel):
                if f is not None:
                    self._walk_object(f, module, out, seen)
            return
        if t is FunctionType:
            glb = value.__globals__
            owner = glb.get("__name__", module) if type(glb) is dict else module
            code = value.__code__
            if owner != module and not (code.co_filename.startswith("<")
                                        and owner not in sys.modules):
                # Imported from elsewhere: that module lists it.  Code generated into
                # a namespace of its own (namedtuple's __new__) belongs to the class
                # that holds it.
                return
            qn = None
            # Generated code (dataclasses, namedtuple) is compiled from a string; its
            # code's qualname names the generator, the function's names the method.
            if code.co_filename.startswith("<"):
                qn = value.__qualname__
            known = self.by_code.get(id(code))
            if known is None or not known.index:
                self._add_code_tree(code, module, out, qn)
            wrapped = value.__dict__.get("__wrapped__")
            if wrapped is not None:
                self._walk_object(wrapped, module, out, seen)
        elif issubclass(t, type) and type(t) is type or t is type:
            ns = type.__dict__["__dict__"].__get__(value)
            if ns.get("__module__") != module:
                return
            self._walk_namespace(dict(ns), module, out, seen)

    def scan_module(self, mod: ModuleType, code: CodeType | None = None) -> list[DynFtrace]:
        """Make records for a module's functions (and, given its code, everything defined
        lexically in it).  Returns the new traceable records; listeners are notified."""
        name = getattr(mod, "__name__", None)
        if not isinstance(name, str) or _own_module(name):
            return []
        with self.lock:
            new: list[DynFtrace] = []
            if code is not None:
                self._add_code_tree(code, name, new)
                # The <module> body itself is a symbol, not a traceable record.
            ns = getattr(mod, "__dict__", None)
            if isinstance(ns, dict):
                try:
                    self._walk_namespace(ns, name, new, set())
                except Exception:           # an exotic module must not break discovery
                    pass
            self.scanned.add(name)
            self.module_ids[name] = id(mod)
        self._notify(name, new)
        return new

    # -- the module-load notifier --------------------------------------------------
    # The kernel adds a module's call sites when the module loads, before its init
    # runs.  A Python module may be loaded by any importer (pytest's assertion
    # rewriter, zipimport, a plugin system), by exec of compiled code, by runpy — the
    # one thing all of them do is start the module's ``<module>`` code.  So the back
    # ends' discovery trap (a global PY_START, or setprofile's call event) hands every
    # code object that starts for the first time to ``discover``: a module body gets
    # records for everything it defines lexically before its first line runs; any
    # other unknown code (a function made by exec, a dataclass's generated methods) has
    # its module's namespace walked again.  No frame of fntrace's is left on the
    # program's stack (an import hook would be one: warnings' stacklevel, tracebacks).
    #
    # The trap is on only while something needs new functions (an ops that traces
    # every function, a filter waiting for a module, an unbound probe): ``scopes``
    # says which module names each of them can use, and modules outside every scope
    # are not looked at (their records are made on demand, by refresh()).

    def set_scope(self, key: object, scope: Callable[[str], bool] | None | Literal[False]) -> None:
        """Who needs functions of modules loaded from now on: ``scope`` is a predicate
        on module names, None for every module, False to drop the entry."""
        with self.lock:
            if scope is False:
                self.scopes.pop(key, None)
            else:
                self.scopes[key] = scope
            self._scope_cache.clear()

    def in_scope(self, name: str) -> bool:
        hit = self._scope_cache.get(name)
        if hit is None:
            hit = False
            # asked by the name the module's records get (__mp_main__: __main__)
            named = self._module_name(name)[0]
            for pred in list(self.scopes.values()):
                try:
                    if pred is None or pred(named) or pred(name):
                        hit = True
                        break
                except Exception:
                    hit = True
                    break
            self._scope_cache[name] = hit
        return hit

    def discover(self, code: CodeType, glb: dict[str, Any]) -> None:
        """A code object fntrace has no record of starts (the discovery trap)."""
        known = self.by_code.get(id(code))
        if known is not None and (known.index or not _is_traceable(code)):
            return
        name = glb.get("__name__") if type(glb) is dict else None
        if type(name) is not str or _own_module(name) or not self.in_scope(name):
            return
        forked_check()
        if code.co_name == "<module>":
            if code.co_filename.startswith("<"):
                # exec of a string (dataclasses' _create_fn, namedtuple): what it defines
                # is named by whoever made it, once it is in a namespace — at its first
                # start, below.
                return
            with self.lock:
                new = self._add_code_tree(code, name)
            self._notify(name, new)
            return
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__dict__", None) is glb:
            self.scan_module(mod)
        else:
            self.scan_namespace(name, glb)
        known = self.by_code.get(id(code))
        if known is None or not known.index:
            # Made where no namespace shows it (a closure made by exec'd code, say).
            # Code compiled from a string is often a generator of other functions
            # (dataclasses' __create_fn__): what it makes is named when found in a
            # namespace, under the name the generator gives it, so only this code
            # object is listed now.
            with self.lock:
                if code.co_filename.startswith("<"):
                    new = self._add_code_tree(code, name, depth=0)
                else:
                    new = self._add_code_tree(code, name)
            self._notify(name, new)

    def scan_namespace(self, name: str, ns: dict[str, Any]) -> list[DynFtrace]:
        """Records for the functions a namespace that is not a module's holds (code run
        with exec, runpy's temporary modules)."""
        if _own_module(name):
            return []
        with self.lock:
            new: list[DynFtrace] = []
            try:
                self._walk_namespace(ns, name, new, set())
            except Exception:
                pass
        self._notify(name, new)
        return new

    def _notify(self, name: str, new: list[DynFtrace]) -> None:
        for cb in list(self.listeners):
            cb(name, new)
        for rec in new:
            rec.flags &= ~FL.DISABLED

    def refresh(self, scope: Callable[[str], bool] | None = None) -> list[DynFtrace]:
        """Walk every module in sys.modules not walked yet (or replaced since); with
        ``scope``, only the modules whose name it accepts (the rest wait for a later
        refresh: nothing is lost, a module is walked whenever first needed)."""
        new: list[DynFtrace] = []
        for name, mod in list(sys.modules.items()):
            if mod is None:
                continue
            if name in self.scanned and self.module_ids.get(name) == id(mod):
                continue
            # __main__ is asked for by the name its records get (python -m MOD: MOD)
            if scope is not None and not scope(self._module_name(name)[0]):
                continue
            new.extend(self.scan_module(mod))
        return new

    def rewrite(self, name: str, ns: dict[str, Any], code: CodeType) -> CodeType:
        for rw in list(self.rewriters):
            code = rw(name, ns, code)
        return code

    def loaded_modules(self) -> list[str]:
        return [n for n, m in list(sys.modules.items())
                if m is not None and not (self.main_pending and n == "__main__")]

    def __iter__(self) -> Iterator[DynFtrace]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    # -- the module-load notifier --------------------------------------------------
    def install_import_hook(self) -> None:
        """Have every module loaded from Python source report its code before it runs.

        ``_LoaderBasics.exec_module`` is what SourceFileLoader and SourcelessFileLoader
        run: get_code, then exec in the module's namespace.  Doing the same here, with
        the code registered in between, gives records for every function of the module
        (lambdas and nested functions included) before any of them can be called — the
        kernel's module-load notifier.  Patching the shared base class, rather than
        wrapping each spec's loader, leaves ``module.__loader__`` untouched.
        """
        if self._hook_installed:
            return
        import importlib._bootstrap_external as bx
        base = bx._LoaderBasics             # type: ignore[attr-defined]  # private: not in the stubs
        orig = base.exec_module
        table = self

        def exec_module(self: Any, module: ModuleType) -> None:     # self: the loader
            get_code = getattr(self, "get_code", None)
            if get_code is None:
                orig(self, module)
                table.scan_module(module)
                return
            code = get_code(module.__name__)
            if code is None:
                raise ImportError(f"cannot load module {module.__name__!r} when "
                                  "get_code() returns None")
            table.scan_module(module, code)
            code = table.rewrite(module.__name__, module.__dict__, code)
            exec(code, module.__dict__)
            # Functions made while the body ran (dataclasses, exec'd helpers).
            table.scan_module(module)

        exec_module.__qualname__ = "_LoaderBasics.exec_module"
        base.exec_module = exec_module
        self._hook_installed = True


def scan_code_as(code: CodeType, module: str) -> list[DynFtrace]:
    """Register code compiled by fntrace itself (the script run as __main__, -c code)."""
    table = record_table
    with table.lock:
        new = table._add_code_tree(code, module)
    table._notify(module, new)
    return new


record_table = RecordTable()


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
