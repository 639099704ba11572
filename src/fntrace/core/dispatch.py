"""The hot path: what a patched site runs (ftrace_caller, CALL_OPS, ftrace_ops_list_func).

Everything that runs per traced call lives here, in a few small functions, so that a
native twin can mirror it branch by branch.  The control side (core/ops.py) only ever
writes three things that this module reads:

  sites[id(code)]  -> the record of a patched site (absent = nop)
  rec.func, rec.ops -> what the site calls and with which ops (the CALL_OPS slot):
                       (ops.func, ops) for a site with one ops,
                       (ftrace_ops_list_func, list_ops) for a site shared by several
  ftrace_trace_function / function_trace_op -> the single global target used when
                       CALL_OPS is configured off (kernel without WITH_CALL_OPS)

        code object ──PY_START──> on_py_start ──> rec.func(rec, parent, rec.ops, fregs)
                                                       │
                                   ftrace_ops_list_func┘──> each ops whose hash has rec

A callback that raises is contained here: counted on its ops, reported once on stderr,
never raised into the traced program.
"""
from __future__ import annotations

import _signal
import sys
from types import FunctionType, MethodType

TYPE_CHECKING = False
if TYPE_CHECKING:                   # typing is costly to import; only checkers need this
    from collections.abc import Callable
    from types import CodeType, FrameType
    from typing import Any, TypeVar

    from .records import DynFtrace

    # a callback or None, handed back as what it was (in its shell or not)
    _F = TypeVar("_F", bound="Callable[..., Any] | None")

    # a profile function: (frame, event, arg), as sys.setprofile calls it
    ProfileFunc = Callable[[FrameType, str, Any], object]
    # a patched site's call once its record and frame are found (_make_enter)
    Enter = Callable[[DynFtrace, FrameType], None]

from ..printk import pr_warn

from .fetch import caller_frame as _getframe
from .records import _INLINED_COMPREHENSIONS as _INLINED
from .records import FTRACE_FL, ROOT, record_table
from .regs import FtraceRegs

__all__ = [
    "sites", "on_py_start", "on_py_start_global", "profile_hook",
    "ftrace_ops_list_func", "ftrace_stub", "DISPATCH_CODES", "callback_errors", "contain",
    "as_registered", "from_signal_handler", "on_call", "on_c_return", "on_c_raise",
    "c_calls",
]

# id(code) -> record, for patched sites only.
sites: dict[int, DynFtrace] = {}
# id(code) -> code the setprofile back end's discovery trap found not to be a site
# (sys.monitoring has DISABLE for that): looked up before the trap is asked again.
no_site: dict[int, CodeType] = {}
_sites_get = sites.get
_by_code_get = record_table.by_code.get
_sym = record_table.sym
_REGS_EN = int(FTRACE_FL.REGS_EN)
_RET_EN = int(FTRACE_FL.RET_EN)
# FTRACE_OPS_FL.STUB: core/ops.py, above this module, defines its flags with this value.
OPS_FL_STUB = 1 << 5

# The global target of a kernel without CALL_OPS (ftrace.c ftrace_trace_function and
# function_trace_op).  Written by core/ops.update_ftrace_function().
class _Global:
    __slots__ = ("trace_function", "trace_op", "ops_list", "ret_handler", "resume_handler",
                 "trap", "c_calls")
    trace_function: Callable[..., Any] | None
    trace_op: object                # core/ops.py's Ops (a layer above), or None
    ops_list: tuple[Any, ...]       # core/ops.py's Ops (a layer above)
    ret_handler: Callable[..., Any] | None
    resume_handler: Callable[..., Any] | None
    trap: Callable[[Any, Any], bool] | None
    c_calls: bool

    def __init__(self) -> None:
        self.trace_function = None
        self.trace_op = None
        self.ops_list = ()          # registered ops, most recent first
        self.ret_handler = None            # fgraph's return path, when a graph user is on
        self.resume_handler = None         # fgraph's generator-resume path
        self.trap = None                   # trap(code, globals) -> is a site now (arch)
        self.c_calls = False               # C calls of patched sites are traced (--c-calls)


G = _Global()
callback_errors = [0]

# The C shell CPython calls the pure-Python callbacks through, set by the launcher
# (cli/target.py: cli/_launch.c callback_shell): their frames are lent, not taken from
# the program's recursion limit, and what a program's signal handler raised inside
# one is handed to the program where CPython would have run the handler.  None: the
# callbacks are handed to CPython bare (the native hot path's are C already).
callback_shell: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None


