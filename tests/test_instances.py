"""tracefs instances (kernel/trace/trace.c instance_mkdir / instance_rmdir), in process.

``mkdir instances/NAME`` makes a directory with its own buffers, tracer, filters,
options and events; ``rmdir`` turns its tracer and events off and removes it.  Ports of
the kernel's selftests:

  test.d/instances/instance.tc        concurrent mkdir/rmdir of x y z, then a clean
                                      mkdir, ls and rmdir
  test.d/instances/instance-event.tc  concurrent mkdir/rmdir of foo while its trace is
                                      read and an event of it enabled; then a function
                                      command in foo/set_ftrace_filter and rmdir foo
                                      leaves nothing behind at the top level
and ftrace.rst's "Instances": the files an instance has, EBUSY while a reader has it
open, several instances running alongside the top level and each other.
"""
from __future__ import annotations

import errno
import os
import textwrap
import threading
import time

import pytest

import fntrace
from fntrace.core import ops as core_ops
from fntrace.errors import FntraceError
from fntrace.tracefs import Tracefs

from support import errno_of, fn_lines, reset_tracefs_instance, run_python

MOD_SRC = """
    def alpha_fn():
        return beta_fn()

    def beta_fn():
        return 1

    def fn_gamma():
        return 2

    def delta():
        return 3

    def work(a, name):
        return a

    def loop(n):
        t = 0
        for i in range(n):
            t += fn_gamma() + delta()
        return t
"""

# Files every instance has (trace.c init_tracer_tracefs, ftrace_create_function_files,
# create_event_toplevel_files) and files only the top level has.
INSTANCE_FILES = ("available_tracers", "current_tracer", "trace", "trace_pipe",
                  "trace_marker", "trace_options", "trace_clock", "tracing_on",
                  "buffer_size_kb", "buffer_total_size_kb", "snapshot", "error_log",
                  "set_event", "set_ftrace_filter", "set_ftrace_notrace", "events",
                  "options", "per_thread")
TOP_ONLY = ("README", "instances", "saved_cmdlines", "saved_cmdlines_size",
            "available_filter_functions", "enabled_functions", "touched_functions",
            "dynamic_events", "available_events", "dyn_ftrace_total_info")


@pytest.fixture
def mod(write_module):
    return write_module(MOD_SRC, hint="instmod")


@pytest.fixture
def top():
    """A top-level directory of its own; afterwards every instance it still has is
    removed and nothing is left registered."""
    t = Tracefs()
    yield t
    try:
        for name in list(t.instances):
            inst = t.instances[name]
            inst._refs = 0
            try:
                t.rmdir(f"instances/{name}")
            except FntraceError:
                pass
        reset_tracefs_instance(t)
        t.write("dynamic_events", "")
    finally:
        core_ops.reset_for_tests()


def traced(fs: Tracefs, path: str = "trace") -> list[str]:
    return [p.func for p in fn_lines(fs.read(path))]


# ---------------------------------------------------------------------------------
# The directory
# ---------------------------------------------------------------------------------

def test_mkdir_makes_an_instance_and_rmdir_removes_it(top):
    assert "instances" in top.ls()
    assert top.kind("instances") == "dir"
    assert top.ls("instances") == []
    top.mkdir("instances/foo")
    assert top.ls("instances") == ["foo"]
    assert top.kind("instances/foo") == "dir"
    assert top.mode("instances/foo") == 0o755
    names = top.ls("instances/foo")
    for f in INSTANCE_FILES:
        assert f in names, f
    for f in TOP_ONLY:
        assert f not in names, f
        assert top.kind(f"instances/foo/{f}") is None, f
    assert top.kind("instances/foo/trace") == "file"
    assert top.mode("instances/foo/trace_marker") == 0o200
    assert top.mode("instances/foo/trace_clock") == 0o644
    # a new instance starts as the kernel's does
    assert top.read("instances/foo/current_tracer") == "nop\n"
    assert top.read("instances/foo/tracing_on") == "1\n"
    assert top.read("instances/foo/trace_clock").startswith("[local] ")
    assert top.read("instances/foo/set_ftrace_filter") == "#### all functions enabled ####\n"
    top.rmdir("instances/foo")
    assert top.ls("instances") == []
    assert top.kind("instances/foo") is None
    assert errno_of(top.read, "instances/foo/trace") == errno.ENOENT
    assert errno_of(top.write, "instances/foo/tracing_on", "0") == errno.ENOENT


