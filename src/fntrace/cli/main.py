"""The ``fntrace`` command: record, report, stat, export, tui, sql, live, ls, ctl, mount,
attach, detach (also ``python -m fntrace``).

Every step raises UsageError (or another FntraceError) with a one-line message; only
``main()`` prints it and picks the exit status:

    0..255  the traced program's own status (record, live); or fntrace dies of the
            signal the program died of (SIGTERM, an uncaught KeyboardInterrupt ...)
    1       report/stat/export/tui/sql/ls/ctl/mount/attach/detach failed (a bad trace
            file, a bad filter, a refused write, a process that cannot be attached)
    2       bad command line

The command line is cut in two before argparse sees it (split_target): fntrace's own
options, then the program — ``script.py``, ``-m MOD`` or ``-c CODE`` — and everything
after it, which is the program's and reaches it untouched, as with ``python -m
cProfile``.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import FntraceError, UsageError
from .args import add_mode_argument

__all__ = ["main", "split_target", "REPORT_OPTIONS"]

# trace_options a report honours (tracefs names); each also has its "no" form.
REPORT_OPTIONS = ("print-parent", "irq-info", "funcgraph-cpu", "funcgraph-overhead",
                  "funcgraph-proc", "funcgraph-duration", "funcgraph-abstime",
                  "funcgraph-tail", "funcgraph-retval", "funcgraph-retval-hex",
                  "funcgraph-overrun", "funcgraph-args", "funcgraph-task", "task-comm")

_EPILOGS = {
    "record": """\
each option is written to a control file of the trace's tracefs instance, and takes
that file's grammar and errors:
  -p current_tracer  -F set_ftrace_filter  -N set_ftrace_notrace
  -g set_graph_function  --graph-notrace set_graph_notrace  -D max_graph_depth
  --thresh tracing_thresh  -A options/funcgraph-args  -R options/funcgraph-retval
  --repr options/object-repr  -b buffer_size_kb  -e dynamic_events, events/GRP/EVENT/enable
  --tid set_ftrace_pid, set_event_pid  --thread set_ftrace_comm, set_event_comm
  -f events/GRP/EVENT/filter  -T events/GRP/EVENT/trigger

examples:
  fntrace record -F 'shop.*' examples/shop_demo.py           # trace a package's functions
  fntrace record -p function_graph -F '*:mod:__main__' app.py --port 8000
  fntrace record -g 'json.encoder.*' -A -R -m json.tool data.json
  fntrace report                                              # then read fntrace.dat""",
    "report": """\
examples:
  fntrace report                       # fntrace.dat, as the kernel prints 'trace'
  fntrace report run.dat -O funcgraph-proc -O nofuncgraph-cpu
  fntrace report run.dat -F 'markdown.*' -D 2 --thresh 100   # under markdown: 2 levels, >= 100 us
  fntrace report run.dat --thread 'worker*' -N '*.escape' --from +0.5 --to +0.75""",
    "live": """\
examples:
  fntrace live -F 'shop.*' -F '*:mod:__main__' examples/shop_demo.py
  fntrace live -p function_graph -F 'textwrap.*' -c 'import textwrap; textwrap.dedent("  x")'
  fntrace live -e 'f shop.cart.Cart.add_item product.sku quantity' examples/shop_demo.py
  fntrace live -F 'pydoc.*' -m pydoc -w json     # everything after -m MOD is the program's""",
    "ls": """\
examples:
  fntrace ls examples/shop_demo.py              # available_filter_functions of a script
  fntrace ls -F 'shop.pricing.*' examples/shop_demo.py
  fntrace ls --run -m json.tool data.json       # what it imports while it runs""",
    "attach": """\
the program must run the same Python version as this fntrace (else run
`python3.X -m fntrace attach PID` with fntrace installed for that Python) and belong
to you; ptrace must be allowed (kernel.yama.ptrace_scope).

examples:
  fntrace attach 4242                          # then: fntrace ctl 4242 ...
  fntrace attach 4242 && fntrace ctl 4242 current_tracer function_graph
  fntrace attach --timeout 60 4242             # a program slow to let go of the GIL""",
    "detach": """\
examples:
  fntrace detach 4242        # tracers off, tool id released, endpoint removed
  fntrace ctl 4242 current_tracer nop    # or only stop tracing, and stay attached""",
}

