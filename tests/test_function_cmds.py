"""Function commands in set_ftrace_filter, through the tracefs files.

Ports of the kernel's selftests (tools/testing/selftests/ftrace/test.d):
  ftrace/func_traceonoff_triggers.tc   traceon/traceoff, counted and not, removal
  ftrace/func-filter-stacktrace.tc     GLOB:stacktrace shows '<stack trace>' entries
  ftrace/func_event_triggers.tc        enable_event/disable_event soft mode
  ftrace/func_snapshot.tc              GLOB:snapshot fills the snapshot buffer
  functions reset_ftrace_filter        every command read back can be removed by '!'
and trace_functions.c / trace_events.c / trace.c for the read-back strings, counts and
errors.
"""
from __future__ import annotations

import errno
import os
import textwrap
import threading

import pytest

from fntrace.errors import FntraceError
from fntrace.tracefs import Tracefs

from support import errlog_check, run_python, trace_texts

MOD = """
    def hit():
        return 1

    def other():
        return 2

    def third():
        return 3

    def outer():
        return hit()

    def work(a):
        return a
"""

pytestmark = pytest.mark.usefixtures("new_fs")


def reset_ftrace_filter(fs: Tracefs) -> None:
    """test.d/functions reset_ftrace_filter: '>' empties the filter, then each command
    read back is removed with '!', its limit given back unless 'unlimited'."""
    fs.write("set_ftrace_filter", "")
    for t in fs.read("set_ftrace_filter").splitlines():
        if t.startswith("#"):
            continue
        fields = t.split(":")
        if len(fields) < 2 or not fields[1]:
            continue
        name = fields[0].split(" ")[0]
        if fields[1] in ("enable_event", "disable_event"):
            tr, limit = ":".join(fields[1:4]), fields[4] if len(fields) > 4 else ""
        else:
            tr, limit = fields[1], fields[2] if len(fields) > 2 else ""
        if limit != "unlimited":
            tr = f"{tr}:{limit}"
        fs.write("set_ftrace_filter", f"!{name}:{tr}")


@pytest.fixture
def fs(new_fs):
    t = new_fs()
    yield t
    reset_ftrace_filter(t)
    assert not [l for l in t.read("set_ftrace_filter").splitlines() if ":" in l]


@pytest.fixture
def m(write_module):
    return write_module(MOD, hint="fcmod")


def cmds_of(fs: Tracefs) -> list[str]:
    return [l for l in fs.read("set_ftrace_filter").splitlines() if not l.startswith("#")]


def tracing_on(fs: Tracefs) -> str:
    return fs.read("tracing_on").strip()


# ---------------------------------------------------------------------------------
# traceon / traceoff (func_traceonoff_triggers.tc)
# ---------------------------------------------------------------------------------

