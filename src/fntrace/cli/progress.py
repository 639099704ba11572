"""Progress on a terminal for long reports, stats and exports (none when piped).

``track_source(source, what)`` returns the TraceSource as is, or, when a bar should
show, a wrapper whose ``entries()`` advance a bar on stderr as they are read (``what``
labels it: "export", "stat").  ``track_tracefile(tf, what)`` does the same for a
TraceFile's ``records()`` (``fntrace report`` reads the file itself).  Every pass over
the trace (``entries()`` may be called again) draws its own bar, which goes away when
the pass ends, so what the command prints afterwards is all that stays on the screen.

When a bar shows (``progress_wanted``):
  - stderr is a terminal and TERM is not "dumb" (a dumb terminal cannot redraw a
    line: each refresh would be a new line);
  - the command's own output does not go to the same screen while the bar runs:
    ``output``, what the command writes to as it reads (standard output for
    ``report``, and for ``export -o -``), must be a regular file or a device that is
    not a terminal.  A pipe gets no bar either: its reader may be a pager
    (``fntrace report | less``) that owns the terminal, and a bar drawn over it
    would garble its screen.  Without ``output`` (``stat`` prints its table after
    reading; ``export -o FILE`` prints nothing) standard output may be the terminal,
    but not a pipe, for the same pager's sake;
  - FNTRACE_PROGRESS=0 turns it off, FNTRACE_PROGRESS=1 turns it on whatever stderr
    is (for scripts that capture it).
NO_COLOR keeps the bar and drops its colours (rich reads it).

The bar advances in batches of ``BATCH`` entries, so it costs nothing per entry but
a list append; when no bar shows, the source is returned unwrapped and costs nothing.

``fntrace record`` shows no bar: the trace file is written while the program runs
(the writer thread takes each chunk as the ring buffers hand it over), so what is
left when the program ends is at most the buffers' contents, written in a moment;
and while the program runs the terminal is the program's, not fntrace's.
"""
from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["BATCH", "progress_wanted", "track_source", "track_tracefile", "ProgressBar"]

# Entries read between two updates of the bar.
BATCH = 10_000


def _env_setting() -> bool | None:
    v = os.environ.get("FNTRACE_PROGRESS", "").strip().lower()
    if v in ("0", "no", "off", "false"):
        return False
    if v in ("1", "yes", "on", "true"):
        return True
    return None


def _off_screen(fd: int) -> bool:
    """``fd`` writes somewhere that is not a screen nor a pipe: a file, /dev/null."""
    try:
        st = os.fstat(fd)
    except OSError:
        return True                       # closed: nothing is drawn over anything
    if stat.S_ISREG(st.st_mode):
        return True
    return stat.S_ISCHR(st.st_mode) and not os.isatty(fd)


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _fd_of(output: Any) -> int | None:
    if output is None or isinstance(output, int):
        return output
    try:
        return int(output.fileno())
    except (AttributeError, ValueError, OSError):
        return None                       # a StringIO: nothing on a screen


def progress_wanted(output: Any = None, stream: Any = None) -> bool:
    """Whether a bar should show on ``stream`` (stderr): see the module's doc.
    ``output`` is where the command writes its own output meanwhile (an fd or a
    stream), None if nowhere but its files."""
    forced = _env_setting()
    if forced is not None:
        return forced
    stream = sys.stderr if stream is None else stream
    try:
        if stream is None or not stream.isatty():
            return False
    except (AttributeError, ValueError, OSError):
        return False
    if os.environ.get("TERM", "") == "dumb":
        return False
    if output is None:
        # The output comes after the reading (stat's table), or goes to a file; but
        # a pipe on standard output may lead to a pager that has the screen already.
        return not _is_pipe(1)
    fd = _fd_of(output)
    return fd is None or _off_screen(fd)


