"""pytest --fntrace (fntrace/pytest_plugin.py), run on small test suites with pytester.

Each suite runs in a subprocess (runpytest_subprocess): the plugin traces the process
it runs in, which must not be this one.
"""
from __future__ import annotations

from importlib.metadata import entry_points

import pytest

import fntrace
# The readers loaded now, before any test: pytester puts sys.modules back as it was
# after each test, and fntrace.FunctionHit (cached on the package at first use) must
# stay the class the readers make events of.
from fntrace import FunctionHit, GraphEntry
from fntrace.pytest_plugin import trace_file_name

_EVENT_TYPES = (FunctionHit, GraphEntry)

from support import SUBPROCESS_TIMEOUT, fntrace_cli

pytest_plugins = ["pytester"]

SUITE = """
    def helper(x):
        return x + 1

    def test_passes():
        assert helper(1) == 2

    def test_fails():
        assert helper(1) == 3
"""


def _installed() -> bool:
    return any(ep.value == "fntrace.pytest_plugin"
               for ep in entry_points(group="pytest11"))


def run(pytester, *args: str):
    # The plugin loads through its entry point where fntrace is installed; a checkout
    # on PYTHONPATH alone loads it by name.
    extra = () if _installed() else ("-p", "fntrace.pytest_plugin")
    return pytester.runpytest_subprocess(*extra, "-p", "no:cacheprovider", *args,
                                         timeout=SUBPROCESS_TIMEOUT)


def funcs(path) -> set[str]:
    return {e.func for e in fntrace.open_trace(path) if isinstance(e, _EVENT_TYPES)}


def test_one_trace_per_test(pytester):
    pytester.makepyfile(test_shop=SUITE)
    r = run(pytester, "--fntrace=traces")
    r.assert_outcomes(passed=1, failed=1)
    d = pytester.path / "traces"
    names = sorted(p.name for p in d.iterdir())
    assert names == ["test_shop.py__test_fails.dat", "test_shop.py__test_passes.dat"]
    # the test function is the outermost call: pytest's own work is not in it
    for name, test in zip(names, ("test_fails", "test_passes")):
        src = fntrace.open_trace(d / name)
        assert src.tracer == "function_graph"
        events = list(src)
        assert events[0].func == f"test_shop.{test}" and events[0].depth == 0
        assert "test_shop.helper" in funcs(d / name)
        calls = [c for c in src.calls() if c.func == "test_shop.helper"]
        assert [c.stack for c in calls] == [(f"test_shop.{test}", "test_shop.helper")]
    p = fntrace_cli("report", str(d / "test_shop.py__test_fails.dat"))
    assert p.returncode == 0, p.stderr
    assert "test_shop.test_fails() {" in p.stdout and "test_shop.helper();" in p.stdout
    r.stdout.fnmatch_lines([
        "*- fntrace -*",
        "fntrace: 2 trace files of tests' call phase in traces/ *",
        "  FAILED test_shop.py::test_fails: traces/test_shop.py__test_fails.dat",
    ])


def test_on_fail_keeps_only_failing_tests(pytester):
    pytester.makepyfile(test_shop=SUITE)
    r = run(pytester, "--fntrace=traces", "--fntrace-on-fail")
    r.assert_outcomes(passed=1, failed=1)
    d = pytester.path / "traces"
    assert [p.name for p in d.iterdir()] == ["test_shop.py__test_fails.dat"]
    assert "test_shop.helper" in funcs(d / "test_shop.py__test_fails.dat")
    r.stdout.fnmatch_lines(["fntrace: 1 trace file of failing tests' call phase in traces/ *"])


def test_default_dir_filter_and_function_tracer(pytester):
    pytester.makeini("[pytest]\n")
    sub = pytester.mkpydir("pkg")
    (sub / "test_a.py").write_text("""
import json

def helper(x):
    return json.dumps(x)

def test_a():
    helper([1])
""")
    pytester.chdir()
    r = run(pytester, "pkg", "--fntrace", "--fntrace-tracer", "function",
            "--fntrace-filter", "*.helper", "--fntrace-filter", "json.dumps")
    r.assert_outcomes(passed=1)
    files = list((pytester.path / ".fntrace").iterdir())
    assert [p.name for p in files] == ["pkg_test_a.py__test_a.dat"]
    src = fntrace.open_trace(files[0])
    assert src.tracer == "function"
    events = list(src)
    assert all(isinstance(e, fntrace.FunctionHit) for e in events)
    assert [(e.func, e.parent) for e in events] == [
        ("pkg.test_a.helper", "pkg.test_a.test_a"), ("json.dumps", "pkg.test_a.helper")]


def test_without_the_option_nothing_happens(pytester):
    pytester.makepyfile(test_inert="""
        import sys

        def test_inert():
            assert sys.getprofile() is None and sys.gettrace() is None
            mon = getattr(sys, "monitoring", None)
            if mon is not None:
                assert [mon.get_tool(i) for i in range(6)] == [None] * 6
            # the plugin loaded no tracing session and no file writer
            assert "fntrace.trace_save" not in sys.modules
            assert not [m for m in sys.modules if m.startswith("fntrace.tracefile")]
    """)
    r = run(pytester, "-s")
    r.assert_outcomes(passed=1)
    assert not (pytester.path / ".fntrace").exists()
    assert "- fntrace -" not in r.stdout.str() and "trace file" not in r.stdout.str()


def test_a_test_path_is_not_taken_for_the_directory(pytester):
    pytester.makepyfile(test_shop=SUITE)
    r = run(pytester, "--fntrace", "test_shop.py")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--fntrace: 'test_shop.py' is a test, not a directory*"])
    assert "Traceback" not in r.stderr.str()


def test_unwritable_directory_is_a_usage_error(pytester):
    pytester.makepyfile(test_shop=SUITE)
    (pytester.path / "file").write_text("")
    r = run(pytester, "--fntrace=file/traces")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--fntrace: cannot make */file/traces: *"])
    assert "Traceback" not in r.stderr.str()


def test_parametrized_and_class_tests_get_names_of_their_own(pytester):
    pytester.makepyfile(test_p="""
        import pytest

        def helper(v):
            return v

        @pytest.mark.parametrize("v", ["a b", "a_b", "x/y"])
        def test_p(v):
            helper(v)

        class TestC:
            def test_m(self):
                helper(1)
    """)
    r = run(pytester, "--fntrace=t")
    r.assert_outcomes(passed=4)
    names = sorted(p.name for p in (pytester.path / "t").iterdir())
    assert len(names) == 4 and "test_p.py__TestC__test_m.dat" in names
    assert "test_p.py__test_p_a_b_.dat" in names
    assert any(n.startswith("test_p.py__test_p_a_b_-") for n in names), names
    assert "test_p.py__test_p_x_y_.dat" in names


def test_trace_file_name():
    assert trace_file_name("tests/test_a.py::TestX::test_y[1-a b]") == \
        "tests_test_a.py__TestX__test_y_1-a_b_.dat"
    long = "t.py::test_" + "x" * 400
    a, b = trace_file_name(long), trace_file_name(long + "y")
    assert a != b and len(a) <= 160 and len(b) <= 160
