"""The function_graph tracer's text (kernel/trace/trace_functions_graph.c).

Every line is built from the same columns, each switched by a ``funcgraph-*`` option:

    [abstime |  ][ cpu) ][ comm-pid | ][mark duration |  ]<indent>text

    360.774522 |   1)    sh-4802     | + 49.370 us   |                }

A function whose return is the very next entry of its cpu prints as one leaf line
(``func();``); any other entry opens a block (``func() {``) that its return closes
(``}``).  The printer keeps the kernel's per-cpu state (``struct fgraph_cpu_data``): the
last pid seen (a change prints a task-switch banner), the depth used to indent comments,
and the function entered at each depth, so that a return whose entry is not in the output
names its function (``} /* func */``).

Entries arrive merged across cpus in time order, but the leaf test looks at the next
entry *of the same cpu* (``get_return_for_leaf`` peeks that cpu's buffer); the printer
therefore holds an entry back until the next entry of its cpu has arrived, or the input
has ended, and keeps everything after it waiting too so the order is unchanged.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .walk import BlockFilter

from fntrace.output.entry import (
    TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_PRINT, TRACE_STACK, LostEvents,
    TraceEntry,
)
from fntrace.output.ftrace_text import (
    format_entry, format_function_args, format_lost_events,
)

__all__ = [
    "TRACE_GRAPH_INDENT", "TRACE_GRAPH_PROCINFO_LENGTH", "GraphPrinter",
    "trace_find_mark", "trace_print_graph_duration", "print_graph_abs_time",
    "print_graph_proc", "print_graph_headers_flags", "format_retval", "native_graph_text",
]

TRACE_GRAPH_INDENT = 2
TRACE_GRAPH_PROCINFO_LENGTH = 14
TASK_COMM_LEN = 16

NSEC_PER_SEC = 1_000_000_000
NSEC_PER_USEC = 1_000

# trace_output.c mark[]: a duration strictly above val (ns) gets sym; first match wins.
_MARKS: tuple[tuple[int, str], ...] = (
    (1_000_000_000, "$"),   # 1 sec
    (100_000_000, "@"),     # 100 msec
    (10_000_000, "*"),      # 10 msec
    (1_000_000, "#"),       # 1000 usecs
    (100_000, "!"),         # 100 usecs
    (10_000, "+"),          # 10 usecs
)

# print_graph_duration() FLAGS_FILL_FULL: the duration column of a line without one.
_DURATION_FILL_FULL = "              |  "

# print_graph_retval() with funcgraph-retval-hex: "0x%lx" of an unsigned long.
_ULONG_MASK = (1 << 64) - 1


def trace_find_mark(duration: int) -> str:
    """trace_find_mark(): the delay mark for a duration in ns, ' ' below 10 us.

    '+' > 10us, '!' > 100us, '#' > 1ms, '*' > 10ms, '@' > 100ms, '$' > 1s.
    """
    for val, sym in _MARKS:
        if duration > val:
            return sym
    return " "


def trace_print_graph_duration(duration: int) -> str:
    """trace_print_graph_duration(): a duration in ns as microseconds, 12 columns.

    1.382 us    |  61.770 us   |  1837.709 us |  33998.59 us |  119760.2 us |  3594274 us
    The microseconds are printed whole, then a '.' and as many digits of the remaining
    nanoseconds (truncated, up to 3) as keep the number within 7 digits; then " us " and
    spaces up to a width of 8 for the number.
    """
    usecs, nsecs_rem = divmod(duration, NSEC_PER_USEC)
    out = str(usecs)
    length = len(out)
    if length < 7:
        # snprintf(nsecs_str, min(sizeof(nsecs_str) = 5, 8 - len), "%03lu", nsecs_rem)
        slen = min(5, 8 - length)
        nsecs_str = f"{nsecs_rem:03d}"[:slen - 1]
        out += "." + nsecs_str
        length += len(nsecs_str) + 1
    return out + " us " + " " * max(0, 8 - length)


def print_graph_abs_time(ts: int) -> str:
    """print_graph_abs_time(): the funcgraph-abstime column (microseconds truncated).

    "360.774522 |  "
    """
    secs, rem = divmod(ts, NSEC_PER_SEC)
    return f"{secs:5d}.{rem // NSEC_PER_USEC:06d} |  "


def print_graph_proc(comm: str, pid: int) -> str:
    """print_graph_proc(): ``comm-pid`` centred in TRACE_GRAPH_PROCINFO_LENGTH (14) columns.

    "   sh-4802    "       "MainThread-4001"       "hasher_worker_1-12345"
    Where fntrace parts from the kernel: the kernel cuts the comm to 7 characters here
    (``comm[7] = '\0'``), so ``hasher_worker_1`` and ``hasher_worker_2`` would both
    read ``hasher_``.  Threads are named to be told apart: the comm is shown as in the
    TASK-PID column (TASK_COMM_LEN - 1 = 15 characters, no mark where it is cut).  The
    rest is the kernel's: the spaces left over go half before, the rest after, and a
    ``comm-pid`` of 14 characters or more is printed whole, moving the columns after
    it right.  An unknown comm is ``<...>``.
    """
    text = f"{(comm or '<...>')[:TASK_COMM_LEN - 1]}-{pid}"
    spaces = max(0, TRACE_GRAPH_PROCINFO_LENGTH - len(text))
    return " " * (spaces // 2) + text + " " * (spaces - spaces // 2)


def print_graph_headers_flags(*, abstime: bool = False, cpu: bool = True,
                              proc: bool = False, duration: bool = True) -> list[str]:
    """__print_graph_headers_flags(): the two column-title lines.

    # CPU  DURATION                  FUNCTION CALLS
    # |     |   |                     |   |   |   |
    """
    first, second = "#", "#"
    if abstime:
        first += "     TIME       "
        second += "      |         "
    if cpu:
        first += " CPU"
        second += " |  "
    if proc:
        first += "  TASK/PID       "
        second += "   |    |        "
    if duration:
        first += "  DURATION   "
        second += "   |   |      "
    first += "               FUNCTION CALLS"
    second += "               |   |   |   |"
    return [first, second]


def format_retval(value: object, *, hex_format: bool = False) -> str:
    """print_graph_retval(): the value after `` ret=``.

    A Python return value has a type, so it prints as itself: its repr (``42``,
    ``'abc'``, ``None``, ``-22``).  With funcgraph-retval-hex an int prints the way the
    kernel prints a return register in that mode, `` ret=0x%lx``: in hex, a negative
    value as its 64-bit two's complement (``-22`` -> ``0xffffffffffffffea``); an int
    outside 64 bits has no register to fit, so it keeps its sign (``-0x400...``).
    Values that are not ints (bool is not one here) print as their repr in either mode.

    A recorded value that is not an int arrives as the recorder's short safe repr (a
    str, see tracers/function_graph.py retval_payload), or as ``raised X`` when an
    exception left the call: a str prints as given.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if hex_format:
            if -(1 << 63) <= value < 0:
                value &= _ULONG_MASK
            return f"{value:#x}" if value >= 0 else f"-{-value:#x}"
        try:
            return repr(value)
        except ValueError:
            # more digits than sys.get_int_max_str_digits() allows in decimal
            return f"{value:#x}" if value >= 0 else f"-{-value:#x}"
    if isinstance(value, str):
        return value
    try:
        return repr(value)
    except Exception:
        return "(fault)"


