"""Options more than one command's parser takes (record, live and ls; report and live;
export), and what they become: one definition each, below main.py and the command
modules that add them."""
from __future__ import annotations

import argparse

from ..errors import FntraceError, UsageError

__all__ = ["add_mode_argument", "add_target", "add_record_options", "add_report_options",
           "report_opts", "split_target", "choose_tracer", "target_of",
           "REPORT_OPTIONS"]


def _mode(text: str) -> int:
    from ..outfile import parse_mode
    try:
        return parse_mode(text)
    except FntraceError as e:
        raise argparse.ArgumentTypeError(e.msg) from None


def add_mode_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", type=_mode, default=None, metavar="OCTAL",
                   help="permissions of the files written (default 0600: a trace holds "
                        "the program's values; 0644 lets other users read them)")


# trace_options a report honours (tracefs names); each also has its "no" form.
REPORT_OPTIONS = ("print-parent", "irq-info", "funcgraph-cpu", "funcgraph-overhead",
                  "funcgraph-proc", "funcgraph-duration", "funcgraph-abstime",
                  "funcgraph-tail", "funcgraph-retval", "funcgraph-retval-hex",
                  "funcgraph-overrun", "funcgraph-args", "funcgraph-task", "task-comm")

# Options that only the function_graph tracer has (trace-cmd record -g etc.).
_GRAPH_ONLY = (("graph_function", "-g"), ("graph_notrace", "--graph-notrace"),
               ("args", "-A"), ("retval", "-R"), ("max_depth", "-D"), ("thresh", "--thresh"),
               ("cpu_time", "--cpu-time"))


def add_target(p: argparse.ArgumentParser) -> None:
    # Only for --help: the target and everything after it are split off before argparse
    # sees the command line (split_target).
    g = p.add_argument_group("the program (everything after it is the program's own)")
    g.add_argument("-m", dest="module", metavar="MOD",
                   help="run library module MOD as a script (like python -m)")
    g.add_argument("-c", dest="code", metavar="CODE",
                   help="run CODE (like python -c)")
    g.add_argument("target", nargs="?", metavar="script.py",
                   help="the program to trace; the arguments after it are its own")


