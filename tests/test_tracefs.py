"""tracefs in process: ports of the kernel's ftrace selftests
(tools/testing/selftests/ftrace/test.d) that apply to the function tracer.

  00basic/basic1.tc            the basic files exist
  00basic/basic2.tc            every tracer in available_tracers can be set
  00basic/trace_pipe.tc        trace is not a consumer, trace_pipe is
  ftrace/func-filter-glob.tc   set_ftrace_filter equals available_filter_functions
                               grepped with the equivalent regex
  ftrace/func_set_ftrace_file.tc  reading set_ftrace_filter / set_ftrace_notrace
  ftrace/func_mod_trace.tc     ':mod:' filters cached for a module not loaded yet
  functions ftrace_errlog_check   error_log caret position
and the documented behaviour of ftrace.rst: '>' vs '>>', '!' removal, a failed write
changes nothing, current_tracer refuses unknown names, tracing_on, buffer_size_kb,
the entries-in-buffer/entries-written header after an overflow, trace_options, and
trace.c's snapshot file (its help when freed or empty, the tracer's own format).
"""
from __future__ import annotations

import errno
import importlib
import re

import pytest

import fntrace
from fntrace.errors import FntraceError
from fntrace.tracefs import Tracefs

from support import fn_lines, header_counts

MOD_SRC = """
    def alpha_fn():
        return beta_fn()

    def beta_fn():
        return 1

    def fn_gamma():
        return 2

    def delta():
        return 3

    class K:
        def method_fn(self):
            return 4
"""


@pytest.fixture
def mod(write_module):
    return write_module(MOD_SRC, hint="tfsmod")


def lines_of(text: str) -> list[str]:
    return text.splitlines()


def run_all(mod) -> None:
    mod.alpha_fn()
    mod.fn_gamma()
    mod.delta()
    mod.K().method_fn()


def traced_funcs(fs: Tracefs) -> list[str]:
    return [p.func for p in fn_lines(fs.read("trace"))]


# ---------------------------------------------------------------------------------
# 00basic
# ---------------------------------------------------------------------------------

def test_basic1_files_exist(fs):
    names = fs.ls()
    for f in ("README", "trace", "tracing_on", "trace_pipe", "current_tracer",
              "available_tracers", "set_ftrace_filter", "set_ftrace_notrace",
              "available_filter_functions", "enabled_functions", "touched_functions",
              "buffer_size_kb", "trace_marker", "trace_options", "error_log", "options"):
        assert f in names, f
    assert "print-parent" in fs.ls("options")
    assert "glob-matching-pattern" in fs.read("README")


def test_top_level_tracefs_is_one_instance():
    top = fntrace.tracefs()
    assert isinstance(top, Tracefs)
    assert fntrace.tracefs() is top


def test_tracefs_package_gives_both_the_class_and_the_top_instance():
    # ``fntrace.tracefs()`` is the top directory, ``fntrace.tracefs.Tracefs()`` a new
    # one; ``import fntrace.tracefs as m`` must give the package, not the function.
    import fntrace.tracefs as pkg
    assert pkg.Tracefs is Tracefs
    assert isinstance(fntrace.tracefs(), Tracefs)


def test_basic2_every_available_tracer_can_be_set(fs, mod):
    # A filter keeps the function tracer cheap in a process with many functions.
    fs.write("set_ftrace_filter", f"{mod.__name__}.delta")
    tracers = fs.read("available_tracers").split()
    assert "nop" in tracers and "function" in tracers
    for name in tracers:
        fs.write("current_tracer", name)
        assert fs.read("current_tracer") == name + "\n"
    fs.write("current_tracer", "nop")
    assert fs.read("current_tracer") == "nop\n"


def test_current_tracer_refuses_unknown_name(fs, mod):
    fs.write("set_ftrace_filter", f"{mod.__name__}.delta")
    fs.write("current_tracer", "function")
    with pytest.raises(FntraceError) as ei:
        fs.write("current_tracer", "no_such_tracer")
    assert ei.value.errno == errno.EINVAL
    assert fs.read("current_tracer") == "function\n"


