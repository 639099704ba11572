"""tracefs in the process: the kernel's file names, write grammar and read strings.

    fs = tracefs()                      # the top-level instance
    fs.write("set_ftrace_filter", "json.*")
    fs.write("current_tracer", "function")
    print(fs.read("trace"))

``write(path, data, append=False)`` is ``echo data > path`` (``>>`` with append): the
whole write is applied when the "file is closed", and a write that fails changes nothing,
raises FntraceError with the kernel's errno, and — for parse errors — leaves an entry in
``error_log`` with a caret under the position where it went wrong.
"""
from __future__ import annotations

import errno
import threading
import time
from collections import deque
from collections.abc import Callable

from ..core import fetch
from ..core import ops as core_ops
from ..core import pid_list, task
from ..core.hash import hash_lines
from ..core.records import record_table
from ..errors import FilterError, FntraceError
from ..trace import TraceArray
from ..tracers import available_tracers

__all__ = ["Tracefs", "tracefs", "ErrorLog", "PipeReader", "parse_trace_options"]

README = """\
tracing mini-HOWTO (fntrace: ftrace for Python programs)

# echo 0 > tracing_on : quick way to disable tracing
# echo 1 > tracing_on : quick way to re-enable tracing

 Important files:
  trace\t\t\t- The static contents of the buffer
\t\t\t  To clear the buffer write into this file: echo > trace
  trace_pipe\t\t- A consuming read to see the contents of the buffer
  current_tracer\t- function and latency tracers
  available_tracers\t- list of configured tracers for current_tracer
  error_log\t- error log for failed commands (that support it)
  buffer_size_kb\t- view and modify size of per thread buffer
  buffer_total_size_kb  - view total size of all thread buffers
  trace_options\t\t- Set format or modify how tracing happens
\t\t\t  Disable an option by prefixing 'no' to the
\t\t\t  option name
  available_filter_functions - list of functions that can be filtered on
  set_ftrace_filter\t- echo function name in here to only trace these
\t\t\t  functions
\t     accepts: func_full_name or glob-matching-pattern
\t     modules: Can select a group via module
\t      Format: :mod:<module-name>
\t     example: echo :mod:json > set_ftrace_filter
\t\t    To remove a function: echo '!<function>' >> set_ftrace_filter
  set_ftrace_notrace\t- echo function name in here to never trace.
\t    accepts: func_full_name, *func_end, func_begin*, *func_middle*
\t    modules: Can select a group via module command :mod:
\t    Does not accept triggers
  enabled_functions\t- list of functions with a callback attached
  touched_functions\t- list of functions that ever had a callback attached
"""

ERROR_LOG_MAX = 8


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


def _bool(data: str, name: str) -> bool:
    s = data.strip()
    if s in ("0", "1"):
        return s == "1"
    raise FntraceError(f"{name}: expected 0 or 1, got {s!r}")


def parse_trace_options(data: str) -> list[tuple[str, bool]]:
    """The words of a ``trace_options`` write: [(option, on)], ``noNAME`` turning
    NAME off; an unknown name is an error (EINVAL) at its position, nothing applied."""
    out = []
    for word in data.split():
        on = not word.startswith("no")
        name = word[2:] if not on else word
        if name not in Tracefs.OPTIONS and name not in Tracefs.GRAPH_OPTIONS:
            raise FntraceError(f"no such option {word!r}", command=data, pos=data.find(word))
        out.append((name, on))
    return out