def add_record_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--tracer", default=None, metavar="TRACER",
                   help="tracer to use: function, function_graph, nop (default: function; "
                        "function_graph with -g/-A/-R/-D/--thresh; nop with only -e)")
    p.add_argument("-F", "--filter", action="append", default=[], metavar="GLOB",
                   help="trace only functions matching GLOB (set_ftrace_filter grammar; "
                        "repeatable; may name modules imported later)")
    p.add_argument("-N", "--notrace", action="append", default=[], metavar="GLOB",
                   help="never trace functions matching GLOB (set_ftrace_notrace)")
    p.add_argument("-b", "--buffer-size-kb", default="1408", metavar="KB",
                   help="per-thread ring buffer size in KB (default: 1408)")
    p.add_argument("--otel-context", action="store_true",
                   help="note the OpenTelemetry span the program is in (opentelemetry "
                        "API): the OTLP export makes its calls that span's children")
    p.add_argument("--no-follow", dest="follow", action="store_false",
                   help="trace this process only (by default the processes it starts are "
                        "traced too: fork, multiprocessing, a Python subprocess)")
    p.add_argument("--tid", action="append", default=[], metavar="TID",
                   help="trace only the thread with this native id (set_ftrace_pid and "
                        "set_event_pid; repeatable)")
    p.add_argument("--thread", action="append", default=[], metavar="NAME",
                   help="trace only threads whose name matches the glob NAME when they "
                        "start (set_ftrace_comm and set_event_comm; repeatable)")
    p.add_argument("--c-calls", action="store_true",
                   help="also trace the C functions the traced functions call (builtins, "
                        "methods of C types, C-accelerated modules: builtins.len, "
                        "time.sleep), named and filtered like Python functions "
                        "(trace option func-c-calls)")
    e = p.add_argument_group("events")
    p.set_defaults(events=None)
    e.add_argument("-e", "--event", action=_EventAction, dest="event", metavar="EVENT",
                   help="enable EVENT ('grp:event'), or define and enable a dynamic event: "
                        "'f[:[GRP/]EVENT] SYM[%%return] [FETCHARGS]', a line probe "
                        "'p[:[GRP/]EVENT] SYM[+LINES]|FILE:LINE [FETCHARGS]' (locals by "
                        "name) or a return probe 'r[:[GRP/]EVENT] SYM [FETCHARGS]'")
    e.add_argument("-f", "--event-filter", action=_EventAction, dest="event_filter", metavar="FILTER",
                   help="filter for the preceding -e (e.g. 'n > 3 && name ~ \"a*\"')")
    e.add_argument("-T", "--trigger", action=_EventAction, dest="trigger", metavar="TRIGGER",
                   help="trigger for the preceding -e: traceon, traceoff, stacktrace, "
                        "snapshot, enable_event:G:E, disable_event:G:E [:N] [if FILTER], "
                        "or hist:keys=...[:vals=...][:sort=...] (fntrace hist shows it) "
                        "(a trigger runs on every hit, whatever -f says, unless it has "
                        "its own 'if')")
    p.add_argument("--repr", action="store_true", dest="object_repr",
                   help="show objects (-A, -R, fetchargs) with their own __repr__, and let "
                        "fetchargs run properties and __getattr__: the program's code runs "
                        "inside the tracer (a __repr__ that takes a lock can deadlock, one "
                        "with side effects changes the program); off, objects are shown "
                        "as <module.Class object at 0x...>")
    p.add_argument("--serve", action="store_true",
                   help="serve the recording's tracefs while the program runs: "
                        "`fntrace ctl PID ...` reads and writes its files")
    p.add_argument("--patch", action="append", default=[], metavar="SYM=FILE:FUNC",
                   help="replace function SYM for this run: FUNC(original, *args, **kwargs) "
                        "from FILE decides whether and how to call the original")
    g = p.add_argument_group("function_graph (each selects the function_graph tracer)")
    g.add_argument("-g", "--graph-function", action="append", default=[], metavar="GLOB",
                   help="graph only these functions and what they call (set_graph_function)")
    g.add_argument("--graph-notrace", action="append", default=[], metavar="GLOB",
                   help="do not graph these functions nor what they call (set_graph_notrace)")
    g.add_argument("-D", "--max-depth", default=None, metavar="N",
                   help="graph at most N levels deep (max_graph_depth; 0 = unlimited)")
    g.add_argument("--thresh", default=None, metavar="USEC",
                   help="only write returns that took at least USEC microseconds (tracing_thresh)")
    g.add_argument("-A", "--args", action="store_true",
                   help="record arguments (funcgraph-args)")
    g.add_argument("-R", "--retval", action="store_true",
                   help="record return values (funcgraph-retval)")
    g.add_argument("--cpu-time", action="store_true",
                   help="also record each call's CPU time (trace option nosleep-time): "
                        "report prints it as the duration, as the kernel's; stat --cpu "
                        "shows it, stat the wall time")


class _EventAction(argparse.Action):
    """-e, -f and -T share one ordered list: each -f/-T belongs to the -e before it."""

    def __call__(self, parser, namespace, value, option_string=None):
        events = getattr(namespace, "events", None)
        if events is None:
            events = []
            namespace.events = events
        if self.dest == "event":
            events.append({"event": value, "filter": None, "triggers": []})
        elif not events:
            parser.error(f"{option_string} {value!r} must follow an -e EVENT")
        elif self.dest == "event_filter":
            events[-1]["filter"] = value
        else:
            events[-1]["triggers"].append(value)


def add_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-O", "--option", action="append", default=[], metavar="OPTION",
                   help="trace option, or its no- form: print-parent, irq-info, "
                        "funcgraph-proc, funcgraph-abstime, funcgraph-tail, funcgraph-cpu, "
                        "funcgraph-overhead, funcgraph-duration, funcgraph-retval, "
                        "funcgraph-retval-hex, funcgraph-args, funcgraph-overrun")


