#!/usr/bin/env python3
"""The cost of arguments and return values: function_graph with and without -A -R.

Three workloads (this file, ``--child WORKLOAD N``), each a loop of calls to one traced
function:

  fib         fib(N): an int argument, an int return
  common      f(i, x, s, None, flag, (i, x)) returning (i, s): ints, a float, a short
              str, None, a bool, a small tuple — N calls
  big         g(list of 2000 ints, dict of 500 str -> int) returning a list of 2000
              floats — N calls
  stdlib      N rounds of the standard library's own Python code: json.dumps of a
              dict (sort_keys, indent: the pure encoder), Fractions added, textwrap.wrap,
              difflib.SequenceMatcher.ratio — every function traced, its arguments and
              return values str, dict, list, Fraction, generators...; the calls are
              counted by sys.setprofile in a run of its own

Configurations (each one process, counted by callgrind):

  untraced       python args_cost.py --child WORKLOAD N
  graph          fntrace record -p function_graph -o FILE
  graph-args     fntrace record -p function_graph -A -R -o FILE
  viztracer      python -m viztracer --quiet -o FILE.json
  viztracer-args the same with --log_func_args --log_func_retval

*Added per call* = ((Ir(config, N) - Ir(config, 0)) - (Ir(untraced, N) - Ir(untraced, 0)))
/ calls: start-up, the write-out of an empty trace and the workload's own cost are taken
out.  With ``--callbacks`` only the instructions inside fntrace's native callbacks are
counted (callgrind ``--toggle-collect`` on the sys.monitoring callbacks and the 3.11
profile hook): the cost paid in the program's thread at each call, without the trace
file's write-out; per call = Ir / calls (fntrace configurations only).
viztracer is not an fntrace dependency: install it beside fntrace (see README);
when the measured interpreter cannot import it its rows are skipped with a note.
"""
# This file is also the traced program: the driver's imports are made inside main().
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def common(i, x, s, nothing, flag, pair):
    return (i, s)


def big(items, table):
    return [v * 0.5 for v in items[:2000]]


def _stdlib_round(i):
    import difflib
    import fractions
    import json
    import textwrap
    json.dumps({"k": [i, "v", 2.5], "n": None, "s": "text"}, sort_keys=True, indent=1)
    fractions.Fraction(i, 7) + fractions.Fraction(1, 3)
    textwrap.wrap("lorem ipsum dolor sit amet " * 3, 20)
    difflib.SequenceMatcher(None, "abcde fghij", "abxde fgyij").ratio()


def _fib_calls(n):
    a, b = 1, 1                # calls(n) = calls(n-1) + calls(n-2) + 1
    for _ in range(n):
        a, b = b, a + b + 1
    return a


def _child(workload, n):
    if workload == "fib":
        if n:
            fib(n)
        return
    if workload == "common":
        for i in range(n):
            common(i, i * 0.5, "short text", None, i & 1 == 0, (i, 2.5))
        return
    if workload == "big":
        items = list(range(2000))
        table = {f"key{i}": i for i in range(500)}
        for _ in range(n):
            big(items, table)
        return
    if workload == "stdlib":
        _stdlib_round(-1)               # set-up (imports, re's caches): in the N=0 run too
        for i in range(n):
            _stdlib_round(i)
        return
    raise SystemExit(f"unknown workload {workload!r}")


def _count(workload, n):
    """The Python calls the workload makes (sys.setprofile 'call' events), printed."""
    _child(workload, 0)                 # (the set-up, as the N=0 run makes it)
    calls = [0]

    def prof(frame, event, arg):
        if event == "call":
            calls[0] += 1
    sys.setprofile(prof)
    for i in range(n):
        _stdlib_round(i)
    sys.setprofile(None)
    print(calls[0])


def calls_of(workload, n, py=None, env=None):
    if workload == "fib":
        return _fib_calls(n)
    if workload == "stdlib":
        import subprocess
        out = subprocess.run([py or sys.executable, os.path.abspath(__file__), "--count",
                              workload, str(n)], env=env, capture_output=True, text=True,
                             check=True).stdout
        return int(out.split()[-1])
    return n


WORKLOADS = ("fib", "common", "big", "stdlib")
CONFIGS = ("untraced", "graph", "graph-args", "viztracer", "viztracer-args")
LABELS = {
    "untraced": "untraced",
    "graph": "fntrace record -p function_graph",
    "graph-args": "fntrace record -p function_graph -A -R",
    "viztracer": "viztracer",
    "viztracer-args": "viztracer --log_func_args --log_func_retval",
}
DEFAULT_N = {"fib": 20, "common": 20000, "big": 300, "stdlib": 100}


def _cmd(py, config, workload, n, out):
    work = [os.path.abspath(__file__), "--child", workload, str(n)]
    rec = [py, "-m", "fntrace.cli.main", "record", "-o", out, "-p", "function_graph"]
    if config == "untraced":
        return [py, *work]
    if config == "graph":
        return [*rec, *work]
    if config == "graph-args":
        return [*rec, "-A", "-R", *work]
    if config == "viztracer":
        return [py, "-m", "viztracer", "--quiet", "-o", out, *work]
    if config == "viztracer-args":
        return [py, "-m", "viztracer", "--quiet", "--log_func_args", "--log_func_retval",
                "-o", out, *work]
    raise ValueError(config)


