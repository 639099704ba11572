"""The parser's BTF for Python functions: parameter and return types read from the
annotations in the source, with ``ast`` — never evaluated, so defining a dynamic event
runs none of the traced program's code.

    func_proto(code)            FuncProto of a function's code object (its source file)
    SourceModule(source).proto(qualname, firstlineno, params)
                                the same from source text, e.g. of a module not
                                imported yet

What an annotation can name, and what the parser then knows (probe_parse.BtfType):

    None (or "None") as the return type      void: $retval is NO_RETVAL
                                             (not for generators and coroutines,
                                             whose resumes return values)
    int float complex bool str bytes bytearray list tuple dict set frozenset
    (or list[...] etc.), None as a type      a value: its fields are what the
                                             builtin type has (hasattr on the type)
    a class defined at the top of the same source, by a name bound once
                                             a struct: its fields are the names its
                                             body assigns, annotates or defines
                                             (methods, properties, __slots__), the
                                             self.X its methods assign, and those
                                             of its bases
    anything else (imported names, unions, generics, strings that are not a
    simple name, names a function or class scope rebinds)
                                             not known: BTF_ANY, every check passes

A class whose attributes the source cannot pin down — a base that is not a class
of the same source or a builtin, a metaclass, a decorator other than dataclass or
total_ordering, setattr/vars/__dict__/__setattr__ in its body — still has the fields
found, but a field not found is BTF_ANY rather than missing; one with __getattr__ or
__getattribute__ has every field.  So is a name the module assigns on some other
object (``r.tag = 1``), which may be one of the class's.  A *args parameter is a tuple and a **kwargs one a
dict, whatever their annotations say.  Dunder names are always there (object has
them).
"""
from __future__ import annotations

import ast
import builtins
import linecache
import threading
import warnings
from collections.abc import Callable, Sequence
from types import CodeType

from ..core.regs import _param_names
from .probe_parse import BTF_ANY, BTF_VOID, BtfType, FuncProto

__all__ = ["func_proto", "SourceModule"]

# CO_GENERATOR | CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR: each resume
# of such a code object is a call of its own whose "return value" is what it yielded.
_CO_RESUMABLE = 0x20 | 0x80 | 0x100 | 0x200

# Builtin classes an annotation may name: their instances have exactly the
# attributes the class has (no instance __dict__), so hasattr on the class answers.
_BUILTIN_VALUES = ("int", "float", "complex", "bool", "str", "bytes", "bytearray",
                   "list", "tuple", "dict", "set", "frozenset")
# Class decorators that add no attribute a fetcharg could name.
_PLAIN_DECORATORS = frozenset({"dataclass", "dataclasses.dataclass", "total_ordering",
                               "functools.total_ordering", "final", "typing.final"})
_PROPERTIES = frozenset({"property", "cached_property", "functools.cached_property"})
_MAX_STRING_DEPTH = 3          # a string annotation holding a string annotation ...
_MAX_STRING_LEN = 200


def _attrs_of(cls: type) -> Callable[[str], BtfType | None]:
    return lambda name: BTF_ANY if hasattr(cls, name) else None


def _value_type(cls: type) -> BtfType:
    return BtfType(cls.__name__, "value", _attrs_of(cls), string=issubclass(cls, str))


_BUILTIN_TYPES: dict[str, BtfType] = {
    name: _value_type(getattr(builtins, name)) for name in _BUILTIN_VALUES}
_NONE_TYPE = BtfType("None", "value", _attrs_of(type(None)))


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name/Attribute chain, "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name[:2] == name[-2:] == "__"


def _stored_names(node: ast.AST) -> set[str]:
    """Every name a node (and what it holds) binds: an over-estimate is safe, since a
    name bound anywhere near an annotation makes its type unknown."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node:
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for a in n.names:
                out.add((a.asname or a.name).split(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            out.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            out.add(n.rest)
    return out


def _yields(fn: ast.AST) -> bool:
    """Whether a function body yields (its nested functions and classes aside)."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return False