def test_trace_pipe_consumes_and_trace_does_not(fs):
    # 00basic/trace_pipe.tc
    fs.write("trace_marker", "test message")
    assert fs.read("trace").count("tracing_mark_write: test message") == 1
    assert fs.read("trace").count("tracing_mark_write: test message") == 1
    pipe = fs.read("trace_pipe")
    assert pipe.count("tracing_mark_write: test message") == 1
    assert not pipe.startswith("#")                   # no header on trace_pipe
    assert "test message" not in fs.read("trace")
    assert "test message" not in fs.read("trace_pipe")


def test_trace_marker_refused_with_markers_option_off(fs):
    fs.write("options/markers", "0")
    with pytest.raises(FntraceError) as ei:
        fs.write("trace_marker", "x")
    assert ei.value.errno == errno.EINVAL


def test_writing_trace_clears_it_and_appending_does_not(fs):
    fs.write("trace_marker", "first")
    fs.write("trace", "", append=True)
    assert "first" in fs.read("trace")
    fs.write("trace", "")
    assert "first" not in fs.read("trace")
    assert header_counts(fs.read("trace"))[:2] == (0, 0)


# ---------------------------------------------------------------------------------
# set_ftrace_filter / set_ftrace_notrace
# ---------------------------------------------------------------------------------

def glob_cases(m: str) -> list[tuple[str, str]]:
    e = re.escape(m)
    return [
        (f"{m}.*", rf"^{e}\."),                 # MATCH_FRONT_ONLY
        ("*_fn", r"_fn$"),                      # MATCH_END_ONLY
        ("*fn*", r"fn"),                        # MATCH_MIDDLE_ONLY
        (f"{m}.alpha_fn", rf"^{e}\.alpha_fn$"),  # MATCH_FULL
        (f"{m}.*a_fn", rf"^{e}\..*a_fn$"),      # MATCH_GLOB
        (f"{m}.[ab]*", rf"^{e}\.[ab]"),         # MATCH_GLOB, class
        (f"{m}.?eta_fn", rf"^{e}\..eta_fn$"),   # MATCH_GLOB, ?
        (f"{m}.K.*_fn", rf"^{e}\.K\..*_fn$"),
    ]


def test_func_filter_glob(fs, mod):
    # ftrace/func-filter-glob.tc: set_ftrace_filter content equals
    # available_filter_functions grepped with the same pattern as a regex.
    for glob, regex in glob_cases(mod.__name__):
        fs.write("set_ftrace_filter", glob)
        actual = lines_of(fs.read("set_ftrace_filter"))
        expected = [f for f in lines_of(fs.read("available_filter_functions"))
                    if re.search(regex, f)]
        assert expected, glob
        assert actual == expected, glob


def test_filter_by_index_in_available_filter_functions(fs, mod):
    avail = lines_of(fs.read("available_filter_functions"))
    i = avail.index(f"{mod.__name__}.delta") + 1
    j = avail.index(f"{mod.__name__}.fn_gamma") + 1
    fs.write("set_ftrace_filter", f"{i} {j}")
    assert sorted(lines_of(fs.read("set_ftrace_filter"))) == sorted(
        [f"{mod.__name__}.delta", f"{mod.__name__}.fn_gamma"])


def test_available_filter_functions_lists_module_functions_not_tracer_code(fs, mod):
    avail = lines_of(fs.read("available_filter_functions"))
    m = mod.__name__
    for f in ("alpha_fn", "beta_fn", "fn_gamma", "delta", "K.method_fn"):
        assert f"{m}.{f}" in avail
    assert not [f for f in avail if f.startswith("fntrace.")]
    assert not [f for f in avail if f.endswith("<module>")]
    assert fs.read("dyn_ftrace_total_info") == f"{len(avail)}\n"
    addrs = lines_of(fs.read("available_filter_functions_addrs"))
    assert [a.split(" ", 1)[1] for a in addrs] == avail
    assert all(re.fullmatch(r"[0-9a-f]+", a.split(" ", 1)[0]) for a in addrs)


