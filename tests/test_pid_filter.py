"""Thread filters: set_ftrace_pid, set_ftrace_notrace_pid, set_event_pid, the
function-fork option, tracing_cpumask, fntrace's own threads, and ``--tid`` /
``--thread`` on the command line.

Ports of the kernel's selftests (tools/testing/selftests/ftrace/test.d):
  ftrace/func-filter-pid.tc          set_ftrace_pid = one thread, with and without
                                     function-fork (children traced only with it)
  ftrace/func-filter-notrace-pid.tc  set_ftrace_notrace_pid = one thread: none of its
                                     lines, the others present; in both files: nothing
  ftrace/func_cpumask.tc             tracing_cpumask: lines only on the selected CPUs
  event/event-pid.tc                 set_event_pid restricts events to that thread
and the files' grammar as ftrace.c pid_write / fpid_show and trace.c
tracing_cpumask_write have it.

A "pid" is a thread's native id; each program below runs three named threads, each
with a function of its own (so which functions appear says which threads were traced),
in the native hot path and in the pure one (FNTRACE_PURE=1).
"""
from __future__ import annotations

import errno
import json
import os
import textwrap
import threading

import pytest

from fntrace.errors import FntraceError
from fntrace.tracefs import Tracefs

from support import fn_lines, run_python

MODES = [pytest.param("", id="native"), pytest.param("1", id="pure")]

# The program: threads A, B and C (C starts a child, C-child, the "fork"), each
# started, then run one after the other once the control writes are made, so each gets
# its index (CPU column) in order and all are alive together (distinct native ids).
# The writes that name a thread ({A}: its id, {maskA}: 1 << its index) are made once
# the threads run, the others before (on 3.11 a thread gets the profile hook when it
# starts).  D is fntrace's own kind of thread, started by task.start_thread; E marks
# itself with fntrace_thread() after threading's bootstrap ran.
PROGRAM = textwrap.dedent('''
    import json, sys, threading
    import fntrace
    from fntrace.core import task

    cfg = json.loads(sys.argv[1])
    fs = fntrace.tracefs()
    ids, cpus = {}, {}
    go = {n: threading.Event() for n in "ABCDE"}
    done = {n: threading.Event() for n in "ABCDE"}
    end = threading.Event()

    def leaf():
        return 1

    def work_A():
        return leaf()

    def work_B():
        return leaf() + leaf()

    def work_Cchild():
        return leaf()

    def work_C():
        t = threading.Thread(target=work_Cchild, name="C-child")
        t.start()
        t.join()
        return leaf()

    def work_D():
        return leaf()

    def work_E():
        return leaf()

    def body(n, fn):
        if n == "E":
            task.fntrace_thread()        # as a thread fntrace starts for itself does
        ids[n] = threading.get_native_id()
        if cfg.get("cpus"):
            cpus[n] = task.thread_cpu()
        go[n].wait()
        fn()
        done[n].set()
        end.wait()

    for path, data, append in cfg["writes"]:
        if "{" not in data:
            fs.write(path, data, append=append)
    names = cfg.get("threads", "ABC")
    threads = [threading.Thread(target=body, args=(n, globals()["work_" + n]),
                                name="worker-" + n) for n in names if n != "D"]
    for t in threads:
        t.start()
    if "D" in names:
        task.start_thread(body, "D", work_D)
    while len(ids) < len(names):
        pass
    subst = {"{%s}" % n: str(ids[n]) for n in names}
    subst.update({"{mask%s}" % n: format(1 << c, "x") for n, c in cpus.items()})
    for path, data, append in cfg["writes"]:
        if "{" in data:
            for k, v in subst.items():
                data = data.replace(k, v)
            fs.write(path, data, append=append)
    for n in names:
        go[n].set()
        done[n].wait()
    end.set()
    for t in threads:
        t.join()
    fs.write("tracing_on", "0")
    print(json.dumps({"ids": ids, "cpus": cpus}))
    print(fs.read("trace"), end="")
''')


