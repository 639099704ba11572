"""Shared fixtures: the kernel selftests' ``initialize_ftrace`` (every test starts and ends
with no ops registered, the nop tracer and no filters), a way to run the ``fntrace``
command, small programs and modules written for one test, and the parsing of
function-tracer lines with their timestamps and pids masked.
"""
from __future__ import annotations

import importlib
import itertools
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

import fntrace
from fntrace.core import ops as core_ops
from fntrace.core.fetch import settings as fetch_settings
from fntrace.errors import FntraceError
from fntrace.tracefs import Tracefs
from fntrace.tracefs import fs as tracefs_fs

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = REPO_ROOT / "examples"
GOLD = Path(__file__).resolve().parent / "gold"
REGEN_GOLD = os.environ.get("FNTRACE_REGEN_GOLD") == "1"

# One test's subprocess must never hang the suite; no test relies on this limit.
SUBPROCESS_TIMEOUT = 300

# ``fntrace live`` prints the whole ``trace`` text for a program that ends within the
# hold (cli/live.py) and streams for one that runs on.  The tests that compare live's
# text with the whole trace's run small programs that end quickly, but on a loaded
# machine "quickly" can take longer than the default 0.1 s: they get a hold they cannot
# outlast.  The streaming itself is tested with the default (tests/test_live_stream.py).
os.environ.setdefault("FNTRACE_LIVE_HOLD", "600")


# ---------------------------------------------------------------------------------
# Tests marked `once`
# ---------------------------------------------------------------------------------
# scripts/test-all runs the suite on every interpreter, native and pure.  A test whose
# subject is an outside program reading an export (a browser, KernelShark, Spark) or a
# fresh install of fntrace checks nothing that depends on the interpreter, and costs
# seconds: test-all runs those in one run and sets FNTRACE_TEST_ONCE to that run's name
# in the others, which deselect them (never skip: nothing is left unchecked).  Unset
# (pytest run by hand) or "here", they run.

def _once_elsewhere() -> str | None:
    where = os.environ.get("FNTRACE_TEST_ONCE")
    return where if where and where != "here" else None


def pytest_collection_modifyitems(config, items):
    where = _once_elsewhere()
    if where is None:
        return
    gone = [item for item in items if item.get_closest_marker("once")]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [item for item in items if not item.get_closest_marker("once")]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    where = _once_elsewhere()
    if where is not None:
        terminalreporter.write_line(f"tests marked `once` are deselected here: they run in "
                                    f"the {where} run of scripts/test-all")


# ---------------------------------------------------------------------------------
# initialize_ftrace / reset after each test
# ---------------------------------------------------------------------------------

def _reset_top_tracefs() -> None:
    top = tracefs_fs._top
    if top is None:
        return
    for path, data in (("current_tracer", "nop"), ("set_ftrace_filter", ""),
                       ("set_ftrace_notrace", ""), ("tracing_on", "1"), ("buffer_size_kb", "1408"),
                       ("trace_options", "print-parent noirq-info overwrite markers nofunc-c-calls"),
                       ("trace", ""), ("error_log", ""), ("stack_tracer_enabled", "0"),
                       ("stack_trace_filter", ""), ("stack_max_size", "0"),
                       ("function_profile_enabled", "0")):
        try:
            top.write(path, data)
        except Exception:       # a reset step must not hide the test's own result
            pass
    try:
        top.func_cmds.clear()   # the function commands of set_ftrace_filter
    except Exception:
        pass


@pytest.fixture(autouse=True)
def clean_ftrace():
    """After each test: no ops registered, ftrace_enabled on, CALL_OPS configured on,
    and the top tracefs (if a test made it) back to nop with empty filters."""
    saved_call_ops = fntrace.ftrace_config.call_ops
    yield
    fntrace.ftrace_config.call_ops = saved_call_ops
    fetch_settings.allow_program_code = False
    _reset_top_tracefs()
    core_ops.reset_for_tests()
    fntrace.ftrace_config.call_ops = saved_call_ops


# ---------------------------------------------------------------------------------
# Modules and programs written for one test
# ---------------------------------------------------------------------------------

_module_counter = itertools.count(1)


def unique_module_name(hint: str = "mymod") -> str:
    """A module name no other test uses: records are never forgotten in a process, so
    each test's functions must have names of their own."""
    return f"{hint}{next(_module_counter)}"


