"""The function_graph tracer, black box: the text it prints for real programs.

Programs are written to a temporary directory and run with
``fntrace live -p function_graph -F '*:mod:__main__' ...``; the output is compared
line by line with the expected text, the duration cell replaced by ``X.XXX us`` (the
column keeps its width and its ``|``).  The expected text is the same on every Python
version; where a back end differs in a documented way (the setprofile back end, 3.11's,
knows that an exception left a frame but not which), the test says so.

Then the tracefs side in process: ``trace`` and ``trace_pipe`` in the graph format,
set_graph_function / set_graph_notrace / max_graph_depth / tracing_thresh and their
refusals, and ports of the kernel selftests fgraph-filter.tc, fgraph-multi.tc and
fgraph-retval.tc.
"""
from __future__ import annotations

import re
import textwrap

import pytest

from fntrace import _env
from fntrace.errors import FilterError, FntraceError
from fntrace.fgraph import shadow_stack
from fntrace.trace_array import thread_cpu
from fntrace.tracefs import Tracefs

from support import (
    DUR, GRAPH_HEADER, assert_lines, body, expected, fntrace_cli, is_header, mask_graph,
)

# What an exception leaving a traced function prints with -R: the exception's repr on
# sys.monitoring; 3.11's setprofile (and FNTRACE_BACKEND=profile) only knows that one
# left.
HAS_EXC_OBJECT = _env.PYBEHAVIOR.has_monitoring and _env.BACKEND == "monitoring"


def raised(text: str) -> str:
    return f"raised {text}" if HAS_EXC_OBJECT else "raised"


pytestmark = pytest.mark.usefixtures("fgraph_clean")


GRAPH = ["-p", "function_graph", "-F", "*:mod:__main__"]


def live(tmp_path, source: str, *opts: str, graph: list[str] = GRAPH) -> str:
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(source))
    r = fntrace_cli("live", *graph, *opts, "prog.py", cwd=tmp_path)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr}\n{r.stdout}"
    return r.stdout


NESTED = """
    def leaf(x):
        return x + 1

    def mid(x):
        return leaf(x) * 2

    def other(a, b='x'):
        return leaf(a)

    def top():
        mid(1)
        leaf(2)
        other(1, b='x')
        return 0

    top()
    mid(3)
"""


def test_nested_calls_and_leaves(tmp_path):
    out = live(tmp_path, NESTED)
    assert_lines(mask_graph(out), GRAPH_HEADER + expected("""
         0)               |  __main__.top() {
         0)               |    __main__.mid() {
         0)   X.XXX us    |      __main__.leaf();
         0)   X.XXX us    |    }
         0)   X.XXX us    |    __main__.leaf();
         0)               |    __main__.other() {
         0)   X.XXX us    |      __main__.leaf();
         0)   X.XXX us    |    }
         0)   X.XXX us    |  }
         0)               |  __main__.mid() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
    """))


def test_masking_keeps_the_columns(tmp_path):
    out = live(tmp_path, NESTED)
    for raw, masked in zip(out.splitlines(), mask_graph(out)):
        assert len(raw) == len(masked)
        if not is_header(raw):
            assert raw.index("|") == masked.index("|")
    assert DUR in mask_graph(out)[6]


EXC = """
    class Boom(Exception):
        pass

    def boom():
        raise ValueError("bad")

    def catcher():
        try:
            boom()
        except ValueError:
            return -1

    def inner():
        raise Boom("deep")

    def middle():
        return inner() + 1

    def upper():
        try:
            return middle()
        except Boom:
            return 7

    catcher()
    upper()
"""


def test_exceptions(tmp_path):
    out = live(tmp_path, EXC, "-R")
    assert_lines(body(out), expected(f"""
         0)               |  __main__.catcher() {{
         0)   X.XXX us    |    __main__.boom(); /* ret={raised("ValueError('bad')")} */
         0)   X.XXX us    |  }} /* __main__.catcher ret=-1 */
         0)               |  __main__.upper() {{
         0)               |    __main__.middle() {{
         0)   X.XXX us    |      __main__.inner(); /* ret={raised("Boom('deep')")} */
         0)   X.XXX us    |    }} /* __main__.middle ret={raised("Boom('deep')")} */
         0)   X.XXX us    |  }} /* __main__.upper ret=7 */
    """))


