"""tracefs in the process: the kernel's file names, write grammar and read strings.

    fs = tracefs()                      # the top-level instance
    fs.write("set_ftrace_filter", "json.*")
    fs.write("current_tracer", "function")
    print(fs.read("trace"))

``write(path, data, append=False)`` is ``echo data > path`` (``>>`` with append): the
whole write is applied when the "file is closed", and a write that fails changes nothing,
raises FntraceError with the kernel's errno, and — for parse errors — leaves an entry in
``error_log`` with a caret under the position where it went wrong.

The top level has ``instances/`` (trace.c instance_mkdir/instance_rmdir):

    fs.mkdir("instances/foo")           # its own TraceArray: tracer, filters, options,
    fs.write("instances/foo/current_tracer", "function")   # events, clock, buffers,
    fs.read("instances/foo/trace")      # error_log
    fs.rmdir("instances/foo")           # tracer and events off first; EBUSY while a
                                        # trace_pipe reader of it is open

Every ``instances/NAME/...`` path is routed to that instance's Tracefs.  Files only the
top level has (as in the kernel): README, instances, saved_cmdlines(_size),
available_filter_functions(_addrs), enabled_functions, touched_functions,
dyn_ftrace_total_info, dynamic_events, available_events.
"""
from __future__ import annotations

import errno
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from ..errors import FntraceError
from ..events.core import add_event_source
from ..output.trace_options import parse_trace_options
from ..trace_array import TraceArray
from .buffer_files import PER_THREAD_FILES, per_thread_path, register_buffer_files, thread_buffers
from .dynamic_events import register_dynamic_events
from .ftrace_files import register_ftrace_files
from .options import register_options
from .pid_filter import register_pid_filter
from .readme import README
from .trace_events import EVENT_LEAVES, _w_trigger, event_path, register_trace_events
from .trace_files import register_trace_files, tracer_class
from .trace_stack import register_stack_tracer
from .trace_stat import register_function_profiler, stat_names, stat_path
from .values import errno_error as _err

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..tracers.function_cmds import FunctionCommands
    from .trace_pipe import PipeReader

__all__ = ["Tracefs", "tracefs", "ErrorLog", "parse_trace_options"]


ERROR_LOG_MAX = 8
# tracefs takes any name a directory can have (NAME_MAX bytes)
NAME_MAX = 255


class ErrorLog:
    """error_log: the last 8 failed commands, each with its caret line."""

    def __init__(self) -> None:
        self.entries: deque[str] = deque(maxlen=ERROR_LOG_MAX)
        self.lock = threading.Lock()

    def add(self, location: str, msg: str, command: str, pos: int) -> None:
        t = time.monotonic_ns() // 1000
        secs, usecs = divmod(t, 1_000_000)
        pos = max(0, min(pos, len(command)))
        # "  Command: " is 11 characters; the caret sits under the offending character.
        text = (f"[{secs:5d}.{usecs:06d}] {location}: error: {msg}\n"
                f"  Command: {command}\n"
                f"{' ' * (11 + pos)}^\n")
        with self.lock:
            self.entries.append(text)

    def read(self) -> str:
        with self.lock:
            return "".join(self.entries)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