def report_opts(args) -> dict:
    """-O options as {tracefs option name: on}: the words of a trace_options write
    (the same grammar and errors), limited to the options that change the text."""
    from ..output.trace_options import parse_trace_options
    out: dict = {}
    known = ", ".join(REPORT_OPTIONS)
    for o in args.option:
        # funcgraph-task: the asyncio task switches (output/task_view.py), a view of
        # the trace file's, not a tracefs option
        rest = []
        for w in o.split():
            if w in ("funcgraph-task", "nofuncgraph-task", "task-comm", "notask-comm"):
                out[w.removeprefix("no")] = not w.startswith("no")
            else:
                rest.append(w)
        if not rest:
            continue
        o = " ".join(rest)
        try:
            words = parse_trace_options(o)
        except FntraceError as e:
            raise UsageError(f"-O {o!r}: {e.msg} (known: {known}, and each with no)") from None
        for name, on in words:
            if name not in REPORT_OPTIONS:
                raise UsageError(f"-O {o!r}: {name} does not change the text "
                                 f"(known: {known}, and each with no)")
            out[name] = on
    return {"options": out}


def split_target(sub: argparse.ArgumentParser, argv: list[str]
                 ) -> tuple[list[str], tuple[str, str, list[str]] | None]:
    """(fntrace's arguments, (kind, name, the program's arguments) or None).

    The program starts at the first ``-m MOD``, ``-c CODE``, ``--`` (the script is the
    next word) or word that is not an option or an option's value; ``-mMOD`` and
    ``-cCODE`` work as with python.  Nothing after that is looked at.
    """
    opts = sub._option_string_actions
    longs = [o for o in opts if o.startswith("--")]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            if i + 1 < len(argv):
                return argv[:i], ("script", argv[i + 1], argv[i + 2:])
            return argv[:i], None
        if a.startswith("--"):
            name, eq, _ = a.partition("=")
            act = opts.get(name)
            if act is None:
                cands = [o for o in longs if o.startswith(name)]
                act = opts[cands[0]] if len(cands) == 1 else None
            i += 2 if act is not None and act.nargs != 0 and not eq else 1
            continue
        if a.startswith("-") and a != "-":
            j = 1
            while j < len(a):
                ch = a[j]
                if ch in "mc":
                    kind = "module" if ch == "m" else "code"
                    head = [a[:j]] if j > 1 else []
                    rest = a[j + 1:]
                    if rest:
                        return argv[:i] + head, (kind, rest, argv[i + 1:])
                    if i + 1 < len(argv):
                        return argv[:i] + head, (kind, argv[i + 1], argv[i + 2:])
                    raise UsageError(f"argument -{ch}: expected one argument")
                act = opts.get("-" + ch)
                if act is None or act.nargs == 0:
                    j += 1
                    continue
                if j + 1 == len(a):
                    i += 1              # the value is the next word
                break
            i += 1
            continue
        return argv[:i], ("script", a, argv[i + 1:])
    return argv, None


def choose_tracer(args) -> str:
    """-p, or what the other options imply: the graph-only options select
    function_graph (and are refused with another tracer), -e alone selects nop."""
    given = [flag for attr, flag in _GRAPH_ONLY if getattr(args, attr) not in (None, False, [])]
    if args.tracer is None:
        if given:
            return "function_graph"
        return "nop" if args.events else "function"
    if given and args.tracer != "function_graph":
        raise UsageError(f"{', '.join(given)}: only the function_graph tracer has "
                         f"{'these options' if len(given) > 1 else 'this option'} "
                         f"(use -p function_graph, or leave -p out)")
    return args.tracer


def target_of(args):
    from .target import prepare_target
    t = args.split_target
    if t is None:
        raise UsageError("no program given: use script.py, -m MOD or -c CODE")
    kind, name, rest = t
    if kind == "module":
        return prepare_target(None, name, None, rest)
    if kind == "code":
        return prepare_target(None, None, name, rest)
    return prepare_target(name, None, None, rest)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
