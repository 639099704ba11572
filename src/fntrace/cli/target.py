"""Running the traced program the way ``python`` would (Modules/main.c, Lib/runpy.py).

The program must see what it sees without fntrace: ``sys.argv``, ``sys.path[0]``, a
fresh ``__main__`` module, its own stdin/stdout/stderr, and the same exit status for a
normal end, ``sys.exit(n)`` and an uncaught exception.  The target's code is compiled
here, so its functions get records before the first line runs (``'*:mod:__main__'``).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from types import CodeType

from ..errors import UsageError

__all__ = ["Target", "prepare_target", "run_target"]


class Target:
    """What to run: the compiled program and the argv it will see."""
    __slots__ = ("kind", "name", "args", "code", "spec", "path0", "argv0")

    def __init__(self, kind: str, name: str, args: list[str] | None = None,
                 code: CodeType | None = None, spec: object = None, path0: str = "",
                 argv0: str = "") -> None:
        self.kind = kind               # "script", "module", "code"
        self.name = name               # path, module name, or "-c"
        self.args = list(args) if args is not None else []
        self.code = code
        self.spec = spec
        self.path0 = path0
        self.argv0 = argv0

    def __repr__(self) -> str:
        return f"Target(kind={self.kind!r}, name={self.name!r}, args={self.args!r})"


def prepare_target(script: str | None, module: str | None, code: str | None,
                   args: list[str]) -> Target:
    """Compile the target; raise UsageError (one line) if it cannot be run."""
    if code is not None:
        try:
            co = compile(code, "<string>", "exec")
        except SyntaxError as e:
            raise UsageError(f"-c: syntax error at line {e.lineno}: {e.msg}") from None
        return Target("code", "-c", args, co, path0="", argv0="-c")
    if module is not None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as e:
            raise UsageError(f"-m {module}: {e}") from None
        if spec is None:
            raise UsageError(f"-m {module}: no module named {module!r}")
        if spec.submodule_search_locations is not None:
            # A package: run its __main__ submodule, as python -m does.
            main_name = module + ".__main__"
            try:
                spec = importlib.util.find_spec(main_name)
            except ImportError as e:
                raise UsageError(f"-m {module}: {e}") from None
            if spec is None:
                raise UsageError(f"-m {module}: {module!r} is a package and cannot be "
                                 "directly executed (no __main__)")
        loader = spec.loader
        get_code = getattr(loader, "get_code", None)
        co = get_code(spec.name) if get_code is not None else None
        if co is None:
            raise UsageError(f"-m {module}: no code object available for {spec.name}")
        return Target("module", module, args, co, spec=spec, path0=os.getcwd(),
                      argv0=spec.origin or module)
    assert script is not None
    if not os.path.exists(script):
        raise UsageError(f"{script}: no such file")
    if os.path.isdir(script):
        main = os.path.join(script, "__main__.py")
        if not os.path.exists(main):
            raise UsageError(f"{script}: is a directory without __main__.py")
        path = main
        path0 = script
    else:
        path = script
        path0 = os.path.dirname(os.path.abspath(script))
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise UsageError(f"{script}: {e.strerror}") from None
    try:
        co = compile(source, path, "exec")
    except SyntaxError as e:
        raise UsageError(f"{script}:{e.lineno}: syntax error: {e.msg}") from None
    except ValueError as e:
        raise UsageError(f"{script}: {e}") from None
    return Target("script", script, args, co, path0=path0, argv0=script)


def _main_module(t: Target) -> types.ModuleType:
    mod = types.ModuleType("__main__")
    mod.__dict__["__builtins__"] = __builtins__
    if t.kind == "script":
        mod.__file__ = t.code.co_filename
        mod.__cached__ = None
        mod.__loader__ = importlib.machinery.SourceFileLoader("__main__", t.code.co_filename)
        mod.__spec__ = None
    elif t.kind == "module":
        spec = t.spec
        mod.__file__ = spec.origin
        mod.__cached__ = spec.cached
        mod.__loader__ = spec.loader
        mod.__package__ = spec.parent
        mod.__spec__ = spec
    else:
        mod.__loader__ = importlib.machinery.BuiltinImporter
        mod.__spec__ = None
    if "__package__" not in mod.__dict__:
        mod.__package__ = None
    return mod


def _join_threads() -> None:
    """The interpreter joins non-daemon threads before it exits; do the same while
    tracing is still on so their calls are recorded.

    Tracing is on, so this must not call traced (library) functions itself: no
    threading.enumerate()/join() — it waits on the thread's C-level lock or handle
    instead, which a later join() by the program still handles.
    """
    me = threading.get_ident()
    while True:
        waited = False
        for t in list(threading._active.values()):
            if t._ident == me or t._daemonic:
                continue
            handle = getattr(t, "_handle", None)           # 3.13: _ThreadHandle
            if handle is not None and hasattr(handle, "is_done"):
                if not handle.is_done():
                    handle.join()
                    waited = True
                continue
            lock = getattr(t, "_tstate_lock", None)        # 3.11, 3.12
            if lock is not None and lock.locked():
                lock.acquire()
                lock.release()
                waited = True
        if not waited:
            return


def _print_exception(exc: BaseException) -> None:
    """Print an uncaught exception as python would, without fntrace's own frames."""
    tb = exc.__traceback__
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(here):
        tb = tb.tb_next
    if sys.excepthook is not sys.__excepthook__:
        sys.excepthook(type(exc), exc, tb)
    else:
        import traceback
        traceback.print_exception(type(exc), exc, tb)


def run_target(t: Target, start=None) -> int:
    """Run the target as __main__; return the exit status python would give.

    ``start`` runs just before the target's first line (tracing is turned on there, so
    none of fntrace's set-up is traced).
    """
    saved_argv, saved_path0 = sys.argv, (sys.path[0] if sys.path else None)
    saved_main = sys.modules.get("__main__")
    sys.argv = [t.argv0, *t.args]
    if sys.path:
        sys.path[0] = t.path0
    else:
        sys.path.insert(0, t.path0)
    mod = _main_module(t)
    sys.modules["__main__"] = mod
    status = 0
    try:
        code = t.code
        if start is not None:
            code = start(mod, code) or code
        try:
            exec(code, mod.__dict__)
        finally:
            _join_threads()
    except SystemExit as e:
        code = e.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code & 0xff if code >= 0 else code & 0xff
        else:
            try:
                print(code, file=sys.stderr)
            except Exception:
                pass
            status = 1
    except KeyboardInterrupt as e:
        _print_exception(e)
        status = 130
    except BaseException as e:       # an uncaught exception: traceback, status 1
        _print_exception(e)
        status = 1
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
    return status
