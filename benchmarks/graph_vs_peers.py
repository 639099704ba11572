#!/usr/bin/env python3
"""function_graph on every function, against cProfile and viztracer; fgraph users; a cold
set_graph_function.

One call-heavy, deterministic workload, defined in this file so that every tool runs the
same script (fib(18), a small object model, ast.parse + ast.walk + an ast.NodeVisitor over
the standard library's ast.py), is measured in whole-process instructions (callgrind) in
these configurations:

  untraced        python graph_vs_peers.py --child workload N
  record          fntrace record -p function_graph -o FILE: every function, written to a
                  trace file (the run, the ring-buffer sink and the final write-out)
  tracefs         in process: Tracefs(), buffer_size_kb large enough that nothing is
                  overwritten, current_tracer = function_graph, the workload, then nop
  cprofile        python -m cProfile -o FILE
  viztracer       python -m viztracer -o FILE.json (default options), if installed
  viztracer-inproc  in process: VizTracer(verbose=0).start() / stop() around the
                  workload, nothing saved (the tracing alone, without the JSON write-out)
  users2/users16  in process: 2 or 16 FgraphOps users on every function (entryfunc
                  returns True, retfunc does nothing; the callbacks themselves are in
                  each user's set_ftrace_notrace)
  cold            in process: set_graph_function = __main__.never_called, which nothing
                  calls, then current_tracer = function_graph
  cold-record     the same through fntrace record -g __main__.never_called

A separate run counts the workload's Python calls (sys.setprofile 'call' events: calls
and generator resumptions, which is what function_graph records as calls).  Every
configuration runs with the workload repeated N times and with N = 0 (start-up, set-up,
tear-down only):

  vs untraced              = config(N) / untraced(N)
  per call, whole process  = (config(N) - untraced(N)) / calls
  per call, marginal       = ((config(N) - config(0)) - (untraced(N) - untraced(0))) / calls

fntrace is measured with its native twin and with the pure-Python hot path
(FNTRACE_PURE=1), see --variants; the peers do not depend on it and run once.

viztracer is not a dependency of fntrace: install it beside fntrace in a separate
environment (python -m venv .venvs/bench-3.12 && .venvs/bench-3.12/bin/pip install -e .
viztracer).  A peer that is not installed is skipped with a note.

Options: --python EXE (repeatable), --n N (default 3), --variants native,pure,
--only CONFIG (repeatable), --runs R, --json, --tables FILE.json.
"""
# This file is also the traced program: keep what it imports at start-up to the minimum
# (the driver's imports are made inside main()).
import ast
import os
import sys

# ---------------------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------------------


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __add__(self, other):
        return Vec(self.x + other.x, self.y + other.y)

    def scale(self, k):
        return Vec(self.x * k, self.y * k)

    def dot(self, other):
        return self.x * other.x + self.y * other.y


class Body:
    def __init__(self, pos, vel, mass=1.0):
        self.pos = pos
        self.vel = vel
        self.mass = mass

    @property
    def energy(self):
        return 0.5 * self.mass * self.vel.dot(self.vel)

    def step(self, dt, gravity):
        self.vel = self.vel + gravity.scale(dt)
        self.pos = self.pos + self.vel.scale(dt)
        if self.pos.y < 0.0:
            self.bounce()

    def bounce(self):
        self.pos = Vec(self.pos.x, -self.pos.y)
        self.vel = Vec(self.vel.x, -self.vel.y)


def oo_workload(nbodies=30, steps=50):
    gravity = Vec(0.0, -9.81)
    bodies = []
    for i in range(nbodies):
        bodies.append(Body(Vec(float(i), 1.0 + i), Vec(1.0, 0.0)))
    for _ in range(steps):
        for b in bodies:
            b.step(0.01, gravity)
    total = 0.0
    for b in bodies:
        total += b.energy
    return total