def test_traceoff_stops_tracing_at_the_function(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.other {n}.third")
    fs.write("current_tracer", "function")
    fs.write("set_ftrace_filter", f"{n}.hit:traceoff", append=True)
    m.other()
    m.hit()
    m.third()
    names = [t.split(" <-")[0] for t in trace_texts(fs)]
    assert names == [f"{n}.other"]
    assert tracing_on(fs) == "0"
    # the command does not narrow (or widen) the filter: hit is not traced itself
    assert cmds_of(fs) == [f"{n}.other", f"{n}.third", f"{n}.hit:traceoff:unlimited"]


def test_traceoff_count_only_decrements_when_it_did_work(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.hit:traceoff:2")
    assert cmds_of(fs) == [f"{n}.hit:traceoff:count=2"]
    m.hit()
    assert tracing_on(fs) == "0"
    assert cmds_of(fs) == [f"{n}.hit:traceoff:count=1"]
    m.hit()                                     # already off: no work, no count
    assert cmds_of(fs) == [f"{n}.hit:traceoff:count=1"]
    fs.write("tracing_on", "1")
    m.hit()
    assert tracing_on(fs) == "0"
    assert cmds_of(fs) == [f"{n}.hit:traceoff:count=0"]
    fs.write("tracing_on", "1")
    for _ in range(3):
        m.hit()                                 # the count is used up
    assert tracing_on(fs) == "1"
    assert cmds_of(fs) == [f"{n}.hit:traceoff:count=0"]


def test_traceon_turns_tracing_back_on(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.other")
    fs.write("current_tracer", "function")
    fs.write("set_ftrace_filter", f"{n}.hit:traceon:1", append=True)
    fs.write("tracing_on", "0")
    m.other()
    m.hit()
    m.other()
    assert tracing_on(fs) == "1"
    assert [t.split(" <-")[0] for t in trace_texts(fs)] == [f"{n}.other"]
    fs.write("tracing_on", "0")
    m.hit()
    assert tracing_on(fs) == "0"                # count=0 now
    assert f"{n}.hit:traceon:count=0" in cmds_of(fs)


def test_empty_filter_reads_all_enabled_then_the_commands(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.hit:traceoff")
    assert fs.read("set_ftrace_filter") == (
        "#### all functions enabled ####\n" f"{n}.hit:traceoff:unlimited\n")


def test_commands_are_cumulative_and_a_truncating_write_resets_only_the_filter(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.hit:traceoff {n}.other")
    fs.write("set_ftrace_filter", f"{n}.third:traceon:5")      # '>' again
    assert cmds_of(fs) == [f"{n}.hit:traceoff:unlimited", f"{n}.third:traceon:count=5"]
    fs.write("set_ftrace_filter", "")
    assert cmds_of(fs) == [f"{n}.hit:traceoff:unlimited", f"{n}.third:traceon:count=5"]


def test_glob_commands_and_glob_removal(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.*t*:traceoff")
    assert cmds_of(fs) == [f"{n}.{f}:traceoff:unlimited" for f in ("hit", "other", "third", "outer")]
    fs.write("set_ftrace_filter", f"!{n}.*th*:traceoff", append=True)
    assert cmds_of(fs) == [f"{n}.hit:traceoff:unlimited", f"{n}.outer:traceoff:unlimited"]
    fs.write("set_ftrace_filter", "!*:traceoff", append=True)
    assert cmds_of(fs) == []
    m.hit()
    assert tracing_on(fs) == "1"


def test_counted_and_unlimited_are_separate_kinds(fs, m):
    """trace_functions.c: traceoff_probe_ops and traceoff_count_probe_ops; '!F:traceoff'
    removes the unlimited one, '!F:traceoff:0' the counted one."""
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.hit:traceoff {n}.hit:traceoff:3")
    assert cmds_of(fs) == [f"{n}.hit:traceoff:unlimited", f"{n}.hit:traceoff:count=3"]
    fs.write("set_ftrace_filter", f"!{n}.hit:traceoff:0")
    assert cmds_of(fs) == [f"{n}.hit:traceoff:unlimited"]
    fs.write("set_ftrace_filter", f"!{n}.hit:traceoff")
    assert cmds_of(fs) == []
    with pytest.raises(FntraceError) as ei:
        fs.write("set_ftrace_filter", f"!{n}.hit:traceoff")
    assert ei.value.errno == errno.ENODEV


def test_registering_again_keeps_the_count(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.hit:traceoff:3")
    m.hit()
    fs.write("set_ftrace_filter", f"{n}.hit:traceoff:3", append=True)
    assert cmds_of(fs) == [f"{n}.hit:traceoff:count=2"]


def test_command_hooks_the_function_with_its_own_ops(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.hit:traceoff")
    lines = [l for l in fs.read("enabled_functions").splitlines() if l.startswith(f"{n}.hit ")]
    assert len(lines) == 1 and "traceoff_probe" in lines[0], lines
    fs.write("set_ftrace_filter", f"!{n}.hit:traceoff")
    assert not [l for l in fs.read("enabled_functions").splitlines() if l.startswith(f"{n}.hit ")]


def test_commands_work_on_instances_separately(new_fs, fs, m):
    n = m.__name__
    other = new_fs()
    fs.write("set_ftrace_filter", f"{n}.hit:traceoff")
    assert [l for l in other.read("set_ftrace_filter").splitlines()] == [
        "#### all functions enabled ####"]
    m.hit()
    assert tracing_on(fs) == "0" and tracing_on(other) == "1"


# ---------------------------------------------------------------------------------
# stacktrace (func-filter-stacktrace.tc)
# ---------------------------------------------------------------------------------

def stack_entries(fs: Tracefs) -> list[list[str]]:
    out, cur = [], None
    for line in fs.read("trace").splitlines():
        if line.endswith("<stack trace>"):
            cur = []
            out.append(cur)
        elif cur is not None and line.startswith(" => "):
            cur.append(line[4:])
        else:
            cur = None
    return out


def test_stacktrace_command_records_the_python_stack(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.hit:stacktrace")
    m.outer()
    stacks = stack_entries(fs)
    assert len(stacks) == 1
    assert stacks[0][:3] == [f"{n}.hit", f"{n}.outer",
                             f"{__name__}.test_stacktrace_command_records_the_python_stack"]
    assert not any(s.startswith("fntrace.") for s in stacks[0])


def test_stacktrace_count_and_tracing_off(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.hit:stacktrace:2")
    fs.write("tracing_on", "0")
    m.hit()                                     # nothing while tracing is off
    assert cmds_of(fs) == [f"{n}.hit:stacktrace:count=2"]
    fs.write("tracing_on", "1")
    for _ in range(4):
        m.hit()
    assert len(stack_entries(fs)) == 2
    assert cmds_of(fs) == [f"{n}.hit:stacktrace:count=0"]


# ---------------------------------------------------------------------------------
# snapshot (func_snapshot.tc)
# ---------------------------------------------------------------------------------

def test_snapshot_command(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.other")
    fs.write("current_tracer", "function")
    fs.write("set_ftrace_filter", f"{n}.hit:snapshot:1", append=True)
    assert "Snapshot is allocated" in fs.read("snapshot")
    m.other()
    m.hit()
    m.other()
    snap = [t.split(" <-")[0] for t in trace_texts(fs, "snapshot")]
    assert snap == [f"{n}.other"]
    assert cmds_of(fs)[-1] == f"{n}.hit:snapshot:count=0"


# ---------------------------------------------------------------------------------
# enable_event / disable_event (func_event_triggers.tc)
# ---------------------------------------------------------------------------------

@pytest.fixture
def ev(fs, m):
    fs.write("dynamic_events", f"f:fcev {m.__name__}.work a\n", append=True)
    return m


def test_enable_event_soft_mode(fs, ev):
    n = ev.__name__
    fs.write("set_ftrace_filter", f"{n}.hit:enable_event:fprobes:fcev")
    assert cmds_of(fs) == [f"{n}.hit:enable_event:fprobes:fcev:unlimited"]
    assert fs.read("events/fprobes/fcev/enable") == "0*\n"
    ev.work(1)
    assert not [t for t in trace_texts(fs) if t.startswith("fcev:")]
    ev.hit()
    assert fs.read("events/fprobes/fcev/enable") == "1*\n"
    ev.work(2)
    assert [t for t in trace_texts(fs) if t.startswith("fcev:")] and \
        all("a=2" in t for t in trace_texts(fs) if t.startswith("fcev:"))
    fs.write("set_ftrace_filter", f"!{n}.hit:enable_event:fprobes:fcev")
    assert cmds_of(fs) == []
    # __ftrace_event_enable_disable(file, 0, 1): leaving soft mode, the event stays as
    # the command left it (enabled)
    assert fs.read("events/fprobes/fcev/enable") == "1\n"


def test_disable_event_counted(fs, ev):
    n = ev.__name__
    fs.write("events/fprobes/fcev/enable", "1")
    fs.write("set_ftrace_filter", f"{n}.hit:disable_event:fprobes:fcev:1")
    assert cmds_of(fs) == [f"{n}.hit:disable_event:fprobes:fcev:count=1"]
    ev.work(1)
    ev.hit()
    ev.work(2)
    texts = [t for t in trace_texts(fs) if t.startswith("fcev:")]
    assert len(texts) == 1 and "a=1" in texts[0]
    assert cmds_of(fs) == [f"{n}.hit:disable_event:fprobes:fcev:count=0"]


def test_enable_event_of_no_such_event(fs, m):
    n = m.__name__
    errlog_check(fs, "ftrace", f"{n}.hit:enable_event:^nosys:noev", "set_ftrace_filter")
    errlog_check(fs, "ftrace", f"{n}.hit:enable_event^", "set_ftrace_filter")


# ---------------------------------------------------------------------------------
# dump / cpudump: the console is file descriptor 2
# ---------------------------------------------------------------------------------

def test_dump_prints_the_buffer_once(fs, m, capfd):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.other")
    fs.write("current_tracer", "function")
    fs.write("set_ftrace_filter", f"{n}.hit:dump", append=True)
    assert cmds_of(fs)[-1] == f"{n}.hit:dump:count=1"
    m.other()
    m.hit()
    err = capfd.readouterr().err
    assert err.startswith("Dumping ftrace buffer:\n---------------------------------\n")
    assert f": {n}.other <-" in err and err.endswith("---------------------------------\n")
    assert tracing_on(fs) == "0"                # ftrace_dump leaves tracing off
    assert trace_texts(fs) == []                # and consumed what it printed
    fs.write("tracing_on", "1")
    m.hit()
    assert capfd.readouterr().err == ""
    assert cmds_of(fs)[-1] == f"{n}.hit:dump:count=0"


def test_cpudump_prints_only_this_threads_buffer(fs, m, capfd):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.other")
    fs.write("current_tracer", "function")
    t = threading.Thread(target=m.other, name="otherthr")
    t.start()
    t.join()
    fs.write("set_ftrace_filter", f"{n}.hit:cpudump", append=True)
    assert cmds_of(fs)[-1] == f"{n}.hit:cpudump:unlimited"
    m.other()
    m.hit()
    err = capfd.readouterr().err
    assert "otherthr" not in err and f": {n}.other <-" in err
    assert [t.split(" <-")[0] for t in trace_texts(fs)] == [f"{n}.other"]   # otherthr's


# ---------------------------------------------------------------------------------
# Errors: EINVAL with an error_log caret, nothing changed
# ---------------------------------------------------------------------------------

def test_unknown_command(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.other")
    errlog_check(fs, "ftrace", f"{n}.hit:^bogus", "set_ftrace_filter")
    errlog_check(fs, "ftrace", f"{n}.third {n}.hit:^bogus:3", "set_ftrace_filter", append=True)
    assert cmds_of(fs) == [f"{n}.other"]


def test_bad_count_and_no_match(fs, m):
    n = m.__name__
    errlog_check(fs, "ftrace", f"{n}.hit:traceoff:^x3", "set_ftrace_filter")
    errlog_check(fs, "ftrace", f"^{n}.nosuch*:traceoff", "set_ftrace_filter")
    errlog_check(fs, "ftrace", f"{n}.hit:traceon ^{n}.nosuchfn", "set_ftrace_filter")
    assert cmds_of(fs) == []


def test_a_bad_word_anywhere_changes_nothing(fs, m):
    n = m.__name__
    fs.write("set_ftrace_filter", f"{n}.other")
    with pytest.raises(FntraceError) as ei:
        fs.write("set_ftrace_filter", f"{n}.hit:traceoff {n}.third:nocmd")
    assert ei.value.errno == errno.EINVAL
    assert cmds_of(fs) == [f"{n}.other"]


def test_notrace_does_not_accept_commands(fs, m):
    n = m.__name__
    with pytest.raises(FntraceError) as ei:
        fs.write("set_ftrace_notrace", f"{n}.hit:traceoff")
    assert ei.value.errno == errno.EINVAL
    assert cmds_of(fs) == []


def test_readme_lists_the_commands(fs):
    readme = fs.read("README")
    for cmd in ("traceon", "traceoff", "stacktrace", "snapshot", "dump", "cpudump",
                "enable_event:<system>:<event>"):
        assert cmd in readme


# ---------------------------------------------------------------------------------
# The same in a program, native and pure
# ---------------------------------------------------------------------------------

PROG = """
    import fntrace, json
    fs = fntrace.tracefs()
    fs.write("set_ftrace_filter", "json.loads")
    fs.write("current_tracer", "function")
    fs.write("set_ftrace_filter", "json.dumps:traceoff:1", append=True)
    json.loads("1"); json.dumps(1); json.loads("2")
    print(fs.read("tracing_on").strip())
    print(fs.read("set_ftrace_filter"), end="")
    print(sum(1 for l in fs.read("trace").splitlines() if l.rstrip().endswith("json.loads <-__main__.<module>")))
"""


@pytest.mark.parametrize("pure", ["0", "1"])
def test_traceoff_in_a_program(tmp_path, pure):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(PROG))
    env = dict(os.environ, FNTRACE_PURE=pure)
    r = run_python(script, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0", "json.loads", "json.dumps:traceoff:count=0", "1"]


@pytest.mark.parametrize("cmd,off,on_star,off_star", [("enable", "0", "1*", "0*"),
                                                      ("disable", "1", "0*", "1*")])
def test_func_event_triggers(fs, ev, cmd, off, on_star, off_star):
    """func_event_triggers.tc run_enable_disable(): the command acts every time the
    enable file is written back, and only N times with a count."""
    n = ev.__name__
    enable = "events/fprobes/fcev/enable"
    fs.write(enable, off)
    assert fs.read(enable) == off + "\n"
    fs.write("set_ftrace_filter", f"{n}.hit:{cmd}_event:fprobes:fcev")
    for _ in range(5):
        ev.hit()
        assert fs.read(enable) == on_star + "\n"
        fs.write(enable, off)
    ev.hit()
    assert fs.read(enable) == on_star + "\n"
    reset_ftrace_filter(fs)
    fs.write(enable, off)
    fs.write("set_ftrace_filter", f"{n}.hit:{cmd}_event:fprobes:fcev:3")
    for _ in range(3):
        ev.hit()
        assert fs.read(enable) == on_star + "\n"
        fs.write(enable, off)
    ev.hit()
    assert fs.read(enable) == off_star + "\n"


def test_destroying_an_instance_removes_its_commands(new_fs, m):
    n = m.__name__
    inst = new_fs()
    inst.write("set_ftrace_filter", f"{n}.hit:traceoff {n}.other:stacktrace")
    hooked = lambda: [l for l in inst.read("enabled_functions").splitlines()
                      if l.startswith((f"{n}.hit ", f"{n}.other "))]
    assert len(hooked()) == 2
    inst.destroy_function_files()
    assert hooked() == []
    assert inst.read("set_ftrace_filter") == "#### all functions enabled ####\n"
    m.hit()
    assert inst.read("tracing_on") == "1\n"
