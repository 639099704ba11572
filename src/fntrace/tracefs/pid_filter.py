"""The files that choose threads (kernel/trace/ftrace.c set_ftrace_pid, trace_events.c
set_event_pid, trace.c tracing_cpumask), over the instance's ThreadFilter
(core/pid_list.py):

    set_ftrace_pid / set_ftrace_notrace_pid   threads whose functions are traced
    set_event_pid / set_event_notrace_pid     threads whose events are
    set_ftrace_comm / set_event_comm          the same by thread name (not in the kernel)
    tracing_cpumask                           threads by their slot, the CPU column
"""
from __future__ import annotations

from ..core import pid_list, task
from ..errors import FntraceError

__all__ = ["register_pid_filter"]


def register_pid_filter(fs) -> None:
    """Add the files to ``fs`` (a Tracefs: its ``tr`` and ``error_log``)."""
    flt = fs.tr.filter
    show = pid_list.ThreadFilter.show
    for name, attr, empty in (("set_ftrace_pid", "ftrace", pid_list.FTRACE_NO_PIDS),
                              ("set_ftrace_notrace_pid", "ftrace_no", pid_list.FTRACE_NO_PIDS),
                              ("set_event_pid", "event", ""),
                              ("set_event_notrace_pid", "event_no", "")):
        fs._files[name] = (
            (lambda a=attr, e=empty: show(getattr(flt, a), e)),
            (lambda d, ap, a=attr, n=name: _w_pids(fs, n, getattr(flt, a), d, ap)))
    # Not in the kernel: threads by name (their comm), see core/pid_list.py.
    for name, attr in (("set_ftrace_comm", "ftrace"), ("set_event_comm", "event")):
        fs._files[name] = (
            (lambda a=attr: "".join(g + "\n" for g in getattr(flt, a).comms)),
            (lambda d, ap, a=attr: _w_comms(fs, getattr(flt, a), d, ap)))
    mask = _Cpumask(fs)
    fs._files["tracing_cpumask"] = (mask.read, mask.write)


def _w_pids(fs, name: str, lst, data: str, append: bool) -> None:
    with fs.tr.filter.lock:
        try:
            pid_list.ThreadFilter.write(lst, data, append)
        except FntraceError as e:
            fs.error_log.add(name, "Invalid pid", data.rstrip("\n"), e.pos or 0)
            raise
    fs.tr.pids_changed()


def _w_comms(fs, lst, data: str, append: bool) -> None:
    with fs.tr.filter.lock:
        pid_list.ThreadFilter.write_comms(lst, data, append)
    fs.tr.pids_changed()


def _nr_cpus() -> int:
    # nr_cpu_ids: the thread indices handed out so far, in whole 32-bit groups
    return max(32, (len(task.thread_info) + 31) // 32 * 32)


class _Cpumask:
    """tracing_cpumask of one instance."""

    def __init__(self, fs) -> None:
        self.fs = fs
        self.all_shown: set[int] = set()     # widths "every thread" was read as

    def read(self) -> str:
        nr = _nr_cpus()
        flt = self.fs.tr.filter
        if flt.cpumask is None:
            # Every thread, as this many bits: remembered, so that writing it back
            # means every thread again once more threads have come (the kernel's CPUs
            # are fixed at boot; threads are not, and a script's save-and-restore of
            # the mask would otherwise leave the threads started meanwhile out).
            self.all_shown.add(nr)
        return pid_list.cpumask_show(flt.cpumask, nr)

    def write(self, data: str, append: bool) -> None:
        fs = self.fs
        try:
            mask = pid_list.parse_cpumask(data)
        except FntraceError as e:
            fs.error_log.add("tracing_cpumask", "Invalid cpumask", data.rstrip("\n"), e.pos or 0)
            raise
        nr = _nr_cpus()
        # every thread selected, later ones too: the default again (also as it was
        # read when fewer threads had come)
        every = mask == (1 << nr) - 1 or any(mask == (1 << w) - 1 for w in self.all_shown)
        fs.tr.filter.cpumask = None if every else mask
        fs.tr.pids_changed()
