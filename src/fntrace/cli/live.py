"""``fntrace live``: the trace printed while the program runs, the way ``trace_pipe``
shows it.

``live`` is ``record`` with a printer in place of the trace file: the ring buffers hand
their chunks to the sink's thread (tracefile/sink.py), which flushes every buffer each
``TICK`` (25 ms) and gives the chunks to ``LivePrinter``.  Nothing is kept once it is
printed, so an endless program needs no more memory or disk than a short one; nothing
is lost either (a full buffer waits for the printer, as for the file).

Two ways to print, chosen by how long the program runs:

* **The program ends within the hold** (``FNTRACE_LIVE_HOLD``, 0.1 s after its first
  event): the chunks were kept, and the output is what it has always been, the whole
  ``trace`` text after the program's own output (header with the entries counts and
  what was lost, then every line).
* **It runs on**: the printer starts streaming.  It prints the header (without the
  entries line: the counts are not known yet), then each event within about
  ``TICK + GRACE`` of being written, as ``trace_pipe`` prints it: merged across
  threads in time order (an event is printed once every thread has been read past
  it), function_graph's per-thread depth kept across reads.  A call that returns within
  ``GRACE`` (50 ms) of its entry prints as one line (``func();``) as in ``trace``; a
  longer one prints ``func() {`` when it is entered and ``}`` when it returns, as the
  kernel's pipe does.  Lines are interleaved with the program's own output as they
  happen.  At the end comes what ``trace``'s header would have said: the
  ``entries-in-buffer/entries-written`` line and what was lost, after a ``#`` line.
  (function_graph's CPU column is as wide as the highest thread index seen so far.)
"""
from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import time

from ..core.task import thread_info
from ..errors import FntraceError
from ..output.pipe import PipeRenderer
from ..output.registry import name_of, nr_cpus_of
from ..ring_buffer import payloads_by_seq
from ..output.render import render_trace
from ..tracefile.reader import TraceFile
from ..tracefile.trace_set import TraceSet, child_files
from ..tracefile.writer import TraceFileWriter
from .args import add_record_options, add_report_options, add_target, report_opts
from .guard import fd_ok
from .report import loss_notes, report_text

__all__ = ["LivePrinter", "HOLD", "GRACE", "EPILOG", "add_arguments", "run"]

# Seconds after the first event that the output is held, so that a program that ends
# by then prints exactly the ``trace`` text (FNTRACE_LIVE_HOLD overrides).
HOLD = 0.1
# How long a function_graph entry waits for its return before it prints open.
GRACE = 0.05


def _ended_by(signum) -> str:
    try:
        name = signal.Signals(int(signum)).name
    except (ValueError, TypeError):
        name = f"signal {signum}"
    return f"# the program was ended by {name}: calls still open then have no end"


def _hold() -> float:
    v = os.environ.get("FNTRACE_LIVE_HOLD")
    if v:
        try:
            return max(0.0, float(v))
        except ValueError:
            pass
    return HOLD


