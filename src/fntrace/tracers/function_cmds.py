"""Function commands in set_ftrace_filter (kernel/trace/ftrace.c function probes,
trace_functions.c, trace_events.c ``event_enable_func``, trace.c's snapshot command).

    GLOB:traceon[:N]   GLOB:traceoff[:N]   GLOB:stacktrace[:N]   GLOB:snapshot[:N]
    GLOB:enable_event:SYS:EVENT[:N]        GLOB:disable_event:SYS:EVENT[:N]
    GLOB:dump          GLOB:cpudump
    !GLOB:CMD[:...]    remove

A command does not narrow the filter: as the kernel's ``register_ftrace_function_probe``
does, every (instance, probe kind) pair gets its own ops (``FuncProbe.ops``) whose filter
hash holds the functions the command is on, so a function with a command is hooked
whether or not the instance's own tracer traces it.

The probe kinds follow trace_functions.c: ``GLOB:traceon`` and ``GLOB:traceon:5`` are
two kinds (``traceon_probe_ops`` and ``traceon_count_probe_ops``), so one function can
have both, and removal picks the kind the same way: ``!GLOB:traceoff`` removes the
unlimited one, ``!GLOB:traceoff:0`` (any parameter: its value is not read) the counted
one.  A count is the ``ftrace_func_mapper``'s per-function value: it only decrements
when the command did work (traceon when tracing was off, ...), and reads back as
``:count=N`` until removed, ``:unlimited`` without one.

What the commands need from the layers above (the event files, the stack text, the
console dump) is handed in by the tracefs directory that owns them.
"""
from __future__ import annotations

import errno as _errno
import re
import sys
import threading
from collections.abc import Callable

from ..core.hash import FtraceHash, ftrace_process_regex, module_scope
from ..core.ops import (Ops, ftrace_lock, ftrace_set_filter_ips, register_ftrace_function,
                        unregister_ftrace_function)
from ..core.records import record_table
from ..errors import FilterError

__all__ = ["FUNC_COMMANDS", "FuncCommand", "FuncProbe", "FunctionCommands", "is_command_word",
           "split_commands", "filter_word_pos"]

# register_ftrace_command() names, in init order (trace_functions.c, trace_events.c,
# trace.c); ':mod:' is ftrace.c's own and handled by the filter grammar.
FUNC_COMMANDS = ("traceoff", "traceon", "stacktrace", "dump", "cpudump",
                 "enable_event", "disable_event", "snapshot")

