"""The functions the ported kernel selftests trace: kernel names, in Python.

The kernel's selftests filter on functions every kernel runs all the time (schedule,
mutex_lock, _do_fork ...).  This module has functions of those names, and workload.py
keeps calling them, so a test can say ``echo 'ksym.schedule' > set_ftrace_filter`` and
find it in ``trace`` a moment later, as the originals do with ``schedule``.
"""
import threading

__all__ = []

_lock = threading.Lock()
counter = [0]


def schedule():
    counter[0] += 1
    return _raw_spin_lock() + _raw_spin_unlock()


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


def sys_getpid():
    return 0


def SyS_read(fd, count):
    return vfs_read(fd, count)


def vfs_read(fd, count):
    mutex_lock()
    try:
        return count if fd >= 0 else -9
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
    return do_sys_open(filename, 0, 0)


def do_execveat_common(filename):
    return do_execve(filename)
