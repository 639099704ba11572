"""One control path (tracefs/control.py), black box: the command line's options and the
Python API's settings are writes to tracefs control files — the same grammar and the
same errors as writing those files, the error in the instance's error_log, the CLI's
before the program runs; what the option asks for is what the file then reads.
"""
from __future__ import annotations

import re

import pytest

import fntrace
from fntrace.errors import FilterError, FntraceError
from fntrace.tracefs import Tracefs
from fntrace.tracefs.control import OPTION_FILES

from support import NESTED_MODULE


pytestmark = pytest.mark.usefixtures("fgraph_clean")


def _tracefs_error(path: str, data: str) -> str:
    with pytest.raises(FntraceError) as ei:
        Tracefs().write(path, data)
    return ei.value.msg


@pytest.mark.parametrize("option,value,path", [
    ("-b", "abc", "buffer_size_kb"),
    ("-b", "0", "buffer_size_kb"),
    ("-b", "0x10", "buffer_size_kb"),          # the file's grammar: decimal only
    ("-b", "99999999999", "buffer_size_kb"),
    ("-D", "x", "max_graph_depth"),
    ("-D", "-1", "max_graph_depth"),
    ("--thresh", "1.5", "tracing_thresh"),
    ("-F", "12abc", "set_ftrace_filter"),
    ("-N", "12abc", "set_ftrace_notrace"),
    ("-g", "12abc", "set_graph_function"),
    ("--graph-notrace", "12abc", "set_graph_notrace"),
])
def test_cli_option_errors_are_the_control_files_errors(tmp_script, run_fntrace,
                                                        option, value, path):
    """A bad value fails as writing it to the option's file fails: the same message,
    named by the option, on one line, before the program runs."""
    prog = tmp_script("print('program ran')\n")
    r = run_fntrace("record", "-o", "t.dat", option, value, prog)
    assert r.returncode == 2
    assert "program ran" not in r.stdout
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"fntrace: {option} {value!r}: "), r.stderr
    assert _tracefs_error(path, value) in lines[0]


def test_cli_unknown_tracer_is_current_tracers_error(tmp_script, run_fntrace):
    prog = tmp_script("print('program ran')\n")
    r = run_fntrace("record", "-o", "t.dat", "-p", "nosuch", prog)
    assert r.returncode == 2 and "program ran" not in r.stdout
    assert r.stderr == f"fntrace: -p: {_tracefs_error('current_tracer', 'nosuch')}\n"
    assert "available: function function_graph nop" in r.stderr


def test_report_option_words_are_trace_options_words(tmp_script, run_fntrace):
    prog = tmp_script("pass\n")
    assert run_fntrace("record", "-o", "t.dat", prog).returncode == 0
    r = run_fntrace("report", "-O", "nosuch-opt", "t.dat")
    assert r.returncode == 2
    assert _tracefs_error("trace_options", "nosuch-opt") in r.stderr
    # an option of the recording, not of the text
    r = run_fntrace("report", "-O", "overwrite", "t.dat")
    assert r.returncode == 2 and "does not change the text" in r.stderr
    ok = run_fntrace("report", "-O", "noprint-parent", "t.dat")
    assert ok.returncode == 0, ok.stderr


def test_record_help_names_every_options_file(run_fntrace):
    r = run_fntrace("record", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    for option, path in OPTION_FILES:
        assert f"{option} {path}" in text, (option, path)


def test_cli_graph_options_land_in_the_files_the_trace_file_records(tmp_script, run_fntrace):
    """-D, --thresh, -A, -R, -b: the trace file's header records what the control
    files held (the file is read back by report)."""
    from fntrace.tracefile import TraceFile
    prog = tmp_script("def f(x):\n    return x + 1\n\nf(1)\n")
    r = run_fntrace("record", "-o", "t.dat", "-F", "*:mod:__main__", "-D", "3",
                    "--thresh", "0", "-A", "-R", "-b", "64", prog)
    assert r.returncode == 0, r.stderr
    h = TraceFile.open(prog.parent / "t.dat").header
    assert (h["max_graph_depth"], h["tracing_thresh_us"], h["graph_args"],
            h["graph_retval"], h["buffer_size_kb"]) == (3, 0, True, True, 64)
    rep = run_fntrace("report", "t.dat")
    assert re.search(r"\|  __main__\.f\(x=1\); /\* ret=2 \*/", rep.stdout), rep.stdout


def test_session_settings_are_its_control_files(write_module):
    m = write_module(NESTED_MODULE, hint="ctlp")
    n = m.__name__
    t = fntrace.trace(f"{n}.*", notrace=f"{n}.outer", tracer="function_graph",
                      buffer_size_kb=64, overwrite=False, graph_function=f"{n}.middle",
                      max_graph_depth=2, tracing_thresh=0,
                      options={"funcgraph-retval": True})
    fs = t.fs
    assert fs.read("buffer_size_kb") == "64\n"
    assert fs.read("options/overwrite") == "0\n"
    assert fs.read("max_graph_depth") == "2\n"
    assert fs.read("tracing_thresh") == "0\n"
    assert fs.read("options/funcgraph-retval") == "1\n"
    assert fs.read("set_graph_function") == f"{n}.middle\n"
    assert f"{n}.inner\n" in fs.read("set_ftrace_filter")
    assert fs.read("set_ftrace_notrace") == f"{n}.outer\n"
    assert fs.read("current_tracer") == "nop\n"     # until the session starts
    with t:
        assert fs.read("current_tracer") == "function_graph\n"
        m.outer()
    body = [l for l in t.lines(header=False)]
    # only middle's graph, two levels deep, with return values
    assert [l.split("|", 1)[1] for l in body] == [
        f"  {n}.middle() {{", f"    {n}.inner(); /* ret=2 */", f"  }} /* {n}.middle ret=4 */"]


def test_session_errors_are_the_write_errors_with_the_error_log():
    with pytest.raises(FilterError) as ei:
        fntrace.trace("12abc")
    assert ei.value.pos == 0
    import json  # noqa: F401  (loaded: its functions can be matched)
    with pytest.raises(FilterError):
        fntrace.trace("json.dumps 12abc")
    s = fntrace.TraceSession()
    with pytest.raises(FilterError):
        s.fs.write("set_ftrace_filter", "json.dumps 12abc")
    log = s.fs.read("error_log")
    assert "  Command: json.dumps 12abc\n" in log
    assert log.endswith(" " * (len("  Command: ") + 11) + "^\n")
    with pytest.raises(FntraceError, match="no such tracer 'nosuch'"):
        fntrace.trace(tracer="nosuch")
    with pytest.raises(FntraceError, match="buffer_size_kb"):
        fntrace.trace(buffer_size_kb=0)
    with pytest.raises(FntraceError, match="no such file"):
        fntrace.trace(options={"no-such-option": True})


def test_session_started_again_traces_again(write_module):
    m = write_module(NESTED_MODULE, hint="ctlr")
    t = fntrace.trace(f"{m.__name__}.inner")
    with t:
        m.inner(1)
    assert len(t.lines(header=False)) == 1
    with t:
        m.inner(1)
        m.inner(2)
    assert len(t.lines(header=False)) == 2      # a new start clears, as a tracer change does
