"""``fntrace attach PID`` and ``fntrace detach PID``: make a running Python program
controllable without restarting it, and leave it as it was (tracefs/attach.py)."""
from __future__ import annotations

import argparse
import sys

from ..tracefs.attach import attach, detach
from .ctl import pid_arg

__all__ = ["run_attach", "run_detach", "EPILOG", "add_arguments", "run"]


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


# -- the command ---------------------------------------------------------------------
EPILOG = """\
the program must run the same Python version as this fntrace (else run
`python3.X -m fntrace attach PID` with fntrace installed for that Python) and belong
to you; ptrace must be allowed (kernel.yama.ptrace_scope).

examples:
  fntrace attach 4242                          # then: fntrace ctl 4242 ...
  fntrace attach 4242 && fntrace ctl 4242 current_tracer function_graph
  fntrace attach --timeout 60 4242             # a program slow to let go of the GIL"""


def add_arguments(p: argparse.ArgumentParser,
                  wait_for: str = "its control endpoint") -> None:
    """PID and --timeout (attach's; detach's, which waits for the endpoint to go)."""
    p.add_argument("pid", type=pid_arg, metavar="PID", help="the program's process id")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SEC",
                   help=f"how long to wait for {wait_for} (default: 10)")


def run(args, at_exit: bool) -> int:
    return run_attach(args.pid, args.timeout)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
