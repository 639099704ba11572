"""One control path: every option of ``fntrace record``/``live`` and of the Python
conveniences (``fntrace.trace``, ``traced``) is a write to a control file of the trace's
tracefs instance, through the same handlers ``Tracefs.write`` uses — one grammar, one
set of errors, and the instance's one ``error_log`` (trace-cmd does the same with the
kernel's files).

    option                 file                                data
    -p TRACER              current_tracer                      TRACER   (when the program starts)
    -F GLOB                set_ftrace_filter                   GLOB     (first >, then >>)
    -N GLOB                set_ftrace_notrace                  GLOB
    -g GLOB                set_graph_function                  GLOB
    --graph-notrace GLOB   set_graph_notrace                   GLOB
    -D N                   max_graph_depth                     N
    --thresh USEC          tracing_thresh                      USEC
    -A                     options/funcgraph-args              1
    -R                     options/funcgraph-retval            1
    --repr                 options/object-repr                 1 (0 without it)
    -b KB                  buffer_size_kb                      KB
    -e 'f ...'             dynamic_events                      the definition (>>)
    -e GRP:EVENT, -e 'f..' events/GRP/EVENT/enable              1
    -f FILTER              events/GRP/EVENT/filter             FILTER
    -T TRIGGER             events/GRP/EVENT/trigger            TRIGGER
    -O OPTION (live)       options/OPTION                      1, or 0 for noOPTION

The command line turns a failed write into a one-line UsageError naming the option
(``usage_error``); the Python API raises the write's own error.  Either way the
instance's ``error_log`` has the entry, with its caret.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import FntraceError, UsageError

__all__ = ["ControlWrite", "OPTION_FILES", "CLI_LABELS", "setting_writes", "filter_writes",
           "apply_writes", "usage_error", "event_writes", "thread_writes"]

# (option, control file) for --help and the documentation: the table above.
OPTION_FILES: tuple[tuple[str, str], ...] = (
    ("-p", "current_tracer"),
    ("-F", "set_ftrace_filter"),
    ("-N", "set_ftrace_notrace"),
    ("-g", "set_graph_function"),
    ("--graph-notrace", "set_graph_notrace"),
    ("-D", "max_graph_depth"),
    ("--thresh", "tracing_thresh"),
    ("-A", "options/funcgraph-args"),
    ("-R", "options/funcgraph-retval"),
    ("--repr", "options/object-repr"),
    ("-b", "buffer_size_kb"),
    ("--tid", "set_ftrace_pid, set_event_pid"),
    ("--thread", "set_ftrace_comm, set_event_comm"),
    ("-e", "dynamic_events, events/GRP/EVENT/enable"),
    ("-f", "events/GRP/EVENT/filter"),
    ("-T", "events/GRP/EVENT/trigger"),
)


# control file -> the command-line option that writes it, for the messages
CLI_LABELS: Mapping[str, str] = {f: o for o, f in OPTION_FILES if "/GRP/" not in f}


class ControlWrite:
    """``echo DATA > PATH`` (``>>`` with append), and what asked for it.

    label   the option or keyword that asked (``-F``, ``filter``): error messages
    value   what the user gave, as given (the messages quote it)
    caret   the error's position is shown under the value (an event definition, filter
            or trigger); otherwise as ``(at column N)`` on the message's one line
    """

    __slots__ = ("path", "data", "append", "label", "value", "caret")

    def __init__(self, path: str, data: str, *, append: bool = False, label: str = "",
                 value: str | None = None, caret: bool = False) -> None:
        self.path = path
        self.data = data
        self.append = append
        self.label = label or path
        self.value = data if value is None else value
        self.caret = caret

    def __repr__(self) -> str:
        return f"ControlWrite({self.label}: {self.data!r} {'>>' if self.append else '>'} {self.path})"


def _text(v: object) -> str:
    return str(v).strip()


def setting_writes(*, buffer_kb: object = None, max_depth: object = None,
                   thresh_us: object = None, options: Mapping[str, bool] | None = None,
                   labels: Mapping[str, str] | None = None) -> list[ControlWrite]:
    """The writes of the settings that are not filters: buffer size, graph depth and
    threshold, and ``options/*`` (funcgraph-args for -A, funcgraph-retval for -R,
    object-repr for --repr).  A value left None is not written (the file keeps its
    default).  ``labels`` names each file's option for the messages."""
    labels = labels or {}
    out = []
    for path, v in (("buffer_size_kb", buffer_kb), ("max_graph_depth", max_depth),
                    ("tracing_thresh", thresh_us)):
        if v is not None:
            out.append(ControlWrite(path, _text(v), label=labels.get(path, path)))
    for name, on in (options or {}).items():
        path = f"options/{name}"
        out.append(ControlWrite(path, "1" if on else "0", label=labels.get(path, path),
                                value=name if on else "no" + name))
    return out


def filter_writes(*, filters: Iterable[str] = (), notrace: Iterable[str] = (),
                  graph_functions: Iterable[str] = (), graph_notrace: Iterable[str] = (),
                  labels: Mapping[str, str] | None = None) -> list[ControlWrite]:
    """The function filters: each pattern one write, the first of a file ``>`` (it
    replaces what was there), the others ``>>``."""
    labels = labels or {}
    out = []
    for path, pats in (("set_ftrace_filter", filters), ("set_ftrace_notrace", notrace),
                       ("set_graph_function", graph_functions),
                       ("set_graph_notrace", graph_notrace)):
        for i, pat in enumerate(pats):
            out.append(ControlWrite(path, pat, append=i > 0, label=labels.get(path, path)))
    return out


def thread_writes(*, tids: Iterable[object] = (), threads: Iterable[str] = ()) -> list[ControlWrite]:
    """--tid and --thread: each id (each name glob) written to the function tracers'
    and the events' list alike, the first ``>``, the others ``>>``."""
    out = []
    for opt, files, vals in (("--tid", ("set_ftrace_pid", "set_event_pid"), tids),
                             ("--thread", ("set_ftrace_comm", "set_event_comm"), threads)):
        for i, v in enumerate(vals):
            text = _text(v)
            for path in files:
                out.append(ControlWrite(path, text, append=i > 0, label=opt, value=_text(v)))
    return out


def usage_error(w: ControlWrite, e: FntraceError) -> UsageError:
    """A failed write as the command line shows it: one line naming the option and
    the value; where the error has a position, the column — or for event definitions,
    filters and triggers the value again with a caret under it."""
    pos = getattr(e, "pos", None)
    if w.caret:
        where = f"\n  {w.value}\n  {' ' * (pos or 0)}^" if pos is not None else ""
        return UsageError(f"{w.label}: {e.msg}{where}")
    col = f" (at column {pos + 1})" if pos is not None else ""
    return UsageError(f"{w.label} {w.value!r}: {e.msg}{col}")


def apply_writes(fs, writes: Iterable[ControlWrite], *, cli: bool = False, after=None) -> None:
    """Make the writes in order.  The first that fails stops the rest and raises: the
    write's own error, or with ``cli`` a UsageError (usage_error).  ``after(w)`` runs
    after each write that succeeded (the command line's checks of a filter)."""
    for w in writes:
        try:
            fs.write(w.path, w.data, append=w.append)
        except FntraceError as e:
            if cli:
                raise usage_error(w, e) from None
            raise
        if after is not None:
            after(w)


def event_writes(fs, spec: Mapping, *, main_sources=None) -> None:
    """One ``-e`` with its ``-f`` and ``-T``: a dynamic event definition is written to
    ``dynamic_events``, then the event's ``filter`` and ``trigger`` files, then
    ``enable``.  Errors are UsageErrors, the way the command line shows them."""
    from ..events.core import find_event_call
    text = spec["event"]
    if text[:1] in ("f", "p", "r", "s", "e", "t") and (len(text) == 1 or text[1] in " :0123456789"):
        w = ControlWrite("dynamic_events", text, append=True, label="-e", caret=True)
        try:
            fs.write(w.path, w.data, append=True)
        except FntraceError as e:
            err = usage_error(w, e)
            err.msg += _closest(e, text, main_sources)
            err.args = (err.msg,)
            raise err from None
        calls = fs.last_created_events
        if not calls:
            return
        call = calls[-1]
    else:
        sysname, _, name = text.rpartition(":")
        if any(c in text for c in "*?["):
            # a glob (-e 'audit:*'), as set_event takes: each event it matches
            from ..core.hash import glob_match
            from ..events.core import event_calls
            calls = [c for (sy, ev), c in list(event_calls.items())
                     if glob_match(sysname or "*", sy) and glob_match(name or "*", ev)]
            if not calls:
                raise UsageError(f"-e {text!r}: no event matches")
            for call in calls:
                _event_file_writes(fs, call, spec)
            return
        call = find_event_call(sysname or None, name)
        if call is None:
            raise UsageError(f"-e {text!r}: no such event")
    _event_file_writes(fs, call, spec)


def _event_file_writes(fs, call, spec: Mapping) -> None:
    d = f"events/{call.system}/{call.name}"
    writes = []
    if spec.get("filter"):
        writes.append(ControlWrite(f"{d}/filter", spec["filter"],
                                   label="-f: event filter parse error", caret=True))
    for t in spec.get("triggers") or ():
        writes.append(ControlWrite(f"{d}/trigger", t, append=True, label="-T", caret=True))
    writes.append(ControlWrite(f"{d}/enable", "1", label="-e"))
    apply_writes(fs, writes, cli=True)


def _closest(e: FntraceError, text: str, main_sources) -> str:
    """For a probe on a function that does not exist, the closest one that does."""
    if getattr(e, "kind", None) != "BAD_PROBE_ADDR":
        return ""
    from ..core import kallsyms
    words = text.split()
    sym = words[1].partition("%")[0] if len(words) > 1 else ""
    srcs = kallsyms.main_sources if main_sources is None else main_sources
    close = kallsyms.check_pattern(sym, srcs).close if sym else []
    return f"\n  (did you mean {close[0]!r}?)" if close else ""


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
