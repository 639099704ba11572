"""Thread filters of a trace instance: set_ftrace_pid, set_ftrace_notrace_pid,
set_event_pid, set_event_notrace_pid, the thread-name filters and tracing_cpumask
(kernel/trace/pid_list.c, ftrace.c pid_write / fpid_show, trace_events.c
event_pid_write, trace.c tracing_cpumask_write).

A "pid" is a thread's native id (threading.get_native_id()); a "CPU" is the thread's
small index (the CPU column, core/task.py).

Like the kernel's per-CPU ``ftrace_ignore_pid`` / ``ignore_pid``, which the
sched_switch probe sets when a task comes onto a CPU, the verdict is taken once per
thread and per instance — at the thread's first event there (TraceArray.cpu_buffer /
event_buffer) — and cached with the thread's buffer; a change of any list starts a new
generation of the instance (trace_array.py TraceArray.pids_changed), which sends every thread
back to take it again.  An ignored thread then costs one check per call.

The thread-name filters (``set_ftrace_comm``, ``set_event_comm``; ``fntrace record
--thread NAME``) have no kernel counterpart (a task's comm changes, a thread's name is
set before it starts): a thread whose name matches one of the globs when it is first
seen is traced as if its id were listed in the matching pid file.
"""
from __future__ import annotations

import fnmatch
import threading

from ..errors import FntraceError
from . import task

__all__ = ["TracePidList", "ThreadFilter", "parse_pids", "parse_cpumask", "cpumask_show",
           "FTRACE_NO_PIDS"]

# fpid_show / fnpid_show print this when the list is empty (set_event_pid prints nothing).
FTRACE_NO_PIDS = "no pid\n"


def parse_pids(data: str) -> list[int]:
    """The ids of a write: space separated numbers (trace_pid_write: kstrtoul fails with
    -EINVAL, and the whole write is refused)."""
    out = []
    pos = 0
    for word in data.split():
        pos = data.find(word, pos)
        if not word.isdigit() or not word.isascii():
            raise FntraceError(f"{word!r} is not a thread id", command=data, pos=pos)
        # pid_max is 4194304 at most (PID_MAX_LIMIT); native ids stay below it.  A long
        # word is out of range before int() is asked (it refuses more than 4300 digits).
        if len(word.lstrip("0")) > 7 or int(word) >= 1 << 22:
            raise FntraceError(f"{word[:20]}{'...' if len(word) > 20 else ''}: thread id out "
                               "of range", command=data, pos=pos)
        out.append(int(word))
        pos += len(word)
    return out


class TracePidList:
    """One pid file: a set of native ids (trace_pid_list) and, for the thread-name
    filter, a list of globs."""

    __slots__ = ("pids", "comms")

    def __init__(self) -> None:
        self.pids: frozenset[int] = frozenset()
        self.comms: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.pids or self.comms)

    def has(self, native_id: int, name: str | None) -> bool:
        if native_id in self.pids:
            return True
        if self.comms and name is not None:
            return any(fnmatch.fnmatchcase(name, g) for g in self.comms)
        return False


def parse_cpumask(data: str) -> int:
    """bitmap_parse(): 32-bit hex groups separated by commas, most significant first;
    -EINVAL for anything else, nothing applied."""
    s = data.strip()
    if not s:
        raise FntraceError("tracing_cpumask: empty mask", command=data, pos=0)
    mask = 0
    pos = 0
    for group in s.split(","):
        g = group.strip()
        ok = 0 < len(g) <= 8 and all(c in "0123456789abcdefABCDEF" for c in g)
        if not ok:
            raise FntraceError(f"tracing_cpumask: {group!r} is not a hex group of at most "
                               "8 digits", command=data, pos=data.find(group, pos))
        mask = (mask << 32) | int(g, 16)
        pos += len(group) + 1
    return mask


def cpumask_show(mask: int | None, nr_cpus: int) -> str:
    """``%*pb``: nr_cpus bits in hex, 32 to a comma-separated group, zero padded."""
    nr = max(nr_cpus, 1)
    if mask is None:
        mask = (1 << nr) - 1
    mask &= (1 << nr) - 1
    groups = []
    bits = nr
    while bits > 0:
        n = (bits - 1) % 32 + 1          # the first group may be short
        bits -= n
        groups.append(f"{(mask >> bits) & ((1 << n) - 1):0{(n + 3) // 4}x}")
    return ",".join(groups) + "\n"


