"""The dynamic events' files (kernel/trace/trace_dynevent.c, trace_kprobe.c,
trace_events_synth.c): their reads and writes, each command to the mechanism that
parses it (events/dynevent.py and the probe kinds, events/synth.py), each error into
the instance's error_log under the kernel's subsystem name.

    dynamic_events     every kind: f/-, p/r, e/t, s (synthetic); O_TRUNC removes all
    kprobe_events      p/r (and -: of those) only; O_TRUNC removes the p/r probes
    kprobe_profile     each p/r event's hits and misses
    synthetic_events   synthetic event definitions, !NAME to remove

Only the top level has them.  The probe kinds load when a command is first written
(a recording that defines none does not pay for them).
"""
from __future__ import annotations

__all__ = ["register_dynamic_events"]

# the error_log's subsystem of a failed command, by its letter (else trace_fprobe)
_SUBSYSTEM = {"p": "trace_kprobe", "r": "trace_kprobe", "e": "trace_eprobe"}


def register_dynamic_events(fs) -> None:
    """Add the files to ``fs`` (the top level's Tracefs: its ``_files``, ``error_log``
    and ``last_created_events``, which control.py reads after a write)."""
    fs._files["dynamic_events"] = (_r_dynamic_events, lambda d, a: _w_dynamic_events(fs, d, a))
    fs._files["synthetic_events"] = (_r_synthetic_events,
                                     lambda d, a: _w_synthetic_events(fs, d, a))
    fs._files["kprobe_events"] = (_r_kprobe_events, lambda d, a: _w_kprobe_events(fs, d, a))
    fs._files["kprobe_profile"] = (_r_kprobe_profile, None)


def _r_dynamic_events() -> str:
    from ..events.dynevent import lines
    from ..events.synth import synth_lines
    return "".join(l + "\n" for l in lines()) + "".join(
        f"s:synthetic/{l}\n" for l in synth_lines())


def _r_synthetic_events() -> str:
    from ..events.synth import synth_lines
    return "".join(l + "\n" for l in synth_lines())


def _w_synthetic_events(fs, data: str, append: bool) -> None:
    """Definitions, one per line (``;`` between fields), ``!NAME`` to remove; a write
    without append removes every definition first, as O_TRUNC does."""
    from ..events.synth import SynthError, synth_clear, synth_command
    if not append:
        synth_clear()
    for line in data.splitlines():
        cmd = line.rstrip()
        if not cmd.strip():
            continue
        try:
            synth_command(cmd)
        except SynthError as e:
            fs.error_log.add("synthetic_events", e.msg, cmd, e.pos or 0)
            raise


def _commands(data: str):
    for line in data.splitlines():
        cmd = line.strip()
        if cmd and not cmd.startswith("#"):
            yield cmd


def _w_dynamic_events(fs, data: str, append: bool) -> None:
    # the probe kinds this file offers register their commands with dynevent.py
    from ..events import eprobe, fprobe_event, line_probe  # noqa: F401
    from ..events.dynevent import clear as dynevent_clear, create as dynevent_create
    from ..events.probe_parse import ProbeError
    from ..events.synth import SynthError, synth_clear, synth_dyn_command
    fs.last_created_events = []
    if not append:
        dynevent_clear()
        synth_clear()
    for cmd in _commands(data):
        try:
            made = synth_dyn_command(cmd)
            if made:
                if made is not True:
                    fs.last_created_events.append(made)
                continue
        except SynthError as e:
            fs.error_log.add("synthetic_events", e.msg, cmd, e.pos or 0)
            raise
        try:
            ev = dynevent_create(cmd)
        except ProbeError as e:
            fs.error_log.add(_SUBSYSTEM.get(cmd[:1], "trace_fprobe"), e.msg, cmd, e.pos or 0)
            raise
        if ev is not None:
            fs.last_created_events.append(ev.call)


def _r_kprobe_events() -> str:
    from ..events.line_probe import kprobe_events_lines
    return "".join(l + "\n" for l in kprobe_events_lines())


def _r_kprobe_profile() -> str:
    from ..events.line_probe import kprobe_profile_read
    return kprobe_profile_read()


def _w_kprobe_events(fs, data: str, append: bool) -> None:
    """p:, r: and -: of those; ``>`` (no append) removes every p:/r: probe first."""
    from ..events.line_probe import kprobe_events_clear, kprobe_events_create
    from ..events.probe_parse import ProbeError
    fs.last_created_events = []
    if not append:
        kprobe_events_clear()
    for cmd in _commands(data):
        try:
            ev = kprobe_events_create(cmd)
        except ProbeError as e:
            fs.error_log.add("trace_kprobe", e.msg, cmd, e.pos or 0)
            raise
        if ev is not None:
            fs.last_created_events.append(ev.call)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