class SourceModule:
    """One module's source, parsed once: its functions by qualname, the names its top
    level binds, and the classes those names are."""

    def __init__(self, source: str, module: str = "") -> None:
        self.module = module
        with warnings.catch_warnings():        # SyntaxWarnings are the import's to give
            warnings.simplefilter("ignore")
            self.tree = ast.parse(source)
        self.funcs: dict[str, list[tuple[ast.FunctionDef | ast.AsyncFunctionDef,
                                         tuple[ast.AST, ...]]]] = {}
        self._index(self.tree.body, "", ())
        self.bindings: dict[str, list[ast.AST]] = {}
        self.star = False
        self._top_bindings()
        self.declared_global = {name for n in ast.walk(self.tree) if isinstance(n, ast.Global)
                                for name in n.names}
        self.stored_elsewhere = self._stores_not_on_self()
        self._scope_names: dict[int, set[str]] = {}
        self._classes: dict[int, BtfType] = {}

    # -- the index --------------------------------------------------------------------
    def _index(self, body: Sequence[ast.AST], prefix: str, scopes: tuple[ast.AST, ...]) -> None:
        stack = list(reversed(body))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qn = prefix + node.name
                self.funcs.setdefault(qn, []).append((node, scopes))
                self._index(node.body, qn + ".<locals>.", scopes + (node,))
            elif isinstance(node, ast.ClassDef):
                qn = prefix + node.name
                self._index(node.body, qn + ".", scopes + (node,))
            elif isinstance(node, ast.stmt):
                # a def inside if/try/with/for/while: same qualname prefix
                stack.extend(reversed([c for c in ast.iter_child_nodes(node)
                                       if isinstance(c, (ast.stmt, ast.ExceptHandler,
                                                         ast.match_case))]))
            elif isinstance(node, (ast.ExceptHandler, ast.match_case)):
                stack.extend(reversed(node.body))

    def _top_bindings(self) -> None:
        """Names the module's top level binds (in if/try/... too, not in defs)."""
        stack: list[ast.AST] = list(self.tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bindings.setdefault(node.name, []).append(node)
                continue
            if isinstance(node, ast.Lambda):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    if a.name == "*":
                        self.star = True
                    else:
                        self.bindings.setdefault((a.asname or a.name).split(".")[0], []).append(node)
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.bindings.setdefault(node.id, []).append(node)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.bindings.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
                self.bindings.setdefault(node.name, []).append(node)
            stack.extend(ast.iter_child_nodes(node))

    def _stores_not_on_self(self) -> set[str]:
        """Attribute names the module assigns on objects other than a method's own
        (``r = Req(); r.tag = 1``): a class may have them though its body does not say."""
        mine: set[int] = set()
        for cls in ast.walk(self.tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            for fn in cls.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = fn.args.posonlyargs + fn.args.args
                    if args:
                        me = args[0].arg
                        mine.update(id(n) for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                                    and isinstance(n.value, ast.Name) and n.value.id == me)
        return {n.attr for n in ast.walk(self.tree)
                if isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del))
                and id(n) not in mine}

    def _bound_in(self, scope: ast.AST) -> set[str]:
        names = self._scope_names.get(id(scope))
        if names is None:
            names = self._scope_names[id(scope)] = _stored_names(scope)
        return names

    # -- functions ----------------------------------------------------------------------
    def find(self, qualname: str, firstlineno: int | None = None
             ) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, tuple[ast.AST, ...]] | None:
        """The def of qualname: the one starting at firstlineno (its first decorator's
        line, as co_firstlineno counts), or the only one."""
        cands = self.funcs.get(qualname, [])
        if firstlineno is None:
            return cands[0] if len(cands) == 1 else None
        for node, scopes in cands:
            deco = node.decorator_list
            if node.lineno == firstlineno or (deco and deco[0].lineno == firstlineno):
                return node, scopes
        return None

    def proto(self, qualname: str, firstlineno: int | None = None,
              params: Sequence[str] | None = None, resumable: bool | None = None
              ) -> FuncProto | None:
        """FuncProto of the function qualname, None if the source has no such def (or
        its parameters are not ``params``: the source is not what was imported).
        resumable: it is a generator or coroutine (the code's flags say; None: ask the
        source), whose ``-> None`` does not make $retval void."""
        found = self.find(qualname, firstlineno)
        if found is None:
            return None
        fn, scopes = found
        a = fn.args
        ordered = list(a.posonlyargs) + list(a.args)
        names = [x.arg for x in ordered]
        if a.vararg is not None:
            names.append(a.vararg.arg)
        names += [x.arg for x in a.kwonlyargs]
        if a.kwarg is not None:
            names.append(a.kwarg.arg)
        if params is not None and list(params) != names:
            return None
        types: dict[str, BtfType] = {}
        for x in ordered + list(a.kwonlyargs):
            if x.annotation is not None:
                t = self.type_of(x.annotation, scopes)
                if t is not BTF_ANY:
                    types[x.arg] = t
        if a.vararg is not None:
            types[a.vararg.arg] = _BUILTIN_TYPES["tuple"]
        if a.kwarg is not None:
            types[a.kwarg.arg] = _BUILTIN_TYPES["dict"]
        retval = BTF_ANY
        if fn.returns is not None:
            retval = self.type_of(fn.returns, scopes, returns=True)
            if retval is BTF_VOID:
                if resumable is None:
                    resumable = isinstance(fn, ast.AsyncFunctionDef) or _yields(fn)
                if resumable:
                    retval = BTF_ANY
        return FuncProto(tuple(names), types, retval)

    # -- types --------------------------------------------------------------------------
    def type_of(self, node: ast.AST | None, scopes: tuple[ast.AST, ...] = (), *,
                returns: bool = False, depth: int = 0) -> BtfType:
        """The BtfType an annotation names (BTF_ANY if not known).  returns: None is
        then void."""
        if node is None:
            return BTF_ANY
        if isinstance(node, ast.Constant):
            if node.value is None:
                return BTF_VOID if returns else _NONE_TYPE
            if isinstance(node.value, str) and depth < _MAX_STRING_DEPTH \
                    and len(node.value) <= _MAX_STRING_LEN:
                try:
                    inner = ast.parse(node.value.strip(), mode="eval").body
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    return BTF_ANY
                return self.type_of(inner, scopes, returns=returns, depth=depth + 1)
            return BTF_ANY
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and node.value.id in ("list", "tuple", "dict", "set", "frozenset"):
            return self.type_of(node.value, scopes, depth=depth)
        if isinstance(node, ast.Name):
            return self._named(node.id, scopes)
        return BTF_ANY

    def _named(self, name: str, scopes: tuple[ast.AST, ...]) -> BtfType:
        """What a bare name in an annotation is: a class of this source bound once at
        the top level, an unshadowed builtin, or not known."""
        if self.star or name in self.declared_global:
            return BTF_ANY
        if any(name in self._bound_in(s) for s in scopes):
            return BTF_ANY                    # a function or class scope's own name
        bound = self.bindings.get(name)
        if bound is not None:
            if len(bound) == 1 and isinstance(bound[0], ast.ClassDef):
                return self.class_type(bound[0])
            return BTF_ANY
        return _BUILTIN_TYPES.get(name, BTF_ANY)

    def class_type(self, cls: ast.ClassDef) -> BtfType:
        t = self._classes.get(id(cls))
        if t is None:
            name = f"{self.module}.{cls.name}" if self.module else cls.name
            info = _ClassInfo(self, cls)
            t = BtfType(name, "struct", info.member, string=info.may_be_str())
            self._classes[id(cls)] = t
        return t


