"""Every example in README.md runs as written.

Python blocks run in a fresh interpreter; shell blocks run line by line (a trailing
backslash continues a line) with ``bash``, from a directory holding a copy of the
repository's ``examples/``, with this interpreter's ``fntrace`` first on PATH.  The
synopsis block (``fntrace record [-p TRACER] ...``) is grammar, not a command.  The
quick start (``python3 -m venv .venv && ... pip install -q . && ...``) is run in a
fresh copy of the repository once per test run: it installs from the package index.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from support import REPO_ROOT, SUBPROCESS_TIMEOUT, run_python

README = (REPO_ROOT / "README.md").read_text()
BLOCKS = [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w+)\n(.*?)```", README, re.S)]
PYTHON = [b for kind, b in BLOCKS if kind == "python"]
SHELL = [b for kind, b in BLOCKS if kind == "sh"]


def _commands(block: str) -> list[str]:
    out, cur = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip():
            out.append(cur.strip())
        cur = ""
    return out


SYNOPSIS = "fntrace record [-p TRACER]"
QUICK_START = "python3 -m venv .venv"
TEST_COMMAND = "./scripts/test-all"
COMMANDS = [c for b in SHELL if not b.startswith(SYNOPSIS) for c in _commands(b)]


def test_the_readme_has_the_examples_this_file_runs():
    assert len(PYTHON) >= 4
    assert any(c.startswith(QUICK_START) for c in COMMANDS)
    assert TEST_COMMAND in COMMANDS
    assert sum(c.startswith("fntrace ") for c in COMMANDS) >= 6


@pytest.mark.parametrize("block", PYTHON, ids=[f"python{i}" for i in range(len(PYTHON))])
def test_python_example(tmp_path, block):
    if re.search(r"^def test_", block, re.M):
        # a test module (the fntrace_calls fixture): pytest runs it, beside a copy of
        # examples/, with the plugin as a user has it
        shutil.copytree(REPO_ROOT / "examples", tmp_path / "examples")
        (tmp_path / "test_example.py").write_text(block)
        plugin = [] if any(ep.value == "fntrace.pytest_plugin"
                           for ep in entry_points(group="pytest11")) \
            else ["-p", "fntrace.pytest_plugin"]
        r = run_python("-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin,
                       "test_example.py", cwd=tmp_path)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        assert re.search(r"^\d+ passed", r.stdout, re.M), r.stdout
        return
    r = run_python("-c", block, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "fntrace:" not in r.stderr, r.stderr
    assert r.stdout.strip()
    for want in re.findall(r"print\(.*\)\s+# (\S+)$", block, re.M):
        assert want in r.stdout.split(), (want, r.stdout)


def _shell_env() -> dict:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


FNTRACE_COMMANDS = [c for c in COMMANDS if c.startswith("fntrace ")]


@pytest.mark.parametrize("command", FNTRACE_COMMANDS,
                         ids=[f"sh{i}" for i in range(len(FNTRACE_COMMANDS))])
def test_shell_example(tmp_path, command):
    shutil.copytree(REPO_ROOT / "examples", tmp_path / "examples")
    if shutil.which("fntrace", path=_shell_env()["PATH"]) is None:
        pytest.fail("no fntrace command beside this interpreter: install fntrace into its "
                    "environment (pip install -e .)")
    r = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=_shell_env(),
                       capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert "# tracer: " in r.stdout, r.stdout[-2000:]
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.once
def test_quick_start(tmp_path):
    # Installs fntrace from this checkout into a new environment, as a user would; the
    # package index must be reachable for the build requirements.  scripts/test-all runs
    # it once, on the newest interpreter, with the native hot path (`once`).
    command = next(c for c in COMMANDS if c.startswith(QUICK_START))
    repo = tmp_path / "repo"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO_ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    files = [f for f in files if (REPO_ROOT / f).is_file()]
    for f in files:
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / f, repo / f)
    env = _shell_env()
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    r = subprocess.run(["bash", "-c", command.replace("python3 ", f"{sys.executable} ", 1)],
                       cwd=repo, env=env, capture_output=True, text=True,
                       timeout=SUBPROCESS_TIMEOUT * 2)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "# tracer: function" in r.stdout
    assert "shop.catalog.load_catalog <-__main__.main" in r.stdout
    # A regular install, as users have it (not the test environment's editable one):
    # pytest asks to rewrite the asserts of every package that brings a pytest plugin,
    # and fntrace is imported before pytest under `fntrace record -m pytest`.  With
    # -W error (a project's `filterwarnings = error`) the traced suite must pass as the
    # untraced one does, with the same warnings (none).
    venv_py = repo / ".venv" / "bin" / "python"
    pip = subprocess.run([str(venv_py), "-m", "pip", "install", "-q", "pytest"],
                         capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert pip.returncode == 0, pip.stderr[-2000:]
    (repo / "suite").mkdir()
    (repo / "suite" / "test_it.py").write_text("def add(a, b):\n    return a + b\n\n"
                                               "def test_add():\n    assert add(1, 2) == 3\n")
    runs = [subprocess.run([str(venv_py), *pre, "-m", "pytest", "-W", "error", "-q", "-p",
                            "no:cacheprovider"], cwd=repo / "suite", capture_output=True,
                           text=True, timeout=SUBPROCESS_TIMEOUT)
            for pre in ([], ["-m", "fntrace", "record", "-o", "t.dat"])]
    for run in runs:
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        assert "1 passed" in run.stdout and "warning" not in run.stdout, run.stdout[-3000:]