class ThreadFilter:
    """Every thread filter of one instance.  Lists are replaced, never edited in place:
    a reader on another thread sees one whole list."""

    def __init__(self) -> None:
        self.ftrace = TracePidList()       # set_ftrace_pid (+ set_ftrace_comm)
        self.ftrace_no = TracePidList()    # set_ftrace_notrace_pid
        self.event = TracePidList()        # set_event_pid (+ set_event_comm)
        self.event_no = TracePidList()     # set_event_notrace_pid
        self.cpumask: int | None = None    # None: every thread, including later ones
        self.function_fork = False
        self.event_fork = False
        self.lock = threading.Lock()

    # -- the verdict, on the thread, at its first event -----------------------------
    def _follow(self, lst: TracePidList, me: int, name: str | None) -> bool:
        """lst has the calling thread, or (fork option) a thread that started it, which
        adds it (ftrace_pid_follow_sched_process_fork / event_filter_pid_sched_process_fork)."""
        if lst.has(me, name):
            return True
        seen = {me}
        p = task.thread_parent(me)
        while p is not None and p not in seen:
            if p in lst.pids:
                # The kernel adds the child at fork; here at its first event (the
                # list object is replaced, so readers see it whole).
                with self.lock:
                    lst.pids = lst.pids | {me}
                return True
            seen.add(p)
            p = task.thread_parent(p)
        return False

    def _ignore(self, lst: TracePidList, no: TracePidList, fork: bool) -> bool:
        """trace_ignore_this_task(): listed in the notrace list, or a list that does
        not have it; then the CPU mask."""
        me = threading.get_native_id()
        if me in task.own_threads:
            return True
        # (the lists' fields, not their __bool__: a thread's first event asks)
        if lst.pids or lst.comms or no.pids or no.comms:
            name = task.thread_name() if (lst.comms or no.comms) else None
            if lst and not (self._follow(lst, me, name) if fork else lst.has(me, name)):
                return True
            if no and (self._follow(no, me, name) if fork else no.has(me, name)):
                return True
        if self.cpumask is not None and not (self.cpumask >> task.thread_cpu()) & 1:
            return True
        return False

    def ignore_function(self) -> bool:
        return self._ignore(self.ftrace, self.ftrace_no, self.function_fork)

    def ignore_event(self) -> bool:
        return self._ignore(self.event, self.event_no, self.event_fork)

    def active(self) -> bool:
        """Some filter is set (a thread could be ignored)."""
        return bool(self.ftrace or self.ftrace_no or self.event or self.event_no
                    or self.cpumask is not None)

    def forget(self, native_id: int) -> None:
        """A thread ended (with a fork option on, as the kernel's exit probe): out of
        the lists the options follow."""
        with self.lock:
            lists = (([self.ftrace, self.ftrace_no] if self.function_fork else [])
                     + ([self.event, self.event_no] if self.event_fork else []))
            for lst in lists:
                if native_id in lst.pids:
                    lst.pids = lst.pids - {native_id}

    # -- the files ------------------------------------------------------------------
    @staticmethod
    def show(lst: TracePidList, empty: str) -> str:
        if not lst.pids:
            return empty
        return "".join(f"{p}\n" for p in sorted(lst.pids))

    @staticmethod
    def write(lst: TracePidList, data: str, append: bool) -> None:
        """``>`` replaces, ``>>`` adds, a write of no ids clears, ``>>`` too
        (trace_pid_write frees the list when the write held none)."""
        pids = parse_pids(data)
        if not pids:
            lst.pids = frozenset()
            return
        lst.pids = (lst.pids if append else frozenset()) | frozenset(pids)

    @staticmethod
    def write_comms(lst: TracePidList, data: str, append: bool) -> None:
        """One name glob a line (a thread's name may hold spaces); ``>`` replaces,
        ``>>`` adds, a write of none clears."""
        globs = tuple(dict.fromkeys(g.strip() for g in data.splitlines() if g.strip()))
        if not globs:
            lst.comms = ()
            return
        lst.comms = (lst.comms + tuple(g for g in globs if g not in lst.comms)) if append else globs


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
