"""``fntrace export FILE --format FORMAT -o OUT``: a trace in another tool's format.

The formats are the exporters of the output registry (output/registry.py,
``EXPORT_MODULES``); this module only opens the trace, picks the exporter, and writes
OUT whole or not at all: the export goes to a temporary file beside OUT, renamed over
it when complete, so a failed export (a full disk, a missing library, an interrupt)
leaves no half file behind.  ``-o -`` writes to standard output.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import FntraceError, UsageError
from ..outfile import TRACE_MODE, check_name, replace_target, shared_sticky_dir
from ..outfile import create as create_output

__all__ = ["EPILOG", "add_arguments", "run"]

EPILOG = """\
formats:
  html        one self-contained HTML report (flame graph, timeline, function
              table) that opens in any browser, offline: fntrace view FILE
  perfetto    Perfetto trace (protobuf): open in ui.perfetto.dev
  chrome      Chrome trace JSON: chrome://tracing, Perfetto, speedscope
  folded      folded stacks (a;b;c N): flamegraph.pl, speedscope, inferno
  trace-cmd   trace.dat: trace-cmd report, KernelShark
  parquet     Parquet, one row per call or event: fntrace sql, DuckDB, Spark, pandas
  otlp        OpenTelemetry spans (OTLP/JSON lines): the Collector, Jaeger, Tempo
  otlp-proto  the same spans as OTLP protobuf, each request after its length (4
              bytes): the Collector file exporter's "format: proto", OTLP/HTTP bodies

examples:
  fntrace export run.dat --format html -o run.html
  fntrace export run.dat --format perfetto -o run.perfetto-trace
  fntrace export run.dat --format folded --weight calls -o run.folded
  fntrace export run.dat --format trace-cmd -o trace.dat && trace-cmd report trace.dat
  fntrace export run.dat --format parquet -o run.parquet
  fntrace export run.dat --format otlp --min-duration 100 -o spans.json
  fntrace export run.dat --format otlp-proto -o spans.otlp.pb"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="fntrace.dat",
                   help="trace file (default: fntrace.dat)")
    p.add_argument("--format", "-f", required=True, metavar="FORMAT",
                   help="html, perfetto, chrome, folded, trace-cmd, parquet, otlp or otlp-proto")
    p.add_argument("-o", "--output", default=None, metavar="OUT",
                   help="file to write (default: FILE with the format's suffix; - for "
                        "standard output)")
    p.add_argument("--weight", choices=("time", "calls"), default="time",
                   help="folded: weigh each stack by its self time in microseconds "
                        "(default) or by its number of calls")
    from .filters import add_pid_argument
    add_pid_argument(p)
    from .args import add_mode_argument
    add_mode_argument(p)
    p.add_argument("--task-tracks", action="store_true",
                   help="perfetto: each asyncio Task's calls on a track of its own, an "
                        "async track of the process")
    p.add_argument("--min-duration", type=_usec, default=0.0, metavar="USEC",
                   help="chrome, otlp, otlp-proto: only calls of at least USEC "
                        "microseconds")


def _usec(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of microseconds") \
            from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 or more")
    return v


def _exporter(name: str):
    from ..output.registry import export_formats, get_exporter
    try:
        exp = get_exporter(name)
    except KeyError:
        raise UsageError(f"--format {name!r}: unknown format "
                         f"(known: {', '.join(export_formats())})") from None
    except ImportError as e:
        raise FntraceError(f"--format {name}: {e}") from None
    import importlib
    for mod in exp.requires:
        try:
            importlib.import_module(mod)
        except ImportError:
            hint = f"pip install 'fntrace[{exp.extra}]'" if exp.extra else f"pip install {mod}"
            raise FntraceError(f"--format {name} needs the {mod!r} package: {hint}") from None
    return exp


def _default_output(path: str, suffix: str) -> str:
    base, ext = os.path.splitext(path)
    return (base if ext == ".dat" else path) + suffix


def run(args, at_exit: bool) -> int:
    from ..output.source import TraceSource
    from ..tracefile.parallel import jobs_setting
    from .progress import track_source
    jobs_setting()                      # (a bad FNTRACE_JOBS refused before anything)
    if args.format == "parquet":
        from ..output.parquet import use_returning_pool
        use_returning_pool()            # before _exporter loads pyarrow
    exp = _exporter(args.format)
    if getattr(args, "min_duration", 0) and "min_duration" not in exp.options:
        raise UsageError(f"--min-duration: --format {args.format} writes every call "
                         "(chrome, otlp and otlp-proto leave the short ones out)")
    if not os.path.exists(args.file):
        raise FntraceError(f"{args.file}: no such file")
    from .filters import open_traces_arg
    source = TraceSource(open_traces_arg(args.file, args), args.file)
    options = {name: getattr(args, name, default) for name, default in exp.options.items()}
    out_path = args.output or _default_output(args.file, exp.suffix)
    tracked = track_source(source, "export", 1 if out_path == "-" else None)
    if out_path == "-":
        stream = sys.stdout.buffer if exp.binary else sys.stdout
        result = exp.write(tracked, stream, options)
        stream.flush()
    else:
        result = _write_whole(exp, tracked, out_path, options,
                              args.mode if args.mode is not None else TRACE_MODE)
    for note in (result or {}).get("notes", ()):
        sys.stderr.write(f"fntrace: {note}\n")
    if source.truncated:
        sys.stderr.write(f"fntrace: {args.file}: trace file is cut short; exported up to "
                         "the last whole chunk\n")
    return 0


def _write_whole(exp, source, out_path: str, options, mode: int = TRACE_MODE) -> dict | None:
    if os.path.isdir(out_path):
        raise FntraceError(f"-o {out_path}: is a directory")
    if shared_sticky_dir(out_path):
        # os.replace would put a file of ours where another user's name was: refused,
        # as the record path refuses it (outfile.py)
        check_name(out_path)
    target = replace_target(out_path)
    if target is None:
        # a device or a pipe: written in place (there is nothing to keep as it was)
        try:
            with create_output(out_path, mode, binary=exp.binary) as f:
                return exp.write(source, f, options)
        except OSError as e:
            raise FntraceError(f"-o {out_path}: write failed: {e.strerror or e}") from None
    directory = os.path.dirname(os.path.abspath(target))
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{os.getpid()}.tmp")
    try:
        f = create_output(tmp, mode, binary=exp.binary, exclusive=True)
    except OSError as e:
        raise FntraceError(f"-o {out_path}: cannot write: {e.strerror or e}") from None
    ok = False
    try:
        with f:
            result = exp.write(source, f, options)
        os.replace(tmp, target)
        ok = True
        return result
    except OSError as e:
        raise FntraceError(f"-o {out_path}: write failed: {e.strerror or e}") from None
    finally:
        if not ok:
            try:
                os.unlink(tmp)
            except OSError:
                pass


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