def as_registered(func: _F) -> _F:
    """``func`` as the back ends hand it to CPython: in its shell when there is one."""
    sh = callback_shell
    # (the shell calls what it holds: to a caller it is the same callable)
    return func if sh is None or func is None else sh(func)  # type: ignore[return-value]


def forget(table: dict[Any, Any], key: int | None = None) -> None:
    """Remove an entry of ``sites`` or ``record_table.by_code`` (all of them when key is
    None).  The native twin caches lookups by address: a removed entry's address may be
    reused by another object, so its cache is cleared."""
    if key is None:
        table.clear()
        if _native is not None:
            _native.cache_clear()
    elif table.pop(key, None) is not None and _native is not None:
        _native.cache_forget(key)


def _signal_handler_codes() -> set[CodeType]:
    codes = set()
    for s in _signal.valid_signals():
        try:
            h = _signal.getsignal(s)
        except (ValueError, OSError):
            continue
        if type(h) is MethodType:
            h = h.__func__
        if type(h) is FunctionType:
            codes.add(h.__code__)
    return codes


def from_signal_handler(exc: BaseException) -> bool:
    """Was exc raised by a Python signal handler that ran inside the callback?  (Only a
    callback that runs Python code can be interrupted so: the pure-Python hot path, or
    a user's callback.)  Then it is the program's, and goes to the program."""
    tb = exc.__traceback__
    if tb is None:
        return False
    codes = _signal_handler_codes()
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False


def contain(who: Any, exc: BaseException) -> bool:
    """A callback raised (an ops', an fgraph user's, an fprobe's, the discovery
    trap's): count it on ``who`` and in callback_errors, say so once, never let it
    reach the program — unless a signal handler of the program raised it: then True,
    and the caller re-raises it.  The message names ``who`` by its class's
    ``error_label`` ("callback of" without one).  Runs nothing that can fail at the
    thread's recursion limit without being counted."""
    try:
        if from_signal_handler(exc):
            return True
    except RecursionError:
        pass
    callback_errors[0] += 1
    try:
        who.nerrors += 1
        first = who.nerrors == 1
        name = who.name
    except Exception:
        first, name = callback_errors[0] == 1, object.__repr__(who)
    if first:
        try:
            text = str(exc)
        except Exception:
            text = "?"
        what = getattr(type(who), "error_label", "callback of")
        msg = (f"{what} {name} raised {type(exc).__name__}: {text}"
               " (contained; further errors are only counted)")
        # Kept until said: at the thread's recursion limit pr_warn itself may not run,
        # and the end of the recording says it then (unsaid_notices).
        unsaid.append(msg)
        try:
            pr_warn(msg)
            unsaid.remove(msg)
        except RecursionError:
            pass
    return False


# Notices of contained errors that could not be printed when they happened.
unsaid: list[str] = []


def unsaid_notices() -> list[str]:
    """The notices contain() could not print (taken: each is said once)."""
    out = list(unsaid)
    del unsaid[:len(out)]
    return out


def caller_frame(frame: FrameType) -> FrameType | None:
    """The frame that called ``frame``, seen through 3.11's comprehension frames."""
    back = frame.f_back
    while back is not None and back.f_code.co_name in _INLINED and back.f_back is not None:
        back = back.f_back
    return back


def _parent_slow(back: FrameType) -> DynFtrace:
    # 3.11 runs list/dict/set comprehensions in frames of their own; 3.12 inlined them
    # (PEP 709).  The caller is the function around the comprehension on every version.
    while back.f_code.co_name in _INLINED and back.f_back is not None:
        back = back.f_back
        rec = _by_code_get(id(back.f_code))
        if rec is not None:
            return rec
    glb = back.f_globals
    return _sym(back.f_code, glb.get("__name__") if isinstance(glb, dict) else None)


def ftrace_stub(ip: DynFtrace, parent_ip: DynFtrace, op: object, fregs: FtraceRegs | None) -> None:
    """The nop ops' function: what a site that is being turned off may still call."""


def ftrace_ops_list_func(ip: DynFtrace, parent_ip: DynFtrace, op: Any,
                         fregs: FtraceRegs | None) -> None:
    """Call every registered ops whose hash contains this function (ftrace.c
    __ftrace_ops_list_func).  Most recently registered first, like the kernel's list."""
    for op in G.ops_list:
        if op.flags & OPS_FL_STUB:           # placeholder, skip
            continue
        if op.test(ip, fregs):
            try:
                op.func(ip, parent_ip, op, fregs)
            except (Exception, SystemExit) as exc:
                if contain(op, exc):
                    raise


