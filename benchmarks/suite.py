#!/usr/bin/env python3
"""The side-by-side suite: fntrace and its peers on one call-heavy workload, one table.

The workload (this file, ``--child workload N``) repeats N times: fib(22) (recursion),
a small object model (constructors, methods, properties, a classmethod), json with the
pure-Python encoder (``_workload.py``), difflib.SequenceMatcher over two texts, and
ast.parse + ast.walk + a NodeVisitor over a module's source (the standard library at
work).  Every configuration runs the same script:

  untraced          python suite.py --child workload N
  fntrace function  fntrace record -p function -o FILE
  fntrace graph     fntrace record -p function_graph -o FILE
  fntrace graph -A -R   the same with arguments and return values
  fntrace graph --cpu-time   function_graph keeping each call's CPU time too
  fntrace graph --c-calls    function_graph with the C functions called (as cProfile,
                    which always counts them)
  fntrace cold      fntrace record -p function -F _workload.never_called (nothing calls it)
  cProfile          python -m cProfile -o FILE
  viztracer         python -m viztracer --quiet -o FILE.json
  pyftrace          pyftrace script (its trace goes to stdout, kept in FILE)
  yappi             yappi.start() / run / stop(), stats saved as pstat

For each: whole-process instructions (callgrind, one deterministic count), the median
wall time and peak RSS of --runs runs (the configurations interleaved: run 1 of each,
then run 2 of each ...), and the size of what it wrote.

  per call      (Ir(config) - Ir(untraced)) / calls   whole process: set-up, the run,
                                                      the write-out, tear-down
  calls         Python calls and generator resumptions in the workload (setprofile);
                the C calls (setprofile's c_call) are counted beside them

A peer that is not installed in the measured interpreter's environment is skipped with
a note (peers are not fntrace dependencies: pip install viztracer yappi pyftrace into a
separate environment, see README).  ``--markdown`` prints the table for the README.
"""
# This file is also the traced program: the driver's imports are made inside main().
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_AST_SOURCE = None


def _ast_part():
    import ast
    global _AST_SOURCE
    if _AST_SOURCE is None:
        with open(os.path.join(HERE, "_workload.py"), encoding="utf-8") as f:
            _AST_SOURCE = f.read()

    class Counter(ast.NodeVisitor):
        def __init__(self):
            self.names = 0

        def visit_Name(self, node):
            self.names += 1
            self.generic_visit(node)

    tree = ast.parse(_AST_SOURCE)
    c = Counter()
    c.visit(tree)
    return c.names + sum(1 for _ in ast.walk(tree))


def _difflib_part():
    import difflib
    a = [f"line {i} {'x' * (i % 7)}" for i in range(120)]
    b = [s if i % 9 else s + " changed" for i, s in enumerate(a)]
    return int(difflib.SequenceMatcher(None, a, b).ratio() * 1000)


def run(n):
    sys.path.insert(0, HERE)
    import _workload
    acc = 0
    for _ in range(n):
        acc += _workload.run(1)
        acc += _difflib_part()
        acc += _ast_part()
    return acc


def _child(mode, n, extra):
    if mode == "workload":
        run(n)
    elif mode == "count":
        counts = [0]

        c_calls = [0]

        def prof(frame, event, arg):
            if event == "call":
                counts[0] += 1
            elif event == "c_call":
                c_calls[0] += 1

        sys.setprofile(prof)
        run(n)
        sys.setprofile(None)
        print(c_calls[0] - 1, counts[0] - 1)   # (setprofile(None), run() itself)
    elif mode == "yappi":
        import yappi
        yappi.start()
        run(n)
        yappi.stop()
        yappi.get_func_stats().save(extra[0], type="pstat")
    else:
        raise SystemExit(f"unknown child mode {mode!r}")


# -- the driver ------------------------------------------------------------------------

CONFIGS = ("untraced", "function", "graph", "graph-args", "graph-cpu", "graph-c", "cold",
           "cprofile",
           "viztracer", "pyftrace", "yappi")