class _ClassInfo:
    """The attributes a class of the source defines, found lazily (a field's type may
    be another class of the source, or this one)."""

    def __init__(self, src: SourceModule, cls: ast.ClassDef) -> None:
        self.src = src
        self.cls = cls
        self.scopes = (cls,)
        self._fields: dict[str, list[ast.AST | None]] | None = None
        self.complete = True          # a name not found is not there
        self.dynamic = False          # __getattr__: every name is there
        self.bases: list[BtfType] = []
        self._types: dict[str, BtfType] = {}
        self._busy = False

    def _collect(self) -> dict[str, list[ast.AST | None]]:
        if self._fields is not None:
            return self._fields
        fields: dict[str, list[ast.AST | None]] = {}
        self._fields = fields
        cls, src = self.cls, self.src
        if cls.keywords:                       # metaclass=..., __init_subclass__ args
            self.complete = False
        for d in cls.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            if _dotted(target) not in _PLAIN_DECORATORS:
                self.complete = False
        for b in cls.bases:
            if isinstance(b, ast.Name) and b.id == "object" and "object" not in src.bindings \
                    and not src.star:
                continue                       # what every class has: dunders
            t = src.type_of(b, ()) if isinstance(b, ast.Name) else BTF_ANY
            if t is BTF_ANY:
                self.complete = False         # an imported base, Generic[T], ...
            else:
                self.bases.append(t)
        for n in ast.walk(cls):
            if isinstance(n, ast.Call) and _dotted(n.func) in ("setattr", "vars"):
                self.complete = False
            elif isinstance(n, ast.Attribute) and n.attr in ("__dict__", "__setattr__"):
                self.complete = False

        def add(name: str, ann: ast.AST | None = None) -> None:
            fields.setdefault(name, []).append(ann)

        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if stmt.name in ("__getattr__", "__getattribute__"):
                    self.dynamic = True
                prop = any(_dotted(d) in _PROPERTIES for d in stmt.decorator_list)
                add(stmt.name, stmt.returns if prop and stmt.returns is not None else None)
                self._self_attrs(stmt, add)
            elif isinstance(stmt, ast.ClassDef):
                add(stmt.name)
            elif isinstance(stmt, ast.AnnAssign):
                if isinstance(stmt.target, ast.Name):
                    add(stmt.target.id, stmt.annotation)
            elif isinstance(stmt, ast.Assign):
                for tgt in stmt.targets:
                    if isinstance(tgt, ast.Name) and tgt.id == "__slots__":
                        self._slots(stmt.value, add)
                for name in _stored_names(stmt):
                    add(name)
            else:
                for name in _stored_names(stmt):
                    add(name)
        return fields

    def _slots(self, value: ast.AST, add: Callable[..., None]) -> None:
        items = value.elts if isinstance(value, (ast.Tuple, ast.List, ast.Set)) else [value]
        for it in items:
            if isinstance(it, ast.Constant) and isinstance(it.value, str):
                add(it.value)
            else:
                self.complete = False

    def _self_attrs(self, fn: ast.FunctionDef | ast.AsyncFunctionDef,
                    add: Callable[..., None]) -> None:
        """self.X = ..., self.X: T = ..., and any other store to self.X in a method."""
        args = fn.args.posonlyargs + fn.args.args
        if not args or any(_dotted(d) == "staticmethod" for d in fn.decorator_list):
            return
        me = args[0].arg
        annotated: dict[int, ast.AST] = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.AnnAssign):
                annotated[id(n.target)] = n.annotation
        for n in ast.walk(fn):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del)) \
                    and isinstance(n.value, ast.Name) and n.value.id == me:
                add(n.attr, annotated.get(id(n)))

    def member(self, name: str) -> BtfType | None:
        fields = self._collect()
        if self.dynamic or _is_dunder(name):
            return BTF_ANY
        anns = fields.get(name)
        if anns is not None:
            return self._field_type(name, anns)
        if self._busy:                          # a cycle of bases: not known
            return BTF_ANY
        self._busy = True
        try:
            for base in self.bases:
                t = base.member(name)
                if t is not None:
                    return t
        finally:
            self._busy = False
        if not self.complete or name in self.src.stored_elsewhere:
            return BTF_ANY
        return None

    def _field_type(self, name: str, anns: list[ast.AST | None]) -> BtfType:
        t = self._types.get(name)
        if t is None:
            found = {self.src.type_of(a, self.scopes) for a in anns if a is not None}
            t = found.pop() if len(found) == 1 else BTF_ANY
            if t is BTF_VOID:
                t = _NONE_TYPE
            self._types[name] = t
        return t

    def may_be_str(self) -> bool:
        """A subclass of str, or a class whose bases are not all known."""
        self._collect()
        return not self.complete or any(b.string for b in self.bases)