class Tracefs:
    """One directory of the tree (the top level, or an instance)."""

    # the GLOB:CMD words of set_ftrace_filter (ftrace_files.py sets it)
    func_cmds: FunctionCommands

    def __init__(self, tr: TraceArray | None = None, *, top: bool = True):
        self.tr = tr if tr is not None else TraceArray()
        self.top = top
        self.error_log = ErrorLog()
        # instances/: name -> Tracefs (top level only).  The lock orders mkdir, rmdir
        # and the look-ups that route a path to an instance (trace_types_lock).
        self.instances: dict[str, Tracefs] = {}
        self._instances_lock = threading.RLock()
        # Open files of this directory that keep it from being removed (tr->ref):
        # trace_pipe readers, and any file a door holds open (trace_array_get/put).
        self._refs = 0
        self._refs_lock = threading.Lock()
        self._write_lock = threading.RLock()
        self.removed = False
        # Run by rmdir before the instance goes, each given this Tracefs: mechanisms
        # that keep state for an instance outside it (function commands, pid lists)
        # drop it here.
        self.teardown_hooks: list[Callable[[Tracefs], None]] = []
        # A filter pattern that matches no loaded function is kept for modules loaded
        # later instead of refused (fntrace record: the program has not run yet).
        self.keep_unmatched = False
        # The events the last dynamic_events write defined (the control path enables
        # them through their events/GRP/EVENT/ files).
        self.last_created_events: list = []
        self._files: dict[str, tuple[Callable[[], str] | None, Callable[[str, bool], None] | None]] = {
            "error_log": (self.error_log.read, lambda d, a: self.error_log.clear()),
        }
        # available_tracers, current_tracer, tracing_on, trace, trace_pipe,
        # trace_marker, trace_clock; the top level's saved_cmdlines(_size)
        register_trace_files(self)
        # set_event, the top level's available_events; events/ is routed below
        register_trace_events(self)
        # buffer_size_kb, buffer_total_size_kb, snapshot; per_thread/ is routed below
        register_buffer_files(self)
        if top:
            self._files["README"] = (lambda: README, None)
        # set_ftrace_pid, set_event_pid (and notrace), set_*_comm, tracing_cpumask
        register_pid_filter(self)
        # trace_options and options/NAME
        register_options(self)
        # Other mechanisms add their files below, one line each
        # (``module.add_files(self)``, reading ``self.top`` for top-level-only files):
        # ``self._files[path] = (read() -> str | None, write(data, append) | None)``,
        # and ``self.teardown_hooks.append(fn)`` for state to drop at rmdir.
        # set_ftrace_filter/notrace, set_graph_function/notrace, max_graph_depth,
        # tracing_thresh; the top level's available_filter_functions(_addrs),
        # enabled_functions, touched_functions, dyn_ftrace_total_info
        register_ftrace_files(self)
        if top:     # function_profile_enabled, trace_stat/, options/graph-time, sleep-time
            register_function_profiler(self)
        if top:     # dynamic_events, synthetic_events, kprobe_events, kprobe_profile
            register_dynamic_events(self)
        if top:     # stack_trace, stack_max_size, stack_trace_filter, stack_tracer_enabled
            register_stack_tracer(self)

    # -- instances (trace.c instance_mkdir / instance_rmdir) --------------------------
    def mkdir(self, path: str) -> "Tracefs":
        """``mkdir instances/NAME``: a new instance with its own buffers, tracer,
        filters, options and events, running alongside the others.  EEXIST if the
        entry exists, ENOENT under a missing directory, EPERM anywhere but
        ``instances/``, EINVAL for a name a directory cannot have."""
        p = path.strip("/")
        parts = p.split("/")
        if self.top and len(parts) > 2 and parts[0] == "instances":
            inst = self.instance(parts[1])
            if inst is None:
                raise _err(errno.ENOENT, f"{path}: no such file or directory", path)
            return inst.mkdir("/".join(parts[2:]))
        if not (self.top and len(parts) == 2 and parts[0] == "instances"):
            if p and self.kind(p) is not None:
                raise _err(errno.EEXIST, f"{path}: file exists", path)
            if len(parts) > 1 and self.kind("/".join(parts[:-1])) is None:
                raise _err(errno.ENOENT, f"{path}: no such file or directory", path)
            raise _err(errno.EPERM, f"{path}: directories are made only in instances/", path)
        name = parts[1]
        try:
            # (a byte that is not UTF-8 comes through a mount as a surrogate escape; a
            # lone surrogate of any other kind is not a name any file system can hold)
            raw = name.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:
            raise _err(errno.EINVAL, f"{path!a}: not a name an instance can have "
                       f"(a lone surrogate at {e.start})", path.encode(
                           "utf-8", "backslashreplace").decode()) from None
        if len(raw) > NAME_MAX:
            raise _err(errno.ENAMETOOLONG, f"{path}: file name too long", path)
        if not name or name in (".", "..") or any(ord(ch) < 0x20 or ch == "\x7f" for ch in name):
            raise _err(errno.EINVAL, f"{path}: not a name an instance can have", path)
        with self._instances_lock:
            if name in self.instances:
                raise _err(errno.EEXIST, f"{path}: file exists", path)
            inst = Tracefs(TraceArray(name=name), top=False)
            inst.keep_unmatched = self.keep_unmatched
            self.instances[name] = inst
        return inst

    def rmdir(self, path: str) -> None:
        """``rmdir instances/NAME``: its tracer and events are turned off, its filters
        and triggers cleared, then it is gone.  EBUSY while a file of it is open (a
        ``trace_pipe`` reader), ENOENT if there is no such instance, EPERM for any
        other directory, ENOTDIR for a file."""
        p = path.strip("/")
        parts = p.split("/")
        if not (self.top and len(parts) == 2 and parts[0] == "instances"):
            k = self.kind(p) if p else "dir"
            if k is None:
                raise _err(errno.ENOENT, f"{path}: no such file or directory", path)
            if k == "file":
                raise _err(errno.ENOTDIR, f"{path}: not a directory", path)
            raise _err(errno.EPERM, f"{path}: only instances/NAME can be removed", path)
        name = parts[1]
        with self._instances_lock:
            inst = self.instances.get(name)
            if inst is None:
                raise _err(errno.ENOENT, f"{path}: no such file or directory", path)
            with inst._refs_lock:
                if inst._refs:
                    raise _err(errno.EBUSY, f"{path}: device or resource busy "
                               f"({inst._refs} open file(s))", path)
                inst.removed = True
            del self.instances[name]
        inst._teardown()

    def instance(self, name: str) -> "Tracefs | None":
        """The instance ``instances/NAME``, or None."""
        with self._instances_lock:
            return self.instances.get(name)

    def trace_array_get(self) -> None:
        """A file of this directory is opened: rmdir is refused (EBUSY) until the
        matching trace_array_put().  ENOENT if the instance is already gone."""
        with self._refs_lock:
            if self.removed:
                raise _err(errno.ENODEV, "the instance has been removed")
            self._refs += 1

    def trace_array_put(self) -> None:
        with self._refs_lock:
            self._refs = max(0, self._refs - 1)

    def _teardown(self) -> None:
        """__remove_instance(): tracer to nop, every event off, the function filters
        and their commands cleared, so nothing of the instance stays patched or
        registered."""
        with self._write_lock:
            self._teardown_locked()

    def _teardown_locked(self) -> None:
        from ..tracers.nop import NopTracer
        tr = self.tr
        tr.tracing_on = False
        # ftrace_destroy_function_files(): the function commands' ops go first (they
        # would keep the instance hooked), then what other parts registered
        hooks = [Tracefs.destroy_function_files, *self.teardown_hooks]
        for hook in hooks:
            try:
                hook(self)
            except Exception:
                pass
        try:
            tr.set_tracer(NopTracer())
        except Exception:
            pass
        # event_trace_del_tracer(): triggers removed first (a trigger may hold
        # another event in soft mode), then every event disabled
        for ef in list(tr.event_files.values()):
            for t in list(getattr(ef, "triggers", ()) or ()):
                try:
                    _w_trigger(self, ef, "!" + str(t).split(" if ", 1)[0])
                except Exception:
                    pass
        for ef in list(tr.event_files.values()):
            try:
                ef.set_enabled(False)
            except Exception:
                pass
        for path in ("set_ftrace_filter", "set_ftrace_notrace", "set_graph_function",
                     "set_graph_notrace"):
            f = self._files.get(path)
            if f is not None and f[1] is not None:
                try:
                    f[1]("", False)
                except Exception:
                    pass
        tr.clear()

    def _route(self, path: str) -> "tuple[Tracefs, str]":
        """The directory a path lies in, and the path inside it: ``instances/NAME/X``
        is X of instance NAME (ENOENT if there is none)."""
        p = path.strip("/")
        if self.top and p.startswith("instances/"):
            name, _, rest = p[len("instances/"):].partition("/")
            inst = self.instance(name)
            if inst is None:
                raise _err(errno.ENOENT, f"{path}: no such file or directory", path)
            return inst._route(rest)
        if self.removed:
            raise _err(errno.ENOENT, f"{path}: the instance has been removed", path)
        return self, p

    # -- the file API -------------------------------------------------------------
    def ls(self, path: str = "") -> list[str]:
        p = path.strip("/")
        if self.top:
            if p == "instances":
                with self._instances_lock:
                    return sorted(self.instances)
            if p.startswith("instances/"):
                fs, rest = self._route(p)
                return fs.ls(rest)
        from ..events.core import event_calls
        parts = p.split("/")
        if parts[0] == "events" and len(parts) == 3:
            return sorted(EVENT_LEAVES) if (parts[1], parts[2]) in event_calls else []
        prefix = p + "/" if p else ""
        out = set()
        if self.top and not p:
            out.add("instances")
        names = list(self._files) + ["events/enable"] + stat_names(self)
        for (sysname, ev) in list(event_calls):
            names.append(f"events/{sysname}/enable")
            names += [f"events/{sysname}/{ev}/{leaf}" for leaf in EVENT_LEAVES]
        if not p:
            out.add("per_thread")        # there before any thread has written
        for tid in thread_buffers(self.tr):
            names += [f"per_thread/{tid}/{leaf}" for leaf in PER_THREAD_FILES]
        for name in names:
            if name.startswith(prefix):
                out.add(name[len(prefix):].split("/", 1)[0])
        return sorted(out)

    def kind(self, path: str) -> str | None:
        """"file", "dir" or None (no such entry): what a FUSE getattr or ``ls -l``
        needs.  A directory is any path some file lies under."""
        path = path.strip("/")
        if self.top and path.startswith("instances/"):
            try:
                fs, rest = self._route(path)
            except FntraceError:
                return None
            return fs.kind(rest)
        if not path or (self.top and path == "instances") or path == "per_thread":
            return "dir"
        if self._lookup(path) is not None:
            return "file"
        parts = path.split("/")
        if parts[0] == "events" and len(parts) <= 3:
            # an event's or a system's directory, without listing every event (a
            # glob such as events/*/*/trigger asks this of each directory)
            from ..events.core import event_calls
            if len(parts) == 1:
                return "dir"
            if len(parts) == 3:
                return "dir" if (parts[1], parts[2]) in event_calls else None
            return "dir" if any(sy == parts[1] for sy, _ in list(event_calls)) else None
        return "dir" if self.ls(path) else None

    def mode(self, path: str) -> int:
        """Permission bits as tracefs shows them: 0644 read-write, 0444 read-only,
        0200 write-only (trace_marker), 0755 for a directory."""
        if self.kind(path) == "dir":
            return 0o755
        return self._file_mode(path)

    def _file_mode(self, path: str) -> int:
        fs, path = self._route(path)
        f = fs._lookup(path)
        if f is None:
            return 0
        return (0o444 if f[0] is not None else 0) | (0o200 if f[1] is not None else 0)

    def stat(self, path: str) -> tuple[str | None, int]:
        """(kind, mode) in one question, the kind worked out once: a FUSE getattr's
        (one round trip to a served program instead of two); (None, 0) for no entry."""
        kind = self.kind(path)
        if kind is None:
            return None, 0
        return kind, 0o755 if kind == "dir" else self._file_mode(path)

    def open_pipe(self, path: str = "trace_pipe", *,
                  cpus: Iterable[int] | None = None) -> PipeReader:
        """A consuming reader of ``trace_pipe``, kept open across reads (the kernel's
        trace_iterator of one open file): see tracefs/trace_pipe.py.  ``cpus``: only
        these threads (their small index); ``per_thread/<tid>/trace_pipe`` selects its
        thread.  The instance cannot be removed while the reader is open."""
        fs, sub = self._route(path)
        if fs._lookup(sub) is None:
            raise _err(errno.ENOENT, f"{path}: no such file", path)
        parts = sub.split("/")
        if parts[0] == "per_thread":
            buf = thread_buffers(fs.tr).get(int(parts[1]))
            if buf is None:
                raise _err(errno.ENOENT, f"{path}: no such file", path)
            cpus, sub = {buf.cpu}, "trace_pipe"
        from .trace_pipe import InstancePipe    # the readers load on the first open
        fs.trace_array_get()        # rmdir of its instance is EBUSY while it is open
        try:
            return InstancePipe(fs, sub, cpus=cpus)
        except BaseException:
            fs.trace_array_put()
            raise

    def _lookup(self, path: str):
        path = path.strip("/")
        f = self._files.get(path)
        if f is None and (path == "events" or path.startswith("events/")):
            f = event_path(self, path)
        if f is None and path.startswith("per_thread/"):
            f = per_thread_path(self, path)
        if f is None and path.startswith("trace_stat/"):
            f = stat_path(self, path)
        return f

    def _open(self, path: str, write: bool):
        """The directory of ``path`` and the file's handler for a read or a write:
        ENOENT for no such file, EINVAL for a read of a write-only file, EACCES for a
        write to a read-only one."""
        fs, path = self._route(path)
        f = fs._lookup(path)
        if f is None:
            raise _err(errno.ENOENT, f"{path}: no such file", path)
        if f[write] is None:
            err = FntraceError(f"{path}: permission denied" if write else f"{path}: not readable")
            err.errno = errno.EACCES if write else errno.EINVAL
            raise err
        return fs, path, f[write]

    def read(self, path: str) -> str:
        return self._open(path, False)[2]()

    def write(self, path: str, data: str, append: bool = False) -> None:
        fs, path, handler = self._open(path, True)
        # A write and an rmdir of the instance do not interleave: a tracer or event
        # switched on after the teardown would stay on with no file left to stop it.
        with fs._write_lock:
            if fs.removed:
                raise _err(errno.ENOENT, f"{path}: the instance has been removed", path)
            handler(data, append)

    def tracer_class(self, data: str) -> type:
        """The tracer a current_tracer write of DATA selects (trace_files.py)."""
        return tracer_class(self, data)

    def destroy_function_files(self) -> None:
        """ftrace_destroy_function_files(): an instance going away takes its function
        commands with it (their ops would otherwise stay registered, holding it)."""
        self.func_cmds.clear()


_top: Tracefs | None = None
_top_lock = threading.Lock()


def tracefs() -> Tracefs:
    """The process's top-level tracefs directory (made on first use)."""
    global _top
    with _top_lock:
        if _top is None:
            _top = Tracefs()
        return _top


def _static_events() -> None:
    from ..events.static_events import register_static_events
    register_static_events()


# The interpreter's own tracepoints, events/<system>/<event>/, are there from the start
# for whoever looks; they are made when the event table is first read (events/core.py).
add_event_source(_static_events)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