def test_instance_through_the_process_tracefs():
    fs = fntrace.tracefs()
    fs.mkdir("instances/procwide")
    try:
        assert "procwide" in fs.ls("instances")
        fs.write("instances/procwide/trace_marker", "hello instance")
        assert "tracing_mark_write: hello instance" in fs.read("instances/procwide/trace")
        assert "hello instance" not in fs.read("trace")
    finally:
        fs.rmdir("instances/procwide")
    assert "procwide" not in fs.ls("instances")


@pytest.mark.parametrize("path,code", [
    ("instances/", errno.EEXIST),            # the directory itself, as mkdir(1) sees it
    ("instances/.", errno.EINVAL),
    ("instances/..", errno.EINVAL),
    ("instances/a\nb", errno.EINVAL),
    ("instances/" + "x" * 256, errno.ENAMETOOLONG),
    ("newdir", errno.EPERM),                # only instances/ takes mkdir
    ("options/newdir", errno.EPERM),
    ("trace", errno.EEXIST),
    ("events", errno.EEXIST),
    ("instances", errno.EEXIST),
    ("nosuchdir/x", errno.ENOENT),
    ("instances/nosuch/x", errno.ENOENT),
])
def test_mkdir_errors(top, path, code):
    assert errno_of(top.mkdir, path) == code
    assert top.ls("instances") == []


def test_mkdir_existing_instance_is_eexist(top):
    top.mkdir("instances/foo")
    top.write("instances/foo/current_tracer", "function")
    assert errno_of(top.mkdir, "instances/foo") == errno.EEXIST
    # the instance there is untouched
    assert top.read("instances/foo/current_tracer") == "function\n"
    # an instance has no instances/ of its own
    assert errno_of(top.mkdir, "instances/foo/instances/bar") == errno.ENOENT


@pytest.mark.parametrize("path,code", [
    ("instances/nosuch", errno.ENOENT),
    ("trace", errno.ENOTDIR),
    ("events", errno.EPERM),
    ("instances", errno.EPERM),
    ("nosuch", errno.ENOENT),
])
def test_rmdir_errors(top, path, code):
    top.mkdir("instances/keep")
    assert errno_of(top.rmdir, path) == code
    assert top.ls("instances") == ["keep"]


def test_rmdir_is_ebusy_while_a_trace_pipe_reader_has_it_open(top):
    top.mkdir("instances/foo")
    top.write("instances/foo/trace_marker", "one")
    r = top.open_pipe("instances/foo/trace_pipe")
    assert errno_of(top.rmdir, "instances/foo") == errno.EBUSY
    # refused: the instance is as it was, the reader still reads it
    assert top.ls("instances") == ["foo"]
    assert "tracing_mark_write: one" in r.read(timeout=1)
    r.close()
    top.rmdir("instances/foo")
    assert top.ls("instances") == []


def test_doors_hold_an_instance_open(top):
    """trace_array_get/put: what a FUSE open/release or a served open file uses."""
    foo = top.mkdir("instances/foo")
    foo.trace_array_get()
    assert errno_of(top.rmdir, "instances/foo") == errno.EBUSY
    foo.trace_array_put()
    top.rmdir("instances/foo")
    assert errno_of(foo.trace_array_get) == errno.ENODEV


# ---------------------------------------------------------------------------------
# Instances run alongside the top level and each other
# ---------------------------------------------------------------------------------

