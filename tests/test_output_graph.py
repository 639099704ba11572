"""The function_graph text: columns, leaves and blocks, marks, options, per-cpu state.

Expected output lives in tests/gold/output_graph/; FNTRACE_REGEN_GOLD=1 rewrites it.
The examples of Documentation/trace/ftrace.rst are checked line for line;
where the documentation's literal blocks lost the kernel's leading space, or show an
older format than trace_functions_graph.c prints, the test says so.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterator

import pytest

from support import GOLD, compare_gold
from fntrace.output.entry import (
    TRACE_EVENT, TRACE_FN, TRACE_GRAPH_ENT, TRACE_GRAPH_RET, TRACE_PRINT, TRACE_STACK,
    LostEvents, TraceEntry,
)
from fntrace.output.function_graph import (
    GraphPrinter, format_retval, print_graph_abs_time, print_graph_headers_flags,
    print_graph_proc, trace_find_mark, trace_print_graph_duration,
)

GOLD_DIR = GOLD / "output_graph"


def check_gold(name: str, lines: list[str]) -> None:
    compare_gold(GOLD_DIR / name, lines)


US = 1_000
MS = 1_000_000
_UNSET = object()

THREADS = {
    0: ("MainThread", 4001),
    1: ("Thread-1 (worker)", 4002),
    2: ("Thread-2", 4003),
    3: ("Thread-3", 4004),
}


class Stream:
    """Builds a merged entry stream; each cpu keeps its own call stack.

    Times come from one clock that moves at least 100 ns per event unless ``ts`` is
    given; a return's ``dur`` is exact: the return comes ``dur`` after its entry when the
    clock allows, otherwise its calltime is moved back to fit.  A stack frame holds the
    function and its entry time (None for calls made before the stream starts).
    """

    def __init__(self, start: int = 100_000_000_000) -> None:
        self.items: list[TraceEntry | LostEvents] = []
        self.clock = start
        self.stacks: dict[int, list[tuple[str, int | None]]] = defaultdict(list)

    def _ts(self, ts: int | None) -> int:
        self.clock = self.clock + 100 if ts is None else ts
        return self.clock

    def _who(self, cpu: int, comm: str | None, pid: int | None) -> tuple[str, int]:
        c, p = THREADS.get(cpu, (f"Thread-{cpu}", 5000 + cpu))
        return (c if comm is None else comm), (p if pid is None else pid)

    def enter(self, cpu: int, func: str, *, ts: int | None = None,
              args: list[tuple[str, str]] | None = None, comm: str | None = None,
              pid: int | None = None) -> Stream:
        comm, pid = self._who(cpu, comm, pid)
        now = self._ts(ts)
        self.items.append(TraceEntry(ts=now, cpu=cpu, comm=comm, pid=pid,
                                     type=TRACE_GRAPH_ENT, func=func,
                                     depth=len(self.stacks[cpu]), args=args))
        self.stacks[cpu].append((func, now))
        return self

    def exit(self, cpu: int, dur: int, *, ts: int | None = None, retval: object = _UNSET,
             overrun: int = 0, comm: str | None = None, pid: int | None = None) -> Stream:
        func, entered = self.stacks[cpu].pop()
        if ts is None and entered is not None:
            ts = max(self.clock + 100, entered + dur)
        return self._ret(cpu, func, len(self.stacks[cpu]), dur, ts, retval, overrun,
                         comm, pid)

    def orphan_exit(self, cpu: int, func: str, depth: int, dur: int, *,
                    ts: int | None = None, retval: object = _UNSET) -> Stream:
        """A return whose entry is not in the stream (overwritten, or before the start)."""
        return self._ret(cpu, func, depth, dur, ts, retval, 0, None, None)

    def _ret(self, cpu: int, func: str, depth: int, dur: int, ts: int | None,
             retval: object, overrun: int, comm: str | None, pid: int | None) -> Stream:
        comm, pid = self._who(cpu, comm, pid)
        rettime = self._ts(ts)
        has = retval is not _UNSET
        self.items.append(TraceEntry(ts=rettime, cpu=cpu, comm=comm, pid=pid,
                                     type=TRACE_GRAPH_RET, func=func, depth=depth,
                                     calltime=rettime - dur, rettime=rettime,
                                     overrun=overrun, retval=retval if has else None,
                                     has_retval=has))
        return self

    def leaf(self, cpu: int, func: str, dur: int, *, ts: int | None = None,
             args: list[tuple[str, str]] | None = None, retval: object = _UNSET,
             comm: str | None = None, pid: int | None = None) -> Stream:
        self.enter(cpu, func, ts=ts, args=args, comm=comm, pid=pid)
        return self.exit(cpu, dur, retval=retval, comm=comm, pid=pid)

    def chain(self, cpu: int, depth: int, prefix: str = "outer", *,
              comm: str | None = None, pid: int | None = None) -> Stream:
        """Open blocks until ``cpu`` is at ``depth`` (their lines are not compared)."""
        while len(self.stacks[cpu]) < depth:
            self.enter(cpu, f"{prefix}{len(self.stacks[cpu])}", comm=comm, pid=pid)
        return self

    def other(self, cpu: int, type: int, text: str = "", func: str = "") -> Stream:
        comm, pid = self._who(cpu, None, None)
        self.items.append(TraceEntry(ts=self._ts(None), cpu=cpu, comm=comm, pid=pid,
                                     type=type, func=func, text=text))
        return self

    def lost(self, cpu: int, n: int) -> Stream:
        self.items.append(LostEvents(cpu=cpu, lost=n))
        return self


def render(stream: Stream, **opts: object) -> list[str]:
    return list(GraphPrinter(**opts).render(stream.items))  # type: ignore[arg-type]


# -- Documentation/trace/ftrace.rst examples ---------------------------------------

REF_DURATION_CELLS = {
    # ns: the duration column of a verbatim line, mark to bar
    1_382: "  1.382 us    |",
    61_770: "+ 61.770 us   |",
    140_417: "! 140.417 us  |",
    1_837_709: "# 1837.709 us |",
    33_998_590: "* 33998.59 us |",
    119_760_200: "@ 119760.2 us |",
    3_594_274_000: "$ 3594274 us  |",
}


@pytest.mark.parametrize("ns,cell", sorted(REF_DURATION_CELLS.items()))
def test_duration_cell_matches_ftrace_rst(ns: int, cell: str) -> None:
    assert GraphPrinter().print_graph_duration(ns) == cell + "  "


def test_duration_truncates_nanoseconds() -> None:
    # snprintf() into a short buffer cuts digits; it never rounds.
    assert trace_print_graph_duration(33_998_599) == "33998.59 us "
    assert trace_print_graph_duration(119_760_999) == "119760.9 us "
    assert trace_print_graph_duration(1_999_999_999) == "1999999 us  "
    assert trace_print_graph_duration(12_345_678_901) == "12345678 us "
    assert trace_print_graph_duration(0) == "0.000 us    "


def test_default_output_matches_ftrace_rst_verbatim() -> None:
    s = Stream()
    s.enter(0, "sys_open").enter(0, "do_sys_open").enter(0, "getname")
    s.enter(0, "kmem_cache_alloc").leaf(0, "__might_sleep", 1_382).exit(0, 2_478)
    s.enter(0, "strncpy_from_user").enter(0, "might_fault")
    s.leaf(0, "__might_sleep", 1_389).exit(0, 2_553).exit(0, 3_807).exit(0, 7_876)
    s.enter(0, "alloc_fd").leaf(0, "_spin_lock", 668).leaf(0, "expand_files", 570)
    s.leaf(0, "_spin_unlock", 586)
    printer = GraphPrinter()
    # ftrace.rst indents this literal block by 2; the blank line after the header is
    # the document's (s_show prints none).
    assert printer.headers() == [
        "# tracer: function_graph",
        "#",
        "# CPU  DURATION                  FUNCTION CALLS",
        "# |     |   |                     |   |   |   |",
    ]
    assert list(printer.render(s.items)) == [
        " 0)               |  sys_open() {",
        " 0)               |    do_sys_open() {",
        " 0)               |      getname() {",
        " 0)               |        kmem_cache_alloc() {",
        " 0)   1.382 us    |          __might_sleep();",
        " 0)   2.478 us    |        }",
        " 0)               |        strncpy_from_user() {",
        " 0)               |          might_fault() {",
        " 0)   1.389 us    |            __might_sleep();",
        " 0)   2.553 us    |          }",
        " 0)   3.807 us    |        }",
        " 0)   7.876 us    |      }",
        " 0)               |      alloc_fd() {",
        " 0)   0.668 us    |        _spin_lock();",
        " 0)   0.570 us    |        expand_files();",
        " 0)   0.586 us    |        _spin_unlock();",
    ]


def test_duration_marker_block_with_lost_entries_matches_ftrace_rst() -> None:
    # A trace that starts inside schedule_preempt_disabled(): four returns have no entry.
    s = Stream()
    s.stacks[3] = [(f, None) for f in (
        "schedule_preempt_disabled", "schedule", "__schedule", "__schedule")]
    s.orphan_exit(3, "__switch_to", 4, 1_837_709)
    s.enter(3, "finish_task_switch").leaf(3, "_raw_spin_unlock_irq", 313).exit(3, 3_177)
    s.exit(3, 1_889_063).exit(3, 140_417).exit(3, 2_034_948).exit(3, 33_998_590)
    # ftrace.rst's literal block lost the kernel's leading space (" %*d) ").
    doc = [
        "3) # 1837.709 us |          } /* __switch_to */",
        "3)               |          finish_task_switch() {",
        "3)   0.313 us    |            _raw_spin_unlock_irq();",
        "3)   3.177 us    |          }",
        "3) # 1889.063 us |        } /* __schedule */",
        "3) ! 140.417 us  |      } /* __schedule */",
        "3) # 2034.948 us |    } /* schedule */",
        "3) * 33998.59 us |  } /* schedule_preempt_disabled */",
    ]
    assert render(s, nr_cpus=4) == [" " + line for line in doc]


def test_duration_marker_block_nested_matches_ftrace_rst() -> None:
    s = Stream().chain(1, 5, "f")
    s.enter(1, "g5").leaf(1, "msecs_to_jiffies", 260).leaf(1, "__rcu_read_unlock", 313)
    s.exit(1, 61_770)
    s.exit(1, 64_479).leaf(1, "rcu_bh_qs", 313).leaf(1, "__local_bh_enable", 313)
    s.exit(1, 217_240).leaf(1, "idle_cpu", 365)
    s.enter(1, "rcu_irq_exit").leaf(1, "rcu_eqs_enter_common.isra.47", 417).exit(1, 3_125)
    s.exit(1, 227_812).exit(1, 457_395).exit(1, 119_760_200)
    doc = [
        "1)   0.260 us    |              msecs_to_jiffies();",
        "1)   0.313 us    |              __rcu_read_unlock();",
        "1) + 61.770 us   |            }",
        "1) + 64.479 us   |          }",
        "1)   0.313 us    |          rcu_bh_qs();",
        "1)   0.313 us    |          __local_bh_enable();",
        "1) ! 217.240 us  |        }",
        "1)   0.365 us    |        idle_cpu();",
        "1)               |        rcu_irq_exit() {",
        "1)   0.417 us    |          rcu_eqs_enter_common.isra.47();",
        "1)   3.125 us    |        }",
        "1) ! 227.812 us  |      }",
        "1) ! 457.395 us  |    }",
        "1) @ 119760.2 us |  }",
    ]
    assert render(s, nr_cpus=4)[-len(doc):] == [" " + line for line in doc]


def test_two_cpus_interleaved_match_ftrace_rst() -> None:
    # cpu 2's leaf must be found past cpu 1's entries in the merged stream.
    s = Stream().chain(1, 9, "f").leaf(1, "f9", 100).enter(2, "cpu_startup_entry")
    s.enter(2, "handle_IPI")
    s.exit(1, 6_979)
    s.enter(2, "scheduler_ipi")
    s.exit(1, 9_791)
    s.exit(2, 417)                       # scheduler_ipi's return, after cpu 1's line
    s.exit(1, 12_917)
    s.exit(2, 3_490)
    s.exit(1, 15_729).exit(1, 18_542)
    s.exit(2, 3_594_274_000)
    doc = [
        "2)               |    handle_IPI() {",
        "1)   6.979 us    |                  }",
        "2)   0.417 us    |      scheduler_ipi();",
        "1)   9.791 us    |                }",
        "1) + 12.917 us   |              }",
        "2)   3.490 us    |    }",
        "1) + 15.729 us   |            }",
        "1) + 18.542 us   |          }",
        "2) $ 3594274 us  |  }",
    ]
    assert render(s, nr_cpus=4)[-len(doc):] == [" " + line for line in doc]


def test_proc_block_matches_ftrace_rst() -> None:
    who = {"comm": "sh", "pid": 4802}
    s = Stream().chain(0, 8, "f", **who)
    s.enter(0, "d_free", **who).enter(0, "call_rcu", **who).enter(0, "__call_rcu", **who)
    s.leaf(0, "rcu_process_gp_end", 616, **who)
    s.leaf(0, "check_for_new_grace_period", 586, **who)
    s.exit(0, 2_899, **who).exit(0, 4_040, **who).exit(0, 5_151, **who)
    s.exit(0, 49_370, **who)
    doc = [
        "0)    sh-4802     |               |                  d_free() {",
        "0)    sh-4802     |               |                    call_rcu() {",
        "0)    sh-4802     |               |                      __call_rcu() {",
        "0)    sh-4802     |   0.616 us    |                        rcu_process_gp_end();",
        "0)    sh-4802     |   0.586 us    |                        check_for_new_grace_period();",
        "0)    sh-4802     |   2.899 us    |                      }",
        "0)    sh-4802     |   4.040 us    |                    }",
        "0)    sh-4802     |   5.151 us    |                  }",
        "0)    sh-4802     | + 49.370 us   |                }",
    ]
    assert render(s, proc=True)[-len(doc):] == [" " + line for line in doc]


def test_abstime_block_matches_ftrace_rst() -> None:
    t = 360_774_522_000
    s = Stream().chain(1, 19, "f").enter(1, "x19").enter(1, "y20").leaf(1, "z21", 100)
    s.exit(1, 541, ts=t + 100).exit(1, 4_663, ts=t + 900)
    s.leaf(1, "__wake_up_bit", 541, ts=t + 1_000)
    s.exit(1, 6_796, ts=t + 2_000)
    doc = [
        "360.774522 |   1)   0.541 us    |                                          }",
        "360.774522 |   1)   4.663 us    |                                        }",
        "360.774523 |   1)   0.541 us    |                                        __wake_up_bit();",
        "360.774524 |   1)   6.796 us    |                                      }",
    ]
    # "%5lu.%06lu": the seconds take 5 columns, which the document's block lost.
    assert render(s, abstime=True, nr_cpus=2)[-len(doc):] == ["  " + line for line in doc]


def test_tail_block_matches_ftrace_rst_in_code_form() -> None:
    s = Stream().chain(0, 2, "f").enter(0, "putname").enter(0, "kmem_cache_free")
    s.leaf(0, "__phys_addr", 518).exit(0, 1_757).exit(0, 2_861)
    # ftrace.rst shows "} /* kmem_cache_free() */"; print_graph_return() prints
    # "} /* %ps */", without the parentheses.
    assert render(s, tail=True)[-5:] == [
        " 0)               |      putname() {",
        " 0)               |        kmem_cache_free() {",
        " 0)   0.518 us    |          __phys_addr();",
        " 0)   1.757 us    |        } /* kmem_cache_free */",
        " 0)   2.861 us    |      } /* putname */",
    ]


def _ftrace_rst_retval_stream() -> Stream:
    s = Stream().enter(1, "cgroup_attach_task").enter(1, "cgroup_migrate")
    s.leaf(1, "cgroup_migrate_add_task", 651, retval=0xffff93fcfd346c00)
    s.enter(1, "cgroup_migrate_execute").enter(1, "cpu_cgroup_can_attach")
    s.enter(1, "cgroup_taskset_first")
    s.leaf(1, "cgroup_taskset_next", 732, retval=0xffff93fc8fb20000)
    s.exit(1, 1_232, retval=0xffff93fc8fb20000)
    s.leaf(1, "sched_rt_can_attach", 380, retval=0)
    s.exit(1, 2_335, retval=-22).exit(1, 4_369, retval=-22).exit(1, 7_143, retval=-22)
    return s


def test_retval_block_matches_ftrace_rst_in_code_form() -> None:
    # ftrace.rst's example in today's print_graph_retval() form: " /* ret=... */" on a
    # leaf, "} /* func ret=... */" on a return.  A register has no type, so the kernel
    # guesses (error codes in decimal, the rest in hex); a Python value has one, so
    # funcgraph-retval-hex is what prints ints as the kernel's "0x%lx" does.  -22 is
    # then a 64-bit long's two's complement (an int-returning kernel function shows
    # 0xffffffea: the upper half of its register is zero).
    assert render(_ftrace_rst_retval_stream(), retval=True, retval_hex=True,
                  nr_cpus=2)[1:] == [
        " 1)               |    cgroup_migrate() {",
        " 1)   0.651 us    |      cgroup_migrate_add_task(); /* ret=0xffff93fcfd346c00 */",
        " 1)               |      cgroup_migrate_execute() {",
        " 1)               |        cpu_cgroup_can_attach() {",
        " 1)               |          cgroup_taskset_first() {",
        " 1)   0.732 us    |            cgroup_taskset_next(); /* ret=0xffff93fc8fb20000 */",
        " 1)   1.232 us    |          } /* cgroup_taskset_first ret=0xffff93fc8fb20000 */",
        " 1)   0.380 us    |          sched_rt_can_attach(); /* ret=0x0 */",
        " 1)   2.335 us    |        } /* cpu_cgroup_can_attach ret=0xffffffffffffffea */",
        " 1)   4.369 us    |      } /* cgroup_migrate_execute ret=0xffffffffffffffea */",
        " 1)   7.143 us    |    } /* cgroup_migrate ret=0xffffffffffffffea */",
    ]


def test_retval_without_hex_prints_the_values_repr() -> None:
    # The same placement; each int as Python writes it.
    assert render(_ftrace_rst_retval_stream(), retval=True, nr_cpus=2)[1:] == [
        " 1)               |    cgroup_migrate() {",
        " 1)   0.651 us    |      cgroup_migrate_add_task(); /* ret=18446625313521953792 */",
        " 1)               |      cgroup_migrate_execute() {",
        " 1)               |        cpu_cgroup_can_attach() {",
        " 1)               |          cgroup_taskset_first() {",
        " 1)   0.732 us    |            cgroup_taskset_next(); /* ret=18446625311684689920 */",
        " 1)   1.232 us    |          } /* cgroup_taskset_first ret=18446625311684689920 */",
        " 1)   0.380 us    |          sched_rt_can_attach(); /* ret=0 */",
        " 1)   2.335 us    |        } /* cpu_cgroup_can_attach ret=-22 */",
        " 1)   4.369 us    |      } /* cgroup_migrate_execute ret=-22 */",
        " 1)   7.143 us    |    } /* cgroup_migrate ret=-22 */",
    ]


def test_comment_inside_a_block() -> None:
    s = Stream().chain(1, 5, "f").enter(1, "__might_sleep")
    s.other(1, TRACE_PRINT, "I'm a comment!\n").exit(1, 1_449)
    # print_graph_comment(): one level deeper than the open block.
    assert render(s, nr_cpus=2)[-3:] == [
        " 1)               |            __might_sleep() {",
        " 1)               |              /* I'm a comment! */",
        " 1)   1.449 us    |            }",
    ]


# -- pieces ----------------------------------------------------------------------------

def test_headers_follow_print_graph_headers_flags() -> None:
    # The column strings of __print_graph_headers_flags(); ftrace.rst's proc and abstime
    # examples were typed by hand and differ from them by a space here and there.
    assert print_graph_headers_flags(proc=True) == [
        "# CPU  TASK/PID         DURATION                  FUNCTION CALLS",
        "# |     |    |           |   |                     |   |   |   |",
    ]
    assert print_graph_headers_flags(abstime=True) == [
        "#     TIME        CPU  DURATION                  FUNCTION CALLS",
        "#      |          |     |   |                     |   |   |   |",
    ]
    assert print_graph_headers_flags(cpu=False, duration=False) == [
        "#               FUNCTION CALLS",
        "#               |   |   |   |",
    ]


@pytest.mark.parametrize("threshold,mark", [
    (10 * US, "+"), (100 * US, "!"), (1 * MS, "#"), (10 * MS, "*"), (100 * MS, "@"),
    (1_000 * MS, "$"),
])
def test_mark_is_strictly_above_threshold(threshold: int, mark: str) -> None:
    assert trace_find_mark(threshold) != mark
    assert trace_find_mark(threshold + 1) == mark


def test_mark_below_ten_microseconds_is_blank() -> None:
    assert trace_find_mark(0) == " "
    assert trace_find_mark(10 * US) == " "


def test_proc_column_is_centred_in_fourteen() -> None:
    assert print_graph_proc("sh", 4802) == "   sh-4802    "
    # The comm as in the TASK-PID column (15 characters, where the kernel cuts 7), then
    # the kernel's rule for a cell that does not fit: printed whole.
    assert print_graph_proc("MainThread", 123456) == "MainThread-123456"
    assert print_graph_proc("MainThread", 1234567) == "MainThread-1234567"
    assert print_graph_proc("hasher_worker_12", 5) == "hasher_worker_1-5"
    assert print_graph_proc("worker", 5) == "   worker-5   "
    assert print_graph_proc("", 9) == "   <...>-9    "


def test_abs_time_truncates_to_the_microsecond() -> None:
    assert print_graph_abs_time(360_774_522_999) == "  360.774522 |  "


@pytest.mark.parametrize("value,plain,hexed", [
    (0, "0", "0x0"),
    (42, "42", "0x2a"),
    (-22, "-22", "0xffffffffffffffea"),
    (-4095, "-4095", "0xfffffffffffff001"),
    (-4096, "-4096", "0xfffffffffffff000"),
    (-(1 << 63), str(-(1 << 63)), "0x8000000000000000"),
    (1 << 70, "1180591620717411303424", "0x400000000000000000"),
    (-(1 << 70), "-1180591620717411303424", "-0x400000000000000000"),
    # what the recorders store for any other value: its short repr, as a str
    ("'abc'", "'abc'", "'abc'"),
    ("True", "True", "True"),
    ("None", "None", "None"),
    ("raised ValueError('bad')", "raised ValueError('bad')", "raised ValueError('bad')"),
    ("raised", "raised", "raised"),
    # values given as objects print as their repr; a bool is not printed as an int
    (None, "None", "None"),
    (True, "True", "True"),
    (3.5, "3.5", "3.5"),
])
def test_format_retval(value: object, plain: str, hexed: str) -> None:
    assert format_retval(value) == plain
    assert format_retval(value, hex_format=True) == hexed


def test_format_retval_int_too_long_for_decimal_prints_in_hex() -> None:
    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        assert format_retval(10 ** 700) == f"{10 ** 700:#x}"
        assert format_retval(-(10 ** 700)) == f"-{10 ** 700:#x}"
    finally:
        sys.set_int_max_str_digits(saved)


def test_format_retval_of_a_failing_repr_is_fault() -> None:
    class Bad:
        def __repr__(self) -> str:
            raise RuntimeError("no")
    assert format_retval(Bad()) == "(fault)"


def test_leaf_needs_same_pid_and_function() -> None:
    s = Stream().enter(0, "a").exit(0, 500, pid=9999)         # return from another pid
    s.enter(0, "b")
    s.orphan_exit(0, "c", 0, 700)                            # another function's return
    lines = render(s)
    assert lines[0] == " 0)               |  a() {"
    assert " 0)               |  b() {" in lines
    assert not any(line.endswith("();") for line in lines)


def test_entry_without_anything_after_it_opens_a_block() -> None:
    # As trace_pipe shows a function that has not returned yet.
    s = Stream().enter(0, "main").leaf(0, "helper", 900).enter(0, "slow")
    assert render(s)[-1] == " 0)               |    slow() {"


def test_render_streams_without_reading_ahead_of_need() -> None:
    s = Stream().enter(0, "a").leaf(0, "b", 100).enter(1, "c").exit(0, 300)
    taken: list[int] = []

    def feed() -> Iterator[TraceEntry | LostEvents]:
        for i, item in enumerate(s.items):
            taken.append(i)
            yield item

    out = GraphPrinter(nr_cpus=2).render(feed())
    assert next(out) == " 0)               |  a() {"
    assert taken == [0, 1]          # a's next entry on cpu 0 decides: not its return
    assert next(out) == " 0)   0.100 us    |    b();"
    assert taken == [0, 1, 2]


def test_cpu_width_follows_nr_cpus_or_highest_cpu() -> None:
    s = Stream().leaf(3, "f", 100)
    assert render(s)[0].startswith(" 3) ")
    assert render(s, nr_cpus=16)[0].startswith("  3) ")
    s.leaf(12, "g", 100)
    assert [line[:5] for line in render(s)] == ["  3) ", " 12) "]


# -- gold ------------------------------------------------------------------------------

def python_call_tree(s: Stream, cpu: int = 0) -> Stream:
    """A small Python program's calls: blocks, leaves, comments, an event, a stack."""
    s.enter(cpu, "app.main")
    s.enter(cpu, "app.load", args=[("path", "'data.json'")])
    s.leaf(cpu, "pathlib.Path.exists", 2_310, retval="True")
    s.enter(cpu, "json.loads")
    s.leaf(cpu, "json.decoder.JSONDecoder.decode", 41_512, retval="{'a': 1}")
    s.exit(cpu, 44_820, retval="{'a': 1}")
    s.other(cpu, TRACE_PRINT, "loaded\n")
    s.exit(cpu, 58_003, retval="{'a': 1}")
    s.other(cpu, TRACE_PRINT, "after load")
    s.enter(cpu, "app.process")
    s.other(cpu, TRACE_EVENT, "exc=KeyError('b')", func="py_raise")
    s.leaf(cpu, "app.Record.__init__", 870, args=[("self", "<Record>"), ("n", "1")],
           retval=None)
    s.other(cpu, TRACE_STACK, "app.process\napp.main\n<module>")
    s.other(cpu, TRACE_FN, func="app.process")
    s.exit(cpu, 2_500_001, retval=-2)
    s.exit(cpu, 2_600_000, retval=0)
    return s


