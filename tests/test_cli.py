"""The ``fntrace`` command, driven in subprocesses (trace-cmd record / report habits,
the function tracer's text format of ftrace.rst "Output format").

A traced program must behave as under plain ``python`` (its stdout, stdin, sys.argv,
exit status and tracebacks), ``record`` + ``report`` and ``live`` must print the
kernel's function-tracer header and ``func <-parent`` lines, ``-F``/``-N`` follow the
set_ftrace_filter grammar (and may name modules the program imports later), ``ls``
lists available_filter_functions for a target, and every bad input gives a one-line
``fntrace: ...`` error and a non-zero status, never a traceback.
"""
from __future__ import annotations

import re
import subprocess

import pytest

from support import (
    EXAMPLES, FUNCTION_HEADER_TAIL, fn_lines, fntrace_cli, header_counts, mask_line, run_python,
)

SHOP_DEMO = EXAMPLES / "shop_demo.py"


def assert_one_line_error(r: subprocess.CompletedProcess) -> None:
    assert r.returncode != 0, r
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fntrace: "), r.stderr
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout


def funcs(text: str) -> list[tuple[str, str | None]]:
    return [(p.func, p.parent) for p in fn_lines(text)]


# ---------------------------------------------------------------------------------
# The shop demo: record, report, live
# ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shop_record(tmp_path_factory):
    """The demo run plainly and under ``fntrace record``, and its report."""
    d = tmp_path_factory.mktemp("shop")
    plain = run_python(SHOP_DEMO, cwd=d)
    dat = d / "shop.dat"
    rec = fntrace_cli("record", "-o", dat, SHOP_DEMO, cwd=d)
    rep = fntrace_cli("report", dat, cwd=d)
    return plain, rec, rep


def test_record_leaves_program_output_unchanged(shop_record):
    plain, rec, _ = shop_record
    assert plain.returncode == 0
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout == plain.stdout
    assert rec.stderr == ""


def test_report_header_is_the_function_tracer_header(shop_record):
    _, _, rep = shop_record
    assert rep.returncode == 0, rep.stderr
    lines = rep.stdout.splitlines()
    assert lines[0] == "# tracer: function"
    assert lines[1] == "#"
    assert re.fullmatch(r"# entries-in-buffer/entries-written: \d+/\d+   #P:2", lines[2]), lines[2]
    assert lines[3] == "#"
    assert lines[4:6] == FUNCTION_HEADER_TAIL
    entries, written, _ = header_counts(rep.stdout)
    assert entries == written                     # record mode loses nothing
    assert entries == len(fn_lines(rep.stdout))
    assert all(line.startswith("#") or fn_lines(line) for line in lines), \
        [line for line in lines if not line.startswith("#") and not fn_lines(line)][:3]


def test_report_has_the_demo_calls_with_their_callers(shop_record):
    _, _, rep = shop_record
    lines = fn_lines(rep.stdout)
    main_thread = [(p.func, p.parent) for p in lines if p.cpu == 0]
    assert main_thread.count(("shop.cart.Cart.add_item", "__main__.fill_cart")) == 3
    assert main_thread.count(("__main__.fill_cart", "__main__.main")) == 1
    assert ("shop.catalog.load_catalog", "__main__.main") in main_thread
    assert ("__main__.print_receipt", "__main__.main") in main_thread
    assert ("shop.cart.Cart.receipt_lines.<locals>.format_line",
            "shop.cart.Cart.receipt_lines") in main_thread


def test_report_has_the_worker_thread_on_its_own_cpu(shop_record):
    _, _, rep = shop_record
    lines = fn_lines(rep.stdout)
    assert {p.cpu for p in lines} == {0, 1}
    worker = [(p.func, p.parent) for p in lines if p.cpu == 1]
    assert ("__main__.price_in_worker", "threading.Thread.run") in worker
    assert ("shop.pricing.price_cart", "__main__.price_in_worker") in worker
    assert ("shop.pricing.bundle_price", "shop.pricing.bundle_price") in worker
    assert not [p for p in lines if p.cpu == 0 and p.func == "shop.pricing.price_cart"]
    # Each cpu's lines are in time order.
    for cpu in (0, 1):
        ts = [float(p.ts) for p in lines if p.cpu == cpu]
        assert ts == sorted(ts)


