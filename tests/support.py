"""What the tests share besides fixtures (those are in conftest.py): the one way to run
the ``fntrace`` command, the one masking of what differs between two runs of the same
calls, the parsing of function-tracer lines, gold files, the reset of tracefs instances
and the error_log check of the event tests, the fgraph users' recorder, and the
program whose whole calls the exports (Parquet, OTLP) are compared with.
"""
from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from fntrace import fgraph
from fntrace.errors import FntraceError
from fntrace.tracefs import Tracefs

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = REPO_ROOT / "examples"
GOLD = Path(__file__).resolve().parent / "gold"
REGEN_GOLD = os.environ.get("FNTRACE_REGEN_GOLD") == "1"

# One test's subprocess must never hang the suite; no test relies on this limit.
SUBPROCESS_TIMEOUT = 300


# ---------------------------------------------------------------------------------
# The fntrace command
# ---------------------------------------------------------------------------------

def fntrace_argv(*args, code: str | None = None) -> list[str]:
    """The ``fntrace`` command's argv, ``python -m fntrace.cli.main ARGS``, for a test
    that starts it itself (Popen, a terminal, a signal); with ``code``, that program
    (``python -c``) given ARGS instead: a driver that registers a format of the test's
    own, then calls main."""
    head = ["-c", code] if code is not None else ["-m", "fntrace.cli.main"]
    return [sys.executable, *head, *map(str, args)]


def fntrace_cli(*args, cwd: Path | str | None = None, input: str | None = None,
                env: dict | None = None, timeout: float = SUBPROCESS_TIMEOUT,
                check: bool = False, code: str | None = None, text: bool = True
                ) -> subprocess.CompletedProcess:
    """The ``fntrace`` command (``fntrace_argv(ARGS, code=code)``) run in a subprocess,
    its output captured (as text unless ``text`` is false); ``check``: its exit status
    must be 0.  Every test that runs the command and waits for it runs it through this."""
    p = subprocess.run(fntrace_argv(*args, code=code),
                       cwd=None if cwd is None else str(cwd), input=input, env=env,
                       capture_output=True, text=text, timeout=timeout)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def run_python(*args, cwd: Path | str | None = None, input: str | None = None,
               env: dict | None = None, timeout: float = SUBPROCESS_TIMEOUT
               ) -> subprocess.CompletedProcess:
    """``python ARGS`` in a subprocess, its output captured as text: a program run
    plainly (the reference behaviour), or one that uses fntrace itself."""
    return subprocess.run([sys.executable, *map(str, args)],
                          cwd=None if cwd is None else str(cwd), input=input, env=env,
                          capture_output=True, text=True, timeout=timeout)


_module_counter = itertools.count(1)


def unique_module_name(hint: str = "mymod") -> str:
    """A module name no other test uses: records are never forgotten in a process, so
    each test's functions must have names of their own."""
    return f"{hint}{next(_module_counter)}"


# ---------------------------------------------------------------------------------
# Function-tracer lines
# ---------------------------------------------------------------------------------

# trace_print_context(): "%16s-%-7d [%03d] " [flags] " %5lu.%06lu: "
_FN_LINE = re.compile(
    r"^(?P<comm>.{16})-(?P<pid>\d+) *\[(?P<cpu>\d{3})\] (?P<flags>\S{5} )? *"
    r"(?P<ts>\d+\.\d{6}): (?P<text>.*)$")

FUNCTION_HEADER_TAIL = [
    "#           TASK-PID     CPU#     TIMESTAMP  FUNCTION",
    "#              | |         |         |         |",
]


# function_graph's header with its default options
GRAPH_HEADER = [
    "# tracer: function_graph",
    "#",
    "# CPU  DURATION                  FUNCTION CALLS",
    "# |     |   |                     |   |   |   |",
]


@dataclass(frozen=True)
class FnLine:
    comm: str
    pid: int
    cpu: int
    ts: str
    func: str
    parent: str | None      # None: no " <-" part


def parse_fn_line(line: str) -> FnLine | None:
    """A function-tracer line split into its fields; None for anything else."""
    m = _FN_LINE.match(line)
    if m is None:
        return None
    text = m.group("text")
    func, sep, parent = text.partition(" <-")
    return FnLine(m.group("comm").strip(), int(m.group("pid")), int(m.group("cpu")),
                  m.group("ts"), func, parent if sep else None)


