"""Trace events: the event calls, their per-instance files, enable/filter/trigger
(kernel/trace/trace_events.c, trace_events_trigger.c).

    EventCall   one event type (``fprobes/work__entry``): its fields and how it is hooked
    EventFile   that event in one trace instance: enable state, filter, triggers

An event is hooked while some file has it enabled or in soft mode (a trigger may enable
it).  When it fires, each file runs its triggers, then — if enabled and not soft-disabled
and its filter passes — writes a TRACE_EVENT record into its instance's buffer.

enable file reads (event_enable_read):  "1"/"0", plus "*" in soft mode
    soft mode      an enable_event/disable_event trigger refers to the event
    soft disabled  hooked for the trigger's sake, but not recorded until it fires
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from time import monotonic_ns
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..ring_buffer import RingBuffer
    from .filter import EventFilter

from .._env import fork_safe
from ..core.task import own_threads as _own_threads, thread_cpu, thread_info
from ..errors import FntraceError
from ..ring_buffer import PAYLOAD_SEP, TRACE_EVENT

get_native_id = threading.get_native_id

__all__ = ["EventCall", "EventFile", "event_file", "event_calls", "add_event_source",
           "register_event_call",
           "unregister_event_call", "find_event_call", "stack_text", "filter_passes",
           "event_buffer_of"]

_lock = fork_safe(threading.RLock())
_ids = __import__("itertools").count(1)      # event ids are never reused


# The static events (events/static_events.py: some 150 audit, exception, gc, thread and
# hand-off events) are registered when the table is first read, not when tracefs is
# made: building them is 11 M instructions, a twentieth of every `fntrace record`'s
# start-up, and most recordings never name an event.  A reader cannot tell: every read
# of the table (and every registration, so that the ids come out as before) loads the
# pending sources first, under the table's lock.
_sources: list[Callable[[], None]] = []
_loading = [False]      # under _lock: this thread is running the sources


def add_event_source(load: Callable[[], None]) -> None:
    """Have ``load()`` register its events before the table is next read (once)."""
    with _lock:
        if load not in _sources:
            _sources.append(load)


def _load_sources() -> None:
    with _lock:
        if _loading[0]:
            return          # the source's own registrations read the table
        _loading[0] = True
        try:
            while _sources:
                _sources.pop(0)()
        finally:
            _loading[0] = False


class _EventTable(dict):
    """(system, name) -> EventCall, in creation order; the pending sources are loaded
    by every read."""
    __slots__ = ()

    def __contains__(self, key: object) -> bool:
        if _sources:
            _load_sources()
        return dict.__contains__(self, key)

    def __getitem__(self, key: tuple[str, str]) -> "EventCall":
        if _sources:
            _load_sources()
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        if _sources:
            _load_sources()
        return dict.get(self, key, default)

    def __iter__(self):
        if _sources:
            _load_sources()
        return dict.__iter__(self)

    def __len__(self) -> int:
        if _sources:
            _load_sources()
        return dict.__len__(self)

    def keys(self):
        if _sources:
            _load_sources()
        return dict.keys(self)

    def values(self):
        if _sources:
            _load_sources()
        return dict.values(self)

    def items(self):
        if _sources:
            _load_sources()
        return dict.items(self)


event_calls: dict[tuple[str, str], "EventCall"] = _EventTable()


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_own_files: dict[str, bool] = {}


def _fntrace_code(filename: str) -> bool:
    """Code in fntrace's own files, whatever __name__ it runs under (the command's
    main module runs as __main__)."""
    own = _own_files.get(filename)
    if own is None:
        own = _own_files[filename] = os.path.abspath(filename).startswith(_PKG_DIR)
    return own


def stack_text(frame, limit: int = 32) -> str:
    """A stack trace as the kernel's <stack trace> lines list it: innermost first, down
    to the program's __main__ module body.  What runs that body is not the program's
    (runpy, a console script, fntrace's launcher when it cannot start the program on a
    stack of its own), as the kernel's trace ends at the entry code; fntrace's own
    frames are left out wherever they are."""
    from ..core.records import record_table
    main = sys.modules.get("__main__")
    main_globals = getattr(main, "__dict__", None)
    out: list[str] = []
    f = frame
    while f is not None and len(out) < limit:
        code = f.f_code
        rec = record_table.by_code.get(id(code))
        if rec is None:
            glb = f.f_globals
            mod = glb.get("__name__", "") if isinstance(glb, dict) else ""
            name = f"{mod}.{code.co_qualname}" if mod else code.co_qualname
        else:
            name = rec.name
        if not name.startswith("fntrace.") and not _fntrace_code(code.co_filename):
            out.append(name)
        if code.co_name == "<module>" and f.f_globals is main_globals:
            break
        f = f.f_back
    return "\n".join(out)


def filter_passes(flt: Callable[[Mapping[str, Any]], bool], values: Mapping[str, Any]) -> bool:
    """An event's or a trigger's filter on the event's values; one that raises rejects
    it (the error is the filter's, never the program's)."""
    try:
        return bool(flt(values))
    except Exception:
        return False


def event_buffer_of(tr) -> RingBuffer | None:
    """The calling thread's buffer for events in instance ``tr``, None for a thread its
    event filters leave out (cached per thread, see TraceArray.event_buffer)."""
    try:
        return tr.local.ebuf
    except AttributeError:
        return tr.event_buffer()


class EventCall:
    """One event type.

    fields    name -> kind ('int', 'str', 'any') for filters and the format file
    hook      called with True when the first file needs the event, False after the last
    """
    # a synthetic event's SynthEvent only (events/synth.py sets it; synth is above this
    # module: not imported, not even for the checker)
    synth: Any

    def __init__(self, system: str, name: str, fields: Mapping[str, str], *,
                 print_fmt: str = "", hook: Callable[[bool], None] | None = None,
                 definition: str = ""):
        if _sources:        # the static events take the first ids, as they always did
            _load_sources()
        self.system = system
        self.name = name
        self.fields = dict(fields)
        self.print_fmt = print_fmt
        self.hook = hook
        self.definition = definition
        self.files: list[EventFile] = []        # files with the event on (hard or soft)
        self.hooked = False
        self.id = next(_ids)

    @property
    def full_name(self) -> str:
        return f"{self.system}:{self.name}"

    def _update_hook(self) -> None:
        want = bool(self.files)
        if want != self.hooked and self.hook is not None:
            self.hook(want)
        self.hooked = want

    def format_text(self) -> str:
        """The ``format`` file."""
        lines = [f"name: {self.name}", f"ID: {self.id}", "format:",
                 "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;",
                 "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;",
                 "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;",
                 "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;", ""]
        off = 8
        lines.append(f"\tfield:unsigned long __probe_ip;\toffset:{off};\tsize:8;\tsigned:0;")
        off += 8
        for name, kind in self.fields.items():
            ctype = {"int": "s64", "str": "__data_loc char[]"}.get(kind, "object")
            lines.append(f"\tfield:{ctype} {name};\toffset:{off};\tsize:8;\tsigned:{int(kind == 'int')};")
            off += 8
        lines.append("")
        lines.append(f"print fmt: {self.print_fmt}")
        return "\n".join(lines) + "\n"

    def fire(self, func_ip: int, values: Mapping[str, Any], text_fn: Callable[[], str],
             frame=None, only_tr=None) -> None:
        """The event happened: run every file's triggers, then record where enabled.
        ``text_fn`` builds the line's text once, only if something records it;
        ``only_tr`` keeps it to one instance (a synthetic event made by that instance's trigger)."""
        if _own_threads and get_native_id() in _own_threads:
            return              # fntrace's own threads are never traced
        text = None
        common = False
        for ef in self.files:
            if only_tr is not None and ef.tr is not only_tr:
                continue
            if not common and (ef.needs_common or ef.filter is not None):
                # the common fields every event has (common_pid, common_cpu, comm)
                cpu = thread_cpu()
                pid, comm = thread_info.get(cpu, (0, ""))
                # an event's own field of the same name (sched_waking's comm) wins
                values = {"common_pid": pid, "common_cpu": cpu, "comm": comm, **values}
                common = True
            if ef.triggers:
                ef.run_triggers(values, frame)
            if not ef.enabled or ef.soft_disabled:
                continue
            flt = ef.filter
            if flt is not None:
                try:
                    if not flt(values):
                        continue
                except Exception:
                    continue
            tr = ef.tr
            if not tr.tracing_on:
                continue
            if text is None:
                text = text_fn()
            try:
                buf = tr.local.ebuf
            except AttributeError:
                buf = tr.event_buffer()
            if buf is None:
                continue        # set_event_pid / set_event_notrace_pid / cpumask
            buf.write_payload(monotonic_ns(), TRACE_EVENT, func_ip, 0, 0, 0, self.name + PAYLOAD_SEP + text)


class EventFile:
    """An event in one trace instance (struct trace_event_file).

    enabled        EVENT_FILE_FL_ENABLED: hooked
    soft_disabled  EVENT_FILE_FL_SOFT_DISABLED: hooked but not recorded
    sm_ref         how many enable_event/disable_event triggers refer to it (SOFT_MODE)
    """

    def __init__(self, call: EventCall, tr) -> None:
        self.call = call
        self.tr = tr
        self.enabled = False
        self.soft_disabled = False
        self.sm_ref = 0
        self.filter: EventFilter | None = None
        self.filter_text = ""
        self.triggers: list = []
        self.needs_common = False

    def enable_text(self) -> str:
        """event_enable_read()"""
        on = self.enabled and not self.soft_disabled
        return ("1" if on else "0") + ("*" if self.soft_disabled or self.sm_ref else "")

    def clear_triggers(self) -> None:
        """Every trigger removed, each let go of what it holds (a hist trigger its
        data and the synthetic events it generates)."""
        for t in self.triggers:
            release = getattr(t, "release", None)
            if release is not None:
                release()
        self.triggers.clear()
        self._sync()

    def _sync(self) -> None:
        # a trigger that reads no common field (a plain hist trigger) spares the hit
        # their lookup
        self.needs_common = any(getattr(t, "needs_common", True) for t in self.triggers)
        need = self.enabled or bool(self.triggers)
        with _lock:
            if need and self not in self.call.files:
                self.call.files.append(self)
            elif not need and self in self.call.files:
                self.call.files.remove(self)
            self.call._update_hook()

    def enable_disable(self, enable: bool, soft: bool) -> None:
        """__ftrace_event_enable_disable(): a write to the enable file (soft=False) or a
        trigger referring to the event coming or going (soft=True)."""
        if enable:
            if not soft:
                self.soft_disabled = False
            else:
                self.sm_ref += 1
                if self.sm_ref > 1:
                    return
            if not self.enabled:
                # keep the event disabled when going to soft mode
                if soft:
                    self.soft_disabled = True
                self.enabled = True
        else:
            if soft:
                self.sm_ref = max(0, self.sm_ref - 1)
                if self.sm_ref > 0:
                    return
                disable = self.soft_disabled
            else:
                # in soft mode a 0 does nothing, or enable_event could not work
                disable = not self.sm_ref
            if disable and self.enabled:
                self.enabled = False
            # in soft mode the event stays hooked but disabled; out of it, plain
            self.soft_disabled = bool(self.sm_ref)
        self._sync()

    def set_enabled(self, on: bool) -> None:
        self.enable_disable(on, False)

    def soft_enable(self) -> None:
        """An enable_event or disable_event trigger now refers to this event."""
        self.enable_disable(True, True)

    def soft_release(self) -> None:
        self.enable_disable(False, True)

    def set_filter(self, text: str) -> None:
        """A write to the filter file (apply_event_filter)."""
        from .filter import PAGE_SIZE, parse_filter
        if len(text) >= PAGE_SIZE:
            # event_filter_write: -EINVAL before anything is parsed, no error_log entry
            raise FntraceError(f"filter too long: a write is less than a page ({PAGE_SIZE} bytes)",
                               pos=0, command=text)
        flt = parse_filter(text, self.call.fields)
        self.filter = flt
        self.filter_text = flt.text if flt is not None else ""

    def run_triggers(self, values: Mapping[str, Any], frame) -> None:
        for t in list(self.triggers):
            try:
                t.fire(self, values, frame)
            except Exception as exc:         # a trigger must never reach the program
                try:
                    sys.stderr.write(f"fntrace: trigger {t} failed: {exc}\n")
                except Exception:
                    pass


def event_file(tr, call: EventCall) -> EventFile:
    """Trace array ``tr``'s file for an event call, made on first use (a call registered
    again under the same name gets a new file)."""
    key = (call.system, call.name)
    ef = tr.event_files.get(key)
    if ef is None or ef.call is not call:
        ef = EventFile(call, tr)
        tr.event_files[key] = ef
    return ef


def register_event_call(call: EventCall) -> EventCall:
    with _lock:
        key = (call.system, call.name)
        if key in event_calls:
            raise FntraceError(f"event {call.full_name} already exists")
        event_calls[key] = call
        return call


def unregister_event_call(call: EventCall) -> None:
    with _lock:
        if call.files:
            err = FntraceError(f"event {call.full_name} is in use")
            err.errno = 16   # EBUSY
            raise err
        event_calls.pop((call.system, call.name), None)
        if call.hooked and call.hook is not None:
            call.hook(False)
            call.hooked = False


def find_event_call(system: str | None, name: str) -> EventCall | None:
    with _lock:
        if system is not None:
            return event_calls.get((system, name))
        for (s, n), c in event_calls.items():
            if n == name:
                return c
        return None


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