def test_func_set_ftrace_file_empty_reads(fs, mod):
    # ftrace/func_set_ftrace_file.tc and ftrace.c t_show
    assert fs.read("set_ftrace_filter") == "#### all functions enabled ####\n"
    assert fs.read("set_ftrace_notrace") == "#### no functions disabled ####\n"
    fs.write("set_ftrace_filter", f"{mod.__name__}.delta")
    fs.write("set_ftrace_notrace", f"{mod.__name__}.beta_fn")
    assert fs.read("set_ftrace_filter") == f"{mod.__name__}.delta\n"
    assert fs.read("set_ftrace_notrace") == f"{mod.__name__}.beta_fn\n"
    fs.write("set_ftrace_filter", "")             # echo > set_ftrace_filter
    fs.write("set_ftrace_notrace", "\n")
    assert fs.read("set_ftrace_filter") == "#### all functions enabled ####\n"
    assert fs.read("set_ftrace_notrace") == "#### no functions disabled ####\n"


def test_truncate_vs_append(fs, mod):
    m = mod.__name__
    fs.write("set_ftrace_filter", f"{m}.delta")
    fs.write("set_ftrace_filter", f"{m}.alpha_fn", append=True)
    assert sorted(lines_of(fs.read("set_ftrace_filter"))) == [f"{m}.alpha_fn", f"{m}.delta"]
    fs.write("set_ftrace_filter", f"{m}.fn_gamma")
    assert lines_of(fs.read("set_ftrace_filter")) == [f"{m}.fn_gamma"]

    fs.write("set_ftrace_notrace", f"{m}.delta")
    fs.write("set_ftrace_notrace", f"{m}.beta_fn", append=True)
    assert sorted(lines_of(fs.read("set_ftrace_notrace"))) == [f"{m}.beta_fn", f"{m}.delta"]
    fs.write("set_ftrace_notrace", f"{m}.fn_gamma")
    assert lines_of(fs.read("set_ftrace_notrace")) == [f"{m}.fn_gamma"]


def test_bang_removes(fs, mod):
    m = mod.__name__
    fs.write("set_ftrace_filter", f"{m}.*")
    fs.write("set_ftrace_filter", f"!{m}.*_fn", append=True)
    assert sorted(lines_of(fs.read("set_ftrace_filter"))) == [f"{m}.delta", f"{m}.fn_gamma"]
    fs.write("set_ftrace_filter", f"!{m}.delta", append=True)
    assert lines_of(fs.read("set_ftrace_filter")) == [f"{m}.fn_gamma"]


def test_several_patterns_in_one_write(fs, mod):
    m = mod.__name__
    fs.write("set_ftrace_filter", f"{m}.delta   {m}.fn_gamma\t{m}.beta_fn\n")
    assert sorted(lines_of(fs.read("set_ftrace_filter"))) == sorted(
        [f"{m}.delta", f"{m}.fn_gamma", f"{m}.beta_fn"])


@pytest.mark.parametrize("append", [False, True])
def test_bad_write_leaves_previous_filter_intact(fs, mod, append):
    m = mod.__name__
    fs.write("set_ftrace_filter", f"{m}.delta")
    with pytest.raises(FntraceError) as ei:
        fs.write("set_ftrace_filter", f"{m}.fn_gamma {m}.no_such_function", append=append)
    assert ei.value.errno == errno.EINVAL
    assert lines_of(fs.read("set_ftrace_filter")) == [f"{m}.delta"]

    fs.write("set_ftrace_notrace", f"{m}.beta_fn")
    with pytest.raises(FntraceError):
        fs.write("set_ftrace_notrace", f"{m}.delta {m}.no_such_function", append=append)
    assert lines_of(fs.read("set_ftrace_notrace")) == [f"{m}.beta_fn"]


