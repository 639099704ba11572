"""The FUSE mount of tracefs, driven with the shell's own tools (echo, cat, ls, stat,
mkdir): first a Tracefs mounted by the process that owns it, then a served program
mounted with ``fntrace mount PID DIR``.

Needs libfuse3 (``fuse3``), /dev/fuse and mfusepy; without them the mount tests skip
with a reason starting "FUSE:", which scripts/test-all repeats in its summary.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from support import fntrace_argv, fntrace_cli, run_python

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def _fuse_unusable() -> str | None:
    try:
        import mfusepy  # noqa: F401
    except ImportError:
        return "mfusepy is not installed (pip install fntrace[mount])"
    except OSError as e:
        return f"libfuse3 is not installed (Debian: apt-get install fuse3): {e}"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (no FUSE in this kernel or container)"
    if shutil.which("fusermount3") is None and os.getuid() != 0:
        return "fusermount3 is missing (Debian: apt-get install fuse3)"
    return None


_WHY = _fuse_unusable()
needs_fuse = pytest.mark.skipif(_WHY is not None, reason=f"FUSE: {_WHY}")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env


def sh(cmd: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True,
                          timeout=timeout)


def _wait(pred, timeout: float = 10.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _unmount(d: str) -> None:
    if os.path.ismount(d):
        subprocess.run(["fusermount3", "-u", "-z", d], capture_output=True)


# A program that owns its tracefs and mounts it: a thread of its own serves the
# mount, the main thread calls json in a loop, each time on a new thread (the 3.11
# back end sees only threads started after tracing is switched on).
INPROC = textwrap.dedent("""
    import json, sys, threading, time
    import fntrace
    from fntrace.tracefs.fuse import mount
    fs = fntrace.tracefs()
    opts = json.loads(sys.argv[2])      # uid/gid/mode
    threading.Thread(target=mount, args=(fs, sys.argv[1]), daemon=True,
                     kwargs=dict(opts, on_ready=lambda: print("ready", flush=True))).start()
    def work():
        for _ in range(5):
            json.dumps({"a": 1})
            json.loads("[1]")
            time.sleep(0.005)
    while True:
        t = threading.Thread(target=work)
        t.start()
        t.join()