_DISABLE = getattr(getattr(sys, "monitoring", None), "DISABLE", None)


def _miss(code: CodeType) -> DynFtrace | None:
    """A start that found no site: the back end's discovery trap, if it is set, may make
    one (arch/monitoring.py); the record, or what the callback returns (None: a site
    turned off while the event was on its way; DISABLE: not a site, no more calls)."""
    trap = G.trap
    if trap is None:
        return None
    try:
        if not trap(code, _getframe(2).f_globals):
            return _DISABLE
    except (Exception, SystemExit) as exc:
        if contain(trap, exc):
            raise
        return None
    return _sites_get(id(code))


def _make_enter(call_ops: bool) -> Enter:
    """A patched site's call, its record and frame found (both back ends): the caller's
    record, then the callback.  With CALL_OPS the site's record holds its ops, so one
    ops costs the same whatever else is registered; without, every site calls the one
    global target, which is the single registered ops or, as soon as two are
    registered, the list func."""
    g = G

    def enter(rec: DynFtrace, frame: FrameType) -> None:
        back = frame.f_back
        parent: DynFtrace | None
        if back is None:
            parent = ROOT
        else:
            parent = _by_code_get(id(back.f_code))
            if parent is None:
                parent = _parent_slow(back)
        if call_ops:
            op, func = rec.ops, rec.func
        else:
            op, func = g.trace_op, g.trace_function
        try:
            # a site in ``sites`` has its func, and the global target is set while any
            # site is on: neither is None here
            func(rec, parent, op, FtraceRegs(frame, rec, rec.flags & _REGS_EN))  # type: ignore[misc]
        except (Exception, SystemExit) as exc:
            if contain(op, exc):
                raise
    return enter


_enter = _make_enter(True)
_enter_global = _make_enter(False)


def _make_on_py_start(enter: Enter) -> Callable[[CodeType, int], object]:
    """The sys.monitoring PY_START callback."""

    def on_py_start(code: CodeType, offset: int) -> object:
        """sys.monitoring PY_START on a patched site (see _make_enter)."""
        rec = _sites_get(id(code))
        if rec is None:
            rec = _miss(code)
            if rec is None or rec is _DISABLE:
                return rec
        enter(rec, _getframe(1))
        return None
    return on_py_start


on_py_start = _make_on_py_start(_enter)
on_py_start_global = _make_on_py_start(_enter_global)
on_py_start_global.__name__ = on_py_start_global.__qualname__ = "on_py_start_global"


def on_py_return(code: CodeType, offset: int, retval: object) -> None:
    """PY_RETURN / PY_YIELD on a site that reports returns (a graph user is on it)."""
    rec = _sites_get(id(code))
    h = G.ret_handler
    if rec is None or h is None:
        return None
    try:
        h(rec, _getframe(1), retval, False)
    except (Exception, SystemExit) as exc:
        if contain(h, exc):
            raise
    return None


def on_py_resume(code: CodeType, offset: int) -> None:
    """PY_RESUME on a site that reports returns: a generator or coroutine resumed."""
    rec = _sites_get(id(code))
    h = G.resume_handler
    if rec is None or h is None:
        return None
    try:
        h(rec, _getframe(1), rec.flags & _REGS_EN)
    except (Exception, SystemExit) as exc:
        if contain(h, exc):
            raise
    return None


def on_py_throw(code: CodeType, offset: int, exc: BaseException) -> None:
    """PY_THROW (global only): a generator resumed by throw()."""
    rec = _sites_get(id(code))
    h = G.resume_handler
    if rec is None or h is None or not rec.flags & _RET_EN:
        return None
    try:
        h(rec, _getframe(1), rec.flags & _REGS_EN)
    except (Exception, SystemExit) as e:
        if contain(h, e):
            raise
    return None


def on_py_unwind(code: CodeType, offset: int, exc: BaseException) -> None:
    """PY_UNWIND (global only): an exception leaves a frame."""
    rec = _sites_get(id(code))
    h = G.ret_handler
    if rec is None or h is None or not rec.flags & _RET_EN:
        return None
    try:
        h(rec, _getframe(1), exc, True)
    except (Exception, SystemExit) as e:
        if contain(h, e):
            raise
    return None


