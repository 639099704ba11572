"""The served program the ported kernel selftests control: a small "kernel" that keeps
running the functions of ksym.py on a few threads, like a system that is never idle.

    python workload.py STATE_DIR

It serves its tracefs (fntrace.serve()), writes STATE_DIR/ready with its pid and the
native id of its main thread, then runs until killed.  The main thread calls the
scheduler, locks and file functions about every millisecond; every 50 ms it "forks"
(ksym._do_fork: a short-lived thread); a second long-lived thread ("kworker") does
softirqs.  Each forked thread appends its native id to STATE_DIR/children.  Writing a module name to STATE_DIR/modprobe makes it import that module
(the tests' modprobe).
"""
import os
import sys
import threading
import time

import fntrace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ksym  # noqa: E402


CHILDREN = None      # STATE_DIR/children: the native ids of the "forked" threads


def child():
    with open(CHILDREN, "a") as f:
        f.write(f"{threading.get_native_id()}\n")
    ksym.do_execve("/bin/true")
    ksym.schedule()


def kworker():
    while True:
        ksym.do_softirq()
        ksym.schedule()
        time.sleep(0.002)


def main() -> None:
    global CHILDREN
    state = sys.argv[1]
    CHILDREN = os.path.join(state, "children")
    fntrace.serve()
    threading.Thread(target=kworker, name="kworker", daemon=True).start()
    with open(os.path.join(state, "ready.tmp"), "w") as f:
        f.write(f"{os.getpid()} {threading.get_native_id()}\n")
    os.rename(os.path.join(state, "ready.tmp"), os.path.join(state, "ready"))
    modprobe = os.path.join(state, "modprobe")
    last_fork = 0.0
    while True:
        ksym.schedule()
        ksym.SyS_read(3, 100)
        ksym.vfs_write(1, 10)
        ksym.mutex_trylock()
        ksym.do_sys_open("/etc/hosts", 0, 0)
        ksym.proc_reg_write("\n")
        ksym.ktime_get()
        ksym.update_process_times(0)
        ksym.locks_remove_posix(3)
        ksym.locks_free_lock(3)
        now = time.monotonic()
        if now - last_fork > 0.05:
            last_fork = now
            ksym._do_fork(child).join()
            if os.path.exists(modprobe):
                with open(modprobe) as f:
                    name = f.read().strip()
                os.unlink(modprobe)
                __import__(name)
        time.sleep(0.001)


if __name__ == "__main__":
    main()