def test_instances_have_their_own_tracer_filters_and_buffers(top, mod):
    m = mod.__name__
    top.mkdir("instances/a")
    top.mkdir("instances/b")
    top.write("set_ftrace_filter", f"{m}.alpha_fn")
    top.write("current_tracer", "function")
    top.write("instances/a/set_ftrace_filter", f"{m}.fn_gamma {m}.delta")
    top.write("instances/a/current_tracer", "function")
    top.write("instances/b/set_ftrace_filter", f"{m}.alpha_fn {m}.beta_fn")
    top.write("instances/b/current_tracer", "function_graph")
    top.write("instances/b/options/funcgraph-proc", "1")
    mod.alpha_fn()
    mod.fn_gamma()
    mod.delta()
    for d in ("", "instances/a/", "instances/b/"):
        top.write(d + "tracing_on", "0")
    assert traced(top) == [f"{m}.alpha_fn"]
    assert traced(top, "instances/a/trace") == [f"{m}.fn_gamma", f"{m}.delta"]
    graph = top.read("instances/b/trace")
    assert graph.startswith("# tracer: function_graph\n")
    body = [l for l in graph.splitlines() if not l.startswith("#")]
    assert any(l.rstrip().endswith(f"{m}.alpha_fn() {{") for l in body), graph
    assert any(l.rstrip().endswith(f"{m}.beta_fn();") for l in body), graph
    assert not any("fn_gamma" in l or "delta" in l for l in body), graph
    # the option is b's own
    assert top.read("instances/b/options/funcgraph-proc") == "1\n"
    assert top.read("options/funcgraph-proc") == "0\n"
    # each filter reads back where it was written
    assert top.read("instances/a/set_ftrace_filter") == f"{m}.fn_gamma\n{m}.delta\n"
    assert top.read("set_ftrace_filter") == f"{m}.alpha_fn\n"
    # clearing one instance's buffer leaves the others
    top.write("instances/a/trace", "")
    assert traced(top, "instances/a/trace") == []
    assert traced(top) == [f"{m}.alpha_fn"]


def test_instance_events_are_its_own(top, mod):
    m = mod.__name__
    top.write("dynamic_events", f"f:instev {m}.work a name")
    top.mkdir("instances/foo")
    top.write("instances/foo/events/fprobes/instev/enable", "1")
    assert top.read("instances/foo/events/fprobes/instev/enable") == "1\n"
    assert top.read("events/fprobes/instev/enable") == "0\n"
    assert top.read("instances/foo/set_event") == "fprobes:instev\n"
    mod.work(7, "x")
    assert "instev: " in top.read("instances/foo/trace")
    assert "a=7" in top.read("instances/foo/trace")
    assert "instev" not in top.read("trace")


def test_rmdir_turns_the_tracer_and_events_off(top, mod):
    m = mod.__name__
    top.write("dynamic_events", f"f:rmev {m}.work a name")
    top.mkdir("instances/foo")
    top.write("instances/foo/set_ftrace_filter", f"{m}.delta")
    top.write("instances/foo/current_tracer", "function")
    top.write("instances/foo/events/fprobes/rmev/enable", "1")
    enabled = [l for l in top.read("enabled_functions").splitlines() if l.startswith(m)]
    assert any(l.startswith(f"{m}.delta ") for l in enabled), enabled
    foo = top.instance("foo")
    tr = foo.tr
    top.rmdir("instances/foo")
    assert tr.tracer.name == "nop"
    assert not tr.ops.enabled
    assert all(not ef.enabled for ef in tr.event_files.values())
    assert not [l for l in top.read("enabled_functions").splitlines() if l.startswith(m)]
    # the event can go now: no instance holds it
    top.write("dynamic_events", "")
    assert "rmev" not in top.read("available_events")


def test_instances_made_at_run_time_from_another_thread(top, mod):
    """The program runs a loop on its own thread; instances come and go under it,
    each with a tracer and a filter; the program's results are untouched."""
    m = mod.__name__
    stop = threading.Event()
    results: list[int] = []
    errors: list[BaseException] = []

    def program():
        try:
            while not stop.is_set():
                results.append(mod.loop(50))
        except BaseException as e:          # pragma: no cover - the failure shown
            errors.append(e)

    # On 3.11 (the setprofile back end) a thread already running when the hook is
    # installed is never seen: the hook is installed before the program's thread starts,
    # by an instance tracing a function the loop does not call.
    keeper = top.mkdir("instances/keeper")
    keeper.write("set_ftrace_filter", f"{m}.alpha_fn")
    keeper.write("current_tracer", "function")
    t = threading.Thread(target=program, name="program")
    t.start()
    try:
        for i in range(15):
            name = f"rt{i % 3}"
            inst = top.mkdir(f"instances/{name}")
            inst.write("buffer_size_kb", "8")     # a read of a full 1408 KB is slow
            inst.write("set_ftrace_filter", f"{m}.delta" if i % 2 else f"{m}.fn_gamma")
            inst.write("current_tracer", "function" if i % 2 else "function_graph")
            time.sleep(0.01)
            text = inst.read("trace")
            assert text.startswith("# tracer: ")
            if i >= 12:
                continue             # kept for the check below
            top.rmdir(f"instances/{name}")
        # the program runs on until each kept instance has seen it (a busy machine
        # may not schedule its thread for a while)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(
                top.instance(n).tr.entries()[1] for n in ("rt0", "rt1", "rt2")):
            time.sleep(0.01)
    finally:
        stop.set()
        t.join()
    assert not errors
    assert results and all(r == 250 for r in results)
    # the three kept ones traced the loop's functions, each its own
    for name in ("rt0", "rt1", "rt2"):
        inst = top.instance(name)
        inst.write("tracing_on", "0")
        want = "delta" if inst.read("current_tracer") == "function\n" else "fn_gamma"
        body = [l for l in inst.read("trace").splitlines() if l and not l.startswith("#")]
        assert body, name
        assert all(want in l or l.strip().endswith("}") or "=>" in l for l in body), \
            (name, body[:5])