class ProgressBar:
    """One bar on stderr (rich): ``advance(n)``; ``close()`` removes it.

    Bars open at the same time (two passes read side by side) share one display:
    rich allows one live display at a time.  A bar that cannot be drawn is not drawn:
    progress never fails the command."""

    _shared: Any = None               # the Progress every open bar is a task of
    _open = 0

    def __init__(self, what: str, total: int | None, stream: Any = None) -> None:
        self._task = None
        try:
            progress = ProgressBar._shared
            if progress is None:
                progress = self._new(stream)
                progress.start()
                ProgressBar._shared = progress
            ProgressBar._open += 1
            self._task = progress.add_task(what, total=total or None)
        except Exception:             # rich missing or a display already live elsewhere
            self._task = None

    @staticmethod
    def _new(stream: Any) -> Any:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)
        stream = sys.stderr if stream is None else stream
        console = Console(file=stream, force_terminal=True if _env_setting() else None)
        return Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("records"), TimeElapsedColumn(), TimeRemainingColumn(),
            console=console, transient=True, redirect_stdout=False, redirect_stderr=False,
            refresh_per_second=5)

    def advance(self, n: int) -> None:
        if self._task is not None:
            ProgressBar._shared.advance(self._task, n)

    def close(self) -> None:
        if self._task is None:
            return
        progress = ProgressBar._shared
        progress.remove_task(self._task)
        self._task = None
        ProgressBar._open -= 1
        if ProgressBar._open == 0:
            ProgressBar._shared = None
            progress.stop()


def _tracked(inner: Iterable[Any], what: str, total: int,
             make_bar: Callable[[str, int], Any]) -> Iterator[Any]:
    """``inner``'s items, advancing a bar every BATCH of them."""
    bar = make_bar(what, total)
    try:
        it = iter(inner)
        while True:
            batch = list(islice(it, BATCH))
            if not batch:
                return
            yield from batch
            bar.advance(len(batch))
    finally:
        bar.close()


class _TrackedSource:
    """A TraceSource whose ``entries()`` draw a bar; everything else is the source's."""

    def __init__(self, source: Any, what: str) -> None:
        self._source = source
        self._what = what
        self._passes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def _label(self, cpu: int | None) -> str:
        if cpu is not None:
            return f"{self._what} (thread slot {cpu})"
        self._passes += 1
        return self._what if self._passes == 1 else f"{self._what} (pass {self._passes})"

    def entries(self, cpu: int | None = None) -> Iterator[Any]:
        # (a generator: a pass is counted, and named, when it is read, not asked for)
        total = self._source.nr_records() if cpu is None else self._source.tf.nr_records(cpu)
        yield from _tracked(self._source.entries(cpu), self._label(cpu), total, ProgressBar)

    def record_blocks(self, cpu: int | None = None, payloads: bool = False,
                      since: int | None = None, until: int | None = None
                      ) -> Iterator[Any] | None:
        """The native walks' blocks (TraceSource.record_blocks), advancing the bar by
        each block's records; one slot's (``cpu``) without a bar (its reader has the
        whole trace's)."""
        if cpu is not None:
            return self._source.record_blocks(cpu, payloads, since, until)
        blocks = self._source.record_blocks(None, payloads, since, until)
        return None if blocks is None else self._tracked_blocks(blocks)

    def _tracked_blocks(self, blocks: Iterator[Any]) -> Iterator[Any]:
        bar = ProgressBar(self._label(None), self._source.nr_records())
        try:
            for block in blocks:
                yield block
                bar.advance(len(block[2]) // 32)
        finally:
            bar.close()


    @contextlib.contextmanager
    def parts_progress(self) -> Iterator[Callable[[int], None]]:
        """TraceSource.parts_progress: the bar of a reader that walks the parts in
        other processes, drawn from the first advance (its display thread started
        after the forks)."""
        bar = _LateBar(self)
        try:
            yield bar.advance
        finally:
            bar.close()


class _TrackedTraceFile(_TrackedSource):
    """A TraceFile whose ``records()`` draw a bar."""

    def records(self, cpu: int | None = None) -> Iterator[Any]:
        yield from _tracked(self._source.records(cpu), self._label(cpu),
                            self._source.nr_records(cpu), ProgressBar)


class _LateBar:
    """A ProgressBar drawn from its first ``advance``: its display thread is not
    running before (a reader forks children first, tracefile/parallel.py)."""

    def __init__(self, source: _TrackedSource) -> None:
        self._source = source
        self._bar: ProgressBar | None = None

    def advance(self, n: int) -> None:
        if self._bar is None:           # (a pass counted, and named, when read)
            self._bar = ProgressBar(self._source._label(None),
                                    self._source._source.nr_records())
        self._bar.advance(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def track_source(source: Any, what: str, output: Any = None) -> Any:
    """The source, read with a progress bar on stderr when one should show
    (``progress_wanted(output)``), else the source itself."""
    if not progress_wanted(output):
        return source
    return _TrackedSource(source, what)


def track_tracefile(tf: Any, what: str, output: Any = None) -> Any:
    """A TraceFile, its ``records()`` read with a progress bar when one should show."""
    if not progress_wanted(output):
        return tf
    return _TrackedTraceFile(tf, what)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
