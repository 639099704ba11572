"""``fntrace record``: run a program with a tracer on and write its trace file.

Full per-thread buffers are handed over as they fill to the trace file's writer thread
(tracefile/sink.py), so a long run keeps constant memory, loses nothing, and the
write-out never runs on a traced thread's stack; the rest is written at the end.

The end, however the program ends (cli/guard.py): tracing off, every buffer handed
over, the STAT and END blocks written; then the report for ``live``.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from .. import _env
from ..core import dispatch, fetch, task
from ..core.ops import backend as ops_backend
from ..core.ops import ftrace_kill
from ..core.records import record_table, scan_code_as
from ..errors import FntraceError, UsageError
from ..outfile import TRACE_MODE
from ..outfile import create as create_output
from ..printk import pr_warn
from ..core.task import thread_info
from ..trace_array import TraceArray
from ..tracefile import sink
from ..tracefile.blocks import COMPRESS_HINT, compress_available
from ..tracefile.sink import FileSink
from ..tracefile.writer import TraceFileWriter
from ..tracefs import control
from ..tracefs.fs import Tracefs
from .args import add_mode_argument, add_record_options, add_target, choose_tracer, target_of
from .guard import Guard
from .target import (Outcome, Target, _native_launch, callback_credit, finish_program,
                     run_target)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..events.otel_context import OtelTracker
    from ..events.task_switch import TaskTracker
    from ..tracefs.server import Server

__all__ = ["RecordOptions", "Recording", "record",
           "unmatched_patterns", "flush_all", "ENDING_SIGNALS", "EPILOG", "add_arguments", "run", "record_from_args"]


class RecordOptions:
    """What `fntrace record` was asked for (every field can be given by keyword).

    The numbers may be given as the user typed them (str): they are checked by the
    control files they are written to (tracefs/control.py); None leaves the file's
    default."""

    compress = False            # --compress: zstd per block (tracefile/)
    mode = TRACE_MODE           # --mode: the trace files' permissions (outfile.py)
    serve = False               # --serve: the recording's tracefs on a control socket
    otel_context = False        # --otel-context: events/otel_context.py

    def __init__(self, tracer: str = "function", filters: list[str] | None = None,
                 notrace: list[str] | None = None, buffer_kb: int | str | None = 1408,
                 output: str = "fntrace.dat", graph_functions: list[str] | None = None,
                 graph_notrace: list[str] | None = None, max_depth: int | str | None = 0,
                 thresh_us: int | str | None = 0, args: bool = False, retval: bool = False,
                 events: list | None = None, patches: list | None = None,
                 object_repr: bool = False, tids: list | None = None,
                 threads: list[str] | None = None, cpu_time: bool = False,
                 c_calls: bool = False) -> None:
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
        self.object_repr = object_repr
        self.tids = list(tids or ())            # --tid: set_ftrace_pid, set_event_pid
        self.threads = list(threads or ())      # --thread: set_ftrace_comm, set_event_comm
        self.cpu_time = cpu_time                # --cpu-time: options/sleep-time 0
        self.c_calls = c_calls                  # --c-calls: options/func-c-calls

    def __repr__(self) -> str:
        return f"RecordOptions({vars(self)!r})"


def flush_all(tr: TraceArray) -> bool:
    """Hand every buffer's records to the sink now, from the sink's own thread (no
    waiting for room).  False if a buffer is being made or freed just now: the next
    tick does it (the instance's lock must not be waited for here: a thread ending
    holds it while its buffer is handed over, which may wait for this thread)."""
    if not tr.lock.acquire(blocking=False):
        return False
    try:
        for b in list(tr.buffers.values()):
            b.handoff(False)
    finally:
        tr.lock.release()
    return True


_PACKAGE = __package__.rpartition(".")[0]


def _loaded(name: str):
    """fntrace's module ``name`` if this process loaded it, else None: the control
    server (--serve, a program's fntrace.serve(): else nothing serves, nothing to pause
    at a fork) and hist (else no hist trigger was set) are not loaded by a recording
    that does not use them, a part of every start-up it need not pay."""
    return sys.modules.get(f"{_PACKAGE}.{name}")


def fork_before() -> None:
    sink.wrapped_fork_before()
    srv = _loaded("tracefs.server")
    if srv is not None:
        srv.pause_serving()


def fork_after() -> None:
    sink.wrapped_fork_after()
    srv = _loaded("tracefs.server")
    if srv is not None:
        srv.resume_serving()


def _setting_writes(opts: RecordOptions) -> list:
    """-b, -D, --thresh, -A, -R, --repr as control-file writes (tracefs/control.py)."""
    options = {}
    if opts.args:
        options["funcgraph-args"] = True
    if opts.retval:
        options["funcgraph-retval"] = True
    if opts.cpu_time:
        options["sleep-time"] = False
    if opts.c_calls:
        options["func-c-calls"] = True
    # the process's one switch, set either way as the recording always did
    options["object-repr"] = bool(opts.object_repr)
    return control.setting_writes(buffer_kb=opts.buffer_kb, max_depth=opts.max_depth,
                                  thresh_us=opts.thresh_us, options=options,
                                  labels=control.CLI_LABELS)


def _apply_filters(fs: Tracefs, opts: RecordOptions, mains: _MainSources,
                   warn=None) -> None:
    """-F/-N/-g/--graph-notrace, written to their filter files, each checked before the
    program runs: a pattern that matches nothing loaded is looked for in the source of
    the modules it can name (core/kallsyms.py) and refused, with the closest names,
    when it can never match; one that may still match at run time is kept, with a
    warning."""
    tr = fs.tr
    files = {"set_ftrace_filter": (tr.ops, False), "set_ftrace_notrace": (tr.ops, True),
             "set_graph_function": (tr.graph_fops, False),
             "set_graph_notrace": (tr.graph_notrace_fops, False)}

    def check(w) -> None:
        ops, notrace = files[w.path]
        pending = ops.notrace_pending if notrace else ops.pending
        cache = ops.notrace_mod_cache if notrace else ops.mod_cache
        _check_words(w.label, w.value, pending, cache, mains, warn)

    writes = control.filter_writes(filters=opts.filters, notrace=opts.notrace,
                                   graph_functions=opts.graph_functions,
                                   graph_notrace=opts.graph_notrace, labels=control.CLI_LABELS)
    fs.keep_unmatched = True        # the program's modules are not loaded yet
    try:
        control.apply_writes(fs, writes, cli=True, after=check)
    finally:
        fs.keep_unmatched = False


class _MainSources:
    """The program's own module for the checks (core/kallsyms.py), under each name it
    answers to — read only if a check needs it (parsing the program costs)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._mains: dict | None = None

    def lazy(self) -> dict:
        """{name: a function reading the source}: nothing is read until a check needs
        the program's own module."""
        names = ["__main__"] + ([self.target.module] if self.target.module != "__main__" else [])
        return {n: (lambda n=n: self.get()[n]) for n in names}

    def get(self) -> dict:
        if self._mains is None:
            from ..core import kallsyms
            t = self.target
            src = kallsyms.main_source(t.module, t.code)
            self._mains = {"__main__": src}
            if t.module != "__main__":
                self._mains[t.module] = src
            # probes on the program's own functions are checked against it too
            kallsyms.main_sources.clear()
            kallsyms.main_sources.update(self._mains)
        return self._mains


