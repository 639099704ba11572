"""The function tracer's text and the lines every tracer shares (kernel/trace/trace.c,
kernel/trace/trace_output.c).

A ``trace`` read starts with the header (``s_show``: ``# tracer: NAME``, ``#``, then
``print_event_info`` and the column help of ``print_func_help_header[_irq]``); each entry
is one context prefix (``trace_print_context``) followed by the type's own text
(``trace_fn_trace``, ``trace_print_print``, ``trace_stack_print``, an event's output).
``trace_pipe`` prints the same lines without the header.

Python threads have no interrupt or preemption state, so with ``irq-info`` the flags
field is always ``.....`` (irqs-off, need-resched, hardirq/softirq, preempt-depth,
migrate-disable, each "nothing to report").
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .walk import BlockFilter

from fntrace.output.entry import (
    LOST_EVENTS_UNKNOWN, TRACE_EVENT, TRACE_FN, TRACE_PRINT, TRACE_STACK, LostEvents,
    TraceEntry,
)

__all__ = [
    "TRACE_OPTIONS", "TASK_COMM_LEN", "print_event_info", "print_func_help_header",
    "print_func_help_header_irq", "print_trace_header", "trace_print_context",
    "function_args_text", "format_function_args", "format_function_entry", "format_print_entry",
    "format_lost_events", "format_entry", "render_function_trace", "native_function_text",
]

# The options that change the text (every renderer's, kept here below them all), in their tracefs names, with their defaults: the
# kernel's tracer_flags.val of function_graph (trace_functions_graph.c) and fntrace's
# generic defaults (print-parent on; irq-info off, since a Python thread has no
# interrupt state to show).
TRACE_OPTIONS: Mapping[str, bool] = {
    "print-parent": True,
    "irq-info": False,
    "funcgraph-overrun": False,
    "funcgraph-cpu": True,
    "funcgraph-overhead": True,
    "funcgraph-proc": False,
    "funcgraph-duration": True,
    "funcgraph-abstime": False,
    "funcgraph-tail": False,
    "funcgraph-retval": False,
    "funcgraph-retval-hex": False,
    "funcgraph-args": False,
}

# A kernel comm holds at most TASK_COMM_LEN - 1 characters; longer thread names are cut
# the same way so the TASK-PID column keeps its width.
TASK_COMM_LEN = 16
# trace_find_cmdline() for a pid whose comm was not saved.
_UNKNOWN_COMM = "<...>"
# trace_print_lat_fmt() with nothing to report in any of its five columns.
_LAT_FMT_NONE = "....."
# trace_marker writes are recorded with this ip (kernel/trace/trace.c).
_TRACE_MARKER_SYM = "tracing_mark_write"

USEC_PER_SEC = 1_000_000


def _comm(comm: str) -> str:
    """trace_find_cmdline(): the saved comm, cut to TASK_COMM_LEN - 1 characters."""
    return comm[:TASK_COMM_LEN - 1] if comm else _UNKNOWN_COMM


def _ns2usecs(ns: int) -> int:
    """ns2usecs(): nanoseconds to microseconds, rounded to nearest."""
    return (ns + 500) // 1000


def print_event_info(entries: int, written: int, nr_cpus: int) -> list[str]:
    """print_event_info(): the buffer summary.

    # entries-in-buffer/entries-written: 144405/9452052   #P:4
    #
    ``written - entries`` is the number of events lost to overwriting.
    """
    return [
        f"# entries-in-buffer/entries-written: {entries}/{written}   #P:{nr_cpus}",
        "#",
    ]


def print_func_help_header() -> list[str]:
    """print_func_help_header() without record-tgid (the noirq-info form).

    #           TASK-PID     CPU#     TIMESTAMP  FUNCTION
    #              | |         |         |         |
    """
    return [
        "#           TASK-PID     CPU#     TIMESTAMP  FUNCTION",
        "#              | |         |         |         |",
    ]


def print_func_help_header_irq() -> list[str]:
    """print_func_help_header_irq() without record-tgid: five flag columns.

    #                                _-----=> irqs-off/BH-disabled
    ...
    #           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
    #              | |         |   |||||     |         |
    The kernel builds each line as ``"#" + 28 spaces + "%.*s"`` with a precision of 2
    (12 with record-tgid) over a string of spaces; the result is written out here.
    """
    pad = "#" + " " * 28 + "  "
    return [
        pad + "  _-----=> irqs-off/BH-disabled",
        pad + " / _----=> need-resched",
        pad + "| / _---=> hardirq/softirq",
        pad + "|| / _--=> preempt-depth",
        pad + "||| / _-=> migrate-disable",
        pad + "|||| /     delay",
        "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION",
        "#              | |         |   |||||     |         |",
    ]


def print_trace_header(tracer: str, entries: int, written: int, nr_cpus: int, *,
                       irq_info: bool = False) -> list[str]:
    """The header of a ``trace`` read for the function tracer (s_show + trace_default_header).

    # tracer: function
    #
    # entries-in-buffer/entries-written: 144405/9452052   #P:4
    #
    #           TASK-PID     CPU#     TIMESTAMP  FUNCTION
    #              | |         |         |         |
    """
    lines = [f"# tracer: {tracer}", "#"]
    lines += print_event_info(entries, written, nr_cpus)
    lines += print_func_help_header_irq() if irq_info else print_func_help_header()
    return lines


def trace_print_context(e: TraceEntry, *, irq_info: bool = False,
                        time_in_ns: bool = True) -> str:
    """trace_print_context(): the prefix of every line, up to and including ": ".

               bash-1977    [000]  17284.993652: sys_close
    with irq-info:
               bash-1977    [000] ..... 17284.993652: sys_close
    (comm ``%16s``, pid ``%-7d``, cpu ``[%03d]``, time `` %5lu.%06lu`` of the timestamp
    rounded to the microsecond; with a trace_clock that does not count nanoseconds,
    ``counter`` or ``uptime`` (``time_in_ns`` False), the raw value as `` %12llu``.)
    """
    flags = _LAT_FMT_NONE if irq_info else ""
    if not time_in_ns:
        return f"{_comm(e.comm):>16}-{e.pid:<7} [{e.cpu:03d}] {flags} {e.ts:12d}: "
    usecs = _ns2usecs(e.ts)
    secs, usec_rem = divmod(usecs, USEC_PER_SEC)
    return f"{_comm(e.comm):>16}-{e.pid:<7} [{e.cpu:03d}] {flags} {secs:5d}.{usec_rem:06d}: "


def function_args_text(args: Iterable[tuple[str, str]]) -> str:
    """The arguments as every view shows them: ``a=1, b='x'``."""
    return ", ".join(f"{name}={value}" for name, value in args)


def format_function_args(args: Iterable[tuple[str, str]]) -> str:
    """print_function_args(): ``(name=value, ...)``.

    (a=1, b='x')
    """
    return "(" + function_args_text(args) + ")"


def format_function_entry(e: TraceEntry, *, irq_info: bool = False,
                          print_parent: bool = True, time_in_ns: bool = True) -> str:
    """A TRACE_FN line (trace_fn_trace).

               bash-1977    [000]  17284.993652: sys_close <-system_call_fastpath
    With recorded arguments the name is followed by ``(a=1, b='x')``; without
    print-parent, or with no known caller, `` <-parent`` is left out.
    """
    line = trace_print_context(e, irq_info=irq_info, time_in_ns=time_in_ns) + e.func
    if e.args is not None:
        line += format_function_args(e.args)
    if print_parent and e.parent:
        line += " <-" + e.parent
    return line


def format_print_entry(e: TraceEntry, *, irq_info: bool = False,
                       time_in_ns: bool = True) -> str:
    """TRACE_PRINT, TRACE_STACK and TRACE_EVENT entries; may hold several lines.

    TRACE_PRINT (trace_print_print), the writer's name, or tracing_mark_write:
               bash-1977    [000]  17284.993652: tracing_mark_write: hello
    TRACE_STACK (trace_stack_print), one `` => func`` line per frame:
               bash-1977    [000]  17284.993652: <stack trace>
     => mod.func
    TRACE_EVENT, the event's name then its formatted fields:
               bash-1977    [000]  17284.993652: sched_switch: prev_comm=...
    One trailing newline of the text is dropped (the kernel ends the line with it).
    """
    ctx = trace_print_context(e, irq_info=irq_info, time_in_ns=time_in_ns)
    if e.type == TRACE_STACK:
        frames = [f for f in e.text.split("\n") if f] if e.text else []
        return "\n".join([ctx + "<stack trace>"] + [" => " + f for f in frames])
    text = e.text[:-1] if e.text.endswith("\n") else e.text
    if e.type == TRACE_PRINT:
        return f"{ctx}{e.func or _TRACE_MARKER_SYM}: {text}"
    if e.type == TRACE_EVENT:
        return f"{ctx}{e.func}: {text}"
    raise ValueError(f"format_print_entry: entry type {e.type} is not a print, stack or event")


def format_lost_events(cpu: int, lost: int) -> str:
    """print_trace_line(): the note put before the first entry read after a loss.

    CPU:2 [LOST 11745 EVENTS]
    CPU:2 [LOST EVENTS]        (lost == LOST_EVENTS_UNKNOWN)
    """
    if lost == LOST_EVENTS_UNKNOWN:
        return f"CPU:{cpu} [LOST EVENTS]"
    return f"CPU:{cpu} [LOST {lost} EVENTS]"


def format_entry(e: TraceEntry, *, irq_info: bool = False,
                 print_parent: bool = True, time_in_ns: bool = True) -> str | None:
    """print_trace_fmt(): the default text of any entry; None for graph entries.

    Graph entries only have a text of their own under the function_graph printer.
    """
    if e.type == TRACE_FN:
        return format_function_entry(e, irq_info=irq_info, print_parent=print_parent,
                                     time_in_ns=time_in_ns)
    if e.type in (TRACE_PRINT, TRACE_STACK, TRACE_EVENT):
        return format_print_entry(e, irq_info=irq_info, time_in_ns=time_in_ns)
    return None


def render_function_trace(entries: Iterable[TraceEntry | LostEvents], *, header: bool,
                          tracer: str, nr_entries: int, written: int, nr_cpus: int,
                          irq_info: bool = False, print_parent: bool = True,
                          time_in_ns: bool = True) -> Iterator[str]:
    """The lines of a ``trace`` read (header=True) or of ``trace_pipe`` (header=False).

    Entries come merged across cpus in time order.  A LostEvents marker becomes its
    ``CPU:N [LOST ...]`` line; graph entries are skipped (see GraphPrinter).
    """
    if header:
        yield from print_trace_header(tracer, nr_entries, written, nr_cpus,
                                      irq_info=irq_info)
    for e in entries:
        if isinstance(e, LostEvents):
            yield format_lost_events(e.cpu, e.lost)
            continue
        text = format_entry(e, irq_info=irq_info, print_parent=print_parent,
                            time_in_ns=time_in_ns)
        if text is not None:
            yield from text.split("\n")


def native_function_text(tf, options: Mapping[str, bool], time_in_ns: bool = True,
                         on_block: Callable[[int], None] | None = None,
                         keep: frozenset[int] | None = None,
                         filt: BlockFilter | None = None) -> Iterator[str] | None:
    """The body of a function tracer's trace file's text (the lines
    ``render_function_trace`` makes of ``entries_from_file(tf)``, after the header) made
    by the native twin (_native_read.c's FunctionText), in pieces that end in a
    newline; ``on_block(n)`` is told of each block of n records it reads.  None when
    there is no native twin (FNTRACE_PURE=1) or the trace holds what it does not print
    (markers, events, graph records, values other than argument texts): the Python
    printer prints those.  The trace is read once to check that, then again as it
    prints.  ``keep``: only these thread slots' records (output/filters.py's
    thread_slots); ``filt``: the records that pass it (output/filters.py's
    native_filter)."""
    from .. import _env
    from .walk import calls_only, drive
    native = _env.native()
    if native is None:
        return None
    if calls_only(tf, native.function_text_ok, True) is None:
        return None
    opts = {**TRACE_OPTIONS, **options}
    flags = _LAT_FMT_NONE if opts["irq-info"] else ""
    cpus = tf.cpus
    nslots = max(cpus) + 1 if cpus else 0
    threads = tf.threads
    contexts = {}
    for c in range(nslots):
        pid, comm = threads.get(c, (0, "<...>"))
        # trace_print_context's text up to the time, as the Python printer makes it
        contexts[c] = f"{_comm(comm):>16}-{pid:<7} [{c:03d}] {flags} "
    names = {ip: sym[0] for ip, sym in tf.symbols.items()}
    printer = native.FunctionText(nslots, names, bool(opts["print-parent"]), time_in_ns,
                                  contexts)
    return drive(printer, tf, nslots, on_block, keep, filt, True)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
