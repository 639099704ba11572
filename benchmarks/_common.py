"""Helpers shared by the benchmarks: finding fntrace, running a child under callgrind.

Instruction counts come from valgrind's callgrind tool: deterministic for a given
interpreter, input and hash seed, unaffected by other load on the machine.  Every child
runs with PYTHONHASHSEED=0 so that two runs of the same command count the same.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

__all__ = ["HERE", "ROOT", "import_fntrace", "have_valgrind", "callgrind_ir", "python_label",
           "child_env", "fmt_int", "probe", "variants", "VARIANTS", "FLOOR"]

# Program text: with `floor` or `floor1` after its first argument, the program registers
# the floor any sys.monitoring tool pays, C functions that do nothing: PY_START calling
# operator.is_ and PY_RETURN calling "".format, or PY_START alone (ns_per_call.py,
# targets.py).
FLOOR = """\
if sys.argv[2:] in (["floor"], ["floor1"]):
    import operator
    mon = sys.monitoring
    mon.use_tool_id(3, "floor")
    mon.register_callback(3, mon.events.PY_START, operator.is_)
    if sys.argv[2] == "floor":
        mon.register_callback(3, mon.events.PY_RETURN, "".format)
        mon.set_events(3, mon.events.PY_START | mon.events.PY_RETURN)
    else:
        mon.set_events(3, mon.events.PY_START)
"""


def import_fntrace():
    """Import fntrace; fall back to the checkout's src/ when it is not installed."""
    try:
        import fntrace
    except ImportError:
        sys.path.insert(0, os.path.join(ROOT, "src"))
        import fntrace
    return fntrace


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = "0"
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # The checkout's src/ for interpreters without fntrace installed, after anything the
    # caller put on PYTHONPATH (e.g. a frozen copy of src/ to measure).
    src = os.path.join(ROOT, "src")
    env["PYTHONPATH"] = (env["PYTHONPATH"] + os.pathsep if env.get("PYTHONPATH") else "") + src
    if extra:
        env.update(extra)
    return env


def have_valgrind() -> bool:
    return shutil.which("valgrind") is not None


_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def callgrind_ir(cmd: list[str], env: dict | None = None, *, warm: bool = True,
                 runs: int = 1, valgrind_args: tuple[str, ...] = ()) -> int:
    """Instructions executed by ``cmd`` (whole process), counted by callgrind.

    With ``warm`` the command first runs once natively, so that byte-code caches are
    written before the counted run (a first import compiles; later ones do not).
    With ``runs`` > 1 the count is repeated and the minimum kept: a run can only gain
    instructions by accident (a source file edited meanwhile is compiled again), and a
    note goes to stderr when the runs disagree.  ``valgrind_args`` go to callgrind, e.g.
    ("--collect-atstart=no", "--toggle-collect=FUNC") to count only inside one C function.
    """
    env = env if env is not None else child_env()
    counts = []
    for _ in range(max(1, runs)):
        if warm:
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False)
        full = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                *valgrind_args, *cmd]
        p = subprocess.run(full, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed under callgrind (status {p.returncode}):\n"
                               + p.stderr[-3000:] + p.stdout[-2000:])
        m = _COLLECTED.findall(p.stderr)
        if not m:
            raise RuntimeError("no 'Collected' total in callgrind's output:\n" + p.stderr[-3000:])
        counts.append(int(m[-1]))
    lo, hi = min(counts), max(counts)
    if hi > lo * 1.001:
        print(f"note: callgrind runs of {' '.join(cmd[1:])} disagree: {counts} (min kept)",
              file=sys.stderr)
    return lo


def probe(python: str, env: dict | None = None) -> dict:
    """Version, back end and hot path (native twin or pure Python) of an interpreter."""
    code = ("import sys, json; sys.path.insert(0, %r); import _common; _common.import_fntrace(); "
            "from fntrace import _env; print(json.dumps({'version': sys.version.split()[0], "
            "'backend': _env.BACKEND, 'native': _env.native() is not None}))" % HERE)
    p = subprocess.run([python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=env if env is not None else child_env())
    if p.returncode != 0:
        raise RuntimeError(f"{python}: cannot import fntrace:\n{p.stderr[-2000:]}")
    import json
    return json.loads(p.stdout.strip().splitlines()[-1])


def python_label(python: str, env: dict | None = None) -> str:
    """'3.12.1 (monitoring, native)' for an interpreter path."""
    info = probe(python, env)
    return f"{info['version']} ({info['backend']}, {'native' if info['native'] else 'pure'})"


VARIANTS = {"native": {"FNTRACE_PURE": "0"}, "pure": {"FNTRACE_PURE": "1"}}


def variants(python: str, spec: str) -> list[tuple[str, dict, str]]:
    """(name, env, label) for each hot path asked for in ``spec`` ("native,pure").
    The native one is skipped, with a note on stderr, when it is not built."""
    out = []
    for name in [v.strip() for v in spec.split(",") if v.strip()]:
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r} (native, pure)")
        env = child_env(VARIANTS[name])
        info = probe(python, env)
        if name == "native" and not info["native"]:
            print(f"note: {python}: fntrace._native is not built; 'native' skipped",
                  file=sys.stderr)
            continue
        label = f"{info['version']} ({info['backend']}, {name})"
        out.append((name, env, label))
    return out


def fmt_int(n: float) -> str:
    return f"{n:,.0f}"


def callgrind_parser(doc: str, n: int) -> argparse.ArgumentParser:
    """The options of a callgrind benchmark: --python (repeatable), --n, --variants."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--python", action="append", default=[])
    ap.add_argument("--n", type=int, default=n)
    ap.add_argument("--variants", default="native")
    return ap


def each_run(a: argparse.Namespace, prog_text: str, name: str
             ) -> Iterator[tuple[str, dict, str, str, str]]:
    """(python, env, label, directory, program) for each interpreter and hot path
    asked for, the program written as ``name`` into a fresh directory."""
    if not have_valgrind():
        raise SystemExit("needs valgrind (callgrind)")
    for python in a.python or [sys.executable]:
        for _, env, label in variants(python, a.variants):
            with tempfile.TemporaryDirectory() as d:
                prog = os.path.join(d, name)
                with open(prog, "w") as f:
                    f.write(prog_text)
                yield python, env, label, d, prog