def test_exception_escaping_the_program(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        def inner():
            raise KeyError("k")

        def outer():
            return inner()

        outer()
    """))
    r = fntrace_cli("live", *GRAPH, "prog.py", cwd=tmp_path)
    assert r.returncode == 1
    assert "KeyError" in r.stderr
    assert_lines(body(r.stdout), expected("""
         0)               |  __main__.outer() {
         0)   X.XXX us    |    __main__.inner();
         0)   X.XXX us    |  }
    """))


GEN = """
    def gen(n):
        for i in range(n):
            yield i * 10

    def guarded(n):
        try:
            for i in range(n):
                yield i
        finally:
            pass

    def consume():
        total = 0
        for v in gen(2):
            total += v
        return total

    def close_early():
        g = guarded(5)
        first = next(g)
        g.close()
        return first

    consume()
    close_early()
"""


def test_generators_each_resume_is_a_call(tmp_path):
    out = live(tmp_path, GEN, "-R")
    assert_lines(body(out), expected(f"""
         0)               |  __main__.consume() {{
         0)   X.XXX us    |    __main__.gen(); /* ret=0 */
         0)   X.XXX us    |    __main__.gen(); /* ret=10 */
         0)   X.XXX us    |    __main__.gen(); /* ret=None */
         0)   X.XXX us    |  }} /* __main__.consume ret=10 */
         0)               |  __main__.close_early() {{
         0)   X.XXX us    |    __main__.guarded(); /* ret=0 */
         0)   X.XXX us    |    __main__.guarded(); /* ret={raised("GeneratorExit()")} */
         0)   X.XXX us    |  }} /* __main__.close_early ret=0 */
    """))


def test_generators_without_retval(tmp_path):
    out = live(tmp_path, GEN)
    assert_lines(body(out), expected("""
         0)               |  __main__.consume() {
         0)   X.XXX us    |    __main__.gen();
         0)   X.XXX us    |    __main__.gen();
         0)   X.XXX us    |    __main__.gen();
         0)   X.XXX us    |  }
         0)               |  __main__.close_early() {
         0)   X.XXX us    |    __main__.guarded();
         0)   X.XXX us    |    __main__.guarded();
         0)   X.XXX us    |  }
    """))


def test_generator_throw(tmp_path):
    out = live(tmp_path, """
        def gen():
            yield 1
            yield 2

        def thrower():
            g = gen()
            next(g)
            try:
                g.throw(KeyError("k"))
            except KeyError:
                return 0

        thrower()
    """, "-R")
    # The generator ends by the exception thrown into it: on every back end this is an
    # exception leaving the frame, not a return of None.
    assert_lines(body(out), expected(f"""
         0)               |  __main__.thrower() {{
         0)   X.XXX us    |    __main__.gen(); /* ret=1 */
         0)   X.XXX us    |    __main__.gen(); /* ret={raised("KeyError('k')")} */
         0)   X.XXX us    |  }} /* __main__.thrower ret=0 */
    """))


ASYNC = """
    import asyncio

    async def step(x):
        await asyncio.sleep(0)
        return x

    async def amain():
        a = await step(1)
        b = await step(2)
        return a + b

    asyncio.run(amain())
"""


def test_async_functions(tmp_path):
    # (the asyncio Task switches are test_asyncio_tasks.py's: left out here)
    out = live(tmp_path, ASYNC, "-R", "-O", "nofuncgraph-task")
    # Every resume of a coroutine is a call of its own; a suspension returns what it
    # yields (None from asyncio.sleep(0)).
    assert_lines(body(out), expected("""
         0)               |  __main__.amain() {
         0)   X.XXX us    |    __main__.step(); /* ret=None */
         0)   X.XXX us    |  } /* __main__.amain ret=None */
         0)               |  __main__.amain() {
         0)   X.XXX us    |    __main__.step(); /* ret=1 */
         0)   X.XXX us    |    __main__.step(); /* ret=None */
         0)   X.XXX us    |  } /* __main__.amain ret=None */
         0)               |  __main__.amain() {
         0)   X.XXX us    |    __main__.step(); /* ret=2 */
         0)   X.XXX us    |  } /* __main__.amain ret=3 */
    """))


THREADS = """
    import threading

    def leaf(x):
        return x + 1

    def mid(x):
        return leaf(x) * 2

    def work(n):
        return mid(n)

    def worker():
        work(5)
        leaf(6)

    def main():
        work(1)
        t = threading.Thread(target=worker, name="worker")
        t.start()
        work(2)
        t.join()
        leaf(3)

    main()
