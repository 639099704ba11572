"""otel:context — the OpenTelemetry span a thread is in, written when it changes
(``record --otel-context``).

A program instrumented with the ``opentelemetry`` API makes a span current with
``opentelemetry.context.attach`` (``start_as_current_span``, ``use_span``, the
instrumentations) and leaves it with ``detach``.  A probe on the return of both reads
the span now current and, when it differs from the thread's last, writes

    otel:context: trace_id=32 HEX span_id=16 HEX      (or "none" outside any span)

into the thread's buffer, before the calls made in it.  The OTLP export makes those
calls' spans children of that span, in its trace (output/otlp.py): the function trace
joins the distributed trace.  Reading the current span runs the OpenTelemetry API in
the callback — what ``--otel-context`` asks for.  An asyncio Task switching contexts
without attach/detach is seen at its next attach or detach.
"""
from __future__ import annotations

import sys
import threading

from ..fprobe import Fprobe
from .late_probe import LateProbe, note

__all__ = ["EVENT", "OtelTracker"]

EVENT = "otel:context"


class OtelTracker:
    """The otel:context events of one instance (``tr``); ``changes`` counts them."""

    def __init__(self, tr) -> None:
        self.tr = tr
        self.probe = LateProbe(Fprobe(exit_handler=self._exit), "opentelemetry.context",
                               ("attach", "detach"))
        self.local = threading.local()
        self.changes = 0

    def start(self) -> None:
        self.probe.start()

    def stop(self) -> None:
        self.probe.stop()

    def _exit(self, fp, ip, ret_ip, fregs, data) -> None:
        tr = self.tr
        if not tr.tracing_on:
            return
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None:
            return
        sc = trace.get_current_span().get_span_context()
        key = (sc.trace_id, sc.span_id) if sc.is_valid else None
        loc = self.local
        if getattr(loc, "key", 0) == key:
            return
        text = ("none" if key is None
                else f"trace_id={key[0]:032x} span_id={key[1]:016x}")
        if note(tr, EVENT, text):
            loc.key = key
            self.changes += 1


from .._env import public_dir as _public_dir  # noqa: E402

__dir__ = _public_dir(globals())
