"""Tracers: what ``current_tracer`` selects (kernel/trace/trace_*.c)."""
from __future__ import annotations

__all__ = ["available_tracers"]

TYPE_CHECKING = False
if TYPE_CHECKING:                       # typing is costly to import; only checkers need this
    from typing import Protocol

    class Tracer(Protocol):
        name: str

        def init(self, tr) -> None: ...

        def reset(self, tr) -> None: ...


def available_tracers() -> dict[str, type]:
    from .function import FunctionTracer
    from .function_graph import FunctionGraphTracer
    from .nop import NopTracer
    return {"function": FunctionTracer, "function_graph": FunctionGraphTracer, "nop": NopTracer}


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