# Options that only the function_graph tracer has (trace-cmd record -g etc.).
_GRAPH_ONLY = (("graph_function", "-g"), ("graph_notrace", "--graph-notrace"),
               ("args", "-A"), ("retval", "-R"), ("max_depth", "-D"), ("thresh", "--thresh"))


def _add_target(p: argparse.ArgumentParser) -> None:
    # Only for --help: the target and everything after it are split off before argparse
    # sees the command line (split_target).
    g = p.add_argument_group("the program (everything after it is the program's own)")
    g.add_argument("-m", dest="module", metavar="MOD",
                   help="run library module MOD as a script (like python -m)")
    g.add_argument("-c", dest="code", metavar="CODE",
                   help="run CODE (like python -c)")
    g.add_argument("target", nargs="?", metavar="script.py",
                   help="the program to trace; the arguments after it are its own")


def _add_record_options(p: argparse.ArgumentParser) -> None:
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


def _add_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-O", "--option", action="append", default=[], metavar="OPTION",
                   help="trace option, or its no- form: print-parent, irq-info, "
                        "funcgraph-proc, funcgraph-abstime, funcgraph-tail, funcgraph-cpu, "
                        "funcgraph-overhead, funcgraph-duration, funcgraph-retval, "
                        "funcgraph-retval-hex, funcgraph-args, funcgraph-overrun")