def _check_words(label: str, pat: str, pending, cache, mains, warn) -> None:
    from ..core import kallsyms
    from ..core.hash import _WORD_RE
    matched = {p.pattern for p in pending if p.matched}
    cached = {str(e): e for e in cache}
    for m in _WORD_RE.finditer(pat):
        word = m.group()
        if word.startswith("!"):
            continue
        func, sep, rest = word.partition(":")
        if sep:
            entry = cached.get(word)
            if entry is None:
                continue                # matched a loaded module
            mod = entry.module
            if mod in mains.lazy() or mod.startswith("!"):
                v = kallsyms.Verdict("unknown")
            else:
                v = kallsyms.check_mod_filter(entry.func, mod)
        elif word in matched:
            continue
        else:
            v = kallsyms.check_pattern(word, mains.lazy())
        where = f"{label} {pat!r}" if word == pat else f"{label} {pat!r}: {word!r}"
        close = f" (did you mean {v.close[0]!r}?)" if v.close else ""
        if v.kind == "none":
            raise UsageError(f"{where}: no function matches{close}")
        if v.kind == "maybe" and warn is not None:
            warn(f"{where}: no function matches yet; kept for run time, as {v.why}"
                 f"{close}")


def _apply_events(fs: Tracefs, opts: RecordOptions) -> None:
    """-e/-f/-T: dynamic events defined through dynamic_events, then each event's
    filter, trigger and enable files.  Any error is a UsageError with the caret."""
    if not opts.events:
        return
    from ..core import kallsyms
    for spec in opts.events:
        control.event_writes(fs, spec, main_sources=kallsyms.main_sources)


