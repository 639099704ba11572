"""The function tracer's text: header, line context, print/stack/event lines, lost events.

Expected output lives in tests/gold/output_text/; FNTRACE_REGEN_GOLD=1 rewrites it.
"""
from __future__ import annotations


import pytest

from support import GOLD, compare_gold
from fntrace.output.entry import (
    LOST_EVENTS_UNKNOWN, TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET,
    TRACE_PRINT, TRACE_STACK, LostEvents, TraceEntry,
)
from fntrace.output.ftrace_text import (
    format_function_entry, format_lost_events, format_print_entry, print_trace_header,
    render_function_trace, trace_print_context,
)

GOLD_DIR = GOLD / "output_text"


def check_gold(name: str, lines: list[str]) -> None:
    compare_gold(GOLD_DIR / name, lines)


def sec(s: float) -> int:
    """Seconds to ns without float error for the usual 6 decimals."""
    return round(s * 1_000_000) * 1000


def fn(ts: int, cpu: int, func: str, parent: str = "", *, comm: str = "MainThread",
       pid: int = 4001, args: list[tuple[str, str]] | None = None) -> TraceEntry:
    return TraceEntry(ts=ts, cpu=cpu, comm=comm, pid=pid, type=TRACE_FN, func=func,
                      parent=parent, args=args)


def two_cpu_trace() -> list[TraceEntry]:
    """A main thread (cpu 0) and a worker (cpu 1), interleaved in time."""
    t0 = sec(17284.993652)
    w = {"comm": "Thread-1 (work)", "pid": 4002}
    return [
        fn(t0, 0, "app.main", "runpy._run_code"),
        fn(t0 + 1_000, 0, "app.load", "app.main"),
        fn(t0 + 1_200, 1, "app.worker", "threading.Thread.run", **w),
        fn(t0 + 1_499, 0, "json.loads", "app.load"),
        fn(t0 + 1_500, 1, "queue.Queue.get", "app.worker", **w),
        fn(t0 + 2_000, 0, "json.decoder.JSONDecoder.decode", "json.loads"),
        fn(t0 + 40_000_000, 1, "app.handle", "app.worker", **w),
        fn(t0 + 40_000_100, 0, "app.save", "app.main"),
    ]


# -- header ----------------------------------------------------------------------------

def test_header_noirq_info_is_print_func_help_header() -> None:
    # trace.c print_event_info() + print_func_help_header() without record-tgid.
    assert print_trace_header("function", 144405, 9452052, 4) == [
        "# tracer: function",
        "#",
        "# entries-in-buffer/entries-written: 144405/9452052   #P:4",
        "#",
        "#           TASK-PID     CPU#     TIMESTAMP  FUNCTION",
        "#              | |         |         |         |",
    ]


def test_header_irq_info_matches_kernel_docs_verbatim() -> None:
    # As a current kernel prints it (quoted in fprobetrace.rst), block indent removed.
    assert print_trace_header("nop", 813, 26317372, 8, irq_info=True) == [
        "# tracer: nop",
        "#",
        "# entries-in-buffer/entries-written: 813/26317372   #P:8",
        "#",
        "#                                _-----=> irqs-off/BH-disabled",
        "#                               / _----=> need-resched",
        "#                              | / _---=> hardirq/softirq",
        "#                              || / _--=> preempt-depth",
        "#                              ||| / _-=> migrate-disable",
        "#                              |||| /     delay",
        "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION",
        "#              | |         |   |||||     |         |",
    ]


def test_header_columns_line_up_with_lines() -> None:
    line = format_function_entry(fn(sec(17284.993652), 0, "f", "g", comm="bash", pid=1977))
    header = print_trace_header("function", 1, 1, 1)
    # The '-' of TASK-PID sits on the '-' between comm and pid; CPU# starts at '['.
    assert header[4].index("-") == line.index("-")
    assert header[4].index("CPU#") == line.index("[")


# -- context and lines -----------------------------------------------------------------

def test_event_line_matches_kernel_docs_verbatim() -> None:
    # Documentation/trace/fprobetrace.rst, irq-info on, block indent removed.
    e = TraceEntry(ts=sec(335.883208), cpu=0, comm="sh", pid=70, type=TRACE_EVENT,
                   func="vfs_read__exit", text="(ksys_read+0x75/0x100 <- vfs_read) arg1=1")
    assert format_print_entry(e, irq_info=True) == (
        "              sh-70      [000] .....   335.883208: vfs_read__exit: "
        "(ksys_read+0x75/0x100 <- vfs_read) arg1=1")


def test_context_prefix_fields() -> None:
    e = fn(sec(23636.756054), 2, "f", comm="<idle>", pid=0)
    assert trace_print_context(e) == "          <idle>-0       [002]  23636.756054: "
    assert trace_print_context(e, irq_info=True) == (
        "          <idle>-0       [002] ..... 23636.756054: ")


def test_timestamp_rounds_to_the_microsecond() -> None:
    # ns2usecs() adds 500 before dividing.
    assert trace_print_context(fn(1_000_000_499, 0, "f")).endswith("    1.000000: ")
    assert trace_print_context(fn(1_000_000_500, 0, "f")).endswith("    1.000001: ")
    assert trace_print_context(fn(999_999_999_500, 0, "f")).endswith("  1000.000000: ")
    assert trace_print_context(fn(123_456_789_012_345_678, 0, "f")).endswith(
        " 123456789.012346: ")