def test_a_write_racing_rmdir_leaves_nothing_on(top, mod):
    """A tracer switched on by one thread while another removes the instance is
    either refused (ENOENT) or turned off by the removal: never left running with no
    file to stop it."""
    m = mod.__name__
    stop = time.monotonic() + 1.0
    errors: list[BaseException] = []

    def slam():
        try:
            while time.monotonic() < stop:
                _quietly(top.mkdir, "instances/race")
                _quietly(top.rmdir, "instances/race")
        except BaseException as e:          # pragma: no cover - the failure shown
            errors.append(e)

    def switch():
        try:
            while time.monotonic() < stop:
                for path, data in (("set_ftrace_filter", f"{m}.delta"),
                                   ("current_tracer", "function")):
                    try:
                        top.write(f"instances/race/{path}", data)
                    except FntraceError as e:
                        assert e.errno == errno.ENOENT, e
        except BaseException as e:          # pragma: no cover - the failure shown
            errors.append(e)

    threads = [threading.Thread(target=f) for f in (slam, switch)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    _quietly(top.rmdir, "instances/race")
    assert top.ls("instances") == []
    assert not [l for l in top.read("enabled_functions").splitlines() if l.startswith(m)]
    assert not [o for o in core_ops.ftrace_ops_list if o.name == "race_ops"]


def test_rmdir_waits_for_a_write_in_progress(top, mod):
    """rmdir during a slow ``echo function > current_tracer`` of the instance: the
    removal waits for the write, then turns the tracer off."""
    m = mod.__name__
    inst = top.mkdir("instances/slow")
    inst.write("set_ftrace_filter", f"{m}.delta")
    read, write = inst._files["current_tracer"]
    entered = threading.Event()

    def slow_write(data: str, append: bool) -> None:
        entered.set()
        time.sleep(0.3)
        write(data, append)
    inst._files["current_tracer"] = (read, slow_write)
    t = threading.Thread(target=top.write, args=("instances/slow/current_tracer", "function"))
    t.start()
    assert entered.wait(5)
    top.rmdir("instances/slow")
    t.join()
    assert inst.tr.tracer.name == "nop"
    assert not inst.tr.ops.enabled
    assert not [l for l in top.read("enabled_functions").splitlines() if l.startswith(m)]
    assert errno_of(top.write, "instances/slow/current_tracer", "function") == errno.ENOENT


# ---------------------------------------------------------------------------------
# test.d/instances/instance.tc
# ---------------------------------------------------------------------------------

def _quietly(fn, *args) -> None:
    """The selftest's ``mkdir foo 2>/dev/null``: a race lost is no failure."""
    try:
        fn(*args)
    except FntraceError as e:
        assert e.errno in (errno.EEXIST, errno.ENOENT, errno.EBUSY), e


def test_instance_tc(top):
    stop = time.monotonic() + 1.0
    errors: list[BaseException] = []

    def instance_slam():
        try:
            while time.monotonic() < stop:
                for n in ("x", "y", "z"):
                    _quietly(top.mkdir, f"instances/{n}")
                for n in ("x", "y", "z"):
                    _quietly(top.rmdir, f"instances/{n}")
        except BaseException as e:          # pragma: no cover - the failure shown
            errors.append(e)

    threads = [threading.Thread(target=instance_slam) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # whatever the loops left, cleaned up as the selftest does
    for n in ("x", "y", "z"):
        _quietly(top.rmdir, f"instances/{n}")
    assert top.ls("instances") == []
    for n in ("x", "y", "z"):
        top.mkdir(f"instances/{n}")
    assert top.ls("instances") == ["x", "y", "z"]
    for n in ("x", "y", "z"):
        top.rmdir(f"instances/{n}")
    assert top.ls("instances") == []


# ---------------------------------------------------------------------------------
# test.d/instances/instance-event.tc
# ---------------------------------------------------------------------------------

def test_instance_event_tc(top, mod):
    m = mod.__name__
    top.write("dynamic_events", f"f:slamev {m}.work a name")
    stop = time.monotonic() + 1.0
    errors: list[BaseException] = []

    def guard(fn):
        def run():
            try:
                while time.monotonic() < stop:
                    fn()
            except BaseException as e:      # pragma: no cover - the failure shown
                errors.append(e)
        return run

    def instance_slam():
        _quietly(top.mkdir, "instances/foo")
        _quietly(top.rmdir, "instances/foo")

    def instance_read():
        try:
            top.read("instances/foo/trace")
        except FntraceError as e:
            assert e.errno == errno.ENOENT, e

    def instance_set():
        try:
            top.write("instances/foo/events/fprobes/slamev/enable", "1")
        except FntraceError as e:
            assert e.errno == errno.ENOENT, e

    def program():
        mod.work(1, "p")

    threads = [threading.Thread(target=guard(f))
               for f in (instance_slam, instance_read, instance_set, program)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    _quietly(top.rmdir, "instances/foo")
    assert top.ls("instances") == []
    # the event is on nowhere: every instance that enabled it is gone
    assert top.read("events/fprobes/slamev/enable") == "0\n"

    top.mkdir("instances/foo")
    top.write("instances/foo/events/fprobes/slamev/enable", "1")
    try:
        top.write("instances/foo/set_ftrace_filter", f"{m}.work:enable_event:fprobes:slamev")
    except FntraceError as e:
        assert e.errno == errno.EINVAL, e
    top.rmdir("instances/foo")
    assert top.ls("instances") == []
    # "Check that the top level filter is unaffected"
    assert top.read("set_ftrace_filter") == "#### all functions enabled ####\n"
    assert not [l for l in top.read("enabled_functions").splitlines() if l.startswith(m)]
    assert top.read("events/fprobes/slamev/enable") == "0\n"


# ---------------------------------------------------------------------------------
# The same run in a program of its own, native and pure
# ---------------------------------------------------------------------------------

PROGRAM = """
import fntrace

def fa():
    return 1

def fb():
    return fa() + 1

def fc():
    return 3

fs = fntrace.tracefs()
fs.mkdir("instances/one")
fs.mkdir("instances/two")
fs.write("instances/one/set_ftrace_filter", "__main__.fa")
fs.write("instances/one/current_tracer", "function")
fs.write("instances/two/set_ftrace_filter", "__main__.fb __main__.fc")
fs.write("instances/two/current_tracer", "function_graph")
fs.write("set_ftrace_filter", "__main__.fc")
fs.write("current_tracer", "function")
for _ in range(3):
    fb(); fc()
for d in ("", "instances/one/", "instances/two/"):
    fs.write(d + "tracing_on", "0")
print("TOP", [l.split(": ", 1)[1] for l in fs.read("trace").splitlines() if not l.startswith("#")])
print("ONE", [l.split(": ", 1)[1] for l in fs.read("instances/one/trace").splitlines() if not l.startswith("#")])
print("TWO", [l.split("|", 1)[1].strip() for l in fs.read("instances/two/trace").splitlines() if not l.startswith("#")])
fs.rmdir("instances/one")
fs.rmdir("instances/two")
print("LEFT", fs.ls("instances"))
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["native", "pure"])
def test_two_instances_in_a_program(tmp_path, pure):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(PROGRAM))
    env = dict(os.environ)
    if pure == "1":
        env["FNTRACE_PURE"] = "1"
    else:
        env.pop("FNTRACE_PURE", None)
    r = run_python(script, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert eval(out["TOP"]) == ["__main__.fc <-__main__.<module>"] * 3      # noqa: S307 - our output
    assert eval(out["ONE"]) == ["__main__.fa <-__main__.fb"] * 3    # noqa: S307
    two = eval(out["TWO"])                                          # noqa: S307
    assert two.count("__main__.fb();") == 3 and two.count("__main__.fc();") == 3, two
    assert eval(out["LEFT"]) == []                                  # noqa: S307