class NameCounter(ast.NodeVisitor):
    def __init__(self):
        self.names = {}
        self.calls = 0

    def visit_Name(self, node):
        self.names[node.id] = self.names.get(node.id, 0) + 1

    def visit_Call(self, node):
        self.calls += 1
        self.generic_visit(node)


# The standard library's ast.py: parsed (C), then walked by ast.walk (generators:
# iter_child_nodes, iter_fields) and by a NodeVisitor (visit/generic_visit recursion).
with open(ast.__file__, encoding="utf-8") as _f:
    AST_SOURCE = _f.read()


def ast_workload():
    tree = ast.parse(AST_SOURCE)
    kinds = {}
    for node in ast.walk(tree):
        k = type(node).__name__
        kinds[k] = kinds.get(k, 0) + 1
    v = NameCounter()
    v.visit(tree)
    return len(kinds) + v.calls + len(v.names)


def never_called():
    """What the cold set_graph_function selects: traceable, never called."""
    raise AssertionError("never_called was called")


def run(n):
    acc = 0
    for _ in range(n):
        acc += fib(18)
        acc += int(oo_workload())
        acc += ast_workload()
    return acc


# ---------------------------------------------------------------------------------------
# Children: one configuration each
# ---------------------------------------------------------------------------------------

# The fgraph users' callbacks.  They live in this (traced) file, so each user's ops
# excludes them with set_ftrace_notrace, as any user of the API would.
def bench_entry(trace, gops, fregs):
    return True


def bench_ret(trace, gops, fregs):
    pass


def _import_fntrace():
    try:
        import fntrace  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "src"))


def _child(mode, n, extra):
    """Run one configuration in this process; print JSON facts when asked (``report``)."""
    report = "report" in extra
    out = {}
    if mode == "workload":
        run(n)
    elif mode == "count":
        counts = {"call": 0, "c_call": 0}

        def prof(frame, event, arg):
            if event == "call" or event == "c_call":
                counts[event] += 1

        sys.setprofile(prof)
        run(n)
        sys.setprofile(None)
        counts["call"] -= 1          # run() itself
        counts["c_call"] -= 1        # sys.setprofile(None)
        out = counts
        report = True
    elif mode in ("tracefs", "cold"):
        _import_fntrace()
        from fntrace.tracefs import Tracefs
        fs = Tracefs()
        if mode == "tracefs":
            fs.write("buffer_size_kb", extra[0])
        else:
            fs.write("set_graph_function", "__main__.never_called")
        fs.write("current_tracer", "function_graph")
        run(n)
        bufs = fs.tr.buffers.values()
        out = {"written": sum(b.written for b in bufs),
               "overrun": sum(b.overrun for b in bufs),
               "graph_functions": fs.read("set_graph_function").split()}
        fs.write("current_tracer", "nop")      # unpatches everything, clears the buffers
    elif mode == "viztracer-inproc":
        from viztracer import VizTracer
        t = VizTracer(verbose=0)
        t.start()
        run(n)
        t.stop()
    elif mode == "viztracer-version":
        import viztracer
        out = {"version": viztracer.__version__}
        report = True
    elif mode == "users":
        _import_fntrace()
        from fntrace.core.ops import ftrace_set_notrace
        from fntrace.fgraph import FgraphOps, register_ftrace_graph, unregister_ftrace_graph
        users = []
        for i in range(int(extra[0])):
            g = FgraphOps(bench_entry, bench_ret, name=f"bench{i}")
            ftrace_set_notrace(g.ops, "__main__.bench_entry __main__.bench_ret")
            register_ftrace_graph(g)
            users.append(g)
        run(n)
        for g in reversed(users):
            unregister_ftrace_graph(g)
    else:
        raise SystemExit(f"unknown child mode {mode!r}")
    if report:
        import json
        print(json.dumps(out))
    return 0


# ---------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------