"""


def _by_cpu(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for l in lines:
        m = re.match(r"^ *(\d+)\) ", l)
        assert m, l
        out.setdefault(m.group(1), []).append(l)
    return out


def test_two_threads(tmp_path):
    out = live(tmp_path, THREADS)
    cpus = _by_cpu(body(out))
    assert sorted(cpus) == ["0", "1"]
    # The two threads run at the same time: their lines interleave in time order, but
    # each cpu's own lines are its thread's graph, balanced.
    assert_lines(cpus["0"], expected("""
         0)               |  __main__.main() {
         0)               |    __main__.work() {
         0)               |      __main__.mid() {
         0)   X.XXX us    |        __main__.leaf();
         0)   X.XXX us    |      }
         0)   X.XXX us    |    }
         0)               |    __main__.work() {
         0)               |      __main__.mid() {
         0)   X.XXX us    |        __main__.leaf();
         0)   X.XXX us    |      }
         0)   X.XXX us    |    }
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
    """))
    assert_lines(cpus["1"], expected("""
         1)               |  __main__.worker() {
         1)               |    __main__.work() {
         1)               |      __main__.mid() {
         1)   X.XXX us    |        __main__.leaf();
         1)   X.XXX us    |      }
         1)   X.XXX us    |    }
         1)   X.XXX us    |    __main__.leaf();
         1)   X.XXX us    |  }
    """))


def test_two_threads_with_proc_column(tmp_path):
    out = live(tmp_path, THREADS, "-O", "funcgraph-proc")
    lines = mask_graph(out)
    assert lines[:4] == [
        "# tracer: function_graph",
        "#",
        "# CPU  TASK/PID         DURATION                  FUNCTION CALLS",
        "# |     |    |           |   |                     |   |   |   |",
    ]
    cpus = _by_cpu(lines[4:])
    assert_lines(cpus["1"], expected("""
         1)   worker-PID   |               |  __main__.worker() {
         1)   worker-PID   |               |    __main__.work() {
         1)   worker-PID   |               |      __main__.mid() {
         1)   worker-PID   |   X.XXX us    |        __main__.leaf();
         1)   worker-PID   |   X.XXX us    |      }
         1)   worker-PID   |   X.XXX us    |    }
         1)   worker-PID   |   X.XXX us    |    __main__.leaf();
         1)   worker-PID   |   X.XXX us    |  }
    """))
    assert cpus["0"][0] == " 0) MainThread-PID |               |  __main__.main() {"
    assert all(l.startswith(" 0) MainThread-PID | ") for l in cpus["0"])
    # Every line of a thread carries the same pid.
    raw = _by_cpu([l for l in out.splitlines() if l and not is_header(l)])
    for lines_of_cpu in raw.values():
        pids = {re.match(r"^ *\d+\) +\S+-(\d+) ", l).group(1) for l in lines_of_cpu}
        assert len(pids) == 1


def test_funcgraph_proc_single_thread(tmp_path):
    out = live(tmp_path, NESTED, "-O", "funcgraph-proc")
    assert_lines(body(out)[:4], expected("""
         0) MainThread-PID |               |  __main__.top() {
         0) MainThread-PID |               |    __main__.mid() {
         0) MainThread-PID |   X.XXX us    |      __main__.leaf();
         0) MainThread-PID |   X.XXX us    |    }
    """))
    assert len(body(out)) == 12


GRAPHFN = """
    def leaf(x):
        return x + 1

    def mid(x):
        return leaf(x) * 2

    def other(a, b='x'):
        return mid(a) + leaf(a)

    def unrelated():
        return leaf(0)

    def top():
        mid(1)
        unrelated()
        other(2)
        return 0

    top()
    unrelated()
