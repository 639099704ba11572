"""The flight recorder: tracing always on into overwrite buffers, nothing written until
something goes wrong, then the last calls of every thread saved as a trace file.

    import fntrace
    fntrace.flight_recorder("myapp.*", size_kb=2048,
                            dump_on=["exception", "signal:SIGUSR2", "slow:myapp.handle>200"])

The kernel's way of debugging what cannot be reproduced (a ring buffer in overwrite mode
and ``snapshot``), made one thing.  An instance of its own (a TraceSession) runs the
function_graph tracer over the filter; each thread's buffer keeps its newest records in
``size_kb`` (overwrite mode: the memory stays the same however long the program runs).
A dump writes what the buffers hold then (trace_save.py, the format every reader reads),
with the reason and, for an exception, its traceback as markers at the end of the
thread's records, and says where on stderr, one line; the program goes on, or ends as
it would have.

When (``dump_on``; each is checked before anything starts, a bad one refused with its
place):

    exception          an uncaught exception in any thread, before the program's own
                       hook prints it (sys.excepthook and threading.excepthook are
                       chained: a hook the program sets afterwards replaces fntrace's),
                       and what asyncio hands its loop's exception handler (a Task's
                       exception never retrieved)
    exception:TYPE     any raise of TYPE (module.Class outside builtins), caught or not:
                       the exceptions:raise event with a snapshot trigger
    SYS:EVENT [if F]   any event of the instance, with an optional filter (the
                       kernel's trigger grammar: the snapshot trigger dumps)
    signal:NAME        the signal NAME (SIGUSR2): fntrace's handler dumps and calls the
                       one it replaced unless that was the default (which would end the
                       program) or ignore
    slow:FUNC>MS       a call of FUNC that took longer than MS milliseconds
    exit:nonzero       the program ends with a non-zero status (fntrace record only)

``max_dumps`` (default 10) bounds the files a storm of triggers can write; the dumps not
written are counted and said when the recorder stops.
"""
from __future__ import annotations

import os
import re
import signal as _signal
import sys
import threading
import time
import traceback
from collections.abc import Iterable

from .core.ops import (Ops, ftrace_set_filter, register_ftrace_function,
                       unregister_ftrace_function)
from .errors import UsageError
from .fgraph import FgraphOps, register_ftrace_graph, unregister_ftrace_graph
from .session import TraceSession

__all__ = ["FlightRecorder", "flight_recorder", "parse_dump_on", "register_flight_file"]

MAX_DUMPS = 10
_ASYNCIO_HANDLER = "asyncio.base_events.BaseEventLoop.call_exception_handler"
_SLOW = re.compile(r"slow:(?P<func>[^>\s]+)>(?P<ms>\d+(?:\.\d+)?)$")
_EVENT = re.compile(r"(?P<sys>[A-Za-z_][\w]*):(?P<event>[A-Za-z_][\w]*)(?:\s+if\s+(?P<flt>.+))?$")


def _refuse(spec: str, pos: int, why: str) -> UsageError:
    return UsageError(f"--dump-on {why}\n  {spec}\n  {' ' * pos}^")


def parse_dump_on(spec: str) -> tuple:
    """One ``dump_on`` word as (kind, ...); UsageError with a caret when it is not one."""
    s = spec.strip()
    if s == "exception":
        return ("exception",)
    if s.startswith("exception:"):
        t = s[len("exception:"):]
        if not re.fullmatch(r"[A-Za-z_][\w.]*", t):
            raise _refuse(spec, len("exception:"), "exception:TYPE needs an exception class name")
        return ("event", "exceptions", "raise", f'type == "{t}"', s)
    if s.startswith("signal:"):
        name = s[len("signal:"):]
        sig = getattr(_signal, name if name.startswith("SIG") else "SIG" + name, None)
        if not isinstance(sig, _signal.Signals):
            raise _refuse(spec, len("signal:"), f"no such signal {name!r}")
        if sig in (_signal.SIGKILL, _signal.SIGSTOP):
            raise _refuse(spec, len("signal:"), f"{sig.name} cannot be caught")
        return ("signal", sig)
    if s.startswith("slow:"):
        m = _SLOW.match(s)
        if m is None:
            raise _refuse(spec, len("slow:"), "slow:FUNC>MS wants a function and milliseconds, "
                                              "as slow:myapp.handle>200")
        return ("slow", m.group("func"), float(m.group("ms")))
    if s.startswith("exit:"):
        if s != "exit:nonzero":
            raise _refuse(spec, len("exit:"), "exit: takes nonzero")
        return ("exit",)
    m = _EVENT.match(s)
    if m is not None:
        return ("event", m.group("sys"), m.group("event"), m.group("flt"), s)
    raise _refuse(spec, 0, "wants exception, exception:TYPE, SYS:EVENT [if FILTER], "
                           "signal:NAME or slow:FUNC>MS")