# -- C calls (--c-calls) ----------------------------------------------------------------
#
#   traced Python function (a patched site, CALL on)      C function (no code object)
#   ──CALL(code, offset, callable, arg0)──> on_call ──> rec = c_calls[key] ──> rec.func(...)
#   ──C_RETURN / C_RAISE ─────────────────> on_c_return ──> G.ret_handler (fgraph)
#
# A C function's record is made at its first call from a traced function (records.c_sym)
# and then is a function like any other: the ops' filters decide whether it is traced,
# and its site is "patched" when rec.func is set.  Its call has no frame: the callable
# object stands for one in FtraceRegs.frame, the identity the shadow stack matches its
# return by (the same object at C_RETURN; nested calls of it return innermost first).
#
# c_calls: key -> record.  The key is the PyMethodDef in the native twin (one for a
# method however it is reached); here, the callable itself where it lives as long as
# what defines it (a module's function, a type's method descriptor), else its name.
c_calls: dict[object, DynFtrace] = {}
_c_sym = record_table.c_sym
_BUILTIN = type(len)
_METHOD_DESCR = type(str.join)
_ModuleType = type(sys)


def _c_rec(func: Any) -> DynFtrace | None:
    t = type(func)
    if t is _METHOD_DESCR or (t is _BUILTIN and (func.__self__ is None
                                                  or type(func.__self__) is _ModuleType)):
        rec = c_calls.get(func)
        if rec is None:
            rec = _c_sym(func)
            if rec is None:
                return None
            c_calls[func] = rec
        return rec
    if not isinstance(func, _BUILTIN):
        return None
    return _c_sym(func)          # a bound method: named each time (a new object each time)


def on_call(code: CodeType, offset: int, func: Any, arg0: object) -> None:
    """sys.monitoring CALL in a patched site's code (--c-calls): a C function called
    from a traced function is traced as its leaf."""
    if not G.c_calls:
        return None
    t = type(func)
    if t is not _BUILTIN and t is not _METHOD_DESCR and not isinstance(func, _BUILTIN):
        return None                  # Python functions report themselves (PY_START)
    _c_entry(code, func)
    return None


def _c_entry(code: CodeType, func: Any) -> None:
    """``code`` (a patched site's, or not) calls the C function ``func``."""
    caller = _sites_get(id(code))
    if caller is None:
        return
    rec = _c_rec(func)
    if rec is None or rec.func is None:
        return
    op, fn = rec.ops, rec.func
    try:
        fn(rec, caller, op, FtraceRegs(func, rec, False))
    except (Exception, SystemExit) as exc:
        if contain(op, exc):
            raise


def _c_return(func: Any, unwind: bool) -> None:
    h = G.ret_handler
    if h is None:
        return
    t = type(func)
    if t is not _BUILTIN and t is not _METHOD_DESCR and not isinstance(func, _BUILTIN):
        return
    rec = _c_rec(func)
    if rec is None or rec.func is None:
        return
    try:
        h(rec, func, None, unwind)
    except (Exception, SystemExit) as exc:
        if contain(h, exc):
            raise


def on_c_return(code: CodeType, offset: int, func: Any, arg0: object) -> None:
    """sys.monitoring C_RETURN (where CALL is on): the C call's return (its value is
    not reported)."""
    _c_return(func, False)


def on_c_raise(code: CodeType, offset: int, func: Any, arg0: object) -> None:
    """sys.monitoring C_RAISE: the C call ended by an exception (not reported either)."""
    _c_return(func, True)


def _profile_c_call(frame: FrameType, func: Any) -> None:
    """setprofile 'c_call' (3.11): the profile hook is handed a bound method for a
    method descriptor, as cProfile is."""
    _c_entry(frame.f_code, func)


_ret_offs: dict[int, tuple[CodeType, frozenset[int]]] = {}


def _scan(code: CodeType, yields_only: bool) -> frozenset[int]:
    """The offsets of the returns and yields and of every RESUME with an argument (or,
    ``yields_only``, of the yields) in ``code``'s bytecode.  co_code is the unspecialised
    bytecode, 2-byte code units whose inline caches are CACHE (opcode 0) units: read
    directly, not through dis.get_instructions, which builds an Instruction with names and
    positions for each one (enabling function_graph over 14,000 functions on 3.11 spent
    2.7 s there)."""
    extended_arg, resume, return_ops, yield_ops = _opcodes()
    ops = yield_ops if yields_only else return_ops
    resume_after_yield = not yields_only
    raw = code.co_code
    found = []
    arg = 0
    for i in range(0, len(raw), 2):
        op = raw[i]
        if op == extended_arg:
            arg = (arg | raw[i + 1]) << 8
            continue
        if op in ops or (resume_after_yield and op == resume and (arg | raw[i + 1])):
            found.append(i)
        arg = 0
    return frozenset(found)