LABELS = {
    "untraced": "untraced",
    "function": "fntrace record -p function",
    "graph": "fntrace record -p function_graph",
    "graph-args": "fntrace record -p function_graph -A -R",
    "graph-cpu": "fntrace record -p function_graph --cpu-time",
    "graph-c": "fntrace record -p function_graph --c-calls",
    "cold": "fntrace record -F never_called (cold filter)",
    "cprofile": "python -m cProfile -o FILE",
    "viztracer": "viztracer -o FILE.json",
    "pyftrace": "pyftrace (stdout to FILE)",
    "yappi": "yappi, stats saved (pstat)",
}
PEER_MODULE = {"viztracer": "viztracer", "pyftrace": "pyftrace", "yappi": "yappi"}


def _cmd(py, config, n, out):
    """(argv, stdout file or None) of one configuration."""
    me = os.path.abspath(__file__)
    work = [me, "--child", "workload", str(n)]
    rec = [py, "-m", "fntrace.cli.main", "record", "-o", out]
    if config == "untraced":
        return [py, *work], None
    if config == "function":
        return [*rec, "-p", "function", *work], None
    if config == "graph":
        return [*rec, "-p", "function_graph", *work], None
    if config == "graph-args":
        return [*rec, "-p", "function_graph", "-A", "-R", *work], None
    if config == "graph-cpu":
        return [*rec, "-p", "function_graph", "--cpu-time", *work], None
    if config == "graph-c":
        return [*rec, "-p", "function_graph", "--c-calls", *work], None
    if config == "cold":
        return [*rec, "-p", "function", "-F", "_workload.never_called", *work], None
    if config == "cprofile":
        return [py, "-m", "cProfile", "-o", out, *work], None
    if config == "viztracer":
        return [py, "-m", "viztracer", "--quiet", "-o", out, *work], None
    if config == "pyftrace":
        exe = os.path.join(os.path.dirname(py), "pyftrace")
        return [exe, "--", *work], out
    if config == "yappi":
        return [py, me, "--child", "yappi", str(n), out], None
    raise ValueError(config)


