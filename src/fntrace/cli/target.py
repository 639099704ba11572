"""Running the traced program the way ``python`` would (Modules/main.c, Lib/runpy.py).

The program must see what it sees without fntrace: ``sys.argv``, ``sys.path[0]``, a
fresh ``__main__`` module, absolute ``__file__`` and ``co_filename`` for a script, its
own stdin/stdout/stderr, a stack that starts at its first frame (no launcher frame
below it: the native launcher, cli/_launch.c), and the same end: the traceback of an
uncaught exception printed before non-daemon threads are joined, then the atexit
functions, then the exit status — 0, ``sys.exit(n)``, 1 for an exception, death by
SIGINT for an uncaught KeyboardInterrupt.  The target's code is compiled here, so its
functions get records before the first line runs (``'*:mod:__main__'``).

    python script.py ARGS     sys.argv = [script, ARGS]     sys.path[0] = its directory
    python -m MOD ARGS        sys.argv = [MOD's file, ARGS]  sys.path[0] = the cwd
    python -c CODE ARGS       sys.argv = ['-c', ARGS]        sys.path[0] = ''
"""
from __future__ import annotations

import atexit
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from types import CodeType

from .. import _env
from ..errors import UsageError

__all__ = ["Target", "Outcome", "prepare_target", "run_target", "finish_program",
           "callback_credit", "PURE_CALLBACK_FRAMES"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

# (its stub, _launch.pyi, lets the checker find it; the name may still hold None)
_native_launch: ModuleType | None
try:
    from . import _launch as _native_launch
except ImportError:         # no C compiler at install time: the Python fallbacks
    _native_launch = None


class Target:
    """What to run: the compiled program and the argv it will see.

    kind     "script", "module" or "code"
    name     the path as given, the module name, or "-c"
    module   the name the program's module has for Python's import system
             (``__spec__.name`` for ``-m``, ``__main__`` otherwise): records of the
             ``-m`` module are named after it, and ``:mod:__main__`` also selects them
    """
    __slots__ = ("kind", "name", "args", "code", "spec", "path0", "argv0", "module")

    def __init__(self, kind: str, name: str, args: list[str] | None, code: CodeType,
                 spec: importlib.machinery.ModuleSpec | None = None, path0: str = "",
                 argv0: str = "", module: str = "__main__") -> None:
        self.kind = kind
        self.name = name
        self.args = list(args) if args is not None else []
        self.code = code
        self.spec = spec
        self.path0 = path0
        self.argv0 = argv0
        self.module = module

    def __repr__(self) -> str:
        return f"Target(kind={self.kind!r}, name={self.name!r}, args={self.args!r})"


def compile_program(source: bytes | str, path: str) -> CodeType:
    """The program's code as the interpreter compiles a script: no future statement of
    this module's inherited (``from __future__ import annotations`` here would make
    the program's annotations strings); natively without compile()'s set-up of the
    _ast types (_launch.c)."""
    if _native_launch is not None:
        co = _native_launch.compile_program(source, path)
        if co is not None:
            return co
    return compile(source, path, "exec", dont_inherit=True)


def _compile_file(path: str, shown: str) -> CodeType:
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise UsageError(f"{shown}: {e.strerror}") from None
    try:
        return compile_program(source, path)
    except SyntaxError as e:
        where = f"{shown}:{e.lineno}" if e.lineno is not None else shown
        raise UsageError(f"{where}: syntax error: {e.msg}") from None
    except ValueError as e:
        raise UsageError(f"{shown}: {e}") from None


def _find_module(module: str, path0: str):
    """The spec -m would run, looked up with ``path0`` first on sys.path as python -m
    has it (importing the parent packages, as runpy does)."""
    saved = sys.path[0] if sys.path else None
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    importlib.invalidate_caches()
    try:
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
        return spec
    finally:
        if saved is not None:
            sys.path[0] = saved
        else:
            del sys.path[0]


def prepare_target(script: str | None, module: str | None, code: str | None,
                   args: list[str]) -> Target:
    """Compile the target; raise UsageError (one line) if it cannot be run."""
    co: CodeType | None
    if code is not None:
        try:
            co = compile_program(code, "<string>")
        except SyntaxError as e:
            raise UsageError(f"-c: syntax error at line {e.lineno}: {e.msg}") from None
        return Target("code", "-c", args, co, path0="", argv0="-c")
    if module is not None:
        path0 = os.getcwd()
        spec = _find_module(module, path0)
        loader = spec.loader
        get_code = getattr(loader, "get_code", None)
        try:
            co = get_code(spec.name) if get_code is not None else None
        except (ImportError, SyntaxError) as e:
            raise UsageError(f"-m {module}: {e}") from None
        if co is None:
            raise UsageError(f"-m {module}: no code object available for {spec.name}")
        return Target("module", module, args, co, spec=spec, path0=path0,
                      argv0=spec.origin or module, module=spec.name)
    assert script is not None
    if not os.path.exists(script):
        raise UsageError(f"{script}: no such file")
    if os.path.isdir(script):
        main = os.path.join(script, "__main__.py")
        if not os.path.exists(main):
            raise UsageError(f"{script}: is a directory without __main__.py")
        path = os.path.abspath(main)
        path0 = os.path.abspath(script)
    else:
        # python makes the script's path absolute (its __file__ and co_filename) and
        # puts its real directory first on sys.path.
        path = os.path.abspath(script)
        path0 = os.path.dirname(os.path.realpath(script))
    return Target("script", script, args, _compile_file(path, script), path0=path0,
                  argv0=script)


def _main_module(t: Target) -> types.ModuleType:
    mod = types.ModuleType("__main__")
    mod.__dict__["__builtins__"] = __builtins__
    if t.kind == "script":
        mod.__file__ = t.code.co_filename
        mod.__dict__["__cached__"] = None
        mod.__loader__ = importlib.machinery.SourceFileLoader("__main__", t.code.co_filename)
        mod.__spec__ = None
    elif t.kind == "module":
        spec = t.spec
        assert spec is not None         # prepare_target gives a module its spec
        mod.__file__ = spec.origin
        mod.__dict__["__cached__"] = spec.cached
        mod.__loader__ = spec.loader
        mod.__package__ = spec.parent
        mod.__spec__ = spec
    else:
        mod.__loader__ = importlib.machinery.BuiltinImporter
        mod.__spec__ = None
    if "__package__" not in mod.__dict__:
        mod.__package__ = None
    return mod


# The pure-Python hot path runs its callbacks as Python frames on the program's own
# stack: a program near its recursion limit would get a RecursionError from fntrace
# (or lose events).  The launcher's C part calls them in a shell that lends them their
# frames while they run (_launch.c callback_shell), so the program keeps its limit.
# Without it, those frames are granted on top of the limit the program sees, in every
# thread that is traced; a runaway recursion then stops that many frames later.
PURE_CALLBACK_FRAMES = 40


def _install_callback_shell() -> bool:
    """The pure hot path's callbacks go to CPython in their C shell (core/dispatch.py
    callback_shell); False when there is no shell (no build, or the native hot path,
    whose callbacks are C)."""
    if _env.native() is not None or _native_launch is None:
        return False
    from ..core import dispatch
    if dispatch.callback_shell is None:
        _native_launch.callback_shell_setup(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
            dispatch.from_signal_handler)
        dispatch.callback_shell = _native_launch.callback_shell
    return True


def _quiet_id() -> None:
    """id() raises an audit event ("builtins.id") that the program's audit hooks see,
    on whatever thread calls it: the modules of fntrace's code that runs while the
    program does get an id() that does not (a module global is found before the
    builtin).  The pure hot path's callbacks run there at every traced call, and the
    discovery trap, native or pure, on fntrace's own threads too (the writer's
    functions, first seen at a tick of `live` or of an open trace_pipe)."""
    if _native_launch is None:
        return
    from .. import fgraph
    from ..arch import lines, monitoring
    from ..core import dispatch, fetch, records
    for mod in (dispatch, fetch, records, fgraph, monitoring, lines):
        mod.id = _native_launch.ident       # type: ignore[attr-defined]


_quiet_id()


_CREDIT = 0 if _env.native() is not None or _install_callback_shell() else PURE_CALLBACK_FRAMES


def callback_credit() -> int:
    return _CREDIT


def _run_clean(code: CodeType, ns: dict) -> None:
    if _native_launch is not None:
        _native_launch.run_clean(code, ns, callback_credit())
    else:
        exec(code, ns)


def _call_clean(func) -> None:
    if _native_launch is not None:
        _native_launch.call_clean(func)
    else:
        func()


def _print_exception(exc: BaseException) -> None:
    """Print an uncaught exception as python would (sys.excepthook), without
    fntrace's own frames."""
    tb = exc.__traceback__
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(here):
        tb = tb.tb_next
    # The default hook shows the exception's own __traceback__ (3.12+), not tb.
    exc.__traceback__ = tb
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException:
        try:
            sys.__excepthook__(type(exc), exc, tb)
        except BaseException:
            pass


class Outcome:
    """How the program ended.

    status     the exit status python would give (0..255)
    sigint     an uncaught KeyboardInterrupt: python then dies of SIGINT
    """
    __slots__ = ("status", "sigint")

    def __init__(self, status: int, sigint: bool = False) -> None:
        self.status = status
        self.sigint = sigint

    def __repr__(self) -> str:
        return f"Outcome(status={self.status}, sigint={self.sigint})"


def _exit_status(e: SystemExit) -> int:
    """Python's _Py_HandleSystemExit: None -> 0, an int -> its low byte, anything else
    is printed to stderr and gives 1."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xff
    try:
        sys.stderr.write(str(code) + "\n")
        sys.stderr.flush()
    except BaseException:
        pass
    return 1


def run_target(t: Target, start=None) -> Outcome:
    """Run the target as __main__; return how it ended.

    ``start(mod, code)`` runs just before the target's first line and may return the
    code to run instead (tracing is turned on there, so none of fntrace's set-up is
    traced).  Once the body has ended — normally or not — the traceback is printed
    and then finish_program() (threads, atexit) follows, as in Py_RunMain; the caller
    calls that while tracing is still on.
    """
    saved_argv = sys.argv
    sys.argv = [t.argv0, *t.args]
    if sys.path:
        sys.path[0] = t.path0
    else:
        sys.path.insert(0, t.path0)
    mod = _main_module(t)
    sys.modules["__main__"] = mod
    code = t.code
    if start is not None:
        code = start(mod, code) or code
    try:
        _run_clean(code, mod.__dict__)
    except SystemExit as e:
        return Outcome(_exit_status(e))
    except BaseException as e:       # an uncaught exception: traceback, status 1
        _print_exception(e)
        # run_eval_code_obj: exactly KeyboardInterrupt, not a subclass
        return Outcome(1, sigint=type(e) is KeyboardInterrupt)
    finally:
        # The program's own argv stays as it left it (an atexit function may read it).
        del saved_argv
    return Outcome(0)


def _join_threads() -> None:
    """threading._shutdown() without calling into the threading module (when it
    cannot be called): wait on each non-daemon thread's C-level lock or handle."""
    me = threading.get_ident()
    while True:
        waited = False
        # (threading's own registry of live threads: private, so not in its stubs)
        for th in list(threading._active.values()):     # type: ignore[attr-defined]
            if th._ident == me or th._daemonic:
                continue
            handle = getattr(th, "_handle", None)           # 3.13: _ThreadHandle
            if handle is not None and hasattr(handle, "is_done"):
                if not handle.is_done():
                    handle.join()
                    waited = True
                continue
            lock = getattr(th, "_tstate_lock", None)        # 3.11, 3.12
            if lock is not None and lock.locked():
                lock.acquire()
                lock.release()
                waited = True
        if not waited:
            return


def finish_program() -> None:
    """What Py_FinalizeEx does after the body, while the program is still the
    program: join the non-daemon threads (threading._shutdown, which first runs the
    threading atexit hooks such as concurrent.futures'), then the atexit functions.
    Exceptions are reported the way the interpreter reports them."""
    shutdown = getattr(threading, "_shutdown", None)
    try:
        if shutdown is not None and _native_launch is not None:
            # The interpreter's work, not the program's: not traced on this thread
            # (the threads it waits for still are).
            _native_launch.call_untraced(shutdown)
        else:
            _join_threads()
    except BaseException as e:
        _print_exception(e)
    try:
        _call_clean(atexit._run_exitfuncs)
    except BaseException as e:
        _print_exception(e)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
