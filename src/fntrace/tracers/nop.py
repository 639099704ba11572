"""The nop tracer: "trace nothing".  Events and markers still record."""
from __future__ import annotations


class NopTracer:
    name = "nop"

    def init(self, tr) -> None:
        pass

    def reset(self, tr) -> None:
        pass