def _hist_texts(tr: TraceArray) -> dict[str, str]:
    """Each event's ``hist`` file as it reads now (events/hist.py), for the stats."""
    hist = _loaded("events.hist")
    if hist is None:
        return {}
    hist_text, hist_triggers_of = hist.hist_text, hist.hist_triggers_of
    return {f"{ef.call.system}:{ef.call.name}": hist_text(ef)
            for ef in list(tr.event_files.values()) if hist_triggers_of(ef)}


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


def _header(opts: RecordOptions, tr: TraceArray, argv: list[str]) -> dict:
    """The trace file's HEAD: the recording's settings and where its clock started."""
    return {
        "tracer": opts.tracer,
        "python": sys.version.split()[0],
        "backend": _env.BACKEND,
        "pid": os.getpid(),
        "argv": argv,
        "clock": "mono",
        "buffer_size_kb": tr.buffer_size_kb,
        "filters": opts.filters,
        "notrace": opts.notrace,
        "graph_functions": opts.graph_functions,
        "graph_notrace": opts.graph_notrace,
        "max_graph_depth": tr.max_graph_depth,
        "tracing_thresh_us": tr.tracing_thresh // 1000,
        "graph_args": tr.graph_args,
        "graph_retval": tr.graph_retval,
        # False: each return's calltime is its rettime less the call's CPU time
        "sleep_time": tr.sleep_time,
        "events": [e["event"] for e in opts.events],
        "object_repr": opts.object_repr,
        "start_wall": time.time(),
        # CLOCK_MONOTONIC at that moment: maps the default trace clocks (local,
        # global, mono, perf) to wall time (the OTLP export)
        "start_mono": time.monotonic_ns(),
    }


