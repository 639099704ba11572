"""What a module defines, read from its source without importing it: the kallsyms (and,
for probes, the BTF) of modules that are not loaded yet.

The kernel refuses a filter that matches nothing (EINVAL) and a probe on a symbol that
does not exist (BAD_PROBE_ADDR) at the moment they are written.  A Python program's
modules are mostly not imported when ``fntrace record -F 'shop.pricing.*'`` starts, so
the same check needs another source of symbols: the modules' source files, found the
way the import system would find them (sys.meta_path's path finders, without running
anything of the module or its packages) and read with ``ast``.  That gives every
function, method, lambda, generator expression and nested function, named as CPython
names them (``co_qualname``), the parameters of each, and their annotations.

Some names exist only once a module has run: methods a class decorator or metaclass
generates (dataclasses, attrs, enum, NamedTuple), functions made by ``exec``.  A module
or class whose source shows such machinery is *dynamic*: a name missing there may still
appear, so it is not refused.  A module that cannot be read (a C extension, one an
import hook produces) is not judged either.

    check_pattern("shop.pricng.*")  -> Verdict(kind="none", close=["shop.pricing.*"])
    find_function("shop.cart.Cart.add_item") -> FuncInfo(params=["self", "product", ...])
"""
from __future__ import annotations

import ast
import difflib
import enum
import importlib.machinery
import os
import pkgutil
import re
import sys

from .regs import _param_names
from .hash import (MATCH_END_ONLY, MATCH_FRONT_ONLY, MATCH_FULL, MATCH_GLOB, MATCH_INDEX,
                   MATCH_MIDDLE_ONLY, filter_parse_regex, ftrace_match)

TYPE_CHECKING = False
if TYPE_CHECKING:                   # typing is costly to import; only checkers need this
    from collections.abc import Callable, Mapping
    from types import CodeType

__all__ = ["FuncInfo", "ClassInfo", "ModuleSource", "Verdict", "UNREADABLE", "find_spec",
           "module_source", "find_function", "check_pattern", "check_mod_filter",
           "close_names", "main_source", "submodules", "main_sources"]


class _Unreadable(enum.Enum):
    # an enum of one member: ``x is UNREADABLE`` then narrows x for a checker
    UNREADABLE = 0

    def __repr__(self) -> str:
        return "UNREADABLE"

    __str__ = __repr__


UNREADABLE = _Unreadable.UNREADABLE

# Calls that make functions at run time which the source does not show: builtins
# called by their bare name, the rest also through their module (types.FunctionType).
_DYNAMIC_BUILTINS = frozenset({"exec", "eval", "compile", "setattr", "type"})
_DYNAMIC_CALLS = frozenset({"FunctionType", "namedtuple", "NamedTuple", "make_dataclass",
                            "new_class", "create_function"})
# Bases that are only `object` for a class whose names are all in its body.
_PLAIN_BASES = frozenset({"object", "Exception", "BaseException", "ValueError",
                          "TypeError", "RuntimeError", "KeyError", "LookupError",
                          "OSError", "IndexError", "AttributeError", "int", "str",
                          "float", "list", "dict", "set", "tuple", "bytes"})


class FuncInfo:
    """One function in a module's source.

    qualname     as CPython names its code (``Cart.add_item``, ``f.<locals>.<lambda>``)
    line         its ``def`` line (co_firstlineno: the first decorator's line)
    params       parameter names in signature order: positional, *args, keyword-only,
                 **kwargs (core/regs.py _param_names)
    annotations  parameter name -> the annotation's source text
    returns      the return annotation's source text, or None
    """
    __slots__ = ("qualname", "line", "params", "annotations", "returns")

    def __init__(self, qualname: str, line: int, params: list[str],
                 annotations: dict[str, str], returns: str | None) -> None:
        self.qualname = qualname
        self.line = line
        self.params = params
        self.annotations = annotations
        self.returns = returns

    def __repr__(self) -> str:
        return f"FuncInfo({self.qualname!r}, params={self.params!r})"