def run_prog(tmp_path, mode: str, writes, **cfg):
    prog = tmp_path / "threads_prog.py"
    prog.write_text(PROGRAM)
    cfg["writes"] = writes
    env = dict(os.environ)
    env.pop("FNTRACE_PURE", None)
    if mode:
        env["FNTRACE_PURE"] = mode
    p = run_python(prog, json.dumps(cfg), cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    first, _, trace = p.stdout.partition("\n")
    return json.loads(first), trace


FILTER = [("set_ftrace_filter", "__main__.work_* __main__.leaf", False)]


def traced_works(trace: str) -> set[str]:
    """The work_X functions that appear in a function or function_graph trace."""
    out = set()
    for line in trace.splitlines():
        if line.startswith("#"):
            continue
        for n in ("A", "B", "Cchild", "C", "D"):
            if f"__main__.work_{n}()" in line or f"__main__.work_{n} <-" in line \
                    or line.rstrip().endswith(f"__main__.work_{n}"):
                out.add(n)
                break
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_set_ftrace_pid_one_thread(tmp_path, mode, tracer):
    info, trace = run_prog(tmp_path, mode, FILTER + [
        ("set_ftrace_pid", "{B}", False), ("current_tracer", tracer, False)])
    assert traced_works(trace) == {"B"}, trace
    if tracer == "function":
        lines = fn_lines(trace)
        assert lines and {l.pid for l in lines} == {info["ids"]["B"]}
        assert {l.comm for l in lines} == {"worker-B"}
        # work_B calls leaf twice: both seen (the verdict is cached, not lost)
        assert sum(l.func == "__main__.leaf" for l in lines) == 2
    else:
        # the graph of the one thread is whole: work_B's entry, two leaves, its return
        body = [l for l in trace.splitlines() if l.strip() and not l.startswith("#")]
        assert any("__main__.work_B() {" in l for l in body), trace
        assert sum("__main__.leaf();" in l for l in body) == 2, trace
        assert sum(l.rstrip().endswith("}") for l in body) == 1, trace


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_set_ftrace_pid_two_threads_append(tmp_path, mode, tracer):
    _, trace = run_prog(tmp_path, mode, FILTER + [
        ("set_ftrace_pid", "{A}", False), ("set_ftrace_pid", "{C}", True),
        ("current_tracer", tracer, False)])
    # C's child is not followed without function-fork
    assert traced_works(trace) == {"A", "C"}, trace


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_function_fork_adds_children(tmp_path, mode, tracer):
    _, trace = run_prog(tmp_path, mode, FILTER + [
        ("set_ftrace_pid", "{C}", False), ("options/function-fork", "1", False),
        ("current_tracer", tracer, False)])
    assert traced_works(trace) == {"C", "Cchild"}, trace


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_set_ftrace_notrace_pid(tmp_path, mode, tracer):
    _, trace = run_prog(tmp_path, mode, FILTER + [
        ("set_ftrace_notrace_pid", "{A}", False), ("current_tracer", tracer, False)])
    assert traced_works(trace) == {"B", "C", "Cchild"}, trace


@pytest.mark.parametrize("mode", MODES)
def test_pid_in_both_files_traces_nothing(tmp_path, mode):
    # func-filter-notrace-pid.tc: the notrace list wins; with function-fork the child
    # of a thread in both is in both too
    _, trace = run_prog(tmp_path, mode, FILTER + [
        ("set_ftrace_pid", "{C}", False), ("set_ftrace_notrace_pid", "{C}", False),
        ("options/function-fork", "1", False), ("current_tracer", "function", False)])
    assert traced_works(trace) == set(), trace


@pytest.mark.parametrize("mode", MODES)
def test_pid_change_while_running_takes_effect(tmp_path, mode):
    # Threads that already had their first event take the new verdict at their next one.
    prog = tmp_path / "switch.py"
    prog.write_text(textwrap.dedent('''
        import threading, fntrace
        fs = fntrace.tracefs()
        def leaf(): return 1
        def work_A(): return leaf()
        def work_B(): return leaf()
        a_go, b_go, a_done, b_done, end = (threading.Event() for _ in range(5))
        ids = {}
        def run(n, go, done, fn):
            ids[n] = threading.get_native_id()
            for _ in range(2):
                go.wait(); go.clear(); fn(); done.set()
        A = threading.Thread(target=run, args=("A", a_go, a_done, work_A), name="wA")
        B = threading.Thread(target=run, args=("B", b_go, b_done, work_B), name="wB")
        fs.write("set_ftrace_filter", "__main__.work_*")
        fs.write("current_tracer", "function")
        A.start(); B.start()
        while len(ids) < 2: pass
        fs.write("set_ftrace_pid", str(ids["A"]))
        for go, done in ((a_go, a_done), (b_go, b_done)):
            go.set(); done.wait(); done.clear()
        n1 = fs.read("trace").count("__main__.work_")
        fs.write("set_ftrace_pid", str(ids["B"]))
        for go, done in ((a_go, a_done), (b_go, b_done)):
            go.set(); done.wait(); done.clear()
        A.join(); B.join()
        t = fs.read("trace")
        print(n1, t.count("__main__.work_A"), t.count("__main__.work_B"))
    '''))
    env = dict(os.environ, FNTRACE_PURE=mode) if mode else {
        k: v for k, v in os.environ.items() if k != "FNTRACE_PURE"}
    p = run_python(prog, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "1", "1"]


def event_comms(trace: str) -> list[str]:
    """The comm of each leafhit event line (TASK-PID: the comm may hold '-')."""
    return [l.split()[0].rsplit("-", 1)[0] for l in trace.splitlines()
            if "leafhit:" in l and not l.startswith("#")]


@pytest.mark.parametrize("mode", MODES)
def test_set_event_pid(tmp_path, mode):
    _, trace = run_prog(tmp_path, mode, [
        ("dynamic_events", "f:pidtest/leafhit __main__.leaf", True),
        ("set_event_pid", "{A}", False), ("set_event_pid", "{C}", True),
        ("events/pidtest/leafhit/enable", "1", False)])
    comms = event_comms(trace)
    # A once, C once (its child is not followed without event-fork)
    assert sorted(comms) == ["worker-A", "worker-C"], trace


@pytest.mark.parametrize("mode", MODES)
def test_event_fork(tmp_path, mode):
    _, trace = run_prog(tmp_path, mode, [
        ("dynamic_events", "f:pidtest/leafhit __main__.leaf", True),
        ("options/event-fork", "1", False), ("set_event_pid", "{C}", False),
        ("events/pidtest/leafhit/enable", "1", False)])
    comms = sorted(event_comms(trace))
    assert comms == ["C-child", "worker-C"], trace


def test_set_event_pid_leaves_functions_alone(tmp_path):
    # set_event_pid is the events' list: the function tracer still sees every thread
    _, trace = run_prog(tmp_path, "", FILTER + [
        ("set_event_pid", "{A}", False), ("current_tracer", "function", False)])
    assert traced_works(trace) == {"A", "B", "C", "Cchild"}, trace


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_tracing_cpumask(tmp_path, mode, tracer):
    # func_cpumask.tc: only the selected CPUs (thread indices) are recorded; {maskA}
    # is 1 << worker-A's index, in hex, made by the program
    info, trace = run_prog(tmp_path, mode, FILTER + [
        ("tracing_cpumask", "{maskA}", False), ("current_tracer", tracer, False)],
        cpus=True, threads="AB")
    assert traced_works(trace) == {"A"}, trace
    if tracer == "function":
        assert {l.cpu for l in fn_lines(trace)} == {info["cpus"]["A"]}


@pytest.mark.parametrize("mode", MODES)
def test_own_thread_never_traced(tmp_path, mode):
    # A thread marked with fntrace_thread() records nothing, even with every function
    # traced and its id in set_ftrace_pid.
    info, trace = run_prog(tmp_path, mode, [
        ("set_ftrace_filter", "*", False),
        ("dynamic_events", "f:pidtest/leafhit __main__.leaf", True),
        ("events/pidtest/leafhit/enable", "1", False),
        ("current_tracer", "function", False),
        ("set_ftrace_pid", "{A} {D} {E}", False), ("set_event_pid", "{A} {D} {E}", False)],
        threads="ADE")
    lines = fn_lines(trace)
    pids = {l.pid for l in lines}
    assert info["ids"]["A"] in pids, trace
    assert "__main__.work_A" in trace
    assert info["ids"]["D"] not in pids, trace
    # E's own lines: none once it said so (threading's bootstrap ran before)
    assert "work_E" not in trace and "work_D" not in trace, trace
    leafhits = [l for l in trace.splitlines() if "leafhit:" in l]
    assert len(leafhits) == 1 and "worker-A" in leafhits[0], trace


# -- the files' grammar (in process) ---------------------------------------------------

@pytest.fixture
def fs():
    t = Tracefs()
    yield t
    t.write("current_tracer", "nop")


def test_pid_file_grammar(fs):
    assert fs.read("set_ftrace_pid") == "no pid\n"
    assert fs.read("set_ftrace_notrace_pid") == "no pid\n"
    assert fs.read("set_event_pid") == ""
    fs.write("set_ftrace_pid", "30 10 20")
    assert fs.read("set_ftrace_pid") == "10\n20\n30\n"
    fs.write("set_ftrace_pid", "40", append=True)
    assert fs.read("set_ftrace_pid") == "10\n20\n30\n40\n"
    fs.write("set_ftrace_pid", "5")             # '>' replaces
    assert fs.read("set_ftrace_pid") == "5\n"
    fs.write("set_ftrace_pid", "")              # echo > clears
    assert fs.read("set_ftrace_pid") == "no pid\n"
    fs.write("set_event_pid", "7\n8\n")
    assert fs.read("set_event_pid") == "7\n8\n"


@pytest.mark.parametrize("bad", ["abc", "12 x3", "-1", "1.5", "99999999"])
def test_pid_file_refuses_non_numbers(fs, bad):
    fs.write("set_ftrace_pid", "3 4")
    with pytest.raises(FntraceError) as ei:
        fs.write("set_ftrace_pid", bad)
    assert ei.value.errno == errno.EINVAL
    assert fs.read("set_ftrace_pid") == "3\n4\n"      # unchanged
    log = fs.read("error_log")
    assert "set_ftrace_pid" in log and "^" in log


def test_cpumask_grammar(fs):
    assert fs.read("tracing_cpumask") == "ffffffff\n"
    fs.write("tracing_cpumask", "2")
    assert fs.read("tracing_cpumask") == "00000002\n"
    fs.write("tracing_cpumask", "1,00000003")        # 64 bits: two groups
    assert fs.read("tracing_cpumask") == "00000003\n"   # the 32 "CPUs" there are
    fs.write("tracing_cpumask", "ffffffff")
    assert fs.read("tracing_cpumask") == "ffffffff\n"
    for bad in ("xyz", "123456789", "1,,2", ""):
        with pytest.raises(FntraceError) as ei:
            fs.write("tracing_cpumask", bad)
        assert ei.value.errno == errno.EINVAL
    assert fs.read("tracing_cpumask") == "ffffffff\n"


def test_cpumask_read_as_every_thread_and_written_back_keeps_later_threads(fs):
    """func_cpumask.tc saves tracing_cpumask, narrows it, and writes the saved value
    back.  Threads are this tracer's CPUs and keep coming: when more than fit in the
    saved mask's groups had come meanwhile, the restored mask left every thread
    started later untraced (three ftracetest cases after it read empty traces, now
    and then).  What was read as every thread means every thread when written back;
    a mask the user makes keeps its bits."""
    import threading
    from fntrace.core import task
    saved = fs.read("tracing_cpumask")
    assert fs.tr.filter.cpumask is None
    fs.write("tracing_cpumask", "1")
    # more threads than the saved groups hold take their indices meanwhile
    need = len(saved.strip().replace(",", "")) * 4 + 1
    while len(task.thread_info) < need:
        t = threading.Thread(target=task.thread_cpu)
        t.start()
        t.join()
    assert len(fs.read("tracing_cpumask").strip().replace(",", "")) * 4 > need - 1
    fs.write("tracing_cpumask", saved)
    assert fs.tr.filter.cpumask is None         # every thread, later ones too
    # a mask of the user's own, all ones over fewer threads than ever read: its bits
    fs.write("tracing_cpumask", "f")
    assert fs.tr.filter.cpumask == 0xF
    fs.write("tracing_cpumask", saved)
    assert fs.tr.filter.cpumask is None


def test_comm_file_grammar(fs):
    assert fs.read("set_ftrace_comm") == ""
    fs.write("set_ftrace_comm", "worker-*")
    fs.write("set_ftrace_comm", "Thread 1", append=True)
    assert fs.read("set_ftrace_comm") == "worker-*\nThread 1\n"
    fs.write("set_ftrace_comm", "")
    assert fs.read("set_ftrace_comm") == ""


def test_fork_options_listed(fs):
    opts = fs.read("trace_options").split()
    assert "nofunction-fork" in opts and "noevent-fork" in opts
    fs.write("options/function-fork", "1")
    assert fs.read("options/function-fork") == "1\n"
    assert "function-fork" in fs.read("trace_options").split()


def test_instances_keep_their_own_lists():
    a, b = Tracefs(), Tracefs()
    a.write("set_ftrace_pid", "11")
    assert b.read("set_ftrace_pid") == "no pid\n"
    a.write("current_tracer", "nop")


def test_in_process_own_thread_unrecorded(write_module):
    """The same through the API, in this process: a thread marked as fntrace's own
    writes nothing, the main thread does."""
    mod = write_module("def ownfn():\n    return 1\n", hint="ownmod")
    from fntrace.core import task
    fs = Tracefs()
    fs.write("set_ftrace_filter", f"{mod.__name__}.ownfn")
    fs.write("current_tracer", "function")
    try:
        def own():
            task.fntrace_thread()
            mod.ownfn()
        t = threading.Thread(target=own, name="own-thread")
        t.start()
        t.join()
        mod.ownfn()
        lines = fn_lines(fs.read("trace"))
        assert [l.pid for l in lines] == [threading.get_native_id()]
    finally:
        fs.write("current_tracer", "nop")
        task.own_threads.discard(t.native_id)


# -- the command line --------------------------------------------------------------------

CLI_PROG = textwrap.dedent('''
    import threading
    def leaf():
        return 1
    def work_A():
        return leaf()
    def work_B():
        return leaf()
    def work_C():
        return leaf()
    def body(fn, go):
        go.wait()
        fn()
    gos = [threading.Event() for _ in range(3)]
    ts = [threading.Thread(target=body, args=(f, g), name="worker-" + n)
          for f, g, n in zip((work_A, work_B, work_C), gos, "ABC")]
    for t in ts:
        t.start()
    print(" ".join(str(t.native_id) for t in ts), flush=True)
    for g, t in zip(gos, ts):
        g.set()
        t.join()
''')


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tracer", ["function", "function_graph"])
def test_cli_thread_option(run_fntrace, tmp_path, mode, tracer, monkeypatch):
    (tmp_path / "prog.py").write_text(CLI_PROG)
    if mode:
        monkeypatch.setenv("FNTRACE_PURE", mode)
    else:
        monkeypatch.delenv("FNTRACE_PURE", raising=False)
    p = run_fntrace("live", "-p", tracer, "-F", "*.work_*", "--thread", "worker-[AC]",
                    "prog.py")
    assert p.returncode == 0, p.stderr
    assert traced_works(p.stdout) == {"A", "C"}, p.stdout


def test_cli_tid_option(run_fntrace, tmp_path):
    # The program's main thread is the process: --tid of the pid traces only it.
    (tmp_path / "prog.py").write_text(CLI_PROG + "work_B()\n")
    p = run_fntrace("record", "-F", "*.work_*", "--tid", "1", "prog.py")
    assert p.returncode == 0, p.stderr
    rep = run_fntrace("report")
    assert traced_works(rep.stdout) == set(), rep.stdout
    # the tid of the main thread is the pid, known only once it runs: --tid of a
    # thread that never exists traces nothing, and the right one is taken by a
    # wrapper that starts the program with its own pid as --tid (os.execv keeps it)
    wrapper = tmp_path / "wrap.py"
    wrapper.write_text(textwrap.dedent(f'''
        import os, sys
        os.execv(sys.executable, [sys.executable, "-m", "fntrace.cli.main", "record",
                 "-F", "*.work_*", "--tid", str(os.getpid()), "prog.py"])
    '''))
    p = run_python(wrapper, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rep = run_fntrace("report")
    assert traced_works(rep.stdout) == {"B"}, rep.stdout
    assert {l.comm for l in fn_lines(rep.stdout)} == {"MainThread"}


def test_cli_tid_refuses_non_numbers(run_fntrace, tmp_path):
    (tmp_path / "prog.py").write_text("print('ran')\n")
    p = run_fntrace("record", "--tid", "main", "prog.py")
    assert p.returncode != 0
    assert "--tid" in p.stderr and "'main'" in p.stderr
    assert "Traceback" not in p.stderr
    assert "ran" not in p.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("mode", MODES)
def test_forked_child_takes_its_verdict_again(tmp_path, mode):
    # The child's main thread has a new native id: not in set_ftrace_pid, so its calls
    # are not traced, though the parent's thread (listed) had cached "traced".
    prog = tmp_path / "forkprog.py"
    prog.write_text(textwrap.dedent('''
        import os, threading, fntrace
        fs = fntrace.tracefs()
        def work(): return 1
        fs.write("set_ftrace_filter", "__main__.work")
        fs.write("set_ftrace_pid", str(threading.get_native_id()))
        fs.write("current_tracer", "function")
        work()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            work(); work()
            os.write(w, str(fs.read("trace").count("__main__.work <-")).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(os.read(r, 100).decode(), fs.read("trace").count("__main__.work <-"))
    '''))
    env = {k: v for k, v in os.environ.items() if k != "FNTRACE_PURE"}
    if mode:
        env["FNTRACE_PURE"] = mode
    p = run_python(prog, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "1"], p.stdout