"""


@pytest.mark.parametrize("opts, want", [
    # Only mid and what it calls; mid is the root of each graph (depth 0).
    pytest.param(["-g", "__main__.mid"], """
         0)               |  __main__.mid() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
         0)               |  __main__.mid() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
    """, id="set_graph_function"),
    pytest.param(["-g", "__main__.other", "-g", "__main__.unrelated"], """
         0)               |  __main__.unrelated() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
         0)               |  __main__.other() {
         0)               |    __main__.mid() {
         0)   X.XXX us    |      __main__.leaf();
         0)   X.XXX us    |    }
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
         0)               |  __main__.unrelated() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
    """, id="set_graph_function_two_functions"),
    pytest.param(["-g", "*.unrel*"], """
         0)               |  __main__.unrelated() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
         0)               |  __main__.unrelated() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
    """, id="set_graph_function_glob"),
    # mid and everything it calls are gone; leaf called from elsewhere stays.
    pytest.param(["--graph-notrace", "__main__.mid"], """
         0)               |  __main__.top() {
         0)               |    __main__.unrelated() {
         0)   X.XXX us    |      __main__.leaf();
         0)   X.XXX us    |    }
         0)               |    __main__.other() {
         0)   X.XXX us    |      __main__.leaf();
         0)   X.XXX us    |    }
         0)   X.XXX us    |  }
         0)               |  __main__.unrelated() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
    """, id="set_graph_notrace"),
    pytest.param(["-g", "__main__.other", "--graph-notrace", "__main__.mid"], """
         0)               |  __main__.other() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
    """, id="set_graph_function_and_notrace"),
    pytest.param(["-D", "1"], """
         0)   X.XXX us    |  __main__.top();
         0)   X.XXX us    |  __main__.unrelated();
    """, id="max_depth_1"),
    pytest.param(["-D", "2"], """
         0)               |  __main__.top() {
         0)   X.XXX us    |    __main__.mid();
         0)   X.XXX us    |    __main__.unrelated();
         0)   X.XXX us    |    __main__.other();
         0)   X.XXX us    |  }
         0)               |  __main__.unrelated() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
    """, id="max_depth_2"),
    # Depth counts from the graph function.
    pytest.param(["-g", "__main__.other", "-D", "2"], """
         0)               |  __main__.other() {
         0)   X.XXX us    |    __main__.mid();
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
    """, id="max_depth_with_graph_function"),
])
def test_graph_function_notrace_and_depth(tmp_path, opts, want):
    """-g (set_graph_function), --graph-notrace (set_graph_notrace) and -D
    (max_graph_depth), alone and together, on one program."""
    assert_lines(body(live(tmp_path, GRAPHFN, *opts)), expected(want))


def test_bad_max_depth_and_thresh_are_usage_errors(tmp_path):
    (tmp_path / "prog.py").write_text("pass\n")
    for opt, val in (("-D", "-1"), ("-D", "x"), ("--thresh", "-5"), ("--thresh", "1.5")):
        r = fntrace_cli("live", *GRAPH, opt, val, "prog.py", cwd=tmp_path)
        assert r.returncode == 2, (opt, val, r.stderr)
        assert r.stderr.startswith("fntrace: ") and len(r.stderr.splitlines()) == 1
        assert r.stdout == ""


THRESH = """
    import time

    def quick(x):
        return x + 1

    def slow():
        time.sleep(0.02)
        return quick(0)

    def top():
        quick(1)
        slow()
        quick(2)
        return 0

    top()
"""

# A return line of one of THRESH's quick functions: only there if it took more than the
# threshold, which a loaded machine can make happen.
_QUICK_RETURN = re.compile(r"^ 0\)   X\.XXX us    \| +\} /\* __main__\.quick \*/$")


def test_tracing_thresh(tmp_path):
    out = live(tmp_path, THRESH, "--thresh", "10000")
    got = body(out)
    # No entries are written with a threshold: only returns, each naming its function.
    assert not [l for l in got if l.endswith("{") or l.endswith(";")], got
    assert_lines([l for l in got if not _QUICK_RETURN.match(l)], expected("""
         0)   X.XXX us    |    } /* __main__.slow */
         0)   X.XXX us    |  } /* __main__.top */
    """))
    # The slow ones carry the mark of a duration above 10 ms.
    raw = [l for l in out.splitlines() if "slow" in l or "top" in l]
    assert all(re.match(r"^ 0\) [*@$] ", l) for l in raw), raw


def test_report_time_depth_and_thresh(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(GRAPHFN))
    r = fntrace_cli("record", *GRAPH, "-o", "g.dat", "prog.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    full = fntrace_cli("report", "g.dat", cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    assert len(body(full.stdout)) == 17
    d2 = fntrace_cli("report", "g.dat", "-D", "2", cwd=tmp_path)
    assert d2.returncode == 0, d2.stderr
    assert mask_graph(d2.stdout)[:4] == GRAPH_HEADER
    # What live -D 2 prints, from the full recording.
    assert_lines(body(d2.stdout), expected("""
         0)               |  __main__.top() {
         0)   X.XXX us    |    __main__.mid();
         0)   X.XXX us    |    __main__.unrelated();
         0)   X.XXX us    |    __main__.other();
         0)   X.XXX us    |  }
         0)               |  __main__.unrelated() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  }
    """))
    d1 = fntrace_cli("report", "g.dat", "-D", "1", cwd=tmp_path)
    assert_lines(body(d1.stdout), expected("""
         0)   X.XXX us    |  __main__.top();
         0)   X.XXX us    |  __main__.unrelated();
    """))
    bad = fntrace_cli("report", "g.dat", "-D", "-3", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""


def test_report_time_options(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(NESTED))
    r = fntrace_cli("record", *GRAPH, "-R", "-o", "g.dat", "prog.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rep = fntrace_cli("report", "g.dat", "-O", "nofuncgraph-retval", "-O", "funcgraph-tail",
                  "-O", "nofuncgraph-cpu", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    lines = mask_graph(rep.stdout)
    assert lines[2] == "#  DURATION                  FUNCTION CALLS"
    assert_lines(lines[4:8], expected("""
                      |  __main__.top() {
                      |    __main__.mid() {
          X.XXX us    |      __main__.leaf();
          X.XXX us    |    } /* __main__.mid */
    """))


def test_args(tmp_path):
    out = live(tmp_path, """
        def va(a, *rest, k=0, **kw):
            return a

        def other(a, b='x'):
            return a

        def none():
            return 0

        def top():
            other(1, b='x')
            other(2)
            va(1, 2, 3, k=4, z=5)
            none()

        top()
    """, "-A")
    assert_lines(body(out), expected("""
         0)               |  __main__.top() {
         0)   X.XXX us    |    __main__.other(a=1, b='x');
         0)   X.XXX us    |    __main__.other(a=2, b='x');
         0)   X.XXX us    |    __main__.va(a=1, rest=(2, 3), k=4, kw={'z': 5});
         0)   X.XXX us    |    __main__.none();
         0)   X.XXX us    |  }
    """))


RETVALS = """
    def zero(): return 0
    def big(): return 1 << 40
    def neg(): return -22
    def edge(): return -4095
    def past_edge(): return -4096
    def text(): return 'x'
    def nothing(): return None
    def flag(): return True
    def fl(): return 3.5

    def top():
        for f in (zero, big, neg, edge, past_edge, text, nothing, flag, fl):
            f()
        return -5

    top()