_OPCODES: list[tuple[int, int, frozenset[int], frozenset[int]]] = []


def _opcodes() -> tuple[int, int, frozenset[int], frozenset[int]]:
    """EXTENDED_ARG, RESUME, the return ops and the yield ops, found at the first scan:
    only the setprofile back end (3.11) scans, and importing opcode is 2 M instructions
    of every recording's start-up on 3.12."""
    if not _OPCODES:
        import opcode
        m = opcode.opmap
        _OPCODES.append((m["EXTENDED_ARG"], m["RESUME"],
                         frozenset(m[n] for n in ("RETURN_VALUE", "RETURN_CONST", "YIELD_VALUE")
                                   if n in m),
                         frozenset((m["YIELD_VALUE"],))))
    return _OPCODES[0]


def _return_offsets(code: CodeType) -> frozenset[int]:
    """Offsets where a frame stops normally: returns, yields, and (3.13) the RESUME after
    a yield, where f_lasti points once the frame is suspended (coverage.py's
    lasti_is_yield quirk, python/cpython#113728)."""
    ent = _ret_offs.get(id(code))
    if ent is None or ent[0] is not code:
        ent = _ret_offs[id(code)] = (code, _scan(code, False))
    return ent[1]


_throw_at: dict[int, int] = {}     # id(frame) -> f_lasti of a generator resumed by throw() (3.11)


def _yield_offsets(code: CodeType) -> frozenset[int]:
    ent = _yield_offs.get(id(code))
    if ent is None or ent[0] is not code:
        ent = _yield_offs[id(code)] = (code, _scan(code, True))
    return ent[1]


_yield_offs: dict[int, tuple[CodeType, frozenset[int]]] = {}
return_offsets = _return_offsets
yield_offsets = _yield_offsets


def _profile_resume(rec: DynFtrace, frame: FrameType) -> None:
    """setprofile 'call' of a generator that is resuming, not starting (3.11 reports
    both as 'call').  Only a graph user sees it, as a call of its own."""
    h = G.resume_handler
    if h is None or not rec.flags & _RET_EN:
        return
    if frame.f_lasti in _yield_offsets(frame.f_code):
        # Resumed by throw(): a plain resume continues after the yield, a throw at it.
        _throw_at[id(frame)] = frame.f_lasti
    try:
        h(rec, frame, rec.flags & _REGS_EN)
    except (Exception, SystemExit) as exc:
        if contain(h, exc):
            raise


def _profile_return(rec: DynFtrace, frame: FrameType, arg: Any) -> None:
    """setprofile 'return': a return, a yield, or an exception leaving the frame — which
    setprofile reports as a 'return' of None.  The last instruction tells them apart;
    a generator thrown into that lets the exception out is still at its yield."""
    h = G.ret_handler
    if h is None or not rec.flags & _RET_EN:
        return
    lasti = frame.f_lasti
    unwind = lasti not in _return_offsets(frame.f_code)
    if _throw_at and _throw_at.pop(id(frame), -1) == lasti and arg is None:
        unwind = True
    try:
        if unwind:
            h(rec, frame, sys.exc_info()[1], True)
        else:
            h(rec, frame, arg, False)
    except (Exception, SystemExit) as exc:
        if contain(h, exc):
            raise


def _profile_miss(frame: FrameType) -> DynFtrace | None:
    """A call that found no site while the discovery trap is set (arch/profile.py)."""
    trap = G.trap
    try:
        if trap is None or not trap(frame.f_code, frame.f_globals):
            return None
    except (Exception, SystemExit) as exc:
        if contain(trap, exc):
            raise
        return None
    return _sites_get(id(frame.f_code))


# thread ident -> the program's own profile function (arch/profile.py): 3.11 has one
# profile function per thread, so fntrace's hook calls the program's after each event.
profile_chain: dict[int, ProfileFunc] = {}
# idents whose function was installed during the sys.setprofile call now ending: CPython
# tells a profile function installed inside a C call nothing of that call's end.
profile_chain_skip: set[int] = set()
_get_ident: Callable[[], int] = __import__("_thread").get_ident