def test_report_names_threads_by_their_names(shop_record):
    # TASK is the thread's name (the kernel's comm): the worker is "pricing".
    _, _, rep = shop_record
    lines = fn_lines(rep.stdout)
    assert {p.comm for p in lines if p.cpu == 0} == {"MainThread"}
    assert {p.comm for p in lines if p.cpu == 1} == {"pricing"}
    assert len({p.pid for p in lines if p.cpu == 0}) == 1
    assert len({p.pid for p in lines if p.cpu == 1}) == 1


def test_report_has_no_calls_made_by_fntrace_itself(shop_record):
    _, _, rep = shop_record
    own = [p for p in fn_lines(rep.stdout)
           if p.func.startswith("fntrace.") or (p.parent or "").startswith("fntrace.")]
    assert own == [], own[:5]


def test_tracing_threads_does_not_change_their_names(tmp_script, run_fntrace):
    # Tracing every function (threading's included) must not be visible to the
    # program: unnamed threads keep the names python gives them.
    prog = tmp_script("""
        import threading

        def work():
            pass

        for _ in range(3):
            t = threading.Thread(target=work)
            t.start()
            t.join()
            print(t.name)
    """)
    plain = run_python(prog, cwd=prog.parent)
    r = run_fntrace("record", "-o", "t.dat", prog)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout


def test_every_short_thread_is_in_the_file_and_named(tmp_script, run_fntrace):
    """A thread per task (a server's thread per request): each ended thread's last
    records wait for the writer's next wake, and every one of them reaches the file
    with its thread's name, the last ones written at the end."""
    prog = tmp_script("""
        import threading

        def work(i):
            return i + 1

        for i in range(300):
            t = threading.Thread(target=work, args=(i,), name=f"req{i}")
            t.start()
            t.join()
    """)
    r = run_fntrace("record", "-p", "function_graph", "-F", "__main__.work", "-o", "t.dat",
                    prog)
    assert r.returncode == 0, r.stderr
    rep = run_fntrace("report", "t.dat", "-O", "funcgraph-proc")
    assert rep.returncode == 0, rep.stderr
    calls = [line for line in rep.stdout.splitlines() if "__main__.work();" in line]
    assert len(calls) == 300
    assert {re.search(r"req\d+", c).group() for c in calls} == {f"req{i}" for i in range(300)}
    stat = run_fntrace("stat", "t.dat")
    assert re.search(r"__main__\.work\s+300\s", stat.stdout), stat.stdout


