"""The front door: what a new user meets in the first ten minutes, checked as a user
meets it — the ``fntrace`` command in a subprocess, on programs written the way people
write them, beside plain ``python`` as the reference.

Each section is one part of the story: the program's own arguments, a trace that is
never lost however the program ends, modules loaded by any importer, durations that
measure the program, mistakes caught before the program runs, the command's own
manners.
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from support import (
    SUBPROCESS_TIMEOUT, fn_lines, fntrace_argv, fntrace_cli, header_counts, run_python,
)


def funcs(text: str) -> list[tuple[str, str | None]]:
    return [(f.func, f.parent) for f in fn_lines(text)]


def graph_durations(text: str, name: str) -> list[float]:
    """Durations in microseconds of the function_graph lines that end a call of name."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^ *\d+\)\s+[+!#*@$ ]?\s*([\d.]+) us\s+\|\s+(\S+?)(\(.*\))?;", line)
        if m and m.group(2) == name:
            out.append(float(m.group(1)))
    return out


# ---------------------------------------------------------------------------------
# 1. The program's own arguments
# ---------------------------------------------------------------------------------

def test_options_after_a_module_are_the_programs(tmp_path, run_fntrace):
    (tmp_path / "in.json").write_text('{"b": 1, "a": [1, 2]}')
    plain = run_python("-m", "json.tool", "--sort-keys", "in.json", cwd=tmp_path)
    r = run_fntrace("live", "-F", "json.tool.*", "-m", "json.tool", "--sort-keys", "in.json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(plain.stdout)
    assert plain.stdout.index('"a"') < plain.stdout.index('"b"')


def test_pydoc_write_option_reaches_pydoc(tmp_path, run_fntrace):
    r = run_fntrace("record", "-o", "t.dat", "-F", "pydoc.writedoc", "-m", "pydoc", "-w", "json")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "json.html").exists()
    rep = run_fntrace("report", "t.dat")
    assert "pydoc.writedoc" in rep.stdout


