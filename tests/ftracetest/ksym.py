"""The functions the ported kernel selftests trace: kernel names, in Python.

The annotations are the probes' BTF: vfs_read's parameters are the kernel's.

The kernel's selftests filter on functions every kernel runs all the time (schedule,
mutex_lock, _do_fork ...).  This module has functions of those names, and workload.py
keeps calling them, so a test can say ``echo 'ksym.schedule' > set_ftrace_filter`` and
find it in ``trace`` a moment later, as the originals do with ``schedule``.
"""
import threading

__all__ = []

_lock = threading.Lock()
counter = [0]


_prio = {}        # native thread id -> its prio (120 + nice), for the sched events


def schedule():
    """The calling thread is switched (back) in: prev and next are both itself."""
    t = threading.current_thread()
    tid = threading.get_native_id()
    p = _prio.get(tid, 120)
    return __schedule(t.name[:15], tid, p, t.name[:15], tid, p)


def __schedule(prev_comm, prev_pid, prev_prio, next_comm, next_pid, next_prio):
    """sched_switch's fields are its arguments."""
    counter[0] += 1
    return _raw_spin_lock() + _raw_spin_unlock()


def try_to_wake_up(comm, pid, prio):
    """Wakes the thread pid: sched_waking here, sched_wakeup in ttwu_do_wakeup."""
    return ttwu_do_wakeup(comm, pid, prio)


def ttwu_do_wakeup(comm, pid, prio):
    return 1


def preempt_schedule():
    return schedule()


def schedule_timeout(n):
    return sum(schedule() for _ in range(n))


def do_softirq():
    return run_timer_softirq()


def run_timer_softirq():
    return counter[0] & 1


def mutex_lock():
    _lock.acquire()
    return 1


def mutex_trylock():
    if _lock.acquire(blocking=False):
        _lock.release()
        return 1
    return 0


def mutex_unlock():
    _lock.release()
    return 1


def _raw_spin_lock():
    return 1


def _raw_spin_unlock():
    return 1


def _raw_spin_trylock():
    return 1


def queued_spin_lock_slowpath():
    return 1


def sched_clock():
    return counter[0]


def local_clock():
    return sched_clock()


def ktime_get():
    return local_clock()


def update_process_times(user):
    return run_timer_softirq() + user


def locks_remove_posix(fd):
    return fd


def locks_free_lock(fd) -> None:
    """Returns nothing, as the kernel's kfree: its probes have no $retval."""


def sys_getpid():
    return 0


class File:
    """struct file, as much of it as the probes read."""
    __slots__ = ("f_pos", "f_flags")

    def __init__(self) -> None:
        self.f_pos = 0
        self.f_flags = 0


_files = {fd: File() for fd in range(4)}
_buf = bytearray(128)


def SyS_read(fd, count):
    return vfs_read(_files[fd], _buf, count, 0) if fd in _files else -9


def vfs_read(file: File, buf: bytearray, count: int, pos: int) -> int:
    """vfs_read(struct file *file, char __user *buf, size_t count, loff_t *pos)"""
    mutex_lock()
    try:
        file.f_pos += count
        return count
    finally:
        mutex_unlock()


def vfs_write(fd, count):
    mutex_trylock()
    return count


def proc_reg_write(buf):
    """A write the file refuses: -EIO, as /proc/interrupts gives the kernel's test."""
    return -5


def do_sys_open(filename, flags, mode):
    return len(filename) + flags + mode


def kernel_clone(fn, parent_pid, child_pid):
    """The "fork": a new thread (the kernel's new task) that runs fn."""
    t = threading.Thread(target=fn, name="forked")
    t.start()
    return t


_children = [0]


def _do_fork(fn):
    _children[0] += 1
    return kernel_clone(fn, threading.get_native_id(), _children[0])


def do_execve(filename):
    exec_binprm(filename, threading.get_native_id(), threading.get_native_id())
    return do_sys_open(filename, 0, 0)


def exec_binprm(filename, pid, old_pid):
    """sched_process_exec's fields are its arguments."""
    return 0


def do_exit(comm, pid, prio):
    """The calling thread ends: sched_process_exit's fields are its arguments."""
    return 0


def do_execveat_common(filename):
    return do_execve(filename)
