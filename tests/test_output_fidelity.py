"""The text formats against the kernel's, black box: return values (print_graph_retval),
thread names (trace_print_context's TASK-PID, print_graph_proc's funcgraph-proc cell),
the one chooser of a trace read (render_trace), and the output package's public names.

Return values and thread names are checked through a tracefs instance in process
(``Tracefs()``, the kernel's instances/ directory) on real calls, then through the
renderers on entry streams where a case cannot be made to happen on demand.
"""
from __future__ import annotations

import importlib
import re
import threading

import pytest

from fntrace import _env
from fntrace.output.entry import (
    TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_STACK, LostEvents, TraceEntry,
)
from fntrace.output.function_graph import GraphPrinter
from fntrace.output.render import TRACE_OPTIONS, render_trace
from fntrace.tracefs import Tracefs


# An exception leaving a call: its repr on sys.monitoring; 3.11's setprofile back end
# only knows that one left.
HAS_EXC_OBJECT = _env.PYBEHAVIOR.has_monitoring and _env.BACKEND == "monitoring"


def raised(text: str) -> str:
    return f"raised {text}" if HAS_EXC_OBJECT else "raised"


pytestmark = pytest.mark.usefixtures("fgraph_clean")


# " 3)   1.382 us    |    func(); /* ret=42 */": cpu, duration cell, bar, the rest.
_GRAPH_LINE = re.compile(r"^ *\d+\) (?P<dur>.{14})\|  (?P<text>.*)$")


def graph_calls(text: str) -> list[str]:
    """The function column of each line of a function_graph trace (default options)."""
    out = []
    for line in text.splitlines():
        m = _GRAPH_LINE.match(line)
        if m is not None:
            out.append(m.group("text"))
    return out


RETVALS = """
    class Bad(Exception):
        pass

    def count(): return 42
    def neg(): return -22
    def past_edge(): return -4096
    def big(): return 1 << 40
    def zero(): return 0
    def text(): return 'abc'
    def nothing(): return None
    def flag(): return True
    def fl(): return 3.5
    def fails(): raise Bad('x')

    def top():
        for f in (count, neg, past_edge, big, zero, text, nothing, flag, fl):
            f()
        try:
            fails()
        except Bad:
            pass
        return 7
"""
BAD = "Bad('x')"        # what fails() raised, as its repr


def _retval_trace(fs, write_module, *options: str) -> tuple[str, list[str]]:
    m = write_module(RETVALS, hint="fidret")
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.*")
    fs.write("current_tracer", "function_graph")
    fs.write("options/funcgraph-retval", "1")
    for opt in options:
        fs.write("trace_options", opt)
    assert m.top() == 7
    return n, graph_calls(fs.read("trace"))


def test_retval_prints_each_value_as_its_repr(fs, write_module):
    n, calls = _retval_trace(fs, write_module)
    assert calls == [
        f"{n}.top() {{",
        f"  {n}.count(); /* ret=42 */",
        f"  {n}.neg(); /* ret=-22 */",
        f"  {n}.past_edge(); /* ret=-4096 */",
        f"  {n}.big(); /* ret=1099511627776 */",
        f"  {n}.zero(); /* ret=0 */",
        f"  {n}.text(); /* ret='abc' */",
        f"  {n}.nothing(); /* ret=None */",
        f"  {n}.flag(); /* ret=True */",
        f"  {n}.fl(); /* ret=3.5 */",
        f"  {n}.fails(); /* ret={raised(BAD)} */",
        f"}} /* {n}.top ret=7 */",
    ]


def test_retval_hex_prints_ints_as_print_graph_retval_does(fs, write_module):
    # print_graph_retval() with funcgraph-retval-hex: " ret=0x%lx" of the register, a
    # negative long as its two's complement; values that are not ints keep their repr.
    n, calls = _retval_trace(fs, write_module, "funcgraph-retval-hex")
    assert calls == [
        f"{n}.top() {{",
        f"  {n}.count(); /* ret=0x2a */",
        f"  {n}.neg(); /* ret=0xffffffffffffffea */",
        f"  {n}.past_edge(); /* ret=0xfffffffffffff000 */",
        f"  {n}.big(); /* ret=0x10000000000 */",
        f"  {n}.zero(); /* ret=0x0 */",
        f"  {n}.text(); /* ret='abc' */",
        f"  {n}.nothing(); /* ret=None */",
        f"  {n}.flag(); /* ret=True */",
        f"  {n}.fl(); /* ret=3.5 */",
        f"  {n}.fails(); /* ret={raised(BAD)} */",
        f"}} /* {n}.top ret=0x7 */",
    ]


