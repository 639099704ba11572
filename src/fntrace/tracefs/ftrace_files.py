"""The function tracer's files (kernel/trace/ftrace.c): which functions are traced and
which graphed, how deep and from how long, and what the record table holds.

    set_ftrace_filter / set_ftrace_notrace    the ops' filter and notrace hashes
                                              (GLOB:CMD words: function commands)
    set_graph_function / set_graph_notrace    function_graph's own hashes
    max_graph_depth, tracing_thresh           function_graph's limits
    available_filter_functions(_addrs)        every record (top level)
    enabled_functions, touched_functions      the records with ops on them (top level)
    dyn_ftrace_total_info                     how many records (top level)

Every instance has its own filters and graph limits (its TraceArray keeps them), so
sessions and recordings set them the same way.  A filter write that fails changes
nothing and leaves its caret in the instance's error_log.
"""
from __future__ import annotations

import os

from ..core import ops as core_ops
from ..core.hash import hash_lines
from ..core.records import record_table
from ..errors import FilterError, FntraceError
from ..tracers.function_cmds import FunctionCommands, filter_word_pos, split_commands
from .values import short, ulong

__all__ = ["register_ftrace_files"]


def register_ftrace_files(fs) -> None:
    """Add the files to ``fs`` (a Tracefs: its ``tr``, ``error_log``,
    ``keep_unmatched``; the record table's files at the top level only), and
    ``fs.func_cmds``: the GLOB:CMD words of set_ftrace_filter
    (tracers/function_cmds.py), handed what they need from the layers above."""
    fs.func_cmds = FunctionCommands(
        fs.tr, find_event_file=lambda system, event: _event_file_of(fs, system, event),
        stack_text=_stack_text, dump=lambda this_thread: _ftrace_dump(fs, this_thread))
    fs._files.update({
        "set_ftrace_filter": (lambda: _r_hash(fs, True), lambda d, a: _w_hash(fs, d, a, True)),
        "set_ftrace_notrace": (lambda: _r_hash(fs, False), lambda d, a: _w_hash(fs, d, a, False)),
        "set_graph_function": (lambda: _r_graph(fs, True), lambda d, a: _w_graph(fs, d, a, True)),
        "set_graph_notrace": (lambda: _r_graph(fs, False), lambda d, a: _w_graph(fs, d, a, False)),
        "max_graph_depth": (lambda: f"{fs.tr.max_graph_depth}\n",
                            lambda d, a: _w_max_graph_depth(fs, d)),
        "tracing_thresh": (lambda: f"{fs.tr.tracing_thresh // 1000}\n",
                           lambda d, a: _w_tracing_thresh(fs, d)),
    })
    if fs.top:
        fs._files.update({
            "available_filter_functions": (_r_available, None),
            "available_filter_functions_addrs": (_r_available_addrs, None),
            "enabled_functions": (lambda: _lines(core_ops.enabled_functions()), None),
            "touched_functions": (lambda: _lines(core_ops.touched_functions()), None),
            "dyn_ftrace_total_info": (lambda: f"{len(record_table.records)}\n", None),
        })


def _lines(lines) -> str:
    return "".join(l + "\n" for l in lines)


def _r_hash(fs, enable: bool) -> str:
    ops = fs.tr.ops
    if ops.mod_cache or ops.pending or ops.notrace_mod_cache or ops.notrace_pending:
        # ':mod:' entries wait for their module: one imported since the last look
        # (with no tracer on, nothing was watching imports) is taken in now, as
        # the kernel's module notifier would have at load time
        record_table.refresh()
    if enable:
        lines = hash_lines(ops.filter_hash, record_table.records, ops.mod_cache,
                           empty_line="#### all functions enabled ####")
        lines += fs.func_cmds.lines()           # t_probe_show(), after the rest
    else:
        lines = hash_lines(ops.notrace_hash, record_table.records, ops.notrace_mod_cache,
                           empty_line="#### no functions disabled ####")
    return _lines(lines)


