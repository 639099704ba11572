"""The ``fntrace`` command: record, report, live, ls.

Every step raises UsageError (or another FntraceError) with a one-line message; only
``main()`` prints it and picks the exit status:

    0..255  the traced program's own status (record, live)
    1       report/ls failed (bad trace file, bad filter)
    2       bad command line
"""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import FntraceError, UsageError

__all__ = ["main"]

# trace_options a report honours: name -> (keyword, value); every option also has its
# "no" form.
_BOOL_OPTIONS = {
    "print-parent": "print_parent", "irq-info": "irq_info",
    "funcgraph-cpu": "cpu", "funcgraph-overhead": "overhead", "funcgraph-proc": "proc",
    "funcgraph-duration": "duration", "funcgraph-abstime": "abstime",
    "funcgraph-tail": "tail", "funcgraph-retval": "retval",
    "funcgraph-retval-hex": "retval_hex", "funcgraph-overrun": "overrun",
    "funcgraph-args": "args",
}
REPORT_OPTIONS = {}
for _name, _kw in _BOOL_OPTIONS.items():
    REPORT_OPTIONS[_name] = (_kw, True)
    REPORT_OPTIONS["no" + _name] = (_kw, False)


def _add_target(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-m", dest="module", metavar="MOD",
                   help="run library module MOD as a script (like python -m)")
    g.add_argument("-c", dest="code", metavar="CODE",
                   help="run CODE (like python -c)")
    p.add_argument("target", nargs=argparse.REMAINDER, metavar="script.py [args]",
                   help="the program to trace and its arguments")


