"""Trace assertions: the calls a block of code made, to assert on in a test.

    with fntrace.record_calls("shop.pricing.*", "shop.cart.Cart.add_item") as calls:
        checkout(cart)
    assert calls.count("shop.pricing.price_cart") == 1
    assert calls.names()[:2] == ["shop.cart.Cart.add_item", "shop.pricing.price_cart"]
    assert calls.calls("shop.cart.Cart.add_item")[0].args["quantity"] == 2
    assert calls.calls("shop.pricing.price_cart")[0].retval == 42

The pytest plugin hands it out as the ``fntrace_calls`` fixture.  Underneath is an
instance of its own (a TraceSession) running the function_graph tracer with
funcgraph-args and funcgraph-retval over the patterns given (the set_ftrace_filter
grammar), and what its buffers hold when the block ends is read back into whole calls
(output/calls.py), as every view reads a trace.

Values are what fntrace records: the short text of each argument and of the return value
(core/fetch.py's rules: no code of the program runs unless ``repr=True``, the record
option ``--repr``), and an int return value as itself.  A ``Shown`` text compares equal to
any object fntrace would show the same way, so ``args["quantity"] == 2`` and
``args["name"] == "abc"`` read as one expects, and pytest's failure message prints the
text as the trace does.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .core.fetch import value_repr
from .core.glob import glob_match
from .errors import FntraceError, UsageError
from .output.calls import iter_calls
from .session import TraceSession

__all__ = ["Shown", "TracedCall", "TracedCalls", "record_calls"]

_GLOB_CHARS = "*?["


class Shown(str):
    """A value as fntrace shows it (its text).  Equal to another object when that object
    would be shown the same way: ``Shown("2") == 2``, ``Shown("'abc'") == "abc"``; the
    text itself is ``str(value)`` (and every str method works on it)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is Shown:
            return str.__eq__(self, other)
        return str.__eq__(self, value_repr(other))

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return str.__str__(self)


@dataclass(frozen=True, slots=True)
class TracedCall:
    """One call.  ``args``: parameter name -> Shown; ``retval``: an int, a Shown, or
    None when the call raised (``raised`` holds the exception's text -- empty on 3.11,
    whose profile hook is not told which exception) or its return was not seen; ``duration`` in ns; ``caller`` the traced call it was made in (None at
    the top of what was traced)."""
    name: str
    args: dict[str, Shown]
    retval: object
    raised: Shown | None
    duration: int
    thread: str
    tid: int
    depth: int
    caller: str | None
    start: int

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.args.items())
        tail = f" raised {self.raised}" if self.raised is not None else f" -> {self.retval!r}"
        return f"<{self.name}({args}){tail}>"


class TracedCalls:
    """The calls recorded while a ``record_calls`` block ran, in the order they were
    made (their start), all threads."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns
        self._calls: list[TracedCall] | None = None
        self.lost = 0

    # -- filled when the block ends -------------------------------------------------
    def _fill(self, calls: list[TracedCall], lost: int) -> None:
        self._calls = calls
        self.lost = lost

    def _all(self) -> list[TracedCall]:
        if self._calls is None:
            raise FntraceError("the calls are read when the `with` block ends")
        return self._calls

    # -- questions ----------------------------------------------------------------------
    def _match(self, name: str | None, thread: str | int | None) -> list[TracedCall]:
        out = self._all()
        if name is not None:
            if any(c in name for c in _GLOB_CHARS):
                out = [c for c in out if glob_match(name, c.name)]
            else:
                out = [c for c in out if c.name == name]
        if thread is not None:
            out = [c for c in out if (c.tid == thread if isinstance(thread, int)
                                      else c.thread == thread)]
        return out

    def count(self, name: str | None = None, *, thread: str | int | None = None) -> int:
        """How many calls of ``name`` (a full name or a glob; None: all) were made."""
        return len(self._match(name, thread))

    def names(self, *, thread: str | int | None = None) -> list[str]:
        """The functions called, in call order (one thread's: ``thread`` by name or
        native id)."""
        return [c.name for c in self._match(None, thread)]

    def calls(self, name: str | None = None, *, thread: str | int | None = None
              ) -> list[TracedCall]:
        """The calls of ``name`` (a full name or a glob; None: all), in call order."""
        return self._match(name, thread)

    def durations(self, name: str | None = None, *, thread: str | int | None = None
                  ) -> list[int]:
        """Their durations, ns."""
        return [c.duration for c in self._match(name, thread)]

    def __iter__(self) -> Iterator[TracedCall]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        if self._calls is None:
            return f"<TracedCalls {' '.join(self.patterns)}: recording>"
        lost = f", {self.lost} LOST (the buffer was full)" if self.lost else ""
        return f"<TracedCalls {' '.join(self.patterns)}: {len(self._calls)} calls{lost}>"


def _shown_args(args: Iterable[tuple[str, str]] | None) -> dict[str, Shown]:
    return {k: Shown(v) for k, v in (args or ())}


class record_calls:
    """``with record_calls(PATTERN, ...) as calls:`` -- see the module docstring.

    notrace    patterns never traced (set_ftrace_notrace)
    repr       show objects with their own __repr__ (runs the program's code: --repr)
    buffer_size_kb  per-thread buffer; a thread that makes more calls than it holds
               keeps its first ones and ``calls.lost`` counts the rest (an assertion on
               counts then fails loudly: see ``__exit__``)
    """

    def __init__(self, *patterns: str, notrace: str | Iterable[str] | None = None,
                 repr: bool = False, buffer_size_kb: int = 4096) -> None:
        if not patterns or not all(isinstance(p, str) and p.strip() for p in patterns):
            raise UsageError("record_calls() needs the functions to trace: one or more "
                             "patterns such as 'shop.pricing.*'")
        self.patterns = patterns
        # The filter is checked now (FilterError with the word and its place): a typo
        # fails where it is written, not as an empty list later.
        self._session = TraceSession(list(patterns), notrace, tracer="function_graph",
                                     buffer_size_kb=buffer_size_kb, overwrite=False,
                                     options={"funcgraph-args": True,
                                              "funcgraph-retval": True,
                                              "object-repr": bool(repr)})
        self.calls = TracedCalls(patterns)

    def __enter__(self) -> TracedCalls:
        self._session.start()
        return self.calls

    def __exit__(self, *exc: object) -> None:
        s = self._session
        s.stop()
        lost = sum(b.dropped + b.overrun for b in list(s.tr.buffers.values()))
        out: list[TracedCall] = []
        for c in iter_calls(s.entries()):
            raised = None
            retval = c.retval if c.has_retval else None
            if isinstance(retval, str):
                if retval == "raised" or retval.startswith("raised "):
                    # (3.11's setprofile back end does not see which exception)
                    raised, retval = Shown(retval[len("raised "):]), None
                else:
                    retval = Shown(retval)
            out.append(TracedCall(c.func, _shown_args(c.args), retval, raised, c.duration,
                                  c.comm, c.pid, c.depth,
                                  c.stack[-2] if len(c.stack) > 1 else None, c.start))
        out.sort(key=lambda c: c.start)
        self.calls._fill(out, lost)


from ._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