def test_pytest_quiet_option_reaches_pytest(tmp_path, run_fntrace):
    (tmp_path / "test_q.py").write_text("def test_one():\n    assert 1\n")
    r = run_fntrace("live", "-F", "test_q.*", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "test_q.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout
    assert ("test_q.test_one", None) in [(f, None) for f, _ in funcs(r.stdout)]


@pytest.mark.parametrize("argv", [["-w", "json"], ["--", "-w", "json"], ["-F", "x", "-h"]])
def test_code_argv_is_exactly_pythons(tmp_path, run_fntrace, argv):
    code = "import sys; print(sys.argv)"
    plain = run_python("-c", code, *argv, cwd=tmp_path)
    r = run_fntrace("live", "-F", "*:mod:__main__", "-c", code, *argv)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(plain.stdout), (plain.stdout, r.stdout[:200])


def test_script_argv_with_fntrace_options_after_it(tmp_script, run_fntrace):
    prog = tmp_script("import sys\nprint(sys.argv)\n")
    argv = ["-p", "nop", "-F", "x", "--help", "-m", "json"]
    plain = run_python(prog.name, *argv, cwd=prog.parent)
    r = run_fntrace("record", "-o", "t.dat", prog.name, *argv, cwd=prog.parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout


def test_attached_module_name_like_python(tmp_path, run_fntrace):
    plain = run_python("-mjson.tool", "--help", cwd=tmp_path)
    r = run_fntrace("record", "-o", "t.dat", "-mjson.tool", "--help")
    assert r.returncode == plain.returncode == 0, r.stderr
    assert r.stdout == plain.stdout


def _mathpkg(tmp_path):
    pkg = tmp_path / "mathpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(textwrap.dedent("""\
        import sys

        def add(a, b):
            return a + b

        if __name__ == "__main__":
            print(add(2, 3), __name__, sys.argv[0].endswith("ops.py"), sys.path[0])
    """))


def test_module_in_the_current_directory_is_found(tmp_path, run_fntrace):
    _mathpkg(tmp_path)
    plain = run_python("-m", "mathpkg.ops", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    r = run_fntrace("live", "-F", "mathpkg.*", "-m", "mathpkg.ops")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(plain.stdout)
    assert plain.stdout.strip().endswith(str(tmp_path))


@pytest.mark.parametrize("pattern", ["mathpkg.ops.*", "mathpkg.*", "*:mod:__main__",
                                     "__main__.add", "add:mod:mathpkg.ops"])
def test_filter_naming_the_module_run_with_m_selects_its_functions(tmp_path, run_fntrace,
                                                                    pattern):
    # Functions of the module -m runs are named after it (its __spec__.name) and answer
    # to __main__ as well, as the module does in Python.
    _mathpkg(tmp_path)
    r = run_fntrace("live", "-F", pattern, "-m", "mathpkg.ops")
    assert r.returncode == 0, r.stderr
    assert ("mathpkg.ops.add", "mathpkg.ops.<module>") in funcs(r.stdout), r.stdout
    assert "matched no function" not in r.stderr


def test_http_server_filter_names_the_module(tmp_path):
    p = subprocess.Popen(fntrace_argv("live", "-F", "http.server.test", "-m", "http.server",
                                      "--bind", "127.0.0.1", "0"),
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=_default_signals)
    try:
        _wait_for_line(p, "Serving HTTP")
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=SUBPROCESS_TIMEOUT)
    assert p.returncode == -signal.SIGTERM
    assert ("http.server.test", "http.server.<module>") in funcs(out), out[-2000:] + err


# ---------------------------------------------------------------------------------
# 2. The trace is never lost
# ---------------------------------------------------------------------------------

LOOP = """\
import signal, sys, time

def tick(i):
    return i + 1

def main():
    i = 0
    print("ready", flush=True)
    while True:
        i = tick(i)
        if i % 1000 == 0:
            time.sleep(0.001)

main()
"""


def _wait_for_line(p: subprocess.Popen, want: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if r:
            line = p.stdout.readline()
            seen += line
            if want in line:
                return seen
            if not line and p.poll() is not None:
                break
    raise AssertionError(f"never saw {want!r}; got {seen!r}; stderr: "
                         f"{p.stderr.read() if p.poll() is not None else ''}")


def _default_signals() -> None:
    # A test run started in the background inherits SIGINT ignored (the shell's doing),
    # and python keeps an ignored SIGINT ignored: give the program the usual start.
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


def _run_and_signal(tmp_path, cmd, sig, source=LOOP, settle=0.3):
    (tmp_path / "prog.py").write_text(source)
    p = subprocess.Popen(fntrace_argv(*cmd, "prog.py"), cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=_default_signals)
    try:
        head = _wait_for_line(p, "ready")
        time.sleep(settle)
        p.send_signal(sig)
        out, err = p.communicate(timeout=SUBPROCESS_TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return p.returncode, head + out, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_fatal_signal_writes_and_reports_then_dies_of_it(tmp_path, sig):
    rc, out, err = _run_and_signal(tmp_path, ["live", "-F", "*:mod:__main__"], sig)
    assert rc == -sig, err
    # 3.11: the writer thread finishing here never had the profile hook; no false
    # "installed its own profile function" notice
    assert "profile function" not in err, err
    calls = funcs(out)
    assert ("__main__.main", "__main__.<module>") in calls
    assert calls.count(("__main__.tick", "__main__.main")) > 10
    entries, written, _ = header_counts(out)
    assert entries == written == len(calls)


def test_fatal_signal_leaves_a_complete_trace_file(tmp_path, run_fntrace):
    rc, _, err = _run_and_signal(tmp_path, ["record", "-o", "t.dat", "-F", "*:mod:__main__"],
                                 signal.SIGTERM)
    assert rc == -signal.SIGTERM, err
    rep = run_fntrace("report", "t.dat")
    assert rep.returncode == 0, rep.stderr
    assert "cut short" not in rep.stderr
    assert funcs(rep.stdout).count(("__main__.tick", "__main__.main")) > 10


def test_sigint_reports_and_dies_of_sigint(tmp_path):
    rc, out, err = _run_and_signal(tmp_path, ["live", "-F", "*:mod:__main__"], signal.SIGINT)
    # python: the KeyboardInterrupt's traceback, then death by SIGINT (exit_sigint)
    assert rc == -signal.SIGINT, err
    assert "KeyboardInterrupt" in err
    assert ("__main__.tick", "__main__.main") in funcs(out)


def test_program_handler_for_sigterm_runs_as_without_fntrace(tmp_path):
    source = LOOP.replace("def main():", textwrap.dedent("""\
        def on_term(signum, frame):
            print("handled", signum, flush=True)
            sys.exit(7)

        signal.signal(signal.SIGTERM, on_term)

        def main():"""))
    rc, out, err = _run_and_signal(tmp_path, ["live", "-F", "*:mod:__main__"], signal.SIGTERM,
                                   source=source)
    assert rc == 7, err
    assert f"handled {int(signal.SIGTERM)}" in out
    if os.environ.get("FNTRACE_PURE", "") in ("", "0"):
        # The pure-Python hot path runs Python code in its callbacks, where CPython may
        # run a signal handler: its calls are then not traced (docs/internals.md).
        # the handler runs where the signal is noticed: in main or in tick
        assert {p for f, p in funcs(out) if f == "__main__.on_term"} & \
            {"__main__.main", "__main__.tick"}, out[-600:]


def test_program_sees_the_default_sigterm_disposition(tmp_script, run_fntrace):
    prog = tmp_script("import signal\nprint(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "
                      "signal.getsignal(signal.SIGHUP) is signal.SIG_DFL)\n")
    plain = run_python(prog.name, cwd=prog.parent)
    r = run_fntrace("record", "-o", "t.dat", prog.name, cwd=prog.parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout == "True True\n"


def test_os_exit_keeps_the_status_and_the_trace(tmp_script, run_fntrace):
    prog = tmp_script("""
        import os

        def f(i):
            return i

        for i in range(100):
            f(i)
        print("bye", flush=True)
        os._exit(3)
    """)
    r = run_fntrace("live", "-F", "*:mod:__main__", prog.name, cwd=prog.parent)
    assert r.returncode == 3, r.stderr
    assert r.stdout.startswith("bye\n")
    assert funcs(r.stdout) == [("__main__.f", "__main__.<module>")] * 100
    rec = run_fntrace("record", "-o", "t.dat", "-F", "*:mod:__main__", prog.name,
                      cwd=prog.parent)
    assert rec.returncode == 3
    rep = run_fntrace("report", "t.dat", cwd=prog.parent)
    assert len(fn_lines(rep.stdout)) == 100 and "cut short" not in rep.stderr


def test_os_exit_from_a_thread(tmp_script, run_fntrace):
    prog = tmp_script("""
        import os, threading, time

        def work():
            time.sleep(0.05)
            os._exit(5)

        threading.Thread(target=work, name="quitter").start()
        time.sleep(30)
    """)
    r = run_fntrace("live", "-F", "*:mod:__main__", prog.name, cwd=prog.parent)
    assert r.returncode == 5, r.stderr
    assert ("__main__.work", "threading.Thread.run") in funcs(r.stdout)


def test_report_reaches_the_terminal_when_the_program_closes_stdout(tmp_path, run_fntrace):
    (tmp_path / "big.json").write_text('{"a": [1, 2, 3]}')
    r = run_fntrace("live", "-F", "json.*", "-m", "json.tool", "big.json")
    assert r.returncode == 0, r.stderr
    assert "ValueError" not in r.stderr
    assert "# tracer: function" in r.stdout
    assert any(f.startswith("json.") for f, _ in funcs(r.stdout))


def test_report_goes_to_the_original_stdout_when_the_program_replaces_it(tmp_script,
                                                                         run_fntrace):
    prog = tmp_script("""
        import io, sys

        def f():
            return 1

        sys.stdout = io.StringIO()
        sys.stderr = io.StringIO()
        f()
    """)
    r = run_fntrace("live", "-F", "*:mod:__main__", prog.name, cwd=prog.parent)
    assert r.returncode == 0
    assert funcs(r.stdout) == [("__main__.f", "__main__.<module>")]


# ---------------------------------------------------------------------------------
# 3. Modules loaded by any importer
# ---------------------------------------------------------------------------------

def test_pytest_test_modules_are_traced(tmp_path, run_fntrace):
    (tmp_path / "test_pyt.py").write_text(textwrap.dedent("""\
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        def test_fib():
            assert fib(5) == 5

        def is_prime(n):
            return n > 1 and all(n % k for k in range(2, n))

        def test_prime():
            assert is_prime(7)
    """))
    r = run_fntrace("live", "-F", "test_pyt.*", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "test_pyt.py")
    assert r.returncode == 0, r.stdout + r.stderr
    names = {f for f, _ in funcs(r.stdout)}
    assert {"test_pyt.test_fib", "test_pyt.fib", "test_pyt.test_prime",
            "test_pyt.is_prime"} <= names
    assert "matched no function" not in r.stderr
    g = run_fntrace("live", "-g", "test_pyt.test_prime", "-m", "pytest", "-q", "-p",
                    "no:cacheprovider", "test_pyt.py")
    assert g.returncode == 0, g.stdout + g.stderr
    assert "test_pyt.test_prime() {" in g.stdout
    assert "test_pyt.is_prime" in g.stdout
    assert "test_pyt.fib" not in g.stdout


LOADERS = {
    "hook": """
        import importlib.abc, importlib.util, sys

        class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path, target=None):
                if name == "{mod}":
                    return importlib.util.spec_from_loader(name, self)
            def create_module(self, spec):
                return None
            def exec_module(self, module):
                src = open("{mod}_src.txt").read()
                exec(compile(src, "{mod}_src.txt", "exec"), module.__dict__)

        sys.meta_path.insert(0, Finder())
        import {mod}
        print({mod}.work(2))
    """,
    "exec": """
        ns = {{"__name__": "{mod}"}}
        exec(compile(open("{mod}_src.txt").read(), "{mod}_src.txt", "exec"), ns)
        print(ns["work"](2))
    """,
    "from_spec": """
        import importlib.util
        spec = importlib.util.spec_from_file_location("{mod}", "{mod}_file.py")
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        print(m.work(2))
    """,
    "runpy_path": """
        import runpy
        ns = runpy.run_path("{mod}_file.py", run_name="{mod}")
        print(ns["work"](2))
    """,
    "runpy_module": """
        import runpy, sys
        sys.path.insert(0, "sub")
        ns = runpy.run_module("{mod}", run_name="{mod}")
        print(ns["work"](2))
    """,
}

LOADED_SOURCE = """\
def work(n):
    return helper(n) * 2

def helper(n):
    return n + 1

print(work(1))
"""


@pytest.mark.parametrize("how", sorted(LOADERS))
def test_modules_loaded_every_way_are_traced(tmp_path, run_fntrace, how):
    mod = f"loaded_{how}"
    (tmp_path / f"{mod}_src.txt").write_text(LOADED_SOURCE)
    (tmp_path / f"{mod}_file.py").write_text(LOADED_SOURCE)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / f"{mod}.py").write_text(LOADED_SOURCE)
    (tmp_path / "prog.py").write_text(textwrap.dedent(LOADERS[how].format(mod=mod)))
    plain = run_python("prog.py", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    r = run_fntrace("live", "-F", f"{mod}.*", "prog.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(plain.stdout)
    calls = funcs(r.stdout)
    # the module body's own call (before any namespace shows work) is traced too
    assert calls[0] == (f"{mod}.work", f"{mod}.<module>"), calls
    assert (f"{mod}.helper", f"{mod}.work") in calls
    assert len(calls) == 4, calls


def test_import_leaves_no_fntrace_frame_on_the_stack(tmp_path, run_fntrace):
    # warnings.warn(stacklevel=2) in an imported module names the importer, as without
    # fntrace: discovery is not on the import's stack.
    (tmp_path / "warner.py").write_text(
        "import warnings\n\ndef old():\n    warnings.warn('old', DeprecationWarning, stacklevel=2)\n\n"
        "old()\n")
    (tmp_path / "prog.py").write_text(textwrap.dedent("""\
        import traceback, warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as w:
            import warner
        print(w[0].filename.endswith("warner.py"), w[0].lineno)
    """))
    plain = run_python("prog.py", cwd=tmp_path)
    r = run_fntrace("live", "-F", "warner.*", "-F", "*:mod:__main__", "prog.py")
    assert r.returncode == 0, r.stderr
    assert plain.stdout == "True 6\n"
    assert r.stdout.startswith(plain.stdout)
    assert ("warner.old", "warner.<module>") in funcs(r.stdout)


# ---------------------------------------------------------------------------------
# 4. Durations measure the program
# ---------------------------------------------------------------------------------

FIRST = """\
def leaf(x):
    return x + 1

def mid(x):
    return leaf(x) * 2

for i in range(8):
    mid(i)
"""


@pytest.mark.parametrize("extra", [[], ["-A", "-R"]])
def test_first_call_costs_what_later_calls_cost(tmp_script, run_fntrace, extra):
    prog = tmp_script(FIRST)
    seen = []
    # Set-up (the thread's first buffer, discovery) used to count in the first call:
    # hundreds of microseconds for a function that takes a fraction of one, in every
    # run.  A shared machine can also stop a process for that long in any one call: up
    # to three runs, one of which must show the first call costing what later ones do.
    for _ in range(3):
        r = run_fntrace("live", "-p", "function_graph", "-F", "*:mod:__main__", *extra,
                        prog.name, cwd=prog.parent)
        assert r.returncode == 0, r.stderr
        leaf = graph_durations(r.stdout, "__main__.leaf")
        assert len(leaf) == 8, r.stdout
        later = sorted(leaf[1:])[len(leaf[1:]) // 2]
        seen.append(leaf)
        if leaf[0] <= 10 * later + 40:
            break
    else:
        pytest.fail(f"the first call cost more than later ones in every run: {seen}")


def test_entry_timestamp_is_the_calls_start(tmp_script, run_fntrace):
    prog = tmp_script(FIRST)
    r = run_fntrace("live", "-p", "function_graph", "-F", "*:mod:__main__", "-O",
                    "funcgraph-abstime", prog.name, cwd=prog.parent)
    assert r.returncode == 0, r.stderr
    # "TS |  mid() {" then ... "TS |  }" : entry time + duration == return time
    lines = [l for l in r.stdout.splitlines() if re.match(r"^\s*\d+\.\d{6} \|", l)]
    first = [l for l in lines if "__main__.mid() {" in l][0]
    i = lines.index(first)
    close = next(l for l in lines[i + 1:] if l.rstrip().endswith("}"))
    t0 = float(first.split()[0])
    t1 = float(close.split()[0])
    dur = float(re.search(r"([\d.]+) us", close).group(1))
    assert abs((t1 - t0) * 1e6 - dur) <= 2.0, (first, close)


# ---------------------------------------------------------------------------------
# 5. Mistakes caught before the program runs
# ---------------------------------------------------------------------------------

SHOP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.mark.parametrize("pattern,closest", [
    ("shop.pricng.*", "shop.pricing.*"),
    ("shop.cart.Cart.add_itme", "shop.cart.Cart.add_item"),
    ("textwrap.dednt", "textwrap.dedent"),
])
def test_filter_that_can_never_match_is_refused_before_the_run(tmp_path, run_fntrace,
                                                                 pattern, closest):
    r = run_fntrace("live", "-F", pattern, os.path.join(SHOP, "shop_demo.py"))
    assert r.returncode == 2
    assert r.stdout == ""                       # the program never ran
    assert f"-F {pattern!r}: no function matches" in r.stderr
    assert repr(closest) in r.stderr


def test_notrace_and_graph_patterns_are_checked_too(run_fntrace):
    demo = os.path.join(SHOP, "shop_demo.py")
    for opt in ("-N", "-g", "--graph-notrace"):
        r = run_fntrace("live", "-F", "shop.*", opt, "shop.pricng.price_cart", demo)
        assert r.returncode == 2, (opt, r.stderr)
        assert "'shop.pricing.price_cart'" in r.stderr


GENERATED = """\
import collections, dataclasses, enum

@dataclasses.dataclass
class Point:
    x: int
    y: int = 0

NT = collections.namedtuple("NT", "a b")

class Color(enum.Enum):
    RED = 1

class Meta(type):
    def __new__(mcls, name, bases, ns):
        made = {}
        exec("def hello(self):\\n    return 'hi'\\n", globals(), made)
        made["hello"].__qualname__ = name + ".hello"
        ns["hello"] = made["hello"]
        return super().__new__(mcls, name, bases, ns)

class WithMeta(metaclass=Meta):
    pass

def renaming(f):
    made = {}
    exec(f"def {f.__name__}_fast(*a):\\n    return target(*a)\\n", globals(), made)
    globals()["target"] = f
    return made[f.__name__ + "_fast"]

@renaming
def slow(n):
    return n + 1

def make(n):
    ns = {}
    exec(f"def made_{n}():\\n    return {n}\\n", globals(), ns)
    return ns[f"made_{n}"]

made_3 = make(3)
"""

USES = """\
import gen
print(gen.Point(1, 2) == gen.Point(1, 2), gen.NT(1, 2).a, gen.Color(1).name,
      gen.WithMeta().hello(), gen.slow(1), gen.made_3())
"""


@pytest.mark.parametrize("pattern", ["gen.Point.__init__", "gen.Point.__eq__", "gen.NT.__new__",
                                     "gen.WithMeta.hello", "gen.slow_fast", "gen.made_3"])
def test_names_made_at_run_time_are_kept_and_traced(tmp_path, run_fntrace, pattern):
    (tmp_path / "gen.py").write_text(GENERATED)
    (tmp_path / "prog.py").write_text(USES)
    plain = run_python("prog.py", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    r = run_fntrace("live", "-F", pattern, "prog.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(plain.stdout)
    warn = r.stderr.splitlines()[0]
    assert warn.startswith(f"fntrace: -F {pattern!r}: no function matches yet; kept"), r.stderr
    assert pattern in {f for f, _ in funcs(r.stdout)}, r.stdout[-2000:]
    assert "matched no function" not in r.stderr


def test_a_kept_pattern_that_never_matched_is_reported_at_the_end(tmp_path, run_fntrace):
    (tmp_path / "gen.py").write_text(GENERATED)
    (tmp_path / "prog.py").write_text(USES)
    r = run_fntrace("live", "-F", "gen.Point.__nothing__", "prog.py")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0].startswith("fntrace: -F 'gen.Point.__nothing__': no function matches yet")
    assert lines[-1] == "fntrace: filter 'gen.Point.__nothing__' matched no function"


@pytest.mark.parametrize("event,error", [
    ("f shop.cart.Cart.add_item product.sku nosuch", "This variable is not found"),
    ("f non_exist_func", "Invalid probed address or symbol"),
    ("f shop.cart.Cart.add_itm", "Invalid probed address or symbol"),
])
def test_probe_mistakes_are_refused_before_the_run(run_fntrace, event, error):
    # shop is not imported when the probe is defined: its source is read instead.
    r = run_fntrace("live", "-e", event, os.path.join(SHOP, "shop_demo.py"))
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert error in r.stderr
    if "add_itm" in event:
        assert "did you mean 'shop.cart.Cart.add_item'?" in r.stderr


def test_probe_on_a_function_annotated_none_has_no_retval(tmp_path, run_fntrace):
    (tmp_path / "later.py").write_text("def log(msg: str) -> None:\n    print(msg)\n")
    (tmp_path / "prog.py").write_text("import later\nlater.log('hi')\n")
    r = run_fntrace("live", "-e", "f later.log%return $retval", "prog.py")
    assert r.returncode == 2
    assert r.stdout == ""
    assert "NO_RETVAL" in r.stderr or "retval" in r.stderr.lower(), r.stderr
    ok = run_fntrace("live", "-e", "f later.log msg:string", "prog.py")
    assert ok.returncode == 0, ok.stderr
    assert "msg=\"hi\"" in ok.stdout


def test_graph_options_select_function_graph(tmp_script, run_fntrace):
    prog = tmp_script(FIRST)
    for opt in (["-g", "__main__.mid"], ["-A"], ["-R"], ["-D", "1"], ["--thresh", "0"]):
        r = run_fntrace("live", "-F", "*:mod:__main__", *opt, prog.name, cwd=prog.parent)
        assert r.returncode == 0, (opt, r.stderr)
        assert "# tracer: function_graph" in r.stdout, opt


def test_graph_options_are_refused_with_the_function_tracer(tmp_script, run_fntrace):
    prog = tmp_script(FIRST)
    r = run_fntrace("live", "-p", "function", "-g", "__main__.mid", "-R", prog.name,
                    cwd=prog.parent)
    assert r.returncode == 2
    assert r.stdout == ""
    assert "function_graph" in r.stderr and "-g" in r.stderr and "-R" in r.stderr


# ---------------------------------------------------------------------------------
# The command's own manners
# ---------------------------------------------------------------------------------

def test_version(tmp_path):
    import fntrace
    for cmd in (fntrace_argv(), [sys.executable, "-m", "fntrace"]):
        r = subprocess.run([*cmd, "--version"], capture_output=True, text=True, cwd=tmp_path,
                           timeout=SUBPROCESS_TIMEOUT)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"fntrace {fntrace.__version__} (Python ")


def test_python_dash_m_fntrace_traces(tmp_script):
    prog = tmp_script("def f():\n    return 1\nf()\n")
    r = subprocess.run([sys.executable, "-m", "fntrace", "live", "-F", "*:mod:__main__",
                        prog.name], capture_output=True, text=True, cwd=prog.parent,
                       timeout=SUBPROCESS_TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert funcs(r.stdout) == [("__main__.f", "__main__.<module>")]


@pytest.mark.parametrize("cmd", ["record", "report", "live", "ls", "ctl", "attach", "detach"])
def test_every_help_ends_with_examples(run_fntrace, cmd):
    r = run_fntrace(cmd, "--help")
    assert r.returncode == 0
    tail = r.stdout.rstrip().splitlines()
    i = max(k for k, l in enumerate(tail) if l == "examples:")
    examples = tail[i + 1:]
    assert 2 <= len(examples) <= 4 and all(l.startswith("  fntrace ") for l in examples)


DEEP = """\
import sys

def f(n, data):
    return f(n + 1, data) if n < 5000 else n

sys.setrecursionlimit(1200)
try:
    f(0, [1, 2])
except RecursionError:
    print("recursion error caught")
"""


def test_hook_dropped_at_the_recursion_limit_is_not_blamed_on_the_program(tmp_path):
    # The setprofile back end's Python hook (FNTRACE_PURE=1): at the recursion limit
    # CPython drops it; the notice must not say the program installed a profile function.
    (tmp_path / "deep.py").write_text(DEEP)
    env = dict(os.environ, FNTRACE_PURE="1", FNTRACE_BACKEND="profile")
    p = fntrace_cli("live", "-p", "function_graph", "-F", "__main__.f", "deep.py",
                    cwd=tmp_path, env=env)
    plain = run_python("deep.py", cwd=tmp_path)
    assert p.returncode == plain.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith(plain.stdout), p.stdout[:500]
    assert "installed its own profile function" not in p.stderr, p.stderr
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
