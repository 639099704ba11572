"""Helpers shared by the function-graph tests (test_fgraph.py, test_function_graph.py).

- ``fgraph_clean``: the per-test reset (every graph user left behind is unregistered,
  then ``reset_for_tests()``), so each test starts from nothing registered.
- ``make_module``: write a module under a name no other test uses and import it
  (records are never forgotten in a process, so each test needs names of its own).
- ``Recorder``: an fgraph user that records its entry and return callbacks.
- ``run_cli``: the ``fntrace`` command in a subprocess.
- ``mask_graph``: function_graph text with the duration cell and pids replaced by fixed
  text, so two runs compare line by line.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import SUBPROCESS_TIMEOUT, fntrace_cli  # noqa: F401 (SUBPROCESS_TIMEOUT: for the tests)

from fntrace import fgraph
from fntrace.core import ops as core_ops


def _unregister_leftover_graph_users() -> None:
    for gops in list(fgraph.fgraph_array):
        if gops is not fgraph.fgraph_stub and gops.idx >= 0:
            try:
                fgraph.unregister_ftrace_graph(gops)
            except Exception:
                pass


@pytest.fixture
def fgraph_clean():
    """Unregister whatever a test left behind, after the test."""
    yield
    _unregister_leftover_graph_users()
    core_ops.reset_for_tests()


@pytest.fixture
def make_module(write_module):
    """``make_module(source, hint)``: conftest's ``write_module`` with this file's hint."""
    def make(source: str, hint: str = "fgmod"):
        return write_module(source, hint=hint)
    return make


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


def run_cli(*args: str, cwd: Path | str) -> subprocess.CompletedProcess:
    """``python -m fntrace.cli.main ARGS`` in ``cwd``."""
    return fntrace_cli(*args, cwd=cwd)


# The duration cell is 14 columns followed by "|  ": a mark, a space, the number, " us "
# and padding (trace_print_graph_duration), or 14 spaces when the line has none.
_DURATION = re.compile(r"[ +!#*@$] \d+(?:\.\d+)? us +(?=\|  )")
DUR = "  X.XXX us    "
assert len(DUR) == 14
# funcgraph-proc: comm-pid centred in 14 columns, then " | ".
# the proc cell: 14 columns, or a longer comm-pid printed whole (print_graph_proc)
_PROC = re.compile(r"^( *\d+\) )(.{14}|\S+-\d+) \| ")


def is_header(line: str) -> bool:
    """A header line ("# tracer: ...", "# CPU ...", "#"); not a line of a trace shown
    without the CPU column whose duration carries the '#' mark ("# 1837.709 us |")."""
    return line.startswith("#") and not re.match(r"^# \d", line)


def mask_graph_line(line: str) -> str:
    """One graph line with its duration replaced by DUR and its pid by PID (the proc
    column is re-centred so its width stays 14)."""
    if is_header(line):
        return line
    line = _DURATION.sub(DUR, line, count=1)
    m = _PROC.match(line)
    if m is not None:
        comm, sep, _pid = m.group(2).strip().rpartition("-")
        if sep:
            text = f"{comm}-PID"
            pad = 14 - len(text)
            cell = " " * (pad // 2) + text + " " * (pad - pad // 2)
            line = m.group(1) + cell + " | " + line[m.end():]
    return line


def mask_graph(text: str) -> list[str]:
    """Every line of a graph trace, masked; blank lines dropped."""
    return [mask_graph_line(l) for l in text.splitlines() if l.strip()]


def body(text: str) -> list[str]:
    """The masked lines of a graph trace without its header."""
    return [mask_graph_line(l) for l in text.splitlines() if l.strip() and not is_header(l)]


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
