"""pytest --fntrace: one trace file per test.

    pytest --fntrace                       traces in .fntrace/ under the rootdir
    pytest --fntrace=DIR                   ... in DIR
    pytest --fntrace --fntrace-filter 'shop.*' --fntrace-filter 'json.*'
    pytest --fntrace --fntrace-tracer function
    pytest --fntrace --fntrace-on-fail     keep only the failing tests' traces

What is traced is each test's call phase: the test function and everything it calls,
not its fixtures' setup and teardown (they run once for many tests, and their time is
not the test's), nor pytest's own work around the call (output capture, other
plugins' hooks).  Python test functions are traced (pytest_pyfunc_call); other kinds
of test items (doctests, a plugin's own items) are not.  A test that fails in any phase counts as failing for
--fntrace-on-fail.  Each trace is a trace file (fntrace report, fntrace export,
fntrace.open_trace read it) named after the test's node id
(``tests/test_cart.py::test_total[2]`` -> ``tests_test_cart.py__test_total_2_.dat``),
written when the test ends; the terminal summary says where they are.

With the default tracer (function_graph) and no --fntrace-filter every Python function
the test calls is traced; a filter (the set_ftrace_filter glob grammar) narrows it.

The module is loaded by every pytest run where fntrace is installed (entry point
pytest11): without --fntrace it adds its options and nothing else (fntrace's tracing
machinery is not even imported).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import os
import re
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Generator

    from .session import TraceSession

__all__ = ["pytest_addoption", "pytest_configure", "FntracePlugin", "trace_file_name",
           "fntrace_calls"]

DEFAULT_DIR = ".fntrace"
TRACERS = ("function_graph", "function")

# A file name of at most this many characters (most file systems allow 255 bytes).
_MAX_NAME = 150
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fntrace", "fntrace: a function trace of each test")
    group.addoption(
        "--fntrace", action="store", nargs="?", const="", default=None, metavar="DIR",
        help="write a trace file of each test's call phase into DIR (default: "
             f"{DEFAULT_DIR}/ under the rootdir); give DIR as --fntrace=DIR")
    group.addoption(
        "--fntrace-filter", action="append", default=[], metavar="GLOB",
        help="trace only functions matching GLOB (module.qualname, set_ftrace_filter "
             "grammar; repeatable). Default: every function the test calls")
    group.addoption(
        "--fntrace-tracer", choices=TRACERS, default="function_graph",
        help="the tracer: function_graph (calls with durations, the default) or "
             "function (each call and its caller)")
    group.addoption(
        "--fntrace-on-fail", action="store_true", default=False,
        help="keep only the traces of tests that fail")


def pytest_configure(config: pytest.Config) -> None:
    where = config.getoption("fntrace", None)
    if where is None:
        return          # not asked for: nothing is imported, nothing changes
    if where == "":
        out = os.path.join(str(config.rootpath), DEFAULT_DIR)
    else:
        if where.endswith(".py") or "::" in where or os.path.isfile(where):
            # argparse took a test path for --fntrace's optional DIR
            raise pytest.UsageError(
                f"--fntrace: {where!r} is a test, not a directory: write --fntrace=DIR, "
                "or put --fntrace after the tests")
        out = os.path.join(str(config.invocation_params.dir), where)
    out = os.path.normpath(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise pytest.UsageError(f"--fntrace: cannot make {out}: {e.strerror}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"--fntrace: {out} is not writable")
    config.pluginmanager.register(
        FntracePlugin(out, config.getoption("fntrace_filter"),
                      config.getoption("fntrace_tracer"),
                      config.getoption("fntrace_on_fail")),
        "fntrace-tracing")


@pytest.fixture
def fntrace_calls():
    """Trace the functions a test names while a block of it runs, and assert on the
    calls (fntrace/traced_calls.py)::

        def test_checkout_prices_once(fntrace_calls):
            with fntrace_calls("shop.pricing.*", "shop.cart.Cart.add_item") as calls:
                checkout(cart)
            assert calls.count("shop.pricing.price_cart") == 1
            assert calls.calls("shop.cart.Cart.add_item")[0].args["quantity"] == 2
    """
    from .traced_calls import record_calls     # the tracer loads for a test that asks
    return record_calls


def trace_file_name(nodeid: str) -> str:
    """A file name for a test's trace: its node id with ``::`` as ``__`` and every
    character outside ``[A-Za-z0-9._-]`` as ``_``; a long one is cut and given a hash
    of the whole id, so two tests never share a name by being cut."""
    name = _UNSAFE.sub("_", nodeid.replace("::", "__"))
    if len(name) > _MAX_NAME:
        digest = hashlib.sha1(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        name = name[:_MAX_NAME - 11] + "-" + digest
    return name + ".dat"


def _shown(path: str) -> str:
    """``path`` relative to the working directory when it is under it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