def test_retval_hex_off_again_goes_back_to_the_repr(fs, write_module):
    # Printing options apply when the trace is read.
    n, _ = _retval_trace(fs, write_module, "funcgraph-retval-hex")
    fs.write("trace_options", "nofuncgraph-retval-hex")
    calls = graph_calls(fs.read("trace"))
    assert calls[1] == f"  {n}.count(); /* ret=42 */"
    assert calls[-1] == f"}} /* {n}.top ret=7 */"


def test_retval_comment_placement_on_leaf_and_closing_lines(fs, write_module):
    # A leaf: "func(); /* ret=V */"; a return: "} /* func ret=V */" (the function is
    # named on every closing line while funcgraph-retval is on).
    m = write_module("""
        def inner(): return 'i'
        def outer():
            inner()
            return 5
    """, hint="fidplace")
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.*")
    fs.write("current_tracer", "function_graph")
    fs.write("options/funcgraph-retval", "1")
    m.outer()
    assert graph_calls(fs.read("trace")) == [
        f"{n}.outer() {{",
        f"  {n}.inner(); /* ret='i' */",
        f"}} /* {n}.outer ret=5 */",
    ]


# -- thread names ----------------------------------------------------------------------

LONG_NAME = "hasher_worker_thread_long"      # 25 characters


def _in_thread(fn, name: str) -> int:
    """Run fn in a thread called ``name``; its native id."""
    ids: list[int] = []

    def run():
        ids.append(threading.get_native_id())
        fn()

    t = threading.Thread(target=run, name=name)
    t.start()
    t.join()
    return ids[0]


def test_function_tracer_task_column_is_the_comm_cut_to_fifteen(fs, write_module):
    # trace_print_context(): "%16s-%-7d" of the saved comm, TASK_COMM_LEN - 1 = 15
    # characters at most, cut with nothing to mark it.
    m = write_module("def work(): return 1\n", hint="fidcomm")
    fs.write("set_ftrace_filter", f"{m.__name__}.work")
    fs.write("current_tracer", "function")
    pid = _in_thread(m.work, LONG_NAME)
    text = fs.read("trace")
    lines = [l for l in text.splitlines() if f"{m.__name__}.work" in l]
    assert len(lines) == 1, text
    assert lines[0].startswith(f" {LONG_NAME[:15]}-{pid:<7} [")
    assert "\u2026" not in text and "..." not in lines[0]