@dataclass(slots=True)
class _FgraphCpuData:
    """struct fgraph_cpu_data: what the printer remembers about one cpu."""
    last_pid: int = -1          # pid of the last line printed (-1: none yet)
    depth: int = 0              # comments are indented at depth + 1
    enter_funcs: dict[int, str] = field(default_factory=dict)   # depth -> open function


class _Slot:
    """An input item waiting to be printed; ``consumed`` once a leaf line took it."""
    __slots__ = ("item", "consumed")

    def __init__(self, item: TraceEntry | LostEvents) -> None:
        self.item = item
        self.consumed = False


class GraphPrinter:
    """The function_graph printer (print_graph_function_flags) with its options.

    Options, with the kernel's defaults (``tracer_flags.val``):
      cpu        funcgraph-cpu       CPU column
      overhead   funcgraph-overhead  delay mark before the duration
      proc       funcgraph-proc      comm-pid column
      duration   funcgraph-duration  duration column
      abstime    funcgraph-abstime   absolute timestamp column
      tail       funcgraph-tail      every closing brace names its function
      retval     funcgraph-retval    return values as ``/* ret=... */`` comments
                 (their repr; see format_retval)
      retval_hex funcgraph-retval-hex  int return values in hex
      overrun    funcgraph-overrun   `` (Overruns: N)`` line after each return
      args       funcgraph-args      arguments as ``func(a=1, b='x')``
    ``nr_cpus`` sets the CPU column width (digits of nr_cpus - 1, like nr_cpu_ids); when
    None the width follows the highest cpu seen (a list input is scanned first).
    ``irq_info`` and ``print_parent`` are the generic options (irq-info, print-parent)
    used for entries printed in the default format (TRACE_FN and TRACE_STACK entries,
    which the graph printer does not handle).

    The per-cpu state lives as long as the printer, like the kernel's for an open
    ``trace_pipe``; use one printer per read of ``trace``.
    """

    def __init__(self, *, cpu: bool = True, overhead: bool = True, proc: bool = False,
                 duration: bool = True, abstime: bool = False, tail: bool = False,
                 retval: bool = False, retval_hex: bool = False, overrun: bool = False,
                 args: bool = False, nr_cpus: int | None = None,
                 irq_info: bool = False, print_parent: bool = True,
                 time_in_ns: bool = True) -> None:
        self.cpu = cpu
        self.overhead = overhead
        self.proc = proc
        self.duration = duration
        self.abstime = abstime
        self.tail = tail
        self.retval = retval
        self.retval_hex = retval_hex
        self.overrun = overrun
        self.args = args
        self.nr_cpus = nr_cpus
        self.irq_info = irq_info
        self.print_parent = print_parent
        self.time_in_ns = time_in_ns
        self._max_cpu = 0
        self._cpu_data: dict[int, _FgraphCpuData] = {}
        self._comms: dict[int, str] = {}     # saved cmdlines: pid -> comm

    # -- headers ---------------------------------------------------------------------

    def headers(self) -> list[str]:
        """The header of a ``trace`` read (s_show + print_graph_headers).

        # tracer: function_graph
        #
        # CPU  DURATION                  FUNCTION CALLS
        # |     |   |                     |   |   |   |
        """
        return ["# tracer: function_graph", "#"] + print_graph_headers_flags(
            abstime=self.abstime, cpu=self.cpu, proc=self.proc, duration=self.duration)

    # -- the stream ------------------------------------------------------------------

    def render(self, entries: Iterable[TraceEntry | LostEvents]) -> Iterator[str]:
        """The lines for ``entries`` (merged across cpus, in time order), one at a time.

        An entry whose cpu has nothing after it when the input ends prints as an open
        block (``func() {``), as in ``trace_pipe`` before the function has returned.
        """
        if self.nr_cpus is None and isinstance(entries, Sequence):
            for item in entries:
                self._max_cpu = max(self._max_cpu, item.cpu)
        pending: deque[_Slot] = deque()
        per_cpu: dict[int, deque[_Slot]] = {}
        for item in entries:
            slot = _Slot(item)
            pending.append(slot)
            per_cpu.setdefault(item.cpu, deque()).append(slot)
            self._max_cpu = max(self._max_cpu, item.cpu)
            if isinstance(item, TraceEntry) and item.comm:
                self._comms[item.pid] = item.comm
            yield from self._drain(pending, per_cpu, final=False)
        yield from self._drain(pending, per_cpu, final=True)

    def _drain(self, pending: deque[_Slot], per_cpu: dict[int, deque[_Slot]], *,
               final: bool) -> Iterator[str]:
        """Print every waiting item whose line can be decided now, in input order."""
        while pending:
            slot = pending[0]
            if slot.consumed:
                pending.popleft()
                continue
            item = slot.item
            mine = per_cpu[item.cpu]
            is_ent = isinstance(item, TraceEntry) and item.type == TRACE_GRAPH_ENT
            if is_ent and len(mine) < 2 and not final:
                return      # the leaf test needs this cpu's next entry
            pending.popleft()
            mine.popleft()      # the oldest item of its cpu is the head of the stream's
            if isinstance(item, LostEvents):
                yield format_lost_events(item.cpu, item.lost)
                continue
            if is_ent:
                leaf = self._get_return_for_leaf(item, mine)
                yield from self.print_graph_entry(item, leaf)
            else:
                yield from self.print_line(item)

    @staticmethod
    def _get_return_for_leaf(e: TraceEntry, mine: deque[_Slot]) -> TraceEntry | None:
        """get_return_for_leaf(): the cpu's next entry if it is this call's return.

        It must be a return of the same function by the same pid; it is then consumed.
        """
        if not mine:
            return None
        nxt = mine[0].item
        if (not isinstance(nxt, TraceEntry) or nxt.type != TRACE_GRAPH_RET
                or nxt.pid != e.pid or nxt.func != e.func):
            return None
        mine[0].consumed = True
        mine.popleft()
        return nxt

    def print_line(self, e: TraceEntry) -> list[str]:
        """print_graph_function_flags() for any entry but a graph entry (see render)."""
        if e.type == TRACE_GRAPH_RET:
            return self.print_graph_return(e)
        if e.type in (TRACE_FN, TRACE_STACK):
            # Not drawn as comments: the default text (print_trace_fmt) is used instead.
            text = format_entry(e, irq_info=self.irq_info, print_parent=self.print_parent,
                                time_in_ns=self.time_in_ns)
            return text.split("\n") if text is not None else []
        if e.type == TRACE_GRAPH_ENT:
            return self.print_graph_entry(e, None)
        return self.print_graph_comment(e)

    # -- columns ---------------------------------------------------------------------

    def _cpu_data_of(self, cpu: int) -> _FgraphCpuData:
        data = self._cpu_data.get(cpu)
        if data is None:
            data = self._cpu_data[cpu] = _FgraphCpuData()
        return data

    def _comm_of(self, pid: int) -> str:
        return self._comms.get(pid, "<...>")

    def print_graph_cpu(self, cpu: int) -> str:
        """print_graph_cpu(): `` %*d) `` sized for the highest cpu number.

        " 0) "
        """
        if self.nr_cpus is not None:
            width = len(str(max(self.nr_cpus - 1, 0)))
        else:
            width = len(str(self._max_cpu))
        return f" {cpu:>{width}d}) "

    def _verif_pid(self, e: TraceEntry) -> list[str]:
        """verif_pid(): the banner printed when a cpu's lines change pid.

        " ------------------------------------------"
        " 1)   sshd-1755    =>   bash-2001   "
        " ------------------------------------------"
        ""
        """
        data = self._cpu_data_of(e.cpu)
        if data.last_pid == e.pid:
            return []
        prev_pid, data.last_pid = data.last_pid, e.pid
        if prev_pid == -1:
            return []
        return [
            " ------------------------------------------",
            self.print_graph_cpu(e.cpu) + print_graph_proc(self._comm_of(prev_pid), prev_pid)
            + " => " + print_graph_proc(self._comm_of(e.pid), e.pid),
            " ------------------------------------------",
            "",
        ]

    def _prologue(self, e: TraceEntry) -> tuple[list[str], str]:
        """print_graph_prologue(): the task-switch banner lines and the line's prefix.

        "360.774522 |   1)    sh-4802     | "
        """
        banner = self._verif_pid(e)
        prefix = ""
        if self.abstime:
            prefix += print_graph_abs_time(e.ts)
        if self.cpu:
            prefix += self.print_graph_cpu(e.cpu)
        if self.proc:
            prefix += print_graph_proc(self._comm_of(e.pid), e.pid) + " | "
        return banner, prefix

    def print_graph_duration(self, duration: int | None) -> str:
        """print_graph_duration(): mark, duration and bar; None fills the column.

        "+ 61.770 us   |  "
        """
        if not self.duration:
            return ""
        if duration is None:
            return _DURATION_FILL_FULL
        mark = trace_find_mark(duration) if self.overhead else " "
        return f"{mark} " + trace_print_graph_duration(duration) + "|  "

    def _func_args(self, e: TraceEntry) -> str:
        if self.args and e.args is not None:
            return format_function_args(e.args)
        return "()"

    def _ret(self, ret: TraceEntry) -> str:
        """The `` ret=...`` part of a retval comment, empty if no value was recorded."""
        if not ret.has_retval:
            return ""
        return " ret=" + format_retval(ret.retval, hex_format=self.retval_hex)

    # -- lines -----------------------------------------------------------------------

    def print_graph_entry(self, e: TraceEntry, leaf: TraceEntry | None) -> list[str]:
        """print_graph_entry(): a leaf line if ``leaf`` is its return, else an open block.

         0)   1.382 us    |          __might_sleep();
         0)               |        kmem_cache_alloc() {
        """
        banner, prefix = self._prologue(e)
        data = self._cpu_data_of(e.cpu)
        indent = " " * (e.depth * TRACE_GRAPH_INDENT)
        if leaf is not None:
            # print_graph_entry_leaf(): comments after a leaf stay at its depth.
            data.depth = e.depth - 1
            data.enter_funcs.pop(e.depth, None)
            line = prefix + self.print_graph_duration(max(0, leaf.rettime - leaf.calltime))
            line += indent + e.func + self._func_args(e) + ";"
            if self.retval and leaf.has_retval:
                line += " /*" + self._ret(leaf) + " */"
        else:
            # print_graph_entry_nested(): remember the function to match its return.
            data.depth = e.depth
            data.enter_funcs[e.depth] = e.func
            line = prefix + self.print_graph_duration(None)
            line += indent + e.func + self._func_args(e) + " {"
        return banner + [line]

    def print_graph_return(self, e: TraceEntry) -> list[str]:
        """print_graph_return(): the closing brace of a block.

         0)   2.478 us    |        }
         3) # 1837.709 us |          } /* __switch_to */
         1)   2.335 us    |        } /* cpu_cgroup_can_attach ret=-22 */
         (Overruns: 0)
        """
        data = self._cpu_data_of(e.cpu)
        # Comments after a return display at the level of the bracket.
        data.depth = e.depth - 1
        func_match = data.enter_funcs.pop(e.depth, None) == e.func
        banner, prefix = self._prologue(e)
        line = prefix + self.print_graph_duration(max(0, e.rettime - e.calltime))
        line += " " * (e.depth * TRACE_GRAPH_INDENT)
        if self.retval:
            line += "} /* " + e.func + self._ret(e) + " */"
        elif func_match and not self.tail:
            line += "}"
        else:
            line += "} /* " + e.func + " */"
        lines = banner + [line]
        if self.overrun:
            lines.append(f" (Overruns: {e.overrun})")
        return lines

    def print_graph_comment(self, e: TraceEntry) -> list[str]:
        """print_graph_comment(): a print or event inside the graph, as a C comment.

         1)               |                /* I'm a comment! */
        Indented one level below the innermost open block (none at depth 0).
        """
        depth = self._cpu_data_of(e.cpu).depth
        banner, prefix = self._prologue(e)
        line = prefix + self.print_graph_duration(None)
        if depth > 0:
            line += " " * ((depth + 1) * TRACE_GRAPH_INDENT)
        msg = e.text if e.type == TRACE_PRINT else f"{e.func}: {e.text}"
        if msg.endswith("\n"):
            msg = msg[:-1]
        return banner + (line + "/* " + msg + " */").split("\n")