"""


def test_retval(tmp_path):
    out = live(tmp_path, RETVALS, "-R")
    # A Python value is shown as its repr: ints in decimal (hex only with
    # funcgraph-retval-hex), anything else as a short repr.
    assert_lines(body(out), expected("""
         0)               |  __main__.top() {
         0)   X.XXX us    |    __main__.zero(); /* ret=0 */
         0)   X.XXX us    |    __main__.big(); /* ret=1099511627776 */
         0)   X.XXX us    |    __main__.neg(); /* ret=-22 */
         0)   X.XXX us    |    __main__.edge(); /* ret=-4095 */
         0)   X.XXX us    |    __main__.past_edge(); /* ret=-4096 */
         0)   X.XXX us    |    __main__.text(); /* ret='x' */
         0)   X.XXX us    |    __main__.nothing(); /* ret=None */
         0)   X.XXX us    |    __main__.flag(); /* ret=True */
         0)   X.XXX us    |    __main__.fl(); /* ret=3.5 */
         0)   X.XXX us    |  } /* __main__.top ret=-5 */
    """))


def test_retval_hex(tmp_path):
    out = live(tmp_path, RETVALS, "-R", "-O", "funcgraph-retval-hex")
    got = body(out)
    assert got[3] == " 0)   X.XXX us    |    __main__.neg(); /* ret=0xffffffffffffffea */"
    assert got[4] == " 0)   X.XXX us    |    __main__.edge(); /* ret=0xfffffffffffff001 */"
    assert got[-1] == " 0)   X.XXX us    |  } /* __main__.top ret=0xfffffffffffffffb */"
    assert got[1] == " 0)   X.XXX us    |    __main__.zero(); /* ret=0x0 */"
    assert got[6] == " 0)   X.XXX us    |    __main__.text(); /* ret='x' */"


def test_retval_off_at_report_time(tmp_path):
    out = live(tmp_path, RETVALS, "-R", "-O", "nofuncgraph-retval")
    assert_lines(body(out)[:3], expected("""
         0)               |  __main__.top() {
         0)   X.XXX us    |    __main__.zero();
         0)   X.XXX us    |    __main__.big();
    """))
    assert body(out)[-1] == " 0)   X.XXX us    |  }"


def test_funcgraph_tail(tmp_path):
    out = live(tmp_path, NESTED, "-O", "funcgraph-tail")
    assert_lines(body(out), expected("""
         0)               |  __main__.top() {
         0)               |    __main__.mid() {
         0)   X.XXX us    |      __main__.leaf();
         0)   X.XXX us    |    } /* __main__.mid */
         0)   X.XXX us    |    __main__.leaf();
         0)               |    __main__.other() {
         0)   X.XXX us    |      __main__.leaf();
         0)   X.XXX us    |    } /* __main__.other */
         0)   X.XXX us    |  } /* __main__.top */
         0)               |  __main__.mid() {
         0)   X.XXX us    |    __main__.leaf();
         0)   X.XXX us    |  } /* __main__.mid */
    """))


def test_nofuncgraph_cpu(tmp_path):
    out = live(tmp_path, NESTED, "-O", "nofuncgraph-cpu")
    lines = mask_graph(out)
    assert lines[:4] == [
        "# tracer: function_graph",
        "#",
        "#  DURATION                  FUNCTION CALLS",
        "#   |   |                     |   |   |   |",
    ]
    assert_lines(lines[4:8], expected("""
                      |  __main__.top() {
                      |    __main__.mid() {
          X.XXX us    |      __main__.leaf();
          X.XXX us    |    }
    """))
    assert len(lines) == 16


def test_same_output_with_and_without_other_options(tmp_path):
    """-A and -R only add to the lines; the graph is the same."""
    plain = body(live(tmp_path, NESTED))
    rich = body(live(tmp_path, NESTED, "-A", "-R"))
    strip = [re.sub(r"\(.*?\)", "()", re.sub(r" /\* .* \*/$", "", l)) for l in rich]
    assert strip == plain


# ---------------------------------------------------------------------------------
# tracefs, in process
# ---------------------------------------------------------------------------------

FSMOD = """
    def a1():
        return a2() + 1

    def a2():
        return 1

    def b1():
        return a2()

    def schedule():
        return helper() + 1

    def helper():
        return 0

    def work():
        a1()
        schedule()
        b1()
        schedule()
"""


def _cpu_normalised(lines: list[str]) -> list[str]:
    """In process the calling thread's cpu is whatever number it got first: check it
    and write it as 0."""
    cpu = thread_cpu()
    out = []
    for l in lines:
        m = re.match(r"^ (\d+)\) ", l)
        if m:
            assert int(m.group(1)) == cpu, l
            l = " 0) " + l[m.end():]
        out.append(l)
    return out


def graph_text(text: str) -> list[str]:
    return _cpu_normalised(mask_graph(text))


def test_tracefs_trace_and_trace_pipe(fs, make_module):
    m = make_module(FSMOD, hint="fsg")
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.a* {n}.b*")
    fs.write("current_tracer", "function_graph")
    assert fs.read("current_tracer") == "function_graph\n"
    m.a1()
    m.b1()
    m.schedule()            # not in the filter
    want = GRAPH_HEADER + expected(f"""
         0)               |  {n}.a1() {{
         0)   X.XXX us    |    {n}.a2();
         0)   X.XXX us    |  }}
         0)               |  {n}.b1() {{
         0)   X.XXX us    |    {n}.a2();
         0)   X.XXX us    |  }}
    """)
    assert_lines(graph_text(fs.read("trace")), want)
    # trace is not consumed; trace_pipe is (and has no header).
    assert_lines(graph_text(fs.read("trace")), want)
    assert_lines(graph_text(fs.read("trace_pipe")), want[4:])
    assert fs.read("trace_pipe") == ""
    assert graph_text(fs.read("trace")) == GRAPH_HEADER
    m.a2()
    assert_lines(graph_text(fs.read("trace_pipe")), [f" 0)   X.XXX us    |  {n}.a2();"])
    assert shadow_stack().frames == []


def test_tracefs_clear_and_tracing_on(fs, make_module):
    m = make_module(FSMOD, hint="fsg")
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.a2")
    fs.write("current_tracer", "function_graph")
    m.a2()
    fs.write("trace", "")
    assert graph_text(fs.read("trace")) == GRAPH_HEADER
    fs.write("tracing_on", "0")
    m.a2()
    assert graph_text(fs.read("trace")) == GRAPH_HEADER
    fs.write("tracing_on", "1")
    m.a2()
    assert graph_text(fs.read("trace"))[4:] == [f" 0)   X.XXX us    |  {n}.a2();"]


def test_tracefs_options(fs, make_module):
    m = make_module(FSMOD, hint="fsg")
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.b1 {n}.a2")
    fs.write("current_tracer", "function_graph")
    fs.write("options/funcgraph-retval", "1")
    fs.write("options/funcgraph-tail", "1")
    fs.write("trace_options", "nofuncgraph-cpu")
    assert fs.read("options/funcgraph-cpu") == "0\n"
    m.b1()
    assert_lines(graph_text(fs.read("trace"))[4:], expected(f"""
                      |  {n}.b1() {{
          X.XXX us    |    {n}.a2(); /* ret=1 */
          X.XXX us    |  }} /* {n}.b1 ret=1 */
    """))


def test_tracefs_set_graph_function(fs, make_module):
    m = make_module(FSMOD, hint="fsg")
    n = m.__name__
    fs.write("set_ftrace_filter", f"*:mod:{n}")
    fs.write("set_graph_function", f"{n}.schedule")
    assert fs.read("set_graph_function") == f"{n}.schedule\n"
    fs.write("current_tracer", "function_graph")
    m.work()
    m.a1()
    assert_lines(graph_text(fs.read("trace"))[4:], expected(f"""
         0)               |  {n}.schedule() {{
         0)   X.XXX us    |    {n}.helper();
         0)   X.XXX us    |  }}
         0)               |  {n}.schedule() {{
         0)   X.XXX us    |    {n}.helper();
         0)   X.XXX us    |  }}
    """))
    # Changed while the tracer runs.
    fs.write("trace", "")
    fs.write("set_graph_function", f"{n}.b1")
    m.work()
    assert_lines(graph_text(fs.read("trace"))[4:], expected(f"""
         0)               |  {n}.b1() {{
         0)   X.XXX us    |    {n}.a2();
         0)   X.XXX us    |  }}
    """))
    # Appending adds a function; an empty write graphs everything again.
    fs.write("trace", "")
    fs.write("set_graph_function", f"{n}.a1", append=True)
    assert sorted(fs.read("set_graph_function").split()) == sorted([f"{n}.a1", f"{n}.b1"])
    m.a1()
    m.b1()
    m.helper()
    assert len(graph_text(fs.read("trace"))[4:]) == 6
    fs.write("set_graph_function", "")
    assert fs.read("set_graph_function") == "#### all functions enabled ####\n"
    fs.write("trace", "")
    m.helper()
    assert graph_text(fs.read("trace"))[4:] == [f" 0)   X.XXX us    |  {n}.helper();"]
    assert shadow_stack().frames == []


def test_tracefs_set_graph_function_before_filter_is_lazy_but_complete(fs, make_module):
    """set_graph_function before the tracer starts: callees are still graphed."""
    m = make_module(FSMOD, hint="fsg")
    n = m.__name__
    fs.write("set_graph_function", f"{n}.a1")
    fs.write("set_ftrace_filter", f"*:mod:{n}")
    fs.write("current_tracer", "function_graph")
    m.b1()
    m.a1()
    m.a1()
    assert_lines(graph_text(fs.read("trace"))[4:], expected(f"""
         0)               |  {n}.a1() {{
         0)   X.XXX us    |    {n}.a2();
         0)   X.XXX us    |  }}
         0)               |  {n}.a1() {{
         0)   X.XXX us    |    {n}.a2();
         0)   X.XXX us    |  }}
    """))


def test_tracefs_set_graph_notrace(fs, make_module):
    m = make_module(FSMOD, hint="fsg")
    n = m.__name__
    fs.write("set_ftrace_filter", f"*:mod:{n}")
    fs.write("set_graph_notrace", f"{n}.schedule {n}.a1")
    fs.write("current_tracer", "function_graph")
    m.work()
    assert_lines(graph_text(fs.read("trace"))[4:], expected(f"""
         0)               |  {n}.work() {{
         0)               |    {n}.b1() {{
         0)   X.XXX us    |      {n}.a2();
         0)   X.XXX us    |    }}
         0)   X.XXX us    |  }}
    """))


def test_tracefs_max_graph_depth_and_thresh(fs, make_module):
    m = make_module(FSMOD, hint="fsg")
    n = m.__name__
    fs.write("set_ftrace_filter", f"*:mod:{n}")
    fs.write("max_graph_depth", "2")
    assert fs.read("max_graph_depth") == "2\n"
    fs.write("current_tracer", "function_graph")
    m.work()
    assert_lines(graph_text(fs.read("trace"))[4:], expected(f"""
         0)               |  {n}.work() {{
         0)   X.XXX us    |    {n}.a1();
         0)   X.XXX us    |    {n}.schedule();
         0)   X.XXX us    |    {n}.b1();
         0)   X.XXX us    |    {n}.schedule();
         0)   X.XXX us    |  }}
    """))
    fs.write("max_graph_depth", "0")
    fs.write("tracing_thresh", "100000000")       # 100 s: nothing is that slow
    assert fs.read("tracing_thresh") == "100000000\n"
    fs.write("trace", "")
    m.work()
    assert graph_text(fs.read("trace")) == GRAPH_HEADER
    fs.write("tracing_thresh", "0")
    m.a2()
    assert graph_text(fs.read("trace"))[4:] == [f" 0)   X.XXX us    |  {n}.a2();"]


@pytest.mark.parametrize("path, good, bad", [
    ("max_graph_depth", "3", "x"),
    ("max_graph_depth", "3", "-1"),
    ("max_graph_depth", "3", "1.5"),
    ("tracing_thresh", "250", "abc"),
    ("tracing_thresh", "250", "-4"),
])
def test_tracefs_bad_numbers_are_refused(fs, path, good, bad):
    fs.write(path, good)
    fs.write("error_log", "")
    with pytest.raises(FntraceError) as ei:
        fs.write(path, bad)
    assert ei.value.errno == 22
    assert fs.read(path) == f"{good}\n"
    log = fs.read("error_log")
    assert f"{path}: error: " in log
    assert f"  Command: {bad}\n" in log
    assert log.count("Command:") == 1


def test_tracefs_bad_graph_function_is_refused(fs, make_module):
    m = make_module(FSMOD, hint="fsg")
    n = m.__name__
    for path in ("set_graph_function", "set_graph_notrace"):
        fs.write(path, f"{n}.b1")
        fs.write("error_log", "")
        with pytest.raises(FilterError) as ei:
            fs.write(path, f"{n}.no_such_function")
        assert ei.value.errno == 22
        assert fs.read(path) == f"{n}.b1\n"
        log = fs.read("error_log")
        assert f"  Command: {n}.no_such_function\n" in log
        with pytest.raises(FilterError):
            fs.write(path, f"{n}.also_missing", append=True)
        assert fs.read(path) == f"{n}.b1\n"
        fs.write(path, "")


def test_fgraph_filter_tc(fs, make_module):
    """fgraph-filter.tc: with set_ftrace_filter = one function, every line of the graph
    that names a function names that one, and it is there."""
    m = make_module(FSMOD, hint="fsg")
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.schedule")
    fs.write("current_tracer", "function_graph")
    for _ in range(3):
        m.work()
    fs.write("tracing_on", "0")
    text = fs.read("trace")
    named = [l for l in text.splitlines() if "()" in l]
    assert named
    assert all(f"{n}.schedule" in l for l in named), named
    assert any(f"{n}.schedule();" in l for l in named)


def test_fgraph_retval_tc(fs, make_module):
    """fgraph-retval.tc: a function failing with -EIO shows ``=-5`` with funcgraph-retval,
    and ``fffffffb`` with funcgraph-retval-hex as well."""
    m = make_module("""
        def proc_reg_write(buf):
            if not buf:
                return -5
            return len(buf)

        def write_interrupts():
            return proc_reg_write("")
    """, hint="fsretval")
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.proc_reg_write")
    fs.write("current_tracer", "function_graph")
    fs.write("options/funcgraph-retval", "1")
    assert m.write_interrupts() == -5
    text = fs.read("trace")
    assert "=-5" in text
    assert_lines(graph_text(text)[4:],
                 [f" 0)   X.XXX us    |  {n}.proc_reg_write(); /* ret=-5 */"])
    fs.write("options/funcgraph-retval-hex", "1")
    assert "fffffffb" in fs.read("trace")
    assert "=-5" not in fs.read("trace")
    # Printing options apply when the trace is read: turning retval off hides it.
    fs.write("options/funcgraph-retval", "0")
    assert graph_text(fs.read("trace"))[4:] == [f" 0)   X.XXX us    |  {n}.proc_reg_write();"]


MULTI = """
    def sched_a():
        return sched_b() + 1

    def sched_b():
        return 1

    def lock_a():
        return lock_b() + 1

    def lock_b():
        return 2

    def rcu_a():
        return rcu_b() + 1

    def rcu_b():
        return 3

    def run():
        for f in (sched_a, lock_a, rcu_a):
            f()
        return lock_b() + sched_b() + rcu_b()