_WORD = re.compile(r"\S+")
_NUMBER = re.compile(r"(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def is_command_word(word: str) -> bool:
    """Whether one word of a set_ftrace_filter write is ``GLOB:CMD...`` with a command
    other than ``mod`` (which the filter grammar itself handles)."""
    _, sep, rest = word.partition(":")
    return bool(sep) and rest.partition(":")[0] != "mod"


def split_commands(text: str) -> tuple[str, list[tuple[str, int]]]:
    """A set_ftrace_filter write -> (its filter words joined by spaces, [(command word,
    its offset in text)]): "These commands are cumulative whether or not they are
    appended to set_ftrace_filter" - a '>' write resets the filter, not the commands."""
    words, cmds = [], []
    for m in _WORD.finditer(text):
        if is_command_word(m.group()):
            cmds.append((m.group(), m.start()))
        else:
            words.append(m.group())
    return " ".join(words), cmds


def filter_word_pos(text: str, pos: int) -> int:
    """An offset in split_commands(text)'s filter words -> the same place in text (for
    the error_log caret of a filter word the grammar refused)."""
    at = 0
    for m in _WORD.finditer(text):
        if is_command_word(m.group()):
            continue
        end = at + len(m.group())
        if pos <= end:
            return m.start() + (pos - at)
        at = end + 1
    return len(text)


def _kstrtoul(s: str) -> int | None:
    """kstrtoul(s, 0): decimal, 0x hex or leading-0 octal; None if it is not one."""
    if not _NUMBER.fullmatch(s):
        return None
    if s[:2] in ("0x", "0X"):
        return int(s, 16)
    return int(s, 8) if s.startswith("0") else int(s)


class FuncCommand:
    """One parsed ``[!]GLOB:CMD[:PARAM]`` word; ``kind`` names its probe ops."""
    __slots__ = ("word", "pos", "glob", "cmd", "remove", "count", "target", "target_file")

    def __init__(self, word: str, pos: int, glob: str, cmd: str, remove: bool, count: int,
                 target: tuple[str, str] | None, target_file) -> None:
        self.word = word
        self.pos = pos
        self.glob = glob
        self.cmd = cmd
        self.remove = remove
        self.count = count                      # -1: no count (unlimited)
        self.target = target                    # (system, event) of enable/disable_event
        self.target_file = target_file

    @property
    def kind(self) -> tuple:
        """The probe ops the command uses: its name, counted or not, and the event."""
        return (self.cmd, self.count != -1, self.target)


class _Entry:
    """A function's data in a probe (the func mapper's value): its count."""
    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count


class FuncProbe:
    """struct ftrace_func_probe: one probe kind on one instance, with its own ops.

    entries  record -> _Entry; replaced whole on change (the callback reads it unlocked)
    """

    def __init__(self, owner: "FunctionCommands", kind: tuple, target_file) -> None:
        self.owner = owner
        self.kind = kind
        self.cmd, self.counted, self.target = kind
        self.target_file = target_file
        self.entries: dict = {}
        self.ops = Ops(function_trace_probe_call, 0, self, name=f"{self.cmd}_probe")

    def line(self, rec, ent: _Entry) -> str:
        """ftrace_probe_print() / event_enable_print() / ftrace_snapshot_print()."""
        name = self.cmd
        if self.target is not None:
            name += f":{self.target[0]}:{self.target[1]}"
        limit = f":count={ent.count}" if self.counted else ":unlimited"
        return f"{rec.name}:{name}{limit}"

    # -- the probe functions (trace_functions.c, trace_events.c, trace.c) ------------
    def call(self, ent: _Entry) -> None:
        tr = self.owner.tr
        cmd = self.cmd
        counted = self.counted
        if cmd in ("traceon", "traceoff"):
            # update_traceon_count(): the count only goes down when the state changed
            on = cmd == "traceon"
            if counted and ent.count <= 0:
                return
            if bool(tr.tracing_on) == on:
                return
            tr.tracing_on = on
            if counted:
                ent.count -= 1
        elif cmd == "stacktrace":
            # ftrace_stacktrace_count(): nothing while tracing is off
            if not tr.tracing_on:
                return
            if counted:
                if ent.count <= 0:
                    return
                ent.count -= 1
            # stack_text() leaves fntrace's own frames out
            self.owner.write_stack(sys._getframe())
        elif cmd == "snapshot":
            if counted:
                if ent.count <= 0:
                    return
                ent.count -= 1
            tr.take_snapshot()
        elif cmd in ("dump", "cpudump"):
            # update_count(): dump has a count of one; cpudump none (the kernel registers
            # it without a func mapper), so it dumps at every hit
            if counted:
                if ent.count <= 0:
                    return
                ent.count -= 1
            self.owner.dump(cmd == "cpudump")
        else:
            # event_enable_probe / event_enable_count_probe
            tf = self.target_file
            enable = cmd == "enable_event"
            if counted:
                if ent.count == 0:
                    return
                if enable == (not tf.soft_disabled):
                    return
                if ent.count != -1:
                    ent.count -= 1
            tf.soft_disabled = not enable


def function_trace_probe_call(ip, parent_ip, op, fregs) -> None:
    """ftrace.c function_trace_probe_call(): the probe ops' callback."""
    probe = op.private
    ent = probe.entries.get(ip)
    if ent is not None:
        probe.call(ent)


class FunctionCommands:
    """The function probes of one instance (``tr->func_probes``).

    tr               the trace array the commands act on
    find_event_file  ``(system, event) -> EventFile | None`` in the same instance
    stack_text       ``(frame) -> str``: a ``<stack trace>`` entry's text
    dump             ``(this_thread_only) -> None``: ftrace_dump() to the console
    """

    def __init__(self, tr, *, find_event_file: Callable, stack_text: Callable[..., str],
                 dump: Callable[[bool], None]) -> None:
        self.tr = tr
        self.find_event_file = find_event_file
        self.stack_text = stack_text
        self.dump = dump
        self.probes: list[FuncProbe] = []        # registration order, as tr->func_probes
        self.lock = threading.Lock()

    # -- parsing ---------------------------------------------------------------------
    def parse(self, word: str, pos: int, command: str) -> FuncCommand:
        """One ``[!]GLOB:CMD[:PARAM]`` word at offset ``pos`` of ``command``;
        FilterError (EINVAL) with the caret's position for a bad one."""
        glob, _, rest = word.partition(":")
        cmd, sep, param_s = rest.partition(":")
        param = param_s if sep else None
        cmd_pos = pos + len(glob) + 1
        par_pos = cmd_pos + len(cmd) + 1

        def fail(msg: str, at: int) -> FilterError:
            return FilterError(msg, pos=at, command=command)

        if cmd not in FUNC_COMMANDS:
            raise fail(f"'{word}': unknown command '{cmd}' (commands: mod, "
                       f"{', '.join(FUNC_COMMANDS)})", cmd_pos)
        remove = glob.startswith("!")
        if remove:
            glob = glob[1:]
        if not glob:
            raise fail(f"'{word}': no function before ':{cmd}'", pos)
        target = None
        target_file = None
        if cmd in ("enable_event", "disable_event"):
            # event_enable_func(): SYS:EVENT, then the count
            system, sep1, rest2 = (param or "").partition(":")
            if not system or not sep1:
                # the caret where the missing field should be
                raise fail(f"'{word}': {cmd} needs <system>:<event>",
                           par_pos if param is not None and not system else pos + len(word))
            event, sep2, param = rest2.partition(":")
            param = param if sep2 else None
            target = (system, event)
            target_file = self.find_event_file(system, event)
            if target_file is None:
                raise fail(f"'{word}': no such event {system}:{event}", par_pos)
            num_pos = par_pos + len(system) + len(event) + 2
        else:
            num_pos = par_pos
        if cmd in ("dump", "cpudump"):
            # ftrace_dump_callback(): "Only dump once" - always registered with "1";
            # cpudump's probe ops keep no count (trace_functions.c)
            count = 1 if cmd == "dump" else -1
        elif param is None:
            count = -1
        elif remove:
            count = 0           # the counted kind; the number itself is not read
        else:
            number = param.split(":", 1)[0]
            if not number:
                if cmd in ("enable_event", "disable_event"):
                    raise fail(f"'{word}': empty count", num_pos)
                count = -1
            else:
                n = _kstrtoul(number)
                if n is None:
                    raise fail(f"'{word}': bad count '{number}'", num_pos)
                count = n
        return FuncCommand(word, pos, glob, cmd, remove, count, target, target_file)

    def check(self, fc: FuncCommand, command: str) -> list:
        """The records ``fc`` applies to (FilterError, EINVAL, if none: the kernel's
        "Nothing found?"); for a removal, the probe's records its glob matches."""
        if fc.remove:
            probe = self._find(fc.kind)
            if probe is None:
                err = FilterError(f"'{fc.word}': no {fc.cmd} command to remove",
                                  pos=fc.pos, command=command)
                err.errno = _errno.ENODEV       # unregister_ftrace_function_probe_func
                raise err
            pool = [r for r in record_table.records if r in probe.entries]
        else:
            record_table.refresh(module_scope(fc.glob))
            pool = record_table.records
        h = FtraceHash()
        try:
            ftrace_process_regex(h, fc.glob, pool, mod_cache=[], allow_commands=False)
        except FilterError as e:
            raise FilterError(f"'{fc.word}': {e.msg}", pos=fc.pos, command=command) from None
        return [r for r in pool if r in h.entries]

    # -- applying --------------------------------------------------------------------
    def _find(self, kind: tuple) -> FuncProbe | None:
        for p in self.probes:
            if p.kind == kind:
                return p
        return None

    def apply(self, fc: FuncCommand, recs: list) -> None:
        """register_ftrace_function_probe() / unregister_ftrace_function_probe_func()."""
        with ftrace_lock, self.lock:
            probe = self._find(fc.kind)
            if fc.remove:
                if probe is None:
                    return
                gone = set(recs)
                entries = {r: e for r, e in probe.entries.items() if r not in gone}
                self._set_entries(probe, entries)
                return
            if probe is None:
                if (fc.cmd == "snapshot" and self.tr.snapshot is None
                        and self.tr.__dict__.get("snapshot_hook") is None):
                    # ftrace_trace_snapshot_callback(): the buffer is allocated when
                    # the command is registered (a flight recorder's snapshot is its
                    # dump, made when the command fires: nothing to allocate)
                    self.tr.take_snapshot()
                    # (take_snapshot() set it: the checker keeps it narrowed to None)
                    for b in self.tr.snapshot:  # type: ignore[attr-defined]
                        b.reset()
                probe = FuncProbe(self, fc.kind, fc.target_file)
                if fc.target_file is not None:
                    # __ftrace_event_enable_disable(file, 1, 1): soft mode while the
                    # probe refers to the event
                    fc.target_file.soft_enable()
                self.probes.append(probe)
            entries = dict(probe.entries)
            for r in recs:
                # an existing function keeps its count (the mapper already has it)
                entries.setdefault(r, _Entry(fc.count))
            self._set_entries(probe, entries)

    def _set_entries(self, probe: FuncProbe, entries: dict) -> None:
        ops = probe.ops
        if not entries:
            if ops.enabled:
                unregister_ftrace_function(ops)
            probe.entries = {}
            self.probes.remove(probe)
            if probe.target_file is not None:
                probe.target_file.soft_release()
            return
        # The callback acts on a function only if both the hash and the entries have
        # it, so publishing the entries first is safe either way.
        probe.entries = entries
        ftrace_set_filter_ips(ops, list(entries), reset=True)
        if not ops.enabled:
            register_ftrace_function(ops)

    def clear(self) -> None:
        """Remove every command (an instance being removed)."""
        with ftrace_lock, self.lock:
            for probe in list(self.probes):
                self._set_entries(probe, {})

    # -- reading ---------------------------------------------------------------------
    def lines(self) -> list[str]:
        """t_probe_show(): each probe's functions, in registration order."""
        out = []
        for probe in list(self.probes):
            entries = probe.entries
            for rec in record_table.records:
                ent = entries.get(rec)
                if ent is not None:
                    out.append(probe.line(rec, ent))
        return out

    # -- helpers the probes use ---------------------------------------------------------
    def write_stack(self, frame) -> None:
        """__trace_stack(): a ``<stack trace>`` entry in the calling thread's buffer."""
        from time import monotonic_ns

        from ..ring_buffer import PAYLOAD_SEP, TRACE_STACK
        tr = self.tr
        try:
            buf = tr.local.buf
        except AttributeError:
            buf = tr.cpu_buffer()
        buf.write_payload(monotonic_ns(), TRACE_STACK, 0, 0, 0, 0,
                          PAYLOAD_SEP + self.stack_text(frame))


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