def test_comm_is_cut_like_a_kernel_comm_and_unknown_comm_is_dots() -> None:
    long_name = fn(sec(1), 0, "f", comm="ThreadPoolExecutor-0_0", pid=12)
    assert trace_print_context(long_name).startswith(" ThreadPoolExecu-12      [000]")
    assert trace_print_context(fn(sec(1), 0, "f", comm="", pid=12)).startswith(
        "           <...>-12      [000]")


def test_function_line_print_parent_and_args() -> None:
    e = fn(sec(1477.606694), 1, "mod.strtoul", "mod.parse", comm="bash", pid=4000)
    ctx = "            bash-4000    [001]   1477.606694: "
    assert format_function_entry(e) == ctx + "mod.strtoul <-mod.parse"
    assert format_function_entry(e, print_parent=False) == ctx + "mod.strtoul"
    e.parent = ""      # no known caller: trace_fn_trace() leaves " <-" out
    assert format_function_entry(e) == ctx + "mod.strtoul"
    e.parent, e.args = "mod.parse", [("s", "'12'"), ("base", "10")]
    assert format_function_entry(e) == ctx + "mod.strtoul(s='12', base=10) <-mod.parse"


def test_print_stack_and_event_lines() -> None:
    base = {"ts": sec(5.5), "cpu": 0, "comm": "MainThread", "pid": 7}
    ctx = "      MainThread-7       [000]      5.500000: "
    marker = TraceEntry(type=TRACE_PRINT, text="hello world\n", **base)
    assert format_print_entry(marker) == ctx + "tracing_mark_write: hello world"
    printk = TraceEntry(type=TRACE_PRINT, func="app.step", text="x=1", **base)
    assert format_print_entry(printk) == ctx + "app.step: x=1"
    stack = TraceEntry(type=TRACE_STACK, text="app.inner\napp.outer\n<module>", **base)
    assert format_print_entry(stack).split("\n") == [
        ctx + "<stack trace>", " => app.inner", " => app.outer", " => <module>"]
    event = TraceEntry(type=TRACE_EVENT, func="py_raise", text="exc=ValueError", **base)
    assert format_print_entry(event) == ctx + "py_raise: exc=ValueError"
    with pytest.raises(ValueError):
        format_print_entry(fn(0, 0, "f"))


def test_lost_events_line() -> None:
    assert format_lost_events(2, 11745) == "CPU:2 [LOST 11745 EVENTS]"
    assert format_lost_events(0, LOST_EVENTS_UNKNOWN) == "CPU:0 [LOST EVENTS]"


def test_render_skips_graph_entries() -> None:
    ent = TraceEntry(ts=1, cpu=0, comm="a", pid=1, type=TRACE_GRAPH_ENT, func="f")
    ret = TraceEntry(ts=2, cpu=0, comm="a", pid=1, type=TRACE_GRAPH_RET, func="f")
    out = list(render_function_trace([ent, fn(3, 0, "g", comm="a", pid=1), ret],
                                     header=False, tracer="function", nr_entries=3,
                                     written=3, nr_cpus=1))
    assert out == ["               a-1       [000]      0.000000: g"]


# -- gold ------------------------------------------------------------------------------

def test_gold_function_trace_with_header_two_cpus() -> None:
    entries = two_cpu_trace()
    check_gold("function_two_cpus.txt", list(render_function_trace(
        entries, header=True, tracer="function", nr_entries=len(entries), written=9452052,
        nr_cpus=2)))


def test_gold_function_trace_noprint_parent() -> None:
    entries = two_cpu_trace()
    check_gold("function_noprint_parent.txt", list(render_function_trace(
        entries, header=True, tracer="function", nr_entries=len(entries),
        written=len(entries), nr_cpus=2, print_parent=False)))


def test_gold_function_trace_irq_info() -> None:
    entries = two_cpu_trace()
    check_gold("function_irq_info.txt", list(render_function_trace(
        entries, header=True, tracer="function", nr_entries=len(entries),
        written=len(entries), nr_cpus=2, irq_info=True)))


def test_gold_trace_pipe_with_lost_events() -> None:
    t0 = sec(42.000001)
    w = {"comm": "worker", "pid": 4100}
    entries: list[TraceEntry | LostEvents] = [
        fn(t0, 0, "app.main", "runpy._run_code"),
        TraceEntry(ts=t0 + 500, cpu=0, comm="MainThread", pid=4001, type=TRACE_PRINT,
                   text="checkpoint 1\n"),
        LostEvents(cpu=1, lost=11745),
        fn(t0 + 900, 1, "app.poll", "app.loop", **w),
        TraceEntry(ts=t0 + 1_000, cpu=1, comm="worker", pid=4100, type=TRACE_STACK,
                   text="app.poll\napp.loop\nthreading.Thread.run"),
        fn(t0 + 3_000, 0, "app.step", "app.main", args=[("n", "3")]),
        TraceEntry(ts=t0 + 4_000, cpu=0, comm="MainThread", pid=4001, type=TRACE_EVENT,
                   func="py_raise", text="exc=KeyError('k')"),
        LostEvents(cpu=0, lost=LOST_EVENTS_UNKNOWN),
        fn(t0 + 9_000_000, 0, "app.done", "app.main"),
    ]
    check_gold("trace_pipe_lost.txt", list(render_function_trace(
        entries, header=False, tracer="function", nr_entries=0, written=0, nr_cpus=2)))