"""


def test_fgraph_multi_tc(make_module):
    """fgraph-multi.tc: three instances running function_graph at once, each with its
    own set_ftrace_filter, each get only their own functions."""
    m = make_module(MULTI, hint="fsmulti")
    n = m.__name__
    dirs = {"sched": Tracefs(), "lock": Tracefs(), "rcu": Tracefs(), "all": Tracefs()}
    try:
        for key, d in dirs.items():
            d.write("set_ftrace_filter", f"*:mod:{n}" if key == "all" else f"{n}.*{key}*")
            d.write("current_tracer", "function_graph")
        for _ in range(2):
            m.run()
        for d in dirs.values():
            d.write("tracing_on", "0")
        for key, d in dirs.items():
            lines = [l for l in graph_text(d.read("trace")) if not is_header(l)]
            named = [l for l in lines if "{" in l or ";" in l]
            assert named, key
            if key != "all":
                assert all(f".{key}_" in l for l in named), (key, lines)
                # Both functions of the group, nested; the depth is the shadow stack's,
                # which every graph user shares (run() is on it for the "all" one).
                shape = [l.split("|  ", 1)[1].strip() for l in lines]
                assert shape == [f"{n}.{key}_a() {{", f"{n}.{key}_b();", "}",
                                 f"{n}.{key}_b();"] * 2, (key, lines)
            else:
                assert len(lines) == 2 * 14, lines
        assert shadow_stack().frames == []
    finally:
        for d in dirs.values():
            d.write("current_tracer", "nop")