class Recording:
    """One recording, from its control files to the end of the process it runs in.

    ``record()`` runs a target under it; a process the recording follows (cli/follow.py)
    continues it: a forked child takes it over (``adopt_child``: fresh buffers, a file
    and a writer thread of its own), a Python started by the program begins one in
    place (``start_in_place``).

    ``at_exit``: the process ends after this (the command line), so tracing is stopped
    with ftrace_kill() instead of unpatching every site one by one.
    ``on_finished(guard, how)``: called once the file is complete, however the program
    ended (``live`` prints its report there), in the first process only; ``how`` is
    ("end", Outcome), ("exit", status), ("signal", signum), ("exec", None) or
    ("atexit", None).
    ``make_writer(header, tr)``: what the chunks go to instead of the trace file
    ``opts.output`` (``live``'s printer: cli/live.py); it has TraceFileWriter's
    methods.  ``follow``: the processes it starts are traced too (cli/follow.py).
    """

    def __init__(self, opts: RecordOptions, argv: list[str], *, at_exit: bool = False,
                 on_finished=None, make_writer=None, follow=None,
                 header: dict | None = None) -> None:
        # The instance and its control files first: every option is a write to one of
        # them (tracefs/control.py), checked before anything is created or run.
        tr = self.tr = TraceArray()
        fs = self.fs = Tracefs(tr)
        control.apply_writes(fs, _setting_writes(opts), cli=True)
        control.apply_writes(fs, control.thread_writes(tids=opts.tids, threads=opts.threads),
                             cli=True)
        try:
            fs.tracer_class(opts.tracer)
        except FntraceError as e:
            raise UsageError(f"-p: {e.msg}") from None
        if opts.compress and not compress_available():
            raise UsageError(COMPRESS_HINT)
        self.opts = opts
        self.at_exit = at_exit
        self.on_finished = on_finished
        self.make_writer = make_writer
        self.follow = follow
        self.first = True               # the process fntrace started (not a child)
        self.started = False
        self.stopped = False
        self.taken: str | None = None
        self.server: Server | None = None
        # the asyncio task-switch probe, once tracing
        self.tasks: TaskTracker | None = None
        self.otel: OtelTracker | None = None    # --otel-context's probe
        f = None
        if make_writer is None:
            f = _open_output(opts.output, opts.mode)
        self.header = _header(opts, tr, argv)
        self.header.update(header or {})
        if follow is not None:
            self.header.update(follow.header())
        self.sink = self._make_sink(f)
        from . import patch as _patch
        self.requests = [_patch.parse_patch(p) for p in opts.patches]
        self.guard = Guard(self._finish, fork_hooks=(fork_before, fork_after))

    def _make_sink(self, f) -> FileSink:
        tr = self.tr
        if self.make_writer is not None and self.first:
            writer = self.make_writer(self.header, tr)
        else:
            try:
                writer = TraceFileWriter(f, self.header, compress=self.opts.compress)
            except OSError as e:
                f.close()
                raise UsageError(f"{f.name}: {e.strerror}") from None
        sink = FileSink(writer, tr.buffer_size_kb)
        tr.sink = sink.queue
        sink.array = tr
        sink.flush_buffers = lambda: flush_all(tr)
        sink.on_signal = self._on_signal
        return sink

    # -- before the program ---------------------------------------------------------
    def prepare(self, mains: _MainSources | None) -> None:
        """Patches, filters, events and the control endpoint; ``mains`` checks each
        filter against the program's own module (None: a child, whose filters were
        checked by the first process)."""
        from . import patch as _patch
        _patch.install(self.requests)
        opts = self.opts
        if mains is not None:
            _apply_filters(self.fs, opts, mains, self.guard.notice)
            if opts.events:
                mains.get()
        else:
            writes = control.filter_writes(
                filters=opts.filters, notrace=opts.notrace,
                graph_functions=opts.graph_functions, graph_notrace=opts.graph_notrace,
                labels=control.CLI_LABELS)
            self.fs.keep_unmatched = True
            try:
                control.apply_writes(self.fs, writes, cli=True)
            finally:
                self.fs.keep_unmatched = False
        _apply_events(self.fs, opts)
        if opts.serve and self.first:
            from ..tracefs.server import serve
            try:
                self.server = serve(self.fs)
                from ..flight import register_flight_file
                register_flight_file(self.fs)
            except (FntraceError, OSError) as e:
                # The control endpoint is a convenience: a runtime directory another
                # user made first (or any other reason it cannot be had) turns control
                # off, not the program.
                why = e.msg if isinstance(e, FntraceError) else (e.strerror or str(e))
                pr_warn(f"--serve: control is off for this run: {why}")

    def start_tracing(self) -> None:
        """The tracer on, the end guarded (the program's first line is next)."""
        self.guard.install(self.sink.wfd)
        if hasattr(os, "register_at_fork"):
            # after the guard's own hook, which gives a child the real os._exit back;
            # before: the forking thread's id, which the child's header names (a
            # reader joins the child to the parent's thread there: a Perfetto flow)
            os.register_at_fork(before=self._before_fork, after_in_child=self._in_child)
        credit = callback_credit()
        if credit and _native_launch is not None:
            main_ident = threading.get_ident()

            def credit_thread(cpu: int) -> None:
                if threading.get_ident() != main_ident:    # the main one has it
                    _native_launch.credit(credit)
            task.new_thread_hooks.append(credit_thread)
        # The trackers before the tracer: importing them must not be traced.
        # (asyncio:task_create's readers join a Task's creation to its first switch to
        # it: the switches are written with the creations, whatever the tracer)
        creates = self.tr.event_files.get(("asyncio", "task_create"))
        if self.tasks is None and (self.opts.tracer in ("function", "function_graph")
                                   or (creates is not None and creates.enabled)):
            # which asyncio Task each call ran in (events/task_switch.py)
            from ..events.task_switch import TaskTracker
            self.tasks = TaskTracker(self.tr)
            self.tasks.start()
        if self.opts.otel_context and self.otel is None:
            # the OpenTelemetry span each call ran in (events/otel_context.py)
            from ..events.otel_context import OtelTracker
            self.otel = OtelTracker(self.tr)
            self.otel.start()
        self.started = True
        # checked in __init__ (tracer_class): this write does not fail
        self.fs.write("current_tracer", self.opts.tracer)

    def start_in_place(self) -> None:
        """A child that is a new Python (spawn, forkserver, a subprocess): traced from
        its bootstrap on, finished at its exit (the last atexit function: the program's
        own run before it), by os._exit or by a fatal signal as any recording."""
        import atexit
        # "__main__" is the interpreter's, still empty: ':mod:__main__' filters wait
        # for the program's functions
        record_table.main_pending = True
        try:
            self.prepare(None)
        finally:
            record_table.main_pending = False
        self.start_tracing()
        atexit.register(self._end_in_place)

    def _end_in_place(self) -> None:
        if self.sink.mine() and not self.stopped:
            self.guard.finish(("atexit", None))

    # -- a forked child -------------------------------------------------------------
    def _before_fork(self) -> None:
        self.fork_tid = threading.get_native_id()

    def _in_child(self) -> None:
        if not self.started or self.stopped or self.guard.how is not None:
            return
        if self.follow is None:
            self.tr.tracing_on = False          # the trace is the parent's
            return
        try:
            self.adopt_child()
        except BaseException as e:       # the child runs on, untraced, and says why
            self.tr.tracing_on = False
            self.stopped = True
            pr_warn(f"process {os.getpid()} (forked): not traced: {e}")

    def adopt_child(self) -> None:
        """Right after fork, in the child: the recording goes on as this process's
        own.  The buffers held the parent's records (the parent writes them) and the
        other threads' (gone): the child starts with none, and each thread takes a new
        one at its next event; a file of its own, written by a thread of its own."""
        tr = self.tr
        # Off while the child's own sink is made: a call traced in between (the
        # program's functions its own at-fork hooks call, or the stdlib this code
        # calls) would take a buffer that hands over to the parent's queue, which no
        # thread of this process drains.
        was_on, tr.tracing_on = tr.tracing_on, False
        ppid = self.header.get("pid")
        tr.pid = os.getpid()
        dispatch.callback_errors[0] = 0
        fetch.settings.repr_faults = 0
        if self.tasks is not None:
            self.tasks.switches = 0
        self.first = False
        self.server = None
        self.header = dict(self.header, pid=os.getpid(), ppid=ppid, follow="fork",
                           parent_tid=getattr(self, "fork_tid", None),
                           start_wall=time.time(), start_mono=time.monotonic_ns())
        path = self.follow.child_output()
        # A signal that ends the process between creating the file and writing its
        # HEAD block (a pool's terminate() right after the fork) would leave a file no
        # reader can open, and the whole process would be left out of the trace: the
        # signals that end a process by default wait until the head is written, then
        # act as they would have.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING_SIGNALS)
        try:
            self.sink = self._make_sink(_open_output(path, self.opts.mode))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        # The buffers held the parent's records (the parent writes them) and the other
        # threads' (gone): every thread takes a new one, handing over to this sink, at
        # its next event (a new serial: the native per-thread caches are stale too).
        tr.forget_threads()
        # the parent's threads keep their slots (thread_info) but are not this
        # process's: only the slots taken from now on go in its file
        self.sink.threads_written.update(thread_info)
        self.guard.adopt(self.sink.wfd)
        tr.tracing_on = was_on

    # -- the end --------------------------------------------------------------------
    def stop_tracing(self) -> None:
        # Off first, so nothing below is traced; then hand what is left to the file.
        if self.stopped:
            return
        self.stopped = True
        tr = self.tr
        self.taken = ops_backend.profile_taken()
        tr.tracing_on = False
        for probe in (self.tasks, self.otel):
            if probe is not None:
                probe.stop()
        if self.at_exit and not self.requests and not self.opts.events:
            ftrace_kill()
        elif tr.tracer is not None:
            tr.tracer.reset(tr)
            tr.tracer = None
        # No thread waits for the writer from here on: it may be the writer itself
        # finishing (a fatal signal), and it drains everything right after.
        self.sink.queue.limit = 0
        tr.flush()

    def _on_signal(self, signum: int) -> None:
        # On the writer thread: the program is still running on its own threads.  If
        # another thread is already finishing (os._exit, whose exit a pool's
        # terminate() races with SIGTERM), it waits for this thread: let it.
        guard = self.guard

        def stop_program() -> None:
            # the program stops at its next bytecode where it can (asked again between
            # the chunks written on the way out); a thread that hands a chunk over
            # stays there
            self.sink.queue.hold = threading.get_ident()
            self.sink.on_progress = guard.stop_program
            # asked every millisecond for a moment before anything is written: the
            # pure hot path's callbacks, where it cannot stop, are most of a traced
            # program's time, and one ask rarely lands outside them
            guard.stop_program(settle=0.2)
        if guard.finish(("signal", signum), wait=False, on_claim=stop_program):
            guard.die(signum)
        else:
            guard.die_after_finish(signum)

    def _finish(self, how) -> None:
        """The one end of a recording (guard.finish runs it once)."""
        sink, guard, tr, opts = self.sink, self.guard, self.tr, self.opts
        if not sink.mine():
            return
        if self.server is not None:
            self.server.stop()       # no control write races the end
        self.stop_tracing()
        for msg in dispatch.unsaid_notices():
            guard.notice(msg)
        if self.taken is not None:
            if self.taken == "since removed":
                # No new function: the C API set none (a profiler's disable()), or
                # CPython dropped a Python hook that raised (the pure hook at the
                # recursion limit cannot even start).  Both are possible; say both.
                guard.notice("the profile function of the program's main thread was "
                             "removed (through the C API, e.g. a profiler's disable(), or "
                             "by CPython when the hook could not run at the recursion "
                             "limit): tracing stopped on that thread there")
            else:
                guard.notice(f"the program installed its own profile function "
                             f"({self.taken}) through the C API: tracing stopped on "
                             "its thread there")
        status = how[1].status if how[0] == "end" else (how[1] if how[0] == "exit" else None)
        cpus = {str(c): {"written": w, "overrun": o, "dropped": d}
                for c, (w, o, d) in list(tr.retired.items())}
        cpus.update({str(c): {"written": b.written, "overrun": b.overrun, "dropped": b.dropped}
                     for c, b in list(tr.buffers.items())})
        stats = {
            "cpus": cpus,
            "callback_errors": dispatch.callback_errors[0],
            "repr_faults": fetch.settings.repr_faults,
            "exit_status": status,
            # the clock of the timestamps (trace_clock may be written while it runs)
            "trace_clock": tr.clock,
            # each event's fields, final only now (a probe on a module imported late
            # learns its parameters when it binds): readers split event text with them
            "event_formats": tr.event_formats(),
            # asyncio:task_switch events written: readers place calls under tasks
            "task_switches": self.tasks.switches if self.tasks is not None else 0,
        }
        hists = _hist_texts(tr)
        if hists:
            stats["hists"] = hists
        if how[0] == "signal":
            stats["signal"] = how[1]
            sink.finish_here(stats)
        else:
            sink.finish(stats)
        record_table.main_pending = False
        from . import patch as _patch
        for msg in _patch.finish(self.requests):
            guard.notice(msg)
        if sink.error is not None:
            name = opts.output if self.first else f"process {os.getpid()}"
            guard.notice(f"{name}: writing the trace failed ({sink.error}); "
                         f"{sink.lost} events lost")
        if not self.first:
            return              # the filters and events were the first process's to say
        children = self.follow.children() if self.follow is not None else []
        where = " in this process (the others' traces show theirs)" if children else ""
        for pat in unmatched_patterns(tr):
            guard.notice(f"filter {pat!r} matched no function{where}")
        if opts.events:
            from ..events.fprobe_event import unbound_events
            for ev in unbound_events():
                guard.notice(f"event {ev}")
        if self.follow is not None:
            if how[0] != "exec":        # (the Python it becomes is followed too)
                self.follow.stop()
            self.follow.finished(guard, children)
        if self.on_finished is not None:
            self.on_finished(guard, how)

    def abort(self) -> None:
        """fntrace's own failure before the program ran (a bad option): no trace."""
        if self.server is not None:
            self.server.stop()
        self.stop_tracing()
        self.guard.uninstall()
        if self.sink.mine() and self.guard.how is None:
            self.sink.finish({"cpus": {}, "callback_errors": 0, "exit_status": None})
        if self.follow is not None:
            self.follow.stop()