def test_mod_command_for_a_module_not_loaded_yet(fs, write_module):
    # ftrace/func_mod_trace.tc: the filter is cached, listed, and applied on load.
    src = """
        def fn_one():
            return fn_two()

        def fn_two():
            return 2

        def other():
            return 3
    """
    name = write_module(src, hint="notloaded", import_it=False)
    fs.write("set_ftrace_filter", f"fn_*:mod:{name}")
    assert fs.read("set_ftrace_filter") == f"fn_*:mod:{name}\n"
    fs.write("current_tracer", "function")
    late = importlib.import_module(name)
    assert lines_of(fs.read("set_ftrace_filter")) == [
        f"{name}.fn_one", f"{name}.fn_two", f"fn_*:mod:{name}"]
    late.fn_one()
    late.other()
    fs.write("tracing_on", "0")
    got = [(p.func, p.parent) for p in fn_lines(fs.read("trace"))]
    assert got == [(f"{name}.fn_one", f"{__name__}.test_mod_command_for_a_module_not_loaded_yet"),
                   (f"{name}.fn_two", f"{name}.fn_one")]


def test_mod_command_for_a_loaded_module(fs, mod):
    m = mod.__name__
    fs.write("set_ftrace_filter", f"*_fn:mod:{m}")
    assert sorted(lines_of(fs.read("set_ftrace_filter"))) == sorted(
        [f"{m}.alpha_fn", f"{m}.beta_fn", f"{m}.K.method_fn"])


def test_filter_and_notrace_drive_the_function_tracer(fs, mod):
    m = mod.__name__
    fs.write("set_ftrace_filter", f"{m}.*")
    fs.write("set_ftrace_notrace", f"{m}.beta_fn")
    fs.write("current_tracer", "function")
    run_all(mod)
    fs.write("tracing_on", "0")
    assert traced_funcs(fs) == [f"{m}.alpha_fn", f"{m}.fn_gamma", f"{m}.delta",
                                f"{m}.K.method_fn"]


def test_filter_changed_while_tracing_applies_at_once(fs, mod):
    m = mod.__name__
    fs.write("set_ftrace_filter", f"{m}.delta")
    fs.write("current_tracer", "function")
    run_all(mod)
    fs.write("set_ftrace_filter", f"{m}.fn_gamma")
    run_all(mod)
    fs.write("tracing_on", "0")
    assert traced_funcs(fs) == [f"{m}.delta", f"{m}.fn_gamma"]


def test_enabled_functions_follow_the_tracer(mod):
    fs = fntrace.tracefs()           # enabled_functions lives at the top level
    m = mod.__name__
    fs.write("set_ftrace_filter", f"{m}.delta")
    fs.write("current_tracer", "function")
    lines = [l for l in lines_of(fs.read("enabled_functions")) if l.startswith(f"{m}.")]
    assert len(lines) == 1
    assert lines[0].startswith(f"{m}.delta (1)       O   \tops: ")
    fs.write("current_tracer", "nop")
    assert not [l for l in lines_of(fs.read("enabled_functions")) if l.startswith(f"{m}.")]
    touched = [l for l in lines_of(fs.read("touched_functions")) if l.startswith(f"{m}.")]
    assert touched == [f"{m}.delta (0)           "]


def test_two_instances_trace_their_own_filters(mod):
    m = mod.__name__
    a, b = Tracefs(), Tracefs()
    try:
        a.write("set_ftrace_filter", f"{m}.delta")
        b.write("set_ftrace_filter", f"{m}.fn_gamma {m}.delta")
        a.write("current_tracer", "function")
        b.write("current_tracer", "function")
        run_all(mod)
        a.write("tracing_on", "0")
        b.write("tracing_on", "0")
        assert traced_funcs(a) == [f"{m}.delta"]
        assert traced_funcs(b) == [f"{m}.fn_gamma", f"{m}.delta"]
    finally:
        a.write("current_tracer", "nop")
        b.write("current_tracer", "nop")


# ---------------------------------------------------------------------------------
# error_log (ftrace_errlog_check)
# ---------------------------------------------------------------------------------