def test_gold_nested_calls_and_leaves() -> None:
    check_gold("nested_leaves.txt", GraphPrinter().headers() + render(python_call_tree(
        Stream())))


def test_gold_return_without_entry() -> None:
    s = Stream()
    s.stacks[0] = [("app.main", None), ("app.serve", None)]   # the trace starts inside
    s.leaf(0, "app.poll", 3_300).exit(0, 12_000_000)
    s.enter(0, "app.shutdown").leaf(0, "app.close", 1_100).exit(0, 5_000)
    s.exit(0, 1_500 * MS)
    check_gold("return_without_entry.txt", render(s))


def test_gold_tail() -> None:
    check_gold("tail.txt", render(python_call_tree(Stream()), tail=True))


def _marks_stream() -> Stream:
    s = Stream().enter(0, "bench.run")
    for ns in (0, 999, 1_000, 9_999):
        s.leaf(0, f"bench.f_{ns}ns", ns)
    for t in (10 * US, 100 * US, 1 * MS, 10 * MS, 100 * MS, 1_000 * MS, 10_000 * MS):
        s.leaf(0, f"bench.at_{t}ns", t)
        s.leaf(0, f"bench.over_{t}ns", t + 1)
    s.exit(0, 12_000 * MS)
    return s


def test_gold_duration_mark_boundaries() -> None:
    check_gold("marks.txt", render(_marks_stream()))