@pytest.fixture
def write_module(tmp_path, monkeypatch):
    """``write_module(source, hint="mymod", import_it=True)``: write a module into
    tmp_path (on sys.path) under a fresh name; return the module (or, with
    ``import_it=False``, its name)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def make(source: str, hint: str = "mymod", import_it: bool = True):
        name = unique_module_name(hint)
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        made.append(name)
        if not import_it:
            return name
        return importlib.import_module(name)

    yield make
    for name in made:
        sys.modules.pop(name, None)


@pytest.fixture
def tmp_script(tmp_path):
    """``tmp_script(source, name="prog.py")``: write a small program into tmp_path and
    return its path."""
    def make(source: str, name: str = "prog.py") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path
    return make


def fntrace_cli(*args, cwd: Path | str | None = None, input: str | None = None,
                env: dict | None = None, timeout: float = SUBPROCESS_TIMEOUT,
                check: bool = False) -> subprocess.CompletedProcess:
    """The ``fntrace`` command (``python -m fntrace.cli.main ARGS``) run in a
    subprocess, its output captured as text; ``check``: its exit status must be 0.
    Every test that runs the command runs it through this."""
    p = subprocess.run([sys.executable, "-m", "fntrace.cli.main", *map(str, args)],
                       cwd=None if cwd is None else str(cwd), input=input, env=env,
                       capture_output=True, text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture
def run_fntrace(tmp_path):
    """``run_fntrace(*args, cwd=tmp_path, input=None)``: fntrace_cli in the test's
    directory."""
    def run(*args: str, cwd: Path | str | None = None, input: str | None = None
            ) -> subprocess.CompletedProcess:
        return fntrace_cli(*args, cwd=cwd if cwd is not None else tmp_path, input=input)
    return run


def run_python(*args: str, cwd: Path | str, input: str | None = None
               ) -> subprocess.CompletedProcess:
    """The same program run by plain ``python`` (the reference behaviour)."""
    return subprocess.run([sys.executable, *map(str, args)], cwd=str(cwd), input=input,
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)


# a function-tracer line's pid and timestamp; a graph line's cpu and duration cell
_FN_CTX = re.compile(r"^( *)(.*)-\d+( +\[)\d+(\] (?:.{4,5} )?) *\d+\.\d{6}(: .*)$")
_GRAPH_CELLS = re.compile(r"^( *)\d+(\) ).{14}(\|  .*)$")


def masked(text: str) -> list[str]:
    """The lines of a trace with what differs between two runs of the same calls
    masked: pids, timestamps, cpu numbers (N), durations (DUR) and the #P count."""
    out = []
    for line in text.splitlines():
        m = _FN_CTX.match(line)
        if m:
            line = f"{m.group(2).strip()}-PID [CPU{m.group(4)}TS{m.group(5)}"
        else:
            m = _GRAPH_CELLS.match(line)
            if m:
                line = f"{m.group(1)}N{m.group(2)}{'DUR':14}{m.group(3)}"
        out.append(re.sub(r"#P:\d+", "#P:N", line))
    return out


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


def mask_fn_line(line: str) -> str:
    """A trace line with its pid and timestamp replaced by fixed text, for comparing
    lines of two runs."""
    m = _FN_LINE.match(line)
    if m is None:
        return line
    return (f"{m.group('comm')}-PID [{m.group('cpu')}] {m.group('flags') or ''}"
            f"TS: {m.group('text')}")


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


@pytest.fixture
def new_fs():
    """``new_fs()``: another Tracefs instance.  After the test every instance made is
    reset, then ``echo > dynamic_events``, then no ops is left registered."""
    made: list[Tracefs] = []

    def make() -> Tracefs:
        t = Tracefs()
        made.append(t)
        return t
    yield make
    try:
        for t in made:
            reset_tracefs_instance(t)
        Tracefs().write("dynamic_events", "")
    finally:
        core_ops.reset_for_tests()


# trace_print_context() without the irq-info flags: what an event line looks like.
EVENT_LINE = re.compile(r"^(?P<comm>.{16})-(?P<pid>\d+) +\[(?P<cpu>\d{3})\] +"
                         r"(?P<ts>\d+\.\d{6}): (?P<text>.*)$")


def entry_texts(text: str) -> list[str]:
    """The text after the timestamp of every entry line of a trace text."""
    return [mt.group("text") for line in text.splitlines() if (mt := EVENT_LINE.match(line))]


def trace_texts(fs: Tracefs, path: str = "trace") -> list[str]:
    """The text after the timestamp of every entry line of ``path``."""
    return entry_texts(fs.read(path))


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