def _available(py, config, env):
    import subprocess
    mod = PEER_MODULE.get(config)
    if mod is None:
        return True
    p = subprocess.run([py, "-c", f"import {mod}"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return p.returncode == 0


def _run_once(argv, stdout_path, env):
    """(wall seconds, peak RSS in KiB) of one run of argv."""
    import subprocess
    import time
    out = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
    try:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if stdout_path:
            out.close()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with status {p.returncode}")
    return wall, ru.ru_maxrss


def measure(py, n, configs, runs, callgrind=True, variant="native"):
    import statistics
    import subprocess
    import tempfile
    sys.path.insert(0, HERE)
    import _common
    env = _common.child_env({"FNTRACE_PURE": "1" if variant == "pure" else "0"})
    info = _common.probe(py, env)
    if variant == "native" and not info["native"]:
        # src/ comes first on the children's path: without a build there, fntrace runs
        # its pure hot path, and the table would say nothing of it
        raise SystemExit(f"{py}: fntrace's native twin is not built for it (pip install "
                         "-e ., or python setup.py build_ext --inplace): refusing to "
                         "measure the pure hot path as native; --variant pure measures it")
    c_calls, calls = map(int, subprocess.run(
        [py, os.path.abspath(__file__), "--child", "count", str(n)], env=env,
        stdout=subprocess.PIPE, text=True, check=True).stdout.split()[-2:])
    todo = []
    for c in configs:
        if _available(py, c, env):
            todo.append(c)
        else:
            print(f"note: {py}: {PEER_MODULE[c]} is not installed; {c} skipped",
                  file=sys.stderr)
    res = {c: {"wall": [], "rss": []} for c in todo}
    with tempfile.TemporaryDirectory(prefix="fntrace-suite-") as tmp:
        outs = {c: os.path.join(tmp, c + (".json" if c == "viztracer" else ".out"))
                for c in todo}
        for _ in range(runs):
            for c in todo:                       # interleaved
                argv, so = _cmd(py, c, n, outs[c])
                wall, rss = _run_once(argv, outs[c] if so else None, env)
                res[c]["wall"].append(wall)
                res[c]["rss"].append(rss)
                res[c]["size"] = os.path.getsize(outs[c]) if os.path.exists(outs[c]) else 0
        if callgrind and _common.have_valgrind():
            for c in todo:
                argv, _ = _cmd(py, c, n, outs[c])       # (stdout is read by callgrind_ir)
                res[c]["ir"] = _common.callgrind_ir(argv, env)
                print(f"  [{c}] {res[c]['ir']:,} instructions", file=sys.stderr)
    for c in todo:
        res[c]["wall_median"] = statistics.median(res[c]["wall"])
        res[c]["rss_median"] = statistics.median(res[c]["rss"])
    return {"python": f"{info['version']} ({info['backend']}, {variant} hot path)",
            "n": n, "calls": calls, "c_calls": c_calls,
            "runs": runs, "results": res}


def table(m):
    res = m["results"]
    calls = m["calls"]
    u = res.get("untraced", {})
    lines = [f"Python {m['python']}: workload x{m['n']}, {calls:,} Python calls "
             f"(and {m.get('c_calls', 0):,} C calls); median of {m['runs']} interleaved runs",
             "",
             "| configuration | instructions | vs untraced | per call (whole process) "
             "| vs cProfile | wall (median) | peak RSS | output |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    cp = res.get("cprofile", {}).get("ir")
    for c in CONFIGS:
        r = res.get(c)
        if r is None:
            continue
        ir = r.get("ir")
        pc = (ir - u["ir"]) / calls if ir and u.get("ir") else None
        cp_pc = (cp - u["ir"]) / calls if cp and u.get("ir") else None
        vs_u = f"{ir / u['ir']:.3f}x" if ir and u.get("ir") else "-"
        vs_cp = f"{pc / cp_pc:.2f}" if pc is not None and cp_pc and c != "untraced" else "-"
        lines.append(
            f"| {LABELS[c]} | {ir:,} | {vs_u} | {'-' if c == 'untraced' or pc is None else f'{pc:,.0f}'} "
            f"| {vs_cp} | {r['wall_median'] * 1000:,.0f} ms | {r['rss_median'] / 1024:,.1f} MiB "
            f"| {_size(r.get('size', 0)) if c != 'untraced' else '-'} |"
            if ir else
            f"| {LABELS[c]} | - | - | - | - | {r['wall_median'] * 1000:,.0f} ms "
            f"| {r['rss_median'] / 1024:,.1f} MiB | {_size(r.get('size', 0))} |")
    return "\n".join(lines)


def _size(b):
    if b >= 1 << 20:
        return f"{b / (1 << 20):,.1f} MiB"
    if b >= 1 << 10:
        return f"{b / (1 << 10):,.1f} KiB"
    return f"{b} B"


def main(argv=None):
    import argparse
    import json
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2, help="workload repetitions (default 2)")
    ap.add_argument("--python", action="append", help="interpreter(s) to measure "
                    "(default: this one); peers must be installed beside it")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per configuration (default 3)")
    ap.add_argument("--only", action="append", choices=CONFIGS,
                    help="measure only these (untraced always)")
    ap.add_argument("--no-callgrind", action="store_true", help="times and RSS only")
    ap.add_argument("--variant", choices=("native", "pure"), default="native",
                    help="fntrace's hot path (default native: refused when it is not built)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--markdown", action="store_true", help="the tables as Markdown (default)")
    args = ap.parse_args(argv)
    configs = list(CONFIGS) if not args.only else ["untraced"] + [c for c in CONFIGS
                                                                  if c in args.only]
    out = [measure(py, args.n, configs, args.runs, not args.no_callgrind, args.variant)
           for py in (args.python or [sys.executable])]
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print("\n\n".join(table(m) for m in out))
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    else:
        sys.exit(main())