def _version() -> str:
    from .. import __version__, _env
    native = "native" if _env.native() is not None else "pure"
    return (f"fntrace {__version__} (Python {sys.version.split()[0]}, "
            f"{_env.BACKEND} back end, {native} hot path)")


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``only``: the command given, the only one made (all
    are for ``fntrace --help`` and a word that is none of them): a command does not
    make the parsers of the twelve others, nor load their modules (a quarter of every
    recording's start-up)."""
    p = argparse.ArgumentParser(
        prog="fntrace",
        description="ftrace for Python programs: trace function calls with the kernel's "
                    "function tracer formats.",
        epilog="examples:\n"
               "  fntrace live -F 'shop.*' -F '*:mod:__main__' examples/shop_demo.py\n"
               "  fntrace record -p function_graph -m mypkg.main --verbose && fntrace report\n"
               "  fntrace COMMAND --help",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, help: str, module: str | None = None) -> argparse.ArgumentParser | None:
        """The subcommand's parser to fill, or None when it is not the one given;
        ``module``: the cli module with its EPILOG and add_arguments."""
        if only is not None and name != only:
            return None             # (listed by ``fntrace --help`` alone)
        if module is not None:
            import importlib
            mod = importlib.import_module(f"{__package__}.{module}")
            _EPILOGS.setdefault(name, mod.EPILOG)
        q = sub.add_parser(name, help=help, epilog=_EPILOGS[name],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if module is not None:
            mod.add_arguments(q)
        return q

    r = add("record", "run a program traced and write a trace file")
    if r is not None:
        _add_record_options(r)
        r.add_argument("-o", "--output", default="fntrace.dat", metavar="FILE",
                       help="trace file to write (default: fntrace.dat)")
        r.add_argument("--compress", action="store_true",
                       help="zstd-compress the trace file's blocks (pip install fntrace[compress])")
        add_mode_argument(r)
        _add_target(r)

    rep = add("report", "print a trace file in ftrace text format")
    if rep is not None:
        rep.add_argument("file", nargs="?", default="fntrace.dat",
                         help="trace file (default: fntrace.dat)")
        _add_report_options(rep)
        from .filters import add_filter_arguments
        add_filter_arguments(rep)

    for name, help in (("stat", "the function profile table of a trace file"),
                       ("export", "write a trace file in another tool's format"),
                       ("tui", "browse a trace file in the terminal"),
                       ("sql", "SQL over trace files (DuckDB)"),
                       ("hist", "the hist trigger tables of a recording")):
        add(name, help, module=name)

    lv = add("live", "record and report in one go")
    if lv is not None:
        _add_record_options(lv)
        _add_report_options(lv)
        _add_target(lv)

    add("ctl", "read and write the tracefs of a running program", module="ctl")
    add("mount", "mount the tracefs of a running program (FUSE)", module="mount")

    ls = add("ls", "print available_filter_functions for a target")
    if ls is not None:
        ls.add_argument("-F", "--filter", action="append", default=[], metavar="GLOB",
                        help="list only what this filter selects")
        ls.add_argument("-N", "--notrace", action="append", default=[], metavar="GLOB",
                        help="leave out what this selects")
        ls.add_argument("--run", action="store_true",
                        help="run the target first (lists what it imports at run time)")
        _add_target(ls)

    at = add("attach", "make a running Python program controllable (fntrace ctl/mount)")
    if at is not None:
        at.add_argument("pid", type=_pid, metavar="PID", help="the program's process id")
        at.add_argument("--timeout", type=float, default=10.0, metavar="SEC",
                        help="how long to wait for its control endpoint (default: 10)")
    de = add("detach", "turn fntrace off in an attached or served program; it runs on")
    if de is not None:
        de.add_argument("pid", type=_pid, metavar="PID", help="the program's process id")
        de.add_argument("--timeout", type=float, default=10.0, metavar="SEC",
                        help="how long to wait for the endpoint to go (default: 10)")
    return p


def _pid(text: str) -> int:
    from .ctl import parse_pid
    try:
        return parse_pid(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


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


def _report_opts(args) -> dict:
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


def _choose_tracer(args) -> str:
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


def _target(args):
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


def _record(args, output: str, at_exit: bool, on_finished=None, make_writer=None,
            follow: str | None = None):
    from .record import RecordOptions, record
    tracer = _choose_tracer(args)
    # The numbers go as typed: the control files they are written to check them
    # (tracefs/control.py), before the program runs.
    opts = RecordOptions(tracer=tracer, filters=args.filter, notrace=args.notrace,
                         buffer_kb=args.buffer_size_kb, output=output,
                         graph_functions=args.graph_function, graph_notrace=args.graph_notrace,
                         max_depth=args.max_depth, thresh_us=args.thresh,
                         args=args.args, retval=args.retval, events=args.events or [],
                         patches=args.patch, object_repr=args.object_repr,
                         tids=args.tid, threads=args.thread)
    opts.compress = getattr(args, "compress", False)
    opts.mode = getattr(args, "mode", None) or opts.mode
    opts.serve = getattr(args, "serve", False)
    opts.otel_context = getattr(args, "otel_context", False)
    target = _target(args)
    if follow is None and output:
        follow = output
    return record(target, opts, at_exit=at_exit, on_finished=on_finished,
                  make_writer=make_writer, follow=follow if args.follow else None,
                  scratch=make_writer is not None)


def _report(path: str, ropts: dict, out, err, args=None) -> None:
    from .filters import open_traces_arg
    from .progress import ProgressBar, track_tracefile
    from .report import report_pieces
    tf = open_traces_arg(path, args, err)
    if ropts.get("flt") is not None:
        from .filters import check_matches
        check_matches(ropts["flt"], tf.symbols, path, tf.threads, tf.cpus)
    tracked = track_tracefile(tf, "report", out)
    bar: list = []

    def on_block(n: int) -> None:
        # the native printer's reading, on a bar of its own when one should show
        if not bar:
            bar.append(ProgressBar("report", tf.nr_records()) if tracked is not tf else None)
        if bar[0] is not None:
            bar[0].advance(n)
    # lines go out some 256 kB at a time (a write per line cost a tenth of a report
    # to a file in system time; a terminal's reader sees no difference)
    write = out.write
    batch: list[str] = []
    add = batch.append
    size = 0
    try:
        for piece in report_pieces(tracked, on_block=on_block, **ropts):
            add(piece)
            size += len(piece)
            if size >= 1 << 18:
                write("".join(batch))
                batch.clear()
                size = 0
    finally:
        if batch:           # what was read before a damaged block is still printed
            write("".join(batch))
        if bar and bar[0] is not None:
            bar[0].close()
    out.flush()
    if tf.truncated:
        err.write(f"fntrace: {path}: trace file is cut short; reported up to the last "
                  "whole chunk\n")
        err.flush()


def _ls(args) -> int:
    from .ls import list_functions
    for line in list_functions(_target(args), args.filter, args.notrace, args.run):
        sys.stdout.write(line + "\n")
    return 0


def _live(args, at_exit: bool) -> int:
    """record with a printer in place of the trace file (cli/live.py): the trace
    streams while the program runs, and nothing is kept once printed."""
    import secrets
    import shutil
    import tempfile
    from .live import LivePrinter
    ropts = _report_opts(args)
    out_fd = os.dup(1) if _fd_ok(1) else os.open(os.devnull, os.O_WRONLY)
    printers: list = []
    # the followed processes' traces, reported with the first one's at the end
    # (made by the first child that needs it: a program that starts none leaves
    # nothing behind, not even for a moment)
    scratch = (os.path.join(tempfile.gettempdir(),
                            f"fntrace-live-{os.getpid()}-{secrets.token_hex(4)}")
               if args.follow else None)
    follow = os.path.join(scratch, "live.dat") if scratch else None
    first_pid = os.getpid()

    def make_writer(header, tr):
        p = LivePrinter(header, tr, ropts.get("options") or {}, out_fd, follow)
        printers.append(p)
        return p

    def on_finished(guard, how) -> None:
        # The program's output first, then the rest of the trace, on the streams it
        # started with.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        out, err = guard.stdout(), guard.stderr()
        try:
            for p in printers:
                p.report(out, err)
        except BrokenPipeError:
            pass
        except FntraceError as e:
            err.write(f"fntrace: {e.msg}\n")
        finally:
            for s in (out, err):
                try:
                    s.close()
                except BaseException:
                    pass
            # (os._exit does not come back to _live); only the first process: the
            # scratch directory holds the files of its children, which may still run
            if scratch is not None and os.getpid() == first_pid:
                shutil.rmtree(scratch, ignore_errors=True)

    try:
        outcome = _record(args, "", at_exit, on_finished, make_writer, follow)
    finally:
        try:
            os.close(out_fd)
        except OSError:
            pass
        if scratch is not None and os.getpid() == first_pid:
            shutil.rmtree(scratch, ignore_errors=True)
    return outcome.status


def _fd_ok(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


_COMMANDS = frozenset(("record", "report", "stat", "export", "tui", "sql", "hist", "live",
                       "ctl", "mount", "ls", "attach", "detach"))

def main(argv: list[str] | None = None) -> int:
    """The command line; ``argv=None`` means this process is the command (it exits
    when this returns), which lets record stop tracing the quick way."""
    at_exit = argv is None
    if argv is None:
        argv = sys.argv[1:]
    parser = _parser(argv[0] if argv and argv[0] in _COMMANDS else None)
    split = None
    if argv and not argv[0].startswith("-"):
        sub = _subparser(parser, argv[0])
        if sub is not None and argv[0] in ("record", "live", "ls"):
            try:
                own, split = split_target(sub, argv[1:])
            except UsageError as e:
                sub.error(e.msg)
            argv = [argv[0], *own]
    args = parser.parse_args(argv)
    args.split_target = split
    try:
        if args.command == "record":
            return _record(args, args.output, at_exit).status
        if args.command == "report":
            if not os.path.exists(args.file):
                raise UsageError(f"{args.file}: no such file")
            from .filters import filter_from_args
            ropts = _report_opts(args)
            ropts["flt"] = filter_from_args(args)
            _report(args.file, ropts, sys.stdout, sys.stderr, args)
            return 0
        if args.command == "live":
            return _live(args, at_exit)
        if args.command == "stat":
            from .stat import run_stat
            return run_stat(args)
        if args.command == "export":
            from .export import run_export
            return run_export(args)
        if args.command == "tui":
            from .tui import run_tui
            return run_tui(args)
        if args.command == "sql":
            from .sql import run_sql
            return run_sql(args)
        if args.command == "hist":
            from .hist import run_hist
            return run_hist(args)
        if args.command == "ls":
            return _ls(args)
        if args.command == "ctl":
            from .ctl import run_ctl
            return run_ctl(args)
        if args.command == "mount":
            from .mount import run_mount
            return run_mount(args)
        if args.command in ("attach", "detach"):
            from .attach import run_attach, run_detach
            run = run_attach if args.command == "attach" else run_detach
            return run(args.pid, args.timeout)
    except UsageError as e:
        print(f"fntrace: {e.msg}", file=sys.stderr)
        return 2
    except FntraceError as e:
        print(f"fntrace: {e.msg}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `fntrace report | head`: the reader went away; that is not an error.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except OSError as e:
        # A file the command was given that cannot be read or written (the commands
        # name their own files; this is the last word for one they did not foresee).
        where = f"{e.filename}: " if e.filename else ""
        print(f"fntrace: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":      # pragma: no cover
    sys.exit(main())


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