class ClassInfo:
    """One class: its attribute names (class body assignments and annotations,
    methods, properties, ``__slots__``, ``self.X = ...`` in its methods), its bases'
    source text, and whether run time may give it names its body does not show."""
    __slots__ = ("qualname", "attrs", "bases", "dynamic")

    def __init__(self, qualname: str) -> None:
        self.qualname = qualname
        self.attrs: set[str] = set()
        self.bases: list[str] = []
        self.dynamic = False


class ModuleSource:
    """What one module's source defines."""
    __slots__ = ("name", "path", "functions", "classes", "dynamic")

    def __init__(self, name: str, path: str) -> None:
        self.name = name
        self.path = path
        self.functions: dict[str, FuncInfo] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.dynamic = False          # the module itself may gain functions at run time

    def names(self) -> list[str]:
        return [f"{self.name}.{q}" for q in self.functions]

    def dynamic_scope(self, qualname: str) -> bool:
        """May a function named ``qualname`` appear in this module at run time without
        its source showing it?"""
        if self.dynamic:
            return True
        parts = qualname.split(".")
        for i in range(1, len(parts)):
            c = self.classes.get(".".join(parts[:i]))
            if c is not None and c.dynamic:
                return True
        return False


def _params(args: ast.arguments) -> tuple[list[str], dict[str, str]]:
    out, ann = [], {}
    for a in args.posonlyargs + args.args:
        out.append(a.arg)
        if a.annotation is not None:
            ann[a.arg] = ast.unparse(a.annotation)
    if args.vararg is not None:
        out.append(args.vararg.arg)
    for a in args.kwonlyargs:
        out.append(a.arg)
        if a.annotation is not None:
            ann[a.arg] = ast.unparse(a.annotation)
    if args.kwarg is not None:
        out.append(args.kwarg.arg)
    return out, ann


def _makes_functions(node: ast.Call) -> bool:
    f = node.func
    if isinstance(f, ast.Name):
        if f.id == "type":
            return len(node.args) >= 3
        return f.id in _DYNAMIC_BUILTINS or f.id in _DYNAMIC_CALLS
    if isinstance(f, ast.Attribute):
        return f.attr in _DYNAMIC_CALLS
    return False


class _Walker(ast.NodeVisitor):
    """Qualified names the way the compiler makes them (Python/compile.c
    compiler_set_qualname): ``<locals>`` after a function, nothing after a class."""

    def __init__(self, mod: ModuleSource, local_classes: set[str]) -> None:
        self.mod = mod
        self.stack: list[tuple[str, str]] = []     # (name, "function" | "class")
        self.local_classes = local_classes
        self.current_class: list[ClassInfo] = []

    def _qual(self, name: str) -> str:
        parts = []
        for n, kind in self.stack:
            parts.append(n)
            if kind == "function":
                parts.append("<locals>")
        parts.append(name)
        return ".".join(parts)

    def _func(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, name: str,
              args: ast.arguments, returns: ast.expr | None,
              body: list[ast.stmt] | ast.expr) -> None:
        qual = self._qual(name)
        params, ann = _params(args)
        line = node.lineno
        decos = getattr(node, "decorator_list", [])
        if decos:
            line = min([line] + [d.lineno for d in decos])
        self.mod.functions.setdefault(qual, FuncInfo(
            qual, line, params, ann, ast.unparse(returns) if returns is not None else None))
        # Decorators and defaults run in the enclosing scope.
        for d in decos:
            self.visit(d)
        for d in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.visit(d)
        if self.current_class and self.stack and self.stack[-1][1] == "class":
            cls = self.current_class[-1]
            cls.attrs.add(name)
        self.stack.append((name, "function"))
        if isinstance(body, list):
            for b in body:
                self.visit(b)
                if (self.current_class and len(self.stack) >= 2
                        and self.stack[-2][1] == "class"):
                    self._self_assigns(b, self.current_class[-1])
        else:
            self.visit(body)
        self.stack.pop()

    @staticmethod
    def _self_assigns(node: ast.AST, cls: ClassInfo) -> None:
        for n in ast.walk(node):
            targets = []
            if isinstance(n, ast.Assign):
                targets = n.targets
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
                targets = [n.target]
            for t in targets:
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                        and t.value.id == "self"):
                    cls.attrs.add(t.attr)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._func(node, node.name, node.args, node.returns, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._func(node, "<lambda>", node.args, None, node.body)

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        qual = self._qual("<genexpr>")
        self.mod.functions.setdefault(qual, FuncInfo(qual, node.lineno, [".0"], {}, None))
        # The first iterable is evaluated outside; the rest inside.
        self.visit(node.generators[0].iter)
        self.stack.append(("<genexpr>", "function"))
        for i, g in enumerate(node.generators):
            if i:
                self.visit(g.iter)
            for c in g.ifs:
                self.visit(c)
        self.visit(node.elt)
        self.stack.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        for base in node.bases:
            self.visit(base)
        qual = self._qual(node.name)
        cls = self.mod.classes.setdefault(qual, ClassInfo(qual))
        cls.bases = [ast.unparse(b) for b in node.bases]
        plain = all(b in _PLAIN_BASES or b in self.local_classes for b in cls.bases)
        cls.dynamic = bool(node.decorator_list or node.keywords or not plain)
        if self.current_class and self.stack and self.stack[-1][1] == "class":
            self.current_class[-1].attrs.add(node.name)
        self.stack.append((node.name, "class"))
        self.current_class.append(cls)
        for b in node.body:
            if isinstance(b, ast.Assign):
                for t in b.targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            cls.attrs.add(n.id)
                if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in b.targets):
                    for n in ast.walk(b.value):
                        if isinstance(n, ast.Constant) and isinstance(n.value, str):
                            cls.attrs.add(n.value)
            elif isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name):
                cls.attrs.add(b.target.id)
            self.visit(b)
        self.current_class.pop()
        self.stack.pop()

    def visit_Call(self, node: ast.Call) -> None:
        if _makes_functions(node):
            if self.current_class and self.stack and self.stack[-1][1] == "class":
                self.current_class[-1].dynamic = True
            else:
                self.mod.dynamic = True
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        # `global` in a function can bind module names at run time
        self.mod.dynamic = self.mod.dynamic or any(n == "__getattr__" for n in node.names)