def fn_lines(text: str) -> list[FnLine]:
    """Every function-tracer line of a trace text (header and other lines skipped)."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        p = parse_fn_line(line)
        if p is not None:
            out.append(p)
    return out


_ENTRIES = re.compile(r"^# entries-in-buffer/entries-written: (\d+)/(\d+)   #P:(\d+)$")


def header_counts(text: str) -> tuple[int, int, int]:
    """(entries-in-buffer, entries-written, #P) from a trace header."""
    for line in text.splitlines():
        m = _ENTRIES.match(line)
        if m:
            return int(m.group(1)), int(m.group(2)), int(m.group(3))
    raise AssertionError("no entries-in-buffer/entries-written line in:\n" + text[:2000])


# ---------------------------------------------------------------------------------
# Masking what differs between two runs of the same calls
# ---------------------------------------------------------------------------------

# The duration cell is 14 columns followed by "|  ": a mark, a space, the number, " us "
# and padding (trace_print_graph_duration), or 14 spaces when the line has none.
_DURATION = re.compile(r"[ +!#*@$] \d+(?:\.\d+)? us +(?=\|  )")
DUR = "  X.XXX us    "
assert len(DUR) == 14
# the proc cell: 14 columns, or a longer comm-pid printed whole (print_graph_proc)
_PROC = re.compile(r"^( *\d+\) )(.{14}|\S+-\d+) \| ")
_GRAPH_CPU = re.compile(r"^( *)\d+\) ")


def is_header(line: str) -> bool:
    """A header line ("# tracer: ...", "# CPU ...", "#"); not a line of a trace shown
    without the CPU column whose duration carries the '#' mark ("# 1837.709 us |")."""
    return line.startswith("#") and not re.match(r"^# \d", line)


def mask_line(line: str, cpus: bool = False) -> str:
    """One trace line with what differs between two runs replaced by fixed text: a
    function line's pid and timestamp (PID, TS), a graph line's duration (DUR) and
    its proc cell's pid (re-centred, the cell stays 14 wide).  ``cpus``: the CPU
    column (N, CPU) and the header's #P count too, for traces of two processes."""
    if is_header(line):
        return re.sub(r"#P:\d+", "#P:N", line) if cpus else line
    m = _FN_LINE.match(line)
    if m is not None:
        cpu = "CPU" if cpus else m.group("cpu")
        return f"{m.group('comm')}-PID [{cpu}] {m.group('flags') or ''}TS: {m.group('text')}"
    line = _DURATION.sub(DUR, line, count=1)
    m = _PROC.match(line)
    if m is not None:
        comm, sep, _pid = m.group(2).strip().rpartition("-")
        if sep:
            text = f"{comm}-PID"
            pad = 14 - len(text)
            cell = " " * (pad // 2) + text + " " * (pad - pad // 2)
            line = m.group(1) + cell + " | " + line[m.end():]
    return _GRAPH_CPU.sub(r"\1N) ", line, count=1) if cpus else line


def masked(text: str) -> list[str]:
    """Every line of a trace, masked with the CPU column (``mask_line(cpus=True)``):
    what two processes tracing the same calls print alike."""
    return [mask_line(line, cpus=True) for line in text.splitlines()]


def mask_graph(text: str) -> list[str]:
    """Every line of a graph trace, masked; blank lines dropped."""
    return [mask_line(l) for l in text.splitlines() if l.strip()]


def body(text: str) -> list[str]:
    """The masked lines of a graph trace without its header."""
    return [mask_line(l) for l in text.splitlines() if l.strip() and not is_header(l)]


EXPECTED_MARGIN = 8


def expected(text: str) -> list[str]:
    """Expected lines written in a test body: each non-blank line loses the 8 spaces
    of the test's indentation (not a common-prefix dedent: a graph line's own leading
    space is part of it); blank lines are dropped."""
    out = []
    for l in text.splitlines():
        if not l.strip():
            continue
        assert l.startswith(" " * EXPECTED_MARGIN), f"expected text not indented by 8: {l!r}"
        out.append(l[EXPECTED_MARGIN:])
    return out


def assert_lines(got: list[str], want: list[str]) -> None:
    """Line by line, with the whole of both on failure."""
    msg = "\n--- got\n" + "\n".join(got) + "\n--- want\n" + "\n".join(want)
    for i, (g, w) in enumerate(zip(got, want), 1):
        assert g == w, f"line {i}:\n got: {g!r}\nwant: {w!r}{msg}"
    assert len(got) == len(want), f"{len(got)} lines, expected {len(want)}{msg}"


# ---------------------------------------------------------------------------------
# Gold files
# ---------------------------------------------------------------------------------

def compare_gold(path: Path, lines: list[str]) -> None:
    """Compare ``lines`` with the gold file at ``path`` line by line (with
    FNTRACE_REGEN_GOLD=1, rewrite it instead)."""
    name = path.relative_to(GOLD) if path.is_relative_to(GOLD) else path
    if REGEN_GOLD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines))
        return
    assert path.exists(), f"no gold file {name}; create it with FNTRACE_REGEN_GOLD=1"
    expected = path.read_text().split("\n")
    assert expected.pop() == "", f"{name} must end with a newline"
    for lineno, (got, want) in enumerate(zip(lines, expected), 1):
        assert got == want, f"{name}:{lineno}\n got: {got!r}\nwant: {want!r}"
    assert len(lines) == len(expected), f"{name}: {len(lines)} lines, gold has {len(expected)}"