""")


def _mount_inproc(d: str, **opts) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", INPROC, d, json.dumps(opts)], env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if line.strip() != "ready":
        p.kill()
        raise AssertionError(f"mount failed: {line!r} {p.stderr.read()}")
    _wait(lambda: os.path.ismount(d), what="the mount")
    return p


@pytest.fixture
def mnt(tmp_path):
    d = str(tmp_path / "t")
    os.mkdir(d)
    p = _mount_inproc(d)
    yield d
    _unmount(d)
    p.kill()
    p.wait()


@needs_fuse
def test_ls_and_modes(mnt):
    r = sh(f"ls {mnt}")
    assert r.returncode == 0, r.stderr
    names = r.stdout.split()
    for name in ("current_tracer", "trace", "trace_pipe", "set_ftrace_filter",
                 "available_tracers", "error_log", "options", "events", "trace_marker"):
        assert name in names
    r = sh(f"cd {mnt} && stat -c '%n %a %s %u %g %F' . current_tracer available_tracers "
           "trace_marker options options/overwrite")
    assert r.returncode == 0, r.stderr
    got = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()}
    me = [str(os.getuid()), str(os.getgid())]
    assert got["."][0] == "700" and got["."][4] == "directory"
    assert got["current_tracer"][:4] == ["644", "0", *me]
    assert got["available_tracers"][0] == "444"
    assert got["trace_marker"][0] == "200"
    assert got["options"][0] == "755" and got["options"][4] == "directory"
    assert got["options/overwrite"][:2] == ["644", "0"]
    assert "no_such_file" in sh(f"cat {mnt}/no_such_file").stderr
    assert "No such file" in sh(f"cat {mnt}/no_such_file").stderr


@needs_fuse
def test_echo_and_cat(mnt):
    assert sh(f"cat {mnt}/current_tracer").stdout == "nop\n"
    r = sh(f"echo 'json.*' > {mnt}/set_ftrace_filter && "
           f"echo '!json.loads' >> {mnt}/set_ftrace_filter && "
           f"echo function > {mnt}/current_tracer")
    assert r.returncode == 0, r.stderr
    assert sh(f"cat {mnt}/current_tracer").stdout == "function\n"
    filt = sh(f"cat {mnt}/set_ftrace_filter").stdout.split()
    assert "json.dumps" in filt and "json.loads" not in filt
    _wait(lambda: "json.dumps <-" in sh(f"cat {mnt}/trace").stdout, what="events")
    text = sh(f"cat {mnt}/trace").stdout
    assert text.startswith("# tracer: function\n")
    assert "json.loads <-" not in text
    # echo > trace clears the buffer; `: > set_ftrace_filter` (no write) clears the filter
    assert sh(f"echo 0 > {mnt}/tracing_on && echo > {mnt}/trace").returncode == 0
    assert "entries-in-buffer/entries-written: 0/" in sh(f"cat {mnt}/trace").stdout
    assert sh(f": > {mnt}/set_ftrace_filter").returncode == 0
    assert sh(f"cat {mnt}/set_ftrace_filter").stdout.startswith("#### all functions enabled ####")


@needs_fuse
def test_big_filter_list_cut_by_the_writer(mnt, tmp_path):
    # cat writes 128 KiB at a time: names cut between two write()s still parse
    big = tmp_path / "list"
    big.write_text("json.dumps\n" * 30_000 + "json.loads")     # 330,010 bytes
    r = sh(f"cat {big} > {mnt}/set_ftrace_filter")
    assert r.returncode == 0, r.stderr
    assert sh(f"cat {mnt}/set_ftrace_filter").stdout.split() == ["json.dumps", "json.loads"]
    # a small write is whole: applied or refused at once, with or without its newline
    assert sh(f"echo -n json.decoder.JSONDecoder.decode >> {mnt}/set_ftrace_filter").returncode == 0
    assert len(sh(f"cat {mnt}/set_ftrace_filter").stdout.split()) == 3
    r = sh(f"echo -n no_such_fn_xyz >> {mnt}/set_ftrace_filter")
    assert "write error: Invalid argument" in r.stderr


@needs_fuse
def test_refused_write(mnt):
    r = sh(f"echo function > {mnt}/current_tracer; echo nosuch > {mnt}/current_tracer")
    assert r.returncode == 1
    assert "echo: write error: Invalid argument" in r.stderr
    assert sh(f"cat {mnt}/current_tracer").stdout == "function\n"      # unchanged
    log = sh(f"cat {mnt}/error_log").stdout
    assert "current_tracer: error: No such tracer" in log
    assert "  Command: nosuch\n" in log and log.rstrip().endswith("^")
    r = sh(f"echo 'json.dumps' > {mnt}/set_ftrace_filter && echo 'no_such_fn_xyz' >> {mnt}/set_ftrace_filter")
    assert r.returncode == 1 and "write error: Invalid argument" in r.stderr
    assert sh(f"cat {mnt}/set_ftrace_filter").stdout == "json.dumps\n"     # unchanged
    r = sh(f"echo 2 > {mnt}/tracing_on")
    assert "write error: Invalid argument" in r.stderr
    # tracefs has no create: a new name is refused
    r = sh(f"touch {mnt}/newfile")
    assert r.returncode != 0 and "Permission denied" in r.stderr


@needs_fuse
def test_trace_pipe_blocks_and_consumes(mnt):
    assert sh(f"echo 'json.dumps' > {mnt}/set_ftrace_filter && "
              f"echo function > {mnt}/current_tracer").returncode == 0
    t0 = time.monotonic()
    # ^C on cat: the blocked read ends (EINTR), cat dies of the signal
    first = sh(f"timeout -s INT 1.5 cat {mnt}/trace_pipe")
    took = time.monotonic() - t0
    assert first.returncode == 124, first.stderr
    assert took < 5, took
    lines = [l for l in first.stdout.splitlines() if "json.dumps <-" in l]
    assert len(lines) > 10
    second = sh(f"timeout -s INT 1 cat {mnt}/trace_pipe").stdout.splitlines()
    assert second and not set(second) & set(first.stdout.splitlines())     # consumed
    # nothing to read: cat waits (no EOF) until interrupted
    assert sh(f"echo 0 > {mnt}/tracing_on && echo > {mnt}/trace").returncode == 0
    sh(f"timeout -s INT 0.5 cat {mnt}/trace_pipe")          # drain what was in flight
    r = sh(f"timeout -s INT 1 cat {mnt}/trace_pipe")
    assert r.returncode == 124 and r.stdout == ""
    # O_NONBLOCK and nothing there: EAGAIN, as tracing_wait_pipe
    r = run_python("-c", textwrap.dedent(f"""
        import os, errno
        fd = os.open({mnt + '/trace_pipe'!r}, os.O_RDONLY | os.O_NONBLOCK)
        try:
            os.read(fd, 4096)
            print("data")
        except BlockingIOError:
            print("EAGAIN")
        """), timeout=20)
    assert r.stdout.strip() == "EAGAIN", r.stderr


@needs_fuse
def test_mkdir_instances(mnt):
    r = sh(f"mkdir {mnt}/instances/foo")
    assert r.returncode == 0, r.stderr
    assert "foo" in sh(f"ls {mnt}/instances").stdout.split()
    assert sh(f"echo function > {mnt}/instances/foo/current_tracer").returncode == 0
    assert sh(f"cat {mnt}/instances/foo/current_tracer").stdout == "function\n"
    assert sh(f"cat {mnt}/current_tracer").stdout == "nop\n"
    assert sh(f"echo nop > {mnt}/instances/foo/current_tracer").returncode == 0
    r = sh(f"rmdir {mnt}/instances/foo")
    assert r.returncode == 0, r.stderr
    assert "foo" not in sh(f"ls {mnt}/instances").stdout.split()


# Any object with the tracefs file API mounts: a minimal one with instances, to check
# what mkdir/rmdir/ls pass through and the errors they give back.
FAKE = textwrap.dedent("""
    import errno, sys
    from fntrace.errors import FntraceError
    from fntrace.tracefs.fuse import mount

    def err(msg, no):
        e = FntraceError(msg)
        e.errno = no
        return e

    class Fake:
        def __init__(self):
            self.files = {"current_tracer": "nop\\n"}
            self.instances = set()
        def _split(self, path):
            parts = path.strip("/").split("/")
            if parts[0] == "instances" and len(parts) > 1:
                if parts[1] not in self.instances:
                    return None, None
                return parts[1], "/".join(parts[2:])
            return "", path.strip("/")
        def kind(self, path):
            inst, rest = self._split(path)
            if inst is None:
                return None
            if rest in ("", "instances"):
                return "dir"
            return "file" if rest == "current_tracer" else None
        def mode(self, path):
            return 0o755 if self.kind(path) == "dir" else 0o644
        def ls(self, path=""):
            inst, rest = self._split(path)
            if rest == "instances" and inst == "":
                return sorted(self.instances)
            return ["current_tracer"] + (["instances"] if inst == "" else [])
        def read(self, path):
            inst, rest = self._split(path)
            return self.files.get(f"{inst}/{rest}", "nop\\n")
        def write(self, path, data, append=False):
            inst, rest = self._split(path)
            if data.strip() not in ("nop", "function"):
                raise err("No such tracer", errno.EINVAL)
            self.files[f"{inst}/{rest}"] = data.strip() + "\\n"
        def mkdir(self, path):
            parts = path.strip("/").split("/")
            if len(parts) != 2 or parts[0] != "instances":
                raise err("only instances/NAME", errno.EPERM)
            if parts[1] in self.instances:
                raise err("exists", errno.EEXIST)
            self.instances.add(parts[1])
        def rmdir(self, path):
            parts = path.strip("/").split("/")
            if len(parts) != 2 or parts[1] not in self.instances:
                raise err("no such instance", errno.ENOENT)
            self.instances.discard(parts[1])
        def open_pipe(self, path="trace_pipe"):
            raise err("no pipe", errno.ENOENT)

    mount(Fake(), sys.argv[1], on_ready=lambda: print("ready", flush=True))