def test_funcgraph_proc_cell_is_print_graph_procs(fs, write_module):
    # print_graph_proc(): "comm-pid" centred in 14 columns, the comm as in the TASK-PID
    # column (15 characters: the kernel's 7 cannot tell threads apart); when it does
    # not fit it is printed whole and the bar moves right.
    m = write_module("def work(): return 1\n", hint="fidproc")
    fs.write("set_ftrace_filter", f"{m.__name__}.work")
    fs.write("current_tracer", "function_graph")
    fs.write("options/funcgraph-proc", "1")
    pid = _in_thread(m.work, LONG_NAME)
    text = fs.read("trace")
    lines = [l for l in text.splitlines() if f"{m.__name__}.work" in l]
    assert len(lines) == 1, text
    cell = f"{LONG_NAME[:15]}-{pid}"
    pad = max(0, 14 - len(cell))
    proc = " " * (pad // 2) + cell + " " * (pad - pad // 2)
    assert re.match(r"^ *\d+\) " + re.escape(proc) + r" \| ", lines[0]), lines[0]
    assert "\u2026" not in text


def _graph_thread_stream(comm: str, pid: int) -> list[TraceEntry]:
    t = 5_000_000_000
    return [
        TraceEntry(ts=t, cpu=0, comm="MainThread", pid=100, type=TRACE_GRAPH_ENT,
                   func="app.main"),
        TraceEntry(ts=t + 1_000, cpu=0, comm="MainThread", pid=100, type=TRACE_GRAPH_RET,
                   func="app.main", calltime=t, rettime=t + 1_000),
        TraceEntry(ts=t + 2_000, cpu=0, comm=comm, pid=pid, type=TRACE_GRAPH_ENT,
                   func="pool.run"),
        TraceEntry(ts=t + 3_000, cpu=0, comm=comm, pid=pid, type=TRACE_STACK,
                   text="pool.run\nthreading.Thread.run"),
        TraceEntry(ts=t + 4_000, cpu=0, comm=comm, pid=pid, type=TRACE_FN,
                   func="pool.step", parent="pool.run"),
        TraceEntry(ts=t + 5_000, cpu=0, comm=comm, pid=pid, type=TRACE_GRAPH_RET,
                   func="pool.run", calltime=t + 2_000, rettime=t + 5_000),
    ]


@pytest.mark.parametrize("comm,pid,cell", [
    ("ThreadPoolExecutor-0_0", 77001, "ThreadPoolExecu-77001"),
    ("ThreadPoolExecutor-0_0", 1234567, "ThreadPoolExecu-1234567"),
    ("ab", 5, "     ab-5     "),
    ("", 5, "   <...>-5    "),
])
def test_proc_cell_and_task_switch_banner(comm: str, pid: int, cell: str) -> None:
    lines = list(GraphPrinter(proc=True).render(_graph_thread_stream(comm, pid)))
    main = "MainThread-100"
    assert lines[1:5] == [
        " ------------------------------------------",
        f" 0) {main} => {cell}",
        " ------------------------------------------",
        "",
    ]
    assert lines[5] == f" 0) {cell} |               |  pool.run() {{"


def test_default_format_lines_inside_a_graph_keep_the_fifteen_character_comm() -> None:
    # Function hits and stack traces are not drawn by the graph printer
    # (print_graph_function_flags: TRACE_TYPE_UNHANDLED): the default format prints
    # them, TASK-PID column included.
    lines = list(GraphPrinter().render(_graph_thread_stream("ThreadPoolExecutor-0_0", 77001)))
    task = f"{'ThreadPoolExecu':>16}-{77001:<7} [000]      5.000003: "
    assert lines[6:9] == [
        task + "<stack trace>",
        " => pool.run",
        " => threading.Thread.run",
    ]
    assert lines[9] == f"{'ThreadPoolExecu':>16}-{77001:<7} [000]      5.000004: " \
                       "pool.step <-pool.run"
    noparent = list(GraphPrinter(print_parent=False).render(
        _graph_thread_stream("w", 7)))
    assert noparent[9].endswith(": pool.step")


# -- the chooser ---------------------------------------------------------------------------

def _graph_stream() -> list[TraceEntry | LostEvents]:
    t = 7_000_000_000
    return [
        TraceEntry(ts=t, cpu=0, comm="MainThread", pid=1, type=TRACE_GRAPH_ENT,
                   func="app.main"),
        TraceEntry(ts=t + 100, cpu=0, comm="MainThread", pid=1, type=TRACE_GRAPH_ENT,
                   func="app.leaf", depth=1),
        TraceEntry(ts=t + 1_482, cpu=0, comm="MainThread", pid=1, type=TRACE_GRAPH_RET,
                   func="app.leaf", depth=1, calltime=t + 100, rettime=t + 1_482,
                   retval=42, has_retval=True),
        TraceEntry(ts=t + 3_000, cpu=0, comm="MainThread", pid=1, type=TRACE_GRAPH_RET,
                   func="app.main", calltime=t, rettime=t + 3_000, retval=None,
                   has_retval=True),
    ]


def test_render_trace_function_graph_uses_the_graph_printer_with_its_defaults() -> None:
    assert list(render_trace(_graph_stream(), tracer="function_graph", nr_cpus=1)) == [
        "# tracer: function_graph",
        "#",
        "# CPU  DURATION                  FUNCTION CALLS",
        "# |     |   |                     |   |   |   |",
        " 0)               |  app.main() {",
        " 0)   1.382 us    |    app.leaf();",
        " 0)   3.000 us    |  }",
    ]


def test_render_trace_options_by_tracefs_name() -> None:
    lines = list(render_trace(_graph_stream(), tracer="function_graph", header=False,
                              options={"funcgraph-retval": True, "funcgraph-cpu": False,
                                       "overwrite": True, "markers": False}))
    assert lines == [
        "              |  app.main() {",
        "  1.382 us    |    app.leaf(); /* ret=42 */",
        "  3.000 us    |  } /* app.main ret=None */",
    ]
    hexed = list(render_trace(_graph_stream(), tracer="function_graph", header=False,
                              options={"funcgraph-retval": True,
                                       "funcgraph-retval-hex": True}))
    assert hexed[1].endswith("app.leaf(); /* ret=0x2a */")


def test_render_trace_cpu_column_width_follows_nr_cpus() -> None:
    lines = list(render_trace(_graph_stream(), tracer="function_graph", nr_cpus=12,
                              header=False))
    assert lines[0] == "  0)               |  app.main() {"


@pytest.mark.parametrize("tracer", ["function", "nop"])
def test_render_trace_other_tracers_use_the_default_format(tracer: str) -> None:
    t = 17284_993_652_000
    items: list[TraceEntry | LostEvents] = [
        TraceEntry(ts=t, cpu=0, comm="bash", pid=1977, type=TRACE_FN, func="sys_close",
                   parent="system_call_fastpath"),
        LostEvents(cpu=1, lost=3),
        TraceEntry(ts=t + 1_000, cpu=1, comm="sshd", pid=1974, type=TRACE_FN,
                   func="sys_select", parent="system_call_fastpath"),
    ]
    assert list(render_trace(items, tracer=tracer)) == [
        f"# tracer: {tracer}",
        "#",
        "# entries-in-buffer/entries-written: 2/5   #P:2",
        "#",
        "#           TASK-PID     CPU#     TIMESTAMP  FUNCTION",
        "#              | |         |         |         |",
        "            bash-1977    [000]  17284.993652: sys_close <-system_call_fastpath",
        "CPU:1 [LOST 3 EVENTS]",
        "            sshd-1974    [001]  17284.993653: sys_select <-system_call_fastpath",
    ]
    assert list(render_trace(items, tracer=tracer, nr_entries=10, written=20, nr_cpus=4,
                             options={"print-parent": False}))[2:] == [
        "# entries-in-buffer/entries-written: 10/20   #P:4",
        "#",
        "#           TASK-PID     CPU#     TIMESTAMP  FUNCTION",
        "#              | |         |         |         |",
        "            bash-1977    [000]  17284.993652: sys_close",
        "CPU:1 [LOST 3 EVENTS]",
        "            sshd-1974    [001]  17284.993653: sys_select",
    ]
    assert list(render_trace(items, tracer=tracer, header=False))[0].startswith(
        "            bash-1977")


def test_trace_options_defaults_are_tracefs_defaults() -> None:
    fs = Tracefs()
    current = {name: on for name, on in
               (( (w[2:], False) if w.startswith("no") else (w, True))
                for w in fs.read("trace_options").split())}
    for name, default in TRACE_OPTIONS.items():
        assert current[name] == default, name


# -- public names ----------------------------------------------------------------------

OUTPUT_MODULES = ["fntrace.output", "fntrace.output.entry", "fntrace.output.ftrace_text",
                  "fntrace.output.function_graph", "fntrace.output.reader",
                  "fntrace.output.render"]


@pytest.mark.parametrize("name", OUTPUT_MODULES)
def test_output_modules_show_only_their_public_names(name: str) -> None:
    mod = importlib.import_module(name)
    public = mod.__all__
    assert all(isinstance(n, str) and not n.startswith("_") for n in public)
    assert len(set(public)) == len(public)
    for n in public:
        assert getattr(mod, n) is not None
    assert [n for n in dir(mod) if not n.startswith("__")] == sorted(public)
    ns: dict[str, object] = {}
    exec(f"from {name} import *", ns)
    assert sorted(k for k in ns if k != "__builtins__") == sorted(public)


def test_output_package_gives_the_chooser() -> None:
    import fntrace.output as output
    assert output.render_trace is render_trace
    assert output.TRACE_OPTIONS is TRACE_OPTIONS
    with pytest.raises(AttributeError):
        output.no_such_name  # noqa: B018
