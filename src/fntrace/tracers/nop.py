"""The nop tracer: "trace nothing".  Events and markers still record."""
from __future__ import annotations

__all__ = ["NopTracer"]


class NopTracer:
    name = "nop"

    def init(self, tr) -> None:
        pass

    def reset(self, tr) -> None:
        pass


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