def native_graph_text(tf, options: Mapping[str, bool], nr_cpus: int,
                      on_block: Callable[[int], None] | None = None,
                      keep: frozenset[int] | None = None,
                      filt: BlockFilter | None = None
                      ) -> Iterator[str] | None:
    """The body of a function_graph trace file's text (the lines ``GraphPrinter.render``
    makes of ``entries_from_file(tf)``, after the headers) made by the native twin
    (_native_read.c's GraphText), in pieces that end in a newline; ``on_block(n)`` is
    told of each block of n records it reads.  None when there is no native twin
    (FNTRACE_PURE=1) or the trace holds what it does not print (function hits, stack
    traces, values recorded other than as text or 64-bit ints; markers and events
    under a filter; option overrun), or two threads share an id under different names:
    GraphPrinter prints those.  The trace
    is read once to check that, then again as it prints.  ``keep``: only these thread
    slots' records (output/filters.py's thread_slots); ``filt``: the records that pass
    it (output/filters.py's native_filter)."""
    from .. import _env
    from .ftrace_text import TRACE_OPTIONS
    from .walk import calls_only, canon_ids, drive
    native = _env.native()
    if native is None:
        return None
    opts = {**TRACE_OPTIONS, **options}
    if opts["funcgraph-overrun"]:
        return None
    # arguments and return values are printed from the payloads as the file has them
    # (given whether printed or not: a block's check needs them)
    payloads = True
    cpus = tf.cpus
    nslots = max(cpus) + 1 if cpus else 0
    threads = tf.threads
    procs: dict[int, str] = {}
    comm_of_pid: dict[int, str] = {}
    for c in range(nslots):
        pid, comm = threads.get(c, (0, "<...>"))
        if comm_of_pid.setdefault(pid, comm) != comm:
            return None             # the proc column would change name half way
        procs[c] = print_graph_proc(comm, pid)
    # events and markers are comments (not under a filter: which of them it keeps is
    # filter_entries' to say)
    ok = native.graph_events_ok if filt is None else native.graph_text_ok
    if calls_only(tf, ok, payloads) is None:
        return None
    syms = tf.symbols
    names = {ip: sym[0] for ip, sym in syms.items()}
    flags = tuple(bool(opts[k]) for k in ("funcgraph-cpu", "funcgraph-overhead",
                                            "funcgraph-proc", "funcgraph-duration",
                                            "funcgraph-abstime", "funcgraph-tail",
                                            "funcgraph-args", "funcgraph-retval",
                                            "funcgraph-retval-hex"))
    printer = native.GraphText(nslots, names, canon_ids(syms), flags,
                               len(str(max(nr_cpus - 1, 0))), procs)
    return drive(printer, tf, nslots, on_block, keep, filt, payloads)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
