"""Following the processes of a traced program (``record``/``live``; ``--no-follow``).

ftrace sees every process; a Python program is often several (a multiprocessing pool,
a ProcessPoolExecutor, a Python subprocess).  Each process the program starts is
traced with the same settings into a trace file of its own, beside the first and named
after its pid (tracefile/trace_set.py reads them as one trace):

    os.fork(), multiprocessing "fork",    the child takes the recording over right
    ProcessPoolExecutor on fork            after fork (Recording.adopt_child): fresh
                                           buffers, its own file and writer thread
    a new interpreter: multiprocessing     FNTRACE_FOLLOW in the environment and this
    "spawn" and "forkserver" (and the      package's follow_site/ first on PYTHONPATH:
    forkserver's forks), subprocess or     its sitecustomize (chained to the one it
    os.exec* of python                     hides) starts a recording in place
                                           (follow_child.py) before the program's first
                                           line; a program that is not Python, or a
                                           Python without this fntrace, is left alone

Both variables are what the program sees of it (as coverage's COVERAGE_PROCESS_START);
the bootstrap takes its directory off the child's ``sys.path``.  A child that cannot
trace (its file cannot be made) says so on its standard error and runs on untraced: the
parent and its other children are not touched.
"""
from __future__ import annotations

import os

from ..tracefile.blocks import MAGIC
from ..tracefile.children import child_files, child_path
from ..tracefile.writer import json_text

__all__ = ["ENV", "SITE_DIR", "CHILD_OPTIONS", "Follow"]

ENV = "FNTRACE_FOLLOW"
#: The directory whose sitecustomize.py starts a child's recording.
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "follow_site")

# RecordOptions fields a child takes (follow_child.py) (its output is its own; the endpoint is the first
# process's)
CHILD_OPTIONS = ("tracer", "filters", "notrace", "buffer_kb", "graph_functions", "graph_notrace",
         "max_depth", "thresh_us", "args", "retval", "events", "patches", "object_repr",
         "tids", "threads")


class Follow:
    """The run's id and where its processes' files go: ``base`` (the first process's
    file) and ``base.PID`` beside it."""

    def __init__(self, opts, base: str, run: str | None = None, scratch: bool = False,
                 first_pid: int | None = None) -> None:
        self.opts = opts
        self.base = os.path.abspath(base)
        self.run = run or os.urandom(8).hex()
        # live's: base is in a directory of its own, made by the first child that
        # needs it and removed by the first process at its end (a child starting as it
        # ends may make it again: that child takes it away at its own end, see
        # start_child)
        self.scratch = scratch
        self.first_pid = first_pid or os.getpid()
        self.main_alias: str | None = None

    def header(self) -> dict:
        return {"run": self.run}

    def start(self) -> None:
        """Before the program's first line: a child file left by an earlier recording
        to the same name goes (a reader would not mix them: the run ids differ), and
        new interpreters learn what to do."""
        for p in child_files(self.base):
            try:
                with open(p, "rb") as f:
                    if f.read(len(MAGIC)) != MAGIC:
                        continue
                os.unlink(p)
            except OSError:
                pass
        spec = {"run": self.run, "base": self.base, "scratch": self.scratch,
                "first": self.first_pid,
                "opts": {k: getattr(self.opts, k) for k in CHILD_OPTIONS},
                "compress": bool(getattr(self.opts, "compress", False)),
                "mode": int(getattr(self.opts, "mode", 0o600)),
                "otel_context": bool(getattr(self.opts, "otel_context", False)),
                # the module ``-m`` runs: what the parent's main module is named
                "main_alias": self.main_alias}
        self._saved = {k: os.environ.get(k) for k in (ENV, "PYTHONPATH")}
        os.environ[ENV] = json_text(spec)
        path = os.environ.get("PYTHONPATH")
        if not path or path.split(os.pathsep)[0] != SITE_DIR:
            os.environ["PYTHONPATH"] = SITE_DIR + (os.pathsep + path if path else "")

    def child_output(self) -> str:
        """This process's file: base.PID, or base.PID.N for a later image of the
        same pid (os.exec* of python)."""
        if self.scratch:
            os.makedirs(os.path.dirname(self.base), mode=0o700, exist_ok=True)
        pid = os.getpid()
        n = 0
        while os.path.exists(child_path(self.base, pid, n)):
            n += 1
        return child_path(self.base, pid, n)

    def children(self) -> list[str]:
        """The files of this run's other processes written so far."""
        out = []
        for p in child_files(self.base):
            from ..tracefile.reader import TraceFile    # (a program that starts none: no reader)
            try:
                # the HEAD block is at the start: a prefix reads as a file cut short
                with open(p, "rb") as f:
                    head = TraceFile.frombytes(f.read(1 << 16), p).header
                if head.get("run") == self.run:
                    out.append(p)
            except Exception:
                out.append(p)
        return out

    def finished(self, guard, found: list[str]) -> None:
        """The first process's end: where the other processes' traces (``found``,
        from ``children()``) are."""
        if not self.opts.output:
            return                  # live: its report shows them
        if found:
            guard.notice(f"{len(found)} more processes traced, each in a file beside "
                         f"{self.opts.output} ({os.path.basename(found[0])}, ...): "
                         "report, stat and export read them with it")

    def stop(self) -> None:
        """The recording is over: the environment as it was (fntrace used as a
        library records again in the same process)."""
        for k, v in getattr(self, "_saved", {}).items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved = {}


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
