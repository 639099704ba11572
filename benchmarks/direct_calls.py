#!/usr/bin/env python3
"""What a call costs through a direct trampoline (register_ftrace_direct), in instructions.

A trivial function ``tracee(x): return x`` is called N times (default 50 000) in each of
these set-ups:

    bare             nothing attached
    direct           a pass-through direct trampoline: tramp(original, *a, **k)
    wraps            the classic alternative: a functools.wraps wrapper put in place of
                     the module attribute (what a monkey-patch does)
    tracer           the function tracer alone on the tracee (a trace session)
    direct+tracer    the trampoline and the function tracer on the same function: the
                     site is shared (count 2), so the list func runs the tracer, then
                     the stub calls the trampoline (seed 000's diagram)

Instructions come from valgrind's callgrind (deterministic for a given interpreter,
input and PYTHONHASHSEED): every set-up runs once with N calls and once with 0 calls,
so start-up, imports and registration cancel out:

    instructions/call = (Ir(N) - Ir(0)) / N

    python benchmarks/direct_calls.py                        # this interpreter
    python benchmarks/direct_calls.py --python .venvs/py3.11/bin/python \\
                                      --python .venvs/py3.12/bin/python
    python benchmarks/direct_calls.py --readme               # also append to README.md
    python benchmarks/direct_calls.py --rev HEAD             # measure a committed tree

``--rev REV`` measures fntrace as committed at REV (``git archive REV src`` into a
temporary directory, put first on the children's PYTHONPATH; the built native module is
copied along when its source is unchanged since REV), so that edits to the working tree
made while the benchmark runs cannot change what is measured.

``--child MODE N`` is the process callgrind measures.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import glob
import shlex
import shutil
import subprocess
import sys
import tempfile
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

MODES = ["bare", "direct", "wraps", "tracer", "direct+tracer"]
_MODNAME = "_fntrace_bench_direct"


# ---------------------------------------------------------------------------------
# The child: one set-up, N calls
# ---------------------------------------------------------------------------------

def _make_target() -> types.ModuleType:
    mod = types.ModuleType(_MODNAME)
    sys.modules[_MODNAME] = mod
    exec(compile("def tracee(x):\n    return x\n", f"<{_MODNAME}>", "exec"), mod.__dict__)
    return mod


def passthrough(original, /, *args, **kwargs):
    return original(*args, **kwargs)


def _run(mod: types.ModuleType, n: int) -> None:
    # Looked up through the module each call, like a program calling mod.func().
    for i in range(n):
        mod.tracee(i)


def child(mode: str, n: int) -> None:
    fntrace = _common.import_fntrace()
    from fntrace.core.direct import register_ftrace_direct, unregister_ftrace_direct
    mod = _make_target()
    ops = session = None
    if mode in ("direct", "direct+tracer"):
        ops = fntrace.Ops(name="bench-direct")
        fntrace.ftrace_set_filter_ip(ops, mod.tracee)
        register_ftrace_direct(ops, passthrough)
    if mode in ("tracer", "direct+tracer"):
        # A buffer large enough for the whole run would only measure memory; the
        # overwrite ring buffer keeps the cost per event constant.
        session = fntrace.trace(f"{_MODNAME}.tracee", buffer_size_kb=64).start()
    if mode == "wraps":
        fn = mod.tracee

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        mod.tracee = wrapper
    try:
        # The checks run whatever N is, so that they cancel out in Ir(N) - Ir(0).
        if mode not in ("bare", "wraps"):
            line = [ln for ln in fntrace.enabled_functions()
                    if ln.startswith(f"{_MODNAME}.tracee ")]
            want_count = {"direct": 1, "tracer": 1, "direct+tracer": 2}[mode]
            if not line or f"({want_count})" not in line[0]:
                raise SystemExit(f"{mode}: unexpected site state {line!r}")
        _run(mod, n)
        if mode in ("tracer", "direct+tracer"):
            _, written = session.tr.entries()
            if written != n:
                raise SystemExit(f"{mode}: {written} events written for {n} calls")
    finally:
        if session is not None:
            session.stop()
        if ops is not None:
            unregister_ftrace_direct(ops, passthrough)


# ---------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------

def freeze(rev: str, into: str) -> str:
    """Extract src/ as committed at ``rev`` into ``into``; return the full commit id."""
    root = _common.ROOT
    commit = subprocess.run(["git", "rev-parse", "--verify", rev + "^{commit}"], cwd=root,
                            check=True, capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "archive", commit, "src"], cwd=root, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    native_same = subprocess.run(["git", "diff", "--quiet", commit, "--",
                                  "src/fntrace/_native.c"], cwd=root).returncode == 0
    if native_same:
        for so in glob.glob(os.path.join(root, "src", "fntrace", "_native*.so")):
            shutil.copy2(so, os.path.join(into, "src", "fntrace"))
    return commit


def measure(python: str, calls: int, env: dict) -> dict:
    me = os.path.abspath(__file__)
    out = {"python": python, "label": _label(python, env), "rows": {}}
    for mode in MODES:
        ir_n = _common.callgrind_ir([python, me, "--child", mode, str(calls)], env)
        ir_0 = _common.callgrind_ir([python, me, "--child", mode, "0"], env)
        out["rows"][mode] = {"ir_n": ir_n, "ir_0": ir_0, "per_call": (ir_n - ir_0) / calls}
    return out


def _label(python: str, env: dict) -> str:
    code = ("import sys, fntrace; from fntrace import _env\n"
            "nat = 'native' if _env.native() is not None else 'pure'\n"
            "print(sys.version.split()[0], _env.BACKEND, nat)")
    p = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return f"{python} (?)"
    v, be, nat = p.stdout.split()
    return f"{v} ({be}, {nat})"


def table(results: list[dict], calls: int) -> list[str]:
    labels = [r["label"] for r in results]
    w = max(14, *(len(lb) for lb in labels))
    head = "| set-up         | " + " | ".join(f"{lb:>{w}}" for lb in labels) + " |"
    sep = "|----------------|" + "|".join("-" * (w + 2) for _ in labels) + "|"
    lines = [f"Instructions per call of `tracee(x): return x` ({calls} calls, "
             "callgrind Ir, minus a 0-call run; in brackets: minus bare)", "",
             head, sep]
    for mode in MODES:
        cells = []
        for r in results:
            v = r["rows"][mode]["per_call"]
            base = r["rows"]["bare"]["per_call"]
            extra = "" if mode == "bare" else f" (+{v - base:,.0f})"
            cells.append(f"{_common.fmt_int(v) + extra:>{w}}")
        lines.append(f"| {mode:<14} | " + " | ".join(cells) + " |")
    return lines


def append_readme(lines: list[str], command: str, results: list[dict]) -> None:
    path = os.path.join(_common.HERE, "README.md")
    heading = "## Direct calls"
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    block = []
    if heading not in text:
        block += ["", heading, "",
                  "`benchmarks/direct_calls.py`: what one call of a trivial function costs "
                  "with a direct trampoline attached (register_ftrace_direct), compared "
                  "with the bare function, a functools.wraps wrapper, and the function "
                  "tracer; instruction counts from callgrind, each set-up minus the same "
                  "set-up with 0 calls."]
    pythons = ", ".join(r["label"] for r in results)
    block += ["", f"### {datetime.date.today().isoformat()} — {pythons}", "",
              f"Command: `{command}`", ""]
    block += lines
    if not text:
        block = block[1:]           # a new file starts with the section itself
    with open(path, "a") as f:
        if text and not text.endswith("\n"):
            f.write("\n")
        f.write("\n".join(block) + "\n")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    p.add_argument("--python", action="append", default=[],
                   help="interpreter to measure (repeatable; default: this one)")
    p.add_argument("-n", "--calls", type=int, default=50_000)
    p.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    p.add_argument("--rev", metavar="REV",
                   help="measure fntrace as committed at REV instead of the working tree")
    p.add_argument("--readme", action="store_true",
                   help="append the table to benchmarks/README.md under 'Direct calls'")
    args = p.parse_args(argv)
    if args.child:
        mode, n = args.child
        if mode not in MODES:
            p.error(f"unknown mode {mode!r}")
        child(mode, int(n))
        return 0
    if not _common.have_valgrind():
        print("valgrind not found: this benchmark counts instructions with callgrind",
              file=sys.stderr)
        return 1
    pythons = args.python or [sys.executable]
    with tempfile.TemporaryDirectory(prefix="direct-calls-") as tmp:
        env = _common.child_env()
        commit = None
        if args.rev:
            commit = freeze(args.rev, tmp)
            frozen = os.path.join(tmp, "src")
            env["PYTHONPATH"] = frozen + os.pathsep + env.get("PYTHONPATH", "")
        results = [measure(py, args.calls, env) for py in pythons]
    lines = table(results, args.calls)
    if commit:
        lines.append("")
        lines.append(f"fntrace as committed at {commit[:12]}.")
    print("\n".join(lines))
    if args.json:
        print(json.dumps(results, indent=2))
    if args.readme:
        shown = list(argv)
        if commit:
            # The commit measured, not a name that moves.
            for i, a in enumerate(shown):
                if a == "--rev" and i + 1 < len(shown):
                    shown[i + 1] = commit[:12]
                elif a.startswith("--rev="):
                    shown[i] = "--rev=" + commit[:12]
        cmd = "python benchmarks/direct_calls.py " + " ".join(shlex.quote(a) for a in shown)
        if os.environ.get("FNTRACE_PURE", "") not in ("", "0"):
            cmd = "FNTRACE_PURE=1 " + cmd
        append_readme(lines, cmd, results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