# --------------------------------------------------------------------------------------
# From a code object

_lock = threading.Lock()
_sources: dict[str, tuple[str, SourceModule | None]] = {}
_MAX_SOURCES = 64


def _source_module(filename: str, module: str) -> SourceModule | None:
    linecache.checkcache(filename)
    text = "".join(linecache.getlines(filename))
    if not text:
        return None
    with _lock:
        hit = _sources.get(filename)
    if hit is not None and hit[0] == text:
        return hit[1]
    try:
        sm: SourceModule | None = SourceModule(text, module)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        sm = None
    with _lock:
        if len(_sources) >= _MAX_SOURCES:
            _sources.pop(next(iter(_sources)))
        _sources[filename] = (text, sm)
    return sm


def func_proto(code: CodeType, module: str = "") -> FuncProto:
    """What the parser may know of a function: its parameter names (from the code
    object) and the types its annotations name in its source file.  Never raises:
    what cannot be read is not known."""
    params = _param_names(code)
    try:
        sm = _source_module(code.co_filename, module)
        if sm is not None:
            proto = sm.proto(code.co_qualname, code.co_firstlineno, params,
                             bool(code.co_flags & _CO_RESUMABLE))
            if proto is not None:
                return proto
    except Exception:
        pass
    return FuncProto(tuple(params))


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
