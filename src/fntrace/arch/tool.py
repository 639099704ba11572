"""The sys.monitoring tool id fntrace owns, below every part that takes it (the back
end, the line probes, the exception events: arch/lines.py's hold_tool shares it), as
coverage.py's sysmon.py keeps its own."""
from __future__ import annotations

__all__ = ["TOOL_ID", "TOOL_NAME"]

# 0 debugger, 1 coverage, 2 profilers (cProfile, viztracer), 3 coverage measuring
# itself, 5 optimizers: 4 is the one nobody claims.
TOOL_ID = 4
TOOL_NAME = "fntrace"


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
