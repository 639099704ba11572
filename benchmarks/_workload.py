"""A call-heavy, pure-Python workload shared by cold_filter.py and function_tracer_vs_peers.py.

Three parts, each dominated by Python-to-Python calls:
  * fib(22): recursion, 57 313 calls of a tiny function;
  * a small object model: constructors, methods, properties, a classmethod;
  * json encoding with the pure-Python encoder (``indent`` set, so the C accelerator
    ``c_make_encoder`` is not used): nested generator functions and closures.

``run(n)`` repeats the three parts n times; ``run(0)`` does nothing, which is how the
benchmarks measure the fixed cost of start-up and tracer set-up.  ``never_called`` is
what the cold filter selects: it exists, it is traceable, and nothing calls it.
"""
from __future__ import annotations

import json

__all__ = ["run", "never_called", "fib", "oo_workload", "json_workload"]


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x: float, y: float) -> None:
        self.x = x
        self.y = y

    def __add__(self, other: "Vec") -> "Vec":
        return Vec(self.x + other.x, self.y + other.y)

    def scale(self, k: float) -> "Vec":
        return Vec(self.x * k, self.y * k)

    def dot(self, other: "Vec") -> float:
        return self.x * other.x + self.y * other.y

    @classmethod
    def zero(cls) -> "Vec":
        return cls(0.0, 0.0)


class Particle:
    def __init__(self, pos: Vec, vel: Vec, mass: float = 1.0) -> None:
        self.pos = pos
        self.vel = vel
        self.mass = mass

    @property
    def energy(self) -> float:
        return 0.5 * self.mass * self.vel.dot(self.vel)

    def step(self, dt: float, gravity: Vec) -> None:
        self.vel = self.vel + gravity.scale(dt)
        self.pos = self.pos + self.vel.scale(dt)
        if self.pos.y < 0.0:
            self._bounce()

    def _bounce(self) -> None:
        self.pos = Vec(self.pos.x, -self.pos.y)
        self.vel = Vec(self.vel.x, -self.vel.y)


def oo_workload(nparticles: int = 40, steps: int = 60) -> float:
    gravity = Vec(0.0, -9.81)
    ps = [Particle(Vec(float(i), 10.0 + i), Vec(1.0, 0.0)) for i in range(nparticles)]
    for _ in range(steps):
        for p in ps:
            p.step(0.01, gravity)
    total = Vec.zero().x
    for p in ps:
        total += p.energy
    return total


def _make_doc(depth: int, width: int) -> object:
    if depth == 0:
        return {"id": width, "name": f"leaf{width}", "ok": True, "ratio": width / 7, "tags": ["a", "b"]}
    return {"level": depth, "children": [_make_doc(depth - 1, i) for i in range(width)],
            "meta": {"w": width, "n": None}}


_DOC = _make_doc(4, 5)
_ENCODER = json.JSONEncoder(indent=1, sort_keys=True)


def json_workload() -> int:
    # indent != None: JSONEncoder.iterencode takes the pure-Python _make_iterencode path.
    return len(_ENCODER.encode(_DOC))


def never_called() -> None:
    """The cold filter's only function: traceable, never called."""
    raise AssertionError("never_called was called")


def run(n: int) -> int:
    acc = 0
    for _ in range(n):
        acc += fib(22)
        acc += int(oo_workload())
        acc += json_workload()
    return acc