def _slug(reason: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", reason).strip("_")[:60] or "dump"


class FlightRecorder:
    """See the module docstring; ``start()``, ``dump(reason)``, ``stop()``."""

    def __init__(self, filter: str | Iterable[str] | None = None,
                 notrace: str | Iterable[str] | None = None, *, size_kb: int = 4096,
                 dump_on: Iterable[str] = ("exception",), directory: str = ".",
                 max_dumps: int = MAX_DUMPS, tracer: str = "function_graph",
                 args: bool = False, c_calls: bool = False, cli: bool = False) -> None:
        self.triggers = [parse_dump_on(w) for w in dump_on]
        if ("exit",) in self.triggers and not cli:
            raise UsageError("--dump-on exit:nonzero is fntrace record's (the program's "
                             "exit status is known there)")
        if not self.triggers:
            raise UsageError("the flight recorder needs at least one --dump-on")
        if (any(t[0] == "signal" for t in self.triggers)
                and threading.current_thread() is not threading.main_thread()):
            raise UsageError("signal: triggers are set from the program's main thread (a "
                             "signal handler can be set nowhere else); from another shell, "
                             "write dump to flight_recorder for a dump now")
        if max_dumps < 1:
            raise UsageError(f"--max-dumps {max_dumps}: at least 1")
        self.directory = os.path.abspath(directory)
        self.max_dumps = max_dumps
        self.size_kb = size_kb
        self.dump_on = [str(w) for w in dump_on]
        self.dumps: list[str] = []
        self.skipped = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._busy = threading.local()
        options = {"funcgraph-args": bool(args), "func-c-calls": bool(c_calls)}
        # (a service starts it before it imports its modules: the filter waits for them)
        self.session = TraceSession(filter, notrace, tracer=tracer, buffer_size_kb=size_kb,
                                    overwrite=True, options=options, pending=True)
        self.fs = self.session.fs
        self._undo: list = []
        self.active = False
        # Checked now, before the program runs: the events and their filters, the slow
        # function's filter.
        for t in self.triggers:
            if t[0] == "event":
                self._event_trigger(t[1], t[2], t[3], check_only=True)

    # -- the triggers ---------------------------------------------------------------------
    def _event_trigger(self, system: str, event: str, flt: str | None,
                       check_only: bool = False) -> None:
        base = f"events/{system}/{event}"
        trig = "snapshot" + (f" if {flt}" if flt else "")
        self.fs.write(f"{base}/trigger", trig)
        if check_only:
            self.fs.write(f"{base}/trigger", "!snapshot")
            return
        self.fs.write(f"{base}/enable", "1")

        def undo() -> None:
            self.fs.write(f"{base}/enable", "0")
            self.fs.write(f"{base}/trigger", "!snapshot")
        self._undo.append(undo)

    def _install(self) -> None:
        tr = self.session.tr
        # the snapshot trigger of the instance's events dumps
        reasons = {t[1:3]: t[4] for t in self.triggers if t[0] == "event"}

        def on_snapshot() -> None:
            self.dump(next(iter(reasons.values())) if len(reasons) == 1 else "event")
        tr.snapshot_hook = on_snapshot
        for t in self.triggers:
            kind = t[0]
            if kind == "exception":
                self._hook_exceptions()
            elif kind == "event":
                self._event_trigger(t[1], t[2], t[3])
            elif kind == "signal":
                self._hook_signal(t[1])
            elif kind == "slow":
                self._watch_slow(t[1], t[2])

    def _hook_exceptions(self) -> None:
        prev_sys, prev_thr = sys.excepthook, threading.excepthook

        # (the traceback is formatted inside the dump: what that raises -- linecache's
        # own KeyErrors -- must not fire the recorder's other triggers)
        def excepthook(tp, value, tb):
            self.dump(f"exception {tp.__name__}",
                      lambda: "".join(traceback.format_exception(tp, value, tb)))
            prev_sys(tp, value, tb)

        def thread_excepthook(a):
            if a.exc_type is not SystemExit:
                name = a.thread.name if a.thread is not None else "?"
                self.dump(f"exception {a.exc_type.__name__} in {name}",
                          lambda: "".join(traceback.format_exception(
                              a.exc_type, a.exc_value, a.exc_traceback)))
            prev_thr(a)
        sys.excepthook, threading.excepthook = excepthook, thread_excepthook

        def undo():
            if sys.excepthook is excepthook:
                sys.excepthook = prev_sys
            if threading.excepthook is thread_excepthook:
                threading.excepthook = prev_thr
        self._undo.append(undo)
        self._hook_asyncio()

    def _hook_asyncio(self) -> None:
        """asyncio hands what no one awaited (a Task's exception never retrieved, a
        callback's) to the loop's call_exception_handler, which calls the program's
        handler or logs it: an ops of the recorder's own on that method (a pattern
        kept for when asyncio is imported) dumps at its entry, before either."""
        def on_handler(ip, parent_ip, op, fregs) -> None:
            try:
                context = fregs.arg("context")
            except KeyError:
                return
            if type(context) is not dict:
                return
            exc = context.get("exception")
            msg = context.get("message")
            what = type(exc).__name__ if isinstance(exc, BaseException) else "error"

            def detail() -> str:
                head = f"asyncio: {msg}\n" if type(msg) is str else ""
                if isinstance(exc, BaseException):
                    return head + "".join(traceback.format_exception(
                        type(exc), exc, exc.__traceback__))
                return head
            self.dump(f"exception {what} in asyncio", detail)
        ops = Ops(on_handler, name="flight-recorder-asyncio")
        ftrace_set_filter(ops, _ASYNCIO_HANDLER, keep_unmatched=True)
        register_ftrace_function(ops)
        self._undo.append(lambda: unregister_ftrace_function(ops))

    def _hook_signal(self, sig) -> None:
        prev = _signal.getsignal(sig)

        def handler(signum, frame):
            self.dump(f"signal {sig.name}")
            if callable(prev):
                prev(signum, frame)
        _signal.signal(sig, handler)

        def undo():
            if _signal.getsignal(sig) is handler:
                _signal.signal(sig, prev)
        self._undo.append(undo)

    def _watch_slow(self, func: str, ms: float) -> None:
        limit = int(ms * 1_000_000)

        def entry(trace, gops, fregs) -> bool:
            return True

        def ret(trace, gops, fregs) -> None:
            took = trace.rettime - trace.calltime
            if took > limit:
                self.dump(f"slow {trace.func.name} {took / 1e6:.1f}ms>{ms:g}ms")
        gops = FgraphOps(entry, ret, name="flight-recorder-slow")
        # (FUNC's module may be imported later, as the filter's)
        ftrace_set_filter(gops.ops, func, keep_unmatched=True)
        register_ftrace_graph(gops)
        self._undo.append(lambda: unregister_ftrace_graph(gops))

    # -- running ---------------------------------------------------------------------------
    def start(self) -> "FlightRecorder":
        if self.active:
            return self
        self.session.start()
        try:
            self._install()
        except BaseException:
            self.stop()
            raise
        self.active = True
        return self

    def stop(self) -> None:
        for undo in reversed(self._undo):
            try:
                undo()
            except Exception:
                pass
        self._undo.clear()
        self.session.tr.__dict__.pop("snapshot_hook", None)
        if self.session.active:
            self.session.stop()
        if self.active and self.skipped:
            sys.stderr.write(f"fntrace: flight recorder: {self.skipped} more dump"
                             f"{'s' if self.skipped != 1 else ''} not written "
                             f"(--max-dumps {self.max_dumps})\n")
        self.active = False

    def dump(self, reason: str, detail=None) -> str | None:
        """Write what the buffers hold now, named after the pid, the time and ``reason``
        (``detail``: text, or a function giving it, written as markers after the
        reason); the path, or None when max_dumps were written already (counted) or
        writing failed (said on stderr, counted).  Never raises into the program."""
        if getattr(self._busy, "on", False):
            return None                 # a trigger fired by the dump itself
        self._busy.on = True
        try:
            with self._lock:
                if len(self.dumps) >= self.max_dumps:
                    self.skipped += 1
                    return None
                stamp = time.strftime("%Y%m%dT%H%M%S")
                base = os.path.join(self.directory,
                                    f"fntrace-{os.getpid()}-{stamp}-{_slug(reason)}")
                path, n = base + ".dat", 1
                while os.path.exists(path) or path in self.dumps:
                    n += 1
                    path = f"{base}-{n}.dat"
                try:
                    if callable(detail):
                        detail = detail()
                    self.fs.write("trace_marker", f"flight recorder: {reason}")
                    for line in (detail or "").splitlines():
                        self.fs.write("trace_marker", line)
                    self.session.save(path, {"flight_recorder": reason})
                except Exception as e:
                    self.failed += 1
                    sys.stderr.write(f"fntrace: flight recorder: cannot write {path}: "
                                     f"{type(e).__name__}: {e}\n")
                    return None
                self.dumps.append(path)
            try:
                shown = os.path.relpath(path)
            except ValueError:
                shown = path
            shown = path if shown.startswith("..") else shown
            sys.stderr.write(f"fntrace: flight recorder ({reason}): {shown}\n")
            return path
        finally:
            self._busy.on = False

    def __enter__(self) -> "FlightRecorder":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the tracefs file: a served or attached program's recorder, from another shell -----
#
#   fntrace ctl PID flight_recorder 'size=4096 dump_on=exception dump_on=signal:SIGUSR2 filter=app.*'
#   fntrace ctl PID flight_recorder            # what it does, the dumps written so far
#   fntrace ctl PID flight_recorder dump       # a dump now
#   fntrace ctl PID flight_recorder 0          # stop
#
# Words are key=value: size (KB per thread, default 4096), dump_on (repeatable; default
# exception), filter and notrace (repeatable), dir (default: the program's working
# directory), max_dumps, tracer.  exit:nonzero is fntrace record's, and signal: the
# program's main thread's (a handler is set nowhere else): not here.

_KEYS = ("size", "dump_on", "filter", "notrace", "dir", "max_dumps", "tracer")


def _parse_file_words(text: str) -> dict:
    out: dict = {"dump_on": [], "filter": [], "notrace": []}
    for m in re.finditer(r"\S+", text):
        word, pos = m.group(), m.start()
        key, eq, value = word.partition("=")
        if not eq or key not in _KEYS or not value:
            raise UsageError(f"'{word}': words are {', '.join(k + '=' for k in _KEYS)}",
                             pos=pos, command=text)
        if key in ("dump_on", "filter", "notrace"):
            if key == "dump_on":
                try:
                    parse_dump_on(value)
                except UsageError as e:
                    raise UsageError(e.msg.splitlines()[0], pos=pos + len("dump_on="),
                                     command=text) from None
            out[key].append((value, pos))
        else:
            if key in ("size", "max_dumps") and not (value.isdigit() and int(value) > 0):
                raise UsageError(f"'{word}': a positive number", pos=pos + len(key) + 1,
                                 command=text)
            out[key] = value
    return out


def register_flight_file(fs) -> None:
    """The ``flight_recorder`` file of a served tracefs (``fntrace.serve()``,
    ``record --serve``, an attached program): start, read and stop a recorder in the
    program from another shell, through ``ctl`` or the mount."""
    if "flight_recorder" in fs._files:
        return
    state: dict = {"rec": None}

    def read() -> str:
        rec = state["rec"]
        if rec is None or not rec.active:
            return "0\n"
        lines = [f"size={rec.size_kb} max_dumps={rec.max_dumps} dir={rec.directory}",
                 *(f"dump_on={w}" for w in rec.dump_on),
                 f"dumps={len(rec.dumps)} skipped={rec.skipped}", *rec.dumps]
        return "".join(line + "\n" for line in lines)

    def write(data: str, append: bool) -> None:
        text = data.strip()
        rec = state["rec"]
        if text in ("0", ""):
            if rec is not None:
                rec.stop()
                state["rec"] = None
            return
        try:
            if text == "dump":
                # on demand, from another shell (what signal: does in the program)
                if rec is None or not rec.active:
                    raise UsageError("no flight recorder runs", pos=0, command=text)
                rec.dump("requested")
                return
            if rec is not None and rec.active:
                raise UsageError("a flight recorder runs: write 0 first", pos=0,
                                 command=text)
            w = _parse_file_words(text)
            state["rec"] = FlightRecorder(
                [v for v, _ in w["filter"]] or None, [v for v, _ in w["notrace"]] or None,
                size_kb=int(w.get("size", 4096)),
                dump_on=[v for v, _ in w["dump_on"]] or ["exception"],
                directory=w.get("dir", "."), max_dumps=int(w.get("max_dumps", MAX_DUMPS)),
                tracer=w.get("tracer", "function_graph")).start()
        except UsageError as e:
            fs.error_log.add("flight_recorder", e.msg.splitlines()[0], text, e.pos or 0)
            raise
    fs._files["flight_recorder"] = (read, write)


def flight_recorder(filter: str | Iterable[str] | None = None, *,
                    size_kb: int = 4096, dump_on: Iterable[str] = ("exception",),
                    directory: str = ".", max_dumps: int = MAX_DUMPS, **kw) -> FlightRecorder:
    """Start a flight recorder for this process (a service's entry point calls it once)
    and return it; ``stop()`` ends it.  See the module docstring."""
    return FlightRecorder(filter, size_kb=size_kb, dump_on=dump_on, directory=directory,
                          max_dumps=max_dumps, **kw).start()


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