# ---------------------------------------------------------------------------------
# Tracefs instances of the event tests (the selftests' initialize_ftrace for events)
# ---------------------------------------------------------------------------------

def reset_tracefs_instance(t: Tracefs) -> None:
    """Through the files: every trigger removed (which ends soft mode), every event
    disabled and unfiltered, tracer nop, tracing on, the local clock."""
    from fntrace.events.core import event_calls
    names = list(event_calls)
    # A hist trigger whose variables another one reads goes after it: a few passes.
    for _ in range(3):
        for sysname, name in names:
            base = f"events/{sysname}/{name}"
            try:
                lines = t.read(base + "/trigger").splitlines()
            except Exception:
                continue
            for line in lines:
                if line and not line.startswith("#"):
                    # a hist trigger is removed by its whole text, filter included
                    cmd = line if line.startswith("hist") else line.split(" if ", 1)[0]
                    try:
                        t.write(base + "/trigger", "!" + cmd)
                    except Exception:
                        pass
    for sysname, name in names:
        for leaf, value in (("enable", "0"), ("filter", "0")):
            try:
                t.write(f"events/{sysname}/{name}/{leaf}", value)
            except Exception:
                pass
    for path, value in (("current_tracer", "nop"), ("tracing_on", "1"), ("trace_clock", "local")):
        try:
            t.write(path, value)
        except Exception:
            pass


# trace_print_context() without the irq-info flags: what an event line looks like.
EVENT_LINE = re.compile(r"^(?P<comm>.{16})-(?P<pid>\d+) +\[(?P<cpu>\d{3})\] +"
                         r"(?P<ts>\d+\.\d{6}): (?P<text>.*)$")


def entry_texts(text: str) -> list[str]:
    """The text after the timestamp of every entry line of a trace text."""
    return [mt.group("text") for line in text.splitlines() if (mt := EVENT_LINE.match(line))]


def trace_texts(fs: Tracefs, path: str = "trace") -> list[str]:
    """The text after the timestamp of every entry line of ``path``."""
    return entry_texts(fs.read(path))


def errno_of(fn, *args) -> int:
    """The errno of the FntraceError ``fn(*args)`` must raise."""
    with pytest.raises(FntraceError) as ei:
        fn(*args)
    return ei.value.errno


def errlog_check(fs: Tracefs, prefix: str, cmd_with_caret: str, path: str,
                 append: bool = False) -> str:
    """ftrace_errlog_check (test.d/functions): the command without '^' fails, error_log
    names it, and its last line is 13 + the caret position long ("  Command: " and
    "^\\n")."""
    pos = cmd_with_caret.index("^")
    cmd = cmd_with_caret.replace("^", "", 1)
    fs.write("error_log", "")
    with pytest.raises(FntraceError):
        fs.write(path, cmd, append=append)
    log = fs.read("error_log")
    assert f"{prefix}: error: " in log, log
    lines = log.splitlines(keepends=True)
    assert lines[-2] == f"  Command: {cmd}\n", log
    assert len(lines[-1]) == 13 + pos, f"caret at {len(lines[-1]) - 13}, want {pos}:\n{log}"
    return log


