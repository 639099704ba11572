"""The served program the ported kernel selftests control: a small "kernel" that keeps
running the functions of ksym.py on a few threads, like a system that is never idle.

    python workload.py STATE_DIR

It serves its tracefs (fntrace.serve()), writes STATE_DIR/ready with its pid and the
native id of its main thread, then runs until killed.  The main thread calls the
scheduler, locks and file functions about every millisecond; every 50 ms it "forks"
(ksym._do_fork: a short-lived thread); a second long-lived thread ("kworker") does
softirqs.  Each forked thread appends its native id to STATE_DIR/children.  Writing a module name to STATE_DIR/modprobe makes it import that module
(the tests' modprobe); writing "COUNT NICE" to STATE_DIR/ping runs ping() (the tests' ping),
and the file is gone when it is done.
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
    ksym.do_exit(threading.current_thread().name[:15], threading.get_native_id(), 120)


def ping(count, nice):
    """The tests' ``ping -c COUNT`` (at ``nice -n NICE``): a thread named "ping" that the
    main thread wakes COUNT times (sched_waking, sched_wakeup) and that is then switched
    in (sched_switch with next_comm "ping"); it execs first and exits last."""
    go, done = threading.Event(), threading.Event()
    prio = 120 + nice

    def body():
        tid = threading.get_native_id()
        ksym._prio[tid] = prio
        ksym.do_execve("/usr/bin/ping")
        for _ in range(count):
            go.wait()
            go.clear()
            ksym.schedule()
            done.set()
        ksym.do_exit("ping", tid, prio)
        del ksym._prio[tid]

    t = threading.Thread(target=body, name="ping")
    t.start()
    for _ in range(count):
        time.sleep(0.01)
        ksym.try_to_wake_up("ping", t.native_id, prio)
        go.set()
        done.wait()
        done.clear()
    t.join()


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
    ping_req = os.path.join(state, "ping")
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
            if os.path.exists(ping_req):
                with open(ping_req) as f:
                    count, nice = map(int, f.read().split())
                # woken from a new thread, as any task may wake another: its events
                # are traced even where a thread running before tracing began is
                # not (the pure 3.11 hook)
                waker = threading.Thread(target=ping, args=(count, nice), name="waker")
                waker.start()
                waker.join()
                os.unlink(ping_req)
        time.sleep(0.001)


if __name__ == "__main__":
    main()