def test_live_records_and_reports(tmp_path, run_fntrace):
    plain = run_python(SHOP_DEMO, cwd=tmp_path)
    r = run_fntrace("live", "-F", "shop.cart.*", SHOP_DEMO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(plain.stdout)
    report = r.stdout[len(plain.stdout):]
    assert report.startswith("# tracer: function\n")
    got = funcs(report)
    assert got.count(("shop.cart.Cart.add_item", "__main__.fill_cart")) == 3
    assert all(f.startswith("shop.cart.") for f, _ in got)
    assert header_counts(report)[0] == len(got)


def test_report_reads_fntrace_dat_by_default(tmp_script, run_fntrace):
    prog = tmp_script("""
        def hello():
            return 1
        hello()
    """)
    r = run_fntrace("record", "-F", "*:mod:__main__", prog)
    assert r.returncode == 0, r.stderr
    assert (prog.parent / "fntrace.dat").exists()
    rep = run_fntrace("report")
    assert rep.returncode == 0, rep.stderr
    assert funcs(rep.stdout) == [("__main__.hello", "__main__.<module>")]


def test_program_calling_nothing_has_an_empty_trace(run_fntrace):
    # Nothing fntrace does to start and stop the program may show up in its trace.
    r = run_fntrace("live", "-c", "x = 1")
    assert r.returncode == 0, r.stderr
    assert header_counts(r.stdout)[:2] == (0, 0), r.stdout[:3000]
    assert fn_lines(r.stdout) == []


# ---------------------------------------------------------------------------------
# -F / -N
# ---------------------------------------------------------------------------------

SCRIPT = """
    import sys

    def helper(x):
        return x + 1

    def main():
        print(helper(1))
        import json
        print(json.dumps({"a": 1}))
        import latemod
        print(latemod.work(2))

    main()
"""

LATEMOD = """
    def work(n):
        return inner(n) * 2

    def inner(n):
        return n
"""


@pytest.fixture
def script(tmp_script):
    tmp_script(LATEMOD, "latemod.py")
    return tmp_script(SCRIPT)


SCRIPT_OUT = '2\n{"a": 1}\n4\n'


def test_filter_mod_main_traces_the_script_functions(script, run_fntrace):
    r = run_fntrace("live", "-F", "*:mod:__main__", script)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(SCRIPT_OUT)
    assert funcs(r.stdout) == [("__main__.main", "__main__.<module>"),
                               ("__main__.helper", "__main__.main")]
    assert r.stderr == ""


def test_filter_on_json(script, run_fntrace):
    r = run_fntrace("live", "-F", "json.*", script)
    assert r.returncode == 0, r.stderr
    got = funcs(r.stdout)
    assert ("json.dumps", "__main__.main") in got
    assert all(f.startswith("json.") for f, _ in got)


def test_filter_on_a_module_imported_later(script, run_fntrace):
    r = run_fntrace("live", "-F", "latemod.*", script)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(SCRIPT_OUT)
    assert funcs(r.stdout) == [("latemod.work", "__main__.main"),
                               ("latemod.inner", "latemod.work")]
    assert r.stderr == ""


def test_several_filters_add_up(script, run_fntrace):
    r = run_fntrace("live", "-F", "latemod.inner", "-F", "__main__.helper", script)
    assert r.returncode == 0, r.stderr
    assert funcs(r.stdout) == [("__main__.helper", "__main__.main"),
                               ("latemod.inner", "latemod.work")]


def test_filter_that_never_matches_is_reported(script, run_fntrace):
    # A module nobody can find now may still appear (the program may put it on
    # sys.path): kept, with a warning before the run and a report at the end.
    r = run_fntrace("live", "-F", "zzq_not_a_module.*", script)
    assert r.returncode == 0
    assert r.stdout.startswith(SCRIPT_OUT)
    lines = r.stderr.splitlines()
    assert lines[0].startswith("fntrace: -F 'zzq_not_a_module.*': no function matches yet")
    assert "fntrace: filter 'zzq_not_a_module.*' matched no function" in lines
    assert fn_lines(r.stdout) == []


def test_notrace_excludes_a_script_function(script, run_fntrace):
    r = run_fntrace("live", "-F", "*:mod:__main__", "-N", "__main__.helper", script)
    assert r.returncode == 0, r.stderr
    assert funcs(r.stdout) == [("__main__.main", "__main__.<module>")]


def test_notrace_glob_also_excludes_functions_loaded_later(script, run_fntrace):
    # '*helper' already matches functions of modules fntrace has loaded; it must
    # still exclude the script's own helper, loaded when the program starts.
    r = run_fntrace("live", "-F", "*:mod:__main__", "-N", "*helper", script)
    assert r.returncode == 0, r.stderr
    assert funcs(r.stdout) == [("__main__.main", "__main__.<module>")]


def test_filter_glob_also_selects_functions_loaded_later(script, run_fntrace):
    r = run_fntrace("live", "-F", "*work", script)
    assert r.returncode == 0, r.stderr
    assert ("latemod.work", "__main__.main") in funcs(r.stdout)


def test_notrace_on_a_module_imported_later(script, run_fntrace):
    r = run_fntrace("live", "-F", "latemod.*", "-N", "latemod.inner", script)
    assert r.returncode == 0, r.stderr
    assert funcs(r.stdout) == [("latemod.work", "__main__.main")]


# ---------------------------------------------------------------------------------
# The program sees what plain python gives it
# ---------------------------------------------------------------------------------

ARGV = ["a", "b c", "--flag", "-o", "x", "-F"]


def test_script_argv(tmp_script, run_fntrace):
    prog = tmp_script("import sys\nprint(sys.argv)\n")
    plain = run_python(prog.name, *ARGV, cwd=prog.parent)
    r = run_fntrace("record", "-o", "t.dat", prog.name, *ARGV, cwd=prog.parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout
    assert r.stdout == repr([prog.name, *ARGV]) + "\n"


def test_script_sees_its_directory_as_sys_path0(tmp_script, tmp_path, run_fntrace):
    prog = tmp_script("import sys, os\nprint(os.path.realpath(sys.path[0]))\n",
                      "sub/prog.py")
    plain = run_python(prog, cwd=tmp_path)
    r = run_fntrace("record", "-o", "t.dat", prog)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout
    assert r.stdout.strip() == str(prog.parent.resolve())


def test_module_target(tmp_path, run_fntrace):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "work.py").write_text("def job(n):\n    return n * 3\n")
    (pkg / "__main__.py").write_text(
        "import sys\nfrom mypkg.work import job\nprint(sys.argv, __name__, job(2))\n")
    plain = run_python("-m", "mypkg", "q", "r s", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    r = run_fntrace("live", "-F", "mypkg.*", "-m", "mypkg", "q", "r s", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(plain.stdout)
    # The module -m runs is named after itself (mypkg.__main__), as its __spec__ says.
    assert funcs(r.stdout[len(plain.stdout):]) == [("mypkg.work.job", "mypkg.__main__.<module>")]


def test_code_target(tmp_path, run_fntrace):
    code = "import sys\ndef f():\n    return 5\nprint(sys.argv, f())"
    plain = run_python("-c", code, "a", "b", cwd=tmp_path)
    r = run_fntrace("live", "-F", "*:mod:__main__", "-c", code, "a", "b")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(plain.stdout)
    assert plain.stdout == "['-c', 'a', 'b'] 5\n"
    assert funcs(r.stdout[len(plain.stdout):]) == [("__main__.f", "__main__.<module>")]


@pytest.mark.parametrize("source,status", [
    ("print('done')\n", 0),
    ("import sys\nsys.exit(3)\n", 3),
    ("import sys\nsys.exit(0)\n", 0),
    ("raise SystemExit(256 + 7)\n", 7),
])
def test_exit_status_is_the_programs(tmp_script, run_fntrace, source, status):
    prog = tmp_script(source)
    plain = run_python(prog, cwd=prog.parent)
    assert plain.returncode == status
    r = run_fntrace("record", "-o", "t.dat", prog)
    assert r.returncode == status, r.stderr
    assert r.stdout == plain.stdout
    assert r.stderr == plain.stderr


def test_exit_with_a_message(tmp_script, run_fntrace):
    prog = tmp_script("import sys\nsys.exit('giving up')\n")
    r = run_fntrace("record", "-o", "t.dat", prog)
    assert r.returncode == 1
    assert r.stderr == "giving up\n"


def test_uncaught_exception_traceback_is_the_programs(tmp_script, run_fntrace):
    prog = tmp_script("""
        def inner():
            return {}["missing"]

        def outer():
            return inner()

        outer()
    """)
    plain = run_python(prog, cwd=prog.parent)
    r = run_fntrace("record", "-o", "t.dat", prog)
    assert r.returncode == 1
    assert r.stderr.startswith("Traceback (most recent call last):")
    assert "KeyError: 'missing'" in r.stderr
    assert "fntrace" not in r.stderr.replace(str(prog), "")
    assert r.stderr == plain.stderr


def test_uncaught_exception_in_a_traced_function_with_live(tmp_script, run_fntrace):
    prog = tmp_script("""
        def boom():
            raise ValueError("bad")

        boom()
    """)
    r = run_fntrace("live", "-F", "*:mod:__main__", prog)
    assert r.returncode == 1
    assert "ValueError: bad" in r.stderr
    assert funcs(r.stdout) == [("__main__.boom", "__main__.<module>")]


def test_stdin_is_passed_through(tmp_script, run_fntrace):
    prog = tmp_script("a = input()\nb = input()\nprint('got', a, b)\n")
    r = run_fntrace("record", "-o", "t.dat", prog, input="first\nsecond\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "got first second\n"


# ---------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------

def test_unknown_tracer(tmp_script, run_fntrace):
    prog = tmp_script("print('should not run')\n")
    r = run_fntrace("record", "-o", "t.dat", "-p", "nosuch", prog)
    assert_one_line_error(r)
    assert "should not run" not in r.stdout


def test_missing_script(run_fntrace):
    assert_one_line_error(run_fntrace("record", "-o", "t.dat", "no_such_script.py"))
    assert_one_line_error(run_fntrace("live", "no_such_script.py"))


def test_no_program(run_fntrace):
    assert_one_line_error(run_fntrace("record", "-o", "t.dat"))


def test_syntax_error_in_script(tmp_script, run_fntrace):
    prog = tmp_script("def f(:\n")
    assert_one_line_error(run_fntrace("record", "-o", "t.dat", prog))


def test_missing_module(run_fntrace):
    assert_one_line_error(run_fntrace("record", "-o", "t.dat", "-m", "no_such_module_xyz"))


@pytest.mark.parametrize("bad", ["0", "-1", "abc"])
def test_bad_buffer_size(tmp_script, run_fntrace, bad):
    prog = tmp_script("print('should not run')\n")
    r = run_fntrace("record", "-o", "t.dat", "-b", bad, prog)
    assert_one_line_error(r)
    assert "should not run" not in r.stdout


def test_bad_filter_pattern(tmp_script, run_fntrace):
    prog = tmp_script("print('should not run')\n")
    r = run_fntrace("record", "-o", "t.dat", "-F", "12abc", prog)
    assert_one_line_error(r)


def test_report_of_a_missing_file(run_fntrace):
    assert_one_line_error(run_fntrace("report", "no_such_file.dat"))


def test_report_of_a_garbage_file(tmp_path, run_fntrace):
    (tmp_path / "garbage.dat").write_bytes(bytes(range(256)) * 8)
    assert_one_line_error(run_fntrace("report", "garbage.dat"))
    (tmp_path / "empty.dat").write_bytes(b"")
    assert_one_line_error(run_fntrace("report", "empty.dat"))


def test_report_unknown_option(tmp_script, run_fntrace):
    prog = tmp_script("pass\n")
    assert run_fntrace("record", "-o", "t.dat", prog).returncode == 0
    assert_one_line_error(run_fntrace("report", "-O", "no-such-option", "t.dat"))


@pytest.fixture
def long_trace(tmp_script, run_fntrace):
    """A trace file of many small chunks (4 KB buffer: 128 records each) and its
    full report."""
    prog = tmp_script("""
        def tick(i):
            return i

        for i in range(3000):
            tick(i)
    """)
    r = run_fntrace("record", "-o", "full.dat", "-b", "4", "-F", "__main__.tick", prog)
    assert r.returncode == 0, r.stderr
    dat = prog.parent / "full.dat"
    full = run_fntrace("report", "full.dat")
    assert full.returncode == 0, full.stderr
    assert len(fn_lines(full.stdout)) == 3000
    return dat, full.stdout


@pytest.mark.parametrize("cut_at", [0.4, 0.8])
def test_report_of_a_file_cut_in_the_middle(long_trace, run_fntrace, cut_at):
    # The records are most of the file, in ~24 blocks: cutting at 40% or 80% of it
    # lands inside them, in the middle of a block.
    dat, full = long_trace
    data = dat.read_bytes()
    (dat.parent / "cut.dat").write_bytes(data[: int(len(data) * cut_at) + 3])
    r = run_fntrace("report", "cut.dat")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fntrace: "), r.stderr
    assert r.stdout.startswith("# tracer: function\n")
    body = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    full_body = [line for line in full.splitlines() if not line.startswith("#")]
    assert 0 < len(body) < len(full_body)
    assert body == full_body[:len(body)]


def test_report_of_a_file_cut_inside_the_header(long_trace, run_fntrace):
    dat, _ = long_trace
    (dat.parent / "cut.dat").write_bytes(dat.read_bytes()[:30])
    assert_one_line_error(run_fntrace("report", "cut.dat"))


# ---------------------------------------------------------------------------------
# report options, ls
# ---------------------------------------------------------------------------------

def test_report_noprint_parent(script, run_fntrace):
    assert run_fntrace("record", "-o", "t.dat", "-F", "*:mod:__main__", script).returncode == 0
    with_parent = run_fntrace("report", "t.dat")
    r = run_fntrace("report", "-O", "noprint-parent", "t.dat")
    assert r.returncode == 0, r.stderr
    assert " <-" in with_parent.stdout
    assert " <-" not in r.stdout
    assert funcs(r.stdout) == [("__main__.main", None), ("__main__.helper", None)]


def test_report_irq_info_adds_the_flag_columns(script, run_fntrace):
    assert run_fntrace("record", "-o", "t.dat", "-F", "*:mod:__main__", script).returncode == 0
    r = run_fntrace("report", "-O", "irq-info", "t.dat")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION" in lines
    body = [line for line in lines if not line.startswith("#")]
    assert len(body) == 2
    assert all(re.search(r"\] \.\.\.\.\. +\d+\.\d{6}: __main__\.", line) for line in body), body


def test_two_runs_give_the_same_trace_but_for_times_and_pids(script, run_fntrace):
    runs = [run_fntrace("live", "-F", "*:mod:__main__", "-F", "latemod.*", script)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    masked = [[mask_line(line) for line in r.stdout.splitlines()] for r in runs]
    assert masked[0] == masked[1]
    body = [line for line in masked[0] if "-PID [" in line]
    assert body == [
        "      MainThread-PID [000] TS: __main__.main <-__main__.<module>",
        "      MainThread-PID [000] TS: __main__.helper <-__main__.main",
        "      MainThread-PID [000] TS: latemod.work <-__main__.main",
        "      MainThread-PID [000] TS: latemod.inner <-latemod.work",
    ]
    # The raw lines differ only where the mask says so.
    raw = [line for line in runs[0].stdout.splitlines() if fn_lines(line)]
    assert [mask_line(line) for line in raw] == body
    assert all(mask_line(line) != line for line in raw)


def test_ls_lists_script_and_imported_module_functions(tmp_script, run_fntrace):
    prog = tmp_script("""
        import json
        print("RAN")

        def alpha():
            pass

        class Beta:
            def method(self):
                pass
    """)
    r = run_fntrace("ls", prog)
    assert r.returncode == 0, r.stderr
    names = r.stdout.splitlines()
    assert "__main__.alpha" in names and "__main__.Beta.method" in names
    assert "json.dumps" in names and "json.loads" in names
    assert "RAN" not in r.stdout                     # the program is not run
    assert not [n for n in names if n.startswith("fntrace.")]

    narrowed = run_fntrace("ls", "-F", "__main__.*", prog)
    assert narrowed.returncode == 0, narrowed.stderr
    assert narrowed.stdout.splitlines() == ["__main__.alpha", "__main__.Beta.method"]

    j = run_fntrace("ls", "-F", "json.dump*", prog).stdout.splitlines()
    assert sorted(j) == ["json.dump", "json.dumps"]

    excl = run_fntrace("ls", "-F", "__main__.*", "-N", "*method", prog)
    assert excl.stdout.splitlines() == ["__main__.alpha"]


def test_ls_filter_matching_nothing_is_an_error(tmp_script, run_fntrace):
    prog = tmp_script("def alpha():\n    pass\n")
    assert_one_line_error(run_fntrace("ls", "-F", "zzz_nothing*", prog))


@pytest.mark.parametrize("columns", ["50", "140", ""])
def test_help_is_argparses_own_at_the_terminals_width(monkeypatch, columns):
    # the command line's formatter finds the width without shutil; the help must be
    # what argparse's own formatter prints at the same $COLUMNS
    import argparse

    from fntrace.cli import main as climain
    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr(climain, "_width", [])
    top, _ = climain._parser("record")
    record = climain._subparser(top, "record")
    ours = [p.format_help() for p in (top, record)]
    for p in (top, record):
        p.formatter_class = argparse.RawDescriptionHelpFormatter
    assert ours == [p.format_help() for p in (top, record)]
    if columns == "50":
        usage = ours[1].split("\n\n")[0].splitlines()
        assert max(map(len, usage)) <= 48 < 80     # wrapped at 50 - 2, not at 80
