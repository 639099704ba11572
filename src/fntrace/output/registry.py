"""The renderer registry: every view of a trace, and the one choice of which one prints.

Every reader of a trace goes through here: ``fntrace report``, the tracefs ``trace``,
``trace_pipe`` and ``snapshot`` files, and the Python API (``fntrace.trace``).  The
kernel asks the current tracer how to print (``s_show`` / ``print_trace_line``); so does
``renderer_for``:

    renderer_for("function_graph")          GraphTextRenderer   (output/function_graph.py)
    renderer_for("function"), ("nop"), ...  FunctionTextRenderer (output/ftrace_text.py)
    renderer_for(tracer, view="NAME")       the renderer registered as NAME

A renderer is a view: a name, what it needs from the reader (``needs``), and a
``lines(entries, ctx)`` generator; ``render(entries, out, ctx)`` writes them to a text
stream.  A view that can print an entry as soon as it reads it (``streaming``) is fit
for ``trace_pipe``; one that needs the whole trace (a summary) is not.  New views
(stat, folded stacks, Perfetto/Chrome JSON, Parquet) are registered with
``register_renderer`` and chosen by name.

``name_of(ip)`` is the one way an ip becomes a function name, for every view: the live
record table, or the symbol table of a trace file.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping

from ..core.records import record_table
from .ftrace_text import TRACE_OPTIONS
# typing is not imported at run time (it is a fifth of fntrace's import cost).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any

    from .entry import LostEvents, TraceEntry

__all__ = ["TRACE_OPTIONS", "RenderContext", "Renderer", "FunctionTextRenderer",
           "GraphTextRenderer", "register_renderer", "get_renderer", "renderer_for",
           "renderers", "name_of", "unknown_name", "nr_cpus_of", "Exporter",
           "register_exporter", "get_exporter", "export_formats", "EXPORT_MODULES"]



def unknown_name(ip: int) -> str:
    """How an ip with no symbol prints (the kernel's raw address)."""
    return f"0x{ip:x}"


def name_of(ip: int, symbols: Mapping[int, tuple] | None = None) -> str:
    """The function name of ``ip``: from ``symbols`` (a trace file's table, ip ->
    (name, ...)) when given, else from the process's record table."""
    if symbols is not None:
        s = symbols.get(ip)
        return s[0] if s is not None else f"0x{ip:x}"
    r = record_table.by_ip.get(ip)
    return r.name if r is not None else f"0x{ip:x}"       # unknown_name, inline: per entry


def nr_cpus_of(cpus: Iterable[int]) -> int:
    """The thread slots of a trace, as the kernel's nr_cpu_ids: the highest slot that
    wrote + 1 (slots are numbered from 0 per process), at least 1.  Every reader sizes
    ``#P:`` and the graph's CPU column with it, so they print alike."""
    return max(cpus, default=0) + 1


class RenderContext:
    """What a renderer may need besides the entries.

    tracer      the current tracer's name (the default header says ``# tracer: NAME``)
    options     trace options by tracefs name; TRACE_OPTIONS fills what is left out,
                names that do not change the text are ignored
    nr_entries  entries in the buffer (default header); None: counted from the entries
    written     entries ever written; None: nr_entries plus what LostEvents markers count
    nr_cpus     thread slots: ``#P:`` and function_graph's CPU column width; None: the
                highest cpu seen + 1
    header      False for ``trace_pipe`` (lines only)
    time_in_ns  the trace_clock counts nanoseconds (the kernel's TRACE_FILE_TIME_IN_NS):
                timestamps print as seconds.microseconds; False (counter, uptime):
                raw
    """

    __slots__ = ("tracer", "options", "nr_entries", "written", "nr_cpus", "header",
                 "time_in_ns")

    def __init__(self, tracer: str = "function", options: Mapping[str, bool] | None = None,
                 *, nr_entries: int | None = None, written: int | None = None,
                 nr_cpus: int | None = None, header: bool = True,
                 time_in_ns: bool = True) -> None:
        opts = dict(TRACE_OPTIONS)
        if options:
            opts.update((n, bool(on)) for n, on in options.items() if n in opts)
        self.tracer = tracer
        self.options: dict[str, bool] = opts
        self.nr_entries = nr_entries
        self.written = written
        self.nr_cpus = nr_cpus
        self.header = header
        self.time_in_ns = time_in_ns


class Renderer:
    """One view of a trace.  Subclasses set the class attributes and ``lines``.

    name       the registry key (``get_renderer(name)``)
    tracers    the tracers this is the default view of (``renderer_for``)
    needs      what it reads from the context besides the entries: "counts"
               (nr_entries/written for a header), "nr_cpus", "options"
    streaming  prints each entry as it comes (fit for trace_pipe); False: reads the
               whole trace first
    """

    name: str = ""
    tracers: tuple[str, ...] = ()
    needs: frozenset[str] = frozenset()
    streaming: bool = True

    def lines(self, entries: Iterable[TraceEntry | LostEvents],
              ctx: RenderContext) -> Iterator[str]:
        """The view's lines, without newlines."""
        raise NotImplementedError

    def render(self, entries: Iterable[TraceEntry | LostEvents], out: IO[str],
               ctx: RenderContext) -> None:
        """Write the view to a text stream, line by line as they are made."""
        for line in self.lines(entries, ctx):
            out.write(line + "\n")

    def text(self, entries: Iterable[TraceEntry | LostEvents], ctx: RenderContext) -> str:
        return "".join(line + "\n" for line in self.lines(entries, ctx))


class FunctionTextRenderer(Renderer):
    """The default format (trace_output.c): the function tracer's ``func <-parent``
    lines, prints, stacks and events, under the ``# tracer: NAME`` header."""

    name = "function"
    tracers = ("function", "nop")
    needs = frozenset({"counts", "nr_cpus", "options"})

    def lines(self, entries, ctx):
        from .entry import LostEvents, TraceEntry
        from .ftrace_text import render_function_trace
        nr_cpus, nr_entries, written = ctx.nr_cpus, ctx.nr_entries, ctx.written
        if ctx.header and (nr_cpus is None or nr_entries is None or written is None):
            # The header comes first: count what it shows before printing anything.
            entries = list(entries)
            if nr_cpus is None:
                nr_cpus = max((e.cpu for e in entries), default=0) + 1
            if nr_entries is None:
                nr_entries = sum(1 for e in entries if isinstance(e, TraceEntry))
            if written is None:
                written = nr_entries + sum(e.lost for e in entries
                                           if isinstance(e, LostEvents) and e.lost > 0)
        return render_function_trace(
            entries, header=ctx.header, tracer=ctx.tracer, nr_entries=nr_entries or 0,
            written=written if written is not None else (nr_entries or 0),
            nr_cpus=max(1, nr_cpus or 1), irq_info=ctx.options["irq-info"],
            print_parent=ctx.options["print-parent"], time_in_ns=ctx.time_in_ns)


# tracefs option name -> GraphPrinter keyword
_GRAPH_KEYWORDS: Mapping[str, str] = {
    "funcgraph-overrun": "overrun",
    "funcgraph-cpu": "cpu",
    "funcgraph-overhead": "overhead",
    "funcgraph-proc": "proc",
    "funcgraph-duration": "duration",
    "funcgraph-abstime": "abstime",
    "funcgraph-tail": "tail",
    "funcgraph-retval": "retval",
    "funcgraph-retval-hex": "retval_hex",
    "funcgraph-args": "args",
    "irq-info": "irq_info",
    "print-parent": "print_parent",
}


class GraphTextRenderer(Renderer):
    """function_graph's print_header/print_line (trace_functions_graph.c).  Its header
    has no entries line, so the counts are not read; a call whose return has not been
    read yet prints as an open block (``func() {``), as ``trace_pipe`` shows it."""

    name = "function_graph"
    tracers = ("function_graph",)
    needs = frozenset({"nr_cpus", "options"})

    def lines(self, entries, ctx):
        from .function_graph import GraphPrinter
        printer = GraphPrinter(nr_cpus=ctx.nr_cpus, time_in_ns=ctx.time_in_ns,
                               **{kw: ctx.options[n] for n, kw in _GRAPH_KEYWORDS.items()})
        if ctx.header:
            yield from printer.headers()
        yield from printer.render(entries)


_lock = threading.Lock()
_renderers: dict[str, Renderer] = {}
_defaults: dict[str, str] = {}          # tracer name -> renderer name
_FALLBACK = "function"                  # any other tracer prints the default format


def _add(table: dict[str, Any], item: Any, what: str, replace: bool) -> None:
    """Enter ``item`` under its name (the caller holds _lock); ``what`` is its kind, for
    the errors."""
    name = item.name
    if not name:
        raise ValueError(f"{'an' if what[0] in 'aeiou' else 'a'} {what} needs a name")
    if name in table and not replace:
        raise ValueError(f"{what} {name!r} is already registered")
    table[name] = item


def register_renderer(renderer: Renderer, *, replace: bool = False) -> Renderer:
    """Add a view; it becomes the default of the tracers it lists.  A second renderer
    of the same name is refused unless ``replace``."""
    with _lock:
        _add(_renderers, renderer, "renderer", replace)
        for tracer in renderer.tracers:
            _defaults[tracer] = renderer.name
    return renderer


def get_renderer(name: str) -> Renderer:
    """The renderer registered as ``name`` (KeyError with the known names if none)."""
    r = _renderers.get(name)
    if r is None:
        raise KeyError(f"no renderer {name!r} (known: {' '.join(sorted(_renderers))})")
    return r


def renderer_for(tracer: str, options: Mapping[str, object] | None = None, *,
                 view: str | None = None) -> Renderer:
    """The one choice of how a trace prints: the view asked for (``view``, or an
    option "view" naming one), else the tracer's own, else the default format."""
    name = view or (options or {}).get("view")
    if isinstance(name, str) and name:
        return get_renderer(name)
    return _renderers[_defaults.get(tracer, _FALLBACK)]


def renderers() -> dict[str, Renderer]:
    """Every registered view by name."""
    return dict(_renderers)


register_renderer(FunctionTextRenderer())
register_renderer(GraphTextRenderer())


# ---------------------------------------------------------------------------------
# Exports: a whole trace written in another tool's format (``fntrace export FILE
# --format NAME -o OUT``).  An exporter reads a TraceSource (output/source.py) and
# writes a file; it streams (reads entries once, keeps what its format needs, never
# the whole trace) unless its format cannot be written that way.
# ---------------------------------------------------------------------------------

class Exporter:
    """One export format.  Subclasses set the class attributes and ``write``.

    name        the --format word
    summary     one line for --help
    binary      write() gets a binary stream (else text, UTF-8)
    suffix      the output file's usual suffix (the default -o is TRACE + suffix)
    extra       the pip extra it needs (``pip install fntrace[EXTRA]``), or None
    requires    modules that must import for it to work (checked before anything
                is written; a missing one is an error naming ``extra``)
    options     the export options it reads (``--weight`` ...): {name: default}
    """

    name: str = ""
    summary: str = ""
    binary: bool = False
    suffix: str = ""
    extra: str | None = None
    requires: tuple[str, ...] = ()
    options: Mapping[str, object] = {}

    def write(self, source, out, options: Mapping[str, object]) -> dict | None:
        """Write ``source`` (a TraceSource) to ``out``; return what the command should
        say about it ({"notes": [lines]}), or None."""
        raise NotImplementedError


_exporters: dict[str, Exporter] = {}
# Formats whose module registers them when first asked for (imported lazily: a
# format's libraries are loaded only by an export in that format).
EXPORT_MODULES: dict[str, str] = {
    "perfetto": "fntrace.output.perfetto",
    "chrome": "fntrace.output.chrome_json",
    "folded": "fntrace.output.folded",
    "trace-cmd": "fntrace.output.trace_dat",
    "parquet": "fntrace.output.parquet",
    "otlp": "fntrace.output.otlp",
    "otlp-proto": "fntrace.output.otlp",
    "html": "fntrace.output.html_report",
}


def register_exporter(exporter: Exporter, *, replace: bool = False) -> Exporter:
    with _lock:
        _add(_exporters, exporter, "exporter", replace)
    return exporter


def export_formats() -> list[str]:
    """Every --format word, registered or waiting to be loaded."""
    return sorted(set(_exporters) | set(EXPORT_MODULES))


def get_exporter(name: str) -> Exporter:
    """The exporter of a format, its module imported on first use; KeyError naming
    the known formats if there is none."""
    e = _exporters.get(name)
    if e is None and name in EXPORT_MODULES:
        import importlib
        importlib.import_module(EXPORT_MODULES[name])
        e = _exporters.get(name)
    if e is None:
        raise KeyError(f"unknown format {name!r} (known: {', '.join(export_formats())})")
    return e


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