def errlog_check(fs: Tracefs, path: str, cmd_with_caret: str, *, append: bool = False) -> None:
    """test.d/functions ftrace_errlog_check: write the command without '^'; the write
    fails and error_log's last line is '  Command: '-wide spaces, the caret under the
    position of '^', then a newline: 13 + pos characters."""
    pos = cmd_with_caret.index("^")
    command = cmd_with_caret.replace("^", "")
    fs.write("error_log", "")
    with pytest.raises(FntraceError):
        fs.write(path, command, append=append)
    log = fs.read("error_log")
    lines = log.split("\n")
    assert lines[-1] == ""
    assert re.match(r"^\[\s*\d+\.\d{6}\] \S+: error: \S", lines[-4]), log
    assert lines[-3] == f"  Command: {command}", log
    assert len(lines[-2]) + 1 == 13 + pos, log
    assert lines[-2].strip() == "^"


def test_error_log_caret_position(fs, mod):
    m = mod.__name__
    errlog_check(fs, "set_ftrace_filter", f"^{m}.no_such_function")
    errlog_check(fs, "set_ftrace_filter", f"{m}.delta ^{m}.no_such_function")
    errlog_check(fs, "set_ftrace_filter", f"{m}.delta  ^{m}.nope*", append=True)
    errlog_check(fs, "set_ftrace_notrace", f"{m}.delta ^{m}.no_such_function")
    errlog_check(fs, "set_ftrace_filter", f"{m}.delta:^bogus")
    errlog_check(fs, "trace_options", "print-parent ^no_such_option")
    errlog_check(fs, "current_tracer", "^no_such_tracer")


def test_error_log_keeps_entries_and_clears(fs, mod):
    fs.write("error_log", "")
    assert fs.read("error_log") == ""
    for i in range(3):
        with pytest.raises(FntraceError):
            fs.write("set_ftrace_filter", f"{mod.__name__}.missing{i}")
    assert fs.read("error_log").count("  Command: ") == 3
    fs.write("error_log", "")
    assert fs.read("error_log") == ""


def test_error_log_holds_the_last_eight(fs, mod):
    fs.write("error_log", "")
    for i in range(10):
        with pytest.raises(FntraceError):
            fs.write("set_ftrace_filter", f"{mod.__name__}.missing{i}")
    log = fs.read("error_log")
    assert log.count("  Command: ") == 8
    assert "missing0" not in log and "missing1" not in log and "missing9" in log


# ---------------------------------------------------------------------------------
# tracing_on, buffer_size_kb, lost events, trace_options
# ---------------------------------------------------------------------------------

def test_tracing_on_zero_stops_recording(fs, mod):
    m = mod.__name__
    fs.write("set_ftrace_filter", f"{m}.delta {m}.fn_gamma {m}.beta_fn")
    fs.write("current_tracer", "function")
    assert fs.read("tracing_on") == "1\n"
    mod.delta()
    fs.write("tracing_on", "0")
    assert fs.read("tracing_on") == "0\n"
    mod.fn_gamma()
    fs.write("trace_marker", "not recorded")
    fs.write("tracing_on", "1")
    mod.beta_fn()
    fs.write("tracing_on", "0")
    text = fs.read("trace")
    assert [p.func for p in fn_lines(text)] == [f"{m}.delta", f"{m}.beta_fn"]
    assert "not recorded" not in text


def test_tracing_on_refuses_other_values(fs):
    for bad in ("2", "yes", ""):
        with pytest.raises(FntraceError):
            fs.write("tracing_on", bad)
    assert fs.read("tracing_on") == "1\n"


def test_buffer_size_kb_read_format_and_write(fs):
    # trace.c tracing_entries_read(): "%lu\n" (ftrace.rst's "1408 (units kilobytes)"
    # is an old example; the file has never printed the unit)
    assert fs.read("buffer_size_kb") == "1408\n"
    fs.write("buffer_size_kb", "4")
    assert fs.read("buffer_size_kb") == "4\n"
    fs.write("buffer_size_kb", "8\n")
    assert fs.read("buffer_size_kb") == "8\n"