# a module of three nested functions (``outer()`` is 10) for write_module
NESTED_MODULE = """
    def inner(x):
        return x + 1

    def middle(x):
        return inner(x) * 2

    def outer():
        return middle(1) + inner(5)
"""


# ---------------------------------------------------------------------------------
# fgraph users
# ---------------------------------------------------------------------------------

def unregister_leftover_graph_users() -> None:
    for gops in list(fgraph.fgraph_array):
        if gops is not fgraph.fgraph_stub and gops.idx >= 0:
            try:
                fgraph.unregister_ftrace_graph(gops)
            except Exception:
                pass


class Recorder:
    """An fgraph user whose callbacks log ``("ent", name, depth)`` and
    ``("ret", name, depth, retval, unwind)``; ``want`` decides entryfunc's answer."""

    def __init__(self, name: str = "rec", want=True, on_entry=None, on_return=None):
        self.log: list[tuple] = []
        self.rets: list = []          # the FtraceGraphRet objects themselves
        self.want = want
        self.on_entry = on_entry
        self.on_return = on_return
        self.gops = fgraph.FgraphOps(self.entry, self.ret, self, name=name)

    def entry(self, trace, gops, fregs):
        self.log.append(("ent", trace.func.name, trace.depth))
        if self.on_entry is not None:
            r = self.on_entry(trace, gops, fregs)
            if r is not None:
                return r
        return self.want(trace) if callable(self.want) else self.want

    def ret(self, trace, gops, fregs):
        self.log.append(("ret", trace.func.name, trace.depth, trace.retval, trace.unwind))
        self.rets.append(trace)
        if self.on_return is not None:
            self.on_return(trace, gops, fregs)

    def names(self, kind: str | None = None) -> list[str]:
        return [e[1] for e in self.log if kind is None or e[0] == kind]

    def pairs(self) -> list[tuple[str, str]]:
        return [(e[0], e[1]) for e in self.log]


# ---------------------------------------------------------------------------------
# Whole calls: what the exports of calls (Parquet, OTLP) are compared with
# ---------------------------------------------------------------------------------

# nested calls, an exception, json and a second thread (conftest's ``calls_dat``)
CALLS_PROG = """
import json
import threading

def leaf(x):
    return x * 2

def mid(n):
    s = 0
    for i in range(n):
        s += leaf(i)
    return s

def fails():
    raise ValueError("no")

def main():
    for k in range(4):
        mid(k + 1)
    try:
        fails()
    except ValueError:
        pass
    json.dumps({"a": [1, 2]})
    t = threading.Thread(target=mid, args=(3,), name="worker")
    t.start()
    t.join()

main()
"""

# a graph line of `fntrace report`: " 0)   1.234 us   |    __main__.leaf();"
GRAPH_LINE = re.compile(r"^\s*(\d+)\)\s+(?:[+!#*@$]\s*)?(?:([\d.]+) us\s+)?\|(\s*)([^\s(}]+)\(")
GRAPH_CLOSE = re.compile(r"^\s*(\d+)\)\s+(?:[+!#*@$]\s*)?([\d.]+) us\s+\|\s*\}")


def report_calls(run_fntrace, dat) -> list[tuple[int, str, int, Decimal]]:
    """(cpu, function, depth, duration in us) of every call the text report prints,
    a leaf at its line, a call with children at its closing brace."""
    r = run_fntrace("report", dat)
    assert r.returncode == 0, r.stderr
    out, open_ = [], {}
    for line in r.stdout.splitlines():
        m = GRAPH_LINE.match(line)
        if m:
            cpu, dur, indent, func = m.groups()
            depth = (len(indent) - 2) // 2
            if not line.endswith(") {"):            # a leaf: "f(args); /* ret=... */"
                out.append((int(cpu), func, depth, Decimal(dur)))
            else:
                open_.setdefault(int(cpu), []).append((func, depth))
            continue
        m = GRAPH_CLOSE.match(line)
        if m:
            cpu = int(m.group(1))
            func, depth = open_[cpu].pop()
            out.append((cpu, func, depth, Decimal(m.group(2))))
    assert out, r.stdout[:2000]
    return out


def export_as(fmt: str, run_fntrace, dat, out, *more):
    """``fntrace export DAT --format FMT -o OUT``, which must succeed."""
    r = run_fntrace("export", dat, "--format", fmt, "-o", out, *more)
    assert r.returncode == 0, r.stderr
    return r
