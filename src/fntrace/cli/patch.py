"""``--patch 'mod.func=fix.py:new_func'``: run a program with a function replaced.

``new_func(original, *args, **kwargs)`` becomes the function's direct trampoline
(register_ftrace_direct): it decides whether and how to call the original and what to
return.  A function of a module not imported yet (or of the script itself,
``__main__.func``) is patched the moment it appears, before it can be called.
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

from ..core.direct import register_ftrace_direct, unregister_ftrace_direct
from ..core.ops import Ops, ftrace_lock, ftrace_set_filter_ip, sync_discovery
from ..core.records import DynFtrace, record_table
from ..errors import FntraceError, UsageError

__all__ = ["PatchRequest", "parse_patch"]


class PatchRequest:
    def __init__(self, symbol: str, tramp: Callable, spec: str):
        self.symbol = symbol
        self.tramp = tramp
        self.spec = spec
        self.ops: Ops | None = None
        self.error: str | None = None

    def try_apply(self) -> None:
        from ..core.stub import function_of as _function_of
        if self.ops is not None:
            return
        # A module's records exist before its body runs; its functions only after.
        targets = [r for r in record_table.records
                   if r.name == self.symbol and _function_of(r) is not None]
        if not targets:
            return
        self._register(targets)

    def on_module_load(self, module: str, new: list[DynFtrace]) -> None:
        if self.ops is None and self.symbol.startswith(module + "."):
            self.try_apply()

    def rewrite(self, module: str, ns: dict, code):
        """The module's body is about to run: if it defines the function, its code tree
        gets the stub first, so the function is patched from its first call (calls
        made while the module is imported included)."""
        from ..core.stub import prepatch_tree
        if self.ops is not None or not self.symbol.startswith(module + "."):
            return code
        recs = [r for r in record_table.records
                if r.name == self.symbol and r.module == module and _in_tree(r.code, code)]
        if not recs:
            return code
        try:
            code = prepatch_tree(code, recs, ns)
        except FntraceError as e:
            self.error = e.msg
            return code
        self._register(recs)
        return code

    def _register(self, targets) -> None:
        ops = Ops(name=f"patch:{self.symbol}")
        try:
            for r in targets:
                ftrace_set_filter_ip(ops, r)
            register_ftrace_direct(ops, self.tramp)
        except FntraceError as e:
            self.error = e.msg
            return
        self.ops = ops

    def remove(self) -> None:
        if self.ops is not None:
            with ftrace_lock:
                unregister_ftrace_direct(self.ops, self.tramp)
            self.ops = None


def _in_tree(target, code) -> bool:
    from types import CodeType
    stack = [code]
    while stack:
        c = stack.pop()
        if c is target:
            return True
        stack.extend(k for k in c.co_consts if isinstance(k, CodeType))
    return False


def _load_callable(path: str, name: str, spec: str) -> Callable:
    if not os.path.exists(path):
        raise UsageError(f"--patch {spec!r}: {path}: no such file")
    modname = "fntrace_patch_" + os.path.splitext(os.path.basename(path))[0]
    s = importlib.util.spec_from_file_location(modname, path)
    if s is None or s.loader is None:
        raise UsageError(f"--patch {spec!r}: cannot load {path}")
    mod = importlib.util.module_from_spec(s)
    try:
        s.loader.exec_module(mod)
    except Exception as e:
        raise UsageError(f"--patch {spec!r}: {path} failed to load: {type(e).__name__}: {e}") from None
    fn = getattr(mod, name, None)
    if fn is None:
        raise UsageError(f"--patch {spec!r}: {path} has no {name!r}")
    if not callable(fn):
        raise UsageError(f"--patch {spec!r}: {name!r} in {path} is not callable")
    return fn


def parse_patch(spec: str) -> PatchRequest:
    """``SYM=FILE:FUNC`` -> a request; UsageError (one line) if malformed."""
    sym, eq, rest = spec.partition("=")
    path, colon, name = rest.rpartition(":")
    if not eq or not sym or not colon or not path or not name:
        raise UsageError(f"--patch {spec!r}: expected 'module.function=file.py:function'")
    return PatchRequest(sym.strip(), _load_callable(path, name, spec), spec)


def install(requests: list[PatchRequest]) -> None:
    if not requests:
        return
    # A function of a module not imported yet gets its stub before the module's body
    # runs: the module's code is rewritten on its way from the loader (the one case
    # where fntrace puts a frame of its own on an import's stack).
    record_table.install_import_hook()
    record_table.refresh()
    for r in requests:
        r.try_apply()
        if r.error:
            raise UsageError(f"--patch {r.spec!r}: {r.error}")
        record_table.listeners.append(r.on_module_load)
        record_table.rewriters.append(r.rewrite)
    pending = [r for r in requests if r.ops is None]
    if pending:
        record_table.set_scope("patch", lambda name: any(
            r.ops is None and r.symbol.startswith(name + ".") for r in pending))
        sync_discovery()


def finish(requests: list[PatchRequest]) -> list[str]:
    """Remove the patches; return a complaint for each one that never applied."""
    out = []
    for r in requests:
        if r.on_module_load in record_table.listeners:
            record_table.listeners.remove(r.on_module_load)
        if r.rewrite in record_table.rewriters:
            record_table.rewriters.remove(r.rewrite)
        if r.ops is None:
            out.append(f"--patch {r.spec!r}: " + (r.error or f"{r.symbol} never appeared"))
        r.remove()
    return out


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
