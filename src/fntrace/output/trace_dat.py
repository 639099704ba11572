"""trace.dat: a trace in trace-cmd's file format, for ``trace-cmd report`` and KernelShark.

    fntrace export run.dat --format trace-cmd -o trace.dat
    trace-cmd report trace.dat

The file is version 6 of the format (``man 5 trace-cmd.dat.v6``), laid out as
trace-cmd's own writer lays it out (lib/trace-cmd/trace-output.c)::

    magic "\\x17\\x08\\x44tracing" "6\\0", endianness, sizeof(long), page size
    header_page, header_event          what the kernel's events/header_* files say
    ftrace event formats               the kernel's own events/ftrace/*/format text
    event systems                      dynamic events, each under its group
    kallsyms                           a synthetic /proc/kallsyms: one address per function
    printk formats, saved_cmdlines     (none); "TID thread-name" per thread
    nr cpus, options, "flyrecord"      trace_clock, cpu count, per-CPU offset and size,
                                       the trace_clock file again
    per-CPU data                       raw ring-buffer pages, page aligned

A thread is a CPU, as everywhere in fntrace: each thread slot gets its own per-CPU
data, and its events carry ``common_pid`` = the native thread id, whose name
``saved_cmdlines`` gives.  Functions are addresses in the kernel's text range
(``SYMBOL_BASE + SYMBOL_STRIDE * symbol id``), listed in kallsyms as ``T name`` so
trace-cmd prints names; a name the file has no id for (a stack frame) gets a fresh
id past the last.

Every event is written in the kernel's binary layout (kernel/trace/trace_entries.h,
kernel/trace/ring_buffer.c), so each costs what the kernel's would: function 28
bytes, funcgraph_entry 24, funcgraph_exit 44, plus an 8-byte time extend when more
than 2^27 ns pass between two events of a thread.

Streaming: the trace is read once; each thread's pages go to one shared temporary
file as they fill (only the page being filled is in memory, and one 4-byte page
number per page written), and are copied behind the header at the end, when the
symbols, threads and events the header lists are known.
"""
from __future__ import annotations

import os
import re
import stat
import struct
import tempfile
from array import array
from collections.abc import Mapping

from .entry import (LostEvents, TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET,
                    TRACE_PRINT, TRACE_STACK)
from .registry import Exporter, register_exporter
from ..ring_buffer import text_parts
from ..tracefile.blocks import dec_text

__all__ = ["TraceDatExporter", "PAGE_SIZE", "SYMBOL_BASE", "SYMBOL_STRIDE",
           "HEADER_PAGE", "HEADER_EVENT", "FTRACE_FORMATS", "symbol_address"]

PAGE_SIZE = 4096
# The page header of a 64-bit kernel (struct buffer_data_page): u64 timestamp, then
# local_t commit (8 bytes), then the events.
PAGE_HEADER = 16
PAGE_DATA = PAGE_SIZE - PAGE_HEADER
# commit's flag bits (ring_buffer.c): events were lost before this page, and their
# number is stored after the page's data.
RB_MISSED_EVENTS = 1 << 31
RB_MISSED_STORED = 1 << 30

# Event header (ring_buffer.c): type_len in the low 5 bits, time delta in the other 27.
TS_SHIFT = 27
TS_MASK = (1 << TS_SHIFT) - 1
RINGBUF_TYPE_DATA_TYPE_LEN_MAX = 28
RINGBUF_TYPE_PADDING = 29
RINGBUF_TYPE_TIME_EXTEND = 30
RB_MAX_SMALL_DATA = 4 * RINGBUF_TYPE_DATA_TYPE_LEN_MAX

# Synthetic function addresses: the x86-64 kernel text base, 16 bytes per function.
SYMBOL_BASE = 0xffffffff81000000
SYMBOL_STRIDE = 16


def symbol_address(symbol_id: int) -> int:
    """The kallsyms address of a function's symbol id."""
    return SYMBOL_BASE + SYMBOL_STRIDE * symbol_id


# events/header_page of a 64-bit kernel (ring_buffer_print_page_header).
HEADER_PAGE = (
    "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
    "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
    "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
    f"\tfield: char data;\toffset:{PAGE_HEADER};\tsize:{PAGE_DATA};\tsigned:1;\n")