# the native callbacks: sys.monitoring's (3.12+) and the setprofile hook (3.11)
CALLBACKS = ("--collect-atstart=no", "--toggle-collect=on_py_*", "--toggle-collect=c_profile")


def measure(py, workloads, configs, ns, pure=False, callbacks=False):
    import subprocess
    import tempfile
    sys.path.insert(0, HERE)
    import _common
    env = _common.child_env({"FNTRACE_PURE": "1" if pure else "0"})
    has_viz = subprocess.run([py, "-c", "import viztracer"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    if not has_viz:
        print(f"note: {py}: viztracer is not installed; its rows are skipped", file=sys.stderr)
        configs = [c for c in configs if not c.startswith("viztracer")]
    if callbacks:
        configs = [c for c in configs if c in ("graph", "graph-args")]
    elif "untraced" not in configs:
        configs = ["untraced", *configs]
    out = {}
    with tempfile.TemporaryDirectory(prefix="fntrace-args-") as tmp:
        for w in workloads:
            n = ns.get(w, DEFAULT_N[w])
            calls = calls_of(w, n, py, env)
            ir = {}
            if callbacks:
                pc = {}
                for c in configs:
                    f = os.path.join(tmp, c + ".out")
                    ir = _common.callgrind_ir(_cmd(py, c, w, n, f), env, valgrind_args=CALLBACKS)
                    pc[c] = ir / calls
                    print(f"  [{w} {c}] {ir:,} in the callbacks", file=sys.stderr)
                out[w] = {"n": n, "calls": calls, "added_per_call": pc}
                continue
            for c in configs:
                f = os.path.join(tmp, c + (".json" if c.startswith("viz") else ".out"))
                full = _common.callgrind_ir(_cmd(py, c, w, n, f), env)
                zero = _common.callgrind_ir(_cmd(py, c, w, 0, f), env)
                ir[c] = (full, zero)
                print(f"  [{w} {c}] {full:,} / {zero:,} (N=0)", file=sys.stderr)
            base = ir["untraced"][0] - ir["untraced"][1]
            out[w] = {"n": n, "calls": calls,
                      "added_per_call": {c: ((ir[c][0] - ir[c][1]) - base) / calls
                                         for c in configs if c != "untraced"},
                      "ir": ir}
    info = _common.probe(py, env)
    return {"python": f"{info['version']} ({info['backend']})",
            "variant": ("pure" if pure else "native") + (", callbacks only" if callbacks else ""),
            "workloads": out}


def table(m):
    what = "instructions per call" if "callbacks" in m["variant"] else "added instructions per call"
    lines = [f"Python {m['python']}, {m['variant']}: {what}", "",
             "| workload | calls | " + " | ".join(LABELS[c] for c in CONFIGS[1:]) + " | -A -R / plain |",
             "|---|---:|" + "---:|" * (len(CONFIGS) - 1) + "---:|"]
    for w, r in m["workloads"].items():
        pc = r["added_per_call"]
        cells = [f"{pc[c]:,.0f}" if c in pc else "-" for c in CONFIGS[1:]]
        ratio = (f"{pc['graph-args'] / pc['graph']:.2f}x"
                 if pc.get("graph") and "graph-args" in pc else "-")
        lines.append(f"| {w} | {r['calls']:,} | " + " | ".join(cells) + f" | {ratio} |")
    if any("viztracer-args" in r["added_per_call"] for r in m["workloads"].values()):
        lines.append("")
        for w, r in m["workloads"].items():
            pc = r["added_per_call"]
            if "viztracer-args" in pc and "graph-args" in pc:
                lines.append(f"- {w}: fntrace -A -R / viztracer with arguments: "
                             f"{pc['graph-args'] / pc['viztracer-args']:.3f}")
    return "\n".join(lines)


def main(argv=None):
    import argparse
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1], int(argv[2]))
        return 0
    if argv[:1] == ["--count"]:
        _count(argv[1], int(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", help="interpreter(s) to measure "
                    "(default: this one)")
    ap.add_argument("--workload", action="append", choices=WORKLOADS,
                    help="workload(s) to run (default: all)")
    ap.add_argument("--only", action="append", choices=CONFIGS,
                    help="configuration(s) to run (default: all; untraced always runs)")
    ap.add_argument("--n", action="append", default=[], metavar="WORKLOAD=N",
                    help="size of a workload (defaults: fib=20, common=20000, big=300, stdlib=100)")
    ap.add_argument("--pure", action="store_true", help="FNTRACE_PURE=1 (the Python hot path)")
    ap.add_argument("--callbacks", action="store_true",
                    help="count only inside fntrace's native callbacks (graph, graph-args)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = ap.parse_args(argv)
    ns = {}
    for item in args.n:
        w, _, v = item.partition("=")
        if w not in WORKLOADS or not v.isdigit():
            ap.error(f"--n {item!r}: expected WORKLOAD=N with WORKLOAD one of {', '.join(WORKLOADS)}")
        ns[w] = int(v)
    results = [measure(py, args.workload or list(WORKLOADS), args.only or list(CONFIGS), ns,
                       args.pure, args.callbacks)
               for py in (args.python or [sys.executable])]
    if args.json:
        import json
        print(json.dumps(results, indent=1))
    else:
        print("\n\n".join(table(m) for m in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