def test_gold_duration_without_overhead() -> None:
    check_gold("marks_nooverhead.txt", render(_marks_stream(), overhead=False))


def test_gold_proc_and_task_switch() -> None:
    s = Stream().enter(0, "app.main").leaf(0, "app.step", 1_200)
    # The same cpu (thread slot) now shows another native thread: verif_pid()'s banner.
    s.leaf(0, "worker.run", 800, comm="ThreadPoolExecutor-0_0", pid=77001)
    s.leaf(0, "app.step", 900).exit(0, 9_000)
    check_gold("proc_task_switch.txt",
               GraphPrinter(proc=True).headers() + render(s, proc=True))


def test_gold_task_switch_without_proc() -> None:
    s = Stream().leaf(0, "app.step", 1_200)
    s.leaf(0, "worker.run", 800, comm="worker", pid=77001)
    check_gold("task_switch.txt", render(s))


def test_gold_abstime() -> None:
    s = python_call_tree(Stream(start=86_399_999_999_400))
    check_gold("abstime.txt", GraphPrinter(abstime=True).headers() + render(s, abstime=True))


def _retval_stream() -> Stream:
    s = Stream().enter(0, "app.main")
    s.leaf(0, "os.open", 1_000, retval=-2)                 # an error code
    s.leaf(0, "app.count", 1_000, retval=42)
    s.leaf(0, "app.offset", 1_000, retval=-5_000)          # negative, not an error code
    s.leaf(0, "app.name", 1_000, retval="'abc'")
    s.leaf(0, "app.nothing", 1_000, retval=None)
    s.leaf(0, "app.raises", 1_000)                         # no value recorded
    s.leaf(0, "app.fails", 1_000, retval="raised KeyError('k')")   # an exception left
    s.enter(0, "app.validate").leaf(0, "app.check", 500, retval=0).exit(0, 2_000, retval=-22)
    s.enter(0, "app.unwound").leaf(0, "app.check", 500, retval=1).exit(0, 2_000)
    s.exit(0, 20_000, retval=0)
    return s


