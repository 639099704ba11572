"""``fntrace record``: run a program with a tracer on and write its trace file.

Like trace-cmd record, full per-thread buffers are handed to the file as they fill (the
ring buffer's sink), so a long run keeps constant memory and loses nothing; the rest is
written at the end.  Function names go into the file's symbol table once, the first time
a chunk refers to them.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from .. import _env
from ..core import dispatch
from ..core.ops import ftrace_kill, ftrace_set_filter, ftrace_set_notrace
from ..core.records import record_table, scan_code_as
from ..errors import FilterError, UsageError
from ..trace import TraceArray, thread_info
from ..tracefile import TraceFileWriter
from ..tracers import available_tracers
from .target import Target, run_target

__all__ = ["RecordOptions", "record"]

MAX_BUFFER_KB = 1 << 20


class RecordOptions:
    """What `fntrace record` was asked for (every field can be given by keyword)."""

    def __init__(self, tracer: str = "function", filters: list[str] | None = None,
                 notrace: list[str] | None = None, buffer_kb: int = 1408,
                 output: str = "fntrace.dat", graph_functions: list[str] | None = None,
                 graph_notrace: list[str] | None = None, max_depth: int = 0,
                 thresh_us: int = 0, args: bool = False, retval: bool = False,
                 events: list | None = None, patches: list | None = None) -> None:
        self.tracer = tracer
        self.filters = list(filters or ())
        self.notrace = list(notrace or ())
        self.buffer_kb = buffer_kb
        self.output = output
        self.graph_functions = list(graph_functions or ())
        self.graph_notrace = list(graph_notrace or ())
        self.max_depth = max_depth
        self.thresh_us = thresh_us
        self.args = args
        self.retval = retval
        self.events = list(events or ())
        self.patches = list(patches or ())

    def __repr__(self) -> str:
        return f"RecordOptions({vars(self)!r})"


def check_buffer_kb(text: str) -> int:
    try:
        kb = int(text, 0)
    except ValueError:
        raise UsageError(f"bad buffer size {text!r}: not a number of kilobytes") from None
    if not 1 <= kb <= MAX_BUFFER_KB:
        raise UsageError(f"bad buffer size {kb}: must be between 1 and {MAX_BUFFER_KB} KB")
    return kb


class _FileSink:
    """Ring-buffer sink writing chunks, new symbols and new threads to the file.

    The file belongs to the process that opened it: a child made by fork() (which runs
    on through the program, and out through record()) writes nothing to it.  Nothing
    is left in the file object's buffer at a fork, so the child cannot write a copy of
    it either when it exits."""

    def __init__(self, writer: TraceFileWriter):
        self.writer = writer
        self.next_ip = 1
        self.threads_written: set[int] = set()
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def mine(self) -> bool:
        return os.getpid() == self.pid

    def before_fork(self) -> None:
        self.lock.acquire()
        if self.mine() and not self.writer.closed:
            try:
                self.writer.flush()
            except Exception:       # a broken file must not stop the program's fork
                pass

    def after_fork(self) -> None:
        self.lock.release()

    def _sync_tables(self) -> None:
        hi = record_table._next_ip
        if hi > self.next_ip:
            by_ip = record_table.by_ip
            self.writer.add_symbols(
                (ip, r.name, r.filename, r.line)
                for ip in range(self.next_ip, hi) if (r := by_ip.get(ip)) is not None)
            self.next_ip = hi
        for cpu, (native, comm) in list(thread_info.items()):
            if cpu not in self.threads_written:
                self.writer.add_thread(cpu, native, comm)
                self.threads_written.add(cpu)

    def __call__(self, buf, chunk, first_seq: int, payloads: dict) -> None:
        if not self.mine():
            return
        with self.lock:
            self._sync_tables()
            self.writer.write_chunk(buf.cpu, chunk, first_seq, 0, payloads or None)

    def finish(self, stats: dict) -> None:
        if not self.mine():
            return
        with self.lock:
            self._sync_tables()
        self.writer.close(stats)


def check_depth(text: str) -> int:
    try:
        n = int(text, 0)
    except ValueError:
        raise UsageError(f"bad max depth {text!r}: not a number") from None
    if n < 0:
        raise UsageError(f"bad max depth {n}: must be 0 (unlimited) or more")
    return n


def check_thresh(text: str) -> int:
    try:
        n = int(text, 0)
    except ValueError:
        raise UsageError(f"bad threshold {text!r}: not a whole number of microseconds") from None
    if n < 0:
        raise UsageError(f"bad threshold {n}: must be 0 (off) or more microseconds")
    return n


def _apply_filters(tr: TraceArray, opts: RecordOptions) -> None:
    for label, pats, ops, setter in (
            ("-F", opts.filters, tr.ops, ftrace_set_filter),
            ("-N", opts.notrace, tr.ops, ftrace_set_notrace),
            ("-g", opts.graph_functions, tr.graph_fops, ftrace_set_filter),
            ("--graph-notrace", opts.graph_notrace, tr.graph_notrace_fops, ftrace_set_filter)):
        first = True
        for pat in pats:
            try:
                setter(ops, pat, reset=first, keep_unmatched=True)
            except FilterError as e:
                where = f" (at column {e.pos + 1})" if e.pos is not None else ""
                raise UsageError(f"{label} {pat!r}: {e.msg}{where}") from None
            first = False


def _apply_events(tr: TraceArray, opts: RecordOptions) -> None:
    """-e/-f/-T: define dynamic events, enable them in this trace, set filters/triggers.
    Any error is a one-line UsageError with the caret position."""
    if not opts.events:
        return
    from ..events.core import find_event_call
    from ..events.filter import FilterParseError
    from ..events.fprobe_event import dynevent_create
    from ..events.probe_parse import ProbeError
    from ..events.trigger import TriggerError, apply_trigger_command

    def where(e, text):
        return f"\n  {text}\n  {' ' * (e.pos or 0)}^" if e.pos is not None else ""

    for spec in opts.events:
        text = spec["event"]
        if text[:1] == "f" and (len(text) == 1 or text[1] in " :0123456789"):
            try:
                ev = dynevent_create(text)
            except ProbeError as e:
                raise UsageError(f"-e: {e.msg}{where(e, text)}") from None
            call = ev.call
        else:
            sysname, _, name = text.rpartition(":")
            call = find_event_call(sysname or None, name)
            if call is None:
                raise UsageError(f"-e {text!r}: no such event")
        ef = tr.event_file(call)
        if spec["filter"]:
            try:
                ef.set_filter(spec["filter"])
            except FilterParseError as e:
                raise UsageError(f"-f: event filter parse error: {e.msg}{where(e, spec['filter'])}") from None

        def files_of_tr(system, event):
            c = find_event_call(system, event)
            return tr.event_file(c) if c is not None else None
        for t in spec["triggers"]:
            try:
                apply_trigger_command(ef, t, files_of_tr)
            except (TriggerError, FilterParseError) as e:
                raise UsageError(f"-T: {e.msg}{where(e, t)}") from None
        ef.set_enabled(True)


def unmatched_patterns(tr: TraceArray) -> list[str]:
    """Filters that never selected a function during the run (reported on stderr)."""
    out = []
    for ops in (tr.ops, tr.graph_fops, tr.graph_notrace_fops):
        out += [p.pattern for p in ops.pending if not p.matched]
        out += [p.pattern for p in ops.notrace_pending if not p.matched]
        for entry in ops.mod_cache + ops.notrace_mod_cache:
            if not any(entry.matches(r) for r in record_table.records):
                out.append(str(entry))
    return out


def record(target: Target, opts: RecordOptions, *, at_exit: bool = False) -> int:
    """Run ``target`` traced; write ``opts.output``; return the program's exit status.

    ``at_exit``: the process ends after this (the command line), so tracing is stopped
    with ftrace_kill() instead of unpatching every site one by one."""
    tracers = available_tracers()
    if opts.tracer not in tracers:
        raise UsageError(f"unknown tracer {opts.tracer!r} (available: {' '.join(sorted(tracers))})")
    try:
        f = open(opts.output, "wb")
    except OSError as e:
        raise UsageError(f"{opts.output}: {e.strerror}") from None
    header = {
        "tracer": opts.tracer,
        "python": sys.version.split()[0],
        "backend": _env.BACKEND,
        "pid": os.getpid(),
        "argv": [target.argv0, *target.args],
        "clock": "mono",
        "buffer_size_kb": opts.buffer_kb,
        "filters": opts.filters,
        "notrace": opts.notrace,
        "graph_functions": opts.graph_functions,
        "graph_notrace": opts.graph_notrace,
        "max_graph_depth": opts.max_depth,
        "tracing_thresh_us": opts.thresh_us,
        "graph_args": opts.args,
        "graph_retval": opts.retval,
        "events": [e["event"] for e in opts.events],
        "start_wall": time.time(),
    }
    writer = TraceFileWriter(f, header)
    sink = _FileSink(writer)
    tr = TraceArray(buffer_size_kb=opts.buffer_kb, sink=sink)
    if hasattr(os, "register_at_fork"):
        def in_child() -> None:
            tr.tracing_on = False           # the trace is the parent's
            sink.after_fork()
        os.register_at_fork(before=sink.before_fork, after_in_parent=sink.after_fork,
                            after_in_child=in_child)
    tr.max_graph_depth = opts.max_depth
    tr.tracing_thresh = opts.thresh_us * 1000
    tr.graph_args = opts.args
    tr.graph_retval = opts.retval
    # Until the target runs, "__main__" is fntrace's own launcher: never list it, and
    # let ':mod:__main__' filters wait for the target's module.
    main = sys.modules.get("__main__")
    if main is not None:
        record_table.scanned.add("__main__")
        record_table.module_ids["__main__"] = id(main)
    record_table.install_import_hook()
    record_table.main_pending = True
    status = 1
    from . import patch as _patch
    requests = [_patch.parse_patch(p) for p in opts.patches]
    try:
        _patch.install(requests)
        _apply_filters(tr, opts)
        _apply_events(tr, opts)
        tracer = tracers[opts.tracer]()

        def start(mod, code) -> None:
            record_table.main_pending = False
            record_table.scanned.add("__main__")
            record_table.module_ids["__main__"] = id(mod)
            scan_code_as(code, "__main__")
            code = record_table.rewrite("__main__", mod.__dict__, code)
            tr.set_tracer(tracer)
            return code

        status = run_target(target, start)
    finally:
        # Off first, so nothing below is traced; then hand what is left to the file.
        tr.tracing_on = False
        if not sink.mine():
            # a forked child on its way out: the file and the reports are the parent's
            at_exit = True
        if at_exit and not requests and not opts.events:
            ftrace_kill()
        elif tr.tracer is not None:
            tr.tracer.reset(tr)
            tr.tracer = None
        tr.flush()
        mine = sink.mine()
        for msg in _patch.finish(requests):
            if mine:
                print(f"fntrace: {msg}", file=sys.stderr)
        record_table.main_pending = False
        stats = {
            "cpus": {str(c): {"written": b.written, "overrun": b.overrun, "dropped": b.dropped}
                     for c, b in tr.buffers.items()},
            "callback_errors": dispatch.callback_errors[0],
            "exit_status": status,
        }
        sink.finish(stats)
        for pat in unmatched_patterns(tr) if mine else ():
            print(f"fntrace: filter {pat!r} matched no function", file=sys.stderr)
        if opts.events:
            from ..events.fprobe_event import unbound_events
            for ev in unbound_events() if mine else ():
                print(f"fntrace: event {ev}", file=sys.stderr)
            for ef in list(tr.event_files.values()):
                ef.set_enabled(False)
                ef.triggers.clear()
                ef._sync()
    return status