""")


@needs_fuse
def test_mkdir_rmdir_reach_the_file_api(tmp_path):
    d = str(tmp_path / "t")
    os.mkdir(d)
    p = subprocess.Popen([sys.executable, "-c", FAKE, d], env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        _wait(lambda: os.path.ismount(d), what="the mount")
        r = sh(f"mkdir {d}/instances/foo && ls {d}/instances && "
               f"echo function > {d}/instances/foo/current_tracer && "
               f"cat {d}/instances/foo/current_tracer {d}/current_tracer")
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["foo", "function", "nop"]
        assert "File exists" in sh(f"mkdir {d}/instances/foo").stderr
        assert "Operation not permitted" in sh(f"mkdir {d}/instances/foo/bar").stderr
        assert sh(f"rmdir {d}/instances/foo").returncode == 0
        assert sh(f"ls {d}/instances").stdout == ""
        assert "No such file" in sh(f"rmdir {d}/instances/foo").stderr
    finally:
        _unmount(d)
        p.kill()
        p.wait()


@needs_fuse
def test_mount_options_uid_gid_mode(tmp_path):
    d = str(tmp_path / "t")
    os.mkdir(d)
    p = _mount_inproc(d, uid=1234, gid=4321, mode=0o750)
    try:
        r = sh(f"stat -c '%u %g %a' {d} {d}/current_tracer {d}/options")
        assert r.stdout.splitlines() == ["1234 4321 750", "1234 4321 644", "1234 4321 755"]
    finally:
        _unmount(d)
        p.kill()
        p.wait()


# -- fntrace mount PID DIR, on a served program ------------------------------------------

# The served program: json calls on a fresh thread each round (the 3.11 back end sees
# only threads started after tracing is switched on), its function the caller.
PROGRAM = textwrap.dedent("""
    import json, sys, threading, time
    def work():
        for _ in range(5):
            json.dumps({"a": 1})
            json.loads("[1]")
            time.sleep(0.005)
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        t = threading.Thread(target=work)
        t.start()
        t.join()