def test_gold_retval() -> None:
    check_gold("retval.txt", render(_retval_stream(), retval=True))


def test_gold_retval_hex() -> None:
    check_gold("retval_hex.txt", render(_retval_stream(), retval=True, retval_hex=True))


def test_gold_args() -> None:
    check_gold("args.txt", render(python_call_tree(Stream()), args=True))


def test_gold_args_off_ignores_recorded_args() -> None:
    check_gold("args_off.txt", render(python_call_tree(Stream())))


def test_gold_two_cpus_interleaved() -> None:
    s = Stream()
    s.enter(0, "app.main")
    s.enter(1, "worker.run")
    s.enter(0, "app.submit")
    s.enter(1, "queue.Queue.get")      # cpu 1's leaf spans cpu 0's lines
    s.leaf(0, "queue.Queue.put", 2_000)
    s.exit(1, 150_000)
    s.exit(0, 9_000)
    s.lost(1, 118)
    s.leaf(1, "worker.handle", 33_000)
    s.enter(0, "app.wait")
    s.enter(10, "timer.tick")
    s.exit(1, 400_000)
    s.exit(10, 1_000)
    s.exit(0, 500_000).exit(0, 800_000)
    check_gold("two_cpus.txt", render(s, nr_cpus=12))


def test_gold_overrun() -> None:
    s = Stream().enter(0, "app.deep").leaf(0, "app.leaf", 300)
    s.exit(0, 1_000, overrun=3)
    check_gold("overrun.txt", render(s, overrun=True))


def test_gold_no_cpu_no_duration() -> None:
    s = python_call_tree(Stream())
    check_gold("nocpu_noduration.txt",
               GraphPrinter(cpu=False, duration=False).headers()
               + render(s, cpu=False, duration=False))