@pytest.mark.parametrize("bad,err", [("0", errno.EINVAL), ("-1", errno.EINVAL),
                                     ("abc", errno.EINVAL), ("", errno.EINVAL),
                                     ("99999999999", errno.ENOMEM)])
def test_buffer_size_kb_bad_values(fs, bad, err):
    fs.write("buffer_size_kb", "4")
    with pytest.raises(FntraceError) as ei:
        fs.write("buffer_size_kb", bad)
    assert ei.value.errno == err
    assert fs.read("buffer_size_kb") == "4\n"


# ---------------------------------------------------------------------------------
# snapshot (trace.c s_show, print_snapshot_help, show_snapshot_main_help)
# ---------------------------------------------------------------------------------

SNAPSHOT_HELP = ("# Snapshot commands:\n"
                 "# echo 0 > snapshot : Clears and frees snapshot buffer\n"
                 "# echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.\n"
                 "#                      Takes a snapshot of the main buffer.\n"
                 "# echo 2 > snapshot : Clears snapshot buffer (but does not allocate or free)\n"
                 "#                      (Doesn't have to be '2' works with any number that\n"
                 "#                       is not a '0' or '1')\n")


def test_snapshot_reads_the_kernels_help_when_freed_or_empty(fs, mod):
    assert fs.read("snapshot") == ("# tracer: nop\n#\n#\n# * Snapshot is freed *\n#\n"
                                   + SNAPSHOT_HELP)
    fs.write("snapshot", "1")                  # allocated, of an empty buffer
    assert fs.read("snapshot") == ("# tracer: nop\n#\n#\n# * Snapshot is allocated *\n#\n"
                                   + SNAPSHOT_HELP)
    fs.write("set_ftrace_filter", f"{mod.__name__}.delta")
    fs.write("current_tracer", "function")
    mod.delta()
    fs.write("snapshot", "1")
    text = fs.read("snapshot")
    assert text.startswith("# tracer: function\n#\n# entries-in-buffer/entries-written: 1/1")
    assert [p.func for p in fn_lines(text)] == [f"{mod.__name__}.delta"]
    fs.write("snapshot", "2")                  # cleared, still allocated
    assert "# * Snapshot is allocated *" in fs.read("snapshot")
    fs.write("snapshot", "0")
    assert "# * Snapshot is freed *" in fs.read("snapshot")


def test_snapshot_of_a_function_graph_trace_reads_as_one(fs, mod):
    m = mod.__name__
    fs.write("set_ftrace_filter", f"{m}.alpha_fn {m}.beta_fn")
    fs.write("current_tracer", "function_graph")
    mod.alpha_fn()
    fs.write("snapshot", "1")
    fs.write("tracing_on", "0")
    snap, trace = fs.read("snapshot"), fs.read("trace")
    assert snap.startswith("# tracer: function_graph\n#\n# CPU  DURATION")
    body = [l for l in snap.splitlines() if not l.startswith("#")]
    assert any(l.endswith(f"{m}.alpha_fn() {{") for l in body), snap
    assert any(l.endswith(f"{m}.beta_fn();") for l in body), snap
    assert len(body) == len([l for l in trace.splitlines() if not l.startswith("#")])


@pytest.mark.parametrize("overwrite", ["1", "0"])
def test_header_difference_is_lost_events_after_overflow(fs, mod, overwrite):
    m = mod.__name__
    nrec = 1024 // 32
    fs.write("buffer_size_kb", "1")
    fs.write("options/overwrite", overwrite)
    fs.write("set_ftrace_filter", f"{m}.delta")
    fs.write("current_tracer", "function")
    for _ in range(100):
        mod.delta()
    fs.write("tracing_on", "0")
    text = fs.read("trace")
    entries, written, _ = header_counts(text)
    assert (entries, written) == (nrec, 100)
    assert len(fn_lines(text)) == entries
    pipe = lines_of(fs.read("trace_pipe"))
    if overwrite == "1":
        assert re.fullmatch(r"CPU:\d+ \[LOST 68 EVENTS\]", pipe[0]), pipe[:2]
        assert len(pipe) == nrec + 1
    else:
        assert len(fn_lines("\n".join(pipe))) == nrec


