"""``fntrace attach PID`` and ``fntrace detach PID``: make a running Python program
controllable without restarting it, and leave it as it was (tracefs/attach.py)."""
from __future__ import annotations

import sys

from ..tracefs.attach import attach, detach

__all__ = ["run_attach", "run_detach"]


def run_attach(pid: int, timeout: float) -> int:
    target, already = attach(pid, timeout=timeout)
    what = f"{pid} ({target.cmdline})" if target.cmdline else str(pid)
    if already:
        print(f"fntrace: process {what} is already controllable")
    else:
        print(f"fntrace: attached to process {what}, Python {target.version_text}")
    print(f"""\
next:
  fntrace ctl {pid} current_tracer function         # start the function tracer
  fntrace ctl {pid} set_ftrace_filter 'mypkg.*'     # only these functions
  fntrace ctl {pid} trace_pipe                      # stream the events (^C to stop)
  fntrace mount {pid} DIR                           # or: echo/cat DIR/... from any shell
  fntrace detach {pid}                              # everything off, the program runs on""")
    sys.stdout.flush()
    return 0


def run_detach(pid: int, timeout: float) -> int:
    detach(pid, timeout=timeout)
    print(f"fntrace: detached from process {pid}: nothing traced, its control endpoint "
          "removed")
    return 0


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