# -- finding a module's source without importing it --------------------------------------

def _meta_find(fullname: str, path: list[str] | None) -> importlib.machinery.ModuleSpec | None:
    """importlib's _find_spec over sys.meta_path, minus the import of parents."""
    for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, None)
        except Exception:
            continue
        if spec is not None:
            return spec
    return None


def find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec the import system would use for ``name``, found without running any
    module (a parent package's ``__init__`` is not executed: its search locations come
    from its own spec).  None if it cannot be found."""
    mod = sys.modules.get(name)
    if mod is not None:
        spec: importlib.machinery.ModuleSpec | None = getattr(mod, "__spec__", None)
        if spec is not None:
            return spec
    parts = name.split(".")
    path = None
    spec = None
    for i in range(len(parts)):
        full = ".".join(parts[:i + 1])
        loaded = sys.modules.get(full)
        if loaded is not None and getattr(loaded, "__spec__", None) is not None:
            spec = loaded.__spec__
        else:
            spec = _meta_find(full, path)
        if spec is None:
            return None
        if i < len(parts) - 1:
            path = spec.submodule_search_locations
            if path is None:
                return None
    return spec


_cache: dict[str, object] = {}


def module_source(name: str) -> ModuleSource | None | _Unreadable:
    """What module ``name``'s source defines; None if there is no such module,
    UNREADABLE if it exists but has no Python source to read."""
    hit = _cache.get(name)
    if hit is not None:
        return hit          # type: ignore[return-value]
    spec = find_spec(name)
    if spec is None:
        res: object = None
    else:
        origin = spec.origin
        if (not isinstance(origin, str) or not origin.endswith(".py")
                or not os.path.isfile(origin)):
            if spec.submodule_search_locations is not None and spec.loader is None:
                res = ModuleSource(name, "")            # a namespace package: no code
            else:
                res = UNREADABLE
        else:
            res = _parse(name, origin)
    _cache[name] = res
    return res          # type: ignore[return-value]


def _parse(name: str, path: str) -> ModuleSource | _Unreadable:
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return UNREADABLE
    mod = ModuleSource(name, path)
    local = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    _Walker(mod, local).visit(tree)
    for n in tree.body:
        if isinstance(n, ast.FunctionDef) and n.name == "__getattr__":
            mod.dynamic = True
    return mod


_SUFFIXES = sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)


def _module_names(paths: list[str]) -> set[str]:
    """The module and package names in the directories ``paths``, from their listings
    alone.  pkgutil.iter_modules lists every subdirectory to find its ``__init__``;
    here a subdirectory is a package by its name (a namespace package needs nothing
    more), so none is entered: one may be a mount point, even this program's own
    tracefs, whose requests this process serves (a listing from inside a tracefs
    write would wait for itself)."""
    out: set[str] = set()
    for d in paths:
        if not isinstance(d, str):
            continue
        try:
            it = os.scandir(d or ".")
        except NotADirectoryError:
            out.update(m.name for m in pkgutil.iter_modules([d]))     # a zip file
            continue
        except OSError:
            continue
        with it:
            for e in it:
                name = e.name
                try:
                    is_dir = e.is_dir()     # the listing's d_type: no stat
                except OSError:
                    continue
                if is_dir:
                    if name.isidentifier():
                        out.add(name)
                    continue
                for suffix in _SUFFIXES:
                    if name.endswith(suffix):
                        mod = name[:-len(suffix)]
                        if mod.isidentifier():
                            out.add(mod)
                        break
    out.difference_update(("__init__", "__pycache__"))
    return out


def submodules(name: str) -> list[str]:
    """The direct submodules of package ``name`` (its search locations listed, nothing
    imported); top-level modules for ``""``."""
    if not name:
        out = set(sys.builtin_module_names)
        out.update(_module_names(sys.path))
        out.update(n for n in sys.modules if "." not in n)
        return sorted(out)
    spec = find_spec(name)
    locs = getattr(spec, "submodule_search_locations", None) if spec is not None else None
    if not locs:
        return []
    out = {f"{name}.{m}" for m in _module_names(list(locs))}
    out.update(n for n in sys.modules if n.startswith(name + ".") and "." not in n[len(name) + 1:])
    return sorted(out)


# The program's own module, under each name it answers to (``__main__``, and for -m
# its own): set by the launcher once the program is compiled (cli/record.py).
main_sources: dict[str, ModuleSource] = {}


def find_function(symbol: str) -> tuple[ModuleSource, FuncInfo] | None | _Unreadable:
    """The function ``module.qualname`` names: (its module's source, its FuncInfo),
    None if no module could define it, UNREADABLE when that cannot be decided before
    the program runs (no source, a dynamic module, or no module of that name yet)."""
    parts = symbol.split(".")
    unsure = False
    for i in range(len(parts) - 1, 0, -1):
        modname, qual = ".".join(parts[:i]), ".".join(parts[i:])
        src = main_sources.get(modname) or module_source(modname)
        if src is None:
            continue
        if src is UNREADABLE:
            unsure = True
            continue
        info = src.functions.get(qual)
        if info is not None:
            return src, info
        if src.dynamic_scope(qual):
            unsure = True
    if unsure:
        return UNREADABLE
    v = check_pattern(symbol, main_sources)
    return None if v.kind == "none" or "." not in symbol else UNREADABLE


# -- checking a filter before the program runs ---------------------------------------------

class Verdict:
    """What the source says of a pattern.

    kind    "match": some function it selects exists; "maybe": it selects nothing the
            source shows, but run time may define one (``why``); "none": it can never
            select anything; "unknown": it cannot be judged from source (an end or
            middle match, an index)
    close   the closest existing names (for "none" and "maybe")
    """
    __slots__ = ("kind", "why", "close")

    def __init__(self, kind: str, why: str = "", close: list[str] | None = None) -> None:
        self.kind = kind
        self.why = why
        self.close = close or []

    def __repr__(self) -> str:
        return f"Verdict({self.kind!r}, why={self.why!r}, close={self.close!r})"


_GLOB_CHARS = re.compile(r"[*?\[\\]")


def _head(word: str) -> tuple[int, str, str]:
    """(match type, search, the literal head the name must start with)."""
    mtype, search, _ = filter_parse_regex(word)
    if mtype in (MATCH_FULL, MATCH_FRONT_ONLY):
        return mtype, search, search
    if mtype == MATCH_GLOB:
        return mtype, search, _GLOB_CHARS.split(search, maxsplit=1)[0]
    return mtype, search, ""


def _candidate_modules(head: str, exact: bool) -> tuple[list[str], str]:
    """Modules whose functions can have names starting with ``head`` (``exact``: the
    head is the whole name), found without importing; and the deepest module or
    package the head names (for suggestions)."""
    parts = head.split(".")
    out: list[str] = []
    anchor = ""
    # Complete dotted prefixes (followed by '.') that are modules.
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if find_spec(name) is None:
            break
        anchor = name
        out.append(name)
    if exact:
        return out, anchor
    # The head's last component may be cut (`shop.pri*`): modules under the anchor (or
    # top-level ones) whose name goes on from it, and everything below those.
    stem = parts[-1] if len(parts) == 1 or anchor == ".".join(parts[:-1]) else None
    if stem is not None:
        base = ".".join(parts[:-1])
        todo = [m for m in submodules(base) if m.rpartition(".")[2].startswith(stem)]
        seen = set(out)
        while todo and len(out) < 2000:
            m = todo.pop()
            if m in seen:
                continue
            seen.add(m)
            out.append(m)
            todo.extend(submodules(m))
    return out, anchor


def close_names(word: str, names: list[str], n: int = 3) -> list[str]:
    """The names ``word`` was closest to meaning: first those it would match with their
    module in front (``mid`` for ``__main__.mid``, ``Cart.*`` for
    ``shop.cart.Cart.add``: a name given without its module, which difflib's ratio
    finds too far), then the most similar spellings."""
    from fnmatch import fnmatchcase
    tail = "*." + word
    out = [c for c in names if c != word and fnmatchcase(c, tail)][:n]
    for c in difflib.get_close_matches(word, names, n=n + 1, cutoff=0.6):
        if len(out) >= n:
            break
        if c != word and c not in out:
            out.append(c)
    return out


def _suggest(word: str, mtype: int, head: str, anchor: str, sources: list[ModuleSource]
             ) -> list[str]:
    names = [nm for s in sources for nm in s.names()]
    if anchor:
        # The module part may be the typo: the anchor's own names and its submodules'.
        for m in [anchor] + submodules(anchor)[:50]:
            src = module_source(m)
            if isinstance(src, ModuleSource):
                names += src.names()
    if mtype == MATCH_FULL:
        return close_names(word, names)
    # A prefix or glob: suggest the same pattern with a close head — a module, a class,
    # or a function name that exists.
    rest = word[len(head):] if word.startswith(head) else word
    prefixes = set()
    for m in submodules(anchor) + ([anchor] if anchor else []):
        prefixes.add(m + ".")
    for s in sources:
        for c in s.classes:
            prefixes.add(f"{s.name}.{c}.")
        prefixes.update(names)
    heads = close_names(head, sorted(prefixes))
    return [h + rest for h in heads if h + rest != word]


def _compatible(module: str, head: str) -> bool:
    """Can a name in ``module`` start with ``head`` (core/hash.py module_scope)?"""
    dotted = module + "."
    return dotted.startswith(head) or head.startswith(dotted)


def check_pattern(word: str,
                  mains: Mapping[str, ModuleSource | Callable[[], ModuleSource]] | None = None
                  ) -> Verdict:
    """Can the set_ftrace_filter word ``word`` (no ``!``, no ``:cmd``) select a function
    of a module that is not loaded?  ``mains`` maps the names the program's own module
    answers to (``__main__``, and for -m its own name) to its source, or to a function
    that reads it (called only if the word can name that module)."""
    mtype, search, head = _head(word)
    if mtype in (MATCH_INDEX, MATCH_MIDDLE_ONLY, MATCH_END_ONLY) or not head:
        return Verdict("unknown")
    if mtype == MATCH_FULL and "." not in search and not (mains or {}).keys() & {search}:
        # A function's name is module.qualname: a bare name is the end of one.
        return Verdict("none", "", ["*." + search])
    mods, anchor = _candidate_modules(head, mtype == MATCH_FULL)
    # a main's source or what reads it, then each module's (None: not read yet)
    src: ModuleSource | Callable[[], ModuleSource] | _Unreadable | None
    pairs: list[tuple[str, ModuleSource | _Unreadable | None]] = []
    for name, src in (mains or {}).items():
        if _compatible(name, head):
            pairs.append((name, src() if callable(src) else src))
    pairs += [(m, None) for m in mods if m not in (mains or {})]
    sources: list[ModuleSource] = []
    unreadable = []
    maybe = []
    for m, src in pairs:
        if src is None:
            src = module_source(m)
        if src is None:
            continue
        if src is UNREADABLE:
            unreadable.append(m)
            continue
        sources.append(src)
        if any(ftrace_match(f"{m}.{q}", mtype, search) for q in src.functions):
            return Verdict("match")
        # A name that goes on into a submodule lives there, not here.
        deeper = any(o != m and o.startswith(m + ".") and search.startswith(o + ".")
                     for o, _ in pairs)
        if deeper:
            continue
        if src.dynamic:
            maybe.append(f"module {m} may define functions at run time")
            continue
        qual = search[len(m) + 1:] if search.startswith(m + ".") else ""
        for cname, c in src.classes.items():
            if c.dynamic and (qual.startswith(cname + ".") or
                              (mtype != MATCH_FULL and cname.startswith(qual))):
                maybe.append(f"class {m}.{cname} may get methods at run time "
                             "(a decorator, metaclass or base class makes them)")
                break
    close = _suggest(word, mtype, head, anchor, sources)
    if maybe:
        return Verdict("maybe", maybe[0], close)
    if unreadable:
        return Verdict("maybe", f"module {unreadable[0]} has no Python source to read "
                                "before it is imported", close)
    if not sources:
        # No module of that name now.  With one very close to it, a typo; otherwise the
        # program may put one on sys.path, or make it, before importing it.
        top = head.split(".")[0]
        if len(top) < 3 or not any(_one_edit(top, m) for m in submodules("")):
            return Verdict("maybe", f"no module {top!r} can be found now", close)
    return Verdict("none", "", close)


def _one_edit(a: str, b: str) -> bool:
    """a and b differ by one insertion, deletion, substitution or swap of neighbours."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i:] == b[i + 1:]


def check_mod_filter(func: str, module: str) -> Verdict:
    """``FUNC:mod:MOD`` with a literal MOD that is not loaded."""
    mtype, msearch, _ = filter_parse_regex(module)
    if mtype != MATCH_FULL:
        return Verdict("unknown")
    src = module_source(msearch)
    if src is None:
        return Verdict("maybe", f"no module {msearch!r} can be found on sys.path now",
                       close_names(msearch, submodules(msearch.rpartition(".")[0])))
    if src is UNREADABLE:
        return Verdict("maybe", f"module {msearch} has no Python source to read before "
                                "it is imported")
    ftype, fsearch, _ = filter_parse_regex(func)
    if not fsearch or any(ftrace_match(q, ftype, fsearch) for q in src.functions):
        return Verdict("match")
    if src.dynamic or any(c.dynamic for c in src.classes.values()):
        return Verdict("maybe", f"module {msearch} may define functions at run time",
                       close_names(func, list(src.functions)))
    return Verdict("none", "", close_names(func, list(src.functions)))


def main_source(name: str, code: CodeType) -> ModuleSource:
    """The program's own module, from its compiled code (no file needed: -c)."""
    mod = ModuleSource(name, getattr(code, "co_filename", ""))
    stack = [code]
    while stack:
        c = stack.pop()
        for k in c.co_consts:
            if hasattr(k, "co_qualname"):
                stack.append(k)
        if c.co_name in ("<module>", "<listcomp>", "<setcomp>", "<dictcomp>"):
            continue
        mod.functions.setdefault(c.co_qualname, FuncInfo(
            c.co_qualname, c.co_firstlineno, list(_param_names(c)), {}, None))
    src = _parse(name, code.co_filename) if os.path.isfile(code.co_filename) else None
    if isinstance(src, ModuleSource):
        mod.dynamic = src.dynamic
        mod.classes = src.classes
        for q, f in src.functions.items():
            mine = mod.functions.get(q)
            if mine is not None:
                mine.annotations, mine.returns = f.annotations, f.returns
    return mod


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