def _add_record_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--tracer", default=None, metavar="TRACER",
                   help="tracer to use (default: function; nop when only events are asked for)")
    p.add_argument("-F", "--filter", action="append", default=[], metavar="GLOB",
                   help="trace only functions matching GLOB (set_ftrace_filter grammar; "
                        "repeatable; may name modules imported later)")
    p.add_argument("-N", "--notrace", action="append", default=[], metavar="GLOB",
                   help="never trace functions matching GLOB (set_ftrace_notrace)")
    p.add_argument("-b", "--buffer-size-kb", default="1408", metavar="KB",
                   help="per-thread ring buffer size in KB (default: 1408)")
    e = p.add_argument_group("events")
    p.set_defaults(events=None)
    e.add_argument("-e", "--event", action=_EventAction, dest="event", metavar="EVENT",
                   help="enable EVENT ('grp:event'), or define and enable a dynamic event: "
                        "'f[:[GRP/]EVENT] SYM[%%return] [FETCHARGS]'")
    e.add_argument("-f", "--event-filter", action=_EventAction, dest="event_filter", metavar="FILTER",
                   help="filter for the preceding -e (e.g. 'n > 3 && name ~ \"a*\"')")
    e.add_argument("-T", "--trigger", action=_EventAction, dest="trigger", metavar="TRIGGER",
                   help="trigger for the preceding -e: traceon, traceoff, stacktrace, "
                        "snapshot, enable_event:G:E, disable_event:G:E [:N] [if FILTER]")
    p.add_argument("--patch", action="append", default=[], metavar="SYM=FILE:FUNC",
                   help="replace function SYM for this run: FUNC(original, *args, **kwargs) "
                        "from FILE decides whether and how to call the original")
    g = p.add_argument_group("function_graph")
    g.add_argument("-g", "--graph-function", action="append", default=[], metavar="GLOB",
                   help="graph only these functions and what they call (set_graph_function)")
    g.add_argument("--graph-notrace", action="append", default=[], metavar="GLOB",
                   help="do not graph these functions nor what they call (set_graph_notrace)")
    g.add_argument("-D", "--max-depth", default="0", metavar="N",
                   help="graph at most N levels deep (max_graph_depth; 0 = unlimited)")
    g.add_argument("--thresh", default="0", metavar="USEC",
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fntrace",
        description="ftrace for Python programs: trace function calls with the kernel's "
                    "function tracer formats.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    r = sub.add_parser("record", help="run a program traced and write a trace file")
    _add_record_options(r)
    r.add_argument("-o", "--output", default="fntrace.dat", metavar="FILE",
                   help="trace file to write (default: fntrace.dat)")
    _add_target(r)

    rep = sub.add_parser("report", help="print a trace file in ftrace text format")
    rep.add_argument("file", nargs="?", default="fntrace.dat", help="trace file (default: fntrace.dat)")
    _add_report_options(rep)
    rep.add_argument("-D", "--max-depth", default="0", metavar="N",
                     help="function_graph: show at most N levels")
    rep.add_argument("--thresh", default="0", metavar="USEC",
                     help="function_graph: show only calls that took at least USEC microseconds")

    lv = sub.add_parser("live", help="record and report in one go")
    _add_record_options(lv)
    _add_report_options(lv)
    _add_target(lv)

    ls = sub.add_parser("ls", help="print available_filter_functions for a target")
    ls.add_argument("-F", "--filter", action="append", default=[], metavar="GLOB",
                    help="list only what this filter selects")
    ls.add_argument("-N", "--notrace", action="append", default=[], metavar="GLOB",
                    help="leave out what this selects")
    ls.add_argument("--run", action="store_true",
                    help="run the target first (lists what it imports at run time)")
    _add_target(ls)
    return p


def _target(args):
    from .target import prepare_target
    if args.module is None and args.code is None and not args.target:
        raise UsageError("no program given: use script.py, -m MOD or -c CODE")
    if args.module is not None or args.code is not None:
        return prepare_target(None, args.module, args.code, list(args.target))
    return prepare_target(args.target[0], None, None, list(args.target[1:]))


def _report_opts(args) -> dict:
    out: dict = {}
    for o in args.option:
        if o not in REPORT_OPTIONS:
            raise UsageError(f"unknown option {o!r} (known: {', '.join(REPORT_OPTIONS)})")
        k, v = REPORT_OPTIONS[o]
        out[k] = v
    return out


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


def _record(args, output: str, at_exit: bool = False) -> int:
    from .record import RecordOptions, check_buffer_kb, record
    from .record import check_depth, check_thresh
    opts = RecordOptions(tracer=args.tracer, filters=args.filter, notrace=args.notrace,
                         buffer_kb=check_buffer_kb(args.buffer_size_kb), output=output,
                         graph_functions=args.graph_function, graph_notrace=args.graph_notrace,
                         max_depth=check_depth(args.max_depth), thresh_us=check_thresh(args.thresh),
                         args=args.args, retval=args.retval, events=args.events or [], patches=args.patch)
    if opts.tracer is None:
        opts.tracer = "nop" if opts.events else "function"
    target = _target(args)
    return record(target, opts, at_exit=at_exit)


def _report(path: str, ropts: dict, out) -> None:
    from ..tracefile import TraceFile
    from .report import report_text
    tf = TraceFile.open(path)
    for line in report_text(tf, **ropts):
        out.write(line + "\n")
    if tf.truncated:
        print(f"fntrace: {path}: trace file is cut short; reported up to the last whole chunk",
              file=sys.stderr)


def _ls(args) -> int:
    from .ls import list_functions
    for line in list_functions(_target(args), args.filter, args.notrace, args.run):
        sys.stdout.write(line + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line; ``argv=None`` means this process is the command (it exits
    when this returns), which lets record stop tracing the quick way."""
    parser = _parser()
    args = parser.parse_args(argv)
    at_exit = argv is None
    try:
        if args.command == "record":
            return _record(args, args.output, at_exit)
        if args.command == "report":
            if not os.path.exists(args.file):
                raise UsageError(f"{args.file}: no such file")
            from .record import check_depth, check_thresh
            ropts = _report_opts(args)
            ropts["max_depth"] = check_depth(args.max_depth)
            ropts["thresh_ns"] = check_thresh(args.thresh) * 1000
            _report(args.file, ropts, sys.stdout)
            return 0
        if args.command == "live":
            ropts = _report_opts(args)
            import shutil
            import tempfile
            d = tempfile.mkdtemp(prefix="fntrace-")
            pid = os.getpid()
            try:
                path = os.path.join(d, "live.dat")
                status = _record(args, path, at_exit)
                if os.getpid() != pid:
                    return status           # a child the program forked: no report
                sys.stdout.flush()
                _report(path, ropts, sys.stdout)
            finally:
                if os.getpid() == pid:      # the directory is the parent's to remove
                    shutil.rmtree(d, ignore_errors=True)
            return status
        if args.command == "ls":
            return _ls(args)
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
    return 2


if __name__ == "__main__":      # pragma: no cover
    sys.exit(main())
