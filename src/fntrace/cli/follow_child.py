"""A followed process's own recording: what the bootstrap of a new interpreter a traced
program started runs (follow_site/sitecustomize.py; follow.py says how processes are
followed).  It makes a Recording (record.py) from the spec the first process left in
the environment, so it sits above both: follow.py knows nothing of Recording.
"""
from __future__ import annotations

import json
import os
import sys

from ..errors import FntraceError
from ..printk import pr_warn
from .follow import CHILD_OPTIONS, Follow

__all__ = ["start_child"]


def start_child(text: str) -> None:
    """A new interpreter's bootstrap (follow_site/sitecustomize.py): record this
    process as the first process asked.  Never raises: a child that cannot be traced
    says why and runs on."""
    try:
        spec = json.loads(text)
        from .record import RecordOptions, Recording
        kw = {k: v for k, v in spec["opts"].items() if k in CHILD_OPTIONS}
        opts = RecordOptions(**kw)
        opts.compress = bool(spec.get("compress"))
        opts.mode = int(spec.get("mode", opts.mode))
        opts.otel_context = bool(spec.get("otel_context"))
        fw = Follow(opts, spec["base"], spec["run"], bool(spec.get("scratch")),
                    spec.get("first"))
        from ..tracefs.endpoint import pid_alive
        if fw.scratch and not pid_alive(fw.first_pid):
            return          # live is over: nobody would report this process
        opts.output = fw.child_output()
        argv = list(getattr(sys, "orig_argv", None) or getattr(sys, "argv", []))
        if spec.get("main_alias"):
            from ..core.records import record_table
            record_table.main_alias = str(spec["main_alias"])
        # A signal that ends the process between making the file and guarding its end
        # (a pool's terminate() while its workers start) would leave a file with no
        # end, which readers report as cut short: the signals that end a process by
        # default wait until the guard is in place, then act through it.
        import signal
        from .record import ENDING_SIGNALS
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING_SIGNALS)
        try:
            try:
                rec = Recording(opts, argv, at_exit=True, follow=fw,
                                header={"ppid": os.getppid(), "follow": "exec"})
            except FntraceError:
                if fw.scratch and not os.path.isdir(os.path.dirname(fw.base)):
                    return  # live ended (its directory went) as this process started
                raise
            rec.first = False
            rec.start_in_place()
            if fw.scratch:
                import atexit
                atexit.register(_leave_no_orphan, fw, opts.output)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    except BaseException as e:
        pr_warn(f"process {os.getpid()}: not traced: {type(e).__name__}: {e}")


def _leave_no_orphan(fw: Follow, path: str) -> None:
    """live's child at its end, the first process gone: nobody reports this file, and
    the directory may be one this child made again after live removed it (a process
    that started as live ended, such as multiprocessing's resource tracker): both go,
    rather than stay in the temporary directory for ever."""
    from ..tracefs.endpoint import pid_alive
    if pid_alive(fw.first_pid):
        return
    for remove, what in ((os.unlink, path), (os.rmdir, os.path.dirname(fw.base))):
        try:
            remove(what)
        except OSError:
            pass        # gone already; or another child's file is still there


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
