"""The fixtures: the kernel selftests' ``initialize_ftrace`` (every test starts and ends
with no ops registered, the nop tracer and no filters), the ``fntrace`` command run in
the test's directory, small programs and modules written for one test, tracefs
instances, fgraph users left behind, and a recording of support.CALLS_PROG.  The
helpers that are not fixtures are in support.py.
"""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fntrace
from fntrace.core import ops as core_ops
from fntrace.core.fetch import settings as fetch_settings
from fntrace.tracefs import Tracefs
from fntrace.tracefs import fs as tracefs_fs

from support import (
    CALLS_PROG, fntrace_cli, reset_tracefs_instance, unique_module_name,
    unregister_leftover_graph_users,
)

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


@pytest.fixture
def run_fntrace(tmp_path):
    """``run_fntrace(*args, cwd=tmp_path, input=None)``: fntrace_cli in the test's
    directory."""
    def run(*args: str, cwd: Path | str | None = None, input: str | None = None
            ) -> subprocess.CompletedProcess:
        return fntrace_cli(*args, cwd=cwd if cwd is not None else tmp_path, input=input)
    return run


# ---------------------------------------------------------------------------------
# Tracefs instances and fgraph users
# ---------------------------------------------------------------------------------

@pytest.fixture
def fs():
    """A tracefs instance of its own (its own buffers, tracer and filters); back to nop
    afterwards.  The event tests' files take theirs from ``new_fs``."""
    t = Tracefs()
    yield t
    try:
        t.write("current_tracer", "nop")
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



@pytest.fixture
def fgraph_clean():
    """Unregister whatever graph user a test left behind, after the test (a test file
    of fgraph users takes it in an autouse fixture of its own)."""
    yield
    unregister_leftover_graph_users()
    core_ops.reset_for_tests()


@pytest.fixture
def make_module(write_module):
    """``make_module(source, hint)``: ``write_module`` with the fgraph tests' hint."""
    def make(source: str, hint: str = "fgmod"):
        return write_module(source, hint=hint)
    return make


# ---------------------------------------------------------------------------------
# Whole calls (support.CALLS_PROG)
# ---------------------------------------------------------------------------------

@pytest.fixture
def calls_dat(tmp_script, run_fntrace, tmp_path):
    """CALLS_PROG recorded with function_graph -A -R (json's functions too): t.dat's
    path.  The program imports json itself: the encoder and decoder json makes as it
    loads would be roots of their own, and are left out (-N), so that the calls have
    two tops, main and the worker's mid."""
    prog = tmp_script(CALLS_PROG)
    r = run_fntrace("record", "-p", "function_graph", "-A", "-R", "-F", "__main__.*",
                    "-F", "json.*", "-N", "json.*.__init__", "-o", "t.dat", prog)
    assert r.returncode == 0, r.stderr
    return tmp_path / "t.dat"
