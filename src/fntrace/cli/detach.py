"""``fntrace detach PID``: fntrace off in an attached or served program, which runs on
(the work is cli/attach.py's run_detach)."""
from __future__ import annotations

import argparse

from . import attach

__all__ = ["EPILOG", "add_arguments", "run"]

EPILOG = """\
examples:
  fntrace detach 4242        # tracers off, tool id released, endpoint removed
  fntrace ctl 4242 current_tracer nop    # or only stop tracing, and stay attached"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    attach.add_arguments(p, wait_for="the endpoint to go")


def run(args, at_exit: bool) -> int:
    return attach.run_detach(args.pid, args.timeout)


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