class LivePrinter:
    """What ``live``'s chunks go to: TraceFileWriter's methods (record.py calls them
    on the sink's thread), ``tick`` each TICK, and ``report`` at the end (on the
    thread that finishes, after the program's own output is flushed)."""

    def __init__(self, header: dict, tr, options: dict, out_fd: int,
                 follow: str | None = None) -> None:
        self.header = header
        # where the followed processes' files are (cli/follow.py): reported at the end
        self.follow = follow
        self.tr = tr
        self.options = dict(options)
        # What was recorded is shown unless turned off (as report_text does).
        self.options.setdefault("funcgraph-args", bool(header.get("graph_args")))
        self.options.setdefault("funcgraph-retval", bool(header.get("graph_retval")))
        self.tracer = header.get("tracer", "function")
        self.out_fd = out_fd
        self.hold_ns = int(_hold() * 1e9)
        self.streaming = True       # the sink ticks for us from the start
        self.printing = False       # past the hold: lines go out as they come
        self.log: list[tuple] = []  # held: (method, args) to replay into a file
        self.first_ns: int | None = None
        self.nr_entries = 0
        self.stats: dict | None = None
        self.broken = False         # the reader of our output went away
        self.pr: PipeRenderer | None = None

    # -- TraceFileWriter's methods ---------------------------------------------------
    def add_symbols(self, syms) -> None:
        if not self.printing:
            self.log.append(("add_symbols", (list(syms),)))

    def add_symbol(self, ip: int, name: str, filename: str, line: int) -> None:
        if not self.printing:
            self.log.append(("add_symbols", ([(ip, name, filename, line)],)))

    def add_thread(self, cpu: int, native_id: int, name: str) -> None:
        if not self.printing:
            self.log.append(("add_thread", (cpu, native_id, name)))

    def write_chunk(self, cpu: int, records, first_seq: int, lost: int = 0,
                    payloads=None) -> None:
        n = len(records) // 32
        if not n:
            return
        if payloads:
            # (a native buffer lists them in its flagged records' order)
            payloads = payloads_by_seq(records, first_seq, payloads)
        self.nr_entries += n
        if self.first_ns is None:
            self.first_ns = time.monotonic_ns()
        if not self.printing:
            self.log.append(("write_chunk", (cpu, bytes(records), first_seq, lost,
                                             dict(payloads) if payloads else None)))
            return
        assert self.pr is not None          # made by _start, which set printing
        self.pr.feed_chunk(cpu, first_seq, records, payloads, name_of, thread_info)

    def close(self, stats: dict | None = None) -> None:
        self.stats = dict(stats or {})

    # -- as it goes -------------------------------------------------------------------
    def tick(self, upto: int | None, now: int) -> None:
        """Every buffer has been read up to ``upto`` (None: not this time)."""
        if not self.printing:
            if self.first_ns is None or now - self.first_ns < self.hold_ns:
                return
            self._start()
        assert self.pr is not None          # made by _start
        self._emit(self.pr.lines(upto=upto if upto is not None else -1, now=now))

    def _start(self) -> None:
        """The hold is over: print the header and what was held, then stream."""
        self.printing = True
        self.pr = PipeRenderer(self.tracer, self.options, grace_ns=int(GRACE * 1e9))
        head = list(render_trace([], tracer=self.tracer, options=self.options,
                                 nr_entries=0, written=0, nr_cpus=1))
        out = []
        skip = False
        for line in head:
            if line.startswith("# entries-in-buffer/"):
                skip = True         # and the "#" after it
                continue
            if skip and line == "#":
                skip = False
                continue
            out.append(line)
        self._emit(out)
        for method, args in self.log:
            if method == "write_chunk":
                cpu, records, first_seq, _, payloads = args
                self.pr.feed_chunk(cpu, first_seq, records, payloads, name_of, thread_info)
        self.log = []

    def _emit(self, lines: list[str]) -> None:
        if not lines or self.broken:
            return
        data = "".join(line + "\n" for line in lines).encode("utf-8", "backslashreplace")
        try:
            while data:
                n = os.write(self.out_fd, data)
                data = data[n:]
        except OSError:
            self.broken = True      # `fntrace live ... | head`: nothing more to show

    # -- the end ---------------------------------------------------------------------
    def report(self, out, err) -> None:
        """The rest, once the program and the recording have ended: the whole trace
        text (if still held), or the last lines and what was lost."""
        if self.broken:
            return
        stats = self.stats or {}
        if not self.printing:
            buf = io.BytesIO()
            w = TraceFileWriter(buf, self.header)
            for method, args in self.log:
                getattr(w, method)(*args)
            w.close(stats)
            self.log = []
            tf: TraceFile | TraceSet
            tf = TraceFile.frombytes(buf.getvalue(), "<live>")
            children = self._children()
            if children:
                tf = TraceSet([tf, *children])
            counted = False
            for line in report_text(tf, options=self.options):
                counted = counted or line.startswith("# entries-in-buffer/")
                out.write(line + "\n")
            if stats.get("signal"):
                # cut short: what trace's header says for a function trace, for any
                trailer = ["#"]
                if not counted:
                    n = self.nr_entries
                    written = self._written(stats, n)
                    trailer.append(f"# entries-in-buffer/entries-written: {n}/{written}   "
                                   f"#P:{nr_cpus_of(list(thread_info))}")
                    # what the counts do not hold, said as the streamed trailer says it
                    # (a pure callback the signal met mid-way may write one more record
                    # after the last chunk was taken)
                    notes = loss_notes(stats, n, written)
                    trailer += notes[:-1] if notes else []
                trailer.append(_ended_by(stats["signal"]))
                out.write("".join(t + "\n" for t in trailer))
            self._hists(out, children)
            out.flush()
            return
        out.flush()
        assert self.pr is not None          # printing: _start made it
        self._emit(self.pr.lines(final=True))
        entries = self.nr_entries
        written = self._written(stats, entries)
        # What trace's header would have said, after a "#" line: the entries counts
        # (function_graph's header has none; a stream that ended mid-call is worth
        # them), what was lost, and a signal that ended the program.
        nr = nr_cpus_of(list(thread_info))
        trailer = ["#", f"# entries-in-buffer/entries-written: {entries}/{written}"
                        f"   #P:{nr}"]
        notes = loss_notes(stats, entries, written)
        trailer += notes[:-1] if notes else []
        if stats.get("signal"):
            trailer.append(_ended_by(stats["signal"]))
        self._emit(trailer)
        children = self._children()
        if children:
            # streamed: the first process's lines went out as they came; the others'
            # follow, merged by time, as their own trace
            self._emit(["#", f"# {len(children)} more processes:"])
            self._emit(list(report_text(TraceSet(children), options=self.options)))
        self._hists(out, children)

    @staticmethod
    def _written(stats: dict, entries: int) -> int:
        """entries-written: what the buffers took, and what the writer could not write."""
        cpus = stats.get("cpus")
        if not isinstance(cpus, dict):
            cpus = {}
        w = sum(int(c.get("written", 0)) for c in cpus.values() if isinstance(c, dict))
        return max(entries, w) + int(stats.get("lost_in_writer") or 0)

    def _hists(self, out, children) -> None:
        """The hist triggers' tables (cli/hist.py), after the trace."""
        from .hist import hist_sections
        traces = [(self.header.get("pid"), self.stats)]
        traces += [(int(c.header.get("pid") or 0), c.stats) for c in children]
        sections = hist_sections(traces)
        if sections:
            out.write("\n" + "\n".join(sections))
            out.flush()

    def _children(self) -> list:
        """The followed processes' trace files of this run, as far as they got."""
        if not self.follow:
            return []
        out = []
        for p in child_files(self.follow):
            try:
                tf = TraceFile.open(p)
            except Exception:
                continue
            if tf.header.get("run") == self.header.get("run"):
                out.append(tf)
        return out