""")


def _fntrace(*args, timeout: float = 30) -> subprocess.CompletedProcess:
    return fntrace_cli(*args, env=_env(), timeout=timeout)


@pytest.fixture
def served(tmp_path):
    """A program run by ``fntrace record --serve -p nop``, controllable once its
    endpoint answers."""
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    p = subprocess.Popen(fntrace_argv("record", "--serve", "-p", "nop", "-o",
                                      str(tmp_path / "out.dat"), str(prog), "30"),
                         env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _wait(lambda: _fntrace("ctl", str(p.pid), "current_tracer").returncode == 0,
          timeout=20, what="the endpoint")
    yield p
    if p.poll() is None:
        p.kill()
    p.wait()


@needs_fuse
def test_cli_mount_served_program(served, tmp_path):
    d = str(tmp_path / "t")
    os.mkdir(d)
    t0 = time.monotonic()
    r = _fntrace("mount", str(served.pid), d)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 15
    try:
        assert os.path.ismount(d)
        r = sh(f"echo 'json.*' > {d}/set_ftrace_filter && "
               f"echo '!json.loads' >> {d}/set_ftrace_filter && "
               f"echo function > {d}/current_tracer")
        assert r.returncode == 0, r.stderr
        got = sh(f"timeout -s INT 2 cat {d}/trace_pipe").stdout
        # called by the program (not by the endpoint's own json use)
        assert "json.dumps <-__main__.work" in got and "json.loads <-" not in got
        r = sh(f"echo nosuch > {d}/current_tracer")
        assert "echo: write error: Invalid argument" in r.stderr
        assert "No such tracer" in sh(f"cat {d}/error_log").stdout
        # the program exits: the mount goes by itself
        served.send_signal(signal.SIGTERM)
        served.wait(timeout=20)
        _wait(lambda: not os.path.ismount(d), timeout=10, what="the unmount on exit")
    finally:
        _unmount(d)


@needs_fuse
def test_a_write_that_looks_for_modules_does_not_wait_for_itself(served, tmp_path):
    """The mount is in the program's script directory (sys.path[0]).  A probe on a
    module that cannot be found makes the program list the module names on sys.path;
    entering each subdirectory, as pkgutil does, would enter this very mount, whose
    request waits for the write being served: the write never ended."""
    d = str(tmp_path / "t")
    os.mkdir(d)
    assert _fntrace("mount", str(served.pid), d).returncode == 0
    try:
        # (accepted: the program may import such a module later)
        r = sh(f"echo 'p:x nosuchmodule.func+1' >> {d}/kprobe_events && "
               f"cat {d}/kprobe_events", timeout=30)
        assert r.stdout == "p:kprobes/x nosuchmodule.func+1\n", r.stderr
    finally:
        _unmount(d)


@needs_fuse
def test_cli_mount_program_killed(served, tmp_path):
    # SIGKILL: no endpoint left to say goodbye; a cat waiting in trace_pipe ends (EOF)
    # and the mount goes (the program's pidfd)
    d = str(tmp_path / "t")
    os.mkdir(d)
    assert _fntrace("mount", str(served.pid), d).returncode == 0
    try:
        cat = subprocess.Popen(["cat", f"{d}/trace_pipe"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert cat.poll() is None                   # waiting
        served.kill()
        served.wait()
        out, err = cat.communicate(timeout=10)
        assert cat.returncode == 0, err
        _wait(lambda: not os.path.ismount(d), timeout=10, what="the unmount on SIGKILL")
    finally:
        _unmount(d)


@needs_fuse
def test_cli_mount_options_and_fusermount(served, tmp_path):
    d = str(tmp_path / "t")
    os.mkdir(d)
    r = _fntrace("mount", str(served.pid), d, "-o", "uid=1234,gid=4321", "-o", "mode=0750")
    assert r.returncode == 0, r.stderr
    try:
        assert sh(f"stat -c '%u %g %a' {d} {d}/trace").stdout.splitlines() == [
            "1234 4321 750", "1234 4321 644"]
        r = _fntrace("mount", str(served.pid), d)
        assert r.returncode == 1 and "mounted there already" in r.stderr
    finally:
        subprocess.run(["fusermount3", "-u", d], capture_output=True)
    _wait(lambda: not os.path.ismount(d), what="the unmount")
    assert served.poll() is None            # the program runs on


@needs_fuse
def test_cli_mount_detach_and_foreground(served, tmp_path):
    from fntrace.tracefs.client import Client
    d = str(tmp_path / "t")
    os.mkdir(d)
    # the program stops serving (detach): the mount goes, the program runs on
    assert _fntrace("mount", str(served.pid), d).returncode == 0
    try:
        Client(served.pid).detach()
        _wait(lambda: not os.path.ismount(d), timeout=10, what="the unmount on detach")
        assert served.poll() is None
    finally:
        _unmount(d)


@needs_fuse
def test_cli_mount_foreground_ends_on_sigint(served, tmp_path):
    d = str(tmp_path / "t")
    os.mkdir(d)
    p = subprocess.Popen(fntrace_argv("mount", "--foreground", served.pid, d), env=_env(),
                         stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: os.path.ismount(d), what="the mount")
        assert sh(f"cat {d}/current_tracer").stdout == "nop\n"
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=10) == 0, p.stderr.read()
        assert not os.path.ismount(d)
        assert "Traceback" not in p.stderr.read()
    finally:
        _unmount(d)
        if p.poll() is None:
            p.kill()


@needs_fuse
def test_cli_mount_errors(tmp_path):
    d = str(tmp_path / "t")
    os.mkdir(d)
    p = subprocess.Popen(["sleep", "0"])
    p.wait()
    r = _fntrace("mount", str(p.pid), d)
    assert r.returncode == 1 and f"no process {p.pid}" in r.stderr, r.stderr
    r = _fntrace("mount", str(os.getpid()), d)
    assert r.returncode == 1 and "not controllable" in r.stderr, r.stderr
    r = _fntrace("mount", "12x", d)
    assert r.returncode == 2 and "not a process id" in r.stderr
    r = _fntrace("mount", "1", str(tmp_path / "nodir"))
    assert r.returncode == 2 and "no such directory" in r.stderr
    for bad in ("mode=9", "uid=x", "bogus"):
        r = _fntrace("mount", "1", d, "-o", bad)
        assert r.returncode == 2 and f"-o {bad}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_cli_mount_without_mfusepy(tmp_path):
    d = str(tmp_path)
    code = ("import sys; sys.modules['mfusepy'] = None; from fntrace.cli.main import main; "
            f"sys.exit(main(['mount', '1', {d!r}]))")
    r = run_python("-c", code, env=_env(), timeout=30)
    assert r.returncode == 1 and "install fntrace[mount]" in r.stderr, r.stderr


def test_help_ends_with_examples():
    r = _fntrace("mount", "--help")
    assert r.returncode == 0
    tail = r.stdout.rstrip().splitlines()
    i = max(n for n, l in enumerate(tail) if l.startswith("examples:"))
    assert all(l.startswith("  ") for l in tail[i + 1:]) and len(tail) - i > 3


def test_cli_mount_without_libfuse(tmp_path):
    # mfusepy raises OSError at import when it finds no libfuse
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "mfusepy.py").write_text("raise OSError('Unable to find libfuse')\n")
    env = _env()
    env["PYTHONPATH"] = str(fake) + os.pathsep + env["PYTHONPATH"]
    r = fntrace_cli("mount", "1", tmp_path, env=env, timeout=30)
    assert r.returncode == 1 and "needs libfuse3" in r.stderr and "fuse3" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