# Asynchronous signals whose default action ends the process (not SIGKILL, which cannot
# wait, nor the synchronous faults).
ENDING_SIGNALS = frozenset(getattr(signal, n) for n in (
    "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPIPE",
    "SIGVTALRM", "SIGPROF", "SIGXCPU", "SIGXFSZ") if hasattr(signal, n))


def _open_output(path: str, mode: int = TRACE_MODE):
    try:
        return create_output(path, mode, buffering=0)
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None


def record(target: Target, opts: RecordOptions, *, at_exit: bool = False,
           on_finished=None, make_writer=None, follow: str | None = None,
           scratch: bool = False) -> Outcome:
    """Run ``target`` traced; write ``opts.output``; return how the program ended.
    ``follow``: the processes it starts are traced too, each into a file of its own
    named after this path (``opts.output``; for ``live`` one in a ``scratch``
    directory, made when a child needs it) and its pid (cli/follow.py, tracefile/trace_set.py).
    The rest: Recording."""
    fw = None
    if follow:
        from .follow import Follow
        fw = Follow(opts, follow, scratch=scratch)
    rec = Recording(opts, [target.argv0, *target.args], at_exit=at_exit,
                    on_finished=on_finished, make_writer=make_writer, follow=fw)
    # Modules are looked up as the program will look them up: its sys.path[0] first.
    if sys.path:
        sys.path[0] = target.path0
    # Until the target runs, "__main__" is fntrace's own launcher: never list it, and
    # let ':mod:__main__' filters wait for the target's module.
    main = sys.modules.get("__main__")
    if main is not None:
        record_table.scanned.add("__main__")
        record_table.module_ids["__main__"] = id(main)
    record_table.main_pending = True
    outcome = Outcome(1)
    try:
        rec.prepare(_MainSources(target))
        if fw is not None:
            fw.main_alias = target.module if target.module != "__main__" else None
            fw.start()

        def start(mod, code) -> None:
            record_table.main_alias = target.module if target.module != "__main__" else None
            record_table.main_pending = False
            record_table.scanned.add("__main__")
            record_table.module_ids["__main__"] = id(mod)
            scan_code_as(code, "__main__")
            code = record_table.rewrite("__main__", mod.__dict__, code)
            rec.start_tracing()
            return code

        outcome = run_target(target, start)
        if rec.sink.mine():
            finish_program()
            rec.stop_tracing()
            rec.guard.take_back_signals()
    except BaseException:
        rec.abort()
        raise
    if not rec.sink.mine():
        # a forked child on its way out: the file and the reports are the parent's
        rec.stop_tracing()
        return outcome
    guard = rec.guard               # (a forked child's own, since it took over)
    guard.finish(("end", outcome))
    assert guard.how is not None        # finish() above set it, or found it set
    if guard.how[0] not in ("end", "exec failed"):
        # A fatal signal or os._exit got there first: the process ends there.
        threading.Event().wait()
    if outcome.sigint and at_exit:
        guard.die(signal.SIGINT)        # python's exit_sigint(): the shell sees ^C
    guard.uninstall()
    if opts.events:
        for ef in list(rec.tr.event_files.values()):
            ef.set_enabled(False)
            ef.clear_triggers()
    return outcome


