"""Tracers: what ``current_tracer`` selects (kernel/trace/trace_*.c)."""
from __future__ import annotations

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