class FntracePlugin:
    """Registered by pytest_configure when --fntrace is given."""

    def __init__(self, out_dir: str, filters: list[str], tracer: str,
                 on_fail: bool) -> None:
        self.out_dir = out_dir
        self.filters = list(filters)
        self.tracer = tracer
        self.on_fail = on_fail
        self.written: list[tuple[str, str, bool]] = []     # (nodeid, path, failed)
        self.problems: dict[str, int] = {}                 # message -> tests it hit
        self._names: dict[str, str] = {}                   # file name -> nodeid
        self._sessions: dict[str, TraceSession] = {}
        self._failed: set[str] = set()

    def _problem(self, msg: str) -> None:
        self.problems[msg] = self.problems.get(msg, 0) + 1

    def _path_for(self, nodeid: str) -> str:
        name = trace_file_name(nodeid)
        other = self._names.get(name)
        if other is not None and other != nodeid:
            # two node ids made the same name ('a b' and 'a_b'): the second gets a hash
            digest = hashlib.sha1(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:10]
            name = name[:-4] + "-" + digest + ".dat"
        self._names[name] = nodeid
        return os.path.join(self.out_dir, name)

    def _session(self) -> TraceSession | None:
        """A session for one test, not started; None when fntrace cannot trace here."""
        try:
            import fntrace
            return fntrace.TraceSession(self.filters or None, tracer=self.tracer)
        except Exception as e:        # fntrace's failure never fails the test
            self._problem(f"{type(e).__name__}: {e}")
            return None

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function
                           ) -> Generator[None, object, object]:
        # The test function itself is wrapped, so the trace starts at its call: pytest's
        # own work around it (output capture, other plugins' hooks, the fixtures'
        # values gathered) is not the test's.  An async test function (run by a
        # plugin) is traced around the whole call instead.
        session = self._session()
        if session is None:
            return (yield)
        self._sessions[pyfuncitem.nodeid] = session
        fn = pyfuncitem.obj
        if inspect.isfunction(fn) and not (inspect.iscoroutinefunction(fn)
                                           or inspect.isasyncgenfunction(fn)
                                           or inspect.isgeneratorfunction(fn)):
            def traced_test(*args, **kwargs):
                with session:
                    return fn(*args, **kwargs)
            pyfuncitem.obj = functools.wraps(fn)(traced_test)
            try:
                return (yield)
            finally:
                pyfuncitem.obj = fn
        try:
            session.start()
        except Exception as e:
            self._sessions.pop(pyfuncitem.nodeid, None)
            self._problem(f"{type(e).__name__}: {e}")
            return (yield)
        try:
            return (yield)
        finally:
            session.stop()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self._failed.add(report.nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem
                                ) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            # every phase has been reported: write the trace, or drop it
            session = self._sessions.pop(item.nodeid, None)
            failed = item.nodeid in self._failed
            if session is not None and (failed or not self.on_fail):
                path = self._path_for(item.nodeid)
                try:
                    session.save(path)
                    self.written.append((item.nodeid, path, failed))
                except OSError as e:
                    self._problem(f"cannot write {path}: {e.strerror or e}")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        tr = terminalreporter
        tr.write_sep("-", "fntrace")
        what = "failing tests'" if self.on_fail else "tests'"
        n = len(self.written)
        tr.write_line(f"fntrace: {n} trace file{'s' if n != 1 else ''} of {what} "
                      f"call phase in {_shown(self.out_dir)}{os.sep} "
                      "(read one: fntrace report FILE)")
        for nodeid, path, failed in self.written:
            if failed:
                tr.write_line(f"  FAILED {nodeid}: {_shown(path)}")
        for msg, count in self.problems.items():
            tr.write_line(f"fntrace: not traced ({count} test{'s' if count != 1 else ''})"
                          f": {msg}")


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