CONFIGS = ("untraced", "record", "tracefs", "cprofile", "viztracer", "viztracer-inproc",
           "users2", "users16", "cold", "cold-record")
PEERS = ("untraced", "cprofile", "viztracer", "viztracer-inproc")   # once, not per hot path
DESCRIPTION = {
    "untraced": "untraced",
    "record": "(b) fntrace record -p function_graph -o FILE",
    "tracefs": "(b) function_graph, in-process tracefs, no overwrite",
    "cprofile": "(c) python -m cProfile -o FILE",
    "viztracer": "(d) viztracer -o FILE.json",
    "viztracer-inproc": "(d) viztracer start/stop in process, not saved",
    "users2": "(e) 2 fgraph users (trivial entry/ret)",
    "users16": "(e) 16 fgraph users (trivial entry/ret)",
    "cold": "(f) set_graph_function never_called, in-process",
    "cold-record": "(f) fntrace record -p function_graph -g never_called",
}
_OUTPUT = {"record": "trace.dat", "cprofile": "cprofile.out", "viztracer": "viztracer.json"}


def _helpers():
    """benchmarks/_common.py (callgrind, child environment), imported on first use."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import _common
    return _common


def _config_cmd(py, config, n, tmp, buffer_kb):
    me = os.path.abspath(__file__)
    work = [me, "--child", "workload", str(n)]
    rec = [py, "-m", "fntrace.cli.main", "record", "-p", "function_graph"]
    if config == "untraced":
        return [py, *work]
    if config == "record":
        return [*rec, "-o", os.path.join(tmp, "trace.dat"), *work]
    if config == "cold-record":
        return [*rec, "-g", "__main__.never_called", "-o", os.path.join(tmp, "cold.dat"), *work]
    if config == "cprofile":
        return [py, "-m", "cProfile", "-o", os.path.join(tmp, "cprofile.out"), *work]
    if config == "viztracer":
        return [py, "-m", "viztracer", "--quiet", "-o", os.path.join(tmp, "viztracer.json"),
                *work]
    if config == "tracefs":
        return [py, me, "--child", "tracefs", str(n), str(buffer_kb)]
    if config == "viztracer-inproc":
        return [py, me, "--child", "viztracer-inproc", str(n)]
    if config == "cold":
        return [py, me, "--child", "cold", str(n)]
    if config.startswith("users"):
        return [py, me, "--child", "users", str(n), config[len("users"):]]
    raise ValueError(config)


def _available(py, module, env):
    import subprocess
    p = subprocess.run([py, "-c", f"import {module}"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p.returncode == 0


def _json_child(py, args, env):
    import json
    import subprocess
    me = os.path.abspath(__file__)
    p = subprocess.run([py, me, "--child", *args], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _measure_config(py, config, n, env, tmp, buffer_kb, runs, label):
    c = _helpers()
    ent = {}
    for k in (n, 0):
        ir = c.callgrind_ir(_config_cmd(py, config, k, tmp, buffer_kb), env, runs=runs)
        print(f"  [{label} {config} n={k}] {ir:,} instructions", file=sys.stderr)
        ent["ir_n" if k == n else "ir_0"] = ir
        if k == n and config in _OUTPUT:
            path = os.path.join(tmp, _OUTPUT[config])
            ent["file_bytes"] = os.path.getsize(path) if os.path.exists(path) else None
    if config in ("tracefs", "cold"):
        # Entries in the buffer after the workload, and after none (set-up alone).
        f_n = _json_child(py, [config, str(n), str(buffer_kb), "report"], env)
        f_0 = _json_child(py, [config, "0", str(buffer_kb), "report"], env)
        ent.update(written=f_n["written"], written_setup=f_0["written"],
                   overrun=f_n["overrun"], graph_functions=f_n["graph_functions"])
        if config == "cold" and f_n["graph_functions"] != ["__main__.never_called"]:
            raise RuntimeError(f"cold: set_graph_function reads {f_n['graph_functions']}")
    return ent


def _derive(ent, u, calls):
    ent["vs_untraced"] = ent["ir_n"] / u["ir_n"]
    ent["setup"] = ent["ir_0"] - u["ir_0"]
    ent["per_call_whole"] = (ent["ir_n"] - u["ir_n"]) / calls
    ent["per_call_marginal"] = ((ent["ir_n"] - ent["ir_0"]) - (u["ir_n"] - u["ir_0"])) / calls


def measure(py, n, variant_spec, only, runs):
    """Everything for one interpreter: peers once, fntrace once per hot path."""
    import shutil
    import tempfile
    c = _helpers()
    env0 = c.child_env()
    info = c.probe(py, env0)
    version = f"{info['version']} ({info['backend']} back end)"
    counts = _json_child(py, ["count", str(n)], env0)
    calls = counts["call"]
    # Two 32-byte records per call, with room to spare: nothing is overwritten.
    buffer_kb = max(1408, (calls * 2 * 32 * 5 // 4) // 1024 + 1)
    res = {"python": version, "n": n, "calls": calls, "c_calls": counts["c_call"],
           "peers": {}, "variants": {}, "skipped": {}}
    tmp = tempfile.mkdtemp(prefix="graph_vs_peers-")
    try:
        for config in PEERS:
            if only and config not in only and config != "untraced":
                continue
            module = {"cprofile": "cProfile", "viztracer-inproc": "viztracer"}.get(config, config)
            if config != "untraced" and not _available(py, module, env0):
                why = (f"{config} is not installed for this interpreter (not a dependency "
                       "of fntrace: pip install it into a separate environment)")
                res["skipped"][config] = why
                print(f"note: {version}: skipping {config}: {why}", file=sys.stderr)
                continue
            res["peers"][config] = _measure_config(py, config, n, env0, tmp, buffer_kb, runs,
                                                   version)
        if "viztracer" in res["peers"] or "viztracer-inproc" in res["peers"]:
            res["viztracer_version"] = _json_child(py, ["viztracer-version", "0"], env0)
        for vname, venv, vlabel in c.variants(py, variant_spec):
            rows = {}
            for config in CONFIGS:
                if config in PEERS or (only and config not in only):
                    continue
                rows[config] = _measure_config(py, config, n, venv, tmp, buffer_kb, runs,
                                               vlabel)
            res["variants"][vname] = {"label": vlabel, "configs": rows}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    u = res["peers"]["untraced"]
    for name, e in res["peers"].items():
        if name != "untraced":
            _derive(e, u, calls)
    u["vs_untraced"] = 1.0
    for v in res["variants"].values():
        for e in v["configs"].values():
            _derive(e, u, calls)
        ratios = {}
        for f in ("record", "tracefs"):
            for peer in ("cprofile", "viztracer", "viztracer-inproc"):
                if f in v["configs"] and peer in res["peers"]:
                    for kind in ("whole", "marginal"):
                        ratios[f"{f}/{peer} ({kind})"] = (
                            v["configs"][f][f"per_call_{kind}"]
                            / res["peers"][peer][f"per_call_{kind}"])
        v["ratios"] = ratios
    return res


def _fmt_pc(x):
    return "-" if x is None else f"{x:,.0f}"


def print_tables(results, out=None):
    w = (out or sys.stdout).write
    for r in results:
        w(f"Python {r['python']}: workload x{r['n']}, {r['calls']:,} Python calls "
          f"(+{r['c_calls']:,} C calls); instructions (callgrind)\n\n")
        w("| configuration | hot path | N | N=0 | set-up + tear-down | vs untraced | "
          "per call, whole process | per call, marginal |\n")
        w("|---|---|---:|---:|---:|---:|---:|---:|\n")
        rows = [(c, "", e) for c, e in r["peers"].items()]
        for vname, v in r["variants"].items():
            rows += [(c, vname, e) for c, e in v["configs"].items()]
        order = {c: i for i, c in enumerate(CONFIGS)}
        rows.sort(key=lambda t: (order[t[0]], t[1] != "pure"))
        for config, vname, e in rows:
            name = DESCRIPTION[config]
            if config.startswith("viztracer") and r.get("viztracer_version"):
                name += f" {r['viztracer_version']['version']}"
            setup = "-" if config == "untraced" else f"{e['setup']:,}"
            w(f"| {name} | {vname or '-'} | {e['ir_n']:,} | {e['ir_0']:,} | {setup} | "
              f"{e['vs_untraced']:.3f}x | {_fmt_pc(e.get('per_call_whole'))} | "
              f"{_fmt_pc(e.get('per_call_marginal'))} |\n")
        for config, why in r["skipped"].items():
            w(f"| {DESCRIPTION[config]} | skipped: {why} | | | | | | |\n")
        w("\n")
        for vname, v in r["variants"].items():
            cf = v["configs"]
            for f in ("record", "tracefs"):
                for peer, target in (("cprofile", 1.0), ("viztracer", 0.1),
                                     ("viztracer-inproc", 0.1)):
                    k = f"{f}/{peer} (whole)"
                    if k in v["ratios"]:
                        w(f"- {vname}: {f} / {peer}, per call: {v['ratios'][k]:.2f} whole "
                          f"process, {v['ratios'][f'{f}/{peer} (marginal)']:.2f} marginal "
                          f"(target <= {target})\n")
            for c in ("cold", "cold-record"):
                if c in cf:
                    w(f"- {vname}: {c} / untraced: {cf[c]['vs_untraced']:.3f} "
                      "(target <= 1.02 on 3.12+)\n")
            if "tracefs" in cf:
                t = cf["tracefs"]
                w(f"- {vname}: tracefs entries: {t['written']:,} after the workload "
                  f"(2 per call: {2 * r['calls']:,}), {t['written_setup']:,} with N=0; "
                  f"overrun {t['overrun']}\n")
        sizes = [(c, r["peers"].get(c) or r["variants"].get("pure", r["variants"].get(
            "native", {"configs": {}}))["configs"].get(c)) for c in _OUTPUT]
        sizes = [(c, e["file_bytes"]) for c, e in sizes if e and e.get("file_bytes")]
        if sizes:
            w("- output files: " + ", ".join(f"{c} {b:,} bytes" for c, b in sizes) + "\n")
        w("\n")


def main(argv=None):
    import argparse
    import json

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=3, help="workload repetitions (default 3)")
    p.add_argument("--python", action="append", default=[], metavar="EXE",
                   help="interpreter(s) to measure (default: this one)")
    p.add_argument("--variants", default="native,pure", metavar="LIST",
                   help="fntrace hot paths to measure: native (when built), pure "
                        "(FNTRACE_PURE=1); default native,pure")
    p.add_argument("--only", action="append", default=[], choices=CONFIGS, metavar="CONFIG",
                   help="measure only these configurations (untraced always): "
                        + ", ".join(CONFIGS))
    p.add_argument("--runs", type=int, default=1,
                   help="callgrind runs per count, minimum kept (default 1)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--tables", metavar="FILE.json",
                   help="print the tables of a saved --json result and exit")
    a = p.parse_args(argv)
    if a.tables:
        with open(a.tables, encoding="utf-8") as f:
            print_tables(json.load(f))
        return 0
    if not _helpers().have_valgrind():
        print("valgrind not found: this benchmark counts instructions with callgrind",
              file=sys.stderr)
        return 1
    results = [measure(py, a.n, a.variants, set(a.only), a.runs)
               for py in a.python or [sys.executable]]
    if a.json:
        print(json.dumps(results, indent=2))
    else:
        print_tables(results)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(_child(sys.argv[2], int(sys.argv[3]), sys.argv[4:]))
    sys.exit(main())