# -- the command ---------------------------------------------------------------------
EPILOG = """\
each option is written to a control file of the trace's tracefs instance, and takes
that file's grammar and errors:
  -p current_tracer  -F set_ftrace_filter  -N set_ftrace_notrace
  -g set_graph_function  --graph-notrace set_graph_notrace  -D max_graph_depth
  --thresh tracing_thresh  -A options/funcgraph-args  -R options/funcgraph-retval
  --cpu-time options/sleep-time 0
  --repr options/object-repr  -b buffer_size_kb  -e dynamic_events, events/GRP/EVENT/enable
  --tid set_ftrace_pid, set_event_pid  --thread set_ftrace_comm, set_event_comm
  -f events/GRP/EVENT/filter  -T events/GRP/EVENT/trigger

examples:
  fntrace record -F 'shop.*' examples/shop_demo.py           # trace a package's functions
  fntrace record -p function_graph -F '*:mod:__main__' app.py --port 8000
  fntrace record -g 'json.encoder.*' -A -R -m json.tool data.json
  fntrace report                                              # then read fntrace.dat"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_record_options(p)
    p.add_argument("-o", "--output", default="fntrace.dat", metavar="FILE",
                   help="trace file to write (default: fntrace.dat)")
    p.add_argument("--compress", action="store_true",
                   help="zstd-compress the trace file's blocks (pip install fntrace[compress])")
    g = p.add_argument_group("flight recorder (nothing is written until a dump)")
    g.add_argument("--flight-recorder", default=None, metavar="KB",
                   help="trace into overwrite buffers of KB per thread and write only "
                        "dumps: the last calls of every thread when --dump-on fires, "
                        "in fntrace-PID-TIME-REASON.dat")
    g.add_argument("--dump-on", action="append", default=[], metavar="WHEN",
                   help="exception (uncaught, any thread; the default), exception:TYPE "
                        "(any raise of it), 'SYS:EVENT [if FILTER]', signal:SIGUSR2, "
                        "slow:FUNC>MS, exit:nonzero (repeatable)")
    g.add_argument("--max-dumps", type=int, default=10, metavar="N",
                   help="write at most N dumps (default 10; the others are counted)")
    g.add_argument("--dump-dir", default=".", metavar="DIR",
                   help="where the dumps go (default: the current directory)")
    add_mode_argument(p)
    add_target(p)


def run(args, at_exit: bool) -> int:
    if args.flight_recorder is not None:
        return fly(args).status
    return record_from_args(args, args.output, at_exit).status


def fly(args) -> Outcome:
    """--flight-recorder: the program runs traced into overwrite buffers, and only the
    dumps its triggers ask for are written (fntrace/flight.py)."""
    from ..flight import FlightRecorder
    try:
        size = int(args.flight_recorder)
    except ValueError:
        raise UsageError(f"--flight-recorder {args.flight_recorder!r}: a size in KB "
                         "(each thread's buffer)") from None
    if size < 1:
        raise UsageError(f"--flight-recorder {size}: at least 1 KB")
    if args.max_dumps < 1:
        raise UsageError(f"--max-dumps {args.max_dumps}: at least 1")
    defaults: dict[str, object] = {
        "output": "fntrace.dat", "buffer_size_kb": "1408", "events": None, "patch": [],
        "serve": False, "tid": [], "thread": [], "graph_function": [], "graph_notrace": [],
        "max_depth": None, "thresh": None, "retval": False, "cpu_time": False,
        "compress": False, "otel_context": False, "object_repr": False, "mode": None}
    flags = {"output": "-o", "buffer_size_kb": "-b (the size is --flight-recorder's)",
             "events": "-e", "patch": "--patch", "serve": "--serve", "tid": "--tid",
             "thread": "--thread", "graph_function": "-g", "graph_notrace": "--graph-notrace",
             "max_depth": "-D", "thresh": "--thresh", "retval": "-R", "cpu_time": "--cpu-time",
             "compress": "--compress", "otel_context": "--otel-context", "object_repr": "--repr",
             "mode": "--mode"}
    given = [flags[k] for k, v in defaults.items() if getattr(args, k, v) not in (v, None, [])]
    if given:
        raise UsageError(f"--flight-recorder does not take {', '.join(given)} (it writes "
                         "only dumps, named after the reason, in --dump-dir)")
    tracer = choose_tracer(args)
    if tracer == "function" and args.tracer is None:
        tracer = "function_graph"       # the durations and the nesting of the last calls
    target = target_of(args)
    fr = FlightRecorder(args.filter or None, args.notrace or None, size_kb=size,
                        dump_on=args.dump_on or ["exception"], directory=args.dump_dir,
                        max_dumps=args.max_dumps, tracer=tracer, args=args.args, cli=True,
                        c_calls=args.c_calls)
    if sys.path:
        sys.path[0] = target.path0
    record_table.main_pending = True

    def start(mod, code):
        record_table.main_alias = target.module if target.module != "__main__" else None
        record_table.main_pending = False
        record_table.scanned.add("__main__")
        record_table.module_ids["__main__"] = id(mod)
        scan_code_as(code, "__main__")
        fr.start()
        return code

    outcome = Outcome(1)
    try:
        outcome = run_target(target, start)
        finish_program()
        if ("exit",) in fr.triggers and outcome.status != 0:
            fr.dump(f"exit {outcome.status}")
    finally:
        fr.stop()
    return outcome


def record_from_args(args, output: str, at_exit: bool, on_finished=None, make_writer=None,
                     follow: str | None = None) -> Outcome:
    """The recording the command line asks for (record's, live's)."""
    tracer = choose_tracer(args)
    # The numbers go as typed: the control files they are written to check them
    # (tracefs/control.py), before the program runs.
    opts = RecordOptions(tracer=tracer, filters=args.filter, notrace=args.notrace,
                         buffer_kb=args.buffer_size_kb, output=output,
                         graph_functions=args.graph_function, graph_notrace=args.graph_notrace,
                         max_depth=args.max_depth, thresh_us=args.thresh,
                         args=args.args, retval=args.retval, events=args.events or [],
                         patches=args.patch, object_repr=args.object_repr,
                         tids=args.tid, threads=args.thread,
                         cpu_time=getattr(args, "cpu_time", False),
                         c_calls=getattr(args, "c_calls", False))
    opts.compress = getattr(args, "compress", False)
    opts.mode = getattr(args, "mode", None) or opts.mode
    opts.serve = getattr(args, "serve", False)
    opts.otel_context = getattr(args, "otel_context", False)
    target = target_of(args)
    if follow is None and output:
        follow = output
    return record(target, opts, at_exit=at_exit, on_finished=on_finished,
                  make_writer=make_writer, follow=follow if args.follow else None,
                  scratch=make_writer is not None)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