class Tracefs:
    """One directory of the tree (the top level, or an instance)."""

    OPTIONS = ("print-parent", "irq-info", "overwrite", "markers", "function-trace",
               "object-repr", "function-fork", "event-fork")
    # function_graph's options (trace_functions_graph.c trace_opts) and their defaults.
    GRAPH_OPTIONS = {"funcgraph-overrun": False, "funcgraph-cpu": True,
                     "funcgraph-overhead": True, "funcgraph-proc": False,
                     "funcgraph-duration": True, "funcgraph-abstime": False,
                     "funcgraph-tail": False, "funcgraph-retval": False,
                     "funcgraph-retval-hex": False, "funcgraph-args": False}

    def __init__(self, tr: TraceArray | None = None, *, top: bool = True):
        self.tr = tr if tr is not None else TraceArray()
        self.top = top
        self.error_log = ErrorLog()
        # A filter pattern that matches no loaded function is kept for modules loaded
        # later instead of refused (fntrace record: the program has not run yet).
        self.keep_unmatched = False
        # The events the last dynamic_events write defined (the control path enables
        # them through their events/GRP/EVENT/ files).
        self.last_created_events: list = []
        self.tr.options.setdefault("overwrite", True)
        self.tr.options.setdefault("markers", True)
        self.tr.options.setdefault("function-trace", True)
        for name, default in self.GRAPH_OPTIONS.items():
            self.tr.options.setdefault(name, default)
        self._files: dict[str, tuple[Callable[[], str] | None, Callable[[str, bool], None] | None]] = {
            "README": (lambda: README, None),
            "available_tracers": (lambda: " ".join(sorted(available_tracers(), reverse=False)) + "\n", None),
            "current_tracer": (lambda: self.tr.tracer.name + "\n", self._w_current_tracer),
            "tracing_on": (lambda: f"{int(self.tr.tracing_on)}\n", self._w_tracing_on),
            "trace": (self._r_trace, self._w_trace),
            "trace_pipe": (self._r_trace_pipe, None),
            "trace_marker": (None, self._w_trace_marker),
            # tracing_entries_read(): "%lu\n", the size of each (per-thread) buffer
            "buffer_size_kb": (lambda: f"{self.tr.buffer_size_kb}\n", self._w_buffer_size_kb),
            "buffer_total_size_kb": (lambda: f"{self.tr.buffer_size_kb * max(1, len(self.tr.buffers))}\n", None),
            "trace_options": (self._r_trace_options, self._w_trace_options),
            "set_ftrace_filter": (lambda: self._r_hash(True), lambda d, a: self._w_hash(d, a, True)),
            "set_ftrace_notrace": (lambda: self._r_hash(False), lambda d, a: self._w_hash(d, a, False)),
            "error_log": (self.error_log.read, lambda d, a: self.error_log.clear()),
        }
        if top:
            self._files.update({
                "available_filter_functions": (self._r_available, None),
                "available_filter_functions_addrs": (self._r_available_addrs, None),
                "enabled_functions": (lambda: "".join(l + "\n" for l in core_ops.enabled_functions()), None),
                "touched_functions": (lambda: "".join(l + "\n" for l in core_ops.touched_functions()), None),
                "dyn_ftrace_total_info": (lambda: f"{len(record_table.records)}\n", None),
            })
        # function_graph's files: every instance has its own graph filters and limits
        # (the TraceArray keeps them), so sessions and recordings set them the same way.
        self._files.update({
            "set_graph_function": (lambda: self._r_graph(True), lambda d, a: self._w_graph(d, a, True)),
            "set_graph_notrace": (lambda: self._r_graph(False), lambda d, a: self._w_graph(d, a, False)),
            "max_graph_depth": (lambda: f"{self.tr.max_graph_depth}\n", self._w_max_graph_depth),
        })
        self._files["tracing_thresh"] = (lambda: f"{self.tr.tracing_thresh // 1000}\n",
                                         self._w_tracing_thresh)
        self._files["set_event"] = (self._r_set_event, self._w_set_event)
        self._files["available_events"] = (self._r_available_events, None)
        self._files["snapshot"] = (self._r_snapshot, self._w_snapshot)
        if top:
            self._files["dynamic_events"] = (self._r_dynamic_events, self._w_dynamic_events)
        self._add_thread_filter_files()
        for name in self.OPTIONS + tuple(self.GRAPH_OPTIONS):
            self._files[f"options/{name}"] = (
                (lambda n=name: f"{int(self.tr.options.get(n, False))}\n"),
                (lambda d, a, n=name: self._set_option(n, _bool(d, n))))

    # -- the file API -------------------------------------------------------------
    def ls(self, path: str = "") -> list[str]:
        prefix = path.rstrip("/") + "/" if path else ""
        out = set()
        from ..events.core import event_calls
        names = list(self._files) + ["events/enable"]
        for (sysname, ev) in list(event_calls):
            names += [f"events/{sysname}/enable", f"events/{sysname}/{ev}/enable",
                      f"events/{sysname}/{ev}/filter", f"events/{sysname}/{ev}/trigger",
                      f"events/{sysname}/{ev}/format", f"events/{sysname}/{ev}/id"]
        for name in names:
            if name.startswith(prefix):
                out.add(name[len(prefix):].split("/", 1)[0])
        return sorted(out)

    def kind(self, path: str) -> str | None:
        """"file", "dir" or None (no such entry): what a FUSE getattr or ``ls -l``
        needs.  A directory is any path some file lies under."""
        path = path.strip("/")
        if not path:
            return "dir"
        if self._lookup(path) is not None:
            return "file"
        return "dir" if self.ls(path) else None

    def mode(self, path: str) -> int:
        """Permission bits as tracefs shows them: 0644 read-write, 0444 read-only,
        0200 write-only (trace_marker), 0755 for a directory."""
        if self.kind(path) == "dir":
            return 0o755
        f = self._lookup(path.strip("/"))
        if f is None:
            return 0
        return (0o444 if f[0] is not None else 0) | (0o200 if f[1] is not None else 0)

    def open_pipe(self, path: str = "trace_pipe") -> "PipeReader":
        """A consuming reader of ``trace_pipe``, kept open across reads (the kernel's
        trace_iterator of one open file): see PipeReader."""
        if self._lookup(path.strip("/")) is None:
            raise FntraceError(f"{path}: no such file", command=path)
        return PipeReader(self, path.strip("/"))

    def _lookup(self, path: str):
        path = path.strip("/")
        f = self._files.get(path)
        if f is None and (path == "events" or path.startswith("events/")):
            f = self._event_path(path)
        return f

    def read(self, path: str) -> str:
        f = self._lookup(path)
        if f is None:
            raise FntraceError(f"{path}: no such file", command=path)
        if f[0] is None:
            err = FntraceError(f"{path}: not readable")
            err.errno = errno.EINVAL
            raise err
        return f[0]()

    def write(self, path: str, data: str, append: bool = False) -> None:
        f = self._lookup(path)
        if f is None:
            raise FntraceError(f"{path}: no such file", command=path)
        if f[1] is None:
            err = FntraceError(f"{path}: permission denied")
            err.errno = errno.EACCES
            raise err
        f[1](data, append)

    # -- handlers -----------------------------------------------------------------
    def tracer_class(self, data: str) -> type:
        """The tracer ``echo DATA > current_tracer`` selects; an unknown name fails as
        that write does (error_log entry, EINVAL), so a caller can check a name before
        the write (fntrace record, before the program runs)."""
        name = data.strip()
        tracers = available_tracers()
        if name not in tracers:
            self.error_log.add("current_tracer", "No such tracer", data.rstrip("\n"), 0)
            raise FntraceError(f"no such tracer {name!r} (available: "
                               f"{' '.join(sorted(tracers))})", command=data)
        return tracers[name]

    def _w_current_tracer(self, data: str, append: bool) -> None:
        cls = self.tracer_class(data)
        if self.tr.tracer is not None and self.tr.tracer.name == data.strip():
            return
        self.tr.set_tracer(cls())

    def _w_tracing_on(self, data: str, append: bool) -> None:
        self.tr.tracing_on = _bool(data, "tracing_on")

    def _w_trace(self, data: str, append: bool) -> None:
        if not append:
            self.tr.clear()

    def _w_trace_marker(self, data: str, append: bool) -> None:
        if not self.tr.options.get("markers", True):
            raise FntraceError("markers are disabled (options/markers is 0)")
        from ..ring_buffer import PAYLOAD_SEP, TRACE_PRINT
        if not self.tr.tracing_on:
            return
        # not filtered by thread: a marker is the writer's own (trace_marker has no
        # pid filter in the kernel either)
        buf = self.tr.thread_buffer()
        text = data if data.endswith("\n") else data + "\n"
        buf.write_payload(time.monotonic_ns(), TRACE_PRINT, 0, 0, 0, 0, PAYLOAD_SEP + text)

    def _w_buffer_size_kb(self, data: str, append: bool) -> None:
        s = data.strip()
        try:
            kb = int(s)
        except ValueError:
            raise FntraceError(f"buffer_size_kb: {s!r} is not a number") from None
        if kb < 1 or kb > (1 << 20):
            err = FntraceError(f"buffer_size_kb: {kb} is out of range (1 to {1 << 20} KB)")
            err.errno = errno.ENOMEM if kb > 0 else errno.EINVAL
            raise err
        self.tr.set_buffer_size_kb(kb)

    def _r_trace_options(self) -> str:
        return "".join(f"{'' if self.tr.options.get(n, False) else 'no'}{n}\n"
                       for n in self.OPTIONS + tuple(self.GRAPH_OPTIONS))

    def _w_trace_options(self, data: str, append: bool) -> None:
        try:
            words = parse_trace_options(data)
        except FntraceError as e:
            self.error_log.add("trace_options", "No such option", data.rstrip("\n"),
                               e.pos or 0)
            raise
        for name, on in words:
            self._set_option(name, on)

    def _set_option(self, name: str, on: bool) -> None:
        self.tr.options[name] = on
        if name == "object-repr":
            # The program's own __repr__/properties for -A/-R values and fetchargs
            # (core/fetch.py): one switch for the process, as the values are.
            fetch.settings.allow_program_code = on
        if name == "overwrite":
            self.tr.set_overwrite(on)
        elif name == "funcgraph-args":
            self.tr.graph_args = on
        elif name == "funcgraph-retval":
            self.tr.graph_retval = on
        elif name in ("function-fork", "event-fork"):
            if on:
                task.follow_forks()
            setattr(self.tr.filter, name.replace("-", "_"), on)
            self.tr.pids_changed()

    # -- thread filters (core/pid_list.py) ---------------------------------------
    def _add_thread_filter_files(self) -> None:
        flt = self.tr.filter
        show, write = pid_list.ThreadFilter.show, pid_list.ThreadFilter.write
        for name, attr, empty in (("set_ftrace_pid", "ftrace", pid_list.FTRACE_NO_PIDS),
                                  ("set_ftrace_notrace_pid", "ftrace_no", pid_list.FTRACE_NO_PIDS),
                                  ("set_event_pid", "event", ""),
                                  ("set_event_notrace_pid", "event_no", "")):
            self._files[name] = (
                (lambda a=attr, e=empty: show(getattr(flt, a), e)),
                (lambda d, ap, a=attr, n=name: self._w_pids(n, getattr(flt, a), d, ap)))
        # Not in the kernel: threads by name (their comm), see core/pid_list.py.
        for name, attr in (("set_ftrace_comm", "ftrace"), ("set_event_comm", "event")):
            self._files[name] = (
                (lambda a=attr: "".join(g + "\n" for g in getattr(flt, a).comms)),
                (lambda d, ap, a=attr: self._w_comms(getattr(flt, a), d, ap)))
        self._files["tracing_cpumask"] = (self._r_cpumask, self._w_cpumask)

    def _w_pids(self, name: str, lst, data: str, append: bool) -> None:
        with self.tr.filter.lock:
            try:
                pid_list.ThreadFilter.write(lst, data, append)
            except FntraceError as e:
                self.error_log.add(name, "Invalid pid", data.rstrip("\n"), e.pos or 0)
                raise
        self.tr.pids_changed()

    def _w_comms(self, lst, data: str, append: bool) -> None:
        with self.tr.filter.lock:
            pid_list.ThreadFilter.write_comms(lst, data, append)
        self.tr.pids_changed()

    def _nr_cpus(self) -> int:
        # nr_cpu_ids: the thread indices handed out so far, in whole 32-bit groups
        return max(32, (len(task.thread_info) + 31) // 32 * 32)

    def _r_cpumask(self) -> str:
        return pid_list.cpumask_show(self.tr.filter.cpumask, self._nr_cpus())

    def _w_cpumask(self, data: str, append: bool) -> None:
        try:
            mask = pid_list.parse_cpumask(data)
        except FntraceError as e:
            self.error_log.add("tracing_cpumask", "Invalid cpumask", data.rstrip("\n"), e.pos or 0)
            raise
        nr = self._nr_cpus()
        # every thread selected, later ones too: the default again
        self.tr.filter.cpumask = None if mask == (1 << nr) - 1 else mask
        self.tr.pids_changed()

    def _r_graph(self, enable: bool) -> str:
        ops = self.tr.graph_fops if enable else self.tr.graph_notrace_fops
        empty = "#### all functions enabled ####" if enable else "#### no functions disabled ####"
        lines = hash_lines(ops.filter_hash, record_table.records, ops.mod_cache, empty_line=empty)
        return "".join(l + "\n" for l in lines)

    def _w_graph(self, data: str, append: bool, enable: bool) -> None:
        ops = self.tr.graph_fops if enable else self.tr.graph_notrace_fops
        text = data.rstrip("\n")
        try:
            core_ops.ftrace_set_filter(ops, text if text.strip() else None, reset=not append,
                                       keep_unmatched=self.keep_unmatched)
        except FilterError as e:
            self.error_log.add("ftrace", e.msg, text, e.pos or 0)
            raise

    def _w_max_graph_depth(self, data: str, append: bool) -> None:
        s = data.strip()
        if not s.isdigit():
            self.error_log.add("max_graph_depth", "Invalid depth", s, 0)
            raise FntraceError(f"max_graph_depth: {s!r} is not a depth (0 = unlimited)")
        self.tr.max_graph_depth = int(s)

    def _w_tracing_thresh(self, data: str, append: bool) -> None:
        s = data.strip()
        if not s.isdigit():
            self.error_log.add("tracing_thresh", "Invalid threshold", s, 0)
            raise FntraceError(f"tracing_thresh: {s!r} is not a number of microseconds")
        self.tr.tracing_thresh = int(s) * 1000

    def _r_hash(self, enable: bool) -> str:
        ops = self.tr.ops
        if enable:
            lines = hash_lines(ops.filter_hash, record_table.records, ops.mod_cache,
                               empty_line="#### all functions enabled ####")
        else:
            lines = hash_lines(ops.notrace_hash, record_table.records, ops.notrace_mod_cache,
                               empty_line="#### no functions disabled ####")
        return "".join(l + "\n" for l in lines)

    def _w_hash(self, data: str, append: bool, enable: bool) -> None:
        setter = core_ops.ftrace_set_filter if enable else core_ops.ftrace_set_notrace
        text = data.rstrip("\n")
        try:
            setter(self.tr.ops, text if text.strip() else None, reset=not append,
                   keep_unmatched=self.keep_unmatched)
        except FilterError as e:
            self.error_log.add("ftrace", e.msg, text, e.pos or 0)
            raise

    def _r_available(self) -> str:
        record_table.refresh()
        return "".join(r.name + "\n" for r in record_table.records)

    def _r_available_addrs(self) -> str:
        record_table.refresh()
        return "".join(f"{r.ip:x} {r.name}\n" for r in record_table.records)

    # -- events ---------------------------------------------------------------------
    def _calls(self, system: str | None = None):
        from ..events.core import event_calls
        return [c for (sy, _), c in list(event_calls.items()) if system in (None, sy)]

    def _event_path(self, path: str):
        from ..events.core import find_event_call
        parts = path.split("/")
        if parts == ["events", "enable"]:
            return (lambda: self._r_enable_many(self._calls()),
                    lambda d, a: self._w_enable_many(self._calls(), d))
        if len(parts) == 3 and parts[2] == "enable":
            calls = self._calls(parts[1])
            if not calls:
                return None
            return (lambda: self._r_enable_many(calls), lambda d, a: self._w_enable_many(calls, d))
        if len(parts) != 4:
            return None
        call = find_event_call(parts[1], parts[2])
        if call is None:
            return None
        ef = self.tr.event_file(call)
        leaf = parts[3]
        if leaf == "enable":
            return (lambda: ef.enable_text() + "\n",
                    lambda d, a: ef.set_enabled(_bool(d, "enable")))
        if leaf == "filter":
            return ((lambda: (ef.filter_text or "none") + "\n"),
                    lambda d, a: self._w_event_filter(ef, d))
        if leaf == "trigger":
            return (lambda: self._r_trigger(ef), lambda d, a: self._w_trigger(ef, d))
        if leaf == "format":
            return (call.format_text, None)
        if leaf == "id":
            return (lambda: f"{call.id}\n", None)
        return None

    def _r_enable_many(self, calls) -> str:
        states = {self.tr.event_file(c).enable_text()[0] for c in calls}
        if not states:
            return "0\n"
        return ("X" if len(states) > 1 else states.pop()) + "\n"

    def _w_enable_many(self, calls, data: str) -> None:
        on = _bool(data, "enable")
        for c in calls:
            self.tr.event_file(c).set_enabled(on)

    def _w_event_filter(self, ef, data: str) -> None:
        from ..events.filter import FilterParseError
        text = data.strip()
        try:
            ef.set_filter(text)
        except FilterParseError as e:
            self.error_log.add("event filter parse error", e.msg, text, e.pos or 0)
            raise

    def _r_trigger(self, ef) -> str:
        if not ef.triggers:
            return "# Available triggers:\n# traceon traceoff snapshot stacktrace enable_event disable_event\n"
        return "".join(f"{t}\n" for t in ef.triggers)

    def _w_trigger(self, ef, data: str) -> None:
        from ..events.core import find_event_call
        from ..events.trigger import TriggerError, apply_trigger_command

        def files_of_tr(system, event):
            c = find_event_call(system, event)
            return self.tr.event_file(c) if c is not None else None
        text = data.rstrip("\n")
        try:
            apply_trigger_command(ef, text, files_of_tr)
        except TriggerError as e:
            self.error_log.add("event trigger", e.msg, text, e.pos or 0)
            raise

    def _r_set_event(self) -> str:
        return "".join(f"{c.system}:{c.name}\n" for c in self._calls()
                       if self.tr.event_file(c).enabled)

    def _w_set_event(self, data: str, append: bool) -> None:
        from ..core.hash import glob_match
        words = data.split()
        plan = []
        for w in words:
            on = not w.startswith("!")
            pat = w.lstrip("!")
            sysp, _, evp = pat.rpartition(":")
            if not sysp:
                sysp = "*"
            matched = [c for c in self._calls() if glob_match(sysp, c.system) and glob_match(evp or "*", c.name)]
            if not matched:
                raise FntraceError(f"set_event: no event matches {w!r}", command=data)
            plan.append((on, matched))
        if not append:
            for c in self._calls():
                self.tr.event_file(c).set_enabled(False)
        for on, matched in plan:
            for c in matched:
                self.tr.event_file(c).set_enabled(on)

    def _r_available_events(self) -> str:
        return "".join(f"{c.system}:{c.name}\n" for c in self._calls())

    def _r_dynamic_events(self) -> str:
        from ..events.fprobe_event import dynamic_events_lines
        return "".join(l + "\n" for l in dynamic_events_lines())

    def _w_dynamic_events(self, data: str, append: bool) -> None:
        from ..events.fprobe_event import dynevent_clear, dynevent_create
        from ..events.probe_parse import ProbeError
        self.last_created_events = []
        if not append:
            dynevent_clear()
        for line in data.splitlines():
            cmd = line.strip()
            if not cmd or cmd.startswith("#"):
                continue
            try:
                ev = dynevent_create(cmd)
            except ProbeError as e:
                self.error_log.add("trace_fprobe", e.msg, cmd, e.pos or 0)
                raise
            if ev is not None:
                self.last_created_events.append(ev.call)

    def _r_snapshot(self) -> str:
        """s_show() on the snapshot buffer: what ``trace`` prints of its own buffer,
        in the current tracer's format; print_snapshot_help() instead when there is no
        snapshot buffer or it is empty."""
        tr = self.tr
        snap = tr.snapshot
        if snap is None or not any(b.entries for b in snap):
            state = "allocated" if snap is not None else "freed"
            return (f"# tracer: {tr.tracer.name}\n#\n"
                    f"#\n# * Snapshot is {state} *\n#\n"
                    "# Snapshot commands:\n"
                    "# echo 0 > snapshot : Clears and frees snapshot buffer\n"
                    "# echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.\n"
                    "#                      Takes a snapshot of the main buffer.\n"
                    "# echo 2 > snapshot : Clears snapshot buffer (but does not allocate or free)\n"
                    "#                      (Doesn't have to be '2' works with any number that\n"
                    "#                       is not a '0' or '1')\n")
        return self._render(buffers=snap)

    def _w_snapshot(self, data: str, append: bool) -> None:
        v = data.strip()
        if v == "0":
            self.tr.snapshot = None
        elif v == "1":
            self.tr.take_snapshot()
        elif self.tr.snapshot is not None:
            for b in self.tr.snapshot:
                b.reset()

    def _render(self, **kw) -> str:
        """A read of trace, trace_pipe or snapshot: the renderer registry's view for
        the current tracer (output/registry.py), as the report and the API print it."""
        from ..output.render import trace_array_lines
        return "".join(line + "\n" for line in trace_array_lines(self.tr, **kw))

    def _r_trace(self) -> str:
        return self._render()

    def _r_trace_pipe(self) -> str:
        return self._render(consume=True)


class PipeReader:
    """One open ``trace_pipe``: ``read(timeout)`` blocks until there is something to
    show (or ``timeout`` seconds pass: then ""), consumes it and returns its text;
    ``timeout=None`` waits for ever.  Other readers and the buffers' writers are not
    held up while it waits."""

    POLL = 0.02

    def __init__(self, fs: Tracefs, path: str) -> None:
        self.fs = fs
        self.path = path
        self.closed = False

    def read(self, timeout: float | None = None) -> str:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.closed:
            text = self.fs.read(self.path)
            if text:
                return text
            if end is not None and time.monotonic() >= end:
                break
            time.sleep(self.POLL if end is None else max(0.0, min(self.POLL, end - time.monotonic())))
        return ""

    def close(self) -> None:
        self.closed = True


_top: Tracefs | None = None
_top_lock = threading.Lock()


def tracefs() -> Tracefs:
    """The process's top-level tracefs directory (made on first use)."""
    global _top
    with _top_lock:
        if _top is None:
            _top = Tracefs()
        return _top


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