def test_trace_header_lines(fs, mod):
    fs.write("set_ftrace_filter", f"{mod.__name__}.delta")
    fs.write("current_tracer", "function")
    mod.delta()
    fs.write("tracing_on", "0")
    lines = lines_of(fs.read("trace"))
    assert lines[0] == "# tracer: function"
    assert lines[1] == "#"
    assert re.fullmatch(r"# entries-in-buffer/entries-written: 1/1   #P:\d+", lines[2])
    assert lines[3] == "#"
    assert lines[4:6] == ["#           TASK-PID     CPU#     TIMESTAMP  FUNCTION",
                          "#              | |         |         |         |"]
    p = fn_lines("\n".join(lines))
    assert len(p) == 1 and p[0].func == f"{mod.__name__}.delta"
    assert p[0].parent == f"{__name__}.test_trace_header_lines"


def test_trace_options_noprint_parent(fs, mod):
    opts = lines_of(fs.read("trace_options"))
    assert "print-parent" in opts
    fs.write("set_ftrace_filter", f"{mod.__name__}.delta")
    fs.write("current_tracer", "function")
    mod.delta()
    fs.write("tracing_on", "0")
    assert " <-" in fs.read("trace")

    fs.write("trace_options", "noprint-parent")
    assert "noprint-parent" in lines_of(fs.read("trace_options"))
    assert fs.read("options/print-parent") == "0\n"
    text = fs.read("trace")
    assert " <-" not in text
    assert [p.func for p in fn_lines(text)] == [f"{mod.__name__}.delta"]

    fs.write("options/print-parent", "1")
    assert "print-parent" in lines_of(fs.read("trace_options"))
    assert " <-" in fs.read("trace")


def test_trace_options_irq_info_adds_the_flag_columns(fs, mod):
    fs.write("set_ftrace_filter", f"{mod.__name__}.delta")
    fs.write("current_tracer", "function")
    mod.delta()
    fs.write("tracing_on", "0")
    fs.write("trace_options", "irq-info")
    text = fs.read("trace")
    assert "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION" in text
    (p,) = fn_lines(text)
    assert p.func == f"{mod.__name__}.delta"
    assert re.search(r"\] \.\.\.\.\. +\d+\.\d{6}: ", text)


def test_trace_options_refuses_unknown_option(fs):
    before = fs.read("trace_options")
    with pytest.raises(FntraceError):
        fs.write("trace_options", "no_such_option")
    assert fs.read("trace_options") == before


def test_unknown_file(fs):
    with pytest.raises(FntraceError):
        fs.read("no_such_file")
    with pytest.raises(FntraceError):
        fs.write("no_such_file", "1")


def test_freeing_an_instance_keeps_the_threads_cpu():
    """An instance the thread wrote to, freed on that thread, is not the thread's end:
    the thread keeps its cpu number (the CPU column of every other trace)."""
    import gc
    from fntrace.core.task import thread_cpu
    d = Tracefs()
    d.write("trace_marker", "x")
    cpu = thread_cpu()
    del d
    gc.collect()
    assert thread_cpu() == cpu


def test_mod_filter_resolves_a_module_imported_with_no_tracer_on(fs, write_module):
    """func_mod_trace.tc: '*:mod:M' for a module not loaded yet is kept; once the
    program imports M (nothing traced, nothing watching imports), the filter lists M's
    functions, as after the kernel's module notifier."""
    name = write_module("def irq_work():\n    return 0\n", hint="later", import_it=False)
    fs.write("set_ftrace_filter", f"*:mod:{name}")
    assert f"{name}.irq_work" not in fs.read("set_ftrace_filter")
    importlib.import_module(name)
    assert f"{name}.irq_work" in fs.read("set_ftrace_filter").splitlines()