# -- the command ---------------------------------------------------------------------
EPILOG = """\
examples:
  fntrace live -F 'shop.*' -F '*:mod:__main__' examples/shop_demo.py
  fntrace live -p function_graph -F 'textwrap.*' -c 'import textwrap; textwrap.dedent("  x")'
  fntrace live -e 'f shop.cart.Cart.add_item product.sku quantity' examples/shop_demo.py
  fntrace live -F 'pydoc.*' -m pydoc -w json     # everything after -m MOD is the program's"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_record_options(p)
    add_report_options(p)
    add_target(p)


def run(args, at_exit: bool) -> int:
    """record with a printer in place of the trace file (cli/live.py): the trace
    streams while the program runs, and nothing is kept once printed."""
    import secrets
    import shutil
    import tempfile
    from .record import record_from_args
    ropts = report_opts(args)
    out_fd = os.dup(1) if fd_ok(1) else os.open(os.devnull, os.O_WRONLY)
    printers: list = []
    # the followed processes' traces, reported with the first one's at the end
    # (made by the first child that needs it: a program that starts none leaves
    # nothing behind, not even for a moment)
    scratch = (os.path.join(tempfile.gettempdir(),
                            f"fntrace-live-{os.getpid()}-{secrets.token_hex(4)}")
               if args.follow else None)
    follow = os.path.join(scratch, "live.dat") if scratch else None
    first_pid = os.getpid()

    def make_writer(header, tr):
        p = LivePrinter(header, tr, ropts.get("options") or {}, out_fd, follow)
        printers.append(p)
        return p

    def on_finished(guard, how) -> None:
        # The program's output first, then the rest of the trace, on the streams it
        # started with.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        out, err = guard.stdout(), guard.stderr()
        try:
            for p in printers:
                p.report(out, err)
        except BrokenPipeError:
            pass
        except FntraceError as e:
            err.write(f"fntrace: {e.msg}\n")
        finally:
            for s in (out, err):
                try:
                    s.close()
                except BaseException:
                    pass
            # (os._exit does not come back to run); only the first process: the
            # scratch directory holds the files of its children, which may still run
            if scratch is not None and os.getpid() == first_pid:
                shutil.rmtree(scratch, ignore_errors=True)

    try:
        outcome = record_from_args(args, "", at_exit, on_finished, make_writer, follow)
    finally:
        try:
            os.close(out_fd)
        except OSError:
            pass
        if scratch is not None and os.getpid() == first_pid:
            shutil.rmtree(scratch, ignore_errors=True)
    return outcome.status


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