def _w_hash(fs, data: str, append: bool, enable: bool) -> None:
    setter = core_ops.ftrace_set_filter if enable else core_ops.ftrace_set_notrace
    text = data.rstrip("\n")
    cmds = []
    try:
        if enable:
            # GLOB:CMD words are function commands, checked before anything
            # changes and applied after the filter words (tracers/function_cmds.py)
            text_f, words = split_commands(text)
            for word, pos in words:
                fc = fs.func_cmds.parse(word, pos, text)
                cmds.append((fc, fs.func_cmds.check(fc, text)))
        else:
            text_f = text
        if text_f.strip() or not append:
            # ('>>' of commands alone leaves the filter, and its sites, alone)
            setter(fs.tr.ops, text_f if text_f.strip() else None, reset=not append,
                   keep_unmatched=fs.keep_unmatched)
    except FilterError as e:
        pos = e.pos or 0
        if enable and e.command is not None and e.command != text:
            pos = filter_word_pos(text, pos)
        fs.error_log.add("ftrace", e.msg, text, pos)
        raise
    for fc, recs in cmds:
        fs.func_cmds.apply(fc, recs)


def _r_graph(fs, enable: bool) -> str:
    ops = fs.tr.graph_fops if enable else fs.tr.graph_notrace_fops
    empty = "#### all functions enabled ####" if enable else "#### no functions disabled ####"
    return _lines(hash_lines(ops.filter_hash, record_table.records, ops.mod_cache,
                             empty_line=empty))


def _w_graph(fs, data: str, append: bool, enable: bool) -> None:
    ops = fs.tr.graph_fops if enable else fs.tr.graph_notrace_fops
    text = data.rstrip("\n")
    try:
        core_ops.ftrace_set_filter(ops, text if text.strip() else None, reset=not append,
                                   keep_unmatched=fs.keep_unmatched)
    except FilterError as e:
        fs.error_log.add("ftrace", e.msg, text, e.pos or 0)
        raise


def _ulong_of(fs, file: str, data: str, log_msg: str, what: str) -> int:
    """The number a write of ``file`` gives (kstrtoul), or its error, logged."""
    s = data.strip()
    n = ulong(s)
    if n is None:
        fs.error_log.add(file, log_msg, s, 0)
        raise FntraceError(f"{file}: {short(s)!r} is not {what}", command=s, pos=0)
    return n


def _w_max_graph_depth(fs, data: str) -> None:
    fs.tr.max_graph_depth = _ulong_of(fs, "max_graph_depth", data, "Invalid depth",
                                      "a depth (0 = unlimited)")


def _w_tracing_thresh(fs, data: str) -> None:
    fs.tr.tracing_thresh = 1000 * _ulong_of(fs, "tracing_thresh", data, "Invalid threshold",
                                            "a number of microseconds")


def _r_available() -> str:
    record_table.refresh()
    return "".join(r.name + "\n" for r in record_table.records)


def _r_available_addrs() -> str:
    record_table.refresh()
    return "".join(f"{r.ip:x} {r.name}\n" for r in record_table.records)


# -- what the function commands need from above -------------------------------------
def _event_file_of(fs, system: str, event: str):
    from ..events.core import find_event_call
    call = find_event_call(system, event)
    return fs.tr.event_file(call) if call is not None else None


def _stack_text(frame) -> str:
    from ..events.core import stack_text
    return stack_text(frame)


def _ftrace_dump(fs, this_thread: bool) -> None:
    """ftrace_dump(): the buffer (``cpudump``: the calling thread's) printed to the
    console - here the process's standard error, file descriptor 2, written
    directly so that whatever the program put in sys.stderr is not involved - in
    the trace's line format, consuming what it prints; tracing is left off after it
    (DUMP_ALL / DUMP_ORIG, ftrace_dump_one())."""
    from ..output.render import trace_array_lines
    tr = fs.tr
    tr.tracing_on = False
    if this_thread:
        try:
            bufs = [tr.local.buf]
        except AttributeError:
            bufs = []
    else:
        bufs = None
    lines = list(trace_array_lines(tr, buffers=bufs, consume=True))
    out = ["Dumping ftrace buffer:\n", "---------------------------------\n"]
    out += [line + "\n" for line in lines]
    out.append("---------------------------------\n" if lines else "   (ftrace buffer empty)\n")
    data = "".join(out).encode("utf-8", "replace")
    try:
        while data:
            n = os.write(2, data)
            data = data[n:]
    except OSError:
        pass