def _chain(frame: FrameType, event: str, arg: Any) -> None:
    ident = _get_ident()
    if profile_chain_skip and event in ("c_return", "c_exception") and ident in profile_chain_skip:
        profile_chain_skip.discard(ident)
        return
    f = profile_chain.get(ident)
    if f is not None:
        try:
            f(frame, event, arg)
        except BaseException:
            # as CPython does: a profile function that raises is removed
            profile_chain.pop(_get_ident(), None)
            raise


def _make_profile_hook(enter: Enter) -> Callable[[FrameType, str, Any], None]:
    """The setprofile hook (3.11 back end): every call reaches it and it tests the
    record, like a kernel without DYNAMIC_FTRACE where every mcount call runs."""
    g = G

    def profile_hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            rec = _sites_get(id(frame.f_code))
            if rec is None:
                if g.trap is None or id(frame.f_code) in no_site:
                    return
                rec = _profile_miss(frame)
                if rec is None:
                    return
            if rec.gen_start >= 0 and frame.f_lasti != rec.gen_start:
                _profile_resume(rec, frame)
                return
            enter(rec, frame)
        elif event == "return":
            if g.ret_handler is None:
                return
            rec = _sites_get(id(frame.f_code))
            if rec is not None:
                _profile_return(rec, frame, arg)
        elif g.c_calls:
            if event == "c_call":
                _profile_c_call(frame, arg)
            elif event == "c_return" or event == "c_exception":
                if _sites_get(id(frame.f_code)) is not None:
                    _c_return(arg, event == "c_exception")
    return profile_hook


profile_hook = _make_profile_hook(_enter)
profile_hook_global = _make_profile_hook(_enter_global)


def chained(hook: ProfileFunc) -> Callable[[FrameType, str, Any], None]:
    """The hook for a thread whose program set its own profile function: fntrace's
    handling, then the program's function (the native hook consults profile_chain
    itself)."""
    def profile_hook_chained(frame: FrameType, event: str, arg: Any) -> None:
        hook(frame, event, arg)
        if profile_chain:
            _chain(frame, event, arg)
    return profile_hook_chained

# Code objects of the dispatcher: a thread with one of these on its stack is inside a
# callback (used by ops.synchronize(), the RCU grace period of unregister).
DISPATCH_CODES = {f.__code__ for f in (on_py_start, on_py_start_global, _enter, _miss, on_py_return,
                                        on_py_unwind, on_py_resume, on_py_throw, profile_hook,
                                        ftrace_ops_list_func, _profile_resume, _profile_return,
                                        _profile_miss, on_call, on_c_return, on_c_raise,
                                        _c_return, _c_rec, _c_entry, _profile_c_call)}


# -- the native twin -------------------------------------------------------------------
# fntrace._native mirrors the functions above; when it is built (and FNTRACE_PURE is not
# set) they are replaced by it.  It reads the same tables and the same record slots.
from .. import _env as _env  # noqa: E402

# (_env is outside the strict modules: its functions are not annotated)
_native = _env.native()  # type: ignore[no-untyped-call, unused-ignore]


def attach_native(ops_type: type) -> None:
    """Swap in the native twin.  Called by core/ops.py, which defines the ops type whose
    slots the twin reads: the layer above hands its type down instead of this module
    importing it (the trace array's layout comes the same way, from trace_array.py)."""
    if _native is None:
        return
    from .records import DynFtrace
    from .regs import _NO_RETVAL
    _native.init({
        "sites": sites, "by_code": record_table.by_code, "no_site": no_site, "ROOT": ROOT,
        "profile_chain": profile_chain, "profile_chain_skip": profile_chain_skip,
        "G": G,
        "contain": contain, "parent_slow": _parent_slow, "return_offsets": _return_offsets,
        "profile_resume": _profile_resume, "profile_return": _profile_return,
        "NO_RETVAL": _NO_RETVAL, "FtraceRegs": FtraceRegs, "DynFtrace": DynFtrace,
        "Global": _Global, "Ops": ops_type,
        "REGS_EN": _REGS_EN, "RET_EN": _RET_EN, "DISABLE": _DISABLE,
        "callback_errors": callback_errors, "c_calls": c_calls, "c_sym": _c_sym,
    })
    g = globals()
    for name in ("on_py_start", "on_py_start_global", "on_py_return", "on_py_unwind",
                 "on_py_resume", "on_py_throw", "on_call", "on_c_return", "on_c_raise"):
        g[name] = getattr(_native, name)
    hook, hook_global = _native.ProfileHook(), _native.ProfileHook()
    hook.call_ops, hook_global.call_ops = 1, 0
    g["profile_hook"], g["profile_hook_global"] = hook, hook_global


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