# events/header_event (ring_buffer_print_entry_header).
HEADER_EVENT = (
    "# compressed entry header\n"
    "\ttype_len    :    5 bits\n"
    "\ttime_delta  :   27 bits\n"
    "\tarray       :   32 bits\n"
    "\n"
    f"\tpadding     : type == {RINGBUF_TYPE_PADDING}\n"
    f"\ttime_extend : type == {RINGBUF_TYPE_TIME_EXTEND}\n"
    "\ttime_stamp : type == 31\n"
    f"\tdata max type_len  == {RINGBUF_TYPE_DATA_TYPE_LEN_MAX}\n")

# struct trace_entry: every event's common fields.
_COMMON = (
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n")

# The event ids of the kernel's enum trace_type.
ID_FUNCTION, ID_KERNEL_STACK, ID_PRINT, ID_FUNCGRAPH_EXIT, ID_FUNCGRAPH_ENTRY = 1, 4, 5, 10, 11
# Dynamic events are numbered after the kernel's static ones.
FIRST_DYNAMIC_ID = 1000

# events/ftrace/*/format, as the kernel's trace_export.c prints them from
# trace_entries.h (FTRACE_ENTRY function, kernel_stack, print, funcgraph_exit,
# funcgraph_entry).
FTRACE_FORMATS: dict[str, str] = {
    "function": (
        f"name: function\nID: {ID_FUNCTION}\nformat:\n{_COMMON}\n"
        "\tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long parent_ip;\toffset:16;\tsize:8;\tsigned:0;\n\n"
        'print fmt: " %ps <-- %ps", (void *)REC->ip, (void *)REC->parent_ip\n'),
    "kernel_stack": (
        f"name: kernel_stack\nID: {ID_KERNEL_STACK}\nformat:\n{_COMMON}\n"
        "\tfield:int size;\toffset:8;\tsize:4;\tsigned:1;\n"
        "\tfield:unsigned long caller[8];\toffset:16;\tsize:64;\tsigned:0;\n\n"
        'print fmt: "\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n" "\\t=> %ps\\n\\t=> %ps\\n'
        '\\t=> %ps\\n" "\\t=> %ps\\n\\t=> %ps\\n", '
        + ", ".join(f"(void *)REC->caller[{i}]" for i in range(8)) + "\n"),
    "print": (
        f"name: print\nID: {ID_PRINT}\nformat:\n{_COMMON}\n"
        "\tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;\n"
        "\tfield:char buf[];\toffset:16;\tsize:0;\tsigned:1;\n\n"
        'print fmt: "%ps: %s", (void *)REC->ip, REC->buf\n'),
    "funcgraph_exit": (
        f"name: funcgraph_exit\nID: {ID_FUNCGRAPH_EXIT}\nformat:\n{_COMMON}\n"
        "\tfield:unsigned long func;\toffset:8;\tsize:8;\tsigned:0;\n"
        "\tfield:int depth;\toffset:16;\tsize:4;\tsigned:1;\n"
        "\tfield:unsigned int overrun;\toffset:20;\tsize:4;\tsigned:0;\n"
        "\tfield:unsigned long long calltime;\toffset:24;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long long rettime;\toffset:32;\tsize:8;\tsigned:0;\n\n"
        'print fmt: "<-- %ps (%d) (start: %llx  end: %llx) over: %d", (void *)REC->func, '
        "REC->depth, REC->calltime, REC->rettime, REC->depth\n"),
    "funcgraph_entry": (
        f"name: funcgraph_entry\nID: {ID_FUNCGRAPH_ENTRY}\nformat:\n{_COMMON}\n"
        "\tfield:unsigned long func;\toffset:8;\tsize:8;\tsigned:0;\n"
        "\tfield:int depth;\toffset:16;\tsize:4;\tsigned:1;\n\n"
        'print fmt: "--> %ps (%d)", (void *)REC->func, REC->depth\n'),
}

# The clocks of the trace_clock file (kernel/trace/trace.c trace_clocks[]).
TRACE_CLOCKS = ("local", "global", "counter", "uptime", "perf", "mono", "mono_raw",
                "boot", "tai")

# Option ids (trace-cmd.dat.v7(5); a v6 options block uses the same ids).
OPTION_DONE, OPTION_TRACECLOCK, OPTION_UNAME, OPTION_CPUCOUNT = 0, 4, 5, 8

_FUNCTION = struct.Struct("<HBBiQQ")            # 24 bytes
_GRAPH_ENT = struct.Struct("<HBBiQi")           # 20 bytes
_GRAPH_RET = struct.Struct("<HBBiQiIQQ")        # 40 bytes
_PRINT_HEAD = struct.Struct("<HBBiQ")           # 16 bytes, then buf
_STACK_HEAD = struct.Struct("<HBBiiI")          # 16 bytes (size, pad), then callers
_EVENT_HEAD = struct.Struct("<HBBiQ")           # common fields, __probe_ip
_FUNCTION_TYPES = frozenset({TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET})
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# A dynamic event's text: "(HEAD) name=value name=value ..." (trace_fprobe.c).
_HEAD = re.compile(r"\(([^()]*)\)")
_ARG = re.compile(r"(?:^| )([A-Za-z_][A-Za-z0-9_]*)=")
# "GRP:EVENT" (an event enabled by name) in the recording's -e list.
_DEF_STATIC = re.compile(r"^([A-Za-z_][\w]*):([A-Za-z_][\w]*)$")
_C_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_EVENT_NAME_LEN = 64
DEFAULT_EVENT_GROUP = "fprobes"


def _pad4(n: int) -> int:
    return (n + 3) & ~3


class _Pages:
    """The ring-buffer pages of every thread slot, written to one temporary file as
    they fill.  Each slot keeps the page being filled and the numbers of its pages
    already written."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(prefix="fntrace-dat-")
        self.npages = 0
        self.cpus: dict[int, _CpuBuffer] = {}

    def cpu(self, cpu: int) -> "_CpuBuffer":
        b = self.cpus.get(cpu)
        if b is None:
            b = self.cpus[cpu] = _CpuBuffer(self)
        return b

    def put(self, page: bytes) -> int:
        """Pages (one, or several back to back): the number of the first."""
        if len(page) % PAGE_SIZE:
            raise ValueError(f"{len(page)} bytes are not whole pages")
        self.file.write(page)
        first = self.npages
        self.npages += len(page) // PAGE_SIZE
        return first

    def copy_to(self, out, put, page_nos) -> None:
        """The pages numbered ``page_nos``, in that order, written to ``out`` after
        what ``put`` wrote there: runs of pages that follow one another in the file (a
        slot's pages, written a block at a time) copied by the kernel from file to file
        (os.copy_file_range) when ``out`` is a file, else read and ``put`` a megabyte at
        a time -- not a page at a time."""
        f = self.file
        f.flush()
        src = f.fileno()
        dst = _file_fd(out)
        run = max(1, (1 << 20) // PAGE_SIZE)
        i, n = 0, len(page_nos)
        while i < n:
            first = page_nos[i]
            j = i + 1
            while j < n and page_nos[j] == first + (j - i):
                j += 1
            at, end = first * PAGE_SIZE, (first + j - i) * PAGE_SIZE
            while dst is not None and at < end:
                try:
                    done = os.copy_file_range(src, dst, end - at, at)
                except OSError:
                    done = 0        # (another file system, an old kernel: by hand)
                if done <= 0:
                    dst = None
                at += done
            while at < end:
                data = os.pread(src, min(end - at, run * PAGE_SIZE), at)
                if not data:
                    raise OSError(f"the pages' scratch file is short at byte {at}")
                put(data)
                at += len(data)
            i = j

    def close(self) -> None:
        self.file.close()


def _file_fd(out) -> int | None:
    """The descriptor of a regular file ``out`` writes to, flushed (pages may be
    copied into it by the kernel from here on); None for anything else."""
    if not hasattr(os, "copy_file_range"):
        return None
    try:
        fd = out.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        out.flush()
    except (AttributeError, OSError, ValueError):
        return None
    return fd


class _CpuBuffer:
    """One thread slot's ring buffer, as the kernel's writer fills it (rb_reserve_next_event):
    events appended with the time since the previous one, a time extend when that does
    not fit in 27 bits, a new page when the event does not fit in this one."""

    __slots__ = ("pages", "page_nos", "data", "page_ts", "last_ts", "lost")

    def __init__(self, pages: _Pages) -> None:
        self.pages = pages
        self.page_nos = array("I")
        self.data = bytearray()
        self.page_ts = 0
        self.last_ts = 0
        self.lost: int | None = None        # events lost before the next page

    def add(self, ts: int, payload: bytes) -> None:
        data = self.data
        n = len(payload)
        if data and n <= RB_MAX_SMALL_DATA:
            # the common case: a small event, soon after the previous one, that fits
            delta = ts - self.last_ts
            if 0 <= delta <= TS_MASK and len(data) + n + 4 <= PAGE_DATA:
                data += _U32.pack(n >> 2 | delta << 5)
                data += payload
                self.last_ts = ts
                return
        self._add(ts, payload)

    def _add(self, ts: int, payload: bytes) -> None:
        n = len(payload)
        if n > RB_MAX_SMALL_DATA:
            body = _U32.pack(n + 4) + payload           # type_len 0: length in array[0]
            type_len = 0
        else:
            body = payload
            type_len = n >> 2
        size = 4 + len(body)
        if size > PAGE_DATA:
            raise ValueError(f"an event of {size} bytes does not fit in a page")
        if not self.data:
            self.page_ts = self.last_ts = ts
        delta = ts - self.last_ts
        if delta < 0:
            delta = 0               # never backwards within a thread
        extend = delta > TS_MASK
        if len(self.data) + size + (8 if extend else 0) > PAGE_DATA:
            self.flush()
            self.page_ts = self.last_ts = ts
            delta, extend = 0, False
        if extend:
            self.data += _U32.pack(RINGBUF_TYPE_TIME_EXTEND | (delta & TS_MASK) << 5)
            self.data += _U32.pack(delta >> TS_SHIFT)
            delta = 0
        self.data += _U32.pack(type_len | delta << 5)
        self.data += body
        self.last_ts = ts

    def mark_lost(self, lost: int) -> None:
        """Events were dropped here: the next page says so (RB_MISSED_EVENTS), with
        their number when known (RB_MISSED_STORED)."""
        self.flush()
        self.lost = (self.lost or 0) + lost if lost > 0 else (self.lost or -1)

    def flush(self) -> None:
        if not self.data:
            return
        commit = len(self.data)
        page = bytearray(_U64.pack(self.page_ts))
        flags = 0
        tail = b""
        if self.lost is not None:
            flags |= RB_MISSED_EVENTS
            if self.lost > 0 and commit + 8 <= PAGE_DATA:
                flags |= RB_MISSED_STORED
                tail = _U64.pack(self.lost)
            self.lost = None
        page += _U64.pack(commit | flags)
        page += self.data
        page += tail
        page += bytes(PAGE_SIZE - len(page))
        self.page_nos.append(self.pages.put(bytes(page)))
        self.data = bytearray()


class _Symbols:
    """Function name -> synthetic address: the trace file's symbol id where it has one
    (the first id of a name), a fresh id past the last for any other name."""

    def __init__(self, symbols: Mapping[int, tuple]) -> None:
        self.by_name: dict[str, int] = {}
        for sid in sorted(symbols):
            self.by_name.setdefault(str(symbols[sid][0]), sid)
        self.next_id = max(symbols, default=0) + 1
        self.used: dict[int, str] = {}          # address -> name, written to kallsyms
        self.known: dict[str, int] = {}         # name -> address, of the names seen

    def addr(self, name: str) -> int:
        a = self.known.get(name)
        if a is not None:
            return a
        if not name:
            return 0
        sid = self.by_name.get(name)
        if sid is None:
            sid = self.by_name[name] = self.next_id
            self.next_id += 1
        a = symbol_address(sid)
        if a not in self.used:
            # kallsyms is one "ADDR T NAME" per line: no whitespace in a name.
            self.used[a] = "".join(name.split()) or "?"
        self.known[name] = a
        return a

    def kallsyms(self) -> bytes:
        return "".join(f"{a:016x} T {self.used[a]}\n" for a in sorted(self.used)).encode()


class _DynEvent:
    """A dynamic event's own format: __probe_ip (the probed function), the text in the
    parentheses, and one string per argument, named as its text names them.  An event
    whose text has no parentheses (``head`` False: an asyncio task switch's "next=...
    id=...") prints its arguments alone; its __probe_at is empty."""

    def __init__(self, event_id: int, group: str, name: str, args: list[str],
                 head: bool = True) -> None:
        self.id = event_id
        self.group = group
        self.name = name
        self.args = args
        self.head = head

    def format_text(self) -> str:
        fields = ["\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n",
                  "\tfield:__data_loc char[] __probe_at;\toffset:16;\tsize:4;\tsigned:1;\n"]
        off = 20
        for a in self.args:
            fields.append(f"\tfield:__data_loc char[] {a};\toffset:{off};\tsize:4;\tsigned:1;\n")
            off += 4
        at = ["(%s)"] if self.head else []
        fmt = " ".join(at + [f"{a}=%s" for a in self.args])
        refs = ", ".join((["__get_str(__probe_at)"] if self.head else [])
                         + [f"__get_str({a})" for a in self.args])
        return (f"name: {self.name}\nID: {self.id}\nformat:\n{_COMMON}\n{''.join(fields)}\n"
                f'print fmt: "{fmt}", {refs}\n')

    def split(self, text: str) -> tuple[str, list[str]] | None:
        """(head, [value per argument]) of one record's text; None if it does not
        name this event's arguments in order."""
        if not self.head:
            head, rest = "", " " + text
        else:
            m = _HEAD.match(text)
            if m is None:
                return None
            head, rest = m.group(1), text[m.end():]
        values = []
        pos = 0
        for i, a in enumerate(self.args):
            key = f" {a}="
            if not rest.startswith(key, pos):
                return None
            start = pos + len(key)
            if i + 1 < len(self.args):
                nxt = rest.find(f" {self.args[i + 1]}=", start)
                if nxt < 0:
                    return None
            else:
                nxt = len(rest)
            values.append(rest[start:nxt])
            pos = nxt
        return (head, values) if pos == len(rest) else None

    def payload(self, pid: int, text: str, symbols: _Symbols) -> bytes:
        parts = self.split(text)
        if parts is None:
            # a text that does not name the arguments as expected: all after the
            # parentheses in the first field
            m = _HEAD.match(text) if self.head else None
            head, rest = (m.group(1), text[m.end():]) if m else ("", text)
            if not self.head:
                rest = " " + rest
            if self.args and rest.startswith(f" {self.args[0]}="):
                rest = rest[len(self.args[0]) + 2:]
            values = [rest] + [""] * (len(self.args) - 1) if self.args else []
        else:
            head, values = parts
        func = head.split(" <- ")[-1].split("+")[0].strip()
        ip = symbols.addr(func) if func else 0
        fixed = 20 + 4 * len(self.args)
        strings = [s.encode("utf-8", "replace") + b"\0" for s in [head, *values]]
        locs = []
        off = fixed
        for s in strings:
            if len(s) > 0xffff:
                s = s[:0xfffe] + b"\0"
            locs.append(len(s) << 16 | off)
            off += len(s)
        data = bytearray(_EVENT_HEAD.pack(self.id, 0, 0, pid, ip))
        for loc in locs:
            data += _U32.pack(loc)
        for s in strings:
            data += s
        data += bytes(_pad4(len(data)) - len(data))
        return bytes(data)


class _Texts:
    """The payloads of markers, stack traces and dynamic events (written by the loop
    and, through its on_event, by the native walk), and the events' formats: ``dyn``
    by name, numbered in the order they are first met; ``unsplit``: the events whose
    text did not split into their fields."""

    def __init__(self, symbols: _Symbols, defs: dict[str, tuple[str, list[str] | None]]
                 ) -> None:
        self.symbols = symbols
        self.defs = defs
        self.dyn: dict[str, _DynEvent] = {}
        self.unsplit = 0
        self.mark = symbols.addr("tracing_mark_write")

    def payload(self, t: int, pid: int, func: str, text: str) -> bytes:
        symbols = self.symbols
        if t == TRACE_PRINT:
            ip = symbols.addr(func) if func else self.mark
            text = text if text.endswith("\n") else text + "\n"
            b = _PRINT_HEAD.pack(ID_PRINT, 0, 0, pid, ip) + text.encode("utf-8", "replace") + b"\0"
            return b + bytes(_pad4(len(b)) - len(b))
        if t == TRACE_STACK:
            frames = [f for f in text.split("\n") if f]
            # as many frames as fit a page (the kernel's stack entry is bounded too)
            frames = frames[:(PAGE_DATA - 64) // 8]
            return (_STACK_HEAD.pack(ID_KERNEL_STACK, 0, 0, pid, 8 * len(frames), 0)
                    + b"".join(_U64.pack(symbols.addr(f)) for f in frames))
        ev = self.dyn.get(func)
        if ev is None:
            name = func
            d = self.defs.get(func)
            # a probe's text opens with its place in parentheses; a static event's may not
            head = (d is not None and d[1] is not None) or _HEAD.match(text) is not None
            if d is not None:
                group, names = d
            else:
                # an event of its own group ("asyncio:task_switch", as the kernel names
                # "sched:sched_switch"): trace-cmd looks a format up by its name, and
                # one named "group:name" is an UNKNOWN EVENT to it
                g, sep, rest = func.partition(":")
                group, names = (g, None) if sep and g and rest else (DEFAULT_EVENT_GROUP, None)
                name = rest if sep and g and rest else func
            if names is None:
                # the names as this first record's text shows them
                names = _ARG.findall(_HEAD.sub("", text, count=1))
            ev = self.dyn[func] = _DynEvent(FIRST_DYNAMIC_ID + len(self.dyn), group, name,
                                            names, head)
        if ev.split(text) is None:
            self.unsplit += 1
        payload = ev.payload(pid, text, symbols)
        if len(payload) + 8 > PAGE_DATA:
            payload = ev.payload(pid, text[:PAGE_DATA // 2], symbols)
        return payload


def _definitions(definitions) -> dict[str, tuple[str, list[str] | None]]:
    """Event name -> (group, its fields' names, None where the definition alone does
    not tell them), from the recording's -e list: "f[:[GRP/][EVENT]] SYM[%return]
    [FETCHARGS]" (the kernel's naming: EVENT defaults to SYM__entry / SYM__exit,
    sanitized; a fetcharg is named by "NAME=", else by itself when it is a C name,
    else argN) and "GRP:EVENT"."""
    out: dict[str, tuple[str, list[str] | None]] = {}
    for d in definitions or ():
        words = str(d).split()
        if not words:
            continue
        m = _DEF_STATIC.match(words[0])
        if m and len(words) == 1:
            out[m.group(2)] = (m.group(1), None)
            continue
        if not words[0].startswith("f") or len(words) < 2:
            continue
        head, sym = words[0], words[1]
        group, event = DEFAULT_EVENT_GROUP, ""
        if ":" in head:
            spec = head.split(":", 1)[1]
            if "/" in spec:
                group, event = spec.split("/", 1)
                group = group or DEFAULT_EVENT_GROUP
            else:
                event = spec
        if not event:
            is_return = sym.endswith("%return")
            symbol = sym[:-len("%return")] if is_return else sym
            name = f"{symbol}__{'exit' if is_return else 'entry'}"[:MAX_EVENT_NAME_LEN - 1]
            event = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_"
                            for c in name)
        names: list[str] = []
        fields: list[str] | None = names
        for k, raw in enumerate(words[2:]):
            eq = raw.find("=")
            if eq > 0:
                names.append(raw[:eq])
                continue
            cand = raw.split(":", 1)[0]
            if cand.startswith("$arg"):
                fields = None       # a parameter's name: only the text says which
                break
            names.append(cand if _C_NAME.match(cand) else f"arg{k + 1}")
        out[event] = (group, fields)
    return out


def _clock_text(clock: str) -> str:
    """The trace_clock file: every clock, the one in use in brackets."""
    if clock not in TRACE_CLOCKS:
        clock = "local"
    return " ".join(f"[{c}]" if c == clock else c for c in TRACE_CLOCKS) + "\n"


class TraceDatExporter(Exporter):
    name = "trace-cmd"
    summary = "trace.dat (trace-cmd file format v6): trace-cmd report, KernelShark"
    binary = True
    suffix = ".trace.dat"

    def write(self, source, out, options):
        pages = _Pages()
        try:
            return self._write(source, out, pages)
        finally:
            pages.close()

    def _write(self, source, out, pages: _Pages) -> dict:
        symbols = _Symbols(source.symbols)
        defs = _definitions(source.header.get("events"))
        symbols.addr("tracing_mark_write")
        threads = dict(source.threads)
        notes: list[str] = []
        walked = _native_pages(source, pages, symbols, threads, defs)
        if walked:
            symbols, texts = walked
        else:
            texts = _Texts(symbols, defs)
            self._loop(source, pages, symbols, threads, texts)
        dyn, unsplit = texts.dyn, texts.unsplit
        for b in pages.cpus.values():
            b.flush()
        pages.file.flush()
        hdr = source.header
        if hdr.get("graph_args") or hdr.get("graph_retval"):
            # funcgraph_entry/exit have no field for them (the kernel's own have none
            # for Python values either)
            notes.append("trace.dat: function arguments and return values are not "
                         "exported (the kernel's graph events have no field for them)")
        if unsplit:
            notes.append(f"{unsplit} dynamic event(s) whose text did not split into their "
                         "fields: written whole in the first field")
        nr_cpus = max([*pages.cpus, *threads, -1]) + 1 if (pages.cpus or threads) else 1
        clock = source.trace_clock
        self._write_file(out, pages, symbols, dyn, threads, nr_cpus, clock)
        return {"notes": notes}

    def _loop(self, source, pages: _Pages, symbols: _Symbols,
              threads: dict[int, tuple[int, str]], texts: _Texts) -> None:
        known = symbols.known
        addr = symbols.addr
        for e in source.entries():
            if isinstance(e, LostEvents):
                pages.cpu(e.cpu).mark_lost(e.lost)
                continue
            buf = pages.cpu(e.cpu)
            threads.setdefault(e.cpu, (e.pid, e.comm))
            t = e.type
            pid = e.pid
            if t in _FUNCTION_TYPES:
                ip = known.get(e.func) or addr(e.func)
            if t == TRACE_GRAPH_ENT:
                payload = _GRAPH_ENT.pack(ID_FUNCGRAPH_ENTRY, 0, 0, pid, ip, e.depth)
            elif t == TRACE_GRAPH_RET:
                payload = _GRAPH_RET.pack(ID_FUNCGRAPH_EXIT, 0, 0, pid, ip,
                                          e.depth, e.overrun & 0xffffffff,
                                          e.calltime & 0xffffffffffffffff,
                                          e.rettime & 0xffffffffffffffff)
            elif t == TRACE_FN:
                payload = _FUNCTION.pack(ID_FUNCTION, 0, 0, pid, ip,
                                         known.get(e.parent) or addr(e.parent))
            elif t == TRACE_PRINT or t == TRACE_STACK or t == TRACE_EVENT:
                payload = texts.payload(t, pid, e.func, e.text)
            else:
                continue
            buf.add(e.ts, payload)

    def _write_file(self, out, pages: _Pages, symbols: _Symbols, dyn: dict[str, _DynEvent],
                    threads: Mapping[int, tuple[int, str]], nr_cpus: int, clock: str) -> None:
        pos = 0

        def put(b: bytes) -> None:
            nonlocal pos
            out.write(b)
            pos += len(b)

        put(b"\x17\x08\x44tracing6\0" + bytes([0, 8]) + _U32.pack(PAGE_SIZE))
        for name, text in (("header_page", HEADER_PAGE), ("header_event", HEADER_EVENT)):
            data = text.encode()
            put(name.encode() + b"\0" + _U64.pack(len(data)) + data)
        put(_U32.pack(len(FTRACE_FORMATS)))
        for text in FTRACE_FORMATS.values():
            data = text.encode()
            put(_U64.pack(len(data)) + data)
        systems: dict[str, list[_DynEvent]] = {}
        for ev in dyn.values():
            systems.setdefault(ev.group, []).append(ev)
        put(_U32.pack(len(systems)))
        for system, evs in systems.items():
            put(system.encode() + b"\0" + _U32.pack(len(evs)))
            for ev in evs:
                data = ev.format_text().encode()
                put(_U64.pack(len(data)) + data)
        kallsyms = symbols.kallsyms()
        put(_U32.pack(len(kallsyms)) + kallsyms)
        put(_U32.pack(0))                                       # printk formats
        cmdlines = "".join(f"{pid} {''.join(comm.split()) or '<...>'}\n"
                           for pid, comm in sorted(set(threads.values()))).encode()
        put(_U64.pack(len(cmdlines)) + cmdlines)
        put(_U32.pack(nr_cpus))
        put(b"options  \0")
        clock_text = _clock_text(clock).encode()
        put(struct.pack("<HI", OPTION_TRACECLOCK, len(clock_text)) + clock_text)
        put(struct.pack("<HII", OPTION_CPUCOUNT, 4, nr_cpus))
        put(struct.pack("<H", OPTION_DONE))
        put(b"flyrecord\0")
        # the CPU table, then (as trace-cmd's own v6 writer does) the trace_clock file
        table_end = pos + 16 * nr_cpus + 8 + len(clock_text)
        offset = (table_end + PAGE_SIZE - 1) // PAGE_SIZE * PAGE_SIZE
        layout = []
        for cpu in range(nr_cpus):
            b = pages.cpus.get(cpu)
            size = len(b.page_nos) * PAGE_SIZE if b is not None else 0
            layout.append((offset if size else 0, size))
            offset += size
        for off, size in layout:
            put(_U64.pack(off) + _U64.pack(size))
        put(_U64.pack(len(clock_text)) + clock_text)
        put(bytes(((pos + PAGE_SIZE - 1) // PAGE_SIZE * PAGE_SIZE) - pos))
        for cpu in range(nr_cpus):
            b = pages.cpus.get(cpu)
            if b is not None:
                pages.copy_to(out, put, b.page_nos)


def _native_pages(source, pages: _Pages, symbols: _Symbols,
                  threads: dict[int, tuple[int, str]],
                  defs: dict[str, tuple[str, list[str] | None]]
                  ) -> tuple[_Symbols, _Texts] | None:
    """The pages of a trace of calls and function hits made natively (_native_read.c's
    DatPages, slot by slot: a slot's pages depend on its own records only) into
    ``pages``, their slots into ``threads``: (the symbols with the names they use,
    the markers' and events' _Texts).  Markers, events and stack traces are made by
    _Texts, as the loop makes them, when they are all on one slot: the order the loop
    meets them in (by time, across slots) numbers the events and the names no symbol
    has, and decides whose text names an event's fields.  None, with ``pages`` as it
    was and ``symbols`` untouched, when there is no native twin or the trace holds
    more (their texts on several slots, a name with no symbol): the loop writes it."""
    import copy
    from .. import _env
    from ..errors import TraceFileError
    from .registry import name_of
    native = _env.native()
    if native is None:
        return None
    blocks = source.record_blocks(None, True)
    if blocks is None:
        return None
    # what the texts add to the symbols stays apart until the walk is done
    symbols = copy.deepcopy(symbols)
    texts = _Texts(symbols, defs)
    text_slot: list[int] = []

    def on_event(slot: int, t: int, payload: bytes, pid: int) -> bytes | None:
        if text_slot and text_slot[0] != slot:
            return None
        text_slot[:] = [slot]
        func, text = text_parts(dec_text(payload))
        return texts.payload(t, pid, func, text)
    syms = source.symbols
    addrs = {ip: symbol_address(symbols.by_name[str(sym[0])]) for ip, sym in syms.items()}
    slots = source.tf.cpus
    nslots = max([*slots, *threads, -1]) + 1
    pids = {k: threads.get(k, (0, ""))[0] for k in range(nslots)}
    walker = native.DatPages(nslots, addrs, pids, (
        PAGE_SIZE, PAGE_HEADER, TS_SHIFT, RINGBUF_TYPE_TIME_EXTEND, RB_MAX_SMALL_DATA,
        RB_MISSED_EVENTS, RB_MISSED_STORED), on_event)
    touched: list[int] = []

    def put(cpu: int, data: bytes) -> None:
        # (a block's pages in one write, numbered one after another)
        first = pages.put(data)
        pages.cpu(cpu).page_nos.extend(range(first, first + len(data) // PAGE_SIZE))

    try:
        for cpu, lost, records, _ibase, payloads in blocks:
            if not lost and not records:
                continue
            if cpu not in pages.cpus:
                touched.append(cpu)
            pages.cpu(cpu)
            data = walker.feed(cpu, lost, records, _ibase, payloads)
            if data is None:
                break
            put(cpu, data)
        else:
            for cpu in touched:
                data = walker.flush(cpu)
                if data is None:
                    break
                put(cpu, data)
            else:
                for ip in walker.used:
                    symbols.addr(name_of(ip, syms))
                for cpu in touched:
                    threads.setdefault(cpu, (0, "<...>"))
                return symbols, texts
    except TraceFileError:
        pass                # the loop reads up to the damage, then says so
    finally:
        blocks.close()
    # declined: the pages start again, the Python way
    pages.file.seek(0)
    pages.file.truncate()
    pages.npages = 0
    pages.cpus.clear()
    return None


register_exporter(TraceDatExporter())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
